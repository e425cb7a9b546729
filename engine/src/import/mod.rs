//! Importers: agent transcripts from other harnesses, read into chats of a store.
//!
//! Library code, so that the CLI (`undertext import`), the fuzz targets and the bindings call
//! the same parsers. Each format is parsed into [`Session`]s (one per conversation), and
//! [`import_sessions`] writes them: one chat per session, keyed by a stable session key in the
//! chat's metadata, so importing the same transcript again adds nothing.
//!
//! | format | what | sessions | tool results |
//! |---|---|---|---|
//! | [`Format::ClaudeCode`] | Claude Code session JSONL (`subagents/agent-*.jsonl` are side chains) | one per file | `tool_result` blocks of `user` lines, paired by `tool_use_id` |
//! | [`Format::Codex`] | Codex CLI rollout JSONL | one per file | `function_call_output` / `custom_tool_call_output`, paired by `call_id` |
//! | [`Format::OpenAi`] | OpenAI chat messages: a list, or an object with `messages` | one per file | role `tool`, paired by `tool_call_id` |
//! | [`Format::MiniSweAgent`] | mini-swe-agent `.traj.json` (`{info, messages, ...}`) | one per file | role `tool` |
//! | [`Format::TauBench`] | tau-bench list of `{task_id, traj, ...}` | one per list entry | role `tool` |
//! | [`Format::SweAgent`] | SWE-agent `.traj` | one per file | `trajectory[*].observation`, paired with its action by position (the `tool` items of `history` when `trajectory` is empty) |
//!
//! A tool result's text is its string content, or its blocks' texts joined without a
//! separator (other blocks as JSON): the definition of `shared/data/transcripts/MANIFEST.txt`,
//! so [`Session::tool_result_bytes`] can be compared with its `tool_result_bytes` column.
//! Tool results longer than the store's `archive_threshold` are archived by the append
//! itself (the message keeps a preview and the archive reference).
//!
//! A line of a JSONL file that is not a JSON object is reported as a [`Problem`] naming the
//! file and line, and skipped; the rest of the file is imported.
//!
//! ```
//! use undertext::import::{self, Format};
//! let text = r#"{"messages": [{"role": "user", "content": "ls"},
//!   {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "function": {"name": "sh", "arguments": "{\"cmd\": \"ls\"}"}}]},
//!   {"role": "tool", "tool_call_id": "c1", "content": "Cargo.toml\nsrc"}]}"#;
//! let parsed = import::parse_bytes("run.json".as_ref(), text.as_bytes(), Format::Auto)?;
//! assert_eq!(parsed.sessions[0].format, Format::OpenAi);
//! assert_eq!(parsed.sessions[0].tool_results, 1);
//! # Ok::<(), undertext::Error>(())
//! ```

mod claude_code;
mod codex;
mod inventory;
mod json;
mod openai;
pub mod replay;
mod swe_agent;
mod write;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::history::{NewMessage, Part, ToolContent};

pub use inventory::{FormatCounts, Inventory, inventory};
pub use write::{FORMAT, ImportReport, KEY, PARENT, PARENT_CHAT, SOURCE, import_sessions, imported_chats};

/// A transcript format, or [`Format::Auto`] to detect it from the content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Format {
    /// Detect from the content ([`detect`]).
    Auto,
    /// Claude Code session JSONL.
    ClaudeCode,
    /// Codex CLI rollout JSONL.
    Codex,
    /// OpenAI chat messages.
    OpenAi,
    /// SWE-agent `.traj` JSON.
    SweAgent,
    /// mini-swe-agent `.traj.json` (OpenAI chat format in a wrapper).
    MiniSweAgent,
    /// tau-bench list of conversations.
    TauBench,
}

impl Format {
    /// Every format, `auto` first, in the order of [`Format::NAMES`].
    ///
    /// ```
    /// use undertext::import::Format;
    /// assert!(Format::ALL.iter().zip(Format::NAMES).all(|(f, n)| f.name() == n));
    /// ```
    pub const ALL: [Format; 7] = [
        Format::Auto,
        Format::ClaudeCode,
        Format::Codex,
        Format::OpenAi,
        Format::SweAgent,
        Format::MiniSweAgent,
        Format::TauBench,
    ];

    /// Every format name accepted by [`Format::from_str`], `auto` first.
    pub const NAMES: [&'static str; 7] =
        ["auto", "claude-code", "codex", "openai", "swe-agent", "mini-swe-agent", "tau-bench"];

    /// The name (`"claude-code"`, ...), as the CLI's `--format` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Auto => "auto",
            Format::ClaudeCode => "claude-code",
            Format::Codex => "codex",
            Format::OpenAi => "openai",
            Format::SweAgent => "swe-agent",
            Format::MiniSweAgent => "mini-swe-agent",
            Format::TauBench => "tau-bench",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = Error;
    fn from_str(s: &str) -> Result<Format> {
        Ok(match s {
            "auto" => Format::Auto,
            "claude-code" => Format::ClaudeCode,
            "codex" => Format::Codex,
            "openai" => Format::OpenAi,
            "swe-agent" => Format::SweAgent,
            "mini-swe-agent" => Format::MiniSweAgent,
            "tau-bench" => Format::TauBench,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "format: expected one of {}, found {s:?}",
                    Format::NAMES.join(", ")
                )));
            }
        })
    }
}

/// One conversation of a transcript, ready to become a chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Stable key: the same conversation always gets the same key, whatever path it is read
    /// from (a session id where the format has one, else the content hash of the file and
    /// the entry's position in it).
    pub key: String,
    /// The key of the session this one is a side chain of (Claude Code sub-agents).
    pub parent_key: Option<String>,
    /// Its format (never [`Format::Auto`]).
    pub format: Format,
    /// A short title.
    pub title: String,
    /// The model, when the transcript names it.
    pub model: String,
    /// The file it was read from.
    pub source: PathBuf,
    /// Its messages, in order.
    pub messages: Vec<NewMessage>,
    /// Tool results among the messages.
    pub tool_results: u64,
    /// UTF-8 bytes of those results.
    pub tool_result_bytes: u64,
}

impl Session {
    pub(crate) fn new(format: Format, source: &Path, key: String, messages: Vec<NewMessage>) -> Session {
        let (mut n, mut bytes) = (0, 0);
        for p in messages.iter().flat_map(|m| &m.parts) {
            if let Part::ToolResult { content, .. } = p {
                n += 1;
                bytes += match content {
                    ToolContent::Text(t) => t.len() as u64,
                    ToolContent::Archived { archive, .. } => archive.bytes,
                };
            }
        }
        let title = source.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Session {
            key,
            parent_key: None,
            format,
            title,
            model: String::new(),
            source: source.to_path_buf(),
            messages,
            tool_results: n,
            tool_result_bytes: bytes,
        }
    }
}

/// A line (or file) that could not be imported; it was skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub file: PathBuf,
    /// The 1-based line, for JSONL formats; 0 for the whole file.
    pub line: u64,
    /// What was expected and what was found.
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.reason)
        } else {
            write!(f, "{}:{}: {}", self.file.display(), self.line, self.reason)
        }
    }
}

/// The sessions of one file and the lines skipped in it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The sessions, in file order.
    pub sessions: Vec<Session>,
    /// Lines that were skipped.
    pub problems: Vec<Problem>,
}

/// The format of `bytes` (the content of `path`), from the content alone: a JSONL file whose
/// first object has `type` and `payload` is Codex, one with `sessionId`/`uuid` or a Claude
/// Code line type is Claude Code; a JSON object with `trajectory` or `history` is SWE-agent,
/// one with `messages` and `trajectory_format` or `info` mini-swe-agent, one with `messages`
/// OpenAI; a list of objects with `traj` is tau-bench, a list of messages OpenAI.
pub fn detect(path: &Path, bytes: &[u8]) -> Result<Format> {
    let text = as_text(path, bytes)?;
    let trimmed = text.trim_start();
    if trimmed.is_empty() {
        return Err(Error::InvalidArgument(format!("{}: empty file, expected a transcript", path.display())));
    }
    // A whole JSON document first; a JSONL file fails this at its second line.
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
        if let Some(f) = detect_value(&v) {
            return Ok(f);
        }
        if v.is_object() && (v.get("type").is_some() || v.get("sessionId").is_some()) {
            // A one-line JSONL file.
            if let Some(f) = detect_line(&v) {
                return Ok(f);
            }
        }
        return Err(Error::InvalidArgument(format!(
            "{}: JSON of no known transcript format (expected {}), found {}",
            path.display(),
            "Claude Code or Codex JSONL, OpenAI messages, mini-swe-agent, SWE-agent or tau-bench JSON",
            json::shape(&v)
        )));
    }
    // JSONL: the first line that parses decides.
    for line in text.lines().filter(|l| !l.trim().is_empty()).take(20) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line)
            && let Some(f) = detect_line(&v)
        {
            return Ok(f);
        }
    }
    Err(Error::InvalidArgument(format!(
        "{}: not a transcript: expected JSON or JSONL (Claude Code, Codex, OpenAI, SWE-agent, mini-swe-agent, \
         tau-bench), found text starting {:?}",
        path.display(),
        trimmed.chars().take(40).collect::<String>()
    )))
}

fn detect_value(v: &serde_json::Value) -> Option<Format> {
    use serde_json::Value;
    match v {
        Value::Object(o) => {
            if o.contains_key("trajectory") || (o.contains_key("history") && !o.contains_key("messages")) {
                Some(Format::SweAgent)
            } else if o.contains_key("messages")
                && (o.contains_key("trajectory_format") || o.contains_key("info"))
            {
                Some(Format::MiniSweAgent)
            } else if o.get("messages").is_some_and(Value::is_array) {
                Some(Format::OpenAi)
            } else {
                None
            }
        }
        Value::Array(a) if !a.is_empty() && a.iter().all(|c| c.get("traj").is_some()) => {
            Some(Format::TauBench)
        }
        Value::Array(a) if !a.is_empty() && a.iter().all(|m| m.get("role").is_some()) => Some(Format::OpenAi),
        _ => None,
    }
}

fn detect_line(v: &serde_json::Value) -> Option<Format> {
    let ty = v.get("type").and_then(serde_json::Value::as_str);
    if v.get("payload").is_some() && ty.is_some() {
        return Some(Format::Codex);
    }
    let cc =
        ["user", "assistant", "progress", "system", "summary", "file-history-snapshot", "queue-operation"];
    if v.get("sessionId").is_some() || v.get("uuid").is_some() || ty.is_some_and(|t| cc.contains(&t)) {
        return Some(Format::ClaudeCode);
    }
    None
}

fn as_text<'a>(path: &Path, bytes: &'a [u8]) -> Result<&'a str> {
    if bytes.contains(&0) {
        return Err(Error::InvalidArgument(format!(
            "{}: binary file (NUL bytes), expected a JSON or JSONL transcript",
            path.display()
        )));
    }
    std::str::from_utf8(bytes).map_err(|e| {
        Error::InvalidArgument(format!(
            "{}: not UTF-8 text at byte {}, expected a JSON or JSONL transcript",
            path.display(),
            e.valid_up_to()
        ))
    })
}

/// Parses the content of one transcript file. `path` names it in keys, titles and problems.
/// With [`Format::Auto`] the format is [`detect`]ed; with a named format, content of another
/// format is an error saying what was expected.
pub fn parse_bytes(path: &Path, bytes: &[u8], format: Format) -> Result<Parsed> {
    let text = as_text(path, bytes)?;
    let format = match format {
        Format::Auto => detect(path, bytes)?,
        f => f,
    };
    let hash = blake3::hash(bytes).to_hex();
    let file_key = &hash.as_str()[..32];
    match format {
        Format::ClaudeCode => claude_code::parse(path, text, file_key),
        Format::Codex => codex::parse(path, text, file_key),
        Format::Auto => Err(Error::InvalidArgument("format: auto was resolved above".into())),
        other => {
            let v: serde_json::Value = serde_json::from_str(text).map_err(|e| {
                Error::InvalidArgument(format!(
                    "{}:{}: expected one {} JSON document, found invalid JSON ({e})",
                    path.display(),
                    e.line(),
                    other
                ))
            })?;
            let sessions = match other {
                Format::SweAgent => swe_agent::parse(path, &v, file_key)?,
                Format::MiniSweAgent => openai::mini_swe_agent(path, &v, file_key)?,
                Format::TauBench => openai::tau_bench(path, &v, file_key)?,
                _ => openai::plain(path, &v, file_key)?,
            };
            Ok(Parsed { sessions, problems: Vec::new() })
        }
    }
}

/// Reads and parses one file (see [`parse_bytes`]).
pub fn parse_file(path: &Path, format: Format) -> Result<Parsed> {
    let bytes = std::fs::read(path).map_err(|e| Error::io("read", path, e))?;
    parse_bytes(path, &bytes, format)
}

/// The transcript files under `paths`: files as given, folders walked recursively (hidden
/// entries skipped; files ending in `.jsonl`, `.json` or `.traj`), in path order.
pub fn transcript_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
        let rd = std::fs::read_dir(dir).map_err(|e| Error::io("read_dir", dir, e))?;
        let mut entries = Vec::new();
        for e in rd {
            entries.push(e.map_err(|e| Error::io("read_dir", dir, e))?.path());
        }
        entries.sort();
        for p in entries {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if name.starts_with('.') {
                continue;
            }
            if p.is_dir() {
                walk(&p, out)?;
            } else if [".jsonl", ".json", ".traj"].iter().any(|x| name.ends_with(x))
                && name != "MANIFEST.json"
            {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| Error::io("stat", p, e))?;
        if meta.is_dir() {
            walk(p, &mut out)?;
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}
