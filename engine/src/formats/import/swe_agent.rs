//! SWE-agent `.traj`: `trajectory: [{action, observation, response, thought, ...}]` and
//! `history: [{role, content, tool_calls?, tool_call_ids?, is_demo?}]`.
//!
//! The chat is the prompt (the non-demonstration `history` items before the first assistant
//! item), then per trajectory step an assistant message (its `response`, and the `action` as
//! a tool call `step-<i>`) and the `observation` as that call's result, paired by position.
//! A file whose `trajectory` is empty is its `history` read as OpenAI chat messages. A user
//! message after the first assistant message is SWE-agent's own (a format error, an
//! observation): marked as feedback, it starts no user turn.

use std::path::Path;

use serde_json::{Value, json};

use super::json::{mark_feedback_after_first_assistant, message, result, shape, str_of, text_of};
use super::{Format, Session, openai};
use crate::base::error::{Error, Result};
use crate::chat::history::{NewMessage, Part, Role};

pub(super) fn parse(path: &Path, v: &Value, file_key: &str) -> Result<Vec<Session>> {
    if v.get("trajectory").is_none() && v.get("history").is_none() {
        return Err(Error::InvalidArgument(format!(
            "{}: not SWE-agent JSON: expected an object with `trajectory` or `history`, found {}",
            path.display(),
            shape(v)
        )));
    }
    let empty = Vec::new();
    let steps = v.get("trajectory").and_then(Value::as_array).unwrap_or(&empty);
    let history = v.get("history").and_then(Value::as_array).unwrap_or(&empty);
    let live: Vec<Value> =
        history.iter().filter(|m| m.get("is_demo").and_then(Value::as_bool) != Some(true)).cloned().collect();
    let mut msgs = if steps.is_empty() {
        openai::messages(&live)
    } else {
        let first_assistant =
            live.iter().position(|m| str_of(m, "role") == Some("assistant")).unwrap_or(live.len());
        let mut msgs = openai::messages(&live[..first_assistant]);
        for (i, s) in steps.iter().enumerate() {
            let id = format!("step-{i}");
            let mut parts = Vec::new();
            let response = text_of(s.get("response"));
            if !response.is_empty() {
                parts.push(Part::Text(response));
            }
            let action = text_of(s.get("action"));
            parts.push(Part::ToolCall {
                id: id.clone(),
                name: "action".into(),
                args: json!({ "action": action }).to_string(),
            });
            msgs.extend(message(Role::Assistant, parts));
            msgs.push(NewMessage {
                role: Role::Tool,
                parts: vec![result(&id, text_of(s.get("observation")), false)],
                feedback: false,
            });
        }
        msgs
    };
    // SWE-agent's own messages after the model first answers (format errors, observations of
    // a history without tool messages) are feedback: the task stays the loop's one turn.
    mark_feedback_after_first_assistant(&mut msgs);
    let stem = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut s = Session::new(Format::SweAgent, path, format!("swe-agent:{file_key}"), msgs);
    s.title = stem.trim_end_matches(".traj").to_string();
    Ok(vec![s])
}
