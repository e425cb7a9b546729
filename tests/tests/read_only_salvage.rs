//! Salvage through a read-only open (`Store::open_read_only`) of a damaged store: everything
//! that verifies is readable, what does not is reported, and not a byte is written.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::path::{Path, PathBuf};

use undertext::{ChatId, Options, Part, Store};
use undertext_tests::read_only::{assert_unchanged, closed_store, message_text, store_files as files};

/// A closed store of 3 chats of 8 messages, written one chat after the other over 4 KiB
/// segments; returns the chat ids and the segment files in order.
fn store(dir: &Path) -> (Vec<ChatId>, Vec<PathBuf>) {
    let ids = closed_store(dir);
    let mut segs: Vec<PathBuf> =
        std::fs::read_dir(dir.join("log")).unwrap().map(|e| e.unwrap().path()).collect();
    segs.sort();
    assert!(segs.len() >= 5, "expected at least 5 segments, found {}", segs.len());
    (ids, segs)
}

fn flip(path: &Path, at: usize) {
    let mut b = std::fs::read(path).unwrap();
    b[at] ^= 0x20;
    std::fs::write(path, b).unwrap();
}

/// Reads every chat through `ro`: each message returned must be exactly the one written at
/// its seq. Returns how many messages each chat gave (`None`: it did not load).
fn read_all(ro: &Store, ids: &[ChatId]) -> Vec<Option<usize>> {
    ids.iter()
        .enumerate()
        .map(|(c, id)| {
            let msgs = ro.chat("o", *id).and_then(|ch| ch.messages()).ok()?;
            // A message the damage took is left out (lost: see FORMAT.md): each one read
            // is the one written at its seq.
            for m in &msgs {
                let i = m.seq;
                match &m.parts[..] {
                    [Part::Text(t)] => assert_eq!(*t, message_text(c as u64 * 100 + i), "chat {c} msg {i}"),
                    other => panic!("chat {c} message {i}: expected one text part, found {other:?}"),
                }
            }
            Some(msgs.len())
        })
        .collect()
}

#[test]
fn a_damaged_record_in_a_sealed_segment_is_reported_and_the_rest_is_readable() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, segs) = store(dir.path());
    let hit = &segs[segs.len() - 2];
    let len = std::fs::metadata(hit).unwrap().len() as usize;
    flip(hit, len / 2);
    let before = files(dir.path());
    let ro = Store::open_read_only(dir.path()).unwrap();
    let n = segs.len() - 1; // segment numbers start at 1
    assert!(
        ro.open_warnings().iter().any(|w| w.contains(&format!("log segment {n} at offset"))),
        "{:?}",
        ro.open_warnings()
    );
    let got = read_all(&ro, &ids);
    assert_eq!(got[0], Some(8), "the first chat lies in undamaged segments: {got:?}");
    drop(ro);
    assert_unchanged(dir.path(), &before, "salvage wrote to the store");
}

#[test]
fn with_the_index_deleted_and_a_bad_record_the_writer_refuses_and_salvage_reads_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, segs) = store(dir.path());
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let hit = &segs[1];
    let len = std::fs::metadata(hit).unwrap().len() as usize;
    flip(hit, len - 100);
    let refused = Store::open(dir.path(), Options::default());
    assert!(refused.is_err(), "the writer's open refuses a damaged log it must replay whole");
    drop(refused);
    let before = files(dir.path());
    let ro = Store::open_read_only(dir.path()).unwrap();
    assert!(ro.open_warnings().iter().any(|w| w.contains("log segment 2")), "{:?}", ro.open_warnings());
    let got = read_all(&ro, &ids);
    assert_eq!(got[2], Some(8), "the last chat lies in undamaged segments: {got:?}");
    drop(ro);
    assert_unchanged(dir.path(), &before, "salvage wrote to the store");
}

#[test]
fn a_flipped_byte_in_the_last_segment_header_is_reported_and_every_chat_is_readable() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, segs) = store(dir.path());
    flip(segs.last().unwrap(), 20);
    assert!(Store::open(dir.path(), Options::default()).is_err(), "the writer's open refuses it");
    let before = files(dir.path());
    let ro = Store::open_read_only(dir.path()).unwrap();
    assert!(
        ro.open_warnings()
            .iter()
            .any(|w| w.contains(&format!("log segment {}: its header is damaged", segs.len()))),
        "{:?}",
        ro.open_warnings()
    );
    assert_eq!(read_all(&ro, &ids), vec![Some(8); 3]);
    drop(ro);
    assert_unchanged(dir.path(), &before, "salvage wrote to the store");
}

#[test]
fn missing_segments_are_reported_and_the_chats_before_them_are_readable() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, segs) = store(dir.path());
    let gone = segs.len() - 1; // a sealed segment near the end
    std::fs::remove_file(&segs[gone - 1]).unwrap();
    let before = files(dir.path());
    let ro = Store::open_read_only(dir.path()).unwrap();
    let w = ro.open_warnings();
    assert!(w.iter().any(|w| w.contains(&format!("log segment {gone} is missing"))), "{w:?}");
    assert!(w.iter().any(|w| w.contains("batches between are missing")), "{w:?}");
    let got = read_all(&ro, &ids);
    assert_eq!(got[0], Some(8), "{got:?}");
    drop(ro);
    assert_unchanged(dir.path(), &before, "salvage wrote to the store");
}

#[test]
fn a_truncated_tail_is_not_cut_and_everything_before_it_is_readable() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, segs) = store(dir.path());
    let last = segs.last().unwrap();
    let len = std::fs::metadata(last).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(last).unwrap().set_len(len - 50).unwrap();
    let before = files(dir.path());
    let ro = Store::open_read_only(dir.path()).unwrap();
    let got = read_all(&ro, &ids);
    assert_eq!(&got[..2], &[Some(8), Some(8)]);
    assert_eq!(got[2], Some(7), "the last chat without its torn last message: {got:?}");
    drop(ro);
    assert_unchanged(dir.path(), &before, "the torn tail was cut by a read-only open");
}
