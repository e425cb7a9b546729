"""A LangChain chat message history over an Undertext store.

``UndertextChatMessageHistory`` implements ``langchain_core.chat_history.BaseChatMessageHistory``
(what ``RunnableWithMessageHistory`` and LangChain's memory classes take): ``messages``,
``add_messages``, ``clear``, and through the base class ``add_message``,
``add_user_message``, ``add_ai_message`` and the async ``aget_messages``,
``aadd_messages``, ``aclear`` (the sync calls in LangChain's executor; the engine releases
the GIL while it works).

Layout: one engine chat of ``owner`` per session id (titled with it, marked
``extra["undertext.langchain"] = "1"``; found by an index lookup, as the Agents SDK
session finds its chat). Each message is one engine message whose role follows the
LangChain type (human: user, ai: assistant, system: system, tool and function: tool) and
whose text is LangChain's own serialization of it (``message_to_dict``, compact JSON), so
``messages`` gives back messages equal to those added (``messages_from_dict``), in order,
and ``Store.search`` finds words of their content.

* ``add_messages`` is one engine transaction: all of the batch or none of it; anything
  that is not a LangChain message raises ``TypeError`` before anything is written.
* ``clear`` erases the history (``Chat.erase``): no read returns it and the next
  ``Store.gc`` drops its bytes from the files.
* After ``close()`` (or its store's), every call raises ``undertext.Closed``.

Example::

    with undertext.Store.open("state") as store:
        chain = RunnableWithMessageHistory(
            prompt | model,
            lambda session_id: UndertextChatMessageHistory(session_id, store),
            input_messages_key="question",
            history_messages_key="history",
        )
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ._extras import needs_extra

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict
except ImportError as e:  # pragma: no cover - exercised without LangChain installed
    raise needs_extra("langchain", "langchain-core", "langchain", "langchain-core", e) from e

import undertext

from ._holder import PathLike, StoreHolder, temporary_store
from ._json_text import json_text
from ._per_owner import shared
from ._session_chats import SessionChats, lock_for

__all__ = ["UndertextChatMessageHistory"]

#: ``extra`` key marking a chat as a LangChain chat history.
HISTORY_KEY = "undertext.langchain"

#: LangChain message type -> engine role.
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "tool"}


class _Histories(SessionChats):
    """The LangChain history chats of one owner in one open store."""

    MARK = HISTORY_KEY


def _role_of(message: BaseMessage) -> str:
    if message.type == "chat":  # ChatMessage: a free-form role
        role = getattr(message, "role", "")
        return role if role in ("user", "assistant", "system") else "assistant"
    return _ROLES.get(message.type, "assistant")


class UndertextChatMessageHistory(StoreHolder, BaseChatMessageHistory):
    """LangChain chat message history stored in an Undertext store.

    Args:
        session_id: the conversation's id (the chat's title).
        store: an open ``undertext.Store`` (shared by every history of the process, not
            closed by this object), or a path (``str`` or ``os.PathLike``): a store opened
            there, owned and closed by ``close()``.
        owner: the engine owner of the history chats.

    ``UndertextChatMessageHistory.open(session_id, path, **store_options)`` owns a store
    opened with those options; ``temporary(session_id)`` one in a new temporary directory,
    removed by ``close()`` (tests). One store is one process: the histories of a process
    share a store object.
    """

    def __init__(self, session_id: str, store: Any, *, owner: str = "langchain") -> None:
        self._hold(store)
        self.session_id = session_id
        self.owner = owner
        self._closed = False
        self._chat = shared(_Histories, self.store, owner).chat(session_id)
        self._lock = lock_for(self.store, self._chat.id)

    @classmethod
    def open(
        cls, session_id: str, path: PathLike, *, owner: str = "langchain", **store_options: Any
    ) -> UndertextChatMessageHistory:
        """A history over a store opened (or created) at ``path`` with ``store_options``
        (those of ``undertext.Store.open``), owned by the history."""
        return cls(session_id, undertext.Store.open(path, **store_options), owner=owner)._adopt()

    @classmethod
    def temporary(
        cls, session_id: str, *, owner: str = "langchain", **store_options: Any
    ) -> UndertextChatMessageHistory:
        """A history over a new store in a temporary directory, removed by ``close()``."""
        store, d = temporary_store(store_options)
        return cls(session_id, store, owner=owner)._adopt(d)

    @property
    def chat_id(self) -> str:
        """The engine chat holding the history (for ``Store.search(owner, q, chat=...)``)."""
        return str(self._chat.id)

    def close(self) -> None:
        """Closes the store if this history owns it; every later call raises ``Closed``."""
        self._closed = True
        super().close()

    def _check_open(self) -> None:
        if self._closed or self.store.closed:
            raise undertext.Closed(
                f"the chat history {self.session_id!r} is closed (UndertextChatMessageHistory.close() "
                "or its store closed); make a new one"
            )

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """Every message of the history, oldest first."""
        self._check_open()
        self._chat.refresh()  # other processes' writes (fleet); nothing to fetch embedded
        return messages_from_dict([json.loads(m.text) for m in self._chat.snapshot().iter()])

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Appends ``messages`` in one transaction (all or none)."""
        self._check_open()
        records = []
        for i, m in enumerate(messages):
            if not isinstance(m, BaseMessage):
                raise TypeError(
                    f"messages[{i}]: expected a LangChain message (BaseMessage), found "
                    f"{type(m).__name__}; nothing was added"
                )
            records.append({"role": _role_of(m), "content": json_text(message_to_dict(m))})
        if records:
            with self._lock:
                self._chat.append_batch(records)

    def clear(self) -> None:
        """Erases every message (``Chat.erase``: the next ``Store.gc`` drops their bytes)."""
        self._check_open()
        with self._lock:
            self._chat.refresh()
            snap = self._chat.snapshot()
            if next(iter(snap.iter()), None) is not None:
                self._chat.erase([(0, len(snap))], expected_revision=snap.revision)
