"""UndertextSaver vs LangGraph's SqliteSaver on a growing thread, side by side in one run.

The workload of issue 11: one thread, N steps (default 1,000); each step appends a ~1 KB
message to a list and checkpoints the whole list (``put`` with the list as a changed
channel value, as a LangGraph ``add_messages`` state does). Then ``get_tuple`` of the
latest checkpoint and ``list(limit=100)``, each timed twice: as returned (UndertextSaver's
channel values load when first accessed) and with every channel value of every returned
tuple read (what SqliteSaver has done before it returns). Both savers run on files in the same
directory: SqliteSaver on a file-backed database in WAL mode (its own setup), Undertext
on a store with its default options (group commit: every put is durable when it
returns). Prints a markdown table and a JSON line.

Usage: python benches/python/langgraph_growth.py [--steps 1000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import undertext
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.sqlite import SqliteSaver
from undertext.langgraph import UndertextSaver

WORDS = (
    "the a build test fails because lockfile stale cargo update run check error warning module "
    "function returns value config path file line column expected found type trait impl struct "
    "async await thread lock index blob chunk manifest record commit sync write read list"
).split()


def messages(n: int, seed: int = 11) -> list[dict[str, Any]]:
    """n distinct ~1 KB messages of word-like text (compresses like prose, not like noise)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words: list[str] = []
        size = 0
        while size < 1000:
            w = rng.choice(WORDS) if rng.random() < 0.9 else f"{rng.randrange(10**6)}"
            words.append(w)
            size += len(w) + 1
        out.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"[{i}] " + " ".join(words)})
    return out


def run(saver: Any, msgs: list[dict[str, Any]]) -> dict[str, Any]:
    thread = {"configurable": {"thread_id": "growing", "checkpoint_ns": ""}}
    parent: str | None = None
    puts = []
    state: list[dict[str, Any]] = []
    version = None
    for i, m in enumerate(msgs):
        state.append(m)
        version = saver.get_next_version(version, None)
        cp = empty_checkpoint()
        cp["id"] = str(uuid6(clock_seq=-1))
        cp["channel_values"] = {"messages": list(state)}
        cp["channel_versions"] = {"messages": version}
        config = {"configurable": {"thread_id": "growing", "checkpoint_ns": ""}}
        if parent is not None:
            config["configurable"]["checkpoint_id"] = parent
        t0 = time.perf_counter()
        stored = saver.put(config, cp, {"source": "loop", "step": i}, {"messages": version})
        puts.append(time.perf_counter() - t0)
        parent = stored["configurable"]["checkpoint_id"]

    def timed(f: Any, reps: int) -> float:
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    def read_all(tuples: list[Any]) -> int:
        """Touches every channel value of every tuple; the number of values read."""
        n = 0
        for t in tuples:
            for v in t.checkpoint["channel_values"].values():
                n += v is not None
        return n

    latest = saver.get_tuple(thread)
    assert latest is not None and latest.checkpoint["channel_values"]["messages"] == state
    listed = list(saver.list(thread, limit=100))
    assert [t.metadata["step"] for t in listed] == list(range(len(msgs) - 1, max(-1, len(msgs) - 101), -1))
    reads = {
        "get_tuple_ms": (lambda: saver.get_tuple(thread), 21),
        "list100_ms": (lambda: list(saver.list(thread, limit=100)), 11),
        "get_tuple_read_ms": (lambda: read_all([saver.get_tuple(thread)]), 21),
        "list100_read_ms": (lambda: read_all(list(saver.list(thread, limit=100))), 5),
    }
    # One untimed call of each first: the first large allocations after the puts are slower
    # (the allocator grows its heap), which would favour whichever read is timed later.
    for f, _reps in reads.values():
        f()
    return {
        "put_total_s": sum(puts),
        "put_median_ms": statistics.median(puts) * 1e3,
        "put_p99_ms": sorted(puts)[int(len(puts) * 0.99) - 1] * 1e3,
        **{name: timed(f, reps) * 1e3 for name, (f, reps) in reads.items()},
    }


def sizes(paths: list[Path]) -> tuple[int, int]:
    """(apparent bytes, allocated bytes) of the files under paths."""
    apparent = allocated = 0
    for p in paths:
        files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
        for f in files:
            st = f.stat()
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--dir", type=Path)
    args = ap.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="lg-growth-"))
    base.mkdir(parents=True, exist_ok=True)
    msgs = messages(args.steps)
    distinct = sum(len(m["content"].encode()) for m in msgs)

    db = base / "sqlite.db"
    conn = sqlite3.connect(str(db), check_same_thread=False)
    sq = SqliteSaver(conn)
    sq.setup()
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    r_sq = run(sq, msgs)
    conn.commit()
    sq_app, sq_alloc = sizes([p for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()])
    conn.close()

    with undertext.Store.open(base / "undertext") as store:
        saver = UndertextSaver(store)
        r_ut = run(saver, msgs)
        stats = store.stats()
    ut_app, ut_alloc = sizes([base / "undertext"])
    ut_data = int(stats["log_bytes"]) + int(stats["index_bytes"])

    rows = [
        ("put, total (ms)", r_sq["put_total_s"] * 1e3, r_ut["put_total_s"] * 1e3),
        ("put, median (ms)", r_sq["put_median_ms"], r_ut["put_median_ms"]),
        ("put, p99 (ms)", r_sq["put_p99_ms"], r_ut["put_p99_ms"]),
        ("get_tuple latest, median (ms)", r_sq["get_tuple_ms"], r_ut["get_tuple_ms"]),
        ("get_tuple latest + read every value, median (ms)", r_sq["get_tuple_read_ms"], r_ut["get_tuple_read_ms"]),
        ("list(limit=100), median (ms)", r_sq["list100_ms"], r_ut["list100_ms"]),
        ("list(limit=100) + read every value, median (ms)", r_sq["list100_read_ms"], r_ut["list100_read_ms"]),
    ]
    print(f"{args.steps} steps, ~1 KB message per step, whole list checkpointed; distinct message text {distinct / 1e6:.2f} MB")
    print(f"SqliteSaver journal_mode={mode}; Undertext default options (group commit)\n")
    print("| what | SqliteSaver | UndertextSaver | Sqlite / Undertext |")
    print("|---|---:|---:|---:|")
    for name, a, b in rows:
        print(f"| {name} | {a:,.2f} | {b:,.2f} | {a / b:,.1f}× |")
    mb = [
        ("bytes on disk (files, apparent)", sq_app, ut_app),
        ("bytes on disk (allocated blocks)", sq_alloc, ut_alloc),
        ("log + index while open (sqlite files / undertext stats)", sq_app, ut_data),
    ]
    for name, a, b in mb:
        print(f"| {name} | {a / 1e6:,.1f} MB | {b / 1e6:,.2f} MB | {a / b:,.1f}× |")
    print(
        f"\nBytes on disk (closed, apparent) / distinct message text: Undertext {ut_app / distinct:.2f}× "
        f"(log + index while open: {ut_data / distinct:.2f}×); SqliteSaver {sq_app / distinct:.0f}×"
    )
    sq_out = {**r_sq, "bytes": sq_app, "allocated": sq_alloc}
    ut_out = {**r_ut, "bytes": ut_app, "allocated": ut_alloc, "data_bytes": ut_data, "stats": stats}
    print(json.dumps({"steps": args.steps, "distinct_bytes": distinct, "sqlite": sq_out, "undertext": ut_out}))


if __name__ == "__main__":
    main()
