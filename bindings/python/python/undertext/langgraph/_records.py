"""The saver's records: both stored formats (``FORMAT.md`` in this folder specifies them)
and the one in-memory shape they decode to.

A record is one engine message: compact JSON naming the value blobs (``_message`` writes
it, ``_decode`` reads either format), with one attachment part per blob it stores. Besides
the encoding, the pieces of the format a writer decides: which list values are item lists
(``_is_item_list``), an item list's link to its parent's (``_link``: a manifest every
``SNAPSHOT_LINKS`` links), a checkpoint stored as a patch of its parent's (``_delta``, at
most ``PATCH_LINKS`` in a row) and the early writes a record carries (``_early_of``).
"""

from __future__ import annotations

import base64
import json
import math
import operator
from collections.abc import Sequence
from typing import Any, Callable, Optional

import undertext
from undertext._json_text import json_ascii as _dumps

#: Links of an item list's chain (records naming their parent's list) after which a put
#: stores the kept list as a manifest blob instead (its items' ids, 32 bytes each), so a
#: read after a reopen walks at most this many records down (and the write records between
#: them). 256 until issue 19's cold read: a reopened read of the 1,000-pair graph walked
#: 208 links, ~420 records, 6.7 ms of 110; 64 (with ``MANIFEST_CHAIN`` 32) walks at most
#: 63, for +1.2 % of disk at 1,000 pairs (+0.5 % at 300).
SNAPSHOT_LINKS = 64

#: Delta manifests in a chain (see FORMAT.md) before a put stores a whole one
#: again. Without deltas every manifest repeated the ids of the one before: at 1,000 pairs
#: of a real graph (2,001 items) 7 manifests took 229 KB, 0.17x the conversation's text.
#: (A whole manifest every 2,048 links, as with 16 links of 128.)
MANIFEST_CHAIN = 32

#: Checkpoint records stored as a patch of their parent's (``cd``) in a row, after which a
#: put stores the checkpoint and metadata whole again, so a read after a reopen resolves at
#: most this many records down (they are the newest ones, read in one batch).
PATCH_LINKS = 16

#: Bytes of a serialized channel value kept in the record instead of its blob. A
#: serialized collection starts with its length (msgpack's array and map headers), which
#: changes at every step of a growing list; kept out of the blob, the blob of the next
#: version starts with the same bytes, so the engine's content-defined chunks of the
#: unchanged front are shared and only the new end is written.
HEAD_LEN = 8

#: MIME type of the attachment parts naming the value blobs a record stores (format 2;
#: format 1 used ``"application/x-undertext-langgraph-value"``). Readers do not look at it.
VALUE_MIME = "lg"

#: The serializer type a format-2 entry leaves out.
_DEFAULT_TYPE = "msgpack"

#: The id of the empty blob (BLAKE3 of no bytes): the rest of a value that fits in its head,
#: such as ``None`` on every ``branch:to:`` channel. Named ``""`` in a record, never stored
#: or attached, read without the store: ~36 bytes less per record (an attachment part).
EMPTY_BLOB = undertext.blob_id(b"")

#: What the saver's reads of its own blobs check: each record's CRC-32C and the id it
#: carries, not the content's BLAKE3 again (a cold read of a 300-pair thread hashes ~600
#: item blobs: a quarter of ``get_blobs``). A flipped bit on disk still raises ``Corrupt``;
#: blobs pulled from a fleet's server are hashed when they arrive.
VERIFY = "checksum"

#: Short JSON keys of the checkpoint fields (format 2, ``c``). Other fields keep their name.
_CP_KEYS = {
    "v": "v",
    "ts": "t",
    "channel_versions": "cv",
    "versions_seen": "vs",
    "pending_sends": "ps",
    "updated_channels": "u",
}
_CP_LONG = {short: long for long, short in _CP_KEYS.items()}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


def _json_exact_py(x: Any) -> bool:
    """True when ``json.loads(json.dumps(x))`` gives back ``x`` with the same types:
    str, int, bool, None, finite floats, lists and str-keyed dicts of those. Tuples,
    subclasses (an enum over str, say) and everything else go through the serializer."""
    t = type(x)
    if t is str or t is int or t is bool or x is None:
        return True
    if t is float:
        return math.isfinite(x)
    if t is list:
        return all(_json_exact_py(v) for v in x)
    if t is dict:
        return all(type(k) is str and _json_exact_py(v) for k, v in x.items())
    return False


_CONTAINERS = frozenset((dict, list))


def _jcopy(x: Any) -> Any:
    """A copy of JSON data (dicts and lists copied, leaves shared: they are immutable)."""
    t = type(x)
    if t is dict:
        return {k: _jcopy(v) if type(v) in _CONTAINERS else v for k, v in x.items()}
    if t is list:
        return [_jcopy(v) if type(v) in _CONTAINERS else v for v in x]
    return x


try:  # the same answer, natively (``bindings/python/src/json/dump.rs``)
    from undertext._native import _json_exact
except ImportError:  # pragma: no cover - an extension built before it
    _json_exact = _json_exact_py


def _patch(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What turns JSON dict ``a`` into ``b``: ``s`` the keys set (new or changed), ``x``
    the keys removed, ``n`` patches of the keys whose values are dicts in both (each
    member only when not empty). ``_apply(a, _patch(a, b))`` equals ``b``; its key order
    and value types are checked by the caller (``_delta``)."""
    s: dict[str, Any] = {}
    n: dict[str, Any] = {}
    for k, v in b.items():
        if k in a:
            old = a[k]
            if old == v:
                continue
            if type(old) is dict and type(v) is dict:
                n[k] = _patch(old, v)
                continue
        s[k] = v
    out: dict[str, Any] = {}
    if s:
        out["s"] = s
    x = [k for k in a if k not in b]
    if x:
        out["x"] = x
    if n:
        out["n"] = n
    return out


def _apply(a: dict[str, Any], p: dict[str, Any]) -> dict[str, Any]:
    """``a`` patched by ``p`` (``_patch``); unchanged values are shared with ``a`` (records
    are never changed in place)."""
    if not p:
        return a
    x = p.get("x", ())
    out = {k: v for k, v in a.items() if k not in x} if x else dict(a)
    for k, sub in p.get("n", {}).items():
        out[k] = _apply(out[k], sub)
    out.update(p.get("s", {}))
    return out


def _patch_exact_py(a: dict[str, Any], b: dict[str, Any]) -> Optional[dict[str, Any]]:
    """``_patch(a, b)``, or None when ``_apply(a, patch)`` does not give ``b``'s JSON text
    exactly (key order, 1 vs 1.0 vs true)."""
    p = _patch(a, b)
    return p if _dumps(_apply(a, p)) == _dumps(b) else None


try:  # the same answer, natively (``bindings/python/src/json/patch.rs``)
    from undertext._native import _json_patch as _patch_exact
except ImportError:  # pragma: no cover - an extension built before it
    _patch_exact = _patch_exact_py


def _delta(base_seq: int, base: dict[str, Any], rec: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The ``cd`` entry storing checkpoint record ``rec``'s checkpoint and metadata as
    patches of its parent's (``base``, at seq ``base_seq``), or None to store them
    whole: a field not plain JSON on either side, a chain of ``PATCH_LINKS``, or a patch
    that does not give back the same JSON text (key order, 1 vs 1.0 vs true)."""
    if "c" not in rec or "m" not in rec or "c" not in base or "m" not in base:
        return None
    depth = base.get("_d", 0) + 1
    if depth >= PATCH_LINKS:
        return None
    pc = _patch_exact(base["c"], rec["c"])
    pm = _patch_exact(base["m"], rec["m"]) if pc is not None else None
    if pc is None or pm is None:
        return None
    out: dict[str, Any] = {"b": base_seq, "d": depth}
    if pc:
        out["c"] = pc
    if pm:
        out["m"] = pm
    return out


# -- item lists: a list value stored one blob per item -----------------------------------

#: Item types that make a list a plain list of scalars (stored whole, not item by item).
_SCALARS = frozenset((str, int, float, bool, type(None), bytes))


def _link(
    base_seq: Optional[int],
    base: dict[str, Any],
    kept: Sequence[str],
    new_ids: list[str],
    cut: bool,
    prior: Optional[Callable[[], Optional[tuple[list[str], Sequence[str]]]]] = None,
) -> tuple[dict[str, Any], Optional[bytes]]:
    """The entry of a list that keeps ``kept`` (the first items of the list of ``base``,
    the entry at record ``base_seq``; ``cut``: not all of them) and adds ``new_ids``, and
    the manifest blob to store with it when the chain of links reaches
    ``SNAPSHOT_LINKS``: then the entry names the kept ids in that blob instead, as a delta
    over the newest manifest below (``prior()``: its chain of blobs and the ids it gives)
    while that chain is shorter than ``MANIFEST_CHAIN``, else whole."""
    depth = base.get("d", 0) + 1
    if depth >= SNAPSHOT_LINKS:
        before = prior() if prior is not None else None
        if before is not None and len(before[0]) <= MANIFEST_CHAIN:
            chain, ids = before
            j, m = 0, min(len(ids), len(kept))
            while j < m and ids[j] == kept[j]:
                j += 1
            snap = j.to_bytes(4, "little") + b"".join([bytes.fromhex(x) for x in kept[j:]])
            return {"m": undertext.blob_id(snap), "mb": list(chain), "i": new_ids}, snap
        snap = b"".join([bytes.fromhex(x) for x in kept])
        return {"m": undertext.blob_id(snap), "i": new_ids}, snap
    entry: dict[str, Any] = {"b": base_seq, "i": new_ids, "d": depth}
    if cut:
        entry["k"] = len(kept)
    return entry, None


def _is_item_list(value: Any) -> bool:
    """A list stored item by item: a ``list`` of at least one item, none of them a scalar
    (messages, dicts, ...). A list of scalars is stored whole."""
    return type(value) is list and len(value) > 0 and not any(type(x) in _SCALARS for x in value)


def _at_snapshot(entry: dict[str, Any]) -> bool:
    """Whether a link to the item list ``entry`` reaches ``SNAPSHOT_LINKS`` (``_link`` then
    stores the kept list as a manifest blob)."""
    return bool(entry.get("d", 0) + 1 >= SNAPSHOT_LINKS)


# -- records: the in-memory shape, and both stored formats -------------------------------
#
# In memory, whatever the stored format:
#   checkpoint {"k": "c", "id", "mx", "p", "c" or "cp", "m" or "md",
#               "ch": {channel: [type, blob id, head base64]}, "pw"?: [[seq, writes]]}
#   writes     {"k": "w", "c", "t", "tp", "w": [[idx, channel, type, blob id], ...]}
#   tombstone  {"k": "d", "s"}; floor {"k": "x", "f"}


def _blobs_of(rec: dict[str, Any]) -> list[str]:
    """The value blobs a record refers to, each once."""
    ids: list[str] = []
    if rec["k"] == "c":
        for e in rec["ch"].values():
            if type(e) is dict:
                if "m" in e:
                    ids.extend(e.get("mb", ()))
                    ids.append(e["m"])
                ids.extend(e.get("i", ()))
            else:
                ids.append(e[1])
        for pw in rec.get("pw", ()):
            if type(pw) is not int:  # a reference names a write record, which attaches its own
                ids.extend(e[3] for e in pw[1]["w"])
    elif rec["k"] == "w":
        ids.extend(e[3] for e in rec["w"])
    return list(dict.fromkeys(ids))


def _writes_out(rec: dict[str, Any], ref: Callable[[str], Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"k": "W", "c": rec["c"], "t": rec["t"]}
    if rec["tp"]:
        out["tp"] = rec["tp"]
    out["w"] = [[i, ch, ref(b)] if typ == _DEFAULT_TYPE else [i, ch, ref(b), typ] for i, ch, typ, b in rec["w"]]
    return out


def _stored(rec: dict[str, Any], attach: Sequence[str]) -> dict[str, Any]:
    """A record in format 2, blobs in ``attach`` named by their index there."""
    index = {b: i for i, b in enumerate(attach)}

    def ref(blob: str) -> Any:
        return "" if blob == EMPTY_BLOB else index.get(blob, blob)

    k = rec["k"]
    if k == "w":
        return _writes_out(rec, ref)
    if k != "c":
        return rec
    out: dict[str, Any] = {"k": "C", "id": rec["id"]}
    if rec["mx"] != rec["id"]:
        out["mx"] = rec["mx"]
    cd = rec.get("_cd")
    if cd is not None:  # the parent (``p``), checkpoint and metadata: a patch of its record
        out["cd"] = cd
    else:
        if rec["p"] is not None:
            out["p"] = rec["p"]
        for key in ("c", "cp", "m", "md"):
            if key in rec:
                out[key] = rec[key]
    out["ch"] = {ch: _entry_out(e, ref) for ch, e in rec["ch"].items()}
    if rec.get("pw"):
        out["pw"] = [pw if type(pw) is int else [pw[0], _writes_out(pw[1], ref)] for pw in rec["pw"]]
    return out


def _list_entry(e: dict[str, Any], blob: Callable[[Any], Any]) -> dict[str, Any]:
    """An item list's entry without its items, each blob named by ``blob`` (the other
    format's name: ``_entry_out``'s ``ref``, ``_entry_in``'s ``deref``)."""
    out = {key: e[key] for key in ("b", "k", "d") if key in e}
    if "m" in e:
        out["m"] = blob(e["m"])
        if "mb" in e:
            out["mb"] = [blob(b) for b in e["mb"]]
    return out


def _entry_out(e: Any, ref: Callable[[str], Any]) -> Any:
    """A channel entry in format 2: ``[blob, head]`` (``[blob, head, type]``), or an item
    list ``{"b": base seq, "k": kept, "i": [item blobs]}``."""
    if type(e) is dict:
        out = _list_entry(e, ref)
        if e.get("i"):
            out["i"] = [ref(b) for b in e["i"]]
        return out
    typ, b, head = e
    return [ref(b), head] if typ == _DEFAULT_TYPE else [ref(b), head, typ]


def _entry_in(e: Any, deref: Callable[[Any], str]) -> Any:
    if type(e) is dict:
        out = _list_entry(e, deref)
        out["i"] = [deref(r) for r in e.get("i", ())]
        return out
    return [e[2] if len(e) > 2 else _DEFAULT_TYPE, deref(e[0]), e[1]]


def _message(
    rec: dict[str, Any],
    attach: Sequence[str] = (),
    early: Optional[dict[str, int]] = None,
    seq: int = 0,
    record_at: Optional[Callable[[int], Optional[dict[str, Any]]]] = None,
) -> dict[str, Any]:
    """A record as an engine message: its format-2 JSON as the text part, and one
    attachment part per blob of ``attach`` (the blobs this record stores, or first uses
    in its chat), so the engine knows the references (``Store.gc`` keeps a blob while a
    live chat attaches it, and drops it with the last deleted chat that did). ``early``:
    the lane's early writes after this record, stored when not empty: as ``"e"``, the
    distances from ``seq`` (this record's) down to the write records they start at, for
    every id whose seq is a write record of that id (``record_at``, ``rec`` itself at
    ``seq``), and as ``"o"`` ``{id: seq}`` for any other."""
    attach = [b for b in attach if b != EMPTY_BLOB]
    out = _stored(rec, attach)
    if early:
        out = dict(out)
        back: list[int] = []
        rest: dict[str, int] = {}
        for cid, s in sorted(early.items(), key=operator.itemgetter(1)):
            w = rec if s == seq else record_at(s) if record_at is not None and s < seq else None
            if w is not None and w["k"] == "w" and w["c"] == cid:
                back.append(seq - s)
            else:
                rest[cid] = s
        if back:
            out["e"] = back
        if rest:
            out["o"] = dict(sorted(rest.items()))
    parts: list[dict[str, Any]] = [{"type": "text", "text": _dumps(out)}]
    parts.extend({"type": "attachment", "mime": VALUE_MIME, "blob": b} for b in attach)
    return {"role": "system", "parts": parts}


def _writes_in(w: dict[str, Any], deref: Callable[[Any], str]) -> dict[str, Any]:
    if w["k"] == "w":  # format 1: already the in-memory shape
        return w
    return {
        "k": "w",
        "c": w["c"],
        "t": w["t"],
        "tp": w.get("tp", ""),
        "w": [[e[0], e[1], e[3] if len(e) > 3 else _DEFAULT_TYPE, deref(e[2])] for e in w["w"]],
    }


def _decode(m: Any) -> dict[str, Any]:
    """The in-memory record of an engine message of either format."""
    d: dict[str, Any] = json.loads(m.text)
    rec = _decode_json(d, m)
    if "o" in d:
        rec["o"] = d["o"]
    if "e" in d:
        rec["e"] = [m.seq - x for x in d["e"]]
    return rec


def _decode_json(d: dict[str, Any], m: Any) -> dict[str, Any]:
    k = d["k"]
    if k == "c":  # format 1: entries were [version, type, blob, head]
        d["ch"] = {ch: [e[1], e[2], e[3]] for ch, e in d["ch"].items()}
        return d
    if k not in ("C", "W"):
        return d  # "w" (format 1, already in memory shape), "d", "x"
    attached: Optional[list[str]] = None

    def deref(r: Any) -> str:
        nonlocal attached
        if type(r) is not int:
            return str(r) if r != "" else EMPTY_BLOB
        if attached is None:
            attached = [p["blob"] for p in m.parts if p["type"] == "attachment"]
        return attached[r]

    if k == "W":
        return _writes_in(d, deref)
    rec: dict[str, Any] = {"k": "c", "id": d["id"], "mx": d.get("mx", d["id"]), "p": d.get("p")}
    for key in ("c", "cp", "m", "md", "cd"):  # cd: resolved by the lane (``_Lane.resolve``)
        if key in d:
            rec[key] = d[key]
    rec["ch"] = {ch: _entry_in(e, deref) for ch, e in d["ch"].items()}
    if "pw" in d:
        rec["pw"] = [pw if type(pw) is int else [pw[0], _writes_in(pw[1], deref)] for pw in d["pw"]]
    return rec


def _early_of(rec: dict[str, Any], record_at: Callable[[int], dict[str, Any]]) -> dict[str, int]:
    """The early writes a record carries: ``o`` (a list of ids, without seqs, in the first
    records that had them: their writes may be anywhere, so seq 0), and ``e``, the seqs
    of write records (decoded: absolute), each naming its checkpoint id."""
    out: dict[str, int] = {}
    o = rec.get("o")
    if o:
        if isinstance(o, dict):
            out.update((str(k), int(v)) for k, v in o.items())
        else:
            out.update((str(k), 0) for k in o)
    for s in rec.get("e", ()):
        out[record_at(s)["c"]] = s
    return out
