//! A read-only open beside a writer creating or collecting the store (issue 34, point 9).
//!
//! Claim: `Store::open_read_only` in a loop beside a writer that creates store after store,
//! and beside a writer running `gc` again and again, never reports `Corrupt`: a store in the
//! middle of being created or collected is not damage. The open tries again while the writer
//! holding `LOCK` is alive, and either opens (reading every message the store had) or, after
//! about a second, fails with `Error::Busy` naming that process; before the store directory
//! is there at all it is `NotFound`. A store that has no segment and no live writer is still
//! `Corrupt` at once.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use undertext::{ChatMeta, Error, NewMessage, Options, Store};

#[test]
fn a_reader_opening_beside_a_writer_creating_stores_never_sees_corrupt() {
    let base = tempfile::tempdir().unwrap();
    let stores = 60;
    let made = Arc::new(AtomicUsize::new(0));
    let writer = {
        let base = base.path().to_path_buf();
        let made = made.clone();
        std::thread::spawn(move || {
            for i in 0..stores {
                let store =
                    Store::open(base.join(format!("s{i}")), Options::default().create_if_missing(true))
                        .unwrap();
                let id = store.create_chat("o", ChatMeta::default()).unwrap();
                store.chat("o", id).unwrap().append(NewMessage::user(format!("store {i}"))).unwrap();
                store.close().unwrap();
                made.store(i + 1, Ordering::SeqCst);
            }
        })
    };
    let (mut opened, mut busy, mut absent, mut tries) = (0u64, 0u64, 0u64, 0u64);
    for i in 0..stores {
        let dir: PathBuf = base.path().join(format!("s{i}"));
        // Open this store again and again until the writer has finished it.
        loop {
            let done = made.load(Ordering::SeqCst) > i;
            tries += 1;
            match Store::open_read_only(&dir) {
                Ok(s) => {
                    opened += 1;
                    // Whatever it saw is whole: no chat, or the chat with its message.
                    let page = s.chats("o", undertext::Page { limit: 10, after: None }).unwrap();
                    for c in &page.chats {
                        let chat = s.chat("o", c.id).unwrap();
                        assert!(chat.len() <= 1);
                    }
                }
                Err(Error::Busy { pid, .. }) => {
                    assert_eq!(pid, std::process::id(), "Busy names the writer");
                    busy += 1;
                }
                Err(Error::NotFound { .. }) => absent += 1,
                Err(e) => panic!("store {i}, try {tries}: a store being created read as damage: {e:?}"),
            }
            if done {
                break;
            }
        }
    }
    writer.join().unwrap();
    eprintln!("{tries} opens: {opened} opened, {busy} busy, {absent} not there yet");
    assert!(opened >= stores as u64, "every finished store opens");
}

#[test]
fn a_reader_opening_beside_gc_never_sees_corrupt_and_reads_every_message() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("s");
    let opts = Options::default().create_if_missing(true).segment_size(4096);
    let kept = {
        let store = Store::open(&dir, opts.clone()).unwrap();
        let keep = store.create_chat("o", ChatMeta::default()).unwrap();
        let c = store.chat("o", keep).unwrap();
        for i in 0..60 {
            c.append(NewMessage::user(format!("kept {i} {}", "k".repeat(200)))).unwrap();
        }
        for _ in 0..5 {
            let gone = store.create_chat("o", ChatMeta::default()).unwrap();
            let g = store.chat("o", gone).unwrap();
            for i in 0..30 {
                g.append(NewMessage::user(format!("gone {i} {}", "g".repeat(300)))).unwrap();
            }
            store.delete_chat("o", gone).unwrap();
        }
        store.close().unwrap();
        keep
    };
    let stop = Arc::new(AtomicBool::new(false));
    let gcs = {
        let dir = dir.clone();
        let stop = stop.clone();
        let opts = opts.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                Store::gc(&dir, opts.clone()).unwrap();
                n += 1;
            }
            n
        })
    };
    let until = Instant::now() + Duration::from_secs(4);
    let (mut opened, mut busy) = (0u64, 0u64);
    while Instant::now() < until {
        match Store::open_read_only(&dir) {
            Ok(s) => {
                opened += 1;
                let c = s.chat("o", kept).unwrap();
                assert_eq!(c.len(), 60);
                assert_eq!(
                    c.get(59).unwrap().parts,
                    vec![undertext::Part::Text(format!("kept 59 {}", "k".repeat(200)))]
                );
            }
            Err(Error::Busy { .. }) => busy += 1,
            Err(e) => panic!("a read-only open beside gc failed: {e:?}"),
        }
    }
    stop.store(true, Ordering::SeqCst);
    let collections = gcs.join().unwrap();
    eprintln!("{opened} opens, {busy} busy, beside {collections} collections");
    assert!(collections >= 3 && opened >= 3, "{collections} collections, {opened} opens");
}

#[test]
fn a_store_without_segments_and_without_a_live_writer_is_corrupt_at_once() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("s");
    Store::open(&dir, Options::default().create_if_missing(true)).unwrap().close().unwrap();
    for e in std::fs::read_dir(dir.join("log")).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    // The LOCK names a process that is gone.
    std::fs::write(dir.join("LOCK"), "999999999").unwrap();
    let t = Instant::now();
    let Err(e) = Store::open_read_only(&dir) else { panic!("a store without segments opened") };
    assert!(matches!(e, Error::Corrupt { .. }), "{e:?}");
    assert!(t.elapsed() < Duration::from_millis(500), "no writer: no retries ({:?})", t.elapsed());
}
