"""Durable writes per second with several processes on one PostgreSQL, side by side in one run.

Issue 20's write goal: a fleet store's durable writes per second with 4 processes on one
PostgreSQL at least 2x LangGraph's ``PostgresSaver``'s on the same server. Each row gets a
database of its own, is set up by this process (tables, chats), then runs PROCS child
processes (fresh interpreters) that each open their own connection(s), say ``ready``, wait
for one ``go`` sent to all at once, and write, each its own chats/threads/sessions:

* ``engine-append``: ``Chat.append`` of one message per call on a ``postgres://`` store
  (each process its own 2 chats, taken in turn); messages alternate a short assistant
  message and a ~1.3 KB tool result, the two messages of a LangGraph pair below;
* ``engine-append-shared``: the same, the PROCS processes sharing 8 chats (a random one per
  call: writers of one chat wait for each other's row lock);
* ``engine-append-one``: the same, the PROCS processes appending to one chat (every append
  waits for the others' row lock: issue 35's "4 processes appending to one chat");
* ``lg-undertext`` / ``lg-postgres``: the real graph of ``langgraph_graph.py`` (a model node
  adds an AI message with a tool call, a tool node its ~1.3 KB result; PAIRS pairs, one
  ``invoke`` per process, its own thread) on ``UndertextSaver`` / ``PostgresSaver``: one
  message per superstep;
* ``sdk-undertext`` / ``sdk-sqlalchemy``: the Agents SDK's ``add_items`` of one item per call
  (a function call, then its ~1.3 KB output, in turn) on ``UndertextSession`` /
  ``SQLAlchemySession`` (asyncpg), each process its own session;
* ``pgbench``: the server's floor, ``pgbench`` with PROCS clients each committing a one-row
  INSERT per transaction, for 10 s.

Every write is durable when it returns (PostgreSQL's commit; fsync and synchronous_commit as
the server has them). Per row: messages stored per second (all processes' messages over the
time from the first ``go`` to the last process done), and per operation (one append, one
superstep, one ``add_items``) the server's transactions (``pg_stat_database.xact_commit``:
read-only ones too), WAL flushes (``pg_stat_wal.wal_sync``: several commits can share one)
and WAL bytes, counted from after every process is ready to after every process exited.
Each child's CPU time is summed (``cpu_ms_per_op``): the client's own work.

Needs the ``undertext`` package built with the cargo feature ``fleet`` (as
``fleet_savers.py``) and, in the same venv: langgraph, langgraph-checkpoint-sqlite (imported by
``langgraph_graph.py``), langgraph-checkpoint-postgres, psycopg[binary], openai-agents,
sqlalchemy, greenlet, asyncpg; ``pgbench`` from the PostgreSQL packages.

Usage: python benches/python/fleet_writes.py --url postgres://postgres@127.0.0.1:PORT/postgres
       [--procs 4] [--ops 400] [--pairs 200] [--rows engine-append,...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet_savers import fresh_db  # noqa: E402 (a database of its own per row)

ROWS = "pgbench,engine-append,engine-append-shared,lg-undertext,lg-postgres,sdk-undertext,sdk-sqlalchemy"
OWNER = "bench"


def server_counts(url: str) -> dict[str, int]:
    """The database's transactions, the server's WAL flushes and its WAL position."""
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("SELECT pg_stat_clear_snapshot()")
        xact = c.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()
        wal = c.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
        lsn = c.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    assert xact and wal and lsn
    return {"xact": int(xact[0]), "wal_sync": int(wal[0]), "wal_bytes": int(lsn[0])}


def text_of(i: int) -> str:
    import langgraph_graph as lg

    return lg.result_text(i)


# ---- children: set up, say ready, wait for go, write, report -------------------------------


def child(row: str, url: str, proc: int, ops: int, pairs: int, chats: list[str]) -> None:
    run, close = setup(row, url, proc, ops, pairs, chats)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        sys.exit("expected go")
    t0, c0 = time.time(), time.process_time()
    messages, done_ops = run()
    t1, c1 = time.time(), time.process_time()
    close()
    print(json.dumps({"t0": t0, "t1": t1, "cpu": c1 - c0, "messages": messages, "ops": done_ops}), flush=True)


def setup(
    row: str, url: str, proc: int, ops: int, pairs: int, chats: list[str]
) -> tuple[Callable[[], tuple[int, int]], Callable[[], None]]:
    if row.startswith("engine-"):
        import undertext

        store = undertext.Store.open(url)
        handles = [store.chat(OWNER, c) for c in chats]
        rng = random.Random(proc)
        shared = row == "engine-append-shared"
        msgs = [
            {"role": "assistant", "content": f"step {i}: reading the next file"}
            if i % 2 == 0
            else {"role": "tool", "content": text_of(i)}
            for i in range(ops)
        ]

        def run() -> tuple[int, int]:
            for i, m in enumerate(msgs):
                chat = handles[rng.randrange(len(handles))] if shared else handles[(i // 2) % len(handles)]
                chat.append(m)
            return ops, ops

        return run, store.close
    if row.startswith("lg-"):
        import langgraph_graph as lg
        from langchain_core.messages import HumanMessage

        # The tables were set up once by the parent (four processes must not race to).
        kind = "postgres" if row == "lg-postgres" else "undertext"
        saver, close = lg.open_saver(kind, url, setup=False)
        graph = lg.build(lg.AddState, pairs).compile(checkpointer=saver)
        for i in range(pairs + 1):
            lg.result_text(i)
        config = {"configurable": {"thread_id": f"agent-{proc}"}, "recursion_limit": 2 * pairs + 10}

        def run() -> tuple[int, int]:
            final = graph.invoke({"messages": [HumanMessage(content="fix the build", id="human-0")]}, config)
            n = len(final["messages"])
            assert n == 2 * pairs + 1, n
            # One message per superstep: the input's, then one per node run.
            return n, n

        return run, close
    if row.startswith("sdk-"):
        loop = asyncio.new_event_loop()
        items = []
        for i in range(ops // 2):
            call = f"call_{proc}_{i}"
            items.append(
                {"type": "function_call", "call_id": call, "name": "read_file", "arguments": json.dumps({"path": f"src/m{i}.rs"})}
            )
            items.append({"type": "function_call_output", "call_id": call, "output": text_of(i)})
        if row == "sdk-sqlalchemy":
            from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

            aurl = url.replace("postgres://", "postgresql+asyncpg://", 1)
            session: Any = SQLAlchemySession.from_url(f"conversation-{proc}", url=aurl, create_tables=False)
            loop.run_until_complete(session.get_items(limit=1))  # connect before go

            def close() -> None:
                loop.run_until_complete(session.engine.dispose())
                loop.close()
        else:
            import undertext
            from undertext.agents import UndertextSession

            store = undertext.Store.open(url)
            session = UndertextSession(f"conversation-{proc}", store)
            loop.run_until_complete(session.get_items(limit=1))

            def close() -> None:
                store.close()
                loop.close()

        async def go() -> None:
            for item in items:
                await session.add_items([item])

        def run() -> tuple[int, int]:
            loop.run_until_complete(go())
            return len(items), len(items)

        return run, close
    raise SystemExit(f"unknown row {row}")


# ---- the parent: set a row up, start its processes together, count ------------------------


def prepare(row: str, url: str, procs: int) -> list[list[str]]:
    """Tables and chats a row's processes need, made before they start; each process's chat ids."""
    if row.startswith("engine-"):
        import undertext

        store = undertext.Store.open(url)
        ids = [store.create_chat(OWNER, title=f"chat {i}").id for i in range(max(8, 2 * procs))]
        store.close()
        if row == "engine-append-shared":
            return [ids[:8] for _ in range(procs)]
        if row == "engine-append-one":
            return [ids[:1] for _ in range(procs)]
        return [ids[2 * p : 2 * p + 2] for p in range(procs)]
    if row == "lg-postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(url) as saver:
            saver.setup()
    if row == "sdk-sqlalchemy":
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

        async def make() -> None:
            aurl = url.replace("postgres://", "postgresql+asyncpg://", 1)
            s = SQLAlchemySession.from_url("setup", url=aurl, create_tables=True)
            await s.get_items()
            await s.engine.dispose()

        asyncio.run(make())
    return [[] for _ in range(procs)]


def run_row(row: str, url: str, procs: int, ops: int, pairs: int) -> dict[str, Any]:
    if row == "pgbench":
        return pgbench_row(url, procs)
    chats = prepare(row, url, procs)
    kids = []
    for p in range(procs):
        cmd = [sys.executable, __file__, "--url", url, "--child", row, "--proc", str(p), "--ops", str(ops)]
        cmd += ["--pairs", str(pairs), "--chats", ",".join(chats[p])]
        kids.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for k in kids:
        assert k.stdout is not None
        line = k.stdout.readline().strip()
        if line != "ready":
            sys.exit(f"row {row}: a process said {line!r} instead of ready")
    time.sleep(1.5)  # idle backends report their counts within a second
    before = server_counts(url)
    for k in kids:
        assert k.stdin is not None
        k.stdin.write("go\n")
        k.stdin.flush()
    outs = []
    for k in kids:
        out, _ = k.communicate()
        if k.returncode != 0:
            sys.exit(f"row {row}: a process failed ({k.returncode})")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    time.sleep(0.5)
    after = server_counts(url)
    wall = max(o["t1"] for o in outs) - min(o["t0"] for o in outs)
    messages = sum(o["messages"] for o in outs)
    n_ops = sum(o["ops"] for o in outs)
    return {
        "row": row,
        "procs": procs,
        "messages": messages,
        "ops": n_ops,
        "wall_s": wall,
        "messages_per_s": messages / wall,
        "ops_per_s": n_ops / wall,
        "xact_per_op": (after["xact"] - before["xact"]) / n_ops,
        "wal_sync_per_op": (after["wal_sync"] - before["wal_sync"]) / n_ops,
        "wal_bytes_per_op": (after["wal_bytes"] - before["wal_bytes"]) / n_ops,
        "cpu_ms_per_op": sum(o["cpu"] for o in outs) * 1000 / n_ops,
    }


def pgbench_row(url: str, procs: int, secs: int = 10) -> dict[str, Any]:
    pgbench = os.environ.get("PGBENCH") or next(
        (str(p) for p in sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"))), "pgbench"
    )
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("CREATE TABLE IF NOT EXISTS one_row (id bigserial PRIMARY KEY, v integer NOT NULL)")
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write("INSERT INTO one_row (v) VALUES (1);\n")
        script = f.name
    time.sleep(1.5)
    before = server_counts(url)
    done = subprocess.run(
        [pgbench, "-n", "-c", str(procs), "-j", str(min(procs, 2)), "-T", str(secs), "-f", script, url],
        capture_output=True,
        text=True,
    )
    os.unlink(script)
    if done.returncode != 0:
        sys.exit(f"pgbench failed:\n{done.stderr}")
    time.sleep(0.5)
    after = server_counts(url)
    m = re.search(r"number of transactions actually processed: (\d+)", done.stdout)
    tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", done.stdout)
    if not m or not tps:
        sys.exit(f"pgbench: unexpected output:\n{done.stdout}")
    n = int(m.group(1))
    return {
        "row": "pgbench",
        "procs": procs,
        "messages": n,
        "ops": n,
        "wall_s": n / float(tps.group(1)),
        "messages_per_s": float(tps.group(1)),
        "ops_per_s": float(tps.group(1)),
        "xact_per_op": (after["xact"] - before["xact"]) / n,
        "wal_sync_per_op": (after["wal_sync"] - before["wal_sync"]) / n,
        "wal_bytes_per_op": (after["wal_bytes"] - before["wal_bytes"]) / n,
        "cpu_ms_per_op": float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default=os.environ.get("UNDERTEXT_FLEET_URL"))
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--ops", type=int, default=400, help="appends / add_items calls per process")
    ap.add_argument("--pairs", type=int, default=200, help="LangGraph pairs per process (2 supersteps each)")
    ap.add_argument("--rows", default=ROWS)
    ap.add_argument("--child", default=None)
    ap.add_argument("--proc", type=int, default=0)
    ap.add_argument("--chats", default="")
    args = ap.parse_args()
    if not args.url:
        sys.exit("--url (or UNDERTEXT_FLEET_URL) is required: a PostgreSQL server, e.g. from scripts/fleet-servers")
    if args.child:
        child(args.child, args.url, args.proc, args.ops, args.pairs, [c for c in args.chats.split(",") if c])
        return
    load = os.getloadavg()[0]
    rows = []
    for row in args.rows.split(","):
        db = fresh_db(args.url, "bench_w_" + row.replace("-", "_"))
        rows.append(run_row(row, db, args.procs, args.ops, args.pairs))
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{args.procs} processes; load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end\n")
    print("| row | messages/s | ops/s | transactions per op | WAL flushes per op | WAL bytes per op | client CPU ms per op |")
    print("|---|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        print(
            f"| {r['row']} | {r['messages_per_s']:.0f} | {r['ops_per_s']:.0f} | {r['xact_per_op']:.2f} | "
            f"{r['wal_sync_per_op']:.2f} | {r['wal_bytes_per_op']:.0f} | {r['cpu_ms_per_op']:.2f} |"
        )
    by = {r["row"]: r for r in rows}
    if "engine-append" in by and "lg-postgres" in by:
        ratio = by["engine-append"]["messages_per_s"] / by["lg-postgres"]["messages_per_s"]
        print(f"\nengine appends / PostgresSaver supersteps, messages per second: {ratio:.2f}x")


if __name__ == "__main__":
    main()
