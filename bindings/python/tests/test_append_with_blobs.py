"""Chat.append_with_blobs: blobs and the messages attaching them in one transaction, one log sync."""

import pytest

import undertext


def attaching(blob_id, text="see attached"):
    return {"role": "user", "parts": [{"type": "text", "text": text}, {"type": "attachment", "mime": "application/octet-stream", "blob": blob_id}]}


def test_blobs_and_messages_attaching_them_are_one_log_sync_under_group_durability(tmp_path):
    with undertext.Store.open(tmp_path / "s", durability="group") as s:
        chat = s.create_chat("alice")
        chat.append(undertext.user("before"))
        data = [b"state one " * 500, b"state two " * 700]
        syncs = s.stats()["log_syncs"]
        ids, seqs = chat.append_with_blobs(data, [attaching(undertext.blob_id(data[0])), attaching(undertext.blob_id(data[1]), "second")])
        assert s.stats()["log_syncs"] - syncs == 1
        assert ids == [undertext.blob_id(d) for d in data]
        assert seqs == range(1, 3)
        assert [s.get_blob("alice", i) for i in ids] == data
        assert chat.get(2).parts[1]["blob"] == ids[1]


def test_blobs_and_messages_survive_reopen(tmp_path):
    data = b"\x00binary\xff" * 1000
    with undertext.Store.open(tmp_path / "s") as s:
        chat = s.create_chat("alice")
        (blob,), seqs = chat.append_with_blobs([data], [attaching(undertext.blob_id(data))])
        chat_id = chat.id
    with undertext.Store.open(tmp_path / "s") as s:
        chat = s.chat("alice", chat_id)
        assert len(chat) == 1 and seqs == range(0, 1)
        assert s.get_blob("alice", chat[0].parts[1]["blob"]) == data


def test_attachment_may_name_a_blob_stored_earlier(store, chat):
    old = store.put_blob("alice", b"stored earlier")
    ids, seqs = chat.append_with_blobs([], [attaching(old)])
    assert ids == [] and seqs == range(0, 1)
    assert chat[0].parts[1]["blob"] == old


def test_attachment_of_an_unknown_blob_is_refused_and_writes_nothing(tmp_path):
    with undertext.Store.open(tmp_path / "s", durability="group") as s:
        chat = s.create_chat("alice")
        chat.append(undertext.user("kept"))
        passed = b"passed along but the call is refused"
        unknown = undertext.blob_id(b"never stored")
        syncs = s.stats()["log_syncs"]
        with pytest.raises(undertext.NotFound, match=unknown):
            chat.append_with_blobs([passed], [attaching(undertext.blob_id(passed)), attaching(unknown)])
        assert len(chat) == 1
        assert not s.contains_blob("alice", undertext.blob_id(passed))
        assert s.stats()["log_syncs"] == syncs


def test_bad_arguments_are_clear_errors(chat):
    with pytest.raises(TypeError):
        chat.append_with_blobs("not a list of bytes", [])
    with pytest.raises(undertext.InvalidArgument, match="role"):
        chat.append_with_blobs([b"x"], [{"content": "no role"}])
    assert len(chat) == 0
