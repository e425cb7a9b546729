"""UndertextChatMessageHistory: LangChain's BaseChatMessageHistory over an Undertext store.

langchain-tests (1.1.9, its newest release) has no standard suite for chat message
histories; the first tests here are langchain-core's own tests of its histories
(tests/unit_tests/chat_history/test_chat_history.py: the in-memory history, the add-message
and bulk-add implementations, the async interface), run against this one, and its
RunnableWithMessageHistory in use. The rest prove what the store adds: durability across a
reopen, one transaction per batch, isolation by session and owner, erasure on clear, and a
clear refusal of bad input that writes nothing."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("UNDERTEXT_REQUIRE_INTEGRATIONS") != "1":  # scripts/test-python-integrations sets it
    pytest.importorskip("langchain_core.chat_history", reason="run scripts/test-python-integrations")

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, FunctionMessage
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

import undertext
from undertext.langchain import UndertextChatMessageHistory


def every_kind() -> list[BaseMessage]:
    """One message of each kind LangChain has, with the fields a round trip could lose."""
    return [
        SystemMessage("You are terse."),
        HumanMessage("Hello, é✓ 中文", id="h-1", name="alice", additional_kwargs={"k": [1, 2]}),
        HumanMessage(content=[{"type": "text", "text": "blocks"}, {"type": "image_url", "image_url": {"url": "x"}}]),
        AIMessage(
            "",
            id="a-1",
            tool_calls=[{"name": "search", "args": {"q": "weather", "n": 3}, "id": "call-1"}],
            usage_metadata={"input_tokens": 10, "output_tokens": 2, "total_tokens": 12},
            response_metadata={"model_name": "m", "finish_reason": "tool_calls"},
        ),
        ToolMessage("sunny", tool_call_id="call-1", status="success", artifact={"raw": [1]}),
        FunctionMessage("42", name="f"),
        ChatMessage("free-form role", role="critic"),
        AIMessage("a lone surrogate \ud800 survives"),
        ToolMessage("long output " * 20_000, tool_call_id="call-2"),  # past the archive threshold
    ]


# -- langchain-core's tests of its histories, against this one ------------------------------


@pytest.mark.asyncio
async def test_initialization_like_langchain_cores_in_memory_history(store: Any) -> None:
    """test_in_memory_history_initialization, with two sessions of one store."""
    messages = [HumanMessage(content="Hello")]
    history = UndertextChatMessageHistory("first", store)
    history.add_messages(messages)
    assert await history.aget_messages() == messages
    other_history = UndertextChatMessageHistory("second", store)
    await other_history.aadd_messages([HumanMessage(content="World")])
    assert history.messages == messages
    await history.aclear()
    assert history.messages == []
    assert other_history.messages == [HumanMessage(content="World")]


def test_add_message_and_add_messages_like_langchain_core(store: Any) -> None:
    """test_add_message_implementation_only and test_bulk_message_implementation_only."""
    history = UndertextChatMessageHistory("s", store)
    history.add_message(HumanMessage(content="Hello"))
    assert history.messages == [HumanMessage(content="Hello")]
    history.add_message(HumanMessage(content="World"))
    history.add_messages([HumanMessage(content="Hello"), HumanMessage(content="World")])
    assert history.messages == [HumanMessage(content=t) for t in ("Hello", "World", "Hello", "World")]
    history.add_user_message("from a str")
    history.add_ai_message("answer")
    assert history.messages[-2:] == [HumanMessage(content="from a str"), AIMessage(content="answer")]


@pytest.mark.asyncio
async def test_async_interface_like_langchain_core(store: Any) -> None:
    """test_async_interface."""
    history = UndertextChatMessageHistory("s", store)
    await history.aadd_messages([HumanMessage(content="Hello"), HumanMessage(content="World")])
    assert await history.aget_messages() == [HumanMessage(content="Hello"), HumanMessage(content="World")]
    await history.aadd_messages([HumanMessage(content="!")])
    assert await history.aget_messages() == [
        HumanMessage(content="Hello"),
        HumanMessage(content="World"),
        HumanMessage(content="!"),
    ]
    await history.aclear()
    assert await history.aget_messages() == []


def test_it_is_a_langchain_history_and_says_so(store: Any) -> None:
    history = UndertextChatMessageHistory("s", store)
    assert isinstance(history, BaseChatMessageHistory)
    history.add_messages([HumanMessage("hi"), AIMessage("hello")])
    assert str(history) == "Human: hi\nAI: hello"


@pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")
def test_runnable_with_message_history_remembers_across_a_reopen(tmp_path: Path) -> None:
    """LangChain's RunnableWithMessageHistory: each call reads the session's history and
    appends the exchange; a new process (a reopened store) goes on from it."""
    seen: list[list[BaseMessage]] = []
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question}")])

    def chain_over(store: Any, answers: list[str]) -> Any:
        model = FakeListChatModel(responses=answers)

        def record(value: Any) -> Any:
            seen.append(value.to_messages())
            return value

        return RunnableWithMessageHistory(
            prompt | record | model,
            lambda session_id: UndertextChatMessageHistory(session_id, store),
            input_messages_key="question",
            history_messages_key="history",
        )

    config = {"configurable": {"session_id": "user-1"}}
    with undertext.Store.open(tmp_path / "store") as store:
        chain = chain_over(store, ["Hi Ann.", "Your name is Ann."])
        assert chain.invoke({"question": "I am Ann."}, config).content == "Hi Ann."
        assert chain.invoke({"question": "Who am I?"}, config).content == "Your name is Ann."
    assert [(m.type, m.content) for m in seen[1]] == [("human", "I am Ann."), ("ai", "Hi Ann."), ("human", "Who am I?")]
    with undertext.Store.open(tmp_path / "store") as store:
        chain = chain_over(store, ["Still Ann."])
        chain.invoke({"question": "And now?"}, config)
        assert len(seen[2]) == 5
        assert UndertextChatMessageHistory("user-1", store).messages[-1].content == "Still Ann."


# -- what the store adds -------------------------------------------------------------------


def test_every_kind_of_message_comes_back_equal_after_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with UndertextChatMessageHistory.open("s", path) as history:
        history.add_messages(every_kind())
        assert history.messages == every_kind()
    with UndertextChatMessageHistory.open("s", path) as history:
        got = history.messages
        assert got == every_kind()
        assert [type(m) for m in got] == [type(m) for m in every_kind()]
        # The engine chat reads as a conversation: roles follow the LangChain types.
        chat = history.store.chat(history.owner, history.chat_id)
        assert [m.role for m in chat.messages()] == [
            "system", "user", "user", "assistant", "tool", "tool", "assistant", "assistant", "tool",
        ]


def test_add_messages_is_one_transaction(tmp_path: Path) -> None:
    with UndertextChatMessageHistory.open("s", tmp_path / "store", durability="immediate") as history:
        history.add_messages([HumanMessage("warm up")])
        before = history.store.stats()["log_syncs"]
        history.add_messages([HumanMessage(f"m{i}") for i in range(20)])
        assert history.store.stats()["log_syncs"] - before == 1
        assert len(history.messages) == 21


def test_sessions_and_owners_are_isolated(store: Any) -> None:
    a = UndertextChatMessageHistory("s", store)
    b = UndertextChatMessageHistory("other", store)
    c = UndertextChatMessageHistory("s", store, owner="someone-else")
    a.add_messages([HumanMessage("A's secret")])
    assert b.messages == [] and c.messages == []
    assert store.search("someone-else", "secret") == []
    # Another object on the same session and owner is the same history.
    assert UndertextChatMessageHistory("s", store).messages == [HumanMessage("A's secret")]


def test_clear_erases_the_messages_from_the_files(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with UndertextChatMessageHistory.open("s", path, compression="none") as history:
        history.add_messages([HumanMessage("CLEARED-SECRET")])
        history.clear()
        assert history.messages == []
        history.clear()  # nothing left: nothing written
        history.add_messages([HumanMessage("kept")])
    raw = b"".join(p.read_bytes() for p in path.rglob("*") if p.is_file())
    assert b"CLEARED-SECRET" in raw
    undertext.Store.gc(path)
    raw = b"".join(p.read_bytes() for p in path.rglob("*") if p.is_file())
    assert b"CLEARED-SECRET" not in raw
    with UndertextChatMessageHistory.open("s", path) as history:
        assert history.messages == [HumanMessage("kept")]


def test_bad_input_is_refused_and_nothing_is_added(store: Any) -> None:
    history = UndertextChatMessageHistory("s", store)
    history.add_messages([HumanMessage("before")])
    with pytest.raises(TypeError, match=r"messages\[1\]: expected a LangChain message .*found str; nothing was added"):
        history.add_messages([HumanMessage("one"), "not a message"])  # type: ignore[list-item]
    assert history.messages == [HumanMessage("before")]
    with pytest.raises(TypeError, match="store: expected an open undertext.Store or a path, found int"):
        UndertextChatMessageHistory("s", 42)


def test_a_closed_history_raises_closed(tmp_path: Path) -> None:
    history = UndertextChatMessageHistory.temporary("s")
    history.add_messages([HumanMessage("x")])
    history.close()
    for call in (lambda: history.messages, lambda: history.add_messages([]), history.clear):
        with pytest.raises(undertext.Closed, match="is closed"):
            call()
    with pytest.raises(RuntimeError):
        asyncio.run(history.aget_messages())
    with undertext.Store.open(tmp_path / "shared") as store:
        shared = UndertextChatMessageHistory("s", store)
    with pytest.raises(undertext.Closed):
        shared.add_messages([HumanMessage("after the store closed")])


def test_concurrent_adds_from_threads_all_land(store: Any) -> None:
    histories = [UndertextChatMessageHistory("s", store) for _ in range(4)]

    def add(i: int) -> None:
        for j in range(10):
            histories[i].add_messages([HumanMessage(f"{i}-{j}"), AIMessage(f"{i}-{j}")])

    threads = [threading.Thread(target=add, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = histories[0].messages
    assert len(got) == 80
    # Each batch landed whole: a human message is always followed by its answer.
    assert all(got[k].content == got[k + 1].content for k in range(0, 80, 2))
