"""A session id to its chat: one engine chat per session, titled with the session id.

The adapters whose framework names a conversation by a session id (the Agents SDK session,
the LangChain chat history) keep each session in one chat of their owner, titled with the
id and marked in its ``extra`` with the adapter's key (``MARK``). ``SessionChats`` finds a
session's chat once per process by an index lookup (``Store.find_chats`` by title) and
creates it on first use; the owner's chats are never scanned. One lock per chat
(``lock_for``) orders the writes of every object of the process on it.

Example::

    class _Histories(SessionChats):
        MARK = "undertext.langchain"

    chat = shared(_Histories, store, "langchain").chat("conversation-1")
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["SessionChats", "lock_for"]


class SessionChats:
    """The session chats of one owner in one open store (make it with
    ``_per_owner.shared``): session id to chat id, each found once and shared by every
    session object of the process. Subclasses set ``MARK``, the ``extra`` key (value
    ``"1"``) marking their chats."""

    MARK = ""

    def __init__(self, store: Any, owner: str) -> None:
        self.store = store
        self.owner = owner
        self.lock = threading.Lock()
        self.ids: dict[str, str] = {}

    def chat(self, session_id: str) -> Any:
        """The session's chat, created if the owner has none."""
        mark = {self.MARK: "1"}
        with self.lock:
            chat_id = self.ids.get(session_id)
            if chat_id is None:
                # Newest activity first: if several chats have the title, the first wins.
                found = self.store.find_chats(self.owner, title=session_id, extra=mark)
                if found:
                    chat_id = self.ids[session_id] = found[0].id
            if chat_id is None:
                chat = self.store.create_chat(self.owner, title=session_id, extra=mark)
                self.ids[session_id] = chat.id
                return chat
        return self.store.chat(self.owner, chat_id)


_LOCKS: dict[tuple[str, str], threading.RLock] = {}
_LOCKS_GUARD = threading.Lock()


def lock_for(store: Any, chat_id: str) -> threading.RLock:
    """One lock per chat per process, shared by every session object on it."""
    key = (str(store.path), chat_id)
    with _LOCKS_GUARD:
        lock = _LOCKS.get(key)
        if lock is None:
            lock = _LOCKS[key] = threading.RLock()
        return lock
