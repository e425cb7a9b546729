//! Codex CLI rollout JSONL: lines `{timestamp, type, payload}`. One session per file, keyed
//! by `session_meta.payload.id`. `response_item` payloads are the conversation: `message`
//! (`content` blocks `input_text` / `output_text`), `function_call` / `custom_tool_call`
//! (paired with their `*_output` by `call_id`), `reasoning` (not a message). `event_msg`
//! lines repeat the chat and are skipped; a `compacted` line is kept as a summary.

use std::path::Path;

use serde_json::Value;

use super::json::{args_json, jsonl_lines, message, result, str_of, text_of, time_of};
use super::{Format, Parsed, Session};
use crate::base::error::{Error, Result};
use crate::chat::history::{NewMessage, Part, Role};

/// A message's text: its content blocks' `text`, joined without a separator.
fn content_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::Array(blocks)) => {
            blocks.iter().map(|b| str_of(b, "text").map_or_else(|| b.to_string(), str::to_string)).collect()
        }
        other => text_of(other),
    }
}

/// A tool output: a string, or an object whose `content`/`output` is the text.
fn output_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::Object(o)) => match o.get("content").or_else(|| o.get("output")) {
            Some(Value::String(s)) => s.clone(),
            _ => text_of(v),
        },
        other => text_of(other),
    }
}

pub(super) fn parse(path: &Path, text: &str, file_key: &str) -> Result<Parsed> {
    parse_lines(path, text.lines().map(Ok), file_key, None)
}

/// [`parse`] over lines from any source, handing messages to `drain` as they are read when
/// it is given (see `claude_code::parse_lines`).
pub(super) fn parse_lines<S: AsRef<str>>(
    path: &Path,
    lines: impl Iterator<Item = Result<S>>,
    file_key: &str,
    drain: Option<&mut super::stream::Drain<'_>>,
) -> Result<Parsed> {
    let mut problems = Vec::new();
    let mut chunks = super::stream::Chunks::new(drain);
    let mut out: Vec<NewMessage> = Vec::new();
    let (mut id, mut model, mut title) = (None::<String>, String::new(), None::<String>);
    // Consecutive calls of one response go into one assistant message.
    let mut calls: Vec<Part> = Vec::new();
    let flush = |calls: &mut Vec<Part>, out: &mut Vec<NewMessage>| {
        out.extend(message(Role::Assistant, std::mem::take(calls)));
    };
    // Each message's time: its line's `timestamp` (the calls of one response, the first's).
    let mut times: Vec<Option<u64>> = Vec::new();
    let mut calls_at = None;
    // Each line becomes messages as it is read: the JSON of one line at a time in memory.
    let mut ours = false;
    let first = jsonl_lines(path, lines, &mut problems, |_, v| {
        ours |= super::detect_line(v) == Some(Format::Codex);
        let at = time_of(v);
        // Messages pushed by this line: the held calls (their own time), then this line's.
        let stamp = |times: &mut Vec<Option<u64>>, out: &Vec<NewMessage>, t: Option<u64>| {
            times.resize(out.len(), t);
        };
        if matches!(str_of(v, "type"), Some("compacted" | "response_item"))
            && !matches!(
                v.pointer("/payload/type").and_then(Value::as_str),
                Some("function_call" | "custom_tool_call" | "reasoning")
            )
            && !calls.is_empty()
        {
            flush(&mut calls, &mut out);
            stamp(&mut times, &out, calls_at);
        }
        let payload = v.get("payload").unwrap_or(&Value::Null);
        match str_of(v, "type") {
            Some("session_meta") if id.is_none() => id = str_of(payload, "id").map(str::to_string),
            Some("turn_context") if model.is_empty() => {
                model = str_of(payload, "model").unwrap_or_default().to_string();
            }
            Some("compacted") => {
                flush(&mut calls, &mut out);
                let text = str_of(payload, "message").map_or_else(|| payload.to_string(), str::to_string);
                out.push(NewMessage {
                    role: Role::System,
                    parts: vec![Part::Summary(text)],
                    feedback: false,
                });
            }
            Some("response_item") => match str_of(payload, "type") {
                Some("message") => {
                    flush(&mut calls, &mut out);
                    let role = match str_of(payload, "role") {
                        Some("assistant") => Role::Assistant,
                        Some("system" | "developer") => Role::System,
                        _ => Role::User,
                    };
                    let text = content_text(payload.get("content"));
                    if role == Role::User && title.is_none() && !text.starts_with('<') {
                        title = text.lines().next().map(|l| l.chars().take(80).collect());
                    }
                    out.push(NewMessage::text(role, text));
                }
                Some("function_call") | Some("custom_tool_call") => {
                    if calls.is_empty() {
                        calls_at = at;
                    }
                    let args = payload.get("arguments").or_else(|| payload.get("input"));
                    calls.push(Part::ToolCall {
                        id: str_of(payload, "call_id").unwrap_or_default().to_string(),
                        name: str_of(payload, "name").unwrap_or_default().to_string(),
                        args: args_json(args),
                    });
                }
                Some("function_call_output") | Some("custom_tool_call_output") => {
                    flush(&mut calls, &mut out);
                    let call_id = str_of(payload, "call_id").unwrap_or_default();
                    let text = output_text(payload.get("output"));
                    out.push(NewMessage {
                        role: Role::Tool,
                        parts: vec![result(call_id, text, false)],
                        feedback: false,
                    });
                }
                _ => {} // reasoning
            },
            _ => {} // event_msg repeats the chat
        }
        stamp(&mut times, &out, at);
        chunks.offer(&mut out, &mut times);
    })?;
    chunks.failed()?;
    let Some(first) = first else {
        return Ok(Parsed { format: Format::Codex, sessions: Vec::new(), problems });
    };
    if !ours {
        return Err(Error::InvalidArgument(format!(
            "{}: not a Codex rollout: expected lines with `type` and `payload`, found {first}",
            path.display()
        )));
    }
    flush(&mut calls, &mut out);
    times.resize(out.len(), calls_at);
    chunks.finish(&mut out, &mut times)?;
    let key = match id {
        Some(i) => format!("codex:{i}"),
        None => format!("codex:file-{file_key}"),
    };
    let mut s = Session::new(Format::Codex, path, key, out);
    s.set_times(&times);
    s.model = model;
    if let Some(t) = title {
        s.title = t;
    }
    Ok(Parsed { format: Format::Codex, sessions: vec![s], problems })
}
