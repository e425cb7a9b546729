//! Oracles for model views, independent of the engine's code: is a rendered view a request
//! OpenAI and Anthropic accept (every tool result right after its call, every call but a
//! trailing one answered), and what does exactly the text sent cost by the estimator.

use std::collections::HashSet;

use serde_json::Value;
use undertext::{Budget, Estimator, View};
use undertext::{Part, ToolContent};

/// An estimator of one token per character and no overhead: expectations can be computed
/// exactly.
#[derive(Debug)]
pub struct Chars;

impl Estimator for Chars {
    fn id(&self) -> &str {
        "chars"
    }
    fn text_tokens(&self, t: &str) -> u64 {
        t.chars().count() as u64
    }
    fn message_overhead(&self) -> u64 {
        0
    }
}

/// Tokens of the parts sent, by the estimator's public methods (the documented formula:
/// overhead per message; text; calls: name + args + id + 3; results: text + 3; approval
/// parts: text + 4; attachments: the reserve).
pub fn sent_tokens(e: &dyn Estimator, parts: &[Part]) -> u64 {
    e.message_overhead()
        + parts
            .iter()
            .map(|p| match p {
                Part::Text(t) | Part::Summary(t) => e.text_tokens(t),
                Part::ToolCall { id, name, args } => {
                    e.text_tokens(name) + e.text_tokens(args) + e.text_tokens(id) + 3
                }
                Part::ToolResult { content: ToolContent::Text(t), .. } => 3 + e.text_tokens(t),
                Part::ToolResult { content: ToolContent::Archived { preview, .. }, .. } => {
                    3 + e.text_tokens(preview)
                }
                Part::ApprovalRequest { prompt, .. } => e.text_tokens(prompt) + 4,
                Part::ApprovalResponse { reason, .. } => {
                    reason.as_deref().map_or(0, |r| e.text_tokens(r)) + 4
                }
                Part::Attachment { .. } => e.attachment_reserve(),
            })
            .sum::<u64>()
}

/// The estimate of exactly what `v` sends under `b` (calibration applied as the view did).
pub fn estimate_of_sent(e: &dyn Estimator, v: &View, b: &Budget) -> u64 {
    let raw: u64 = v.messages().iter().map(|m| sent_tokens(e, &m.parts)).sum::<u64>()
        + b.tool_schemas.iter().map(|s| e.text_tokens(s)).sum::<u64>();
    (raw as f64 * v.calibration()).ceil() as u64
}

/// Problems of the view as an OpenAI chat request: a `tool` message must follow the
/// assistant message holding its call (with only tool messages between); every call of an
/// assistant message that is not the last message must be answered before the next
/// non-tool message.
pub fn openai_problems(v: &View) -> Vec<String> {
    let Ok(msgs) = serde_json::from_str::<Value>(&v.to_openai_json()) else {
        return vec!["the OpenAI rendering is not JSON".into()];
    };
    let mut out = Vec::new();
    let mut open: Option<(usize, HashSet<String>)> = None;
    let list = msgs.as_array().cloned().unwrap_or_default();
    for (i, m) in list.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        if role == "tool" {
            let id = m["tool_call_id"].as_str().unwrap_or("").to_string();
            let answered = open.as_mut().is_some_and(|(_, ids)| ids.remove(&id));
            if !answered {
                out.push(format!("message {i}: tool result {id:?} does not follow its call"));
            }
            continue;
        }
        if let Some((at, ids)) = open.take()
            && !ids.is_empty()
        {
            out.push(format!("message {at}: calls {ids:?} unanswered before message {i}"));
        }
        if let Some(calls) = m["tool_calls"].as_array() {
            let ids = calls.iter().filter_map(|c| c["id"].as_str().map(String::from)).collect();
            open = Some((i, ids));
        }
    }
    out
}

/// Problems of the view as an Anthropic messages request: roles alternate starting with
/// `user`; `tool_result` blocks answer `tool_use` blocks of the assistant message right
/// before; every `tool_use` of an assistant message that is not the last is answered in the
/// next message.
pub fn anthropic_problems(v: &View) -> Vec<String> {
    let Ok(req) = serde_json::from_str::<Value>(&v.to_anthropic_json()) else {
        return vec!["the Anthropic rendering is not JSON".into()];
    };
    let list = req["messages"].as_array().cloned().unwrap_or_default();
    let mut out = Vec::new();
    let blocks = |m: &Value, ty: &str, key: &str| -> HashSet<String> {
        m["content"]
            .as_array()
            .map(|b| {
                b.iter()
                    .filter(|x| x["type"] == ty)
                    .filter_map(|x| x[key].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    for (i, m) in list.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        let expected = if i % 2 == 0 { "user" } else { "assistant" };
        if role != expected {
            out.push(format!("message {i}: role {role}, expected {expected} (roles alternate from user)"));
        }
        let results = blocks(m, "tool_result", "tool_use_id");
        let calls_before = if i > 0 { blocks(&list[i - 1], "tool_use", "id") } else { HashSet::new() };
        for r in results.difference(&calls_before) {
            out.push(format!(
                "message {i}: tool_result {r:?} does not answer a tool_use of message {}",
                i.max(1) - 1
            ));
        }
        let calls = blocks(m, "tool_use", "id");
        if !calls.is_empty() && i + 1 < list.len() {
            let answered = blocks(&list[i + 1], "tool_result", "tool_use_id");
            for c in calls.difference(&answered) {
                out.push(format!("message {i}: tool_use {c:?} is not answered in message {}", i + 1));
            }
        }
    }
    out
}
