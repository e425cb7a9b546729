"""UndertextSessionStore: the Claude Agent SDK's SessionStore protocol (its conformance
suite with every optional method), exact round-trips, reopening, the uuid idempotency key,
a random comparison with the SDK's InMemorySessionStore, and the session read as a chat
through the engine's Claude Code importer."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("UNDERTEXT_REQUIRE_INTEGRATIONS") != "1":  # scripts/test-python-integrations sets it
    pytest.importorskip("claude_agent_sdk", reason="run scripts/test-python-integrations")

from claude_agent_sdk import InMemorySessionStore, SessionStore, fold_session_summary
from claude_agent_sdk.testing import run_session_store_conformance

import undertext
from undertext.claude import UndertextSessionStore

pytestmark = pytest.mark.asyncio

KEY = {"project_key": "proj", "session_id": "sess-1"}
OPTIONAL = ("list_sessions", "list_session_summaries", "delete", "list_subkeys")


def entry(rng: random.Random, n: int, **fields: Any) -> dict[str, Any]:
    """An opaque transcript line: nested JSON of every type, some non-ASCII."""
    e: dict[str, Any] = {
        "type": rng.choice(["user", "assistant", "system", "progress", "x"]),
        "uuid": f"u-{n}",
        "timestamp": f"2026-01-01T00:00:{n % 60:02d}.000Z",
        "n": n,
        "big": 2**70 + n,
        "f": n / 7,
        "flag": n % 2 == 0,
        "none": None,
        "nested": {"list": [1, "two", {"three": [3.5, None, True]}], "text": "é✓ 漢字 \n\t\"quoted\"" * (n % 3)},
    }
    e.update(fields)
    return e


@pytest.fixture
def stores(tmp_path: Path) -> Any:
    made: list[UndertextSessionStore] = []

    def make(name: str = "store") -> UndertextSessionStore:
        s = UndertextSessionStore.open(tmp_path / f"{name}-{len(made)}")
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


async def test_the_sdk_conformance_suite_passes_with_every_optional_method(stores: Any) -> None:
    for method in OPTIONAL:  # overridden, so the suite runs its contracts instead of skipping
        assert getattr(UndertextSessionStore, method) is not getattr(SessionStore, method), method
    await run_session_store_conformance(stores)


async def test_entries_round_trip_exactly_in_append_order_and_after_reopen(tmp_path: Path) -> None:
    rng = random.Random(3)
    appended: list[dict[str, Any]] = []
    with UndertextSessionStore.open(tmp_path / "s") as s:
        n = 0
        for _ in range(20):
            batch = [entry(rng, n + i) for i in range(rng.randint(1, 5))]
            n += len(batch)
            appended += batch
            await s.append(KEY, batch)
        await s.append(KEY, [{"type": "custom-title", "customTitle": "no uuid"}])
        appended.append({"type": "custom-title", "customTitle": "no uuid"})
        assert await s.load(KEY) == appended
    with UndertextSessionStore.open(tmp_path / "s") as s:
        loaded = await s.load(KEY)
        assert loaded == appended
        assert json.dumps(loaded) == json.dumps(appended)  # key order and types kept too


async def test_an_entry_whose_uuid_is_stored_is_skipped_and_one_without_is_not(tmp_path: Path) -> None:
    rng = random.Random(4)
    batch = [entry(rng, 1), entry(rng, 2)]
    tag = {"type": "tag", "tag": "x"}
    with UndertextSessionStore.open(tmp_path / "s") as s:
        await s.append(KEY, batch + [tag])
        await s.append(KEY, batch + [tag])  # the batch sent again: only the uuid-less entry repeats
    with UndertextSessionStore.open(tmp_path / "s") as s:
        await s.append(KEY, [batch[1], entry(rng, 3)])  # after a reopen, from the stored entries
        assert [e.get("uuid") for e in await s.load(KEY)] == ["u-1", "u-2", None, None, "u-3"]
        # A subagent transcript (no summary kept) skips them alike, append after append.
        sub = {**KEY, "subpath": "subagents/agent-1"}
        for _ in range(3):
            await s.append(sub, batch + [tag])
            await s.append(sub, [entry(rng, 3)])
        assert [e.get("uuid") for e in await s.load(sub)] == ["u-1", "u-2", None, "u-3", None, None]


async def test_a_path_string_is_accepted_and_anything_else_is_named(tmp_path: Path) -> None:
    s = UndertextSessionStore(str(tmp_path / "s"))
    await s.append(KEY, [{"type": "x"}])
    s.close()
    with undertext.Store.open(tmp_path / "s") as store:
        assert await UndertextSessionStore(store).load(KEY) == [{"type": "x"}]
    with pytest.raises(TypeError, match="expected an open undertext.Store or a path, found int"):
        UndertextSessionStore(42)


async def test_a_temporary_store_is_removed_on_close() -> None:
    s = UndertextSessionStore.temporary()
    path = Path(s.store.path)
    await s.append(KEY, [{"type": "x"}])
    assert path.exists()
    s.close()
    assert not path.exists()
    with pytest.raises(undertext.Closed) as e:
        await s.load(KEY)
    assert "removed" in str(e.value) and "open it again" not in str(e.value)


async def test_without_anyio_the_async_methods_run_on_asyncio_threads(tmp_path: Path, monkeypatch: Any) -> None:
    import undertext.claude

    monkeypatch.setattr(undertext.claude, "_anyio_run_sync", None)  # as if anyio were not installed
    async with UndertextSessionStore.open(tmp_path / "s") as s:
        await s.append(KEY, [{"type": "x", "uuid": "1"}])
        assert await s.load(KEY) == [{"type": "x", "uuid": "1"}]
        await s.delete(KEY)
        assert await s.load(KEY) is None


def spy_threads(s: UndertextSessionStore) -> tuple[list[bool], dict[str, float]]:
    """Wraps ``s.append_sync``: each call notes whether it ran on the calling (event loop)
    thread, and first sleeps ``delay["s"]`` seconds (a slow disk)."""
    loop_thread = threading.get_ident()
    on_loop: list[bool] = []
    delay = {"s": 0.0}
    inner = s.append_sync

    def spy(key: Any, entries: Any) -> None:
        on_loop.append(threading.get_ident() == loop_thread)
        time.sleep(delay["s"])
        inner(key, entries)

    s.append_sync = spy  # type: ignore[method-assign]
    return on_loop, delay


async def test_a_known_key_appends_in_the_event_loop_while_appends_are_fast(tmp_path: Path) -> None:
    async with UndertextSessionStore.open(tmp_path / "s", inline_below_ms=60_000) as s:
        on_loop, _ = spy_threads(s)
        for n in range(4):
            await s.append(KEY, [{"type": "x", "uuid": f"u-{n}"}])
        # The key's first append reads what it holds: a worker thread; then in the loop.
        assert on_loop == [False, True, True, True]
        assert [e["uuid"] for e in await s.load(KEY)] == ["u-0", "u-1", "u-2", "u-3"]


async def test_after_slow_appends_the_next_go_to_a_worker_thread_until_appends_are_fast_again(tmp_path: Path) -> None:
    async with UndertextSessionStore.open(tmp_path / "s", inline_below_ms=20) as s:
        on_loop, delay = spy_threads(s)
        await s.append(KEY, [{"type": "x", "uuid": "first"}])
        delay["s"] = 0.3  # a disk that takes 300 ms
        await s.append(KEY, [{"type": "x", "uuid": "slow"}])
        delay["s"] = 0.0
        n = 0
        while not on_loop[-1] or len(on_loop) < 4:
            await s.append(KEY, [{"type": "x", "uuid": f"fast-{n}"}])
            n += 1
            assert n < 40, on_loop
        assert on_loop[2] is False  # the append after the slow one went to a thread
        assert [e["uuid"] for e in await s.load(KEY)] == ["first", "slow"] + [f"fast-{i}" for i in range(n)]


async def test_inline_below_ms_zero_runs_every_append_in_a_worker_thread(tmp_path: Path) -> None:
    async with UndertextSessionStore.open(tmp_path / "s", inline_below_ms=0) as s:
        on_loop, _ = spy_threads(s)
        for n in range(3):
            await s.append(KEY, [{"type": "x", "uuid": f"u-{n}"}])
        assert on_loop == [False, False, False]
    for bad in (-1, float("nan")):
        with pytest.raises(ValueError, match="inline_below_ms: expected a number of milliseconds >= 0"):
            UndertextSessionStore.temporary(inline_below_ms=bad)


async def test_summaries_and_write_times_survive_reopen_and_agree(tmp_path: Path) -> None:
    with UndertextSessionStore.open(tmp_path / "s") as s:
        await s.append(KEY, [{"type": "user", "timestamp": "2026-01-01T00:00:00.000Z", "customTitle": "first"}])
        await s.append(KEY, [{"type": "x", "customTitle": "second", "gitBranch": "main"}])
        before = await s.list_session_summaries("proj")
        listed = await s.list_sessions("proj")
    with UndertextSessionStore.open(tmp_path / "s") as s:
        assert await s.list_session_summaries("proj") == before
        assert await s.list_sessions("proj") == listed
        (summary,) = before
        assert summary["mtime"] == listed[0]["mtime"]
        assert summary["data"]["custom_title"] == "second"


async def test_entries_stored_without_their_summary_make_it_stale_and_the_next_append_refolds(tmp_path: Path) -> None:
    # A crash between an append and its summary write leaves entries the summary lacks.
    first = [{"type": "x", "customTitle": "first"}]
    lost = [{"type": "x", "customTitle": "lost"}]
    with UndertextSessionStore.open(tmp_path / "s") as s:
        await s.append(KEY, first)
        (info,) = s.store.find_chats(s.owner)
        s.store.chat(s.owner, info.id).append({"role": "system", "content": json.dumps(lost[0])})
    with UndertextSessionStore.open(tmp_path / "s") as s:
        (summary,) = await s.list_session_summaries("proj")
        (listed,) = await s.list_sessions("proj")
        assert summary["mtime"] < listed["mtime"], "the SDK must see the summary as stale"
        last = [{"type": "x", "gitBranch": "dev"}]
        await s.append(KEY, last)
        (summary,) = await s.list_session_summaries("proj")
        assert summary["data"] == fold_session_summary(None, KEY, first + lost + last)["data"]  # type: ignore[arg-type]


async def test_random_calls_with_reopens_answer_like_the_sdk_in_memory_store(tmp_path: Path) -> None:
    rng = random.Random(19)
    ref = InMemorySessionStore()
    ours = UndertextSessionStore.open(tmp_path / "s")
    keys = [
        {"project_key": p, "session_id": sid, **({"subpath": sub} if sub else {})}
        for p in ("A", "B")
        for sid in ("s1", "s2")
        for sub in ("", "subagents/agent-1", "subagents/agent-2")
    ]
    n = 0
    log: list[str] = []
    try:
        for step in range(300):
            key = rng.choice(keys)
            r = rng.random()
            if r < 0.45:
                batch = []
                for _ in range(rng.randint(1, 3)):  # append([]) is a no-op (InMemory makes the key)
                    n += 1
                    fields = {"customTitle": f"t{n}"} if rng.random() < 0.3 else {}
                    batch.append(entry(rng, n, **fields))
                log.append(f"append({key}, {len(batch)})")
                await ours.append(key, batch)  # type: ignore[arg-type]
                await ref.append(key, batch)  # type: ignore[arg-type]
            elif r < 0.6:
                log.append(f"delete({key})")
                await ours.delete(key)  # type: ignore[arg-type]
                await ref.delete(key)  # type: ignore[arg-type]
            elif r < 0.68:
                log.append("reopen")
                ours.close()
                ours = UndertextSessionStore.open(tmp_path / "s")
            else:
                log.append(f"reads({key})")
            where = f"step {step}: " + " / ".join(log[-6:])
            assert await ours.load(key) == await ref.load(key), where  # type: ignore[arg-type]
            pk = key["project_key"]
            assert sorted(x["session_id"] for x in await ours.list_sessions(pk)) == sorted(
                x["session_id"] for x in await ref.list_sessions(pk)
            ), where
            main = {"project_key": pk, "session_id": key["session_id"]}
            assert await ours.list_subkeys(main) == sorted(await ref.list_subkeys(main)), where  # type: ignore[arg-type]
            ours_summaries = {x["session_id"]: x["data"] for x in await ours.list_session_summaries(pk)}
            ref_summaries = {x["session_id"]: x["data"] for x in await ref.list_session_summaries(pk)}
            assert ours_summaries == ref_summaries, where
    finally:
        ours.close()


def claude_code_transcript(sid: str, result_text: str) -> list[dict[str, Any]]:
    """A Claude Code session: a prompt, a tool call, its (large) result, an answer."""
    base = {"sessionId": sid, "cwd": "/work", "version": "2.0.0", "isSidechain": False}
    return [
        {**base, "type": "user", "uuid": "1", "message": {"role": "user", "content": "count the lines"}},
        {
            **base,
            "type": "assistant",
            "uuid": "2",
            "message": {
                "id": "msg_1",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "cat big.txt"}}],
            },
        },
        {
            **base,
            "type": "user",
            "uuid": "3",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": result_text}],
            },
        },
        {
            **base,
            "type": "assistant",
            "uuid": "4",
            "message": {"id": "msg_2", "role": "assistant", "content": [{"type": "text", "text": "2000 lines."}]},
        },
    ]


async def test_a_session_reads_as_a_chat_with_tool_parts_archives_and_a_model_view(tmp_path: Path) -> None:
    big = "".join(f"line {i}\n" for i in range(2000))
    transcript = claude_code_transcript("sess-1", big)
    with UndertextSessionStore.open(tmp_path / "s", archive_threshold=4096) as s:
        assert s.chat(KEY) is None
        await s.append(KEY, transcript[:3])
        chat = s.chat(KEY)
        await s.append(KEY, transcript[3:])
        again = s.chat(KEY)
        assert again.id == chat.id  # the same chat, extended
        assert [m.role for m in again] == ["user", "assistant", "user", "assistant"]
        call = again[1].parts[0]
        assert (call["type"], call["name"], json.loads(call["args"])) == ("tool_call", "Bash", {"command": "cat big.txt"})
        result = again[2].parts[0]
        assert result["type"] == "tool_result" and result["call_id"] == "toolu_1"
        archive = result["archive"]["id"]
        assert s.store.read_context(s.chat_owner, archive, 0, len(big)) == big
        view = again.view(undertext.Budget(200_000, 8_000))
        assert view.decision == "fits"
        assert view.anthropic()["messages"][0]["content"][0]["text"] == "count the lines"
        # The transcript itself is untouched by the import.
        assert await s.load(KEY) == transcript


async def test_a_subagent_chat_names_its_session_and_delete_removes_both_chats(tmp_path: Path) -> None:
    sub = {**KEY, "subpath": "subagents/agent-7"}
    with UndertextSessionStore.open(tmp_path / "s") as s:
        await s.append(KEY, claude_code_transcript("sess-1", "ok"))
        await s.append(sub, [{**e, "isSidechain": True, "agentId": "7"} for e in claude_code_transcript("sess-1", "sub")])
        main_chat, sub_chat = s.chat(KEY), s.chat(sub)
        assert sub_chat.meta.extra["import.parent"] == main_chat.meta.extra["import.key"]
        assert sub_chat.meta.extra["import.parent_chat"] == main_chat.id
        await s.delete(KEY)
        assert list(s.store.chats(s.chat_owner)) == []
        assert list(s.store.chats(s.owner)) == []
        assert await s.load(sub) is None


async def test_an_append_and_its_summary_are_one_transaction(tmp_path: Path) -> None:
    rng = random.Random(5)
    with UndertextSessionStore.open(tmp_path / "s") as s:
        await s.append(KEY, [entry(rng, 0)])
        before = s.store.check()["batches"]
        for n in range(1, 6):
            await s.append(KEY, [entry(rng, n), entry(rng, 100 + n)])
        assert s.store.check()["batches"] == before + 5, "one batch (one log sync) per append"
        summaries = await s.list_session_summaries("proj")
        expected = fold_session_summary(None, KEY, await s.load(KEY))  # type: ignore[arg-type]
        assert summaries[0]["session_id"] == expected["session_id"]
    with UndertextSessionStore.open(tmp_path / "s") as s:
        assert len(await s.load(KEY)) == 11
        assert (await s.list_session_summaries("proj"))[0]["session_id"] == "sess-1"
