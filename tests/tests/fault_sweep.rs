//! Claim: a file operation that fails (EIO or ENOSPC) at any point of a mixed workload makes
//! the call that hit it return an error, shows no partial transaction, leaves the store
//! working or refusing cleanly (`Error::Poisoned`), and after reopen exactly the
//! acknowledged state is there (the failed call whole or not at all).
//!
//! The workload (tests/src/mixed.rs) is run once clean to count its file operations, then
//! once per N with operation N failing, for every N, the runs spread over every core;
//! `UNDERTEXT_SWEEP_STRIDE=k` steps N by k for a quicker look.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext::fault::{FaultKind, Op};
use undertext_tests::mixed::actions;
use undertext_tests::seed;
use undertext_tests::sweep::{calls, each_point, run_once, stride};

#[test]
fn a_failed_file_operation_anywhere_leaves_exactly_the_acknowledged_state() {
    let seed = seed(0xFA17_0001);
    let acts = actions(seed, calls(170));
    // The clean run: how many file operations, and of which kinds.
    let dir = tempfile::tempdir().unwrap();
    let mut kinds = Vec::new();
    let clean = run_once(
        dir.path(),
        seed,
        &acts,
        "clean run",
        |_| {},
        |c| {
            for op in
                [Op::Open, Op::Write, Op::Sync, Op::Rename, Op::SetLen, Op::Mmap, Op::Remove, Op::SyncDir]
            {
                kinds.push((op, c.ops_of(op)));
            }
        },
    );
    eprintln!(
        "workload: {} calls, {} file operations {kinds:?}, {} syncs",
        acts.len(),
        clean.ops,
        clean.syncs
    );
    assert!(clean.ops >= 500, "the workload must make at least 500 file operations, made {}", clean.ops);
    // Publications refused as not newer are expected; nothing else may fail.
    assert_eq!(clean.in_doubt, 0, "the clean run failed calls: {:?}", clean.errors);
    assert!(clean.errors.iter().all(|(_, e)| e.contains("not published")), "{:?}", clean.errors);
    let step = stride(1);
    let (mut runs, mut injected, mut kept_working, mut poisoned, mut open_failed) = (0u64, 0, 0, 0, 0);
    let (mut unreached, mut unseen) = (0u64, 0u64);
    // Every point is a run on its own store: the points run on every core.
    let points: Vec<u64> = (1..=clean.ops).step_by(usize::try_from(step).unwrap()).collect();
    let results = each_point(&points, |n| {
        let kind = if n % 2 == 1 { FaultKind::Eio } else { FaultKind::Enospc };
        let dir = tempfile::tempdir().unwrap();
        let label = format!("fault at operation {n} ({kind:?}), seed {seed}");
        let r = run_once(dir.path(), seed, &acts, &label, |c| c.fail_at(n, kind), |c| c.clear_faults());
        // Runs differ by a few operations (the next segment is prepared on a background
        // thread): a run that ended before operation N is the only excuse for no fault.
        assert!(r.injected >= 1 || r.ops < n, "{label}: the fault was never reached ({} operations)", r.ops);
        r
    });
    for r in results {
        unreached += u64::from(r.injected == 0);
        // A fault no call saw hit the background segment preparer or the close path (the
        // final index flush, the index compaction): allowed, counted, and the reopen
        // below still had to hold exactly the acknowledged state.
        unseen += u64::from(r.injected > 0 && !r.open_failed && r.failed == 0);
        runs += 1;
        injected += r.injected;
        kept_working += u64::from(r.acked_after_failure > 0);
        poisoned += u64::from(r.poisoned > 0);
        open_failed += u64::from(r.open_failed);
    }
    eprintln!(
        "fault sweep: {runs} runs (N = 1, 1 + {step}, ... of {} operations), {injected} faults injected, \
         {kept_working} runs kept acknowledging calls after the fault, {poisoned} refused later calls as Poisoned, \
         {open_failed} failed at open, {unreached} ended before operation N, {unseen} faults hit only background \
         or close work; every reopen held exactly the acknowledged state",
        clean.ops
    );
}
