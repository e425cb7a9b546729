"""Harness feedback starts no user turn and reads back; the compaction tool's schemas, its
bounded nudge and the no-op re-trim (issue 32)."""

import json

import pytest

import undertext


def test_harness_feedback_starts_no_turn_and_reads_back(chat):
    chat.append(undertext.user("fix the build"))
    chat.append(undertext.assistant("I will run the tests"))
    seq = chat.append(undertext.feedback("Please always provide EXACTLY ONE action."))
    part_seq = chat.append({"role": "user", "parts": [{"type": "text", "text": "use one bash block"}], "feedback": True})
    task, fb, fb2 = chat[0], chat[seq], chat[part_seq]
    assert not task.feedback and task.turn == 1
    assert fb.feedback and fb.turn == 1 and fb.text == "Please always provide EXACTLY ONE action."
    assert fb2.feedback and fb2.turn == 1
    assert fb.to_dict()["feedback"] is True and "feedback" not in task.to_dict()
    again = chat.append(fb.to_dict() | {"parts": fb.parts})  # what comes out goes back in
    assert chat[again].feedback
    with pytest.raises(undertext.InvalidArgument, match="only a user message"):
        chat.append({"role": "assistant", "content": "x", "feedback": True})


def test_the_compaction_tool_schemas_and_a_second_trim_that_saves_nothing(chat):
    openai = json.loads(undertext.compaction_tool_schema("openai"))
    anthropic = json.loads(undertext.compaction_tool_schema("anthropic"))
    assert openai["function"]["name"] == anthropic["name"] == "compact_history"
    with pytest.raises(undertext.InvalidArgument):
        undertext.compaction_tool_schema("gemini")
    chat.append(undertext.user("make the tests pass"))
    for k in range(10):
        chat.append(undertext.tool_call(f"c{k}", "run", {"cmd": "pytest"}))
        chat.append(undertext.tool_result(f"c{k}", "output of the command " * 25))
    budget = undertext.Budget(4000)
    first = chat.compaction_tool_call('{"trims": [2]}', expected_revision=chat.revision, budget=budget)
    assert first.startswith("compaction applied"), first
    assert chat.index()[2].preview.startswith("[trimmed]")
    second = chat.compaction_tool_call('{"trims": [2]}', expected_revision=chat.revision, budget=budget)
    assert "0 tokens saved" in second and "applied" not in second
