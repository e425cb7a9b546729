//! Rendering a [`View`] for a provider: neutral messages are the view itself; these turn
//! it into the OpenAI chat format and the Anthropic messages format, as JSON.

use serde_json::{Value, json};

use super::view::{View, ViewMessage};
use crate::model::{Part, Role, ToolContent};

fn text_of(content: &ToolContent) -> &str {
    match content {
        ToolContent::Text(t) => t,
        ToolContent::Archived { preview, .. } => preview,
    }
}

fn plain(p: &Part) -> Option<String> {
    match p {
        Part::Text(t) | Part::Summary(t) => Some(t.clone()),
        Part::ApprovalRequest { id, prompt, .. } => Some(format!("[approval requested ({id})] {prompt}")),
        Part::ApprovalResponse { id, approved, reason } => Some(format!(
            "[approval {id}: {}{}]",
            if *approved { "granted" } else { "denied" },
            reason.as_deref().map(|r| format!(" — {r}")).unwrap_or_default()
        )),
        Part::Attachment { mime, blob } => Some(format!("[attachment {mime} {blob}]")),
        Part::ToolCall { .. } | Part::ToolResult { .. } => None,
    }
}

fn args_value(args: &str) -> Value {
    serde_json::from_str(args).unwrap_or_else(|_| Value::String(args.to_string()))
}

impl View {
    /// The view in the OpenAI chat format: a JSON array of `{role, content}` messages;
    /// tool calls as `tool_calls` of assistant messages, results as `role: "tool"`.
    pub fn to_openai_json(&self) -> String {
        let mut out = Vec::new();
        for m in self.messages.iter() {
            openai_message(m, &mut out);
        }
        Value::Array(out).to_string()
    }

    /// The view in the Anthropic messages format: `{"system": ..., "messages": [...]}`,
    /// roles alternating user/assistant, tool results as `tool_result` blocks of user
    /// messages, consecutive messages of one role merged.
    pub fn to_anthropic_json(&self) -> String {
        let mut system = Vec::new();
        let mut msgs: Vec<(String, Vec<Value>)> = Vec::new();
        for m in self.messages.iter() {
            if m.role == Role::System {
                system.extend(m.parts.iter().filter_map(plain));
                continue;
            }
            let role = if m.role == Role::Assistant { "assistant" } else { "user" };
            let mut blocks = Vec::new();
            for p in &m.parts {
                match p {
                    Part::ToolCall { id, name, args } => {
                        blocks.push(json!({"type": "tool_use", "id": id, "name": name, "input": args_value(args)}))
                    }
                    Part::ToolResult { call_id, content, is_error } => blocks.push(json!({
                        "type": "tool_result", "tool_use_id": call_id, "content": text_of(content), "is_error": is_error
                    })),
                    other => {
                        if let Some(t) = plain(other) {
                            blocks.push(json!({"type": "text", "text": t}));
                        }
                    }
                }
            }
            match msgs.last_mut() {
                Some((r, b)) if r == role => b.extend(blocks),
                _ => msgs.push((role.to_string(), blocks)),
            }
        }
        let messages: Vec<Value> =
            msgs.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect();
        json!({"system": system.join("\n\n"), "messages": messages}).to_string()
    }
}

fn openai_message(m: &ViewMessage, out: &mut Vec<Value>) {
    let texts: Vec<String> = m.parts.iter().filter_map(plain).collect();
    let calls: Vec<Value> = m
        .parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall { id, name, args } => {
                Some(json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
            }
            _ => None,
        })
        .collect();
    let role = m.role.as_str();
    if !texts.is_empty() || !calls.is_empty() {
        let mut v = json!({"role": role, "content": texts.join("\n")});
        if !calls.is_empty() {
            v["tool_calls"] = Value::Array(calls);
        }
        out.push(v);
    }
    for p in &m.parts {
        if let Part::ToolResult { call_id, content, .. } = p {
            out.push(json!({"role": "tool", "tool_call_id": call_id, "content": text_of(content)}));
        }
    }
}
