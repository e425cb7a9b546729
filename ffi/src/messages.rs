//! Messages passed in (`undertext_message_t`, `undertext_part_t`) and the calls that write
//! and read them: append, atomic batch, edit and truncate with an expected revision,
//! steps and attempts.

use undertext::{BlobId, Chat, NewMessage, Part, Role, StepStatus, ToolContent};

use crate::args::{self, Str};
use crate::buf::Buf;
use crate::guard::call;
use crate::handles::{ChatHandle, StoreHandle, store_of};
use crate::snapshots::{read_one, read_range};
use crate::status::{FfiError, FfiResult, Status};

/// Role: instructions for the model.
pub const UNDERTEXT_ROLE_SYSTEM: u32 = 0;
/// Role: the human (or, in Anthropic's format, the carrier of tool results).
pub const UNDERTEXT_ROLE_USER: u32 = 1;
/// Role: the model.
pub const UNDERTEXT_ROLE_ASSISTANT: u32 = 2;
/// Role: a tool's output (OpenAI's format).
pub const UNDERTEXT_ROLE_TOOL: u32 = 3;
/// Flag OR-ed into `undertext_message_t.role`: harness feedback, a user message the harness
/// wrote itself (a format error, an injected reminder). It starts no user turn, so the task
/// stays in the protected turns. Only with `UNDERTEXT_ROLE_USER`; read back as
/// `"feedback": true` in the message's JSON.
pub const UNDERTEXT_MESSAGE_FEEDBACK: u32 = 256;

/// Part kind: plain text in `text`.
pub const UNDERTEXT_PART_TEXT: u32 = 0;
/// Part kind: a tool call: `id`, `name`, `args` (JSON text).
pub const UNDERTEXT_PART_TOOL_CALL: u32 = 1;
/// Part kind: a tool result: `call_id`, output in `text`, `flag` nonzero if the tool
/// failed. Outputs over the archiving threshold are archived; the message keeps a preview.
pub const UNDERTEXT_PART_TOOL_RESULT: u32 = 2;
/// Part kind: a request for approval: `id`, prompt in `text`, optional `call_id` (NULL
/// pointer: none).
pub const UNDERTEXT_PART_APPROVAL_REQUEST: u32 = 3;
/// Part kind: the answer to an approval request: `id`, `flag` nonzero if approved, optional
/// reason in `text` (NULL pointer: none).
pub const UNDERTEXT_PART_APPROVAL_RESPONSE: u32 = 4;
/// Part kind: a summary of earlier history in `text` (data, never authority).
pub const UNDERTEXT_PART_SUMMARY: u32 = 5;
/// Part kind: a binary attachment stored as a blob: its MIME type in `name`, the blob's id
/// as `UNDERTEXT_BLOB_ID_HEX_LEN` hex digits in `id` (store the bytes first with
/// `undertext_put_blob`; an attachment naming a blob that is not stored is
/// `UNDERTEXT_NOT_FOUND`). Read back as `{"type": "attachment", "mime", "blob": hex}`.
pub const UNDERTEXT_PART_ATTACHMENT: u32 = 6;

/// Step status: the model's response finished.
pub const UNDERTEXT_STEP_COMPLETE: u32 = 0;
/// Step status: the response was cut off; it is never shown as complete.
pub const UNDERTEXT_STEP_INTERRUPTED: u32 = 1;

/// One part of a message passed in; which fields are read depends on `kind`
/// (`UNDERTEXT_PART_*`), the others are ignored.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PartIn {
    /// One of `UNDERTEXT_PART_*`.
    pub kind: u32,
    /// Tool result: is_error. Approval response: approved.
    pub flag: u8,
    /// Text, tool output, approval prompt, or approval reason.
    pub text: Str,
    /// Tool call id, approval id, or an attachment's blob id (hex).
    pub id: Str,
    /// Tool name, or an attachment's MIME type.
    pub name: Str,
    /// Tool call arguments (JSON text).
    pub args: Str,
    /// The call a tool result answers, or the call an approval request gates.
    pub call_id: Str,
}

/// A message passed in: a role and its parts.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MessageIn {
    /// One of `UNDERTEXT_ROLE_*`, with `UNDERTEXT_MESSAGE_FEEDBACK` OR-ed in for harness
    /// feedback.
    pub role: u32,
    /// The parts, in order (`n_parts` of them).
    pub parts: *const PartIn,
    /// Number of parts.
    pub n_parts: usize,
}

/// A role code with `UNDERTEXT_MESSAGE_FEEDBACK` maybe OR-ed in: the role, and whether the
/// message is harness feedback.
fn role_and_feedback(code: u32, what: &str) -> FfiResult<(Role, bool)> {
    Ok((role(code & !UNDERTEXT_MESSAGE_FEEDBACK, what)?, code & UNDERTEXT_MESSAGE_FEEDBACK != 0))
}

pub(crate) fn role(code: u32, what: &str) -> FfiResult<Role> {
    Ok(match code {
        UNDERTEXT_ROLE_SYSTEM => Role::System,
        UNDERTEXT_ROLE_USER => Role::User,
        UNDERTEXT_ROLE_ASSISTANT => Role::Assistant,
        UNDERTEXT_ROLE_TOOL => Role::Tool,
        r => {
            return Err(FfiError::invalid(format!(
                "{what}: expected UNDERTEXT_ROLE_SYSTEM (0), _USER (1), _ASSISTANT (2) or _TOOL (3), found {r}"
            )));
        }
    })
}

/// Reads one part.
///
/// # Safety
/// The strings of `p` that its kind uses are valid string arguments.
unsafe fn part_in(p: &PartIn, what: &str) -> FfiResult<Part> {
    // SAFETY: forwarded contract of this function: the strings this kind reads are valid.
    let text = |s: Str, field: &str| unsafe { args::text(s, &format!("{what}.{field}")) }.map(String::from);
    let opt = |s: Str, field: &str| {
        // SAFETY: as above, for the optional strings.
        unsafe { args::opt_text(s, &format!("{what}.{field}")) }.map(|o| o.map(String::from))
    };
    Ok(match p.kind {
        UNDERTEXT_PART_TEXT => Part::Text(text(p.text, "text")?),
        UNDERTEXT_PART_SUMMARY => Part::Summary(text(p.text, "text")?),
        UNDERTEXT_PART_TOOL_CALL => {
            Part::ToolCall { id: text(p.id, "id")?, name: text(p.name, "name")?, args: text(p.args, "args")? }
        }
        UNDERTEXT_PART_TOOL_RESULT => Part::ToolResult {
            call_id: text(p.call_id, "call_id")?,
            content: ToolContent::Text(text(p.text, "text")?),
            is_error: p.flag != 0,
        },
        UNDERTEXT_PART_APPROVAL_REQUEST => Part::ApprovalRequest {
            id: text(p.id, "id")?,
            call_id: opt(p.call_id, "call_id")?,
            prompt: text(p.text, "text")?,
        },
        UNDERTEXT_PART_APPROVAL_RESPONSE => Part::ApprovalResponse {
            id: text(p.id, "id")?,
            approved: p.flag != 0,
            reason: opt(p.text, "text")?,
        },
        UNDERTEXT_PART_ATTACHMENT => {
            let mime = text(p.name, "name")?;
            if mime.is_empty() {
                return Err(FfiError::invalid(format!(
                    "{what}.name: expected the attachment's MIME type, found an empty string"
                )));
            }
            let hex = text(p.id, "id")?;
            let blob: BlobId = hex.parse().map_err(|e: undertext::Error| {
                FfiError::invalid(format!("{what}.id: expected a blob id ({e})"))
            })?;
            Part::Attachment { mime, blob }
        }
        k => {
            return Err(FfiError::invalid(format!(
                "{what}.kind: expected one of UNDERTEXT_PART_* (0 to 6), found {k}"
            )));
        }
    })
}

/// Reads one message.
///
/// # Safety
/// `m` is NULL or points to a valid `undertext_message_t` whose parts are valid.
pub(crate) unsafe fn message_in(m: *const MessageIn, what: &str) -> FfiResult<NewMessage> {
    // SAFETY: forwarded contract of this function.
    let m = unsafe { args::input(m, what) }?;
    // SAFETY: forwarded contract of this function.
    unsafe { message_of(m, what) }
}

/// # Safety
/// `m.parts` points to `m.n_parts` valid parts (NULL only when there are none).
unsafe fn message_of(m: &MessageIn, what: &str) -> FfiResult<NewMessage> {
    let (role, feedback) = role_and_feedback(m.role, &format!("{what}.role"))?;
    // SAFETY: forwarded contract of this function (NULL and alignment checked by `array`).
    let parts = unsafe { args::array(m.parts, m.n_parts, &format!("{what}.parts")) }?;
    let parts = parts
        .iter()
        .enumerate()
        // SAFETY: the parts' strings are valid (forwarded contract of this function).
        .map(|(i, p)| unsafe { part_in(p, &format!("{what}.parts[{i}]")) })
        .collect::<FfiResult<Vec<_>>>()?;
    Ok(NewMessage { role, parts, feedback })
}

/// Reads an array of messages.
///
/// # Safety
/// `ms` is NULL (only when `n` is 0) or points to `n` valid messages.
pub(crate) unsafe fn messages_in(ms: *const MessageIn, n: usize, what: &str) -> FfiResult<Vec<NewMessage>> {
    // SAFETY: forwarded contract of this function.
    let ms = unsafe { args::array(ms, n, what) }?;
    // SAFETY: forwarded contract of this function: each message's parts are valid.
    ms.iter().enumerate().map(|(i, m)| unsafe { message_of(m, &format!("{what}[{i}]")) }).collect()
}

/// The chat behind `chat`, after checking that every attachment of `msgs` names a blob the
/// chat's owner holds a grant on (`UNDERTEXT_NOT_FOUND` otherwise, naming the message, part
/// and blob: the same for a blob never stored and for one only other owners hold).
pub(crate) fn chat_for(chat: ChatHandle, msgs: &[&NewMessage]) -> FfiResult<Chat> {
    let (c, parent) = chat.object()?;
    let mut store = None;
    for (i, m) in msgs.iter().enumerate() {
        for (j, p) in m.parts.iter().enumerate() {
            let Part::Attachment { blob, .. } = p else { continue };
            if store.is_none() {
                store = Some(StoreHandle { id: store_of(chat.id, parent) }.object()?.0);
            }
            let Some(s) = &store else { continue };
            if !s.contains_blob(c.owner(), blob)? {
                return Err(FfiError::new(
                    crate::status::UNDERTEXT_NOT_FOUND,
                    format!(
                        "message {i}, part {j}: attachment blob {blob} is not stored for this chat's owner (store it with undertext_put_blob first)"
                    ),
                ));
            }
        }
    }
    Ok(c)
}

/// Appends one message; its seq in `*out_seq`.
///
/// # Safety
/// `message` is NULL or valid (with valid parts); `out_seq` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_append(
    chat: ChatHandle,
    message: *const MessageIn,
    out_seq: *mut u64,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (m, out) = unsafe { (message_in(message, "message")?, args::output(out_seq, "out_seq")?) };
        let c = chat_for(chat, &[&m])?;
        out.set(c.append(m)?);
        Ok(())
    })
}

/// Appends one message of `role` with one text part (a tool-role text is stored as text;
/// use `undertext_chat_append` with a `UNDERTEXT_PART_TOOL_RESULT` part for a tool result).
/// `UNDERTEXT_ROLE_USER | UNDERTEXT_MESSAGE_FEEDBACK` appends harness feedback.
///
/// # Safety
/// `text` is a valid string argument; `out_seq` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_append_text(
    chat: ChatHandle,
    role: u32,
    text: Str,
    out_seq: *mut u64,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (t, out) = unsafe { (args::text(text, "text")?, args::output(out_seq, "out_seq")?) };
        let (r, feedback) = role_and_feedback(role, "role")?;
        let (c, _) = chat.object()?;
        out.set(c.append(NewMessage::text(r, t).with_feedback(feedback))?);
        Ok(())
    })
}

/// Appends `n` messages in one transaction: after a crash all of them are there or none.
/// Their seqs are `*out_start .. *out_end`.
///
/// # Safety
/// `messages` points to `n` valid messages (NULL only when `n` is 0); the out-pointers are
/// NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_append_batch(
    chat: ChatHandle,
    messages: *const MessageIn,
    n: usize,
    out_start: *mut u64,
    out_end: *mut u64,
) -> Status {
    // SAFETY: forwarded contract of this function.
    unsafe { append_batch_keyed(chat, messages, n, None, out_start, out_end) }
}

/// The work of `undertext_chat_append_batch` and, with a key, of
/// `undertext_chat_append_idempotent`.
///
/// # Safety
/// As `undertext_chat_append_idempotent`'s arguments.
unsafe fn append_batch_keyed(
    chat: ChatHandle,
    messages: *const MessageIn,
    n: usize,
    key: Option<Str>,
    out_start: *mut u64,
    out_end: *mut u64,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (ms, start, end) = unsafe {
            (
                messages_in(messages, n, "messages")?,
                args::output(out_start, "out_start")?,
                args::output(out_end, "out_end")?,
            )
        };
        // SAFETY: forwarded contract of this function.
        let key = key.map(|k| unsafe { args::text(k, "key") }).transpose()?;
        let c = chat_for(chat, &ms.iter().collect::<Vec<_>>())?;
        let r = match key {
            Some(k) => c.append_batch_idempotent(ms, k)?,
            None => c.append_batch(ms)?,
        };
        start.set(r.start);
        end.set(r.end);
        Ok(())
    })
}

/// Appends `n` messages in one transaction with idempotency key `key` (1 to 256 bytes): when
/// an append with the same key was made to this chat before, nothing is written and its seqs
/// are given. A caller unsure whether an append went through (an error after it was sent, a
/// crash) calls again with the same key and gets one copy. A used key with another number of
/// messages is `UNDERTEXT_INVALID_ARGUMENT`. Their seqs are `*out_start .. *out_end`.
///
/// # Safety
/// `messages` points to `n` valid messages (NULL only when `n` is 0); `key` is a valid string
/// argument; the out-pointers are NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_append_idempotent(
    chat: ChatHandle,
    messages: *const MessageIn,
    n: usize,
    key: Str,
    out_start: *mut u64,
    out_end: *mut u64,
) -> Status {
    // SAFETY: forwarded contract of this function.
    unsafe { append_batch_keyed(chat, messages, n, Some(key), out_start, out_end) }
}

/// Replaces message `seq` if the chat is still at `expected_revision`
/// (`UNDERTEXT_STALE_REVISION` otherwise); the new revision in `*out_revision`. The old
/// version stays readable through `undertext_chat_snapshot_at`.
///
/// # Safety
/// `message` is NULL or valid; `out_revision` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_edit(
    chat: ChatHandle,
    seq: u64,
    message: *const MessageIn,
    expected_revision: u64,
    out_revision: *mut u64,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (m, out) =
            unsafe { (message_in(message, "message")?, args::output(out_revision, "out_revision")?) };
        let c = chat_for(chat, &[&m])?;
        let len = c.len();
        if seq >= len {
            return Err(FfiError::out_of_range(format!(
                "edit of message {seq}: the chat has {len} messages"
            )));
        }
        out.set(c.edit(seq, m, expected_revision)?);
        Ok(())
    })
}

/// Drops messages from `from_seq` on if the chat is still at `expected_revision`; the new
/// revision in `*out_revision`. Dropped messages stay readable at older revisions.
///
/// # Safety
/// `out_revision` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_truncate(
    chat: ChatHandle,
    from_seq: u64,
    expected_revision: u64,
    out_revision: *mut u64,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out_revision, "out_revision") }?;
        let (c, _) = chat.object()?;
        let len = c.len();
        if from_seq > len {
            return Err(FfiError::out_of_range(format!(
                "truncate from {from_seq}: the chat has {len} messages"
            )));
        }
        out.set(c.truncate(from_seq, expected_revision)?);
        Ok(())
    })
}

/// Message `seq` at the current revision, as JSON in `*out`: `{"seq", "revision", "role",
/// "turn", "parts": [...], "step": {"turn", "stream_id", "step"} | null, "at_ms"}`. Parts
/// are `{"type": "text"|"tool_call"|"tool_result"|"approval_request"|"approval_response"|
/// "attachment"|"summary", ...}`; an archived tool result has `"text"` (the preview) and
/// `"archive": {"id", "bytes", "chars", "utf16_units", "lines"}`.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_get(chat: ChatHandle, seq: u64, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (c, _) = chat.object()?;
        out.set(read_one(&c.snapshot(), seq)?);
        Ok(())
    })
}

/// Messages `start .. end` at the current revision, as a JSON array in `*out` (the shape of
/// `undertext_chat_get`); hidden messages (`undertext_chat_hide`) are left out.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_range(
    chat: ChatHandle,
    start: u64,
    end: u64,
    out: *mut Buf,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (c, _) = chat.object()?;
        out.set(read_range(&c.snapshot(), start, end)?);
        Ok(())
    })
}

/// Records a model step of user turn `turn`: its `n` messages are appended in one
/// transaction, tagged (turn, `stream_id`, `step`), durable before this returns. `status`
/// is `UNDERTEXT_STEP_COMPLETE` or `UNDERTEXT_STEP_INTERRUPTED`; a retry is a new
/// `stream_id` for the same turn. Their seqs are `*out_start .. *out_end`.
///
/// # Safety
/// `stream_id` is a valid string argument; `messages` points to `n` valid messages (NULL
/// only when `n` is 0); the out-pointers are NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_record_step(
    chat: ChatHandle,
    turn: u64,
    stream_id: Str,
    step: u32,
    status: u32,
    messages: *const MessageIn,
    n: usize,
    out_start: *mut u64,
    out_end: *mut u64,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (stream, ms, start, end) = unsafe {
            (
                args::text(stream_id, "stream_id")?,
                messages_in(messages, n, "messages")?,
                args::output(out_start, "out_start")?,
                args::output(out_end, "out_end")?,
            )
        };
        let status = match status {
            UNDERTEXT_STEP_COMPLETE => StepStatus::Complete,
            UNDERTEXT_STEP_INTERRUPTED => StepStatus::Interrupted,
            s => {
                return Err(FfiError::invalid(format!(
                    "status: expected UNDERTEXT_STEP_COMPLETE (0) or UNDERTEXT_STEP_INTERRUPTED (1), found {s}"
                )));
            }
        };
        let c = chat_for(chat, &ms.iter().collect::<Vec<_>>())?;
        let r = c.record_step(turn, stream, step, status, ms)?;
        start.set(r.start);
        end.set(r.end);
        Ok(())
    })
}

/// Every recorded attempt at user turn `turn`, in order, as JSON in `*out`:
/// `[{"stream_id", "steps": [{"step", "status": "complete"|"interrupted", "seqs",
/// "at_ms", "messages": [...]}]}]`.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_attempts(chat: ChatHandle, turn: u64, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (c, _) = chat.object()?;
        out.set(Buf::text(crate::json::attempts(&c.attempts(turn)?).to_string()));
        Ok(())
    })
}
