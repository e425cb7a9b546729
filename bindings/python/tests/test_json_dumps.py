"""_native.json_dumps and _native._json_exact: the LangGraph saver's record text and its
check of what JSON holds exactly, native, giving what json.dumps and the Python check give
for every value (the text, the answer, or the same error)."""

from __future__ import annotations

import enum
import json
import random
from typing import Any

import pytest

from undertext._native import _json_exact, json_dumps
from undertext.langgraph._records import _dumps_py, _json_exact_py


class Color(str, enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


def random_value(rng: random.Random, depth: int = 0) -> Any:
    """A value of the kinds a checkpoint's fields and metadata hold, and of those they may."""
    k = rng.randint(0, 12 if depth < 4 else 7)
    if k == 0:
        return None
    if k == 1:
        return rng.random() < 0.5
    if k == 2:
        return rng.choice([rng.randint(-1000, 1000), rng.randint(-(2**63), 2**63 - 1), rng.randint(-(2**80), 2**80)])
    if k == 3:
        return rng.choice(
            [rng.random() * 10 ** rng.randint(-300, 300), float("nan"), float("inf"), -0.0, 1e16, 1.0, 0.1]
        )
    if k in (4, 5):
        return "".join(
            chr(rng.choice([rng.randint(0, 0x7F), rng.randint(0x80, 0xD7FF), rng.randint(0x10000, 0x10FFFF)]))
            for _ in range(rng.randint(0, 30))
        )
    if k == 6:
        return rng.choice([Color.RED, Level.HIGH, b"x", "\ud800"])  # a subclass, bytes, a lone surrogate
    if k == 7:
        return rng.choice([2**63, -(2**63), 2**64, True, False])
    if k in (8, 9):
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    if k == 10:
        return tuple(random_value(rng, depth + 1) for _ in range(rng.randint(0, 3)))
    keys: list[Any] = [str(rng.randint(0, 5)) for _ in range(rng.randint(0, 5))]
    if rng.random() < 0.1:
        keys.append(rng.choice([1, 2.5, None, True, Color.RED]))
    return {key: random_value(rng, depth + 1) for key in keys}


def outcome(f: Any, x: Any) -> Any:
    try:
        return ("ok", f(x))
    except Exception as e:  # noqa: BLE001 - the error is what is compared
        return ("error", type(e), str(e))


def test_json_dumps_gives_the_text_or_the_error_json_dumps_gives_for_every_value() -> None:
    rng = random.Random(11)
    values = [random_value(rng) for _ in range(3000)]
    cyclic: list[Any] = [1]
    cyclic.append(cyclic)
    deep: Any = []
    for _ in range(300):
        deep = [deep]
    values += [
        {},
        [],
        "",
        '"\\/\b\f\n\r\t\x00\x1f\x7f\x80\u2028\uffff',
        "\U0001f600",
        {"k": "C", "id": "1ef-…", "ch": {"messages": {"b": 3, "i": [0, 1], "d": 2}}},
        cyclic,
        deep,
        {"a": object()},
        float("-inf"),
        2**1000,
        [1.5e-323, 5e-324, 1.7976931348623157e308, 123456789.0, 1e22, 1e-7],
    ]
    for v in values:
        native, python = outcome(json_dumps, v), outcome(_dumps_py, v)
        assert native == python, v


def test_json_exact_answers_as_the_python_check_and_says_what_json_gives_back() -> None:
    rng = random.Random(12)
    for _ in range(3000):
        v = random_value(rng)
        exact = _json_exact(v)
        assert exact == _json_exact_py(v), v
        if exact:  # what it calls exact comes back from JSON equal, types and all
            back = json.loads(json.dumps(v))
            assert back == v and repr(back) == repr(v), v
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    assert _json_exact(deep) is False  # too deep: the serializer stores it (the Python check recurses out)
    with pytest.raises(RecursionError):
        _json_exact_py(deep)


def test_json_dumps_without_ascii_escapes_and_without_nan_gives_what_json_dumps_gives() -> None:
    rng = random.Random(13)
    values = [random_value(rng) for _ in range(2000)]
    values += ["é\x7f\x1f\u2028\U0001f600", {"é": ["\ud800"]}, float("nan"), [float("inf")]]
    for v in values:
        for ensure_ascii in (True, False):
            for allow_nan in (True, False):

                def python(x: Any) -> str:
                    return json.dumps(x, separators=(",", ":"), ensure_ascii=ensure_ascii, allow_nan=allow_nan)

                def native(x: Any) -> str:
                    return json_dumps(x, ensure_ascii=ensure_ascii, allow_nan=allow_nan)

                assert outcome(native, v) == outcome(python, v), (v, ensure_ascii, allow_nan)


def test_json_text_is_valid_utf8_compact_json_of_the_value() -> None:
    from undertext._json_text import json_text

    rng = random.Random(14)
    for _ in range(2000):
        v = random_value(rng)
        try:
            text = json_text(v)
        except (TypeError, ValueError):
            continue
        text.encode("utf-8")  # a lone surrogate is kept as an escape
        assert repr(json.loads(text)) == repr(json.loads(json.dumps(v))), v


def mutated(rng: random.Random, a: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    """``a`` changed as a checkpoint's fields change from a parent to its child: values
    changed (to an equal value of another type, too), keys removed, added, reordered, nested
    dicts changed in turn."""
    out: dict[str, Any] = {}
    for k, v in a.items():
        r = rng.random()
        if r < 0.1:
            continue  # removed
        if r < 0.2 and type(v) is dict and depth < 3:
            out[k] = mutated(rng, v, depth + 1)
        elif r < 0.3:
            out[k] = random_value(rng, depth + 1)
        elif r < 0.35 and type(v) in (int, bool) and abs(v) < 2**53:
            out[k] = float(v)  # equal (1 == 1.0 == True), another text
        else:
            out[k] = v
    for _ in range(rng.randint(0, 2)):
        out[str(rng.randint(0, 9))] = random_value(rng, depth + 1)
    if rng.random() < 0.1:  # the same keys in another order
        keys = list(out)
        rng.shuffle(keys)
        out = {k: out[k] for k in keys}
    return out


def written_natively(x: Any) -> bool:
    """Whether ``json_dumps`` writes ``x`` itself (else it hands it to ``json.dumps``)."""
    t = type(x)
    if x is None or t is bool:
        return True
    if t is str:
        return not any(0xD800 <= ord(c) <= 0xDFFF for c in x)
    if t is int:
        return -(2**63) <= x < 2**63
    if t is float:
        return x == x and abs(x) != float("inf")
    if t in (list, tuple):
        return all(written_natively(v) for v in x)
    if t is dict:
        return all(type(k) is str and written_natively(k) and written_natively(v) for k, v in x.items())
    return False


def plain_value(rng: random.Random) -> Any:
    """A random value the native writer writes itself (most of a checkpoint's fields)."""
    while True:
        v = random_value(rng, 1)
        if written_natively(v):
            return v


def test_the_native_checkpoint_patch_is_the_python_one_or_none_alike() -> None:
    from undertext._native import _json_patch
    from undertext.langgraph._records import _patch_exact_py

    rng = random.Random(15)
    seen = {"patch": 0, "none": 0}
    for _ in range(3000):
        a = {str(i): plain_value(rng) for i in range(rng.randint(0, 8))}
        if rng.random() < 0.5:
            a["vs"] = {f"node{i}": {"x": f"{i:032}.0"} for i in range(rng.randint(0, 4))}
        b = mutated(rng, a)
        native = _json_patch(a, b)
        try:
            python = _patch_exact_py(a, b)
        except (TypeError, ValueError):  # not JSON (bytes, a cycle): json.dumps refuses
            assert native is None and not (written_natively(a) and written_natively(b)), (a, b)
            continue
        if native is None and python is not None:
            # Only for what the native writer leaves to json.dumps (the saver then stores
            # the fields whole); its checkpoints' fields are plain JSON.
            assert not (written_natively(a) and written_natively(b)), (a, b)
            continue
        assert (native is None) == (python is None), (a, b)
        if native is not None:
            assert json.dumps(native) == json.dumps(python), (a, b)  # the same patch, key order too
            seen["patch"] += 1
        else:
            seen["none"] += 1
    assert seen["patch"] > 1000 and seen["none"] > 100, seen
