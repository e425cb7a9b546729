"""UndertextStore: LangGraph's BaseStore (long-term memory) over an Undertext store.

LangGraph's own store tests run against it in scripts/test-python-integrations
(tests/langgraph_store/run_store_suites.py). These prove what the store adds: items survive
a reopen, owners are isolated, a bad batch writes nothing, a query ranks by full-text search,
what is replaced or deleted is erased from the files, a crash between a put's two
transactions loses nothing, values are JSON, and a graph uses it as its store."""

from __future__ import annotations

import math
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("UNDERTEXT_REQUIRE_INTEGRATIONS") != "1":  # scripts/test-python-integrations sets it
    pytest.importorskip("langgraph.store.base", reason="run scripts/test-python-integrations")

from langgraph.store.base import BaseStore, GetOp, InvalidNamespaceError, ListNamespacesOp, PutOp, SearchOp

import undertext
from undertext.langgraph_store import UndertextStore


def files_of(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.rglob("*") if p.is_file())


def test_items_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with UndertextStore.open(path) as memories:
        assert isinstance(memories, BaseStore)
        memories.put(("users", "alice"), "food", {"likes": "coffee", "n": 1})
        memories.put(("users", "alice"), "pet", {"kind": "cat"})
        memories.put(("users", "bob"), "food", {"likes": "tea"})
        memories.put(("users", "bob"), "notes", {"text": "long notes " * 20_000})  # a chunked blob
        memories.delete(("users", "alice"), "pet")
        first = memories.get(("users", "alice"), "food")
        memories.put(("users", "alice"), "food", {"likes": "espresso", "n": 2})
    with UndertextStore.open(path) as memories:
        item = memories.get(("users", "alice"), "food")
        assert item is not None and first is not None
        assert item.value == {"likes": "espresso", "n": 2}
        assert item.created_at == first.created_at and item.updated_at > first.updated_at
        assert isinstance(item.created_at, datetime) and item.created_at.tzinfo is not None
        assert memories.get(("users", "alice"), "pet") is None
        notes = memories.get(("users", "bob"), "notes")
        assert notes is not None and notes.value == {"text": "long notes " * 20_000}
        assert memories.list_namespaces() == [("users", "alice"), ("users", "bob")]
        assert [i.key for i in memories.search(("users",), query="espresso")][:1] == ["food"]


def test_owners_are_isolated(store: Any) -> None:
    alice = UndertextStore(store, owner="alice")
    bob = UndertextStore(store, owner="bob")
    alice.put(("memories",), "secret", {"text": "the vault code is 1234"})
    assert bob.get(("memories",), "secret") is None
    assert bob.search((), query="vault code") == []
    assert bob.list_namespaces() == []
    # Another object on the same store and owner shares the items.
    assert UndertextStore(store, owner="alice").get(("memories",), "secret") is not None


@pytest.mark.parametrize(
    "bad, error, message",
    [
        (PutOp(("ns",), "k", {"x": float("nan")}), ValueError, "not JSON"),
        (PutOp(("ns",), "k", {"x": object()}), TypeError, "not JSON"),
        (PutOp(("ns",), "k", ["not", "a", "dict"]), TypeError, "expected a dict"),  # type: ignore[arg-type]
        (PutOp(("ns",), "k", {"x": 1}, ttl=5.0), NotImplementedError, "does not support TTL"),
        (PutOp((), "k", {"x": 1}), InvalidNamespaceError, "cannot be empty"),
        (PutOp(("a.b",), "k", {"x": 1}), InvalidNamespaceError, "periods"),
        (SearchOp(("ns",), {"x": {"$regex": "a"}}), ValueError, r"unsupported operator '\$regex'"),
        (GetOp(("ns", ""), "k"), InvalidNamespaceError, "empty"),
    ],
)
def test_a_bad_op_rejects_the_whole_batch_before_writing(
    tmp_path: Path, bad: Any, error: type, message: str
) -> None:
    path = tmp_path / "store"
    with UndertextStore.open(path) as memories:
        memories.put(("ns",), "kept", {"v": 1})
        with pytest.raises(error, match=message):
            memories.batch([PutOp(("ns",), "written?", {"v": 2}), PutOp(("ns",), "kept", None), bad])
        assert memories.get(("ns",), "written?") is None
    with UndertextStore.open(path) as memories:
        assert memories.get(("ns",), "written?") is None
        assert memories.get(("ns",), "kept") is not None


def test_a_query_ranks_hits_first_and_index_chooses_what_is_searchable(store: Any) -> None:
    memories = UndertextStore(store)
    memories.put(("m",), "coffee", {"text": "likes strong coffee in the morning", "tag": "drink"})
    memories.put(("m",), "cat", {"text": "has a cat named Miso"})
    memories.put(("m",), "hidden", {"text": "coffee too"}, index=False)
    memories.put(("m",), "tagged", {"text": "coffee", "note": "tea only"}, index=["note"])
    got = memories.search(("m",), query="what coffee does the user like?")
    assert [i.key for i in got[:1]] == ["coffee"] and got[0].score is not None and got[0].score > 0
    # A query orders, it does not exclude: the others follow, newest first, without a score.
    assert [(i.key, i.score) for i in got[1:]] == [("tagged", None), ("hidden", None), ("cat", None)]
    assert [i.key for i in memories.search(("m",), query="tea")][:1] == ["tagged"]
    assert [i.key for i in memories.search(("m",), query="coffee", filter={"tag": "drink"})] == ["coffee"]
    assert [i.key for i in memories.search(("m",), query="coffee", limit=1, offset=1)] == ["tagged"]


def test_filters(store: Any) -> None:
    memories = UndertextStore(store)
    memories.put(("f",), "a", {"n": 1, "ok": True, "user": {"level": "gold"}, "tags": ["x", "y"]})
    memories.put(("f",), "b", {"n": 5, "ok": 1, "name": "zed"})

    def keys(flt: dict[str, Any]) -> list[str]:
        return sorted(i.key for i in memories.search(("f",), filter=flt))

    assert keys({"ok": True}) == ["a"]  # True is not 1
    assert keys({"user.level": "gold"}) == ["a"] and keys({"user": {"level": "gold"}}) == ["a"]
    assert keys({"n": {"$gt": 1, "$lte": 5}}) == ["b"]
    assert keys({"n": {"$ne": 1}}) == ["b"]
    assert keys({"name": {"$gte": "a"}}) == ["b"]
    assert keys({"n": {"$gt": "0"}}) == []  # a number is not ordered against a string
    assert keys({"tags": ["x", "y"]}) == ["a"] and keys({"tags": ["x"]}) == []
    assert keys({"name": None}) == ["a"]  # a missing field reads as None
    assert keys({"n": {"$eq": math.nan}}) == []


def test_values_are_json_and_every_read_is_a_fresh_copy(store: Any) -> None:
    memories = UndertextStore(store)
    memories.put(("v",), "k", {"t": (1, 2), "s": "lone \ud800 surrogate", "d": {"x": [1]}})
    item = memories.get(("v",), "k")
    assert item is not None and item.value == {"t": [1, 2], "s": "lone \ud800 surrogate", "d": {"x": [1]}}
    item.value["d"]["x"].append(2)
    again = memories.get(("v",), "k")
    assert again is not None and again.value["d"] == {"x": [1]}


def test_replaced_and_deleted_values_are_erased_from_the_files(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with UndertextStore.open(path, compression="none") as memories:
        memories.put(("u",), "address", {"text": "OLD-ADDRESS-SECRET"})
        memories.put(("u",), "address", {"text": "new address"})
        memories.put(("u",), "gone", {"text": "DELETED-SECRET"})
        memories.delete(("u",), "gone")
        memories.put(("empty",), "k", {"text": "NAMESPACE-SECRET"})
        memories.delete(("empty",), "k")
        assert memories.list_namespaces() == [("u",)]
        assert memories.search((), query="secret") and all(i.score is None for i in memories.search((), query="secret"))
    raw = files_of(path)
    assert b"OLD-ADDRESS-SECRET" in raw and b"DELETED-SECRET" in raw
    undertext.Store.gc(path)
    raw = files_of(path)
    for secret in (b"OLD-ADDRESS-SECRET", b"DELETED-SECRET", b"NAMESPACE-SECRET"):
        assert secret not in raw
    with UndertextStore.open(path) as memories:
        item = memories.get(("u",), "address")
        assert item is not None and item.value == {"text": "new address"}


def test_a_crash_between_a_puts_two_transactions_loses_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    """A put appends the new record, then erases the one it replaces: a crash in between
    leaves both live; the newer is the item, and the next write erases the older."""
    path = tmp_path / "store"
    with UndertextStore.open(path) as memories:
        memories.put(("c",), "k", {"v": "old"})
        chat_type = type(memories._items.spaces[("c",)].chat)

        def crash(*args: Any, **kwargs: Any) -> None:
            raise OSError("simulated crash before the erasure")

        monkeypatch.setattr(chat_type, "erase", crash, raising=False)
        with pytest.raises(OSError, match="simulated crash"):
            memories.put(("c",), "k", {"v": "new"})
        monkeypatch.undo()
    with UndertextStore.open(path) as memories:
        space = memories._items.spaces[("c",)]
        assert len(space.stale) == 1
        item = memories.get(("c",), "k")
        assert item is not None and item.value == {"v": "new"}
        memories.put(("c",), "other", {"v": 1})
        assert space.stale == []
        chat = memories.store.chat(memories.owner, space.chat.id)
        assert len(list(chat.iter())) == 2


def test_a_batch_reads_before_it_writes_and_the_last_write_of_a_key_wins(store: Any) -> None:
    memories = UndertextStore(store)
    memories.put(("b",), "k", {"v": 0})
    got = memories.batch(
        [
            PutOp(("b",), "k", {"v": 1}),
            GetOp(("b",), "k"),
            PutOp(("b",), "k", {"v": 2}),
            PutOp(("b",), "new", {"v": 3}),
            ListNamespacesOp(),
            PutOp(("b",), "new", None),
        ]
    )
    assert got[1].value == {"v": 0} and got[4] == [("b",)]  # type: ignore[union-attr]
    item = memories.get(("b",), "k")
    assert item is not None and item.value == {"v": 2}
    assert memories.get(("b",), "new") is None


def test_a_closed_store_raises_closed() -> None:
    memories = UndertextStore.temporary()
    memories.put(("x",), "k", {"v": 1})
    memories.close()
    with pytest.raises(undertext.Closed):
        memories.get(("x",), "k")
    with pytest.raises(TypeError, match="store: expected an open undertext.Store or a path, found int"):
        UndertextStore(42)


@pytest.mark.asyncio
async def test_async_calls(store: Any) -> None:
    memories = UndertextStore(store)
    await memories.aput(("a", "b"), "k", {"text": "hello"})
    item = await memories.aget(("a", "b"), "k")
    assert item is not None and item.value == {"text": "hello"}
    assert [i.key for i in await memories.asearch(("a",), query="hello")] == ["k"]
    assert await memories.alist_namespaces(prefix=("a", "*")) == [("a", "b")]
    await memories.adelete(("a", "b"), "k")
    assert await memories.aget(("a", "b"), "k") is None


def test_a_graph_remembers_through_the_store_across_a_reopen(tmp_path: Path) -> None:
    """A LangGraph graph compiled with ``store=`` writes and searches memories from a node;
    a later run (another process: the store reopened) finds them."""
    from typing_extensions import TypedDict

    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        user: str
        text: str
        recalled: list[str]

    def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
        ns = ("memories", state["user"])
        recalled = [i.value["text"] for i in store.search(ns, query=state["text"], limit=3) if i.score]
        store.put(ns, f"m{len(store.search(ns, limit=100))}", {"text": state["text"]})
        return {"recalled": recalled}

    def build(memories: UndertextStore) -> Any:
        g = StateGraph(State)
        g.add_node("remember", remember)
        g.add_edge(START, "remember")
        g.add_edge("remember", END)
        return g.compile(store=memories)

    path = tmp_path / "store"
    with UndertextStore.open(path) as memories:
        graph = build(memories)
        graph.invoke({"user": "ann", "text": "Ann likes hiking in the Alps", "recalled": []})
        graph.invoke({"user": "bob", "text": "Bob likes hiking too", "recalled": []})
    with UndertextStore.open(path) as memories:
        out = build(memories).invoke({"user": "ann", "text": "where does Ann go hiking?", "recalled": []})
        assert out["recalled"] == ["Ann likes hiking in the Alps"]
        assert memories.list_namespaces(prefix=("memories",)) == [("memories", "ann"), ("memories", "bob")]
