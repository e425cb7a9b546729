"""The OpenAI Agents SDK session beside the SDK's own ``SQLiteSession``, in the same run,
interleaved: ``get_items()`` of the whole history and ``get_items(limit=N)``.

Items are Responses API input items made from the largest shared Claude Code transcript (its
user prompts, assistant text, tool calls and tool results, in order: user messages, assistant
``message`` items with ``output_text``, ``function_call`` and ``function_call_output``), the
first ``--items`` of them, written in batches of one turn's size through ``add_items``. Each
store is a file store on the same disk (``SQLiteSession`` with a database file). Each round
times every operation on both sessions, the order of the kinds alternating from round to round;
the figures are medians over the rounds, each round's figure the median of ``--reps`` calls.
The ratio is Undertext over SQLiteSession (below 1: Undertext is faster). ``--fresh`` also times
opening each store anew and the first ``get_items()`` after it (a session's first read in a
process: nothing of the history is in the session's memory).

Usage: python benches/python/agents_items.py [--items 1000] [--limit 20] [--rounds 7] [--reps 15]
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
from typing import Any, Callable

from agents.memory import SQLiteSession

from undertext.agents import UndertextSession

TRANSCRIPTS = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "transcripts" / "claude_code"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text_of(c.get("text", c.get("content", ""))) for c in content if isinstance(c, dict))
    return ""


def items(n: int) -> list[dict[str, Any]]:
    """The first ``n`` input items of the transcripts, largest transcript first."""
    files = sorted(TRANSCRIPTS.rglob("*.jsonl"), key=lambda p: p.stat().st_size, reverse=True)
    out: list[dict[str, Any]] = []
    for f in files:
        for line in f.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            message = entry.get("message")
            if not isinstance(message, dict):
                continue
            content = message.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            for b in blocks:
                if not isinstance(b, dict):
                    continue
                kind = b.get("type")
                if kind == "text" and message.get("role") == "user":
                    out.append({"role": "user", "content": b.get("text") or ""})
                elif kind == "text":
                    out.append(
                        {
                            "id": f"msg_{len(out)}",
                            "type": "message",
                            "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": b.get("text") or "", "annotations": []}],
                        }
                    )
                elif kind == "tool_use":
                    out.append(
                        {
                            "type": "function_call",
                            "call_id": b.get("id", ""),
                            "name": b.get("name", ""),
                            "arguments": json.dumps(b.get("input", {})),
                        }
                    )
                elif kind == "tool_result":
                    out.append(
                        {"type": "function_call_output", "call_id": b.get("tool_use_id", ""), "output": _text_of(b.get("content"))}
                    )
                else:
                    continue
                if len(out) == n:
                    return out
    return out


def turns(its: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The items cut before each user message: one ``add_items`` per turn, as the runner
    writes them."""
    out: list[list[dict[str, Any]]] = []
    for i in its:
        if i.get("role") == "user" or not out:
            out.append([])
        out[-1].append(i)
    return out


def timed(loop: asyncio.AbstractEventLoop, reps: int, call: Callable[[], Any], check: Callable[[Any], bool]) -> float:
    """The median ms of ``reps`` awaited calls."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        got = loop.run_until_complete(call())
        times.append((time.perf_counter() - t0) * 1000)
        assert check(got)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--fresh", action="store_true", help="also time the first get_items() after an open")
    a = ap.parse_args()
    its = items(a.items)
    n = len(its)
    loop = asyncio.new_event_loop()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
        root = Path(d)

        def open_kind(kind: str) -> Any:
            if kind == "undertext":
                return UndertextSession.open("bench", root / "ut")
            return SQLiteSession("bench", root / "sqlite.db")

        kinds = ["undertext", "sqlite"]
        sessions = {k: open_kind(k) for k in kinds}
        for batch in turns(its):
            for s in sessions.values():
                loop.run_until_complete(s.add_items(batch))
        want = loop.run_until_complete(sessions["sqlite"].get_items())
        assert loop.run_until_complete(sessions["undertext"].get_items()) == want

        ops: dict[str, Callable[[Any], Callable[[], Any]]] = {
            f"get_items() of {n}": lambda s: s.get_items,
            f"get_items(limit={a.limit})": lambda s: lambda: s.get_items(limit=a.limit),
        }
        checks: dict[str, Callable[[Any], bool]] = {
            f"get_items() of {n}": lambda got: len(got) == n,
            f"get_items(limit={a.limit})": lambda got: got == want[-a.limit :],
        }
        rows: dict[tuple[str, str], list[float]] = {}
        for r in range(a.rounds):
            order = kinds if r % 2 == 0 else kinds[::-1]
            for op, make in ops.items():
                for k in order:
                    rows.setdefault((op, k), []).append(timed(loop, a.reps, make(sessions[k]), checks[op]))
            if a.fresh:
                for k in order:
                    s = sessions[k]
                    s.close()
                    t0 = time.perf_counter()
                    s = sessions[k] = open_kind(k)
                    t1 = time.perf_counter()
                    got = loop.run_until_complete(s.get_items())
                    t2 = time.perf_counter()
                    rows.setdefault(("open the session's store", k), []).append((t1 - t0) * 1000)
                    rows.setdefault((f"then its first get_items() of {n}", k), []).append((t2 - t1) * 1000)
                    assert len(got) == n
        for s in sessions.values():
            s.close()
    loop.close()

    size = sum(len(json.dumps(i)) for i in its)
    print(f"{n} Agents SDK items from real Claude Code turns ({size / n:.0f} B of JSON each on average);")
    print(f"medians of {a.rounds} rounds, each the median of {a.reps} calls; SQLiteSession on a file")
    print(f"{'operation':<34} {'undertext ms':>13} {'SQLiteSession ms':>17} {'ratio':>7}")
    for op in dict.fromkeys(op for op, _k in rows):
        u = statistics.median(rows[(op, "undertext")])
        s = statistics.median(rows[(op, "sqlite")])
        print(f"{op:<34} {u:>13.3f} {s:>17.3f} {u / s:>6.2f}x")


if __name__ == "__main__":
    main()
