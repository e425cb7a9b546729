//! Claim: a power cut right after any sync of a mixed workload loses no acknowledged call,
//! tears no transaction, and the store reopens: everything written after that sync is
//! dropped (files back to their synced bytes, names back to the last directory sync), and
//! reopen shows exactly the acknowledged state (the call in flight whole or not at all).
//!
//! The suite cuts after every sync, the runs spread over every core; `UNDERTEXT_SWEEP_STRIDE=k` cuts after every
//! k-th, and `UNDERTEXT_SWEEP_CALLS` sets the workload's length.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext_tests::mixed::actions;
use undertext_tests::seed;
use undertext_tests::sweep::{calls, each_point, run_once, stride};

#[test]
fn a_power_cut_after_any_sync_keeps_exactly_the_acknowledged_state() {
    let seed = seed(0xC07_0001);
    let acts = actions(seed, calls(170));
    let dir = tempfile::tempdir().unwrap();
    let clean = run_once(dir.path(), seed, &acts, "clean run", |_| {}, |_| {});
    eprintln!("workload: {} calls, {} file operations, {} syncs", acts.len(), clean.ops, clean.syncs);
    assert!(clean.ops >= 500, "the workload must make at least 500 file operations, made {}", clean.ops);
    let step = stride(1);
    let (mut runs, mut refused, mut lost_calls, mut acked) = (0u64, 0u64, 0u64, 0u64);
    let (mut reverted, mut bytes, mut removed, mut renames) = (0u64, 0u64, 0u64, 0u64);
    // Every cut is a run on its own store: the cuts run on every core.
    let points: Vec<u64> = (1..=clean.syncs).step_by(usize::try_from(step).unwrap()).collect();
    let results = each_point(&points, |s| {
        let dir = tempfile::tempdir().unwrap();
        let label = format!("power cut after sync {s}, seed {seed}");
        let mut report = None;
        let r = run_once(
            dir.path(),
            seed,
            &acts,
            &label,
            |c| c.cut_power_at_sync(s),
            |c| {
                // Runs differ by a sync or two (the next segment is prepared on a background
                // thread): past the last sync, the cut comes after the workload.
                if !c.is_off() {
                    c.cut_power_now();
                }
                report = Some(c.restore_power_cut().unwrap_or_else(|e| panic!("{label}: restore: {e}")));
            },
        );
        (r, report.unwrap())
    });
    for (r, rep) in results {
        runs += 1;
        refused += r.injected;
        lost_calls += r.failed;
        acked += r.acked;
        reverted += rep.files_reverted;
        bytes += rep.bytes_reverted;
        removed += rep.names_removed;
        renames += rep.renames_undone;
    }
    eprintln!(
        "power-cut sweep: {runs} cuts (after sync 1, 1 + {step}, ... of {} syncs), {acked} acknowledged calls all found after reopen, \
         {lost_calls} calls failed after the cut, {refused} operations refused while off; restores reverted \
         {reverted} files ({bytes} bytes), removed {removed} names never synced, undid {renames} renames",
        clean.syncs
    );
}
