"""The items of a LangGraph store owner in an Undertext store: how they map onto chats.

* A namespace is one chat of the owner, titled with its labels joined by ``"."`` (a label
  cannot hold a period, so the title names one namespace) and marked ``extra[MARK] = "1"``.
* An item is one message of its namespace's chat: an attachment (MIME ``RECORD_MIME``)
  holding the record, compact JSON ``{"k": key, "c": created, "u": updated, "v": value}``
  (times in microseconds since the epoch), and before it a text part with the item's
  searchable text (what the engine's full-text search indexes: the value's strings and
  numbers, or the fields ``put(..., index=[...])`` names; none for ``index=False``).
* A put appends the new records of a namespace in one transaction (blobs and messages
  together, ``Chat.append_with_blobs``); then the records they replace, and the deleted
  items, are erased in a second (``Chat.erase``: no read returns them, the next
  ``Store.gc`` drops their bytes). A namespace left with no item is deleted
  (``Store.delete_chat``). After a crash between the two, a key has two live records:
  the newer one is the item, and the older one is erased by the next write to the
  namespace; a deletion not yet erased is not done.

``Items`` holds every item of the owner in memory (read once, at the first use in the
process: every namespace chat's live messages and their record blobs); reads answer from
it and writes update it after the engine committed.

Example::

    items = shared(Items, store, "langgraph-store")
    with items.lock:  # key, value (None: delete), the value's JSON, its searchable text
        items.write(("users", "a"), [("k", {"x": 1}, '{"x":1}', "1")])
    assert items.spaces[("users", "a")].items["k"].value == {"x": 1}
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Optional, Union

import undertext

from ._json_text import json_text

__all__ = ["Entry", "Items", "MARK", "RECORD_MIME", "Space", "Write", "search_text"]

#: ``extra`` key (value ``"1"``) marking a chat as a namespace of a LangGraph store.
MARK = "undertext.langgraph_store"

#: MIME type of an item's record attachment.
RECORD_MIME = "application/vnd.undertext.store-item+json"

#: What a put's ``index`` argument is: None (every string and number of the value), False
#: (nothing searchable) or the paths whose text is searchable.
IndexFields = Union[None, bool, list[str]]


def _leaves(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out.append(str(value))
    elif isinstance(value, Mapping):
        for v in value.values():
            _leaves(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _leaves(v, out)


def search_text(value: Mapping[str, Any], index: IndexFields) -> str:
    """The text full-text search sees for ``value`` put with ``index``: the value's strings
    and numbers (None, or ``"$"``), LangGraph's text at each path of a list
    (``get_text_at_path``), nothing for False."""
    if index is False:
        return ""
    out: list[str] = []
    if index is None or index is True:
        _leaves(value, out)
    else:
        from langgraph.store.base import get_text_at_path

        for path in index:
            if path == "$":
                _leaves(value, out)
            else:
                out.extend(get_text_at_path(value, path))
    # The engine holds UTF-8 text: a lone surrogate (kept exactly in the record's JSON)
    # becomes "?" in what search sees.
    return "\n".join(out).encode("utf-8", "replace").decode("utf-8")


class Entry:
    """One live item: its message's seq, its value (decoded once, never handed out) and its
    value's JSON (decoded for each reader), its times in microseconds."""

    __slots__ = ("seq", "value", "text", "created", "updated")

    def __init__(self, seq: int, value: Any, text: str, created: int, updated: int) -> None:
        self.seq = seq
        self.value = value
        self.text = text
        self.created = created
        self.updated = updated


class Space:
    """One namespace: its chat, its items by key, the key of each live seq, and the seqs of
    records replaced but not erased yet (a crash between a put's two transactions)."""

    def __init__(self, chat: Any) -> None:
        self.chat = chat
        self.items: dict[str, Entry] = {}
        self.keys: dict[int, str] = {}
        self.stale: list[int] = []

    def take(self, seq: int, record: Mapping[str, Any], value_text: Optional[str] = None) -> None:
        """Adds the record at ``seq``; a record of the same key at a lower seq goes stale."""
        key = record["k"]
        value = record["v"]
        old = self.items.get(key)
        if old is not None:
            self.stale.append(old.seq)
            del self.keys[old.seq]
        text = json_text(value) if value_text is None else value_text
        self.items[key] = Entry(seq, value, text, record["c"], record["u"])
        self.keys[seq] = key


def _ranges(seqs: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted seqs as contiguous ``(start, end)`` ranges."""
    out: list[tuple[int, int]] = []
    for s in sorted(set(seqs)):
        if out and out[-1][1] == s:
            out[-1] = (out[-1][0], s + 1)
        else:
            out.append((s, s + 1))
    return out


#: A write: the key, the value (None: delete), its JSON text, and what search sees.
Write = tuple[str, Optional[Mapping[str, Any]], str, str]


class Items:
    """Every item of one owner in one open store (make it with ``_per_owner.shared``)."""

    def __init__(self, store: Any, owner: str) -> None:
        self.store = store
        self.owner = owner
        self.lock = threading.RLock()
        self.spaces: dict[tuple[str, ...], Space] = {}
        self.by_chat: dict[str, tuple[str, ...]] = {}
        self._last_us = 0
        # Newest activity first: of two chats of one namespace, the first found is used.
        for info in store.find_chats(owner, extra={MARK: "1"}):
            namespace = tuple(info.title.split("."))
            if namespace not in self.spaces:
                self._load(namespace, store.chat(owner, info.id))

    def _load(self, namespace: tuple[str, ...], chat: Any) -> None:
        space = self.spaces[namespace] = Space(chat)
        self.by_chat[chat.id] = namespace
        seqs, blobs = [], []
        for m in chat.iter():
            for part in m.parts:
                if part.get("type") == "attachment" and part.get("mime") == RECORD_MIME:
                    seqs.append(m.seq)
                    blobs.append(part["blob"])
        for seq, data in zip(seqs, self.store.get_blobs(self.owner, blobs) if blobs else []):
            space.take(seq, json.loads(data))

    def now_us(self) -> int:
        """The time in microseconds, strictly increasing within this object."""
        now = max(time.time_ns() // 1000, self._last_us + 1)
        self._last_us = now
        return now

    def write(self, namespace: tuple[str, ...], writes: list[Write]) -> None:
        """Applies ``writes`` to ``namespace`` (call with ``lock`` held): the new records in
        one transaction, then the erasure of what they replace and of the deleted items."""
        space = self.spaces.get(namespace)
        now = self.now_us()
        blobs: list[bytes] = []
        messages: list[dict[str, Any]] = []
        records: list[tuple[dict[str, Any], str]] = []
        dead: list[int] = list(space.stale) if space is not None else []
        for key, value, value_text, searchable in writes:
            old = space.items.get(key) if space is not None else None
            if old is not None:
                dead.append(old.seq)
            if value is None:
                continue
            created = old.created if old is not None else now
            record = {"k": key, "c": created, "u": now, "v": value}
            data = ('{"k":%s,"c":%d,"u":%d,"v":%s}' % (json_text(key), created, now, value_text)).encode()
            blob = undertext.blob_id(data)
            parts: list[dict[str, Any]] = [{"type": "text", "text": searchable}] if searchable else []
            parts.append({"type": "attachment", "mime": RECORD_MIME, "blob": blob})
            blobs.append(data)
            messages.append({"role": "assistant", "parts": parts})
            records.append((record, value_text))
        if messages:
            if space is None:
                chat = self.store.create_chat(self.owner, title=".".join(namespace), extra={MARK: "1"})
                space = self.spaces[namespace] = Space(chat)
                self.by_chat[chat.id] = namespace
            _ids, seqs = space.chat.append_with_blobs(blobs, messages)
            for seq, (record, value_text) in zip(seqs, records):
                space.take(seq, record, value_text)
        if space is None:
            return
        if dead:
            space.chat.erase(_ranges(dead), expected_revision=space.chat.revision)
            for seq in dead:
                if seq in space.keys:
                    del space.items[space.keys.pop(seq)]
            erased = set(dead)
            space.stale = [s for s in space.stale if s not in erased]
        if not space.items:
            self.store.delete_chat(self.owner, space.chat.id)
            del self.spaces[namespace]
            del self.by_chat[space.chat.id]

