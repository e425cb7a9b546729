"""Chats and messages: every call round-trips, owners are walls, edits are revision-guarded."""

import json
import time

import pytest

import undertext

EVERY_PART = [
    {"type": "text", "text": "plain text"},
    {"type": "summary", "text": "a summary of earlier turns"},
    {"type": "tool_call", "id": "call-1", "name": "read_file", "args": '{"path": "Cargo.toml"}'},
    {"type": "tool_result", "call_id": "call-1", "text": "[package]", "is_error": False},
    {"type": "tool_result", "call_id": "call-2", "text": "boom", "is_error": True},
    {"type": "approval_request", "id": "ap-1", "call_id": "call-3", "prompt": "run rm -rf target?"},
    {"type": "approval_request", "id": "ap-2", "call_id": None, "prompt": "continue?"},
    {"type": "approval_response", "id": "ap-1", "approved": True, "reason": "fine"},
    {"type": "approval_response", "id": "ap-2", "approved": False, "reason": None},
]


def test_every_part_kind_round_trips(store, chat):
    blob = store.put_blob("alice", b"\x89PNG")
    parts = EVERY_PART + [{"type": "attachment", "mime": "image/png", "blob": blob}]
    seq = chat.append({"role": "assistant", "parts": parts})
    m = chat.get(seq)
    assert m.parts == parts
    assert m.role == "assistant" and m.seq == seq and m.revision == chat.revision
    assert m.text == "plain text"
    again = chat.append({"role": m.role, "parts": m.parts})  # what comes out goes back in
    assert chat[again].parts == parts
    d = m.to_dict()
    assert d["parts"] == parts and d["seq"] == seq and d["step"] is None


def test_a_tool_result_is_read_back_under_text_and_the_older_content_key_is_still_accepted(chat):
    seq = chat.append({"role": "tool", "parts": [{"type": "tool_result", "call_id": "c", "content": "old key"}]})
    part = chat[seq].parts[0]
    assert part["text"] == "old key" and "content" not in part
    assert chat[chat.append(undertext.tool_result("c", "new key"))].parts[0]["text"] == "new key"


def test_tool_call_args_may_be_any_json_value(chat):
    chat.append(undertext.tool_call("c1", "search", {"q": "ünï", "n": 3}, text="searching"))
    part = chat[0].parts[1]
    assert json.loads(part["args"]) == {"q": "ünï", "n": 3}
    assert chat[0].text == "searching"
    with pytest.raises(undertext.InvalidArgument, match="must be JSON"):
        chat.append({"role": "assistant", "parts": [{"type": "tool_call", "id": "x", "name": "n", "args": "{not"}]})


def test_seqs_are_dense_and_turns_count_user_messages(chat):
    assert chat.append(undertext.system("be brief")) == 0
    assert chat.append(undertext.user("one")) == 1
    assert chat.append(undertext.assistant("reply")) == 2
    assert chat.append(undertext.tool_result("c", "out")) == 3
    assert chat.append(undertext.user("two")) == 4
    assert [m.turn for m in chat] == [0, 1, 1, 1, 2]
    assert len(chat) == 5
    assert chat[-1].text == "two" and chat[0].role == "system"
    with pytest.raises(IndexError):
        chat[5]
    with pytest.raises(undertext.InvalidArgument, match="the chat has 5 messages"):
        chat.get(99)


def test_append_batch_returns_the_range_of_seqs(chat):
    chat.append(undertext.user("first"))
    r = chat.append_batch([undertext.assistant(f"m{i}") for i in range(5)])
    assert r == range(1, 6)
    assert [m.text for m in chat.messages(1, 6)] == [f"m{i}" for i in range(5)]
    assert [m.text for m in chat.messages()][0] == "first"


def test_an_append_retried_with_its_key_is_one_message_at_one_seq(chat):
    chat.append(undertext.user("deploy"))
    assert chat.append(undertext.assistant("done"), key="req-1") == 1
    assert chat.append(undertext.assistant("done"), key="req-1") == 1  # the retry: nothing written
    two = [undertext.user("and roll back"), undertext.assistant("rolled back")]
    assert chat.append_batch(two, key="req-2") == range(2, 4)
    assert chat.append_batch(two, key="req-2") == range(2, 4)
    with pytest.raises(undertext.InvalidArgument, match="2 message"):
        chat.append(undertext.user("x"), key="req-2")
    with pytest.raises(undertext.InvalidArgument, match="metadata"):
        chat.append_batch(two, key="req-3", title="t")
    assert len(chat) == 4 and [m.text for m in chat][1:] == ["done", "and roll back", "rolled back"]


def test_arbitrary_text_survives_exactly(chat):
    texts = ["", "line\nbreak\r\n", "\x00nul inside", "😀" * 1000, json.dumps({"k": [1, 2, {"deep": "é"}]}), "x" * 200_000]
    for t in texts:
        chat.append({"role": "user", "content": t})
    assert [m.text for m in chat] == texts


def test_iteration_forward_and_reverse_over_one_snapshot(chat):
    chat.append_batch([undertext.user(str(i)) for i in range(150)])
    assert [int(m.text) for m in chat.iter()] == list(range(150))
    assert [int(m.text) for m in chat.iter(reverse=True)] == list(range(149, -1, -1))
    assert [int(m.text) for m in chat.iter(10, 75, reverse=True)] == list(range(74, 9, -1))
    it = chat.iter()
    first = next(it)
    chat.append(undertext.user("later"))  # not seen by the running iterator
    assert first.text == "0" and len(list(it)) == 149
    with pytest.raises(undertext.InvalidArgument):
        chat.iter(5, 2)


def test_a_long_list_of_messages_read_in_batches_equals_the_iteration_with_hidden_ranges_skipped(chat):
    # More than one batch of messages() (2,048), with hidden ranges across a batch's edge.
    chat.append_batch([undertext.user(str(i)) if i % 7 else undertext.assistant(str(i)) for i in range(5000)])
    chat.hide([(2040, 2060), (4999, 5000)], chat.revision)
    every = [m.to_dict() for m in chat.iter()]
    assert [m.to_dict() for m in chat.messages()] == every
    assert [int(d["parts"][0]["text"]) for d in every] == [i for i in range(4999) if not 2040 <= i < 2060]
    assert [m.seq for m in chat.messages(2000, 4100)] == [i for i in range(2000, 4100) if not 2040 <= i < 2060]
    assert [m.seq for m in chat.messages(2000, 4100, hidden=True)] == list(range(2000, 4100))
    assert [m.seq for m in chat.snapshot().messages(10, 4097)] == [m.seq for m in chat.messages(10, 4097)]
    assert chat.messages(5, 5) == [] and [m.seq for m in chat.messages(4990)] == list(range(4990, 4999))
    with pytest.raises(undertext.InvalidArgument):
        chat.messages(5, 2)
    with pytest.raises(undertext.InvalidArgument):
        chat.messages(0, 5001)


def test_a_message_text_is_its_one_text_part_and_dict_keys_are_shared_strings(chat):
    chat.append_batch([undertext.user("alpha beta"), {"role": "user", "parts": EVERY_PART}])
    one, many = chat.messages()
    assert one.text is one.parts[0]["text"]  # one string object, not a second copy
    assert many.text == "plain text"
    a, b = one.to_dict(), many.to_dict()
    assert [id(k) for k in a] == [id(k) for k in b]  # the same key objects in every dict
    assert a["role"] is b["role"] and a["parts"][0]["type"] is b["parts"][0]["type"]
    assert repr(one) == 'Message(seq=0, role="user", turn=1, text="alpha beta")'


def test_dicts_of_one_turn_or_one_batch_share_their_turn_and_time_objects(chat):
    # Past CPython's small ints (256): a run of messages holding one turn or one time holds
    # one int object, not one each (the memory of a full load into dicts).
    chat.append_batch([undertext.user(str(i)) for i in range(300)])
    chat.append_batch([undertext.assistant(f"a{i}") for i in range(3)])
    dicts = [m.to_dict() for m in chat]
    last_turn = [d for d in dicts if d["turn"] == 300]
    assert len(last_turn) == 4 and all(d["turn"] is last_turn[0]["turn"] for d in last_turn)
    batch = dicts[-3:]
    assert batch[0]["at_ms"] > 256 and all(d["at_ms"] is batch[0]["at_ms"] for d in batch)
    # Equal values only: every dict still says its own turn.
    assert [d["turn"] for d in dicts] == list(range(1, 301)) + [300] * 3


def test_edit_and_truncate_need_the_current_revision(chat):
    chat.append_batch([undertext.user("q"), undertext.assistant("draft answer"), undertext.user("q2")])
    rev = chat.revision
    assert rev == 0  # appends do not change it
    before = chat.snapshot()
    rev1 = chat.edit(1, undertext.assistant("final answer"), expected_revision=rev)
    assert rev1 == rev + 1 and chat[1].text == "final answer"
    with pytest.raises(undertext.StaleRevision) as e:
        chat.truncate(1, expected_revision=rev)
    assert (e.value.expected, e.value.found) == (rev, rev1)
    assert before[1].text == "draft answer" and before.revision == rev  # snapshots never move
    assert chat.snapshot(rev)[1].text == "draft answer"
    rev2 = chat.truncate(1, expected_revision=rev1)
    assert len(chat) == 1 and rev2 == rev1 + 1
    assert len(chat.snapshot(rev1)) == 3
    with pytest.raises(undertext.InvalidArgument):
        chat.snapshot(rev2 + 5)


def test_owners_are_walls(store, chat):
    chat.append(undertext.user("secret"))
    with pytest.raises(undertext.NotFound):
        store.chat("mallory", chat.id)
    assert list(store.chats("mallory")) == []
    with pytest.raises(undertext.InvalidArgument, match="owner"):
        store.create_chat("")
    with pytest.raises(undertext.InvalidArgument, match="chat id"):
        store.chat("alice", "chat-zz")


def test_metadata_set_read_and_versioned(store):
    chat = store.create_chat("alice", title="t1", model="m", draft="d", extra={"a": "1"})
    assert chat.meta == store.chat("alice", chat.id).meta
    assert (chat.meta.title, chat.meta.model, chat.meta.draft, chat.meta.extra) == ("t1", "m", "d", {"a": "1"})
    v = chat.set_meta(title="t2", extra={"b": "2"})
    assert v == chat.meta_version == 2
    assert (chat.meta.title, chat.meta.model, chat.meta.extra) == ("t2", "m", {"b": "2"})
    assert chat.meta_at(1).title == "t1"


def test_chats_are_listed_newest_first_across_pages_and_found_by_metadata(store):
    made = [store.create_chat("bob", title=f"c{i}", extra={"thread": f"t{i % 3}"}) for i in range(7)]
    # Activity is ordered by its millisecond: make the append's millisecond a later one than
    # every creation's (a fast machine creates all seven within one).
    time.sleep(0.005)
    made[2].append(undertext.user("recent activity"))
    listed = list(store.chats("bob", page_size=2))
    assert len(listed) == 7 and listed[0].id == made[2].id
    assert {c.id for c in listed} == {c.id for c in made}
    assert listed[0].len == 1
    assert [c.id for c in store.find_chats("bob", title="c4")] == [made[4].id]
    assert sorted(c.title for c in store.find_chats("bob", extra={"thread": "t1"})) == ["c1", "c4"]
    assert store.find_chats("bob", title="c4", extra={"thread": "t0"}) == []
    with pytest.raises(undertext.InvalidArgument, match="page_size"):
        store.chats("bob", page_size=0)


def test_steps_and_attempts_keep_every_retry(chat):
    chat.append(undertext.user("why does CI fail?"))
    r1 = chat.record_step(1, "stream-1", 0, [undertext.assistant("Let me che")], complete=False)
    r2 = chat.record_step(1, "stream-2", 0, [undertext.tool_call("c1", "sh", {"cmd": "cargo test"})])
    r3 = chat.record_step(1, "stream-2", 1, [undertext.tool_result("c1", "ok"), undertext.assistant("fixed")])
    assert (r1, r2, r3) == (range(1, 2), range(2, 3), range(3, 5))
    attempts = chat.attempts(1)
    assert [a.stream_id for a in attempts] == ["stream-1", "stream-2"]
    assert [s.complete for s in attempts[0].steps] == [False]
    assert [s.step for s in attempts[1].steps] == [0, 1]
    assert attempts[1].steps[1].seqs == [3, 4]
    assert attempts[1].steps[1].messages[1].text == "fixed"
    assert chat[4].step == (1, "stream-2", 1)
    assert chat.attempts(7) == []
    with pytest.raises(undertext.InvalidArgument, match="stream id"):
        chat.record_step(1, "", 0, [undertext.assistant("x")])


@pytest.mark.parametrize(
    "message, needle",
    [
        ("just a string", "expected a dict"),
        ({"content": "x"}, 'expected key "role"'),
        ({"role": "robot", "content": "x"}, "found \"robot\""),
        ({"role": "user"}, '"content" or "parts"'),
        ({"role": "user", "content": 3}, '"content" to be a str'),
        ({"role": "user", "parts": "no"}, '"parts" to be a list'),
        ({"role": "user", "parts": [{"text": "no type"}]}, 'expected key "type"'),
        ({"role": "user", "parts": [{"type": "video"}]}, 'found "video"'),
        ({"role": "tool", "parts": [{"type": "tool_result", "text": "x"}]}, '"call_id"'),
        ({"role": "tool", "parts": [{"type": "tool_result", "call_id": "c", "text": "x", "content": "y"}]}, "found both"),
        ({"role": "tool", "parts": [{"type": "tool_result", "call_id": "c"}]}, 'expected key "text"'),
        ({"role": "user", "parts": [{"type": "approval_response", "id": "a", "approved": "yes"}]}, '"approved" to be a bool'),
    ],
)
def test_malformed_messages_say_what_was_expected(chat, message, needle):
    with pytest.raises(undertext.InvalidArgument) as e:
        chat.append(message)
    assert needle in str(e.value)
    assert len(chat) == 0


def test_chat_objects_compare_by_identity_of_the_chat(store, chat):
    same = store.chat("alice", chat.id)
    assert same == chat and hash(same) == hash(chat)
    assert store.create_chat("alice") != chat
    assert chat.owner == "alice" and chat.id.startswith("chat-")


def test_a_snapshot_serves_every_read_of_its_revision(store):
    chat = store.create_chat("alice", title="before")
    chat.append_batch([undertext.user(f"m{i}") for i in range(10)])
    a = store.archive("alice", "pinned page text")
    chat.pin(a, 0, 6)
    snap = chat.snapshot()
    chat.set_meta(title="after")
    chat.truncate(3, expected_revision=chat.revision)
    chat.unpin(a, 0, 6)
    assert snap.chat_id == chat.id and snap.revision == 0 and len(snap) == 10
    assert snap.meta.title == "before" and [p.start for p in snap.pins] == [0]
    assert snap.get(9).text == "m9" and snap[-1].text == "m9"
    with pytest.raises(IndexError):
        snap[10]
    assert [m.text for m in snap.messages(7)] == ["m7", "m8", "m9"]
    assert [m.text for m in snap.iter(0, 3, reverse=True)] == ["m2", "m1", "m0"]
    assert [m.seq for m in snap] == list(range(10))
    assert len(chat) == 3 and chat.meta.title == "after" and chat.pins == []


def test_message_and_chat_info_fields(store):
    chat = store.create_chat("alice", title="t", model="gpt-x", draft="unsent", extra={"k": "v"})
    chat.append(undertext.user("hello"))
    m = chat[0]
    assert m.at_ms > 1_600_000_000_000 and m.turn == 1 and m.revision == 0
    (info,) = list(store.chats("alice"))
    assert (info.id, info.title, info.model, info.draft, info.extra) == (chat.id, "t", "gpt-x", "unsent", {"k": "v"})
    assert info.len == 1 and info.revision == 0
    assert info.created_ms <= info.last_activity_ms
    assert "hello" in repr(m) and chat.id in repr(info)
