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


# -- item lists on a real graph: copy_thread, prune, reopen, edits ------------------------


class LoopState(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    target: int


def build_loop() -> Any:
    """A model node appends an AI message with a tool call, a tool node its result, until
    the thread holds ``target`` messages (ids and texts follow from the list's length)."""
    from langchain_core.messages import AIMessage, ToolMessage

    def model(state: LoopState) -> dict[str, Any]:
        n = len(state["messages"])
        call = {"id": f"call-{n}", "name": "read", "args": {"n": n}}
        return {"messages": [AIMessage(content=f"step {n}", tool_calls=[call], id=f"ai-{n}")]}

    def tools(state: LoopState) -> dict[str, Any]:
        n = len(state["messages"])
        call_id = state["messages"][-1].tool_calls[0]["id"]
        return {"messages": [ToolMessage(content=f"result {n} " + "x" * 300, tool_call_id=call_id, id=f"tool-{n}")]}

    def route(state: LoopState) -> str:
        return END if len(state["messages"]) >= state["target"] else "model"

    g = StateGraph(LoopState)
    g.add_node("model", model)
    g.add_node("tools", tools)
    g.add_edge(START, "model")
    g.add_edge("model", "tools")
    g.add_conditional_edges("tools", route)
    return g


def dump(messages: list[Any]) -> list[Any]:
    return [(type(m).__name__, m.id, m.content, getattr(m, "tool_calls", None)) for m in messages]


def history(graph: Any, thread: str) -> list[Any]:
    return [dump(s.values.get("messages", [])) for s in graph.get_state_history({"configurable": {"thread_id": thread}})]


@pytest.mark.parametrize("links", [4, 256])
def test_item_lists_of_a_graph_survive_copy_thread_prune_reopen_and_edits(
    tmp_path: Path, links: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_core.messages import HumanMessage

    from undertext.langgraph import _records

    # 4: every fourth checkpoint names its kept list by a manifest blob.
    monkeypatch.setattr(_records, "SNAPSHOT_LINKS", links)
    from langgraph.checkpoint.memory import InMemorySaver

    ref = build_loop().compile(checkpointer=InMemorySaver())
    path = tmp_path / "store"
    saver = UndertextSaver.open(path, durability="none")
    graph = build_loop().compile(checkpointer=saver)

    def run(g: Any, thread: str, human: str, target: int) -> None:
        g.invoke({"messages": [HumanMessage(content=human, id=human)], "target": target}, {"configurable": {"thread_id": thread}})

    def same(thread: str, ref_thread: str) -> None:
        got = graph.get_state({"configurable": {"thread_id": thread}})
        want = ref.get_state({"configurable": {"thread_id": ref_thread}})
        assert dump(got.values["messages"]) == dump(want.values["messages"])

    # The reference replays each thread's inputs on InMemorySaver.
    run(graph, "a", "h1", 9)
    run(ref, "a", "h1", 9)
    same("a", "a")
    assert history(graph, "a") == history(ref, "a")

    saver.copy_thread("a", "b")
    assert history(graph, "b") == history(graph, "a")
    run(graph, "b", "h2", 15)
    run(ref, "b", "h1", 9)
    run(ref, "b", "h2", 15)
    same("b", "b")

    # Pruned: the latest list's items are below the floor; the thread goes on; a copy of
    # the pruned thread copies the list whole (its base is not copied).
    saver.prune(["a"])
    same("a", "a")
    run(graph, "a", "h3", 13)
    run(ref, "a", "h3", 13)
    same("a", "a")
    saver.copy_thread("a", "c")
    run(ref, "c", "h1", 9)
    run(ref, "c", "h3", 13)
    same("c", "c")
    run(graph, "c", "h4", 17)
    run(ref, "c", "h4", 17)
    same("c", "c")

    # An edit through update_state: a message read, changed in place and written back.
    for g in (graph, ref):
        cfg = {"configurable": {"thread_id": "c"}}
        msg = g.get_state(cfg).values["messages"][3]
        msg.content = "edited"
        g.update_state(cfg, {"messages": [msg]})
    same("c", "c")
    # (Copied after a prune, "c" starts at "a"'s latest checkpoint: the newest part of the
    # reference's history.)
    mine = history(graph, "c")
    assert mine == history(ref, "c")[: len(mine)]

    # A value handed out is a copy: changing it changes no later answer.
    got = graph.get_state({"configurable": {"thread_id": "c"}}).values["messages"]
    got[0].content = "changed by the caller"
    got.pop()
    same("c", "c")

    # Reopened: every list is read from the store again, and the threads go on.
    saver.close()
    saver = UndertextSaver.open(path, durability="none")
    graph = build_loop().compile(checkpointer=saver)
    for t in ("a", "b", "c"):
        same(t, t)
        mine = history(graph, t)
        assert mine == history(ref, t)[: len(mine)]
    assert history(graph, "b") == history(ref, "b")
    run(graph, "b", "h5", 21)
    run(ref, "b", "h5", 21)
    same("b", "b")
    saver.close()
