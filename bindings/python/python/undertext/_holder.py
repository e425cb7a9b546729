"""The store an adapter object works on: an open ``Store`` it shares, or one it owns.

An adapter takes an open ``undertext.Store`` (shared with the rest of the process, never
closed by the adapter) or a path (a store opened there with default options, owned: closed
by ``close()``); anything else is a ``TypeError`` saying so. Its ``open(..., **store_options)``
owns a store opened with those options, its ``temporary(...)`` one in a new temporary
directory, removed by ``close()``. ``StoreHolder`` is that part of every adapter.

Example::

    class Adapter(StoreHolder):
        def __init__(self, store, *, owner="me"):
            self._hold(store)

        @classmethod
        def temporary(cls, **store_options):
            store, d = temporary_store(store_options)
            return cls(store)._adopt(d)
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional, TypeVar, Union

import undertext

__all__ = ["StoreHolder", "temporary_store"]

_Self = TypeVar("_Self", bound="StoreHolder")

PathLike = Union[str, "os.PathLike[str]"]


def temporary_store(store_options: dict[str, Any]) -> tuple[Any, str]:
    """A store opened with ``store_options`` in a new temporary directory, and the directory
    (for ``StoreHolder._adopt``)."""
    d = tempfile.mkdtemp(prefix="undertext-")
    try:
        return undertext.Store.open(Path(d) / "store", **store_options), d
    except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise


class StoreHolder:
    """``store``, whether this object closes it, and its temporary directory (if any)."""

    store: Any
    _owns_store = False
    _temp_dir: Optional[str] = None
    _temporary = False  # the store was made by ``temporary`` (and is gone once closed)

    def _hold(self, store: Any) -> None:
        """Takes ``store``: an open ``Store`` (shared) or a path (opened here, owned)."""
        if isinstance(store, (str, os.PathLike)):
            store = undertext.Store.open(store)
            self._owns_store = True
        elif not hasattr(store, "create_chat"):
            raise TypeError(f"store: expected an open undertext.Store or a path, found {type(store).__name__}")
        self.store = store

    def _adopt(self: _Self, temp_dir: Optional[str] = None) -> _Self:
        """Owns the store it holds (``open``); with ``temp_dir``, removes that directory when
        closing (``temporary``)."""
        self._owns_store = True
        if temp_dir is not None:
            self._temp_dir = temp_dir
            self._temporary = True
            self.store._removed_on_close()
        return self

    def close(self) -> None:
        """Closes the store if this object owns it (and removes it if temporary); a shared
        store stays open."""
        if self._owns_store:
            self.store.close()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)
