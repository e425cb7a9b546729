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
//! Sessions come from the engine's importers (`undertext::import`, format detected), as
//! `undertext import` and `undertext replay` read them. Their import choices, documented in
//! the README's formats table, were first written here (kept for the record):
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

use undertext::{Budget, Decision};
use undertext::{ChatMeta, Durability, NewMessage, Options, Role, Store};
use undertext_benches::{Result, bench_tempdir};

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
// Import: the engine's own importers (`undertext::import`), never a second copy of them
// ---------------------------------------------------------------------------------------------

/// The sessions of every transcript under `dir`, parsed by `undertext::import` with format
/// detection; Claude Code sub-agent files are skipped (they are not main sessions).
fn load(dir: &Path) -> Result<Vec<Session>> {
    let mut sessions = Vec::new();
    for path in undertext::import::transcript_files(&[dir.to_path_buf()])? {
        let rel = path.strip_prefix(dir).unwrap_or(&path).to_path_buf();
        if rel.components().any(|c| c.as_os_str() == "subagents") {
            continue;
        }
        let parsed = undertext::import::parse_file(&path, undertext::import::Format::Auto)?;
        for s in parsed.sessions {
            let format = match s.format.name() {
                "claude-code" => Format::ClaudeCode,
                "mini-swe-agent" => Format::MiniSweAgent,
                "tau-bench" => Format::TauBench,
                "swe-agent" => Format::SweAgent,
                other => return Err(format!("{}: unexpected format {other}", path.display()).into()),
            };
            let name = if s.title.is_empty() { s.key.clone() } else { s.title.chars().take(60).collect() };
            sessions.push(Session { format, name, messages: s.messages });
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
    let opts = || Options::default().durability(Durability::None).preallocate(false);
    let store = Store::open(tmp.path().join("store"), opts())?;
    let raw_store = Store::open(tmp.path().join("raw"), opts().archive_threshold(usize::MAX))?;

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
