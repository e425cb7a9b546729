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
        openai_json(&self.messages)
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

/// The OpenAI chat format of `messages`, written straight into one buffer (no `Value` tree:
/// a harness may render every call). The bytes are those `serde_json` gives the same
/// objects, keys sorted as it sorts them, strings escaped by its serializer.
fn openai_json(messages: &[ViewMessage]) -> String {
    let mut w = JsonOut(Vec::with_capacity(messages.iter().map(|m| m.tokens as usize * 4 + 32).sum()));
    w.raw("[");
    let mut first = true;
    for m in messages {
        let texts = m.parts.iter().filter_map(plain).collect::<Vec<_>>();
        let calls = m.parts.iter().any(|p| matches!(p, Part::ToolCall { .. }));
        if !texts.is_empty() || calls {
            w.comma_unless(&mut first);
            w.raw("{\"content\":");
            w.str(&texts.join("\n"));
            w.raw(",\"role\":");
            w.str(m.role.as_str());
            if calls {
                w.raw(",\"tool_calls\":[");
                let mut first_call = true;
                for p in &m.parts {
                    if let Part::ToolCall { id, name, args } = p {
                        w.comma_unless(&mut first_call);
                        w.raw("{\"function\":{\"arguments\":");
                        w.str(args);
                        w.raw(",\"name\":");
                        w.str(name);
                        w.raw("},\"id\":");
                        w.str(id);
                        w.raw(",\"type\":\"function\"}");
                    }
                }
                w.raw("]");
            }
            w.raw("}");
        }
        for p in &m.parts {
            if let Part::ToolResult { call_id, content, .. } = p {
                w.comma_unless(&mut first);
                w.raw("{\"content\":");
                w.str(text_of(content));
                w.raw(",\"role\":\"tool\",\"tool_call_id\":");
                w.str(call_id);
                w.raw("}");
            }
        }
    }
    w.raw("]");
    w.finish()
}

/// A JSON text being written: raw punctuation, and strings escaped as `serde_json` escapes them.
struct JsonOut(Vec<u8>);

impl JsonOut {
    fn raw(&mut self, s: &str) {
        self.0.extend_from_slice(s.as_bytes());
    }

    /// A comma before every element but the first (`first` says, and is cleared).
    fn comma_unless(&mut self, first: &mut bool) {
        if !std::mem::take(first) {
            self.raw(",");
        }
    }

    fn str(&mut self, s: &str) {
        // Writing into a Vec cannot fail, and a `str` always serializes.
        let _ = serde_json::to_writer(&mut self.0, s);
    }

    fn finish(self) -> String {
        // Only `str`s and ASCII punctuation were written, and serde_json's escapes are ASCII.
        String::from_utf8(self.0).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rendering before it was written directly: `serde_json` values, the oracle.
    fn through_values(messages: &[ViewMessage]) -> String {
        let mut out = Vec::new();
        for m in messages {
            let texts: Vec<String> = m.parts.iter().filter_map(plain).collect();
            let calls: Vec<Value> = m
                .parts
                .iter()
                .filter_map(|p| match p {
                    Part::ToolCall { id, name, args } => Some(
                        json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}),
                    ),
                    _ => None,
                })
                .collect();
            if !texts.is_empty() || !calls.is_empty() {
                let mut v = json!({"role": m.role.as_str(), "content": texts.join("\n")});
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
        Value::Array(out).to_string()
    }

    fn msg(role: Role, parts: Vec<Part>) -> ViewMessage {
        ViewMessage { seqs: 0..1, role, parts, tokens: 10, print: Default::default() }
    }

    #[test]
    fn the_direct_openai_rendering_is_byte_for_byte_the_value_rendering() {
        use crate::base::blob::BlobId;
        use crate::model::message::ArchiveRef;
        // Texts that exercise every escape: quotes, backslashes, control characters, line
        // breaks, non-ASCII, U+2028, an emoji, the empty string.
        let nasty =
            ["", "plain", "q\"uo\\te", "tab\tnl\ncr\r\u{0}\u{1f}\u{7f}", "é 字 \u{2028} 🦀", "</script>"];
        let archived = ToolContent::Archived {
            preview: "head … tail".into(),
            archive: ArchiveRef { id: BlobId::of(b"x"), bytes: 10, chars: 10, utf16_units: 10, lines: 1 },
        };
        let mut messages = vec![msg(Role::System, vec![Part::Text("be brief".into())])];
        for (i, t) in nasty.iter().enumerate() {
            let t = (*t).to_string();
            messages.push(msg(Role::User, vec![Part::Text(t.clone()), Part::Summary(format!("{t}{i}"))]));
            messages.push(msg(
                Role::Assistant,
                vec![
                    Part::Text(t.clone()),
                    Part::ToolCall {
                        id: format!("c{i}"),
                        name: t.clone(),
                        args: format!("{{\"q\": {:?}}}", t),
                    },
                    Part::ToolCall { id: t.clone(), name: "two".into(), args: "not json".into() },
                ],
            ));
            messages.push(msg(
                Role::Assistant,
                vec![Part::ToolCall { id: "only".into(), name: "n".into(), args: "{}".into() }],
            ));
            messages.push(msg(
                Role::Tool,
                vec![
                    Part::ToolResult {
                        call_id: format!("c{i}"),
                        content: ToolContent::Text(t.clone()),
                        is_error: i % 2 == 0,
                    },
                    Part::ToolResult { call_id: t.clone(), content: archived.clone(), is_error: false },
                ],
            ));
            messages.push(msg(
                Role::User,
                vec![
                    Part::ApprovalRequest { id: t.clone(), call_id: Some("c".into()), prompt: t.clone() },
                    Part::ApprovalResponse {
                        id: "a".into(),
                        approved: i % 2 == 1,
                        reason: (i % 3 == 0).then(|| t.clone()),
                    },
                    Part::Attachment { mime: t.clone(), blob: BlobId::of(t.as_bytes()) },
                ],
            ));
            messages.push(msg(Role::Assistant, Vec::new()));
        }
        for n in 0..messages.len() {
            assert_eq!(openai_json(&messages[..n]), through_values(&messages[..n]), "the first {n} messages");
        }
    }
}
