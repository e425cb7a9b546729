"""The plain value classes (Message, ChatMeta, ChatInfo, ArchiveRef, Pin, Step, Attempt,
IndexLine, Budget, Extractive) survive pickle and copy.deepcopy: equal fields, a deep copy
shares no mutable part, and a pickled value crosses to another process."""

import copy
import multiprocessing
import pickle

import pytest

import undertext


def fields(v):
    """Every public field of a value, nested values by their fields too."""
    if isinstance(v, (list, tuple)):
        return [fields(x) for x in v]
    if type(v).__module__ != "undertext":
        return v
    names = sorted(n for n in dir(type(v)) if not n.startswith("_") and not callable(getattr(v, n)))
    return (type(v).__name__, {n: fields(getattr(v, n)) for n in names})


@pytest.fixture
def values(store):
    chat = store.create_chat("alice", title="pickled", model="m-1", extra={"k": "v", "é": "✓"})
    chat.append(undertext.system("be brief"))
    chat.append(undertext.user("run the tests"))
    chat.record_step(1, "stream-1", 0, [undertext.tool_call("c1", "sh", {"cmd": "cargo test"})])
    big = "\n".join(f"test case_{i} ... ok" for i in range(3000))
    chat.record_step(1, "stream-1", 1, [undertext.tool_result("c1", big), undertext.assistant("fixed ✓")])
    archive = store.archive("alice", "line one\nline two\n")
    chat.pin(archive, 0, 1, "lines")
    return {
        "Message": chat.messages(),
        "ChatMeta": chat.meta,
        "ChatInfo": next(iter(store.chats("alice"))),
        "ArchiveRef": archive,
        "Pin": chat.pins[0],
        "Attempt": chat.attempts(1)[0],
        "Step": chat.attempts(1)[0].steps[1],
        "IndexLine": chat.index(),
        "Budget": undertext.Budget(
            32_000, 4_000, soft=0.6, target=0.4, hard=0.8, tool_schemas=['{"name": "sh"}'],
            protect_max_tokens=5_000, instructions_max_tokens=2_000, nudge=0.5,
        ),
        "Extractive": undertext.Extractive(max_chars=123),
    }


KINDS = ["Message", "ChatMeta", "ChatInfo", "ArchiveRef", "Pin", "Attempt", "Step", "IndexLine", "Budget", "Extractive"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_value_pickles_and_deep_copies_to_an_equal_value_of_its_class(values, kind):
    v = values[kind]
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(v, protocol=protocol))
        assert fields(back) == fields(v)
    for c in (copy.deepcopy(v), copy.copy(v)):
        assert fields(c) == fields(v)
    one = v[0] if isinstance(v, list) else v
    assert type(pickle.loads(pickle.dumps(one))) is getattr(undertext, kind)


def test_a_deep_copied_message_shares_no_part_with_the_original(values):
    m = values["Message"][3]  # the tool result, its archive as a nested dict
    c = copy.deepcopy(m)
    assert c.parts == m.parts and c.parts is not m.parts
    c.parts[0]["archive"]["id"] = "changed"
    c.parts.append({"type": "text", "text": "more"})
    assert m.parts[0]["archive"]["id"] != "changed" and len(m.parts) == 1
    assert c.text == m.text and c.to_dict()["at_ms"] == m.at_ms


def test_the_original_and_the_copy_keep_working_as_values(values, store):
    archive = pickle.loads(pickle.dumps(values["ArchiveRef"]))
    assert archive == values["ArchiveRef"] and hash(archive) == hash(values["ArchiveRef"])
    assert store.read_context("alice", archive, 0, 1, "lines") == "line one\n"
    budget = copy.deepcopy(values["Budget"])
    assert budget.soft_limit == values["Budget"].soft_limit
    chat = store.create_chat("alice")
    chat.append(undertext.user("hi"))
    assert chat.view(budget).decision == chat.view(values["Budget"]).decision
    assert pickle.loads(pickle.dumps(values["ChatMeta"])) == values["ChatMeta"]


def test_a_budget_in_a_deep_copied_config_is_a_budget():
    config = {"model": "m", "budget": undertext.Budget(8_000, nudge=0.9)}
    c = copy.deepcopy(config)
    assert isinstance(c["budget"], undertext.Budget) and repr(c["budget"]) == repr(config["budget"])


def _texts(messages):
    return [m.text for m in messages]


def test_messages_cross_to_a_process_pool(values):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        assert pool.apply(_texts, (values["Message"],)) == [m.text for m in values["Message"]]


def test_a_state_that_no_value_could_have_is_refused_on_unpickling(values):
    _, (state,) = values["Message"][0].__reduce__()
    with pytest.raises(undertext.InvalidArgument, match="role"):
        undertext.Message._from_state((*state[:2], "robot", *state[3:]))
    _, (state,) = values["Pin"].__reduce__()
    with pytest.raises(undertext.InvalidArgument, match="unit"):
        undertext.Pin._from_state((*state[:3], "furlongs"))
    _, (state,) = values["Budget"].__reduce__()
    with pytest.raises(undertext.InvalidArgument, match="budget"):
        undertext.Budget._from_state((100, 200, *state[2:]))
