//! The history tools' schemas and their one call (see the module above).
//!
//! ```
//! use undertext::recall::tools;
//! let names: Vec<String> = tools::schemas_openai()
//!     .iter()
//!     .map(|s| serde_json::from_str::<serde_json::Value>(s).unwrap()["function"]["name"].as_str().unwrap().to_string())
//!     .collect();
//! assert_eq!(names, ["search_history", "read_messages", "read_context"]);
//! ```

use std::sync::Arc;

use serde_json::{Value, json};

use crate::base::blob::BlobId;
use crate::base::error::{Error, Result};
use crate::chat::archive::ArchiveCache;
use crate::chat::history::{self, ChatCache};
use crate::kernel::store::core::Core;
use crate::model::message::{ChatId, Message, Part, ToolContent, Unit};

/// `read_messages`: messages of a chat by seq range.
pub const READ_MESSAGES: &str = "read_messages";
/// `read_context`: a range of an archive (or of a previewed inline result).
pub const READ_CONTEXT: &str = "read_context";
/// `search_history`: full-text search over the owner's history.
pub const SEARCH_HISTORY: &str = "search_history";

/// The most characters one tool result holds; a longer answer is cut with a note saying how
/// to read on.
pub const MAX_RESULT_CHARS: usize = 16_000;

fn specs() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            SEARCH_HISTORY,
            "Search the whole history of your conversations (messages, tool calls, tool results, \
             archived outputs) for words, when something you need is no longer in view. Returns \
             hits with the chat, the seq and how to read each back (read_messages or read_context).",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to find (all of them rank first)."},
                    "chat": {"type": "string", "description": "Only this chat (chat-<16 hex digits>); default all."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "At most this many hits (default 10)."}
                },
                "required": ["query"]
            }),
        ),
        (
            READ_MESSAGES,
            "Read back messages of this conversation that are no longer shown in full (a \
             checkpoint summary or a preview names the chat and the seq range). Returns each \
             message whole: texts, tool calls, tool results (archived ones with their archive \
             id). With archives_only, lists only the archived tool results in the range.",
            json!({
                "type": "object",
                "properties": {
                    "chat": {"type": "string", "description": "The chat id, as named (chat-<16 hex digits>)."},
                    "start": {"type": "integer", "minimum": 0, "description": "First seq."},
                    "end": {"type": "integer", "minimum": 0, "description": "One past the last seq."},
                    "archives_only": {"type": "boolean", "description": "List only archived tool results (seq and archive id)."},
                    "offset": {"type": "integer", "minimum": 0, "description": "Characters of the answer to skip: read on where a long answer was cut (its last line says how)."}
                },
                "required": ["chat", "start", "end"]
            }),
        ),
        (
            READ_CONTEXT,
            "Read an exact range of an archived tool result (or of a previewed text) by the \
             archive id its preview or a checkpoint names. Units: lines (default), chars, \
             bytes or utf16.",
            json!({
                "type": "object",
                "properties": {
                    "archive": {"type": "string", "description": "The archive id (64 hex digits)."},
                    "start": {"type": "integer", "minimum": 0},
                    "end": {"type": "integer", "minimum": 0},
                    "unit": {"type": "string", "enum": ["lines", "chars", "bytes", "utf16"]}
                },
                "required": ["archive", "start", "end"]
            }),
        ),
    ]
}

/// The tools' schemas in OpenAI's chat-completions shape (`{"type": "function", ...}`), as
/// JSON texts, in the order `search_history`, `read_messages`, `read_context`.
pub fn schemas_openai() -> Vec<String> {
    specs()
        .into_iter()
        .map(|(name, d, p)| {
            json!({"type": "function", "function": {"name": name, "description": d, "parameters": p}})
                .to_string()
        })
        .collect()
}

/// The tools' schemas in Anthropic's messages shape (`{"name", "description",
/// "input_schema"}`), as JSON texts.
pub fn schemas_anthropic() -> Vec<String> {
    specs()
        .into_iter()
        .map(|(name, d, p)| json!({"name": name, "description": d, "input_schema": p}).to_string())
        .collect()
}

/// The store's search for `search_history`: (query, chat or all, limit) to hits.
pub(crate) type SearchFn<'a> = &'a dyn Fn(&str, Option<ChatId>, usize) -> Result<Vec<crate::SearchHit>>;

/// What the tools read from: the store's kernel, caches and search.
#[derive(Clone, Copy)]
pub(crate) struct Source<'a> {
    pub core: &'a Arc<Core>,
    pub chats: &'a ChatCache,
    pub archives: &'a ArchiveCache,
    pub search: SearchFn<'a>,
}

/// Runs tool `name` with the model's `args` (JSON text) for `owner`: the tool-result text.
/// Mistakes (an unknown tool, bad arguments, an id not found for this owner, a range out of
/// bounds) are answered in text; storage failures are errors.
pub(crate) fn call(src: Source<'_>, owner: &str, name: &str, args: &str) -> Result<String> {
    let args: Value = match serde_json::from_str(args) {
        Ok(v @ Value::Object(_)) => v,
        _ => return Ok(format!("error: the arguments of {name} must be a JSON object, found {args:?}")),
    };
    let r = match name {
        READ_MESSAGES => read_messages(src, owner, &args),
        READ_CONTEXT => read_context(src, owner, &args),
        SEARCH_HISTORY => search_history(src, &args),
        other => Err(Error::InvalidArgument(format!(
            "no history tool {other:?}: expected {SEARCH_HISTORY}, {READ_MESSAGES} or {READ_CONTEXT}"
        ))),
    };
    match r {
        Ok(text) => Ok(text),
        Err(e @ (Error::InvalidArgument(_) | Error::NotFound { .. })) => Ok(format!("error: {e}")),
        Err(e) => Err(e),
    }
}

fn int(args: &Value, key: &str) -> Result<u64> {
    args.get(key).and_then(Value::as_u64).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{key}: expected a non-negative integer, found {}",
            args.get(key).unwrap_or(&Value::Null)
        ))
    })
}

fn text_arg<'a>(args: &'a Value, key: &str) -> Result<&'a str> {
    args.get(key).and_then(Value::as_str).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{key}: expected a string, found {}",
            args.get(key).unwrap_or(&Value::Null)
        ))
    })
}

fn read_messages(src: Source<'_>, owner: &str, args: &Value) -> Result<String> {
    let chat: ChatId = text_arg(args, "chat")?.parse()?;
    let (start, end) = (int(args, "start")?, int(args, "end")?);
    let offset = match args.get("offset") {
        None | Some(Value::Null) => 0,
        Some(_) => usize::try_from(int(args, "offset")?).unwrap_or(usize::MAX),
    };
    let archives_only = args.get("archives_only").and_then(Value::as_bool).unwrap_or(false);
    let state = history::open_chat(src.chats, owner, chat, true)?;
    let snap = history::ChatRef { state: &state, archives: src.archives }.snapshot();
    let len = snap.len();
    if start >= end || start >= len {
        return Err(Error::InvalidArgument(format!(
            "range {start}..{end}: expected start < end and start < {len} (the chat's length)"
        )));
    }
    let end = end.min(len);
    let read_on = |start: u64, offset: usize| {
        let at = if offset == 0 { String::new() } else { format!(", offset={offset}") };
        format!("read_messages(chat=\"{chat}\", start={start}, end={end}{at})")
    };
    // The answer is the range's messages rendered one after the other. Without an offset it
    // ends at a message boundary when the next message would pass MAX_RESULT_CHARS (read on
    // from that message); a message longer than that alone, or an answer read with an
    // offset, is paged by characters: `offset` skips that many characters of the rendering,
    // so every byte of every message is reachable however long it is.
    let (mut out, mut chars) = (String::new(), 0usize);
    let mut seq = start;
    'pages: while seq < end {
        // A page at a time: a long range is read only as far as the answer goes.
        let page_end = (seq + 64).min(end);
        for m in snap.range(seq..page_end)? {
            let mut one = String::new();
            render(src, owner, &m, archives_only, &mut one)?;
            let n = one.chars().count();
            if offset == 0 && chars > 0 && chars + n > MAX_RESULT_CHARS {
                out.push_str(&format!(
                    "[cut at {MAX_RESULT_CHARS} characters: read on with {}]",
                    read_on(m.seq, 0)
                ));
                return Ok(out);
            }
            out.push_str(&one);
            chars += n;
            if chars > offset.saturating_add(MAX_RESULT_CHARS) {
                break 'pages;
            }
        }
        seq = page_end;
    }
    if out.is_empty() {
        return Ok(format!(
            "no {} in messages {start}..{end}",
            if archives_only { "archived results" } else { "visible messages" }
        ));
    }
    if offset == 0 && chars <= MAX_RESULT_CHARS {
        return Ok(out);
    }
    if offset >= chars {
        return Err(Error::InvalidArgument(format!(
            "offset {offset}: expected less than {chars}, the characters of the answer for messages {start}..{end}"
        )));
    }
    let page: String = out.chars().skip(offset).take(MAX_RESULT_CHARS).collect();
    let next = offset + MAX_RESULT_CHARS;
    if next < chars {
        return Ok(format!(
            "{page}\n[characters {offset}..{next} of this answer: read on with {}]",
            read_on(start, next)
        ));
    }
    Ok(format!("{page}\n[characters {offset}..{chars} of this answer: the end]"))
}

/// One message as the model reads it back.
fn render(src: Source<'_>, owner: &str, m: &Message, archives_only: bool, out: &mut String) -> Result<()> {
    if !archives_only {
        out.push_str(&format!("--- message {} ({}) ---\n", m.seq, m.role.as_str()));
    }
    for p in &m.parts {
        match p {
            Part::ToolResult { content: ToolContent::Archived { archive, .. }, call_id, .. } => {
                out.push_str(&format!(
                    "[tool result of {call_id} at seq {}: archive {} ({} chars, {} lines)]\n",
                    m.seq, archive.id, archive.chars, archive.lines
                ));
                if !archives_only {
                    let text = crate::chat::archive::read_context(
                        src.core,
                        src.archives,
                        owner,
                        &archive.id,
                        0..archive.chars.min(MAX_RESULT_CHARS as u64),
                        Unit::Chars,
                    )?;
                    out.push_str(&text);
                    out.push('\n');
                }
            }
            _ if archives_only => {}
            Part::Text(t) | Part::Summary(t) => {
                out.push_str(t);
                out.push('\n');
            }
            Part::ToolCall { id, name, args } => out.push_str(&format!("[tool call {id}: {name}({args})]\n")),
            Part::ToolResult { content: ToolContent::Text(t), call_id, is_error } => {
                out.push_str(&format!(
                    "[tool result of {call_id}{}]\n{t}\n",
                    if *is_error { " (error)" } else { "" }
                ));
            }
            Part::ApprovalRequest { id, prompt, .. } => {
                out.push_str(&format!("[approval requested {id}] {prompt}\n"))
            }
            Part::ApprovalResponse { id, approved, .. } => {
                out.push_str(&format!("[approval {id}: {}]\n", if *approved { "granted" } else { "denied" }))
            }
            Part::Attachment { mime, blob } => out.push_str(&format!("[attachment {mime} {blob}]\n")),
        }
    }
    Ok(())
}

fn read_context(src: Source<'_>, owner: &str, args: &Value) -> Result<String> {
    let id: BlobId = text_arg(args, "archive")?.parse()?;
    let (start, end) = (int(args, "start")?, int(args, "end")?);
    let unit: Unit = match args.get("unit").and_then(Value::as_str) {
        Some(u) => u.parse()?,
        None => Unit::Lines,
    };
    let text = crate::chat::archive::read_context(src.core, src.archives, owner, &id, start..end, unit)?;
    if text.chars().count() <= MAX_RESULT_CHARS {
        return Ok(text);
    }
    let cut: String = text.chars().take(MAX_RESULT_CHARS).collect();
    Ok(format!(
        "{cut}\n[cut at {MAX_RESULT_CHARS} characters of {start}..{end} ({}): read a narrower range]",
        unit.as_str()
    ))
}

fn search_history(src: Source<'_>, args: &Value) -> Result<String> {
    let query = text_arg(args, "query")?;
    let chat = match args.get("chat").and_then(Value::as_str) {
        Some(c) => Some(c.parse::<ChatId>()?),
        None => None,
    };
    let limit = args.get("limit").and_then(Value::as_u64).unwrap_or(10).clamp(1, 50) as usize;
    let hits = (src.search)(query, chat, limit)?;
    if hits.is_empty() {
        return Ok(format!("no hit for {query:?}"));
    }
    let mut out = String::new();
    for h in hits {
        let how = match h.archive {
            Some(a) => format!(
                "read_context(archive=\"{a}\", start={}, end={}, unit=\"{}\")",
                h.start,
                h.end,
                h.unit.as_str()
            ),
            None => format!("read_messages(chat=\"{}\", start={}, end={})", h.chat, h.seq, h.seq + 1),
        };
        let snippet: String = h.snippet.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        out.push_str(&format!("{} seq {}: {snippet}\n  read: {how}\n", h.chat, h.seq));
    }
    Ok(out)
}
