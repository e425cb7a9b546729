//! Reopen after SIGKILL with a 1 GiB log, against the naive baseline: replaying the whole
//! log (the same reopen with the index deleted).
//!
//! Each measured iteration: a child (`kill_target`) opens the store and writes 2 KB blobs
//! from 4 threads in `Group` mode for 0.3–1.5 s (so the index lags the log by up to one
//! durable interval), is killed with SIGKILL, and the parent times `Store::open`.

#![expect(clippy::unwrap_used, reason = "bench harness: failure should abort the bench")]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use undertext::{Durability, Options, Store};
use undertext_benches::{Rng, bench_tempdir, random_bytes};

const LOG_BYTES: u64 = 1 << 30;

fn fill(dir: &Path) {
    let store = Store::open(dir, Options::default().durability(Durability::None)).unwrap();
    let mut written = 0u64;
    let mut i = 0u64;
    while written < LOG_BYTES {
        let blobs: Vec<Vec<u8>> = (0..16).map(|k| random_bytes(64 << 10, i * 16 + k)).collect();
        let refs: Vec<&[u8]> = blobs.iter().map(|b| b.as_slice()).collect();
        store.put_blobs("o", &refs).unwrap();
        written += 16 * (64 << 10);
        i += 1;
    }
    store.close().unwrap();
}

fn kill_cycle(dir: &Path, rng: &mut Rng) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kill_target"))
        .arg(dir)
        .arg(rng.next_u64().to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    std::thread::sleep(Duration::from_millis(300 + rng.next_u64() % 1200));
    child.kill().unwrap();
    child.wait().unwrap();
}

fn reopen(c: &mut Criterion) {
    let dir = bench_tempdir().unwrap();
    fill(dir.path());
    let mut rng = Rng::new(7);
    let mut g = c.benchmark_group("reopen_after_sigkill_1GiB_log");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(5));
    g.bench_function("undertext_replay_from_durable_index", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                kill_cycle(dir.path(), &mut rng);
                let t = Instant::now();
                let store = Store::open(dir.path(), Options::default()).unwrap();
                total += t.elapsed();
                drop(store);
            }
            total
        })
    });
    g.bench_function("naive_replay_whole_log", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                kill_cycle(dir.path(), &mut rng);
                std::fs::remove_file(dir.path().join("index.redb")).unwrap();
                let t = Instant::now();
                let store = Store::open(dir.path(), Options::default()).unwrap();
                total += t.elapsed();
                drop(store);
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, reopen);
criterion_main!(benches);
