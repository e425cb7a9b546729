//! Claims of `undertext delete` and `gc`: a deleted chat is gone for every command, `gc`
//! gives its space back (the log shrinks), the other chats read back the same, and the store
//! checks clean afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

mod common;

use std::path::Path;

use common::{json, run};

#[test]
fn a_deleted_chat_is_gone_and_gc_gives_its_space_back_leaving_the_others_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/transcripts/mini_swe_agent");
    json(&store, &["import", dir.to_str().unwrap(), "--json"]);
    let chats = json(&store, &["chats", "--json"]);
    let list = chats["chats"].as_array().unwrap();
    // The biggest chat goes; the others must not change.
    let victim = list.iter().max_by_key(|c| c["messages"].as_u64().unwrap()).unwrap()["id"].as_str().unwrap();
    let others: Vec<&str> =
        list.iter().map(|c| c["id"].as_str().unwrap()).filter(|id| *id != victim).collect();
    let mut show = vec!["show", "--json"];
    show.extend(&others);
    let before = json(&store, &show);

    assert!(run(&store, &["delete", victim]).status.success());
    assert!(!run(&store, &["show", victim]).status.success());
    let gc = json(&store, &["gc", "--json"]);
    assert_eq!(gc["deleted_chats"], 1);
    assert!(gc["log_bytes_after"].as_u64().unwrap() < gc["log_bytes_before"].as_u64().unwrap(), "{gc}");
    assert_eq!(json(&store, &show), before);
    assert_eq!(json(&store, &["check", "--json"])["ok"], true);
}
