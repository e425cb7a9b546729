"""One object per open store and owner in the process, shared by every adapter object on them.

A store has one process; what an adapter keeps in memory about an owner's chats (which chat
is which session, the items of a namespace) is kept once, so that two adapter objects on
one store see each other's writes. ``shared(cls, store, owner)`` makes ``cls(store, owner)``
at the first call and returns that object until the store closes.

Example::

    class _Sessions:
        def __init__(self, store, owner): ...

    sessions = shared(_Sessions, store, "alice")
    assert shared(_Sessions, store, "alice") is sessions
"""

from __future__ import annotations

import threading
from typing import Any, TypeVar

__all__ = ["shared"]

_T = TypeVar("_T")

# (class, id(store), owner) -> (store, object). The store is held: its id cannot be reused
# while the entry lives.
_ALL: dict[tuple[type, int, str], tuple[Any, Any]] = {}
_GUARD = threading.Lock()


def shared(cls: type[_T], store: Any, owner: str) -> _T:
    """The process's one ``cls(store, owner)`` for this open store and owner (entries of
    closed stores are dropped on the way)."""
    with _GUARD:
        for k in [k for k, (s, _o) in _ALL.items() if s.closed]:
            del _ALL[k]
        key = (cls, id(store), owner)
        entry = _ALL.get(key)
        if entry is None:
            entry = _ALL[key] = (store, cls(store, owner))  # type: ignore[call-arg,unused-ignore]
        return entry[1]  # type: ignore[no-any-return,unused-ignore]
