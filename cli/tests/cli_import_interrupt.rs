//! Ctrl-C during `undertext import` (issue 37.4), on the real binary with a real SIGINT: the
//! import stops at a session boundary, exits 1 saying how many sessions it finished, leaves
//! every imported session whole (`check` is clean), and the next import adds exactly the
//! sessions that were not begun.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{json, run};

/// The shared transcripts: about 110 MiB, several seconds of import.
fn corpus() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/transcripts")
}

#[test]
fn ctrl_c_stops_an_import_at_a_session_boundary_and_the_next_import_adds_the_rest() {
    let corpus = corpus();
    let mut delay = Duration::from_millis(2_500);
    // The delay adapts: an import that finished before its signal is tried again with a
    // quarter of its time, one stopped while still reading with half as much again.
    for _ in 0..12 {
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("s");
        let started = Instant::now();
        let child = Command::new(env!("CARGO_BIN_EXE_undertext"))
            .arg("--store")
            .arg(&store)
            .args(["import", "--json"])
            .arg(&corpus)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        // SAFETY: `kill` with a pid this test spawned and has not waited for (it cannot have
        // been reused) and a valid signal number.
        let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) } == 0;
        let out = child.wait_with_output().unwrap();
        let took = started.elapsed();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
        if out.status.success() {
            // It finished before the signal landed: interrupt sooner.
            assert!(!sent || report["interrupted"] == false, "{report}");
            delay = (took / 4).min(delay / 2);
            continue;
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(report["interrupted"], true, "{report}");
        if report["phase"] == "reading" {
            // Stopped while reading the files: nothing written, not even the store.
            assert!(stderr.contains("nothing imported"), "{stderr}");
            assert!(!store.exists(), "an import stopped while reading creates no store");
            delay = delay * 3 / 2;
            continue;
        }
        let (done, total) = (report["sessions_done"].as_u64().unwrap(), report["sessions"].as_u64().unwrap());
        assert!(done < total, "{done} of {total}");
        assert!(stderr.contains(&format!("interrupted: {done} of {total} sessions imported")), "{stderr}");
        let check = run(&store, &["check"]);
        assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
        // Each imported session is whole: the next import finds them unchanged and adds the rest.
        let again = json(&store, &["import", "--json", corpus.to_str().unwrap()]);
        assert_eq!(again["interrupted"], false);
        let count = |k: &str| again[k].as_u64().unwrap();
        assert_eq!(count("sessions_new") + count("sessions_unchanged"), total, "{again}");
        assert!(count("sessions_unchanged") >= done, "the {done} imported sessions are there whole: {again}");
        assert_eq!((count("sessions_extended"), count("sessions_rewritten")), (0, 0), "{again}");
        return;
    }
    panic!("every import finished before its SIGINT: nothing was interrupted");
}
