"""Full-text search from Python: ``Store.search`` finds what was appended (messages, tool
results, archived outputs) in the owner's chats only, hidden messages only when asked,
gives hits with the CLI's ``search --json`` keys, and ``Store.read_hit`` reads back exactly the
matched words; bad arguments raise the package's exceptions."""

import pytest

import undertext

KEYS = {"chat", "seq", "archive", "unit", "start", "end", "snippet", "score", "part", "field"}


def test_search_finds_an_appended_text_and_read_hit_reads_its_words(store, chat):
    chat.append({"role": "user", "content": "What lives at the zoo?"})
    seq = chat.append({"role": "user", "content": "the build fails with exit code 101 in crate foo"})
    hits = store.search("alice", "exit code 101")
    assert len(hits) == 1
    h = hits[0]
    assert set(h) == KEYS
    assert (h["chat"], h["seq"], h["archive"], h["unit"], h["field"]) == (chat.id, seq, None, "chars", "text")
    assert "exit code 101" in h["snippet"]
    assert store.read_hit("alice", h) == "exit code 101"
    # Scoped to the chat, and to another chat of the owner (which does not hold it).
    assert [x["seq"] for x in store.search("alice", "exit code", chat=chat.id)] == [seq]
    other = store.create_chat("alice", title="other")
    assert store.search("alice", "exit code", chat=other.id) == []
    assert store.search("alice", "nowhereword") == []


def test_an_archived_output_is_found_with_its_archive_id(tmp_path):
    output = "".join(f"line {i}: ok\n" for i in range(500)) + "panicked at the quasar assertion\n"
    with undertext.Store.open(tmp_path / "s", archive_threshold=1024, preview_chars=200) as store:
        chat = store.create_chat("alice")
        chat.append(undertext.tool_call("c1", "sh", {"cmd": "cargo test"}))
        seq = chat.append(undertext.tool_result("c1", output))
        ref = chat[seq].parts[0]["archive"]
        hits = store.search("alice", "quasar assertion")
        assert [(h["seq"], h["archive"], h["field"]) for h in hits] == [(seq, ref["id"], "archive")]
        assert store.read_hit("alice", hits[0]) == "quasar assertion"
        assert store.read_context("alice", ref["id"], hits[0]["start"], hits[0]["end"]) == "quasar assertion"


def test_a_hidden_message_is_found_only_when_asked(store, chat):
    chat.append({"role": "user", "content": "visible zebra"})
    chat.append({"role": "user", "content": "secret zebra quartz"})
    chat.hide([(1, 2)], expected_revision=chat.revision)
    assert store.search("alice", "quartz") == []
    assert [h["seq"] for h in store.search("alice", "zebra")] == [0]
    hits = store.search("alice", "quartz", include_hidden=True)
    assert [h["seq"] for h in hits] == [1]
    assert {h["seq"] for h in store.search("alice", "zebra", chat=chat.id, include_hidden=True)} == {0, 1}


def test_another_owners_chats_are_never_searched(store, chat):
    chat.append({"role": "user", "content": "alice's zebra"})
    bobs = store.create_chat("bob")
    bobs.append({"role": "user", "content": "bob's zebra"})
    assert [h["chat"] for h in store.search("alice", "zebra")] == [chat.id]
    assert [h["chat"] for h in store.search("bob", "zebra")] == [bobs.id]
    assert store.search("mallory", "zebra") == []
    # Another owner's chat as the scope is the same NotFound as an absent chat.
    with pytest.raises(undertext.NotFound):
        store.search("alice", "zebra", chat=bobs.id)
    # A hit of alice's is not bob's to read.
    with pytest.raises(undertext.NotFound):
        store.read_hit("bob", store.search("alice", "zebra")[0])


def test_bad_arguments_raise_clear_errors(store, chat):
    chat.append({"role": "user", "content": "some words"})
    with pytest.raises(undertext.InvalidArgument, match="limit: expected 1 to 10000, found 0"):
        store.search("alice", "words", limit=0)
    with pytest.raises(undertext.InvalidArgument, match="limit"):
        store.search("alice", "words", limit=-3)
    with pytest.raises(undertext.InvalidArgument, match="chat id"):
        store.search("alice", "words", chat="not-a-chat")
    with pytest.raises(undertext.InvalidArgument, match="owner"):
        store.search("", "words")
    with pytest.raises(TypeError):
        store.search("alice", 42)  # type: ignore[arg-type]
    with pytest.raises(undertext.InvalidArgument, match="UTF-8"):
        store.search("alice", "bad \ud800 text")
    with pytest.raises(undertext.InvalidArgument, match="hit: expected a dict"):
        store.read_hit("alice", "exit code")  # type: ignore[arg-type]
    hit = store.search("alice", "words")[0]
    with pytest.raises(undertext.InvalidArgument, match="field"):
        store.read_hit("alice", {**hit, "field": "nope"})
    with pytest.raises(undertext.InvalidArgument, match="seq"):
        store.read_hit("alice", {k: v for k, v in hit.items() if k != "seq"})
    with pytest.raises(undertext.InvalidArgument):
        store.read_hit("alice", {**hit, "end": hit["end"] + 1000})
    # A query of no words finds nothing, without an error.
    assert store.search("alice", "!?&") == []
