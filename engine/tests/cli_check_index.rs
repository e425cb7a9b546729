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

    // One bit flipped in the middle of the index: redb opens the file (its header is
    // intact), and the damage is found when its pages are verified.
    let index = store.join("index.redb");
    let mut bytes = std::fs::read(&index).unwrap();
    let at = bytes.len() / 2 + 100;
    bytes[at] ^= 0x10;
    std::fs::write(&index, bytes).unwrap();

    for args in [vec!["chats"], vec!["show", ids[0]]] {
        let o = run(&store, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("index") && err.contains("check --rebuild"), "{args:?}: {err}");
    }
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
