"""A Claude Agent SDK session store over an Undertext store.

``UndertextSessionStore`` implements the SDK's ``SessionStore`` protocol (``append``,
``load`` and every optional method: ``list_sessions``, ``list_session_summaries``,
``delete``, ``list_subkeys``), which mirrors Claude Code session transcripts to external
storage, and passes the SDK's conformance suite
(``claude_agent_sdk.testing.run_session_store_conformance``).

Layout: one engine chat of ``owner`` per key (``project_key``, ``session_id``, and
``subpath`` for a subagent transcript), titled with the session id. Each entry is one
message whose text is the entry's JSON, so ``load`` gives back entries deep-equal to the
ones appended, in append order. Every ``append`` is one engine transaction (all of the
batch or none of it); an entry whose ``uuid`` the key already holds is skipped (the
protocol's idempotency key: a batch sent again adds nothing). For a main transcript the
append also folds the batch into the session's summary (``fold_session_summary``), kept
with its write time in the chat's metadata, so ``list_sessions`` and
``list_session_summaries`` answer from memory.

The same session is readable as a chat: ``chat(key)`` runs the engine's Claude Code
importer over the stored transcript into a chat of ``chat_owner`` (tool calls and results
as parts, results longer than the store's ``archive_threshold`` archived, one assistant
message per model response), appending only what is new since the last call, and
returns it: its model view (``chat.view(budget)``), ``read_context`` on its archives and
everything else of an engine chat apply.

``append`` runs in the event loop, as a JSONL file's ``write`` and ``fdatasync`` would, while
the store's recent appends took under ``inline_below_ms`` (1 ms by default: an exponential
average of their wall time) and the key's transcript is already known to this object; else
(a slow disk, a key's first append, which reads what the key holds) it runs in a worker
thread, as the other engine calls do. A thread hop costs more than a fast disk's sync (the
loop woken from another thread: 0.15–0.3 ms here against a 0.2–0.35 ms append), so a
store on a fast disk appends at a JSONL file's cost and one on a slow disk never holds the
loop for long. ``inline_below_ms=0`` always uses the thread. The worker thread is anyio's
runner (``anyio.to_thread.run_sync``), so the store works under asyncio and under trio, as
the SDK does (``asyncio.to_thread`` when anyio is not installed).

The transcript chats of ``owner`` are found once per store and owner (an index lookup,
``Store.find_chats``), when the first ``UndertextSessionStore`` on them is made; later
lookups are in memory.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
from typing import Any, Callable, Optional, TypeVar, Union

from ._extras import needs_extra

try:
    from claude_agent_sdk import SessionStore, fold_session_summary
    from claude_agent_sdk.types import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
    )
except ImportError as e:  # pragma: no cover - exercised without the SDK installed
    raise needs_extra("claude", "the Claude Agent SDK", "claude", "claude-agent-sdk", e) from e

import undertext

from ._holder import PathLike, StoreHolder, temporary_store
from ._json_text import json_text
from ._native import import_transcript_bytes, json_loads
from ._per_owner import shared

_T = TypeVar("_T")

try:
    # The Claude Agent SDK runs on anyio (asyncio or trio): its thread runner works under both.
    from anyio.to_thread import run_sync as _anyio_run_sync
except ImportError:  # pragma: no cover - the SDK depends on anyio
    _anyio_run_sync = None  # type: ignore[assignment]


async def _to_thread(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in a worker thread of the running event loop: anyio's runner when anyio
    is there (asyncio and trio), else ``asyncio.to_thread``."""
    if _anyio_run_sync is not None:
        return await _anyio_run_sync(functools.partial(fn, *args))
    return await asyncio.to_thread(fn, *args)


__all__ = ["UndertextSessionStore"]

#: ``append`` runs in the event loop while recent appends took less than this (ms) on average.
INLINE_BELOW_MS = 1.0

#: ``extra`` keys of a transcript chat.
MARK = "undertext.claude"  # "1"
PROJECT = "undertext.claude.project"
SUBPATH = "undertext.claude.subpath"  # "" for a main transcript
SUMMARY = "undertext.claude.summary"  # main transcripts: the SessionSummaryEntry, JSON
MTIME = "undertext.claude.mtime"  # main transcripts: the summary's write time (epoch ms)
ENTRIES = "undertext.claude.n"  # main transcripts: entries the summary covers

_Key = tuple[str, str, str]  # (project_key, session_id, subpath or "")


def _inline_limit(ms: Any) -> float:
    """``inline_below_ms`` checked, in seconds."""
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not ms >= 0:
        raise ValueError(f"inline_below_ms: expected a number of milliseconds >= 0, found {ms!r}")
    return float(ms) / 1000


def _key_of(key: Any) -> _Key:
    subpath = key.get("subpath")
    if subpath == "":
        raise ValueError("SessionKey subpath: expected a non-empty string or no subpath, found ''")
    return (str(key["project_key"]), str(key["session_id"]), "" if subpath is None else str(subpath))


def _role_of(entry: Any) -> str:
    t = entry.get("type") if isinstance(entry, dict) else None
    return t if t in ("user", "assistant") else "system"


def _text_of(seq: int, text: Optional[str]) -> str:
    """An entry's JSON text; a message without text (one this store did not write) is not JSON."""
    if text is None:
        raise json.JSONDecodeError(f"message {seq} of the transcript's chat has no text", "", 0)
    return text


class _Transcript:
    """What this process knows of one key's chat."""

    __slots__ = ("chat_id", "lock", "uuids", "summary", "mtime", "stale")

    def __init__(self, chat_id: str) -> None:
        self.chat_id = chat_id
        self.lock = threading.Lock()
        self.uuids: Optional[set[str]] = None  # read from the chat on the first append
        self.summary: Optional[dict[str, Any]] = None
        self.mtime = 0
        # The chat holds entries its summary does not cover (a crash between an append and
        # its summary write): the next append folds the whole transcript again.
        self.stale = False


class _Index:
    """The transcript chats of one owner in one open store, shared by every session store
    on them in the process (one read of the owner's chats)."""

    def __init__(self, store: Any, owner: str) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.keys: dict[_Key, _Transcript] = {}
        for info in store.find_chats(owner, extra={MARK: "1"}):  # an index lookup
            extra = info.extra
            t = _Transcript(info.id)
            if SUMMARY in extra:
                t.summary = json.loads(extra[SUMMARY])
                t.mtime = int(extra[MTIME])
                if int(extra[ENTRIES]) != info.len:
                    t.stale = True
                    t.mtime = max(t.mtime + 1, info.last_activity_ms)
            else:
                t.mtime = info.last_activity_ms
            self.keys[(extra[PROJECT], info.title, extra[SUBPATH])] = t



class UndertextSessionStore(StoreHolder, SessionStore):
    """Claude Agent SDK ``SessionStore`` storing transcripts in an Undertext store.

    Args:
        store: an open ``undertext.Store`` (the session store does not close it), or a
            path (``str`` or ``os.PathLike``): a store opened there, owned and closed by
            this object.
        owner: the engine owner of the transcript chats.
        chat_owner: the engine owner of the chats ``chat(key)`` imports (default
            ``owner + ":chats"``).
        inline_below_ms: ``append`` runs in the event loop while the average of recent
            appends' wall time is below this (default 1.0), else in a worker thread; 0:
            always in a worker thread.

    Example::

        with UndertextSessionStore.open("state") as sessions:
            options = ClaudeAgentOptions(session_store=sessions)
            ...
            chat = sessions.chat({"project_key": key, "session_id": sid})
            messages = chat.view(undertext.Budget(200_000, 8_000)).anthropic()
    """

    def __init__(
        self,
        store: Union[Any, PathLike],
        *,
        owner: str = "claude-agent-sdk",
        chat_owner: Optional[str] = None,
        inline_below_ms: float = INLINE_BELOW_MS,
    ) -> None:
        inline_below_s = _inline_limit(inline_below_ms)
        self._hold(store)
        self.owner = owner
        self.chat_owner = owner + ":chats" if chat_owner is None else chat_owner
        self._index = shared(_Index, self.store, owner)
        self._last_mtime = 0
        self._inline_below_s = inline_below_s
        self._append_s = 0.0  # running average of an append's wall time

    @classmethod
    def open(
        cls,
        path: PathLike,
        *,
        owner: str = "claude-agent-sdk",
        inline_below_ms: float = INLINE_BELOW_MS,
        **store_options: Any,
    ) -> UndertextSessionStore:
        """Opens (or creates) a store at ``path`` with ``store_options`` (those of
        ``undertext.Store.open``), owned by the returned session store."""
        _inline_limit(inline_below_ms)  # before a store is opened for nothing
        store = undertext.Store.open(path, **store_options)
        return cls(store, owner=owner, inline_below_ms=inline_below_ms)._adopt()

    @classmethod
    def temporary(
        cls, *, owner: str = "claude-agent-sdk", inline_below_ms: float = INLINE_BELOW_MS, **store_options: Any
    ) -> UndertextSessionStore:
        """A session store over a new store in a temporary directory, removed by
        ``close()`` (for tests)."""
        _inline_limit(inline_below_ms)  # before a directory is made for nothing
        store, d = temporary_store(store_options)
        return cls(store, owner=owner, inline_below_ms=inline_below_ms)._adopt(d)

    async def __aexit__(self, *exc: object) -> None:
        await _to_thread(self.close)  # anyio's runner: under trio too

    # -- synchronous core -----------------------------------------------------------------

    def _now(self) -> int:
        """Write time in epoch ms, strictly increasing within this object."""
        now = int(time.time() * 1000)
        if now <= self._last_mtime:
            now = self._last_mtime + 1
        self._last_mtime = now
        return now

    def _transcript(self, k: _Key, create: bool) -> Optional[_Transcript]:
        ix = self._index
        with ix.lock:
            t = ix.keys.get(k)
            if t is None and create:
                chat = self.store.create_chat(
                    self.owner, title=k[1], extra={MARK: "1", PROJECT: k[0], SUBPATH: k[2]}
                )
                t = ix.keys[k] = _Transcript(chat.id)
            return t

    def _entries(self, t: _Transcript) -> list[Any]:
        """Every entry of the transcript, in append order: the messages' texts read without
        ``Message`` objects (``Snapshot.texts``), their JSON decoded in native code."""
        rows = self.store.chat(self.owner, t.chat_id).snapshot().texts()
        texts = [_text_of(seq, text) for seq, text in rows]
        return json_loads(texts)

    def append_sync(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """``append`` without the event loop: one engine transaction (one log sync) for the
        entries and, for a main transcript, the metadata holding its summary."""
        if not entries:
            return
        k = _key_of(key)
        t = self._transcript(k, create=True)
        assert t is not None
        with t.lock:
            chat = self.store.chat(self.owner, t.chat_id)
            uuids = t.uuids
            if uuids is None:
                uuids = set()
                for e in self._entries(t):
                    u = e.get("uuid") if isinstance(e, dict) else None
                    if isinstance(u, str):
                        uuids.add(u)
            added = set()
            fresh = []
            for e in entries:
                u = e.get("uuid")
                if isinstance(u, str):
                    if u in uuids or u in added:
                        continue
                    added.add(u)
                fresh.append(e)
            if not fresh:
                t.uuids = uuids
                return
            messages = [{"role": _role_of(e), "content": json_text(e)} for e in fresh]
            if k[2]:
                chat.append_batch(messages)  # subagent transcripts have no summary
                uuids |= added  # in place (under the lock): a copy per append grew with the key
                t.uuids = uuids
                return
            before = len(chat)
            if t.stale or t.summary is None and before != 0:
                # Fold the whole transcript again: what it holds, then the new entries.
                prev, folded = None, self._entries(t) + [json.loads(m["content"]) for m in messages]
            else:
                prev, folded = t.summary, fresh
            summary = dict(fold_session_summary(prev, key, folded))  # type: ignore[arg-type]
            mtime = self._now()
            summary["mtime"] = mtime
            extra = {MARK: "1", PROJECT: k[0], SUBPATH: k[2]}
            extra.update({SUMMARY: json_text(summary), MTIME: str(mtime), ENTRIES: str(before + len(fresh))})
            # The entries and the summary in one transaction: one log sync.
            chat.append_batch(messages, extra=extra)
            uuids |= added
            t.uuids = uuids
            t.summary, t.mtime, t.stale = summary, mtime, False

    def load_sync(self, key: SessionKey) -> Optional[list[SessionStoreEntry]]:
        """``load`` without the event loop."""
        t = self._transcript(_key_of(key), create=False)
        if t is None:
            return None
        return self._entries(t)

    def list_sessions_sync(self, project_key: str) -> list[SessionStoreListEntry]:
        """``list_sessions`` without the event loop (answered from memory)."""
        with self._index.lock:
            return [
                {"session_id": sid, "mtime": t.mtime}
                for (pk, sid, sub), t in self._index.keys.items()
                if pk == project_key and not sub
            ]

    def list_session_summaries_sync(self, project_key: str) -> list[SessionSummaryEntry]:
        """``list_session_summaries`` without the event loop (answered from memory)."""
        with self._index.lock:
            return [
                json.loads(json.dumps(t.summary))
                for (pk, _sid, sub), t in self._index.keys.items()
                if pk == project_key and not sub and t.summary is not None
            ]

    def delete_sync(self, key: SessionKey) -> None:
        """``delete`` without the event loop: a main key takes its subkeys with it. The
        chats ``chat()`` imported for them are deleted too."""
        k = _key_of(key)
        ix = self._index
        with ix.lock:
            doomed = [kk for kk in ix.keys if kk[:2] == k[:2] and (not k[2] or kk[2] == k[2])]
            gone = [(kk, ix.keys.pop(kk)) for kk in doomed]
        for i, (_kk, t) in enumerate(gone):
            try:
                with t.lock:
                    self.store.delete_chat(self.owner, t.chat_id)
            except BaseException:
                # The transcripts not deleted are still in the store: keep them known (a
                # refused delete, e.g. `Forked` in a fork child, must not make `load` say None).
                with ix.lock:
                    for kk, tt in gone[i:]:
                        ix.keys.setdefault(kk, tt)
                raise
        if gone:
            for vk in {_view_key(kk) for kk, _t in gone}:
                for info in self.store.find_chats(self.chat_owner, extra={"import.key": vk}):
                    self.store.delete_chat(self.chat_owner, info.id)

    def list_subkeys_sync(self, key: SessionListSubkeysKey) -> list[str]:
        """``list_subkeys`` without the event loop (answered from memory)."""
        pk, sid = str(key["project_key"]), str(key["session_id"])
        with self._index.lock:
            return sorted(sub for (p, s, sub) in self._index.keys if p == pk and s == sid and sub)

    def chat(self, key: SessionKey) -> Any:
        """The session as an engine chat, through the Claude Code importer: brought up to
        date with the stored transcript (only what is new is appended) and returned. None
        for a key never written. A subagent transcript's chat names its session's chat
        as parent (``extra["import.parent"]``)."""
        k = _key_of(key)
        t = self._transcript(k, create=False)
        if t is None:
            return None
        with t.lock:
            msgs = self.store.chat(self.owner, t.chat_id).messages()
            data = "".join(m.text + "\n" for m in msgs).encode("utf-8", "surrogatepass")
            vk = _view_key(k)
            name = "/".join(p for p in k if p) + ".jsonl"
            report = import_transcript_bytes(
                self.store,
                self.chat_owner,
                name,
                data,
                format="claude-code",
                key=vk,
                parent_key=_view_key((k[0], k[1], "")) if k[2] else None,
            )
        return self.store.chat(self.chat_owner, report["chats"][vk])

    # -- the SessionStore protocol ----------------------------------------------------------

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Mirrors a batch of transcript entries: all or none, in call order; an entry
        whose ``uuid`` the key already holds is skipped."""
        if not entries:
            return
        t = self._index.keys.get(_key_of(key))
        if t is not None and t.uuids is not None and self._append_s < self._inline_below_s:
            self._timed_append(key, entries)  # in the loop: cheaper than a thread hop
        else:
            await _to_thread(self._timed_append, key, entries)

    def _timed_append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """``append_sync``, its wall time folded into the running average (weight 1/4)."""
        start = time.perf_counter()
        try:
            self.append_sync(key, entries)
        finally:
            self._append_s += (time.perf_counter() - start - self._append_s) / 4

    async def load(self, key: SessionKey) -> Optional[list[SessionStoreEntry]]:
        """Every entry of the key in append order (None for a key never written)."""
        return await _to_thread(self.load_sync, key)

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The main transcripts of ``project_key`` with their write times (epoch ms)."""
        return self.list_sessions_sync(project_key)

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The summaries of the main transcripts of ``project_key``."""
        return self.list_session_summaries_sync(project_key)

    async def delete(self, key: SessionKey) -> None:
        """Deletes a transcript (a main key: with all its subkeys)."""
        await _to_thread(self.delete_sync, key)

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The subpaths stored under a session."""
        return self.list_subkeys_sync(key)


def _view_key(k: _Key) -> str:
    """The importer key (``extra["import.key"]``) of a transcript's chat."""
    return json.dumps(["claude-agent-sdk", *k] if k[2] else ["claude-agent-sdk", k[0], k[1]])
