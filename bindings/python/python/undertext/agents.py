"""An OpenAI Agents SDK session over an Undertext store.

``UndertextSession`` implements the SDK's ``Session`` protocol (``session_id``,
``session_settings``, async ``get_items``/``add_items``/``pop_item``/``clear_session``)
and its compaction hook ``_get_compaction_snapshot``, answering the same calls the way the
SDK's ``SQLiteSession`` does.

Layout: one engine chat per session (owner ``owner``, title the session id). Each item is
one message whose text is the item's JSON. Every mutation is one engine transaction:

* ``add_items``: one ``append_batch``;
* ``pop_item``: a truncation of the last message, or (when the last live item is not
  the chat's last message) the engine's soft deletion of that item (``Chat.hide``);
* ``clear_session``: one truncation to 0;
* a compaction's suffix replacement: one ``Chat.hide_and_append`` hiding the replaced
  suffix (and a pruned prefix) and appending the new items, so history is replaced
  atomically — never cleared first and re-added after (after a crash it is the old
  history or the new one, nothing in between).

Reads walk the chat's live messages backwards from the newest (the engine skips hidden
ones) with ``Snapshot.texts``, so ``get_items(limit)`` reads the ``limit`` newest messages and
no other, however long the history is; their JSON is decoded in native code into the values
``json.loads`` gives. The texts of the last ``get_items()`` of the whole history are kept
(``_kept_texts``, up to ``MAX_CHARS``): while the chat only grows, the next read takes them
and reads only the messages appended since.

Stores written before the engine could hide messages hold *markers*: a system message with
one ``summary`` part holding ``{"cut": C, "floor": F}``: every record from seq ``C`` up to
the marker is dead, and so is every record below ``F`` (a pruned prefix). Reads still honour
them (jumping over the dead ranges); no new marker is written. A suffix replacement that
hides markers hides the prefix below their largest floor too, so no floor is ever lost.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any, Callable, Optional

import undertext

from ._holder import PathLike, StoreHolder, temporary_store
from ._json_text import json_ascii
from ._kept_texts import KeptTexts
from ._native import json_loads
from ._per_owner import shared
from ._session_chats import SessionChats, lock_for

try:  # the SDK's helper that finishes a mutation even if the caller is cancelled
    from agents.memory.session import _await_mutation
except ImportError:  # pragma: no cover - older SDKs

    async def _await_mutation(awaitable: Awaitable[Any]) -> Any:
        return await awaitable


try:
    from agents.memory.session import _CompactionSnapshot
except ImportError:  # pragma: no cover - older SDKs
    _CompactionSnapshot = None  # type: ignore[assignment,misc]

from ._extras import needs_extra

try:
    from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit
except ImportError as e:  # pragma: no cover - exercised without the SDK installed
    raise needs_extra("agents", "the OpenAI Agents SDK", "agents", "openai-agents", e) from e

__all__ = ["UndertextSession"]

#: ``extra`` key marking a chat as an Agents SDK session.
SESSION_KEY = "undertext.agents"


class _Sessions(SessionChats):
    """The Agents SDK session chats of one owner in one open store."""

    MARK = SESSION_KEY


def _role_of(item: Any) -> str:
    if isinstance(item, dict):
        role = item.get("role")
        if role in ("user", "assistant", "system"):
            return str(role)
        if role == "developer":
            return "system"
        if str(item.get("type", "")).endswith("_output"):
            return "tool"
    return "assistant"


def _message_of(item: Any) -> dict[str, Any]:
    return {"role": _role_of(item), "content": json_ascii(item)}


def _marker_of(m: Any) -> Optional[dict[str, Any]]:
    """The ``{"cut", "floor"}`` of a marker written by an older version (a system message
    whose first part is a summary), or None."""
    parts = m.parts
    if parts and parts[0].get("type") == "summary":
        return json.loads(parts[0]["text"])
    return None


def _newest(snap: Any, limit: Optional[int], parse: bool) -> tuple[list[tuple[int, Any]], int]:
    """The newest ``limit`` live items of a snapshot (all when None), newest first, as
    ``(seq, value)``: the item's JSON text, or with ``parse`` the item. The engine skips hidden
    messages and reads only the messages returned (``Snapshot.texts``); the walk jumps over what
    older markers killed. Also returns the largest floor of the markers passed."""
    out: list[tuple[int, Any]] = []
    floor = 0
    end = len(snap)
    while end > floor and (limit is None or len(out) < limit):
        want = None if limit is None else limit - len(out)
        for seq, value in snap.texts(floor, end, reverse=True, limit=want, json=parse):
            if value is None:  # no text part: a marker of an older version
                m = snap.get(seq)
                mark = _marker_of(m)
                if mark is not None:
                    floor = max(floor, int(mark["floor"]))
                    end = min(seq, int(mark["cut"]))
                    break
                value = json.loads(m.text) if parse else m.text
            out.append((seq, value))
        else:
            break
    return out, floor


class UndertextSession(StoreHolder):
    """Agents SDK session stored in an Undertext store.

    Args:
        session_id: the session's id (the chat's title).
        store: an open ``undertext.Store`` shared by every session of the process (the
            session does not close it), or a path (``str`` or ``os.PathLike``): a store
            opened there, owned by the session and closed by ``close()``.
        owner: the engine owner of the session chats.
        session_settings: as for the SDK's sessions (``limit`` is the default of
            ``get_items``).

    Example::

        with undertext.Store.open("state") as store:
            session = UndertextSession("conversation-1", store)
            result = await Runner.run(agent, "hi", session=session)

    Or ``UndertextSession.open("conversation-1", "state", durability="immediate")`` (a
    session owning its store; ``close()``, ``with``, ``async with``), and
    ``UndertextSession.temporary("s")`` for tests (the store is removed on ``close()``).
    One store is one process: sessions of one process share a store object.
    """

    session_settings: Optional[SessionSettings] = None

    def __init__(
        self,
        session_id: str,
        store: Any,
        *,
        owner: str = "openai-agents",
        session_settings: Optional[Any] = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = (
            coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        )
        self._closed = False
        self._hold(store)
        self.owner = owner
        self._chat = shared(_Sessions, self.store, owner).chat(session_id)
        self._lock = lock_for(self.store, self._chat.id)
        # The texts of the last full read, for the reads that follow (``_kept_texts``).
        self._kept: Optional[KeptTexts] = None

    @classmethod
    def open(
        cls,
        session_id: str,
        path: PathLike,
        *,
        owner: str = "openai-agents",
        session_settings: Optional[Any] = None,
        **store_options: Any,
    ) -> UndertextSession:
        """A session over a store opened (or created) at ``path`` with ``store_options``
        (those of ``undertext.Store.open``), owned by the session."""
        store = undertext.Store.open(path, **store_options)
        return cls(session_id, store, owner=owner, session_settings=session_settings)._adopt()

    @classmethod
    def temporary(
        cls,
        session_id: str,
        *,
        owner: str = "openai-agents",
        session_settings: Optional[Any] = None,
        **store_options: Any,
    ) -> UndertextSession:
        """A session over a new store in a temporary directory, removed by ``close()``."""
        store, d = temporary_store(store_options)
        return cls(session_id, store, owner=owner, session_settings=session_settings)._adopt(d)

    def close(self) -> None:
        """Closes the store if this session opened it (and removes it if temporary). Every
        later call raises ``undertext.Closed`` (a ``RuntimeError``, as ``SQLiteSession``
        raises), ``add_items([])`` included."""
        self._closed = True
        super().close()

    # -- synchronous core ---------------------------------------------------------------------

    def _check_open(self) -> None:
        """``undertext.Closed`` once ``close()`` was called or the store closed (checked
        before any fast path, as ``SQLiteSession`` does)."""
        if self._closed or getattr(self.store, "closed", False):
            gone = "; its temporary store was removed with it" if self._temporary else ""
            raise undertext.Closed(
                f"the session {self.session_id!r} is closed (UndertextSession.close() or its store "
                f"closed){gone}; make a new session"
            )

    def _fresh(self) -> Any:
        """The chat's snapshot with every other process's writes in it: the held ``Chat``
        is brought up to date first (on a fleet store one round trip; on an embedded store
        nothing to fetch), so a pop or a replace never works from a stale history."""
        self._chat.refresh()
        return self._chat.snapshot()

    def _live(self, limit: Optional[int]) -> tuple[Any, int, list[tuple[int, str]]]:
        """Newest ``limit`` live items (all when None) as JSON texts, oldest first, with their
        seqs; with the snapshot read and the largest floor of the markers passed."""
        snap = self._fresh()
        if limit is not None and limit <= 0:
            return snap, 0, []
        out, floor = _newest(snap, limit, parse=False)
        out.reverse()
        return snap, floor, out

    def get_items_sync(self, limit: Optional[int] = None) -> list[Any]:
        """``get_items`` without the event loop."""
        self._check_open()
        n = resolve_session_limit(limit, self.session_settings)
        if n is not None and n < 0:
            n = None  # like SQLiteSession: a negative limit is no limit
        if n == 0:
            return []
        snap = self._fresh()
        kept = self._kept.follow(snap) if self._kept is not None else None
        if kept is None and n is None:
            kept = KeptTexts.read(snap)  # None for a history with markers of an older version
        if kept is not None:
            self._kept = kept if kept.worth_keeping() else None
            return json_loads(kept.texts if n is None else kept.texts[-n:])
        self._kept = None
        rows, _floor = _newest(snap, n, parse=True)  # decoded in native code
        return [item for _seq, item in reversed(rows)]

    def add_items_sync(self, items: list[Any]) -> None:
        """``add_items`` without the event loop: one transaction."""
        self._check_open()
        if not items:
            return
        messages = [_message_of(i) for i in items]
        with self._lock:
            self._chat.append_batch(messages)

    def pop_item_sync(self) -> Any:
        """``pop_item`` without the event loop: one erasure (``Chat.erase``): the item
        leaves every read at once and its bytes leave the files at the next ``Store.gc``."""
        self._check_open()
        with self._lock:
            snap = self._fresh()
            for seq, text in _newest(snap, 1, parse=False)[0]:
                self._chat.erase([(seq, seq + 1)], expected_revision=snap.revision)
                return json.loads(text)
            return None

    def clear_session_sync(self) -> None:
        """``clear_session`` without the event loop: one erasure of every item (a deletion
        the store honours: the next ``Store.gc`` drops their bytes from the files)."""
        self._check_open()
        with self._lock:
            snap = self._fresh()
            if len(snap) and next(iter(snap.iter(0, len(snap))), None) is not None:
                self._chat.erase([(0, len(snap))], expected_revision=snap.revision)

    def replace_all_sync(self, items: list[Any]) -> None:
        """Replaces the whole history with ``items`` in one transaction."""
        self._check_open()
        with self._lock:
            snap = self._fresh()
            messages = [_message_of(i) for i in items]
            if len(snap):
                self._chat.hide_and_append([(0, len(snap))], messages, expected_revision=snap.revision)
            elif messages:
                self._chat.append_batch(messages)

    # -- the Session protocol -----------------------------------------------------------------

    async def get_items(self, limit: Optional[int] = None) -> list[Any]:
        """The latest ``limit`` items (``session_settings.limit`` when None), oldest first."""
        return await asyncio.to_thread(self.get_items_sync, limit)

    async def add_items(self, items: list[Any]) -> None:
        """Appends items, all or none (on a closed session, even none: ``undertext.Closed``)."""
        self._check_open()
        if not items:
            return
        await _await_mutation(asyncio.to_thread(self.add_items_sync, items))

    async def pop_item(self) -> Any:
        """Removes and returns the newest item (None when empty)."""
        return await _await_mutation(asyncio.to_thread(self.pop_item_sync))

    async def clear_session(self) -> None:
        """Drops every item."""
        await _await_mutation(asyncio.to_thread(self.clear_session_sync))

    # -- compaction ---------------------------------------------------------------------------

    async def _get_compaction_snapshot(
        self,
        limit: int,
        *,
        prune_prefix: Optional[Callable[[Any], bool]] = None,
    ) -> Any:
        """The SDK's compaction hook: the newest ``limit`` items, whether they are the whole
        history, and ``replace_suffix(start, output)``, which replaces ``items[start:]``
        with ``output`` in one transaction if the history's tail is still what was read
        (else returns False and writes nothing)."""
        if _CompactionSnapshot is None:
            return None
        # A subclass that transforms items on the way in or out must supply its own.
        cls = type(self)
        if cls.add_items is not UndertextSession.add_items or cls.get_items is not UndertextSession.get_items:
            return None

        def read() -> tuple[list[tuple[int, str]], bool]:
            _snap, _floor, rows = self._live(limit + 1 if limit > 0 else 0)
            complete = len(rows) <= limit
            return rows[-limit:] if limit > 0 else [], complete

        rows, complete = await asyncio.to_thread(read)
        items = [json.loads(text) for _seq, text in rows]

        async def replace_suffix(start: int, output: list[Any]) -> bool:
            expected = rows[start:]
            if not expected:
                return False
            return await _await_mutation(asyncio.to_thread(self._replace_suffix_sync, expected, output, prune_prefix))

        return _CompactionSnapshot(items, complete, replace_suffix)

    def _replace_suffix_sync(
        self,
        expected: list[tuple[int, str]],
        output: list[Any],
        prune_prefix: Optional[Callable[[Any], bool]],
    ) -> bool:
        with self._lock:
            snap, floor, current = self._live(len(expected))
            if current != expected:
                return False
            cut = expected[0][0]
            # Markers of older versions from the cut on are hidden with the suffix: the floor
            # they carried (``floor``) is kept by hiding the prefix below it.
            if prune_prefix is not None:
                # The oldest items, while the predicate holds, go below a new floor.
                _s, _w, everything = self._live(None)
                for seq, text in everything:
                    if seq >= cut or not prune_prefix(json.loads(text)):
                        break
                    floor = max(floor, seq + 1)
            ranges = [(cut, len(snap))] + ([(0, floor)] if floor > 0 else [])
            try:
                self._chat.hide_and_append(
                    ranges, [_message_of(i) for i in output], expected_revision=snap.revision
                )
            except undertext.StaleRevision:
                return False
            return True
