"""UndertextSession: the Agents SDK Session protocol, answered like SQLiteSession, and
the compaction hook replacing history in one transaction."""

from __future__ import annotations

import json
import os
import random
import threading
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("UNDERTEXT_REQUIRE_INTEGRATIONS") != "1":  # scripts/test-python-integrations sets it
    pytest.importorskip("agents.memory", reason="run scripts/test-python-integrations")

from agents.memory import Session, SQLiteSession
from agents.memory.session_settings import SessionSettings

import undertext
from undertext.agents import UndertextSession

pytestmark = pytest.mark.asyncio


def item(n: int, role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": f"message {n} " + "é✓" * (n % 5)}


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with undertext.Store.open(tmp_path / "store") as s:
        yield s


async def test_it_is_an_sdk_session(store: Any) -> None:
    session = UndertextSession("s", store)
    assert isinstance(session, Session)
    assert session.session_id == "s"
    assert session.session_settings == SessionSettings()


async def test_a_random_sequence_of_calls_answers_like_sqlite_session(store: Any, tmp_path: Path) -> None:
    rng = random.Random(8)
    ours = UndertextSession("same", store)
    sqlite = SQLiteSession("same", tmp_path / "sdk.db")
    n = 0
    for step in range(400):
        op = rng.choice(["add", "add", "add", "pop", "get", "get_limit", "clear", "compact"] if step % 97 else ["clear"])
        if op == "add":
            batch = [item(n + i, rng.choice(["user", "assistant"])) for i in range(rng.randint(0, 4))]
            n += len(batch)
            await ours.add_items(batch)
            await sqlite.add_items(batch)
        elif op == "pop":
            assert await ours.pop_item() == await sqlite.pop_item(), step
        elif op == "get":
            assert await ours.get_items() == await sqlite.get_items(), step
        elif op == "get_limit":
            limit = rng.randint(-1, 8)
            assert await ours.get_items(limit) == await sqlite.get_items(limit), (step, limit)
        elif op == "clear":
            await ours.clear_session()
            await sqlite.clear_session()
        else:
            limit = rng.randint(1, 6)
            a = await ours._get_compaction_snapshot(limit)
            b = await sqlite._get_compaction_snapshot(limit)
            assert (a.items, a.complete) == (b.items, b.complete), step
            if a.items:
                start = rng.randint(0, len(a.items) - 1)
                out = [{"role": "assistant", "content": f"summary at {step}"}]
                assert await a.replace_suffix(start, out) == await b.replace_suffix(start, out)
        assert await ours.get_items() == await sqlite.get_items(), (step, op)
    sqlite.close()


async def test_session_settings_limit_is_the_default_of_get_items(store: Any) -> None:
    session = UndertextSession("s", store, session_settings={"limit": 2})
    await session.add_items([item(i) for i in range(5)])
    assert await session.get_items() == [item(3), item(4)]
    assert await session.get_items(4) == [item(i) for i in range(1, 5)]


async def test_compaction_replaces_the_suffix_in_one_step_and_history_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with undertext.Store.open(path) as store:
        session = UndertextSession("s", store)
        await session.add_items([item(i) for i in range(10)])
        snap = await session._get_compaction_snapshot(4)
        assert snap.items == [item(i) for i in range(6, 10)] and snap.complete is False
        summary = {"role": "assistant", "content": "summary of 7..9"}
        assert await snap.replace_suffix(1, [summary]) is True
        expected = [item(i) for i in range(7)] + [summary]
        assert await session.get_items() == expected
    with undertext.Store.open(path) as store:
        again = UndertextSession("s", store)
        assert await again.get_items() == expected
        assert await again.get_items(2) == [item(6), summary]
        assert await again.pop_item() == summary
        assert await again.pop_item() == item(6)
        assert await again.get_items() == [item(i) for i in range(6)]


async def test_a_suffix_replacement_after_the_history_moved_writes_nothing(store: Any) -> None:
    session = UndertextSession("s", store)
    await session.add_items([item(i) for i in range(5)])
    snap = await session._get_compaction_snapshot(3)
    await session.add_items([item(5)])
    assert await snap.replace_suffix(0, [{"role": "assistant", "content": "x"}]) is False
    assert await session.get_items() == [item(i) for i in range(6)]


async def test_a_failed_replacement_leaves_the_old_history_whole(store: Any) -> None:
    session = UndertextSession("s", store)
    await session.add_items([item(i) for i in range(5)])
    snap = await session._get_compaction_snapshot(5)
    with pytest.raises(TypeError):
        await snap.replace_suffix(2, [{"role": "assistant", "content": object()}])
    assert await session.get_items() == [item(i) for i in range(5)]


async def test_prune_prefix_drops_the_oldest_items_while_the_predicate_holds(store: Any) -> None:
    session = UndertextSession("s", store)
    await session.add_items([item(i) for i in range(8)])
    snap = await session._get_compaction_snapshot(2, prune_prefix=lambda it: it["content"].startswith(("message 0", "message 1")))
    assert await snap.replace_suffix(0, [{"role": "assistant", "content": "tail"}]) is True
    items = await session.get_items()
    assert items == [item(i) for i in range(2, 6)] + [{"role": "assistant", "content": "tail"}]
    # A later pop that jumps over the compaction marker keeps the pruned prefix pruned.
    assert await session.pop_item() == {"role": "assistant", "content": "tail"}
    assert await session.pop_item() == item(5)
    assert await session.get_items() == [item(i) for i in range(2, 5)]


async def test_get_items_with_a_limit_reads_only_the_newest_messages(store: Any) -> None:
    session = UndertextSession("s", store)
    await session.add_items([item(i) for i in range(2000)])
    calls = []
    chat = session._chat
    real = chat.snapshot

    class CountingSnapshot:
        """Records the seq of every message the session reads."""

        def __init__(self, snap: Any) -> None:
            self.snap = snap

        def __len__(self) -> int:
            return len(self.snap)

        @property
        def revision(self) -> int:
            return int(self.snap.revision)

        def texts(self, *args: Any, **kwargs: Any) -> Any:
            rows = self.snap.texts(*args, **kwargs)
            calls.extend(seq for seq, _v in rows)
            return rows

    class Wrapped:
        def refresh(self) -> None:
            chat.refresh()

        def snapshot(self) -> Any:
            return CountingSnapshot(real())

    session._chat = Wrapped()
    assert await session.get_items(3) == [item(1997), item(1998), item(1999)]
    assert calls == [1999, 1998, 1997]
    # A full read keeps the texts: the next reads take them and read only what was appended.
    calls.clear()
    assert len(await session.get_items()) == 2000
    assert len(calls) == 2000
    session._chat = chat
    await session.add_items([item(2000), item(2001)])
    session._chat = Wrapped()
    calls.clear()
    assert await session.get_items(3) == [item(1999), item(2000), item(2001)]
    assert calls == [2000, 2001]
    calls.clear()
    assert len(await session.get_items()) == 2002
    assert calls == []


async def test_get_items_with_a_limit_is_the_tail_of_get_items_whatever_was_hidden(store: Any) -> None:
    session = UndertextSession("s", store)
    other = UndertextSession("s", store)  # another object on the same chat: no kept texts
    rng = random.Random(7)
    for step in range(60):
        op = rng.random()
        if op < 0.6:
            await session.add_items([item(step * 10 + j, rng.choice(["user", "assistant"])) for j in range(rng.randint(1, 4))])
        elif op < 0.8:
            await session.pop_item()
        elif op < 0.9:
            snap = await session._get_compaction_snapshot(3)
            if snap is not None and snap.items:
                await snap.replace_suffix(len(snap.items) - 1, [item(-step)])
        else:
            await other.add_items([item(10_000 + step)])
        everything = await session.get_items()
        assert everything == await other.get_items()
        for limit in (1, 2, 5, 50):
            assert await session.get_items(limit) == everything[-limit:]
            assert await other.get_items(limit) == everything[-limit:]


async def test_kept_texts_follow_every_change_of_the_history(store: Any) -> None:
    session = UndertextSession("s", store)
    await session.add_items([item(i) for i in range(5)])
    assert await session.get_items() == [item(i) for i in range(5)]  # kept from here
    await UndertextSession("s", store).add_items([item(5)])  # an append by another object
    assert await session.get_items() == [item(i) for i in range(6)]
    assert await session.pop_item() == item(5)
    assert await session.get_items() == [item(i) for i in range(5)]
    session.replace_all_sync([item(9)])
    assert await session.get_items() == [item(9)]
    await session.clear_session()
    assert await session.get_items() == []
    await session.add_items([item(1)])
    assert await session.get_items() == [item(1)]


async def test_a_history_over_the_kept_size_is_read_from_the_store_each_time(store: Any, monkeypatch: Any) -> None:
    import undertext._kept_texts as kept_texts

    session = UndertextSession("s", store)
    await session.add_items([item(i) for i in range(20)])
    monkeypatch.setattr(kept_texts, "MAX_CHARS", sum(len(json.dumps(item(i), separators=(",", ":"))) for i in range(20)))
    assert await session.get_items() == [item(i) for i in range(20)]
    assert session._kept is not None  # at the limit: kept
    await session.add_items([item(20)])
    assert await session.get_items(2) == [item(19), item(20)]  # over it: read, not kept
    assert session._kept is None
    assert await session.get_items(3) == [item(18), item(19), item(20)]
    assert await session.get_items() == [item(i) for i in range(21)]


async def test_a_caller_changing_the_items_it_got_does_not_change_the_next_read(store: Any) -> None:
    session = UndertextSession("s", store)
    await session.add_items([{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}])
    got = await session.get_items()
    got[0]["content"][0]["text"] = "changed"
    got.append({"role": "user", "content": "extra"})
    assert await session.get_items() == [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]


async def test_items_read_back_equal_what_json_gives_for_every_kind_of_value(store: Any) -> None:
    values = [
        {"n": [0, -1, 2**63 - 1, -(2**63), 2**64, -(2**70), 10**30]},
        {"f": [0.1, -0.0, 1e300, 2.2250738585072011e-308, 1.5, 3.0]},
        {"nan": float("nan"), "inf": [float("inf"), float("-inf")]},
        {"s": "é✓😀 \\u escapes \n \" \\ / \t \b \f \r \u0000 \ud800 lone", "": None, "t": True, "F": False},
        {"nested": [[[[{"a": [{}]}]]]], "dup": "x"},
        "a bare string",
        [1, "two", None],
    ]
    session = UndertextSession("s", store)
    await session.add_items(values)  # type: ignore[arg-type]
    want = [json.loads(json.dumps(v)) for v in values]
    for got in (await session.get_items(), await session.get_items(), await session.get_items(len(values))):
        assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
        assert [type(x) for x in got] == [type(x) for x in want]


async def test_sessions_with_the_same_id_share_history_and_other_ids_do_not(store: Any) -> None:
    a = UndertextSession("one", store)
    await a.add_items([item(1)])
    assert await UndertextSession("one", store).get_items() == [item(1)]
    assert await UndertextSession("two", store).get_items() == []


async def test_eight_threads_adding_lose_nothing(store: Any) -> None:
    session = UndertextSession("s", store)

    def add(t: int) -> None:
        for i in range(50):
            session.add_items_sync([{"role": "user", "content": f"{t}:{i}"}])

    threads = [threading.Thread(target=add, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    items = await session.get_items()
    assert len(items) == 400
    for t in range(8):
        mine = [x["content"] for x in items if x["content"].startswith(f"{t}:")]
        assert mine == [f"{t}:{i}" for i in range(50)]


async def test_items_are_stored_as_json_in_engine_messages(store: Any) -> None:
    session = UndertextSession("s", store)
    call = {"type": "function_call_output", "call_id": "c1", "output": "42"}
    await session.add_items([item(1), call])
    msgs = session._chat.messages()
    assert [m.role for m in msgs] == ["user", "tool"]
    assert json.loads(msgs[1].text) == call


class CountingStore:
    """A store that counts the calls listing an owner's chats and the index lookups."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.listings = 0
        self.lookups = 0

    def chats(self, owner: str) -> Any:
        self.listings += 1
        return self._store.chats(owner)

    def find_chats(self, *a: Any, **k: Any) -> Any:
        self.lookups += 1
        return self._store.find_chats(*a, **k)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_making_a_session_is_one_index_lookup_and_never_lists_the_owners_chats(store: Any) -> None:
    counting = CountingStore(store)
    for i in range(50):
        await UndertextSession(f"s{i}", counting).add_items([item(i)])
    again = UndertextSession("s7", counting)
    assert await again.get_items() == [item(7)]
    assert counting.listings == 0
    assert counting.lookups == 50  # one per session id, the first time it is used in the process


async def test_a_session_made_in_another_process_is_found_by_its_title(tmp_path: Path) -> None:
    with undertext.Store.open(tmp_path / "s") as st:
        await UndertextSession("old", st).add_items([item(1)])
        st.create_chat("openai-agents", title="old")  # same title, not a session chat
    with undertext.Store.open(tmp_path / "s") as st:
        assert await UndertextSession("old", st).get_items() == [item(1)]


async def test_a_session_opened_from_a_path_owns_its_store_and_finds_its_items_again(tmp_path: Path) -> None:
    with UndertextSession("s", str(tmp_path / "store")) as session:
        await session.add_items([item(1)])
    assert session.store.closed
    async with UndertextSession.open("s", tmp_path / "store", durability="none") as session:
        assert await session.get_items() == [item(1)]
    with pytest.raises(TypeError, match="store: expected an open undertext.Store or a path, found int"):
        UndertextSession("s", 3)


async def test_a_temporary_session_is_removed_on_close() -> None:
    session = UndertextSession.temporary("s")
    await session.add_items([item(1)])
    path = session.store.path
    assert path.exists()
    session.close()
    assert not path.exists()
    with pytest.raises(undertext.Closed) as e:
        await session.add_items([item(2)])
    assert "removed" in str(e.value) and "open it again" not in str(e.value)


async def test_every_call_on_a_closed_session_raises_like_sqlite_session_even_add_items_of_nothing(
    tmp_path: Path,
) -> None:
    sqlite = SQLiteSession("s", tmp_path / "sdk.db")
    sqlite.close()
    with pytest.raises(RuntimeError, match="closed"):
        await sqlite.add_items([])
    owning = UndertextSession.open("s", tmp_path / "owning")
    with undertext.Store.open(tmp_path / "shared") as store:
        shared = UndertextSession("s", store)  # closing it leaves the store open
        for session in (owning, shared):
            await session.add_items([item(1)])
            session.close()
            calls = [
                session.add_items([]),
                session.add_items([item(2)]),
                session.get_items(),
                session.pop_item(),
                session.clear_session(),
            ]
            for call in calls:
                with pytest.raises(RuntimeError, match="closed") as e:
                    await call
                assert isinstance(e.value, undertext.Closed)
        assert not store.closed
        assert await UndertextSession("s", store).get_items() == [item(1)]


def _old_marker(cut: int, floor: int) -> dict[str, Any]:
    """A marker as versions before the engine's soft deletion wrote it."""
    return {"role": "system", "parts": [{"type": "summary", "text": json.dumps({"cut": cut, "floor": floor})}]}


async def test_a_store_with_markers_of_the_old_layout_reads_and_goes_on_as_before(store: Any) -> None:
    session = UndertextSession("old", store)
    chat = session._chat
    # The old layout, written directly: items 0..7 (seqs 0..7); a compaction that pruned
    # items 0, 1 and replaced items 5..7 by a summary (a marker at seq 8 with cut 5, floor
    # 2, then the summary at 9); a pop of item 10 (a marker at 11), and a pop of item 12
    # when it was not the last message (a marker at 13).
    chat.append_batch([{"role": "user", "content": json.dumps(item(i))} for i in range(8)])
    summary = {"role": "assistant", "content": "summary of 5..7"}
    chat.append_batch([_old_marker(5, 2), {"role": "assistant", "content": json.dumps(summary)}])
    chat.append({"role": "user", "content": json.dumps(item(10))})
    chat.append(_old_marker(10, 0))
    chat.append({"role": "user", "content": json.dumps(item(12))})
    chat.append(_old_marker(12, 0))
    live = [item(2), item(3), item(4), summary]
    assert await session.get_items() == live
    assert await session.get_items(2) == live[-2:]
    # New writes go on over the old layout: a pop of an item that is not the last message
    # hides it; a suffix replacement across the markers hides them and keeps their floor.
    assert await session.pop_item() == summary
    assert chat.snapshot().hidden == [(9, 10)]
    await session.add_items([item(14)])
    assert await session.get_items() == [item(2), item(3), item(4), item(14)]
    snap = await session._get_compaction_snapshot(2)
    assert await snap.replace_suffix(0, [{"role": "assistant", "content": "all of it"}]) is True
    final = [item(2), item(3), {"role": "assistant", "content": "all of it"}]
    assert await session.get_items() == final
    assert chat.snapshot().hidden == [(0, 2), (4, 15)]
    again = UndertextSession("old", store)
    assert await again.get_items() == final
    # No marker was written by the new code: the summaries are the old ones.
    summaries = [m.seq for m in chat.messages(hidden=True) if m.parts and m.parts[0]["type"] == "summary"]
    assert summaries == [8, 11, 13]


async def test_pops_and_compactions_write_no_marker_and_hide_instead(store: Any) -> None:
    session = UndertextSession("s", store)
    await session.add_items([item(i) for i in range(6)])
    await session.add_items([item(6)])
    snap = await session._get_compaction_snapshot(3, prune_prefix=lambda it: it["content"].startswith("message 0"))
    assert await snap.replace_suffix(1, [{"role": "assistant", "content": "short"}]) is True
    assert await session.pop_item() == {"role": "assistant", "content": "short"}
    assert await session.pop_item() == item(4)
    chat = session._chat
    everything = chat.messages(hidden=True)
    # (a popped item is erased: its place is left, without parts)
    assert all(not m.parts or m.parts[0]["type"] != "summary" for m in everything)
    hidden = chat.snapshot().hidden
    # The pops erase (7: "short", then 4); the compaction hid 0 and 4..7.
    assert hidden == [(0, 1), (4, 8)], hidden
    assert [json.loads(m.text) for m in chat.messages()] == [item(1), item(2), item(3)]
    assert await session.get_items() == [item(1), item(2), item(3)]


async def test_clear_session_and_pop_item_erase_what_they_delete(tmp_path: Path) -> None:
    path = tmp_path / "erase"
    with undertext.Store.open(path, compression="none") as store:
        session = UndertextSession("s", store)
        await session.add_items([item(1), {"role": "user", "content": "POPPED-SECRET"}])
        assert await session.pop_item() == {"role": "user", "content": "POPPED-SECRET"}
        await session.add_items([{"role": "user", "content": "CLEARED-SECRET"}])
        await session.clear_session()
        assert await session.get_items() == []
        await session.add_items([item(2)])
        assert await session.get_items() == [item(2)]
    assert Path(path).exists()
    raw = b"".join(p.read_bytes() for p in Path(path).rglob("*") if p.is_file())
    assert b"POPPED-SECRET" in raw and b"CLEARED-SECRET" in raw
    undertext.Store.gc(path)
    raw = b"".join(p.read_bytes() for p in Path(path).rglob("*") if p.is_file())
    assert b"POPPED-SECRET" not in raw and b"CLEARED-SECRET" not in raw
    with undertext.Store.open(path) as store:
        assert await UndertextSession("s", store).get_items() == [item(2)]
