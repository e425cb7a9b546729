"""The first ``get_state`` after a reopen, in fresh processes, as medians of CPU time.

``langgraph_graph.py`` takes one cold read per saver; on a shared machine a single cold
read swings by 2x. This writes the bench's graph once per saver (``langgraph_graph.build``,
``add_messages``, N pairs), then runs R rounds of fresh interpreters, the savers one after
the other within each round (so a load change hits every saver alike), each opening its
store, compiling the graph and timing one ``get_state`` (``time.process_time``, every
thread), and within it the CPU time of the interpreter's full (generation 2) garbage
collections: the first read after the imports of LangGraph and LangChain (about 100,000
objects) usually sets one off, whichever saver reads. Each round also runs every saver once
more with ``gc.collect()`` before the timed read (rows "after gc.collect()"): the read
without the imports' collection debt. The row "undertext, items hashed" reads the same store
with the saver's blob reads hashing each blob against its id (``verify="hash"``, the engine's
default) instead of checking each record's checksum (the saver's ``_records.VERIFY``): what
that choice saves. Each read also counts its minor page faults. ``--other DIR`` adds a second UndertextSaver row with ``PYTHONPATH=DIR`` (another
build of the ``undertext`` package, e.g. main's) reading a store that package wrote.

Usage: python benches/python/langgraph_cold.py [--pairs 300] [--rounds 7] [--other DIR]
"""

from __future__ import annotations

import argparse
import gc
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


def cold(kind: str, path: Path, pairs: int, collect: bool) -> dict[str, float]:
    sys.path.insert(0, str(HERE))
    import resource

    import langgraph_graph as lg

    if kind == "undertext-hash":
        from undertext.langgraph import _lanes, _saver

        _saver.VERIFY = _lanes.VERIFY = "hash"  # type: ignore[attr-defined]
        kind = "undertext"

    t0, c0 = time.perf_counter(), time.process_time()
    saver, close = lg.open_saver(kind, path)
    graph = lg.build(lg.AddState, pairs).compile(checkpointer=saver)
    t1, c1 = time.perf_counter(), time.process_time()
    full_gcs: list[float] = []
    if collect:
        gc.collect()  # the imports' garbage-collection debt, paid before the timed read
    started: list[float] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                started.append(time.process_time())
            else:
                full_gcs.append((time.process_time() - started.pop()) * 1000)

    gc.callbacks.append(on_gc)
    f_read = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t_read, c_read = time.perf_counter(), time.process_time()
    st = graph.get_state({"configurable": {"thread_id": "agent"}})
    t2, c2 = time.perf_counter(), time.process_time()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f_read
    gc.callbacks.remove(on_gc)
    assert len(st.values["messages"]) == 2 * pairs + 1
    close()
    return {
        "reopen_ms": (t1 - t0) * 1000,
        "reopen_cpu_ms": (c1 - c0) * 1000,
        "get_ms": (t2 - t_read) * 1000,
        "get_cpu_ms": (c2 - c_read) * 1000,
        "full_gc_cpu_ms": sum(full_gcs),
        "minor_faults": faults,
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
    ap.add_argument("--collect", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.write:
        kind, path = args.write.split(",", 1)
        write(kind, Path(path), args.pairs)
        return
    if args.cold:
        kind, path = args.cold.split(",", 1)
        print(json.dumps(cold(kind, Path(path), args.pairs, args.collect)))
        return
    with tempfile.TemporaryDirectory() as d:
        rows: list[tuple[str, str, Path, Optional[str]]] = [("undertext", "undertext", Path(d) / "undertext", None)]
        rows.append(("undertext, items hashed", "undertext-hash", Path(d) / "undertext", None))
        if args.other:
            rows.append(("undertext (other)", "undertext", Path(d) / "other", args.other))
        rows.append(("sqlite", "sqlite", Path(d) / "sqlite.db", None))
        for _name, kind, path, pp in rows:
            if kind != "undertext-hash":  # reads the "undertext" row's store
                child(["--pairs", str(args.pairs), "--write", f"{kind},{path}"], pp)
        got: dict[str, list[dict[str, float]]] = {name: [] for name, *_ in rows}
        load0 = os.getloadavg()
        got.update({name + ", after gc.collect()": [] for name, *_ in rows})
        for _ in range(args.rounds):
            for collect in (False, True):
                for name, kind, path, pp in rows:
                    flag = ["--collect"] if collect else []
                    run = json.loads(child(["--pairs", str(args.pairs), "--cold", f"{kind},{path}", *flag], pp))
                    got[name + (", after gc.collect()" if collect else "")].append(run)
        load1 = os.getloadavg()
    print(f"\n{args.pairs} pairs, {args.rounds} rounds, load {load0[0]:.1f} -> {load1[0]:.1f}: medians (min-max)\n")
    print(
        "| saver | `get_state` after reopen, CPU ms | of which full GCs, CPU ms | wall ms | minor faults "
        "| reopen, CPU ms | wall ms |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|")
    for name, runs in got.items():

        def cell(key: str) -> str:
            v = [r[key] for r in runs]
            return f"{statistics.median(v):.1f} ({min(v):.1f}–{max(v):.1f})"

        print(
            f"| {name} | {cell('get_cpu_ms')} | {cell('full_gc_cpu_ms')} | {cell('get_ms')} "
            f"| {cell('minor_faults')} | {cell('reopen_cpu_ms')} | {cell('reopen_ms')} |"
        )
    for name, runs in got.items():
        print(json.dumps({"saver": name, "pairs": args.pairs, "runs": runs}))


if __name__ == "__main__":
    main()
