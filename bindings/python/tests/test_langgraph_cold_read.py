"""A read after a reopen walks a bounded number of records down an item list's chain
(``SNAPSHOT_LINKS``), and reads a manifest chain's blobs in one engine call."""

from __future__ import annotations

import os
from typing import Any

import pytest

if os.environ.get("UNDERTEXT_REQUIRE_INTEGRATIONS") != "1":  # scripts/test-python-integrations sets it
    pytest.importorskip("langgraph.checkpoint.base", reason="run scripts/test-python-integrations")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

import undertext
from undertext.langgraph import _lanes, _records
from undertext.langgraph import UndertextSaver


def grow(path: Any, n: int) -> list[Any]:
    """``n`` checkpoints of one thread, each adding one message to ``messages``."""
    msgs: list[Any] = [HumanMessage(content="start", id="h")]
    with UndertextSaver.open(path) as saver:
        cfg: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        for i in range(n):
            msgs.append(AIMessage(content=f"step {i}", id=f"a{i}"))
            cp = empty_checkpoint()
            cp["id"] = str(uuid6(clock_seq=-1))
            cp["channel_values"] = {"messages": list(msgs)}
            cp["channel_versions"] = {"messages": f"{i + 1:032}"}
            cfg = saver.put(cfg, cp, {"step": i}, {"messages": f"{i + 1:032}"})
    return msgs


def test_a_reopened_read_of_a_long_list_decodes_at_most_two_batches_of_records(tmp_path: Any, monkeypatch: Any) -> None:
    path = tmp_path / "store"
    msgs = grow(path, 150)
    decoded = []
    real = _lanes._decode

    def counting(m: Any) -> Any:
        decoded.append(m.seq)
        return real(m)

    monkeypatch.setattr(_lanes, "_decode", counting)
    with UndertextSaver.open(path) as saver:
        got = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert got is not None
        assert got.checkpoint["channel_values"]["messages"] == msgs
    # The newest batch (_BATCH records) finds the checkpoint; the list's chain reaches a
    # manifest within SNAPSHOT_LINKS links: no more than the batch below is read.
    assert len(decoded) <= 2 * _lanes._BATCH, f"{len(decoded)} records decoded of 150"


def test_a_manifest_chain_is_read_in_one_engine_call(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(_records, "SNAPSHOT_LINKS", 4)
    monkeypatch.setattr(_records, "MANIFEST_CHAIN", 8)
    path = tmp_path / "store"
    msgs = grow(path, 30)
    calls: list[int] = []
    verifies: list[Any] = []
    with UndertextSaver.open(path) as saver:
        store = saver.store
        real = store.get_blobs

        class Counting:
            def __getattr__(self, name: str) -> Any:
                return getattr(store, name)

            def get_blobs(self, owner: str, ids: list[str], **kw: Any) -> Any:
                calls.append(len(ids))
                verifies.append(kw.get("verify"))
                return real(owner, ids, **kw)

            def get_blob(self, owner: str, blob_id: str, **kw: Any) -> Any:
                calls.append(-1)
                return store.get_blob(owner, blob_id, **kw)

        saver.store = Counting()
        saver._registry.store = saver.store
        got = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert got is not None
        assert got.checkpoint["channel_values"]["messages"] == msgs
        saver.store = store
    # One call for the manifest chain (several blobs), one for the items.
    assert -1 not in calls and len(calls) == 2 and calls[0] > 1, calls
    # Both read what the saver wrote, checked by each record's checksum (not hashed again).
    assert verifies == ["checksum", "checksum"], verifies
    assert isinstance(store, undertext.Store)


def files_of(path: Any) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_reopened_read_writes_nothing_to_the_store(tmp_path: Any) -> None:
    path = tmp_path / "store"
    msgs = grow(path, 150)
    with UndertextSaver.open(path) as saver:
        before = files_of(path)
        cfg: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        got = saver.get_tuple(cfg)
        assert got is not None
        assert got.checkpoint["channel_values"]["messages"] == msgs
        assert len(list(saver.list(cfg, limit=5))) == 5
        after = files_of(path)
    assert list(after) == list(before)
    changed = [name for name in before if before[name] != after[name]]
    assert not changed, f"a read changed {changed}"
