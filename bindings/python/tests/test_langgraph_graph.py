"""A real LangGraph graph on UndertextSaver: an interrupt survives closing the store, the
run resumes in a new process-like setting (new store handle, new saver), and the state
history is the one LangGraph recorded."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

if os.environ.get("UNDERTEXT_REQUIRE_INTEGRATIONS") != "1":  # scripts/test-python-integrations sets it
    pytest.importorskip("langgraph.graph", reason="run scripts/test-python-integrations")

from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

import undertext
from undertext.langgraph import UndertextSaver


class State(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    approved: bool


def build() -> Any:
    def agent(state: State) -> dict[str, Any]:
        return {"messages": [("ai", f"reply to {len(state['messages'])} message(s)")]}

    def review(state: State) -> dict[str, Any]:
        answer = interrupt("approve the reply?")
        return {"approved": answer == "yes"}

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("review", review)
    g.add_edge(START, "agent")
    g.add_edge("agent", "review")
    g.add_edge("review", END)
    return g


def texts(state: Any) -> list[str]:
    return [m.content for m in state.values["messages"]]


def test_an_interrupted_run_resumes_after_the_store_is_reopened(tmp_path: Path) -> None:
    path = tmp_path / "store"
    config = {"configurable": {"thread_id": "g1"}}
    with undertext.Store.open(path) as store:
        graph = build().compile(checkpointer=UndertextSaver(store))
        graph.invoke({"messages": [("user", "hi")]}, config)
        state = graph.get_state(config)
        assert state.next == ("review",)
        assert state.tasks[0].interrupts[0].value == "approve the reply?"
    with undertext.Store.open(path) as store:
        graph = build().compile(checkpointer=UndertextSaver(store))
        assert graph.get_state(config).next == ("review",)
        out = graph.invoke(Command(resume="yes"), config)
        assert out["approved"] is True
        assert texts(graph.get_state(config)) == ["hi", "reply to 1 message(s)"]
        graph.invoke({"messages": [("user", "again")]}, config)
        graph.invoke(Command(resume="no"), config)
        final = graph.get_state(config)
        assert texts(final) == ["hi", "reply to 1 message(s)", "again", "reply to 3 message(s)"]
        assert final.values["approved"] is False
        history = list(graph.get_state_history(config))
        steps = [h.metadata["step"] for h in history]
        assert steps == sorted(steps, reverse=True) and len(history) >= 8
        # Time travel: the state before the second turn is still there, unchanged.
        before_second = next(h for h in history if h.values.get("approved") is True and len(h.values["messages"]) == 2)
        assert texts(before_second) == ["hi", "reply to 1 message(s)"]


@pytest.mark.asyncio
async def test_the_async_graph_api_runs_on_the_saver(tmp_path: Path) -> None:
    config = {"configurable": {"thread_id": "a1"}}
    with undertext.Store.open(tmp_path / "store") as store:
        graph = build().compile(checkpointer=UndertextSaver(store))
        await graph.ainvoke({"messages": [("user", "hello")]}, config)
        out = await graph.ainvoke(Command(resume="yes"), config)
        assert out["approved"] is True
        state = await graph.aget_state(config)
        assert texts(state) == ["hello", "reply to 1 message(s)"]
        assert len([h async for h in graph.aget_state_history(config)]) >= 4
