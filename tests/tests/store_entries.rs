//! Store entries are never followed through links (issue 16, item 7).
//!
//! Claim: a `LOCK`, `index.redb`, segment file or `log/` that is a symbolic link, and a `LOCK`
//! that is a FIFO or a directory, make open refuse with an error naming the entry and what
//! it found; the link's target is left exactly as it was (before the fix, a symlinked `LOCK`
//! had its target overwritten with the opener's pid).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::os::unix::fs::symlink;
use std::path::Path;

use undertext::{ChatMeta, Durability, Error, NewMessage, Options, Store};

fn opts() -> Options {
    Options::default().durability(Durability::None).create_if_missing(true)
}

/// A closed store with one chat.
fn make(dir: &Path) {
    let store = Store::open(dir, opts()).unwrap();
    let id = store.create_chat("o", ChatMeta::default()).unwrap();
    store.chat("o", id).unwrap().append(NewMessage::user("hello")).unwrap();
    store.close().unwrap();
}

fn refused(dir: &Path, entry: &str, found: &str) {
    match Store::open(dir, opts()) {
        Err(e @ Error::Io { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(entry) && msg.contains(found), "{entry}: the error does not say so: {msg}");
        }
        Err(e) => panic!("{entry}: refused, but not as an I/O error of the entry: {e}"),
        Ok(_) => panic!("{entry}: the store opened"),
    }
}

#[test]
fn a_symlinked_lock_is_refused_and_its_target_stays_unchanged() {
    let base = tempfile::tempdir().unwrap();
    let precious = base.path().join("precious.txt");
    std::fs::write(&precious, b"do not overwrite me\n").unwrap();
    for existing in [false, true] {
        let dir = base.path().join(format!("store-{existing}"));
        if existing {
            make(&dir);
            std::fs::remove_file(dir.join("LOCK")).unwrap();
        } else {
            std::fs::create_dir_all(&dir).unwrap();
        }
        symlink(&precious, dir.join("LOCK")).unwrap();
        refused(&dir, "LOCK", "symbolic link");
        assert_eq!(std::fs::read(&precious).unwrap(), b"do not overwrite me\n", "existing store: {existing}");
    }
}

#[test]
fn a_lock_that_is_a_fifo_or_a_directory_is_refused() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("fifo");
    make(&dir);
    std::fs::remove_file(dir.join("LOCK")).unwrap();
    let status = std::process::Command::new("mkfifo").arg(dir.join("LOCK")).status().unwrap();
    assert!(status.success());
    refused(&dir, "LOCK", "FIFO");
    let dir = base.path().join("dir");
    make(&dir);
    std::fs::remove_file(dir.join("LOCK")).unwrap();
    std::fs::create_dir(dir.join("LOCK")).unwrap();
    assert!(Store::open(&dir, opts()).is_err(), "a LOCK directory was accepted");
}

#[test]
fn a_symlinked_index_segment_or_log_directory_is_refused_and_left_alone() {
    let base = tempfile::tempdir().unwrap();
    // index.redb -> a file outside the store.
    let dir = base.path().join("index");
    make(&dir);
    let outside = base.path().join("index-elsewhere.redb");
    std::fs::rename(dir.join("index.redb"), &outside).unwrap();
    symlink(&outside, dir.join("index.redb")).unwrap();
    let before = std::fs::read(&outside).unwrap();
    refused(&dir, "index.redb", "symbolic link");
    assert!(std::fs::read(&outside).unwrap() == before, "the index's target changed");
    // A segment -> a file outside the store.
    let dir = base.path().join("segment");
    make(&dir);
    let seg = dir.join("log/00000001.seg");
    let outside = base.path().join("segment-elsewhere.seg");
    std::fs::rename(&seg, &outside).unwrap();
    symlink(&outside, &seg).unwrap();
    let before = std::fs::read(&outside).unwrap();
    refused(&dir, "00000001.seg", "symbolic link");
    assert!(std::fs::read(&outside).unwrap() == before, "the segment's target changed");
    // log/ -> a directory outside the store.
    let dir = base.path().join("logdir");
    make(&dir);
    let outside = base.path().join("log-elsewhere");
    std::fs::rename(dir.join("log"), &outside).unwrap();
    symlink(&outside, dir.join("log")).unwrap();
    refused(&dir, "log", "symbolic link");
}
