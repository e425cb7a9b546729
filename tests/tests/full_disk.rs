//! A store on a full disk (issue 16, item 4).
//!
//! Claim: on a disk with no free space, a cleanly closed store opens and every read works; open's
//! preallocation of the log is skipped (reported in `Store::open_warnings`) and whatever part
//! of it landed is cut off again, so opening any number of times leaves the log files as they
//! were; every write fails with an error that says the disk is full, and changes nothing; once
//! space is back, writes work again. After a crash, when open must write the index's catch-up,
//! a full disk refuses the open with an error that says so (shown on the real tmpfs only: the
//! seam model does not see redb's writes into space it has not allocated); it opens with every
//! acknowledged message once space is back.
//!
//! The suite models the full disk with the fault seam (every write that would grow a file
//! fails with `ENOSPC`). `real_tmpfs_full_disk` does the same on a real, small tmpfs; it needs
//! root (`mount`) and runs in the campaign (`scripts/crash-campaign`), not in the suite.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use undertext::fault;
use undertext::{ChatId, ChatMeta, Durability, Error, NewMessage, Options, Store};

fn opts() -> Options {
    Options { durability: Durability::Group, create_if_missing: true, ..Options::default() }
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
    let e = c.append(NewMessage::user("y".repeat(100_000))).expect_err("a write on a full disk succeeded");
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
            assert!(
                store.open_warnings().iter().any(|w| w.contains("no space")),
                "open {round}: no warning about the skipped preallocation: {:?}",
                store.open_warnings()
            );
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
    crashed_copy(&dir, chat, &crashed);
    fill(&filler);
    // The index must catch up with the log, and that needs space: refused, saying so.
    match Store::open(&crashed, opts()) {
        Ok(s) => {
            assert_eq!(s.chat("o", chat).unwrap().len(), 60);
            eprintln!("full tmpfs after a crash: opened with all 60 messages");
        }
        Err(e) => {
            assert!(e.to_string().contains("No space left on device"), "{e}");
            eprintln!("full tmpfs after a crash: open refused: {e}");
        }
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
        "full tmpfs: 3 opens on a full 16 MiB tmpfs, reads whole, writes refused; writes back once freed"
    );
}

/// The files of `dir` as a crash leaves them after 20 more appends: the log holds them, the
/// index does not yet (a copy taken while the store is open), in `to`.
fn crashed_copy(dir: &Path, chat: ChatId, to: &Path) {
    let store = Store::open(dir, opts()).unwrap();
    let c = store.chat("o", chat).unwrap();
    for i in 0..20 {
        c.append(NewMessage::user(format!("late {i}"))).unwrap();
    }
    std::fs::create_dir_all(to.join("log")).unwrap();
    for e in std::fs::read_dir(dir.join("log")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join("log").join(e.file_name())).unwrap();
    }
    std::fs::copy(dir.join("index.redb"), to.join("index.redb")).unwrap();
    std::fs::copy(dir.join("LOCK"), to.join("LOCK")).unwrap();
}
