"""Checkpoints with Python summarizers, guarded publication, and the background worker."""

import threading
import time

import pytest

import undertext


def words(i):
    return " ".join(f"word{i}-{k}" for k in range(60))


def settled_chat(store, n=20):
    c = store.create_chat("alice")
    c.append(undertext.user("start"))
    for i in range(n):
        c.append(undertext.assistant(words(i)))
    c.append(undertext.user("two"))
    c.append(undertext.user("three"))
    return c


class Recording:
    """A summarizer object: counts its calls and the threads it ran on."""

    id = "recording-v1"

    def __init__(self):
        self.summarized = 0
        self.merged = 0
        self.threads = set()

    def summarize(self, messages):
        self.summarized += 1
        self.threads.add(threading.current_thread().name)
        assert all(isinstance(m, undertext.Message) for m in messages)
        return f"{len(messages)} messages from seq {messages[0].seq}: {messages[0].text[:20]}"

    def merge(self, summaries):
        self.merged += 1
        return " | ".join(summaries)


def test_build_and_publish_with_a_python_summarizer_then_the_view_starts_with_the_summary(store):
    c = settled_chat(store)
    s = Recording()
    cp = c.build_checkpoint(s, segment_tokens=200, fan_in=4)
    assert cp.reach == 21 and cp.base_revision == 0 and cp.summarizer == "recording-v1"
    assert len(cp.segments) > 1 and cp.segments[0][0] == 0 and cp.segments[-1][1] == cp.reach
    assert s.summarized == cp.stats["summarized"] == len(cp.segments)
    assert s.merged == cp.stats["merged"] >= 1
    assert "messages from seq 0" in cp.summary
    assert len(cp.root) == 64 and all(len(seg[2]) == 64 for seg in cp.segments)
    assert cp.stats["depth"] >= 1 and cp.stats["cached"] == 0
    again = c.build_checkpoint(s, segment_tokens=200, fan_in=4)  # cached: no model call
    assert (again.stats["summarized"], again.stats["merged"]) == (0, 0) and again.summary == cp.summary
    c.publish_checkpoint(cp)
    assert c.published_checkpoint == (0, cp.reach)
    v = c.view(undertext.Budget(1_000_000))
    # The loop's task (the first user turn's message) stays in front, verbatim; then the summary.
    first = next(m for m in v.messages if m["parts"][0]["type"] == "summary")
    assert first["seqs"] == (0, cp.reach) and v.messages.index(first) <= 1
    assert cp.summary in first["parts"][0]["text"]
    assert v.messages[-1]["seqs"][1] == len(c)


def test_a_plain_callable_and_the_extractive_summarizer_are_accepted(store):
    c = settled_chat(store)
    cp = c.build_checkpoint(lambda msgs: f"{len(msgs)} msgs", segment_tokens=200)
    assert "msgs" in cp.summary and cp.summarizer.endswith("<lambda>")
    assert undertext.Extractive(max_chars=500).max_chars == 500
    ex = c.build_checkpoint(undertext.Extractive(max_chars=500))
    assert ex.summarizer == "extractive-v1" and "[0 user] start" in ex.summary
    assert c.build_checkpoint().summarizer == "extractive-v1"
    with pytest.raises(undertext.InvalidArgument, match="summarizer"):
        c.build_checkpoint(42)
    with pytest.raises(undertext.InvalidArgument, match="fan_in"):
        c.build_checkpoint(fan_in=1)


def test_publication_is_guarded_by_revision_and_reach(store):
    c = settled_chat(store)
    stale = c.build_checkpoint()
    c.edit(3, undertext.assistant("edited"), expected_revision=c.revision)
    with pytest.raises(undertext.Conflict) as e:
        c.publish_checkpoint(stale)
    assert (e.value.kind, e.value.base, e.value.now) == ("edited", 0, 1)
    cp = c.build_checkpoint()
    c.append(undertext.assistant("appends after the base are fine"))
    c.publish_checkpoint(cp)
    with pytest.raises(undertext.Conflict) as e:
        c.publish_checkpoint(cp)
    assert (e.value.kind, e.value.published_reach) == ("not_newer", cp.reach)


class Boom(Exception):
    pass


def test_a_summarizer_exception_propagates_as_itself_from_build_checkpoint(store):
    c = settled_chat(store)

    def failing(messages):
        raise Boom("the model is down")

    with pytest.raises(Boom, match="the model is down"):
        c.build_checkpoint(failing)
    with pytest.raises(TypeError, match="must return a str, it returned int"):
        c.build_checkpoint(lambda msgs: 42)


def drive(chat, budget, steps):
    """A tool loop: a user turn every 4 steps, a call and a result per step, a view after each."""
    for i in range(steps):
        if i % 4 == 0:
            chat.append(undertext.user(f"task {i}"))
        chat.append_batch(
            [
                undertext.tool_call(f"c{i}", "read", {"file": f"f{i}.rs"}),
                undertext.tool_result(f"c{i}", f"file {i}: " + "fn item() { let value = compute(); } " * 40),
            ]
        )
        chat.view(budget)


def wait_for(condition, seconds=60):
    """Waits for the worker's threads to do something (not a timing assertion: a bound)."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_the_worker_calls_a_python_summarizer_on_its_own_thread_and_prepares_a_checkpoint(store):
    chat = store.create_chat("alice")
    s = Recording()
    with store.start_worker(s, at_hard_line="refuse", segment_tokens=1_000) as worker:
        assert worker.running
        drive(chat, undertext.Budget(14_000, 2_000), 30)
        assert wait_for(lambda: chat.prepared_checkpoint is not None)
        assert worker.errors == [] and worker.exceptions == []
        assert worker.jobs_done >= 1
    assert not worker.running
    assert s.summarized >= 1
    assert s.threads and all(t != threading.current_thread().name for t in s.threads)
    assert chat.prepared_checkpoint.summarizer == "recording-v1"


def test_a_summarizer_that_raises_is_reported_and_retried_by_policy(store):
    chat = store.create_chat("alice")
    calls = []

    def failing(messages):
        calls.append(threading.current_thread().name)
        raise Boom(f"the model is down (call {len(calls)})")

    worker = store.start_worker(failing, at_hard_line="refuse", retries=2, segment_tokens=1_000)
    try:
        drive(chat, undertext.Budget(14_000, 2_000), 30)
        assert wait_for(lambda: len(worker.errors) >= 3)
        errors = worker.errors
        assert len(errors) >= 3, errors
        assert all("Boom" in e and "the model is down" in e for e in errors), errors
        assert all(isinstance(x, Boom) for x in worker.exceptions)
        assert len(worker.exceptions) >= 3
        assert chat.prepared_checkpoint is None
        assert calls and threading.current_thread().name not in calls
    finally:
        worker.stop()
    worker.stop()  # harmless twice


def test_closing_the_store_stops_its_worker(tmp_path):
    s = undertext.Store.open(tmp_path / "s")
    worker = s.start_worker(undertext.Extractive())
    assert worker.running
    s.close()
    assert not worker.running


def test_worker_options_are_checked(store):
    with pytest.raises(undertext.InvalidArgument, match="at_hard_line"):
        store.start_worker(undertext.Extractive(), at_hard_line="panic")
    with pytest.raises(undertext.InvalidArgument, match="soft"):
        store.start_worker(undertext.Extractive(), soft=1.5)
