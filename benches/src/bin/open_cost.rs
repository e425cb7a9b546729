//! What a fresh process pays to open a store and show its first view (issue 38), beside
//! SQLite doing the same in the same run (benches/README.md, "Cold paths").
//!
//! ```text
//! cargo build --release -p undertext-benches --bin open_cost
//! target/release/open_cost make DIR [MESSAGES [CHARS]]  # the two stores and their SQLite twins
//! target/release/open_cost run DIR [ROUNDS]      # fresh processes, interleaved; medians
//! ```
//!
//! `make` writes `DIR/long` (one chat of MESSAGES messages, default 100,000: a user turn every
//! 100 messages, assistant text between, a published checkpoint covering all but the last two
//! turns) and `DIR/many` (MESSAGES chats of one message each), and `long.sqlite` /
//! `many.sqlite` holding the same rows. `run` starts a fresh process per measure and round,
//! alternating Undertext and SQLite, and prints the medians and ratios: open; open + first view
//! (Undertext `Chat::view`; SQLite the checkpoint row, the tail from its reach, JSON-decoded);
//! the memory the open added (RSS); and the bytes on disk per chat. Each store closed cleanly
//! is opened as its seal allows (the index trusted unread), and again after its seal is broken
//! (rows "verified": a page written back in place, as a crash or a copy leaves it), which
//! verifies every page of the index. The full
//! load (rows "load every message") reads every message of the long chat after the open:
//! Undertext `Chat::messages`, SQLite every row with its body JSON-decoded; made at two
//! sizes (`make` twice), its time per message shows whether a full load is linear.

use std::path::{Path, PathBuf};
use std::time::Instant;

use undertext::{
    Budget, ChatId, ChatMeta, CheckpointOptions, Durability, Extractive, IndexAtOpen, NewMessage, Options,
    Store,
};
use undertext_benches::{Result, random_bytes};

const OWNER: &str = "bench";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |k: usize| args.get(k).map(String::as_str);
    match (arg(0), arg(1)) {
        (Some("make"), Some(dir)) => {
            make(Path::new(dir), arg(2).map_or(Ok(100_000), str::parse)?, arg(3).map(str::parse).transpose()?)
        }
        (Some("run"), Some(dir)) => run(Path::new(dir), arg(2).map_or(Ok(7), str::parse)?),
        (Some("child"), Some(what)) => child(what, Path::new(arg(2).ok_or("child WHAT DIR")?)),
        _ => Err("usage: open_cost make DIR [MESSAGES] | run DIR [ROUNDS]".into()),
    }
}

/// A message's text: ~300 bytes of words.
fn text(i: u64) -> String {
    random_bytes(48, i)
        .chunks(6)
        .map(|w| w.iter().map(|b| (b'a' + b % 26) as char).collect::<String>())
        .collect::<Vec<_>>()
        .join(" ")
        .repeat(5)
}

fn message(i: u64) -> NewMessage {
    if i.is_multiple_of(100) { NewMessage::user(text(i)) } else { NewMessage::assistant(text(i)) }
}

fn fast() -> Options {
    Options::default().durability(Durability::None)
}

fn make(dir: &Path, n: u64, many_chars: Option<usize>) -> Result<()> {
    let many_text = |i: u64| match many_chars {
        Some(c) => format!("chat {i}: {}", text(i)).chars().take(c).collect(),
        None => text(i),
    };
    std::fs::create_dir_all(dir)?;
    let t = Instant::now();
    let store = Store::open(dir.join("long"), fast())?;
    let id = store.create_chat(OWNER, ChatMeta::default())?;
    let chat = store.chat(OWNER, id)?;
    for b in 0..n.div_ceil(1000) {
        chat.append_batch((b * 1000..((b + 1) * 1000).min(n)).map(message).collect())?;
    }
    let cp = chat.build_checkpoint(&Extractive::default(), &CheckpointOptions::default())?;
    chat.publish_checkpoint(&cp)?;
    let sql = rusqlite::Connection::open(dir.join("long.sqlite"))?;
    sql.execute_batch(
        "PRAGMA journal_mode=WAL;
         CREATE TABLE m (chat INTEGER, seq INTEGER, role TEXT, body TEXT, PRIMARY KEY (chat, seq)) WITHOUT ROWID;
         CREATE TABLE cp (chat INTEGER PRIMARY KEY, reach INTEGER, summary TEXT); BEGIN;",
    )?;
    for m in chat.messages()? {
        let Some(undertext::Part::Text(t)) = m.parts.first() else { continue };
        let body = serde_json::json!([{"type": "text", "text": t}]).to_string();
        sql.execute(
            "INSERT INTO m VALUES (1, ?1, ?2, ?3)",
            rusqlite::params![m.seq as i64, m.role.as_str(), body],
        )?;
    }
    sql.execute("INSERT INTO cp VALUES (1, ?1, ?2)", rusqlite::params![cp.reach as i64, cp.summary])?;
    sql.execute_batch("COMMIT")?;
    std::fs::write(dir.join("long.id"), id.to_string())?;
    std::fs::write(dir.join("long.count"), n.to_string())?;
    store.close()?;
    println!("long: {n} messages, checkpoint reach {} ({:.1} s)", cp.reach, t.elapsed().as_secs_f64());

    let t = Instant::now();
    let store = Store::open(dir.join("many"), fast())?;
    let sql = rusqlite::Connection::open(dir.join("many.sqlite"))?;
    sql.execute_batch(
        "PRAGMA journal_mode=WAL;
         CREATE TABLE chats (id INTEGER PRIMARY KEY, owner TEXT, title TEXT, created INTEGER, last INTEGER);
         CREATE TABLE m (chat INTEGER, seq INTEGER, role TEXT, body TEXT, PRIMARY KEY (chat, seq)) WITHOUT ROWID;
         BEGIN;",
    )?;
    let mut last = ChatId(0);
    for i in 0..n {
        let meta = ChatMeta { title: format!("chat {i}"), ..ChatMeta::default() };
        last = store.create_chat(OWNER, meta)?;
        store.chat(OWNER, last)?.append(NewMessage::user(many_text(i)))?;
        let body = serde_json::json!([{"type": "text", "text": many_text(i)}]).to_string();
        sql.execute(
            "INSERT INTO chats VALUES (?1, ?2, ?3, 0, 0)",
            rusqlite::params![i as i64 + 1, OWNER, format!("chat {i}")],
        )?;
        sql.execute("INSERT INTO m VALUES (?1, 0, 'user', ?2)", rusqlite::params![i as i64 + 1, body])?;
    }
    sql.execute_batch("COMMIT")?;
    std::fs::write(dir.join("many.id"), last.to_string())?;
    store.close()?;
    println!("many: {n} one-message chats ({:.1} s)", t.elapsed().as_secs_f64());
    Ok(())
}

/// The figures of one fresh process, printed as `key=value` words.
fn child(what: &str, dir: &Path) -> Result<()> {
    let rss0 = rss_kib();
    let t = Instant::now();
    let budget = Budget::new(32_000, 0);
    let (opened, viewed) = match what {
        "long" | "many" | "long-verified" | "many-verified" => {
            let verified = what.ends_with("-verified");
            let what = what.trim_end_matches("-verified");
            let t = if verified {
                // The seal the last clean close left is broken (a page written back in place,
                // same bytes): this open verifies every page, as after a crash or a copy.
                use std::os::unix::fs::FileExt;
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(dir.join(what).join("index.redb"))?;
                let mut page = vec![0u8; 4096];
                f.read_exact_at(&mut page, 0)?;
                f.write_all_at(&page, 0)?;
                Instant::now()
            } else {
                t
            };
            let store = Store::open(dir.join(what), Options::default().create_if_missing(false))?;
            let opened = t.elapsed();
            let id: ChatId = std::fs::read_to_string(dir.join(format!("{what}.id")))?.parse()?;
            let v = store.chat(OWNER, id)?.view(&budget)?;
            std::hint::black_box(v.messages().len());
            let viewed = t.elapsed();
            // Checked after the timed part: `stats` lists the log and counts the blobs.
            let want = if verified { IndexAtOpen::Verified } else { IndexAtOpen::Sealed };
            let found = store.stats()?.index_at_open;
            if found != want {
                return Err(format!("{what}: expected the index {want:?} at open, found {found:?}").into());
            }
            // Closed (not timed), so that the next process opens a store closed cleanly.
            store.close()?;
            (opened, viewed)
        }
        "long-load" => {
            let store = Store::open(dir.join("long"), Options::default().create_if_missing(false))?;
            let opened = t.elapsed();
            let id: ChatId = std::fs::read_to_string(dir.join("long.id"))?.parse()?;
            let all = store.chat(OWNER, id)?.messages()?;
            let loaded = t.elapsed();
            std::hint::black_box(all.len());
            println!("rss_after_kib={}", rss_kib().saturating_sub(rss0));
            drop(all);
            store.close()?;
            (opened, loaded)
        }
        "long.sqlite-load" => {
            let conn = rusqlite::Connection::open(dir.join("long.sqlite"))?;
            let opened = t.elapsed();
            let mut st = conn.prepare("SELECT seq, role, body FROM m WHERE chat = 1 ORDER BY seq")?;
            let rows = st.query_map([], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
            })?;
            let mut all = Vec::new();
            for row in rows {
                let (seq, role, body) = row?;
                all.push((seq, role, serde_json::from_str::<serde_json::Value>(&body)?));
            }
            let loaded = t.elapsed();
            std::hint::black_box(all.len());
            println!("rss_after_kib={}", rss_kib().saturating_sub(rss0));
            (opened, loaded)
        }
        "long.sqlite" | "many.sqlite" => {
            let conn = rusqlite::Connection::open(dir.join(what))?;
            let chat: i64 = if what == "long.sqlite" {
                1
            } else {
                conn.query_row("SELECT id FROM chats WHERE id = (SELECT max(id) FROM chats)", [], |r| {
                    r.get(0)
                })?
            };
            let opened = t.elapsed();
            let reach: i64 = if what == "long.sqlite" {
                conn.query_row("SELECT reach FROM cp WHERE chat = ?1", [chat], |r| r.get(0))?
            } else {
                0
            };
            let mut st =
                conn.prepare("SELECT seq, role, body FROM m WHERE chat = ?1 AND seq >= ?2 ORDER BY seq")?;
            let rows = st.query_map([chat, reach], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
            })?;
            let mut n = 0;
            for row in rows {
                let (_, _, body) = row?;
                n += serde_json::from_str::<serde_json::Value>(&body)?.as_array().map_or(0, Vec::len);
            }
            std::hint::black_box(n);
            (opened, t.elapsed())
        }
        _ => return Err(format!("unknown child {what}").into()),
    };
    println!(
        "open_us={} view_us={} rss_kib={}",
        opened.as_micros(),
        viewed.as_micros(),
        rss_kib().saturating_sub(rss0)
    );
    Ok(())
}

/// The resident set of this process, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn run(dir: &Path, rounds: usize) -> Result<()> {
    let exe = std::env::current_exe()?;
    let whats = [
        "long",
        "long.sqlite",
        "many",
        "many.sqlite",
        "long-verified",
        "many-verified",
        "long-load",
        "long.sqlite-load",
    ];
    let mut figures: Vec<Vec<[u64; 3]>> = vec![Vec::new(); whats.len()];
    for _ in 0..rounds {
        for (k, what) in whats.iter().enumerate() {
            let out = std::process::Command::new(&exe).args(["child", what]).arg(dir).output()?;
            if !out.status.success() {
                return Err(format!("child {what}: {}", String::from_utf8_lossy(&out.stderr)).into());
            }
            let text = String::from_utf8(out.stdout)?;
            let field = |name: &str| -> Result<u64> {
                let w = text.split_whitespace().find_map(|w| w.strip_prefix(name)).ok_or("missing field")?;
                Ok(w.trim_start_matches('=').parse()?)
            };
            let rss = if what.ends_with("-load") { field("rss_after_kib")? } else { field("rss_kib")? };
            figures[k].push([field("open_us")?, field("view_us")?, rss]);
        }
    }
    let median = |k: usize, f: usize| -> f64 {
        let mut v: Vec<u64> = figures[k].iter().map(|x| x[f]).collect();
        v.sort_unstable();
        v[v.len() / 2] as f64
    };
    // The first view alone, per process (its time after the open), then the median.
    let view_alone = |k: usize| -> f64 {
        let mut v: Vec<u64> = figures[k].iter().map(|x| x[1].saturating_sub(x[0])).collect();
        v.sort_unstable();
        v[v.len() / 2] as f64
    };
    println!("medians of {rounds} fresh processes each, interleaved");
    for (name, u, s) in [
        ("one long chat (index sealed by the last clean close)", 0, 1),
        ("many one-message chats (index sealed)", 2, 3),
        ("one long chat, index verified at open (seal broken)", 4, 1),
        ("many one-message chats, index verified at open (seal broken)", 5, 3),
    ] {
        println!(
            "{name}: open {:.2} ms vs SQLite {:.2} ms ({:.1}x); open + first view {:.2} ms vs {:.2} ms ({:.2}x); \
             RSS added {:.1} MiB vs {:.1} MiB",
            median(u, 0) / 1e3,
            median(s, 0) / 1e3,
            median(u, 0) / median(s, 0).max(1.0),
            median(u, 1) / 1e3,
            median(s, 1) / 1e3,
            median(u, 1) / median(s, 1).max(1.0),
            median(u, 2) / 1024.0,
            median(s, 2) / 1024.0,
        );
        println!(
            "  the first view alone (after the open, per process): {:.2} ms vs SQLite {:.2} ms ({:.2}x)",
            view_alone(u) / 1e3,
            view_alone(s) / 1e3,
            view_alone(u) / view_alone(s).max(1.0),
        );
    }
    let messages: f64 =
        std::fs::read_to_string(dir.join("long.count")).map_or(Ok(100_000.0), |s| s.trim().parse())?;
    println!(
        "load every message of the long chat ({messages} messages): {:.1} ms ({:.2} us a message) vs SQLite \
         {:.1} ms ({:.2} us) ({:.2}x); RSS with them loaded {:.1} MiB ({:.0} B a message) vs {:.1} MiB ({:.0} B) ({:.2}x)",
        median(6, 1) / 1e3,
        median(6, 1) / messages,
        median(7, 1) / 1e3,
        median(7, 1) / messages,
        median(6, 1) / median(7, 1).max(1.0),
        median(6, 2) / 1024.0,
        median(6, 2) * 1024.0 / messages,
        median(7, 2) / 1024.0,
        median(7, 2) * 1024.0 / messages,
        median(6, 2) / median(7, 2).max(1.0),
    );
    let size = |p: PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let chats: f64 = std::fs::read_to_string(dir.join("many.id"))?.parse::<ChatId>()?.0 as f64;
    println!(
        "many: index.redb {:.0} B per chat, log {:.0} B per chat; SQLite {:.0} B per chat ({:.2}x index alone)",
        size(dir.join("many/index.redb")) as f64 / chats,
        dir_bytes(&dir.join("many/log")) as f64 / chats,
        size(dir.join("many.sqlite")) as f64 / chats,
        size(dir.join("many/index.redb")) as f64 / size(dir.join("many.sqlite")) as f64,
    );
    Ok(())
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|it| it.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
        .unwrap_or(0)
}
