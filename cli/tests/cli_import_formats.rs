//! Claims of `undertext import`, `replay` and `archive` for issues 16 and 17, through the
//! built binary: the new formats (mini-swe-agent text, OpenHands completion logs and SDK
//! conversation folders) import with the format detected per file in `--json`; `replay` runs
//! them end to end with every archived byte read back; a re-import that rewrites a session
//! says so (`sessions_rewritten`); `/dev/zero` and a FIFO are refused at once with a clear
//! error, never read.

#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{json, run};
use serde_json::Value;

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data").join(rel)
}

const MINI: &str = "mini_swe_agent_text/acme__sums-17.traj.json";
const EVAL: &str = "openhands_eval";
const SDK: &str = "openhands_sdk";

#[test]
fn import_json_reports_the_format_detected_per_file_and_the_counts_of_the_new_formats() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    let paths = [data(MINI), data(EVAL), data(SDK)];
    let mut args: Vec<&str> = vec!["import", "--json"];
    args.extend(paths.iter().map(|p| p.to_str().unwrap()));
    let r = json(&store, &args);
    let rows: Vec<(String, String, u64, u64, u64)> = r["per_file"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let name =
                Path::new(f["file"].as_str().unwrap()).file_name().unwrap().to_string_lossy().into_owned();
            let n = |k: &str| f[k].as_u64().unwrap();
            (
                name,
                f["format"].as_str().unwrap().to_string(),
                n("messages"),
                n("tool_calls"),
                n("tool_results"),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("acme__sums-17.traj.json".into(), "mini-swe-agent".into(), 14, 4, 4),
            ("claude-3-5-sonnet-20241022-1733000000.25.json".into(), "openhands".into(), 10, 5, 4),
            ("8d0f2c7e5a1b4e39b6a2f0c4d1e9a7b3".into(), "openhands-sdk".into(), 16, 6, 6),
        ]
    );
    assert_eq!(
        (r["sessions_new"].as_u64(), r["tool_results"].as_u64(), r["compactions"].as_u64()),
        (Some(3), Some(14), Some(1))
    );
    assert_eq!(r["problems"], Value::Array(vec![]));
    let stats = json(&store, &["stats", "--json"]);
    for (f, sessions) in [("mini-swe-agent", 1), ("openhands", 1), ("openhands-sdk", 1)] {
        assert_eq!(stats["per_format"][f]["sessions"], sessions, "{stats}");
    }
}

#[test]
fn replay_runs_the_new_formats_end_to_end_and_reads_every_archived_byte_back() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("unused");
    let o = run(
        &store,
        &[
            "replay",
            data(MINI).to_str().unwrap(),
            data(EVAL).to_str().unwrap(),
            data(SDK).to_str().unwrap(),
            "--window",
            "16000",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = r["sessions"].as_array().unwrap();
    let formats: Vec<&str> = rows.iter().map(|s| s["format"].as_str().unwrap()).collect();
    assert_eq!(formats, ["mini-swe-agent", "openhands", "openhands-sdk"]);
    for s in rows {
        assert!(s["steps"].as_u64().unwrap() > 0, "{s}");
        assert_eq!(s["recovery_mismatches"], 0, "{s}");
    }
    // Text output too.
    let o = run(&store, &["replay", data(SDK).to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("openhands-sdk (1 sessions)"));
}

#[test]
fn a_reimport_that_changes_stored_messages_reports_sessions_rewritten() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    let f = tmp.path().join("run.jsonl");
    let line = |text: &str| {
        format!(
            "{{\"type\":\"user\",\"sessionId\":\"s-9\",\"message\":{{\"role\":\"user\",\"content\":\"{text}\"}}}}\n"
        )
    };
    std::fs::write(&f, line("first") + &line("second")).unwrap();
    let a = json(&store, &["import", f.to_str().unwrap(), "--json"]);
    assert_eq!((a["sessions_new"].as_u64(), a["sessions_rewritten"].as_u64()), (Some(1), Some(0)));
    std::fs::write(&f, line("first") + &line("changed") + &line("third")).unwrap();
    let b = json(&store, &["import", f.to_str().unwrap(), "--json"]);
    assert_eq!(
        (b["sessions_rewritten"].as_u64(), b["messages_replaced"].as_u64(), b["messages"].as_u64()),
        (Some(1), Some(1), Some(2))
    );
    let o = run(&store, &["import", f.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("0 rewritten"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

fn quick_failure(store: &Path, args: &[&str], want: &str) {
    let started = Instant::now();
    let o = run(store, args);
    assert!(started.elapsed() < Duration::from_secs(20), "{args:?} took {:?}", started.elapsed());
    assert_eq!(o.status.code(), Some(1), "{args:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(want), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn archive_and_import_of_dev_zero_are_refused_at_once_saying_a_regular_file_was_expected() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    quick_failure(
        &store,
        &["archive", "/dev/zero"],
        "/dev/zero: expected a regular file, found a character device",
    );
    let want = "/dev/zero: expected a regular file or a folder, found a character device";
    quick_failure(&store, &["import", "/dev/zero"], want);
    quick_failure(&store, &["replay", "/dev/zero"], want);
}

#[test]
fn import_of_a_folder_holding_a_fifo_named_jsonl_imports_the_rest_and_names_the_fifo() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("in");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("a.jsonl"),
        "{\"type\":\"user\",\"sessionId\":\"f1\",\"message\":{\"content\":\"hi\"}}\n",
    )
    .unwrap();
    assert!(std::process::Command::new("mkfifo").arg(dir.join("p.jsonl")).status().unwrap().success());
    let store = tmp.path().join("s");
    quick_failure(
        &store,
        &["import", dir.to_str().unwrap()],
        "p.jsonl: expected a regular file, found a FIFO",
    );
    let o = run(&store, &["import", dir.to_str().unwrap(), "--json"]);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((r["sessions"].as_u64(), r["problems"].as_array().unwrap().len()), (Some(1), 1));
    quick_failure(&store, &["archive", dir.join("p.jsonl").to_str().unwrap()], "found a FIFO (named pipe)");
}

#[test]
fn archive_and_import_of_a_file_over_the_documented_limit_are_refused_from_its_size() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    let big = tmp.path().join("big.json");
    // Sparse: a gigabyte by its size, nothing on disk; reading it whole would take seconds.
    let limit = undertext::import::MAX_INPUT_BYTES;
    std::fs::File::create(&big).unwrap().set_len(limit + 1).unwrap();
    let want = format!("expected a file of at most {limit} bytes, found {} bytes (not read)", limit + 1);
    for cmd in ["archive", "import"] {
        let started = Instant::now();
        quick_failure(&store, &[cmd, big.to_str().unwrap()], &want);
        assert!(started.elapsed() < Duration::from_secs(5), "{cmd} took {:?}", started.elapsed());
    }
}

#[test]
fn import_and_replay_help_name_every_format_the_importer_accepts() {
    let tmp = tempfile::tempdir().unwrap();
    for cmd in ["import", "replay"] {
        let o = run(tmp.path(), &[cmd, "--help"]);
        let help = String::from_utf8_lossy(&o.stdout);
        for name in undertext::import::Format::NAMES {
            assert!(help.contains(name), "`{cmd} --help` does not name the format {name:?}:\n{help}");
        }
    }
}
