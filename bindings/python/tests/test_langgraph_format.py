"""UndertextSaver's records: compact JSON where the data is plain JSON, exact round trips
where it is not, stores written in the first record format still read and extended, and
blobs named once per chat still kept by Store.gc."""

from __future__ import annotations

import base64
import datetime
import enum
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from json_values import mutated, plain_value, random_value, written_natively

if os.environ.get("UNDERTEXT_REQUIRE_INTEGRATIONS") != "1":  # scripts/test-python-integrations sets it
    pytest.importorskip("langgraph.checkpoint.base", reason="run scripts/test-python-integrations")

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

import undertext
from undertext._native import _json_exact, _json_patch
from undertext.langgraph import UndertextSaver
from undertext.langgraph._caches import PREDECODE_BATCH
from undertext.langgraph._records import _json_exact_py, _patch_exact_py


def cfg(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}


def checkpoint(values: dict[str, Any], versions: dict[str, Any]) -> Any:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=-1))
    cp["channel_values"] = dict(values)
    cp["channel_versions"] = dict(versions)
    return cp


def last_record(saver: UndertextSaver, thread: str) -> Any:
    lane = saver._registry.lane(thread, "", False)
    return lane.chat.get(len(lane.chat) - 1)


class Colour(str, enum.Enum):
    RED = "red"


def test_a_plain_checkpoint_record_is_compact_json_without_serializer_output(store: Any) -> None:
    saver = UndertextSaver(store)
    parent = None
    for i in range(3):
        cp = checkpoint({"messages": ["m" * 20] * (i + 1)}, {"messages": saver.get_next_version(None, None)})
        parent = saver.put(cfg("t", parent), cp, {"source": "loop", "step": i}, dict(cp["channel_versions"]))[
            "configurable"
        ]["checkpoint_id"]
    m = last_record(saver, "t")
    rec = json.loads(m.text)
    assert rec["k"] == "C" and rec["id"] == parent
    assert "mx" not in rec, "the running maximum is stored although it equals the id"
    assert "cp" not in rec and "md" not in rec, "plain JSON went through the serializer"
    # The metadata and checkpoint fields: a patch of the parent record's (see below).
    assert rec["cd"]["m"] == {"s": {"step": 2}}
    assert parent not in json.dumps(rec["cd"]), "the checkpoint id is stored twice"
    # One new blob, named by its attachment's index; its version only in the checkpoint.
    assert rec["ch"]["messages"][0] == 0 and len(rec["ch"]["messages"]) == 2
    attachments = [p for p in m.parts if p["type"] == "attachment"]
    assert len(attachments) == 1 and len(attachments[0]["mime"]) <= 4
    assert len(m.text) < 330, m.text


def test_an_empty_blob_is_named_by_an_empty_string_not_stored_and_reads_back(tmp_path: Any) -> None:
    # None (every `branch:to:` channel of a graph, every such write) serializes to no bytes
    # and a short channel value fits in the record's head: the blob's rest is empty. Named ""
    # and neither attached nor stored (an attachment part is ~36 bytes of every record).
    with UndertextSaver.open(tmp_path / "s") as saver:
        cp = checkpoint({"branch:to:x": None, "n": 7}, {"branch:to:x": 1, "n": 1})
        put = saver.put(cfg("t"), cp, {"source": "loop", "step": 0}, {"branch:to:x": 1, "n": 1})
        saver.put_writes(put, [("branch:to:y", None)], "task-1")
        lane = saver._registry.lane("t", "", False)
        records = [lane.chat.get(i) for i in range(len(lane.chat))]
        for m in records:
            assert [p for p in m.parts if p["type"] == "attachment"] == [], m.text
        c, w = (json.loads(m.text) for m in records)
        assert c["ch"]["branch:to:x"][0] == "" and c["ch"]["n"][0] == ""
        assert [e[2] for e in w["w"]] == [""]
        assert not saver.store.contains_blob(saver.owner, undertext.blob_id(b""))
    with UndertextSaver.open(tmp_path / "s") as saver:
        got = saver.get_tuple(cfg("t"))
        assert got is not None
        assert dict(got.checkpoint["channel_values"]) == {"branch:to:x": None, "n": 7}
        assert got.pending_writes == [("task-1", "branch:to:y", None)]


@pytest.mark.parametrize(
    "versions",
    [{"a": "00000000000000000000000000000001.0.5"}, {"a": 3}, {"a": 2.5}, {"a": "1", "b": 1, "c": 1.0}],
)
def test_channel_versions_come_back_with_their_types(store: Any, versions: dict[str, Any]) -> None:
    saver = UndertextSaver(store)
    cp = checkpoint({ch: ch for ch in versions}, versions)
    cp["versions_seen"] = {"node": dict(versions)}
    saver.put(cfg("t"), cp, {"source": "input", "step": -1}, dict(versions))
    got = saver.get_tuple(cfg("t")).checkpoint
    for field in ("channel_versions", "versions_seen"):
        assert got[field] == cp[field]
    assert [type(v) for v in got["channel_versions"].values()] == [type(v) for v in versions.values()]
    assert {k: v for k, v in got.items() if k != "channel_values"} == {
        k: v for k, v in cp.items() if k != "channel_values"
    }


NOT_JSON: list[Any] = [
    ("a", 1),  # a tuple would come back as a list
    {1: "int key"},
    datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
    Colour.RED,  # a str subclass
    float("inf"),
    b"bytes",
]


@pytest.mark.parametrize("value", NOT_JSON, ids=[type(v).__name__ for v in NOT_JSON])
def test_metadata_and_checkpoint_fields_json_cannot_hold_round_trip_through_the_serializer(
    store: Any, value: Any
) -> None:
    saver = UndertextSaver(store)
    cp = checkpoint({"x": 1}, {"x": 1})
    cp["extra_field"] = value
    metadata = {"source": "loop", "step": 1, "custom": {"nested": value}}
    saver.put(cfg("t"), cp, metadata, {"x": 1})
    rec = json.loads(last_record(saver, "t").text)
    assert "cp" in rec and "md" in rec
    got = saver.get_tuple(cfg("t"))
    serde = JsonPlusSerializer()
    expected_md = serde.loads_typed(serde.dumps_typed(metadata))  # what the serializer gives back
    expected = expected_md["custom"]["nested"]
    assert got.metadata == expected_md and type(got.metadata["custom"]["nested"]) is type(expected)
    assert got.checkpoint["extra_field"] == expected and type(got.checkpoint["extra_field"]) is type(expected)
    assert got.checkpoint["channel_values"] == {"x": 1}


def test_a_short_key_used_as_a_checkpoint_field_name_is_not_confused(store: Any) -> None:
    saver = UndertextSaver(store)
    cp = checkpoint({"x": 1}, {"x": 1})
    cp["cv"] = "a field named like a short key"
    saver.put(cfg("t"), cp, {}, {"x": 1})
    got = saver.get_tuple(cfg("t")).checkpoint
    assert got["cv"] == cp["cv"] and got["channel_versions"] == {"x": 1}


# -- format 1 -------------------------------------------------------------------------------
# The records the saver wrote before format 2 (commit 7fbcfb1), written here byte for byte
# as it wrote them: JSON with the checkpoint and metadata as base64 serializer output, blob
# ids in hex, each channel's version in its manifest entry, the running maximum always.

V1_MIME = "application/x-undertext-langgraph-value"
SERDE = JsonPlusSerializer()


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def v1_message(rec: dict[str, Any], blobs: list[str]) -> dict[str, Any]:
    parts = [{"type": "text", "text": json.dumps(rec, separators=(",", ":"))}]
    parts += [{"type": "attachment", "mime": V1_MIME, "blob": b} for b in dict.fromkeys(blobs)]
    return {"role": "system", "parts": parts}


def v1_put(chat: Any, cp: dict[str, Any], parent: str | None, mx: str | None, metadata: dict[str, Any]) -> str:
    manifest, blobs = {}, []
    for ch, value in cp["channel_values"].items():
        typ, data = SERDE.dumps_typed(value)
        bid = undertext.blob_id(data[8:])
        manifest[ch] = [str(cp["channel_versions"].get(ch, "")), typ, bid, _b64(data[:8])]
        blobs.append(data[8:])
    rest = {k: v for k, v in cp.items() if k != "channel_values"}
    ct, cb = SERDE.dumps_typed(rest)
    mt, mb = SERDE.dumps_typed(metadata)
    new_mx = cp["id"] if mx is None else max(mx, cp["id"])
    rec = {"k": "c", "id": cp["id"], "mx": new_mx, "p": parent, "cp": [ct, _b64(cb)], "md": [mt, _b64(mb)],
           "ch": manifest}
    chat.append_with_blobs(blobs, [v1_message(rec, [e[2] for e in manifest.values()])])
    return new_mx


def v1_writes(chat: Any, cid: str, task: str, writes: list[tuple[str, Any]]) -> None:
    entries, blobs = [], []
    for idx, (ch, value) in enumerate(writes):
        typ, data = SERDE.dumps_typed(value)
        entries.append([idx, ch, typ, undertext.blob_id(data)])
        blobs.append(data)
    rec = {"k": "w", "c": cid, "t": task, "tp": "", "w": entries}
    chat.append_with_blobs(blobs, [v1_message(rec, [e[3] for e in entries])])


def test_a_store_written_in_format_1_is_read_and_extended(tmp_path: Path) -> None:
    path = tmp_path / "store"
    doc = "a large unchanged document " * 4000
    with undertext.Store.open(path) as store:
        chat = store.create_chat("langgraph", title="old", extra={"undertext.langgraph": ""})
        first = checkpoint({"doc": doc, "n": 1}, {"doc": 1, "n": 1})
        mx = v1_put(chat, first, None, None, {"source": "input", "step": -1, "run_id": "r1"})
        second = checkpoint({"doc": doc, "n": 2}, {"doc": 1, "n": 2})
        v1_put(chat, second, first["id"], mx, {"source": "loop", "step": 0, "run_id": "r2"})
        v1_writes(chat, second["id"], "task", [("out", {"answer": 42})])
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        latest = saver.get_tuple(cfg("old"))
        assert latest.checkpoint["id"] == second["id"]
        assert latest.checkpoint["channel_values"] == {"doc": doc, "n": 2}
        assert latest.checkpoint["channel_versions"] == {"doc": 1, "n": 2}
        assert latest.metadata == {"source": "loop", "step": 0, "run_id": "r2"}
        assert latest.parent_config["configurable"]["checkpoint_id"] == first["id"]
        assert latest.pending_writes == [("task", "out", {"answer": 42})]
        assert [t.checkpoint["id"] for t in saver.list(cfg("old"))] == [second["id"], first["id"]]
        assert [t.checkpoint["id"] for t in saver.list(cfg("old"), filter={"run_id": "r1"})] == [first["id"]]
        # A format-2 checkpoint on top: "doc" is unchanged (the version of a format-1
        # parent), so it is not stored again.
        before = store.stats()["log_bytes"]
        third = checkpoint({"doc": doc, "n": 3}, {"doc": 1, "n": 3})
        saver.put(cfg("old", second["id"]), third, {"source": "loop", "step": 1, "run_id": "r3"}, {"n": 3})
        assert store.stats()["log_bytes"] - before < 2000
        saver.copy_thread("old", "copy")
        copied = list(saver.list(cfg("copy")))
        assert [t.checkpoint["id"] for t in copied] == [third["id"], second["id"], first["id"]]
        assert [t.checkpoint["channel_values"]["n"] for t in copied] == [3, 2, 1]
        assert copied[1].pending_writes == [("task", "out", {"answer": 42})]
        saver.delete_for_runs(["r2"])  # in every thread: the copy too
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        assert [t.checkpoint["id"] for t in saver.list(cfg("old"))] == [third["id"], first["id"]]
        assert saver.get_tuple(cfg("old")).checkpoint["channel_values"] == {"doc": doc, "n": 3}
        copied = list(saver.list(cfg("copy")))
        assert [t.checkpoint["channel_values"]["n"] for t in copied] == [3, 1]


def test_gc_keeps_values_an_unchanged_channel_and_a_copied_thread_name_by_id(tmp_path: Path) -> None:
    # An unchanged channel's blob is named by hex id, attached only by the record that
    # stored it; a copy made after a prune must attach it itself, since the source goes.
    path = tmp_path / "store"
    doc = os.urandom(120_000)
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        parent = None
        for i in range(4):
            cp = checkpoint({"doc": doc, "i": i}, {"doc": 1, "i": i + 1})
            new = {"doc": 1, "i": i + 1} if i == 0 else {"i": i + 1}
            parent = saver.put(cfg("src", parent), cp, {"step": i}, new)["configurable"]["checkpoint_id"]
        saver.prune(["src"])  # the floor hides the record that attached doc's blob
        saver.copy_thread("src", "dst")
        saver.delete_thread("src")
        other = store.create_chat("someone", title="to delete")
        store.delete_chat("someone", other.id)
    report = undertext.Store.gc(path)
    assert report["deleted_chats"] >= 1
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        assert saver.get_tuple(cfg("src")) is None
        assert saver.get_tuple(cfg("dst")).checkpoint["channel_values"] == {"doc": doc, "i": 3}


def grow(saver: UndertextSaver, thread: str, start: list[Any], steps: int, parent: Any = None) -> tuple[Any, list[Any]]:
    """Puts ``steps`` checkpoints, each with one more dict message than its parent (the
    same objects, as LangGraph's loop passes them), and returns the last id and list."""
    items = list(start)
    version = 0
    for i in range(steps):
        items = items + [{"role": "tool", "content": f"result {thread} {i} " + "y" * 200, "id": f"{thread}-{i}"}]
        version += 1
        cp = checkpoint({"messages": items}, {"messages": f"{version:032}.0"})
        parent = saver.put(cfg(thread, parent), cp, {"step": i}, {"messages": f"{version:032}.0"})["configurable"][
            "checkpoint_id"
        ]
    return parent, items


def test_a_growing_list_record_names_its_parents_list_and_only_the_new_item(store: Any) -> None:
    saver = UndertextSaver(store)
    last, items = grow(saver, "t", [], 5)
    m = last_record(saver, "t")
    rec = json.loads(m.text)
    entry = rec["ch"]["messages"]
    # The parent's record, the new item's blob (attachment 0), 4 links down to the first list.
    assert entry == {"b": len(saver._registry.lane("t", "", False).chat) - 2, "i": [0], "d": 4}, entry
    attachments = [p for p in m.parts if p["type"] == "attachment"]
    assert len(attachments) == 1
    assert saver.get_tuple(cfg("t")).checkpoint["channel_values"]["messages"] == items
    # Every listed checkpoint holds its own list; they share the items of their prefix.
    listed = [t.checkpoint["channel_values"]["messages"] for t in saver.list(cfg("t"))]
    assert listed == [items[:n] for n in range(5, 0, -1)]
    assert listed[0][0] is listed[1][0]
    # A second read hands out new objects.
    again = saver.get_tuple(cfg("t")).checkpoint["channel_values"]["messages"]
    assert again == items and again[0] is not listed[0][0]


def test_a_thread_written_with_whole_lists_is_read_and_goes_on_item_by_item(tmp_path: Path) -> None:
    # Whole-list records are what the saver wrote before item lists (and with item_lists=False).
    path = tmp_path / "store"
    with undertext.Store.open(path) as store:
        parent, items = grow(UndertextSaver(store, item_lists=False), "t", [], 3)
        assert isinstance(json.loads(last_record(UndertextSaver(store), "t").text)["ch"]["messages"], list)
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        assert saver.get_tuple(cfg("t")).checkpoint["channel_values"]["messages"] == items
        last, more = grow(saver, "t", items, 3, parent)
        assert isinstance(json.loads(last_record(saver, "t").text)["ch"]["messages"], dict)
        listed = [t.checkpoint["channel_values"]["messages"] for t in saver.list(cfg("t"))]
        assert listed == [more[:n] for n in range(6, 0, -1)]


def test_gc_keeps_the_items_of_a_list_copied_from_a_pruned_thread(tmp_path: Path) -> None:
    # After a prune the latest list's base is below the floor: the copy names its items
    # itself (attaching them), so deleting the source and collecting keeps them.
    path = tmp_path / "store"
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        _last, items = grow(saver, "src", [], 6)
        saver.prune(["src"])
        saver.copy_thread("src", "dst")
        saver.delete_thread("src")
    undertext.Store.gc(path)
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        assert saver.get_tuple(cfg("src")) is None
        assert saver.get_tuple(cfg("dst")).checkpoint["channel_values"]["messages"] == items


def test_a_long_chain_is_cut_by_a_manifest_and_reads_after_a_reopen(tmp_path: Path, monkeypatch: Any) -> None:
    from undertext.langgraph import _records

    monkeypatch.setattr(_records, "SNAPSHOT_LINKS", 4)
    # (And checkpoint records patched from their parent's: whole every 4 too.)
    monkeypatch.setattr(_records, "PATCH_LINKS", 4)
    path = tmp_path / "store"
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        _last, items = grow(saver, "t", [], 10)
        entries = [
            json.loads(m.text)["ch"]["messages"] for m in saver._registry.lane("t", "", False).chat.messages()
        ]
        assert [("m" in e, e.get("d")) for e in entries] == [
            (False, None), (False, 1), (False, 2), (False, 3), (True, None),
            (False, 1), (False, 2), (False, 3), (True, None), (False, 1),
        ]
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        lane_reads = []
        lane = saver._registry.lane("t", "", False)
        real = lane.record_at

        def record_at(seq: int) -> Any:
            lane_reads.append(seq)
            return real(seq)

        lane.record_at = record_at  # type: ignore[method-assign]
        assert saver.get_tuple(cfg("t")).checkpoint["channel_values"]["messages"] == items
        assert sorted(set(lane_reads)) == [8, 9], lane_reads  # down to the manifest, no further
        listed = [t.checkpoint["channel_values"]["messages"] for t in saver.list(cfg("t"))]
        assert listed == [items[:n] for n in range(10, 0, -1)]


def test_a_manifest_after_the_first_holds_only_what_it_adds_and_a_chain_survives_gc(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from undertext.langgraph import _records

    # A manifest every 4 links; at most 2 deltas in a chain, then a whole manifest again.
    monkeypatch.setattr(_records, "SNAPSHOT_LINKS", 4)
    monkeypatch.setattr(_records, "MANIFEST_CHAIN", 2)
    path = tmp_path / "store"
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        _last, items = grow(saver, "t", [], 22)
        lane = saver._registry.lane("t", "", False)
        chat = lane.chat
        manifests = []
        for m in chat.messages():
            e = json.loads(m.text)["ch"]["messages"]
            if "m" in e:
                blobs = [p["blob"] for p in m.parts if p["type"] == "attachment"]
                size = len(store.get_blob(saver.owner, blobs[e["m"]]))
                # The record attaches the whole chain: no blob of it depends on an older record.
                assert all(type(r) is int for r in e.get("mb", [])), e
                manifests.append((len(e.get("mb", [])), size))
        # Kept lists of 4, 8, 12, ... items: whole, two deltas (4 ids each), whole, ...
        assert manifests == [(0, 4 * 32), (1, 4 + 4 * 32), (2, 4 + 4 * 32), (0, 16 * 32), (1, 4 + 4 * 32)], manifests
        assert saver.get_tuple(cfg("t")).checkpoint["channel_values"]["messages"] == items
        saver.copy_thread("t", "copy")
        saver.delete_thread("t")
    undertext.Store.gc(path)
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        listed = [t.checkpoint["channel_values"]["messages"] for t in saver.list(cfg("copy"))]
        assert listed == [items[:n] for n in range(22, 0, -1)]


def put_id(saver: UndertextSaver, cid: str, parent: str | None, x: int) -> None:
    """Puts checkpoint ``cid`` (child of ``parent``) with channel ``x`` = ``x``."""
    cp = checkpoint({"x": x}, {"x": saver.get_next_version(None, None)})
    cp["id"] = cid
    saver.put(cfg("t", parent), cp, {"step": x}, dict(cp["channel_versions"]))


def test_early_writes_are_named_by_their_write_records_seqs_and_found_after_a_reopen(tmp_path: Path) -> None:
    # LangGraph's background thread runs ahead: writes for checkpoints not stored yet. The
    # newest record names them by the distance down to their first write record (the id is
    # in that record), not by id, and a reopened saver finds them from there.
    path = tmp_path / "store"
    ids = [str(uuid6(clock_seq=-1)) for _ in range(4)]
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        put_id(saver, ids[0], None, 0)
        for i, cid in enumerate(ids[1:]):
            saver.put_writes(cfg("t", cid), [("x", i)], f"task{i}")
        rec = json.loads(last_record(saver, "t").text)
        assert rec["e"] == [2, 1, 0] and "o" not in rec, rec
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        put_id(saver, ids[1], ids[0], 1)
        assert saver.get_tuple(cfg("t", ids[1])).pending_writes == [("task0", "x", 0)]
        rec = json.loads(last_record(saver, "t").text)
        assert rec["e"] == [2, 1] and "o" not in rec, rec  # the writes for ids[2] and ids[3]
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        put_id(saver, ids[3], ids[1], 2)
        assert saver.get_tuple(cfg("t", ids[3])).pending_writes == [("task2", "x", 2)]


class CountingSerde(JsonPlusSerializer):
    """Counts the values it decodes."""

    loads = 0

    def loads_typed(self, data: Any) -> Any:
        CountingSerde.loads += 1
        return super().loads_typed(data)


def test_the_first_read_after_puts_decodes_at_most_one_batch_and_owns_what_it_gets(store: Any) -> None:
    saver = UndertextSaver(store, serde=CountingSerde())
    CountingSerde.loads = 0
    _last, items = grow(saver, "t", [], PREDECODE_BATCH + 5)
    assert CountingSerde.loads == 1  # the first PREDECODE_BATCH new items, in one call, when put
    CountingSerde.loads = 0
    first = saver.get_tuple(cfg("t")).checkpoint["channel_values"]["messages"]
    assert first == items and CountingSerde.loads == 1  # the 5 put after them, in one call
    assert all(a is not b for a, b in zip(first, items))
    first[0]["content"] = "changed by the caller"
    first[-1]["content"] = "changed by the caller"
    again = saver.get_tuple(cfg("t")).checkpoint["channel_values"]["messages"]
    assert again == items and CountingSerde.loads == 2  # decoded again, in one call
    assert all(a is not b for a, b in zip(again, first))


def put_chain(saver: UndertextSaver, thread: str, metadatas: list[dict[str, Any]]) -> list[Any]:
    """Puts one checkpoint per metadata, each the child of the one before; returns them."""
    parent = None
    out = []
    for i, md in enumerate(metadatas):
        cp = checkpoint({"x": i}, {"x": f"{i + 1:032}.0", "y": "1".zfill(32) + ".0"})
        cp["versions_seen"] = {"node": {"x": f"{i:032}.0"}, "other": {"y": "1"}}
        saver.put(cfg(thread, parent), cp, md, {"x": f"{i + 1:032}.0"})
        parent = cp["id"]
        out.append(cp)
    return out


def test_a_checkpoint_record_is_a_patch_of_its_parents_and_reads_whole_after_a_reopen(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from undertext.langgraph import _records

    monkeypatch.setattr(_records, "PATCH_LINKS", 4)
    path = tmp_path / "store"
    mds = [{"source": "loop", "step": i, "parents": {}} for i in range(7)]
    with undertext.Store.open(path) as store:
        cps = put_chain(UndertextSaver(store), "t", mds)
        recs = [json.loads(m.text) for m in store.chat("langgraph", next(iter(store.chats("langgraph"))).id).messages()]
    # Whole, then patches of the parent (its seq, the depth), whole again after PATCH_LINKS.
    assert [("cd" in r, r.get("cd", {}).get("d")) for r in recs] == [
        (False, None), (True, 1), (True, 2), (True, 3), (False, None), (True, 1), (True, 2),
    ]
    last = recs[-1]
    assert "p" not in last and "c" not in last and "m" not in last and last["cd"]["b"] == 5
    assert last["cd"]["m"] == {"s": {"step": 6}}  # only what changed
    assert last["cd"]["c"]["n"]["vs"] == {"n": {"node": {"s": {"x": f"{6:032}.0"}}}}
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        listed = list(saver.list(cfg("t")))
        assert [t.metadata for t in listed] == list(reversed(mds))
        for t, cp in zip(listed, reversed(cps)):
            want = {k: v for k, v in cp.items() if k != "channel_values"}
            assert {k: v for k, v in t.checkpoint.items() if k != "channel_values"} == want
        assert [t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None for t in listed] == [
            None if i == 0 else cps[i - 1]["id"] for i in range(6, -1, -1)
        ]


def test_a_patch_that_would_change_a_type_or_a_key_order_is_not_used(store: Any) -> None:
    # 1 == 1.0 == True in Python: a patch would drop the change; and a patch appends new
    # keys last. Either way the record is stored whole and reads back exactly.
    mds = [{"a": 1, "b": 1}, {"a": 1.0, "b": 1}, {"a": 1.0, "b": True}, {"b": True, "a": 1.0}, {"b": True, "a": 1.0}]
    saver = UndertextSaver(store)
    put_chain(saver, "t", mds)
    lane = saver._registry.lane("t", "", False)
    recs = [json.loads(m.text) for m in lane.chat.messages()]
    assert ["cd" in r for r in recs] == [False, False, False, False, True]
    got = [t.metadata for t in saver.list(cfg("t"))]
    assert [json.dumps(m) for m in got] == [json.dumps(m) for m in reversed(mds)]


def _old_deletion(saver: UndertextSaver, thread: str, rec: dict[str, Any]) -> None:
    """Appends a tombstone (``"k": "d"``) or floor (``"k": "x"``) record, as savers before
    the engine's soft deletion wrote them for ``delete_for_runs`` and ``prune``."""
    lane = saver._registry.lane(thread, "", False)
    assert lane is not None
    with lane.lock:
        lane.sync()
        saver._append(lane, rec, early={} if rec["k"] == "x" else None)


def test_tombstones_and_floors_of_older_savers_still_read_and_new_deletions_hide(tmp_path: Path) -> None:
    path = tmp_path / "store"
    ids: list[str] = []
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        parent = None
        for i in range(6):  # checkpoint i at seq i
            cp = checkpoint({"n": i}, {"n": i + 1})
            parent = saver.put(cfg("t", parent), cp, {"run_id": f"r{i}", "step": i}, {"n": i + 1})["configurable"][
                "checkpoint_id"
            ]
            ids.append(parent)
        # The old layout: a tombstone of checkpoint 3, a floor above checkpoint 0.
        _old_deletion(saver, "t", {"k": "d", "s": [3]})
        _old_deletion(saver, "t", {"k": "x", "f": 1})
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        assert [t.checkpoint["id"] for t in saver.list(cfg("t"))] == [ids[5], ids[4], ids[2], ids[1]]
        assert saver.get_tuple(cfg("t", ids[3])) is None and saver.get_tuple(cfg("t", ids[0])) is None
        chat = saver._registry.lane("t", "", False).chat
        n = len(chat)
        # New deletions on top hide records: no tombstone or floor record is appended.
        saver.delete_for_runs(["r4"])
        assert len(chat) == n and chat.snapshot().hidden == [(4, 5)]
        assert [t.checkpoint["id"] for t in saver.list(cfg("t"))] == [ids[5], ids[2], ids[1]]
        saver.prune(["t"])
        assert len(chat) == n and chat.snapshot().hidden == [(0, 5)]
        assert [t.checkpoint["id"] for t in saver.list(cfg("t"))] == [ids[5]]
        kinds = [json.loads(m.text)["k"] for m in chat.messages(hidden=True)]
        assert kinds.count("d") == 1 and kinds.count("x") == 1, kinds
    with undertext.Store.open(path) as store:
        saver = UndertextSaver(store)
        assert [t.checkpoint["id"] for t in saver.list(cfg("t"))] == [ids[5]]
        assert saver.get_tuple(cfg("t")).checkpoint["channel_values"] == {"n": 5}


def test_the_kept_prefix_of_a_list_is_the_run_of_identical_objects_natively_as_in_python() -> None:
    from undertext._native import _same_prefix
    from undertext.langgraph._saver import _same_prefix_py

    objs = [object() for _ in range(50)]
    equal_not_same = [[1, 2], "x" * 40, 10**30]  # equal values, other objects
    cases = [
        ([], []),
        (objs, objs),
        (objs, objs + [object()]),  # the next step appended one
        (objs + [object()], objs),  # the list shrank
        (objs, [object()] + objs[1:]),
        (objs, objs[:17] + [object()] + objs[18:]),  # one item replaced in the middle
        (objs[:3] + equal_not_same, objs[:3] + [list(v) if isinstance(v, list) else v for v in equal_not_same]),
        (objs[:5] + [None, None], objs[:5] + [None, None]),
    ]
    for a, b in cases:
        assert _same_prefix(a, b) == _same_prefix_py(a, b), (len(a), len(b))
        # Ended before an object the step wrote (``stop``: their ids), anywhere or absent.
        for stop in ({}, {id(objs[0]): objs[0]}, {id(objs[9]): objs[9], id(object()): None}, {id(objs[-1]): 0}):
            assert _same_prefix(a, b, stop) == _same_prefix_py(a, b, stop), (len(a), len(b), len(stop))
    assert _same_prefix(objs, objs[:17] + [object()] + objs[18:]) == 17
    assert _same_prefix(objs, objs, {id(objs[9]): objs[9]}) == 9
    assert _same_prefix(objs, objs[:17] + [object()] + objs[18:], [id(objs[30])]) == 17  # after the cut
    assert _same_prefix(objs[:3] + equal_not_same, objs[:3] + [[1, 2]]) == 3  # equal is not the same
    with pytest.raises(TypeError):
        _same_prefix(tuple(objs), objs)  # type: ignore[arg-type]


# -- the native JSON checks against the Python versions (test_json_dumps.py: the text) ----


def test_json_exact_answers_as_the_python_check_and_says_what_json_gives_back() -> None:
    rng = random.Random(12)
    for _ in range(3000):
        v = random_value(rng)
        exact = _json_exact(v)
        assert exact == _json_exact_py(v), v
        if exact:  # what it calls exact comes back from JSON equal, types and all
            back = json.loads(json.dumps(v))
            assert back == v and repr(back) == repr(v), v
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    assert _json_exact(deep) is False  # too deep: the serializer stores it (the Python check recurses out)
    with pytest.raises(RecursionError):
        _json_exact_py(deep)


def test_the_native_checkpoint_patch_is_the_python_one_or_none_alike() -> None:
    rng = random.Random(15)
    seen = {"patch": 0, "none": 0}
    for _ in range(3000):
        a = {str(i): plain_value(rng) for i in range(rng.randint(0, 8))}
        if rng.random() < 0.5:
            a["vs"] = {f"node{i}": {"x": f"{i:032}.0"} for i in range(rng.randint(0, 4))}
        b = mutated(rng, a)
        native = _json_patch(a, b)
        try:
            python = _patch_exact_py(a, b)
        except (TypeError, ValueError):  # not JSON (bytes, a cycle): json.dumps refuses
            assert native is None and not (written_natively(a) and written_natively(b)), (a, b)
            continue
        if native is None and python is not None:
            # Only for what the native writer leaves to json.dumps (the saver then stores
            # the fields whole); its checkpoints' fields are plain JSON.
            assert not (written_natively(a) and written_natively(b)), (a, b)
            continue
        assert (native is None) == (python is None), (a, b)
        if native is not None:
            assert json.dumps(native) == json.dumps(python), (a, b)  # the same patch, key order too
            seen["patch"] += 1
        else:
            seen["none"] += 1
    assert seen["patch"] > 1000 and seen["none"] > 100, seen
