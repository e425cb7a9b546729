//! Publication of a prepared checkpoint — the swap at the hard line — against the floor of
//! one durable write: a 2 KB `write` + `fdatasync` over preallocated blocks on the same disk,
//! in the same run. Prints p50/p99 of individually timed publications.

#![expect(clippy::unwrap_used, reason = "bench harness: failure should abort the bench")]

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use undertext::{ChatMeta, NewMessage, Options, Store};
use undertext::{CheckpointOptions, Extractive};
use undertext_benches::{FloorWriter, bench_tempdir, random_bytes};

fn pct(mut v: Vec<Duration>, q: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * q) as usize]
}

fn publish(c: &mut Criterion) {
    let dir = bench_tempdir().unwrap();
    let store = Store::open(dir.path().join("u"), Options::default()).unwrap();
    let chat = store.chat("b", store.create_chat("b", ChatMeta::default()).unwrap()).unwrap();
    for i in 0..200 {
        chat.append(NewMessage::user(format!("turn {i}"))).unwrap();
        chat.append(NewMessage::assistant(format!("answer {i}: the file holds a parser"))).unwrap();
    }
    let s = Extractive::default();
    let opts = CheckpointOptions::default();
    // Each publication needs a checkpoint reaching further: one more turn settles two messages.
    let next = || {
        chat.append(NewMessage::user("one more turn")).unwrap();
        chat.build_checkpoint(&s, &opts).unwrap()
    };
    let mut lat = Vec::new();
    for _ in 0..300 {
        let cp = next();
        let t = Instant::now();
        chat.publish_checkpoint(&cp).unwrap();
        lat.push(t.elapsed());
    }
    let mut floor = FloorWriter::create_overwrite(&dir.path().join("floor"), 64 << 20).unwrap();
    let rec = random_bytes(2048, 9);
    let mut flat = Vec::new();
    for _ in 0..300 {
        let t = Instant::now();
        floor.put(&rec).unwrap();
        flat.push(t.elapsed());
    }
    println!(
        "publish_checkpoint: p50 {:?} p99 {:?}; floor (2 KB write + fdatasync): p50 {:?} p99 {:?}",
        pct(lat.clone(), 0.5),
        pct(lat, 0.99),
        pct(flat.clone(), 0.5),
        pct(flat, 0.99)
    );
    let mut g = c.benchmark_group("checkpoint_publication");
    g.sample_size(30);
    g.bench_function("undertext_publish_prepared_checkpoint", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let cp = next();
                let t = Instant::now();
                chat.publish_checkpoint(&cp).unwrap();
                total += t.elapsed();
            }
            total
        })
    });
    g.bench_function("floor_write_fdatasync_2k", |b| b.iter(|| floor.put(&rec).unwrap()));
    g.finish();
}

criterion_group!(benches, publish);
criterion_main!(benches);
