"""Soft deletion: ``Chat.hide`` and ``Chat.hide_and_append`` hide messages from the default
reads, iterators and the model view; the bytes stay readable by seq and with
``hidden=True``; bad ranges and stale revisions are clear errors."""

import pytest

import undertext


def fill(chat, n):
    chat.append_batch([{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(n)])


def test_hidden_messages_leave_reads_iterators_and_the_view(chat):
    fill(chat, 200)
    rev = chat.hide([(1, 2), range(64, 190)], expected_revision=0)
    assert rev == 1 and chat.revision == 1 and len(chat) == 200
    live = [m.seq for m in chat.messages()]
    assert live == [0] + list(range(2, 64)) + list(range(190, 200))
    # The iterator reads in batches of 64: two whole batches are hidden, none is skipped early.
    assert [m.seq for m in chat.iter()] == live
    assert [m.seq for m in chat.iter(reverse=True)] == live[::-1]
    assert [m.seq for m in chat.iter(hidden=True)] == list(range(200))
    assert len(chat.messages(hidden=True)) == 200
    snap = chat.snapshot()
    assert snap.hidden == [(1, 2), (64, 190)]
    assert snap.is_hidden(1) and not snap.is_hidden(0)
    assert [m.seq for m in snap.iter(60, 195)] == [60, 61, 62, 63, 190, 191, 192, 193, 194]
    assert [m.seq for m in snap.messages(0, 3, hidden=True)] == [0, 1, 2]
    with pytest.raises(IndexError):
        snap.is_hidden(200)
    # Read by seq: the bytes stay.
    assert chat[1].text == "m1"
    view = chat.view(undertext.Budget(1_000_000))
    shown = [s for m in view.messages for s in range(*m["seqs"])]
    assert shown == live, shown
    # The revision before the hide shows everything.
    assert len(chat.snapshot(0).messages()) == 200


def test_bad_ranges_and_stale_revisions_are_clear_errors(chat):
    fill(chat, 3)
    with pytest.raises(undertext.StaleRevision):
        chat.hide([(0, 1)], expected_revision=5)
    with pytest.raises(undertext.InvalidArgument, match="the chat has 3 messages"):
        chat.hide([(1, 4)], expected_revision=0)
    with pytest.raises(undertext.InvalidArgument, match="non-empty"):
        chat.hide([(2, 1)], expected_revision=0)
    with pytest.raises(undertext.InvalidArgument, match="at least one range"):
        chat.hide([], expected_revision=0)
    with pytest.raises(undertext.InvalidArgument, match=r"ranges\[0\]"):
        chat.hide([range(0, 3, 2)], expected_revision=0)
    with pytest.raises(undertext.InvalidArgument, match=r"ranges\[1\]"):
        chat.hide([(0, 1), "x"], expected_revision=0)
    assert chat.revision == 0


def test_a_tool_call_and_its_result_are_hidden_together(chat):
    chat.append_batch(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "ls", "args": "{}"}]},
            {"role": "tool", "parts": [{"type": "tool_result", "call_id": "c1", "text": "a b"}]},
        ]
    )
    with pytest.raises(undertext.InvalidArgument, match="hide both"):
        chat.hide([(1, 2)], expected_revision=0)
    assert chat.hide([(1, 3)], expected_revision=0) == 1


def test_hide_and_append_replaces_a_suffix_in_one_revision(store, chat):
    fill(chat, 4)
    rev, seqs = chat.hide_and_append([(2, 4)], [{"role": "assistant", "content": "short"}], expected_revision=0)
    assert rev == 1 and seqs == range(4, 5)
    assert [m.text for m in chat.messages()] == ["m0", "m1", "short"]
    with pytest.raises(undertext.StaleRevision):
        chat.hide_and_append([(0, 1)], [{"role": "user", "content": "x"}], expected_revision=0)
    assert len(chat) == 5


def _in_files(root, needle: bytes) -> bool:
    import os

    for d, _dirs, files in os.walk(root):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                if needle in fh.read():
                    return True
    return False


def test_erased_messages_leave_every_read_and_gc_drops_their_bytes(tmp_path):
    path = tmp_path / "store"
    with undertext.Store.open(path, compression="none") as store:
        chat = store.create_chat("alice")
        chat.append_batch([{"role": "user", "content": "hello"}, {"role": "user", "content": "PY-ERASE-SECRET"}])
        assert chat.erase([(1, 2)], expected_revision=0) == 1
        with pytest.raises(undertext.NotFound, match="erased"):
            chat[1]
        with pytest.raises(undertext.NotFound):
            chat.snapshot(0)[1]
        assert [m.seq for m in chat.messages()] == [0]
        assert [m.parts for m in chat.messages(hidden=True)][1] == [], "an erased message's place only"
        with pytest.raises(undertext.StaleRevision):
            chat.erase([(0, 1)], expected_revision=0)
        chat_id = chat.id
    assert _in_files(path, b"PY-ERASE-SECRET")
    report = undertext.Store.gc(path)
    assert report["erased_versions"] == 1
    assert not _in_files(path, b"PY-ERASE-SECRET")
    with undertext.Store.open(path) as store:
        chat = store.chat("alice", chat_id)
        assert len(chat) == 2 and chat[0].text == "hello"
