"""A store belongs to the process that opened it (issue 34, point 1): a module-level store,
then ``multiprocessing`` workers started with the "fork" method. Every write a worker makes
through the inherited object — ``Store``/``Chat``, the LangGraph saver, the Agents SDK
session, the Claude Agent SDK session store — raises ``undertext.Forked`` (not a success
whose data the parent's close would lose); the store's files are byte for byte as before the
pool; the parent goes on writing, closes, reopens and finds everything it wrote. A worker
that opens its own store after the fork works, and so do "spawn" and "forkserver" workers
given a path.

Each worker runs in a fresh fork (``maxtasksperchild=1``) and reports what its calls did as
plain tuples (exceptions are caught in the worker: what crosses the pipe is data)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from pathlib import Path
from typing import Any, Callable

import pytest

import undertext

#: The objects opened in the parent before the pool: what a fork child inherits (as a
#: module-level store of an application would be).
PARENT: dict[str, Any] = {}

FORK_ADVICE = "open the store in this process after the fork"


def integration(module: str) -> None:
    """Skips the test when the framework is not installed (scripts/test-python-integrations
    installs them and sets UNDERTEXT_REQUIRE_INTEGRATIONS=1: then a missing one fails)."""
    if os.environ.get("UNDERTEXT_REQUIRE_INTEGRATIONS") != "1":
        pytest.importorskip(module, reason="run scripts/test-python-integrations")


def outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    """What a call did in this process: ("Forked", opened_by, caller, pid, message), or
    (exception type, None, None, pid, message), or ("ok", None, None, pid, repr)."""
    try:
        r = call()
    except undertext.Forked as e:
        return ("Forked", e.opened_by, e.caller, os.getpid(), str(e))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which fails the test
        return (type(e).__name__, None, None, os.getpid(), str(e))
    return ("ok", None, None, os.getpid(), repr(r)[:300])


def fork_pool(worker: Callable[[int], Any], n: int = 4) -> list[Any]:
    """Runs ``worker(i)`` for i in 0..n in fork-started workers, each in a fresh fork."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2, maxtasksperchild=1) as pool:
        return pool.map(worker, range(n))


def assert_forked(results: list[list[tuple[Any, ...]]]) -> None:
    """Every call of every worker raised Forked naming the parent and the worker."""
    parent = os.getpid()
    assert results and all(results)
    for calls in results:
        for kind, opened_by, caller, pid, message in calls:
            assert kind == "Forked", f"a worker's call was not refused with Forked: {kind}: {message}"
            assert opened_by == parent and caller == pid != parent, (opened_by, caller, pid, parent)
            assert FORK_ADVICE in message and "spawn" in message, message


def store_files(path: Path) -> dict[str, bytes]:
    """The store's log segments and index, byte for byte."""
    files = {p.name: p.read_bytes() for p in sorted((path / "log").glob("*.seg"))}
    files["index.redb"] = (path / "index.redb").read_bytes()
    return files


# -- Store and Chat --------------------------------------------------------------------------


def _store_worker(i: int) -> list[tuple[Any, ...]]:
    store, chat = PARENT["store"], PARENT["chat"]
    return [
        outcome(lambda: chat.append(undertext.assistant(f"worker {i} appends"))),
        outcome(lambda: chat.append_batch([undertext.user(f"worker {i}"), undertext.assistant("batch")])),
        outcome(lambda: chat.truncate(1, expected_revision=chat.revision)),
        outcome(lambda: store.create_chat("alice", title=f"worker {i}")),
        outcome(lambda: store.chat("alice", chat.id).append(undertext.user("x"))),
        outcome(lambda: store.put_blob("alice", b"a blob of worker %d" % i)),
        outcome(lambda: chat.messages()),
        outcome(lambda: store.get_blob("alice", PARENT["blob"])),
        outcome(lambda: store.sync()),
        outcome(lambda: store.close()),  # the last call: after it the object is closed
    ]


def _own_store_worker(i: int) -> list[str]:
    """Opens a store of its own after the fork: it works as in any process."""
    path = Path(PARENT["own"]) / f"worker-{i}"
    with undertext.Store.open(path) as s:
        chat = s.create_chat("bob")
        chat.append(undertext.user(f"worker {i}'s own store"))
        chat_id = chat.id
    with undertext.Store.open(path) as s:
        return [m.text for m in s.chat("bob", chat_id).messages()]


def test_fork_workers_are_refused_and_the_parents_store_is_intact(tmp_path: Path) -> None:
    path = tmp_path / "store"
    store = undertext.Store.open(path)
    chat = store.create_chat("alice", title="parent")
    texts = [f"parent {n} before the pool" for n in range(50)]
    for t in texts:
        chat.append(undertext.user(t))
    blob = store.put_blob("alice", b"a blob of the parent")
    store.sync()
    before = store_files(path)
    PARENT.update(store=store, chat=chat, blob=blob, own=str(tmp_path))
    try:
        assert_forked(fork_pool(_store_worker))
        assert store_files(path) == before, "a fork worker changed the store's files"
        assert [r for r in fork_pool(_own_store_worker, 2)] == [["worker 0's own store"], ["worker 1's own store"]]
    finally:
        PARENT.clear()
    # The parent's objects still work: it writes more, closes, reopens, finds all of it.
    more = [f"parent {n} after the pool" for n in range(50)]
    chat.append_batch([undertext.assistant(t) for t in more])
    chat_id = chat.id
    store.close()
    with undertext.Store.open(path) as s:
        assert [m.text for m in s.chat("alice", chat_id).messages()] == texts + more
        assert [c.id for c in s.chats("alice")] == [chat_id]
        assert s.check()["ok"]


# -- LangGraph saver -------------------------------------------------------------------------


def _cfg(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}


def _checkpoint(step: int) -> Any:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=-1))
    cp["channel_values"] = {"messages": [f"message {n}" for n in range(step + 1)], "step": step}
    cp["channel_versions"] = {"messages": str(step + 1), "step": str(step + 1)}
    return cp


def _put(saver: Any, parent: str | None, step: int) -> str:
    stored = saver.put(_cfg("t", parent), _checkpoint(step), {"source": "loop", "step": step},
                       {"messages": str(step + 1), "step": str(step + 1)})
    return str(stored["configurable"]["checkpoint_id"])


def _saver_worker(i: int) -> list[tuple[Any, ...]]:
    saver, head = PARENT["saver"], PARENT["head"]
    return [
        outcome(lambda: _put(saver, head, 100 + i)),
        outcome(lambda: asyncio.run(saver.aput(_cfg("t", head), _checkpoint(200 + i), {"step": 200 + i}, {}))),
        outcome(lambda: saver.put_writes(_cfg("t", head), [("messages", f"write of worker {i}")], f"task-{i}")),
        outcome(lambda: saver.delete_thread("t")),
        # After the refused delete the thread is still known: a read is Forked, not None.
        outcome(lambda: saver.get_tuple(_cfg("t"))),
    ]


def _own_saver_worker(i: int) -> list[Any]:
    from undertext.langgraph import UndertextSaver

    path = Path(PARENT["own"]) / f"saver-{i}"
    with UndertextSaver.open(path) as saver:
        _put(saver, _put(saver, None, 0), 1)
    with UndertextSaver.open(path) as saver:
        return [t.checkpoint["channel_values"]["step"] for t in saver.list(_cfg("t"))]


def test_fork_workers_are_refused_by_the_langgraph_saver(tmp_path: Path) -> None:
    integration("langgraph.checkpoint.base")
    from undertext.langgraph import UndertextSaver

    path = tmp_path / "store"
    store = undertext.Store.open(path)
    saver = UndertextSaver(store)
    ids: list[str] = []
    for step in range(5):
        ids.append(_put(saver, ids[-1] if ids else None, step))
    store.sync()
    before = store_files(path)
    PARENT.update(saver=saver, head=ids[-1], own=str(tmp_path))
    try:
        assert_forked(fork_pool(_saver_worker))
        assert store_files(path) == before, "a fork worker changed the store's files"
        assert fork_pool(_own_saver_worker, 2) == [[1, 0], [1, 0]]
    finally:
        PARENT.clear()
    for step in range(5, 10):
        ids.append(_put(saver, ids[-1], step))
    store.close()
    with UndertextSaver.open(path) as saver2:
        tuples = list(saver2.list(_cfg("t")))
        assert [t.config["configurable"]["checkpoint_id"] for t in tuples] == ids[::-1]
        assert [t.checkpoint["channel_values"]["step"] for t in tuples] == list(range(9, -1, -1))
        assert tuples[0].pending_writes == []


# -- Agents SDK session ----------------------------------------------------------------------


def _item(n: int, who: str = "parent") -> dict[str, Any]:
    return {"role": "user", "content": f"{who} item {n}"}


def _session_worker(i: int) -> list[tuple[Any, ...]]:
    from undertext.agents import UndertextSession

    session = PARENT["session"]
    return [
        outcome(lambda: session.add_items_sync([_item(i, "worker")])),
        outcome(lambda: asyncio.run(session.add_items([_item(i, "worker")]))),
        outcome(lambda: asyncio.run(session.pop_item())),
        outcome(lambda: session.clear_session_sync()),
        outcome(lambda: session.get_items_sync()),
        outcome(lambda: UndertextSession(f"worker session {i}", PARENT["store"])),
    ]


def _own_session_worker(i: int) -> list[Any]:
    from undertext.agents import UndertextSession

    path = Path(PARENT["own"]) / f"session-{i}"
    with UndertextSession.open("s", path) as session:
        session.add_items_sync([_item(0, f"worker {i}"), _item(1, f"worker {i}")])
    with UndertextSession.open("s", path) as session:
        return list(asyncio.run(session.get_items()))


def test_fork_workers_are_refused_by_the_agents_session(tmp_path: Path) -> None:
    integration("agents.memory")
    from undertext.agents import UndertextSession

    path = tmp_path / "store"
    store = undertext.Store.open(path)
    session = UndertextSession("s", store)
    session.add_items_sync([_item(n) for n in range(10)])
    store.sync()
    before = store_files(path)
    PARENT.update(session=session, store=store, own=str(tmp_path))
    try:
        assert_forked(fork_pool(_session_worker))
        assert store_files(path) == before, "a fork worker changed the store's files"
        assert fork_pool(_own_session_worker, 2) == [
            [_item(0, f"worker {i}"), _item(1, f"worker {i}")] for i in range(2)
        ]
    finally:
        PARENT.clear()
    session.add_items_sync([_item(n) for n in range(10, 20)])
    store.close()
    with UndertextSession.open("s", path) as again:
        assert again.get_items_sync() == [_item(n) for n in range(20)]


# -- Claude Agent SDK session store ----------------------------------------------------------

KEY = {"project_key": "proj", "session_id": "sess-1"}


def _entry(n: int, who: str = "parent") -> dict[str, Any]:
    return {"type": "user", "uuid": f"{who}-{n}", "timestamp": f"2026-01-01T00:00:{n % 60:02d}.000Z",
            "message": {"role": "user", "content": f"{who} entry {n}"}}


def _session_store_worker(i: int) -> list[tuple[Any, ...]]:
    ss = PARENT["ss"]
    other = {"project_key": "proj", "session_id": f"worker-{i}"}
    return [
        outcome(lambda: ss.append_sync(KEY, [_entry(i, "worker")])),
        outcome(lambda: asyncio.run(ss.append(KEY, [_entry(i, "worker")]))),
        outcome(lambda: ss.append_sync(other, [_entry(0, "worker")])),
        outcome(lambda: ss.delete_sync(KEY)),
        # After the refused delete the key is still known: a load is Forked, not None.
        outcome(lambda: ss.load_sync(KEY)),
    ]


def _own_session_store_worker(i: int) -> Any:
    from undertext.claude import UndertextSessionStore

    path = Path(PARENT["own"]) / f"claude-{i}"
    with UndertextSessionStore.open(path) as ss:
        ss.append_sync(KEY, [_entry(0, f"worker-{i}"), _entry(1, f"worker-{i}")])
    with UndertextSessionStore.open(path) as ss:
        return asyncio.run(ss.load(KEY))


def test_fork_workers_are_refused_by_the_claude_session_store(tmp_path: Path) -> None:
    integration("claude_agent_sdk")
    from undertext.claude import UndertextSessionStore

    path = tmp_path / "store"
    store = undertext.Store.open(path)
    ss = UndertextSessionStore(store)
    ss.append_sync(KEY, [_entry(n) for n in range(10)])
    store.sync()
    before = store_files(path)
    PARENT.update(ss=ss, own=str(tmp_path))
    try:
        assert_forked(fork_pool(_session_store_worker))
        assert store_files(path) == before, "a fork worker changed the store's files"
        assert fork_pool(_own_session_store_worker, 2) == [
            [_entry(0, f"worker-{i}"), _entry(1, f"worker-{i}")] for i in range(2)
        ]
    finally:
        PARENT.clear()
    ss.append_sync(KEY, [_entry(n) for n in range(10, 20)])
    store.close()
    with UndertextSessionStore.open(path) as again:
        assert again.load_sync(KEY) == [_entry(n) for n in range(20)]
        assert [s["session_id"] for s in again.list_sessions_sync("proj")] == ["sess-1"]


# -- "spawn" and "forkserver": workers that never had the parent's store, given a path -------


def _spawn_worker(path: str) -> list[str]:
    """Opens the store at ``path`` (closed by the parent), reads what the parent wrote,
    appends its own message and closes."""
    with undertext.Store.open(path) as s:
        (info,) = list(s.chats("alice"))
        chat = s.chat("alice", info.id)
        chat.append(undertext.assistant(f"written by spawned process {os.getpid()}"))
        return [m.text for m in chat.messages()]


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_spawn_workers_open_the_store_from_a_path(tmp_path: Path, method: str) -> None:
    paths = [str(tmp_path / f"store-{i}") for i in range(2)]
    for i, p in enumerate(paths):
        with undertext.Store.open(p) as s:
            s.create_chat("alice").append(undertext.user(f"task {i}"))
    ctx = multiprocessing.get_context(method)
    with ctx.Pool(2) as pool:
        results = pool.map(_spawn_worker, paths)
    for i, (p, texts) in enumerate(zip(paths, results)):
        assert texts[0] == f"task {i}" and texts[1].startswith("written by spawned process ")
        assert texts[1] != f"written by spawned process {os.getpid()}"
        with undertext.Store.open(p) as s:
            (info,) = list(s.chats("alice"))
            assert [m.text for m in s.chat("alice", info.id).messages()] == texts
