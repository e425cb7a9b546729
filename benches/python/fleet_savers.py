"""Fleet mode against the incumbents on the same PostgreSQL, side by side in one run.

1. LangGraph: ``PostgresSaver`` (langgraph-checkpoint-postgres, psycopg 3) vs ``UndertextSaver``
   on a ``postgres://`` store, on the real graph of ``langgraph_graph.py`` (``add_messages``,
   a model node and a tool node with a ~1.3 KB result per pair; N pairs = 2N supersteps, one
   ``invoke``): ms per superstep, ``get_state`` (first call, then the median of 5),
   ``get_state_history(limit=50)`` (median of 3), and the bytes the run left in PostgreSQL.
2. Agents SDK: ``SQLAlchemySession`` (``postgresql+asyncpg``) vs ``UndertextSession`` on the
   same server: N turns of ``add_items`` (a user message, an assistant message with a function
   call, its ~1.3 KB output, a reply: 4 items per call), then ``get_items()`` (all) and
   ``get_items(limit=50)``, medians of 5; bytes in PostgreSQL.
3. A cached view: ``Chat.view`` of a 600-message chat, per call (median of 51 samples of 200
   calls) after a first one,
   on a fleet store vs an embedded one (a fleet view reads the local replica).

Every row gets a database of its own (``CREATE DATABASE``), so "bytes" is what that row left:
the sum of ``pg_total_relation_size`` of its tables (indexes and TOAST included). Each row runs
in a fresh interpreter. Needs the ``undertext`` package built with the cargo feature
``fleet`` (``MATURIN_PEP517_ARGS="--features fleet" pip install ./bindings/python``).

Usage: python benches/python/fleet_savers.py --url postgres://postgres@127.0.0.1:PORT/postgres
       [--pairs 300] [--turns 150] [--rows lg-postgres,lg-undertext,sdk-sqlalchemy,sdk-undertext,view]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))


def with_db(url: str, db: str) -> str:
    base, _, query = url.partition("?")
    root = base.rsplit("/", 1)[0]
    return f"{root}/{db}" + (f"?{query}" if query else "")


def fresh_db(url: str, name: str) -> str:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}"')
        c.execute(f'CREATE DATABASE "{name}"')
    return with_db(url, name)


def pg_bytes(url: str) -> int:
    with psycopg.connect(url) as c:
        row = c.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'"
        ).fetchone()
    return int(row[0])


def lg_row(saver_name: str, url: str, pairs: int) -> dict[str, Any]:
    import langgraph_graph as lg
    from langchain_core.messages import HumanMessage

    saver, close = lg.open_saver("postgres" if saver_name == "postgres" else "undertext", url)
    graph = lg.build(lg.AddState, pairs).compile(checkpointer=saver)
    for i in range(pairs + 1):
        lg.result_text(i)
    config = {"configurable": {"thread_id": "agent"}, "recursion_limit": 2 * pairs + 10}
    t0, c0 = time.perf_counter(), time.process_time()
    final = graph.invoke({"messages": [HumanMessage(content="fix the build", id="human-0")]}, config)
    run_s, run_cpu = time.perf_counter() - t0, time.process_time() - c0
    assert len(final["messages"]) == 2 * pairs + 1, len(final["messages"])
    state_ms = []
    for _ in range(6):
        t0 = time.perf_counter()
        st = graph.get_state(config)
        assert len(st.values["messages"]) == 2 * pairs + 1
        state_ms.append((time.perf_counter() - t0) * 1000)
    hist_ms = []
    for _ in range(3):
        t0 = time.perf_counter()
        hist = list(graph.get_state_history(config, limit=50))
        hist_ms.append((time.perf_counter() - t0) * 1000)
    assert len(hist) == min(50, 2 * pairs + 2), len(hist)
    close()
    return {
        "row": f"lg-{saver_name}",
        "pairs": pairs,
        "ms_per_superstep": run_s * 1000 / (2 * pairs),
        "cpu_ms_per_superstep": run_cpu * 1000 / (2 * pairs),
        "get_state_first_ms": state_ms[0],
        "get_state_ms": statistics.median(state_ms[1:]),
        "history50_ms": statistics.median(hist_ms),
        "pg_bytes": pg_bytes(url),
    }


def turn_items(i: int) -> list[dict[str, Any]]:
    import langgraph_graph as lg

    call = f"call_{i}"
    return [
        {"role": "user", "content": f"step {i}: read src/module_{i}.rs and say what it does"},
        {"type": "function_call", "call_id": call, "name": "read_file", "arguments": json.dumps({"path": f"src/module_{i}.rs"})},
        {"type": "function_call_output", "call_id": call, "output": lg.result_text(i)},
        {"role": "assistant", "content": f"module {i} reads the config and returns a value"},
    ]


def sdk_row(session_name: str, url: str, turns: int) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        if session_name == "sqlalchemy":
            from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

            aurl = url.replace("postgres://", "postgresql+asyncpg://", 1)
            session: Any = SQLAlchemySession.from_url("conversation-1", url=aurl, create_tables=True)

            async def close() -> None:
                await session.engine.dispose()
        else:
            import undertext
            from undertext.agents import UndertextSession

            store = undertext.Store.open(url)
            session = UndertextSession("conversation-1", store)

            async def close() -> None:
                store.close()

        items = [turn_items(i) for i in range(turns)]
        t0 = time.perf_counter()
        for batch in items:
            await session.add_items(batch)
        add_s = time.perf_counter() - t0
        all_ms, last_ms = [], []
        for _ in range(6):
            t0 = time.perf_counter()
            got = await session.get_items()
            all_ms.append((time.perf_counter() - t0) * 1000)
            assert len(got) == 4 * turns, len(got)
            t0 = time.perf_counter()
            got = await session.get_items(limit=50)
            last_ms.append((time.perf_counter() - t0) * 1000)
            assert len(got) == min(50, 4 * turns)
        await close()
        return {
            "row": f"sdk-{session_name}",
            "turns": turns,
            "ms_per_add_items": add_s * 1000 / turns,
            "get_items_first_ms": all_ms[0],
            "get_items_ms": statistics.median(all_ms[1:]),
            "get_items_50_ms": statistics.median(last_ms[1:]),
            "pg_bytes": pg_bytes(url),
        }

    return asyncio.run(go())


def view_row(url: str) -> dict[str, Any]:
    import langgraph_graph as lg
    import undertext

    out: dict[str, Any] = {"row": "view"}
    with tempfile.TemporaryDirectory() as d:
        for name, target in [("embedded", str(Path(d) / "store")), ("fleet", url)]:
            store = undertext.Store.open(target)
            chat = store.create_chat("bench", title="view")
            for i in range(300):
                chat.append_batch(
                    [{"role": "user", "content": f"step {i}: read the next file"}, {"role": "tool", "content": lg.result_text(i)}]
                )
            budget = undertext.Budget(200_000)
            t0 = time.perf_counter()
            chat.view(budget)
            first = (time.perf_counter() - t0) * 1000
            # Per call, the median of 51 samples of 200 calls (a call is well under a
            # microsecond: one timed call would measure the clock).
            times = []
            for _ in range(51):
                t0 = time.perf_counter()
                for _ in range(200):
                    chat.view(budget)
                times.append((time.perf_counter() - t0) * 1000 / 200)
            # A handle opened again (a fleet open asks the catalog whether the chat moved).
            reopened = []
            for _ in range(20):
                t0 = time.perf_counter()
                store.chat("bench", chat.id).view(budget)
                reopened.append((time.perf_counter() - t0) * 1000)
            out[f"{name}_first_ms"] = first
            out[f"{name}_cached_ms"] = statistics.median(times)
            out[f"{name}_chat_then_view_ms"] = statistics.median(reopened)
            store.close()
    return out


def table(rows: list[dict[str, Any]], prefix: str, header: str, cells: Any) -> None:
    """Prints the rows whose name starts with ``prefix``: ``header`` and a bytes column."""
    print(f"\n{header} bytes in PostgreSQL |")
    print("|---" + "|--:" * header.count("|", 1, len(header) - 1) + "|--:|")
    for r in rows:
        if r["row"].startswith(prefix):
            print(f"| {r['row']} | {cells(r)} | {r['pg_bytes'] / 1e6:.2f} MB |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default=os.environ.get("UNDERTEXT_FLEET_URL"))
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--turns", type=int, default=150)
    ap.add_argument("--rows", default="lg-postgres,lg-undertext,sdk-sqlalchemy,sdk-undertext,view")
    ap.add_argument("--one", default=None, help="run one row here (its database ready) and print its JSON")
    args = ap.parse_args()
    if not args.url:
        sys.exit("--url (or UNDERTEXT_FLEET_URL) is required: a PostgreSQL server, e.g. from scripts/fleet-servers")
    if args.one:
        kind, _, name = args.one.partition("-")
        if kind == "lg":
            r = lg_row(name, args.url, args.pairs)
        elif kind == "sdk":
            r = sdk_row(name, args.url, args.turns)
        else:
            r = view_row(args.url)
        print(json.dumps(r))
        return
    rows = []
    for row in args.rows.split(","):
        db = fresh_db(args.url, "bench_" + row.replace("-", "_"))
        cmd = [sys.executable, __file__, "--url", db, "--pairs", str(args.pairs), "--turns", str(args.turns), "--one", row]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"row {row} failed:\n{done.stderr}")
        out = done.stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    print(f"\nLangGraph: {args.pairs} pairs = {2 * args.pairs} supersteps; Agents SDK: {args.turns} add_items calls of 4 items\n")
    table(
        rows,
        "lg-",
        "| saver | ms per superstep (CPU) | `get_state` ms, first | `get_state` ms | `get_state_history(limit=50)` ms |",
        lambda r: f"{r['ms_per_superstep']:.2f} ({r['cpu_ms_per_superstep']:.2f}) | {r['get_state_first_ms']:.1f} | "
        f"{r['get_state_ms']:.1f} | {r['history50_ms']:.0f}",
    )
    table(
        rows,
        "sdk-",
        "| session | ms per `add_items` | `get_items()` ms, first | `get_items()` ms | `get_items(limit=50)` ms |",
        lambda r: f"{r['ms_per_add_items']:.2f} | {r['get_items_first_ms']:.1f} | {r['get_items_ms']:.1f} | "
        f"{r['get_items_50_ms']:.1f}",
    )
    for r in rows:
        if r["row"] == "view":
            print("\n| store | first view ms | cached view µs | `store.chat()` + view ms |")
            print("|---|--:|--:|--:|")
            for name in ("embedded", "fleet"):
                print(
                    f"| {name} | {r[f'{name}_first_ms']:.2f} | {r[f'{name}_cached_ms'] * 1000:.2f} |"
                    f" {r[f'{name}_chat_then_view_ms']:.3f} |"
                )
            ratio = r["fleet_cached_ms"] / r["embedded_cached_ms"]
            print(f"cached view, fleet / embedded: {ratio:.2f}x")


if __name__ == "__main__":
    main()
