"""UndertextSaver against LangGraph's own savers: random sequences of ``put``,
``put_writes``, ``get_tuple``, ``list``, ``get_delta_channel_history`` (also against the
base class's walk over the same store) and ``delete_thread``, with the store closed and
reopened at random points, must answer every read as SqliteSaver (reopened at the same
points) and InMemorySaver (never reopened) do.

The sequences put checkpoints in and out of id order, put a checkpoint id again, and
store writes for a checkpoint before the checkpoint itself, before and after a reopen.
Channel ``items`` is a list of dict messages that grows as ``add_messages`` grows one (the
saver stores it item by item): each put continues the list of its parent, appending,
replacing, dropping items or leaving the channel unchanged; continuing the latest
checkpoint it holds the same objects (as LangGraph's loop does), and an item changed in
place is written back for the parent first (as a node returns it); after a reopen or
from an older parent it holds copies (as a list read from a saver).
``UNDERTEXT_COMPARE_SEQUENCES`` sets how many sequences run (default 60)."""

from __future__ import annotations

import copy
import os
import random
import sqlite3
from pathlib import Path
from typing import Any, Optional

import pytest

if os.environ.get("UNDERTEXT_REQUIRE_INTEGRATIONS") != "1":  # scripts/test-python-integrations sets it
    pytest.importorskip("langgraph.checkpoint.sqlite", reason="run scripts/test-python-integrations")

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT
from langgraph.checkpoint.sqlite import SqliteSaver

import undertext
from undertext.langgraph import UndertextSaver, _records

SEQUENCES = int(os.environ.get("UNDERTEXT_COMPARE_SEQUENCES", "60"))
LANES = [("t1", ""), ("t1", "inner"), ("t2", "")]


def cfg(thread: str, ns: str, checkpoint_id: Optional[str] = None) -> dict[str, Any]:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}


def shape(t: Optional[CheckpointTuple]) -> Any:
    """What a reader sees of a tuple, in plain data (channel values loaded)."""
    if t is None:
        return None
    conf = t.config["configurable"]
    cp = dict(t.checkpoint)
    cp["channel_values"] = dict(cp["channel_values"].items())
    parent = None if t.parent_config is None else t.parent_config["configurable"].get("checkpoint_id")
    return {
        "at": (conf["thread_id"], conf.get("checkpoint_ns", ""), conf.get("checkpoint_id")),
        "checkpoint": cp,
        "metadata": dict(t.metadata),
        "parent": parent,
        "pending_writes": list(t.pending_writes or []),
    }


class Savers:
    """Undertext and SQLite on disk (both reopened together), InMemorySaver in memory."""

    def __init__(self, tmp: Path) -> None:
        self.store_path = tmp / "store"
        self.db_path = tmp / "sqlite.db"
        self.memory = InMemorySaver()
        self.store: Any = None
        self.conn: Any = None
        self.open()

    def open(self) -> None:
        # No fsync (durability is not what is compared): the sequences run faster.
        self.store = undertext.Store.open(self.store_path, durability="none", preallocate=False)
        self.ours = UndertextSaver(self.store)
        self.conn = sqlite3.connect(self.db_path, check_same_thread=False)
        self.conn.execute("PRAGMA synchronous=OFF")
        self.sqlite = SqliteSaver(self.conn)

    def close(self) -> None:
        self.store.close()
        self.conn.close()

    def reopen(self) -> None:
        self.close()
        self.open()

    def all(self) -> list[tuple[str, Any]]:
        return [("undertext", self.ours), ("sqlite", self.sqlite), ("memory", self.memory)]


class Sequence:
    """One random sequence; ``log`` names every step, for the failure message."""

    def __init__(self, seed: int, savers: Savers) -> None:
        self.rng = random.Random(seed)
        self.s = savers
        self.log: list[str] = []
        self.version = 0
        self.put_ids: dict[tuple[str, str], list[str]] = {lane: [] for lane in LANES}
        self.parent_of: dict[str, Optional[str]] = {}
        # Ids made ahead of time and not used yet: taking one later puts a checkpoint out of
        # id order; some receive writes before their checkpoint is put.
        self.future: dict[tuple[str, str], list[str]] = {lane: [] for lane in LANES}
        # Channel "items": each checkpoint's list (a copy) and version; per lane the list
        # objects of its latest put (what a running graph holds).
        self.items_at: dict[str, list[dict[str, Any]]] = {}
        self.items_version: dict[str, str] = {}
        self.live: dict[tuple[str, str], tuple[str, list[dict[str, Any]]]] = {}

    def new_id(self) -> str:
        return str(uuid6(clock_seq=-1))

    def same(self, what: str, answers: list[tuple[str, Any]]) -> None:
        (name0, first), *rest = answers
        for name, other in rest:
            assert first == other, (
                f"{what}: expected {name0}'s answer from {name} too\n{name0}: {first}\n{name}: {other}\n"
                "steps:\n  " + "\n  ".join(self.log)
            )

    def step(self) -> None:
        r = self.rng.random()
        lane = self.rng.choice(LANES)
        if r < 0.33:
            self.put(lane)
        elif r < 0.60:
            self.put_writes(lane)
        elif r < 0.69:
            self.get(lane)
        elif r < 0.75:
            self.delta_history(lane)
        elif r < 0.88:
            self.list(lane)
        elif r < 0.91:
            self.log.append(f"delete_thread({lane[0]})")
            for _n, saver in self.s.all():
                saver.delete_thread(lane[0])
            for ln in LANES:
                if ln[0] == lane[0]:
                    for cid in self.put_ids[ln]:
                        self.parent_of.pop(cid, None)
                    self.put_ids[ln] = []
                    self.live.pop(ln, None)
        else:
            self.log.append("reopen")
            self.s.reopen()
            self.live.clear()

    def next_items(
        self, lane: tuple[str, str], parent: Optional[str], version: str
    ) -> tuple[list[dict[str, Any]], str, bool]:
        """The "items" value of a checkpoint whose parent is ``parent``: (list, version, changed)."""
        live = self.live.get(lane)
        if parent is not None and live is not None and live[0] == parent:
            base = live[1]  # the objects put for the parent
        else:
            base = copy.deepcopy(self.items_at.get(parent, [])) if parent is not None else []
        old_version = self.items_version.get(parent) if parent is not None else None
        if old_version is not None and self.rng.random() < 0.15:
            self.log.append("  items unchanged")
            return base, old_version, False
        items = list(base)
        op = self.rng.random()
        k = self.version
        if op < 0.55 or not items:
            for i in range(self.rng.randint(1, 2)):
                items.append({"role": self.rng.choice(["ai", "tool"]), "content": f"item {k}.{i}", "id": f"{k}.{i}"})
            self.log.append(f"  items append -> {len(items)}")
        elif op < 0.7 and parent is not None:
            j = self.rng.randrange(len(items))
            items[j]["content"] += " (edited)"  # in place, written back for the parent
            self.log.append(f"  items[{j}] changed in place and written")
            for _n, saver in self.s.all():
                saver.put_writes(cfg(*lane, parent), [("items", [items[j]])], "edit", "")
        elif op < 0.8:
            j = self.rng.randrange(len(items))
            items[j] = {**items[j], "content": f"replaced {k}"}
            self.log.append(f"  items[{j}] replaced")
        elif op < 0.9:
            del items[self.rng.randrange(len(items)) :]
            self.log.append(f"  items cut -> {len(items)}")
        else:
            items = copy.deepcopy(items) + [{"role": "ai", "content": f"after copies {k}", "id": f"c{k}"}]
            self.log.append("  items copied and appended")
        return items, version, True

    def put(self, lane: tuple[str, str]) -> None:
        ids = self.put_ids[lane]
        r = self.rng.random()
        if r < 0.15 and ids:
            cid = self.rng.choice(ids)  # the same id again (new values and metadata)
        elif r < 0.45 and self.future[lane]:
            cid = self.future[lane].pop(self.rng.randrange(len(self.future[lane])))
        else:
            cid = self.new_id()
        if self.rng.random() < 0.3:
            self.future[lane].append(self.new_id())
        if cid in self.parent_of:  # put again with its parent: a parent chain never loops
            parent = self.parent_of[cid]
        else:
            parent = ids[-1] if ids else None
            self.parent_of[cid] = parent
        self.version += 1
        version = f"{self.version:032}.0"
        cp = empty_checkpoint()
        cp["id"] = cid
        self.log.append(f"put({lane}, {cid}, parent={parent})")
        items, items_version, changed = self.next_items(lane, parent, version)
        cp["channel_values"] = {"n": self.version, "msgs": [f"m{i}" for i in range(self.version % 7)], "items": items}
        cp["channel_versions"] = {"n": version, "msgs": version, "items": items_version}
        new_versions = {"n": version, "msgs": version}
        if changed:
            new_versions["items"] = items_version
        metadata = {"source": "loop", "step": self.version, "tag": self.rng.choice(["a", "b"])}
        for _n, saver in self.s.all():
            saver.put(cfg(*lane, parent), cp, metadata, new_versions)
        self.items_at[cid] = copy.deepcopy(items)
        self.items_version[cid] = items_version
        self.live[lane] = (cid, items)
        if cid not in ids:
            ids.append(cid)

    def put_writes(self, lane: tuple[str, str]) -> None:
        ids, future = self.put_ids[lane], self.future[lane]
        r = self.rng.random()
        if r < 0.4 or not ids:
            if not future:
                future.append(self.new_id())
            cid = self.rng.choice(future)  # writes before their checkpoint
        else:
            cid = self.rng.choice(ids)
        task = self.rng.choice(["task-1", "task-2"])
        path = self.rng.choice(["", "~a"])
        k = self.version + len(self.log)
        if self.rng.random() < 0.25:  # special channels only (they replace)
            writes = [(self.rng.choice([ERROR, INTERRUPT]), f"special {k}")]
        else:  # regular channels only (the first write of (task, index) stays)
            writes = [(self.rng.choice(["x", "y"]), f"value {k}.{i}") for i in range(self.rng.randint(1, 3))]
        self.log.append(f"put_writes({lane}, {cid}, {writes}, {task}, {path!r})")
        for _n, saver in self.s.all():
            saver.put_writes(cfg(*lane, cid), writes, task, path)

    def get(self, lane: tuple[str, str]) -> None:
        ids = self.put_ids[lane] + self.future[lane]
        cid = self.rng.choice(ids) if ids and self.rng.random() < 0.6 else None
        self.log.append(f"get_tuple({lane}, {cid})")
        self.same(self.log[-1], [(n, shape(s.get_tuple(cfg(*lane, cid)))) for n, s in self.s.all()])

    def delta_history(self, lane: tuple[str, str]) -> None:
        ids = self.put_ids[lane] + self.future[lane]
        cid = self.rng.choice(ids) if ids and self.rng.random() < 0.7 else None
        channels = self.rng.sample(["n", "msgs", "items", "x", "y", ERROR, INTERRUPT], self.rng.randint(1, 4))
        self.log.append(f"get_delta_channel_history({lane}, {cid}, {channels})")
        config = cfg(*lane, cid)
        answers = [(n, dict(s.get_delta_channel_history(config=config, channels=channels))) for n, s in self.s.all()]
        # And the base class's walk (get_tuple along the parents) over the same store.
        walk = BaseCheckpointSaver.get_delta_channel_history(self.s.ours, config=config, channels=channels)
        self.same(self.log[-1], answers + [("the base class's walk over undertext", dict(walk))])

    def list(self, lane: tuple[str, str]) -> None:
        config: Optional[dict[str, Any]] = cfg(*lane) if self.rng.random() < 0.85 else None
        kwargs: dict[str, Any] = {}
        if self.rng.random() < 0.4:
            kwargs["limit"] = self.rng.randint(1, 4)
        if self.rng.random() < 0.3 and self.put_ids[lane]:
            kwargs["before"] = cfg(*lane, self.rng.choice(self.put_ids[lane]))
        if self.rng.random() < 0.3:
            kwargs["filter"] = {"tag": self.rng.choice(["a", "b"])}
        self.log.append(f"list({config}, {kwargs})")
        if config is None:
            # Across threads InMemorySaver lists thread by thread, the others by id: the
            # same checkpoints, in another order (so no limit either).
            kwargs.pop("limit", None)
            answers = [(n, sorted((shape(t) for t in s.list(None, **kwargs)), key=lambda x: x["at"])) for n, s in self.s.all()]
        else:
            answers = [(n, [shape(t) for t in s.list(config, **kwargs)]) for n, s in self.s.all()]
        self.same(self.log[-1], answers)

    def check_everything(self) -> None:
        for lane in LANES:
            self.log.append(f"final list({lane})")
            self.same(self.log[-1], [(n, [shape(t) for t in s.list(cfg(*lane))]) for n, s in self.s.all()])


@pytest.mark.parametrize("seed", range(SEQUENCES))
def test_random_operations_with_reopens_answer_like_sqlite_and_in_memory_savers(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Odd seeds: an item list's chain is cut by a manifest every 3 links.
    monkeypatch.setattr(_records, "SNAPSHOT_LINKS", 3 if seed % 2 else 256)
    savers = Savers(tmp_path)
    try:
        seq = Sequence(seed, savers)
        for _ in range(60):
            seq.step()
        seq.check_everything()
        savers.reopen()
        seq.log.append("reopen")
        seq.check_everything()
    finally:
        savers.close()


def test_writes_put_before_their_checkpoint_and_a_reopen_are_its_pending_writes(tmp_path: Path) -> None:
    savers = Savers(tmp_path)
    try:
        early = str(uuid6(clock_seq=-1))
        for _n, saver in savers.all():
            saver.put_writes(cfg("t", "", early), [("x", "early")], "task")
        savers.reopen()
        cp = empty_checkpoint()
        cp["id"] = early
        for _n, saver in savers.all():
            saver.put(cfg("t", ""), cp, {"step": 0}, {})
        got = {n: s.get_tuple(cfg("t", "", early)).pending_writes for n, s in savers.all()}
        assert got == {n: [("task", "x", "early")] for n in got}
    finally:
        savers.close()


def test_putting_a_checkpoint_id_again_after_a_reopen_keeps_its_writes(tmp_path: Path) -> None:
    savers = Savers(tmp_path)
    try:
        cp = empty_checkpoint()
        cp["id"] = str(uuid6(clock_seq=-1))
        for _n, saver in savers.all():
            saver.put(cfg("t", ""), cp, {"step": 0}, {})
            saver.put_writes(cfg("t", "", cp["id"]), [("x", 1)], "task")
        savers.reopen()
        for _n, saver in savers.all():
            saver.put(cfg("t", ""), cp, {"step": 1}, {})
        got = {n: s.get_tuple(cfg("t", "")).pending_writes for n, s in savers.all()}
        assert got == {n: [("task", "x", 1)] for n in got}
    finally:
        savers.close()


def test_delta_channel_history_along_a_forked_chain_with_writes_answers_like_langgraphs_savers(tmp_path: Path) -> None:
    # A chain root -> c1 -> ... -> c6 and a fork c3 -> f4 -> f5; every checkpoint has writes to
    # "d" (the delta channel) and some to "e"; "d" has a stored value (a seed) at the root
    # and at c2 only, "e" nowhere. Every checkpoint's history, asked of every saver, after a
    # reopen too, and of the base class's walk over ours.
    savers = Savers(tmp_path)
    try:
        ids: dict[str, str] = {}
        parents = {"root": None, "c1": "root", "c2": "c1", "c3": "c2", "c4": "c3", "c5": "c4", "c6": "c5", "f4": "c3", "f5": "f4"}
        for name, parent in parents.items():
            ids[name] = str(uuid6(clock_seq=-1))
            cp = empty_checkpoint()
            cp["id"] = ids[name]
            seeded = name in ("root", "c2")
            cp["channel_values"] = {"d": [f"seed at {name}"]} if seeded else {}
            cp["channel_versions"] = {"d": f"{len(ids):032}.0"} if seeded else {}
            for _n, saver in savers.all():
                saver.put(cfg("t", "", None if parent is None else ids[parent]), cp, {"step": len(ids)}, dict(cp["channel_versions"]))
                saver.put_writes(cfg("t", "", ids[name]), [("d", f"{name}.0"), ("d", f"{name}.1")], "task-b", "~b")
                saver.put_writes(cfg("t", "", ids[name]), [("d", f"{name}.a")], "task-a", "~a")
                if name in ("c1", "c4", "f4"):
                    saver.put_writes(cfg("t", "", ids[name]), [("e", f"e at {name}")], "task-e")
        for reopen in (False, True):
            if reopen:
                savers.reopen()
            for name in parents:
                config = cfg("t", "", ids[name])
                answers = {n: dict(s.get_delta_channel_history(config=config, channels=["d", "e"])) for n, s in savers.all()}
                answers["base walk"] = dict(BaseCheckpointSaver.get_delta_channel_history(savers.ours, config=config, channels=["d", "e"]))
                assert all(a == answers["undertext"] for a in answers.values()), (name, answers)
        ours = savers.ours.get_delta_channel_history(config=cfg("t", "", ids["f5"]), channels=["d", "e"])
        assert ours["d"]["seed"] == ["seed at c2"]
        # The seed's own checkpoint's writes come after its value, so they are replayed too.
        assert [w[2] for w in ours["d"]["writes"]] == ["c2.a", "c2.0", "c2.1", "c3.a", "c3.0", "c3.1", "f4.a", "f4.0", "f4.1"]
        assert [w[2] for w in ours["e"]["writes"]] == ["e at c1", "e at f4"] and "seed" not in ours["e"]
    finally:
        savers.close()
