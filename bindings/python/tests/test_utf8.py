"""A str holding a lone surrogate (Python allows it, UTF-8 cannot hold it) is refused by every
entry point that takes text, with InvalidArgument saying where the surrogate is, and nothing
is written."""

import pytest

import undertext
from undertext import _native

BAD = "abc\ud800def"
SAID = r"expected .* to be text that is valid UTF-8, found a lone surrogate \(U\+D800\) at index 3"


def calls(store, chat, archive):
    """Every entry point that takes text, each given BAD in one of its str arguments."""
    budget = undertext.Budget(32_000)
    text = {"role": "user", "content": "fine"}
    return {
        "append content": lambda: chat.append({"role": "user", "content": BAD}),
        "append role": lambda: chat.append({"role": BAD, "content": "x"}),
        "append text part": lambda: chat.append({"role": "user", "parts": [{"type": "text", "text": BAD}]}),
        "append tool call args": lambda: chat.append(
            {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "sh", "args": BAD}]}
        ),
        "append tool call name": lambda: chat.append(
            {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": BAD, "args": "{}"}]}
        ),
        "append_batch": lambda: chat.append_batch([text, {"role": "user", "content": BAD}]),
        "append_with_blobs": lambda: chat.append_with_blobs([b"x"], [{"role": "user", "content": BAD}]),
        "record_step stream": lambda: chat.record_step(0, BAD, 0, [text]),
        "record_step message": lambda: chat.record_step(0, "s", 0, [{"role": "user", "content": BAD}]),
        "set_meta title": lambda: chat.set_meta(title=BAD),
        "set_meta extra value": lambda: chat.set_meta(extra={"k": BAD}),
        "set_meta extra key": lambda: chat.set_meta(extra={BAD: "v"}),
        "compaction_tool_call": lambda: chat.compaction_tool_call(BAD, expected_revision=chat.revision, budget=budget),
        "lint squish": lambda: chat.lint([], [(0, 1, BAD)]),
        "pin unit": lambda: chat.pin(archive, 0, 1, unit=BAD),
        "put_blob owner": lambda: store.put_blob(BAD, b"x"),
        "get_blob id": lambda: store.get_blob("alice", BAD),
        "create_chat owner": lambda: store.create_chat(BAD),
        "create_chat title": lambda: store.create_chat("alice", title=BAD),
        "create_chat model": lambda: store.create_chat("alice", model=BAD),
        "create_chat extra": lambda: store.create_chat("alice", extra={"k": BAD}),
        "chat id": lambda: store.chat("alice", BAD),
        "chat owner": lambda: store.chat(BAD, chat.id),
        "delete_chat": lambda: store.delete_chat(BAD, chat.id),
        "chats": lambda: store.chats(BAD),
        "find_chats title": lambda: store.find_chats("alice", title=BAD),
        "archive text": lambda: store.archive("alice", BAD),
        "archive owner": lambda: store.archive(BAD, "x"),
        "read_context unit": lambda: store.read_context("alice", archive, 0, 1, unit=BAD),
        "preview query": lambda: store.preview("alice", archive, query=BAD),
        "import_transcripts owner": lambda: store.import_transcripts(BAD, []),
        "import_transcript_bytes name": lambda: _native.import_transcript_bytes(store, "alice", BAD, b"{}"),
        "import_transcript_bytes key": lambda: _native.import_transcript_bytes(store, "alice", "n", b"{}", key=BAD),
        "Budget tool_schemas": lambda: undertext.Budget(32_000, tool_schemas=[BAD]),
    }


NAMES = list(calls(None, None, None).keys())


@pytest.mark.parametrize("name", NAMES)
def test_a_lone_surrogate_is_refused_saying_where_it_is(store, name):
    chat = store.create_chat("alice", title="t")
    chat.append({"role": "user", "content": "before"})
    archive = store.archive("alice", "some archived text")
    before = (len(chat), chat.revision, store.stats()["log_bytes"])
    with pytest.raises(undertext.InvalidArgument, match=SAID):
        calls(store, chat, archive)[name]()
    assert (len(chat), chat.revision, store.stats()["log_bytes"]) == before, "a refused call wrote something"


def test_open_with_a_lone_surrogate_in_an_option_is_refused_saying_where(tmp_path):
    with pytest.raises(undertext.InvalidArgument, match=SAID):
        undertext.Store.open(tmp_path / "s", durability=BAD)


def test_a_surrogate_pair_written_as_two_code_points_is_refused_too(store):
    chat = store.create_chat("alice")
    with pytest.raises(undertext.InvalidArgument, match=r"lone surrogate \(U\+D83D\) at index 2"):
        chat.append({"role": "user", "content": "hi\ud83d\ude00"})
    # The same character as one code point is ordinary text.
    chat.append({"role": "user", "content": "hi\U0001f600"})
    assert chat.get(0).parts[0]["text"] == "hi\U0001f600"
