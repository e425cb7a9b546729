//! Claims of `undertext view` (issue 37.1): on an imported chat that outgrew the window, the
//! view is the one a harness would get — `view` prepares and publishes the checkpoint a
//! worker would have (the built-in extractive summarizer), says so on stderr, and the view
//! fits; with `--no-prepare` it leaves the store as it is, prints the refused view and exits
//! with status 1 saying why and how to get one; a refusal is never exit 0.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

mod common;

use common::{import, run, store_files, transcripts};

#[test]
fn view_of_an_imported_chat_over_the_window_prepares_the_checkpoint_a_worker_would_and_a_refusal_exits_1() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    // A real mini-swe-agent run: one task, then 144 observations sent as user messages.
    let file = transcripts().join("mini_swe_agent/deepseek_reasoner_dev/sqlfluff__sqlfluff-1733.traj.json");
    import(&store, &[file]);
    let chat = "chat-0000000000000001";

    // The log holds every write (an open may touch LOCK and the index without writing).
    let before = store_files(&store.join("log"));
    let o = run(&store, &["view", chat, "--window", "32000", "--no-prepare"]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "a refused view exits 1: {err}");
    assert!(out.contains("REFUSED"), "the refused view is printed: {out}");
    assert!(err.contains("the view is refused") && err.contains("--no-prepare"), "{err}");
    assert!(store_files(&store.join("log")) == before, "--no-prepare wrote to the log");

    let o = run(&store, &["view", chat, "--window", "32000", "--json"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("published a checkpoint of messages 0.."), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_ne!(v["decision"]["kind"], "refused", "{v}");
    assert!(v["estimate"].as_u64().unwrap() <= v["hard_limit"].as_u64().unwrap(), "{v}");

    // The checkpoint stays published: the next view needs nothing more.
    let o = run(&store, &["view", chat, "--window", "32000"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("published"), "published again");
}
