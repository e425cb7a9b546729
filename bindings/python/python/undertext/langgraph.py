"""A LangGraph checkpoint saver over an Undertext store.

``UndertextSaver`` subclasses LangGraph's ``BaseCheckpointSaver``. Layout in the store:

* Every channel value and every pending write value is serialized with the saver's
  serializer (``self.serde.dumps_typed``) and stored as a content-addressed blob, so a
  value that did not change is stored once, across checkpoints and across threads. A
  channel value's first ``HEAD_LEN`` bytes (where a collection's length is) stay in the
  record, so the blobs of a growing list share their unchanged front chunks.
* A list of non-scalar items (``add_messages``' messages, dicts) is an *item list*: each
  item is its own blob (serialized as a one-item list, so a node's one-message write and
  the item share a blob), and the record names the parent checkpoint's list, how many of
  its items are kept and the new items' blobs. A step serializes and stores only what it
  appended: items that are the same objects at the same positions as in the list this
  process put for the parent are not serialized again, unless the step wrote them back
  (an object changed in place and returned by a node); otherwise (the parent put by
  another process, or read from the store) every item is serialized and the kept prefix
  found by blob id. An item changed in place and *not* written is not seen, as with
  LangGraph's ``DeltaChannel`` and with any channel a step does not write;
  ``item_lists=False`` stores every list whole. Reading a list decodes each item it has
  not cached (from the bytes this saver just stored, when it has them) and hands out copies
  of those it has, shared by the checkpoints one ``list`` returns (their common prefix) and
  never between two calls; an item read a second time is cached (privately: a caller's
  change to what it got changes no later answer). The items a ``put`` adds are decoded
  from their stored bytes right away (in LangGraph's background thread) and the first read
  of each takes that object, so reading the latest state decodes nothing. LangChain
  messages in the form LangGraph's own serializer wrote them are decoded by
  ``undertext._lcmessages`` (the same objects, without the serializer's per-message import
  and validation); anything else, or any other serializer, goes through ``self.serde``.
* Each (thread, namespace) pair is one engine chat of the saver's owner (title: the
  thread id, ``extra``: ``{"undertext.langgraph": ns}``). Every ``put`` and
  ``put_writes`` appends one record to it: a small JSON manifest naming the blobs,
  stored together with the new value blobs in one engine transaction
  (``Chat.append_with_blobs``: one log sync per call).
  Deletions hide the dead records (``delete_for_runs``, ``prune``: the engine's soft
  deletion, ``Chat.hide``, one engine transaction; the bytes stay until ``delete_thread``); ``delete_thread`` deletes the thread's chats,
  and ``Store.gc`` (store closed) then drops their records and the blobs only they used.

Records (format 2, written since the saver's records were made small; format 1 records,
written before, are still read). A record is one engine message: its text part is
compact JSON, and one attachment part (MIME ``VALUE_MIME``) per value blob the record
stores, so ``Store.gc`` knows the blob is used. In the JSON a blob is named by the index
of its attachment part (an int), or, for a value an earlier record of the same chat
already attached (an unchanged channel), by its 64-hex id, or, for an empty blob (a
``None`` value, a value that fits in its head), by ``""``: an empty blob is neither stored
nor attached (``EMPTY_BLOB``; records written before attached it). Keys:

* checkpoint, ``"k": "C"``: ``id``; ``mx`` (only when it differs from ``id``); ``p`` the
  parent id (absent when None); ``c`` the checkpoint without its id and channel values,
  as plain JSON with short keys (``_CP_KEYS``) when every field round-trips exactly
  through JSON (str, int, float, bool, None, lists, dicts with str keys), else ``cp``
  ``[type, base64]`` from the serializer; ``m`` the metadata as JSON under the same rule,
  else ``md`` ``[type, base64]``; ``ch`` ``{channel: [blob, head]}`` (``head``: base64
  of the value's first bytes; a third element gives the serializer type when it is not
  ``"msgpack"``), or for an item list ``{channel: {"b": seq, "k": kept, "i": [blobs]}}``
  (the list of the checkpoint record at ``seq`` of this chat, live or not, cut to its
  first ``k`` items, ``k`` absent when all, then the items ``i``; ``d`` counts the links
  down to a list without ``b``; every ``SNAPSHOT_LINKS`` links ``{"m": blob, "i"}``
  instead: the kept items' ids in a manifest blob, 32 bytes each; with ``"mb": [blobs]``
  (written since manifests stopped repeating each other) the manifest ``m`` is a *delta*
  over the list the chain ``mb`` gives: ``mb[0]`` a whole manifest, each later one (and
  ``m``) a u32 little-endian count of the list so far to keep, then the ids to add; the
  record attaches every blob of the chain, so none depends on an older record staying;
  at most ``MANIFEST_CHAIN`` deltas, then a whole one again; neither ``b`` nor ``m``:
  the list is ``i``); a channel's version is the one in the checkpoint's ``channel_versions``, not
  repeated in ``ch``; ``pw`` the write records of this checkpoint stored before it: the
  seq of each (its record, in this chat), or, as written before references and by
  ``copy_thread`` for a record not copied, ``[seq, record]``.
* writes, ``"k": "W"``: ``c`` checkpoint id, ``t`` task id, ``tp`` task path (absent
  when empty), ``w`` ``[[idx, channel, blob], ...]`` (a fourth element: the type when not
  ``"msgpack"``).
* tombstone ``"k": "d"`` (``s``: the seqs it kills), floor ``"k": "x"`` (``f``): written
  before deletions hid records in the engine; still read (no longer written).
* any kind: the lane's *early writes* after this record, when any: for the checkpoints
  that have write records but no checkpoint record yet (LangGraph stores a checkpoint's
  writes first when it saves asynchronously, its default), ``seq`` the first such write
  record: ``e``, the distances from this record's seq down to those write records (each
  names its checkpoint id; LangGraph's background thread runs a few checkpoints ahead, so
  this was ~200 bytes a record as ids), and ``o`` ``{id: seq}`` for an id whose ``seq``
  is not such a record (written before ``e``). ``put`` of such an id reads the records from ``seq`` up and
  copies those writes into the new record's ``pw``; ``put`` of an id not above the running
  maximum looks the id up (it may have been put before: its record's writes are copied).
  Any other id needs no read, so a ``put`` (and a ``put_writes`` of an id above the
  running maximum) after a reopen reads only the newest records. A lane's chat marked with
  ``extra[EARLY_KEY]`` keeps the set in its newest record; an older lane gets its set
  computed from the whole chat once, and the mark after its next append.

Format 1 (kinds ``"c"``/``"w"``) kept every field: blob ids in hex, the checkpoint and
metadata as base64 serializer output, each channel's version in ``ch``. ``_decode``
turns both formats into one in-memory shape.

Reads walk a chat from its newest record backwards and stop as soon as they have what
they need: ``get_tuple`` of the latest checkpoint and ``list(limit=100)`` read only the
newest records of a long thread. Each record carries the running maximum of the
checkpoint ids before it, so the walk knows when records are in id order (the normal
case) and falls back to reading the whole chat and sorting only when they are not.

Channel values are loaded lazily (``lazy=True``, the default): a checkpoint returned by
``get_tuple`` or ``list`` has a ``LazyChannelValues`` as ``channel_values``, a ``dict``
whose values are read from the store and deserialized when first accessed, so
``list(limit=100)`` of a thread with a 1 MB state reads no value at all unless the caller
looks at one. ``aget_tuple`` and ``alist`` load every value in their worker thread
before they return, so that the event loop never reads the store. See its docstring for
the one caveat (C extensions that read a dict's storage directly, such as ``ormsgpack``
and ``orjson``).

The ``a*`` methods run the engine calls in a worker thread (``asyncio.to_thread``); the
engine releases the GIL while it works, so the event loop never blocks on I/O or fsync.
"""

from __future__ import annotations

import asyncio
import base64
import collections.abc
import contextlib
import copy as _copy
import itertools
import json
import math
import operator
import random
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import Any, Callable, Optional

from ._extras import needs_extra

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
from undertext import _lcmessages
from undertext._holder import PathLike, StoreHolder, temporary_store
from undertext._per_owner import shared

__all__ = ["LazyChannelValues", "UnloadedChannelValue", "UndertextSaver"]

#: ``extra`` key marking a chat as a saver lane; its value is the checkpoint namespace.
LANE_KEY = "undertext.langgraph"

#: ``extra`` key (value ``"1"``) of a lane whose newest record always carries the lane's
#: early-writes set (``"o"``). Lanes created before that key existed lack it: their set is
#: computed once from the whole chat, and the key is set after the next append.
EARLY_KEY = "undertext.langgraph.o"

_BATCH = 64  # records decoded per engine read while walking backwards

#: Links of an item list's chain (records naming their parent's list) after which a put
#: stores the kept list as a manifest blob instead (its items' ids, 32 bytes each), so a
#: read after a reopen walks at most this many records down (and the write records between
#: them). 256 until issue 19's cold read: a reopened read of the 1,000-pair graph walked
#: 208 links, ~420 records, 6.7 ms of 110; 64 (with ``MANIFEST_CHAIN`` 32) walks at most
#: 63, for +1.2 % of disk at 1,000 pairs (+0.5 % at 300).
SNAPSHOT_LINKS = 64

#: Delta manifests in a chain (see the module docstring) before a put stores a whole one
#: again. Without deltas every manifest repeated the ids of the one before: at 1,000 pairs
#: of a real graph (2,001 items) 7 manifests took 229 KB, 0.17x the conversation's text.
#: (A whole manifest every 2,048 links, as with 16 links of 128.)
MANIFEST_CHAIN = 32

#: Checkpoint records stored as a patch of their parent's (``cd``) in a row, after which a
#: put stores the checkpoint and metadata whole again, so a read after a reopen resolves at
#: most this many records down (they are the newest ones, read in one batch).
PATCH_LINKS = 16

#: Digits of a version's counter in a new thread (``get_next_version``): 10^10 steps.
VERSION_DIGITS = 10


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

#: MIME type of the attachment parts naming the value blobs a record stores (format 2;
#: format 1 used ``"application/x-undertext-langgraph-value"``). Readers do not look at it.
VALUE_MIME = "lg"

#: The serializer type a format-2 entry leaves out.
_DEFAULT_TYPE = "msgpack"

#: The id of the empty blob (BLAKE3 of no bytes): the rest of a value that fits in its head,
#: such as ``None`` on every ``branch:to:`` channel. Named ``""`` in a record, never stored
#: or attached, read without the store: ~36 bytes less per record (an attachment part).
EMPTY_BLOB = undertext.blob_id(b"")

#: Short JSON keys of the checkpoint fields (format 2, ``c``). Other fields keep their name.
_CP_KEYS = {
    "v": "v",
    "ts": "t",
    "channel_versions": "cv",
    "versions_seen": "vs",
    "pending_sends": "ps",
    "updated_channels": "u",
}
_CP_LONG = {short: long for long, short in _CP_KEYS.items()}


def _json_exact(x: Any) -> bool:
    """True when ``json.loads(json.dumps(x))`` gives back ``x`` with the same types:
    str, int, bool, None, finite floats, lists and str-keyed dicts of those. Tuples,
    subclasses (an enum over str, say) and everything else go through the serializer."""
    t = type(x)
    if t is str or t is int or t is bool or x is None:
        return True
    if t is float:
        return math.isfinite(x)
    if t is list:
        return all(_json_exact(v) for v in x)
    if t is dict:
        return all(type(k) is str and _json_exact(v) for k, v in x.items())
    return False


_CONTAINERS = frozenset((dict, list))


def _jcopy(x: Any) -> Any:
    """A copy of JSON data (dicts and lists copied, leaves shared: they are immutable)."""
    t = type(x)
    if t is dict:
        return {k: _jcopy(v) if type(v) in _CONTAINERS else v for k, v in x.items()}
    if t is list:
        return [_jcopy(v) if type(v) in _CONTAINERS else v for v in x]
    return x


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _patch(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What turns JSON dict ``a`` into ``b``: ``s`` the keys set (new or changed), ``x``
    the keys removed, ``n`` patches of the keys whose values are dicts in both (each
    member only when not empty). ``_apply(a, _patch(a, b))`` equals ``b``; its key order
    and value types are checked by the caller (``_delta``)."""
    s: dict[str, Any] = {}
    n: dict[str, Any] = {}
    for k, v in b.items():
        if k in a:
            old = a[k]
            if old == v:
                continue
            if type(old) is dict and type(v) is dict:
                n[k] = _patch(old, v)
                continue
        s[k] = v
    out: dict[str, Any] = {}
    if s:
        out["s"] = s
    x = [k for k in a if k not in b]
    if x:
        out["x"] = x
    if n:
        out["n"] = n
    return out


def _apply(a: dict[str, Any], p: dict[str, Any]) -> dict[str, Any]:
    """``a`` patched by ``p`` (``_patch``); unchanged values are shared with ``a`` (records
    are never changed in place)."""
    if not p:
        return a
    x = p.get("x", ())
    out = {k: v for k, v in a.items() if k not in x} if x else dict(a)
    for k, sub in p.get("n", {}).items():
        out[k] = _apply(out[k], sub)
    out.update(p.get("s", {}))
    return out


def _delta(base_seq: int, base: dict[str, Any], rec: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The ``cd`` entry storing checkpoint record ``rec``'s checkpoint and metadata as
    patches of its parent's (``base``, at seq ``base_seq``), or None to store them
    whole: a field not plain JSON on either side, a chain of ``PATCH_LINKS``, or a patch
    that does not give back the same JSON text (key order, 1 vs 1.0 vs true)."""
    if "c" not in rec or "m" not in rec or "c" not in base or "m" not in base:
        return None
    depth = base.get("_d", 0) + 1
    if depth >= PATCH_LINKS:
        return None
    pc, pm = _patch(base["c"], rec["c"]), _patch(base["m"], rec["m"])
    if _dumps(_apply(base["c"], pc)) != _dumps(rec["c"]) or _dumps(_apply(base["m"], pm)) != _dumps(rec["m"]):
        return None
    out: dict[str, Any] = {"b": base_seq, "d": depth}
    if pc:
        out["c"] = pc
    if pm:
        out["m"] = pm
    return out


# -- item lists: a list value stored one blob per item -----------------------------------

#: Item types that make a list a plain list of scalars (stored whole, not item by item).
_SCALARS = frozenset((str, int, float, bool, type(None), bytes))

try:  # the copy of a decoded pydantic model (LangChain's messages) without deepcopy's cost
    from pydantic import BaseModel as _PydanticModel

    _PYDANTIC_DEEPCOPY: Any = _PydanticModel.__deepcopy__
except ImportError:  # pragma: no cover - LangGraph depends on pydantic
    _PYDANTIC_DEEPCOPY = None

_object_setattr = object.__setattr__


def _fresh(x: Any) -> Any:
    """A deep copy of a freshly decoded value, as ``copy.deepcopy`` makes it, faster: dicts,
    lists and pydantic models (fields, extra, fields set) are copied, immutable leaves
    shared, anything else deep-copied. Decoded values share no references, so copying
    each container on its own gives what decoding the bytes again would."""
    t = type(x)
    if t in _SCALARS:
        return x
    if t is dict:
        return _fresh_dict(x)
    if t is list:
        return [v if type(v) in _SCALARS else _fresh(v) for v in x] if x else []
    model = _MODEL_TYPES.get(t)
    if model is None:
        model = _MODEL_TYPES[t] = (
            _PYDANTIC_DEEPCOPY is not None and getattr(t, "__deepcopy__", None) is _PYDANTIC_DEEPCOPY
        )
    if model:
        m = t.__new__(t)
        _object_setattr(m, "__dict__", _fresh_dict(x.__dict__))
        extra = x.__pydantic_extra__
        _object_setattr(m, "__pydantic_extra__", None if extra is None else _fresh_dict(extra))
        _object_setattr(m, "__pydantic_fields_set__", set(x.__pydantic_fields_set__))
        private = getattr(x, "__pydantic_private__", None)
        _object_setattr(m, "__pydantic_private__", None if private is None else _copy.deepcopy(private))
        return m
    return _copy.deepcopy(x)


_native_fresh: Optional[Callable[..., list[Any]]]
try:  # the same copy in native code (``bindings/python/src/lcmessages.rs``)
    from undertext._native import _fresh_items

    _native_fresh = _fresh_items
except ImportError:  # pragma: no cover - an extension built before it
    _native_fresh = None


def _fresh_many(xs: list[Any]) -> list[Any]:
    """``_fresh`` of each of ``xs`` in one native call (601 LangChain messages: 1.70-1.95 ms in
    Python, 0.71-1.17 ms native when measured)."""
    if _native_fresh is None or _PYDANTIC_DEEPCOPY is None or len(xs) < _lcmessages.NATIVE_MIN:
        return [_fresh(x) for x in xs]  # (a few items: the native call's set-up costs more)
    out: list[Any] = _native_fresh(xs, _PYDANTIC_DEEPCOPY, _fresh)
    return out


def _fresh_dict(d: dict[Any, Any]) -> dict[Any, Any]:
    out = d.copy()
    for k, v in d.items():
        tv = type(v)
        if tv not in _SCALARS:
            if not v and (tv is dict or tv is list):
                out[k] = {} if tv is dict else []
            else:
                out[k] = _fresh(v)
    return out


#: Types whose ``__deepcopy__`` is pydantic's (True) or not (False), as ``_fresh`` met them.
_MODEL_TYPES: dict[type, bool] = {}


def _link(
    base_seq: Optional[int],
    base: dict[str, Any],
    kept: Sequence[str],
    new_ids: list[str],
    cut: bool,
    prior: Optional[Callable[[], Optional[tuple[list[str], Sequence[str]]]]] = None,
) -> tuple[dict[str, Any], Optional[bytes]]:
    """The entry of a list that keeps ``kept`` (the first items of the list of ``base``,
    the entry at record ``base_seq``; ``cut``: not all of them) and adds ``new_ids``, and
    the manifest blob to store with it when the chain of links reaches
    ``SNAPSHOT_LINKS``: then the entry names the kept ids in that blob instead, as a delta
    over the newest manifest below (``prior()``: its chain of blobs and the ids it gives)
    while that chain is shorter than ``MANIFEST_CHAIN``, else whole."""
    depth = base.get("d", 0) + 1
    if depth >= SNAPSHOT_LINKS:
        before = prior() if prior is not None else None
        if before is not None and len(before[0]) <= MANIFEST_CHAIN:
            chain, ids = before
            j, m = 0, min(len(ids), len(kept))
            while j < m and ids[j] == kept[j]:
                j += 1
            snap = j.to_bytes(4, "little") + b"".join([bytes.fromhex(x) for x in kept[j:]])
            return {"m": undertext.blob_id(snap), "mb": list(chain), "i": new_ids}, snap
        snap = b"".join([bytes.fromhex(x) for x in kept])
        return {"m": undertext.blob_id(snap), "i": new_ids}, snap
    entry: dict[str, Any] = {"b": base_seq, "i": new_ids, "d": depth}
    if cut:
        entry["k"] = len(kept)
    return entry, None


def _is_item_list(value: Any) -> bool:
    """A list stored item by item: a ``list`` of at least one item, none of them a scalar
    (messages, dicts, ...). A list of scalars is stored whole."""
    return type(value) is list and len(value) > 0 and not any(type(x) in _SCALARS for x in value)


class _Bounded(dict):  # type: ignore[type-arg]
    """A dict that forgets its oldest entries beyond ``cap``."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap

    def __setitem__(self, key: Any, value: Any) -> None:
        if key in self:
            del self[key]
        super().__setitem__(key, value)
        while len(self) > self.cap:
            del self[next(iter(self))]


class _Bytes(dict):  # type: ignore[type-arg]
    """Values by id, each of a given size (blob bytes: their length), forgetting the
    oldest beyond ``cap`` in all; ``take`` removes one."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap
        self.size = 0
        self.sizes: dict[str, int] = {}

    def add(self, key: str, data: Any, size: Optional[int] = None) -> None:
        n = len(data) if size is None else size
        if key in self or n > self.cap:
            return
        super().__setitem__(key, data)
        self.sizes[key] = n
        self.size += n
        while self.size > self.cap:
            self.take(next(iter(self)))

    def take(self, key: str) -> Any:
        self.size -= self.sizes.pop(key)
        return self.pop(key)


# -- records: the in-memory shape, and both stored formats -------------------------------
#
# In memory, whatever the stored format:
#   checkpoint {"k": "c", "id", "mx", "p", "c" or "cp", "m" or "md",
#               "ch": {channel: [type, blob id, head base64]}, "pw"?: [[seq, writes]]}
#   writes     {"k": "w", "c", "t", "tp", "w": [[idx, channel, type, blob id], ...]}
#   tombstone  {"k": "d", "s"}; floor {"k": "x", "f"}


def _blobs_of(rec: dict[str, Any]) -> list[str]:
    """The value blobs a record refers to, each once."""
    ids: list[str] = []
    if rec["k"] == "c":
        for e in rec["ch"].values():
            if type(e) is dict:
                if "m" in e:
                    ids.extend(e.get("mb", ()))
                    ids.append(e["m"])
                ids.extend(e.get("i", ()))
            else:
                ids.append(e[1])
        for pw in rec.get("pw", ()):
            if type(pw) is not int:  # a reference names a write record, which attaches its own
                ids.extend(e[3] for e in pw[1]["w"])
    elif rec["k"] == "w":
        ids.extend(e[3] for e in rec["w"])
    return list(dict.fromkeys(ids))


def _writes_out(rec: dict[str, Any], ref: Callable[[str], Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"k": "W", "c": rec["c"], "t": rec["t"]}
    if rec["tp"]:
        out["tp"] = rec["tp"]
    out["w"] = [[i, ch, ref(b)] if typ == _DEFAULT_TYPE else [i, ch, ref(b), typ] for i, ch, typ, b in rec["w"]]
    return out


def _stored(rec: dict[str, Any], attach: Sequence[str]) -> dict[str, Any]:
    """A record in format 2, blobs in ``attach`` named by their index there."""
    index = {b: i for i, b in enumerate(attach)}

    def ref(blob: str) -> Any:
        return "" if blob == EMPTY_BLOB else index.get(blob, blob)

    k = rec["k"]
    if k == "w":
        return _writes_out(rec, ref)
    if k != "c":
        return rec
    out: dict[str, Any] = {"k": "C", "id": rec["id"]}
    if rec["mx"] != rec["id"]:
        out["mx"] = rec["mx"]
    cd = rec.get("_cd")
    if cd is not None:  # the parent (``p``), checkpoint and metadata: a patch of its record
        out["cd"] = cd
    else:
        if rec["p"] is not None:
            out["p"] = rec["p"]
        for key in ("c", "cp", "m", "md"):
            if key in rec:
                out[key] = rec[key]
    out["ch"] = {ch: _entry_out(e, ref) for ch, e in rec["ch"].items()}
    if rec.get("pw"):
        out["pw"] = [pw if type(pw) is int else [pw[0], _writes_out(pw[1], ref)] for pw in rec["pw"]]
    return out


def _entry_out(e: Any, ref: Callable[[str], Any]) -> Any:
    """A channel entry in format 2: ``[blob, head]`` (``[blob, head, type]``), or an item
    list ``{"b": base seq, "k": kept, "i": [item blobs]}``."""
    if type(e) is dict:
        out = {key: e[key] for key in ("b", "k", "d") if key in e}
        if "m" in e:
            out["m"] = ref(e["m"])
            if "mb" in e:
                out["mb"] = [ref(b) for b in e["mb"]]
        if e.get("i"):
            out["i"] = [ref(b) for b in e["i"]]
        return out
    typ, b, head = e
    return [ref(b), head] if typ == _DEFAULT_TYPE else [ref(b), head, typ]


def _entry_in(e: Any, deref: Callable[[Any], str]) -> Any:
    if type(e) is dict:
        out = {key: e[key] for key in ("b", "k", "d") if key in e}
        if "m" in e:
            out["m"] = deref(e["m"])
            if "mb" in e:
                out["mb"] = [deref(r) for r in e["mb"]]
        out["i"] = [deref(r) for r in e.get("i", ())]
        return out
    return [e[2] if len(e) > 2 else _DEFAULT_TYPE, deref(e[0]), e[1]]


def _message(
    rec: dict[str, Any],
    attach: Sequence[str] = (),
    early: Optional[dict[str, int]] = None,
    seq: int = 0,
    record_at: Optional[Callable[[int], Optional[dict[str, Any]]]] = None,
) -> dict[str, Any]:
    """A record as an engine message: its format-2 JSON as the text part, and one
    attachment part per blob of ``attach`` (the blobs this record stores, or first uses
    in its chat), so the engine knows the references (``Store.gc`` keeps a blob while a
    live chat attaches it, and drops it with the last deleted chat that did). ``early``:
    the lane's early writes after this record, stored when not empty: as ``"e"``, the
    distances from ``seq`` (this record's) down to the write records they start at, for
    every id whose seq is a write record of that id (``record_at``, ``rec`` itself at
    ``seq``), and as ``"o"`` ``{id: seq}`` for any other."""
    attach = [b for b in attach if b != EMPTY_BLOB]
    out = _stored(rec, attach)
    if early:
        out = dict(out)
        back: list[int] = []
        rest: dict[str, int] = {}
        for cid, s in sorted(early.items(), key=operator.itemgetter(1)):
            w = rec if s == seq else record_at(s) if record_at is not None and s < seq else None
            if w is not None and w["k"] == "w" and w["c"] == cid:
                back.append(seq - s)
            else:
                rest[cid] = s
        if back:
            out["e"] = back
        if rest:
            out["o"] = dict(sorted(rest.items()))
    parts: list[dict[str, Any]] = [{"type": "text", "text": _dumps(out)}]
    parts.extend({"type": "attachment", "mime": VALUE_MIME, "blob": b} for b in attach)
    return {"role": "system", "parts": parts}


def _writes_in(w: dict[str, Any], deref: Callable[[Any], str]) -> dict[str, Any]:
    if w["k"] == "w":  # format 1: already the in-memory shape
        return w
    return {
        "k": "w",
        "c": w["c"],
        "t": w["t"],
        "tp": w.get("tp", ""),
        "w": [[e[0], e[1], e[3] if len(e) > 3 else _DEFAULT_TYPE, deref(e[2])] for e in w["w"]],
    }


def _decode(m: Any) -> dict[str, Any]:
    """The in-memory record of an engine message of either format."""
    d: dict[str, Any] = json.loads(m.text)
    rec = _decode_json(d, m)
    if "o" in d:
        rec["o"] = d["o"]
    if "e" in d:
        rec["e"] = [m.seq - x for x in d["e"]]
    return rec


def _decode_json(d: dict[str, Any], m: Any) -> dict[str, Any]:
    k = d["k"]
    if k == "c":  # format 1: entries were [version, type, blob, head]
        d["ch"] = {ch: [e[1], e[2], e[3]] for ch, e in d["ch"].items()}
        return d
    if k not in ("C", "W"):
        return d  # "w" (format 1, already in memory shape), "d", "x"
    attached: Optional[list[str]] = None

    def deref(r: Any) -> str:
        nonlocal attached
        if type(r) is not int:
            return str(r) if r != "" else EMPTY_BLOB
        if attached is None:
            attached = [p["blob"] for p in m.parts if p["type"] == "attachment"]
        return attached[r]

    if k == "W":
        return _writes_in(d, deref)
    rec: dict[str, Any] = {"k": "c", "id": d["id"], "mx": d.get("mx", d["id"]), "p": d.get("p")}
    for key in ("c", "cp", "m", "md", "cd"):  # cd: resolved by the lane (``_Lane.resolve``)
        if key in d:
            rec[key] = d[key]
    rec["ch"] = {ch: _entry_in(e, deref) for ch, e in d["ch"].items()}
    if "pw" in d:
        rec["pw"] = [pw if type(pw) is int else [pw[0], _writes_in(pw[1], deref)] for pw in d["pw"]]
    return rec


# -- lazy channel values -----------------------------------------------------------------


class UnloadedChannelValue:
    """Stands in a ``LazyChannelValues`` for a value not read from the store yet.

    Python code never sees one: every ``LazyChannelValues`` method loads it first. C
    code that reads a dict's storage directly does (``ormsgpack.packb``, ``orjson.dumps``,
    ``dict.values(d)`` called unbound); this class is serializable by neither, so such a
    call fails with ``Type is not msgpack serializable: UnloadedChannelValue`` instead of
    writing a wrong value. Call ``LazyChannelValues.load_all()`` first, or construct the
    saver with ``lazy=False``.

    The loaded value is kept here too, so copies of a ``LazyChannelValues`` (which share
    their unloaded entries, as ``dict.copy`` shares values) load it once and see the same
    object, as with a plain dict.
    """

    __slots__ = ("_load", "_what", "_lock", "_done", "_value")

    def __init__(self, load: Callable[[], Any], what: tuple[str, str, str]) -> None:
        self._load = load
        self._what = what  # (channel, checkpoint id, thread id): names the value in errors
        self._lock = threading.Lock()
        self._done = False
        self._value: Any = None

    def value(self) -> Any:
        """The value, read from the store on the first call."""
        if self._done:
            return self._value
        with self._lock:
            if not self._done:
                self._value = self._load()
                self._done = True
                self._load = _loaded  # drop the references the loader held
        return self._value

    def fresh(self, memo: dict[int, Any]) -> UnloadedChannelValue:
        """An independent stand-in for the same stored value (``copy.deepcopy``): unloaded,
        it loads a new object; loaded, it holds a deep copy of the value."""
        if not self._done:
            return UnloadedChannelValue(self._load, self._what)
        new = UnloadedChannelValue(_loaded, self._what)
        new._value = _copy.deepcopy(self._value, memo)
        new._done = True
        return new

    def __repr__(self) -> str:
        return f"<unloaded {_describe(self._what)}>"


# ormsgpack and orjson name only the type of a value they cannot write: the type's name says
# what to do ("Type is not msgpack serializable: UnloadedChannelValue (...)").
UnloadedChannelValue.__name__ = (
    "UnloadedChannelValue (a lazy channel value not loaded yet: call LazyChannelValues.load_all() "
    "on the checkpoint's channel_values first, or construct UndertextSaver(..., lazy=False))"
)


def _describe(what: tuple[str, str, str]) -> str:
    channel, checkpoint_id, thread_id = what
    return f"channel value {channel!r} of checkpoint {checkpoint_id} (thread {thread_id!r})"


def _closed_message(what: tuple[str, str, str], e: Exception) -> str:
    return (
        f"{_describe(what)} was not loaded before the store closed (channel values load when first "
        "accessed: read them while the store is open, or construct "
        f"UndertextSaver(store, lazy=False)): {e}"
    )


_MISSING: Any = object()


def _loaded() -> Any:
    raise AssertionError("an UnloadedChannelValue loads once")


def _raw_items(d: dict[Any, Any]) -> Iterable[tuple[Any, Any]]:
    """A dict's stored pairs, unloaded stand-ins included (no loading)."""
    return dict.items(d)


class _Values(collections.abc.ValuesView):  # type: ignore[type-arg]
    """``values()`` of a ``LazyChannelValues``: loads each value as iteration reaches it."""

    def __reversed__(self) -> Iterator[Any]:
        for key in reversed(list(self._mapping)):
            yield self._mapping[key]


class _Items(collections.abc.ItemsView):  # type: ignore[type-arg]
    """``items()`` of a ``LazyChannelValues``: loads each value as iteration reaches it."""

    def __reversed__(self) -> Iterator[tuple[Any, Any]]:
        for key in reversed(list(self._mapping)):
            yield key, self._mapping[key]


class LazyChannelValues(dict):  # type: ignore[type-arg]
    """A checkpoint's ``channel_values``: a ``dict`` whose values are read from the store
    and deserialized when first accessed, then kept.

    Every Python-level use behaves as on a plain dict and sees real values: ``d[k]``,
    ``get``, ``in``, ``len``, iteration, ``keys``/``values``/``items`` (values load as
    iteration reaches them), ``==``/``!=``, ``copy()`` and ``copy.copy`` (the copy stays
    lazy; it shares the loaded objects, as ``dict.copy`` shares values), ``dict(d)``,
    ``{**d}``, ``f(**d)``, ``d | other``, ``other | d``, ``|=``, ``update``, ``pop``,
    ``popitem``, ``setdefault``, ``repr``, ``pickle`` (gives a plain dict),
    ``copy.deepcopy`` (stays lazy; unloaded values load as new objects), ``json.dumps``.
    CPython's own dict fast paths (``dict(d)``, ``update``, ``{**d}``) go through
    ``keys()`` and ``__getitem__`` here, because this class overrides ``__iter__``.

    The caveat: C extensions that read a dict's storage directly, such as ``ormsgpack``
    (LangGraph's ``JsonPlusSerializer.dumps_typed``, which another saver's ``put`` calls
    on a whole checkpoint) and ``orjson``, see an ``UnloadedChannelValue`` for a value not
    loaded yet and fail (they never write it). Call ``load_all()`` before handing the
    checkpoint to one, or construct ``UndertextSaver(..., lazy=False)``.

    A value first touched after the store was closed raises ``undertext.Closed`` naming
    the value.
    """

    __slots__ = ()

    def __getitem__(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        if type(value) is UnloadedChannelValue:
            value = value.value()
            dict.__setitem__(self, key, value)
        return value

    def __iter__(self) -> Iterator[Any]:
        # Overridden so that CPython's dict merging (dict(d), update, {**d}) takes the
        # keys() + __getitem__ path instead of copying the storage.
        return dict.__iter__(self)

    def get(self, key: Any, default: Any = None) -> Any:
        """``d[key]`` if present, else ``default``."""
        if dict.__contains__(self, key):
            return self[key]
        return default

    def values(self) -> _Values:  # type: ignore[override]
        """A view of the values, loading each as iteration reaches it."""
        return _Values(self)

    def items(self) -> _Items:  # type: ignore[override]
        """A view of the pairs, loading each value as iteration reaches it."""
        return _Items(self)

    def load_all(self) -> LazyChannelValues:
        """Loads every value not loaded yet; returns ``self``, now a dict whose storage holds
        only real values (safe for ``ormsgpack``, ``orjson`` and other C readers)."""
        for key in list(dict.keys(self)):
            self[key]
        return self

    def pop(self, key: Any, *default: Any) -> Any:
        """Removes ``key`` and returns its value (loaded), or ``default``."""
        value = dict.pop(self, key, *default)
        if type(value) is UnloadedChannelValue:
            value = value.value()
        return value

    def popitem(self) -> tuple[Any, Any]:
        """Removes and returns the last pair (its value loaded)."""
        key, value = dict.popitem(self)
        if type(value) is UnloadedChannelValue:
            value = value.value()
        return key, value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        """``d[key]`` if present; else sets it to ``default`` and returns that."""
        if dict.__contains__(self, key):
            return self[key]
        dict.__setitem__(self, key, default)
        return default

    def update(self, other: Any = (), /, **kwargs: Any) -> None:  # type: ignore[override]
        """As ``dict.update``; another ``LazyChannelValues``'s unloaded values stay unloaded."""
        if type(other) is LazyChannelValues:
            dict.update(self, _raw_items(other))
        else:
            dict.update(self, other)
        if kwargs:
            dict.update(self, kwargs)

    def copy(self) -> LazyChannelValues:
        """A shallow copy that stays lazy (shares values, loaded or not, as ``dict.copy``)."""
        new = LazyChannelValues()
        dict.update(new, _raw_items(self))
        return new

    __copy__ = copy

    def __deepcopy__(self, memo: dict[int, Any]) -> LazyChannelValues:
        new = LazyChannelValues()
        memo[id(self)] = new
        for key, value in _raw_items(self):
            if type(value) is UnloadedChannelValue:
                dict.__setitem__(new, _copy.deepcopy(key, memo), value.fresh(memo))
            else:
                dict.__setitem__(new, _copy.deepcopy(key, memo), _copy.deepcopy(value, memo))
        return new

    def __reduce_ex__(self, protocol: Any) -> Any:
        # Pickles as a plain dict of the loaded values: the store does not travel.
        return (dict, (dict(self.items()),))

    def __or__(self, other: Any) -> Any:
        if not isinstance(other, dict):
            return NotImplemented
        new = self.copy()
        new.update(other)
        return new

    def __ror__(self, other: Any) -> Any:
        if not isinstance(other, dict):
            return NotImplemented
        new = LazyChannelValues(other)
        dict.update(new, _raw_items(self))
        return new

    def __ior__(self, other: Any) -> LazyChannelValues:  # type: ignore[override,misc]
        self.update(other)
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, dict):
            return NotImplemented
        if len(self) != len(other) or any(not dict.__contains__(other, k) for k in dict.keys(self)):
            return False
        return all(self[k] == other[k] for k in dict.keys(self))

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(dict(self.items()))


class _Lane:
    """The records of one (thread, namespace) chat, decoded lazily from the newest back.

    ``recs`` holds decoded records for seqs in ``[lo, hi)``; ``hi`` is the chat length
    when last synced. Everything older than ``lo`` is still unread.
    """

    def __init__(
        self,
        chat: Any,
        thread_id: str,
        ns: str,
        tracked: bool = True,
        read_blobs: Optional[Callable[[list[str]], list[bytes]]] = None,
    ) -> None:
        self.chat = chat
        self.read_blobs = read_blobs  # reads the blobs of an item list's manifest chain
        self.thread_id = thread_id
        self.ns = ns
        # The chat has EARLY_KEY: its newest record carries the early-writes set.
        self.tracked = tracked
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
        # Checkpoint ids that may have live write records but no live checkpoint record
        # (writes stored before their checkpoint); None until read from the newest record.
        # Checkpoint id -> seq of its first write record, for ids that may have live write
        # records but no live checkpoint record (writes stored before their checkpoint);
        # None until read from the newest record.
        self.early: Optional[dict[str, int]] = None
        # Item lists (see ``item_ids``): the values this process put, by (seq, channel):
        # (the list's items, the ids of their blobs); resolved item ids; (base seq,
        # channel) -> (seq, n): the base's list is that record's first n items; records
        # below the floor read to resolve a list; objects written per checkpoint id.
        self.live: _Bounded = _Bounded(8)
        self.resolved: _Bounded = _Bounded(64)
        self.hints: _Bounded = _Bounded(1024)
        self.below: dict[int, dict[str, Any]] = {}
        self.written: _Bounded = _Bounded(8)

    # -- keeping the cache in step with the chat -------------------------------------------

    def sync(self) -> None:
        """Notices truncations (reset) and records appended by other handles, in this
        process or another one (the held ``Chat`` is brought up to date first: on a fleet
        store one round trip, on an embedded store nothing to fetch)."""
        if self.deleted:
            self.hi = self.lo = 0
            self.recs = {}
            self.writes = {}
            return
        self.chat.refresh()
        if self.chat.revision != self.revision:
            self.reset()
            return
        n = len(self.chat)
        if n > self.hi:
            self.early = None  # appended by another handle: read again from the newest record
            if self.lo == self.hi:
                self.lo = self.hi = n
                self.mx_known = False
            else:
                for m in self.chat.messages(self.hi, n):
                    rec = _decode(m)
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

    def early_ids(self) -> dict[str, int]:
        """Checkpoint ids that may have writes stored before their checkpoint record, each
        with the seq of its first write record (a superset: ``put`` looks for such writes
        only for these ids, reading the records from that seq up, and for ids not above
        the lane's running maximum, which may be a checkpoint put again)."""
        if self.early is None:
            if self.hi == 0:
                self.early = {}
            elif self.tracked:
                rec = self.record_at(self.hi - 1)
                self.early = _early_of(rec, self.record_at)
            else:
                # A lane written before the set was kept: read it whole, once.
                self.decode_all()
                self.early = self.exact_early()
        return self.early

    def exact_early(self, extra: Sequence[tuple[int, dict[str, Any]]] = ()) -> dict[str, int]:
        """The early writes of a fully decoded lane (with ``extra`` records after it)."""
        live = sorted(list(self.walk()) + list(extra), key=lambda sr: sr[0])
        have = {r["id"] for _s, r in live if r["k"] == "c"}
        out: dict[str, int] = {}
        for seq, r in live:
            if r["k"] == "w" and r["c"] not in have:
                out.setdefault(r["c"], seq)
        return out

    def decode_all(self) -> None:
        """Decodes every live record (down to the floor)."""
        while self._extend_down():
            pass

    def decode_down_to(self, seq: int) -> None:
        """Decodes every live record from ``seq`` up."""
        while self.lo > seq and self._extend_down():
            pass

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
            self._learn(m.seq, _decode(m))
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
                if "cd" in rec:
                    self.resolve(seq, rec)
                yield seq, rec
            seq -= 1

    def resolve(self, seq: int, rec: dict[str, Any]) -> None:
        """Fills in a checkpoint record stored as a patch of its parent's (``cd``): its
        parent id, checkpoint and metadata, from the chain of records down to one stored
        whole (at most ``PATCH_LINKS``), each resolved in place on the way up."""
        chain = [(seq, rec)]
        while True:
            b = chain[-1][1]["cd"]["b"]
            base = self.record_at(b)
            if "cd" not in base:
                break
            chain.append((b, base))
        for _s, r in reversed(chain):
            cd = r["cd"]
            base = self.record_at(cd["b"])
            r["p"] = base["id"]
            r["c"] = _apply(base["c"], cd.get("c", {}))
            r["m"] = _apply(base["m"], cd.get("m", {}))
            r["_d"] = cd["d"]
            r["_cd"] = cd
            del r["cd"]

    def hide(self, seqs: Sequence[int], below: int = 0) -> None:
        """Hides the records at ``seqs`` and every record below ``below`` (one engine
        transaction, guarded by the revision this lane read) and forgets them as live,
        keeping the cache: the records read so far stay valid (a hide moves the revision,
        which ``sync`` would take for a truncation by another handle)."""
        ranges: list[tuple[int, int]] = [(0, below)] if below > 0 else []
        for s in sorted(set(seqs)):
            if ranges and ranges[-1][1] == s:
                ranges[-1] = (ranges[-1][0], s + 1)
            else:
                ranges.append((s, s + 1))
        if not ranges:
            return
        self.revision = self.chat.hide(ranges, expected_revision=self.revision)
        self.dead.update(seqs)
        self.floor = max(self.floor, below)

    def record_at(self, seq: int) -> dict[str, Any]:
        """The decoded record at ``seq``, live or not (a list's base may be below the
        floor, killed by a tombstone or hidden: its bytes are still in the chat)."""
        rec = self.recs.get(seq)
        if rec is None and self.floor <= seq < self.lo:
            self.decode_down_to(seq)
            rec = self.recs.get(seq)
        if rec is None:
            rec = self.below.get(seq)
            if rec is None:
                for m in self.chat.messages(max(0, seq - _BATCH + 1), seq + 1, hidden=True):
                    self.below[m.seq] = _decode(m)
                rec = self.below[seq]
        return rec

    # -- item lists ----------------------------------------------------------------------

    def _known(self, key: tuple[int, str]) -> Optional[tuple[str, ...]]:
        got: Optional[tuple[str, ...]] = self.resolved.get(key)
        if got is None:
            hint = self.hints.get(key)
            if hint is not None:
                child = self.resolved.get((hint[0], key[1]))
                if child is not None:
                    got = child[: hint[1]]
                    # And the hint for this list's own base (a listing goes on down the chain).
                    e = self.record_at(key[0])["ch"].get(key[1])
                    if type(e) is dict:
                        self.remember(key[0], key[1], e, got)
                    else:
                        self.resolved[key] = got
        return got

    def remember(self, seq: int, ch: str, entry: dict[str, Any], ids: tuple[str, ...]) -> None:
        """Caches the item ids of ``(seq, ch)``; a base kept whole is their prefix."""
        self.resolved[(seq, ch)] = ids
        if "b" in entry and "k" not in entry:
            self.hints[(entry["b"], ch)] = (seq, len(ids) - len(entry["i"]))

    def item_ids(self, seq: int, ch: str) -> tuple[str, ...]:
        """The item blob ids of the list value of ``ch`` at record ``seq``: its entry's
        base list (the record ``b``, cut to ``k`` items, or the manifest blob ``m``), then
        its own items ``i``; a chain down to a root entry (no ``b``), a manifest, or a
        list already resolved."""
        got = self._known((seq, ch))
        if got is not None:
            return got
        links: list[dict[str, Any]] = []
        ids: list[str] = []
        s = seq
        while True:
            e = self.record_at(s)["ch"].get(ch)
            if type(e) is not dict:
                raise ValueError(f"record {s} of thread {self.thread_id!r} has no item list for channel {ch!r}")
            links.append(e)
            if "m" in e:  # the kept list in a manifest blob, whole or a delta over a chain
                assert self.read_blobs is not None
                ids = []
                # The chain's blobs in one engine call (up to MANIFEST_CHAIN + 1 of them).
                for n, data in enumerate(self.read_blobs([*e.get("mb", ()), e["m"]])):
                    at = 0
                    if n > 0:
                        del ids[int.from_bytes(data[:4], "little") :]
                        at = 4
                    ids.extend(data[i : i + 32].hex() for i in range(at, len(data), 32))
                break
            b = e.get("b")
            if b is None:
                break
            base = self._known((b, ch))
            if base is not None:
                ids = list(base)
                break
            s = b
        for e in reversed(links):
            k = e.get("k")
            if k is not None:
                del ids[k:]
            ids.extend(e["i"])
        out = tuple(ids)
        self.remember(seq, ch, links[0], out)
        return out

    def manifest_below(self, seq: int, ch: str) -> Optional[tuple[list[str], Sequence[str]]]:
        """The newest manifest of the item list of ``ch`` at record ``seq`` or below it:
        its chain of blobs (root first, its own last) and the ids it gives; None when the
        chain of links ends without one."""
        s = seq
        while True:
            e = self.record_at(s)["ch"].get(ch)
            if type(e) is not dict:
                return None
            if "m" in e:
                full = self.item_ids(s, ch)
                return [*e.get("mb", ()), e["m"]], full[: len(full) - len(e.get("i", ()))]
            b = e.get("b")
            if b is None:
                return None
            s = b

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
        early = [(pw, self.record_at(pw)) if type(pw) is int else (int(pw[0]), pw[1]) for pw in checkpoint.get("pw", ())]
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


def _early_of(rec: dict[str, Any], record_at: Callable[[int], dict[str, Any]]) -> dict[str, int]:
    """The early writes a record carries: ``o`` (a list of ids, without seqs, in the first
    records that had them: their writes may be anywhere, so seq 0), and ``e``, the seqs
    of write records (decoded: absolute), each naming its checkpoint id."""
    out: dict[str, int] = {}
    o = rec.get("o")
    if o:
        if isinstance(o, dict):
            out.update((str(k), int(v)) for k, v in o.items())
        else:
            out.update((str(k), 0) for k in o)
    for s in rec.get("e", ()):
        out[record_at(s)["c"]] = s
    return out


class _Registry:
    """The lanes of one owner in one open store, shared by every saver on that store in
    the process (a store has one process; this makes it one map), so a thread created
    through one saver is seen by the others. A thread's lanes are found when it is first
    used (an index lookup by title, ``Store.find_chats``); only a listing across threads
    reads every chat of the owner, once."""

    def __init__(self, store: Any, owner: str) -> None:
        self.store = store
        self.owner = owner
        self.lock = threading.RLock()
        self.lanes: dict[tuple[str, str], _Lane] = {}
        self.threads: dict[str, set[str]] = {}
        self.found: set[str] = set()  # threads whose lanes were looked up
        self.found_all = False

    def _add(self, infos: Any, skip: Any = ()) -> None:
        for info in infos:  # newest activity first: of two chats of one lane, the older wins
            ns = info.extra.get(LANE_KEY)
            if ns is None or info.title in skip:
                continue
            self.threads.setdefault(info.title, set()).add(ns)
            tracked = info.extra.get(EARLY_KEY) == "1"
            chat = self.store.chat(self.owner, info.id)
            self.lanes[(info.title, ns)] = _Lane(chat, info.title, ns, tracked, self.read_blobs)

    def _find(self, thread_id: Optional[str]) -> None:
        """Loads the lanes of ``thread_id`` (None: of every thread) if not done yet."""
        if self.found_all or thread_id in self.found:
            return
        if thread_id is None:
            self._add(self.store.chats(self.owner), skip=set(self.found))
            self.found_all = True
        else:
            self._add(self.store.find_chats(self.owner, title=thread_id))
            self.found.add(thread_id)

    def read_blobs(self, blob_ids: list[str]) -> list[bytes]:
        """The bytes of ``blob_ids`` (the empty blob is not stored), read in one call."""
        stored = [b for b in blob_ids if b != EMPTY_BLOB]
        got = dict(zip(stored, self.store.get_blobs(self.owner, stored))) if stored else {}
        return [got.get(b, b"") for b in blob_ids]

    def lane(self, thread_id: str, ns: str, create: bool) -> Optional[_Lane]:
        with self.lock:
            self._find(thread_id)
            lane = self.lanes.get((thread_id, ns))
            if lane is None and create:
                chat = self.store.create_chat(self.owner, title=thread_id, extra={LANE_KEY: ns, EARLY_KEY: "1"})
                lane = _Lane(chat, thread_id, ns, True, self.read_blobs)
                self.lanes[(thread_id, ns)] = lane
                self.threads.setdefault(thread_id, set()).add(ns)
            return lane

    def drop(self, thread_id: str) -> list[_Lane]:
        """Forgets a thread's lanes (a later write creates new chats) and returns them."""
        with self.lock:
            self._find(thread_id)
            lanes = [self.lanes.pop((thread_id, n)) for n in sorted(self.threads.pop(thread_id, ()))]
        return lanes

    def restore(self, thread_id: str, lanes: list[_Lane]) -> None:
        """Takes back lanes ``drop`` returned whose chats a failed delete left in the store
        (a lane a write made again meanwhile stays)."""
        with self.lock:
            for lane in lanes:
                if (thread_id, lane.ns) not in self.lanes:
                    self.lanes[(thread_id, lane.ns)] = lane
                    self.threads.setdefault(thread_id, set()).add(lane.ns)

    def lanes_of(self, thread_id: Optional[str], ns: Optional[str]) -> list[_Lane]:
        with self.lock:
            self._find(thread_id)
            if thread_id is None:
                lanes = list(self.lanes.values())
            else:
                lanes = [self.lanes[(thread_id, n)] for n in sorted(self.threads.get(thread_id, ()))]
        return [ln for ln in lanes if ns is None or ln.ns == ns]


def _values_loaded(t: CheckpointTuple) -> CheckpointTuple:
    """``t`` with every channel value loaded (for the async methods, in their worker thread)."""
    values = t.checkpoint["channel_values"]
    if type(values) is LazyChannelValues:
        values.load_all()
    return t


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
        # Items of item lists decoded from the store, by blob id: never handed out (a
        # returned value gets a copy), so a caller changing what it got changes nothing here.
        self._decoded: _Bounded = _Bounded(16384)
        # Items decoded once and handed out as they were (a first read costs one decode,
        # as with LangGraph's savers): the second read of an item caches it.
        self._read_once: _Bounded = _Bounded(65536)
        # Items this saver put, decoded from their stored bytes when put and not handed
        # out yet: the first read of each takes it (no decode, no copy).
        # (Bounded by the items' serialized bytes.)
        self._put_decoded = _Bytes(16 << 20)
        # The bytes of the item blobs this saver stored lately (what a read of the latest
        # state decodes first), so that reading them back needs no store read.
        self._item_bytes = _Bytes(32 << 20)
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
        rest = b"" if blob_id == EMPTY_BLOB else self.store.get_blob(self.owner, blob_id)
        data = head + rest
        if typ == _DEFAULT_TYPE and data and self._plain_messages():
            try:  # a value stored whole (a list of messages, a pending write): as items are
                return _lcmessages.decode(data)
            except _lcmessages.NotPlain:
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
        """An item list's value: each item decoded once (``self._decoded``) and copied
        into the answer; ``memo`` shares the copies between the values of one call
        (the checkpoints of one ``list`` share the items of their common prefix)."""
        if self.store.closed:  # as a read of the store would (the caches hold some items)
            raise undertext.Closed("the store is closed")
        with lane.lock:
            ids = lane.item_ids(seq, ch)
        decoded = self._decoded
        missing = [b for b in ids if b not in memo and b not in decoded]
        new: dict[str, Any] = {}
        if missing:
            missing = list(dict.fromkeys(missing))
            ready = self._put_decoded
            for b in missing:
                if b in ready:  # decoded when put and never handed out: this read's own
                    new[b] = ready.take(b)
            if len(new) < len(missing):
                missing = [b for b in missing if b not in new]
                kept = self._item_bytes
                absent = [b for b in missing if b not in kept]
                # Read in one call (after a reopen: every item of the state).
                got = dict(zip(absent, self.store.get_blobs(self.owner, absent))) if absent else {}
                datas = [kept[b] if b in kept else got[b] for b in missing]
                new.update(zip(missing, self._decode_items(datas)))
            once = self._read_once
            for b, obj in new.items():
                if b in once:
                    decoded[b] = obj
                else:
                    once[b] = None
        if len(set(ids)) == len(ids):  # the usual case: no item twice in the list
            # The cached items this answer needs copied, all in one native call.
            to_copy = [b for b in ids if b not in memo and (b not in new or b in decoded)]
            if to_copy:
                copies = _fresh_many([new[b] if b in new else decoded[b] for b in to_copy])
                memo.update(zip(to_copy, copies))
            out = []
            for bid in ids:
                x = memo.get(bid, _MISSING)
                if x is _MISSING:  # decoded for this call only: no copy needed
                    x = memo[bid] = new[bid]
                out.append(x)
            return out
        # An item twice in one list is two objects, as decoding the list would give.
        out = []
        used: set[str] = set()
        for bid in ids:
            x = memo.get(bid, _MISSING) if bid not in used else _MISSING
            if x is _MISSING:
                # (Not cached and not decoded by this read: decoded by an earlier read of
                # this call, whose object is in the memo.)
                x = _fresh(new[bid] if bid in new else decoded[bid] if bid in decoded else memo[bid])
                if bid not in used:
                    memo[bid] = x
            used.add(bid)
            out.append(x)
        return out

    def _plain_messages(self) -> bool:
        """Whether item blobs may be decoded by ``_lcmessages`` (LangGraph's own serializer,
        unchanged: it builds those messages under every allow-list setting)."""
        serde = self.serde
        return (
            type(serde) is JsonPlusSerializer
            and getattr(serde, "_custom_unpack_ext_hook", True) is False
            and _lcmessages.available()
        )

    def _decode_items(self, datas: list[bytes]) -> list[Any]:
        """The items of item blobs (each a serialized one-item list), decoded in one call
        when they are msgpack: one array of every item. LangChain messages in the form
        LangGraph's serializer wrote them are built by ``_lcmessages`` (what the serializer
        would give, without its per-message import and validation); anything else by the
        serializer."""
        if self._plain_messages() and all(d[:1] == b"\x91" for d in datas):
            # One native call for every item; only the items it refuses go to the serializer.
            not_plain = _lcmessages.NOT_PLAIN
            items = _lcmessages.decode_each(datas)
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
                        if old.get("d", 0) + 1 >= SNAPSHOT_LINKS and kept is None:
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
            for bid, data in zip(item_ids, item_blobs):
                self._item_bytes.add(bid, data)
            if fresh_items:
                # Decoded now, from the bytes just stored (what a read would decode), and
                # handed out as they are by the next read of an item (which then owns it):
                # the first read of the latest state decodes nothing (one decode per item,
                # spread over the steps, in LangGraph's background thread).
                ready = self._put_decoded
                datas_of = dict(fresh_items)
                fresh_ids = [b for b in datas_of if b not in self._decoded and b not in ready]
                for bid, obj in zip(fresh_ids, self._decode_items([datas_of[b] for b in fresh_ids])):
                    ready.add(bid, obj, len(datas_of[bid]))
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
        k = 0
        if prev_items is not None:
            same = list(map(operator.is_, prev_items, value))
            k = same.index(False) if False in same else len(same)
            if written and k:
                kept = set(map(id, prev_items[:k]))
                hit = {i for i in written if i in kept}
                if hit:
                    k = next(i for i in range(k) if id(value[i]) in hit)
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
