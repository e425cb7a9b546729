//! A fleet soak (scripts/fleet-soak runs it; not part of the test suite): PROCESSES
//! `fleet_worker` processes (the binary beside this one) append, edit, publish and store shared
//! blobs on CHATS chats of one owner for SECS seconds, through the URL; one of them is killed
//! with SIGKILL (and replaced) every KILL_EVERY_MS milliseconds, and PostgreSQL is stopped
//! with `-m immediate` (a crash: no shutdown checkpoint) and started again RESTARTS times,
//! evenly spaced, by `SERVERS crash-restart DIR` (scripts/fleet-servers). At the end a fresh
//! store checks that nothing acknowledged is lost ([`Acked::check`]: dense seqs, every
//! acknowledged text at its seq, no acknowledged publication gone, every shared blob
//! readable), and it prints the counts. Exits 1 with the failure on stderr otherwise.
//!
//! Usage: fleet_soak URL SERVERS DIR [PROCESSES [SECS [CHATS [KILL_EVERY_MS [RESTARTS]]]]]
//! (defaults 8, 180, 16, 3000, 2).

use std::time::{Duration, Instant};

use undertext::Store;
use undertext_tests::child::Ready;
use undertext_tests::fleet::{Acked, chats, opts, owner, worker};
use undertext_tests::{Rng, seed};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize, default: u64| -> u64 {
        args.get(i).map_or(default, |v| {
            v.parse().unwrap_or_else(|_| {
                eprintln!("fleet_soak: argument {i}: expected a number, found {v:?}");
                std::process::exit(2)
            })
        })
    };
    let (Some(url), Some(servers), Some(dir)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("usage: fleet_soak URL SERVERS DIR [PROCESSES [SECS [CHATS [KILL_EVERY_MS [RESTARTS]]]]]");
        std::process::exit(2);
    };
    let (processes, secs, n_chats, kill_every, restarts) =
        (num(4, 8), num(5, 180), num(6, 16), num(7, 3000), num(8, 2));
    let bin = match std::env::current_exe() {
        Ok(exe) => exe.with_file_name("fleet_worker"),
        Err(e) => {
            eprintln!("fleet_soak: where am I: {e}");
            std::process::exit(1);
        }
    };
    let bin = bin.to_string_lossy().into_owned();
    let seed = seed(35);
    let mut rng = Rng::new(seed);
    let store = match Store::open(url, opts()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fleet_soak: open {url}: {e}");
            std::process::exit(1);
        }
    };
    let o = owner("soak");
    let ids = chats(&store, &o, n_chats as usize);
    drop(store);
    println!("fleet_soak: seed {seed}, {processes} processes on {n_chats} chats of {o} for {secs} s");

    let started = Instant::now();
    let mut next_seed = seed * 100_000;
    let mut spawn = || {
        next_seed += 1;
        worker(&bin, url, &o, next_seed, u64::MAX / 2, &ids)
    };
    let mut workers: Vec<Ready> = (0..processes).map(|_| spawn()).collect();
    let mut acked = Acked::default();
    let (mut kills, mut restarted) = (0u64, 0u64);
    let restart_at: Vec<Duration> =
        (1..=restarts).map(|k| Duration::from_secs(secs) * k as u32 / (restarts as u32 + 1)).collect();
    let mut next_kill = Duration::from_millis(kill_every);
    while started.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_millis(50));
        let now = started.elapsed();
        if now >= next_kill {
            next_kill += Duration::from_millis(kill_every);
            let w = rng.range(0, workers.len() as u64) as usize;
            let replacement = spawn();
            let (_, lines) = std::mem::replace(&mut workers[w], replacement).kill();
            lines.iter().for_each(|l| acked.take(l));
            kills += 1;
        }
        if restart_at.get(restarted as usize).is_some_and(|at| now >= *at) {
            restarted += 1;
            let t = Instant::now();
            let status = std::process::Command::new(servers)
                .args(["crash-restart", dir])
                .stdout(std::process::Stdio::null())
                .status();
            match status {
                Ok(s) if s.success() => {
                    println!("fleet_soak: PostgreSQL crashed and restarted ({} ms)", t.elapsed().as_millis())
                }
                other => {
                    eprintln!("fleet_soak: {servers} crash-restart {dir}: {other:?}");
                    std::process::exit(1);
                }
            }
        }
    }
    for w in workers {
        let (_, lines) = w.kill();
        lines.iter().for_each(|l| acked.take(l));
    }
    let ran = started.elapsed();
    let edits = acked.texts.values().filter(|(rev, _)| *rev > 0).count();
    println!(
        "fleet_soak: {:.0} s: {} acknowledged messages ({:.0}/s), {edits} of them edited since, {} publications, \
         {} shared blobs stored; {kills} kill -9, {restarted} PostgreSQL crash restarts, {} failed operations",
        ran.as_secs_f64(),
        acked.texts.len(),
        acked.texts.len() as f64 / ran.as_secs_f64(),
        acked.published.len(),
        acked.blobs.len(),
        acked.errors.len()
    );
    if let Some(e) = acked.errors.first() {
        println!("fleet_soak: e.g. {e}");
    }
    // Not strict: a killed worker's last edit may have committed without its acknowledgement.
    let t = Instant::now();
    acked.check(url, &o, &ids, false);
    println!(
        "fleet_soak: a fresh store holds everything acknowledged ({} chats checked in {} ms)",
        ids.len(),
        t.elapsed().as_millis()
    );
}
