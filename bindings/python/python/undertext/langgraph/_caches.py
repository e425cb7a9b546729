"""The saver's caches of item-list items, and the copies it hands out of what they hold.

An item of an item list (``FORMAT.md``) is decoded once and kept by blob id: a read hands
out copies (``_fresh``), never the cached object, so a caller changing what it got changes
no later answer. ``_ItemCache`` holds the items, the items a ``put`` decoded ahead of the
first read, and the bytes of the items stored lately; ``_Bounded`` and ``_Bytes`` bound
them (by entries, by bytes).
"""

from __future__ import annotations

import copy as _copy
from collections.abc import Iterable
from typing import Any, Callable, Optional

from . import _langchain_decode
from ._records import _SCALARS

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
try:  # the same copy in native code (``bindings/python/src/langchain_decode.rs``)
    from undertext._native import _fresh_items

    _native_fresh = _fresh_items
except ImportError:  # pragma: no cover - an extension built before it
    _native_fresh = None


def _fresh_many(xs: list[Any]) -> list[Any]:
    """``_fresh`` of each of ``xs`` in one native call (601 LangChain messages: 1.70-1.95 ms in
    Python, 0.71-1.17 ms native when measured)."""
    if _native_fresh is None or _PYDANTIC_DEEPCOPY is None or len(xs) < _langchain_decode.NATIVE_MIN:
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


_MISSING: Any = object()

#: New items a saver decodes in one call after putting them (``_ItemCache.stored``): from 8
#: up the native decoder takes them (``_langchain_decode.NATIVE_MIN``), whose set-up is
#: shared by the batch; the first read after a put decodes at most this many less one.
PREDECODE_BATCH = 32


class _ItemCache:
    """The items of item lists a saver decoded or stored, by blob id."""

    def __init__(self) -> None:
        # Items of item lists decoded from the store, by blob id: never handed out (a
        # returned value gets a copy), so a caller changing what it got changes nothing here.
        self.decoded: _Bounded = _Bounded(16384)
        # Items decoded once and handed out as they were (a first read costs one decode,
        # as with LangGraph's savers): the second read of an item caches it.
        self.read_once: _Bounded = _Bounded(65536)
        # Items this saver put, decoded from their stored bytes after they were put and not
        # handed out yet: the first read of each takes it (no decode, no copy).
        # (Bounded by the items' serialized bytes.)
        self.put_decoded = _Bytes(16 << 20)
        # Items put and not decoded yet, ``(id, bytes)``: decoded ``PREDECODE_BATCH`` at a time
        # (one call), or by the next read, before it looks for its items.
        self.pending: list[tuple[str, bytes]] = []
        # The bytes of the item blobs this saver stored lately (what a read of the latest
        # state decodes first), so that reading them back needs no store read.
        self.item_bytes = _Bytes(32 << 20)

    def items(
        self,
        ids: tuple[str, ...],
        memo: dict[str, Any],
        read: Callable[[list[str]], list[bytes]],
        decode: Callable[[list[bytes]], list[Any]],
    ) -> list[Any]:
        """The items of blobs ``ids`` (an item list's value): each decoded once
        (``decode``, of the bytes ``read`` from the store when not kept here) and copied into
        the answer; ``memo`` shares the copies between the values of one call (the
        checkpoints of one ``list`` share the items of their common prefix)."""
        if self.pending:
            self._predecode(decode)
        decoded = self.decoded
        missing = [b for b in ids if b not in memo and b not in decoded]
        new: dict[str, Any] = {}
        if missing:
            missing = list(dict.fromkeys(missing))
            ready = self.put_decoded
            for b in missing:
                if b in ready:  # decoded when put and never handed out: this read's own
                    new[b] = ready.take(b)
            if len(new) < len(missing):
                missing = [b for b in missing if b not in new]
                kept = self.item_bytes
                absent = [b for b in missing if b not in kept]
                # Read in one call (after a reopen: every item of the state).
                got = dict(zip(absent, read(absent))) if absent else {}
                datas = [kept[b] if b in kept else got[b] for b in missing]
                new.update(zip(missing, decode(datas)))
            once = self.read_once
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

    def stored(
        self,
        blobs: Iterable[tuple[str, bytes]],
        fresh_items: list[tuple[str, bytes]],
        decode: Callable[[list[bytes]], list[Any]],
    ) -> None:
        """Keeps the bytes of the item blobs a ``put`` stored (``(id, bytes)`` pairs), and
        its new items (``fresh_items``, the same pairs) to decode.

        The new items are decoded from the bytes just stored (what a read would decode) and
        handed out as they are by the next read of an item (which then owns it), so the
        first read of the latest state decodes at most one batch: ``PREDECODE_BATCH`` at a
        time, in one call, in LangGraph's background thread. (Decoding each put's one or two
        new messages on their own cost ~40 us a put, the Python path for a few; a batch
        goes through the native decoder.)"""
        for bid, data in blobs:
            self.item_bytes.add(bid, data)
        if fresh_items:
            self.pending.extend(fresh_items)
            if len(self.pending) >= PREDECODE_BATCH:
                self._predecode(decode)

    def _predecode(self, decode: Callable[[list[bytes]], list[Any]]) -> None:
        """Decodes the pending new items into ``put_decoded`` (those not decoded already)."""
        pending, self.pending = self.pending, []
        ready = self.put_decoded
        datas_of = dict(pending)
        fresh_ids = [b for b in datas_of if b not in self.decoded and b not in ready]
        if fresh_ids:
            for bid, obj in zip(fresh_ids, decode([datas_of[b] for b in fresh_ids])):
                ready.add(bid, obj, len(datas_of[bid]))
