//! One run of the mixed workload under a fault plan, and the checks after it: the shared
//! core of `tests/tests/fault_sweep.rs` and `tests/tests/power_cut.rs`.

use std::path::Path;

use undertext::Store;
use undertext::fault::{self, Controller};

use crate::mixed::{Action, Mismatch, Model, run, sweep_options, verify};

/// What one run under a fault plan saw.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// File operations counted (up to and including the close of the faulty store).
    pub ops: u64,
    /// Successful syncs counted.
    pub syncs: u64,
    /// Faults returned (the injected one, plus every operation refused while the power was off).
    pub injected: u64,
    /// Whether the first open failed.
    pub open_failed: bool,
    /// Calls acknowledged.
    pub acked: u64,
    /// Calls that failed.
    pub failed: u64,
    /// Calls that failed with an error that leaves them in doubt.
    pub in_doubt: u64,
    /// Calls refused as `Poisoned`.
    pub poisoned: u64,
    /// Calls acknowledged after the first failure.
    pub acked_after_failure: u64,
    /// Whether the live store refused a read at the end of the run.
    pub live_refused: bool,
    /// Items compared after reopen.
    pub checked: u64,
    /// The calls' errors (the first 20).
    pub errors: Vec<(u64, String)>,
}

/// Runs `actions` on a new store in `dir` with the controller planned by `plan`, closes it,
/// lets `between` act on the controller (clear faults, restore a power cut), reopens with no
/// fault and checks the state. Panics (failing the test) on a wrong state, a failed reopen,
/// or a `check` problem; `label` names the run in the message.
pub fn run_once(
    dir: &Path,
    seed: u64,
    actions: &[Action],
    label: &str,
    plan: impl FnOnce(&Controller),
    between: impl FnOnce(&Controller),
) -> Run {
    let ctl = fault::install(dir).unwrap_or_else(|e| panic!("{label}: install: {e}"));
    plan(&ctl);
    let mut model = Model::default();
    let mut out = Run::default();
    match Store::open(dir, sweep_options()) {
        Ok(store) => {
            let stats = run(&store, seed, 0, actions, |e| model.apply(e), || false);
            out.acked = stats.acked;
            out.failed = stats.failed;
            out.poisoned = stats.poisoned;
            out.in_doubt = stats.in_doubt;
            out.acked_after_failure = stats.acked_after_failure;
            out.errors = stats.errors.clone();
            // What the store shows before the restart must be an allowed state too, or a
            // refusal: never a wrong answer.
            match verify(&store, seed, &model, 0) {
                Ok(_) => {}
                Err(Mismatch::Refused(_)) => out.live_refused = true,
                Err(e @ Mismatch::Differs(_)) => {
                    panic!("{label}: live store before reopen: {e}; the calls' errors: {:?}", stats.errors)
                }
            }
            drop(store);
        }
        Err(_) => out.open_failed = true,
    }
    model.finish();
    out.ops = ctl.ops();
    out.syncs = ctl.syncs();
    out.injected = ctl.injected();
    between(&ctl);
    let store = Store::open(dir, sweep_options()).unwrap_or_else(|e| panic!("{label}: reopen failed: {e}"));
    out.checked = verify(&store, seed, &model, 0).unwrap_or_else(|e| {
        panic!("{label}: after reopen: {e}; the calls' errors: {:?}; effects {:?}", out.errors, model.effects)
    });
    let report = store.check().unwrap_or_else(|e| panic!("{label}: check failed: {e}"));
    assert!(report.is_ok(), "{label}: check found {:?}", report.problems);
    drop(store);
    out
}

/// The sweep's stride: `UNDERTEXT_SWEEP_STRIDE` if set (1 runs every point), else `default`.
pub fn stride(default: u64) -> u64 {
    std::env::var("UNDERTEXT_SWEEP_STRIDE").ok().and_then(|v| v.parse().ok()).unwrap_or(default).max(1)
}

/// The workload length: `UNDERTEXT_SWEEP_CALLS` if set, else `default`.
pub fn calls(default: usize) -> usize {
    std::env::var("UNDERTEXT_SWEEP_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Runs `one` at every point of `points` on as many threads as the machine has cores (each
/// point is an independent run on its own store), and returns the results in the order of
/// `points`. A panic in any run fails the caller when the threads are joined.
///
/// ```
/// let squares = undertext_tests::sweep::each_point(&[1, 2, 3], |n| n * n);
/// assert_eq!(squares, vec![1, 4, 9]);
/// ```
pub fn each_point<T: Send>(points: &[u64], one: impl Fn(u64) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, points.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut results: Vec<(usize, T)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&p) = points.get(i) else { break mine };
                        mine.push((i, one(p)));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}
