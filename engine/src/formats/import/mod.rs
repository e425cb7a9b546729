//! Importers: agent transcripts from other harnesses, read into chats of a store.
//!
//! Input is bounded and hang-free: [`read_bounded`] reads only regular files up to
//! [`MAX_INPUT_BYTES`], checked before reading, and [`walk`] visits every folder once.
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
//! | [`Format::MiniSweAgent`] | mini-swe-agent `.traj.json` (`{info, messages, ...}`) | one per file | role `tool`; text trajectories: the user message after an assistant message with exactly one bash block (see `mini_swe_agent.rs`) |
//! | [`Format::TauBench`] | tau-bench list of `{task_id, traj, ...}` | one per list entry | role `tool` |
//! | [`Format::SweAgent`] | SWE-agent `.traj` | one per file | `trajectory[*].observation`, paired with its action by position (the `tool` items of `history` when `trajectory` is empty) |
//! | [`Format::OpenHands`] | OpenHands evaluation completion log | one per file | role `tool` of `fncall_messages` |
//! | [`Format::OpenHandsSdk`] | OpenHands SDK conversation folder | one per folder | `ObservationEvent`, `AgentErrorEvent`, `UserRejectObservation` by `tool_call_id` |
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
mod input;
mod inventory;
mod json;
mod mini_swe_agent;
mod openai;
mod openhands;
mod stream;
mod swe_agent;
mod write;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::base::error::{Error, Result};
use crate::chat::history::{NewMessage, Part, ToolContent};

pub use input::{MAX_INPUT_BYTES, Walk, read_bounded, walk};
pub use inventory::{FormatCounts, Inventory, inventory};
pub use stream::{STREAM_MIN_BYTES, Streamed, import_streaming, streams};
pub use write::{
    CHUNK, CONDENSATIONS, FORMAT, INCOMPLETE, ImportReport, KEY, PARENT, PARENT_CHAT, SOURCE,
    import_sessions, import_sessions_until, imported_chat, imported_chats,
};

/// A transcript format, or [`Format::Auto`] to detect it from the content.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Format {
    /// Detect from the content ([`detect`]).
    #[default]
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
    /// OpenHands evaluation completion log (`{messages, fncall_messages, fncall_response, ...}`).
    OpenHands,
    /// OpenHands SDK conversation folder (`events/event-NNNNN-<id>.json`, `base_state.json`).
    OpenHandsSdk,
}

impl Format {
    /// Every format, `auto` first, in the order of [`Format::NAMES`].
    ///
    /// ```
    /// use undertext::import::Format;
    /// assert!(Format::ALL.iter().zip(Format::NAMES).all(|(f, n)| f.name() == n));
    /// ```
    pub const ALL: [Format; 9] = [
        Format::Auto,
        Format::ClaudeCode,
        Format::Codex,
        Format::OpenAi,
        Format::SweAgent,
        Format::MiniSweAgent,
        Format::TauBench,
        Format::OpenHands,
        Format::OpenHandsSdk,
    ];

    /// Every format name accepted by [`Format::from_str`], `auto` first.
    pub const NAMES: [&'static str; 9] = [
        "auto",
        "claude-code",
        "codex",
        "openai",
        "swe-agent",
        "mini-swe-agent",
        "tau-bench",
        "openhands",
        "openhands-sdk",
    ];

    /// Whether every session of this format is made of tool calls (an agent harness whose
    /// steps are actions): a session of it with assistant messages but no tool call means the
    /// calls were encoded in a way the importer did not read, and is reported as a
    /// [`Problem`] instead of passing as a plain chat.
    pub fn always_has_tool_calls(self) -> bool {
        matches!(self, Format::SweAgent | Format::MiniSweAgent | Format::OpenHands | Format::OpenHandsSdk)
    }

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
            Format::OpenHands => "openhands",
            Format::OpenHandsSdk => "openhands-sdk",
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
            "openhands" => Format::OpenHands,
            "openhands-sdk" => Format::OpenHandsSdk,
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
    /// When each message was written (Unix ms), one per message, from the transcript's own
    /// times; empty when the format records none (SWE-agent, tau-bench, OpenAI lists and
    /// mini-swe-agent 1 without `timestamp`s): those messages are dated by the import.
    pub at_ms: Vec<u64>,
    /// Tool results among the messages.
    pub tool_results: u64,
    /// UTF-8 bytes of those results.
    pub tool_result_bytes: u64,
    /// Tool calls among the messages.
    pub tool_calls: u64,
    /// Condensations of the conversation by its harness (OpenHands), in order.
    pub condensations: Vec<Condensation>,
}

/// A condensation of the conversation by its harness (an OpenHands `Condensation` event):
/// which messages it forgot and the summary it put in their place. Not a message: the
/// importer keeps it in the chat's [`CONDENSATIONS`] metadata and, where the engine's
/// compaction rules allow, as a compaction record ([`import_sessions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condensation {
    /// The first forgotten message (seq in the session).
    pub from: u64,
    /// One past the last forgotten message.
    pub to: u64,
    /// Whether every message in `from..to` was forgotten (not only some of them).
    pub contiguous: bool,
    /// How many events it named as forgotten (some are not messages).
    pub forgotten_events: u64,
    /// Its summary (empty when it had none).
    pub summary: String,
}

impl Session {
    /// A session of `messages` read from `source` in `format`, keyed by `key` (the chat's
    /// import key), its counts computed from the messages.
    ///
    /// ```
    /// use undertext::import::{Format, Session};
    /// use undertext::NewMessage;
    /// let s = Session::new(Format::OpenAi, "run.json".as_ref(), "run".into(), vec![NewMessage::user("hi")]);
    /// assert_eq!(s.messages.len(), 1);
    /// ```
    pub fn new(format: Format, source: &Path, key: String, messages: Vec<NewMessage>) -> Session {
        let (n, bytes, calls) = counts(&messages);
        let title = source.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Session {
            key,
            parent_key: None,
            format,
            title,
            model: String::new(),
            source: source.to_path_buf(),
            messages,
            at_ms: Vec::new(),
            tool_results: n,
            tool_result_bytes: bytes,
            tool_calls: calls,
            condensations: Vec::new(),
        }
    }

    /// What an import reports when this session's key was also read from `earlier`, another
    /// file of the same import: the later transcript replaces the earlier in the chat.
    ///
    /// ```
    /// use undertext::import::{Format, Session};
    /// let s = Session::new(Format::OpenAi, "b.json".as_ref(), "run".into(), Vec::new());
    /// let p = s.read_twice("a.json".as_ref());
    /// assert_eq!(p.file, std::path::Path::new("b.json"));
    /// assert!(p.reason.contains("also read from a.json"));
    /// ```
    pub fn read_twice(&self, earlier: &Path) -> Problem {
        Problem {
            file: self.source.clone(),
            line: 0,
            reason: format!(
                "session {} was also read from {} in this import: expected one transcript per session, \
                 found two; this one replaces it in the chat (the other stays readable at an older revision)",
                self.key,
                earlier.display()
            ),
        }
    }
}

/// Tool results, their UTF-8 bytes and tool calls among `messages`.
fn counts(messages: &[NewMessage]) -> (u64, u64, u64) {
    let (mut n, mut bytes, mut calls) = (0, 0, 0);
    for p in messages.iter().flat_map(|m| &m.parts) {
        match p {
            Part::ToolResult { content, .. } => {
                n += 1;
                bytes += match content {
                    ToolContent::Text(t) => t.len() as u64,
                    ToolContent::Archived { archive, .. } => archive.bytes,
                };
            }
            Part::ToolCall { .. } => calls += 1,
            _ => {}
        }
    }
    (n, bytes, calls)
}

impl Session {
    /// Sets [`Session::at_ms`] from one time per message, where the transcript gave one: a
    /// message without a time takes the previous message's (the first ones, the first
    /// time found), so times never come from the import once the transcript has any. No time
    /// at all (or a count that is not one per message) leaves `at_ms` empty.
    pub(crate) fn set_times(&mut self, times: &[Option<u64>]) {
        self.at_ms.clear();
        let Some(first) = times.iter().flatten().next().copied() else { return };
        if times.len() != self.messages.len() {
            return;
        }
        let mut last = first;
        self.at_ms = times
            .iter()
            .map(|t| {
                if let Some(t) = t {
                    last = *t;
                }
                last
            })
            .collect();
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
    /// The format the file was read as (detected, or the one asked for).
    pub format: Format,
    /// The sessions, in file order.
    pub sessions: Vec<Session>,
    /// Lines that were skipped, and sessions of a harness format that yielded no tool call
    /// ([`Format::always_has_tool_calls`]).
    pub problems: Vec<Problem>,
}

/// The format of `bytes` (the content of `path`), from the content alone: a JSONL file whose
/// first object has `type` and `payload` is Codex, one with `sessionId`/`uuid` or a Claude
/// Code line type is Claude Code; a JSON object with `trajectory` or `history` is SWE-agent,
/// one with `fncall_messages`, or `messages` with `response` and `cost` or `timestamp`, an
/// OpenHands completion log, one with `messages` and `trajectory_format` or `info`
/// mini-swe-agent, one with `messages` OpenAI; a list of objects with `traj` is tau-bench, a
/// list of messages OpenAI. (An OpenHands SDK conversation is a folder: see [`parse_file`].)
pub fn detect(path: &Path, bytes: &[u8]) -> Result<Format> {
    let text = as_text(path, bytes)?;
    let trimmed = text.trim_start();
    if trimmed.is_empty() {
        return Err(Error::InvalidArgument(format!("{}: empty file, expected a transcript", path.display())));
    }
    // A whole JSON document first; a JSONL file fails this at its second line.
    let whole = json::parse(text).map(|(v, _)| v);
    if let Ok(v) = &whole {
        if let Some(f) = detect_value(v) {
            return Ok(f);
        }
        if v.is_object() && (v.get("type").is_some() || v.get("sessionId").is_some()) {
            // A one-line JSONL file.
            if let Some(f) = detect_line(v) {
                return Ok(f);
            }
        }
        if openhands::is_sdk_event(v) {
            return Err(Error::InvalidArgument(format!(
                "{}: one event of an OpenHands SDK conversation: expected the conversation's folder \
                 (the one holding `events/` and `base_state.json`), found a single event file",
                path.display()
            )));
        }
        return Err(Error::InvalidArgument(format!(
            "{}: JSON of no known transcript format (expected {}), found {}",
            path.display(),
            "Claude Code or Codex JSONL, OpenAI messages, mini-swe-agent, SWE-agent, OpenHands or tau-bench JSON",
            json::shape(v)
        )));
    }
    // JSONL: the first line that parses decides.
    for line in text.lines().filter(|l| !l.trim().is_empty()).take(20) {
        if let Ok((v, _)) = json::parse(line)
            && let Some(f) = detect_line(&v)
        {
            return Ok(f);
        }
    }
    // One JSON document that does not parse (no line of it is a transcript line either):
    // say what was refused and where, not merely "not a transcript".
    if let Err(e) = &whole
        && trimmed.starts_with(['{', '['])
    {
        return Err(Error::InvalidArgument(format!(
            "{}:{}:{}: expected a JSON transcript, found JSON this reader refuses: {e}",
            path.display(),
            e.line(),
            e.column()
        )));
    }
    Err(Error::InvalidArgument(format!(
        "{}: not a transcript: expected JSON or JSONL (Claude Code, Codex, OpenAI, SWE-agent, mini-swe-agent, \
         OpenHands, tau-bench), found text starting {:?}",
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
            } else if o.contains_key("fncall_messages")
                || (o.get("messages").is_some_and(Value::is_array)
                    && o.contains_key("response")
                    && (o.contains_key("cost") || o.contains_key("timestamp")))
            {
                Some(Format::OpenHands)
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
    let text = std::str::from_utf8(bytes).map_err(|e| {
        Error::InvalidArgument(format!(
            "{}: not UTF-8 text at byte {}, expected a JSON or JSONL transcript",
            path.display(),
            e.valid_up_to()
        ))
    })?;
    // A UTF-8 byte order mark (editors on Windows write one) is not content.
    Ok(text.strip_prefix('\u{feff}').unwrap_or(text))
}

/// Parses the content of one transcript file. `path` names it in keys, titles and problems.
/// With [`Format::Auto`] the format is [`detect`]ed; with a named format, content of another
/// format is an error saying what was expected. A session of a format whose steps are tool
/// calls ([`Format::always_has_tool_calls`]) that has assistant messages but yields no tool
/// call is reported as a [`Problem`] (line 0), never passed off silently as a plain chat.
pub fn parse_bytes(path: &Path, bytes: &[u8], format: Format) -> Result<Parsed> {
    let text = as_text(path, bytes)?;
    let format = match format {
        Format::Auto => detect(path, bytes)?,
        f => f,
    };
    let hash = blake3::hash(bytes).to_hex();
    let file_key = &hash.as_str()[..32];
    let mut parsed = match format {
        Format::ClaudeCode => claude_code::parse(path, text, file_key)?,
        Format::Codex => codex::parse(path, text, file_key)?,
        Format::Auto => return Err(Error::InvalidArgument("format: auto was resolved above".into())),
        Format::OpenHandsSdk => {
            return Err(Error::InvalidArgument(format!(
                "{}: openhands-sdk: expected a conversation folder (holding `events/` and \
                 `base_state.json`), found a file",
                path.display()
            )));
        }
        other => {
            let (v, replaced) = json::parse(text).map_err(|e| {
                Error::InvalidArgument(format!(
                    "{}:{}:{}: expected one {} JSON document, found invalid JSON ({e})",
                    path.display(),
                    e.line(),
                    e.column(),
                    other
                ))
            })?;
            let sessions = match other {
                Format::SweAgent => swe_agent::parse(path, &v, file_key)?,
                Format::MiniSweAgent => mini_swe_agent::parse(path, &v, file_key)?,
                Format::TauBench => openai::tau_bench(path, &v, file_key)?,
                Format::OpenHands => openhands::completion_log(path, &v, file_key)?,
                _ => openai::plain(path, &v, file_key)?,
            };
            let problems =
                if replaced > 0 { vec![json::surrogates_problem(path, 0, replaced)] } else { Vec::new() };
            Parsed { format, sessions, problems }
        }
    };
    report_missing_calls(&mut parsed);
    Ok(parsed)
}

/// Adds a problem for each session of a tool-call harness that yielded no tool call.
fn report_missing_calls(parsed: &mut Parsed) {
    for s in &parsed.sessions {
        let assistant = s.messages.iter().filter(|m| m.role == crate::chat::history::Role::Assistant).count();
        if s.format.always_has_tool_calls() && s.tool_calls == 0 && assistant > 0 {
            parsed.problems.push(Problem {
                file: s.source.clone(),
                line: 0,
                reason: format!(
                    "read as {}, a harness whose steps are tool calls, but none of its {assistant} assistant \
                     messages holds one (expected tool calls; found none, so they are encoded in a form \
                     this importer does not read): imported as plain messages",
                    s.format
                ),
            });
        }
    }
}

/// Reads and parses one transcript: a file (read with [`read_bounded`], then
/// [`parse_bytes`]), or an OpenHands SDK conversation folder (`events/event-*.json`, one
/// event per file, and `base_state.json`), which is one session.
pub fn parse_file(path: &Path, format: Format) -> Result<Parsed> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io("stat", path, e))?;
    if meta.is_dir() {
        if !matches!(format, Format::Auto | Format::OpenHandsSdk) {
            return Err(Error::InvalidArgument(format!(
                "{}: {format}: expected a file, found a folder (only an OpenHands SDK conversation is a folder)",
                path.display()
            )));
        }
        let mut parsed = openhands::conversation_folder(path)?;
        report_missing_calls(&mut parsed);
        return Ok(parsed);
    }
    let bytes = read_bounded(path, MAX_INPUT_BYTES)?;
    parse_bytes(path, &bytes, format)
}

/// The transcript files under `paths` ([`walk`] without its problems: files or folders that
/// were skipped are left out).
pub fn transcript_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    Ok(walk(paths)?.files)
}
