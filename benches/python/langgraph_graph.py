"""UndertextSaver vs SqliteSaver on a real LangGraph graph, side by side in one run.

The workload of issue 19: a ``StateGraph`` whose ``messages`` channel uses ``add_messages``
(and, for comparison, LangGraph's beta ``DeltaChannel`` with the same reducer), run by
LangGraph's own loop: a model node appends an AI message with one tool call, a tool node
appends a ~1.3 KB tool result; N pairs (default 300) = 2N supersteps, one ``invoke``.
Then ``graph.get_state`` on the finished thread, its first call apart (``first``: for
UndertextSaver the call that takes the messages decoded when they were put; later calls
decode them once more, then copy them from its cache) and the median of the 5 calls after
it, ``list(graph.get_state_history(limit=50))`` (median of 3), the bytes on disk once the
saver is closed, and a cold read in a new process (a fresh interpreter): the time to open
a new saver (SqliteSaver: a new connection) and compile the graph (``reopen``), then its
first ``get_state``. Each time is also taken as
the process's CPU time (``time.process_time``, every thread: the saver works in LangGraph's
background thread), which a loaded machine skews less than wall time; a durable commit's
wait for the disk is wall time only.

Each row runs in a fresh interpreter (a child process, one after the other), so no row
inherits another's heap or garbage-collector state.

SqliteSaver: a file database (its own setup: WAL). UndertextSaver: ``UndertextSaver.open``
with the store's default options (group commit: each put is durable when it returns).
Prints a markdown table and one JSON line per row.

Usage: python benches/python/langgraph_graph.py [--pairs 300] [--savers sqlite,undertext]
       [--channels add_messages,delta] [--dir DIR] [--other DIR]

``--other DIR`` runs each UndertextSaver row a second time with ``PYTHONPATH=DIR`` (another
build of the ``undertext`` package, e.g. main's), right after the first.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, Callable, TypedDict

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from undertext.langgraph import UndertextSaver

WORDS = (
    "the a build test fails because lockfile stale cargo update run check error warning module "
    "function returns value config path file line column expected found type trait impl struct "
    "async await thread lock index blob chunk manifest record commit sync write read list"
).split()


@functools.lru_cache(maxsize=None)
def result_text(i: int) -> str:
    """A distinct ~1.3 KB tool result of word-like text (made before the timed run)."""
    rng = random.Random(i)
    words: list[str] = [f"[result {i}]"]
    size = 0
    while size < 1300:
        w = rng.choice(WORDS) if rng.random() < 0.9 else str(rng.randrange(10**6))
        words.append(w)
        size += len(w) + 1
    return " ".join(words)


def delta_reducer(state: Any, writes: list[Any]) -> Any:
    """``add_messages`` over a batch of writes (batching-invariant, as DeltaChannel needs)."""
    return functools.reduce(add_messages, writes, state if state is not None else [])


class AddState(TypedDict):
    messages: Annotated[list, add_messages]


class DeltaState(TypedDict):
    messages: Annotated[list, DeltaChannel(delta_reducer)]


def build(state_type: Any, pairs: int) -> StateGraph:
    def model(state: Any) -> dict[str, Any]:
        i = len(state["messages"]) // 2
        call = {"id": f"call_{i}", "name": "read_file", "args": {"path": f"src/module_{i}.rs"}}
        return {"messages": [AIMessage(content=f"step {i}: reading the next file", tool_calls=[call], id=f"ai-{i}")]}

    def tools(state: Any) -> dict[str, Any]:
        last = state["messages"][-1]
        i = len(state["messages"]) // 2
        return {"messages": [ToolMessage(content=result_text(i), tool_call_id=last.tool_calls[0]["id"], id=f"tool-{i}")]}

    def route(state: Any) -> str:
        return END if len(state["messages"]) >= 2 * pairs + 1 else "model"

    g = StateGraph(state_type)
    g.add_node("model", model)
    g.add_node("tools", tools)
    g.add_edge(START, "model")
    g.add_edge("model", "tools")
    g.add_conditional_edges("tools", route)
    return g


def open_saver(kind: str, where: str | Path, setup: bool = True) -> tuple[Any, Callable[[], None]]:
    """A checkpointer and how to close it: ``sqlite`` (a file; a new connection),
    ``postgres`` (LangGraph's PostgresSaver on a URL, its tables set up unless ``setup`` is
    false) or ``undertext`` (``UndertextSaver.open`` of a path or a fleet URL)."""
    if kind == "sqlite":
        conn = sqlite3.connect(where, check_same_thread=False)
        return SqliteSaver(conn), conn.close
    if kind == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        cm = PostgresSaver.from_conn_string(str(where))
        saver = cm.__enter__()
        if setup:
            saver.setup()
        return saver, lambda: cm.__exit__(None, None, None)
    saver = UndertextSaver.open(where)
    return saver, saver.close


def disk_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(saver_name: str, channel: str, pairs: int, root: Path) -> dict[str, Any]:
    if saver_name == "sqlite":
        db = root / f"sqlite-{channel}.db"
        saver, close = open_saver("sqlite", db)
        files = [db, Path(str(db) + "-wal"), Path(str(db) + "-shm")]
    else:
        store = root / f"undertext-{channel}"
        saver, close = open_saver("undertext", store)
        files = [store]
    graph = build(AddState if channel == "add_messages" else DeltaState, pairs).compile(checkpointer=saver)
    for i in range(pairs + 1):
        result_text(i)
    config = {"configurable": {"thread_id": "agent"}, "recursion_limit": 2 * pairs + 10}
    t0, c0 = time.perf_counter(), time.process_time()
    final = graph.invoke({"messages": [HumanMessage(content="fix the build", id="human-0")]}, config)
    run_s, run_cpu = time.perf_counter() - t0, time.process_time() - c0
    assert len(final["messages"]) == 2 * pairs + 1, len(final["messages"])
    text = sum(len(str(m.content).encode()) for m in final["messages"])
    state_ms, state_cpu = [], []
    for _ in range(6):
        t0, c0 = time.perf_counter(), time.process_time()
        st = graph.get_state(config)
        assert len(st.values["messages"]) == 2 * pairs + 1
        state_ms.append((time.perf_counter() - t0) * 1000)
        state_cpu.append((time.process_time() - c0) * 1000)
    hist_ms, hist_cpu = [], []
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        hist = list(graph.get_state_history(config, limit=50))
        for h in hist:  # what a history view shows: every state's messages
            assert len(h.values.get("messages", [])) <= 2 * pairs + 1
        hist_ms.append((time.perf_counter() - t0) * 1000)
        hist_cpu.append((time.process_time() - c0) * 1000)
    assert len(hist) == min(50, 2 * pairs + 2), len(hist)
    close()
    disk = sum(disk_bytes(f) for f in files if f.exists())
    # A cold read: the same thread read by a new process (a fresh interpreter: no heap or
    # cache of this run) through a new saver (store handle or connection).
    cold = json.loads(
        subprocess.run(
            [sys.executable, __file__, "--pairs", str(pairs), "--cold", f"{saver_name},{channel},{files[0]}"],
            check=True, capture_output=True, text=True,
        ).stdout.strip().splitlines()[-1]
    )
    return {
        "saver": saver_name,
        "channel": channel,
        "pairs": pairs,
        "supersteps": 2 * pairs,
        "ms_per_superstep": run_s * 1000 / (2 * pairs),
        "cpu_ms_per_superstep": run_cpu * 1000 / (2 * pairs),
        "get_state_first_ms": state_ms[0],
        "get_state_first_cpu_ms": state_cpu[0],
        "get_state_ms": statistics.median(state_ms[1:]),
        "get_state_cpu_ms": statistics.median(state_cpu[1:]),
        "history50_cpu_ms": statistics.median(hist_cpu),
        "history50_ms": statistics.median(hist_ms),
        **cold,
        "disk_bytes": disk,
        "text_bytes": text,
    }


def cold_read(saver_name: str, channel: str, path: Path, pairs: int) -> dict[str, Any]:
    """Opens the stored thread (``reopen``: the saver and the compiled graph) and times its
    first ``get_state``."""
    config = {"configurable": {"thread_id": "agent"}}
    t0 = time.perf_counter()
    saver, close = open_saver(saver_name, path)
    graph = build(AddState if channel == "add_messages" else DeltaState, pairs).compile(checkpointer=saver)
    open_ms = (time.perf_counter() - t0) * 1000
    t0, c0 = time.perf_counter(), time.process_time()
    st = graph.get_state(config)
    cold_ms, cold_cpu = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
    assert len(st.values["messages"]) == 2 * pairs + 1
    close()
    return {"reopen_ms": open_ms, "cold_get_state_ms": cold_ms, "cold_get_state_cpu_ms": cold_cpu}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--savers", default="sqlite,undertext")
    ap.add_argument("--channels", default="add_messages,delta")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--other", default=None, help="PYTHONPATH of another undertext package: its rows alongside")
    ap.add_argument("--one", default=None, help="SAVER,CHANNEL: run one row here and print its JSON")
    ap.add_argument("--cold", default=None, help="SAVER,CHANNEL,PATH: the cold read of a stored thread, as JSON")
    args = ap.parse_args()
    if args.cold:
        saver, channel, path = args.cold.split(",", 2)
        print(json.dumps(cold_read(saver, channel, Path(path), args.pairs)))
        return
    if args.one:
        saver, channel = args.one.split(",")
        with tempfile.TemporaryDirectory(dir=args.dir) as d:
            print(json.dumps(run(saver, channel, args.pairs, Path(d))))
        return
    rows = []
    for channel in args.channels.split(","):
        for saver in args.savers.split(","):
            cmd = [sys.executable, __file__, "--pairs", str(args.pairs), "--one", f"{saver},{channel}"]
            if args.dir is not None:
                cmd += ["--dir", str(args.dir)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            if saver == "undertext" and args.other:  # the same row with another build, right after
                env = {**os.environ, "PYTHONPATH": args.other}
                out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
                rows.append({**json.loads(out.strip().splitlines()[-1]), "saver": "undertext (other)"})
    print(f"\n{args.pairs} pairs = {2 * args.pairs} supersteps\n")
    print("wall ms (CPU ms)\n")
    print(
        "| saver / channel | ms per superstep | `get_state` ms, first | `get_state` ms | "
        "`get_state_history(limit=50)` ms | reopen ms | `get_state` after reopen ms | disk | disk / text |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        print(
            f"| {r['saver']}, `{r['channel']}` | {r['ms_per_superstep']:.2f} ({r['cpu_ms_per_superstep']:.2f}) | "
            f"{r['get_state_first_ms']:.1f} ({r['get_state_first_cpu_ms']:.1f}) | "
            f"{r['get_state_ms']:.1f} ({r['get_state_cpu_ms']:.1f}) | "
            f"{r['history50_ms']:.0f} ({r['history50_cpu_ms']:.0f}) | {r['reopen_ms']:.1f} | "
            f"{r['cold_get_state_ms']:.1f} ({r['cold_get_state_cpu_ms']:.1f}) | "
            f"{r['disk_bytes'] / 1e6:.2f} MB | {r['disk_bytes'] / r['text_bytes']:.2f}× |"
        )
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
