//! The OpenAI chat format: `{role, content}` messages; assistant `tool_calls: [{id, function:
//! {name, arguments}}]` answered by `{role: "tool", tool_call_id, content}`. Plain (a list of
//! messages, or an object with `messages`) and tau-bench (a list of `{task_id, traj}`, one
//! session each); the message reader is shared by mini-swe-agent, SWE-agent and OpenHands.

use std::path::Path;

use serde_json::Value;

use super::json::{args_json, message, result, shape, str_of, text_of, time_of};
use super::{Format, Session};
use crate::base::error::{Error, Result};
use crate::chat::history::{NewMessage, Part, Role};

/// OpenAI chat messages as chat messages. A call without an id gets `call-<message>-<i>`; a
/// tool message without `tool_call_id` answers the next unanswered call, by position.
pub(super) fn messages(list: &[Value]) -> Vec<NewMessage> {
    messages_timed(list).0
}

/// [`messages`] and each one's time: its source message's `timestamp` (or
/// `extra.timestamp`), where it has one ([`time_of`]).
pub(super) fn messages_timed(list: &[Value]) -> (Vec<NewMessage>, Vec<Option<u64>>) {
    let mut out = Vec::new();
    let mut times = Vec::new();
    let mut unanswered: std::collections::VecDeque<String> = Default::default();
    for (n, m) in list.iter().enumerate() {
        let content = text_of(m.get("content"));
        match str_of(m, "role") {
            Some("system" | "developer") => out.push(NewMessage::system(content)),
            Some("user") => out.push(NewMessage::user(content)),
            Some("assistant") => {
                let mut parts = Vec::new();
                if !content.is_empty() {
                    parts.push(Part::Text(content));
                }
                for (i, c) in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten().enumerate()
                {
                    let id = str_of(c, "id").map_or_else(|| format!("call-{n}-{i}"), str::to_string);
                    unanswered.push_back(id.clone());
                    parts.push(Part::ToolCall {
                        id,
                        name: c
                            .pointer("/function/name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                        args: args_json(c.pointer("/function/arguments")),
                    });
                }
                out.extend(message(Role::Assistant, parts));
            }
            Some("tool") => {
                let id = str_of(m, "tool_call_id")
                    .or_else(|| m.pointer("/tool_call_ids/0").and_then(Value::as_str))
                    .map(str::to_string);
                let id = match id {
                    Some(id) => {
                        unanswered.retain(|u| *u != id);
                        id
                    }
                    None => unanswered.pop_front().unwrap_or_else(|| format!("result-{n}")),
                };
                out.push(NewMessage {
                    role: Role::Tool,
                    parts: vec![result(&id, content, false)],
                    feedback: false,
                });
            }
            _ => {} // mini-swe-agent's `exit`
        }
        times.resize(out.len(), time_of(m));
    }
    (out, times)
}

fn title_of(msgs: &[NewMessage]) -> Option<String> {
    msgs.iter().find(|m| m.role == Role::User).and_then(|m| match m.parts.first() {
        Some(Part::Text(t)) => super::json::task_title(t),
        _ => None,
    })
}

pub(super) fn plain(path: &Path, v: &Value, file_key: &str) -> Result<Vec<Session>> {
    let list = match v {
        Value::Array(a) => a,
        Value::Object(_) => {
            v.get("messages").and_then(Value::as_array).ok_or_else(|| expected(path, "openai", v))?
        }
        _ => return Err(expected(path, "openai", v)),
    };
    if !list.iter().all(|m| m.get("role").is_some()) {
        return Err(expected(path, "openai", v));
    }
    let (msgs, times) = messages_timed(list);
    let mut s = Session::new(Format::OpenAi, path, format!("openai:{file_key}"), msgs);
    s.set_times(&times);
    if let Some(t) = title_of(&s.messages) {
        s.title = t;
    }
    Ok(vec![s])
}

pub(super) fn tau_bench(path: &Path, v: &Value, file_key: &str) -> Result<Vec<Session>> {
    let list = v.as_array().ok_or_else(|| expected(path, "tau-bench", v))?;
    let mut out = Vec::with_capacity(list.len());
    for (i, conv) in list.iter().enumerate() {
        let traj = conv.get("traj").and_then(Value::as_array).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{}: tau-bench entry {i}: expected an object with `traj` (a list of messages), found {}",
                path.display(),
                shape(conv)
            ))
        })?;
        let (msgs, times) = messages_timed(traj);
        let mut s = Session::new(Format::TauBench, path, format!("tau-bench:{file_key}:{i}"), msgs);
        s.set_times(&times);
        let task = conv.get("task_id").map(Value::to_string).unwrap_or_default();
        let trial = conv.get("trial").map(Value::to_string).unwrap_or_default();
        s.title = format!("tau-bench #{i} task {task} trial {trial}");
        out.push(s);
    }
    Ok(out)
}

fn expected(path: &Path, format: &str, v: &Value) -> Error {
    let want = match format {
        "tau-bench" => "a list of conversations with `traj`",
        _ => "a list of {role, content} messages, or an object with `messages`",
    };
    Error::InvalidArgument(format!(
        "{}: not {format} JSON: expected {want}, found {}",
        path.display(),
        shape(v)
    ))
}
