#!/usr/bin/env python3
"""Replays every transcript under a folder with `undertext replay --json` at several windows
and model latencies, and prints the tables of benches/REPLAY.md ("Long loops" section).

Usage: python3 benches/replay_matrix.py [TRANSCRIPTS] [--bin target/release/undertext]
Windows 32k, 64k, 128k, 200k; latency 0 ms (the worker's worst case) and 3,000 ms.
"""
import argparse
import json
import subprocess
import sys
import time
from collections import defaultdict

WINDOWS = [32_000, 64_000, 128_000, 200_000]
LATENCIES = [0, 3000]


def run(binary, path, window, latency):
    t = time.time()
    out = subprocess.run(
        [binary, "replay", path, "--window", str(window), "--latency-ms", str(latency), "--json"],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout), time.time() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path", nargs="?", default="../shared/data/transcripts")
    ap.add_argument("--bin", default="target/release/undertext")
    ap.add_argument("--windows", default=",".join(str(w) for w in WINDOWS))
    ap.add_argument("--latencies", default=",".join(str(x) for x in LATENCIES))
    a = ap.parse_args()
    unservable_notes = []
    print("| window | latency | format | sessions | model calls | sent / resend all | previews | "
          "checkpoints | refused | unservable | stall ms | recovered bytes | wall s |")
    print("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for w in [int(x) for x in a.windows.split(",")]:
        for lat in [int(x) for x in a.latencies.split(",")]:
            d, secs = run(a.bin, a.path, w, lat)
            per = defaultdict(lambda: defaultdict(float))
            for s in d["sessions"]:
                for key in ["steps", "naive_tokens", "guarded_tokens", "previews", "checkpoints",
                            "refused", "unservable", "stall_ms", "recovered_bytes"]:
                    per[s["format"]][key] += s[key]
                per[s["format"]]["n"] += 1
                if s["unservable"]:
                    unservable_notes.append(f"{w} / {lat} ms: {s['title'][:60]}: {s['unservable_reason']}")
            rows = sorted(per.items()) + [("**all**", {
                k: sum(v[k] for v in per.values()) for k in next(iter(per.values())).keys()})]
            for f, v in rows:
                ratio = v["guarded_tokens"] / max(1, v["naive_tokens"])
                print(f"| {w:,} | {lat:,} | {f} | {int(v['n'])} | {int(v['steps']):,} | {ratio:.3f} | "
                      f"{int(v['previews']):,} | {int(v['checkpoints']):,} | {int(v['refused'])} | "
                      f"{int(v['unservable'])} | {v['stall_ms']:.1f} | {int(v['recovered_bytes']):,} | "
                      f"{secs:.1f} |")
            if d["worker_errors"]:
                print(f"worker errors at {w}/{lat}: {d['worker_errors'][:3]}", file=sys.stderr)
    if unservable_notes:
        print("\nUnservable (the protected minimum alone is over the hard line):")
        for n in unservable_notes:
            print(f"- {n}")


if __name__ == "__main__":
    main()
