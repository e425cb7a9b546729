"""UndertextSessionStore under trio, which the Claude Agent SDK supports through anyio: the
SDK's SessionStore conformance suite and every async method run on a trio event loop (the
engine calls go to anyio's worker threads; `asyncio.to_thread` would fail there with "no
running event loop"), also from concurrent trio tasks. scripts/test-python-integrations
installs trio."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("UNDERTEXT_REQUIRE_INTEGRATIONS") != "1":  # scripts/test-python-integrations sets it
    pytest.importorskip("claude_agent_sdk", reason="run scripts/test-python-integrations")
    pytest.importorskip("trio", reason="run scripts/test-python-integrations")

import sniffio
import trio
from claude_agent_sdk.testing import run_session_store_conformance

import undertext
from undertext.claude import UndertextSessionStore

pytestmark = pytest.mark.anyio

KEY = {"project_key": "proj", "session_id": "sess-1"}


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def test_the_sdk_conformance_suite_passes_under_trio(tmp_path: Path) -> None:
    assert sniffio.current_async_library() == "trio"
    made: list[UndertextSessionStore] = []

    def make() -> UndertextSessionStore:
        s = UndertextSessionStore.open(tmp_path / f"store-{len(made)}")
        made.append(s)
        return s

    try:
        await run_session_store_conformance(make)
    finally:
        for s in made:
            s.close()


async def test_every_async_method_runs_under_trio(tmp_path: Path) -> None:
    assert sniffio.current_async_library() == "trio"
    sub = {**KEY, "subpath": "subagents/agent-1"}
    entries = [
        {"type": "user", "uuid": "u-1", "timestamp": "2026-01-01T00:00:00.000Z", "message": {"content": "hi ✓"}},
        {"type": "assistant", "uuid": "u-2", "timestamp": "2026-01-01T00:00:01.000Z", "n": 2**70},
    ]
    async with UndertextSessionStore.open(tmp_path / "s") as s:
        await s.append(KEY, entries)
        await s.append(KEY, entries[:1])  # a uuid already stored: skipped
        await s.append(sub, [{"type": "user", "uuid": "s-1"}])
        assert await s.load(KEY) == entries
        assert await s.load({**KEY, "session_id": "never"}) is None
        assert [e["session_id"] for e in await s.list_sessions("proj")] == ["sess-1"]
        assert len(await s.list_session_summaries("proj")) == 1
        assert await s.list_subkeys({"project_key": "proj", "session_id": "sess-1"}) == ["subagents/agent-1"]
        await s.delete(KEY)
        assert await s.load(KEY) is None and await s.load(sub) is None
    assert s.store.closed  # __aexit__ closed it, on anyio's thread too


@pytest.mark.parametrize("inline_below_ms", [60_000.0, 0.0], ids=["in-the-loop", "worker-threads"])
async def test_appends_from_concurrent_trio_tasks_each_land_whole(tmp_path: Path, inline_below_ms: float) -> None:
    async with UndertextSessionStore.open(tmp_path / "s", inline_below_ms=inline_below_ms) as s:

        async def writer(w: int) -> None:
            for b in range(5):
                batch = [{"type": "user", "uuid": f"{w}-{b}-{i}", "w": w, "b": b, "i": i} for i in range(4)]
                await s.append({**KEY, "session_id": f"sess-{w % 3}"}, batch)

        async with trio.open_nursery() as nursery:
            for w in range(6):
                nursery.start_soon(writer, w)
        for k in range(3):
            loaded = await s.load({**KEY, "session_id": f"sess-{k}"})
            assert loaded is not None and len(loaded) == 2 * 5 * 4
            for w in (k, k + 3):  # each writer's batches in its order, each batch contiguous
                mine = [(e["b"], e["i"]) for e in loaded if e["w"] == w]
                assert mine == [(b, i) for b in range(5) for i in range(4)]
            starts = [n for n, e in enumerate(loaded) if e["i"] == 0]
            assert all([e["i"] for e in loaded[n : n + 4]] == [0, 1, 2, 3] for n in starts)


async def test_a_temporary_store_under_trio_is_removed_and_then_says_so() -> None:
    s = UndertextSessionStore.temporary()
    path = Path(s.store.path)
    await s.append(KEY, [{"type": "x", "uuid": "1"}])
    async with s:
        pass
    assert not path.exists()
    with pytest.raises(undertext.Closed, match="removed"):
        await s.load(KEY)
