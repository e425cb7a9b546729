"""Lazy channel values: checkpoints returned by UndertextSaver read a channel value from
the store only when it is first accessed, and behave as plain dicts for every
Python-level use; C readers of dict storage (ormsgpack) fail rather than write a
stand-in; a value touched after the store closed raises undertext.Closed."""

from __future__ import annotations

import copy
import json
import os
import pickle
from pathlib import Path
from typing import Any, Callable

import pytest

if os.environ.get("UNDERTEXT_REQUIRE_INTEGRATIONS") != "1":  # scripts/test-python-integrations sets it
    pytest.importorskip("langgraph.checkpoint.base", reason="run scripts/test-python-integrations")

import ormsgpack
from langgraph.checkpoint.base import copy_checkpoint, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

import undertext
from undertext.langgraph import LazyChannelValues, UndertextSaver

# Keys in sorted order: the order the saver returns channels in (its manifest is sorted).
VALUES: dict[str, Any] = {
    "count": 7,
    "empty": None,
    "messages": [{"role": "user", "content": "x" * 2000}, {"role": "assistant", "content": "y" * 3000}],
    "note": "plain text",
}


def cfg(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}


def put(saver: UndertextSaver, thread: str, parent: str | None, values: dict[str, Any], step: int = 0) -> str:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=-1))
    cp["channel_values"] = dict(values)
    cp["channel_versions"] = {ch: step + 1 for ch in values}
    stored = saver.put(cfg(thread, parent), cp, {"source": "loop", "step": step}, dict(cp["channel_versions"]))
    return stored["configurable"]["checkpoint_id"]


def reads(store: Any) -> int:
    return int(store.stats()["blob_bodies_read"])


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with undertext.Store.open(tmp_path / "store") as s:
        yield s


@pytest.fixture
def saver(store: Any) -> UndertextSaver:
    s = UndertextSaver(store)
    put(s, "t", None, VALUES)
    return s


def lazy(saver: UndertextSaver) -> LazyChannelValues:
    t = saver.get_tuple(cfg("t"))
    values = t.checkpoint["channel_values"]
    assert type(values) is LazyChannelValues
    return values


def test_list_of_a_long_thread_reads_no_value_until_one_is_accessed(store: Any) -> None:
    saver = UndertextSaver(store)
    parent = None
    state: list[str] = []
    for i in range(150):
        state.append(f"message {i} " + "z" * 500)
        parent = put(saver, "long", parent, {"messages": list(state)}, step=i)
    before = reads(store)
    listed = list(saver.list(cfg("long"), limit=100))
    latest = saver.get_tuple(cfg("long"))
    assert len(listed) == 100 and latest is not None
    assert reads(store) == before, "list and get_tuple read value blobs nobody accessed"
    assert listed[5].checkpoint["channel_values"]["messages"] == state[:145]
    after_one = reads(store)
    assert after_one > before
    assert listed[5].checkpoint["channel_values"]["messages"] == state[:145]  # kept: no second read
    assert reads(store) == after_one
    assert latest.checkpoint["channel_values"]["messages"] == state


# Each operation on a lazy dict gives what it gives on a plain dict of the same values.
OPERATIONS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "getitem": lambda d: d["messages"],
    "get": lambda d: (d.get("count"), d.get("missing"), d.get("missing", 5)),
    "in": lambda d: ("note" in d, "missing" in d),
    "len": len,
    "iter": list,
    "keys": lambda d: list(d.keys()),
    "values": lambda d: list(d.values()),
    "items": lambda d: list(d.items()),
    "reversed items": lambda d: list(reversed(d.items())),
    "reversed values": lambda d: list(reversed(d.values())),
    "eq plain on the right": lambda d: (d == dict(VALUES), d == {**VALUES, "count": 8}, d != dict(VALUES)),
    "eq plain on the left": lambda d: (dict(VALUES) == d, {"count": 7} == d, dict(VALUES) != d),
    "eq inside a containing dict": lambda d: {"channel_values": d} == {"channel_values": dict(VALUES)},
    "copy": lambda d: d.copy(),
    "copy.copy": copy.copy,
    "dict()": dict,
    "{**d}": lambda d: {**d},
    "f(**d)": lambda d: (lambda **kw: kw)(**d),
    "d | other": lambda d: d | {"count": 1, "extra": 2},
    "other | d": lambda d: {"count": 1, "extra": 2} | d,
    "plain.update(d)": lambda d: (lambda p: (p.update(d), p)[1])({"extra": 2}),
    "d.update(plain)": lambda d: (d.update({"count": 9}, extra=1), dict(d))[1],
    "|=": lambda d: dict(_ior(d)),
    "pop": lambda d: (d.pop("messages"), d.pop("missing", "dflt"), sorted(d)),
    "popitem": lambda d: (d.popitem(), len(d)),
    "setdefault": lambda d: (d.setdefault("count", 0), d.setdefault("new", 3), dict(d)),
    "del": lambda d: (d.__delitem__("note"), dict(d))[1],
    "setitem": lambda d: (d.__setitem__("count", 8), d["count"], dict(d))[1:],
    "repr": repr,
    "str": str,
    "pickle": lambda d: pickle.loads(pickle.dumps(d)),
    "deepcopy": copy.deepcopy,
    "json.dumps": lambda d: json.dumps(d),
    "json.dumps sort_keys": lambda d: json.dumps(d, sort_keys=True, indent=1),
    "sorted items": lambda d: sorted(d.items(), key=lambda kv: kv[0]),
    "isinstance dict": lambda d: isinstance(d, dict),
}


def _ior(d: dict[str, Any]) -> dict[str, Any]:
    d |= {"count": 0}
    return d


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_every_dict_operation_sees_the_real_values(saver: UndertextSaver, name: str) -> None:
    op = OPERATIONS[name]
    expected = op(dict(VALUES))
    got = op(lazy(saver))
    assert got == expected
    if isinstance(expected, dict):
        assert dict(got) == expected  # and the result is a dict with real values
        assert all(not type(v).__name__.startswith("Unloaded") for v in dict.values(got))


def test_copy_and_copy_checkpoint_stay_lazy_and_share_loaded_values(store: Any, saver: UndertextSaver) -> None:
    t = saver.get_tuple(cfg("t"))
    before = reads(store)
    copied = copy_checkpoint(t.checkpoint)  # LangGraph's own copy, used before each run
    again = t.checkpoint["channel_values"].copy()
    assert type(copied["channel_values"]) is LazyChannelValues and type(again) is LazyChannelValues
    assert reads(store) == before, "a copy loaded values"
    # As with dict.copy, copies share value objects: one load serves both.
    assert copied["channel_values"]["messages"] is t.checkpoint["channel_values"]["messages"]
    assert again["messages"] is copied["channel_values"]["messages"]
    # A key set in the copy does not reach the original.
    again["count"] = 99
    assert t.checkpoint["channel_values"]["count"] == 7


def test_deepcopy_stays_lazy_and_is_independent(store: Any, saver: UndertextSaver) -> None:
    values = lazy(saver)
    loaded = values["messages"]  # one value loaded before the copy, the others not
    before = reads(store)
    deep = copy.deepcopy(values)
    assert type(deep) is LazyChannelValues
    assert reads(store) == before, "deepcopy loaded values that were not loaded"
    assert deep == values
    assert deep["messages"] is not loaded and deep["messages"] == loaded
    deep["messages"].append({"role": "user", "content": "only in the copy"})
    assert values["messages"] == VALUES["messages"]


def test_ormsgpack_never_writes_an_unloaded_value(saver: UndertextSaver) -> None:
    # ormsgpack (and LangGraph's JsonPlusSerializer over it) reads a dict's storage
    # directly, past every Python method: a value not loaded yet must fail, not be written.
    values = lazy(saver)
    with pytest.raises(TypeError, match="UnloadedChannelValue"):
        ormsgpack.packb(values)
    t = saver.get_tuple(cfg("t"))
    with pytest.raises(TypeError, match="UnloadedChannelValue"):
        JsonPlusSerializer().dumps_typed(t.checkpoint)
    # Once loaded (load_all, or every value read), the storage holds the real values.
    assert ormsgpack.packb(values.load_all()) == ormsgpack.packb(dict(VALUES))


def test_the_error_of_a_c_serializer_meeting_an_unloaded_value_says_what_to_do(saver: UndertextSaver) -> None:
    import orjson

    for dump in (ormsgpack.packb, orjson.dumps, lambda v: JsonPlusSerializer().dumps_typed({"channel_values": v})):
        with pytest.raises(TypeError) as e:
            dump(lazy(saver))
        assert "load_all()" in str(e.value) and "lazy=False" in str(e.value), str(e.value)


@pytest.mark.parametrize("how", ["load_all", "every value read", "lazy=False"])
def test_serde_dumps_typed_of_a_returned_checkpoint_round_trips_the_real_values(store: Any, how: str) -> None:
    saver = UndertextSaver(store, lazy=how != "lazy=False")
    cid = put(saver, "t", None, VALUES)
    checkpoint = saver.get_tuple(cfg("t")).checkpoint
    if how == "load_all":
        checkpoint["channel_values"].load_all()
    elif how == "every value read":
        list(checkpoint["channel_values"].values())
    else:
        assert type(checkpoint["channel_values"]) is dict
    serde = JsonPlusSerializer()
    back = serde.loads_typed(serde.dumps_typed(checkpoint))
    assert back["channel_values"] == VALUES and back["id"] == cid


def test_a_value_touched_after_the_store_closed_raises_closed_naming_it(tmp_path: Path) -> None:
    with undertext.Store.open(tmp_path / "s") as store:
        saver = UndertextSaver(store)
        cid = put(saver, "t", None, VALUES)
        values = saver.get_tuple(cfg("t")).checkpoint["channel_values"]
        assert values["count"] == 7  # loaded while open: kept
    assert values["count"] == 7
    assert "messages" in values and len(values) == len(VALUES)  # keys need no store
    with pytest.raises(undertext.Closed, match=rf"channel value 'messages' of checkpoint {cid}.*lazy=False"):
        values["messages"]
    with pytest.raises(undertext.Closed):
        list(values.values())


def test_a_returned_checkpoint_put_again_stores_its_values(store: Any, saver: UndertextSaver) -> None:
    t = saver.get_tuple(cfg("t"))
    cp = copy_checkpoint(t.checkpoint)
    cp["id"] = str(uuid6(clock_seq=-1))
    versions = {ch: 2 for ch in VALUES}
    cp["channel_versions"] = dict(versions)
    saver.put(cfg("copy"), cp, {"source": "fork", "step": 1}, versions)
    assert saver.get_tuple(cfg("copy")).checkpoint["channel_values"] == VALUES


@pytest.mark.asyncio
async def test_async_reads_load_every_value_in_their_worker_thread(store: Any, saver: UndertextSaver) -> None:
    # The event loop must never read the store: aget_tuple and alist hand back values the
    # worker thread loaded, so even ormsgpack (which reads dict storage) sees real values.
    got = await saver.aget_tuple(cfg("t"))
    listed = [t async for t in saver.alist(cfg("t"))]
    before = reads(store)
    for t in (got, *listed):
        assert ormsgpack.packb(t.checkpoint["channel_values"]) == ormsgpack.packb(dict(VALUES))
        assert t.checkpoint["channel_values"] == VALUES
    assert reads(store) == before, "a value was read on the event loop"


def test_threads_touching_one_unloaded_value_get_one_object(saver: UndertextSaver) -> None:
    import threading

    values = lazy(saver)
    copies = [values.copy() for _ in range(8)]  # share the stand-in, as dict.copy shares values
    got: list[Any] = [None] * 8
    start = threading.Barrier(8)

    def touch(i: int) -> None:
        start.wait()
        got[i] = copies[i]["messages"]

    threads = [threading.Thread(target=touch, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(g is got[0] for g in got), "two threads loaded the same value into two objects"
    assert got[0] == VALUES["messages"] and values["messages"] is got[0]
