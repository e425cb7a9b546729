"""A LangGraph long-term memory store (``BaseStore``) over an Undertext store.

``UndertextStore`` implements ``langgraph.store.base.BaseStore``: namespaced JSON items
(``put``, ``get``, ``delete``), ``search`` under a namespace prefix with a value filter,
``limit`` and ``offset``, ``list_namespaces`` (prefix, suffix, ``"*"``, ``max_depth``,
``limit``, ``offset``), all through ``batch``/``abatch`` as the base class routes them.

* **Layout** (``undertext._store_items``): one chat per namespace, one message per item, its
  record an attachment blob and its searchable text the message's text; every put of a
  batch to one namespace is one transaction, and what it replaces or deletes is erased
  (no read returns it; ``Store.gc`` drops its bytes).
* **Search with a query** ranks by the engine's full-text search over the items' text
  (``put``'s ``index`` chooses the fields: by default every string and number of the
  value; ``index=False``: none): matching items first, best first, with their ``score``;
  then the others, newest first, ``score`` None. A query orders, it does not exclude (as a
  vector search ranks every item). There is no vector search: a store is made without
  ``index`` configuration, and ranking looks at the best 10,000 hits.
* **A batch** answers its reads (``get``, ``search``, ``list_namespaces``) from the state
  before its writes, then applies its puts and deletes (of two for one key, the last),
  as the SQLite and in-memory stores do. Every op is checked first: an invalid namespace
  label (``InvalidNamespaceError``), an empty namespace to put in, a value that is not a
  JSON object (``TypeError``/``ValueError``: JSON has no ``NaN``), an unsupported filter
  operator (``ValueError``) or a ``ttl`` (``NotImplementedError``: items do not expire)
  rejects the whole batch before anything is written.
* **Values are JSON**: what a read returns is the value's JSON read back (a tuple comes
  back a list), a fresh copy each time.

One process writes a store; every ``UndertextStore`` of the process on one store and
owner shares one in-memory copy of the owner's items (read at the first use: each
namespace chat's live messages and their record blobs), from which reads answer.
``abatch`` runs ``batch`` in a worker thread (``asyncio.to_thread``); the engine releases
the GIL while it works.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any, Optional

from ._extras import needs_extra

try:
    from langgraph.store.base import BaseStore, GetOp, InvalidNamespaceError, Item, ListNamespacesOp, Op
    from langgraph.store.base import PutOp, Result, SearchItem, SearchOp, validate_op_namespace
except ImportError as e:  # pragma: no cover - exercised without LangGraph installed
    what = "LangGraph's checkpoint package"
    raise needs_extra("langgraph_store", what, "langgraph", "langgraph-checkpoint", e) from e

import undertext

from ._holder import PathLike, StoreHolder, temporary_store
from ._json_text import json_text
from ._per_owner import shared
from ._store_items import Entry, Items, Write, search_text
from ._store_query import compile_filter, namespace_matches

__all__ = ["UndertextStore"]

#: Hits the engine's search returns at the most (its limit).
SEARCH_HITS = 10_000


def _time(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1e6, tz=timezone.utc)


def _item(namespace: tuple[str, ...], key: str, e: Entry) -> Item:
    return Item(
        value=json.loads(e.text), key=key, namespace=namespace, created_at=_time(e.created), updated_at=_time(e.updated)
    )


def _put_write(op: PutOp) -> Write:
    """The write of a put: its value's JSON and searchable text (raising what the value
    makes impossible)."""
    if not op.namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    if op.ttl is not None:
        raise NotImplementedError(
            "UndertextStore does not support TTL (items do not expire): put with ttl=None"
        )
    if op.value is None:
        return (str(op.key), None, "", "")
    if not isinstance(op.value, Mapping):
        raise TypeError(f"value of {op.namespace}/{op.key}: expected a dict, found {type(op.value).__name__}")
    value = dict(op.value)
    try:
        text = json_text(value, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise type(e)(f"value of {op.namespace}/{op.key}: not JSON ({e}); nothing was written") from e
    return (str(op.key), json.loads(text), text, search_text(value, op.index))


class UndertextStore(StoreHolder, BaseStore):
    """LangGraph ``BaseStore`` keeping namespaced items in an Undertext store.

    Args:
        store: an open ``undertext.Store`` (shared: not closed by this object) or a path
            (``str`` or ``os.PathLike``): a store opened there, owned and closed by
            ``close()``.
        owner: the engine owner of the namespace chats (two owners' items never meet).

    Example::

        with UndertextStore.open("state") as memories:
            memories.put(("users", "alice"), "food", {"likes": "coffee, black"})
            graph = builder.compile(store=memories)
            memories.search(("users", "alice"), query="coffee")

    ``UndertextStore.temporary()`` for tests (the store is removed on ``close()``).
    """

    def __init__(self, store: Any, *, owner: str = "langgraph-store") -> None:
        self._hold(store)
        self.owner = owner
        self._items = shared(Items, self.store, owner)

    @classmethod
    def open(cls, path: PathLike, *, owner: str = "langgraph-store", **store_options: Any) -> UndertextStore:
        """Opens (or creates) a store at ``path`` with ``store_options`` (those of
        ``undertext.Store.open``), owned by the returned object."""
        return cls(undertext.Store.open(path, **store_options), owner=owner)._adopt()

    @classmethod
    def temporary(cls, *, owner: str = "langgraph-store", **store_options: Any) -> UndertextStore:
        """A store in a new temporary directory, removed by ``close()`` (for tests)."""
        store, d = temporary_store(store_options)
        return cls(store, owner=owner)._adopt(d)

    # -- BaseStore ----------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Runs ``ops``: every op checked, the reads answered, then the writes applied."""
        ops = list(ops)
        writes: dict[tuple[str, ...], dict[str, Write]] = {}
        filters = {}
        for i, op in enumerate(ops):
            validate_op_namespace(op)
            if isinstance(op, PutOp):
                w = _put_write(op)
                writes.setdefault(tuple(op.namespace), {}).pop(w[0], None)
                writes[tuple(op.namespace)][w[0]] = w
            elif isinstance(op, SearchOp):
                filters[i] = compile_filter(op.filter)
            elif not isinstance(op, (GetOp, ListNamespacesOp)):
                raise ValueError(f"unknown operation type: {type(op).__name__}")
        items = self._items
        with items.lock:
            if self.store.closed:
                raise undertext.Closed("the store of this UndertextStore is closed")
            results: list[Result] = []
            for i, op in enumerate(ops):
                if isinstance(op, GetOp):
                    results.append(self._get(tuple(op.namespace), str(op.key)))
                elif isinstance(op, SearchOp):
                    results.append(self._search(op, filters[i]))
                elif isinstance(op, ListNamespacesOp):
                    results.append(self._list_namespaces(op))
                else:
                    results.append(None)
            for namespace, by_key in writes.items():
                items.write(namespace, list(by_key.values()))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` in a worker thread."""
        return await asyncio.to_thread(self.batch, list(ops))

    # -- reads --------------------------------------------------------------------------

    def _get(self, namespace: tuple[str, ...], key: str) -> Optional[Item]:
        space = self._items.spaces.get(namespace)
        e = space.items.get(key) if space is not None else None
        return None if e is None else _item(namespace, key, e)

    def _search(self, op: SearchOp, keep: Any) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        n = len(prefix)
        found = [
            (ns, key, e)
            for ns, space in self._items.spaces.items()
            if ns[:n] == prefix
            for key, e in space.items.items()
            if keep(e.value)
        ]
        found.sort(key=lambda f: (-f[2].updated, f[0], f[1]))
        scores = self._scores(op.query, prefix) if op.query and op.query.strip() else {}
        if scores:  # the hit items first, best first; the order above among the others
            found.sort(key=lambda f: (0, -scores[f[0], f[1]]) if (f[0], f[1]) in scores else (1, 0.0))
        page = found[op.offset : op.offset + op.limit]
        return [
            SearchItem(
                namespace=ns,
                key=key,
                value=json.loads(e.text),
                created_at=_time(e.created),
                updated_at=_time(e.updated),
                score=scores.get((ns, key)),
            )
            for ns, key, e in page
        ]

    def _scores(self, query: str, prefix: tuple[str, ...]) -> dict[tuple[tuple[str, ...], str], float]:
        """The best full-text score of each live item under ``prefix`` that ``query`` hits."""
        spaces = self._items.spaces
        under = [ns for ns in spaces if ns[: len(prefix)] == prefix]
        if not under:
            return {}
        # One namespace: search its chat only; else the owner's chats, keeping those under.
        chat = spaces[under[0]].chat.id if len(under) == 1 else None
        out: dict[tuple[tuple[str, ...], str], float] = {}
        for hit in self.store.search(self.owner, query, chat=chat, limit=SEARCH_HITS):
            ns = self._items.by_chat.get(hit["chat"])
            if ns is None or ns[: len(prefix)] != prefix:
                continue
            key = spaces[ns].keys.get(hit["seq"])
            if key is not None and hit["score"] > out.get((ns, key), float("-inf")):
                out[(ns, key)] = float(hit["score"])
        return out

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = [(c.match_type, tuple(c.path)) for c in op.match_conditions or ()]
        names = {
            ns if op.max_depth is None else ns[: op.max_depth]
            for ns, space in self._items.spaces.items()
            if space.items and namespace_matches(ns, conditions)
        }
        return sorted(names)[op.offset : op.offset + op.limit]
