//! Rendering a [`View`] for a provider: neutral messages are the view itself; these turn
//! it into the OpenAI chat format and the Anthropic messages format, as JSON.

use serde_json::{Value, json};

use super::view::{View, ViewMessage};
use crate::model::message::{Part, Role, ToolContent};

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
    ///
    /// It carries prompt-caching breakpoints (`"cache_control": {"type": "ephemeral"}`, at
    /// most 4, Anthropic's limit) on the last content block of: the task (the first message
    /// after the system messages, so the system prompt and the task are one cached prefix
    /// that survives every cut), the checkpoint summary, the last message unchanged since
    /// the previous request ([`View::stable_prefix_messages`]: where this request's cached
    /// prefix ends), and the last message (so the next request, which extends this one,
    /// reads all of it from the cache). Anthropic caches the prefix up to a breakpoint for 5
    /// minutes from its last use; OpenAI caches the longest common prefix automatically and
    /// ignores these fields' absence (see docs/CACHING.md).
    pub fn to_anthropic_json(&self) -> String {
        let mut system = Vec::new();
        let mut msgs: Vec<(String, Vec<Value>)> = Vec::new();
        // Per view message: where its last block landed (message, block), if it made one.
        let mut last_block: Vec<Option<(usize, usize)>> = Vec::with_capacity(self.messages.len());
        for m in self.messages.iter() {
            if m.role == Role::System {
                system.extend(m.parts.iter().filter_map(plain));
                last_block.push(None);
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
            let n = blocks.len();
            match msgs.last_mut() {
                Some((r, b)) if r == role => b.extend(blocks),
                _ => msgs.push((role.to_string(), blocks)),
            }
            let at = msgs.len() - 1;
            last_block.push((n > 0).then(|| (at, msgs[at].1.len() - 1)));
        }
        for i in cache_breakpoints(self) {
            // The nearest message at or before `i` that made a block.
            if let Some((m, b)) = last_block[..=i].iter().rev().find_map(|x| *x) {
                msgs[m].1[b]["cache_control"] = json!({"type": "ephemeral"});
            }
        }
        let messages: Vec<Value> =
            msgs.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect();
        json!({"system": system.join("\n\n"), "messages": messages}).to_string()
    }
}

/// The view messages whose ends are the cache breakpoints of the Anthropic rendering (see
/// [`View::to_anthropic_json`]), in order, at most 4.
fn cache_breakpoints(v: &View) -> Vec<usize> {
    let msgs = v.messages();
    let Some(last) = msgs.len().checked_sub(1) else { return Vec::new() };
    let lead = msgs.iter().take_while(|m| m.role == Role::System).count();
    let mut at = Vec::with_capacity(4);
    if lead < msgs.len() {
        at.push(lead);
    }
    let summary = msgs
        .iter()
        .position(|m| matches!(m.parts.as_slice(), [Part::Summary(t)] if t.starts_with("[checkpoint:")));
    at.extend(summary);
    at.extend(v.stable_prefix_messages().checked_sub(1));
    at.push(last);
    at.sort_unstable();
    at.dedup();
    // More than 4 cannot happen (four sources), but Anthropic refuses a fifth: keep the last.
    let extra = at.len().saturating_sub(4);
    at.drain(..extra);
    at
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
