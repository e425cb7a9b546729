"""Snapshot.texts and _native.json_loads: the texts (or JSON values) of live messages read
without Message objects, equal to what Message.text and json.loads give."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

import undertext
from undertext._native import json_loads


@pytest.fixture
def chat(tmp_path: Path) -> Any:
    with undertext.Store.open(tmp_path / "store") as s:
        yield s.create_chat("o", title="t")


def test_texts_are_the_seqs_and_texts_of_the_live_messages_in_either_direction(chat: Any) -> None:
    chat.append_batch([{"role": "user", "content": json.dumps({"n": i})} for i in range(300)])
    chat.hide([(10, 20), (295, 297)], chat.revision)
    snap = chat.snapshot()
    want = [(m.seq, m.text) for m in snap.messages()]
    assert snap.texts() == want
    assert snap.texts(reverse=True) == want[::-1]
    assert snap.texts(5, 25) == [(s, t) for s, t in want if 5 <= s < 25]
    assert snap.texts(reverse=True, limit=5) == want[::-1][:5]
    assert snap.texts(0, 21, reverse=True, limit=3) == [(20, want[10][1]), (9, want[9][1]), (8, want[8][1])]
    assert snap.texts(limit=0) == []
    assert snap.texts(json=True, reverse=True, limit=2) == [(299, {"n": 299}), (298, {"n": 298})]
    with pytest.raises(undertext.InvalidArgument):
        snap.texts(5, 4)


def test_a_message_without_a_text_part_has_none(chat: Any) -> None:
    chat.append({"role": "user", "content": "go"})
    chat.append({"role": "assistant", "parts": [{"type": "tool_call", "id": "c", "name": "sh", "args": "{}"}]})
    chat.append({"role": "assistant", "parts": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})
    assert chat.snapshot().texts() == [(0, "go"), (1, None), (2, "ab")]


def test_json_values_are_what_json_loads_gives_and_its_errors_too(chat: Any) -> None:
    rng = random.Random(3)

    def value(depth: int = 0) -> Any:
        k = rng.randint(0, 9 if depth < 4 else 5)
        if k == 0:
            return None
        if k == 1:
            return rng.random() < 0.5
        if k == 2:
            return rng.choice([rng.randint(-1000, 1000), rng.randint(-(2**80), 2**80)])
        if k == 3:
            return rng.choice([rng.random() * 10 ** rng.randint(-300, 300), float("nan"), float("inf"), -0.0])
        if k in (4, 5):
            return "".join(chr(rng.choice([rng.randint(0, 0x7F), rng.randint(0x80, 0xD7FF), rng.randint(0x10000, 0x10FFFF)])) for _ in range(rng.randint(0, 30)))
        if k in (6, 7):
            return [value(depth + 1) for _ in range(rng.randint(0, 5))]
        return {str(rng.randint(0, 5)): value(depth + 1) for _ in range(rng.randint(0, 5))}

    texts = [json.dumps(value(), ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1])) for _ in range(2000)]
    texts += ['{"a": 1, "a": 2}', " [1, 2] ", '"\\ud800"', '"\\ud83d\\ude00"', "[" * 150 + "]" * 150, "[" * 500 + "]" * 500, "1e400"]
    chat.append_batch([{"role": "user", "content": t} for t in texts])
    got = [v for _s, v in chat.snapshot().texts(json=True)]
    want = [json.loads(t) for t in texts]
    assert repr(got) == repr(want)
    assert repr(json_loads(texts)) == repr(want)
    assert repr(json_loads(["\"\\ud800\"", "[\"\ud800\"]"])) == repr(["\ud800", ["\ud800"]])
    for bad in ["", "{", "[1,]", '{"a" 1}', "01", "NaNa", '"\t"', '"\\x"', "[1] x"]:
        with pytest.raises(json.JSONDecodeError) as native:
            json_loads([bad])
        with pytest.raises(json.JSONDecodeError) as python:
            json.loads(bad)
        assert str(native.value) == str(python.value)
    with pytest.raises(TypeError):
        json_loads([b"[]"])  # type: ignore[list-item]
