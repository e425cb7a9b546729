"""UndertextSaver decodes the LangChain messages of item lists itself
(``undertext.langgraph._langchain_decode``): what it builds must be exactly what LangGraph's
``JsonPlusSerializer.loads_typed`` builds (same classes, field values, types, dict key orders
and pydantic state) for every shape a message can take, falling back to the serializer for
anything it does not build; and a read after a reopen must not go through the serializer's
per-message hook."""

from __future__ import annotations

import datetime
import os
import random
import uuid
from typing import Any

import pytest

if os.environ.get("UNDERTEXT_REQUIRE_INTEGRATIONS") != "1":  # scripts/test-python-integrations sets it
    pytest.importorskip("langgraph.checkpoint.base", reason="run scripts/test-python-integrations")

import ormsgpack
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import BaseModel

from undertext.langgraph import _caches, _langchain_decode
from undertext.langgraph import UndertextSaver

TEXTS = ["", "plain", "ünïcödé ✓", "日本語のテキスト", "emoji 🦀🐍", "line\nbreak\ttab", "x" * 2000, "\u0000nul"]


class Custom(BaseModel):  # not in LangGraph's safe types: the serializer's allow-list decides
    a: int = 1
    b: str = "b"


def same(a: Any, b: Any, path: str = "$") -> None:
    """Asserts ``a`` and ``b`` are the same value: types, dict key orders, pydantic state."""
    assert type(a) is type(b), f"{path}: {type(a)} != {type(b)}"
    if isinstance(a, dict):
        assert list(a) == list(b), f"{path}: keys {list(a)} != {list(b)}"
        for k in a:
            same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: len {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, BaseModel):
        same(a.__dict__, b.__dict__, f"{path}.__dict__")
        assert a.__pydantic_fields_set__ == b.__pydantic_fields_set__, path
        assert a.__pydantic_extra__ == b.__pydantic_extra__, path
        assert a.__pydantic_private__ == b.__pydantic_private__, path
        assert a == b and repr(a) == repr(b), path
        assert a.model_dump() == b.model_dump(), path
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def rand_json(rng: random.Random, depth: int = 0) -> Any:
    k = rng.randrange(8 if depth < 3 else 5)
    if k == 0:
        return rng.choice(TEXTS)
    if k == 1:
        return rng.randrange(-(10**12), 10**12)
    if k == 2:
        return rng.random()
    if k == 3:
        return rng.choice([None, True, False])
    if k == 4:
        return rng.choice(TEXTS[:6])
    if k == 5:
        return [rand_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(TEXTS[:6]) + str(i): rand_json(rng, depth + 1) for i in range(rng.randrange(4))}


def rand_content(rng: random.Random) -> Any:
    if rng.random() < 0.7:
        return rng.choice(TEXTS)
    blocks: list[Any] = []
    for _ in range(rng.randrange(4)):
        if rng.random() < 0.5:
            blocks.append(rng.choice(TEXTS))
        else:
            blocks.append({"type": "text", "text": rng.choice(TEXTS), **({"extra": rand_json(rng)} if rng.random() < 0.3 else {})})
    return blocks


def rand_opt(rng: random.Random) -> Any:
    return rng.choice([None, "id-" + rng.choice(TEXTS[:6]), str(uuid.UUID(int=rng.getrandbits(128)))])


def rand_common(rng: random.Random) -> dict[str, Any]:
    kw: dict[str, Any] = {"content": rand_content(rng)}
    if rng.random() < 0.5:
        kw["id"] = rand_opt(rng)
    if rng.random() < 0.3:
        kw["name"] = rand_opt(rng)
    if rng.random() < 0.4:
        kw["additional_kwargs"] = {"k": rand_json(rng), "n": rand_json(rng)}
    if rng.random() < 0.4:
        kw["response_metadata"] = {"model": "m", "finish_reason": rng.choice(["stop", None]), "x": rand_json(rng)}
    return kw


def rand_usage(rng: random.Random) -> dict[str, Any]:
    """Usage metadata as providers fill it: counts, details in any order, sometimes a
    provider's own detail key (validation keeps it: the saver leaves such a message to the
    serializer)."""
    u: dict[str, Any] = {"total_tokens": 9, "input_tokens": 4, "output_tokens": 5}
    if rng.random() < 0.5:
        keys = rng.sample(["cache_read", "audio", "cache_creation"], rng.randrange(4))
        u["input_token_details"] = {k: rng.randrange(100) for k in keys}
        if rng.random() < 0.2:
            u["input_token_details"]["provider_own"] = 1
    if rng.random() < 0.5:
        u["output_token_details"] = {k: rng.randrange(100) for k in rng.sample(["reasoning", "audio"], rng.randrange(3))}
    return u


def rand_message(rng: random.Random) -> Any:
    kind = rng.randrange(12)
    kw = rand_common(rng)
    if kind <= 3:
        if rng.random() < 0.7:
            kw["tool_calls"] = [
                {"name": rng.choice(["read_file", "ü", "run"]), "args": rand_json(rng, 2) if rng.random() < 0.2 else {"path": rng.choice(TEXTS), "n": rng.randrange(9)}, "id": rand_opt(rng)}
                for _ in range(rng.randrange(1, 4))
            ]
            for tc in kw["tool_calls"]:
                if not isinstance(tc["args"], dict):
                    tc["args"] = {"v": tc["args"]}
        if rng.random() < 0.4:
            kw["usage_metadata"] = rand_usage(rng)
        if rng.random() < 0.1:
            kw["invalid_tool_calls"] = [{"name": "bad", "args": "{not json", "id": "i1", "error": "parse"}]
        if rng.random() < 0.15 and not kw.get("tool_calls"):
            # OpenAI's raw form: validation parses it into tool_calls.
            kw.setdefault("additional_kwargs", {})["tool_calls"] = [
                {"id": "call_r", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
            ]
        return AIMessage(**kw)
    if kind <= 6:
        kw["tool_call_id"] = rng.choice(["call_1", "ü-id", str(uuid.UUID(int=rng.getrandbits(128)))])
        if rng.random() < 0.3:
            kw["status"] = rng.choice(["success", "error"])
        if rng.random() < 0.3:
            kw["artifact"] = rng.choice([rand_json(rng), datetime.datetime(2026, 12, 2, 3, 4, 5), {"when": datetime.date(2026, 1, 1)}])
        return ToolMessage(**kw)
    if kind == 7:
        return HumanMessage(**kw)
    if kind == 8:
        return SystemMessage(**kw)
    if kind == 9:
        return rng.choice([AIMessageChunk(content="chunk", id="c1"), ChatMessage(content="c", role="critic"), RemoveMessage(id="gone")])
    if kind == 10:  # a non-message value in a list
        return rng.choice([rand_json(rng), datetime.datetime(2026, 1, 2), uuid.UUID(int=7), {1, 2}, ("a", 1), Custom(a=5)])
    # A message with a nested model inside its fields: the serializer decodes it.
    kw["additional_kwargs"] = {"when": datetime.datetime(2026, 2, 3), "model": Custom()}
    return HumanMessage(**kw)


def crafted(rng: random.Random) -> bytes:
    """A one-item list holding a message extension LangGraph's serializer would not write
    for a validated message (keys missing, extra, reordered; values validation changes)."""
    base = AIMessage(content="c", tool_calls=[{"name": "f", "args": {"a": 1}, "id": "t"}], id="a").model_dump()
    d = dict(base)
    how = rng.randrange(13)
    if how == 0:
        d.pop("name")
    elif how == 1:
        d["surprise"] = 1
    elif how == 2:
        d = dict(reversed(list(d.items())))
    elif how == 3:
        d["id"] = 12345
    elif how == 4:
        d["tool_calls"] = [{"name": "f", "args": {"a": 1}, "id": "t", "type": "tool_call", "extras": {"x": 1}}]
    elif how == 5:
        d["tool_calls"] = [{"args": {"a": 1}, "name": "f", "id": "t", "type": "tool_call"}]
    elif how == 6:
        d["tool_calls"] = [{"name": "f", "args": {1: "int key"}, "id": "t", "type": "tool_call"}]
    elif how == 7:
        d["content"] = ["ok", 5]
    elif how == 9:  # usage counts out of order
        d["usage_metadata"] = {"output_tokens": 2, "input_tokens": 1, "total_tokens": 3}
    elif how == 10:  # a bool and a float count (validation makes ints of them)
        d["usage_metadata"] = {"input_tokens": True, "output_tokens": 2.0, "total_tokens": 3}
    elif how == 11:  # a key of no TypedDict
        d["usage_metadata"] = {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3, "extra": 1}
    else:
        t = ToolMessage(content="r", tool_call_id="t").model_dump()
        t["tool_call_id"] = 42
        return ormsgpack.packb([ormsgpack.Ext(5, ormsgpack.packb(("langchain_core.messages.tool", "ToolMessage", t, "model_validate_json")))])
    inner = ormsgpack.packb(("langchain_core.messages.ai", "AIMessage", d, "model_validate_json"), option=ormsgpack.OPT_NON_STR_KEYS)
    return ormsgpack.packb([ormsgpack.Ext(5, inner)])


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict-allowlist"])
def test_items_decoded_by_the_saver_equal_the_serializers_for_every_message_shape(strict: bool) -> None:
    serde = JsonPlusSerializer(allowed_msgpack_modules=None) if strict else JsonPlusSerializer()
    saver = UndertextSaver.temporary(serde=serde)
    try:
        assert saver._plain_messages()
        rng = random.Random(19)
        built = 0
        for _ in range(60):
            items = [rand_message(rng) for _ in range(rng.randrange(1, 12))]
            datas = [serde.dumps_typed([x])[1] for x in items]
            datas += [crafted(rng) for _ in range(rng.randrange(3))]
            expected = [serde.loads_typed(("msgpack", d))[0] for d in datas]
            same(saver._decode_items(datas), expected)  # the batch (or its fallback)
            for d, e in zip(datas, expected):
                same(saver._decode_items([d]), [e])
                try:
                    got = _langchain_decode.decode(d)
                except _langchain_decode.NotPlain:
                    continue
                same(got, [e])
                built += 1
        assert built > 200, built  # most messages are built by the saver, not the serializer
    finally:
        saver.close()


def test_canonical_messages_are_built_without_the_serializer() -> None:
    serde = JsonPlusSerializer()
    msgs = [
        HumanMessage(content="fix the build", id="h"),
        SystemMessage(content=["a", {"type": "text", "text": "b"}], name="sys"),
        AIMessage(content="", tool_calls=[{"name": "read", "args": {"p": "ü"}, "id": "c1"}], id="a", response_metadata={"m": 1}),
        AIMessage(content="no tools", additional_kwargs={"refusal": None}),
        AIMessage(
            content="used",
            usage_metadata={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3, "input_token_details": {"cache_read": 1}},
        ),
        ToolMessage(content="x" * 1300, tool_call_id="c1", status="error", artifact={"k": [1, 2]}),
    ]
    for m in msgs:
        data = serde.dumps_typed([m])[1]
        same(_langchain_decode.decode(data), serde.loads_typed(("msgpack", data)))
        assert _langchain_decode.decode(data) == [m]
    for odd in (AIMessageChunk(content="c"), Custom(), datetime.date(2026, 1, 1)):
        with pytest.raises(_langchain_decode.NotPlain):
            _langchain_decode.decode(serde.dumps_typed([odd])[1])


def test_a_serializer_other_than_langgraphs_own_decodes_every_item() -> None:
    class Mine(JsonPlusSerializer):
        pass

    for serde in (Mine(), JsonPlusSerializer(__unpack_ext_hook__=lambda code, data: ("hooked", code))):
        saver = UndertextSaver.temporary(serde=serde)
        try:
            assert not saver._plain_messages()
            data = JsonPlusSerializer().dumps_typed([HumanMessage(content="hi", id="h")])[1]
            same(saver._decode_items([data, data]), [serde.loads_typed(("msgpack", data))[0]] * 2)
        finally:
            saver.close()


@pytest.mark.parametrize("item_lists", [True, False], ids=["item-lists", "whole-values"])
def test_a_read_after_reopen_decodes_messages_without_the_serializers_hook(tmp_path: Any, item_lists: bool) -> None:
    path = tmp_path / "store"
    msgs: list[Any] = [HumanMessage(content="start", id="h0")]
    with UndertextSaver.open(path, item_lists=item_lists) as saver:
        cfg: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        for i in range(40):
            msgs.append(AIMessage(content=f"step {i}", tool_calls=[{"name": "read", "args": {"i": i}, "id": f"c{i}"}], id=f"a{i}"))
            msgs.append(ToolMessage(content=f"result {i} ✓", tool_call_id=f"c{i}", id=f"t{i}"))
            cp = empty_checkpoint()
            cp["id"] = str(uuid6(clock_seq=-1))
            cp["channel_values"] = {"messages": list(msgs)}
            cp["channel_versions"] = {"messages": f"{i + 1:032}"}
            cfg = saver.put(cfg, cp, {"step": i}, {"messages": f"{i + 1:032}"})
        saver.put_writes(cfg, [("messages", [AIMessage(content="pending", id="p")])], "task-1")
    serde = JsonPlusSerializer()
    calls = []
    hook = serde._unpack_ext_hook

    def counting(code: int, data: bytes) -> Any:
        calls.append(code)
        return hook(code, data)

    serde._unpack_ext_hook = counting
    with UndertextSaver.open(path, serde=serde) as saver:
        got = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert got is not None
        plain = JsonPlusSerializer()
        same(got.checkpoint["channel_values"]["messages"], plain.loads_typed(plain.dumps_typed(msgs)))
        assert got.checkpoint["channel_values"]["messages"] == msgs
        assert got.pending_writes == [("task-1", "messages", [AIMessage(content="pending", id="p")])]
    assert calls == [], f"the serializer's hook ran {len(calls)} times"


def containers(x: Any, out: list[int]) -> list[int]:
    """The ids of every dict, list and set inside ``x`` (models' fields included)."""
    if isinstance(x, (dict, list, set)):
        out.append(id(x))
    if isinstance(x, dict):
        for v in x.values():
            containers(v, out)
    elif isinstance(x, list):
        for v in x:
            containers(v, out)
    elif isinstance(x, BaseModel):
        for v in (x.__dict__, x.__pydantic_extra__, x.__pydantic_fields_set__):
            if v is not None:
                containers(v, out)
    return out


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
def test_the_native_decoder_builds_what_the_python_path_builds_or_leaves_the_item_to_it() -> None:
    serde = JsonPlusSerializer()
    assert _langchain_decode.available() and _langchain_decode._native_decode is not None
    rng = random.Random(1919)
    native = 0
    for _ in range(60):
        items = [rand_message(rng) for _ in range(rng.randrange(1, 12))]
        datas = [serde.dumps_typed([x])[1] for x in items] + [crafted(rng) for _ in range(rng.randrange(3))]
        got = _langchain_decode._native_decode(datas, _langchain_decode._native_table(), _langchain_decode._usage_known, _langchain_decode.NOT_PLAIN)
        for d, g in zip(datas, got):
            if g is _langchain_decode.NOT_PLAIN:
                continue  # the Python path decides, as before
            native += 1
            same(g, _langchain_decode._decode_py(d))
            same(g, serde.loads_typed(("msgpack", d)))
    assert native > 200, native  # the native decoder builds most messages itself


def test_the_native_decoder_refuses_bad_or_trailing_msgpack_instead_of_guessing() -> None:
    good = JsonPlusSerializer().dumps_typed([HumanMessage(content="hi", id="h")])[1]
    table = _langchain_decode._native_table() if _langchain_decode.available() else []
    odd = [good + b"\xc0", good[:-1], b"\xc1", b"\x81\x01\x02", b"\x82\xa1a\x01\xa1a\x02", b"\xd4\x01\x00"]
    got = _langchain_decode._native_decode([good, *odd], table, _langchain_decode._usage_known, _langchain_decode.NOT_PLAIN)
    same(got[0], JsonPlusSerializer().loads_typed(("msgpack", good)))
    assert all(g is _langchain_decode.NOT_PLAIN for g in got[1:])


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
def test_native_copies_of_cached_items_equal_their_originals_and_share_no_container() -> None:
    serde = JsonPlusSerializer()
    rng = random.Random(7)
    items = [serde.loads_typed(serde.dumps_typed([rand_message(rng)]))[0] for _ in range(300)]
    copies = _caches._fresh_many(items)
    assert len(copies) == len(items)
    for original, copy in zip(items, copies):
        same(copy, original)
        same(copy, _caches._fresh(original))
        if not isinstance(original, (str, int, float, bool, bytes, type(None))):
            assert copy is not original
        assert not set(containers(copy, [])) & set(containers(original, []))


def test_the_native_calls_leave_the_garbage_collectors_switch_as_they_found_it() -> None:
    import gc

    seen: list[bool] = []

    class Noted:  # copied by the Python fallback, which runs with the collector as it was
        def __deepcopy__(self, memo: Any) -> Noted:
            seen.append(gc.isenabled())
            return Noted()

    data = JsonPlusSerializer().dumps_typed([AIMessage(content="a", id="a")])[1]
    was = gc.isenabled()
    try:
        for on in (True, False):
            (gc.enable if on else gc.disable)()
            n = _langchain_decode.NATIVE_MIN  # enough for the native calls
            _langchain_decode.decode_each([data] * n)
            _caches._fresh_many([AIMessage(content="a", id="a")] * n + [Noted()])
            assert gc.isenabled() is on
            assert seen == [on]
            seen.clear()
    finally:
        (gc.enable if was else gc.disable)()
