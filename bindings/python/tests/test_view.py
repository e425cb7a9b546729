"""The model view under a budget, provider shapes, calibration, compaction plans, approvals."""

import pytest

import undertext


def result_text(i, n=20_000):
    line = f"row {i:03}: value {i * 31} ok\n"
    return (line * (n // len(line) + 1))[:n]


def build(store, old=6):
    """System, `old` turns of a call with a 20,000-char result, then two short user turns."""
    chat = store.create_chat("alice", model="test-model")
    chat.append(undertext.system("You are a careful agent."))
    results = []
    for i in range(old):
        chat.append(undertext.user(f"step {i}"))
        chat.append(undertext.tool_call(f"c{i}", "read", {"i": i}))
        results.append(chat.append(undertext.tool_result(f"c{i}", result_text(i))))
    chat.append(undertext.user("and now?"))
    chat.append(undertext.user("answer please"))
    return chat, results


@pytest.fixture
def big_store(tmp_path):
    # Results stay inline (archive threshold above their size): the guard previews them.
    with undertext.Store.open(tmp_path / "s", archive_threshold=64 << 10) as s:
        yield s


def test_under_the_soft_line_the_view_fits_unchanged(big_store):
    chat, _ = build(big_store)
    est = chat.estimate(undertext.Budget(10_000_000))
    v = chat.view(undertext.Budget(est * 100 // 60))
    assert v.decision == "fits" and v.previewed == [] and v.tokens_saved == 0
    assert len(v) == len(chat) and v.estimate == est == v.raw_estimate
    assert v.revision == chat.revision and v.swap_seconds is None and v.calibration == 1.0
    assert [m["seqs"] for m in v.messages] == [(i, i + 1) for i in range(len(chat))]
    assert v.messages[3]["parts"][0]["text"] == result_text(0)


def test_over_the_soft_line_older_results_become_previews_that_read_back(big_store):
    chat, results = build(big_store)
    est = chat.estimate(undertext.Budget(10_000_000))
    budget = undertext.Budget(est * 100 // 80)
    v = chat.view(budget)
    assert v.decision == "compacted"
    assert v.previewed and v.previewed == results[: len(v.previewed)]  # oldest first
    assert v.estimate <= budget.target_limit and v.tokens_saved > 0
    by_seq = {m["seqs"][0]: m for m in v.messages}
    part = by_seq[v.previewed[0]]["parts"][0]
    ref = part["archive"]
    assert big_store.read_context("alice", ref["id"], 0, ref["chars"]) == result_text(0)
    assert chat[v.previewed[0]].parts[0]["text"] == result_text(0)  # the original is untouched


def test_over_the_hard_line_the_view_is_refused_with_the_numbers(big_store):
    chat = big_store.create_chat("alice")
    chat.append(undertext.user("x" * 40_000))
    chat.append(undertext.user("y" * 40_000))
    budget = undertext.Budget(10_000, 1_000)
    with pytest.raises(undertext.Refused) as e:
        chat.view(budget)
    r = e.value
    assert r.limit == budget.hard_limit and r.over_by == r.estimate - r.limit > 0
    assert r.view.decision == "refused" and len(r.view) == 2
    assert str(r.over_by) in str(r)


def test_openai_and_anthropic_shapes(chat):
    chat.append(undertext.system("be brief"))
    chat.append(undertext.user("read it"))
    chat.append(undertext.tool_call("c1", "read_file", {"path": "a.txt"}, text="reading"))
    chat.append(undertext.tool_result("c1", "contents"))
    chat.append(undertext.assistant("done"))
    v = chat.view(undertext.Budget(100_000, 1_000))
    assert v.openai() == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "read it"},
        {
            "role": "assistant",
            "content": "reading",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "contents"},
        {"role": "assistant", "content": "done"},
    ]
    a = v.anthropic()
    assert a["system"] == "be brief"
    assert [m["role"] for m in a["messages"]] == ["user", "assistant", "user", "assistant"]
    assert a["messages"][1]["content"][1] == {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "a.txt"}}
    assert a["messages"][2]["content"][0]["type"] == "tool_result"


def test_reported_usage_above_the_estimate_raises_later_estimates(chat):
    chat.append(undertext.user("hello " * 500))
    budget = undertext.Budget(1_000_000)
    v = chat.view(budget)
    factor = chat.report_usage(v.step, v.estimate * 2)
    assert factor == pytest.approx(2.0, rel=0.01)
    assert chat.view(budget).calibration == pytest.approx(factor)
    assert chat.estimate(budget) >= 2 * v.estimate - 1
    with pytest.raises(undertext.NotFound, match="view step"):
        chat.report_usage(10_000, 5)


def test_budget_is_checked_and_reports_its_lines():
    b = undertext.Budget(200_000, 8_000, tool_schemas=['{"name": "read"}'])
    assert (b.window, b.reserve_output, b.soft, b.target, b.hard) == (200_000, 8_000, 0.7, 0.5, 0.9)
    assert b.tool_schemas == ['{"name": "read"}']
    assert (b.usable, b.soft_limit, b.target_limit, b.hard_limit) == (192_000, 134_400, 96_000, 172_800)
    with pytest.raises(undertext.InvalidArgument, match="budget"):
        undertext.Budget(100, 200)
    with pytest.raises(undertext.InvalidArgument):
        undertext.Budget(1000, soft=0.9, hard=0.5)


def test_index_lint_and_compact(big_store):
    chat, results = build(big_store, old=4)
    lines = chat.index()
    assert [l.seq for l in lines] == list(range(len(chat)))
    assert lines[results[0]].role == "tool" and lines[results[0]].tokens > 1000
    assert chat.lint(trims=[results[0]]) == []
    problems = chat.lint(trims=[1])  # seq 1 is a user message, not a tool result
    assert problems and problems[0][0] == "trim"
    with pytest.raises(undertext.LintRejected) as e:
        chat.compact(trims=[1], expected_revision=chat.revision)
    assert e.value.problems == problems
    with pytest.raises(undertext.StaleRevision):
        chat.compact(trims=[results[0]], expected_revision=chat.revision + 1)
    n = chat.compact(trims=[results[0]], squishes=[(4, 7, "asked step 1, read it: all rows ok")], expected_revision=chat.revision)
    assert n == 2
    v = chat.view(undertext.Budget(10_000_000))
    squished = [m for m in v.messages if m["seqs"] == (4, 7)]
    assert squished and "asked step 1" in str(squished[0]["parts"])
    trimmed = [m for m in v.messages if m["seqs"] == (results[0], results[0] + 1)][0]
    assert "trimmed" in str(trimmed["parts"])


def test_a_pending_approval_is_found(chat):
    assert chat.first_pending_approval() is None
    chat.append(undertext.user("deploy"))
    chat.append({"role": "assistant", "parts": [{"type": "approval_request", "id": "ap-9", "prompt": "deploy to prod?"}]})
    seq, pending = chat.first_pending_approval()
    assert seq == 1 and pending == {"kind": "request", "detail": "ap-9"}
    chat.append({"role": "user", "parts": [{"type": "approval_response", "id": "ap-9", "approved": True}]})
    assert chat.first_pending_approval() is None


def test_a_single_task_loop_is_compacted_inside_its_turn_and_the_compaction_tool_answers(tmp_path):
    with undertext.Store.open(tmp_path / "loop") as s:
        chat = s.create_chat("alice")
        chat.append(undertext.user("fix the parser"))
        for i in range(30):
            chat.append(undertext.tool_call(f"c{i}", "read", {"i": i}))
            chat.append(undertext.tool_result(f"c{i}", result_text(i, 3_000)))
        total = chat.estimate(undertext.Budget(1 << 40))
        budget = undertext.Budget(total * 100 // 80, protect_max_tokens=2_000, nudge=0.5)
        v = chat.view(budget)
        # One user turn: the bounded tail lets the guard preview the settled steps.
        assert v.decision == "compacted" and v.previewed
        assert v.nudge is not None and "compact_history" in v.nudge
        assert chat.protected_minimum(budget) < budget.hard_limit
        bad = chat.compaction_tool_call('{"trims": [1]}', expected_revision=v.revision, budget=budget)
        assert bad.startswith("compaction refused") and "not a tool result" in bad
        good = chat.compaction_tool_call('{"trims": [2]}', expected_revision=v.revision, budget=budget)
        assert good.startswith("compaction applied")
