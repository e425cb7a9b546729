"""Lazy channel values: a checkpoint's ``channel_values`` that reads each value from the
store when it is first accessed.

With ``lazy=True`` (the default) a checkpoint returned by ``get_tuple`` or ``list`` has a
``LazyChannelValues`` as ``channel_values``, a ``dict`` whose values are read from the
store and deserialized when first accessed, so ``list(limit=100)`` of a thread with a 1 MB
state reads no value at all unless the caller looks at one. ``aget_tuple`` and ``alist``
load every value in their worker thread before they return, so that the event loop never
reads the store. ``LazyChannelValues``' docstring gives the one caveat (C extensions that
read a dict's storage directly, such as ``ormsgpack`` and ``orjson``).
"""

from __future__ import annotations

import collections.abc
import copy as _copy
import threading
from collections.abc import Iterable, Iterator
from typing import Any, Callable


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
