"""The LangGraph saver and the Agents SDK session on a fleet URL, two stores standing for two
processes: each must see the other's writes at its next read, although a Python `Chat`
reads through a held handle (no PostgreSQL round trip per call). Needs UNDERTEXT_FLEET_URL
(scripts/test-fleet) and the integration packages (skipped without them)."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

if not os.environ.get("UNDERTEXT_FLEET_URL"):
    # Before the integration imports below, which a venv without them cannot make (test_fleet.py
    # reports a missing URL when UNDERTEXT_FLEET_REQUIRED=1).
    pytest.skip("UNDERTEXT_FLEET_URL is not set (scripts/test-fleet sets it)", allow_module_level=True)
if os.environ.get("UNDERTEXT_REQUIRE_INTEGRATIONS") != "1":
    pytest.importorskip("agents.memory", reason="needs openai-agents (scripts/test-fleet installs it)")
    pytest.importorskip("langgraph.checkpoint.base", reason="needs langgraph-checkpoint (scripts/test-fleet)")

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

import undertext
from undertext.agents import UndertextSession
from undertext.langgraph import UndertextSaver

pytestmark = pytest.mark.fleet


def item(n: int) -> dict[str, Any]:
    return {"role": "user", "content": f"message {n}"}


def test_the_agents_session_sees_and_pops_the_other_processes_items(two, owner):
    a, b = two
    o, sid = owner("agents"), f"s-{uuid.uuid4().hex}"
    mine = UndertextSession(sid, a, owner=o)
    theirs = UndertextSession(sid, b, owner=o)
    mine.add_items_sync([item(0)])
    assert theirs.get_items_sync() == [item(0)]
    theirs.add_items_sync([item(1), item(2)])
    assert mine.get_items_sync() == [item(0), item(1), item(2)]
    assert mine.get_items_sync(limit=1) == [item(2)]
    # The newest item is the other process's: pop takes it, not an older one.
    theirs.add_items_sync([item(3)])
    assert mine.pop_item_sync() == item(3)
    assert theirs.get_items_sync() == [item(0), item(1), item(2)]
    theirs.replace_all_sync([item(9)])
    assert mine.get_items_sync() == [item(9)]
    mine.add_items_sync([item(10)])
    theirs.clear_session_sync()
    assert mine.get_items_sync() == []


def cfg(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}


def put(saver: UndertextSaver, thread: str, parent: str | None, n: int) -> str:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=-1))
    cp["channel_values"] = {"n": n}
    cp["channel_versions"] = {"n": n + 1}
    stored = saver.put(cfg(thread, parent), cp, {"source": "loop", "step": n}, {"n": n + 1})
    return stored["configurable"]["checkpoint_id"]


def test_the_langgraph_saver_sees_the_other_processes_checkpoints(two, owner):
    a, b = two
    o, thread = owner("lg"), f"t-{uuid.uuid4().hex}"
    mine, theirs = UndertextSaver(a, owner=o), UndertextSaver(b, owner=o)
    first = put(mine, thread, None, 0)
    got = theirs.get_tuple(cfg(thread))
    assert got is not None and got.checkpoint["channel_values"] == {"n": 0}
    second = put(theirs, thread, first, 1)
    latest = mine.get_tuple(cfg(thread))
    assert latest.checkpoint["id"] == second and latest.checkpoint["channel_values"] == {"n": 1}
    third = put(mine, thread, second, 2)
    assert [t.checkpoint["id"] for t in theirs.list(cfg(thread))] == [third, second, first]
    theirs.put_writes(cfg(thread, third), [("out", "from the other process")], task_id="t1")
    assert [w[1:] for w in mine.get_tuple(cfg(thread)).pending_writes] == [("out", "from the other process")]


def test_a_fresh_savers_first_read_is_the_chat_as_found_and_its_next_read_sees_a_write_since(
    two, owner, monkeypatch
):
    """A thread's first read on a store opens the chat as ``find_chats`` found it (no second
    round trip, ``Store.chat(refresh=False)``): a write another process commits between the
    lookup and the open is not in that read (it began before the write), and is in the next."""
    from undertext.langgraph import _lanes

    a, b = two
    o, thread = owner("lg-cold"), f"t-{uuid.uuid4().hex}"
    mine, theirs = UndertextSaver(a, owner=o), UndertextSaver(b, owner=o)
    first = put(mine, thread, None, 0)
    written: list[str] = []
    add = _lanes._Registry._add

    def add_after_a_foreign_write(self: Any, infos: Any, skip: Any = ()) -> Any:
        if self.store is b and not written:
            written.append(put(mine, thread, first, 1))
        return add(self, infos, skip)

    monkeypatch.setattr(_lanes._Registry, "_add", add_after_a_foreign_write)
    got = theirs.get_tuple(cfg(thread))
    assert written, "the foreign write ran between find_chats and the open"
    assert got is not None and got.checkpoint["id"] == first, "the chat as find_chats found it"
    latest = theirs.get_tuple(cfg(thread))
    assert latest is not None and latest.checkpoint["id"] == written[0]
    assert latest.checkpoint["channel_values"] == {"n": 1}
    # A write through the lane builds on the chat's last committed state.
    third = put(theirs, thread, written[0], 2)
    assert [t.checkpoint["id"] for t in mine.list(cfg(thread))] == [third, written[0], first]
