"""LangGraph's ``PostgresSaver`` against ``UndertextSaver`` on a ``postgres://`` store, the
saver's operations one by one, on the same PostgreSQL, interleaved (issue 35, "benches";
benches/README.md, the fleet rows).

Each saver gets a database of its own. Then ROUNDS rounds; in each, the savers one after the
other (a change of load hits both), every measurement in a fresh interpreter:

* ``put``: the real graph of ``langgraph_graph.py`` (``add_messages``; a model node's AI
  message with a tool call, a tool node's ~1.3 KB result) run for PAIRS pairs on a new thread,
  each ``put`` the graph makes timed (the saver's method wrapped): the median ms per ``put``,
  and ms per superstep;
* ``get_tuple``, same process: then the median of 20 ``get_tuple`` of that thread's latest
  checkpoint;
* ``list``: the median of 5 ``list(saver.list(config, limit=50))``;
* ``get_tuple``, fresh process: another interpreter opens the saver (timed apart) and times
  its first ``get_tuple`` of that thread;
* 4 threads: one saver, 4 Python threads each running the graph for PAIRS pairs on a thread
  of its own at once: supersteps per second in all. ``PostgresSaver`` gets a
  ``psycopg_pool.ConnectionPool`` of 4 connections (its way to serve threads at once; from
  ``from_conn_string`` its one connection would serialize them); ``UndertextSaver`` one store
  (4 connections, the default ``pool_size``).

Medians over rounds, and the ratio PostgresSaver / UndertextSaver of each (above 1: undertext
is faster). Needs ``langgraph``, ``langgraph-checkpoint-postgres``, ``psycopg[binary]``,
``psycopg-pool`` and the ``undertext`` package built with the cargo feature ``fleet``.

Usage: python benches/python/fleet_saver_ops.py --url postgres://postgres@127.0.0.1:PORT/postgres
       [--pairs 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fleet_savers import fresh_db  # noqa: E402

SAVERS = ("postgres", "undertext")


def open_saver(kind: str, url: str, pool: bool = False) -> tuple[Any, Callable[[], None]]:
    if kind == "postgres" and pool:
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        p = ConnectionPool(url, min_size=4, max_size=4, kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}, open=True)
        return PostgresSaver(p), p.close
    import langgraph_graph as lg

    return lg.open_saver(kind, url, setup=False) if kind == "postgres" else lg.open_saver(kind, url)


def run_graph(saver: Any, thread: str, pairs: int) -> float:
    import langgraph_graph as lg
    from langchain_core.messages import HumanMessage

    graph = lg.build(lg.AddState, pairs).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": thread}, "recursion_limit": 2 * pairs + 10}
    t0 = time.perf_counter()
    final = graph.invoke({"messages": [HumanMessage(content=f"fix the build ({thread})", id=f"human-{thread}")]}, config)
    took = time.perf_counter() - t0
    assert len(final["messages"]) == 2 * pairs + 1, len(final["messages"])
    return took


def ops(kind: str, url: str, thread: str, pairs: int) -> dict[str, float]:
    import langgraph_graph as lg

    for i in range(pairs + 1):
        lg.result_text(i)
    saver, close = open_saver(kind, url)
    puts: list[float] = []
    put = saver.put

    def timed_put(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return put(*a, **k)
        finally:
            puts.append(time.perf_counter() - t0)

    saver.put = timed_put
    took = run_graph(saver, thread, pairs)
    config = {"configurable": {"thread_id": thread}}
    gets = []
    for _ in range(20):
        t0 = time.perf_counter()
        tup = saver.get_tuple(config)
        gets.append(time.perf_counter() - t0)
        assert tup is not None and len(tup.checkpoint["channel_values"]["messages"]) == 2 * pairs + 1
    lists = []
    for _ in range(5):
        t0 = time.perf_counter()
        got = list(saver.list(config, limit=50))
        lists.append(time.perf_counter() - t0)
        assert len(got) == min(50, 2 * pairs + 2), len(got)
    close()
    return {
        "put_ms": statistics.median(puts) * 1000,
        "puts": len(puts),
        "superstep_ms": took * 1000 / (2 * pairs),
        "get_tuple_ms": statistics.median(gets) * 1000,
        "list_ms": statistics.median(lists) * 1000,
    }


def fresh(kind: str, url: str, thread: str, pairs: int) -> dict[str, float]:
    # The modules imported first: the open alone is timed.
    import langgraph_graph  # noqa: F401
    import langgraph.checkpoint.postgres  # noqa: F401

    t0 = time.perf_counter()
    saver, close = open_saver(kind, url)
    t1 = time.perf_counter()
    tup = saver.get_tuple({"configurable": {"thread_id": thread}})
    t2 = time.perf_counter()
    assert tup is not None and len(tup.checkpoint["channel_values"]["messages"]) == 2 * pairs + 1
    close()
    return {"open_ms": (t1 - t0) * 1000, "fresh_get_tuple_ms": (t2 - t1) * 1000}


def concurrent(kind: str, url: str, thread: str, pairs: int) -> dict[str, float]:
    import langgraph_graph as lg

    for i in range(pairs + 1):
        lg.result_text(i)
    saver, close = open_saver(kind, url, pool=True)
    errors: list[BaseException] = []

    def one(t: str) -> None:
        try:
            run_graph(saver, t, pairs)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(f"{thread}-c{k}",)) for k in range(4)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - t0
    close()
    if errors:
        raise errors[0]
    return {"threads4_supersteps_per_s": 4 * 2 * pairs / took}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default=os.environ.get("UNDERTEXT_FLEET_URL"))
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--one", nargs=3, metavar=("MODE", "SAVER", "THREAD"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.url:
        sys.exit("--url (or UNDERTEXT_FLEET_URL) is required")
    if args.one:
        mode, kind, thread = args.one
        f = {"ops": ops, "fresh": fresh, "concurrent": concurrent}[mode]
        print(json.dumps(f(kind, args.url, thread, args.pairs)))
        return

    def child(mode: str, kind: str, url: str, thread: str) -> dict[str, float]:
        cmd = [sys.executable, __file__, "--url", url, "--pairs", str(args.pairs), "--one", mode, kind, thread]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{kind} {mode} failed:\n{done.stderr}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    dbs = {}
    for kind in SAVERS:
        dbs[kind] = fresh_db(args.url, f"bench_ops_{kind}")
        if kind == "postgres":
            saver, close = open_saver("postgres", dbs[kind])
            saver.setup()
            close()
    results: dict[str, list[dict[str, float]]] = {k: [] for k in SAVERS}
    for r in range(args.rounds):
        for kind in SAVERS:
            thread = f"round-{r}"
            row = child("ops", kind, dbs[kind], thread)
            row.update(child("fresh", kind, dbs[kind], thread))
            row.update(child("concurrent", kind, dbs[kind], thread))
            results[kind].append(row)
            print(json.dumps({"saver": kind, "round": r, **row}), flush=True)
    cols = [
        ("put_ms", "`put` ms", False),
        ("get_tuple_ms", "`get_tuple` ms, same process", False),
        ("fresh_get_tuple_ms", "`get_tuple` ms, fresh process", False),
        ("open_ms", "open ms, fresh process", False),
        ("list_ms", "`list(limit=50)` ms", False),
        ("superstep_ms", "ms per superstep, 1 thread", False),
        ("threads4_supersteps_per_s", "supersteps/s, 4 threads", True),
    ]
    med = {k: {c: statistics.median(r[c] for r in results[k]) for c, _, _ in cols} for k in SAVERS}
    rng = {k: {c: (min(r[c] for r in results[k]), max(r[c] for r in results[k])) for c, _, _ in cols} for k in SAVERS}
    print(f"\n{args.pairs} pairs per thread ({2 * args.pairs} supersteps), {args.rounds} rounds interleaved (medians; range)\n")
    print("| what | `PostgresSaver` | `UndertextSaver` | ratio (above 1: undertext faster) |")
    print("|---|--:|--:|--:|")
    for c, name, higher_better in cols:
        p, u = med["postgres"][c], med["undertext"][c]
        ratio = u / p if higher_better else p / u
        fmt = "{:.0f}" if higher_better else "{:.2f}"
        pr = "–".join(fmt.format(x) for x in rng["postgres"][c])
        ur = "–".join(fmt.format(x) for x in rng["undertext"][c])
        print(f"| {name} | {fmt.format(p)} ({pr}) | {fmt.format(u)} ({ur}) | {ratio:.2f}× |")


if __name__ == "__main__":
    main()
