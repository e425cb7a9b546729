"""Undertext: embedded, crash-safe storage for the conversation state of LLM agent harnesses.

Open a store, keep chats in it, and ask for the model view of a chat under a token budget::

    import undertext

    with undertext.Store.open("agent-data") as store:
        chat = store.create_chat("alice", title="fix the build")
        chat.append(undertext.user("why does CI fail?"))
        view = chat.view(undertext.Budget(200_000, 8_000))
        messages = view.openai()

Every engine error is a subclass of :class:`UndertextError`. ``API.md``, installed in this
package (``importlib.resources.files("undertext") / "API.md"``), describes the whole surface.
"""

import contextlib as _contextlib
import json as _json
import shutil as _shutil
import tempfile as _tempfile
from pathlib import Path as _Path
from typing import Any, Dict, Iterator, Optional

from ._errors import (
    Closed,
    Conflict,
    Corrupt,
    IndexFailure,
    InternalError,
    InvalidArgument,
    IOFailure,
    LintRejected,
    Locked,
    NotFound,
    Poisoned,
    Forked,
    Busy,
    Refused,
    StaleRevision,
    UndertextError,
    UnsupportedVersion,
)
from ._native import (
    ArchiveRef,
    Attempt,
    Budget,
    Chat,
    ChatInfo,
    ChatIterator,
    ChatMeta,
    Checkpoint,
    Extractive,
    IndexLine,
    Message,
    MessageIterator,
    Pin,
    Snapshot,
    Step,
    Store,
    View,
    Worker,
    __version__,
    blob_id,
    compaction_tool_schema,
)

__all__ = [
    "ArchiveRef",
    "Attempt",
    "Budget",
    "Chat",
    "ChatInfo",
    "ChatIterator",
    "ChatMeta",
    "Checkpoint",
    "Closed",
    "Conflict",
    "Corrupt",
    "Extractive",
    "IOFailure",
    "IndexFailure",
    "IndexLine",
    "InternalError",
    "InvalidArgument",
    "LintRejected",
    "Locked",
    "Message",
    "MessageIterator",
    "NotFound",
    "Pin",
    "Poisoned",
    "Forked",
    "Busy",
    "Refused",
    "Snapshot",
    "StaleRevision",
    "Step",
    "Store",
    "UndertextError",
    "UnsupportedVersion",
    "View",
    "Worker",
    "__version__",
    "assistant",
    "blob_id",
    "system",
    "temporary_store",
    "tool_call",
    "tool_result",
    "user",
    "feedback",
    "compaction_tool_schema",
]


@_contextlib.contextmanager
def temporary_store(**options: Any) -> Iterator[Store]:
    """A store in a new temporary directory, closed and removed on exit (for tests)::

        with undertext.temporary_store(durability="none") as store:
            ...

    ``options`` are those of ``Store.open``."""
    d = _tempfile.mkdtemp(prefix="undertext-")
    try:
        with Store.open(_Path(d) / "store", **options) as store:
            store._removed_on_close()
            yield store
    finally:
        _shutil.rmtree(d, ignore_errors=True)


def user(text: str) -> Dict[str, Any]:
    """A user message with one text part."""
    return {"role": "user", "content": text}


def feedback(text: str) -> Dict[str, Any]:
    """Harness feedback: a user message the harness wrote itself (a format error, "please use
    exactly one bash block", an injected reminder). It starts no user turn, so the task stays
    in the protected turns."""
    return {"role": "user", "content": text, "feedback": True}


def assistant(text: str) -> Dict[str, Any]:
    """An assistant message with one text part."""
    return {"role": "assistant", "content": text}


def system(text: str) -> Dict[str, Any]:
    """A system message with one text part."""
    return {"role": "system", "content": text}


def tool_call(call_id: str, name: str, args: Any, text: Optional[str] = None) -> Dict[str, Any]:
    """An assistant message calling tool ``name``; ``args`` is JSON text or a JSON-able object."""
    parts = [] if text is None else [{"type": "text", "text": text}]
    args_text = args if isinstance(args, str) else _json.dumps(args)
    parts.append({"type": "tool_call", "id": call_id, "name": name, "args": args_text})
    return {"role": "assistant", "parts": parts}


def tool_result(call_id: str, text: str, is_error: bool = False) -> Dict[str, Any]:
    """A tool message carrying the result ``text`` of call ``call_id``."""
    return {
        "role": "tool",
        "parts": [{"type": "tool_result", "call_id": call_id, "text": text, "is_error": is_error}],
    }
