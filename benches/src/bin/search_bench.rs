//! Search over the real transcripts (issue 33): imports every transcript under
//! `shared/data/transcripts`, repeated with variations until the store holds about `--mb`
//! MB of searchable text, into two stores in turn — one with no search indexing at all, one
//! whose background search indexer (started by a first search, every `--every-ms`) keeps up
//! while the appends go on — and reports
//! append throughput for both, the time to catch up the rest, the search index's size
//! against the text, and search latency (p50, p99, max) over `--queries` queries of one to
//! three words drawn from the data.
//!
//! ```text
//! cargo run --release -p undertext-benches --bin search_bench -- [--mb 100] [--queries 300] [--every-ms 200] [--seed N]
//! ```
//!
//! Stores are made under `UNDERTEXT_BENCH_TMPDIR` (default `target/bench-tmp`, a real disk),
//! in `Durability::Group`, one owner, one chat per session copy.

use std::time::{Duration, Instant};

use undertext::import::{Format, parse_file, transcript_files};
use undertext::{NewMessage, Options, Part, SearchScope, Store, ToolContent};
use undertext_benches::{Result, Rng, bench_tempdir};

const OWNER: &str = "bench";

fn arg(args: &[String], name: &str, default: u64) -> Result<u64> {
    match args.iter().position(|a| a == name) {
        Some(i) => Ok(args.get(i + 1).ok_or(format!("{name} needs a value"))?.parse()?),
        None => Ok(default),
    }
}

/// The searchable text of a message, in bytes (what the index covers).
fn text_bytes(m: &NewMessage) -> u64 {
    m.parts
        .iter()
        .map(|p| match p {
            Part::Text(t) | Part::Summary(t) => t.len(),
            Part::ToolCall { name, args, .. } => name.len() + args.len(),
            Part::ToolResult { content: ToolContent::Text(t), .. } => t.len(),
            Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } => archive.bytes as usize,
            Part::ApprovalRequest { prompt, .. } => prompt.len(),
            _ => 0,
        } as u64)
        .sum()
}

/// Copy `k` of a session: every text and inline result gains a word of the copy (so copies
/// are distinct documents, as a harness's many similar sessions are).
fn vary(messages: &[NewMessage], k: u64) -> Vec<NewMessage> {
    if k == 0 {
        return messages.to_vec();
    }
    messages
        .iter()
        .map(|m| {
            let parts = m
                .parts
                .iter()
                .map(|p| match p {
                    Part::Text(t) => Part::Text(format!("{t} (copy{k})")),
                    Part::ToolResult { call_id, content: ToolContent::Text(t), is_error } => {
                        Part::ToolResult {
                            call_id: call_id.clone(),
                            content: ToolContent::Text(format!("copy{k}: {t}")),
                            is_error: *is_error,
                        }
                    }
                    other => other.clone(),
                })
                .collect();
            NewMessage { parts, ..m.clone() }
        })
        .collect()
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

struct Run {
    secs: f64,
    messages: u64,
    text: u64,
}

/// Appends `sessions` (one chat each) to `store`; with `index`, a first search starts the
/// store's background search indexer (`Options::search_index_interval`), which catches up
/// the chats that grew while the appends go on.
fn append_all(store: &Store, sessions: &[Vec<NewMessage>], index: bool) -> Result<Run> {
    if index {
        store.search(OWNER, "start", SearchScope::all(), 1)?;
    }
    let t = Instant::now();
    let (mut messages, mut text) = (0, 0);
    for s in sessions {
        let chat = store.chat(OWNER, store.create_chat(OWNER, Default::default())?)?;
        for m in s {
            text += text_bytes(m);
        }
        // A harness appends a step at a time: a message, or an assistant turn's batch.
        for m in s.chunks(4) {
            chat.append_batch(m.to_vec())?;
            messages += m.len() as u64;
        }
    }
    Ok(Run { secs: t.elapsed().as_secs_f64(), messages, text })
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mb = arg(&args, "--mb", 100)?;
    let queries = arg(&args, "--queries", 300)? as usize;
    let seed = arg(&args, "--seed", 33)?;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/transcripts");
    let mut base = Vec::new();
    for f in transcript_files(&[root])? {
        match parse_file(&f, Format::Auto) {
            Ok(p) => base.extend(p.sessions.into_iter().map(|s| s.messages).filter(|m| !m.is_empty())),
            Err(e) => eprintln!("skipped {}: {e}", f.display()),
        }
    }
    let base_text: u64 = base.iter().flatten().map(text_bytes).sum();
    let copies = (mb << 20).div_ceil(base_text.max(1));
    let mut sessions = Vec::new();
    for k in 0..copies {
        sessions.extend(base.iter().map(|s| vary(s, k)));
    }
    println!(
        "{} sessions in the transcripts, {:.1} MB of text; {copies} copies: {} chats",
        base.len(),
        base_text as f64 / 1e6,
        sessions.len()
    );
    let every = Duration::from_millis(arg(&args, "--every-ms", 200)?);
    let opts =
        || Options::default().durability(undertext::Durability::Group).search_index_interval(Some(every));

    // Appends without indexing and with the background indexer, in turns (the first of a
    // process's runs pays for warming up): plain, indexed, plain, indexed; the second store
    // indexed is the one measured below.
    let tmp = bench_tempdir()?;
    let rate = |r: &Run| (r.messages as f64 / r.secs, r.text as f64 / 1e6 / r.secs);
    let mut store = None;
    let mut run = None;
    for round in 0..2 {
        let dir = tmp.path().join(format!("plain{round}"));
        let plain = {
            let s = Store::open(&dir, opts())?;
            let r = append_all(&s, &sessions, false)?;
            // The whole index built by one search afterwards: the indexing's own cost.
            let t = Instant::now();
            s.search(OWNER, "the", SearchScope::all(), 1)?;
            let secs = t.elapsed().as_secs_f64();
            println!(
                "round {round}: the first search indexes everything: {secs:.2} s ({:.1} MB/s of text)",
                r.text as f64 / 1e6 / secs
            );
            s.close()?;
            r
        };
        std::fs::remove_dir_all(&dir)?;
        let (m, t) = rate(&plain);
        println!(
            "round {round}: appends, no search indexing:            {:>6.2} s  {m:>7.0} messages/s  {t:>5.1} MB/s of text",
            plain.secs
        );
        let dir = tmp.path().join(format!("indexed{round}"));
        let s = Store::open(&dir, opts())?;
        let r = append_all(&s, &sessions, true)?;
        let (m, t) = rate(&r);
        println!(
            "round {round}: appends, background indexing every {:>3} ms: {:>6.2} s  {m:>7.0} messages/s  {t:>5.1} MB/s of text ({:+.1} % time)",
            every.as_millis(),
            r.secs,
            (r.secs / plain.secs - 1.0) * 100.0
        );
        if round == 0 {
            s.close()?;
            std::fs::remove_dir_all(&dir)?;
        } else {
            store = Some(s);
            run = Some(r);
        }
    }
    let (Some(store), Some(run)) = (store, run) else { return Err("no run".into()) };
    let t = Instant::now();
    store.search(OWNER, "the", SearchScope::all(), 1)?;
    println!("catching up the rest: {:.2} s", t.elapsed().as_secs_f64());
    let index = store.search_index_bytes();
    let log: u64 = std::fs::read_dir(tmp.path().join("indexed1").join("log"))?
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!(
        "text {:.1} MB; search index {:.1} MB = {:.3}x the text (log files {:.1} MB)",
        run.text as f64 / 1e6,
        index as f64 / 1e6,
        index as f64 / run.text as f64,
        log as f64 / 1e6
    );

    // Queries: one to three words drawn from the data's own text parts.
    let mut rng = Rng::new(seed);
    let words: Vec<String> = base
        .iter()
        .flatten()
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            Part::ToolResult { content: ToolContent::Text(t), .. } => Some(t.as_str()),
            _ => None,
        })
        .flat_map(|t| t.split(|c: char| !c.is_alphanumeric()))
        .filter(|w| w.len() >= 3 && w.len() <= 20)
        .map(str::to_lowercase)
        .collect();
    let mut lat = Vec::new();
    let mut found = 0;
    for q in 0..queries {
        let n = 1 + q % 3;
        let query: Vec<&str> =
            (0..n).map(|_| words[(rng.next_u64() % words.len() as u64) as usize].as_str()).collect();
        let query = query.join(" ");
        let t = Instant::now();
        let hits = store.search(OWNER, &query, SearchScope::all(), 10)?;
        lat.push(t.elapsed());
        found += usize::from(!hits.is_empty());
    }
    lat.sort();
    println!(
        "{queries} searches (1-3 words drawn from the data, limit 10, all {} chats): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {found} with hits",
        sessions.len(),
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        pct(&lat, 1.0)
    );
    // Reopened: the index is read from its files, nothing to catch up.
    store.close()?;
    let t = Instant::now();
    let store = Store::open(tmp.path().join("indexed1"), opts())?;
    let hits = store.search(OWNER, "error", SearchScope::all(), 10)?;
    println!("reopen + first search: {:.1} ms ({} hits)", t.elapsed().as_secs_f64() * 1000.0, hits.len());
    Ok(())
}
