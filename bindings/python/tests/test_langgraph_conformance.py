"""LangGraph's official checkpointer conformance suite against UndertextSaver.

Run twice: the saver as it is (native async methods, engine calls in a worker thread),
and through a shim whose ``a*`` methods call the sync methods directly, so the sync path
is what the suite exercises. Every capability must be detected and pass: the 5 base ones
and the 3 optional ones (copy_thread, delete_for_runs, prune).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import pytest

if os.environ.get("UNDERTEXT_REQUIRE_INTEGRATIONS") != "1":  # scripts/test-python-integrations sets it
    pytest.importorskip("langgraph.checkpoint.conformance", reason="run scripts/test-python-integrations")

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

import undertext
from undertext.langgraph import UndertextSaver


class SyncPathSaver(UndertextSaver):
    """The async API mapped straight onto the sync methods."""

    async def aget_tuple(self, config: Any) -> Any:
        return self.get_tuple(config)

    async def alist(self, config: Any, *, filter: Any = None, before: Any = None, limit: Any = None) -> AsyncIterator[Any]:
        for t in self.list(config, filter=filter, before=before, limit=limit):
            yield t

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Any) -> None:
        self.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Any, *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)


def _registered(cls: type[UndertextSaver], name: str) -> Any:
    @checkpointer_test(name=name)
    async def factory() -> AsyncIterator[UndertextSaver]:
        # A fresh store on disk for every capability suite, closed afterwards.
        with tempfile.TemporaryDirectory() as d:
            with undertext.Store.open(d) as store:
                yield cls(store)

    return factory


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "cls,name",
    [(UndertextSaver, "UndertextSaver"), (SyncPathSaver, "UndertextSaver via the sync methods")],
)
async def test_conformance_suite_passes_every_capability(cls: type[UndertextSaver], name: str) -> None:
    report = await validate(_registered(cls, name))
    report.print_report()
    assert report.passed_all_base(), report.to_dict()
    for cap in sorted(c.value for c in ALL_CAPABILITIES):
        result = report.results[cap]
        assert result.detected, f"{cap} not detected"
        assert result.passed is True, f"{cap}: {result.failures}"
        assert result.tests_failed == 0 and result.tests_passed > 0, f"{cap}: {result}"
