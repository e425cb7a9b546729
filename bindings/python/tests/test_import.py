"""Transcript import: an OpenAI-format file becomes a chat, once; bad lines are reported."""

import json

import pytest

import undertext


def openai_transcript(extra_turn=False):
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "list the files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "sh", "arguments": '{"cmd": "ls"}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "Cargo.toml\nsrc\n" + "target/debug/x\n" * 2000},
        {"role": "assistant", "content": "There is a Cargo project."},
    ]
    if extra_turn:
        messages += [{"role": "user", "content": "thanks"}]
    return {"messages": messages}


def test_an_openai_transcript_imports_once_and_a_changed_file_is_a_new_session(tmp_path):
    run = tmp_path / "runs" / "run.json"
    run.parent.mkdir()
    run.write_text(json.dumps(openai_transcript()))
    with undertext.Store.open(tmp_path / "s", archive_threshold=4096) as store:
        r = store.import_transcripts("alice", [tmp_path / "runs"])
        assert (r["files"], r["sessions_new"], r["messages"], r["tool_results"], r["archived"]) == (1, 1, 5, 1, 1)
        assert r["problems"] == []
        (info,) = list(store.chats("alice"))
        key = info.extra["import.key"]
        chat = store.chat("alice", info.id)
        assert [m.role for m in chat] == ["system", "user", "assistant", "tool", "assistant"]
        result = chat[3].parts[0]
        assert result["archive"]["lines"] == 2002
        assert store.read_context("alice", result["archive"]["id"], 0, 19) == "Cargo.toml\nsrc\ntarg"
        again = store.import_transcripts("alice", [run], format="openai")
        assert (again["sessions_new"], again["sessions_unchanged"], again["messages"]) == (0, 1, 0)
        run.write_text(json.dumps(openai_transcript(extra_turn=True)))
        # OpenAI files carry no session id: the key is the content hash, so new content is a
        # new session, and the first stays as it was.
        changed = store.import_transcripts("alice", [run])
        assert (changed["sessions_new"], changed["messages"]) == (1, 6)
        assert store.find_chats("alice", extra={"import.key": key})[0].len == 5
        assert len(list(store.chats("alice"))) == 2


def test_bad_input_is_reported_not_imported(tmp_path):
    bad = tmp_path / "codex.jsonl"
    bad.write_text('{"type": "session_meta", "payload": {"id": "s1"}}\nnot json at all\n')
    with undertext.Store.open(tmp_path / "s") as store:
        r = store.import_transcripts("alice", [bad])
        assert any(":2:" in p for p in r["problems"]), r["problems"]
        with pytest.raises(undertext.InvalidArgument, match="format"):
            store.import_transcripts("alice", [bad], format="word-doc")
        with pytest.raises(undertext.IOFailure):
            store.import_transcripts("alice", [tmp_path / "absent.json"])
