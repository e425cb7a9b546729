"""What a LangGraph store search or namespace listing keeps: value filters and namespace
conditions, with the semantics of LangGraph's ``InMemoryStore`` (the reference the other
stores follow), plus dotted paths as the SQLite and Postgres stores read them.

A filter maps a field to a condition:

* a field is a top-level key of the value, or, when the value has no such key, a dotted
  path into nested objects (``"user.level"`` reads ``value["user"]["level"]``); a field the
  value lacks reads as ``None`` (so ``{"x": None}`` keeps values without ``x``);
* a condition is a value compared for equality (an object compares as a subset: each of
  its keys, recursively; a list element by element, same length; ``True`` is not ``1``),
  or an object of operators, all of which must hold: ``$eq``, ``$ne``, ``$gt``, ``$gte``,
  ``$lt``, ``$lte`` (the order ones compare two numbers, or two strings; anything else,
  ``NaN`` included, does not match).

An operator not listed raises ``ValueError`` when the filter is compiled, before anything
is read or written.

Example::

    keep = compile_filter({"score": {"$gte": 4}, "user.level": "gold"})
    assert keep({"score": 5, "user": {"level": "gold"}})
    assert namespace_matches(("users", "a", "prefs"), [("prefix", ("users", "*"))])
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Optional

__all__ = ["compile_filter", "namespace_matches"]

_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}
_OPERATORS = ("$eq", "$ne", *_ORDER)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _equal(found: Any, want: Any) -> bool:
    if isinstance(want, Mapping):
        return isinstance(found, Mapping) and all(_equal(found.get(k), v) for k, v in want.items())
    if isinstance(want, (list, tuple)):
        return (
            isinstance(found, (list, tuple))
            and len(found) == len(want)
            and all(_equal(f, w) for f, w in zip(found, want))
        )
    if isinstance(want, bool) or isinstance(found, bool):
        return type(found) is type(want) and found == want
    return bool(found == want)


def _ordered(op: str, found: Any, want: Any) -> bool:
    if (_is_number(found) and _is_number(want)) or (isinstance(found, str) and isinstance(want, str)):
        return _ORDER[op](found, want)
    return False


def _condition(field: str, cond: Any) -> Callable[[Any], bool]:
    if isinstance(cond, Mapping) and any(str(k).startswith("$") for k in cond):
        bad = [k for k in cond if k not in _OPERATORS]
        if bad:
            raise ValueError(
                f"filter {field!r}: unsupported operator {bad[0]!r} (supported: {', '.join(_OPERATORS)})"
            )
        checks = [(op, want) for op, want in cond.items()]

        def check(found: Any) -> bool:
            for op, want in checks:
                if op == "$eq":
                    ok = _equal(found, want)
                elif op == "$ne":
                    ok = not _equal(found, want)
                else:
                    ok = _ordered(op, found, want)
                if not ok:
                    return False
            return True

        return check
    return lambda found: _equal(found, cond)


def _reader(field: str) -> Callable[[Mapping[str, Any]], Any]:
    path = field.split(".")

    def read(value: Mapping[str, Any]) -> Any:
        if field in value:
            return value[field]
        node: Any = value
        for part in path:
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
        return node

    return read


def compile_filter(filter: Optional[Mapping[str, Any]]) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate over item values keeping those ``filter`` keeps (every value when it is
    empty or None); ``ValueError`` for an unsupported operator."""
    if not filter:
        return lambda value: True
    parts = [(_reader(str(field)), _condition(str(field), cond)) for field, cond in filter.items()]
    return lambda value: all(check(read(value)) for read, check in parts)


def _aligned(labels: Sequence[str], path: Sequence[str]) -> bool:
    return all(p == "*" or p == label for label, p in zip(labels, path))


def namespace_matches(namespace: tuple[str, ...], conditions: Sequence[tuple[str, Sequence[str]]]) -> bool:
    """Whether ``namespace`` meets every ``(match_type, path)`` condition: ``"prefix"``
    (its first labels are ``path``'s) or ``"suffix"`` (its last ones); ``"*"`` in ``path``
    stands for any one label."""
    for match_type, path in conditions:
        if len(path) > len(namespace):
            return False
        if match_type == "prefix":
            if not _aligned(namespace[: len(path)], path):
                return False
        elif match_type == "suffix":
            if not _aligned(namespace[len(namespace) - len(path) :], path):
                return False
        else:
            raise ValueError(f"match type {match_type!r}: expected 'prefix' or 'suffix'")
    return True
