//! The plain data of conversation history: chats, messages, parts, steps and attempts
//! (it knows blob ids and errors, nothing above). Re-exported by `history`.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::base::blob::BlobId;
use crate::base::error::Error;

/// A chat's id. Unique in a store; printed as `chat-` and 16 hex digits.
///
/// ```
/// use undertext::ChatId;
/// let id = ChatId(42);
/// assert_eq!(id.to_string(), "chat-000000000000002a");
/// assert_eq!("chat-000000000000002a".parse::<ChatId>().unwrap(), id);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChatId(pub u64);

impl fmt::Display for ChatId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chat-{:016x}", self.0)
    }
}

impl FromStr for ChatId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let hex = s.strip_prefix("chat-").unwrap_or(s);
        u64::from_str_radix(hex, 16).map(ChatId).map_err(|_| {
            Error::InvalidArgument(format!("chat id: expected chat-<16 hex digits>, found {s:?}"))
        })
    }
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Instructions for the model.
    System,
    /// The human (or, in Anthropic's format, the carrier of tool results).
    User,
    /// The model.
    Assistant,
    /// A tool's output (OpenAI's format).
    Tool,
}

impl Role {
    pub(crate) fn code(self) -> u8 {
        match self {
            Role::System => 0,
            Role::User => 1,
            Role::Assistant => 2,
            Role::Tool => 3,
        }
    }

    pub(crate) fn from_code(c: u8) -> Option<Role> {
        Some(match c {
            0 => Role::System,
            1 => Role::User,
            2 => Role::Assistant,
            3 => Role::Tool,
            _ => return None,
        })
    }

    /// The lowercase name (`"user"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// A reference to an archived text (see the archives issue): its content address and sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArchiveRef {
    /// The archive's content address.
    pub id: BlobId,
    /// Length in bytes (UTF-8).
    pub bytes: u64,
    /// Length in Unicode scalar values.
    pub chars: u64,
    /// Length in UTF-16 code units.
    pub utf16_units: u64,
    /// Number of lines.
    pub lines: u64,
}

/// The content of a tool result: the text itself, or a preview and the archive holding
/// the whole text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ToolContent {
    /// The full text.
    Text(String),
    /// A preview that says it is incomplete, and the archive with every byte.
    Archived {
        /// The archive.
        archive: ArchiveRef,
        /// The preview shown to the model.
        preview: String,
    },
}

/// One part of a message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Part {
    /// Plain text.
    Text(String),
    /// A tool call made by the model; `args` is JSON text.
    ToolCall {
        /// The call id the result refers to.
        id: String,
        /// Tool name.
        name: String,
        /// Arguments, as JSON text (validated on append).
        args: String,
    },
    /// The result of a tool call.
    ToolResult {
        /// The id of the call this answers.
        call_id: String,
        /// The output.
        content: ToolContent,
        /// Whether the tool failed.
        is_error: bool,
    },
    /// A request for the human's approval before something runs.
    ApprovalRequest {
        /// Approval id, answered by an [`Part::ApprovalResponse`] with the same id.
        id: String,
        /// The tool call it gates, if any.
        call_id: Option<String>,
        /// What is asked.
        prompt: String,
    },
    /// The human's answer to an approval request.
    ApprovalResponse {
        /// The request's id.
        id: String,
        /// Granted or denied.
        approved: bool,
        /// Why, if given.
        reason: Option<String>,
    },
    /// A binary attachment stored as a blob.
    Attachment {
        /// MIME type.
        mime: String,
        /// The blob holding the bytes.
        blob: BlobId,
    },
    /// A summary of earlier history (data, never authority).
    Summary(String),
}

/// A message to append: role and parts. The store gives it its `seq` and turn.
///
/// ```
/// use undertext::{NewMessage, Part};
/// let m = NewMessage::user("What is in Cargo.toml?");
/// assert_eq!(m.parts, vec![Part::Text("What is in Cargo.toml?".into())]);
/// assert!(m.starts_turn());
/// // The harness's own reply to the model (a format error, a reminder) starts no turn.
/// let f = NewMessage::feedback("Please always provide EXACTLY ONE action.");
/// assert!(f.feedback && !f.starts_turn());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMessage {
    /// Who wrote it.
    pub role: Role,
    /// Its parts, in order.
    pub parts: Vec<Part>,
    /// Harness feedback: a user message the harness wrote itself (a format error, "please
    /// use exactly one bash block", an injected reminder), not the human's. It starts no user
    /// turn, so it never pushes the task out of the protected turns. Only a user message may
    /// be feedback; stored with the message (FORMAT.md, "role").
    pub feedback: bool,
}

impl NewMessage {
    /// A message of `role` with one text part.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        NewMessage { role, parts: vec![Part::Text(text.into())], feedback: false }
    }

    /// A user message with one text part marked as harness feedback (see
    /// [`NewMessage::feedback`](NewMessage#structfield.feedback)): it starts no user turn.
    pub fn feedback(text: impl Into<String>) -> Self {
        NewMessage { feedback: true, ..Self::user(text) }
    }

    /// This message, marked as harness feedback (`true`) or not.
    pub fn with_feedback(self, feedback: bool) -> Self {
        NewMessage { feedback, ..self }
    }

    /// A user message with one text part.
    pub fn user(text: impl Into<String>) -> Self {
        Self::text(Role::User, text)
    }

    /// An assistant message with one text part.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::text(Role::Assistant, text)
    }

    /// A system message with one text part.
    pub fn system(text: impl Into<String>) -> Self {
        Self::text(Role::System, text)
    }

    /// A tool message carrying one text result of call `call_id`.
    pub fn tool_result(call_id: impl Into<String>, text: impl Into<String>) -> Self {
        NewMessage {
            role: Role::Tool,
            parts: vec![Part::ToolResult {
                call_id: call_id.into(),
                content: ToolContent::Text(text.into()),
                is_error: false,
            }],
            feedback: false,
        }
    }

    /// True when this message opens a new user turn: a user message, not harness feedback,
    /// with some part that is neither a tool result nor an approval response (those answer
    /// the model, they do not start a turn).
    pub fn starts_turn(&self) -> bool {
        !self.feedback && starts_turn(self.role, &self.parts)
    }
}

/// Longest owner name, in bytes.
pub const MAX_OWNER_LEN: usize = 1024;

/// `InvalidArgument` unless `owner` is 1 to [`MAX_OWNER_LEN`] bytes.
pub(crate) fn check_owner(owner: &str) -> Result<(), Error> {
    if owner.is_empty() || owner.len() > MAX_OWNER_LEN {
        return Err(Error::InvalidArgument(format!(
            "owner: expected 1 to {MAX_OWNER_LEN} bytes, found {}",
            owner.len()
        )));
    }
    Ok(())
}

pub(crate) fn starts_turn(role: Role, parts: &[Part]) -> bool {
    role == Role::User
        && parts.iter().any(|p| !matches!(p, Part::ToolResult { .. } | Part::ApprovalResponse { .. }))
}

/// Which model step produced a message: (user turn, stream, step number).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StepTag {
    /// The user turn.
    pub turn: u64,
    /// The attempt's stream id; a retry is a new stream for the same turn.
    pub stream_id: String,
    /// The step number within the stream.
    pub step: u32,
}

/// A stored message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Position in the chat, dense from 0.
    pub seq: u64,
    /// The revision this version of the message was written at.
    pub revision: u64,
    /// Who wrote it.
    pub role: Role,
    /// The user turn it belongs to: the number of turn-starting user messages at or before
    /// it (messages before the first user message are turn 0).
    pub turn: u64,
    /// Its parts.
    pub parts: Vec<Part>,
    /// For model output recorded with `record_step`: the step that produced it.
    pub step: Option<StepTag>,
    /// When it was written (milliseconds since the Unix epoch).
    pub at_ms: u64,
    /// Harness feedback (see [`NewMessage::feedback`](NewMessage#structfield.feedback)): a
    /// user message that started no turn.
    pub feedback: bool,
}

/// A message without its parts (see [`Snapshot::header`](crate::Snapshot::header)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageHeader {
    /// Position in the chat.
    pub seq: u64,
    /// Revision this version was written at.
    pub revision: u64,
    /// Who wrote it.
    pub role: Role,
    /// Its user turn.
    pub turn: u64,
    /// Whether it opened that turn.
    pub starts_turn: bool,
    /// The step that produced it, if recorded with `record_step`.
    pub step: Option<StepTag>,
    /// When it was written (ms since the Unix epoch).
    pub at_ms: u64,
}

/// A page of an archive kept in a chat's model view (see [`Chat::pin`](crate::Chat::pin)).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pin {
    /// The archive.
    pub archive: BlobId,
    /// The unit `range` counts in.
    pub unit: Unit,
    /// The pinned range.
    pub range: std::ops::Range<u64>,
}

/// Mutable, versioned chat metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChatMeta {
    /// Title or slug.
    pub title: String,
    /// The model the chat talks to.
    pub model: String,
    /// An unsent draft.
    pub draft: String,
    /// Free key-value pairs.
    pub extra: BTreeMap<String, String>,
}

/// Status of a recorded model step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepStatus {
    /// The model's response finished.
    Complete,
    /// The response was cut off (stream error, cancel, crash); never shown as complete.
    Interrupted,
}

/// A recorded step: its number, status and the messages it produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Step number within its stream.
    pub step: u32,
    /// Complete or interrupted.
    pub status: StepStatus,
    /// The messages, as appended (their `seq`s are in `seqs`).
    pub messages: Vec<Message>,
    /// The `seq` each message got in the chat when it was recorded.
    pub seqs: Vec<u64>,
    /// When it was recorded (ms since the Unix epoch).
    pub at_ms: u64,
}

/// One attempt at a user turn: a stream and its steps, in the order they were recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The stream id.
    pub stream_id: String,
    /// Its steps.
    pub steps: Vec<Step>,
}

/// The metadata field [`Store::find_chats`](crate::Store::find_chats) matches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaField<'a> {
    /// [`ChatMeta::title`].
    Title,
    /// The entry of [`ChatMeta::extra`] under this key.
    Extra(&'a str),
}

/// A line of [`Store::chats`](crate::Store::chats).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatSummary {
    /// The chat.
    pub id: ChatId,
    /// Its current metadata.
    pub meta: ChatMeta,
    /// Number of messages.
    pub len: u64,
    /// Current revision.
    pub revision: u64,
    /// Creation time (ms since the Unix epoch).
    pub created_ms: u64,
    /// Last write (ms since the Unix epoch).
    pub last_activity_ms: u64,
}

/// Which page of [`Store::chats`](crate::Store::chats) to return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// At most this many chats (1..=1000).
    pub limit: usize,
    /// Continue after this cursor (from [`ChatPage::next`]).
    pub after: Option<PageCursor>,
}

impl Default for Page {
    fn default() -> Self {
        Page { limit: 50, after: None }
    }
}

/// Where a page ended: (last activity, chat id) of its last chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageCursor {
    /// Last activity of the last chat shown.
    pub last_activity_ms: u64,
    /// Its id.
    pub id: ChatId,
}

/// A page of chats, newest activity first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatPage {
    /// The chats.
    pub chats: Vec<ChatSummary>,
    /// The cursor for the next page, if there are more.
    pub next: Option<PageCursor>,
}

/// How `read_context` counts positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Unit {
    /// Unicode scalar values (Rust `char`s, Python `str` indexes). The default.
    #[default]
    Chars,
    /// UTF-16 code units (JavaScript string indexes).
    Utf16,
    /// UTF-8 bytes.
    Bytes,
    /// Lines: line `i` starts after the `i`-th `\n` (a lone `\r` does not end a line).
    Lines,
}

impl Unit {
    /// The lowercase name used in messages and previews.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Chars => "chars",
            Unit::Utf16 => "utf16",
            Unit::Bytes => "bytes",
            Unit::Lines => "lines",
        }
    }
}

/// A line of [`Chat::index`](crate::Chat::index): enough for a model to choose what to compact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexLine {
    /// The message.
    pub seq: u64,
    /// Its role.
    pub role: Role,
    /// Estimated tokens.
    pub tokens: u64,
    /// The first 60 characters of its text.
    pub preview: String,
}

impl FromStr for Unit {
    type Err = Error;

    /// `chars`, `utf16`, `bytes` or `lines` (the singular `char`, `byte`, `line` and
    /// `utf16_units` are accepted too): the one spelling every front-end parses.
    ///
    /// ```
    /// use undertext::Unit;
    /// assert_eq!("chars".parse::<Unit>().unwrap(), Unit::Chars);
    /// assert_eq!("line".parse::<Unit>().unwrap(), Unit::Lines);
    /// assert!("furlong".parse::<Unit>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Error> {
        Ok(match s {
            "chars" | "char" => Unit::Chars,
            "utf16" | "utf16_units" => Unit::Utf16,
            "bytes" | "byte" => Unit::Bytes,
            "lines" | "line" => Unit::Lines,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unit: expected chars, utf16, bytes or lines, found {other:?}"
                )));
            }
        })
    }
}

impl FromStr for Role {
    type Err = Error;

    /// `system`, `user`, `assistant` or `tool`.
    ///
    /// ```
    /// use undertext::Role;
    /// assert_eq!("tool".parse::<Role>().unwrap(), Role::Tool);
    /// assert!("robot".parse::<Role>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Error> {
        Ok(match s {
            "system" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "role: expected system, user, assistant or tool, found {other:?}"
                )));
            }
        })
    }
}
