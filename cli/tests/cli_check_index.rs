//! Claims of `undertext check` about the index: a damaged `index.redb` makes every command
//! fail with one line that says to run `check --rebuild`; `check` reports the damage (non-zero
//! exit); `check --rebuild` rebuilds the index from the log into a fresh file, after which
//! every chat reads back as before and `check` is clean.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

mod common;

use std::path::Path;

use common::{json, run};

#[test]
fn a_damaged_index_is_reported_by_check_and_check_rebuild_restores_every_chat() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/transcripts/mini_swe_agent");
    json(&store, &["import", dir.to_str().unwrap(), "--json"]);
    let chats = json(&store, &["chats", "--json"]);
    let ids: Vec<&str> =
        chats["chats"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    let mut show = vec!["show", "--json"];
    show.extend(&ids);
    let before = json(&store, &show);

    // One bit flipped in a page of the index, at offsets tried in a fixed order: a flip may
    // land on a free page (nothing damaged) or on state redb repairs at open; every command
    // then either reads exactly what it read before, or fails with one line that says to
    // rebuild. Never a panic, never other bytes. The first flip that fails a read is the
    // damage `check` must report and `check --rebuild` must undo.
    let index = store.join("index.redb");
    let clean = std::fs::read(&index).unwrap();
    let mut damaged = None;
    for page in 1..clean.len() / 4096 {
        // Near the start of the page, where a used page keeps its kind and entry count.
        let at = page * 4096 + 16;
        let mut bytes = clean.clone();
        bytes[at] ^= 0x10;
        std::fs::write(&index, &bytes).unwrap();
        let o = run(&store, &show);
        let err = String::from_utf8_lossy(&o.stderr);
        match o.status.code() {
            Some(0) => {
                let now: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
                assert_eq!(now, before, "flip at {at}: read different bytes");
            }
            Some(1) => {
                assert!(err.contains("index") && err.contains("check --rebuild"), "flip at {at}: {err}");
                let o = run(&store, &["chats"]);
                assert_eq!(o.status.code(), Some(1), "flip at {at}: chats");
                damaged = Some(at);
                break;
            }
            other => panic!("flip at {at}: exit {other:?}: {err}"),
        }
        // The command may have repaired or rewritten the file: start the next try clean.
        std::fs::write(&index, &clean).unwrap();
    }
    assert!(damaged.is_some(), "no flip in any page damaged a page a read needs");
    let o = run(&store, &["check"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("index damaged"), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("check --rebuild"), "{o:?}");

    let o = run(&store, &["check", "--rebuild"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("index rebuilt from the log"));
    assert_eq!(json(&store, &show), before);
    assert_eq!(json(&store, &["check", "--json"])["ok"], true);
}
