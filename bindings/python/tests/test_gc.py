"""Garbage collection of deleted chats' archived tool results: `Store.delete_chat` then
`Store.gc(path)` removes what only the deleted chat referenced and keeps a live chat's."""

import os

import pytest

import undertext


LINES, RANDOM_BYTES_PER_LINE = 6000, 24


def _tool_output(tag: str) -> str:
    # About 390 KB of distinct text (archived, and chunked: above 64 KiB) holding
    # LINES * RANDOM_BYTES_PER_LINE random bytes, which no compression can shrink.
    lines = (f"{tag} line {i}: {os.urandom(RANDOM_BYTES_PER_LINE).hex()}\n" for i in range(LINES))
    return "".join(lines)


def _archive_tool_result(chat, output: str) -> dict:
    chat.append(undertext.tool_call("c1", "sh", {"cmd": "cargo test"}))
    seq = chat.append(undertext.tool_result("c1", output))
    part = chat[seq].parts[0]
    assert "archive" in part, "a tool result above archive_threshold is archived"
    return part["archive"]


def test_gc_removes_a_deleted_chats_archived_tool_result_and_keeps_a_live_chats(tmp_path):
    path = tmp_path / "s"
    live_out, gone_out = _tool_output("live"), _tool_output("gone")
    with undertext.Store.open(path, archive_threshold=1024) as s:
        live = s.create_chat("alice", title="live")
        gone = s.create_chat("alice", title="gone")
        live_ref = _archive_tool_result(live, live_out)
        gone_ref = _archive_tool_result(gone, gone_out)
        live_parts = [m.parts for m in live]
        assert s.contains_blob("alice", gone_ref["id"])
        s.delete_chat("alice", gone.id)
        # The chat's grants go with it at once (its bytes stay in the log until gc).
        assert not s.contains_blob("alice", gone_ref["id"])
        with pytest.raises(undertext.NotFound):
            s.read_context("alice", gone_ref["id"], 0, 9)

    report = undertext.Store.gc(path)
    assert report["deleted_chats"] == 1
    assert report["blobs_removed"] >= 1
    # The deleted output's random bytes are gone from the log, however well it compressed.
    assert report["log_bytes_before"] - report["log_bytes_after"] >= LINES * RANDOM_BYTES_PER_LINE

    with undertext.Store.open(path) as s:
        assert not s.contains_blob("alice", gone_ref["id"])
        with pytest.raises(undertext.NotFound):
            s.get_blob("alice", gone_ref["id"])
        with pytest.raises(undertext.NotFound):
            s.read_context("alice", gone_ref["id"], 0, 9)
        with pytest.raises(undertext.NotFound):
            s.chat("alice", gone.id)

        assert s.read_context("alice", live_ref["id"], 0, live_ref["chars"]) == live_out
        assert s.get_blob("alice", live_ref["id"]) == live_out.encode()
        assert s.blob_len("alice", live_ref["id"]) == live_ref["bytes"] == len(live_out.encode())
        assert [m.parts for m in s.chat("alice", live.id)] == live_parts
        report = s.check()
        assert report["ok"] and report["problems"] == []
