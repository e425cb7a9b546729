"""The exceptions of undertext: one class per kind of engine error.

Every class derives from :class:`UndertextError`. The native module raises them by name
(``bindings/python/src/errors.rs``), with the attributes each one documents set from the
engine's error.
"""

from typing import Any, List, Optional, Tuple

__all__ = [
    "UndertextError",
    "IOFailure",
    "Corrupt",
    "Locked",
    "NotFound",
    "StaleRevision",
    "InvalidArgument",
    "UnsupportedVersion",
    "Conflict",
    "LintRejected",
    "IndexFailure",
    "Poisoned",
    "Forked",
    "Busy",
    "Refused",
    "Closed",
    "InternalError",
]


class UndertextError(Exception):
    """Base class of every error raised by undertext.

    ``str(e)`` is the engine's message: it says what was expected and what was found.
    Keyword arguments become attributes of the exception.
    """

    def __init__(self, message: str = "", **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        for key, value in fields.items():
            setattr(self, key, value)

    def __str__(self) -> str:
        return self.message


class IOFailure(UndertextError, OSError):
    """An operating-system I/O call failed (``errno`` when the OS gave one)."""

    errno: Optional[int]

    def __init__(self, message: str = "", **fields: Any) -> None:
        UndertextError.__init__(self, message, **fields)


class Corrupt(UndertextError):
    """Stored bytes do not match their checksum or content address (``segment``, ``offset``, ``reason``).

    Content that passed its checksum but is not what its record says (an archive that is not
    UTF-8, a role code this build does not know) is named by the object it is in: ``what``
    says which, and ``segment`` and ``offset`` are ``None``.
    """

    segment: Optional[int]
    offset: Optional[int]
    reason: str
    what: Optional[str]


class Locked(UndertextError):
    """Another process (or another open handle) holds the store; ``pid`` is its process id (0 if unknown)."""

    pid: int


class Forked(UndertextError):
    """The store was opened by process ``opened_by``; the caller (``caller``) is a fork of it.

    A forked child (``multiprocessing`` with the "fork" start method, a pre-forking server)
    has copies of the parent's handles but not its threads; using them would lose acknowledged
    writes of either process, so every call fails with this error and dropping the handles
    writes nothing. Open the store in the child after the fork, or use the "spawn" or
    "forkserver" start method.
    """

    opened_by: int
    caller: int


class Busy(UndertextError):
    """A read-only open met a store that process ``pid`` is creating or collecting (``gc``).

    The open was tried again for about a second; this is not damage: retry in a moment.
    """

    pid: int


class NotFound(UndertextError, KeyError):
    """The object does not exist or belongs to another owner (the two are indistinguishable)."""

    what: str

    def __str__(self) -> str:
        return self.message


class StaleRevision(UndertextError):
    """An edit was based on revision ``expected``; the chat is at ``found``."""

    expected: int
    found: int


class InvalidArgument(UndertextError, ValueError):
    """An argument was out of range or malformed."""


class UnsupportedVersion(UndertextError):
    """The on-disk format is not understood by this build (``expected``, ``found``)."""

    expected: int
    found: int


class Conflict(UndertextError):
    """A checkpoint was not published. ``kind`` is ``"edited"`` (with ``base`` and ``now``)
    or ``"not_newer"`` (with ``published_reach``)."""

    kind: str
    base: Optional[int] = None
    now: Optional[int] = None
    published_reach: Optional[int] = None


class LintRejected(UndertextError):
    """A compaction plan broke the linter's rules; ``problems`` is a list of (rule, detail)."""

    problems: List[Tuple[str, str]]


class IndexFailure(UndertextError):
    """The derived index failed; the log is intact and the index can be rebuilt."""


class Poisoned(UndertextError):
    """An earlier I/O failure left the writer unable to continue; reopen the store."""


class Refused(UndertextError):
    """The view is over the hard line even after compaction: do not send it.

    ``estimate`` and ``limit`` are in tokens, ``over_by = estimate - limit``; ``view`` is the
    refused view (its messages carry the previews made before refusing).
    """

    estimate: int
    limit: int
    over_by: int
    view: Any


class Closed(UndertextError, RuntimeError):
    """The store (or the adapter session over it) was closed; open it again. Also a
    ``RuntimeError``, what Python raises for an operation on a closed object (the Agents
    SDK's ``SQLiteSession`` raises ``RuntimeError`` too). After a temporary store closed, its
    directory is gone and the message says so."""


class InternalError(UndertextError):
    """A bug in undertext (a Rust panic caught before it reached Python)."""
