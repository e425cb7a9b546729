"""Drop-in replacement for the Agents SDK's ``tests/utils/simple_session.py``.

The SDK's runner tests use ``SimpleListSession`` (and two subclasses) as their session.
This version keeps the same classes and constructor signatures but stores every item in
an Undertext store through ``undertext.agents.UndertextSession``: each instance is its own
chat in one store per test process. ``saved_items`` is a write-through list: reading it
reads the store, changing it changes the store.

The original class has no compaction hook (``_get_compaction_snapshot``), and the SDK
takes another path when a session has one: with it, automatic compaction may replace a
matched suffix; without it, it compacts only a completely matched history. The SDK's
compaction tests assert the second behaviour for this class, so the replacement hides the
hook to keep the class's surface what the tests were written against. The hook itself is
checked against ``SQLiteSession``'s in ``tests/test_agents_session.py``.
"""

from __future__ import annotations

import atexit
import itertools
import shutil
import tempfile
import threading
from collections.abc import Iterable, MutableSequence
from typing import Any, cast

import undertext
from agents.items import TResponseInputItem
from agents.memory.session_settings import SessionSettings
from undertext.agents import UndertextSession

_STORE: Any = None
_STORE_GUARD = threading.Lock()
_COUNTER = itertools.count()


def _store() -> Any:
    global _STORE
    with _STORE_GUARD:
        if _STORE is None:
            path = tempfile.mkdtemp(prefix="undertext-sdk-tests-")
            _STORE = undertext.Store.open(path)

            def _close() -> None:
                _STORE.close()
                shutil.rmtree(path, ignore_errors=True)

            atexit.register(_close)
        return _STORE


class _SavedItems(MutableSequence):
    """A list view of a session's items: reads and writes go to the store."""

    def __init__(self, session: UndertextSession) -> None:
        self._session = session

    def _all(self) -> list[Any]:
        return self._session.get_items_sync(None)

    def __len__(self) -> int:
        return len(self._all())

    def __getitem__(self, index: Any) -> Any:
        return self._all()[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        items = self._all()
        items[index] = value
        self._session.replace_all_sync(items)

    def __delitem__(self, index: Any) -> None:
        items = self._all()
        del items[index]
        self._session.replace_all_sync(items)

    def insert(self, index: int, value: Any) -> None:
        items = self._all()
        items.insert(index, value)
        self._session.replace_all_sync(items)

    def append(self, value: Any) -> None:
        self._session.add_items_sync([value])

    def extend(self, values: Iterable[Any]) -> None:
        self._session.add_items_sync(list(values))

    def clear(self) -> None:
        self._session.clear_session_sync()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, _SavedItems)):
            return self._all() == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return repr(self._all())


class SimpleListSession(UndertextSession):
    """A session for tests, stored in Undertext (one chat per instance)."""

    session_settings: SessionSettings | None = None
    _get_compaction_snapshot = None  # type: ignore[assignment]  # see the module docstring

    def __init__(
        self,
        session_id: str = "test",
        history: list[TResponseInputItem] | None = None,
    ) -> None:
        # Each instance is its own owner, so two instances with the same id never share.
        super().__init__(session_id, _store(), owner=f"sdk-test-{next(_COUNTER)}")
        self.session_settings = None
        if history:
            self.add_items_sync(list(history))
        # Some session implementations strip IDs on write; tests can opt-in via attribute.
        self._ignore_ids_for_matching = False
        # The original keeps its items in ``_items`` and mirrors them as ``saved_items`` (one
        # list); tests read both, so both are the same write-through view here.
        self._items = cast(list[TResponseInputItem], _SavedItems(self))
        self.saved_items = self._items


class CountingSession(SimpleListSession):
    """Session that tracks how many times pop_item is invoked (for rewind tests)."""

    def __init__(
        self,
        session_id: str = "test",
        history: list[TResponseInputItem] | None = None,
    ) -> None:
        super().__init__(session_id=session_id, history=history)
        self.pop_calls = 0

    async def pop_item(self) -> TResponseInputItem | None:
        self.pop_calls += 1
        return await super().pop_item()


class IdStrippingSession(CountingSession):
    """Session that strips IDs on add to mimic hosted stores that reassign IDs."""

    def __init__(
        self,
        session_id: str = "test",
        history: list[TResponseInputItem] | None = None,
    ) -> None:
        super().__init__(session_id=session_id, history=history)
        self._ignore_ids_for_matching = True

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        sanitized: list[TResponseInputItem] = []
        for item in items:
            if isinstance(item, dict):
                clean = dict(item)
                clean.pop("id", None)
                sanitized.append(cast(TResponseInputItem, clean))
            else:
                sanitized.append(item)
        await super().add_items(sanitized)
