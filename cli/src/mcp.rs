//! `undertext mcp`: a Model Context Protocol server on stdio (the official Rust SDK, `rmcp`)
//! over a store opened read-only, so that any MCP client (Claude Code, Codex, Cursor, …) can
//! give its model the history a harness wrote or imported, beside the live writer.
//!
//! Tools (each returns text): `list_chats`, `search_history` (query, chat?, limit?),
//! `read_context` (archive, start, end, unit?), `read_messages` (chat, start, end). Before
//! each call the store is refreshed, so the server sees what the writer appended since.

use std::fmt::Write as _;
use std::sync::Arc;

use parking_lot::Mutex;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};
use undertext::{BlobId, Error, Page, Part, SearchScope, Store, ToolContent, Unit};

use super::args::McpArgs;
use super::{Cli, CliError, CliResult};

/// At most this many messages per `read_messages` call.
const MAX_MESSAGES: u64 = 200;

/// The server: the store (opened again when a writer's `gc` replaced its log) and the owner.
#[derive(Clone)]
struct Server {
    dir: std::path::PathBuf,
    owner: String,
    store: Arc<Mutex<Store>>,
}

/// Runs the server until stdin closes.
pub fn run(cli: &Cli, _a: &McpArgs) -> CliResult {
    let store = Store::open_read_only(&cli.store)?;
    for w in store.open_warnings() {
        eprintln!("warning: {w}");
    }
    let server =
        Server { dir: cli.store.clone(), owner: cli.owner.clone(), store: Arc::new(Mutex::new(store)) };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError(format!("starting the runtime: {e}")))?;
    rt.block_on(async move {
        let running =
            server.serve(rmcp::transport::stdio()).await.map_err(|e| CliError(format!("mcp: {e}")))?;
        running.waiting().await.map_err(|e| CliError(format!("mcp: {e}")))?;
        Ok(())
    })
}

fn schema(props: Value, required: &[&str]) -> Arc<Map<String, Value>> {
    let v = json!({"type": "object", "properties": props, "required": required});
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

/// The four tools' descriptions and input schemas.
pub fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "list_chats",
            "The chats of this store's owner, newest activity first: id, messages, title.",
            schema(json!({}), &[]),
        ),
        Tool::new(
            "search_history",
            "Full-text search over the conversation history (messages, tool calls and arguments, tool results and \
             archived outputs). Every word must match. Each hit names the chat and message seq, and the exact range to \
             read back with read_context (archive hits) or read_messages.",
            schema(
                json!({
                    "query": {"type": "string", "description": "words to find"},
                    "chat": {"type": "string", "description": "search only this chat (chat-<16 hex>)"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "at most this many hits (default 10)"},
                }),
                &["query"],
            ),
        ),
        Tool::new(
            "read_context",
            "Exactly the range start..end (end exclusive) of an archived tool output, counted in unit (chars by default).",
            schema(
                json!({
                    "archive": {"type": "string", "description": "archive id (64 hex digits)"},
                    "start": {"type": "integer", "minimum": 0},
                    "end": {"type": "integer", "minimum": 0},
                    "unit": {"type": "string", "enum": ["chars", "utf16", "bytes", "lines"]},
                }),
                &["archive", "start", "end"],
            ),
        ),
        Tool::new(
            "read_messages",
            "Messages start..end (seqs, end exclusive, at most 200) of a chat, with their parts in full.",
            schema(
                json!({
                    "chat": {"type": "string", "description": "chat-<16 hex>"},
                    "start": {"type": "integer", "minimum": 0},
                    "end": {"type": "integer", "minimum": 0},
                }),
                &["chat", "start", "end"],
            ),
        ),
    ]
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("undertext", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "The conversation history of an Undertext store: search_history finds where something was said or \
                 shown; read_context and read_messages read it back exactly.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.unwrap_or_default();
        let this = self.clone();
        let name = request.name.to_string();
        let out = tokio::task::spawn_blocking(move || this.call(&name, &args))
            .await
            .unwrap_or_else(|e| Err(format!("the call failed: {e}")));
        Ok(match out {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(msg) => CallToolResult::error(vec![ContentBlock::text(msg)]),
        }
        .into())
    }
}

impl Server {
    /// The store, brought up to date with the writer (opened again after its `gc`).
    fn store(&self) -> Result<Store, String> {
        let mut g = self.store.lock();
        match g.refresh() {
            Ok(_) => {}
            Err(Error::ReadOnly(_)) => {
                *g = Store::open_read_only(&self.dir).map_err(|e| e.to_string())?;
            }
            Err(e) => return Err(e.to_string()),
        }
        Ok(g.clone())
    }

    fn call(&self, name: &str, args: &Map<String, Value>) -> Result<String, String> {
        let store = self.store()?;
        let owner = self.owner.as_str();
        let str_arg = |k: &str| args.get(k).and_then(Value::as_str);
        let u64_arg = |k: &str| -> Result<u64, String> {
            args.get(k).and_then(Value::as_u64).ok_or_else(|| format!("{k}: expected a whole number"))
        };
        let chat_arg = |k: &str| -> Result<undertext::ChatId, String> {
            str_arg(k)
                .ok_or_else(|| format!("{k}: expected a chat id"))?
                .parse()
                .map_err(|e| format!("{k}: {e}"))
        };
        let e = |e: Error| e.to_string();
        match name {
            "list_chats" => {
                let mut out = String::new();
                let mut page = Page { limit: 1000, after: None };
                loop {
                    let p = store.chats(owner, page.clone()).map_err(e)?;
                    for c in &p.chats {
                        let _ = writeln!(out, "{}  {} messages  {}", c.id, c.len, c.meta.title);
                    }
                    match p.next {
                        Some(n) => page.after = Some(n),
                        None => break,
                    }
                }
                if out.is_empty() {
                    out.push_str("no chats");
                }
                Ok(out)
            }
            "search_history" => {
                let query = str_arg("query").ok_or("query: expected a string")?;
                let scope = match args.get("chat") {
                    Some(Value::String(_)) => SearchScope::chat(chat_arg("chat")?),
                    _ => SearchScope::all(),
                };
                let limit = args.get("limit").and_then(Value::as_u64).unwrap_or(10).clamp(1, 100) as usize;
                let hits = store.search(owner, query, scope, limit).map_err(e)?;
                let mut out = String::new();
                for h in &hits {
                    match &h.archive {
                        Some(a) => {
                            let _ = writeln!(
                                out,
                                "{} seq {}: archive {a} chars {}..{} (read_context archive={a} start={} end={})",
                                h.chat, h.seq, h.start, h.end, h.start, h.end
                            );
                        }
                        None => {
                            let _ = writeln!(
                                out,
                                "{} seq {}: {} chars {}..{} (read_messages chat={} start={} end={})",
                                h.chat,
                                h.seq,
                                h.field.as_str(),
                                h.start,
                                h.end,
                                h.chat,
                                h.seq,
                                h.seq + 1
                            );
                        }
                    }
                    let _ = writeln!(out, "    {}", h.snippet);
                }
                if hits.is_empty() {
                    out.push_str("no hits");
                }
                Ok(out)
            }
            "read_context" => {
                let id: BlobId = str_arg("archive")
                    .ok_or("archive: expected an id")?
                    .parse()
                    .map_err(|e| format!("archive: {e}"))?;
                let unit = match str_arg("unit").unwrap_or("chars") {
                    "chars" | "char" => Unit::Chars,
                    "utf16" => Unit::Utf16,
                    "bytes" | "byte" => Unit::Bytes,
                    "lines" | "line" => Unit::Lines,
                    other => {
                        return Err(format!("unit: expected chars, utf16, bytes or lines, found {other:?}"));
                    }
                };
                store.read_context(owner, &id, u64_arg("start")?..u64_arg("end")?, unit).map_err(e)
            }
            "read_messages" => {
                let chat = store.chat(owner, chat_arg("chat")?).map_err(e)?;
                let (start, end) = (u64_arg("start")?, u64_arg("end")?.min(chat.len()));
                if start > end {
                    return Err(format!(
                        "start {start} is past end {end} (the chat has {} messages)",
                        chat.len()
                    ));
                }
                let end = end.min(start + MAX_MESSAGES);
                let mut out = String::new();
                for seq in start..end {
                    let m = chat.get(seq).map_err(e)?;
                    let _ = writeln!(out, "[{} {}]", m.seq, m.role.as_str());
                    for p in &m.parts {
                        let _ = writeln!(out, "{}", part_text(p));
                    }
                }
                Ok(out)
            }
            other => Err(format!("no tool {other:?}")),
        }
    }
}

fn part_text(p: &Part) -> String {
    match p {
        Part::Text(t) | Part::Summary(t) => t.clone(),
        Part::ToolCall { id, name, args } => format!("tool call {name} ({id}): {args}"),
        Part::ToolResult { call_id, content: ToolContent::Text(t), is_error } => {
            format!("tool result ({call_id}{}): {t}", if *is_error { ", error" } else { "" })
        }
        Part::ToolResult { call_id, content: ToolContent::Archived { archive, preview }, .. } => {
            format!(
                "tool result ({call_id}), archived as {} ({} chars): {preview}",
                archive.id, archive.chars
            )
        }
        Part::ApprovalRequest { id, prompt, .. } => format!("approval request {id}: {prompt}"),
        Part::ApprovalResponse { id, approved, reason } => {
            format!(
                "approval {id}: {}{}",
                if *approved { "granted" } else { "denied" },
                reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default()
            )
        }
        Part::Attachment { mime, blob } => format!("attachment {mime} {blob}"),
    }
}
