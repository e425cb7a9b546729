//! The one JSON encoding of parts, messages, views and chat lists that every front-end
//! speaks: the CLI's `--json` output, the C ABI's buffers and Python's dicts have the same
//! keys and shapes, documented here once.
//!
//! Shapes (keys in this order where a front-end keeps one, as Python's dicts do; `serde_json`
//! sorts an object's keys; `null` where a field is absent):
//! - archive reference: `{"id": hex, "bytes", "chars", "utf16_units", "lines"}`
//! - part: `{"type": "text", "text"}`, `{"type": "summary", "text"}`,
//!   `{"type": "tool_call", "id", "name", "args"}` (`args`: JSON text),
//!   `{"type": "tool_result", "call_id", "text", "is_error"}`, with `"archive"` after `"text"`
//!   when the text is a preview of an archived output,
//!   `{"type": "approval_request", "id", "call_id", "prompt"}`,
//!   `{"type": "approval_response", "id", "approved", "reason"}`,
//!   `{"type": "attachment", "mime", "blob": hex}`
//! - stored message: `{"seq", "revision", "role", "turn", "parts", "step", "at_ms"}` with
//!   `"step": {"turn", "stream_id", "step"} | null`, and `"feedback": true` for harness
//!   feedback (absent otherwise)
//! - view message: `{"seqs": [start, end], "role", "parts", "tokens"}`
//! - search hit: `{"chat": "chat-<16 hex>", "seq", "archive": hex | null, "unit", "start", "end",
//!   "snippet", "score", "part", "field"}`, a search's answer `{"hits": [...]}`
//!   ([`SearchHit::to_json`](crate::SearchHit::to_json); the search module builds it, a
//!   floor above this one)
//! - new message (input): `{"role", "parts": [...]}`, or `{"role", "text"}` for one text part;
//!   `"feedback": true` (optional) marks harness feedback
//!
//! [`part_from_json`] and [`new_message_from_json`] read what the encoders write, so a part
//! survives a round trip through any front-end. A front-end with objects of its own (the
//! Python bindings' dicts) speaks the same part shapes without going through [`Value`]: it
//! writes the fields [`part_fields`] hands out, and reads a part with [`part_from`] through a
//! [`PartSource`] of its objects (with its own error messages and input conveniences).
//!
//! ```
//! use undertext::{json, Part, ToolContent};
//! let p = Part::ToolResult { call_id: "c1".into(), content: ToolContent::Text("ok".into()), is_error: false };
//! let v = json::part_json(&p);
//! assert_eq!(v["type"], "tool_result");
//! assert_eq!(v["text"], "ok");
//! assert_eq!(json::part_from_json(&v)?, p);
//! # Ok::<(), undertext::Error>(())
//! ```

use std::convert::Infallible;

use serde_json::{Map, Value, json};

use crate::base::blob::BlobId;
use crate::base::error::{Error, Result};
use crate::model::message::{
    ArchiveRef, Attempt, ChatMeta, ChatPage, Message, NewMessage, Part, Role, StepStatus, ToolContent,
};
use crate::rules::budget::ViewMessage;

/// The value of one field of an object [`part_fields`] or [`archive_ref_fields`] describes,
/// borrowed from the part.
#[derive(Debug, Clone, Copy)]
pub enum Field<'a> {
    /// A string.
    Str(&'a str),
    /// A string, or `null`.
    OptStr(Option<&'a str>),
    /// `true` or `false`.
    Bool(bool),
    /// A non-negative integer.
    Count(u64),
    /// A blob id, written as its 64 hex digits.
    Blob(&'a BlobId),
    /// An archive reference: an object of the fields [`archive_ref_fields`] gives.
    Archive(&'a ArchiveRef),
}

/// Calls `field` with each field of `a`'s object, in order: `id`, `bytes`, `chars`,
/// `utf16_units`, `lines`. [`archive_ref_json`] is the JSON object of them.
pub fn archive_ref_fields<'a, E>(
    a: &'a ArchiveRef,
    mut field: impl FnMut(&'static str, Field<'a>) -> Result<(), E>,
) -> Result<(), E> {
    field("id", Field::Blob(&a.id))?;
    field("bytes", Field::Count(a.bytes))?;
    field("chars", Field::Count(a.chars))?;
    field("utf16_units", Field::Count(a.utf16_units))?;
    field("lines", Field::Count(a.lines))
}

/// Calls `field` with each field of `p`'s object, in order, `"type"` first (the module doc
/// lists every shape). [`part_json`] is the JSON object of them; the Python bindings build
/// their dicts from them.
pub fn part_fields<'a, E>(
    p: &'a Part,
    mut field: impl FnMut(&'static str, Field<'a>) -> Result<(), E>,
) -> Result<(), E> {
    match p {
        Part::Text(t) => {
            field("type", Field::Str("text"))?;
            field("text", Field::Str(t))
        }
        Part::Summary(t) => {
            field("type", Field::Str("summary"))?;
            field("text", Field::Str(t))
        }
        Part::ToolCall { id, name, args } => {
            field("type", Field::Str("tool_call"))?;
            field("id", Field::Str(id))?;
            field("name", Field::Str(name))?;
            field("args", Field::Str(args))
        }
        Part::ToolResult { call_id, content, is_error } => {
            field("type", Field::Str("tool_result"))?;
            field("call_id", Field::Str(call_id))?;
            match content {
                ToolContent::Text(t) => field("text", Field::Str(t))?,
                ToolContent::Archived { archive, preview } => {
                    field("text", Field::Str(preview))?;
                    field("archive", Field::Archive(archive))?;
                }
            }
            field("is_error", Field::Bool(*is_error))
        }
        Part::ApprovalRequest { id, call_id, prompt } => {
            field("type", Field::Str("approval_request"))?;
            field("id", Field::Str(id))?;
            field("call_id", Field::OptStr(call_id.as_deref()))?;
            field("prompt", Field::Str(prompt))
        }
        Part::ApprovalResponse { id, approved, reason } => {
            field("type", Field::Str("approval_response"))?;
            field("id", Field::Str(id))?;
            field("approved", Field::Bool(*approved))?;
            field("reason", Field::OptStr(reason.as_deref()))
        }
        Part::Attachment { mime, blob } => {
            field("type", Field::Str("attachment"))?;
            field("mime", Field::Str(mime))?;
            field("blob", Field::Blob(blob))
        }
    }
}

fn field_json(f: Field<'_>) -> Value {
    match f {
        Field::Str(s) => Value::from(s),
        Field::OptStr(s) => s.map_or(Value::Null, Value::from),
        Field::Bool(b) => Value::Bool(b),
        Field::Count(n) => Value::from(n),
        Field::Blob(id) => Value::String(id.to_string()),
        Field::Archive(a) => archive_ref_json(a),
    }
}

/// What puts each field it is called with into `o`.
fn into_object(
    o: &mut Map<String, Value>,
) -> impl FnMut(&'static str, Field<'_>) -> Result<(), Infallible> + '_ {
    |key, f| {
        o.insert(key.into(), field_json(f));
        Ok(())
    }
}

/// `{"id": hex, "bytes", "chars", "utf16_units", "lines"}`.
pub fn archive_ref_json(a: &ArchiveRef) -> Value {
    let mut o = Map::new();
    let Ok(()) = archive_ref_fields(a, into_object(&mut o));
    Value::Object(o)
}

/// One part (see the module doc for every shape).
pub fn part_json(p: &Part) -> Value {
    let mut o = Map::new();
    let Ok(()) = part_fields(p, into_object(&mut o));
    Value::Object(o)
}

/// A list of parts.
pub fn parts_json(ps: &[Part]) -> Value {
    Value::Array(ps.iter().map(part_json).collect())
}

/// A stored message.
pub fn message_json(m: &Message) -> Value {
    let mut v = json!({
        "seq": m.seq,
        "revision": m.revision,
        "role": m.role.as_str(),
        "turn": m.turn,
        "parts": parts_json(&m.parts),
        "step": m.step.as_ref().map(|s| json!({"turn": s.turn, "stream_id": s.stream_id, "step": s.step})),
        "at_ms": m.at_ms,
    });
    if m.feedback {
        v["feedback"] = Value::Bool(true);
    }
    v
}

/// One message of a model view.
pub fn view_message_json(m: &ViewMessage) -> Value {
    json!({"seqs": [m.seqs.start, m.seqs.end], "role": m.role.as_str(), "parts": parts_json(&m.parts), "tokens": m.tokens})
}

/// Chat metadata: `{"title", "model", "draft", "extra": {k: v}}`.
pub fn meta_json(m: &ChatMeta) -> Value {
    json!({"title": m.title, "model": m.model, "draft": m.draft, "extra": m.extra})
}

/// A page of chats: `{"chats": [{"id", "meta", "len", "revision", "created_ms",
/// "last_activity_ms"}], "next": {"last_activity_ms", "id"} | null}`.
pub fn chat_page_json(p: &ChatPage) -> Value {
    json!({
        "chats": p.chats.iter().map(|c| json!({
            "id": c.id.0, "meta": meta_json(&c.meta), "len": c.len, "revision": c.revision,
            "created_ms": c.created_ms, "last_activity_ms": c.last_activity_ms,
        })).collect::<Vec<_>>(),
        "next": p.next.map(|n| json!({"last_activity_ms": n.last_activity_ms, "id": n.id.0})),
    })
}

/// Attempts: `[{"stream_id", "steps": [{"step", "status": "complete"|"interrupted", "seqs",
/// "at_ms", "messages"}]}]`.
pub fn attempts_json(a: &[Attempt]) -> Value {
    let step = |s: &crate::model::message::Step| {
        json!({
            "step": s.step,
            "status": match s.status { StepStatus::Complete => "complete", StepStatus::Interrupted => "interrupted" },
            "seqs": s.seqs,
            "at_ms": s.at_ms,
            "messages": s.messages.iter().map(message_json).collect::<Vec<_>>(),
        })
    };
    Value::Array(
        a.iter()
            .map(|a| json!({"stream_id": a.stream_id, "steps": a.steps.iter().map(step).collect::<Vec<_>>()}))
            .collect(),
    )
}

pub(crate) fn bad(what: &str, expected: &str, found: &Value) -> Error {
    let shown = match found {
        Value::Null => "nothing".to_string(),
        Value::String(s) => format!("the string {s:?}"),
        other => format!("{other}"),
    };
    let shown: String = if shown.chars().count() > 80 {
        shown.chars().take(80).chain("…".chars()).collect()
    } else {
        shown
    };
    Error::InvalidArgument(format!("{what}: expected {expected}, found {shown}"))
}

pub(crate) fn obj<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>> {
    v.as_object().ok_or_else(|| bad(what, "an object", v))
}

pub(crate) fn string(o: &Map<String, Value>, key: &str, what: &str) -> Result<String> {
    let v = o.get(key).unwrap_or(&Value::Null);
    v.as_str().map(str::to_string).ok_or_else(|| bad(&format!("{what}.{key}"), "a string", v))
}

pub(crate) fn opt_string(o: &Map<String, Value>, key: &str, what: &str) -> Result<Option<String>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(bad(&format!("{what}.{key}"), "a string or null", v)),
    }
}

fn boolean(o: &Map<String, Value>, key: &str, what: &str, default: Option<bool>) -> Result<bool> {
    match (o.get(key), default) {
        (Some(Value::Bool(b)), _) => Ok(*b),
        (None | Some(Value::Null), Some(d)) => Ok(d),
        (v, _) => Err(bad(&format!("{what}.{key}"), "true or false", v.unwrap_or(&Value::Null))),
    }
}

pub(crate) fn count(o: &Map<String, Value>, key: &str, what: &str) -> Result<u64> {
    let v = o.get(key).unwrap_or(&Value::Null);
    v.as_u64().ok_or_else(|| bad(&format!("{what}.{key}"), "a non-negative integer", v))
}

pub(crate) fn blob_id(o: &Map<String, Value>, key: &str, what: &str) -> Result<BlobId> {
    string(o, key, what)?.parse()
}

/// An archive reference from [`archive_ref_json`]'s shape.
pub fn archive_ref_from_json(v: &Value) -> Result<ArchiveRef> {
    let what = "archive";
    let o = obj(v, what)?;
    Ok(ArchiveRef {
        id: blob_id(o, "id", what)?,
        bytes: count(o, "bytes", what)?,
        chars: count(o, "chars", what)?,
        utf16_units: count(o, "utf16_units", what)?,
        lines: count(o, "lines", what)?,
    })
}

/// Where [`part_from`] reads the fields of a part, each by its key in [`part_json`]'s shape:
/// a JSON object for [`part_from_json`]; the Python bindings' dicts for theirs (each source
/// with its own error messages and input conveniences).
pub trait PartSource {
    /// A missing or malformed field.
    type Error;
    /// A string.
    fn string(&mut self, key: &'static str) -> std::result::Result<String, Self::Error>;
    /// A string, or none when absent (or null).
    fn opt_string(&mut self, key: &'static str) -> std::result::Result<Option<String>, Self::Error>;
    /// `true` or `false`; `default` when absent (None: the field is required).
    fn boolean(&mut self, key: &'static str, default: Option<bool>)
    -> std::result::Result<bool, Self::Error>;
    /// A tool call's arguments, as JSON text.
    fn args(&mut self, key: &'static str) -> std::result::Result<String, Self::Error>;
    /// A blob id.
    fn blob(&mut self, key: &'static str) -> std::result::Result<BlobId, Self::Error>;
    /// An archive reference, or none when absent (or null).
    fn archive(&mut self, key: &'static str) -> std::result::Result<Option<ArchiveRef>, Self::Error>;
    /// The error for a part type that is none of the seven.
    fn unknown_type(&mut self, ty: &str) -> Self::Error;
}

/// The part of type `ty` (its `"type"`) whose other fields `source` reads, in the order of
/// [`part_fields`] (the module doc lists every shape).
pub fn part_from<S: PartSource>(ty: &str, source: &mut S) -> std::result::Result<Part, S::Error> {
    let s = source;
    Ok(match ty {
        "text" => Part::Text(s.string("text")?),
        "summary" => Part::Summary(s.string("text")?),
        "tool_call" => Part::ToolCall { id: s.string("id")?, name: s.string("name")?, args: s.args("args")? },
        "tool_result" => {
            let text = s.string("text")?;
            let content = match s.archive("archive")? {
                None => ToolContent::Text(text),
                Some(archive) => ToolContent::Archived { archive, preview: text },
            };
            Part::ToolResult {
                call_id: s.string("call_id")?,
                content,
                is_error: s.boolean("is_error", Some(false))?,
            }
        }
        "approval_request" => Part::ApprovalRequest {
            id: s.string("id")?,
            call_id: s.opt_string("call_id")?,
            prompt: s.string("prompt")?,
        },
        "approval_response" => Part::ApprovalResponse {
            id: s.string("id")?,
            approved: s.boolean("approved", None)?,
            reason: s.opt_string("reason")?,
        },
        "attachment" => Part::Attachment { mime: s.string("mime")?, blob: s.blob("blob")? },
        other => return Err(s.unknown_type(other)),
    })
}

/// A part's fields in a JSON object; `what` names the part in errors.
struct JsonPart<'a> {
    o: &'a Map<String, Value>,
    what: String,
}

impl PartSource for JsonPart<'_> {
    type Error = Error;

    fn string(&mut self, key: &'static str) -> Result<String> {
        string(self.o, key, &self.what)
    }

    fn opt_string(&mut self, key: &'static str) -> Result<Option<String>> {
        opt_string(self.o, key, &self.what)
    }

    fn boolean(&mut self, key: &'static str, default: Option<bool>) -> Result<bool> {
        boolean(self.o, key, &self.what, default)
    }

    /// JSON text, or any other JSON value (stored as its text); absent or null: `{}`.
    fn args(&mut self, key: &'static str) -> Result<String> {
        Ok(match self.o.get(key) {
            Some(Value::String(s)) => s.clone(),
            None | Some(Value::Null) => "{}".to_string(),
            Some(other) => other.to_string(),
        })
    }

    fn blob(&mut self, key: &'static str) -> Result<BlobId> {
        blob_id(self.o, key, &self.what)
    }

    fn archive(&mut self, key: &'static str) -> Result<Option<ArchiveRef>> {
        match self.o.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(a) => archive_ref_from_json(a).map(Some),
        }
    }

    fn unknown_type(&mut self, ty: &str) -> Error {
        bad(
            "part.type",
            "text, summary, tool_call, tool_result, approval_request, approval_response or attachment",
            &Value::String(ty.to_string()),
        )
    }
}

/// A part from [`part_json`]'s shape. `is_error` may be left out (false); `args` may be a
/// JSON value instead of JSON text (it is stored as its text).
pub fn part_from_json(v: &Value) -> Result<Part> {
    let o = obj(v, "part")?;
    let ty = string(o, "type", "part")?;
    part_from(&ty, &mut JsonPart { o, what: format!("part of type {ty:?}") })
}

/// A message to append: `{"role", "parts": [...]}` or `{"role", "text"}`, with
/// `"feedback": true` for harness feedback (a user message that starts no turn).
pub fn new_message_from_json(v: &Value) -> Result<NewMessage> {
    let o = obj(v, "message")?;
    let role: Role = string(o, "role", "message")?.parse()?;
    let feedback = boolean(o, "feedback", "message", Some(false))?;
    match (o.get("parts"), o.get("text")) {
        (Some(Value::Array(ps)), None) => Ok(NewMessage {
            role,
            parts: ps.iter().map(part_from_json).collect::<Result<Vec<_>>>()?,
            feedback,
        }),
        (None, Some(Value::String(t))) => Ok(NewMessage::text(role, t.clone()).with_feedback(feedback)),
        (Some(p), None) => Err(bad("message.parts", "an array of parts", p)),
        (None, Some(t)) => Err(bad("message.text", "a string", t)),
        (Some(_), Some(_)) => Err(Error::InvalidArgument(
            "message: expected either \"parts\" or \"text\", found both".to_string(),
        )),
        (None, None) => Err(Error::InvalidArgument(
            "message: expected \"parts\" (an array) or \"text\" (a string), found neither".to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive() -> ArchiveRef {
        ArchiveRef { id: BlobId::of(b"long output"), bytes: 11, chars: 11, utf16_units: 11, lines: 1 }
    }

    fn every_part() -> Vec<Part> {
        vec![
            Part::Text("héllo\n\u{1F600}".into()),
            Part::Summary("so far".into()),
            Part::ToolCall { id: "c1".into(), name: "read".into(), args: r#"{"path":"a"}"#.into() },
            Part::ToolResult {
                call_id: "c1".into(),
                content: ToolContent::Text("ok".into()),
                is_error: true,
            },
            Part::ToolResult {
                call_id: "c2".into(),
                content: ToolContent::Archived { archive: archive(), preview: "long…".into() },
                is_error: false,
            },
            Part::ApprovalRequest { id: "a1".into(), call_id: Some("c3".into()), prompt: "rm -rf?".into() },
            Part::ApprovalRequest { id: "a2".into(), call_id: None, prompt: "go?".into() },
            Part::ApprovalResponse { id: "a1".into(), approved: false, reason: Some("no".into()) },
            Part::ApprovalResponse { id: "a2".into(), approved: true, reason: None },
            Part::Attachment { mime: "image/png".into(), blob: BlobId::of(b"png") },
        ]
    }

    #[test]
    fn every_part_kind_survives_a_round_trip_through_its_json_text() {
        for p in every_part() {
            let text = part_json(&p).to_string();
            let back: Value = serde_json::from_str(&text).expect("valid JSON");
            assert_eq!(part_from_json(&back).expect("decodes"), p, "{text}");
        }
    }

    #[test]
    fn parts_have_the_documented_json_shapes() {
        let a = archive();
        let hex = a.id.to_string();
        let archived = &every_part()[4];
        assert_eq!(
            part_json(archived),
            json!({"type": "tool_result", "call_id": "c2", "is_error": false, "text": "long…",
                   "archive": {"id": hex, "bytes": 11, "chars": 11, "utf16_units": 11, "lines": 1}})
        );
        assert_eq!(
            part_json(&every_part()[6]),
            json!({"type": "approval_request", "id": "a2", "call_id": null, "prompt": "go?"})
        );
        assert_eq!(
            part_json(&every_part()[9]),
            json!({"type": "attachment", "mime": "image/png", "blob": BlobId::of(b"png").to_string()})
        );
    }

    #[test]
    fn a_part_s_fields_are_its_json_keys_type_first() {
        for p in every_part() {
            let mut keys = Vec::new();
            let Ok(()) = part_fields(&p, |key, _| -> Result<(), Infallible> {
                keys.push(key);
                Ok(())
            });
            assert_eq!(keys[0], "type");
            let mut sorted = keys.clone();
            sorted.sort_unstable();
            let json = part_json(&p);
            let json_keys: Vec<&str> =
                json.as_object().expect("an object").keys().map(String::as_str).collect();
            assert_eq!(sorted, json_keys, "{p:?}");
        }
    }

    #[test]
    fn new_message_accepts_parts_or_a_text_shorthand() {
        let m = NewMessage { role: Role::Assistant, parts: every_part(), feedback: false };
        let v = json!({"role": "assistant", "parts": parts_json(&m.parts)});
        assert_eq!(new_message_from_json(&v).expect("parts"), m);
        let v = json!({"role": "user", "text": "hi"});
        assert_eq!(new_message_from_json(&v).expect("text"), NewMessage::user("hi"));
    }

    #[test]
    fn malformed_parts_are_refused_with_what_was_expected_and_found() {
        let cases = [
            (json!(3), "part: expected an object, found 3"),
            (json!({"type": "photo"}), "part.type: expected text, summary"),
            (json!({"type": "text"}), "part of type \"text\".text: expected a string, found nothing"),
            (
                json!({"type": "tool_result", "call_id": "c", "text": "t", "is_error": "yes"}),
                "is_error: expected true or false",
            ),
            (json!({"type": "attachment", "mime": "a/b", "blob": "zz"}), "blob"),
            (json!({"role": "robot", "text": "x"}), "role: expected system"),
        ];
        for (v, want) in cases {
            let got = if v.get("role").is_some() {
                new_message_from_json(&v).map(|_| ())
            } else {
                part_from_json(&v).map(|_| ())
            };
            let msg = match got {
                Err(e) => e.to_string(),
                Ok(()) => panic!("{v} was accepted"),
            };
            assert!(msg.contains(want), "{v}: {msg}");
        }
    }
}
