//! Replay of the real agent transcripts through the budget guard.
//!
//! ```text
//! cargo run --release -p undertext-benches --bin replay -- /work/shared/data/transcripts
//! ```
//!
//! For every session of the transcripts (Claude Code main sessions, mini-swe-agent, tau-bench,
//! SWE-agent; see the transcripts' `README.md`), imports its messages in order into an
//! Undertext chat. Just before each assistant message is appended — that is, for the model
//! call that produced it, as a harness would make it — builds the model view with
//! [`Chat::view`] under three budgets and records the view's token estimate (default
//! heuristic estimator, no calibration, no tool schemas):
//!
//! * the guard at a 200,000-token window, `reserve_output` 4,096;
//! * the guard at a 32,000-token window, `reserve_output` 4,096;
//! * "resend everything": the same view under an effectively infinite window (2^50), where
//!   the guard never acts. Tool results over 8 KiB are still the 2,000-character previews
//!   that `append` put in their place;
//! * "raw", for reference: the same messages in a second store whose archive threshold is
//!   unlimited, so every byte of every tool result counts (per-message estimates from
//!   [`Chat::index`], summed over the messages before each step).
//!
//! Prints one markdown table per window: per session the messages appended, the steps
//! (assistant messages = model calls = views), the total input tokens sent with the guard,
//! the total when resending everything, their ratio, the raw total, the largest single view
//! (guarded / resend everything / raw), how many views were `Compacted` (and how many of those
//! previewed nothing: over the soft line with every candidate inside the protected last two
//! user turns), how many distinct message seqs the guard turned into previews over the
//! session, and how many views were `Refused` (their estimate still counts in the guarded
//! total: the replay sends what the view holds, a harness would have to stop), and the ratio
//! over the views that were not refused only (the calls a harness would make). Totals per
//! format follow the sessions. tau-bench's 200 conversations are all replayed; their rows are
//! printed only when the guard previewed or refused something (`--all-rows` prints all).
//!
//! Import choices (see `benches/REPLAY.md`):
//! * Claude Code: the top-level `*.jsonl` of a folder, never `subagents/`. `user` and
//!   `assistant` lines only; thinking blocks dropped. The lines of one model response (same
//!   `message.id`) become one assistant message; `tool_result`s that arrive while that
//!   response is still open (parallel calls: call, result, call, result) are held and
//!   appended together right after it, as one `User` message of `ToolResult` parts, as the
//!   Anthropic API sees them. A user line with text starts a turn; the compact summary after
//!   a `compact_boundary` is kept as the user message it is in the file (no reset).
//! * OpenAI format (mini-swe-agent, tau-bench `traj`): `system`/`user`/`assistant`/`tool`;
//!   other roles (mini-swe-agent's `exit`) and `reasoning_content` are skipped.
//! * SWE-agent: every `history` item, demonstrations included (they are part of the prompt);
//!   `tool` items (function-calling configurations) become `Tool` results, `user` items stay
//!   user text (in the other configurations every observation is a `user` message).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::Value;
use undertext::budget::{Budget, Decision};
use undertext::{ChatMeta, Durability, NewMessage, Options, Part, Role, Store, ToolContent};
use undertext_benches::{Result, bench_tempdir, transcript_files};

const OWNER: &str = "replay";
/// The two guarded windows and the reserve kept for the answer.
const WINDOWS: [u64; 2] = [200_000, 32_000];
const RESERVE: u64 = 4_096;
/// "Effectively infinite": the guard never reaches its soft line.
const INFINITE: u64 = 1 << 50;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Format {
    ClaudeCode,
    MiniSweAgent,
    TauBench,
    SweAgent,
}

impl Format {
    const ALL: [Format; 4] = [Format::ClaudeCode, Format::MiniSweAgent, Format::TauBench, Format::SweAgent];

    fn name(self) -> &'static str {
        match self {
            Format::ClaudeCode => "Claude Code",
            Format::MiniSweAgent => "mini-swe-agent",
            Format::TauBench => "tau-bench",
            Format::SweAgent => "SWE-agent",
        }
    }
}

#[derive(Debug)]
struct Session {
    format: Format,
    name: String,
    messages: Vec<NewMessage>,
}

// ---------------------------------------------------------------------------------------------
// Import
// ---------------------------------------------------------------------------------------------

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Text content: a string; a list of blocks (`text` blocks' text, others as JSON, joined with
/// `"\n"`); absent or null is the empty text.
fn text_of(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(|b| match (str_of(b, "type"), str_of(b, "text")) {
                (Some("text"), Some(t)) => t.to_string(),
                _ => b.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
    }
}

/// Tool-call arguments as JSON text: a JSON string is kept when it parses, else wrapped as a
/// JSON string; any other value is serialized.
fn args_json(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) if serde_json::from_str::<Value>(s).is_ok() => s.clone(),
        Some(Value::String(s)) => Value::String(s.clone()).to_string(),
        None | Some(Value::Null) => "{}".to_string(),
        Some(other) => other.to_string(),
    }
}

fn message(role: Role, mut parts: Vec<Part>) -> NewMessage {
    if parts.is_empty() {
        parts.push(Part::Text(String::new()));
    }
    NewMessage { role, parts }
}

fn claude_code(path: &Path) -> Result<Vec<NewMessage>> {
    struct Open {
        id: String,
        parts: Vec<Part>,
        held: Vec<Part>,
    }
    fn flush(open: &mut Option<Open>, out: &mut Vec<NewMessage>) {
        if let Some(o) = open.take() {
            out.push(message(Role::Assistant, o.parts));
            if !o.held.is_empty() {
                out.push(NewMessage { role: Role::User, parts: o.held });
            }
        }
    }
    let text = std::fs::read_to_string(path)?;
    let mut out = Vec::new();
    let mut open: Option<Open> = None;
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value =
            serde_json::from_str(line).map_err(|e| format!("{} line {}: {e}", path.display(), n + 1))?;
        if v.get("isSidechain").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        let content = v.pointer("/message/content");
        match str_of(&v, "type") {
            Some("assistant") => {
                let id = v.pointer("/message/id").and_then(Value::as_str).unwrap_or_default().to_string();
                let mut parts = Vec::new();
                for b in content.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
                    match str_of(b, "type") {
                        Some("text") => {
                            parts.push(Part::Text(str_of(b, "text").unwrap_or_default().to_string()))
                        }
                        Some("tool_use") => parts.push(Part::ToolCall {
                            id: str_of(b, "id").unwrap_or_default().to_string(),
                            name: str_of(b, "name").unwrap_or_default().to_string(),
                            args: args_json(b.get("input")),
                        }),
                        _ => {} // thinking, redacted_thinking
                    }
                }
                match &mut open {
                    Some(o) if o.id == id && !id.is_empty() => o.parts.extend(parts),
                    _ => {
                        flush(&mut open, &mut out);
                        open = Some(Open { id, parts, held: Vec::new() });
                    }
                }
            }
            Some("user") => {
                let mut parts = Vec::new();
                match content {
                    Some(Value::Array(blocks)) => {
                        for b in blocks {
                            match str_of(b, "type") {
                                Some("tool_result") => parts.push(Part::ToolResult {
                                    call_id: str_of(b, "tool_use_id").unwrap_or_default().to_string(),
                                    content: ToolContent::Text(text_of(b.get("content"))),
                                    is_error: b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                                }),
                                Some("text") => {
                                    parts.push(Part::Text(str_of(b, "text").unwrap_or_default().to_string()))
                                }
                                _ => parts.push(Part::Text(b.to_string())),
                            }
                        }
                    }
                    other => parts.push(Part::Text(text_of(other))),
                }
                let only_results = parts.iter().all(|p| matches!(p, Part::ToolResult { .. }));
                match &mut open {
                    Some(o) if only_results => o.held.extend(parts),
                    _ => {
                        flush(&mut open, &mut out);
                        out.push(message(Role::User, parts));
                    }
                }
            }
            _ => {} // progress, system, summary, file-history-snapshot, queue-operation
        }
    }
    flush(&mut open, &mut out);
    Ok(out)
}

/// OpenAI chat messages (mini-swe-agent `messages`, tau-bench `traj`, SWE-agent `history`).
fn openai(messages: &[Value]) -> Vec<NewMessage> {
    let mut out = Vec::new();
    for m in messages {
        let content = text_of(m.get("content"));
        match str_of(m, "role") {
            Some("system") => out.push(NewMessage::system(content)),
            Some("user") => out.push(NewMessage::user(content)),
            Some("assistant") => {
                let mut parts = Vec::new();
                if !content.is_empty() {
                    parts.push(Part::Text(content));
                }
                for (i, c) in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten().enumerate()
                {
                    parts.push(Part::ToolCall {
                        id: str_of(c, "id").map_or_else(|| format!("call-{}-{i}", out.len()), str::to_string),
                        name: c
                            .pointer("/function/name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                        args: args_json(c.pointer("/function/arguments")),
                    });
                }
                out.push(message(Role::Assistant, parts));
            }
            Some("tool") => {
                let call_id = str_of(m, "tool_call_id")
                    .or_else(|| m.pointer("/tool_call_ids/0").and_then(Value::as_str))
                    .unwrap_or_default();
                out.push(NewMessage::tool_result(call_id, content));
            }
            _ => {} // mini-swe-agent's `exit`
        }
    }
    out
}

fn short_name(path: &Path) -> String {
    let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = file.trim_end_matches(".jsonl").trim_end_matches(".traj.json").trim_end_matches(".traj");
    stem.to_string()
}

fn load(dir: &Path) -> Result<Vec<Session>> {
    let mut sessions = Vec::new();
    for path in transcript_files(dir)? {
        let rel = path.strip_prefix(dir).unwrap_or(&path).to_path_buf();
        let file = rel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if file.ends_with(".jsonl") {
            if rel.components().any(|c| c.as_os_str() == "subagents") {
                continue;
            }
            let stem = short_name(&path);
            // A UUID is shortened to its first 8 hex digits.
            let name = if stem.len() == 36 { stem[..8].to_string() } else { stem };
            sessions.push(Session { format: Format::ClaudeCode, name, messages: claude_code(&path)? });
        } else if file.ends_with(".traj") {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
            let history = v.get("history").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            // The file names the task, the folder the configuration: keep the folder's
            // segments that are neither the task nor a sampling setting.
            let stem = short_name(&path);
            let parent = rel.parent().and_then(Path::file_name).map(|n| n.to_string_lossy().into_owned());
            let cfg: Vec<&str> = parent
                .as_deref()
                .unwrap_or_default()
                .split("__")
                .filter(|seg| {
                    !stem.contains(seg) && !["t-", "p-", "c-", "install-"].iter().any(|x| seg.starts_with(x))
                })
                .collect();
            let name = format!("{stem} [{}]", cfg.join("/"));
            sessions.push(Session { format: Format::SweAgent, name, messages: openai(history) });
        } else if file.ends_with(".json") {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
            if let Some(ms) = v.get("messages").and_then(Value::as_array) {
                sessions.push(Session {
                    format: Format::MiniSweAgent,
                    name: short_name(&path),
                    messages: openai(ms),
                });
            } else if let Some(list) = v.as_array() {
                for (i, conv) in list.iter().enumerate() {
                    let traj =
                        conv.get("traj").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
                    let task = conv.get("task_id").map(Value::to_string).unwrap_or_default();
                    sessions.push(Session {
                        format: Format::TauBench,
                        name: format!("#{i:03} task {task}"),
                        messages: openai(traj),
                    });
                }
            } else {
                return Err(format!("{}: not a known transcript format", path.display()).into());
            }
        }
    }
    sessions.sort_by_key(|s| s.format);
    Ok(sessions)
}

// ---------------------------------------------------------------------------------------------
// Replay
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default, Clone)]
struct Guarded {
    sent: u64,
    peak: u64,
    previewed: BTreeSet<u64>,
    compacted_views: u64,
    /// `Compacted` views whose `previewed` list was empty (over the soft line, nothing
    /// outside the protected last two user turns left to preview).
    compacted_empty: u64,
    refused: u64,
    /// `Refused` views in which the guard had previewed something before refusing.
    refused_previewing: u64,
    /// The guarded views that were not refused, and the same steps resent whole.
    sent_ok: u64,
    resend_ok: u64,
}

#[derive(Debug, Default, Clone)]
struct Row {
    messages: u64,
    steps: u64,
    resend: u64,
    resend_peak: u64,
    raw: u64,
    raw_peak: u64,
    guarded: [Guarded; 2],
}

fn replay(store: &Store, raw_store: &Store, s: &Session) -> Result<Row> {
    let meta = ChatMeta { title: s.name.clone(), ..ChatMeta::default() };
    let chat = store.chat(OWNER, store.create_chat(OWNER, meta.clone())?)?;
    let raw_chat = raw_store.chat(OWNER, raw_store.create_chat(OWNER, meta)?)?;
    let budgets = WINDOWS.map(|w| Budget::new(w, RESERVE));
    let infinite = Budget::new(INFINITE, 0);
    let mut row = Row::default();
    let mut step_at = Vec::new();
    for m in &s.messages {
        if m.role == Role::Assistant {
            row.steps += 1;
            step_at.push(row.messages as usize);
            let all = chat.view(&infinite)?;
            if *all.decision() != Decision::Fits {
                return Err(
                    format!("{}: the infinite window did not fit: {:?}", s.name, all.decision()).into()
                );
            }
            row.resend += all.estimate();
            row.resend_peak = row.resend_peak.max(all.estimate());
            for (g, b) in row.guarded.iter_mut().zip(&budgets) {
                let v = chat.view(b)?;
                g.sent += v.estimate();
                g.peak = g.peak.max(v.estimate());
                // What the guard changed, read off the messages themselves: `Refused` does
                // not say what it previewed before refusing.
                if v.messages().len() != all.messages().len() {
                    return Err(format!("{}: guarded and unguarded views differ in length", s.name).into());
                }
                let changed: BTreeSet<u64> = v
                    .messages()
                    .iter()
                    .zip(all.messages())
                    .filter(|(a, b)| a.parts != b.parts)
                    .map(|(a, _)| a.seqs.start)
                    .collect();
                match v.decision() {
                    Decision::Fits => {}
                    Decision::Compacted { previewed, .. } => {
                        g.compacted_views += 1;
                        g.compacted_empty += u64::from(previewed.is_empty());
                        if previewed.iter().copied().collect::<BTreeSet<u64>>() != changed {
                            return Err(format!(
                                "{}: Compacted lists {previewed:?}, the view changed {changed:?}",
                                s.name
                            )
                            .into());
                        }
                    }
                    Decision::Refused { .. } => {
                        g.refused += 1;
                        g.refused_previewing += u64::from(!changed.is_empty());
                    }
                }
                if !matches!(v.decision(), Decision::Refused { .. }) {
                    g.sent_ok += v.estimate();
                    g.resend_ok += all.estimate();
                }
                g.previewed.extend(changed);
            }
        }
        chat.append(m.clone())?;
        raw_chat.append(m.clone())?;
        row.messages += 1;
    }
    let mut prefix = vec![0u64];
    for line in raw_chat.index()? {
        prefix.push(prefix.last().copied().unwrap_or(0) + line.tokens);
    }
    row.raw = step_at.iter().map(|&i| prefix[i]).sum();
    row.raw_peak = step_at.iter().map(|&i| prefix[i]).max().unwrap_or(0);
    Ok(row)
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

/// 1234567 -> "1,234,567".
fn num(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 { "—".to_string() } else { format!("{:.3}", a as f64 / b as f64) }
}

fn line(name: &str, r: &Row, w: usize, previewed: u64) -> String {
    let g = &r.guarded[w];
    format!(
        "| {name} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {} ({} empty) | {} | {} ({} with previews) | {} |",
        num(r.messages),
        num(r.steps),
        num(g.sent),
        num(r.resend),
        ratio(g.sent, r.resend),
        num(r.raw),
        num(g.peak),
        num(r.resend_peak),
        num(r.raw_peak),
        num(g.compacted_views),
        num(g.compacted_empty),
        num(previewed),
        num(g.refused),
        num(g.refused_previewing),
        ratio(g.sent_ok, g.resend_ok),
    )
}

fn main() -> Result<()> {
    let mut dir = PathBuf::from("/work/shared/data/transcripts");
    let mut all_rows = false;
    for a in std::env::args().skip(1) {
        if a == "--all-rows" {
            all_rows = true;
        } else {
            dir = PathBuf::from(a);
        }
    }
    let t0 = Instant::now();
    let sessions = load(&dir)?;
    let load_s = t0.elapsed().as_secs_f64();

    let tmp = bench_tempdir()?;
    let opts = || Options { durability: Durability::None, preallocate: false, ..Options::default() };
    let store = Store::open(tmp.path().join("store"), opts())?;
    let raw_store = Store::open(tmp.path().join("raw"), Options { archive_threshold: usize::MAX, ..opts() })?;

    let mut rows = Vec::new();
    let mut secs = [0f64; 4];
    for s in &sessions {
        let t = Instant::now();
        let row = replay(&store, &raw_store, s)?;
        secs[s.format as usize] += t.elapsed().as_secs_f64();
        rows.push(row);
    }
    store.close()?;
    raw_store.close()?;

    println!("<!-- replay of {} ({} sessions) -->", dir.display(), sessions.len());
    for (w, window) in WINDOWS.iter().enumerate() {
        let b = Budget::new(*window, RESERVE);
        println!();
        println!(
            "### Window {} (reserve_output {}: soft {}, target {}, hard {})",
            num(*window),
            num(RESERVE),
            num(b.soft_limit()),
            num(b.target_limit()),
            num(b.hard_limit())
        );
        println!();
        println!(
            "| session | messages | steps | sent with guard | resend everything | ratio | raw (no archive) \
             | largest view: guard / resend / raw | compacted views | previewed seqs | refused | ratio, views not refused |"
        );
        println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
        for f in Format::ALL {
            let mut total = Row::default();
            let mut previewed = 0u64;
            let mut n = 0;
            let mut hidden = 0;
            for (s, r) in sessions.iter().zip(&rows).filter(|(s, _)| s.format == f) {
                let g = &r.guarded[w];
                let p = g.previewed.len() as u64;
                n += 1;
                previewed += p;
                total.messages += r.messages;
                total.steps += r.steps;
                total.resend += r.resend;
                total.raw += r.raw;
                total.resend_peak = total.resend_peak.max(r.resend_peak);
                total.raw_peak = total.raw_peak.max(r.raw_peak);
                let t = &mut total.guarded[w];
                t.sent += g.sent;
                t.peak = t.peak.max(g.peak);
                t.compacted_views += g.compacted_views;
                t.compacted_empty += g.compacted_empty;
                t.refused += g.refused;
                t.refused_previewing += g.refused_previewing;
                t.sent_ok += g.sent_ok;
                t.resend_ok += g.resend_ok;
                if f == Format::TauBench && !all_rows && p == 0 && g.refused == 0 {
                    hidden += 1;
                    continue;
                }
                println!("{}", line(&format!("{} {}", f.name(), s.name), r, w, p));
            }
            let label = if hidden > 0 {
                format!(
                    "**{} total ({n} sessions; {hidden} rows without previews or refusals not shown)**",
                    f.name()
                )
            } else {
                format!("**{} total ({n} sessions)**", f.name())
            };
            println!("{}", line(&label, &total, w, previewed));
        }
    }
    println!();
    println!(
        "<!-- load {load_s:.1} s; replay: Claude Code {:.1} s, mini-swe-agent {:.1} s, tau-bench {:.1} s, \
         SWE-agent {:.1} s; total {:.1} s -->",
        secs[0],
        secs[1],
        secs[2],
        secs[3],
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
