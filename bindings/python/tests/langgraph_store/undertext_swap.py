"""pytest plugin: LangGraph's own store tests run against ``UndertextStore``.

Loaded with ``-p undertext_swap`` (this directory on ``PYTHONPATH``) before the test modules
are imported, it puts ``UndertextStore``-backed classes where the tests take their store
from, so the test files run unmodified:

* ``langgraph.store.memory.InMemoryStore`` (langgraph-checkpoint's ``tests/test_store.py``):
  each ``InMemoryStore()`` is an ``UndertextStore`` over a new temporary store;
* ``langgraph.store.sqlite.SqliteStore`` and ``AsyncSqliteStore``
  (langgraph-checkpoint-sqlite's ``tests/test_store.py`` and ``tests/test_async_store.py``):
  ``from_conn_string(":memory:")`` is a temporary store, ``from_conn_string(path)`` a store
  in the directory ``path + ".undertext"`` (removed on exit); ``setup()`` does nothing.

An ``index`` (vector search) configuration is dropped: the vector tests run with a
full-text query instead; those that check the index configuration or vector scores, and
those of the SQLite store's internals, are deselected, each with its reason in
``DESELECTED`` (printed in the summary; ``UNDERTEXT_SWAP_ALL=1`` runs them all).
Every store a test made is closed (and removed) when the test ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import langgraph.store.memory
import undertext
from undertext._holder import temporary_store
from undertext.langgraph_store import UndertextStore

_OPEN: list[UndertextStore] = []

_CONFIG = "checks the vector index configuration (index_config, embeddings): UndertextStore has none"
_EVERY = "expects a similarity score on every indexed item: a full-text query scores only the items it hits"
_SCORES = "compares vector similarity scores (cosine values): full-text scores are another scale"
_HELPERS = "tests the SQLite store's own helpers, not a store (passes whatever the store)"

#: Test name (before any parameter list) -> why it does not apply. Every other test of the
#: suites runs, the vector ones included: with the index configuration dropped, what they
#: check holds for a full-text query (the match ranks first, filters, pages, non-ASCII).
DESELECTED = {
    # both suites
    "test_vector_store_initialization": _CONFIG,
    "test_vector_update_with_embedding": _EVERY,
    "test_async_vector_update_with_embedding": _EVERY,
    "test_embed_with_path": _SCORES,
    # langgraph-checkpoint-sqlite tests/test_store.py and tests/test_async_store.py
    "test_embed_with_path_operation_config": _SCORES,
    "test_scores": _SCORES,
    "test_nonnull_migrations": "checks the SQLite store's schema migrations",
    "test_sql_injection_vulnerability": (
        "expects SQLite's refusal of filter keys that are not SQL-safe (any key is a literal path here)"
    ),
    "test_escape_glob_literal": _HELPERS,
    "test_namespace_match_pattern": _HELPERS,
    "test_list_namespaces_prefix_uses_indexable_condition": _HELPERS,
    "test_no_running_loop": (
        "AsyncSqliteStore's sync methods refuse the event loop's thread; UndertextStore's run there"
    ),
}


def _drop_index(kwargs: dict[str, Any]) -> None:
    kwargs.pop("index", None)
    kwargs.pop("ttl", None)


class _Temporary(UndertextStore):
    def __init__(self, **kwargs: Any) -> None:
        _drop_index(kwargs)
        store, d = temporary_store({})
        super().__init__(store)
        self._adopt(d)
        _OPEN.append(self)


class InMemoryUndertextStore(_Temporary):
    """``InMemoryStore(index=...)``: a temporary ``UndertextStore`` (the index dropped)."""


@contextlib.contextmanager
def _at(conn_string: str) -> Iterator[UndertextStore]:
    if conn_string == ":memory:":
        store: UndertextStore = _Temporary()
        yield store
        store.close()
        return
    path = f"{conn_string}.undertext"
    store = UndertextStore.open(path)
    _OPEN.append(store)
    try:
        yield store
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)


class SqliteUndertextStore(UndertextStore):
    """``SqliteStore.from_conn_string(conn, index=...)``: see the module docstring."""

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(cls, conn_string: str, **kwargs: Any) -> Iterator[UndertextStore]:
        with _at(conn_string) as store:
            store.setup = lambda: None  # type: ignore[attr-defined]
            yield store


class AsyncSqliteUndertextStore(UndertextStore):
    """``AsyncSqliteStore.from_conn_string``: as ``SqliteUndertextStore``, async."""

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(cls, conn_string: str, **kwargs: Any) -> AsyncIterator[UndertextStore]:
        with _at(conn_string) as store:

            async def setup() -> None:
                return None

            store.setup = setup  # type: ignore[attr-defined]
            yield store


langgraph.store.memory.InMemoryStore = InMemoryUndertextStore  # type: ignore[misc]
try:
    import langgraph.store.sqlite

    langgraph.store.sqlite.SqliteStore = SqliteUndertextStore  # type: ignore[misc]
    langgraph.store.sqlite.AsyncSqliteStore = AsyncSqliteUndertextStore  # type: ignore[misc]
except ImportError:  # pragma: no cover - the SQLite suite needs langgraph-checkpoint-sqlite
    pass


def _reason(name: str) -> str | None:
    if os.environ.get("UNDERTEXT_SWAP_ALL") == "1":  # every test, to see which deselected ones pass
        return None
    return DESELECTED.get(name.split("[", 1)[0])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept, dropped = [], []
    for item in items:
        (dropped if _reason(item.name) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
        config._undertext_deselected = dropped  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    dropped = getattr(config, "_undertext_deselected", [])
    if dropped:
        terminalreporter.write_line(f"deselected for UndertextStore ({len(dropped)}):")
        for item in dropped:
            terminalreporter.write_line(f"  {item.nodeid}: {_reason(item.name)}")
    where = os.path.dirname(undertext.__file__)
    terminalreporter.write_line(f"UndertextStore: undertext {undertext.__version__} from {where}")


@pytest.fixture(autouse=True)
def _close_stores() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()
