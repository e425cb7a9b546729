"""Compact JSON text the engine can store.

The engine takes text as UTF-8, which cannot hold a lone surrogate (``"\\ud800"``): JSON of a
value holding one is written with ASCII escapes instead, which any JSON reader turns back
into the same string. Everything else stays readable (no ``\\uXXXX`` for non-ASCII text).

Example::

    assert json_text({"a": "é"}) == '{"a":"é"}'
    assert json.loads(json_text({"a": "\\ud800"})) == {"a": "\\ud800"}
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["json_ascii", "json_text"]


def _dumps_py(value: Any, *, ensure_ascii: bool = True, allow_nan: bool = True) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, separators=(",", ":"), allow_nan=allow_nan)


try:  # the same text, encoded natively (``bindings/python/src/json/dump.rs``)
    from undertext._native import json_dumps as _dumps
except ImportError:  # pragma: no cover - an extension built before it
    _dumps = _dumps_py


def json_text(value: Any, *, allow_nan: bool = True) -> str:
    """``value`` as compact JSON, valid UTF-8 (``allow_nan=False``: ``ValueError`` for
    ``NaN`` and infinities, which JSON has no words for)."""
    text = _dumps(value, ensure_ascii=False, allow_nan=allow_nan)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: keep it as a JSON escape
        text = _dumps(value, allow_nan=allow_nan)
    return text


def json_ascii(value: Any) -> str:
    """``value`` as compact JSON in ASCII: ``json.dumps(value, separators=(",", ":"))``'s text."""
    return _dumps(value)
