"""UndertextSaver behaviour beyond the conformance suite: dedup of channel values, reads
that touch only the newest records, reopening, ordering, async off the event loop."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("UNDERTEXT_REQUIRE_INTEGRATIONS") != "1":  # scripts/test-python-integrations sets it
    pytest.importorskip("langgraph.checkpoint.base", reason="run scripts/test-python-integrations")

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.types import ERROR

import undertext
from undertext.langgraph import UndertextSaver
from undertext.langgraph._lanes import _BATCH


def cfg(thread: str, checkpoint_id: str | None = None, ns: str = "") -> dict[str, Any]:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}


def checkpoint(values: dict[str, Any], versions: dict[str, Any], cid: str | None = None) -> Any:
    cp = empty_checkpoint()
    cp["id"] = cid or str(uuid6(clock_seq=-1))
    cp["channel_values"] = dict(values)
    cp["channel_versions"] = dict(versions)
    return cp


def put(saver: UndertextSaver, thread: str, parent: str | None, values: dict[str, Any], versions: dict[str, Any],
        new: dict[str, Any], step: int = 0, cid: str | None = None) -> str:
    stored = saver.put(cfg(thread, parent), checkpoint(values, versions, cid), {"source": "loop", "step": step}, new)
    return stored["configurable"]["checkpoint_id"]


def log_bytes(store: Any) -> int:
    return int(store.stats()["log_bytes"])


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with undertext.Store.open(tmp_path / "store") as s:
        yield s


def test_an_unchanged_channel_value_is_stored_once_across_checkpoints_and_threads(store: Any) -> None:
    saver = UndertextSaver(store)
    big = os.urandom(200_000)  # incompressible: only dedup can keep it from being written again
    c1 = put(saver, "a", None, {"doc": big, "n": 1}, {"doc": 1, "n": 1}, {"doc": 1, "n": 1})
    after_first = log_bytes(store)
    assert after_first > len(big)
    # The next checkpoint changes only n; the thread "b" writes the same document as new.
    put(saver, "a", c1, {"doc": big, "n": 2}, {"doc": 1, "n": 2}, {"n": 2}, step=1)
    put(saver, "b", None, {"doc": big}, {"doc": 1}, {"doc": 1})
    growth = log_bytes(store) - after_first
    assert growth < 20_000, f"{growth} bytes written for two checkpoints sharing a 200 KB value"
    assert saver.get_tuple(cfg("b")).checkpoint["channel_values"]["doc"] == big
    latest_a = saver.get_tuple(cfg("a"))
    assert latest_a.checkpoint["channel_values"] == {"doc": big, "n": 2}


def test_each_put_and_put_writes_with_new_values_is_one_log_sync(store: Any) -> None:
    saver = UndertextSaver(store)
    parent = put(saver, "t", None, {"n": 0}, {"n": 1}, {"n": 1})  # creates the thread's chat
    for i in range(1, 6):
        syncs = store.stats()["log_syncs"]
        parent = put(saver, "t", parent, {"n": i, "doc": os.urandom(5000)}, {"n": i + 1, "doc": i}, {"n": i + 1, "doc": i},
                     step=i)
        assert store.stats()["log_syncs"] - syncs == 1
        syncs = store.stats()["log_syncs"]
        saver.put_writes(cfg("t", parent), [("out", os.urandom(3000)), ("log", f"step {i}")], task_id=f"task-{i}")
        assert store.stats()["log_syncs"] - syncs == 1
    latest = saver.get_tuple(cfg("t"))
    assert latest.checkpoint["channel_values"]["n"] == 5
    assert [w[1] for w in latest.pending_writes] == ["out", "log"]


def test_a_growing_list_writes_its_new_end_not_its_front_again(tmp_path: Path) -> None:
    # Each step appends a ~1 KB message to a list channel. The serialized list starts with
    # its length, which changes every step; the saver keeps those first bytes in the
    # record so the value blobs share their front chunks (measured: ~2.7 KB per step over
    # steps 300..400; ~6.4 KB when the whole serialized value went into the blob).
    import random

    rng = random.Random(3)
    words = ["alpha", "beta", "gamma", "delta", "0", "17", "x"]
    with undertext.Store.open(tmp_path / "s", durability="none") as s:
        saver = UndertextSaver(s)
        parent, state, version = None, [], None
        for i in range(400):
            state.append({"role": "user", "content": f"[{i}] " + " ".join(rng.choice(words) for _ in range(200))})
            version = saver.get_next_version(version, None)
            if i == 300:
                before = log_bytes(s)
            parent = put(saver, "t", parent, {"messages": list(state)}, {"messages": version}, {"messages": version}, step=i)
        per_step = (log_bytes(s) - before) / 100
        assert per_step < 4000, f"{per_step:.0f} bytes written per step of a list growing by ~1 KB"
        assert saver.get_tuple(cfg("t")).checkpoint["channel_values"]["messages"] == state


def test_copy_thread_shares_every_value_and_writes_only_manifests(store: Any) -> None:
    saver = UndertextSaver(store)
    big = os.urandom(100_000)
    parent = None
    for i in range(5):
        parent = put(saver, "src", parent, {"doc": big, "i": i}, {"doc": 1, "i": i + 1}, {"i": i + 1}, step=i)
    before = log_bytes(store)
    saver.copy_thread("src", "dst")
    assert log_bytes(store) - before < 20_000
    src = [t.checkpoint for t in saver.list(cfg("src"))]
    dst = [t.checkpoint for t in saver.list(cfg("dst"))]
    assert [c["id"] for c in dst] == [c["id"] for c in src]
    assert [c["channel_values"] for c in dst] == [c["channel_values"] for c in src]


def test_reopened_store_answers_latest_and_list_from_the_newest_records_only(tmp_path: Path) -> None:
    path = tmp_path / "store"
    ids = []
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        parent = None
        for i in range(300):
            parent = put(saver, "long", parent, {"step": i}, {"step": i + 1}, {"step": i + 1}, step=i)
            ids.append(parent)
            saver.put_writes(cfg("long", parent), [("out", i)], f"task-{i}")
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        latest = saver.get_tuple(cfg("long"))
        assert latest.checkpoint["id"] == ids[-1]
        assert latest.checkpoint["channel_values"] == {"step": 299}
        assert latest.pending_writes == [("task-299", "out", 299)]
        listed = [t.checkpoint["id"] for t in saver.list(cfg("long"), limit=10)]
        assert listed == ids[::-1][:10]
        lane = saver._registry.lane("long", "", False)
        assert len(lane.recs) <= 2 * _BATCH, f"{len(lane.recs)} of 600 records decoded for the newest 10"
        # The chain goes on after the reopen, still newest first.
        nxt = put(saver, "long", ids[-1], {"step": 300}, {"step": 301}, {"step": 301}, step=300)
        assert [t.checkpoint["id"] for t in saver.list(cfg("long"), limit=2)] == [nxt, ids[-1]]
        assert saver.get_tuple(cfg("long")).parent_config["configurable"]["checkpoint_id"] == ids[-1]


def test_checkpoints_put_out_of_id_order_are_listed_by_descending_id(store: Any) -> None:
    saver = UndertextSaver(store)
    a, b, c = (str(uuid6(clock_seq=-1)) for _ in range(3))
    for cid in (b, a, c):
        put(saver, "t", None, {}, {}, {}, cid=cid)
    assert [t.checkpoint["id"] for t in saver.list(cfg("t"))] == [c, b, a]
    assert [t.checkpoint["id"] for t in saver.list(cfg("t"), before=cfg("t", c), limit=1)] == [b]
    assert saver.get_tuple(cfg("t")).checkpoint["id"] == c


def test_pending_writes_are_ordered_by_task_path_task_id_and_index(store: Any) -> None:
    saver = UndertextSaver(store)
    cid = put(saver, "t", None, {}, {}, {})
    saver.put_writes(cfg("t", cid), [("x", 1), ("y", 2)], "task-z", task_path="~b")
    saver.put_writes(cfg("t", cid), [("x", 3)], "task-b", task_path="~a")
    saver.put_writes(cfg("t", cid), [("x", 4)], "task-a", task_path="~a")
    saver.put_writes(cfg("t", cid), [("x", 5)], "task-y", task_path="")
    writes = saver.get_tuple(cfg("t")).pending_writes
    assert writes == [("task-y", "x", 5), ("task-a", "x", 4), ("task-b", "x", 3), ("task-z", "x", 1), ("task-z", "y", 2)]


def test_a_repeated_regular_write_keeps_the_first_and_a_special_channel_keeps_the_last(store: Any) -> None:
    saver = UndertextSaver(store)
    cid = put(saver, "t", None, {}, {}, {})
    saver.put_writes(cfg("t", cid), [("x", "first")], "task")
    saver.put_writes(cfg("t", cid), [("x", "second")], "task")
    saver.put_writes(cfg("t", cid), [(ERROR, "old error")], "task")
    saver.put_writes(cfg("t", cid), [(ERROR, "new error")], "task")
    assert sorted(saver.get_tuple(cfg("t")).pending_writes) == [("task", ERROR, "new error"), ("task", "x", "first")]


def test_prune_and_delete_for_runs_hold_after_reopen(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        parent = None
        for i in range(6):
            stored = saver.put(cfg("p", parent), checkpoint({}, {}), {"step": i, "run_id": f"run-{i % 2}"}, {})
            parent = stored["configurable"]["checkpoint_id"]
        saver.put_writes(cfg("p", parent), [("x", "kept")], "task")
        for i in range(3):
            saver.put(cfg("r"), checkpoint({}, {}), {"step": i, "run_id": f"run-{i % 2}"}, {})
        saver.prune(["p"], strategy="keep_latest")
        saver.delete_for_runs(["run-0"])
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        kept = list(saver.list(cfg("p")))
        assert [t.checkpoint["id"] for t in kept] == [parent]
        assert kept[0].pending_writes == [("task", "x", "kept")]
        assert [t.metadata["run_id"] for t in saver.list(cfg("r"))] == ["run-1"]


def test_prune_names_the_strategies_it_accepts(store: Any) -> None:
    with pytest.raises(ValueError, match="expected 'keep_latest' or 'delete', found 'oldest'"):
        UndertextSaver(store).prune(["t"], strategy="oldest")


def test_delete_thread_then_put_starts_a_fresh_history(store: Any) -> None:
    saver = UndertextSaver(store)
    put(saver, "t", None, {"v": 1}, {"v": 1}, {"v": 1})
    saver.delete_thread("t")
    assert saver.get_tuple(cfg("t")) is None
    cid = put(saver, "t", None, {"v": 2}, {"v": 1}, {"v": 1})
    assert [t.checkpoint["id"] for t in saver.list(cfg("t"))] == [cid]
    assert UndertextSaver(store).get_tuple(cfg("t")).checkpoint["channel_values"] == {"v": 2}


def test_list_without_a_config_spans_every_thread_and_namespace(store: Any) -> None:
    saver = UndertextSaver(store)
    ids = {put(saver, t, None, {}, {}, {}) for t in ("a", "b")}
    ids.add(saver.put(cfg("a", ns="child:1"), checkpoint({}, {}), {}, {})["configurable"]["checkpoint_id"])
    listed = [t.checkpoint["id"] for t in saver.list(None)]
    assert set(listed) == ids and listed == sorted(listed, reverse=True)


def test_next_versions_increase(store: Any) -> None:
    saver = UndertextSaver(store)
    v = None
    seen = []
    for _ in range(20):
        v = saver.get_next_version(v, None)
        seen.append(v)
    assert seen == sorted(seen) and len(set(seen)) == 20
    assert int(seen[-1].split(".")[0]) == 20


def test_eight_threads_writing_their_own_graph_threads_read_back_their_own_state(store: Any) -> None:
    saver = UndertextSaver(store)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            parent = None
            for i in range(40):
                parent = put(saver, f"w{n}", parent, {"who": n, "i": i}, {"who": 1, "i": i + 1}, {"i": i + 1})
                saver.put_writes(cfg(f"w{n}", parent), [("seen", [n, i])], f"t{n}")
                got = saver.get_tuple(cfg(f"w{n}"))
                assert got.checkpoint["channel_values"] == {"who": n, "i": i}
                assert got.pending_writes == [(f"t{n}", "seen", [n, i])]
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for n in range(8):
        assert len(list(saver.list(cfg(f"w{n}")))) == 40


@pytest.mark.asyncio
async def test_async_methods_leave_the_event_loop_free_while_the_engine_works(store: Any) -> None:
    released = threading.Event()

    class Blocking(UndertextSaver):
        def put(self, *args: Any, **kwargs: Any) -> Any:
            # Runs until a coroutine on the event loop lets it go: if aput blocked the
            # loop, that coroutine could never run and the wait would fail.
            if not released.wait(timeout=30):
                raise AssertionError("the event loop was blocked while aput ran")
            return super().put(*args, **kwargs)

    saver = Blocking(store)

    async def release() -> None:
        await asyncio.sleep(0)
        released.set()

    stored, _ = await asyncio.gather(
        saver.aput(cfg("t"), checkpoint({"k": "v"}, {"k": 1}), {"step": 0}, {"k": 1}), release()
    )
    tup = await saver.aget_tuple(stored)
    assert tup.checkpoint["channel_values"] == {"k": "v"}
    assert [t.checkpoint["id"] async for t in saver.alist(cfg("t"))] == [stored["configurable"]["checkpoint_id"]]


def test_a_checkpoint_id_unknown_to_the_thread_is_none_not_an_error(store: Any) -> None:
    saver = UndertextSaver(store)
    put(saver, "t", None, {}, {}, {})
    assert saver.get_tuple(cfg("t", str(uuid.uuid4()))) is None
    assert saver.get_tuple(cfg("never-written")) is None


def test_two_savers_on_one_store_see_each_others_threads(store: Any) -> None:
    first, second = UndertextSaver(store), UndertextSaver(store)
    assert second.get_tuple(cfg("t")) is None
    cid = put(first, "t", None, {"v": 1}, {"v": 1}, {"v": 1})
    assert second.get_tuple(cfg("t")).checkpoint["id"] == cid
    nxt = put(second, "t", cid, {"v": 2}, {"v": 2}, {"v": 2})
    assert [t.checkpoint["id"] for t in first.list(cfg("t"))] == [nxt, cid]


def test_writes_stored_before_their_checkpoint_belong_to_it_after_reopen_and_prune(tmp_path: Path) -> None:
    # LangGraph may store a checkpoint's writes (an interrupt, for one) before the checkpoint.
    path = tmp_path / "store"
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        first = put(saver, "t", None, {}, {}, {})
        early = str(uuid6(clock_seq=-1))
        saver.put_writes(cfg("t", early), [(ERROR, "early"), ("x", 1)], "task")
        put(saver, "t", first, {}, {}, {}, step=1, cid=early)
        # Writes are keyed by (task, index): index 1 is taken by the early ("x", 1), so "y" is
        # dropped, as LangGraph's own savers do; index 0 is new.
        saver.put_writes(cfg("t", early), [("x", 2), ("y", 3)], "task")
        expected = [("task", ERROR, "early"), ("task", "x", 1), ("task", "x", 2)]
        assert sorted(saver.get_tuple(cfg("t")).pending_writes) == expected
        saver.prune(["t"])
    with undertext.Store.open(path) as store:
        got = UndertextSaver(store).get_tuple(cfg("t"))
        assert got.checkpoint["id"] == early
        assert sorted(got.pending_writes) == expected


def test_a_deleted_thread_is_reclaimed_by_gc_and_other_threads_keep_their_values(tmp_path: Path) -> None:
    path = tmp_path / "store"
    gone, shared = os.urandom(300_000), os.urandom(50_000)
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        c = put(saver, "gone", None, {"doc": gone, "common": shared}, {"doc": 1, "common": 1}, {"doc": 1, "common": 1})
        put(saver, "gone", c, {"doc": gone, "common": shared}, {"doc": 1, "common": 1}, {}, step=1)
        # The same value in another thread: stored once, and it must outlive "gone".
        put(saver, "kept", None, {"common": shared}, {"common": 1}, {"common": 1})
        saver.delete_thread("gone")
        assert saver.get_tuple(cfg("gone")) is None and list(saver.list(cfg("gone"))) == []
    report = undertext.Store.gc(path)
    assert report["deleted_chats"] == 1
    assert report["log_bytes_before"] - report["log_bytes_after"] > len(gone)
    assert report["log_bytes_before"] - report["log_bytes_after"] < len(gone) + len(shared)
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        assert saver.get_tuple(cfg("gone")) is None
        assert saver.get_tuple(cfg("kept")).checkpoint["channel_values"] == {"common": shared}


def test_a_put_after_reopen_reads_only_the_newest_records_when_no_writes_came_early(tmp_path: Path) -> None:
    # Early writes are found through the set the newest record carries: a new checkpoint
    # with none does not make the saver read the whole thread.
    path = tmp_path / "store"
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        parent = None
        for i in range(300):
            parent = put(saver, "long", parent, {"step": i}, {"step": i + 1}, {"step": i + 1}, step=i)
            saver.put_writes(cfg("long", parent), [("out", i)], f"task-{i}")
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        put(saver, "long", parent, {"step": 300}, {"step": 301}, {"step": 301}, step=300)
        lane = saver._registry.lane("long", "", False)
        assert len(lane.recs) <= 2 * _BATCH, f"{len(lane.recs)} of 601 records decoded for one put"


def test_writes_stored_early_in_a_thread_written_before_the_early_set_existed_are_found(tmp_path: Path) -> None:
    # A thread whose chat lacks the early-writes key (written by an older saver): the set is
    # computed from the whole chat once, then the key is set and kept up to date.
    path = tmp_path / "store"
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        first = put(saver, "t", None, {"v": 0}, {"v": 1}, {"v": 1})
        early = str(uuid6(clock_seq=-1))  # above every id put so far
        saver.put_writes(cfg("t", early), [("x", "early")], "task")
        chat = saver._registry.lane("t", "", False).chat
        chat.set_meta(extra={"undertext.langgraph": ""})  # as an older saver left it
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        assert not saver._registry.lane("t", "", False).tracked
        put(saver, "t", first, {"v": 1}, {"v": 2}, {"v": 2}, step=1, cid=early)
        assert saver.get_tuple(cfg("t")).pending_writes == [("task", "x", "early")]
        assert store.chat("langgraph", chat.id).meta.extra == {"undertext.langgraph": "", "undertext.langgraph.o": "1"}
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        assert saver._registry.lane("t", "", False).tracked
        assert saver.get_tuple(cfg("t", early)).pending_writes == [("task", "x", "early")]


def test_copy_thread_carries_writes_stored_before_their_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        put(saver, "src", None, {"v": 0}, {"v": 1}, {"v": 1})
        early = str(uuid6(clock_seq=-1))
        saver.put_writes(cfg("src", early), [("x", "early")], "task")
        saver.copy_thread("src", "dst")
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        put(saver, "dst", None, {"v": 1}, {"v": 2}, {"v": 2}, step=1, cid=early)
        assert saver.get_tuple(cfg("dst", early)).pending_writes == [("task", "x", "early")]


def test_open_passes_store_options_to_the_store(tmp_path: Path) -> None:
    with pytest.raises(undertext.UndertextError):
        UndertextSaver.open(tmp_path / "absent", create_if_missing=False)
    with UndertextSaver.open(tmp_path / "s", durability="none", lazy=False) as saver:
        put(saver, "t", None, {"v": 1}, {"v": 1}, {"v": 1})
        assert type(saver.get_tuple(cfg("t")).checkpoint["channel_values"]) is dict
        assert saver.store.stats()["log_syncs"] == 0  # durability="none" reached the store


def test_a_path_makes_a_saver_that_owns_its_store_and_anything_else_is_named(tmp_path: Path) -> None:
    saver = UndertextSaver(str(tmp_path / "s"))
    put(saver, "t", None, {"v": 1}, {"v": 1}, {"v": 1})
    saver.close()
    assert saver.store.closed
    with UndertextSaver(tmp_path / "s") as again:
        assert again.get_tuple(cfg("t")).checkpoint["channel_values"] == {"v": 1}
    with pytest.raises(TypeError, match="store: expected an open undertext.Store or a path, found dict"):
        UndertextSaver({"not": "a store"})


@pytest.mark.asyncio
async def test_a_temporary_saver_works_under_async_with_and_is_removed_on_exit() -> None:
    async with UndertextSaver.temporary() as saver:
        path = saver.store.path
        put(saver, "t", None, {"v": 1}, {"v": 1}, {"v": 1})
        assert (await saver.aget_tuple(cfg("t"))).checkpoint["channel_values"] == {"v": 1}
        assert path.exists()
    assert saver.store.closed
    assert not path.exists()


def test_writes_stored_before_their_checkpoint_as_langgraph_saves_read_only_the_newest_records(tmp_path: Path) -> None:
    # LangGraph's default (asynchronous) saving stores a step's writes before its checkpoint:
    # neither call may read the whole thread to find out that the checkpoint is new.
    path = tmp_path / "store"
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        parent = None
        for i in range(300):
            cid = str(uuid6(clock_seq=-1))
            saver.put_writes(cfg("long", cid), [("out", i)], f"task-{i}")
            parent = put(saver, "long", parent, {"step": i}, {"step": i + 1}, {"step": i + 1}, step=i, cid=cid)
        assert saver.get_tuple(cfg("long")).pending_writes == [("task-299", "out", 299)]
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        cid = str(uuid6(clock_seq=-1))
        saver.put_writes(cfg("long", cid), [("out", 300)], "task-300")
        put(saver, "long", parent, {"step": 300}, {"step": 301}, {"step": 301}, step=300, cid=cid)
        assert saver.get_tuple(cfg("long")).pending_writes == [("task-300", "out", 300)]
        lane = saver._registry.lane("long", "", False)
        assert len(lane.recs) <= 2 * _BATCH, f"{len(lane.recs)} of 602 records decoded for one step"
