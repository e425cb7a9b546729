//! A reader of the read-only soak (`tests/tests/read_only_soak.rs`, `scripts/ro-soak`): opens
//! the store read-only, prints `ready`, then in rounds until the writer is done: reads the
//! acknowledgement table, refreshes, and checks every chat the table lists: it holds at least
//! the acknowledged messages, and every message not checked before reads exactly as
//! [`soak_message`] (plus a few earlier ones at random, read again). A chat missing after
//! the refresh must be one the table now says is being deleted. A refresh that says the log
//! was replaced (the writer's `gc`) reopens the store (retrying while the collection swaps
//! the log in) and checks everything again. Any damage warning, wrong byte or missing
//! acknowledged message exits with status 1 and says what; at the end it prints
//! `done rounds=… refreshes=… reopens=… open_retries=… checked=… cpu_ms=… last_error=…`.
//!
//! With `PHASE_MS` > 0 it rests (no refresh, no read) in the even phases of that many
//! milliseconds from the writer's start (see `ro_soak_writer`).
//!
//! Usage: `ro_soak_reader STORE_DIR ACK_FILE [PAUSE_MS] [SEED] [PHASE_MS]`

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use undertext::{ChatId, Error, Store};
use undertext_tests::Rng;
use undertext_tests::ro_soak::{Acks, OWNER, check_message, now_ms, resting};

fn bad(what: impl std::fmt::Display) -> ! {
    eprintln!("ro_soak_reader {}: bad: {what}", std::process::id());
    std::process::exit(1)
}

fn say(line: &str) {
    let mut o = std::io::stdout().lock();
    if writeln!(o, "{line}").and_then(|_| o.flush()).is_err() {
        std::process::exit(3);
    }
}

#[derive(Default)]
struct Stats {
    rounds: u64,
    rested: u64,
    refreshes: u64,
    reopens: u64,
    open_retries: u64,
    checked: u64,
    replaced_error: String,
}

/// Opens read-only, retrying for up to a minute while a collection swaps the log in.
fn open(dir: &str, stats: &mut Stats) -> Store {
    let start = Instant::now();
    loop {
        match Store::open_read_only(dir) {
            Ok(s) => {
                if !s.open_warnings().is_empty() {
                    bad(format!("open warnings: {:?}", s.open_warnings()));
                }
                return s;
            }
            Err(_) if start.elapsed() < Duration::from_secs(60) => {
                stats.open_retries += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => bad(format!("open_read_only failed for a minute: {e}")),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: ro_soak_reader STORE_DIR ACK_FILE [PAUSE_MS] [SEED]");
        std::process::exit(2);
    }
    let (dir, ack_path) = (&args[1], Path::new(&args[2]));
    let pause = Duration::from_millis(args.get(3).and_then(|a| a.parse().ok()).unwrap_or(10));
    let mut rng = Rng::new(args.get(4).and_then(|a| a.parse().ok()).unwrap_or(1));
    let phase_ms: u64 = args.get(5).and_then(|a| a.parse().ok()).unwrap_or(0);
    let mut stats = Stats::default();
    let mut store = open(dir, &mut stats);
    // Per chat: how many messages were checked byte for byte since the last (re)open.
    let mut checked: HashMap<u64, u64> = HashMap::new();
    say("ready");
    loop {
        let acks = Acks::read(ack_path).unwrap_or_else(|e| bad(e));
        if phase_ms > 0 && !acks.done && resting(acks.start_ms, phase_ms, now_ms()) {
            stats.rested += 1;
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        match store.refresh() {
            Ok(r) => {
                stats.refreshes += 1;
                if !r.warnings.is_empty() {
                    bad(format!("refresh warnings: {:?}", r.warnings));
                }
            }
            Err(Error::ReadOnly(m)) if m.contains("open the store again") => {
                stats.replaced_error = m;
                stats.reopens += 1;
                store = open(dir, &mut stats);
                checked.clear();
            }
            Err(e) => bad(format!("refresh: {e}")),
        }
        for slot in acks.slots.iter().filter(|s| !s.deleting) {
            let chat = match store.chat(OWNER, ChatId(slot.chat)) {
                Ok(c) => c,
                Err(Error::NotFound { .. }) => {
                    // Deleted since the table was read: the table must say so now.
                    let now = Acks::read(ack_path).unwrap_or_else(|e| bad(e));
                    if now.slots.iter().any(|s| s.chat == slot.chat && !s.deleting) {
                        bad(format!(
                            "chat {} (with {} acknowledged messages) is not found",
                            slot.chat, slot.count
                        ));
                    }
                    continue;
                }
                Err(e) => bad(format!("chat {}: {e}", slot.chat)),
            };
            let len = chat.len();
            if len < slot.count {
                bad(format!(
                    "chat {}: {len} messages after a refresh, {} were acknowledged before it",
                    slot.chat, slot.count
                ));
            }
            let from = checked.get(&slot.chat).copied().unwrap_or(0).min(len);
            let msgs =
                chat.range(from..len).unwrap_or_else(|e| bad(format!("chat {}: range: {e}", slot.chat)));
            if msgs.len() as u64 != len - from {
                bad(format!("chat {}: range {from}..{len} gave {} messages", slot.chat, msgs.len()));
            }
            for (k, m) in msgs.iter().enumerate() {
                check_message(slot.chat, from + k as u64, m).unwrap_or_else(|e| bad(e));
            }
            for _ in 0..4.min(from) {
                let s = rng.range(0, from);
                let m = chat.get(s).unwrap_or_else(|e| bad(format!("chat {} get {s}: {e}", slot.chat)));
                check_message(slot.chat, s, &m).unwrap_or_else(|e| bad(e));
            }
            stats.checked += msgs.len() as u64;
            checked.insert(slot.chat, len);
        }
        stats.rounds += 1;
        if acks.done {
            break;
        }
        std::thread::sleep(pause);
    }
    say(&format!(
        "done rounds={} rested={} refreshes={} reopens={} open_retries={} checked={} cpu_ms={} replaced_error={:?}",
        stats.rounds,
        stats.rested,
        stats.refreshes,
        stats.reopens,
        stats.open_retries,
        stats.checked,
        cpu_ms().map_or_else(|| "?".to_string(), |ms| ms.to_string()),
        stats.replaced_error
    ));
}

/// The CPU time this process used so far (user + system, milliseconds), from
/// `/proc/self/stat` (clock ticks of 10 ms); `None` where that is not readable.
fn cpu_ms() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (in parentheses, which may hold spaces): utime and
    // stime are the 14th and 15th fields of the line, the 12th and 13th after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10)
}
