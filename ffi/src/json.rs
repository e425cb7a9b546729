//! The JSON shapes of messages, parts, attempts, chat lists and view messages handed to C.

use serde_json::{Value, json};
use undertext::budget::ViewMessage;
use undertext::{ArchiveRef, Attempt, ChatMeta, ChatPage, Message, Part, ToolContent};

/// `{"id": hex, "bytes", "chars", "utf16_units", "lines"}`.
pub(crate) fn archive_ref(r: &ArchiveRef) -> Value {
    json!({"id": r.id.to_string(), "bytes": r.bytes, "chars": r.chars, "utf16_units": r.utf16_units, "lines": r.lines})
}

/// A part: `{"type": "text"|"tool_call"|"tool_result"|"approval_request"|
/// "approval_response"|"attachment"|"summary", ...fields}`.
pub(crate) fn part(p: &Part) -> Value {
    match p {
        Part::Text(t) => json!({"type": "text", "text": t}),
        Part::Summary(t) => json!({"type": "summary", "text": t}),
        Part::ToolCall { id, name, args } => {
            json!({"type": "tool_call", "id": id, "name": name, "args": args})
        }
        Part::ToolResult { call_id, content, is_error } => match content {
            ToolContent::Text(t) => {
                json!({"type": "tool_result", "call_id": call_id, "is_error": is_error, "text": t})
            }
            ToolContent::Archived { archive, preview } => json!({
                "type": "tool_result", "call_id": call_id, "is_error": is_error,
                "text": preview, "archive": archive_ref(archive),
            }),
        },
        Part::ApprovalRequest { id, call_id, prompt } => {
            json!({"type": "approval_request", "id": id, "call_id": call_id, "prompt": prompt})
        }
        Part::ApprovalResponse { id, approved, reason } => {
            json!({"type": "approval_response", "id": id, "approved": approved, "reason": reason})
        }
        Part::Attachment { mime, blob } => {
            json!({"type": "attachment", "mime": mime, "blob": blob.to_string()})
        }
    }
}

/// A stored message.
pub(crate) fn message(m: &Message) -> Value {
    json!({
        "seq": m.seq,
        "revision": m.revision,
        "role": m.role.as_str(),
        "turn": m.turn,
        "parts": m.parts.iter().map(part).collect::<Vec<_>>(),
        "step": m.step.as_ref().map(|s| json!({"turn": s.turn, "stream_id": s.stream_id, "step": s.step})),
        "at_ms": m.at_ms,
    })
}

/// Messages as a JSON array.
pub(crate) fn messages(ms: &[Message]) -> Value {
    Value::Array(ms.iter().map(message).collect())
}

/// Attempts: `[{"stream_id", "steps": [{"step", "status", "seqs", "at_ms", "messages"}]}]`.
pub(crate) fn attempts(a: &[Attempt]) -> Value {
    Value::Array(
        a.iter()
            .map(|a| {
                json!({
                    "stream_id": a.stream_id,
                    "steps": a.steps.iter().map(|s| json!({
                        "step": s.step,
                        "status": match s.status {
                            undertext::StepStatus::Complete => "complete",
                            undertext::StepStatus::Interrupted => "interrupted",
                        },
                        "seqs": s.seqs,
                        "at_ms": s.at_ms,
                        "messages": messages(&s.messages),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

/// Chat metadata: `{"title", "model", "draft", "extra": {k: v}}`.
pub(crate) fn meta(m: &ChatMeta) -> Value {
    json!({"title": m.title, "model": m.model, "draft": m.draft, "extra": m.extra})
}

/// A page of chats: `{"chats": [{"id", "meta", "len", "revision", "created_ms",
/// "last_activity_ms"}], "next": {"last_activity_ms", "id"} | null}`.
pub(crate) fn chat_page(p: &ChatPage) -> Value {
    json!({
        "chats": p.chats.iter().map(|c| json!({
            "id": c.id.0,
            "meta": meta(&c.meta),
            "len": c.len,
            "revision": c.revision,
            "created_ms": c.created_ms,
            "last_activity_ms": c.last_activity_ms,
        })).collect::<Vec<_>>(),
        "next": p.next.map(|n| json!({"last_activity_ms": n.last_activity_ms, "id": n.id.0})),
    })
}

/// View messages (the neutral format): `[{"seqs": [start, end], "role", "parts", "tokens"}]`.
pub(crate) fn view_messages(ms: &[ViewMessage]) -> Value {
    Value::Array(
        ms.iter()
            .map(|m| {
                json!({
                    "seqs": [m.seqs.start, m.seqs.end],
                    "role": m.role.as_str(),
                    "parts": m.parts.iter().map(part).collect::<Vec<_>>(),
                    "tokens": m.tokens,
                })
            })
            .collect(),
    )
}
