"""The JSON texts of a chat's items, kept in memory for the reads that follow.

The adapters that keep one item per message (the Agents SDK session, the Claude Agent SDK
session store) read the whole history again and again: before each model call, the harness
asks for every item. Each read of a message from the store decodes its record (decompressed
when the store compresses); ``KeptTexts`` keeps the texts of the last full read and hands
them to the next one when the chat has not changed but for new messages at its end, which are
the only ones read then. The values are decoded again at each read (``_native.json_loads``,
native code): a caller may change the items it gets without changing the next read's.

A chat's state is named by its snapshot's ``(revision, len)``: every change but an append
(an edit, a truncation, a hide, an erasure, a replacement) makes a new revision, and an append
makes it longer, leaving the messages before it as they were. Kept texts of ``(r, n)`` are
therefore the live items of every snapshot ``(r, m)`` with ``m >= n``, followed by those of
messages ``n..m``.

Example::

    kept = KeptTexts.read(snap)            # every live message's text, oldest first
    texts = kept.texts if kept else ...    # None: a message without text (read it yourself)
    later = kept.follow(chat.snapshot())   # the same texts plus what was appended since
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["KeptTexts", "MAX_CHARS"]

#: The most characters of text one chat's kept texts hold: a longer history is read from the
#: store at each read (its texts would double the memory a session takes).
MAX_CHARS = 16 << 20


class KeptTexts:
    """The texts of a chat's live messages at one state of it, oldest first (immutable: a
    read that finds the chat grown makes a new one)."""

    __slots__ = ("revision", "length", "texts", "chars")

    def __init__(self, revision: int, length: int, texts: list[str], chars: int) -> None:
        self.revision = revision
        self.length = length
        self.texts = texts
        self.chars = chars

    @classmethod
    def read(cls, snap: Any, start: int = 0, before: Optional[KeptTexts] = None) -> Optional[KeptTexts]:
        """The texts of the live messages of ``snap`` from ``start`` on, after those of
        ``before`` (kept up to ``start``); None when a message has no text part (the caller
        reads that chat its own way)."""
        rows = snap.texts(start, len(snap))
        texts = [t for _seq, t in rows]
        if None in texts:
            return None
        chars = sum(map(len, texts))
        if before is not None:
            texts = before.texts + texts
            chars += before.chars
        return cls(snap.revision, len(snap), texts, chars)

    def follow(self, snap: Any) -> Optional[KeptTexts]:
        """These texts at ``snap``'s state: self when the chat is unchanged, a new
        ``KeptTexts`` when it only grew (reading only the new messages), None when it changed
        otherwise."""
        if snap.revision != self.revision or len(snap) < self.length:
            return None
        if len(snap) == self.length:
            return self
        return KeptTexts.read(snap, self.length, self)

    def worth_keeping(self) -> bool:
        """Whether these texts are small enough to keep (``MAX_CHARS``)."""
        return self.chars <= MAX_CHARS
