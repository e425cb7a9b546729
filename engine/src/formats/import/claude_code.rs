//! Claude Code session JSONL: one session per file; `subagents/agent-*.jsonl` files are side
//! chains (`isSidechain`, `agentId`) of the session named by their `sessionId`.
//!
//! The lines of one model response (same `message.id`) become one assistant message; tool
//! results logged while that response is still open (parallel calls are written call, result,
//! call, result) are held and appended right after it, as one user message of tool-result
//! parts, the way the Anthropic API sees them. `thinking` blocks, `progress`, `system`,
//! `summary`, snapshot and queue lines are not messages (a `summary` line titles the chat).
//! A user line with `isMeta: true` (text Claude Code injected: a local-command caveat, a
//! skill's instructions) is marked as harness feedback: it starts no user turn.

use std::path::Path;

use serde_json::Value;

use super::json::{args_json, jsonl_lines, message, result, str_of, text_of, time_of};
use super::{Format, Parsed, Session};
use crate::base::error::{Error, Result};
use crate::chat::history::{NewMessage, Part, Role};

struct Open {
    id: String,
    parts: Vec<Part>,
    held: Vec<Part>,
    /// The `timestamp` of the response's first line.
    at: Option<u64>,
    /// Of the first held result's line.
    held_at: Option<u64>,
}

/// The messages so far and each one's time (its line's `timestamp`).
#[derive(Default)]
struct Out {
    msgs: Vec<NewMessage>,
    times: Vec<Option<u64>>,
}

impl Out {
    fn push(&mut self, m: Option<NewMessage>, at: Option<u64>) {
        if let Some(m) = m {
            self.msgs.push(m);
            self.times.push(at);
        }
    }
}

fn flush(open: &mut Option<Open>, out: &mut Out) {
    if let Some(o) = open.take() {
        out.push(message(Role::Assistant, o.parts), o.at);
        out.push(message(Role::User, o.held), o.held_at.or(o.at));
    }
}

fn assistant_parts(content: Option<&Value>) -> Vec<Part> {
    let mut parts = Vec::new();
    match content {
        Some(Value::Array(blocks)) => {
            for b in blocks {
                match str_of(b, "type") {
                    Some("text") => parts.push(Part::Text(str_of(b, "text").unwrap_or_default().to_string())),
                    Some("tool_use") => parts.push(Part::ToolCall {
                        id: str_of(b, "id").unwrap_or_default().to_string(),
                        name: str_of(b, "name").unwrap_or_default().to_string(),
                        args: args_json(b.get("input")),
                    }),
                    _ => {} // thinking, redacted_thinking
                }
            }
        }
        Some(Value::String(s)) => parts.push(Part::Text(s.clone())),
        _ => {}
    }
    parts
}

fn user_parts(content: Option<&Value>) -> Vec<Part> {
    match content {
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(|b| match str_of(b, "type") {
                Some("tool_result") => result(
                    str_of(b, "tool_use_id").unwrap_or_default(),
                    text_of(b.get("content")),
                    b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                ),
                Some("text") => Part::Text(str_of(b, "text").unwrap_or_default().to_string()),
                _ => Part::Text(b.to_string()),
            })
            .collect(),
        other => vec![Part::Text(text_of(other))],
    }
}

pub(super) fn parse(path: &Path, text: &str, file_key: &str) -> Result<Parsed> {
    parse_lines(path, text.lines().map(Ok), file_key, None)
}

/// [`parse`] over lines from any source. With `drain`, the messages are handed to it
/// [`CHUNK`](super::CHUNK) at a time as they are read (each with its line's time) instead of
/// kept, the last ones when the file ends: the session returned holds none.
pub(super) fn parse_lines<S: AsRef<str>>(
    path: &Path,
    lines: impl Iterator<Item = Result<S>>,
    file_key: &str,
    drain: Option<&mut super::stream::Drain<'_>>,
) -> Result<Parsed> {
    let mut problems = Vec::new();
    let mut out = Out::default();
    let mut chunks = super::stream::Chunks::new(drain);
    let mut open: Option<Open> = None;
    let (mut session_id, mut agent_id, mut model, mut title, mut first_user) =
        (None::<String>, None::<String>, String::new(), None::<String>, None::<String>);
    let mut sidechain = false;
    // Each line becomes messages as it is read: the JSON of one line at a time in memory.
    let mut ours = false;
    let first = jsonl_lines(path, lines, &mut problems, |_, v| {
        ours |= super::detect_line(v) == Some(Format::ClaudeCode);
        if session_id.is_none() {
            session_id = str_of(v, "sessionId").map(str::to_string);
        }
        if agent_id.is_none() {
            agent_id = str_of(v, "agentId").map(str::to_string);
        }
        sidechain |= v.get("isSidechain").and_then(Value::as_bool) == Some(true);
        let content = v.pointer("/message/content");
        let at = time_of(v);
        match str_of(v, "type") {
            Some("assistant") => {
                if model.is_empty() {
                    model =
                        v.pointer("/message/model").and_then(Value::as_str).unwrap_or_default().to_string();
                }
                let id = v.pointer("/message/id").and_then(Value::as_str).unwrap_or_default().to_string();
                let parts = assistant_parts(content);
                match &mut open {
                    Some(o) if o.id == id && !id.is_empty() => o.parts.extend(parts),
                    _ => {
                        flush(&mut open, &mut out);
                        open = Some(Open { id, parts, held: Vec::new(), at, held_at: None });
                    }
                }
            }
            Some("user") => {
                let parts = user_parts(content);
                if first_user.is_none()
                    && let Some(Part::Text(t)) =
                        parts.iter().find(|p| matches!(p, Part::Text(t) if !t.trim_start().starts_with('<')))
                {
                    first_user = Some(t.chars().take(80).collect());
                }
                let only_results = parts.iter().all(|p| matches!(p, Part::ToolResult { .. }));
                // `isMeta`: a message Claude Code injected (a command caveat, a skill's text),
                // not the human's: feedback, it starts no user turn.
                let meta = v.get("isMeta").and_then(Value::as_bool) == Some(true);
                match &mut open {
                    Some(o) if only_results => {
                        o.held_at = o.held_at.or(at);
                        o.held.extend(parts);
                    }
                    _ => {
                        flush(&mut open, &mut out);
                        out.push(message(Role::User, parts).map(|m| m.with_feedback(meta)), at);
                    }
                }
            }
            Some("summary") if title.is_none() => title = str_of(v, "summary").map(str::to_string),
            _ => {} // progress, system, file-history-snapshot, queue-operation
        }
        chunks.offer(&mut out.msgs, &mut out.times);
    })?;
    chunks.failed()?;
    let Some(first) = first else {
        return Ok(Parsed { format: Format::ClaudeCode, sessions: Vec::new(), problems });
    };
    if !ours {
        return Err(Error::InvalidArgument(format!(
            "{}: not Claude Code JSONL: expected lines with `type` and `sessionId`, found {first}",
            path.display()
        )));
    }
    flush(&mut open, &mut out);
    chunks.finish(&mut out.msgs, &mut out.times)?;
    let base = match &session_id {
        Some(s) => format!("claude-code:{s}"),
        None => format!("claude-code:file-{file_key}"),
    };
    let (key, parent_key) = match (&agent_id, sidechain) {
        (Some(a), true) => (format!("{base}:agent-{a}"), Some(base)),
        _ => (base, None),
    };
    let mut s = Session::new(Format::ClaudeCode, path, key, out.msgs);
    s.set_times(&out.times);
    s.parent_key = parent_key;
    s.model = model;
    if let Some(t) = title.or(first_user) {
        s.title = t.lines().next().unwrap_or_default().to_string();
    }
    Ok(Parsed { format: Format::ClaudeCode, sessions: vec![s], problems })
}
