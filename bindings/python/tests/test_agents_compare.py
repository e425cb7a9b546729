"""UndertextSession against the SDK's SQLiteSession: random sequences of ``add_items``,
``get_items``, ``pop_item``, ``clear_session`` and compaction suffix replacements over
two sessions, with the store closed and reopened at random points, must answer every
read as a SQLiteSession on a file (reopened at the same points) and one in memory
(never reopened) do. ``UNDERTEXT_COMPARE_SEQUENCES`` sets how many sequences run
(default 40)."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("UNDERTEXT_REQUIRE_INTEGRATIONS") != "1":  # scripts/test-python-integrations sets it
    pytest.importorskip("agents.memory", reason="run scripts/test-python-integrations")

from agents.memory import SQLiteSession

import undertext
from undertext.agents import UndertextSession

pytestmark = pytest.mark.asyncio

SEQUENCES = int(os.environ.get("UNDERTEXT_COMPARE_SEQUENCES", "40"))
SESSION_IDS = ["s1", "s2"]


class Sessions:
    """Per session id: ours and SQLite on disk (reopened together), SQLite in memory."""

    def __init__(self, tmp: Path) -> None:
        self.store_path = tmp / "store"
        self.db_path = tmp / "sdk.db"
        self.memory = {sid: SQLiteSession(sid) for sid in SESSION_IDS}
        self.open()

    def open(self) -> None:
        self.store = undertext.Store.open(self.store_path, durability="none", preallocate=False)
        self.ours = {sid: UndertextSession(sid, self.store) for sid in SESSION_IDS}
        self.sqlite = {sid: SQLiteSession(sid, self.db_path) for sid in SESSION_IDS}

    def close(self) -> None:
        self.store.close()
        for s in self.sqlite.values():
            s.close()

    def reopen(self) -> None:
        self.close()
        self.open()

    def of(self, sid: str) -> list[tuple[str, Any]]:
        return [("undertext", self.ours[sid]), ("sqlite", self.sqlite[sid]), ("memory", self.memory[sid])]


class Sequence:
    def __init__(self, seed: int, sessions: Sessions) -> None:
        self.rng = random.Random(seed)
        self.s = sessions
        self.log: list[str] = []
        self.n = 0

    def same(self, what: str, answers: list[tuple[str, Any]]) -> None:
        (name0, first), *rest = answers
        for name, other in rest:
            assert first == other, (
                f"{what}: expected {name0}'s answer from {name} too\n{name0}: {first}\n{name}: {other}\n"
                "steps:\n  " + "\n  ".join(self.log)
            )

    def item(self) -> dict[str, Any]:
        self.n += 1
        role = self.rng.choice(["user", "assistant"])
        if self.rng.random() < 0.2:
            return {"type": "function_call_output", "call_id": f"c{self.n}", "output": f"out {self.n} é✓"}
        return {"role": role, "content": f"message {self.n} " + "é✓" * (self.n % 4)}

    async def step(self) -> None:
        sid = self.rng.choice(SESSION_IDS)
        r = self.rng.random()
        if r < 0.35:
            batch = [self.item() for _ in range(self.rng.randint(0, 4))]
            self.log.append(f"add_items({sid}, {len(batch)} items)")
            for _n, s in self.s.of(sid):
                await s.add_items(batch)
        elif r < 0.48:
            self.log.append(f"pop_item({sid})")
            self.same(self.log[-1], [(n, await s.pop_item()) for n, s in self.s.of(sid)])
        elif r < 0.63:
            limit = self.rng.choice([None, -1, 0, 1, 2, 5])
            self.log.append(f"get_items({sid}, {limit})")
            self.same(self.log[-1], [(n, await s.get_items(limit)) for n, s in self.s.of(sid)])
        elif r < 0.67:
            self.log.append(f"clear_session({sid})")
            for _n, s in self.s.of(sid):
                await s.clear_session()
        elif r < 0.92:
            await self.compact(sid)
        else:
            self.log.append("reopen")
            self.s.reopen()

    async def compact(self, sid: str) -> None:
        limit = self.rng.randint(1, 6)
        start_frac = self.rng.random()
        prune = self.rng.random() < 0.3
        output = [{"role": "assistant", "content": f"summary {len(self.log)}"}]

        def prune_prefix(item: Any) -> bool:
            return isinstance(item, dict) and item.get("role") == "user"

        self.log.append(f"compaction({sid}, limit={limit}, start={start_frac:.2f}, prune={prune})")
        answers = []
        for n, s in self.s.of(sid):
            snap = await s._get_compaction_snapshot(limit, prune_prefix=prune_prefix if prune else None)
            replaced = None
            if snap.items:
                start = int(start_frac * len(snap.items))
                replaced = await snap.replace_suffix(start, output)
            answers.append((n, (snap.items, snap.complete, replaced)))
        self.same(self.log[-1], answers)

    async def check_everything(self) -> None:
        for sid in SESSION_IDS:
            self.log.append(f"final get_items({sid})")
            self.same(self.log[-1], [(n, await s.get_items()) for n, s in self.s.of(sid)])


@pytest.mark.parametrize("seed", range(SEQUENCES))
async def test_random_calls_with_reopens_answer_like_sqlite_sessions_on_disk_and_in_memory(
    tmp_path: Path, seed: int
) -> None:
    sessions = Sessions(tmp_path)
    try:
        seq = Sequence(seed, sessions)
        for _ in range(60):
            await seq.step()
        await seq.check_everything()
        sessions.reopen()
        seq.log.append("reopen")
        await seq.check_everything()
    finally:
        sessions.close()
        for s in sessions.memory.values():
            s.close()
