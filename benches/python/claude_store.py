"""The Claude Agent SDK store beside its baseline, a JSONL file with an fdatasync per append,
in the same run, rounds interleaved.

Entries are the real lines of the largest shared Claude Code transcript (the first N), sent
one ``append`` at a time as the SDK mirrors a live session. Each round writes a fresh store of
each kind, the kinds one after the other (so a load change hits both alike); then ``load``
of the whole transcript from a fresh open. Medians of the rounds; the ratio is Undertext over
the baseline (below 1: Undertext is faster). ``--loads N`` then times N more loads of each
kind on one written store, the kinds alternating, each from a fresh open: one load per round
swings with the machine, these are N samples taken side by side.

``undertext (thread)`` is the same store with ``inline_below_ms=0``: every ``append`` in a
worker thread, which is what the default avoids on a fast disk (the baseline, like the
default, writes and syncs in the event loop).

Usage: python benches/python/claude_store.py [--entries 1000] [--rounds 5] [--loads 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from undertext.claude import UndertextSessionStore

TRANSCRIPTS = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "transcripts" / "claude_code"
KEY = {"project_key": "proj", "session_id": "bench"}


def entries(n: int) -> list[dict[str, Any]]:
    files = sorted(TRANSCRIPTS.rglob("*.jsonl"), key=lambda p: p.stat().st_size, reverse=True)
    out: list[dict[str, Any]] = []
    for f in files:
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.append(json.loads(line))
            if len(out) == n:
                return out
    return out


class Jsonl:
    """The baseline: one JSONL file per key, each append written and fdatasync'ed."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.file = path / "bench.jsonl"

    async def append(self, _key: Any, batch: list[dict[str, Any]]) -> None:
        data = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in batch).encode()
        fd = os.open(self.file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fdatasync(fd)
        finally:
            os.close(fd)

    async def load(self, _key: Any) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.file.read_text(encoding="utf-8").splitlines()]


def open_kind(kind: str, path: Path) -> Any:
    if kind == "undertext":
        return UndertextSessionStore.open(path)
    if kind == "undertext (thread)":
        return UndertextSessionStore.open(path, inline_below_ms=0)
    return Jsonl(path)


async def round_of(kind: str, root: Path, es: list[dict[str, Any]]) -> tuple[float, float]:
    path = root / kind.replace(" ", "_")
    store: Any = open_kind(kind, path)
    t0 = time.perf_counter()
    for e in es:
        await store.append(KEY, [e])
    append_ms = (time.perf_counter() - t0) * 1000 / len(es)
    if kind.startswith("undertext"):
        store.close()
        store = open_kind(kind, path)
    t1 = time.perf_counter()
    got = await store.load(KEY)
    load_ms = (time.perf_counter() - t1) * 1000
    assert got is not None and len(got) == len(es), (kind, None if got is None else len(got))
    if kind.startswith("undertext"):
        store.close()
    return append_ms, load_ms


async def loads_of(root: Path, es: list[dict[str, Any]], n: int) -> dict[str, list[float]]:
    """``n`` loads of each kind, alternating (the first kind changes every time), each from
    a fresh open of the store written once (the JSONL file is read anew each time)."""
    for kind in ("undertext", "jsonl+fdatasync"):
        await round_of(kind, root, es)
    got: dict[str, list[float]] = {"undertext": [], "jsonl+fdatasync": []}
    kinds = list(got)
    for i in range(n):
        for kind in kinds if i % 2 == 0 else kinds[::-1]:
            store: Any = UndertextSessionStore.open(root / kind) if kind == "undertext" else Jsonl(root / kind)
            t0 = time.perf_counter()
            loaded = await store.load(KEY)
            got[kind].append((time.perf_counter() - t0) * 1000)
            assert loaded is not None and len(loaded) == len(es)
            if kind == "undertext":
                store.close()
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--loads", type=int, default=0, help="also N loads of each kind, alternating, from fresh opens")
    a = ap.parse_args()
    es = entries(a.entries)
    rows: dict[str, list[tuple[float, float]]] = {"undertext": [], "undertext (thread)": [], "jsonl+fdatasync": []}
    kinds = list(rows)
    for r in range(a.rounds):
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
            for kind in kinds[r % 3 :] + kinds[: r % 3]:  # each kind first in turn
                rows[kind].append(asyncio.run(round_of(kind, Path(d), es)))
    if a.loads:
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
            loads = asyncio.run(loads_of(Path(d), es, a.loads))
    med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in rows.items()}
    print(f"{len(es)} real Claude Code entries, one append each; medians of {a.rounds} rounds")
    print(f"{'store':<20} {'append ms':>10} {'load ms':>9}")
    for k, (ap_ms, ld_ms) in med.items():
        print(f"{k:<20} {ap_ms:>10.3f} {ld_ms:>9.1f}")
    u, t, j = med["undertext"], med["undertext (thread)"], med["jsonl+fdatasync"]
    print(f"ratio (undertext / baseline): append {u[0] / j[0]:.2f}x, load {u[1] / j[1]:.2f}x")
    print(f"ratio (undertext (thread) / baseline): append {t[0] / j[0]:.2f}x")
    if a.loads:
        lu, lj = (statistics.median(loads[k]) for k in ("undertext", "jsonl+fdatasync"))
        print(f"load alone, {a.loads} of each alternating from fresh opens: undertext {lu:.1f} ms, jsonl {lj:.1f} ms, {lu / lj:.2f}x")


if __name__ == "__main__":
    main()
