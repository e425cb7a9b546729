//! Several processes appending to one chat against each its own chat, on one PostgreSQL
//! (issue 35: "4 processes appending to one chat: 3x slower than on separate chats; measure
//! where the time goes"); benches/README.md, "Fleet mode: one chat, several writers".
//!
//! ```text
//! UNDERTEXT_FLEET_URL=postgres://… cargo run --release -p undertext-benches --features fleet \
//!     --bin fleet_contention [-- PROCS APPENDS ROUNDS]
//! ```
//!
//! Each round runs two rows one after the other (so a change of the machine's load hits both):
//! `one chat` (PROCS child processes appending to the same chat) and `own chats` (each child
//! its own chat). A child opens the store and its `Chat` handle (held, as a harness holds its
//! chats), says `ready`, waits for `go` (sent to every child at once), makes APPENDS
//! one-message appends (a short assistant message), and prints its elapsed time and where
//! its writes spent their time (`undertext::fleet::write_phases`: the row lock's round trip
//! and wait, pulling the others' batches, the engine's build, the batch's statement, the
//! commit, the replica's append; and `held`, from the lock and pull done to the commit done). The parent
//! prints per row the appends per second of all children (all appends over the slowest
//! child's time; medians over rounds) and the mean time per append of each phase, with the
//! server's WAL flushes per append (`pg_stat_wal.wal_sync`, several commits can share one).
//! Defaults: 4 processes, 300 appends, 3 rounds.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use undertext::{ChatId, ChatMeta, Durability, NewMessage, Options, Store};
use undertext_benches::Result;

fn opts() -> Options {
    Options::default().durability(Durability::None)
}

/// The child: `fleet_contention child URL OWNER CHAT APPENDS`.
fn child(url: &str, owner: &str, chat: u64, appends: usize) -> Result<()> {
    let store = Store::open(url, opts())?;
    let chat = store.chat(owner, ChatId(chat))?;
    let mut out = std::io::stdout();
    writeln!(out, "ready")?;
    out.flush()?;
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let before = undertext::fleet::write_phases();
    let t = Instant::now();
    for i in 0..appends {
        chat.append(NewMessage::assistant(format!("appended {i} by {}", std::process::id())))?;
    }
    let elapsed = t.elapsed();
    let after = undertext::fleet::write_phases();
    let phases: Vec<String> =
        after.iter().zip(&before).map(|(a, b)| format!("{}={}", a.0, a.1 - b.1)).collect();
    writeln!(out, "done {} {}", elapsed.as_nanos(), phases.join(" "))?;
    Ok(())
}

/// One psql value.
fn psql(url: &str, sql: &str) -> Result<String> {
    let out = Command::new("psql").args([url, "-tAc", sql]).output()?;
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

struct Run {
    per_sec: f64,
    /// Mean nanoseconds per append, per phase.
    phases: Vec<(String, f64)>,
    wal_syncs: f64,
}

fn run(url: &str, owner: &str, chats: &[u64], appends: usize) -> Result<Run> {
    let exe = std::env::current_exe()?;
    let mut kids = Vec::new();
    for chat in chats {
        let mut c = Command::new(&exe)
            .args(["child", url, owner, &chat.to_string(), &appends.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut out = BufReader::new(c.stdout.take().ok_or("no stdout")?);
        let mut line = String::new();
        out.read_line(&mut line)?;
        if line.trim() != "ready" {
            return Err(format!("child said {line:?}, expected ready").into());
        }
        kids.push((c, out));
    }
    let base = url.split('?').next().unwrap_or(url);
    let wal0: f64 = psql(base, "SELECT wal_sync FROM pg_stat_wal")?.parse()?;
    for (c, _) in &mut kids {
        writeln!(c.stdin.as_mut().ok_or("no stdin")?, "go")?;
    }
    let mut slowest = 0u128;
    let mut sums: Vec<(String, f64)> = Vec::new();
    for (mut c, mut out) in kids {
        let mut line = String::new();
        out.read_line(&mut line)?;
        let mut f = line.split_whitespace();
        if f.next() != Some("done") {
            return Err(format!("child said {line:?}").into());
        }
        slowest = slowest.max(f.next().ok_or("no time")?.parse()?);
        for (i, kv) in f.enumerate() {
            let (k, v) = kv.split_once('=').ok_or("phase")?;
            if sums.len() <= i {
                sums.push((k.to_string(), 0.0));
            }
            sums[i].1 += v.parse::<f64>()?;
        }
        c.wait()?;
    }
    let wal1: f64 = psql(base, "SELECT wal_sync FROM pg_stat_wal")?.parse()?;
    let total = (appends * chats.len()) as f64;
    Ok(Run {
        per_sec: total / (slowest as f64 / 1e9),
        phases: sums.into_iter().map(|(k, v)| (k, v / total)).collect(),
        wal_syncs: (wal1 - wal0) / total,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child") {
        return child(&args[2], &args[3], args[4].parse()?, args[5].parse()?);
    }
    let Ok(url) = std::env::var("UNDERTEXT_FLEET_URL") else {
        println!("skipped: UNDERTEXT_FLEET_URL is not set");
        return Ok(());
    };
    let procs: usize = args.get(1).map_or(Ok(4), |a| a.parse())?;
    let appends: usize = args.get(2).map_or(Ok(300), |a| a.parse())?;
    let rounds: usize = args.get(3).map_or(Ok(3), |a| a.parse())?;
    let owner = format!("bench-contention-{}", std::process::id());
    let store = Store::open(&url, opts())?;
    let mut rows: Vec<(&str, Vec<Run>)> = vec![("one chat", Vec::new()), ("own chats", Vec::new())];
    for round in 0..rounds {
        for (name, runs) in &mut rows {
            let n = if *name == "one chat" { 1 } else { procs };
            let mut ids = Vec::new();
            for _ in 0..n {
                let id = store.create_chat(
                    &owner,
                    ChatMeta { title: format!("{name} {round}"), ..Default::default() },
                )?;
                store.chat(&owner, id)?.append(NewMessage::user("start"))?;
                ids.push(id.0);
            }
            let chats: Vec<u64> = (0..procs).map(|i| ids[i % n]).collect();
            let r = run(&url, &owner, &chats, appends)?;
            eprintln!("round {round} {name}: {:.0} appends/s", r.per_sec);
            runs.push(r);
        }
    }
    println!(
        "\n{procs} processes x {appends} appends, {rounds} rounds (medians; phases: mean µs per append)\n"
    );
    let names: Vec<String> = rows[0].1[0].phases.iter().map(|p| p.0.clone()).collect();
    println!("| row | appends/s | WAL flushes per append | {} |", names.join(" | "));
    println!("|---|--:|--:|{}", "--:|".repeat(names.len()));
    for (name, runs) in &rows {
        let cells: Vec<String> = (0..names.len())
            .map(|i| format!("{:.0}", median(runs.iter().map(|r| r.phases[i].1 / 1e3).collect())))
            .collect();
        println!(
            "| {name} | {:.0} | {:.2} | {} |",
            median(runs.iter().map(|r| r.per_sec).collect()),
            median(runs.iter().map(|r| r.wal_syncs).collect()),
            cells.join(" | ")
        );
    }
    let ratio = median(rows[1].1.iter().map(|r| r.per_sec).collect())
        / median(rows[0].1.iter().map(|r| r.per_sec).collect());
    println!("\nown chats / one chat: {ratio:.2}x");
    Ok(())
}
