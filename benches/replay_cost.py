#!/usr/bin/env python3
"""Cost with prompt caching and stalls at the hard line (issue 32): runs `undertext replay --json`
over a folder of transcripts and prints the markdown tables of benches/REPLAY.md.

Usage: python3 benches/replay_cost.py [TRANSCRIPTS] [--bin target/release/undertext]
                                      [--price input=1,cached=0.1] [--skip-stalls]

1. Cost: windows 32k, 64k, 128k, 200k x model latency 1,000 and 3,000 ms (instant summarizer,
   the replay's default hard-line policy: a view still over the hard line is refused).
   Per format and overall: tokens sent, cost with caching and prefix breaks of Undertext's
   views, of resending everything (only on the calls where it fits the usable input; the
   others are counted as "over") and of the naive policy; the ratios against the goals.
2. Stalls: 32k, 1,000 ms model time, summarizer 0 / 2,000 / 5,000 ms a call, the views waiting
   at the hard line for the worker (--hard-line-wait-ms 60000, as a harness with the library's
   waiting policy does). Run on the sessions that reach the hard line at 32k (a checkpoint was
   swapped in, or a view refused, in the 32k / 1,000 ms run): the others never wait.

Every command run is printed (stderr), copy-pasteable.
"""
import argparse
import json
import shlex
import subprocess
import sys
import time
from collections import defaultdict

WINDOWS = [32_000, 64_000, 128_000, 200_000]
LATENCIES = [1000, 3000]
SUMMARIZERS = [0, 2000, 5000]
GOALS = {"cost_views_over_naive": 0.90, "cost_views_over_resend": 0.75, "breaks_views_over_naive": 1.5,
         "tokens": 0.70}


def run(cmd):
    print("$ " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    t = time.time()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout), time.time() - t


def fmt(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def cost_table(binary, paths, price, windows, latencies):
    print("| window | latency ms | format | sessions | calls | tokens sent / resend all | tokens views / resend (calls it fits) | cost views | breaks views | "
          "cost resend (calls fit / over) | breaks resend | tokens naive | cost naive | breaks naive | "
          "**cost views / resend** | **cost views / naive** | **breaks views / naive** | refused | unservable | "
          "wall s |")
    print("|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    reach = {}
    for w in windows:
        for lat in latencies:
            cmd = [binary, "replay", *paths, "--window", str(w), "--latency-ms", str(lat), "--price", price, "--json"]
            d, secs = run(cmd)
            if w == 32_000 and lat == latencies[0]:
                reach = {s["source"]: s for s in d["sessions"] if s["checkpoints"] > 0 or s["refused"] > 0}
            rows = sorted(d["totals"].items()) + [("**all**", d["all"])]
            for f, t in rows:
                c = t["cost"]
                tokens = c["tokens_views_over_resend"]
                sent = t["guarded_tokens"] / max(1, t["naive_tokens"])
                print(f"| {w:,} | {lat:,} | {f} | {t['sessions']} | {t['steps']:,} | {sent:.3f} | {fmt(tokens, 3)} | "
                      f"{c['views']['cost']:.2f} | {c['views']['breaks']:,} | "
                      f"{c['resend']['cost']:.2f} ({c['resend']['calls']:,} / {c['resend_over_window']:,}) | "
                      f"{c['resend']['breaks']:,} | {c['naive']['tokens']:,} | {c['naive']['cost']:.2f} | "
                      f"{c['naive']['breaks']:,} | {fmt(c['cost_views_over_resend'])} | "
                      f"{fmt(c['cost_views_over_naive'])} | {fmt(c['breaks_views_over_naive'])} | "
                      f"{t['refused']} | {t['unservable']} | {secs:.1f} |")
            if d["worker_errors"]:
                print(f"worker errors at {w}/{lat}: {d['worker_errors'][:3]}", file=sys.stderr)
    return reach


def stall_table(binary, files, price, summarizers, threads=(1,), latency=1000, window=32_000):
    print("| window | model ms | summarizer ms | threads | sessions | calls | hard-line views | waited (> 10 ms) | "
          "waits > 100 ms | longest wait ms | swaps | refused | cost views / naive | wall s |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for sm, th in [(sm, th) for sm in summarizers for th in threads]:
        cmd = [binary, "replay", *files, "--window", str(window), "--latency-ms", str(latency),
               "--summarizer-ms", str(sm), "--summarizer-threads", str(th), "--hard-line-wait-ms", "60000",
               "--price", price, "--json"]
        d, secs = run(cmd)
        a = d["all"]
        wt = a["waits"]
        for row in d["sessions"]:
            if row["waits"]["over_100ms"]:
                print(f"  waited over 100 ms: {row.get('title', row.get('key'))}: {row['waits']}", file=sys.stderr)
        print(f"| {window:,} | {latency:,} | {sm:,} | {th} | {a['sessions']} | {a['steps']:,} | {wt['hard_line_views']:,} | "
              f"{wt['waited']:,} | {wt['over_100ms']:,} | {wt['longest_ms']:.1f} | {a['checkpoints']:,} | "
              f"{a['refused']} | {fmt(a['cost']['cost_views_over_naive'])} | {secs:.1f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path", nargs="?", default="../shared/data/transcripts")
    ap.add_argument("--bin", default="target/release/undertext")
    ap.add_argument("--price", default="input=1,cached=0.1")
    ap.add_argument("--windows", default=",".join(str(w) for w in WINDOWS))
    ap.add_argument("--latencies", default=",".join(str(x) for x in LATENCIES))
    ap.add_argument("--summarizers", default=",".join(str(x) for x in SUMMARIZERS))
    ap.add_argument("--threads", default="1",
                    help="summarizer calls at once for the stall table, e.g. 1,4")
    ap.add_argument("--skip-stalls", action="store_true")
    ap.add_argument("--only-stalls", action="store_true",
                    help="no cost table: one 32k replay finds the sessions that reach the hard line")
    a = ap.parse_args()
    windows = [int(x) for x in a.windows.split(",")]
    latencies = [int(x) for x in a.latencies.split(",")]
    print(f"Goals (issue 32, at 32k): cost views / naive <= {GOALS['cost_views_over_naive']}, "
          f"cost views / resend <= {GOALS['cost_views_over_resend']}, breaks views / naive <= "
          f"{GOALS['breaks_views_over_naive']}, 0 refused, tokens views / resend <= {GOALS['tokens']}; "
          f"no hard-line wait over 100 ms with a 2,000 ms summarizer and 1,000 ms model time.\n")
    if a.only_stalls:
        cmd = [a.bin, "replay", a.path, "--window", "32000", "--latency-ms", "1000", "--price", a.price, "--json"]
        d, _ = run(cmd)
        reach = {s["source"]: s for s in d["sessions"] if s["checkpoints"] > 0 or s["refused"] > 0}
    else:
        reach = cost_table(a.bin, [a.path], a.price, windows, latencies)
    if a.skip_stalls:
        return
    # The sessions that reach the hard line at 32k, by their source file (a file holding
    # several sessions is replayed whole).
    files = sorted(reach)
    print(f"\nStalls: {len(files)} file(s) whose sessions reach the hard line at 32k:\n")
    stall_table(a.bin, files, a.price, [int(x) for x in a.summarizers.split(",")],
                [int(x) for x in a.threads.split(",")])


if __name__ == "__main__":
    main()
