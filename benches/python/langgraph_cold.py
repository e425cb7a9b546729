"""The first ``get_state`` after a reopen, in fresh processes, as medians of CPU time.

``langgraph_graph.py`` takes one cold read per saver; on a shared machine a single cold
read swings by 2x. This writes the bench's graph once per saver (``langgraph_graph.build``,
``add_messages``, N pairs), then runs R rounds of fresh interpreters, the savers one after
the other within each round (so a load change hits every saver alike), each opening its
store, compiling the graph and timing one ``get_state`` (``time.process_time``, every
thread). ``--other DIR`` adds a second UndertextSaver row with ``PYTHONPATH=DIR`` (another
build of the ``undertext`` package, e.g. main's) reading a store that package wrote.

Usage: python benches/python/langgraph_cold.py [--pairs 300] [--rounds 7] [--other DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent


def write(kind: str, path: Path, pairs: int) -> None:
    sys.path.insert(0, str(HERE))
    import langgraph_graph as lg
    from langchain_core.messages import HumanMessage

    saver, close = lg.open_saver(kind, path)
    graph = lg.build(lg.AddState, pairs).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "agent"}, "recursion_limit": 2 * pairs + 10}
    graph.invoke({"messages": [HumanMessage(content="fix the build", id="human-0")]}, config)
    close()


def cold(kind: str, path: Path, pairs: int) -> dict[str, float]:
    sys.path.insert(0, str(HERE))
    import langgraph_graph as lg

    t0, c0 = time.perf_counter(), time.process_time()
    saver, close = lg.open_saver(kind, path)
    graph = lg.build(lg.AddState, pairs).compile(checkpointer=saver)
    t1, c1 = time.perf_counter(), time.process_time()
    st = graph.get_state({"configurable": {"thread_id": "agent"}})
    t2, c2 = time.perf_counter(), time.process_time()
    assert len(st.values["messages"]) == 2 * pairs + 1
    close()
    return {
        "reopen_ms": (t1 - t0) * 1000,
        "reopen_cpu_ms": (c1 - c0) * 1000,
        "get_ms": (t2 - t1) * 1000,
        "get_cpu_ms": (c2 - c1) * 1000,
    }


def child(args: list[str], pythonpath: Optional[str]) -> str:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True, env=env)
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--other", default=None, help="PYTHONPATH of another undertext package, compared alongside")
    ap.add_argument("--write", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cold", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.write:
        kind, path = args.write.split(",", 1)
        write(kind, Path(path), args.pairs)
        return
    if args.cold:
        kind, path = args.cold.split(",", 1)
        print(json.dumps(cold(kind, Path(path), args.pairs)))
        return
    with tempfile.TemporaryDirectory() as d:
        rows: list[tuple[str, str, Path, Optional[str]]] = [("undertext", "undertext", Path(d) / "undertext", None)]
        if args.other:
            rows.append(("undertext (other)", "undertext", Path(d) / "other", args.other))
        rows.append(("sqlite", "sqlite", Path(d) / "sqlite.db", None))
        for _name, kind, path, pp in rows:
            child(["--pairs", str(args.pairs), "--write", f"{kind},{path}"], pp)
        got: dict[str, list[dict[str, float]]] = {name: [] for name, *_ in rows}
        load0 = os.getloadavg()
        for _ in range(args.rounds):
            for name, kind, path, pp in rows:
                got[name].append(json.loads(child(["--pairs", str(args.pairs), "--cold", f"{kind},{path}"], pp)))
        load1 = os.getloadavg()
    print(f"\n{args.pairs} pairs, {args.rounds} rounds, load {load0[0]:.1f} -> {load1[0]:.1f}: medians (min-max)\n")
    print("| saver | `get_state` after reopen, CPU ms | wall ms | reopen, CPU ms | wall ms |")
    print("|---|--:|--:|--:|--:|")
    for name, runs in got.items():

        def cell(key: str) -> str:
            v = [r[key] for r in runs]
            return f"{statistics.median(v):.1f} ({min(v):.1f}–{max(v):.1f})"

        print(f"| {name} | {cell('get_cpu_ms')} | {cell('get_ms')} | {cell('reopen_cpu_ms')} | {cell('reopen_ms')} |")
    for name, runs in got.items():
        print(json.dumps({"saver": name, "pairs": args.pairs, "runs": runs}))


if __name__ == "__main__":
    main()
