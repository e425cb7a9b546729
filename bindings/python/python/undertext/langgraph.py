"""A LangGraph checkpoint saver over an Undertext store.

``UndertextSaver`` subclasses LangGraph's ``BaseCheckpointSaver``. Layout in the store:

* Every channel value and every pending write value is serialized with the saver's
  serializer (``self.serde.dumps_typed``) and stored as a content-addressed blob, so a
  value that did not change is stored once, across checkpoints and across threads. A
  channel value's first ``HEAD_LEN`` bytes (where a collection's length is) stay in the
  record, so the blobs of a growing list share their unchanged front chunks.
* Each (thread, namespace) pair is one engine chat of the saver's owner (title: the
  thread id, ``extra``: ``{"undertext.langgraph": ns}``). Every ``put`` and
  ``put_writes`` appends one record to it: a small JSON manifest naming the blobs,
  stored together with the new value blobs in one engine transaction
  (``Chat.append_with_blobs``: one log sync per call).
  Deletions append a tombstone (``delete_for_runs``) or a floor (``prune``) record, so
  every change is one engine transaction; ``delete_thread`` deletes the thread's chats,
  and ``Store.gc`` (store closed) then drops their records and the blobs only they used.

Reads walk a chat from its newest record backwards and stop as soon as they have what
they need: ``get_tuple`` of the latest checkpoint and ``list(limit=100)`` read only the
newest records of a long thread. Each record carries the running maximum of the
checkpoint ids before it, so the walk knows when records are in id order (the normal
case) and falls back to reading the whole chat and sorting only when they are not.

The ``a*`` methods run the engine calls in a worker thread (``asyncio.to_thread``); the
engine releases the GIL while it works, so the event loop never blocks on I/O or fsync.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Optional

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

import undertext

__all__ = ["UndertextSaver"]

#: ``extra`` key marking a chat as a saver lane; its value is the checkpoint namespace.
LANE_KEY = "undertext.langgraph"

_BATCH = 64  # records decoded per engine read while walking backwards


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


#: Bytes of a serialized channel value kept in the record instead of its blob. A
#: serialized collection starts with its length (msgpack's array and map headers), which
#: changes at every step of a growing list; kept out of the blob, the blob of the next
#: version starts with the same bytes, so the engine's content-defined chunks of the
#: unchanged front are shared and only the new end is written.
HEAD_LEN = 8

#: MIME type of the attachment parts naming the value blobs a record uses.
VALUE_MIME = "application/x-undertext-langgraph-value"


def _blobs_of(rec: dict[str, Any]) -> list[str]:
    """The value blobs a record refers to, each once."""
    ids: list[str] = []
    if rec["k"] == "c":
        ids.extend(e[2] for e in rec["ch"].values())
        for _s, w in rec.get("pw", ()):
            ids.extend(e[3] for e in w["w"])
    elif rec["k"] == "w":
        ids.extend(e[3] for e in rec["w"])
    return list(dict.fromkeys(ids))


def _message(rec: dict[str, Any]) -> dict[str, Any]:
    """A record as an engine message: its JSON as the text part, and one attachment part
    per value blob it uses, so the engine knows the references (``Store.gc`` keeps a blob
    while a live chat attaches it, and drops it with the last deleted chat that did)."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": json.dumps(rec, separators=(",", ":"))}]
    parts.extend({"type": "attachment", "mime": VALUE_MIME, "blob": b} for b in _blobs_of(rec))
    return {"role": "system", "parts": parts}


class _Lane:
    """The records of one (thread, namespace) chat, decoded lazily from the newest back.

    ``recs`` holds decoded records for seqs in ``[lo, hi)``; ``hi`` is the chat length
    when last synced. Everything older than ``lo`` is still unread.
    """

    def __init__(self, chat: Any, thread_id: str, ns: str) -> None:
        self.chat = chat
        self.thread_id = thread_id
        self.ns = ns
        self.lock = threading.RLock()
        self.deleted = False  # the chat was deleted (delete_thread): the lane reads as empty
        self.reset()

    def reset(self) -> None:
        self.revision = self.chat.revision
        self.hi = len(self.chat)
        self.lo = self.hi
        self.recs: dict[int, dict[str, Any]] = {}
        self.floor = 0  # records below are dead (prune)
        self.dead: set[int] = set()  # seqs killed by tombstones
        self.writes: dict[str, list[int]] = {}  # checkpoint id -> seqs of its write records
        self.latest_mx: Optional[str] = None  # running max id of the newest checkpoint record
        self.mx_known = self.hi == 0

    # -- keeping the cache in step with the chat -------------------------------------------

    def sync(self) -> None:
        """Notices truncations (reset) and records appended by other handles."""
        if self.deleted:
            self.hi = self.lo = 0
            self.recs = {}
            self.writes = {}
            return
        if self.chat.revision != self.revision:
            self.reset()
            return
        n = len(self.chat)
        if n > self.hi:
            if self.lo == self.hi:
                self.lo = self.hi = n
                self.mx_known = False
            else:
                for m in self.chat.messages(self.hi, n):
                    rec = json.loads(m.text)
                    self._learn(m.seq, rec)
                    if rec["k"] == "c":
                        self.latest_mx = rec["mx"]
                self.hi = n

    def current_mx(self) -> Optional[str]:
        """The running maximum id stored in the newest live checkpoint record."""
        if not self.mx_known:
            self.latest_mx = None
            for _seq, rec in self.walk():
                if rec["k"] == "c":
                    self.latest_mx = rec["mx"]
                    break
            self.mx_known = True
        return self.latest_mx

    def _learn(self, seq: int, rec: dict[str, Any]) -> None:
        self.recs[seq] = rec
        k = rec["k"]
        if k == "w":
            self.writes.setdefault(rec["c"], []).append(seq)
        elif k == "d":
            self.dead.update(rec["s"])
        elif k == "x":
            self.floor = max(self.floor, rec["f"])

    def appended(self, seq: int, rec: dict[str, Any]) -> None:
        """Records our own append at ``seq`` (the chat's last record)."""
        if self.lo == self.hi == seq:
            self.lo = seq
        self.hi = seq + 1
        self._learn(seq, rec)
        if rec["k"] == "c":
            self.latest_mx = rec["mx"]
            self.mx_known = True

    def _extend_down(self) -> bool:
        """Decodes the next batch of older records; False when nothing is left."""
        bottom = max(self.floor, 0)
        if self.lo <= bottom:
            return False
        start = max(bottom, self.lo - _BATCH)
        msgs = self.chat.messages(start, self.lo)
        for m in reversed(msgs):
            self._learn(m.seq, json.loads(m.text))
        self.lo = start
        return True

    def walk(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Live records, newest first, decoding older batches only when reached."""
        seq = self.hi - 1
        while True:
            if seq < self.floor:
                return
            if seq < self.lo and not self._extend_down():
                return
            if seq < self.floor:
                return
            rec = self.recs.get(seq)
            if rec is not None and seq not in self.dead:
                yield seq, rec
            seq -= 1

    # -- checkpoints ---------------------------------------------------------------------

    def checkpoints_newest_first(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Live checkpoint records in descending id order, one per id."""
        seen: set[str] = set()
        for seq, rec in self.walk():
            if rec["k"] != "c":
                continue
            if rec["id"] != rec["mx"]:
                break  # out of id order from here: sort the whole chat instead
            if rec["id"] in seen:
                continue
            seen.add(rec["id"])
            yield seq, rec
        else:
            return
        rest = [(s, r) for s, r in self.walk() if r["k"] == "c"]
        best: dict[str, tuple[int, dict[str, Any]]] = {}
        for s, r in rest:
            if r["id"] not in best:  # newest record of an id wins
                best[r["id"]] = (s, r)
        for cid in sorted(best, reverse=True):
            if cid not in seen:
                yield best[cid]

    def find(self, checkpoint_id: Optional[str]) -> Optional[tuple[int, dict[str, Any]]]:
        """The live record of a checkpoint (the latest by id when ``checkpoint_id`` is None)."""
        if checkpoint_id is None:
            return next(self.checkpoints_newest_first(), None)
        for seq, rec in self.walk():
            if rec["k"] == "c" and rec["id"] == checkpoint_id:
                return seq, rec
        return None

    def live_writes(self, checkpoint_seq: int, checkpoint: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
        """Write records of a checkpoint: those stored before it, copied into its record
        (``pw``), and those after it (all decoded once the checkpoint was found)."""
        early = [(int(s), r) for s, r in checkpoint.get("pw", ())]
        return early + [
            (s, self.recs[s])
            for s in self.writes.get(checkpoint["id"], ())
            if s > checkpoint_seq and s >= self.floor and s not in self.dead and s in self.recs
        ]

    def orphan_writes(self, checkpoint_id: str) -> list[list[Any]]:
        """Live decoded write records for a checkpoint that has no record yet, as
        ``[seq, record]`` pairs. LangGraph may store the writes of a checkpoint (an
        interrupt, for one) before the checkpoint itself."""
        return [
            [s, self.recs[s]]
            for s in self.writes.get(checkpoint_id, ())
            if s >= self.floor and s not in self.dead and s in self.recs
        ]


class _Registry:
    """The lanes of one owner in one open store, shared by every saver on that store in
    the process (a store has one process; this makes it one map), so a thread created
    through one saver is seen by the others."""

    _all: dict[tuple[int, str], _Registry] = {}
    _guard = threading.Lock()

    def __init__(self, store: Any, owner: str) -> None:
        self.store = store  # held: the id in the key cannot be reused while this lives
        self.owner = owner
        self.lock = threading.RLock()
        self.lanes: dict[tuple[str, str], _Lane] = {}
        self.threads: dict[str, set[str]] = {}
        for info in store.chats(owner):
            ns = info.extra.get(LANE_KEY)
            if ns is None:
                continue
            self.threads.setdefault(info.title, set()).add(ns)
            self.lanes[(info.title, ns)] = _Lane(store.chat(owner, info.id), info.title, ns)

    @classmethod
    def of(cls, store: Any, owner: str) -> _Registry:
        with cls._guard:
            for key in [k for k, r in cls._all.items() if r.store.closed]:
                del cls._all[key]
            reg = cls._all.get((id(store), owner))
            if reg is None:
                reg = cls._all[(id(store), owner)] = _Registry(store, owner)
            return reg

    def lane(self, thread_id: str, ns: str, create: bool) -> Optional[_Lane]:
        with self.lock:
            lane = self.lanes.get((thread_id, ns))
            if lane is None and create:
                chat = self.store.create_chat(self.owner, title=thread_id, extra={LANE_KEY: ns})
                lane = _Lane(chat, thread_id, ns)
                self.lanes[(thread_id, ns)] = lane
                self.threads.setdefault(thread_id, set()).add(ns)
            return lane

    def drop(self, thread_id: str) -> list[_Lane]:
        """Forgets a thread's lanes (a later write creates new chats) and returns them."""
        with self.lock:
            lanes = [self.lanes.pop((thread_id, n)) for n in sorted(self.threads.pop(thread_id, ()))]
        return lanes

    def lanes_of(self, thread_id: Optional[str], ns: Optional[str]) -> list[_Lane]:
        with self.lock:
            if thread_id is None:
                lanes = list(self.lanes.values())
            else:
                lanes = [self.lanes[(thread_id, n)] for n in sorted(self.threads.get(thread_id, ()))]
        return [ln for ln in lanes if ns is None or ln.ns == ns]


class UndertextSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoint saver storing checkpoints in an Undertext store.

    Args:
        store: an open ``undertext.Store`` (the saver does not close it).
        owner: the engine owner whose chats hold the threads (default ``"langgraph"``).
        serde: the serializer; LangGraph's default ``JsonPlusSerializer`` if None.

    Example::

        with undertext.Store.open("state") as store:
            saver = UndertextSaver(store)
            graph = builder.compile(checkpointer=saver)

    Or ``with UndertextSaver.open("state") as saver:`` to let the saver own the store.
    """

    def __init__(
        self,
        store: Any,
        *,
        owner: str = "langgraph",
        serde: Optional[SerializerProtocol] = None,
    ) -> None:
        super().__init__(serde=serde)
        self.store = store
        self.owner = owner
        self._owns_store = False
        self._registry = _Registry.of(store, owner)

    @classmethod
    def open(cls, path: str, **kwargs: Any) -> UndertextSaver:
        """Opens (or creates) a store at ``path`` owned by the returned saver."""
        store = undertext.Store.open(path)
        saver = cls(store, **kwargs)
        saver._owns_store = True
        return saver

    def close(self) -> None:
        """Closes the store if this saver opened it."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> UndertextSaver:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

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
        return self.serde.loads_typed((typ, head + self.store.get_blob(blob_id)))

    def _channel_value(self, entry: list[Any]) -> Any:
        """The value of a manifest entry ``[version, type, blob, head]``: ``head`` (base64)
        is the value's first ``HEAD_LEN`` bytes, the blob the rest."""
        _version, typ, blob_id, head = entry
        return self._load(typ, blob_id, _unb64(head))

    # -- reading -------------------------------------------------------------------------

    def _tuple(self, lane: _Lane, seq: int, rec: dict[str, Any]) -> CheckpointTuple:
        checkpoint: dict[str, Any] = self.serde.loads_typed((rec["cp"][0], _unb64(rec["cp"][1])))
        checkpoint["channel_values"] = {ch: self._channel_value(e) for ch, e in rec["ch"].items()}
        metadata = self.serde.loads_typed((rec["md"][0], _unb64(rec["md"][1])))
        config: RunnableConfig = {
            "configurable": {"thread_id": lane.thread_id, "checkpoint_ns": lane.ns, "checkpoint_id": rec["id"]}
        }
        parent = None
        if rec.get("p"):
            parent = {"configurable": {"thread_id": lane.thread_id, "checkpoint_ns": lane.ns, "checkpoint_id": rec["p"]}}
        return CheckpointTuple(
            config=config,
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=metadata,
            parent_config=parent,  # type: ignore[arg-type]
            pending_writes=self._pending_writes(lane, seq, rec),
        )

    def _pending_writes(self, lane: _Lane, seq: int, checkpoint: dict[str, Any]) -> list[tuple[str, str, Any]]:
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
        return [(task_id, ch, self._load(typ, blob)) for (task_id, _idx), (_s, _tp, ch, typ, blob) in ordered]

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
                        md = self.serde.loads_typed((rec["md"][0], _unb64(rec["md"][1])))
                        if any(md.get(k) != v for k, v in filt.items()):
                            continue
                    batch.append(self._tuple(lane, seq, rec))
                    n += 1
                    if len(batch) == 16 or (limit is not None and n >= limit):
                        break
            yield from batch
            if len(batch) < 16 or (limit is not None and n >= limit):
                return

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
            parent_manifest: dict[str, list[Any]] = {}
            if parent_id is not None:
                found = lane.find(parent_id)
                if found is not None:
                    parent_manifest = found[1]["ch"]
            manifest: dict[str, list[Any]] = {}
            to_store: list[tuple[str, str, str, bytes]] = []
            for ch in sorted(set(versions) | set(values)):
                version = str(versions.get(ch, ""))
                old = parent_manifest.get(ch)
                if ch not in new_versions and old is not None and old[0] == version:
                    manifest[ch] = old  # unchanged: the parent's blob, not even re-serialized
                elif ch in values:
                    typ, data = self.serde.dumps_typed(values[ch])
                    to_store.append((ch, version, typ, data))
            blobs = [d[HEAD_LEN:] for _c, _v, _t, d in to_store]
            ids = self._addresses(blobs)
            for (ch, version, typ, d), bid in zip(to_store, ids):
                manifest[ch] = [version, typ, bid, _b64(d[:HEAD_LEN])]
            rest = {k: v for k, v in checkpoint.items() if k != "channel_values"}
            cp_typed = self.serde.dumps_typed(rest)
            md_typed = self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))
            cid = checkpoint["id"]
            early = lane.orphan_writes(cid)
            prev_mx = lane.current_mx()
            mx = cid if prev_mx is None else max(cid, prev_mx)
            rec = {
                "k": "c",
                "id": cid,
                "mx": mx,
                "p": parent_id,
                "cp": [cp_typed[0], _b64(cp_typed[1])],
                "md": [md_typed[0], _b64(md_typed[1])],
                "ch": manifest,
            }
            if early:
                rec["pw"] = early
            self._append(lane, rec, blobs)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}

    def _append(self, lane: _Lane, rec: dict[str, Any], blobs: Sequence[bytes] = ()) -> int:
        """Appends ``rec`` and stores ``blobs`` (the new values it names) in one engine
        transaction. The engine writes only bytes it does not hold yet (for large values,
        only new chunks)."""
        if blobs:
            _ids, seqs = lane.chat.append_with_blobs(list(blobs), [_message(rec)])
            seq = seqs[0]
        else:
            seq = lane.chat.append(_message(rec))
        lane.appended(seq, rec)
        return seq

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
            found = lane.find(cid)
            existing: set[tuple[str, int]] = set()
            if found is not None:
                for _s, w in lane.live_writes(*found):
                    existing.update((w["t"], e[0]) for e in w["w"])
            else:
                # Writes for a checkpoint not stored yet (LangGraph may put a checkpoint's
                # writes first): kept, and copied into the checkpoint's record when it comes.
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
            self._append(lane, rec, blobs)

    def delete_thread(self, thread_id: str) -> None:
        """Drops every checkpoint and write of the thread: its chats are deleted (one engine
        record per namespace), and ``Store.gc`` later removes their records and every
        value blob only they used."""
        for lane in self._registry.drop(thread_id):
            with lane.lock:
                if not lane.deleted:
                    self.store.delete_chat(self.owner, lane.chat.id)
                    lane.deleted = True

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Drops the checkpoints whose metadata ``run_id`` is one of ``run_ids``, and their
        writes: one tombstone record per chat that has any."""
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
                    md = self.serde.loads_typed((rec["md"][0], _unb64(rec["md"][1])))
                    if md.get("run_id") in wanted:
                        kill.append(seq)
                        killed_ids.add(rec["id"])
                for cid in killed_ids:
                    kill.extend(lane.writes.get(cid, ()))
                if kill:
                    self._append(lane, {"k": "d", "s": sorted(set(kill))})

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copies every live checkpoint and write of a thread to another thread, in order.

        Values are shared by content address: the copy costs the manifests only.
        """
        for src in self._lanes_of(source_thread_id, None):
            with src.lock:
                src.sync()
                live = [(s, r) for s, r in src.walk() if r["k"] in ("c", "w")]
            if not live:
                continue
            live.reverse()
            with self._write_lane(target_thread_id, src.ns) as dst:
                mx = dst.current_mx()
                recs = []
                for _s, r in live:
                    r = dict(r)
                    if r["k"] == "c":
                        mx = r["id"] if mx is None else max(mx, r["id"])
                        r["mx"] = mx
                    recs.append(r)
                seqs = dst.chat.append_batch([_message(r) for r in recs])
                for seq, r in zip(seqs, recs):
                    dst.appended(seq, r)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's latest checkpoint and its writes (one
        floor record per namespace); ``delete``: drop everything, as ``delete_thread``."""
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
                    # Older checkpoints die below the floor; newer non-latest ones (ids
                    # out of order) and writes of dead checkpoints by tombstone.
                    others = []
                    for s, r in lane.walk():  # newest first: only the records after the latest
                        if s <= seq:
                            break
                        if r["k"] == "c" or (r["k"] == "w" and r["c"] != rec["id"]):
                            others.append(s)
                    if seq > lane.floor:
                        self._append(lane, {"k": "x", "f": seq})
                    if others:
                        self._append(lane, {"k": "d", "s": others})

    def get_next_version(self, current: Optional[str], channel: None = None) -> str:
        """``"<counter, 32 digits>.<random>"``: increasing, unique across forks."""
        if current is None:
            n = 0
        elif isinstance(current, int):
            n = current
        else:
            n = int(str(current).split(".")[0])
        return f"{n + 1:032}.{random.random():016}"

    # -- async: the same calls in a worker thread ------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        """Async ``get_tuple`` (runs in a worker thread)."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async ``list``: batches of results fetched in a worker thread."""
        it = self.list(config, filter=filter, before=before, limit=limit)

        def take() -> list[CheckpointTuple]:
            out = []
            for t in it:
                out.append(t)
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
