"""LangChain messages decoded from LangGraph's msgpack without the serializer's per-message work.

LangGraph's ``JsonPlusSerializer`` stores a LangChain message (a pydantic v2 model) as a
msgpack extension: ``(module, class name, model_dump(), "model_validate_json")``. Loading
it imports the module by name and calls the class with the dumped fields, which runs
pydantic's validation and LangChain's ``mode="before"`` validators — about two thirds of
the time a saver spends reading a long thread after a reopen.

A dump of a validated message is already what validation would produce, for the shapes
checked here: ``decode`` builds such a message directly (the class resolved once, the
instance's pydantic state set as validation sets it), and raises ``NotPlain`` for
anything else (any other extension, a class not listed, a field set or a field value
validation could change), so that the caller decodes with the serializer instead. Only
classes in LangGraph's ``SAFE_MSGPACK_TYPES`` are listed: the serializer constructs them
under every allow-list setting, so no safety check is skipped. A class whose fields,
validators or configuration differ from what the checks assume (another
``langchain-core``) is not listed, and each listed class is checked once per process
against its own constructor before it is used.

Example::

    data = serde.dumps_typed([AIMessage(content="hi", id="a-1")])[1]
    assert decode(data) == serde.loads_typed(("msgpack", data))
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import ormsgpack

__all__ = ["NOT_PLAIN", "NotPlain", "available", "decode", "decode_each"]

#: LangGraph's extension code for a pydantic v2 model (``EXT_PYDANTIC_V2`` in jsonplus.py).
EXT_PYDANTIC_V2 = 5

_OPTION = ormsgpack.OPT_NON_STR_KEYS

#: The fields of a message, in declaration order (what ``model_dump`` writes).
_BASE = ("content", "additional_kwargs", "response_metadata", "type", "name", "id")

#: (module, class, fields in order, ``mode="before"`` validators, extra checks' kind)
_SPECS: tuple[tuple[str, str, tuple[str, ...], frozenset[str], str], ...] = (
    ("langchain_core.messages.human", "HumanMessage", _BASE, frozenset(), "human"),
    ("langchain_core.messages.system", "SystemMessage", _BASE, frozenset(), "system"),
    (
        "langchain_core.messages.ai",
        "AIMessage",
        _BASE + ("tool_calls", "invalid_tool_calls", "usage_metadata"),
        frozenset({"_backwards_compat_tool_calls"}),
        "ai",
    ),
    (
        "langchain_core.messages.tool",
        "ToolMessage",
        _BASE + ("tool_call_id", "artifact", "status"),
        frozenset({"coerce_args"}),
        "tool",
    ),
)

_TOOL_CALL_KEYS = ("name", "args", "id", "type")


class NotPlain(Exception):
    """The data holds something ``decode`` does not build itself: decode it with the
    serializer. Example: ``try: v = decode(b) except NotPlain: v = serde.loads_typed(...)``."""


_OPT_STR = frozenset((str, type(None)))
_BLOCK = frozenset((str, dict))
_STR = frozenset((str,))


def _opt_str(v: Any) -> bool:
    return type(v) in _OPT_STR


def _common(d: dict[str, Any], kind: str) -> bool:
    """The fields every message has, as validation leaves them (content a str or a list of
    str and dict blocks; dicts; the type's literal; optional strings)."""
    c = d["content"]
    return (
        (type(c) is str or (type(c) is list and {*map(type, c)} <= _BLOCK))
        and type(d["additional_kwargs"]) is dict
        and type(d["response_metadata"]) is dict
        and type(d["type"]) is str
        and d["type"] == kind
        and type(d["name"]) in _OPT_STR
        and type(d["id"]) in _OPT_STR
    )


def _tool_call(tc: Any) -> bool:
    """A tool call as ``create_tool_call`` makes it (validation rebuilds any other)."""
    return (
        type(tc) is dict
        and tuple(tc) == _TOOL_CALL_KEYS
        and type(tc["name"]) is str
        and type(tc["args"]) is dict
        and {*map(type, tc["args"])} <= _STR
        and type(tc["id"]) in _OPT_STR
        and tc["type"] == "tool_call"
    )


#: ``UsageMetadata``'s keys and its two details dicts' keys, in declaration order (pydantic
#: writes a validated TypedDict's declared keys in this order; an int stays an int).
_USAGE = ("input_tokens", "output_tokens", "total_tokens", "input_token_details", "output_token_details")
_USAGE_DETAILS = {
    "input_token_details": ("audio", "cache_creation", "cache_read"),
    "output_token_details": ("audio", "reasoning"),
}
_USAGE_CLASSES = {"UsageMetadata": _USAGE, "InputTokenDetails": _USAGE_DETAILS["input_token_details"],
                  "OutputTokenDetails": _USAGE_DETAILS["output_token_details"]}  # fmt: skip


def _ordered_ints(d: dict[str, Any], order: tuple[str, ...]) -> bool:
    """Keys in ``order``'s order (any subset), each an int (not a bool): what validating a
    ``total=False`` TypedDict of ints leaves unchanged."""
    at = 0
    for k, v in d.items():
        if type(v) is not int or k not in order[at:]:
            return False
        at = order.index(k, at) + 1
    return True


def _usage(u: Any) -> bool:
    """Usage metadata as validation leaves it: the three counts first, in order, then
    either details dict (in order), no other key, every count an int."""
    if type(u) is not dict:
        return False
    keys = tuple(u)
    if keys[:3] != _USAGE[:3] or not _ordered_ints({k: u[k] for k in keys[:3]}, _USAGE[:3]):
        return False
    rest = keys[3:]
    if rest and rest not in (_USAGE[3:4], _USAGE[4:5], _USAGE[3:5]):
        return False
    return all(type(u[k]) is dict and _ordered_ints(u[k], _USAGE_DETAILS[k]) for k in rest)


# Set by ``_load_table``: whether langchain-core's usage TypedDicts are the ones above.
_usage_known = False


def _ai(d: dict[str, Any]) -> bool:
    calls = d["tool_calls"]
    if type(calls) is not list or type(d["invalid_tool_calls"]) is not list or d["invalid_tool_calls"]:
        return False
    u = d["usage_metadata"]
    if u is not None and not (_usage_known and _usage(u)):
        return False
    # With no tool calls, validation parses ``additional_kwargs["tool_calls"]`` into them.
    if not calls:
        return not d["additional_kwargs"].get("tool_calls")
    for tc in calls:
        if not _tool_call(tc):
            return False
    return True


def _tool(d: dict[str, Any]) -> bool:
    return type(d["tool_call_id"]) is str and type(d["status"]) is str and d["status"] in ("success", "error")


_EXTRA: dict[str, Optional[Callable[[dict[str, Any]], bool]]] = {"human": None, "system": None, "ai": _ai, "tool": _tool}

# (module, class name) -> (class, fields, kind, its own check); None until first used.
_TABLE: Optional[dict[tuple[str, str], tuple[type, tuple[str, ...], str, Any]]] = None


def _build(cls: type, d: dict[str, Any]) -> Any:
    """The instance validation would make of the canonical fields ``d`` (every field given,
    in order; no extra): ``d`` is its ``__dict__`` and the set of fields given."""
    obj = cls.__new__(cls)  # type: ignore[call-overload]
    set_ = object.__setattr__
    set_(obj, "__dict__", d)
    set_(obj, "__pydantic_fields_set__", set(d))
    set_(obj, "__pydantic_extra__", {})
    set_(obj, "__pydantic_private__", None)
    return obj


def _same(a: Any, b: Any) -> bool:
    """Equal, with the same types, dict key orders and pydantic state."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if hasattr(a, "__pydantic_fields_set__"):
        return (
            _same(a.__dict__, b.__dict__)
            and a.__pydantic_fields_set__ == b.__pydantic_fields_set__
            and a.__pydantic_extra__ == b.__pydantic_extra__
            and a.__pydantic_private__ == b.__pydantic_private__
        )
    return bool(a == b)


def _sample(kind: str) -> dict[str, Any]:
    d: dict[str, Any] = {"content": "x", "id": "i"}
    if kind == "ai":
        d["tool_calls"] = [{"name": "f", "args": {"a": 1}, "id": "c"}]
        d["usage_metadata"] = {
            "input_tokens": 1,
            "output_tokens": 2,
            "total_tokens": 3,
            "input_token_details": {"audio": 0, "cache_read": 1},
            "output_token_details": {"reasoning": 2},
        }
    if kind == "tool":
        d["tool_call_id"] = "c"
    return d


def _load_table() -> dict[tuple[str, str], tuple[type, tuple[str, ...], str, Any]]:
    table: dict[tuple[str, str], tuple[type, tuple[str, ...], str, Any]] = {}
    try:
        import importlib

        from langgraph.checkpoint.serde import _msgpack as lg_msgpack
    except ImportError:  # pragma: no cover - another LangGraph: the serializer decodes
        return table
    safe: frozenset[tuple[str, ...]] = getattr(lg_msgpack, "SAFE_MSGPACK_TYPES", frozenset())
    global _usage_known
    try:
        ai = importlib.import_module("langchain_core.messages.ai")
        _usage_known = all(tuple(getattr(ai, n).__annotations__) == keys for n, keys in _USAGE_CLASSES.items())
    except Exception:  # pragma: no cover - another langchain-core: usage goes to the serializer
        _usage_known = False
    for module, name, fields, validators, kind in _SPECS:
        if (module, name) not in safe:
            continue
        try:
            cls = getattr(importlib.import_module(module), name)
            decorators = cls.__pydantic_decorators__
            if (
                tuple(cls.model_fields) != fields
                or cls.model_config.get("extra") != "allow"
                or cls.__private_attributes__
                or set(decorators.model_validators) != validators
                or decorators.field_validators
                or decorators.validators
                or decorators.root_validators
                or decorators.field_serializers
                or cls.__pydantic_post_init__ is not None
            ):
                continue
            # The check once per process: a message built here equals the constructor's.
            made = cls(**_sample(kind))
            dumped = made.model_dump()
            if not _same(cls(**made.model_dump()), _build(cls, dumped)) or not (
                _common(dumped, kind) and (_EXTRA[kind] is None or _EXTRA[kind](dumped))  # type: ignore[misc]
            ):
                continue
        except Exception:  # pragma: no cover - another langchain-core: the serializer decodes
            continue
        table[(module, name)] = (cls, fields, kind, _EXTRA[kind])
    return table


def _ext_hook(code: int, data: bytes) -> Any:
    if code != EXT_PYDANTIC_V2 or _TABLE is None:
        raise NotPlain
    tup = ormsgpack.unpackb(data, ext_hook=_ext_hook, option=_OPTION)
    if type(tup) is not list or len(tup) != 4 or type(tup[0]) is not str or type(tup[1]) is not str:
        raise NotPlain
    entry = _TABLE.get((tup[0], tup[1]))
    if entry is None:
        raise NotPlain
    cls, fields, kind, extra = entry
    d = tup[2]
    if type(d) is not dict or tuple(d) != fields or not _common(d, kind) or (extra is not None and not extra(d)):
        raise NotPlain
    obj = cls.__new__(cls)  # type: ignore[call-overload]  # as ``_build``, inline: once per message
    _set(obj, "__dict__", d)
    _set(obj, "__pydantic_fields_set__", set(d))
    _set(obj, "__pydantic_extra__", {})
    _set(obj, "__pydantic_private__", None)
    return obj


_set = object.__setattr__


def available() -> bool:
    """Whether this process can decode messages here (LangGraph and langchain-core as
    checked); ``decode`` raises ``NotPlain`` on every message otherwise.
    Example: ``if available(): ...``."""
    global _TABLE
    if _TABLE is None:
        _TABLE = _load_table()
    return bool(_TABLE)


def _decode_py(data: bytes) -> Any:
    try:
        return ormsgpack.unpackb(data, ext_hook=_ext_hook, option=_OPTION)
    except Exception as e:  # ours, wrapped by ormsgpack, or bad data: the serializer's say
        raise NotPlain from e


def decode(data: bytes) -> Any:
    """The value of msgpack ``data`` as ``JsonPlusSerializer.loads_typed(("msgpack", data))``
    gives it, or ``NotPlain`` when it holds an extension other than a listed message in
    canonical form. Example: ``decode(serde.dumps_typed([msg])[1])``."""
    if not available():
        raise NotPlain
    # One document: the Python path (a native call's set-up costs more than it saves on
    # one message; ``decode_each`` takes the native path for many).
    return _decode_py(data)


#: Documents from which ``decode_each`` calls the native decoder: its set-up per call
#: (~10 us: the class table, interned names, the GC switch) costs more than it saves on
#: fewer (1 message: 30 us native vs 17 us in Python, measured 2026-12-02).
NATIVE_MIN = 8

#: What ``decode_each`` gives for a document it leaves to the serializer.
NOT_PLAIN: Any = object()

_native_decode: Optional[Callable[..., list[Any]]]
try:  # the same decoding in native code (``bindings/python/src/langchain_decode.rs``)
    from undertext._native import _decode_lc_messages

    _native_decode = _decode_lc_messages
except ImportError:  # pragma: no cover - an extension built before it
    _native_decode = None

_NATIVE_TABLE: Optional[list[tuple[str, str, type, tuple[str, ...], str]]] = None


def _native_table() -> list[tuple[str, str, type, tuple[str, ...], str]]:
    global _NATIVE_TABLE
    if _NATIVE_TABLE is None:
        assert _TABLE is not None
        _NATIVE_TABLE = [(m, n, cls, fields, kind) for (m, n), (cls, fields, kind, _x) in _TABLE.items()]
    return _NATIVE_TABLE


def decode_each(datas: list[bytes]) -> list[Any]:
    """``decode`` of each document of ``datas``, ``NOT_PLAIN`` for each one it refuses (one
    native call for all of them; those the native decoder leaves go through the Python path,
    which decides as before). Example: ``decode_each([b1, b2])``."""
    if not available():
        return [NOT_PLAIN] * len(datas)
    if _native_decode is not None and len(datas) >= NATIVE_MIN:
        out: list[Any] = _native_decode(datas, _native_table(), _usage_known, NOT_PLAIN)
    else:  # a few documents, or an extension built before the native decoder
        out = [NOT_PLAIN] * len(datas)
    for i, got in enumerate(out):
        if got is NOT_PLAIN:
            try:
                out[i] = _decode_py(datas[i])
            except NotPlain:
                pass
    return out
