//! Peak memory and time of importing one long session of tiny messages (issue 34, point 2),
//! at several lengths, beside SQLite inserting the same messages in the same run
//! (benches/README.md, "Import memory").
//!
//! ```text
//! cargo build --release -p undertext-cli -p undertext-benches --bin undertext --bin import_memory
//! target/release/import_memory [SIZES] [USER_CHARS]  # default 10000,100000,1000000 and 0
//! ```
//!
//! `USER_CHARS` pads each user message with that many more characters (distinct per
//! message): over 128 characters in all, the index lists each user text by its address (a
//! view may preview it), one insert at a random place of that table per user message.
//!
//! For each size it writes one Claude Code session JSONL of that many messages (user and
//! assistant lines in turn, ~150 bytes each, a timestamp on every line), then imports it in a
//! fresh process with the `undertext` binary beside this one (`undertext --store DIR import
//! FILE`, the command a user runs) and, as the baseline, with a child of this binary that
//! reads the same file a line at a time and inserts each message into SQLite (WAL,
//! `synchronous=NORMAL`, one transaction per 10,000 rows: a bulk load that streams). It prints
//! each process's peak resident memory (`ru_maxrss` from `wait4`), wall and CPU time (user +
//! system: steadier than wall time on a shared machine), the memory per message above the
//! smallest size, and the CPU per message at the smallest and largest. Files and stores live under
//! `UNDERTEXT_BENCH_TMPDIR` (default `target/bench-tmp`) and are removed at the end.

use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use undertext_benches::Result;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("sqlite-child") {
        let (Some(file), Some(db)) = (args.get(1), args.get(2)) else {
            return Err("usage: import_memory sqlite-child FILE DB".into());
        };
        return sqlite_import(Path::new(file), Path::new(db));
    }
    let sizes: Vec<u64> = match args.first() {
        Some(s) => s.split(',').map(str::parse).collect::<std::result::Result<_, _>>()?,
        None => vec![10_000, 100_000, 1_000_000],
    };
    let pad: usize = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(0);
    let exe = std::env::current_exe()?;
    let dir_of_exe = exe.parent().ok_or("the bench binary has no folder")?;
    let cli = dir_of_exe.join("undertext");
    if !cli.exists() {
        return Err(format!(
            "{} not found: build it first (cargo build --release -p undertext-cli -p undertext-benches)",
            cli.display()
        )
        .into());
    }
    let tmp = undertext_benches::bench_tempdir()?;
    println!(
        "{:>10} {:>8} | {:>12} {:>7} {:>7} {:>8} | {:>9} {:>7} {:>7} {:>7}",
        "messages",
        "file MB",
        "undertext MB",
        "wall s",
        "CPU s",
        "index MB",
        "SQLite MB",
        "wall s",
        "CPU s",
        "db MB"
    );
    let mut rows = Vec::new();
    for &n in &sizes {
        let file = tmp.path().join(format!("session-{n}.jsonl"));
        let bytes = write_session(&file, n, pad)?;
        let store = tmp.path().join(format!("store-{n}"));
        let (ut_kb, ut_s, ut_cpu) =
            measure(std::process::Command::new(&cli).arg("--store").arg(&store).arg("import").arg(&file))?;
        let db = tmp.path().join(format!("sqlite-{n}.db"));
        let (sq_kb, sq_s, sq_cpu) =
            measure(std::process::Command::new(&exe).arg("sqlite-child").arg(&file).arg(&db))?;
        let index_mb = std::fs::metadata(store.join("index.redb"))?.len() as f64 / 1e6;
        let db_mb = std::fs::metadata(&db)?.len() as f64 / 1e6;
        println!(
            "{n:>10} {:>8.1} | {:>12.1} {ut_s:>7.2} {ut_cpu:>7.2} {index_mb:>8.1} | {:>9.1} {sq_s:>7.2} {sq_cpu:>7.2} {db_mb:>7.1}",
            bytes as f64 / 1e6,
            ut_kb as f64 / 1024.0,
            sq_kb as f64 / 1024.0
        );
        rows.push((n, ut_kb, sq_kb, ut_cpu));
        std::fs::remove_file(&file)?;
        std::fs::remove_dir_all(&store)?;
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(PathBuf::from(format!("{}{suffix}", db.display())));
        }
    }
    if let (Some(first), Some(last)) = (rows.first(), rows.last())
        && last.0 > first.0
    {
        let per = |a: u64, b: u64| (b as f64 - a as f64) * 1024.0 / (last.0 - first.0) as f64;
        println!(
            "growth from {} to {} messages: undertext {:.1} B/message, SQLite {:.1} B/message; \
             undertext CPU per message: {:.2} µs at {}, {:.2} µs at {}",
            first.0,
            last.0,
            per(first.1, last.1),
            per(first.2, last.2),
            first.3 * 1e6 / first.0 as f64,
            first.0,
            last.3 * 1e6 / last.0 as f64,
            last.0
        );
    }
    Ok(())
}

/// One Claude Code session of `n` messages (user and assistant in turn), each user text padded
/// with `pad` characters; its size in bytes.
fn write_session(path: &Path, n: u64, pad: usize) -> Result<u64> {
    let mut f = BufWriter::new(std::fs::File::create(path)?);
    let words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"];
    for i in 0..n {
        let mut padding = String::new();
        let mut k = 0u64;
        while padding.len() < pad {
            padding.push(' ');
            padding.push_str(words[((i.wrapping_mul(31) + k * 7) % 8) as usize]);
            k += 1;
        }
        padding.truncate(pad); // ASCII: any length is a character boundary
        let ts = format!(
            "2026-02-11T{:02}:{:02}:{:02}.{:03}Z",
            (i / 3_600_000) % 24,
            (i / 60_000) % 60,
            (i / 1000) % 60,
            i % 1000
        );
        if i % 2 == 0 {
            writeln!(
                f,
                r#"{{"type":"user","sessionId":"s-{n}","timestamp":"{ts}","message":{{"role":"user","content":"message {i}{padding}"}}}}"#
            )?;
        } else {
            writeln!(
                f,
                r#"{{"type":"assistant","sessionId":"s-{n}","timestamp":"{ts}","message":{{"id":"m{i}","role":"assistant","content":[{{"type":"text","text":"ok {i}"}}]}}}}"#
            )?;
        }
    }
    f.flush()?;
    Ok(std::fs::metadata(path)?.len())
}

/// Runs `cmd` to its end: its peak resident memory (KiB), wall time and CPU time (user +
/// system) in seconds.
fn measure(cmd: &mut std::process::Command) -> Result<(u64, f64, f64)> {
    let t = Instant::now();
    let child = cmd.stdout(std::process::Stdio::null()).spawn()?;
    let pid = libc::pid_t::try_from(child.id())?;
    let mut status = 0;
    // SAFETY: `rusage` is plain data that `wait4` fills; `pid` is our own child, waited once
    // here (the `Child` handle is not waited on again).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to `status` and `usage`, which outlive the call.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let secs = t.elapsed().as_secs_f64();
    if r != pid {
        return Err(format!("wait4: {}", std::io::Error::last_os_error()).into());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!("{cmd:?} failed (status {status})").into());
    }
    let cpu = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok((u64::try_from(usage.ru_maxrss)?, secs, cpu(usage.ru_utime) + cpu(usage.ru_stime)))
}

/// The baseline: the file read a line at a time, each message's role, time and text
/// inserted into SQLite.
fn sqlite_import(file: &Path, db: &Path) -> Result<()> {
    let mut conn = rusqlite::Connection::open(db)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.execute_batch(
        "CREATE TABLE messages (chat TEXT, seq INTEGER, role TEXT, at TEXT, body TEXT, PRIMARY KEY (chat, seq))",
    )?;
    let reader = std::io::BufReader::new(std::fs::File::open(file)?);
    let mut tx = conn.transaction()?;
    for (seq, line) in reader.lines().enumerate() {
        let line = line?;
        let v: serde_json::Value = serde_json::from_str(&line)?;
        let s = |p: &str| v.pointer(p).and_then(serde_json::Value::as_str).unwrap_or_default().to_string();
        let body = v.pointer("/message/content").map(|c| c.to_string()).unwrap_or_default();
        tx.execute(
            "INSERT INTO messages VALUES (?1, ?2, ?3, ?4, ?5)",
            rusqlite::params![s("/sessionId"), seq as i64, s("/type"), s("/timestamp"), body],
        )?;
        if seq % 10_000 == 9_999 {
            tx.commit()?;
            tx = conn.transaction()?;
        }
    }
    tx.commit()?;
    Ok(())
}
