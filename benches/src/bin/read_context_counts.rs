//! Warm `read_context` calls counted in instructions, against copying the range's bytes: a
//! load-independent companion of `benches/archive.rs` (the machine the benches run on is
//! shared, so its wall-clock ratios move with the load; instruction counts do not).
//!
//! ```text
//! cargo build --release -p undertext-benches --bin read_context_counts
//! for m in store text copy; do
//!   valgrind --tool=callgrind --toggle-collect='*measured*' \
//!     --callgrind-out-file=/tmp/rc.$m target/release/read_context_counts $m
//! done
//! ```
//!
//! Each mode builds the bench's 10 MB archive (stored chunked), warms it (a read every 500
//! chars: every chunk loaded and every stride's sub-marks computed, so what follows is a warm
//! read), then runs `CALLS` reads of 4,000 chars at random offsets inside one function whose
//! name contains `measured`: callgrind's total for it divided by `CALLS` is the cost of one
//! call. Modes: `store` (`Store::read_context`), `text` (`ArchiveText::read` + `to_string`),
//! `copy` (`text[s..e].to_string()` with the byte bounds known). Without valgrind it prints the
//! wall time per call as well; a second argument repeats the measured pass that many times and
//! prints the fastest and the median pass (`read_context_counts store 40`).

#![expect(clippy::unwrap_used, reason = "bench harness: failure should abort the run")]

use std::hint::black_box;
use std::time::Instant;

use undertext::ArchiveText;
use undertext::{BlobId, Options, Store, Unit};
use undertext_benches::{Rng, bench_tempdir, multibyte_text};

/// Reads measured per mode.
const CALLS: u64 = 10_000;
/// Chars per read.
const SPAN: u64 = 4_000;

#[inline(never)]
fn measured_store(store: &Store, id: &BlobId, starts: &[u64]) -> usize {
    let mut n = 0;
    for &s in starts {
        n += black_box(store.read_context("b", id, s..s + SPAN, Unit::Chars).unwrap()).len();
    }
    n
}

#[inline(never)]
fn measured_text(at: &ArchiveText, starts: &[u64]) -> usize {
    let mut n = 0;
    for &s in starts {
        n += black_box(at.read(s..s + SPAN, Unit::Chars).unwrap().to_string()).len();
    }
    n
}

#[inline(never)]
fn measured_copy(text: &str, bounds: &[(usize, usize)]) -> usize {
    let mut n = 0;
    for &(s, e) in bounds {
        n += black_box(text[s..e].to_string()).len();
    }
    n
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "store".into());
    let text = multibyte_text(10 << 20, 1);
    let chars = text.chars().count() as u64;
    let mut rng = Rng::new(2);
    let starts: Vec<u64> = (0..CALLS).map(|_| rng.next_u64() % (chars - SPAN)).collect();
    let t = Instant::now();
    // Every mode sets up all three (as the bench does in one process), so that each runs on
    // the same heap: where the allocator places the result depends on what was freed before.
    let dir = bench_tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let id = store.archive("b", &text).unwrap().id;
    let at = ArchiveText::new(text.clone());
    for s in (0..chars - SPAN).step_by(500) {
        store.read_context("b", &id, s..s + SPAN, Unit::Chars).unwrap();
        at.read(s..s + SPAN, Unit::Chars).unwrap();
    }
    let bounds: Vec<(usize, usize)> = starts
        .iter()
        .map(|&s| {
            let a = at.read(0..s, Unit::Chars).unwrap().len();
            (a, a + at.read(s..s + SPAN, Unit::Chars).unwrap().len())
        })
        .collect();
    // Repeats (a second argument; 1 under callgrind): the fastest and the median pass, since a
    // pass on a shared machine is slowed by whatever else runs during it.
    let reps: usize = std::env::args().nth(2).map_or(1, |r| r.parse().unwrap());
    let (mut per_call, mut cpu) = (Vec::new(), Vec::new());
    let mut n = 0;
    for _ in 0..reps {
        let (m, c) = (Instant::now(), on_cpu_ns());
        n = match mode.as_str() {
            "store" => measured_store(&store, &id, &starts),
            "text" => measured_text(&at, &starts),
            "copy" => measured_copy(&text, &bounds),
            other => panic!("mode {other:?}: expected store, text or copy"),
        };
        per_call.push(m.elapsed().as_secs_f64() * 1e9 / CALLS as f64);
        cpu.push(on_cpu_ns().zip(c).map(|(b, a)| (b - a) as f64 / CALLS as f64));
    }
    per_call.sort_by(f64::total_cmp);
    let mut cpu: Vec<f64> = cpu.into_iter().flatten().collect();
    cpu.sort_by(f64::total_cmp);
    println!(
        "{mode}: {:.0} ns per call (wall clock; fastest of {reps} passes, median {:.0}); on-CPU {:.0} (fastest), {:.0} (median)",
        per_call[0],
        per_call[per_call.len() / 2],
        cpu.first().copied().unwrap_or(f64::NAN),
        cpu.get(cpu.len() / 2).copied().unwrap_or(f64::NAN),
    );
    println!("{mode}: {n} bytes read per pass; {:.1} s with setup", t.elapsed().as_secs_f64());
}

/// Nanoseconds of CPU time this thread has used (`CLOCK_THREAD_CPUTIME_ID`), so that a pass's
/// figure leaves out the time other processes held the core.
fn on_cpu_ns() -> Option<u64> {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid, writable timespec for the duration of the call.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    (r == 0).then(|| t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64)
}
