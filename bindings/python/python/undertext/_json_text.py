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

__all__ = ["json_text"]


def json_text(value: Any, *, allow_nan: bool = True) -> str:
    """``value`` as compact JSON, valid UTF-8 (``allow_nan=False``: ``ValueError`` for
    ``NaN`` and infinities, which JSON has no words for)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=allow_nan)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: keep it as a JSON escape
        text = json.dumps(value, separators=(",", ":"), allow_nan=allow_nan)
    return text
