//! A store on a full disk (issue 16, item 4).
//!
//! Claim: on a disk with no free space, a cleanly closed store opens and every read works; an
//! open writes no zeros (the log is preallocated before the first write, and on a full disk
//! whatever part of the zeros landed is cut off again), so opening any number of times leaves
//! the log files as they were; every write fails with an error that says the disk is full, and changes nothing; once
//! space is back, writes work again. After a crash, when open must write the index's catch-up,
//! a full disk gives the store read-only: every acknowledged message reads, writes fail with
//! `Error::ReadOnly` saying the disk is full, and the files (log and index) are left as found;
//! once space is back it opens for writing with every acknowledged message.
//!
//! The suite models the full disk with the fault seam (every write that would grow a file, or
//! reach past the blocks a sparse file has, fails with `ENOSPC`). `real_tmpfs_full_disk` does the same on a real, small tmpfs; it needs
//! root (`mount`) and runs in the campaign (`scripts/crash-campaign`), not in the suite.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use undertext::fault;
use undertext::{ChatId, ChatMeta, Durability, Error, NewMessage, Options, Store};

fn opts() -> Options {
    Options::default().durability(Durability::Group).create_if_missing(true)
}

/// A closed store with a chat of 40 messages and a blob; returns the chat and the blob.
fn make(dir: &Path) -> (ChatId, Vec<u8>) {
    let store = Store::open(dir, opts()).unwrap();
    let id = store.create_chat("o", ChatMeta::default()).unwrap();
    let chat = store.chat("o", id).unwrap();
    for i in 0..40 {
        chat.append(NewMessage::user(format!("message {i} {}", "x".repeat(i * 50)))).unwrap();
    }
    let blob: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    store.put_blob("o", &blob).unwrap();
    store.close().unwrap();
    (id, blob)
}

fn log_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    std::fs::read_dir(dir.join("log"))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

/// `n` characters that compression cannot shrink much: a write of them needs new blocks.
fn incompressible(n: usize) -> String {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'!' + (x % 90) as u8)
        })
        .collect()
}

/// Reads everything back; then a write that needs space (a real file system still takes a
/// write that fits the file's last allocated block), which must fail saying the disk is full.
fn read_all_and_fail_a_write(store: &Store, chat: ChatId, blob: &[u8]) {
    let c = store.chat("o", chat).unwrap();
    assert_eq!(c.len(), 40);
    for i in 0..40u64 {
        let m = c.get(i).unwrap();
        assert_eq!(
            m.parts,
            vec![undertext::Part::Text(format!("message {i} {}", "x".repeat(i as usize * 50)))]
        );
    }
    assert_eq!(&*store.get_blob("o", &undertext::BlobId::of(blob)).unwrap(), blob);
    let e =
        c.append(NewMessage::user(incompressible(100_000))).expect_err("a write on a full disk succeeded");
    let msg = e.to_string();
    assert!(msg.contains("disk is full"), "the error does not say the disk is full: {msg}");
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
}

#[test]
fn a_store_on_a_full_disk_opens_reads_and_refuses_writes_leaving_its_files_as_found() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("s");
    let (chat, blob) = make(&dir);
    let before = log_files(&dir);
    {
        let ctl = fault::install(&dir).unwrap();
        ctl.set_disk_full(true);
        for round in 0..3 {
            let store =
                Store::open(&dir, opts()).unwrap_or_else(|e| panic!("open {round} on a full disk: {e}"));
            read_all_and_fail_a_write(&store, chat, &blob);
            drop(store);
            assert!(log_files(&dir) == before, "open {round} on a full disk changed the log files");
        }
        assert!(ctl.full_refusals() >= 3, "the full disk refused only {} writes", ctl.full_refusals());
    }
    // Space is back: writes work, and nothing was lost.
    let store = Store::open(&dir, opts()).unwrap();
    assert!(store.open_warnings().is_empty(), "{:?}", store.open_warnings());
    let c = store.chat("o", chat).unwrap();
    c.append(NewMessage::user("one more")).unwrap();
    assert_eq!(c.len(), 41);
    assert!(store.check().unwrap().is_ok());
}

/// Every file of the store in `dir` but `LOCK` (which open writes its pid to), byte for byte.
fn store_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = log_files(dir);
    let index = dir.join("index.redb");
    out.insert(index.clone(), std::fs::read(&index).unwrap());
    out
}

/// After a crash the index must catch up with the log at open, and that needs space: on a full
/// disk open gives a read-only store instead (every acknowledged message reads; writes fail
/// saying the disk is full), and leaves every file as it found it.
#[test]
fn after_a_crash_a_store_on_a_full_disk_opens_read_only_with_every_acknowledged_message_and_leaves_its_files_as_found()
 {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("s");
    let (chat, blob) = make(&dir);
    let crashed = base.path().join("crashed");
    crashed_copy(&dir, chat, &crashed, LATE);
    let before = store_files(&crashed);
    {
        let ctl = fault::install(&crashed).unwrap();
        ctl.set_disk_full(true);
        for round in 0..2 {
            let store = Store::open(&crashed, opts())
                .unwrap_or_else(|e| panic!("open {round} after a crash on a full disk: {e}"));
            assert!(store.is_read_only(), "open {round}: expected a read-only store");
            assert!(
                store.open_warnings().iter().any(|w| w.contains("disk is full") && w.contains("read-only")),
                "open {round}: no warning that the store is read-only for lack of space: {:?}",
                store.open_warnings()
            );
            let c = store.chat("o", chat).unwrap();
            assert_eq!(c.len(), 40 + LATE, "open {round}: every acknowledged message");
            assert_eq!(c.get(39 + LATE).unwrap().parts, vec![undertext::Part::Text(late_text(LATE - 1))]);
            assert_eq!(&*store.get_blob("o", &undertext::BlobId::of(&blob)).unwrap(), &blob[..]);
            let e = c.append(NewMessage::user("y")).expect_err("a write after a full-disk open succeeded");
            assert!(matches!(e, Error::ReadOnly(_)), "{e:?}");
            assert!(e.to_string().contains("disk is full"), "the error does not say why: {e}");
            drop(store);
            let now = store_files(&crashed);
            let changed: Vec<_> = before.keys().filter(|k| before.get(*k) != now.get(*k)).collect();
            assert!(changed.is_empty(), "open {round} on a full disk changed {changed:?}");
            assert_eq!(now.len(), before.len(), "open {round} on a full disk added files");
        }
        // `gc` writes a new log: refused, saying why, and nothing changed.
        let e = Store::gc(&crashed, opts()).expect_err("gc on a full disk succeeded");
        assert!(matches!(e, Error::ReadOnly(_)) && e.to_string().contains("disk is full"), "{e:?}");
        assert!(store_files(&crashed) == before, "gc on a full disk changed the store's files");
    }
    // Space is back: the index catches up, writes work, nothing was lost.
    let store = Store::open(&crashed, opts()).unwrap();
    assert!(!store.is_read_only());
    let c = store.chat("o", chat).unwrap();
    assert_eq!(c.len(), 40 + LATE);
    c.append(NewMessage::user("one more")).unwrap();
    assert!(store.check().unwrap().is_ok());
}

/// Appends a crashed copy holds that its index has not taken: enough that the index's
/// catch-up must grow its file.
/// Enough rows that the index catching up needs more pages than its file has free.
const LATE: u64 = 5000;

/// Fills the disk: one file, written until the file system refuses.
fn fill(filler: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(filler).unwrap();
    let chunk = vec![1u8; 64 << 10];
    while f.write_all(&chunk).is_ok() {}
    let small = [1u8; 512];
    while f.write_all(&small).is_ok() {}
    let _ = f.sync_all();
}

/// The same on a real file system: a 16 MiB tmpfs filled to the last byte. Needs root;
/// `scripts/crash-campaign` runs it (`--ignored`).
#[test]
#[ignore = "needs root to mount a tmpfs; run by scripts/crash-campaign"]
fn real_tmpfs_full_disk() {
    let base = tempfile::tempdir().unwrap();
    let mnt = base.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16m", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mount -t tmpfs failed (root needed)");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Unmount(mnt.clone());
    let dir = mnt.join("s");
    let (chat, blob) = make(&dir);
    let filler = mnt.join("filler");
    fill(&filler);
    let before = log_files(&dir);
    for round in 0..3 {
        let store = Store::open(&dir, opts()).unwrap_or_else(|e| panic!("open {round} on a full tmpfs: {e}"));
        read_all_and_fail_a_write(&store, chat, &blob);
        eprintln!("full tmpfs, open {round}: warnings {:?}", store.open_warnings());
        drop(store);
        assert!(log_files(&dir) == before, "open {round} on a full tmpfs changed the log files");
    }
    // After a crash (the index lagging the log), on the same full disk.
    std::fs::remove_file(&filler).unwrap();
    let crashed = mnt.join("crashed");
    crashed_copy(&dir, chat, &crashed, 20);
    fill(&filler);
    // The index must catch up with the log, and that needs space: the store opens read-only,
    // every acknowledged message readable, the files as they were.
    let before = store_files(&crashed);
    for round in 0..2 {
        let s = Store::open(&crashed, opts())
            .unwrap_or_else(|e| panic!("open {round} of a crashed store on a full tmpfs: {e}"));
        let c = s.chat("o", chat).unwrap();
        assert_eq!(c.len(), 60);
        let e = c.append(NewMessage::user("y")).expect_err("a write after a full-disk open succeeded");
        assert!(e.to_string().contains("disk is full"), "{e}");
        eprintln!(
            "full tmpfs after a crash, open {round}: read-only {}, all 60 messages; warnings {:?}; a write: {e}",
            s.is_read_only(),
            s.open_warnings()
        );
        drop(s);
        assert!(
            store_files(&crashed) == before,
            "open {round} of a crashed store on a full tmpfs changed its files"
        );
    }
    std::fs::remove_file(&filler).unwrap();
    let s = Store::open(&crashed, opts()).unwrap();
    assert_eq!(s.chat("o", chat).unwrap().len(), 60, "after a crash, once space is back");
    drop(s);
    let store = Store::open(&dir, opts()).unwrap();
    let c = store.chat("o", chat).unwrap();
    c.append(NewMessage::user("one more")).unwrap();
    assert_eq!(c.len(), 61);
    assert!(store.check().unwrap().is_ok());
    eprintln!(
        "full tmpfs: 3 opens on a full 16 MiB tmpfs, reads whole, writes refused; a crashed copy opened read-only twice with all 60 messages, its files unchanged; writes back once freed"
    );
}

/// The files of `dir` as a crash leaves them after `late` more appends: the log holds them, the
/// index does not yet (a copy taken while the store is open), in `to`.
/// A late message: long enough (over 128 characters) for the index to list its text, so that
/// catching the index up with [`LATE`] of them needs new pages.
fn late_text(i: u64) -> String {
    format!("late {i} {}", "y".repeat(150))
}

fn crashed_copy(dir: &Path, chat: ChatId, to: &Path, late: u64) {
    // The index takes nothing of these appends before the copy.
    let hold = std::time::Duration::from_secs(3600);
    let store = Store::open(
        dir,
        opts()
            .index_flush_interval(hold)
            .index_durable_interval(hold)
            .index_durable_bytes(u64::MAX)
            .index_backlog_bytes(1 << 30),
    )
    .unwrap();
    let c = store.chat("o", chat).unwrap();
    for first in (0..late).step_by(10) {
        c.append_batch((first..(first + 10).min(late)).map(|i| NewMessage::user(late_text(i))).collect())
            .unwrap();
    }
    std::fs::create_dir_all(to.join("log")).unwrap();
    for e in std::fs::read_dir(dir.join("log")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join("log").join(e.file_name())).unwrap();
    }
    std::fs::copy(dir.join("index.redb"), to.join("index.redb")).unwrap();
    std::fs::copy(dir.join("LOCK"), to.join("LOCK")).unwrap();
}
