//! The log records of conversation history, archived with rkyv so readers use them in
//! place (from the memory map of a sealed segment) without decoding the whole record.

use rkyv::rancor::Error as RkyvError;
use rkyv::util::AlignedVec;
use rkyv::{Archive, Deserialize, Serialize};

use crate::base::blob::BlobId;
use crate::base::error::{Error, Result};
use crate::model::estimate::{Heuristic, message_tokens};
use crate::model::message::{ArchiveRef, ChatMeta, Part, Role, StepStatus, StepTag, ToolContent};

pub(crate) mod append_key;
pub(crate) mod compact;

pub(crate) mod kind;

pub use kind::Kind;

/// An owner was granted a blob: it stored it (`put_blob`, or with an append), or attached it.
/// Like an archive grant, it is bound to the chats whose records share its batch, and is the
/// owner's own when none does (see FORMAT.md, "Owners and grants").
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct GrantRec {
    pub owner: String,
    pub id: [u8; 32],
}

/// A chat was deleted: its records no longer count (the chat's id is never reused).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct DeleteRec {
    pub chat: u64,
    pub at_ms: u64,
}

/// A cached summary: of a segment (key = segment id) or of merged summaries (key = node id),
/// by one summarizer. The text is a blob.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct SummaryRec {
    pub key: [u8; 32],
    pub summarizer: String,
    pub text: [u8; 32],
}

/// A published checkpoint of a chat.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct CheckpointRec {
    pub chat: u64,
    pub base_revision: u64,
    pub reach: u64,
    pub summary: [u8; 32],
    pub root: [u8; 32],
    pub summarizer: String,
    pub segments: Vec<(u64, u64, [u8; 32])>,
    pub at_ms: u64,
}

/// A chat's calibration factor for a model changed (after reported usage).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct UsageRec {
    pub chat: u64,
    pub model: String,
    pub factor: f64,
    pub at_ms: u64,
}

/// A compaction plan accepted by the linter, made at `revision`.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct CompactionRec {
    pub chat: u64,
    pub revision: u64,
    /// (seq of a tool-result message, archive holding its text)
    pub trims: Vec<(u64, [u8; 32])>,
    /// (from, to, rewrite)
    pub squishes: Vec<(u64, u64, String)>,
    pub at_ms: u64,
}

/// An owner archived a text (or was granted an archive another owner stored first).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct ArchiveRec {
    pub owner: String,
    pub id: [u8; 32],
    /// Blob holding the offset index.
    pub index: [u8; 32],
    pub bytes: u64,
    pub chars: u64,
    pub utf16: u64,
    pub lines: u64,
}

/// A page of an archive pinned into a chat's model view, or unpinned.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct PinRec {
    pub chat: u64,
    pub id: [u8; 32],
    pub unit: u8,
    pub start: u64,
    pub end: u64,
    pub pinned: bool,
    pub at_ms: u64,
}

/// A chat was created.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct ChatRec {
    pub chat: u64,
    pub owner: String,
    pub created_ms: u64,
}

/// A new version of a chat's metadata.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct MetaRec {
    pub chat: u64,
    pub version: u64,
    pub title: String,
    pub model: String,
    pub draft: String,
    pub extra: Vec<(String, String)>,
    pub at_ms: u64,
}

/// A message version: (chat, seq) at `revision`.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct MsgRec {
    pub chat: u64,
    pub seq: u64,
    pub revision: u64,
    pub role: u8,
    pub turn: u64,
    pub at_ms: u64,
    pub step: Option<StepTagRec>,
    pub body: BodyRec,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct StepTagRec {
    pub turn: u64,
    pub stream_id: String,
    pub step: u32,
}

/// Message parts inline, or the id of a blob holding them (large bodies, deduplicated).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) enum BodyRec {
    Inline(Vec<PartRec>),
    Blob([u8; 32]),
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct ArchiveRefRec {
    pub id: [u8; 32],
    pub bytes: u64,
    pub chars: u64,
    pub utf16_units: u64,
    pub lines: u64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) enum PartRec {
    Text(String),
    ToolCall { id: String, name: String, args: String },
    ToolResultText { call_id: String, text: String, is_error: bool },
    ToolResultArchived { call_id: String, archive: ArchiveRefRec, preview: String, is_error: bool },
    ApprovalRequest { id: String, call_id: Option<String>, prompt: String },
    ApprovalResponse { id: String, approved: bool, reason: Option<String> },
    Attachment { mime: String, blob: [u8; 32] },
    Summary(String),
}

/// The chat's revision moved: an edit of `seq`, or a truncation from `seq`.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct RevRec {
    pub chat: u64,
    pub revision: u64,
    pub truncate: bool,
    pub seq: u64,
    /// The length the chat had when the previous revision ended.
    pub len_before: u64,
    /// The length right after this change.
    pub len_after: u64,
    pub at_ms: u64,
}

/// Messages of a chat were hidden (soft deletion) at `revision`: each `(start, end)` is a
/// range of seqs. Written in the same batch as the `revision` record of that revision. The
/// messages' records stay in the log; views, checkpoints and the default reads skip them.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct HideRec {
    pub chat: u64,
    pub revision: u64,
    pub ranges: Vec<(u64, u64)>,
    pub at_ms: u64,
}

/// A recorded model step. Its messages are the versions `(chat, seq, revision)` for each
/// seq in `seqs`, written in the same batch.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct StepRec {
    pub chat: u64,
    pub turn: u64,
    pub stream_id: String,
    pub step: u32,
    pub complete: bool,
    pub revision: u64,
    pub seqs: Vec<u64>,
    pub at_ms: u64,
}

/// The parts of a message body stored as a blob of its own.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct PartsRec {
    pub parts: Vec<PartRec>,
}

/// Serializes a record.
pub(crate) fn encode<T>(value: &T) -> Result<AlignedVec>
where
    T: for<'a> Serialize<
        rkyv::api::high::HighSerializer<AlignedVec, rkyv::ser::allocator::ArenaHandle<'a>, RkyvError>,
    >,
{
    rkyv::to_bytes::<RkyvError>(value).map_err(|e| Error::InvalidArgument(format!("encoding a record: {e}")))
}

/// Bytes aligned for in-place rkyv access: borrowed when already 8-byte aligned (the
/// memory map of a sealed segment), copied otherwise.
pub(crate) enum Aligned<'a> {
    Borrowed(&'a [u8]),
    Owned(AlignedVec<16>),
}

impl std::ops::Deref for Aligned<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Aligned::Borrowed(b) => b,
            Aligned::Owned(v) => v,
        }
    }
}

pub(crate) fn aligned(bytes: &[u8]) -> Aligned<'_> {
    if (bytes.as_ptr() as usize).is_multiple_of(8) {
        Aligned::Borrowed(bytes)
    } else {
        let mut v = AlignedVec::<16>::with_capacity(bytes.len());
        v.extend_from_slice(bytes);
        Aligned::Owned(v)
    }
}

/// Validates and deserializes a record from (possibly unaligned) bytes.
pub(crate) fn decode<T>(bytes: &[u8], what: &str) -> std::result::Result<T, String>
where
    T: Archive,
    T::Archived: for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, RkyvError>>
        + Deserialize<T, rkyv::api::high::HighDeserializer<RkyvError>>,
{
    // Records in a mapped segment are 8-byte aligned and are validated in place; others are
    // copied into an aligned buffer first.
    let buf = aligned(bytes);
    rkyv::from_bytes::<T, RkyvError>(&buf).map_err(|e| format!("{what} record does not decode: {e}"))
}

impl PartRec {
    pub(crate) fn from_part(p: &Part) -> PartRec {
        match p {
            Part::Text(t) => PartRec::Text(t.clone()),
            Part::ToolCall { id, name, args } => {
                PartRec::ToolCall { id: id.clone(), name: name.clone(), args: args.clone() }
            }
            Part::ToolResult { call_id, content: ToolContent::Text(text), is_error } => {
                PartRec::ToolResultText { call_id: call_id.clone(), text: text.clone(), is_error: *is_error }
            }
            Part::ToolResult { call_id, content: ToolContent::Archived { archive, preview }, is_error } => {
                PartRec::ToolResultArchived {
                    call_id: call_id.clone(),
                    archive: ArchiveRefRec {
                        id: archive.id.0,
                        bytes: archive.bytes,
                        chars: archive.chars,
                        utf16_units: archive.utf16_units,
                        lines: archive.lines,
                    },
                    preview: preview.clone(),
                    is_error: *is_error,
                }
            }
            Part::ApprovalRequest { id, call_id, prompt } => {
                PartRec::ApprovalRequest { id: id.clone(), call_id: call_id.clone(), prompt: prompt.clone() }
            }
            Part::ApprovalResponse { id, approved, reason } => {
                PartRec::ApprovalResponse { id: id.clone(), approved: *approved, reason: reason.clone() }
            }
            Part::Attachment { mime, blob } => PartRec::Attachment { mime: mime.clone(), blob: blob.0 },
            Part::Summary(t) => PartRec::Summary(t.clone()),
        }
    }

    pub(crate) fn into_part(self) -> Part {
        match self {
            PartRec::Text(t) => Part::Text(t),
            PartRec::ToolCall { id, name, args } => Part::ToolCall { id, name, args },
            PartRec::ToolResultText { call_id, text, is_error } => {
                Part::ToolResult { call_id, content: ToolContent::Text(text), is_error }
            }
            PartRec::ToolResultArchived { call_id, archive, preview, is_error } => Part::ToolResult {
                call_id,
                content: ToolContent::Archived {
                    archive: ArchiveRef {
                        id: BlobId(archive.id),
                        bytes: archive.bytes,
                        chars: archive.chars,
                        utf16_units: archive.utf16_units,
                        lines: archive.lines,
                    },
                    preview,
                },
                is_error,
            },
            PartRec::ApprovalRequest { id, call_id, prompt } => Part::ApprovalRequest { id, call_id, prompt },
            PartRec::ApprovalResponse { id, approved, reason } => {
                Part::ApprovalResponse { id, approved, reason }
            }
            PartRec::Attachment { mime, blob } => Part::Attachment { mime, blob: BlobId(blob) },
            PartRec::Summary(t) => Part::Summary(t),
        }
    }
}

impl MetaRec {
    pub(crate) fn to_meta(&self) -> ChatMeta {
        ChatMeta {
            title: self.title.clone(),
            model: self.model.clone(),
            draft: self.draft.clone(),
            extra: self.extra.iter().cloned().collect(),
        }
    }
}

impl StepTagRec {
    pub(crate) fn to_tag(&self) -> StepTag {
        StepTag { turn: self.turn, stream_id: self.stream_id.clone(), step: self.step }
    }
}

/// The bit of a message record's role byte that marks harness feedback (a user message that
/// starts no turn, since issue 32); the low 7 bits are the role code.
pub(crate) const FEEDBACK_BIT: u8 = 0x80;

/// The role byte of a message record: the role's code, with [`FEEDBACK_BIT`] for feedback.
pub(crate) fn role_byte(role: Role, feedback: bool) -> u8 {
    role.code() | if feedback { FEEDBACK_BIT } else { 0 }
}

/// Whether a message record's role byte marks harness feedback.
pub(crate) fn is_feedback(code: u8) -> bool {
    code & FEEDBACK_BIT != 0
}

/// The role of a message record's role byte (its low 7 bits; the high bit is
/// [`FEEDBACK_BIT`], and only a user message may carry it).
pub(crate) fn role_of(code: u8) -> std::result::Result<Role, String> {
    let role = Role::from_code(code & !FEEDBACK_BIT).ok_or_else(|| format!("unknown role code {code}"))?;
    if is_feedback(code) && role != Role::User {
        return Err(format!("role code {code}: only a user message may be feedback"));
    }
    Ok(role)
}

pub(crate) fn status_of(complete: bool) -> StepStatus {
    if complete { StepStatus::Complete } else { StepStatus::Interrupted }
}

/// The kind of a record read where a message version must be (`byte`: its header's kind
/// byte), or why it is not one.
pub(crate) fn message_kind(byte: u8) -> std::result::Result<Kind, String> {
    Kind::of(byte).filter(|k| k.is_message()).ok_or_else(|| format!("record kind {byte} is not a message"))
}

/// A message record of either encoding (`k`: [`Kind::Message`] or
/// [`Kind::MessageCompact`]), decoded.
pub(crate) fn message(k: Kind, payload: &[u8]) -> std::result::Result<MsgRec, String> {
    match k {
        Kind::MessageCompact => compact::decode(payload),
        Kind::Message => decode(payload, "message"),
        other => Err(format!("record kind {} is not a message", other.byte())),
    }
}

fn fields_of(rec: &MsgRec) -> std::result::Result<MsgFields, String> {
    Ok(MsgFields {
        chat: rec.chat,
        seq: rec.seq,
        revision: rec.revision,
        role: role_of(rec.role)?,
        turn: rec.turn,
        at_ms: rec.at_ms,
        step: rec.step.as_ref().map(StepTagRec::to_tag),
    })
}

/// Reads a message record's header fields (an rkyv one validated in place, without decoding
/// its parts).
pub(crate) fn message_fields(k: Kind, bytes: &[u8]) -> std::result::Result<MsgFields, String> {
    if k != Kind::Message {
        return fields_of(&message(k, bytes)?);
    }
    let buf = aligned(bytes);
    let a = rkyv::access::<ArchivedMsgRec, RkyvError>(&buf)
        .map_err(|e| format!("message record does not decode: {e}"))?;
    Ok(MsgFields {
        chat: a.chat.to_native(),
        seq: a.seq.to_native(),
        revision: a.revision.to_native(),
        role: role_of(a.role)?,
        turn: a.turn.to_native(),
        at_ms: a.at_ms.to_native(),
        step: a.step.as_ref().map(|s| StepTag {
            turn: s.turn.to_native(),
            stream_id: s.stream_id.as_str().to_string(),
            step: s.step.to_native(),
        }),
    })
}

/// Checks that a history record of kind byte `byte` decodes (for `Store::check`).
pub(crate) fn check(byte: u8, payload: &[u8]) -> std::result::Result<(), String> {
    let Some(k) = Kind::of(byte) else {
        return Err(format!("unknown required record kind {byte}"));
    };
    match k {
        Kind::Chat => decode::<ChatRec>(payload, "chat").map(drop),
        Kind::Meta => decode::<MetaRec>(payload, "metadata").map(drop),
        Kind::Message | Kind::MessageCompact => message(k, payload).map(drop),
        Kind::Revision => decode::<RevRec>(payload, "revision").map(drop),
        Kind::Step => decode::<StepRec>(payload, "step").map(drop),
        Kind::Archive => decode::<ArchiveRec>(payload, "archive").map(drop),
        Kind::Pin => decode::<PinRec>(payload, "pin").map(drop),
        Kind::Usage => decode::<UsageRec>(payload, "usage").map(drop),
        Kind::Compaction => decode::<CompactionRec>(payload, "compaction").map(drop),
        Kind::Summary => decode::<SummaryRec>(payload, "summary").map(drop),
        Kind::Checkpoint => decode::<CheckpointRec>(payload, "checkpoint").map(drop),
        Kind::Delete => decode::<DeleteRec>(payload, "delete").map(drop),
        Kind::Grant => decode::<GrantRec>(payload, "grant").map(drop),
        Kind::Hide => decode::<HideRec>(payload, "hide").map(drop),
        Kind::Erase => decode::<HideRec>(payload, "erase").map(drop),
        Kind::AppendKey => append_key::AppendKeyRec::decode(payload).map(drop),
        Kind::Blob | Kind::Manifest => Err(format!("record kind {byte} is a blob's, not history")),
    }
}

/// The fields of a message record other than its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MsgFields {
    pub chat: u64,
    pub seq: u64,
    pub revision: u64,
    pub role: Role,
    pub turn: u64,
    pub at_ms: u64,
    pub step: Option<StepTag>,
}

/// Where the inline texts of a message are: listed (an inline body), or in a body blob
/// (read it and pass it to [`body_texts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MessageTexts {
    /// (part index, content address) of each inline text of the message.
    Listed(Vec<(u32, [u8; 32])>),
    /// The message's parts are in this blob.
    InBlob([u8; 32]),
    /// The message holds inline texts a view may preview, not listed yet: a read-only
    /// refresh leaves hashing them to the first lookup of a text (see `index/aside_texts.rs`).
    Deferred,
}

/// The inline texts of a message that a view may preview — an inline tool result (of any
/// message), a text part of a user message (the task, kept under a checkpoint) — each by its
/// part index and content address (BLAKE3 of the text): the rows of the index's inline-text
/// table. Empty texts are left out, and so are the text parts of other roles, which no view
/// previews (index layout 6: a LangGraph saver's records are system texts, and their rows
/// were 46 % of its index).
pub(crate) fn message_texts(k: Kind, bytes: &[u8]) -> std::result::Result<MessageTexts, String> {
    if k != Kind::Message {
        return Ok(decoded_texts(&message(k, bytes)?));
    }
    rkyv_texts(bytes).map(|(texts, _)| texts)
}

/// [`message_texts`] of an rkyv message record, read in place, and whether it may hold an
/// archived tool result ([`MsgHead::may_archive`]).
fn rkyv_texts(bytes: &[u8]) -> std::result::Result<(MessageTexts, bool), String> {
    let buf = aligned(bytes);
    let a = rkyv::access::<ArchivedMsgRec, RkyvError>(&buf)
        .map_err(|e| format!("message record does not decode: {e}"))?;
    let user = a.role & !FEEDBACK_BIT == Role::User.code();
    Ok(match &a.body {
        ArchivedBodyRec::Inline(parts) => (
            MessageTexts::Listed(texts_of(
                parts.iter().enumerate().filter(|(_, p)| user || !matches!(p, ArchivedPartRec::Text(_))),
            )),
            parts.iter().any(|p| matches!(p, ArchivedPartRec::ToolResultArchived { .. })),
        ),
        ArchivedBodyRec::Blob(id) => (MessageTexts::InBlob(*id), true),
    })
}

/// The inline texts of a decoded message record that a view may preview (see
/// [`message_texts`]), by part index.
fn listable(rec: &MsgRec) -> impl Iterator<Item = (usize, &str)> {
    let user = rec.role & !FEEDBACK_BIT == Role::User.code();
    let parts = match &rec.body {
        BodyRec::Inline(parts) => parts.as_slice(),
        BodyRec::Blob(_) => &[],
    };
    parts
        .iter()
        .enumerate()
        .filter(move |(_, p)| user || !matches!(p, PartRec::Text(_)))
        .filter_map(|(i, p)| owned_inline_text(p).filter(|t| listed(t)).map(|t| (i, t)))
}

/// [`message_texts`] of a decoded message record.
fn decoded_texts(rec: &MsgRec) -> MessageTexts {
    match &rec.body {
        BodyRec::Inline(_) => {
            MessageTexts::Listed(listable(rec).map(|(i, t)| (i as u32, BlobId::of(t.as_bytes()).0)).collect())
        }
        BodyRec::Blob(id) => MessageTexts::InBlob(*id),
    }
}

/// [`decoded_texts`] without hashing: [`MessageTexts::Deferred`] when there is a text to list.
fn deferred_texts(rec: &MsgRec) -> MessageTexts {
    match &rec.body {
        BodyRec::Inline(_) if listable(rec).next().is_some() => MessageTexts::Deferred,
        BodyRec::Inline(_) => MessageTexts::Listed(Vec::new()),
        BodyRec::Blob(id) => MessageTexts::InBlob(*id),
    }
}

/// What the index keeps of a message record without its parts, beside its key (chat, seq,
/// revision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MsgHead {
    /// The role code ([`Role::code`]).
    pub role: u8,
    pub turn: u64,
    pub at_ms: u64,
    /// Whether the message has a step tag.
    pub has_step: bool,
    /// Whether the message may hold an archived tool result: it holds one inline, or its
    /// parts are in a body blob (not read to tell). A message without it holds none.
    pub may_archive: bool,
    /// The message's token estimate by the default estimator ([`Heuristic`], whose id is
    /// [`Heuristic::ID`]) when its parts are in the record (index layout 11): a first view
    /// reads it instead of estimating the text again. `None` for parts in a body blob (the
    /// indexer reads no blob) and for an rkyv record (validated in place, not decoded).
    pub tokens: Option<u64>,
}

/// A message record's key (chat, seq, revision) and [`MsgHead`].
pub(crate) type MsgKeyHead = ((u64, u64, u64), MsgHead);

impl BodyRec {
    /// Whether a message of this body may hold an archived tool result (see
    /// [`MsgHead::may_archive`]).
    pub(crate) fn may_archive(&self) -> bool {
        match self {
            BodyRec::Inline(parts) => parts.iter().any(|p| matches!(p, PartRec::ToolResultArchived { .. })),
            BodyRec::Blob(_) => true,
        }
    }

    /// The default estimator's estimate of a message with this body when its parts are
    /// inline (see [`MsgHead::tokens`]).
    pub(crate) fn estimate(&self) -> Option<u64> {
        match self {
            BodyRec::Inline(parts) => {
                let parts: Vec<Part> = parts.iter().cloned().map(PartRec::into_part).collect();
                Some(message_tokens(&Heuristic, &parts))
            }
            BodyRec::Blob(_) => None,
        }
    }
}

/// The [`MsgHead`] of a decoded message record.
fn head_of(rec: &MsgRec) -> std::result::Result<MsgHead, String> {
    Ok(MsgHead {
        role: role_of(rec.role)?.code(),
        turn: rec.turn,
        at_ms: rec.at_ms,
        has_step: rec.step.is_some(),
        may_archive: rec.body.may_archive(),
        tokens: rec.body.estimate(),
    })
}

/// A message record's key and header fields and its [`message_texts`], the record decoded
/// once (a compact record is decompressed once, not once for each); for a compact record,
/// also the record as decoded (a read-only refresh keeps it for the read that follows: see
/// `store::listed`). An rkyv record is validated in place and not decoded (`None`).
///
/// With `defer`, a compact record's inline texts are not hashed: [`MessageTexts::Deferred`]
/// when it holds any (an rkyv record's are listed all the same).
pub(crate) fn message_key_texts(
    k: Kind,
    bytes: &[u8],
    defer: bool,
) -> std::result::Result<(MsgKeyHead, MessageTexts, Option<MsgRec>), String> {
    if k != Kind::Message {
        let rec = message(k, bytes)?;
        let head = head_of(&rec)?;
        let texts = if defer { deferred_texts(&rec) } else { decoded_texts(&rec) };
        return Ok((((rec.chat, rec.seq, rec.revision), head), texts, Some(rec)));
    }
    let m = message_fields(k, bytes)?;
    let (texts, may_archive) = rkyv_texts(bytes)?;
    let head = MsgHead {
        role: m.role.code(),
        turn: m.turn,
        at_ms: m.at_ms,
        has_step: m.step.is_some(),
        may_archive,
        tokens: None,
    };
    Ok((((m.chat, m.seq, m.revision), head), texts, None))
}

/// What [`message_key_texts`] finds in a message record, from the record before it is
/// encoded: the writer knows it, so the kernel does not decode what it was just handed.
pub(crate) fn message_listing(rec: &MsgRec) -> std::result::Result<(MsgKeyHead, MessageTexts), String> {
    Ok((((rec.chat, rec.seq, rec.revision), head_of(rec)?), decoded_texts(rec)))
}

/// [`message_texts`] of a message whose parts are in a body blob (its bytes). The message's
/// role is not at hand where bodies are listed, so every text part is listed, whatever the
/// role (a body blob holds more than 8 KiB of parts: such messages are few).
pub(crate) fn body_texts(blob: &[u8]) -> std::result::Result<Vec<(u32, [u8; 32])>, String> {
    let buf = aligned(blob);
    let a = rkyv::access::<ArchivedPartsRec, RkyvError>(&buf)
        .map_err(|e| format!("message body does not decode: {e}"))?;
    Ok(texts_of(a.parts.iter().enumerate()))
}

/// An inline text of at most this many characters is not listed in the index's text table:
/// no view names it by its address. A view previews a text only when it is longer than the
/// preview's size (a shorter one is sent whole), and both preview sizes
/// ([`Options::preview_chars`](crate::Options::preview_chars),
/// [`Options::guard_preview_chars`](crate::Options::guard_preview_chars)) are at least this.
pub(crate) const LISTED_MIN_CHARS: usize = 128;

/// Whether `t` is long enough for a view to preview it (see [`LISTED_MIN_CHARS`]).
pub(crate) fn listed(t: &str) -> bool {
    // A character is 1 to 4 bytes: count only when the byte length cannot decide.
    t.len() > LISTED_MIN_CHARS && (t.len() > 4 * LISTED_MIN_CHARS || t.chars().count() > LISTED_MIN_CHARS)
}

fn owned_inline_text(p: &PartRec) -> Option<&str> {
    match p {
        PartRec::Text(t) => Some(t.as_str()),
        PartRec::ToolResultText { text, .. } => Some(text.as_str()),
        _ => None,
    }
}

fn inline_text(p: &ArchivedPartRec) -> Option<&str> {
    match p {
        ArchivedPartRec::Text(t) => Some(t.as_str()),
        ArchivedPartRec::ToolResultText { text, .. } => Some(text.as_str()),
        _ => None,
    }
}

fn texts_of<'a>(parts: impl Iterator<Item = (usize, &'a ArchivedPartRec)>) -> Vec<(u32, [u8; 32])> {
    parts
        .filter_map(|(i, p)| {
            inline_text(p).filter(|t| listed(t)).map(|t| (i as u32, BlobId::of(t.as_bytes()).0))
        })
        .collect()
}

/// The inline text of part `part` of a message record (`None`: that part is not an inline
/// text, or there is no such part). `body` reads a body blob when the parts are in one.
pub(crate) fn message_part_text(
    k: u8,
    bytes: &[u8],
    part: u32,
    body: impl FnOnce(&[u8; 32]) -> Result<crate::base::blob::Blob>,
) -> Result<Option<String>> {
    let bad = |e: String| Error::index_msg(format!("an inline text's message: {e}"));
    let k = message_kind(k).map_err(bad)?;
    if k != Kind::Message {
        let parts = match message(k, bytes).map_err(bad)?.body {
            BodyRec::Inline(parts) => parts,
            BodyRec::Blob(id) => {
                let blob = body(&id)?;
                decode::<PartsRec>(&blob, "message body").map_err(bad)?.parts
            }
        };
        return Ok(parts.get(part as usize).and_then(owned_inline_text).map(str::to_string));
    }
    let buf = aligned(bytes);
    let a = rkyv::access::<ArchivedMsgRec, RkyvError>(&buf)
        .map_err(|e| bad(format!("message record does not decode: {e}")))?;
    let text = |p: Option<&ArchivedPartRec>| p.and_then(inline_text).map(str::to_string);
    match &a.body {
        ArchivedBodyRec::Inline(parts) => Ok(text(parts.get(part as usize))),
        ArchivedBodyRec::Blob(id) => {
            let blob = body(id)?;
            let buf = aligned(&blob);
            let b = rkyv::access::<ArchivedPartsRec, RkyvError>(&buf)
                .map_err(|e| bad(format!("message body does not decode: {e}")))?;
            Ok(text(b.parts.get(part as usize)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_record_round_trips_with_every_part() {
        let parts = vec![
            Part::Text("héllo 👋".into()),
            Part::ToolCall { id: "c1".into(), name: "read".into(), args: "{\"path\":\"a\"}".into() },
            Part::ToolResult {
                call_id: "c1".into(),
                content: ToolContent::Text("ok".into()),
                is_error: false,
            },
            Part::ApprovalRequest { id: "a1".into(), call_id: None, prompt: "run rm?".into() },
            Part::ApprovalResponse { id: "a1".into(), approved: false, reason: Some("no".into()) },
            Part::Attachment { mime: "image/png".into(), blob: BlobId::of(b"png") },
            Part::Summary("earlier".into()),
        ];
        let rec = MsgRec {
            chat: 1,
            seq: 2,
            revision: 3,
            role: Role::Assistant.code(),
            turn: 4,
            at_ms: 5,
            step: Some(StepTagRec { turn: 4, stream_id: "s".into(), step: 9 }),
            body: BodyRec::Inline(parts.iter().map(PartRec::from_part).collect()),
        };
        let bytes = encode(&rec).unwrap();
        // Decode from a deliberately misaligned copy too.
        let mut shifted = vec![0u8];
        shifted.extend_from_slice(&bytes);
        let back: MsgRec = decode(&shifted[1..], "message").unwrap();
        assert_eq!(back, rec);
        let BodyRec::Inline(p) = back.body else { panic!("inline") };
        assert_eq!(p.into_iter().map(PartRec::into_part).collect::<Vec<_>>(), parts);
    }

    #[test]
    fn only_texts_a_view_may_preview_are_listed_in_either_encoding() {
        // Longer than LISTED_MIN_CHARS characters: listed; that long or shorter: never
        // previewed, so not listed (counted in characters, not bytes).
        let long = "a text ".repeat(20); // 140 chars
        let result = "r".repeat(LISTED_MIN_CHARS + 1);
        let parts = |text: &str| {
            BodyRec::Inline(vec![
                PartRec::Text(text.into()),
                PartRec::ToolResultText { call_id: "c".into(), text: result.clone(), is_error: false },
                PartRec::Text(String::new()),
                PartRec::ToolResultText { call_id: "d".into(), text: "short".into(), is_error: false },
                PartRec::ToolResultText {
                    call_id: "e".into(),
                    text: "x".repeat(LISTED_MIN_CHARS),
                    is_error: false,
                },
                PartRec::ToolResultText {
                    call_id: "f".into(),
                    text: "é".repeat(LISTED_MIN_CHARS),
                    is_error: false,
                },
                PartRec::ToolResultText {
                    call_id: "g".into(),
                    text: "é".repeat(LISTED_MIN_CHARS + 1),
                    is_error: false,
                },
            ])
        };
        let id = |t: &str| BlobId::of(t.as_bytes()).0;
        let wide = "é".repeat(LISTED_MIN_CHARS + 1);
        for role in [Role::System, Role::User, Role::Assistant, Role::Tool] {
            let rec = MsgRec {
                chat: 1,
                seq: 0,
                revision: 0,
                role: role.code(),
                turn: 0,
                at_ms: 0,
                step: None,
                body: parts(&long),
            };
            let want = if role == Role::User {
                vec![(0, id(&long)), (1, id(&result)), (6, id(&wide))]
            } else {
                vec![(1, id(&result)), (6, id(&wide))]
            };
            let rkyv = encode(&rec).unwrap();
            let compact = compact::encode(&rec, crate::base::blob::Compression::default());
            for (k, bytes) in [(Kind::Message, &rkyv[..]), (Kind::MessageCompact, &compact[..])] {
                assert_eq!(
                    message_texts(k, bytes).unwrap(),
                    MessageTexts::Listed(want.clone()),
                    "{role:?} kind {k}"
                );
                assert_eq!(message_fields(k, bytes).unwrap().role, role);
                // Any inline text part is still read back by its index, listed or not.
                let text = message_part_text(k.byte(), bytes, 3, |_| unreachable!()).unwrap();
                assert_eq!(text.as_deref(), Some("short"));
            }
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode::<MsgRec>(&[0xff; 40], "message").is_err());
        assert!(decode::<MsgRec>(&[], "message").is_err());
    }
}
