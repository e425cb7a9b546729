"""A new worker's first ``get_tuple`` of a LangGraph thread, in fresh processes, on one
PostgreSQL: ``UndertextSaver`` on a ``postgres://`` store against LangGraph's ``PostgresSaver``
(issue 35, "cold starts"; benches/README.md, "Fleet mode: cold starts").

Each saver gets a database of its own, written once by this process: THREADS threads (every
one under the saver's one owner, as ``UndertextSaver`` keeps them), each the real graph of
``langgraph_graph.py`` run for PAIRS pairs (a model node's AI message with a tool call, a tool
node's ~1.3 KB result). Then ROUNDS rounds, the savers one after the other within each round
(a change of load hits both), each a fresh interpreter that opens its saver and times one
``get_tuple`` of a thread chosen in the middle, wall clock; then, in the same process, a second
``get_tuple`` of another thread. Medians over rounds.

Usage: python benches/python/fleet_cold.py --url postgres://postgres@127.0.0.1:PORT/postgres
       [--threads 300] [--pairs 5] [--rounds 7] [--other NAME=DIR ...] [--reuse]

``--other NAME=DIR`` (repeatable) adds a row for ``UndertextSaver`` with ``PYTHONPATH=DIR``
(another build of the ``undertext`` package, e.g. the one before a change) on the same database.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fleet_savers import fresh_db, with_db  # noqa: E402


def write(kind: str, url: str, threads: int, pairs: int) -> None:
    import langgraph_graph as lg
    from langchain_core.messages import HumanMessage

    saver, close = lg.open_saver(kind, url)
    graph = lg.build(lg.AddState, pairs).compile(checkpointer=saver)
    for t in range(threads):
        config = {"configurable": {"thread_id": f"thread-{t}"}, "recursion_limit": 2 * pairs + 10}
        graph.invoke({"messages": [HumanMessage(content=f"fix build {t}", id=f"human-{t}")]}, config)
    close()


def cold(kind: str, url: str, threads: int, pairs: int) -> dict[str, float]:
    import langgraph_graph as lg

    t0 = time.perf_counter()
    saver, close = lg.open_saver(kind, url, setup=False) if kind == "postgres" else lg.open_saver(kind, url)
    t1 = time.perf_counter()
    first = saver.get_tuple({"configurable": {"thread_id": f"thread-{threads // 2}"}})
    t2 = time.perf_counter()
    second = saver.get_tuple({"configurable": {"thread_id": f"thread-{threads // 2 + 1}"}})
    t3 = time.perf_counter()
    assert first is not None and second is not None
    assert len(first.checkpoint["channel_values"]["messages"]) == 2 * pairs + 1
    close()
    return {"open_ms": (t1 - t0) * 1000, "first_ms": (t2 - t1) * 1000, "second_ms": (t3 - t2) * 1000}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default=os.environ.get("UNDERTEXT_FLEET_URL"))
    ap.add_argument("--threads", type=int, default=300)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--other", action="append", default=[], help="NAME=DIR: one more UndertextSaver row with PYTHONPATH=DIR")
    ap.add_argument("--reuse", action="store_true", help="measure the databases a previous run wrote")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--write", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.url:
        sys.exit("--url (or UNDERTEXT_FLEET_URL) is required")
    if args.write:
        write(args.write, args.url, args.threads, args.pairs)
        return
    if args.one:
        print(json.dumps(cold(args.one, args.url, args.threads, args.pairs)))
        return

    def child(kind: str, url: str, extra: Optional[str], mode: str) -> Any:
        env = dict(os.environ)
        if extra:
            env["PYTHONPATH"] = extra + os.pathsep + env.get("PYTHONPATH", "")
        cmd = [sys.executable, __file__, "--url", url, "--threads", str(args.threads), "--pairs", str(args.pairs), mode, kind]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            sys.exit(f"{kind} {mode} failed:\n{done.stderr}")
        return json.loads(done.stdout.strip().splitlines()[-1]) if mode == "--one" else None

    rows: list[tuple[str, str, str, Optional[str]]] = []
    for kind in ("postgres", "undertext"):
        name = f"bench_cold_{kind}"
        if args.reuse:
            db = with_db(args.url, name)
        else:
            db = fresh_db(args.url, name)
            t0 = time.perf_counter()
            child(kind, db, None, "--write")
            print(f"{kind}: wrote {args.threads} threads x {args.pairs} pairs in {time.perf_counter() - t0:.1f} s", flush=True)
        rows.append((kind, kind, db, None))
    for other in args.other:
        name, _, d = other.partition("=") if "=" in other else ("other build", "", other)
        rows.append((f"undertext ({name})", "undertext", rows[1][2], d))
    results: dict[str, list[dict[str, float]]] = {r[0]: [] for r in rows}
    for _ in range(args.rounds):
        for name, kind, db, extra in rows:
            results[name].append(child(kind, db, extra, "--one"))
    print(f"\n{args.threads} threads x {args.pairs} pairs under one owner; fresh process, {args.rounds} rounds (medians)\n")
    print("| saver | open ms | first `get_tuple` ms | second `get_tuple` ms |")
    print("|---|--:|--:|--:|")
    for name, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("open_ms", "first_ms", "second_ms")}
        print(f"| {name} | {med['open_ms']:.1f} | {med['first_ms']:.1f} | {med['second_ms']:.1f} |")


if __name__ == "__main__":
    main()
