"""Read-only opens from Python: `Store.open_read_only` beside a live writer (no `Locked`),
`refresh()` to see later writes, writes refused, and not a byte written to a closed store."""

import os

import pytest

import undertext


def _files(root):
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def test_a_read_only_store_reads_beside_the_writer_and_sees_later_writes_after_refresh(tmp_path):
    path = tmp_path / "s"
    with undertext.Store.open(path) as w:
        chat = w.create_chat("alice", title="live")
        chat.append(undertext.user("before the read-only open"))
        with pytest.raises(undertext.Locked):
            undertext.Store.open(path)
        with undertext.Store.open_read_only(path) as ro:
            assert ro.read_only and not w.read_only
            assert [m.text for m in ro.chat("alice", chat.id)] == ["before the read-only open"]
            chat.append(undertext.assistant("after it"))
            assert len(ro.chat("alice", chat.id)) == 1
            assert ro.refresh() == 1
            assert [m.text for m in ro.chat("alice", chat.id)] == ["before the read-only open", "after it"]
            with pytest.raises(undertext.UndertextError, match="writes are refused"):
                ro.create_chat("alice", title="no")
            with pytest.raises(undertext.UndertextError, match="writes are refused"):
                ro.chat("alice", chat.id).append(undertext.user("no"))
            assert ro.open_warnings == []


def test_a_read_only_session_leaves_a_closed_store_byte_identical(tmp_path):
    path = tmp_path / "s"
    with undertext.Store.open(path) as w:
        chat = w.create_chat("alice", title="t")
        for i in range(5):
            chat.append(undertext.user(f"message {i}"))
        chat_id = chat.id
    before = _files(path)
    with undertext.Store.open_read_only(path) as ro:
        assert len(ro.chat("alice", chat_id)) == 5
        assert ro.refresh() == 0
    assert _files(path) == before
