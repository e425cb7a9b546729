//! `import` and `replay`: transcripts in, through the library's importers.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;

use crate::replay::cost::{Price, Tally};
use crate::replay::{ReplayOptions, ReplayRow, Waits, replay_session, start_worker};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use undertext::HardLinePolicy;
use undertext::import::{self, Format, Problem, Session};
use undertext::{Durability, Options, Store};

use super::args::{ImportArgs, ReplayArgs};
use super::out::{self, bytes, num};
use super::{Cli, CliError, CliResult};

fn bar(len: u64, what: &str, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} {wide_msg}") {
        b.set_style(style.progress_chars("=> "));
    }
    b.set_message(what.to_string());
    b
}

/// What one input file gave.
struct FileRow {
    path: PathBuf,
    /// The format it was read as; `None` when it could not be read or detected.
    format: Option<Format>,
    sessions: u64,
    messages: u64,
    tool_calls: u64,
    tool_results: u64,
}

/// Everything read from the inputs.
struct Inputs {
    sessions: Vec<Session>,
    problems: Vec<Problem>,
    bytes_in: u64,
    files: Vec<FileRow>,
    /// Long JSONL files imported a line at a time ([`import::import_streaming`]), not parsed
    /// here: (file, format, its row in `files`).
    streamed: Vec<(PathBuf, Format, usize)>,
}

/// The sessions of every transcript file under `paths`, the problems met, the bytes read,
/// and what each file gave. Files are read bounded ([`import::read_bounded`]); folders are
/// walked once each ([`import::walk`]).
fn parse_all(paths: &[PathBuf], format: &str) -> CliResult<Inputs> {
    let format: Format = format.parse()?;
    let walk = import::walk(paths)?;
    if walk.files.is_empty() && walk.problems.is_empty() {
        return Err(CliError(format!(
            "no transcript files (*.jsonl, *.json, *.traj, OpenHands conversation folders) under {}",
            paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        )));
    }
    let folders = paths.iter().any(|p| p.is_dir());
    let pb = bar(walk.files.len() as u64, "reading", folders);
    let mut inp = Inputs {
        sessions: Vec::new(),
        problems: walk.problems,
        bytes_in: 0,
        files: Vec::new(),
        streamed: Vec::new(),
    };
    for f in &walk.files {
        // Ctrl-C (`import` catches it) stops the reading too: nothing is written yet.
        if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        pb.set_message(f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
        // A long session file is read a line at a time when it is imported, never whole.
        if let Ok(Some(fmt)) = import::streams(f, format) {
            let row = FileRow {
                path: f.clone(),
                format: Some(fmt),
                sessions: 0,
                messages: 0,
                tool_calls: 0,
                tool_results: 0,
            };
            inp.streamed.push((f.clone(), fmt, inp.files.len()));
            inp.files.push(row);
            pb.inc(1);
            continue;
        }
        let parsed = if f.is_dir() {
            import::parse_file(f, format)
        } else {
            import::read_bounded(f, import::MAX_INPUT_BYTES).and_then(|data| {
                inp.bytes_in += data.len() as u64;
                import::parse_bytes(f, &data, format)
            })
        };
        let mut row = FileRow {
            path: f.clone(),
            format: None,
            sessions: 0,
            messages: 0,
            tool_calls: 0,
            tool_results: 0,
        };
        match parsed {
            Ok(p) => {
                row.format = Some(p.format);
                for s in &p.sessions {
                    row.sessions += 1;
                    row.messages += s.messages.len() as u64;
                    row.tool_calls += s.tool_calls;
                    row.tool_results += s.tool_results;
                }
                inp.sessions.extend(p.sessions);
                inp.problems.extend(p.problems);
            }
            Err(e) => {
                inp.problems.push(Problem { file: f.clone(), line: 0, reason: strip(&e.to_string(), f) })
            }
        }
        inp.files.push(row);
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(inp)
}

/// An engine message that already names the file, without the "invalid argument: path: " lead.
fn strip(msg: &str, f: &std::path::Path) -> String {
    let m = msg.strip_prefix("invalid argument: ").unwrap_or(msg);
    let lead = format!("{}: ", f.display());
    m.strip_prefix(&lead).unwrap_or(m).to_string()
}

/// Prints every problem but the last as an `error:` line and returns the last one as the
/// command's error (a single bad file or line is one line of output).
fn report_problems(problems: &[Problem], json: bool) -> CliResult {
    let Some((last, rest)) = problems.split_last() else { return Ok(()) };
    if !json {
        for p in rest {
            eprintln!("error: {p}");
        }
    }
    let more =
        if problems.len() > 1 { format!("; {} problems in all", problems.len()) } else { String::new() };
    Err(CliError(format!("{last}{more}")))
}

/// Set by SIGINT while an import runs: it stops at the next session boundary.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    // Async-signal-safe: one atomic store.
    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Ctrl-C stops the import at a session boundary (a second one ends the process at once).
fn catch_interrupt() {
    INTERRUPTED.store(false, std::sync::atomic::Ordering::SeqCst);
    // SAFETY: `on_interrupt` only stores to an atomic, which is async-signal-safe;
    // SA_RESETHAND gives a second Ctrl-C the default action (end the process).
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
        act.sa_flags = libc::SA_RESETHAND;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(libc::SIGINT, &act, std::ptr::null_mut());
    }
}

/// `import PATH…`.
pub fn import(cli: &Cli, a: &ImportArgs) -> CliResult {
    catch_interrupt();
    let Inputs { mut sessions, problems, mut bytes_in, files: mut rows, streamed } =
        parse_all(&a.paths, &a.format)?;
    let files = rows.len();
    if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
        if a.json {
            out::print_json(&json!({
                "interrupted": true, "phase": "reading", "files_read": files, "sessions_done": 0,
            }))?;
        }
        eprintln!("interrupted while reading the transcripts ({files} files read): nothing imported");
        return Err(CliError("import interrupted (Ctrl-C)".into()));
    }
    if sessions.is_empty() && streamed.is_empty() && !problems.is_empty() {
        return report_problems(&problems, false);
    }
    // Bulk import: no fsync per session; one sync at the end makes it all durable. A crash
    // midway loses nothing imported before the last sync, and importing again completes it.
    let store = out::open(cli, true, Durability::None)?;
    // Progress on a terminal only (indicatif draws nothing when stderr is not one).
    let pb = bar(
        (sessions.len() + streamed.len()) as u64,
        "importing",
        !a.json && std::io::stderr().is_terminal(),
    );
    let mut done = 0u64;
    let mut r = import::import_sessions_until(
        &store,
        &cli.owner,
        &sessions,
        |s| {
            done += 1;
            pb.set_message(s.title.chars().take(50).collect::<String>());
            pb.inc(1);
        },
        || INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst),
    )?;
    let mut problems = problems;
    // Long session files, a line at a time, after the others.
    for (path, fmt, row) in &streamed {
        if r.interrupted || INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
            r.interrupted = true;
            break;
        }
        pb.set_message(path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
        let st = match import::import_streaming(&store, &cli.owner, path, *fmt) {
            Ok(st) => st,
            Err(e) => {
                problems.push(Problem { file: path.clone(), line: 0, reason: strip(&e.to_string(), path) });
                continue;
            }
        };
        bytes_in += st.bytes;
        problems.extend(st.problems);
        add_report(&mut r, st.report);
        if let Some(s) = st.session {
            if let Some(other) = sessions.iter().find(|o| o.key == s.key && o.source != s.source) {
                problems.push(s.read_twice(&other.source));
            }
            let f = &mut rows[*row];
            (f.sessions, f.messages, f.tool_calls, f.tool_results) =
                (1, st.messages, s.tool_calls, s.tool_results);
            sessions.push(s);
        }
        done += 1;
        pb.inc(1);
    }
    pb.finish_and_clear();
    store.sync()?;
    problems.extend(r.key_conflicts.iter().cloned());
    let mut st = store.stats()?;
    // The index file as `undertext stats` will find it: redb gives back the space it
    // held for open transactions when the store is closed.
    store.close()?;
    if let Ok(m) = std::fs::metadata(cli.store.join("index.redb")) {
        st.index_bytes = m.len();
    }
    let mut per: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
    for s in &sessions {
        let e = per.entry(s.format.name()).or_default();
        e.0 += 1;
        e.1 += s.tool_results;
        e.2 += s.tool_result_bytes;
    }
    if a.json {
        let per_format: serde_json::Map<String, serde_json::Value> = per
            .iter()
            .map(|(k, (n, t, b))| {
                (k.to_string(), json!({"sessions": n, "tool_results": t, "tool_result_bytes": b}))
            })
            .collect();
        let per_file: Vec<serde_json::Value> = rows
            .iter()
            .map(|f| {
                json!({
                    "file": f.path.display().to_string(), "format": f.format.map(Format::name),
                    "sessions": f.sessions, "messages": f.messages, "tool_calls": f.tool_calls,
                    "tool_results": f.tool_results,
                })
            })
            .collect();
        out::print_json(&json!({
            "files": files, "bytes_in": bytes_in,
            "sessions": sessions.len(), "sessions_new": r.sessions_new, "sessions_unchanged": r.sessions_unchanged,
            "sessions_extended": r.sessions_extended, "sessions_rewritten": r.sessions_rewritten,
            "messages_replaced": r.messages_replaced, "messages": r.messages, "tool_results": r.tool_results,
            "archived": r.archived, "linked": r.linked,
            "compactions": r.compactions, "compactions_refused": r.compactions_refused,
            "interrupted": r.interrupted, "phase": "importing", "sessions_done": done,
            "per_file": per_file,
            "log_bytes": st.log_bytes, "index_bytes": st.index_bytes,
            "per_format": per_format,
            "problems": problems.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        }))?;
    } else {
        println!("{:<16} {:>8} {:>12} {:>14}", "format", "sessions", "tool results", "result bytes");
        for (k, (n, t, b)) in &per {
            println!("{k:<16} {:>8} {:>12} {:>14}", num(*n), num(*t), num(*b));
        }
        println!(
            "{} files ({} in): {} sessions — {} new, {} unchanged, {} grown, {} rewritten; added {} messages, {} tool results ({} archived); {} side chains linked",
            num(files as u64),
            bytes(bytes_in),
            num(sessions.len() as u64),
            num(r.sessions_new),
            num(r.sessions_unchanged),
            num(r.sessions_extended),
            num(r.sessions_rewritten),
            num(r.messages),
            num(r.tool_results),
            num(r.archived),
            num(r.linked)
        );
        if r.sessions_rewritten > 0 {
            println!(
                "rewritten: {} stored messages differed from the transcript and were replaced (the old \
                 revision stays readable)",
                num(r.messages_replaced)
            );
        }
        if r.compactions > 0 || !r.compactions_refused.is_empty() {
            println!("condensations: {} recorded as compactions", num(r.compactions));
            for c in &r.compactions_refused {
                println!("  note: {c}");
            }
        }
        println!(
            "store {}: {} on disk (log {}, index {})",
            cli.store.display(),
            bytes(st.log_bytes + st.index_bytes),
            bytes(st.log_bytes),
            bytes(st.index_bytes)
        );
    }
    if r.interrupted {
        eprintln!(
            "interrupted: {} of {} sessions imported, each whole; {} not begun (import again to add them)",
            num(done),
            num(sessions.len() as u64),
            num(sessions.len() as u64 - done)
        );
        if let Err(e) = report_problems(&problems, a.json) {
            eprintln!("error: {}", e.0);
        }
        return Err(CliError("import interrupted (Ctrl-C)".into()));
    }
    report_problems(&problems, a.json)
}

/// Adds what one more import wrote to `r`.
fn add_report(r: &mut import::ImportReport, o: import::ImportReport) {
    r.sessions_new += o.sessions_new;
    r.sessions_unchanged += o.sessions_unchanged;
    r.sessions_extended += o.sessions_extended;
    r.sessions_rewritten += o.sessions_rewritten;
    r.messages_replaced += o.messages_replaced;
    r.messages += o.messages;
    r.tool_results += o.tool_results;
    r.archived += o.archived;
    r.linked += o.linked;
    r.compactions += o.compactions;
    r.compactions_refused.extend(o.compactions_refused);
    r.key_conflicts.extend(o.key_conflicts);
    r.interrupted |= o.interrupted;
}

/// A scratch store in the temporary directory, removed when dropped.
struct Scratch {
    dir: PathBuf,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ms(d: std::time::Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 { "-".into() } else { format!("{:.2}", a as f64 / b as f64) }
}

/// A tally as JSON: calls, tokens, cached, uncached, breaks, cost with caching.
fn tally_json(t: &Tally, p: &Price) -> serde_json::Value {
    json!({
        "calls": t.calls, "tokens": t.tokens(), "cached": t.cached, "uncached": t.uncached,
        "breaks": t.breaks, "cost": t.cost(p),
    })
}

fn waits_json(w: &Waits) -> serde_json::Value {
    json!({
        "hard_line_views": w.views, "waited": w.waited, "over_100ms": w.over_100ms,
        "longest_ms": w.longest.as_secs_f64() * 1000.0,
    })
}

fn fratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

/// The cost figures of a row (a session or a total) as JSON, ratios included.
fn cost_json(r: &ReplayRow, p: &Price) -> serde_json::Value {
    json!({
        "views": tally_json(&r.views, p),
        "views_where_resend_fits": tally_json(&r.views_fit, p),
        "resend": tally_json(&r.resend, p),
        "resend_over_window": r.resend_over,
        "naive": tally_json(&r.naive, p),
        "naive_over_hard_line": r.naive_over,
        "cost_views_over_resend": fratio(r.views_fit.cost(p), r.resend.cost(p)),
        "cost_views_over_naive": fratio(r.views.cost(p), r.naive.cost(p)),
        "breaks_views_over_naive": fratio(r.views.breaks as f64, r.naive.breaks as f64),
        "tokens_views_over_resend": fratio(r.views_fit.tokens() as f64, r.resend.tokens() as f64),
        "tokens_views_over_naive": fratio(r.views.tokens() as f64, r.naive.tokens() as f64),
    })
}

/// `replay PATH… --window N`: every session through the guard and the worker, on a scratch
/// store (the `--store` is not touched).
pub fn replay(cli: &Cli, a: &ReplayArgs) -> CliResult {
    let _ = cli;
    let price: Price = a.price.parse()?;
    let Inputs { sessions, problems, .. } = parse_all(&a.paths, &a.format)?;
    if !problems.is_empty() && sessions.is_empty() {
        return report_problems(&problems, false);
    }
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let scratch = Scratch {
        dir: std::env::temp_dir().join(format!("undertext-replay-{}-{nanos}", std::process::id())),
    };
    let store = Store::open(&scratch.dir, Options::default().durability(Durability::None))?;
    let opts = ReplayOptions {
        window: a.window,
        latency: std::time::Duration::from_millis(a.latency_ms),
        summarizer_delay: std::time::Duration::from_millis(a.summarizer_ms),
        threads: a.summarizer_threads,
        at_hard_line: if a.hard_line_wait_ms == 0 {
            HardLinePolicy::Refuse
        } else {
            HardLinePolicy::Wait(std::time::Duration::from_millis(a.hard_line_wait_ms))
        },
        // The engine's default: the worker plans for its summarizer's measured time.
        adaptive: true,
        ..ReplayOptions::default()
    };
    let worker = start_worker(&store, &opts)?;
    let pb = bar(sessions.len() as u64, "replaying", !a.json);
    let mut rows: Vec<ReplayRow> = Vec::new();
    for s in &sessions {
        pb.set_message(s.title.chars().take(50).collect::<String>());
        rows.push(replay_session(&store, "replay", s, &opts)?);
        pb.inc(1);
    }
    pb.finish_and_clear();
    let errors = worker.errors();
    worker.stop();
    store.close()?;
    drop(scratch);
    let mut totals: BTreeMap<String, (u64, ReplayRow)> = BTreeMap::new();
    let mut all = ReplayRow::default();
    for r in &rows {
        let (n, t) = totals.entry(r.format.clone()).or_default();
        *n += 1;
        t.merge(r);
        all.merge(r);
    }
    if a.json {
        let list: Vec<serde_json::Value> = rows
            .iter()
            .zip(&sessions)
            .map(|(r, s)| {
                json!({
                    "key": r.key, "title": r.title, "format": r.format, "source": s.source.display().to_string(),
                    "steps": r.steps,
                    "naive_tokens": r.naive_tokens, "guarded_tokens": r.guarded_tokens, "peak_tokens": r.peak_tokens,
                    "previews": r.previews, "archived": r.archived, "checkpoints": r.checkpoints, "refused": r.refused,
                    "unservable": r.unservable, "unservable_reason": r.unservable_reason,
                    "stall_ms": r.stall.as_secs_f64() * 1000.0, "recovered_bytes": r.recovered_bytes,
                    "recovery_mismatches": r.recovery_mismatches,
                    "cost": cost_json(r, &price), "waits": waits_json(&r.waits),
                })
            })
            .collect();
        let total_json = |n: u64, t: &ReplayRow| {
            json!({
                "sessions": n, "steps": t.steps, "naive_tokens": t.naive_tokens, "guarded_tokens": t.guarded_tokens,
                "previews": t.previews, "checkpoints": t.checkpoints, "refused": t.refused,
                "unservable": t.unservable, "stall_ms": t.stall.as_secs_f64() * 1000.0,
                "cost": cost_json(t, &price), "waits": waits_json(&t.waits),
            })
        };
        let mut per_format = serde_json::Map::new();
        for (f, (n, t)) in &totals {
            per_format.insert(f.clone(), total_json(*n, t));
        }
        out::print_json(&json!({
            "window": a.window, "latency_ms": a.latency_ms, "summarizer_ms": a.summarizer_ms, "summarizer_threads": a.summarizer_threads,
            "hard_line_wait_ms": a.hard_line_wait_ms,
            "price": {"input": price.input, "cached": price.cached, "cache_write": price.cache_write},
            "sessions": list, "totals": per_format, "all": total_json(rows.len() as u64, &all),
            "worker_errors": errors,
        }))?;
    } else {
        println!(
            "{:<44} {:>6} {:>13} {:>13} {:>6} {:>9} {:>8} {:>8} {:>6} {:>7} {:>7} {:>9} {:>10}",
            "session",
            "steps",
            "resend all",
            "guarded",
            "ratio",
            "peak",
            "previews",
            "archived",
            "swaps",
            "refused",
            "unserv.",
            "stall ms",
            "read back"
        );
        for r in &rows {
            print_row(&r.title, r);
        }
        println!("totals per format (window {} tokens, latency {} ms):", num(a.window), a.latency_ms);
        for (f, (n, t)) in &totals {
            print_row(&format!("{f} ({n} sessions)"), t);
        }
        println!();
        println!(
            "input cost with prompt caching (the longest common prefix of whole messages with the previous \
             request; {price} per million tokens; summarizer {} ms a call, hard-line wait up to {} ms):",
            a.summarizer_ms, a.hard_line_wait_ms
        );
        println!(
            "{:<30} {:>6} | {:>12} {:>9} {:>7} | {:>9} {:>7} {:>5} | {:>12} {:>9} {:>7} | {:>8} {:>8} {:>7} | {:>5} {:>6} {:>6} {:>9}",
            "format",
            "calls",
            "views tok",
            "cost",
            "breaks",
            "resend $",
            "r.calls",
            "over",
            "naive tok",
            "cost",
            "breaks",
            "v/resend",
            "v/naive",
            "brk v/n",
            "hard",
            "waited",
            ">100ms",
            "longest"
        );
        for (f, (n, t)) in &totals {
            print_cost_row(&format!("{f} ({n} sessions)"), t, &price);
        }
        print_cost_row(&format!("all ({} sessions)", rows.len()), &all, &price);
        for r in rows.iter().filter(|r| r.unservable > 0) {
            if let Some(why) = &r.unservable_reason {
                println!("unservable: {} ({} view(s)): {why}", r.title, r.unservable);
            }
        }
        if let Some(first) = errors.first() {
            eprintln!("worker: {} failed job(s) (counted, not fatal), the first: {first}", errors.len());
        }
    }
    let mismatches: u64 = rows.iter().map(|r| r.recovery_mismatches).sum();
    if mismatches > 0 {
        return Err(CliError(format!("{mismatches} archived result(s) did not read back exactly")));
    }
    report_problems(&problems, a.json)
}

fn fmt_ratio(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{x:.2}"))
}

fn print_cost_row(name: &str, r: &ReplayRow, p: &Price) {
    let name: String = name.chars().take(30).collect();
    println!(
        "{name:<30} {:>6} | {:>12} {:>9.3} {:>7} | {:>9.3} {:>7} {:>5} | {:>12} {:>9.3} {:>7} | {:>8} {:>8} {:>7} | {:>5} {:>6} {:>6} {:>9}",
        num(r.views.calls),
        num(r.views.tokens()),
        r.views.cost(p),
        num(r.views.breaks),
        r.resend.cost(p),
        num(r.resend.calls),
        num(r.resend_over),
        num(r.naive.tokens()),
        r.naive.cost(p),
        num(r.naive.breaks),
        fmt_ratio(fratio(r.views_fit.cost(p), r.resend.cost(p))),
        fmt_ratio(fratio(r.views.cost(p), r.naive.cost(p))),
        fmt_ratio(fratio(r.views.breaks as f64, r.naive.breaks as f64)),
        num(r.waits.views),
        num(r.waits.waited),
        num(r.waits.over_100ms),
        ms(r.waits.longest)
    );
}

fn print_row(name: &str, r: &ReplayRow) {
    let name: String = name.chars().take(44).collect();
    let back = if r.recovery_mismatches == 0 {
        format!("ok {}", bytes(r.recovered_bytes))
    } else {
        format!("{} BAD", r.recovery_mismatches)
    };
    println!(
        "{name:<44} {:>6} {:>13} {:>13} {:>6} {:>9} {:>8} {:>8} {:>6} {:>7} {:>7} {:>9} {:>10}",
        num(r.steps),
        num(r.naive_tokens),
        num(r.guarded_tokens),
        ratio(r.guarded_tokens, r.naive_tokens),
        num(r.peak_tokens),
        num(r.previews),
        num(r.archived),
        num(r.checkpoints),
        num(r.refused),
        num(r.unservable),
        ms(r.stall),
        back
    );
}
