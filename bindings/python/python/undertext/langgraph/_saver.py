"""``UndertextSaver``: LangGraph's ``BaseCheckpointSaver`` over an Undertext store.

The saver maps LangGraph's calls onto the store: ``put`` and ``put_writes`` append one
record each to the thread's lane (``_lanes.py``), with the value blobs it names, in one
engine transaction; reads find checkpoints through the lane and load their values
(lazily: ``_lazy.py``; items of item lists through ``_caches.py``). ``FORMAT.md`` in this
folder specifies what it stores.

The ``a*`` methods run the engine calls in a worker thread (``asyncio.to_thread``); the
engine releases the GIL while it works, so the event loop never blocks on I/O or fsync.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import operator
import random
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import Any, Optional

from .._extras import needs_extra

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        DeltaChannelHistory,
        get_checkpoint_id,
        get_checkpoint_metadata,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
except ImportError as e:  # pragma: no cover - exercised without LangGraph installed
    raise needs_extra("langgraph", "LangGraph's checkpoint package", "langgraph", "langgraph-checkpoint", e) from e

import undertext
from undertext._holder import PathLike, StoreHolder, temporary_store
from undertext._per_owner import shared

from . import _langchain_decode
from ._caches import _ItemCache
from ._lanes import EARLY_KEY, _Lane, _Registry
from ._lazy import LazyChannelValues, UnloadedChannelValue, _closed_message
from ._records import (
    _CONTAINERS,
    _CP_KEYS,
    _CP_LONG,
    _DEFAULT_TYPE,
    EMPTY_BLOB,
    HEAD_LEN,
    VERIFY,
    _at_snapshot,
    _b64,
    _blobs_of,
    _delta,
    _is_item_list,
    _jcopy,
    _json_exact,
    _link,
    _message,
    _unb64,
)

#: Digits of a version's counter in a new thread (``get_next_version``): 10^10 steps.
VERSION_DIGITS = 10


def _values_loaded(t: CheckpointTuple) -> CheckpointTuple:
    """``t`` with every channel value loaded (for the async methods, in their worker thread)."""
    values = t.checkpoint["channel_values"]
    if type(values) is LazyChannelValues:
        values.load_all()
    return t


def _same_prefix_py(a: list[Any], b: list[Any], stop: Optional[Iterable[int]] = None) -> int:
    """How many items ``a`` and ``b`` share at their front as the same objects, ending
    before the first whose ``id()`` is in ``stop``."""
    same = list(map(operator.is_, a, b))
    k = same.index(False) if False in same else len(same)
    if stop and k:
        kept = set(map(id, a[:k]))
        hit = {i for i in stop if i in kept}
        if hit:
            k = next(i for i in range(k) if id(a[i]) in hit)
    return k


try:  # one native pass (``bindings/python/src/lib.rs``)
    from undertext._native import _same_prefix
except ImportError:  # pragma: no cover - an extension built before it
    _same_prefix = _same_prefix_py


class UndertextSaver(StoreHolder, BaseCheckpointSaver[str]):
    """LangGraph checkpoint saver storing checkpoints in an Undertext store.

    Args:
        store: an open ``undertext.Store`` (the saver does not close it), or a path
            (``str`` or ``os.PathLike``): a store opened there with default options, owned
            and closed by the saver (``UndertextSaver.open`` takes store options).
        owner: the engine owner whose chats hold the threads (default ``"langgraph"``).
        serde: the serializer; LangGraph's default ``JsonPlusSerializer`` if None.
        lazy: returned checkpoints load each channel value when it is first accessed
            (``LazyChannelValues``; default True). False loads every value before
            ``get_tuple`` and ``list`` return it, into a plain dict: for callers that hand
            the checkpoint unread to a C serializer (``ormsgpack``, ``orjson``), such as
            another saver's ``put``.

    Example::

        with undertext.Store.open("state") as store:
            saver = UndertextSaver(store)
            graph = builder.compile(checkpointer=saver)

    Or ``with UndertextSaver.open("state", durability="immediate") as saver:`` (also
    ``async with``) to let the saver own the store, and ``UndertextSaver.temporary()`` for a
    store in a temporary directory removed on ``close()`` (tests).
    """

    def __init__(
        self,
        store: Any,
        *,
        owner: str = "langgraph",
        serde: Optional[SerializerProtocol] = None,
        lazy: bool = True,
        item_lists: bool = True,
    ) -> None:
        super().__init__(serde=serde)
        self.item_lists = item_lists
        self._items = _ItemCache()  # the items of item lists, decoded once (copies handed out)
        self._hold(store)
        self.owner = owner
        self.lazy = lazy
        self._registry = shared(_Registry, self.store, owner)

    @classmethod
    def open(
        cls,
        path: PathLike,
        *,
        owner: str = "langgraph",
        serde: Optional[SerializerProtocol] = None,
        lazy: bool = True,
        item_lists: bool = True,
        **store_options: Any,
    ) -> UndertextSaver:
        """Opens (or creates) a store at ``path`` with ``store_options`` (those of
        ``undertext.Store.open``: ``durability=``, ...), owned by the returned saver."""
        store = undertext.Store.open(path, **store_options)
        return cls(store, owner=owner, serde=serde, lazy=lazy, item_lists=item_lists)._adopt()

    @classmethod
    def temporary(
        cls,
        *,
        owner: str = "langgraph",
        serde: Optional[SerializerProtocol] = None,
        lazy: bool = True,
        item_lists: bool = True,
        **store_options: Any,
    ) -> UndertextSaver:
        """A saver over a new store in a temporary directory, removed by ``close()``
        (for tests: the in-memory saver's use, with the real engine)."""
        store, d = temporary_store(store_options)
        return cls(store, owner=owner, serde=serde, lazy=lazy, item_lists=item_lists)._adopt(d)

    # -- lanes ---------------------------------------------------------------------------

    def _lane(self, thread_id: str, ns: str, create: bool) -> Optional[_Lane]:
        return self._registry.lane(thread_id, ns, create)

    def _lanes_of(self, thread_id: Optional[str], ns: Optional[str]) -> list[_Lane]:
        return self._registry.lanes_of(thread_id, ns)

    @contextlib.contextmanager
    def _write_lane(self, thread_id: str, ns: str) -> Iterator[_Lane]:
        """The lane to write to, locked and synced; a lane deleted while we waited for its
        lock is replaced by a fresh one."""
        while True:
            lane = self._registry.lane(thread_id, ns, create=True)
            assert lane is not None
            with lane.lock:
                if lane.deleted:
                    continue
                lane.sync()
                yield lane
                return

    # -- blobs ---------------------------------------------------------------------------

    @staticmethod
    def _addresses(values: list[bytes]) -> list[str]:
        """Content addresses of ``values`` (what storing them returns), known before they
        are stored so that the record naming them goes into the same transaction."""
        return [undertext.blob_id(v) for v in values]

    def _load(self, typ: str, blob_id: str, head: bytes = b"") -> Any:
        rest = b"" if blob_id == EMPTY_BLOB else self.store.get_blob(self.owner, blob_id, verify=VERIFY)
        data = head + rest
        if typ == _DEFAULT_TYPE and data and self._plain_messages():
            try:  # a value stored whole (a list of messages, a pending write): as items are
                return _langchain_decode.decode(data)
            except _langchain_decode.NotPlain:
                pass
        return self.serde.loads_typed((typ, data))

    def _load_channel(self, entry: list[Any], what: tuple[str, str, str]) -> Any:
        """The value of a manifest entry ``[type, blob, head]``: ``head`` (base64) is the
        value's first ``HEAD_LEN`` bytes, the blob the rest. ``what`` names the value in the
        error raised when the store was closed before it was read."""
        typ, blob_id, head = entry
        try:
            return self._load(typ, blob_id, _unb64(head))
        except undertext.Closed as e:
            raise undertext.Closed(_closed_message(what, e)) from e

    def _load_items(self, lane: _Lane, seq: int, ch: str, memo: dict[str, Any]) -> list[Any]:
        """An item list's value: each item decoded once (``self._items``) and copied
        into the answer; ``memo`` shares the copies between the values of one call
        (the checkpoints of one ``list`` share the items of their common prefix)."""
        if self.store.closed:  # as a read of the store would (the caches hold some items)
            raise undertext.Closed("the store is closed")
        with lane.lock:
            ids = lane.item_ids(seq, ch)
        return self._items.items(
            ids, memo, lambda absent: self.store.get_blobs(self.owner, absent, verify=VERIFY), self._decode_items
        )

    def _plain_messages(self) -> bool:
        """Whether item blobs may be decoded by ``_langchain_decode`` (LangGraph's own serializer,
        unchanged: it builds those messages under every allow-list setting)."""
        serde = self.serde
        return (
            type(serde) is JsonPlusSerializer
            and getattr(serde, "_custom_unpack_ext_hook", True) is False
            and _langchain_decode.available()
        )

    def _decode_items(self, datas: list[bytes]) -> list[Any]:
        """The items of item blobs (each a serialized one-item list), decoded in one call
        when they are msgpack: one array of every item. LangChain messages in the form
        LangGraph's serializer wrote them are built by ``_langchain_decode`` (what the serializer
        would give, without its per-message import and validation); anything else by the
        serializer."""
        if self._plain_messages() and all(d[:1] == b"\x91" for d in datas):
            # One native call for every item; only the items it refuses go to the serializer.
            not_plain = _langchain_decode.NOT_PLAIN
            items = _langchain_decode.decode_each(datas)
            for i, got in enumerate(items):
                items[i] = self.serde.loads_typed((_DEFAULT_TYPE, datas[i]))[0] if got is not_plain else got[0]
            return items
        if len(datas) > 1 and all(d[:1] == b"\x91" for d in datas):
            joined = b"\xdd" + len(datas).to_bytes(4, "big") + b"".join([d[1:] for d in datas])
            try:
                out = self.serde.loads_typed((_DEFAULT_TYPE, joined))
            except Exception:
                out = None
            if type(out) is list and len(out) == len(datas):
                return out
        return [self.serde.loads_typed((_DEFAULT_TYPE, d))[0] for d in datas]

    def _load_entry(
        self, lane: _Lane, seq: int, rec: dict[str, Any], ch: str, memo: dict[str, Any]
    ) -> Any:
        """The value of channel ``ch`` in the checkpoint record ``rec`` at ``seq``."""
        e = rec["ch"][ch]
        what = (ch, rec["id"], lane.thread_id)
        if type(e) is not dict:
            return self._load_channel(e, what)
        try:
            return self._load_items(lane, seq, ch, memo)
        except undertext.Closed as err:
            raise undertext.Closed(_closed_message(what, err)) from err

    def _channel_values(
        self, lane: _Lane, seq: int, rec: dict[str, Any], memo: Optional[dict[str, Any]] = None
    ) -> dict[str, Any]:
        if memo is None:
            memo = {}
        if not self.lazy:
            return {ch: self._load_entry(lane, seq, rec, ch, memo) for ch in rec["ch"]}
        values = LazyChannelValues()
        put = dict.__setitem__
        for ch in rec["ch"]:
            what = (ch, rec["id"], lane.thread_id)
            put(
                values,
                ch,
                UnloadedChannelValue(lambda ch=ch: self._load_entry(lane, seq, rec, ch, memo), what),
            )
        return values

    def _checkpoint_of(self, rec: dict[str, Any]) -> dict[str, Any]:
        """A fresh checkpoint dict of a record, without its channel values."""
        c = rec.get("c")
        if c is None:
            out: dict[str, Any] = self.serde.loads_typed((rec["cp"][0], _unb64(rec["cp"][1])))
            return out
        out = {}
        for key, value in c.items():
            out[_CP_LONG.get(key, key)] = _jcopy(value) if type(value) in _CONTAINERS else value
            if key == "v":
                out["id"] = rec["id"]
        if "id" not in out:
            out["id"] = rec["id"]
        return out

    def _versions_of(self, rec: dict[str, Any]) -> dict[str, Any]:
        """The channel versions of a checkpoint record (read only: not a copy)."""
        c = rec.get("c")
        if c is not None:
            versions: dict[str, Any] = c.get("cv", {})
            return versions
        return self._checkpoint_of(rec).get("channel_versions", {})

    def _metadata_of(self, rec: dict[str, Any], copy: bool = True) -> dict[str, Any]:
        """A checkpoint record's metadata (``copy=False``: the cached dict itself, for reading)."""
        m = rec.get("m")
        if m is None:
            md: dict[str, Any] = self.serde.loads_typed((rec["md"][0], _unb64(rec["md"][1])))
            return md
        return _jcopy(m) if copy else m

    # -- reading -------------------------------------------------------------------------

    def _tuple(
        self, lane: _Lane, seq: int, rec: dict[str, Any], memo: Optional[dict[str, Any]] = None
    ) -> CheckpointTuple:
        checkpoint = self._checkpoint_of(rec)
        checkpoint["channel_values"] = self._channel_values(lane, seq, rec, memo)
        config: RunnableConfig = {
            "configurable": {"thread_id": lane.thread_id, "checkpoint_ns": lane.ns, "checkpoint_id": rec["id"]}
        }
        parent = None
        if rec["p"]:
            parent = {"configurable": {"thread_id": lane.thread_id, "checkpoint_ns": lane.ns, "checkpoint_id": rec["p"]}}
        return CheckpointTuple(
            config=config,
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=self._metadata_of(rec),  # type: ignore[arg-type]
            parent_config=parent,  # type: ignore[arg-type]
            pending_writes=self._pending_writes(lane, seq, rec),
        )

    def _pending_writes(self, lane: _Lane, seq: int, checkpoint: dict[str, Any]) -> list[tuple[str, str, Any]]:
        return [(task_id, ch, self._load(typ, blob)) for task_id, ch, typ, blob in self._chosen_writes(lane, seq, checkpoint)]

    def _chosen_writes(self, lane: _Lane, seq: int, checkpoint: dict[str, Any]) -> list[tuple[str, str, str, str]]:
        """The pending writes of a checkpoint, not loaded: ``(task_id, channel, type, blob)``
        in LangGraph's order (task path, task id, index)."""
        # (task_id, idx) -> (seq, task_path, channel, type, blob): a regular write keeps its
        # first version, a special channel (error, interrupt, ...) its last.
        chosen: dict[tuple[str, int], tuple[int, str, str, str, str]] = {}
        for wseq, rec in lane.live_writes(seq, checkpoint):
            for idx, channel, typ, blob in rec["w"]:
                key = (rec["t"], idx)
                old = chosen.get(key)
                if old is None or (idx < 0 and wseq > old[0]) or (idx >= 0 and wseq < old[0]):
                    chosen[key] = (wseq, rec["tp"], channel, typ, blob)
        ordered = sorted(chosen.items(), key=lambda kv: (kv[1][1], kv[0][0], kv[0][1]))
        return [(task_id, ch, typ, blob) for (task_id, _idx), (_s, _tp, ch, typ, blob) in ordered]

    def get_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        """The checkpoint named by ``config`` (its latest when it names no checkpoint id)."""
        conf = config["configurable"]
        lane = self._lane(conf["thread_id"], conf.get("checkpoint_ns", ""), create=False)
        if lane is None:
            return None
        with lane.lock:
            lane.sync()
            found = lane.find(get_checkpoint_id(config))
            if found is None:
                return None
            return self._tuple(lane, *found)

    def list(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (descending id), filtered by metadata equality."""
        conf = (config or {}).get("configurable", {})
        thread_id = conf.get("thread_id")
        ns = conf.get("checkpoint_ns")
        want_id = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        lanes = self._lanes_of(thread_id, ns)
        if len(lanes) == 1:
            yield from self._list_lane(lanes[0], filter, before_id, want_id, limit)
            return
        # Several lanes: merge by id, newest first.
        iters = [self._list_lane(ln, filter, before_id, want_id, None) for ln in lanes]
        heads = [next(it, None) for it in iters]
        n = 0
        while limit is None or n < limit:
            live = [(h.checkpoint["id"], i) for i, h in enumerate(heads) if h is not None]
            if not live:
                return
            _cid, i = max(live)
            head = heads[i]
            assert head is not None
            yield head
            n += 1
            heads[i] = next(iters[i], None)

    def _list_lane(
        self,
        lane: _Lane,
        filt: Optional[dict[str, Any]],
        before_id: Optional[str],
        want_id: Optional[str],
        limit: Optional[int],
    ) -> Iterator[CheckpointTuple]:
        if limit is not None and limit <= 0:
            return
        # The lane's lock is held per batch, never across a yield: the consumer may resume
        # this generator on another thread (``alist``) or write in between.
        n = 0
        memo: dict[str, Any] = {}  # the items of item lists, shared by the listed checkpoints
        with lane.lock:
            lane.sync()
            candidates = lane.checkpoints_newest_first()
        while True:
            batch = []
            with lane.lock:
                for seq, rec in candidates:
                    if before_id is not None and rec["id"] >= before_id:
                        continue
                    if want_id is not None and rec["id"] != want_id:
                        continue
                    if filt:
                        md = self._metadata_of(rec, copy=False)
                        if any(md.get(k) != v for k, v in filt.items()):
                            continue
                    batch.append(self._tuple(lane, seq, rec, memo))
                    n += 1
                    if len(batch) == 16 or (limit is not None and n >= limit):
                        break
            yield from batch
            if len(batch) < 16 or (limit is not None and n >= limit):
                return

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """``DeltaChannel``'s history: for each channel, the writes to it along the parent
        chain of the checkpoint (oldest first) back to the nearest ancestor holding a value
        for it (``seed``). The answer of the base class's walk, in one pass over the
        thread's records from the target down: each ancestor is found by id as the pass
        reaches it, and only the writes and seeds asked for are read from the store."""
        if not channels:
            return {}
        conf = config["configurable"]
        lane = self._lane(conf["thread_id"], conf.get("checkpoint_ns", ""), create=False)
        empty: dict[str, DeltaChannelHistory] = {ch: {"writes": []} for ch in channels}
        if lane is None:
            return empty
        with lane.lock:
            lane.sync()
            found = lane.find(get_checkpoint_id(config))
            if found is None:
                return empty
            # Checkpoint records by id, newest record of an id first (as ``find`` sees them),
            # filled as one walk goes down.
            seen: dict[str, tuple[int, dict[str, Any]]] = {}
            walk = lane.walk()

            def record(cid: str) -> Optional[tuple[int, dict[str, Any]]]:
                while cid not in seen:
                    nxt = next(walk, None)
                    if nxt is None:
                        return None
                    if nxt[1]["k"] == "c":
                        seen.setdefault(nxt[1]["id"], nxt)
                return seen[cid]

            remaining = set(channels)
            collected: dict[str, list[Any]] = {ch: [] for ch in channels}
            seeds: dict[str, Any] = {}
            cursor = found[1]["p"]
            visited = {found[1]["id"]}
            while cursor is not None and remaining and cursor not in visited:  # (a loop ends the walk)
                visited.add(cursor)
                got = record(cursor)
                if got is None:
                    break
                seq, rec = got
                for task_id, ch, typ, blob in reversed(self._chosen_writes(lane, seq, rec)):
                    if ch in remaining:
                        collected[ch].append((task_id, ch, self._load(typ, blob)))
                for ch in list(remaining):
                    if ch in rec["ch"]:
                        seeds[ch] = self._load_entry(lane, seq, rec, ch, {})
                        remaining.discard(ch)
                cursor = rec["p"]
        out: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            hist: DeltaChannelHistory = {"writes": list(reversed(collected[ch]))}
            if ch in seeds:
                hist["seed"] = seeds[ch]
            out[ch] = hist
        return out

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async ``get_delta_channel_history`` (runs in a worker thread)."""
        return await asyncio.to_thread(lambda: self.get_delta_channel_history(config=config, channels=channels))

    # -- writing -------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Stores a checkpoint: its changed channel values as blobs and one record naming
        them, in one engine transaction."""
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        ns = conf.get("checkpoint_ns", "")
        parent_id = conf.get("checkpoint_id")
        values = checkpoint["channel_values"]
        versions = checkpoint["channel_versions"]
        with self._write_lane(thread_id, ns) as lane:
            parent_manifest: dict[str, Any] = {}
            parent_versions: dict[str, Any] = {}
            parent_seq: Optional[int] = None
            parent_rec: Optional[dict[str, Any]] = None
            if parent_id is not None:
                found = lane.find(parent_id)
                if found is not None:
                    parent_seq, parent_rec = found
                    parent_manifest = found[1]["ch"]
                    parent_versions = self._versions_of(found[1])
            written = lane.written.get(parent_id) if parent_id is not None else None
            manifest: dict[str, Any] = {}
            to_store: list[tuple[str, str, bytes]] = []
            item_blobs: list[bytes] = []
            item_ids: list[str] = []
            fresh_items: list[tuple[str, bytes]] = []  # (id, bytes) of the new items
            # (channel, items or None, item ids): what to remember of the new record's lists.
            lists: list[tuple[str, Optional[list[Any]], Optional[tuple[str, ...]]]] = []
            stored: dict[str, Any] = {}  # changed channels, in order: their item-list entry or None
            for ch in sorted(set(versions) | set(values)):
                old = parent_manifest.get(ch)
                if ch not in new_versions and old is not None and parent_versions.get(ch) == versions.get(ch):
                    # Unchanged: the parent's blob, not even re-serialized (an item list:
                    # the parent's list, kept whole).
                    if type(old) is dict:
                        assert parent_seq is not None
                        live = lane.live.get((parent_seq, ch))
                        kept = lane._known((parent_seq, ch))
                        if _at_snapshot(old) and kept is None:
                            kept = lane.item_ids(parent_seq, ch)
                        entry, snap = _link(
                            parent_seq, old, kept or (), [], False, lambda: lane.manifest_below(parent_seq, ch)
                        )
                        manifest[ch] = entry
                        if snap is not None:
                            item_blobs.append(snap)
                            item_ids.append(entry["m"])
                        lists.append((ch, live[0] if live else None, kept))
                    else:
                        manifest[ch] = old
                elif ch in values:
                    got = self._item_entry(lane, parent_seq, old, ch, values[ch], written)
                    if got is not None:
                        entry, datas, new_ids, full = got
                        n_items = len(datas) - (1 if "m" in entry else 0)  # a manifest blob last
                        fresh_items.extend(itertools.islice(zip(new_ids, datas), n_items))
                        stored[ch] = entry
                        item_blobs.extend(datas)
                        item_ids.extend(new_ids)
                        lists.append((ch, list(values[ch]), full))
                        continue
                    typ, data = self.serde.dumps_typed(values[ch])
                    to_store.append((ch, typ, data))
                    stored[ch] = None
            blobs = [d[HEAD_LEN:] for _c, _t, d in to_store]
            ids = self._addresses(blobs)
            whole = {ch: [typ, bid, _b64(d[:HEAD_LEN])] for (ch, typ, d), bid in zip(to_store, ids)}
            for ch, e in stored.items():
                manifest[ch] = whole[ch] if e is None else e
            blobs.extend(item_blobs)
            ids.extend(item_ids)
            cid = checkpoint["id"]
            prev_mx = lane.current_mx()
            early_ids = lane.early_ids()
            early: list[list[Any]] = []
            if prev_mx is not None and cid <= prev_mx:
                # An id not above the running maximum may have been put before: its
                # record's writes, or (not found: find read the whole lane) early ones.
                found = lane.find(cid)
                if found is not None:
                    early = [[s, w] for s, w in lane.live_writes(*found)]
                else:
                    early = lane.orphan_writes(cid)
            elif cid in early_ids:
                # Writes stored before this first record of the id: read from the first.
                lane.decode_down_to(early_ids[cid])
                early = lane.orphan_writes(cid)
            # Otherwise (above the running maximum, no early writes) there is nothing to read.
            rec: dict[str, Any] = {
                "k": "c",
                "id": cid,
                "mx": cid if prev_mx is None else max(cid, prev_mx),
                "p": parent_id,
            }
            rest = {k: v for k, v in checkpoint.items() if k not in ("id", "channel_values")}
            if _json_exact(rest) and not any(k in _CP_LONG and k not in _CP_KEYS for k in rest):
                rec["c"] = {_CP_KEYS.get(k, k): v for k, v in rest.items()}
            else:
                typed = self.serde.dumps_typed({k: v for k, v in checkpoint.items() if k != "channel_values"})
                rec["cp"] = [typed[0], _b64(typed[1])]
            md = get_checkpoint_metadata(config, metadata)
            if _json_exact(md):
                rec["m"] = md
            else:
                typed = self.serde.dumps_typed(md)
                rec["md"] = [typed[0], _b64(typed[1])]
            rec["ch"] = manifest
            if parent_seq is not None and parent_rec is not None:
                cd = _delta(parent_seq, parent_rec, rec)
                if cd is not None:
                    rec["_cd"] = cd
                    rec["_d"] = cd["d"]
            if early:
                # A write record of this chat is named by its seq; others (copied by
                # copy_thread from another chat before references) are kept whole.
                rec["pw"] = [s if lane.record_at(s) is w else [s, w] for s, w in early]
            after = {k: v for k, v in early_ids.items() if k != cid}
            # A delta manifest's record attaches the manifests below it as well.
            chains = [b for e in manifest.values() if type(e) is dict for b in e.get("mb", ())]
            seq = self._append(lane, rec, blobs, list(dict.fromkeys(ids + chains)), early=after)
            self._items.stored(zip(item_ids, item_blobs), fresh_items, self._decode_items)
            for ch, items, full in lists:
                if full is not None:
                    lane.remember(seq, ch, manifest[ch], full)
                    if items is not None:
                        lane.live[(seq, ch)] = (items, full)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}

    def _item_entry(
        self,
        lane: _Lane,
        parent_seq: Optional[int],
        old: Any,
        ch: str,
        value: Any,
        written: Optional[dict[int, Any]],
    ) -> Optional[tuple[dict[str, Any], list[bytes], list[str], tuple[str, ...]]]:
        """A list value stored item by item: ``(entry, new item blobs, their ids, every
        item's id)``, or None to store the value whole.

        The entry names the parent's list (``b``, its record's seq), how many of its items
        the value keeps (``k``, absent when all) and the blobs of the items after them
        (``i``; each item is serialized as a one-item list, the bytes of a node's
        one-message write, so the two share a blob). Items that are the same objects, at
        the same positions, as in the list this process put for the parent are taken as
        unchanged without being serialized, unless the step wrote them (``written``: an
        object written back changed in place). When the parent's items are not known
        here (another process put it, or it was read from the store), every item is
        serialized and the prefix found by comparing blob ids."""
        if not self.item_lists or type(value) is not list or not value:
            return None
        if type(old) is not dict and not _is_item_list(value):
            return None
        prev_items: Optional[list[Any]] = None
        prev_ids: Optional[tuple[str, ...]] = None
        if type(old) is dict and parent_seq is not None:
            live = lane.live.get((parent_seq, ch))
            if live is not None:
                prev_items, prev_ids = live
            else:
                prev_ids = lane.item_ids(parent_seq, ch)
        # The kept front: the parent's objects, up to one the step wrote (it may have changed
        # in place).
        k = _same_prefix(prev_items, value, written or None) if prev_items is not None else 0
        datas: list[bytes] = []
        for x in value[k:]:
            typ, data = self.serde.dumps_typed([x])
            if typ != _DEFAULT_TYPE:
                return None
            datas.append(data)
        new_ids = self._addresses(datas)
        if prev_ids is not None and k < len(prev_ids) and new_ids:
            j, m = 0, min(len(prev_ids) - k, len(new_ids))
            while j < m and new_ids[j] == prev_ids[k + j]:
                j += 1
            k += j
            datas, new_ids = datas[j:], new_ids[j:]
        if prev_ids is None or k == 0:
            entry: dict[str, Any] = {"i": new_ids}
            full = tuple(new_ids)
        else:
            full = prev_ids[:k] + tuple(new_ids)
            base_seq = parent_seq
            entry, snap = _link(
                parent_seq, old, prev_ids[:k], new_ids, k != len(prev_ids), lambda: lane.manifest_below(base_seq, ch)
            )
            if snap is not None:
                datas = datas + [snap]
                new_ids = new_ids + [entry["m"]]
        return entry, datas, new_ids, full

    def _append(
        self,
        lane: _Lane,
        rec: dict[str, Any],
        blobs: Sequence[bytes] = (),
        attach: Sequence[str] = (),
        early: Optional[dict[str, int]] = None,
    ) -> int:
        """Appends ``rec`` and stores ``blobs`` (the new values it names, ``attach`` their
        ids) in one engine transaction. The engine writes only bytes it does not hold yet
        (for large values, only new chunks). ``early``: the lane's early-writes set after
        this record (unchanged when None), stored in the record."""
        if early is None:
            early = lane.early_ids()
        msg = _message(rec, attach, early, lane.hi, lane.record_at)
        blobs = [b for b in blobs if b]  # the empty blob is not stored (EMPTY_BLOB)
        if blobs:
            _ids, seqs = lane.chat.append_with_blobs(list(blobs), [msg])
            seq = seqs[0]
        else:
            seq = lane.chat.append(msg)
        lane.appended(seq, rec)
        lane.early = dict(early)
        self._track(lane)
        return seq

    @staticmethod
    def _track(lane: _Lane) -> None:
        """Marks a lane written before the early-writes set was kept, once its newest
        record carries the set (an interruption in between leaves it unmarked: the set is
        then computed from the whole chat again, which is always right)."""
        if not lane.tracked:
            lane.chat.set_meta(extra={**lane.chat.meta.extra, EARLY_KEY: "1"})
            lane.tracked = True

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Stores a task's pending writes for a checkpoint (values as blobs, one record).

        Like LangGraph's own savers: a regular write already stored for (task_id, idx) is
        kept; a write to a special channel (error, interrupt, ...) replaces the old one.
        """
        conf = config["configurable"]
        cid = conf["checkpoint_id"]
        with self._write_lane(conf["thread_id"], conf.get("checkpoint_ns", "")) as lane:
            # The objects written for this checkpoint: an item the next checkpoint's list
            # holds at a kept position is serialized again (it may have changed in place).
            objs = lane.written.get(cid)
            if objs is None:
                objs = lane.written[cid] = {}
            for _channel, value in writes:
                objs[id(value)] = value
                if type(value) in (list, tuple):
                    for x in value:
                        objs[id(x)] = x
            mx = lane.current_mx()
            early_ids = lane.early_ids()
            # An id above the running maximum has no record: no walk to look for one.
            found = lane.find(cid) if mx is not None and cid <= mx else None
            existing: set[tuple[str, int]] = set()
            if found is not None:
                for _s, w in lane.live_writes(*found):
                    existing.update((w["t"], e[0]) for e in w["w"])
            else:
                # Writes for a checkpoint not stored yet (LangGraph stores a checkpoint's
                # writes first when it saves asynchronously): kept, and copied into the
                # checkpoint's record when it comes.
                if cid in early_ids:
                    lane.decode_down_to(early_ids[cid])
                for _s, w in lane.orphan_writes(cid):
                    existing.update((w["t"], e[0]) for e in w["w"])
            entries = []
            for idx, (channel, value) in enumerate(writes):
                widx = WRITES_IDX_MAP.get(channel, idx)
                if widx >= 0 and (task_id, widx) in existing:
                    continue
                entries.append((widx, channel, self.serde.dumps_typed(value)))
            if not entries:
                return
            blobs = [data for _i, _c, (_t, data) in entries]
            ids = self._addresses(blobs)
            rec = {
                "k": "w",
                "c": cid,
                "t": task_id,
                "tp": task_path,
                "w": [[widx, ch, typ, bid] for (widx, ch, (typ, _d)), bid in zip(entries, ids)],
            }
            # Writes for a checkpoint without a record join the lane's early writes (with the
            # seq of the first: this record's, the chat's next, unless it had some already).
            early = None if found is not None else {cid: lane.hi, **early_ids}
            self._append(lane, rec, blobs, list(dict.fromkeys(ids)), early=early)

    def delete_thread(self, thread_id: str) -> None:
        """Drops every checkpoint and write of the thread: its chats are deleted (one engine
        record per namespace), and ``Store.gc`` later removes their records and every
        value blob only they used."""
        lanes = self._registry.drop(thread_id)
        for i, lane in enumerate(lanes):
            try:
                with lane.lock:
                    if not lane.deleted:
                        self.store.delete_chat(self.owner, lane.chat.id)
                        lane.deleted = True
            except BaseException:
                # The chats not deleted are still the thread's: forgetting them would answer
                # None for a thread the store still holds (e.g. `Forked` in a fork child).
                self._registry.restore(thread_id, lanes[i:])
                raise

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Drops the checkpoints whose metadata ``run_id`` is one of ``run_ids``, and their
        writes: one hide per chat that has any."""
        wanted = set(run_ids)
        if not wanted:
            return
        for lane in self._lanes_of(None, None):
            with lane.lock:
                lane.sync()
                kill: list[int] = []
                killed_ids: set[str] = set()
                for seq, rec in list(lane.walk()):
                    if rec["k"] != "c":
                        continue
                    md = self._metadata_of(rec, copy=False)
                    if md.get("run_id") in wanted:
                        kill.append(seq)
                        killed_ids.add(rec["id"])
                for cid in killed_ids:
                    kill.extend(lane.writes.get(cid, ()))
                if kill:
                    lane.hide(kill)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copies every live checkpoint and write of a thread to another thread, in order.

        Values are shared by content address: the copy costs the manifests only.
        """
        for src in self._lanes_of(source_thread_id, None):
            with src.lock:
                src.sync()
                live = [(s, r) for s, r in src.walk() if r["k"] in ("c", "w")]
                live.reverse()
                # An item list whose base is not copied (a dead record) is copied whole.
                copied = {s for s, _r in live}
                flat = {
                    (s, ch): src.item_ids(s, ch)
                    for s, r in live
                    if r["k"] == "c"
                    for ch, e in r["ch"].items()
                    if type(e) is dict and "b" in e and e["b"] not in copied
                }
                # So is a write record named by a checkpoint record and not copied.
                pw_whole = {
                    pw: src.record_at(pw)
                    for _s, r in live
                    if r["k"] == "c"
                    for pw in r.get("pw", ())
                    if type(pw) is int and pw not in copied
                }
            if not live:
                continue
            with self._write_lane(target_thread_id, src.ns) as dst:
                mx = dst.current_mx()
                # The target's early writes after the copy, exactly: ids written to and without
                # a checkpoint record, in the target and the copied records (at the seqs the
                # batch will take, from the chat's end).
                dst.decode_all()
                early = dst.exact_early([(dst.hi + i, r) for i, (_s, r) in enumerate(live)])
                recs = []
                new_seq = {s: dst.hi + i for i, (s, _r) in enumerate(live)}
                for s, r in live:
                    r = dict(r)
                    for key in ("o", "e", "_cd", "_d"):  # copies store checkpoints whole
                        r.pop(key, None)
                    if r["k"] == "c":
                        mx = r["id"] if mx is None else max(mx, r["id"])
                        r["mx"] = mx
                        chs = {}
                        for ch, e in r["ch"].items():
                            if type(e) is dict:
                                if (s, ch) in flat:
                                    e = {"i": list(flat[(s, ch)])}
                                elif "b" in e:
                                    e = {**e, "b": new_seq[e["b"]]}
                            chs[ch] = e
                        r["ch"] = chs
                        if "pw" in r:
                            r["pw"] = [
                                pw if type(pw) is not int else new_seq[pw] if pw in new_seq else [pw, pw_whole[pw]]
                                for pw in r["pw"]
                            ]
                    recs.append(r)
                # Each copied record attaches the blobs it is the first copy to use (the
                # source records that attached them may be below a prune floor).
                attached: set[str] = set()
                msgs = []
                base = dst.hi

                def record_at(s: int) -> dict[str, Any]:
                    return recs[s - base] if s >= base else dst.record_at(s)

                for i, r in enumerate(recs):
                    attach = [b for b in _blobs_of(r) if b not in attached]
                    attached.update(attach)
                    msgs.append(_message(r, attach, early, base + i, record_at))
                seqs = dst.chat.append_batch(msgs)
                for seq, r in zip(seqs, recs):
                    dst.appended(seq, r)
                dst.early = early
                self._track(dst)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's latest checkpoint and its writes (one hide
        per namespace); ``delete``: drop everything, as ``delete_thread``."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"prune strategy: expected 'keep_latest' or 'delete', found {strategy!r}")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            for lane in self._lanes_of(thread_id, None):
                with lane.lock:
                    lane.sync()
                    found = lane.find(None)
                    if found is None:
                        continue
                    seq, rec = found
                    # Older records are hidden (as below a floor); so are newer non-latest
                    # checkpoints (ids out of order) and writes of dead checkpoints.
                    others = []
                    for s, r in lane.walk():  # newest first: only the records after the latest
                        if s <= seq:
                            break
                        if r["k"] == "c" or (r["k"] == "w" and r["c"] != rec["id"]):
                            others.append(s)
                    # Every write of a checkpoint without a record dies here: before the
                    # latest (every record below it is hidden), or stored after it.
                    if seq > lane.floor or others:
                        lane.hide(others, below=seq if seq > lane.floor else 0)
                    lane.early = {}

    def get_next_version(self, current: Optional[str], channel: None = None) -> str:
        """``"<counter>.<random>"``: increasing, unique across forks (a random 24-bit
        suffix, in hex). The counter has ``VERSION_DIGITS`` digits in a new thread, and
        the width of ``current`` otherwise, so that versions keep comparing as strings in
        threads written before (32 digits, the width of LangGraph's own savers): a
        shorter version compares below every longer one, as a counter of 1 does."""
        if current is None:
            n, width = 0, VERSION_DIGITS
        elif isinstance(current, int):
            n, width = current, 32
        else:
            head = str(current).split(".")[0]
            n, width = int(head), len(head)
        return f"{n + 1:0{width}}.{random.getrandbits(24):06x}"

    # -- async: the same calls in a worker thread ------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        """Async ``get_tuple`` (runs in a worker thread, which also loads every channel value:
        the event loop never reads the store)."""

        def get() -> Optional[CheckpointTuple]:
            t = self.get_tuple(config)
            return None if t is None else _values_loaded(t)

        return await asyncio.to_thread(get)

    async def alist(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async ``list``: batches of results fetched in a worker thread, which also loads
        every channel value (the event loop never reads the store)."""
        it = self.list(config, filter=filter, before=before, limit=limit)

        def take() -> list[CheckpointTuple]:
            out = []
            for t in it:
                out.append(_values_loaded(t))
                if len(out) == 16:
                    break
            return out

        while True:
            batch = await asyncio.to_thread(take)
            for t in batch:
                yield t
            if len(batch) < 16:
                return

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async ``put`` (runs in a worker thread)."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async ``put_writes`` (runs in a worker thread)."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async ``delete_thread`` (runs in a worker thread)."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async ``delete_for_runs`` (runs in a worker thread)."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async ``copy_thread`` (runs in a worker thread)."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async ``prune`` (runs in a worker thread)."""
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
