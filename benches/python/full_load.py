"""Every message of one long chat loaded into Python dicts in a fresh process (issue 38's
"load every message into dicts" row), beside SQLite doing the same in the same run,
interleaved.

The stores are those of ``open_cost``'s ``make`` (``DIR/long``: one chat of N messages under
owner ``bench``, its id in ``DIR/long.id``; ``DIR/long.sqlite``: the same rows). Undertext:
``Store.open``, then ``to_dict()`` of each message, taken two ways: ``chat.messages()`` (a
list: every ``Message`` alive at once beside the dicts) and iterating the chat (``for m in
chat``: messages read and converted a batch at a time, each dropped once its dict is made).
SQLite: every row of the chat with its body ``json.loads``-ed into a dict. Each measure runs in a fresh interpreter, the two
alternating; printed are the medians of the load's wall time (after the open) and of the
memory the loaded dicts hold (RSS after the load less RSS before the open), with their ratios
(Undertext over SQLite: below 1, Undertext is cheaper).

Usage: python benches/python/full_load.py DIR --make N   (once: the two stores)
       python benches/python/full_load.py DIR [--rounds 5]
``--make`` writes open_cost's shape (275 random letters a message in words of six, a user
message every 100) through the package; ``open_cost make DIR [N]`` makes the same.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path


def rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4


def make(d: Path, n: int) -> None:
    """One chat of ``n`` messages under owner ``bench`` and the same rows in SQLite."""
    import random
    import sqlite3

    import undertext

    d.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(7)
    store = undertext.Store.open(str(d / "long"))
    chat = store.create_chat("bench")
    rows = []
    for b in range(0, n, 1000):
        batch = []
        for i in range(b, min(n, b + 1000)):
            words = " ".join("".join(chr(97 + rnd.randrange(26)) for _ in range(6)) for _ in range(8))
            text = " ".join([words] * 5)[:275]
            role = "user" if i % 100 == 0 else "assistant"
            batch.append({"role": role, "parts": [{"type": "text", "text": text}]})
            rows.append((1, i, role, json.dumps([{"type": "text", "text": text}])))
        chat.append_batch(batch)
    (d / "long.id").write_text(chat.id)
    store.close()
    sql = sqlite3.connect(str(d / "long.sqlite"))
    sql.executescript(
        "PRAGMA journal_mode=WAL; CREATE TABLE m (chat INTEGER, seq INTEGER, role TEXT, body TEXT,"
        " PRIMARY KEY (chat, seq)) WITHOUT ROWID;"
    )
    sql.executemany("INSERT INTO m VALUES (?, ?, ?, ?)", rows)
    sql.commit()


def child(what: str, d: Path) -> None:
    import time

    rss0 = rss_kib()
    if what in ("undertext", "undertext-iter"):
        import undertext

        store = undertext.Store.open(str(d / "long"), create_if_missing=False)
        chat_id = (d / "long.id").read_text().strip()
        t = time.perf_counter()
        chat = store.chat("bench", chat_id)
        if what == "undertext":
            rows = [m.to_dict() for m in chat.messages()]
        else:
            rows = [m.to_dict() for m in chat]
    else:
        import sqlite3

        conn = sqlite3.connect(str(d / "long.sqlite"))
        t = time.perf_counter()
        rows = [
            {"seq": seq, "role": role, "parts": json.loads(body)}
            for seq, role, body in conn.execute("SELECT seq, role, body FROM m WHERE chat = 1 ORDER BY seq")
        ]
    elapsed = time.perf_counter() - t
    print(json.dumps({"n": len(rows), "s": elapsed, "kib": rss_kib() - rss0}))


KINDS = ["undertext", "undertext-iter", "sqlite"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--child", choices=KINDS)
    ap.add_argument("--make", type=int, metavar="N")
    a = ap.parse_args()
    if a.make:
        make(a.dir, a.make)
        return
    if a.child:
        child(a.child, a.dir)
        return
    got: dict[str, list[dict]] = {k: [] for k in KINDS}
    for r in range(a.rounds):
        for what in KINDS[r % 3 :] + KINDS[: r % 3]:
            out = subprocess.run(
                [sys.executable, __file__, str(a.dir), "--child", what], check=True, capture_output=True, text=True
            ).stdout
            got[what].append(json.loads(out.strip().splitlines()[-1]))
    n = got["sqlite"][0]["n"]
    assert all(v[0]["n"] == n for v in got.values()), {k: v[0]["n"] for k, v in got.items()}
    med = {w: (statistics.median(x["s"] for x in v), statistics.median(x["kib"] for x in v)) for w, v in got.items()}
    ss, sk = med["sqlite"]
    print(f"{n} messages into dicts, medians of {a.rounds} fresh processes each, interleaved")
    for what in KINDS:
        s, k = med[what]
        ratio = "" if what == "sqlite" else f" ({s / ss:.2f}x / {k / sk:.2f}x sqlite)"
        print(f"{what:15} {s * 1e3:.1f} ms ({s / n * 1e6:.2f} us a message), {k / 1024:.1f} MiB ({k * 1024 / n:.0f} B a message){ratio}")


if __name__ == "__main__":
    main()
