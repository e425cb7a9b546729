//! Claims (issue 16, "Smaller"): a malformed `--range`, an unknown `--unit` and `chats --limit
//! 0` are usage errors (exit 2, one line); what open repaired (a torn tail cut) is printed to
//! stderr; `check` on a store whose log lost a segment fails and says what is missing.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

mod common;

use std::path::Path;

use common::run;
use undertext::{ChatMeta, Durability, NewMessage, Options, Store};

fn usage_error(o: &std::process::Output, want: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "exit code; stderr {err:?}");
    assert_eq!(err.lines().count(), 1, "one line expected: {err:?}");
    assert!(err.contains(want), "{err:?} should mention {want:?}");
}

#[test]
fn a_bad_range_unit_or_limit_is_a_usage_error_with_exit_code_2() {
    let tmp = tempfile::tempdir().unwrap();
    let s = tmp.path();
    let id = "0".repeat(64);
    usage_error(&run(s, &["read", &id, "--range", "abc"]), "--range");
    usage_error(&run(s, &["read", &id, "--range", "1..x"]), "--range");
    usage_error(&run(s, &["read", &id, "--unit", "furlong"]), "--unit");
    usage_error(&run(s, &["chats", "--limit", "0"]), "--limit");
    // Good syntax gets past the parser (and then fails on the missing store, exit 1).
    assert_eq!(run(s, &["read", &id, "--range", "2..", "--unit", "line"]).status.code(), Some(1));
}

fn store_with_chat(dir: &Path, opts: Options, messages: usize) {
    let store = Store::open(dir, opts).unwrap();
    let id = store.create_chat("local", ChatMeta::default()).unwrap();
    let chat = store.chat("local", id).unwrap();
    for i in 0..messages {
        chat.append(NewMessage::user(format!("message {i}: {}", "text ".repeat(200)))).unwrap();
    }
    store.close().unwrap();
}

#[test]
fn a_torn_tail_cut_at_open_is_reported_on_stderr() {
    let tmp = tempfile::tempdir().unwrap();
    let s = tmp.path().join("s");
    store_with_chat(&s, Options::default().durability(Durability::None), 3);
    // A write cut off by a crash: half a batch header after the data.
    let seg = s.join("log/00000001.seg");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes.extend_from_slice(&[0x55; 20]);
    std::fs::write(&seg, &bytes).unwrap();
    let o = run(&s, &["chats"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.starts_with("warning: ") && err.contains("torn tail"), "no warning on stderr: {err:?}");
    // Repaired once: the next command has nothing to say.
    let o = run(&s, &["chats"]);
    assert!(o.status.success() && o.stderr.is_empty(), "{:?}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn check_of_a_store_that_lost_a_segment_fails_and_says_what_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let s = tmp.path().join("s");
    let opts = Options::default().durability(Durability::None).segment_size(4096);
    // Enough messages for several 4 KiB segments whatever the record encoding's size (compact
    // message records are about half the size rkyv's were).
    store_with_chat(&s, opts, 160);
    assert!(s.join("log/00000004.seg").exists(), "the store should span several segments");
    std::fs::remove_file(s.join("log/00000002.seg")).unwrap();
    for cmd in [&["check"][..], &["check", "--rebuild"], &["chats"]] {
        let o = run(&s, cmd);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{cmd:?}: {err}");
        assert!(err.contains("segment 2") && err.contains("missing"), "{cmd:?}: {err}");
    }
}
