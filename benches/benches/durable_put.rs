//! Durable put of 2 KB blobs, each with distinct random content, with 1 and 4 writer threads.
//!
//! Contenders, all in one temporary directory on the repository's disk:
//! * `undertext`: `Store::put_blob` with `Durability::Group` (durable when it returns).
//! * `sqlite`: WAL, `synchronous=FULL`, one `INSERT` per transaction (one shared connection).
//! * `redb`: redb alone, one insert per write transaction, `Durability::Immediate`.
//! * `floor`: a single-thread loop of 2 KB `write` + `fdatasync` appending to one file. Reported
//!   once, under "1 writer": with 4 writers the floor is still the single-thread loop.
//! * `floor-overwrite`: the same loop overwriting a 16 MiB file written and synced up front, so
//!   no `fdatasync` has to commit a new file size (what SQLite's reused WAL file enjoys).
//!
//! After the undertext runs, the number of puts per log `fdatasync` (from `Store::stats`) is
//! printed to stderr as a diagnostic.
//!
//! One criterion iteration is the wall time for all writer threads together to complete
//! [`PUTS_PER_ITER`] durable puts; throughput is reported per put. Each thread fills a fresh
//! random 2 KB buffer before each put (same cost for every contender, floor included).
//!
//! ```text
//! cargo bench -p undertext-benches --bench durable_put -- --warm-up-time 1 --measurement-time 3
//! ```
#![expect(clippy::expect_used, reason = "bench harness: failure should abort the bench")]

use std::path::Path;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use parking_lot::Mutex;
use undertext::{Durability, Options, Store};
use undertext_benches::{FloorWriter, PUT_BLOB_SIZE, RedbBlobs, Rng, SqliteBlobs, bench_tempdir};

/// Durable puts per criterion iteration, split evenly over the writer threads.
const PUTS_PER_ITER: u64 = 64;

/// Hands out distinct seeds so no two blobs in the whole run share content.
static SEEDS: AtomicU64 = AtomicU64::new(1);

fn fresh_rng() -> Rng {
    Rng::new(Rng::new(SEEDS.fetch_add(1, Ordering::Relaxed)).next_u64())
}

/// Runs `iters * PUTS_PER_ITER` puts spread over `threads` threads and returns the wall time
/// from the moment all threads are released until the last one finishes.
fn timed_puts<F>(threads: usize, iters: u64, put: F) -> Duration
where
    F: Fn(&[u8]) + Sync,
{
    let total = iters * PUTS_PER_ITER;
    let n = threads as u64;
    let start = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|t| {
                let share = total / n + u64::from(t < total % n);
                let (start, put) = (&start, &put);
                s.spawn(move || {
                    let mut rng = fresh_rng();
                    let mut buf = vec![0u8; PUT_BLOB_SIZE];
                    start.wait();
                    for _ in 0..share {
                        rng.fill(&mut buf);
                        put(&buf);
                    }
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        for h in handles {
            h.join().expect("writer thread panicked");
        }
        t0.elapsed()
    })
}

fn open_undertext(dir: &Path) -> Store {
    Store::open(dir, Options::default().durability(Durability::Group)).expect("open undertext store")
}

fn durable_put(c: &mut Criterion) {
    let tmp = bench_tempdir().expect("bench temp dir");
    eprintln!("durable_put: stores under {}", tmp.path().display());

    let mut g = c.benchmark_group("durable_put_2k");
    g.throughput(Throughput::Elements(PUTS_PER_ITER));
    // Each iteration is milliseconds of fsyncs: equal-sized samples fit the time budget.
    g.sampling_mode(SamplingMode::Flat);

    for threads in [1usize, 4] {
        let label = if threads == 1 { "1 writer".to_owned() } else { format!("{threads} writers") };

        if threads == 1 {
            let floor = Mutex::new(FloorWriter::create(&tmp.path().join("floor.log")).expect("floor file"));
            g.bench_function(BenchmarkId::new("floor", &label), |b| {
                b.iter_custom(|iters| {
                    timed_puts(1, iters, |blob| floor.lock().put(blob).expect("floor put"))
                });
            });
            let floor = Mutex::new(
                FloorWriter::create_overwrite(&tmp.path().join("floor-ow.log"), 16 << 20)
                    .expect("overwrite floor file"),
            );
            g.bench_function(BenchmarkId::new("floor-overwrite", &label), |b| {
                b.iter_custom(|iters| {
                    timed_puts(1, iters, |blob| floor.lock().put(blob).expect("floor put"))
                });
            });
        }

        {
            let dir = tmp.path().join(format!("undertext-{threads}"));
            let store = open_undertext(&dir);
            let mut puts = 0u64;
            g.bench_function(BenchmarkId::new("undertext", &label), |b| {
                b.iter_custom(|iters| {
                    puts += iters * PUTS_PER_ITER;
                    timed_puts(threads, iters, |blob| {
                        store.put_blob("o", blob).expect("undertext put_blob");
                    })
                });
            });
            // Diagnostic, not a measurement: how many puts shared each log fdatasync.
            let stats = store.stats().expect("undertext stats");
            eprintln!(
                "undertext {label}: {puts} puts, {} log fdatasyncs, {:.2} puts per fdatasync",
                stats.log_syncs,
                puts as f64 / stats.log_syncs.max(1) as f64
            );
            drop(store);
        }

        {
            let db =
                SqliteBlobs::create(&tmp.path().join(format!("sqlite-{threads}.db"))).expect("sqlite db");
            g.bench_function(BenchmarkId::new("sqlite", &label), |b| {
                b.iter_custom(|iters| timed_puts(threads, iters, |blob| db.put(blob).expect("sqlite put")));
            });
        }

        {
            let db = RedbBlobs::create(&tmp.path().join(format!("redb-{threads}.redb"))).expect("redb db");
            g.bench_function(BenchmarkId::new("redb", &label), |b| {
                b.iter_custom(|iters| timed_puts(threads, iters, |blob| db.put(blob).expect("redb put")));
            });
        }
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
}

criterion_group! {
    name = benches;
    config = config();
    targets = durable_put
}
criterion_main!(benches);
