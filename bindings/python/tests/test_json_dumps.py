"""_native.json_dumps: the compact JSON text the adapters store (the LangGraph saver's
records, ``json_text`` for the other adapters), native, giving what json.dumps gives for
every value — the text, or the same error — whatever ``ensure_ascii`` and ``allow_nan``."""

from __future__ import annotations

import json
import random
from typing import Any

from json_values import outcome, random_value

from undertext._native import json_dumps


def compact(x: Any) -> str:
    return json.dumps(x, separators=(",", ":"))


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
        native, python = outcome(json_dumps, v), outcome(compact, v)
        assert native == python, v


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
