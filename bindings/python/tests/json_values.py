"""Random values for the JSON tests (``test_json_dumps.py``, and the LangGraph saver's
checks in ``test_langgraph_format.py``): the kinds a checkpoint's fields and metadata hold, and
those JSON cannot hold exactly (subclasses, tuples, bytes, big ints, NaN, lone surrogates).

Example: ``v = random_value(random.Random(1))``.
"""

from __future__ import annotations

import enum
import random
from typing import Any


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
