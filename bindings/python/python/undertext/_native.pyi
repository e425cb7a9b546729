"""Type stubs of the native module ``undertext._native`` (re-exported by ``undertext``)."""

import os
import pathlib
from typing import Any, Callable, Dict, Iterable, Iterator, List, Literal, Mapping, Optional, Protocol, Sequence, Tuple, TypedDict, Union

__version__: str

Unit = Literal["chars", "utf16", "bytes", "lines"]
Durability = Literal["immediate", "group", "none"]
HardLinePolicy = Literal["wait", "refuse", "synchronous"]
Part = Dict[str, Any]
MessageDict = Mapping[str, Any]
Id = Union[str, "ArchiveRef"]

class SearchHit(TypedDict):
    """A hit of ``Store.search``: the keys of the CLI's ``search --json`` and the C ABI's
    ``undertext_search``. ``start:end`` (in ``unit``) is the matched words' span: in archive
    ``archive`` when it is not None, otherwise in ``field`` of part ``part`` of message
    ``seq``."""

    chat: str
    seq: int
    archive: Optional[str]
    unit: Unit
    start: int
    end: int
    snippet: str
    score: float
    part: int
    field: Literal["text", "summary", "tool_name", "tool_args", "tool_result", "archive", "prompt"]

class _SummarizerObject(Protocol):
    def summarize(self, messages: List["Message"]) -> str: ...

SummarizerLike = Union["Extractive", Callable[[List["Message"]], str], _SummarizerObject]

def blob_id(data: bytes) -> str:
    """The content address (64 hex digits) ``Store.put_blob(owner, data)`` would return."""

def compaction_tool_schema(api: Literal["openai", "anthropic"] = "openai") -> str:
    """The compaction tool's schema (JSON text) in OpenAI's or Anthropic's shape."""

def import_transcript_bytes(
    store: "Store",
    owner: str,
    name: str,
    data: bytes,
    *,
    format: str = "auto",
    key: Optional[str] = None,
    parent_key: Optional[str] = None,
) -> Dict[str, Any]:
    """Imports one transcript held in memory, as ``Store.import_transcripts`` does for
    files; ``key``/``parent_key`` replace the session's keys. The report's ``chats`` maps
    each session key to its chat id."""

def json_loads(texts: List[str]) -> List[Any]:
    """``[json.loads(t) for t in texts]``, decoded in native code (the same values; a text
    it does not decode itself goes to ``json.loads``, errors included)."""

def json_dumps(value: Any, *, ensure_ascii: bool = True, allow_nan: bool = True) -> str:
    """``json.dumps(value, separators=(",", ":"), ensure_ascii=ensure_ascii, allow_nan=allow_nan)``,
    encoded in native code (the same text; a value it does not encode itself goes to
    ``json.dumps``, errors included)."""

def _json_exact(value: Any) -> bool:
    """Private (``undertext.langgraph._records``): whether JSON gives ``value`` back with the
    same types."""

def _json_patch(a: Dict[str, Any], b: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """Private (``undertext.langgraph._records``): the patch turning ``a`` into ``b``, or None
    when applying it does not give ``b``'s JSON text exactly."""

def _decode_lc_messages(
    datas: Sequence[bytes],
    table: Sequence[Tuple[str, str, type, Sequence[str], str]],
    usage_known: bool,
    fail: Any,
) -> List[Any]:
    """Private (``undertext.langgraph._langchain_decode.decode_each``): each msgpack document
    of ``datas`` decoded with LangChain messages built natively, ``fail`` for each one left
    to Python."""

def _fresh_items(items: Sequence[Any], pydantic_deepcopy: Any, fallback: Callable[[Any], Any]) -> List[Any]:
    """Private (``undertext.langgraph._caches._fresh_many``): ``_fresh`` of each item."""

def _same_prefix(a: List[Any], b: List[Any], stop: Optional[Iterable[int]] = None) -> int:
    """Private (``undertext.langgraph._saver``): how many items ``a`` and ``b`` share at their
    front as the same objects (``is``), ending before the first whose ``id()`` is in ``stop``."""

class Store:
    """An open Undertext store: one directory, one process at a time."""

    @classmethod
    def open(
        cls,
        path: Union[str, os.PathLike[str]],
        *,
        durability: Optional[Durability] = None,
        create_if_missing: Optional[bool] = None,
        archive_threshold: Optional[int] = None,
        preview_chars: Optional[int] = None,
        segment_size: Optional[int] = None,
        preallocate: Optional[bool] = None,
        chat_cache_capacity: Optional[int] = None,
        compression: Optional[str] = None,
        guard_preview_chars: Optional[int] = None,
        inline_body_max: Optional[int] = None,
        verify_index_on_open: Optional[bool] = None,
    ) -> "Store":
        """Opens (or creates) the store in `path`. An option left as None keeps the engine's
        default (durability "group", create_if_missing True, archive_threshold 8192,
        preview_chars 2000, segment_size 64 MiB, preallocate True, chat_cache_capacity 128,
        compression "zstd", guard_preview_chars 400, inline_body_max 8192,
        verify_index_on_open True: every index page checked at open; False opens in time
        independent of the index's size, and `check()` finds index damage instead)."""
        ...
    @classmethod
    def open_read_only(cls, path: Union[str, os.PathLike[str]]) -> "Store": ...
    def refresh(self) -> int: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def open_warnings(self) -> List[str]: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def _removed_on_close(self) -> None:
        """Marks a temporary store (its directory is removed when it closes): ``Closed`` then
        says so instead of advising to open it again."""
    def __enter__(self) -> "Store": ...
    def __exit__(self, *exc: object) -> Literal[False]: ...
    @property
    def path(self) -> "pathlib.Path": ...
    def put_blob(self, owner: str, data: Union[bytes, bytearray]) -> str:
        """Stores ``data`` for ``owner`` (granting it to ``owner``) and returns its id."""
    def put_blobs(self, owner: str, data: Sequence[bytes]) -> List[str]: ...
    def get_blob(self, owner: str, blob_id: Id, *, verify: Optional[Literal["hash", "checksum"]] = None) -> bytes:
        """The blob's bytes; ``NotFound`` for a blob ``owner`` holds no grant on (never
        stored, or stored only by other owners: the same error). ``verify="hash"`` (the
        default) checks the record's checksum and the content's BLAKE3 against the id,
        ``"checksum"`` the record's CRC-32C and the id it carries: damaged bytes raise
        ``Corrupt`` either way."""
    def get_blobs(
        self, owner: str, blob_ids: Sequence[Id], *, verify: Optional[Literal["hash", "checksum"]] = None
    ) -> List[bytes]:
        """Each blob's bytes, in order, read in one call (as ``get_blob`` for each: the
        first blob not granted raises ``NotFound``, a damaged one ``Corrupt``).
        ``verify="checksum"`` spares hashing each blob again: for a reader of hundreds of
        small blobs it wrote itself."""
    def get_blob_range(self, owner: str, blob_id: Id, start: int, end: int) -> bytes:
        """Bytes ``start:end`` of the blob, reading only the chunks the range overlaps.

        Raises ``InvalidArgument`` for ``start > end`` or ``end`` past the blob's length,
        ``NotFound`` for a blob ``owner`` holds no grant on.
        """
    def blob_len(self, owner: str, blob_id: Id) -> int:
        """Length of the blob in bytes, without reading its content (``NotFound`` if ``owner``
        holds no grant on it)."""
    def contains_blob(self, owner: str, blob_id: Id) -> bool: ...
    def sync(self) -> None: ...
    def owner_stats(self, owner: str) -> Dict[str, int]:
        """What ``owner``'s own chats hold (``chats``, ``messages``, ``text_bytes``,
        ``tool_results``, ``archived_results``, ``archived_bytes``): figures no other owner's
        writes move, unlike the store-wide ``stats()`` (for the store's operator)."""
    def stats(self) -> Dict[str, int]: ...
    def check(self) -> Dict[str, Any]: ...
    def create_chat(
        self,
        owner: str,
        *,
        title: str = "",
        model: str = "",
        draft: str = "",
        extra: Optional[Mapping[str, str]] = None,
    ) -> "Chat": ...
    def chat(self, owner: str, chat_id: str, *, refresh: bool = True) -> "Chat": ...
    def delete_chat(self, owner: str, chat_id: str) -> None: ...
    @classmethod
    def gc(
        cls, path: Union[str, os.PathLike[str]], *, segment_size: Optional[int] = None, compression: Optional[str] = None
    ) -> Dict[str, int]: ...
    def chats(self, owner: str, *, page_size: int = 100) -> "ChatIterator": ...
    def find_chats(
        self, owner: str, *, title: Optional[str] = None, extra: Optional[Mapping[str, str]] = None
    ) -> List["ChatInfo"]: ...
    def import_transcripts(
        self, owner: str, paths: Sequence[Union[str, os.PathLike[str]]], *, format: str = "auto"
    ) -> Dict[str, Any]: ...
    def archive(self, owner: str, text: str) -> "ArchiveRef": ...
    def archive_ref(self, owner: str, archive_id: Id) -> "ArchiveRef": ...
    def read_context(self, owner: str, archive_id: Id, start: int, end: int, unit: Unit = "chars") -> str: ...
    def preview(self, owner: str, archive_id: Id, max_chars: int = 2000, query: Optional[str] = None) -> str: ...
    def search(
        self,
        owner: str,
        query: str,
        chat: Optional[str] = None,
        limit: int = 10,
        include_hidden: bool = False,
    ) -> List[SearchHit]: ...
    def read_hit(self, owner: str, hit: Mapping[str, Any]) -> str: ...
    def history_tool_call(self, owner: str, name: str, args: str) -> str: ...
    @staticmethod
    def history_tool_schemas(shape: Literal["openai", "anthropic"] = "openai") -> List[str]: ...
    def start_worker(
        self,
        summarizer: SummarizerLike,
        *,
        threads: int = 4,
        soft: float = 2.0 / 3.0,
        segment_tokens: int = 8000,
        fan_in: int = 4,
        at_hard_line: HardLinePolicy = "wait",
        wait_seconds: float = 30.0,
        retries: int = 2,
    ) -> "Worker": ...

class ChatIterator(Iterator["ChatInfo"]):
    def __iter__(self) -> "ChatIterator": ...
    def __next__(self) -> "ChatInfo": ...

class Chat:
    """A chat of one owner: an append-only message log with revision-guarded edits."""

    @property
    def id(self) -> str: ...
    @property
    def owner(self) -> str: ...
    def refresh(self) -> None: ...
    @property
    def revision(self) -> int: ...
    def __len__(self) -> int: ...
    @property
    def meta(self) -> "ChatMeta": ...
    @property
    def meta_version(self) -> int: ...
    def set_meta(
        self,
        *,
        title: Optional[str] = None,
        model: Optional[str] = None,
        draft: Optional[str] = None,
        extra: Optional[Mapping[str, str]] = None,
    ) -> int: ...
    def meta_at(self, version: int) -> "ChatMeta": ...
    def append(self, message: MessageDict, *, key: Optional[str] = None) -> int:
        """Appends one message; returns its seq. With ``key`` (an idempotency key, 1 to 256
        bytes), an append with the same key made to this chat before is returned instead and
        nothing is written: a retry after an error whose outcome is unknown stores one copy."""
    def append_batch(
        self,
        messages: Sequence[MessageDict],
        *,
        title: Optional[str] = None,
        model: Optional[str] = None,
        draft: Optional[str] = None,
        extra: Optional[Mapping[str, str]] = None,
        key: Optional[str] = None,
    ) -> range:
        """Appends ``messages`` in one transaction; returns their seqs. With any metadata field
        given, the metadata changes (as ``set_meta``) in the same transaction: one log sync.
        With ``key``, as ``append``'s (not together with a metadata field)."""
    def append_with_blobs(self, blobs: Sequence[bytes], messages: Sequence[MessageDict]) -> Tuple[List[str], range]:
        """Stores ``blobs`` and appends ``messages`` (which may attach them) in one transaction.

        One log sync makes both durable. Returns the blobs' ids in order and the ``range`` of
        the messages' seqs. An attachment naming a blob neither stored nor passed raises
        ``NotFound`` and nothing is written.
        """
    def record_step(
        self, turn: int, stream_id: str, step: int, messages: Sequence[MessageDict], *, complete: bool = True
    ) -> range: ...
    def attempts(self, turn: int) -> List["Attempt"]: ...
    def get(self, seq: int) -> "Message": ...
    def __getitem__(self, index: int) -> "Message": ...
    def messages(self, start: int = 0, end: Optional[int] = None, *, hidden: bool = False) -> List["Message"]:
        """Messages ``start..end``; hidden ones (``Chat.hide``) only with ``hidden=True``."""
    def iter(
        self, start: int = 0, end: Optional[int] = None, *, reverse: bool = False, hidden: bool = False
    ) -> "MessageIterator": ...
    def __iter__(self) -> "MessageIterator": ...
    def edit(self, seq: int, message: MessageDict, expected_revision: int) -> int: ...
    def truncate(self, from_seq: int, expected_revision: int) -> int: ...
    def hide(self, ranges: Sequence[Union[Tuple[int, int], range]], expected_revision: int) -> int:
        """Hides the messages of ``ranges`` (soft deletion) if the chat is still at
        ``expected_revision``; returns the new revision.

        Hidden messages leave the model view, checkpoints and the default reads; ``chat[seq]``
        and ``messages(hidden=True)`` still read them. A tool call and its results are hidden
        together or not at all (``InvalidArgument``).
        """
    def erase(self, ranges: Sequence[Union[Tuple[int, int], range]], expected_revision: int) -> int:
        """Erases the messages of ``ranges`` if the chat is still at ``expected_revision``;
        returns the new revision.

        Use it where a deletion must be honoured. An erased message is hidden, no read returns
        it at any revision (``chat[seq]`` raises ``NotFound``), and the next ``Store.gc``
        drops its bytes from the files. ``hide`` is the soft deletion that keeps them.
        """
    def hide_and_append(
        self,
        ranges: Sequence[Union[Tuple[int, int], range]],
        messages: Sequence[MessageDict],
        expected_revision: int,
    ) -> Tuple[int, range]:
        """``hide`` and ``append_batch`` in one transaction: the new revision and the appended seqs."""
    def snapshot(self, revision: Optional[int] = None) -> "Snapshot": ...
    def pin(self, archive_id: Id, start: int, end: int, unit: Unit = "chars") -> None: ...
    def unpin(self, archive_id: Id, start: int, end: int, unit: Unit = "chars") -> None: ...
    @property
    def pins(self) -> List["Pin"]: ...
    def view(self, budget: "Budget") -> "View": ...
    def estimate(self, budget: "Budget") -> int: ...
    def report_usage(self, step: int, actual_input_tokens: int) -> float: ...
    def index(self) -> List["IndexLine"]: ...
    def protected_minimum(self, budget: "Budget") -> int: ...
    def compaction_tool_call(self, args: str, *, expected_revision: int, budget: "Budget") -> str: ...
    def lint(
        self, trims: Sequence[int] = (), squishes: Sequence[Tuple[int, int, str]] = ()
    ) -> List[Tuple[str, str]]: ...
    def compact(
        self, trims: Sequence[int] = (), squishes: Sequence[Tuple[int, int, str]] = (), *, expected_revision: int
    ) -> int: ...
    def first_pending_approval(self) -> Optional[Tuple[int, Dict[str, str]]]: ...
    def build_checkpoint(
        self, summarizer: Optional[SummarizerLike] = None, *, segment_tokens: int = 8000, fan_in: int = 4
    ) -> "Checkpoint": ...
    def publish_checkpoint(self, checkpoint: "Checkpoint") -> None: ...
    @property
    def published_checkpoint(self) -> Optional[Tuple[int, int]]: ...
    @property
    def prepared_checkpoint(self) -> Optional["Checkpoint"]: ...
    def __hash__(self) -> int: ...

class Snapshot:
    """An immutable state of a chat."""

    @property
    def chat_id(self) -> str: ...
    @property
    def revision(self) -> int: ...
    def __len__(self) -> int: ...
    @property
    def meta(self) -> "ChatMeta": ...
    @property
    def pins(self) -> List["Pin"]: ...
    def get(self, seq: int) -> "Message": ...
    def __getitem__(self, index: int) -> "Message": ...
    def messages(self, start: int = 0, end: Optional[int] = None, *, hidden: bool = False) -> List["Message"]:
        """Messages ``start..end``; hidden ones (``Chat.hide``) only with ``hidden=True``."""
    def iter(
        self, start: int = 0, end: Optional[int] = None, *, reverse: bool = False, hidden: bool = False
    ) -> "MessageIterator": ...
    def __iter__(self) -> "MessageIterator": ...
    def texts(
        self,
        start: int = 0,
        end: Optional[int] = None,
        *,
        reverse: bool = False,
        limit: Optional[int] = None,
        json: bool = False,
    ) -> List[Tuple[int, Any]]:
        """The live messages of ``start..end`` (newest first with ``reverse=True``), at most
        ``limit``, as ``(seq, value)``: the message's text, or with ``json=True`` the value
        ``json.loads`` gives for it; ``None`` for a message without a text part. Reads only
        the messages it returns and makes no ``Message`` objects."""
    def is_hidden(self, seq: int) -> bool: ...
    @property
    def hidden(self) -> List[Tuple[int, int]]:
        """The hidden seqs: sorted, disjoint ``(start, end)`` pairs (``end`` excluded)."""

class MessageIterator(Iterator["Message"]):
    def __iter__(self) -> "MessageIterator": ...
    def __next__(self) -> "Message": ...

class Message:
    """A stored message."""

    @property
    def seq(self) -> int: ...
    @property
    def revision(self) -> int: ...
    @property
    def role(self) -> Literal["system", "user", "assistant", "tool"]: ...
    @property
    def turn(self) -> int: ...
    @property
    def parts(self) -> List[Part]: ...
    @property
    def step(self) -> Optional[Tuple[int, str, int]]: ...
    @property
    def at_ms(self) -> int: ...
    @property
    def feedback(self) -> bool:
        """Harness feedback (appended with ``"feedback": True``): it started no user turn."""
    @property
    def text(self) -> str: ...
    def to_dict(self) -> Dict[str, Any]: ...

class ChatMeta:
    @property
    def title(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def draft(self) -> str: ...
    @property
    def extra(self) -> Dict[str, str]: ...

class ChatInfo:
    @property
    def id(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def draft(self) -> str: ...
    @property
    def extra(self) -> Dict[str, str]: ...
    @property
    def len(self) -> int: ...
    @property
    def revision(self) -> int: ...
    @property
    def created_ms(self) -> int: ...
    @property
    def last_activity_ms(self) -> int: ...

class ArchiveRef:
    @property
    def id(self) -> str: ...
    @property
    def bytes(self) -> int: ...
    @property
    def chars(self) -> int: ...
    @property
    def utf16_units(self) -> int: ...
    @property
    def lines(self) -> int: ...
    def __hash__(self) -> int: ...

class Pin:
    @property
    def archive(self) -> str: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def unit(self) -> Unit: ...

class Step:
    @property
    def step(self) -> int: ...
    @property
    def complete(self) -> bool: ...
    @property
    def messages(self) -> List[Message]: ...
    @property
    def seqs(self) -> List[int]: ...
    @property
    def at_ms(self) -> int: ...

class Attempt:
    @property
    def stream_id(self) -> str: ...
    @property
    def steps(self) -> List[Step]: ...

class IndexLine:
    @property
    def seq(self) -> int: ...
    @property
    def role(self) -> str: ...
    @property
    def tokens(self) -> int: ...
    @property
    def preview(self) -> str: ...

class Budget:
    """The token budget of one model call."""

    def __init__(
        self,
        window: int,
        reserve_output: int = 0,
        *,
        soft: float = 0.7,
        target: float = 0.5,
        hard: float = 0.9,
        tool_schemas: Sequence[str] = (),
        protect_max_tokens: int | None = None,
        instructions_max_tokens: int | None = None,
        nudge: float | None = None,
    ) -> None: ...
    @property
    def window(self) -> int: ...
    @property
    def reserve_output(self) -> int: ...
    @property
    def soft(self) -> float: ...
    @property
    def target(self) -> float: ...
    @property
    def hard(self) -> float: ...
    @property
    def tool_schemas(self) -> List[str]: ...
    @property
    def usable(self) -> int: ...
    @property
    def soft_limit(self) -> int: ...
    @property
    def target_limit(self) -> int: ...
    @property
    def hard_limit(self) -> int: ...

class View:
    """The model view of a chat under a budget."""

    @property
    def decision(self) -> Literal["fits", "compacted", "refused"]: ...
    @property
    def previewed(self) -> List[int]: ...
    @property
    def tokens_saved(self) -> int: ...
    @property
    def estimate(self) -> int: ...
    @property
    def raw_estimate(self) -> int: ...
    @property
    def calibration(self) -> float: ...
    @property
    def step(self) -> int: ...
    @property
    def revision(self) -> int: ...
    @property
    def nudge(self) -> Optional[str]: ...
    @property
    def stable_prefix_messages(self) -> int: ...
    @property
    def stable_prefix_tokens(self) -> int: ...
    @property
    def reread_tokens(self) -> int: ...
    @property
    def omitted(self) -> Dict[str, Any]: ...
    @property
    def swap_seconds(self) -> Optional[float]: ...
    @property
    def messages(self) -> List[Dict[str, Any]]: ...
    def openai(self) -> List[Dict[str, Any]]: ...
    def anthropic(self) -> Dict[str, Any]: ...
    def __len__(self) -> int: ...

class Checkpoint:
    @property
    def base_revision(self) -> int: ...
    @property
    def reach(self) -> int: ...
    @property
    def summary(self) -> str: ...
    @property
    def root(self) -> str: ...
    @property
    def summarizer(self) -> str: ...
    @property
    def segments(self) -> List[Tuple[int, int, str]]: ...
    @property
    def stats(self) -> Dict[str, int]: ...

class Extractive:
    """The engine's deterministic summarizer."""

    def __init__(self, max_chars: int = 4000) -> None: ...
    @property
    def max_chars(self) -> int: ...

class Worker:
    """The background pre-compaction worker."""

    @property
    def jobs_done(self) -> int: ...
    @property
    def errors(self) -> List[str]: ...
    @property
    def exceptions(self) -> List[BaseException]: ...
    @property
    def running(self) -> bool: ...
    def stop(self) -> None: ...
    def __enter__(self) -> "Worker": ...
    def __exit__(self, *exc: object) -> Literal[False]: ...
