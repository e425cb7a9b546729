//! Read-only opens beside a live writer, with real processes (issue 20, item 1): a writer
//! process appends to 8 chats (4 KiB segments: it seals one every few appends) and, every
//! third of the run, deletes a chat, closes, runs `gc` and reopens (one or two times); 4 reader processes open
//! read-only, then refresh and check in a loop (`ro_soak_reader`): every message acknowledged
//! before a refresh is there after it, every byte reads as the writer wrote it (the text is
//! recomputed from the chat id and seq), and a refresh after a `gc` says to reopen, which
//! they do. The writer must finish its run.
//!
//! Short by default (3 s of appends); `UNDERTEXT_RO_SOAK_SECS` sets the run's length
//! (`scripts/ro-soak` runs 30 s and compares the writer's rate with and without readers).

use std::process::{Command, Stdio};
use std::time::Duration;

use undertext::{ChatId, Options, Store};
use undertext_tests::child::spawn_until_ready;
use undertext_tests::ro_soak::{Acks, OWNER, check_message};

fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

#[test]
fn four_reader_processes_see_every_acknowledged_message_through_seals_and_gc() {
    let secs: f64 = std::env::var("UNDERTEXT_RO_SOAK_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(3.0);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let acks = dir.path().join("acks");
    let w = spawn_until_ready(
        Command::new(env!("CARGO_BIN_EXE_ro_soak_writer"))
            .arg(&store)
            .arg(&acks)
            .arg(secs.to_string())
            .arg((secs / 3.0).to_string())
            .arg("4096")
            .arg("8"),
        Duration::from_secs(60),
        "ro_soak_writer",
    );
    // The readers open before the writer starts appending, so every one of them meets the
    // seals and the collections.
    let readers: Vec<_> = (0..4)
        .map(|i| {
            spawn_until_ready(
                Command::new(env!("CARGO_BIN_EXE_ro_soak_reader"))
                    .arg(&store)
                    .arg(&acks)
                    .arg("2")
                    .arg((i + 1).to_string())
                    .stderr(Stdio::inherit()),
                Duration::from_secs(60),
                "ro_soak_reader",
            )
        })
        .collect();
    std::fs::write(acks.with_extension("go"), b"").unwrap();
    let summary = w.next_line().unwrap_or_default();
    eprintln!("writer: {summary}");
    assert!(w.wait().success(), "the writer failed");
    let gcs = field(&summary, "gcs");
    // A collection every third of the run: two, or one when a slow machine makes the first
    // take long (the next is due a third of the run after the first ends).
    assert!(gcs >= 1, "the writer ran no collection: {summary}");
    for r in readers {
        let line = r.next_line().unwrap_or_default();
        eprintln!("reader: {line}");
        assert!(r.wait().success(), "a reader failed (its stderr says why): {line}");
        assert!(field(&line, "refreshes") >= 2, "{line}");
        assert!(field(&line, "reopens") >= 1, "a reader opened before a gc must reopen after it: {line}");
        assert!(
            line.contains("open the store again"),
            "the reader's error after a gc says to reopen: {line}"
        );
        assert!(field(&line, "checked") > 0, "{line}");
    }
    // The writer survived every collection: what it acknowledged is all there, closed.
    let table = Acks::read(&acks).unwrap();
    assert!(table.done);
    let s = Store::open(&store, Options::default()).unwrap();
    let mut total = 0;
    for slot in &table.slots {
        let msgs = s.chat(OWNER, ChatId(slot.chat)).unwrap().messages().unwrap();
        assert_eq!(msgs.len() as u64, slot.count, "chat {}", slot.chat);
        for (i, m) in msgs.iter().enumerate() {
            check_message(slot.chat, i as u64, m).unwrap();
        }
        total += slot.count;
    }
    assert!(total > 0);
    assert!(
        std::fs::read_dir(store.join("log")).unwrap().count() > 5,
        "the writer sealed segments since the last gc"
    );
}
