//! Small helpers shared by the parsers: reading JSON fields and building messages.

use serde_json::Value;

use crate::history::{NewMessage, Part, Role, ToolContent};

/// The string at `key`, if it is one.
pub(super) fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The text of a content value, as `MANIFEST.txt` counts it: a string; a list of blocks,
/// `text` blocks by their text and others as JSON, joined without a separator; absent or
/// null is the empty text; any other value is its JSON.
pub(super) fn text_of(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(|b| match (str_of(b, "type"), str_of(b, "text")) {
                (Some("text"), Some(t)) => t.to_string(),
                _ => b.to_string(),
            })
            .collect(),
        Some(other) => other.to_string(),
    }
}

/// Tool-call arguments as JSON text: a string that parses as JSON is kept; any other string
/// is wrapped as a JSON string; absent is `{}`; other values are serialized.
pub(super) fn args_json(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) if serde_json::from_str::<Value>(s).is_ok() => s.clone(),
        Some(Value::String(s)) => Value::String(s.clone()).to_string(),
        None | Some(Value::Null) => "{}".to_string(),
        Some(other) => other.to_string(),
    }
}

/// A tool result part.
pub(super) fn result(call_id: &str, text: String, is_error: bool) -> Part {
    Part::ToolResult { call_id: call_id.to_string(), content: ToolContent::Text(text), is_error }
}

/// A message, or none when it has no parts.
/// Marks as harness feedback ([`NewMessage::feedback`](crate::NewMessage#structfield.feedback))
/// every user message that would start a turn after the first assistant message: in an
/// autonomous loop (mini-swe-agent, SWE-agent) the human writes only the task, before the model
/// first answers; every later user message is the harness's own (a format error such as "Please
/// always provide EXACTLY ONE action", a timeout notice, an observation), and starts no turn.
/// The task and anything else before the first assistant message stay unmarked.
pub(super) fn mark_feedback_after_first_assistant(msgs: &mut [NewMessage]) {
    let Some(first) = msgs.iter().position(|m| m.role == Role::Assistant) else { return };
    for m in &mut msgs[first..] {
        if m.starts_turn() {
            m.feedback = true;
        }
    }
}

pub(super) fn message(role: Role, parts: Vec<Part>) -> Option<NewMessage> {
    (!parts.is_empty()).then_some(NewMessage { role, parts, feedback: false })
}

/// What a JSON value looks like, for error messages.
pub(super) fn shape(v: &Value) -> String {
    match v {
        Value::Object(o) => {
            let keys: Vec<&str> = o.keys().take(6).map(String::as_str).collect();
            format!("an object with keys {keys:?}")
        }
        Value::Array(a) => format!("a list of {} items", a.len()),
        Value::String(_) => "a string".into(),
        Value::Number(_) => "a number".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Null => "null".into(),
    }
}

/// Parses the non-empty lines of a JSONL text into objects; a line that is not a JSON object
/// becomes a problem (1-based line number) and is skipped.
pub(super) fn jsonl(
    path: &std::path::Path,
    text: &str,
    problems: &mut Vec<super::Problem>,
) -> Vec<(u64, Value)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let line_no = n as u64 + 1;
        match serde_json::from_str::<Value>(line) {
            Ok(v) if v.is_object() => out.push((line_no, v)),
            Ok(v) => problems.push(super::Problem {
                file: path.to_path_buf(),
                line: line_no,
                reason: format!("expected a JSON object, found {} (line skipped)", shape(&v)),
            }),
            Err(e) => problems.push(super::Problem {
                file: path.to_path_buf(),
                line: line_no,
                reason: format!("expected a JSON object, found invalid JSON: {e} (line skipped)"),
            }),
        }
    }
    out
}
