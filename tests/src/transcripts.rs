//! Tool results of the real agent transcripts in `shared/data/transcripts/` (see its
//! `README.md` for the formats and `MANIFEST.txt` for the origin and counts of every file).
//!
//! [`tool_results`] returns the text of every tool result, in file order; [`extract`] returns
//! the same with the format and how the text was assembled, and [`manifest`] reads
//! `MANIFEST.txt`, so that a test can cross-check the extraction file by file.
//!
//! # What counts as a tool result
//!
//! * **Claude Code JSONL** (`*.jsonl`, including `subagents/*.jsonl`): every `tool_result`
//!   block in the `message.content` list of a `user` line. Its `content` is a string, or a
//!   list of blocks whose `text` blocks are joined with `"\n"` (a non-text block, of which
//!   none ships, is kept as its JSON), or absent (the empty text). The line's top-level
//!   `toolUseResult` repeats the same result in structured form and is not counted again.
//!   A parent session also repeats its subagents' messages in `progress` lines
//!   (`data.message.message.content`); such a `tool_result` is taken only when its
//!   `tool_use_id` appears as a `user`-line result in no file (its subagent's side chain was
//!   not shipped), so nothing is returned twice.
//! * **mini-swe-agent** (`*.json` holding an object with `messages`, OpenAI chat format):
//!   messages with role `tool`. All shipped files are `mini-swe-agent-1.1`, where command
//!   output comes back as role `tool`; their only `user` message is the task and their
//!   `exit` message is the agent's exit status, neither a tool output. For a file without
//!   any `tool` message, the older 1.x layout is assumed: every `user` message after the
//!   first `assistant` message is a command's output (no shipped file has one).
//! * **tau-bench** (`*.json` holding a list of conversations with `traj`): messages with
//!   role `tool` (the `user` role is the simulated customer).
//! * **SWE-agent** (`*.traj`): `trajectory[].observation` (a missing observation is the
//!   empty text); for a file whose `trajectory` is missing or empty, the `tool` items of
//!   `history`. The `user` items of `history` with `message_type: observation` repeat the
//!   observations inside prompt templates and are not counted again.
//!
//! # Cross-check with `MANIFEST.txt`
//!
//! Per file, the results that `MANIFEST.txt` counts ([`ToolResult::in_manifest`]) match its
//! `tool_results` column exactly: Claude Code 1136, mini-swe-agent 650, tau-bench 1164,
//! SWE-agent 232, 3182 in all. [`tool_results`] returns 9 more, 3191: the `progress`-only
//! results of `claude_code/spotter/subagent.jsonl` (subagent `afb92ff`, whose side chain is
//! not in the data set; 112 other `progress` results repeat side-chain files and are
//! skipped), which the manifest does not count. The `tool_result_bytes` column joins a
//! result's text blocks without a separator; joined with `"\n"` here, 7 Claude Code results
//! of two text blocks are one byte longer each ([`ToolResult::text_blocks`] says how many
//! separators to subtract to compare).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The transcripts directory: `shared/data/transcripts` beside the repository (the repository
/// is `<root>/main` and the shared data `<root>/shared`; CI keeps a copy of `shared/` beside
/// its clone in the same way).
pub fn transcripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/transcripts")
}

/// The format of a transcript file, named as in `MANIFEST.txt`'s `format` column by
/// [`Format::manifest_name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Format {
    /// Claude Code session JSONL.
    ClaudeCode,
    /// mini-swe-agent `.traj.json` (OpenAI chat format).
    MiniSweAgent,
    /// tau-bench list of conversations (OpenAI chat format).
    TauBench,
    /// SWE-agent `.traj` JSON.
    SweAgent,
}

impl Format {
    /// Every format.
    pub const ALL: [Format; 4] =
        [Format::ClaudeCode, Format::MiniSweAgent, Format::TauBench, Format::SweAgent];

    /// The name in `MANIFEST.txt`'s `format` column.
    pub fn manifest_name(self) -> &'static str {
        match self {
            Format::ClaudeCode => "claude_code_jsonl",
            Format::MiniSweAgent => "mini_swe_agent_traj_json",
            Format::TauBench => "tau_bench_json",
            Format::SweAgent => "swe_agent_traj",
        }
    }
}

/// One tool result of one transcript file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// The transcript file (under the directory given to [`extract`]).
    pub path: PathBuf,
    /// Its format.
    pub format: Format,
    /// The result text.
    pub text: String,
    /// How many blocks were joined with `"\n"` into `text` (1 for a plain string, 0 for an
    /// absent content).
    pub text_blocks: usize,
    /// Whether `MANIFEST.txt` counts this result (false for Claude Code results found only in
    /// `progress` lines, and for observations in `user` messages of old mini-swe-agent files).
    pub in_manifest: bool,
}

/// Every tool result text under `dir` (a copy of `shared/data/transcripts`, usually
/// [`transcripts_dir`]), as (transcript file, text), files in path order and results in
/// file order. See the [module documentation](self) for what counts and how the counts
/// compare with `MANIFEST.txt`.
///
/// Panics when a transcript cannot be read or parsed: the data set is fixed, so that is a
/// broken checkout, not a case to skip.
pub fn tool_results(dir: &Path) -> Vec<(PathBuf, String)> {
    extract(dir).into_iter().map(|r| (r.path, r.text)).collect()
}

/// [`tool_results`] with the format and provenance of each result.
pub fn extract(dir: &Path) -> Vec<ToolResult> {
    let mut files = Vec::new();
    walk(dir, &mut files);
    files.sort();
    assert!(!files.is_empty(), "no transcripts under {}", dir.display());
    let mut out = Vec::new();
    // Claude Code `progress` results, kept until every file's own results are known.
    let mut progress: Vec<(usize, String, ToolResult)> = Vec::new();
    let mut own_ids: HashSet<String> = HashSet::new();
    for path in files {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.ends_with(".jsonl") {
            claude_code(&path, &mut out, &mut own_ids, &mut progress);
        } else if name.ends_with(".traj") {
            let v = read_json(&path);
            swe_agent(&path, &v, &mut out);
        } else if name.ends_with(".json") {
            let v = read_json(&path);
            if v.get("messages").is_some() {
                mini_swe_agent(&path, &v, &mut out);
            } else if v.as_array().is_some_and(|a| a.iter().all(|c| c.get("traj").is_some())) {
                tau_bench(&path, &v, &mut out);
            } else {
                panic!("{}: not a known transcript format", path.display());
            }
        }
    }
    // Insert the progress-only results after the results their file had before them.
    let mut seen = HashSet::new();
    let mut extra: Vec<(usize, ToolResult)> = progress
        .into_iter()
        .filter(|(_, id, _)| !own_ids.contains(id) && seen.insert(id.clone()))
        .map(|(at, _, r)| (at, r))
        .collect();
    extra.sort_by_key(|(at, _)| *at);
    let mut merged = Vec::with_capacity(out.len() + extra.len());
    let mut extra = extra.into_iter().peekable();
    for (i, r) in out.into_iter().enumerate() {
        while let Some((_, e)) = extra.next_if(|(at, _)| *at == i) {
            merged.push(e);
        }
        merged.push(r);
    }
    merged.extend(extra.map(|(_, e)| e));
    merged
}

/// One row of `MANIFEST.txt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestRow {
    /// The file, relative to the transcripts directory.
    pub file: PathBuf,
    /// The `format` column.
    pub format: String,
    /// Sessions in the file.
    pub sessions: u64,
    /// Tool results in the file.
    pub tool_results: u64,
    /// UTF-8 bytes of those results (text blocks joined without a separator).
    pub tool_result_bytes: u64,
}

/// The rows of `dir/MANIFEST.txt`.
pub fn manifest(dir: &Path) -> Vec<ManifestRow> {
    let path = dir.join("MANIFEST.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let num = |s: &str, line: &str| -> u64 {
        s.parse().unwrap_or_else(|e| panic!("MANIFEST.txt: {s:?} is not a number ({e}) in {line:?}"))
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let cols: Vec<&str> = line.split(" | ").collect();
            assert!(cols.len() >= 7, "MANIFEST.txt: short line {line:?}");
            ManifestRow {
                file: PathBuf::from(cols[0]),
                format: cols[1].to_string(),
                sessions: num(cols[3], line),
                tool_results: num(cols[5], line),
                tool_result_bytes: num(cols[6], line),
            }
        })
        .collect()
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    let rd = std::fs::read_dir(dir).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the transcripts are in shared/data/transcripts beside the repository)",
            dir.display()
        )
    });
    for e in rd {
        let p = e.unwrap_or_else(|e| panic!("{}: {e}", dir.display())).path();
        if p.is_dir() {
            walk(&p, files);
        } else {
            files.push(p);
        }
    }
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A result's content: a string; a list of blocks (text blocks' `text`, other blocks as
/// JSON, joined with `"\n"`); or absent. Returns the text and the number of parts.
fn content_text(content: Option<&Value>) -> (String, usize) {
    match content {
        None | Some(Value::Null) => (String::new(), 0),
        Some(Value::String(s)) => (s.clone(), 1),
        Some(Value::Array(blocks)) => {
            let parts: Vec<String> = blocks
                .iter()
                .map(|b| {
                    match (b.get("type").and_then(Value::as_str), b.get("text").and_then(Value::as_str)) {
                        (Some("text"), Some(t)) => t.to_string(),
                        _ => b.to_string(),
                    }
                })
                .collect();
            (parts.join("\n"), parts.len())
        }
        Some(other) => (other.to_string(), 1),
    }
}

fn result(path: &Path, format: Format, content: Option<&Value>, in_manifest: bool) -> ToolResult {
    let (text, text_blocks) = content_text(content);
    ToolResult { path: path.to_path_buf(), format, text, text_blocks, in_manifest }
}

/// The `tool_result` blocks of a content list.
fn tool_result_blocks(content: Option<&Value>) -> impl Iterator<Item = &Value> {
    content
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
}

fn claude_code(
    path: &Path,
    out: &mut Vec<ToolResult>,
    own_ids: &mut HashSet<String>,
    progress: &mut Vec<(usize, String, ToolResult)>,
) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{} line {}: {e}", path.display(), n + 1));
        let id = |b: &Value| b.get("tool_use_id").and_then(Value::as_str).unwrap_or_default().to_string();
        match v.get("type").and_then(Value::as_str) {
            Some("user") => {
                for b in tool_result_blocks(v.pointer("/message/content")) {
                    own_ids.insert(id(b));
                    out.push(result(path, Format::ClaudeCode, b.get("content"), true));
                }
            }
            Some("progress") => {
                for b in tool_result_blocks(v.pointer("/data/message/message/content")) {
                    progress.push((
                        out.len(),
                        id(b),
                        result(path, Format::ClaudeCode, b.get("content"), false),
                    ));
                }
            }
            _ => {}
        }
    }
}

fn role(m: &Value) -> Option<&str> {
    m.get("role").and_then(Value::as_str)
}

fn mini_swe_agent(path: &Path, v: &Value, out: &mut Vec<ToolResult>) {
    let messages = v.get("messages").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    if messages.iter().any(|m| role(m) == Some("tool")) {
        for m in messages.iter().filter(|m| role(m) == Some("tool")) {
            out.push(result(path, Format::MiniSweAgent, m.get("content"), true));
        }
    } else if let Some(first) = messages.iter().position(|m| role(m) == Some("assistant")) {
        for m in messages[first..].iter().filter(|m| role(m) == Some("user")) {
            out.push(result(path, Format::MiniSweAgent, m.get("content"), false));
        }
    }
}

fn tau_bench(path: &Path, v: &Value, out: &mut Vec<ToolResult>) {
    for conversation in v.as_array().map(Vec::as_slice).unwrap_or_default() {
        let traj = conversation.get("traj").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for m in traj.iter().filter(|m| role(m) == Some("tool")) {
            out.push(result(path, Format::TauBench, m.get("content"), true));
        }
    }
}

fn swe_agent(path: &Path, v: &Value, out: &mut Vec<ToolResult>) {
    let steps = v.get("trajectory").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    if !steps.is_empty() {
        for s in steps {
            out.push(result(path, Format::SweAgent, s.get("observation"), true));
        }
        return;
    }
    let history = v.get("history").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for m in history.iter().filter(|m| role(m) == Some("tool")) {
        out.push(result(path, Format::SweAgent, m.get("content"), true));
    }
}
