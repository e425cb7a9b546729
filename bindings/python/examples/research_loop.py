"""A research loop over undertext: many short simulated agent sessions in parallel threads,
run under several budget settings, printing what each setting costs (tokens sent to the
model) and what it keeps (how many facts from tool output can still be recovered exactly).

Each session is a small tool loop: the user asks, the "model" calls a tool, the tool returns
a long output holding one fact (``key-<s>-<i> = <value>``), and before every model call the
harness asks undertext for the view under the budget. At the end the session checks every
fact it saw: visible in the final view as is, or recoverable through the archive that a
preview names (``Store.read_context``), byte for byte. Nothing is ever lost: compaction
rewrites what the model sees, never what was said.

    python research_loop.py                         # the full run
    python research_loop.py --sessions 4 --steps 10 --threads 4   # a quick one
"""

import argparse
import random
import re
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

import undertext

# (name, soft, target, hard): where the guard starts previewing, how far down it goes, and
# where it refuses.
SETTINGS: List[Tuple[str, float, float, float]] = [
    ("eager", 0.40, 0.25, 0.95),
    ("default", 0.70, 0.50, 0.90),
    ("late", 0.90, 0.75, 0.98),
]


@dataclass
class Totals:
    """What the sessions of one setting added up to."""

    calls: int = 0
    tokens_sent: int = 0
    raw_tokens: int = 0
    refused: int = 0
    compacted: int = 0
    facts: int = 0
    visible: int = 0
    recovered: int = 0
    exact_archives: int = 0
    archives_checked: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, other: "Totals") -> None:
        with self.lock:
            for name in ("calls", "tokens_sent", "raw_tokens", "refused", "compacted", "facts",
                         "visible", "recovered", "exact_archives", "archives_checked"):
                setattr(self, name, getattr(self, name) + getattr(other, name))


def tool_output(rng: random.Random, session: int, step: int, lines: int) -> Tuple[str, str]:
    """A long tool output (a file listing, a log) with one fact somewhere in the middle."""
    fact = f"key-{session}-{step} = {rng.randrange(10**9):09d}"
    rows = [f"{step:03d}.{k:04d}  src/module_{k % 17}.rs  ok  {rng.random():.6f}" for k in range(lines)]
    rows.insert(rng.randrange(lines // 4, 3 * lines // 4), fact)
    return "\n".join(rows) + "\n", fact


def view_text_and_archives(view: undertext.View) -> Tuple[str, List[str]]:
    """The text the model would see, and the archive ids its previews name."""
    texts, archives = [], []
    for m in view.messages:
        for p in m["parts"]:
            if p["type"] in ("text", "summary"):
                texts.append(p["text"])
            elif p["type"] == "tool_result":
                texts.append(p["text"])
                if "archive" in p:
                    archives.append(p["archive"]["id"])
                else:
                    archives.extend(re.findall(r"\b[0-9a-f]{64}\b", p["text"]))
    return "\n".join(texts), archives


def session(store: undertext.Store, budget: undertext.Budget, s: int, steps: int, lines: int) -> Totals:
    """One simulated agent session; returns its totals."""
    rng = random.Random(s)
    owner = f"researcher-{s % 3}"
    chat = store.create_chat(owner, title=f"session {s}", model="sim-model")
    chat.append(undertext.system("You are a research agent. Use tools; cite exact values."))
    t = Totals()
    seen: Dict[str, str] = {}  # fact -> the output it came from
    for step in range(steps):
        if step % 3 == 0:
            chat.append(undertext.user(f"Session {s}: look into area {step // 3}."))
        call_id = f"s{s}-c{step}"
        chat.append(undertext.tool_call(call_id, "grep", {"pattern": "key", "area": step // 3}))
        output, fact = tool_output(rng, s, step, lines)
        chat.append(undertext.tool_result(call_id, output))
        seen[fact] = output
        try:
            view = chat.view(budget)
        except undertext.Refused as refused:
            t.refused += 1
            view = refused.view
        t.calls += 1
        t.tokens_sent += view.estimate
        t.raw_tokens += view.raw_estimate if view.decision == "fits" else chat.estimate(budget)
        t.compacted += view.decision == "compacted"
        # The model "answers"; a real harness would report the provider's usage here.
        chat.record_step(chat[-1].turn, f"s{s}-stream", step, [undertext.assistant(f"Noted {fact.split(' = ')[0]}.")])
    # Recoverability: every fact, from what the last view shows or from an archive it names.
    try:
        final = chat.view(budget)
    except undertext.Refused as refused:
        final = refused.view
    shown, archives = view_text_and_archives(final)
    text = shown
    originals = set(seen.values())
    for archive in set(archives):
        ref = store.archive_ref(owner, archive)
        whole = store.read_context(owner, archive, 0, ref.chars)
        t.archives_checked += 1
        t.exact_archives += whole in originals
        text += "\n" + whole
    for fact in seen:
        t.facts += 1
        t.visible += fact in shown
        t.recovered += fact in text
    return t


def run_setting(root: Path, name: str, soft: float, target: float, hard: float, args: argparse.Namespace) -> Totals:
    budget = undertext.Budget(args.window, args.reserve, soft=soft, target=target, hard=hard)
    totals = Totals()
    with undertext.Store.open(root / name, durability="group", archive_threshold=args.archive_threshold) as store:
        with ThreadPoolExecutor(max_workers=args.threads) as pool:
            for t in pool.map(lambda s: session(store, budget, s, args.steps, args.lines), range(args.sessions)):
                totals.add(t)
        report = store.check()
        if not report["ok"]:
            raise SystemExit(f"setting {name}: the store check failed: {report['problems']}")
    return totals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=48, help="sessions per setting")
    ap.add_argument("--threads", type=int, default=8, help="sessions run at once")
    ap.add_argument("--steps", type=int, default=24, help="tool steps per session")
    ap.add_argument("--lines", type=int, default=60, help="lines per tool output")
    ap.add_argument("--window", type=int, default=16_000, help="context window, tokens")
    ap.add_argument("--reserve", type=int, default=2_000, help="tokens reserved for the answer")
    ap.add_argument("--archive-threshold", type=int, default=64 << 10,
                    help="tool results longer than this are archived on append (bytes)")
    args = ap.parse_args()

    print(f"undertext {undertext.__version__}: {args.sessions} sessions x {args.steps} steps per setting, "
          f"{args.threads} threads, window {args.window} (reserve {args.reserve})")
    header = (f"{'setting':<8} {'soft':>5} {'target':>6} {'hard':>5} | {'calls':>5} {'tokens sent':>11} "
              f"{'no guard':>9} {'saved':>6} | {'compacted':>9} {'refused':>7} | {'facts':>5} "
              f"{'visible':>7} {'recoverable':>11} {'exact':>7} {'time':>6}")
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="undertext-research-") as tmp:
        for name, soft, target, hard in SETTINGS:
            t0 = time.perf_counter()
            t = run_setting(Path(tmp), name, soft, target, hard, args)
            dt = time.perf_counter() - t0
            saved = 1 - t.tokens_sent / max(1, t.raw_tokens)
            print(f"{name:<8} {soft:>5.2f} {target:>6.2f} {hard:>5.2f} | {t.calls:>5} {t.tokens_sent:>11,} "
                  f"{t.raw_tokens:>9,} {saved:>6.0%} | {t.compacted:>9} {t.refused:>7} | {t.facts:>5} "
                  f"{t.visible / max(1, t.facts):>7.0%} {t.recovered / max(1, t.facts):>11.0%} "
                  f"{t.exact_archives}/{t.archives_checked:<5} {dt:>5.1f}s")
            if t.recovered != t.facts or t.exact_archives != t.archives_checked:
                raise SystemExit(f"setting {name}: a fact was lost ({t.recovered}/{t.facts} recovered)")
    print("every fact recoverable in every setting: previews name their archives, and read_context "
          "returns the original bytes")


if __name__ == "__main__":
    main()
