//! A store written before compact message records (issue 19) opens and reads byte for byte
//! as the code that wrote it read it, through every path (an ordinary open, an index rebuilt
//! from the old log, a read-only open), and takes new messages beside the old ones.
//!
//! The fixture `tests/fixtures/store-main-ab7edab` was written by the CLI built from main at
//! ab7edab (message records of kind 4, rkyv): three imported transcripts (Claude Code,
//! SWE-agent, mini-SWE-agent) and an archive of `tool_heavy.jsonl`. Next to it,
//! `store-main-ab7edab.show.json` is what that build's `show --json` printed for the three
//! chats.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

mod common;

use std::path::{Path, PathBuf};

use common::{FixtureStore, json, run};

const CHATS: [&str; 3] = ["chat-0000000000000001", "chat-0000000000000002", "chat-0000000000000003"];
const ARCHIVE: &str = "bb4909755dc5972816bfd541ba38f2941fe279aa4ca1021e3876addb4b66ee25";

const FIXTURE: FixtureStore = FixtureStore { name: "store-main-ab7edab", chats: &CHATS };

fn archive_text() -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/transcripts/claude_code/spotter/tool_heavy.jsonl");
    std::fs::read(p).unwrap()
}

fn read_archive(store: &Path) -> Vec<u8> {
    let o = run(store, &["read", ARCHIVE, "--range", "0..39077", "--unit", "char"]);
    assert!(o.status.success(), "read: {}", String::from_utf8_lossy(&o.stderr));
    o.stdout
}

/// Record kinds in the store's log, in order.
fn kinds(store: &Path) -> Vec<u8> {
    use undertext::log::format;
    let mut out = Vec::new();
    let mut segs: Vec<PathBuf> =
        std::fs::read_dir(store.join("log")).unwrap().map(|e| e.unwrap().path()).collect();
    segs.sort();
    for p in segs {
        let seg = std::fs::read(&p).unwrap();
        let mut at = format::SEGMENT_HEADER_LEN;
        while let Ok(b) = format::decode_batch(&seg, at) {
            out.extend(b.records.iter().map(|r| r.kind));
            at = b.end as usize;
        }
    }
    out
}

#[test]
fn a_store_of_rkyv_message_records_reads_byte_for_byte_as_its_build_read_it() {
    let tmp = tempfile::tempdir().unwrap();
    let store = FIXTURE.copy_to(tmp.path());
    assert!(
        kinds(&store).contains(&4) && !kinds(&store).contains(&17),
        "the fixture holds kind-4 messages only"
    );
    assert!(
        FIXTURE.show(&store, &[]) == FIXTURE.expected_show(),
        "show --json differs from the build that wrote the store"
    );
    assert_eq!(read_archive(&store), archive_text());
    assert!(
        FIXTURE.show(&store, &["--read-only"]) == FIXTURE.expected_show(),
        "a read-only open reads differently"
    );
    FIXTURE.assert_checks_and_rebuilds_as_written(&store);
}

#[test]
fn new_messages_are_compact_records_beside_the_old_ones_and_both_read() {
    let tmp = tempfile::tempdir().unwrap();
    let store = FIXTURE.copy_to(tmp.path());
    let more = Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../../shared/data/transcripts/claude_code/spotter/fa812bfe-b295-4cca-9c2f-fdf01028cb46/subagents/agent-acompact-70d8e7.jsonl",
    );
    json(&store, &["import", more.to_str().unwrap(), "--json"]);
    let k = kinds(&store);
    assert!(k.contains(&4) && k.contains(&17), "old kind-4 and new kind-17 message records: {k:?}");
    assert!(
        FIXTURE.show(&store, &[]) == FIXTURE.expected_show(),
        "the old chats read differently beside new records"
    );
    let chats = json(&store, &["chats", "--json"]);
    let new = chats["chats"].as_array().unwrap().iter().find(|c| c["id"] == "chat-0000000000000004").unwrap();
    assert!(new["messages"].as_u64().unwrap() > 0);
    let shown = json(&store, &["show", "--json", "chat-0000000000000004"]);
    let from_index = shown["chats"][0]["messages"].as_array().unwrap().len() as u64;
    assert_eq!(from_index, new["messages"].as_u64().unwrap());
    FIXTURE.assert_checks_and_rebuilds_as_written(&store);
    assert_eq!(json(&store, &["show", "--json", "chat-0000000000000004"]), shown);
}
