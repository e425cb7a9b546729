//! `demo`: the main job. A scripted agent works through the repository's own sources and
//! docs on the embedded store, one model step at a time, and the terminal shows what the
//! engine does: the estimate against the window with the soft, target and hard lines, tool
//! results archived as previews, the guard previewing older results, the worker preparing a
//! checkpoint in the background and the swap at the hard line, and a `read_context` that
//! brings back an exact line a preview had dropped. `--transcript FILE` replays a real
//! session instead of the scripted agent. Everything is an engine call; this file only
//! scripts the agent and prints.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::replay::cost::{self, Price};
use crate::replay::{Baselines, ViewPricer, full_tokens};
use serde_json::json;
use undertext::approval::{ApprovalPatterns, pending_in_text};
use undertext::import::{self, Format, inventory};
use undertext::{
    ArchiveRef, BlobId, ChatMeta, Durability, Message, NewMessage, Part, Role, StepStatus, Store,
    ToolContent, Unit,
};
use undertext::{Budget, Decision};
use undertext::{CheckpointOptions, Extractive, Summarizer};
use undertext::{HardLinePolicy, WorkerOptions};

use super::args::DemoArgs;
use super::out::{self, bytes, num};
use super::{Cli, CliError, CliResult};

/// The extractive summarizer, paced like a model call.
struct Paced {
    inner: Extractive,
    delay: Duration,
}

impl Summarizer for Paced {
    fn id(&self) -> &str {
        "demo-extractive"
    }
    fn summarize(&self, m: &[Message]) -> undertext::Result<String> {
        std::thread::sleep(self.delay);
        self.inner.summarize(m)
    }
    fn merge(&self, s: &[String]) -> undertext::Result<String> {
        std::thread::sleep(self.delay);
        self.inner.merge(s)
    }
}

/// Where the live output goes: stdout, or stderr when stdout carries the JSON summary.
struct Term {
    json: bool,
    color: bool,
}

impl Term {
    fn line(&self, s: &str) {
        if self.json {
            eprintln!("{s}");
        } else {
            println!("{s}");
            let _ = std::io::stdout().flush();
        }
    }
    fn paint(&self, code: &str, s: &str) -> String {
        if self.color { format!("\x1b[{code}m{s}\x1b[0m") } else { s.to_string() }
    }
}

/// The repository root: the current directory or one of its parents holding
/// `engine/src/lib.rs`, else the checkout this binary was built from.
fn repo_root() -> CliResult<PathBuf> {
    let looks = |p: &Path| p.join("engine/src/lib.rs").is_file() && p.join("README.md").is_file();
    let mut tried = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        for p in cwd.ancestors() {
            if looks(p) {
                return Ok(p.to_path_buf());
            }
        }
        tried.push(cwd.display().to_string());
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if looks(&built) {
        return Ok(built);
    }
    tried.push(built.display().to_string());
    Err(CliError(format!(
        "demo: the repository's sources are not here (looked for engine/src/lib.rs in {} and their parents); \
         run it inside a clone of the repository, or pass --transcript FILE",
        tried.join(" and ")
    )))
}

/// The files the scripted agent reads: the engine's sources, the tests, the docs.
fn source_files(root: &Path) -> CliResult<Vec<(String, String)>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        let mut v: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        v.sort();
        for p in v {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs" || x == "md") {
                out.push(p);
            }
        }
    }
    let mut paths = Vec::new();
    for d in ["engine/src", "tests/tests"] {
        walk(&root.join(d), &mut paths);
    }
    for f in ["README.md", "engine/FORMAT.md", "benches/README.md", "benches/REPLAY.md"] {
        if root.join(f).is_file() {
            paths.push(root.join(f));
        }
    }
    let mut out = Vec::new();
    let patterns = ApprovalPatterns::default();
    for p in paths {
        if let Ok(text) = std::fs::read_to_string(&p) {
            // A file whose text reads as a pending approval (the approval finder's own tests)
            // would, as a tool result, rightly hold every checkpoint cut before it.
            if pending_in_text(&text, &patterns).is_some() {
                continue;
            }
            let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
            out.push((rel, text));
        }
    }
    if out.len() < 8 {
        return Err(CliError(format!(
            "demo: expected the repository's sources under {}, found {} readable files",
            root.display(),
            out.len()
        )));
    }
    Ok(out)
}

/// One step of the scripted agent: what it says, the tool it calls, and the tool's output.
struct Action {
    say: String,
    tool: &'static str,
    args: serde_json::Value,
    output: String,
}

const PATTERNS: [&str; 8] =
    ["pub fn ", "Error::", "SAFETY", "fsync", "revision", "archive", "checkpoint", "#[test]"];

/// The scripted agent: reads files in order (big ones first in each task), greps, and
/// re-reads a file now and then (the same content: one archive).
fn action(step: u64, files: &[(String, String)]) -> Action {
    let k = step as usize;
    if k % 5 == 3 {
        let pat = PATTERNS[(k / 5) % PATTERNS.len()];
        let mut hits = String::new();
        for (path, text) in files {
            for (i, line) in text.lines().enumerate() {
                if line.contains(pat) && hits.len() < 6_000 {
                    hits.push_str(&format!("{path}:{}: {}\n", i + 1, line.trim()));
                }
            }
        }
        return Action {
            say: format!("Searching the repository for `{pat}`."),
            tool: "grep",
            args: json!({"pattern": pat}),
            output: hits,
        };
    }
    // Every 7th step re-reads a file read before; otherwise the next file, by a stride that
    // spreads the reads over the tree.
    let idx = if k % 7 == 6 && k > 7 { (k - 7) * 7 % files.len() } else { k * 7 % files.len() };
    let (path, text) = &files[idx];
    Action {
        say: format!("Reading {path}."),
        tool: "read_file",
        args: json!({"path": path}),
        output: text.clone(),
    }
}

/// The bar of one step: `█` the estimate sent, `▒` what the guard's previews saved (the
/// estimate before them), `│` the target, soft and hard lines, scaled to the window.
fn bar(t: &Term, est: u64, before_guard: u64, b: &Budget) -> String {
    const WIDTH: usize = 50;
    let pos = |v: u64| ((v as f64 / b.window as f64) * WIDTH as f64).round() as usize;
    let fill = pos(est).min(WIDTH);
    let saved = pos(before_guard).min(WIDTH);
    let (target, soft, hard) = (pos(b.target_limit()), pos(b.soft_limit()), pos(b.hard_limit()));
    let mut s = String::new();
    for i in 0..WIDTH {
        let c = if i < fill {
            '█'
        } else if i < saved {
            '▒'
        } else if i == target || i == soft || i == hard {
            '│'
        } else {
            '·'
        };
        s.push(c);
    }
    let color = if est > b.hard_limit() {
        "31"
    } else if est > b.soft_limit() {
        "33"
    } else {
        "32"
    };
    t.paint(color, &s)
}

/// An archived tool result the agent got, with what it knows of it.
struct Archived {
    seq: u64,
    label: String,
    archive: ArchiveRef,
    preview: String,
    original: String,
}

/// Whether `line` holds a figure: a number of two or more digits standing on its own (not
/// part of a name such as `utf16`).
fn has_figure(line: &str) -> bool {
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let standalone = start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
            if standalone && i - start >= 2 {
                return true;
            }
        } else {
            i += 1;
        }
    }
    false
}

/// A line of `original` with a figure that `preview` does not show, the one nearest the
/// middle: (line index, line).
fn dropped_figure(a: &Archived) -> Option<(u64, String)> {
    let lines: Vec<&str> = a.original.split_inclusive('\n').collect();
    let mid = lines.len() / 2;
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.trim();
            t.len() > 12 && !a.preview.contains(t) && has_figure(t)
        })
        .min_by_key(|(i, _)| i.abs_diff(mid))
        .map(|(i, l)| (i as u64, l.to_string()))
}

#[derive(Default)]
struct Tally {
    steps: u64,
    sent: u64,
    everything: u64,
    everything_now: u64,
    peak: u64,
    stall: Duration,
    hard_line_views: Duration,
    swaps: Vec<Duration>,
    previewed: std::collections::BTreeSet<u64>,
    refused: u64,
    archived: u64,
    recovered: Option<serde_json::Value>,
    /// The prompt-cache model (`replay::cost`): the views, and on the same chat resending
    /// everything (where it fits the window) and the naive policy.
    pricer: ViewPricer,
    baselines: Option<Baselines>,
    views: cost::Tally,
    views_fit: cost::Tally,
    resend: cost::Tally,
    resend_over: u64,
    naive: cost::Tally,
}

/// `demo`.
pub fn run(cli: &Cli, a: &DemoArgs) -> CliResult {
    if a.steps == 0 {
        return Err(CliError("--steps: expected at least 1, found 0".into()));
    }
    if a.window < 4_000 {
        return Err(CliError(format!("--window: expected at least 4000 tokens, found {}", a.window)));
    }
    let script = match &a.transcript {
        Some(f) => {
            let parsed = import::parse_file(f, Format::Auto)?;
            let s = parsed
                .sessions
                .into_iter()
                .max_by_key(|s| s.messages.iter().filter(|m| m.role == Role::Assistant).count())
                .ok_or_else(|| CliError(format!("{}: no session in this transcript", f.display())))?;
            Script::Transcript(s)
        }
        None => Script::Agent(source_files(&repo_root()?)?),
    };
    let t = Term { json: a.json, color: !a.json && std::io::stdout().is_terminal() };
    let store = out::open(cli, true, Durability::Group)?;
    let started = Instant::now();
    let title = match &script {
        Script::Agent(_) => "demo: a scripted agent reviews the Undertext repository".to_string(),
        Script::Transcript(s) => format!("demo: replay of {}", s.title),
    };
    let meta = ChatMeta { title: title.clone(), model: "demo-model".into(), ..ChatMeta::default() };
    let chat = store.chat(&cli.owner, store.create_chat(&cli.owner, meta)?)?;
    let reserve = reserve_for(a.window);
    let budget = Budget::new(a.window, reserve);
    let wopts = WorkerOptions {
        // The scripted agent's settled steps are always there to prepare (the protected tail
        // is bounded); a transcript's view at the hard line with nothing prepared is refused
        // rather than waited for, as `replay` does.
        at_hard_line: match script {
            Script::Agent(_) => HardLinePolicy::Wait(Duration::from_secs(1)),
            Script::Transcript(_) => HardLinePolicy::Refuse,
        },
        checkpoint: CheckpointOptions {
            segment_tokens: (a.window / 16).max(500),
            ..CheckpointOptions::default()
        },
        ..WorkerOptions::default()
    };
    let worker = store.start_worker(
        Arc::new(Paced { inner: Extractive::default(), delay: Duration::from_millis(a.step_ms / 2) }),
        wopts.clone(),
    )?;
    t.line(&format!("{} {title}", t.paint("1", "undertext demo:")));
    t.line(&format!(
        "store {}  chat {}  window {} tokens (reserve {}): target {} · soft {} · hard {} · worker prepares past {}",
        cli.store.display(),
        chat.id(),
        num(a.window),
        num(reserve),
        num(budget.target_limit()),
        num(budget.soft_limit()),
        num(budget.hard_limit()),
        num((budget.usable() as f64 * wopts.soft) as u64)
    ));
    t.line("bar: the next model call's estimate against the window (█ sent, ▒ saved by previews); │ target, soft and hard lines");
    let mut tally = Tally { baselines: Some(Baselines::new(&budget)), ..Tally::default() };
    let mut archived: Vec<Archived> = Vec::new();
    let mut prepared_seen: Option<(u64, u64)> = None;
    let recover_at = (a.steps * 2 / 3).max(1);
    let mut append = |chat: &undertext::Chat,
                      m: NewMessage,
                      tally: &mut Tally,
                      step: Option<(u64, u32)>|
     -> CliResult<u64> {
        let tokens = full_tokens(&store, &m);
        tally.everything_now += tokens;
        if let Some(b) = &mut tally.baselines {
            b.push(m.role, &m.parts, tokens);
        }
        let seq = match step {
            Some((turn, n)) => chat.record_step(turn, "demo", n, StepStatus::Complete, vec![m])?.start,
            None => chat.append(m)?,
        };
        Ok(seq)
    };
    let system = NewMessage::system(
        "You are a careful code reviewer. Use read_file, grep and read_context; archived outputs are previews, \
         read_context(archive, range) returns any part exactly.",
    );
    let transcript_msgs: Vec<NewMessage> = match &script {
        Script::Transcript(s) => s.messages.clone(),
        Script::Agent(_) => Vec::new(),
    };
    let mut cursor = 0usize;
    if matches!(script, Script::Agent(_)) {
        append(&chat, system, &mut tally, None)?;
    }
    let mut turn = 0u64;
    let mut step_in_turn = 0u32;
    for step in 0..a.steps {
        // The user speaks (scripted: one task, then only tool calls — or, in the `chat`
        // scenario, a task every 4 steps); a transcript's messages up to its next model call.
        match &script {
            Script::Agent(_) if a.scenario == "loop" => {
                if step == 0 {
                    append(
                        &chat,
                        NewMessage::user(
                            "Review the Undertext repository: read its sources and docs, check that what the \
                             docs claim is what the code does, and report every mismatch with file and line.",
                        ),
                        &mut tally,
                        None,
                    )?;
                    turn += 1;
                }
            }
            Script::Agent(files) => {
                if step % 4 == 0 {
                    let f = &files[(step as usize * 7) % files.len()].0;
                    append(
                        &chat,
                        NewMessage::user(format!("Task {}: review {f} and what it touches.", step / 4 + 1)),
                        &mut tally,
                        None,
                    )?;
                    turn += 1;
                    step_in_turn = 0;
                }
            }
            Script::Transcript(_) => {
                while cursor < transcript_msgs.len() && transcript_msgs[cursor].role != Role::Assistant {
                    let seq = append(&chat, transcript_msgs[cursor].clone(), &mut tally, None)?;
                    note_archived(&t, &chat, seq, &transcript_msgs[cursor], &mut archived, &mut tally)?;
                    cursor += 1;
                }
                if cursor >= transcript_msgs.len() {
                    break;
                }
            }
        }
        // The model call: its input is the view.
        let t0 = Instant::now();
        let v = chat.view(&budget)?;
        let took = t0.elapsed();
        let call = tally.pricer.call(&v);
        tally.views.add(&call);
        if let Some(b) = tally.baselines.as_mut().map(Baselines::call) {
            match b.resend {
                Some(r) => {
                    tally.resend.add(&r);
                    tally.views_fit.add(&call);
                }
                None => tally.resend_over += 1,
            }
            tally.naive.add(&b.naive);
        }
        tally.steps += 1;
        tally.sent += v.estimate();
        tally.everything += tally.everything_now;
        if !matches!(v.decision(), Decision::Refused { .. }) {
            // The peak of what is sent: a refused view is not.
            tally.peak = tally.peak.max(v.estimate());
        }
        let mut notes = Vec::new();
        let saved = match v.decision() {
            Decision::Compacted { tokens_saved, .. } => *tokens_saved,
            _ => 0,
        };
        if let Some(d) = v.swap() {
            tally.swaps.push(d);
            // The stall is the swap itself; the view around it is built at every step anyway.
            tally.stall += d;
            tally.hard_line_views += took;
            let (_, reach) = chat.published_checkpoint().unwrap_or_default();
            notes.push(t.paint("35", &format!("⇄ hard line: prepared checkpoint swapped in ({:.2} ms), messages 0..{reach} now one summary", d.as_secs_f64() * 1000.0)));
        }
        match v.decision() {
            Decision::Compacted { previewed, tokens_saved } if !previewed.is_empty() => {
                tally.previewed.extend(previewed.iter().copied());
                notes.push(format!(
                    "guard: {} older result(s) shown as previews, {} tokens saved",
                    previewed.len(),
                    num(*tokens_saved)
                ));
            }
            Decision::Refused { over_by, .. } => {
                tally.refused += 1;
                tally.stall += took;
                notes
                    .push(t.paint("31", &format!("refused: over the hard line by {} tokens", num(*over_by))));
            }
            _ => {}
        }
        t.line(&format!(
            "step {:>4} {} {:>7}/{} {:>3}%  {}",
            step + 1,
            bar(&t, v.estimate(), v.estimate() + saved, &budget),
            num(v.estimate()),
            num(a.window),
            v.estimate() * 100 / a.window,
            notes.join("; ")
        ));
        // The model thinks; the worker works meanwhile.
        std::thread::sleep(Duration::from_millis(a.step_ms));
        match &script {
            Script::Agent(files) => {
                let act = if step + 1 == recover_at.max(1) && !archived.is_empty() {
                    None
                } else {
                    Some(action(step, files))
                };
                let call_id = format!("call-{step}");
                match act {
                    Some(act) => {
                        let call = NewMessage {
                            role: Role::Assistant,
                            parts: vec![
                                Part::Text(act.say.clone()),
                                Part::ToolCall {
                                    id: call_id.clone(),
                                    name: act.tool.into(),
                                    args: act.args.to_string(),
                                },
                            ],
                            feedback: false,
                        };
                        append(&chat, call, &mut tally, Some((turn, step_in_turn)))?;
                        let label = format!("{} {}", act.tool, act.args);
                        let m = NewMessage::tool_result(call_id, act.output);
                        let seq = append(&chat, m.clone(), &mut tally, None)?;
                        if let Some(x) = note_archived(&t, &chat, seq, &m, &mut archived, &mut tally)? {
                            x.label = label;
                        }
                    }
                    None => recover(
                        &t,
                        cli,
                        &store,
                        &chat,
                        &archived,
                        &mut tally,
                        &mut append,
                        turn,
                        step_in_turn,
                        &call_id,
                    )?,
                }
                step_in_turn += 1;
            }
            Script::Transcript(_) => {
                let m = transcript_msgs[cursor].clone();
                cursor += 1;
                append(&chat, m, &mut tally, None)?;
            }
        }
        // The worker's progress, seen from here.
        if let Some(p) = chat.prepared()
            && prepared_seen != Some((p.base_revision, p.reach))
            && chat.published_checkpoint().is_none_or(|(_, r)| r < p.reach)
        {
            prepared_seen = Some((p.base_revision, p.reach));
            t.line(&t.paint("36", &format!(
                "          ◆ worker: checkpoint prepared in the background — messages 0..{} in {} segment(s), summary {} chars ({} summarized now, {} from cache)",
                p.reach,
                p.segments.len(),
                num(p.summary.chars().count() as u64),
                p.stats.summarized,
                p.stats.cached
            )));
        }
    }
    if matches!(script, Script::Transcript(_)) && tally.recovered.is_none() && !archived.is_empty() {
        recover_read_only(&t, cli, &store, &archived, &mut tally)?;
    }
    let errors = worker.errors();
    worker.stop();
    store.sync()?;
    let stats = store.stats()?;
    let inv = inventory(&store, &cli.owner)?;
    let elapsed = started.elapsed();
    summary(&t, cli, a, &chat, &tally, &stats, &inv, elapsed, &errors)
}

/// The tokens the demo keeps for the answer: an eighth of the window.
fn reserve_for(window: u64) -> u64 {
    (window / 8).max(512)
}

enum Script {
    Agent(Vec<(String, String)>),
    Transcript(import::Session),
}

/// If message `seq` holds an archived tool result, prints it and remembers it.
fn note_archived<'a>(
    t: &Term,
    chat: &undertext::Chat,
    seq: u64,
    original: &NewMessage,
    archived: &'a mut Vec<Archived>,
    tally: &mut Tally,
) -> CliResult<Option<&'a mut Archived>> {
    let stored = chat.get(seq)?;
    let mut found = false;
    for (p, o) in stored.parts.iter().zip(&original.parts) {
        if let (
            Part::ToolResult { content: ToolContent::Archived { archive, preview }, .. },
            Part::ToolResult { content: ToolContent::Text(text), .. },
        ) = (p, o)
        {
            tally.archived += 1;
            let again = archived.iter().any(|x| x.archive.id == archive.id);
            t.line(&t.paint("34", &format!(
                "          ▣ archived: {} bytes, {} lines → archive {}…, preview of {} chars in the context{}",
                num(archive.bytes),
                num(archive.lines),
                &archive.id.to_string()[..12],
                num(preview.chars().count() as u64),
                if again { " (same content as before: stored once)" } else { "" }
            )));
            archived.push(Archived {
                seq,
                label: String::new(),
                archive: *archive,
                preview: preview.clone(),
                original: text.clone(),
            });
            found = true;
        }
    }
    Ok(if found { archived.last_mut() } else { None })
}

type AppendFn<'s> =
    dyn FnMut(&undertext::Chat, NewMessage, &mut Tally, Option<(u64, u32)>) -> CliResult<u64> + 's;

/// The agent needs a figure its preview dropped: it calls read_context for that line.
#[expect(clippy::too_many_arguments, reason = "one call site; the demo's state passed explicitly")]
fn recover(
    t: &Term,
    cli: &Cli,
    store: &Store,
    chat: &undertext::Chat,
    archived: &[Archived],
    tally: &mut Tally,
    append: &mut AppendFn<'_>,
    turn: u64,
    step_in_turn: u32,
    call_id: &str,
) -> CliResult {
    let Some((a, line, want)) = archived.iter().find_map(|a| dropped_figure(a).map(|(l, w)| (a, l, w)))
    else {
        return Ok(());
    };
    let args = json!({"archive": a.archive.id.to_string(), "range": [line, line + 1], "unit": "lines"});
    let call = NewMessage {
        role: Role::Assistant,
        parts: vec![
            Part::Text(format!(
                "The preview of message {} dropped the line I need; reading it back exactly.",
                a.seq
            )),
            Part::ToolCall { id: call_id.into(), name: "read_context".into(), args: args.to_string() },
        ],
        feedback: false,
    };
    append(chat, call, tally, Some((turn, step_in_turn)))?;
    let got = store.read_context(&cli.owner, &a.archive.id, line..line + 1, Unit::Lines)?;
    append(chat, NewMessage::tool_result(call_id, got.clone()), tally, None)?;
    report_recovery(t, a, line, &want, &got, tally);
    Ok(())
}

fn recover_read_only(
    t: &Term,
    cli: &Cli,
    store: &Store,
    archived: &[Archived],
    tally: &mut Tally,
) -> CliResult {
    let Some((a, line, want)) = archived.iter().find_map(|a| dropped_figure(a).map(|(l, w)| (a, l, w)))
    else {
        return Ok(());
    };
    let got = store.read_context(&cli.owner, &a.archive.id, line..line + 1, Unit::Lines)?;
    report_recovery(t, a, line, &want, &got, tally);
    Ok(())
}

fn report_recovery(t: &Term, a: &Archived, line: u64, want: &str, got: &str, tally: &mut Tally) {
    let exact = got == want;
    let id: BlobId = a.archive.id;
    t.line(&t.paint("32", &format!(
        "          ↺ read_context({}…, lines {line}..{}) → {:?}  [{}; not in the {}-char preview of message {}{}]",
        &id.to_string()[..12],
        line + 1,
        got.trim_end(),
        if exact { "exact" } else { "MISMATCH" },
        num(a.preview.chars().count() as u64),
        a.seq,
        if a.label.is_empty() { String::new() } else { format!(", {}", a.label) }
    )));
    tally.recovered = Some(json!({
        "archive": id.to_string(), "line": line, "text": got, "exact": exact, "message_seq": a.seq,
    }));
}

#[expect(clippy::too_many_arguments, reason = "the summary reads everything the run gathered")]
fn summary(
    t: &Term,
    cli: &Cli,
    a: &DemoArgs,
    chat: &undertext::Chat,
    tally: &Tally,
    stats: &undertext::StoreStats,
    inv: &import::Inventory,
    elapsed: Duration,
    errors: &[String],
) -> CliResult {
    let on_disk = stats.log_bytes + stats.index_bytes;
    let dedup = if inv.archive_unique_bytes == 0 {
        1.0
    } else {
        inv.archived_bytes as f64 / inv.archive_unique_bytes as f64
    };
    let swap_ms: Vec<f64> = tally.swaps.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    let max_swap = swap_ms.iter().copied().fold(0.0, f64::max);
    let price = Price::default();
    let ratio_of = |x: f64, y: f64| (y > 0.0).then(|| x / y);
    let (views_cost, resend_cost, naive_cost) =
        (tally.views.cost(&price), tally.resend.cost(&price), tally.naive.cost(&price));
    let cost_vs_resend = ratio_of(tally.views_fit.cost(&price), resend_cost);
    let cost_vs_naive = ratio_of(views_cost, naive_cost);
    if a.json {
        let t = |x: &cost::Tally| {
            json!({"calls": x.calls, "tokens": x.tokens(), "cached": x.cached, "uncached": x.uncached,
                   "breaks": x.breaks, "cost": x.cost(&price)})
        };
        let cost = json!({
            "price": {"input": price.input, "cached": price.cached, "cache_write": price.cache_write},
            "views": t(&tally.views), "views_where_resend_fits": t(&tally.views_fit), "resend": t(&tally.resend),
            "resend_over_window": tally.resend_over, "naive": t(&tally.naive),
            "cost_views_over_resend": cost_vs_resend, "cost_views_over_naive": cost_vs_naive,
        });
        return out::print_json(&json!({
            "store": cli.store.display().to_string(), "owner": cli.owner, "chat": chat.id().to_string(),
            "steps": tally.steps, "messages": chat.len(), "window": a.window,
            "tokens_sent": tally.sent, "tokens_resend_everything": tally.everything,
            "peak_tokens": tally.peak, "peak_window_fraction": tally.peak as f64 / a.window as f64,
            "stall_ms": tally.stall.as_secs_f64() * 1000.0, "swaps": tally.swaps.len(), "swap_ms": swap_ms,
            "previewed_results": tally.previewed.len(), "refused": tally.refused, "archived_results": tally.archived,
            "store_archived_results": inv.archived_results, "archives": inv.archives,
            "archived_bytes": inv.archived_bytes, "archive_unique_bytes": inv.archive_unique_bytes, "dedup_ratio": dedup,
            "log_bytes": stats.log_bytes, "index_bytes": stats.index_bytes, "bytes_on_disk": on_disk,
            "recovered": tally.recovered, "worker_errors": errors, "elapsed_ms": elapsed.as_secs_f64() * 1000.0,
            "cost_with_caching": cost,
        }));
    }
    let ratio = if tally.everything == 0 { 0.0 } else { tally.sent as f64 / tally.everything as f64 };
    t.line("");
    t.line(&t.paint("1", "summary"));
    let rows = [
        (
            "steps (model calls)",
            format!("{}  ({} messages in {})", num(tally.steps), num(chat.len()), chat.id()),
        ),
        (
            "tokens sent",
            format!(
                "{}  vs {} resending everything ({:.0}%)",
                num(tally.sent),
                num(tally.everything),
                ratio * 100.0
            ),
        ),
        (
            "input cost, prompt caching",
            format!(
                "{views_cost:.4} vs {resend_cost:.4} resending everything{} ({}) and {naive_cost:.4} for the naive \
                 policy ({}); $ at {}/Mtok input, {}/Mtok cached",
                if tally.resend_over == 0 {
                    String::new()
                } else {
                    format!(" on the {} calls where it fits", tally.resend.calls)
                },
                cost_vs_resend.map_or_else(|| "-".into(), |r| format!("{r:.2}×")),
                cost_vs_naive.map_or_else(|| "-".into(), |r| format!("{r:.2}×")),
                price.input,
                price.cached
            ),
        ),
        (
            "prefix breaks",
            format!(
                "{} of {} calls (resending everything: {}, naive policy: {}): a break re-bills the request from the \
                 first changed message",
                num(tally.views.breaks),
                num(tally.views.calls),
                num(tally.resend.breaks),
                num(tally.naive.breaks)
            ),
        ),
        (
            "peak window use",
            format!(
                "{} of {} tokens ({:.0}%)",
                num(tally.peak),
                num(a.window),
                tally.peak as f64 * 100.0 / a.window as f64
            ),
        ),
        (
            "stalled at the hard line",
            format!(
                "{:.2} ms in all: {} swap(s) of a prepared checkpoint (longest {:.2} ms), {} refused; \
                 those views took {:.1} ms in all",
                tally.stall.as_secs_f64() * 1000.0,
                tally.swaps.len(),
                max_swap,
                tally.refused,
                tally.hard_line_views.as_secs_f64() * 1000.0
            ),
        ),
        (
            "previews",
            format!(
                "{} results archived on append, {} older results previewed by the guard",
                num(tally.archived),
                num(tally.previewed.len() as u64)
            ),
        ),
        (
            "dedup ratio",
            format!(
                "{dedup:.2}×  ({} archived → {} stored in {} archives; whole store)",
                bytes(inv.archived_bytes),
                bytes(inv.archive_unique_bytes),
                num(inv.archives)
            ),
        ),
        (
            "bytes on disk",
            format!(
                "{}  (log {}, index {})",
                bytes(on_disk),
                bytes(stats.log_bytes),
                bytes(stats.index_bytes)
            ),
        ),
        ("wall time", format!("{:.1} s", elapsed.as_secs_f64())),
    ];
    for (k, v) in rows {
        t.line(&format!("  {k:<26} {v}"));
    }
    if let Some(first) = errors.first() {
        t.line(&format!(
            "  worker: {} job(s) found nothing to prepare or failed; the first: {first}",
            errors.len()
        ));
    }
    let s = cli.store.display();
    let store_arg = if s.to_string() == "./undertext-data" { String::new() } else { format!(" --store {s}") };
    t.line("");
    t.line(&format!(
        "The store is in {s}. Next (`undertext` is target/release/undertext, or `cargo run --release -- ...`):"
    ));
    t.line(&format!("  undertext{store_arg} show {}            # every message, with its seq", chat.id()));
    t.line(&format!(
        "  undertext{store_arg} view {} --window {} --reserve {}  # what the next model call would see",
        chat.id(),
        a.window,
        reserve_for(a.window)
    ));
    t.line(&format!("  undertext{store_arg} plot {} -o demo.svg   # context size per step", chat.id()));
    if let Some(r) = &tally.recovered {
        let id = r["archive"].as_str().unwrap_or_default();
        let line = r["line"].as_u64().unwrap_or_default();
        t.line(&format!("  undertext{store_arg} read {id} --range {line}..{} --unit line", line + 1));
    }
    t.line(&format!("  undertext{store_arg} stats ; undertext{store_arg} check ; undertext{store_arg} import ~/.claude/projects"));
    Ok(())
}
