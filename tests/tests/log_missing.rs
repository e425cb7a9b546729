//! Missing log data is never hidden (issue 16, item 1).
//!
//! Claim: on a store with real transcripts imported (many small segments), deleting a sealed
//! segment, deleting several, deleting the first or the last, truncating a sealed segment (to
//! nothing, to its header, by half, by one byte), truncating the last segment to its header,
//! or deleting `log/` — with the index in place or deleted — makes open refuse with
//! `Error::Corrupt` saying what is missing, and leaves every file as it found it. Restoring
//! the file opens the store again with every chat; for a log that lost its end, removing the
//! index (the advice of the error) opens what remains. `check` on an open store whose segment
//! went missing reports it. And bits flipped anywhere in the log never make a message read
//! differently: it reads as it was, or fails.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use undertext::import::{self, Format};
use undertext::{Durability, Error, Options, Page, Store};
use undertext_tests::transcripts;

fn opts() -> Options {
    Options::default().durability(Durability::None).segment_size(64 << 10)
}

/// A closed store with the SWE-agent and tau-bench transcripts imported, built once, and
/// its number of chats and segments.
fn fixture() -> &'static (tempfile::TempDir, u64, u64) {
    static F: OnceLock<(tempfile::TempDir, u64, u64)> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), opts()).unwrap();
        let data = transcripts::transcripts_dir();
        let files =
            import::transcript_files(&[data.join("swe_agent/trajectories"), data.join("tau_bench")]).unwrap();
        for f in files {
            let p = import::parse_file(&f, Format::Auto).unwrap();
            import::import_sessions(&store, "o", &p.sessions, |_| {}).unwrap();
        }
        let chats = chat_count(&store);
        let segments = store.stats().unwrap().segments;
        store.close().unwrap();
        eprintln!("fixture: {chats} chats in {segments} segments");
        (dir, chats, segments)
    })
}

/// What the store holds, counted so that losing any message shows: chats plus the messages
/// of every chat (the last segment may hold only later records of chats and messages that
/// are all in earlier segments, so a chat count alone can miss a loss — or see none).
fn chat_count(store: &Store) -> u64 {
    let mut n = 0;
    let mut after = None;
    loop {
        let p = store.chats("o", Page { limit: 1000, after }).unwrap();
        n += p.chats.len() as u64 + p.chats.iter().map(|c| c.len).sum::<u64>();
        match p.next {
            Some(next) => after = Some(next),
            None => return n,
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), t).unwrap();
        }
    }
}

fn seg(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("log/{n:08}.seg"))
}

/// Every file under `dir` with its bytes (`LOCK` and `index.redb` by name only: the lock
/// holds the last opener's pid, and redb rewrites its own header when it opens and closes).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                out.insert(e.path(), b"<dir>".to_vec());
                todo.push(e.path());
            } else if e.file_name() == "LOCK" || e.file_name() == "index.redb" {
                out.insert(e.path(), Vec::new());
            } else {
                out.insert(e.path(), std::fs::read(e.path()).unwrap());
            }
        }
    }
    out
}

fn truncate(p: &Path, len: u64) {
    std::fs::OpenOptions::new().write(true).open(p).unwrap().set_len(len).unwrap();
}

fn len(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

type Damage = fn(&Path, u64);

fn cases() -> Vec<(&'static str, Damage)> {
    vec![
        ("a sealed segment deleted", |d, _| std::fs::remove_file(seg(d, 2)).unwrap()),
        ("two sealed segments deleted", |d, _| {
            std::fs::remove_file(seg(d, 3)).unwrap();
            std::fs::remove_file(seg(d, 4)).unwrap();
        }),
        ("the first segment deleted", |d, _| std::fs::remove_file(seg(d, 1)).unwrap()),
        ("the last segment deleted", |d, last| std::fs::remove_file(seg(d, last)).unwrap()),
        ("the last two segments deleted", |d, last| {
            std::fs::remove_file(seg(d, last)).unwrap();
            std::fs::remove_file(seg(d, last - 1)).unwrap();
        }),
        ("log/ deleted", |d, _| std::fs::remove_dir_all(d.join("log")).unwrap()),
        ("a sealed segment emptied", |d, _| truncate(&seg(d, 2), 0)),
        ("a sealed segment cut to its header", |d, _| truncate(&seg(d, 2), 32)),
        ("a sealed segment cut by half", |d, _| truncate(&seg(d, 2), len(&seg(d, 2)) / 2)),
        ("a sealed segment cut by one byte", |d, _| truncate(&seg(d, 2), len(&seg(d, 2)) - 1)),
        ("a middle sealed segment cut to its header", |d, last| truncate(&seg(d, last / 2), 32)),
        ("the last segment cut to its header", |d, last| truncate(&seg(d, last), 32)),
        ("the last segment emptied", |d, last| truncate(&seg(d, last), 0)),
    ]
}

/// The core claim: every kind of missing log data is refused at open, with the index in
/// place and (where the log itself shows the loss) without it; nothing is changed by the
/// refusal.
#[test]
fn missing_or_truncated_log_files_are_refused_at_open_and_left_as_found() {
    let (orig, chats, segments) = fixture();
    assert!(*segments >= 8, "the fixture has only {segments} segments");
    let base = tempfile::tempdir().unwrap();
    let mut refused = 0;
    for (what, damage) in cases() {
        for drop_index in [false, true] {
            let dir = base.path().join("s");
            copy_dir(orig.path(), &dir);
            damage(&dir, *segments);
            if drop_index {
                std::fs::remove_file(dir.join("index.redb")).unwrap();
            }
            let before = snapshot(&dir);
            let r = Store::open(&dir, opts());
            // Without the index, a log that only lost its end looks like a shorter log: that
            // is the one loss nothing can see (the index was what knew).
            let end_only = matches!(
                what,
                "the last segment deleted"
                    | "the last two segments deleted"
                    | "log/ deleted"
                    | "the last segment cut to its header"
                    | "the last segment emptied"
            );
            if drop_index && end_only {
                let store = r.unwrap_or_else(|e| panic!("{what}, index deleted: {e}"));
                assert!(chat_count(&store) < *chats, "{what}, index deleted: nothing was lost?");
                drop(store);
                std::fs::remove_dir_all(&dir).unwrap();
                continue;
            }
            match r {
                Err(Error::Corrupt { segment, reason, .. }) => {
                    refused += 1;
                    assert!(
                        reason.contains("missing")
                            || reason.contains("cut short")
                            || reason.contains("emptied"),
                        "{what} (index deleted: {drop_index}): the reason does not say what is missing: {reason}"
                    );
                    assert!(segment >= 1, "{what}: segment {segment}");
                }
                Err(e) => panic!("{what} (index deleted: {drop_index}): refused, but not as Corrupt: {e}"),
                Ok(s) => panic!(
                    "{what} (index deleted: {drop_index}): opened with {} of {chats} chats",
                    chat_count(&s)
                ),
            }
            let after = snapshot(&dir);
            let changed: Vec<_> = before
                .keys()
                .chain(after.keys())
                .filter(|k| before.get(*k) != after.get(*k))
                .map(|k| k.strip_prefix(&dir).unwrap_or(k).display().to_string())
                .collect();
            assert!(
                changed.is_empty(),
                "{what} (index deleted: {drop_index}): the refused open changed {changed:?}"
            );
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
    eprintln!("{refused} damaged stores refused");
}

/// Putting the file back opens the store with every chat: the refusal lost nothing.
#[test]
fn a_deleted_segment_put_back_opens_with_every_chat() {
    let (orig, chats, _) = fixture();
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("s");
    copy_dir(orig.path(), &dir);
    let aside = base.path().join("aside.seg");
    std::fs::rename(seg(&dir, 3), &aside).unwrap();
    assert!(matches!(Store::open(&dir, opts()), Err(Error::Corrupt { segment: 3, .. })));
    std::fs::rename(&aside, seg(&dir, 3)).unwrap();
    let store = Store::open(&dir, opts()).unwrap();
    assert_eq!(chat_count(&store), *chats);
    assert!(store.check().unwrap().is_ok());
}

/// The error's advice for a log that lost its end works: without the index, the store opens
/// with what the log still holds, and checks clean.
#[test]
fn a_log_that_lost_its_end_opens_after_the_index_is_removed_as_advised() {
    let (orig, chats, segments) = fixture();
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("s");
    copy_dir(orig.path(), &dir);
    std::fs::remove_file(seg(&dir, *segments)).unwrap();
    let e = Store::open(&dir, opts()).expect_err("the open must refuse");
    let msg = e.to_string();
    assert!(msg.contains("index.redb"), "the error does not say how to give the data up: {msg}");
    std::fs::remove_file(dir.join("index.redb")).unwrap();
    let store = Store::open(&dir, opts()).unwrap();
    let left = chat_count(&store);
    assert!(left < *chats && left > 0, "{left} of {chats} chats");
    assert!(store.check().unwrap().is_ok());
}

/// A segment deleted while the store is open: `check` reports the gap.
#[test]
fn check_reports_a_segment_that_went_missing_while_open() {
    let (orig, _, _) = fixture();
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("s");
    copy_dir(orig.path(), &dir);
    let store = Store::open(&dir, opts()).unwrap();
    std::fs::remove_file(seg(&dir, 2)).unwrap();
    let r = store.check().unwrap();
    assert!(!r.is_ok(), "check is clean with segment 2 deleted");
    assert!(r.problems.iter().any(|p| p.segment == 2 && p.reason.contains("missing")), "{:?}", r.problems);
}

/// Every chat's messages, as text, per chat id (`Err` text for a message that does not read);
/// `Err` when the chats cannot be listed.
fn read_everything(store: &Store) -> Result<BTreeMap<String, Vec<Result<String, String>>>, Error> {
    let mut out = BTreeMap::new();
    let mut after = None;
    loop {
        let p = store.chats("o", Page { limit: 1000, after })?;
        for c in &p.chats {
            let msgs = match store.chat("o", c.id) {
                Ok(chat) => (0..chat.len())
                    .map(|i| chat.get(i).map(|m| format!("{m:?}")).map_err(|e| e.to_string()))
                    .collect(),
                Err(e) => vec![Err(e.to_string())],
            };
            out.insert(c.id.to_string(), msgs);
        }
        match p.next {
            Some(next) => after = Some(next),
            None => return Ok(out),
        }
    }
}

/// Bits flipped anywhere in the log of the real-data store: open never panics, and when it
/// opens, every message reads as it was or fails — never different bytes.
#[test]
fn flipped_bits_anywhere_in_the_log_never_return_wrong_data() {
    let (orig, _, segments) = fixture();
    let base = tempfile::tempdir().unwrap();
    // Read from a copy: the other tests copy the shared fixture while this one runs, and an
    // open and close of the fixture itself would write its files under them.
    let golden = {
        let dir = base.path().join("golden");
        copy_dir(orig.path(), &dir);
        let store = Store::open(&dir, opts()).unwrap();
        read_everything(&store).unwrap()
    };
    let mut rng = undertext_tests::Rng::new(undertext_tests::seed(0x16F1));
    let (mut refused, mut opened, mut failed_reads, mut unlisted) = (0, 0, 0, 0);
    for round in 0..24 {
        let dir = base.path().join("s");
        copy_dir(orig.path(), &dir);
        let n = rng.range(1, *segments + 1);
        let path = seg(&dir, n);
        let mut bytes = std::fs::read(&path).unwrap();
        let at = rng.range(0, bytes.len() as u64) as usize;
        bytes[at] ^= 1 << rng.range(0, 8);
        std::fs::write(&path, &bytes).unwrap();
        match Store::open(&dir, opts()) {
            Err(_) => refused += 1,
            Ok(store) => {
                opened += 1;
                let Ok(all) = read_everything(&store) else {
                    unlisted += 1; // the listing itself fails: an error, not wrong data
                    drop(store);
                    std::fs::remove_dir_all(&dir).unwrap();
                    continue;
                };
                for (chat, msgs) in all {
                    let want =
                        golden.get(&chat).unwrap_or_else(|| panic!("round {round}: a chat {chat} appeared"));
                    for (i, got) in msgs.iter().enumerate() {
                        match got {
                            Ok(text) => assert_eq!(
                                Some(&Ok(text.clone())),
                                want.get(i),
                                "round {round}: segment {n} byte {at}: chat {chat} message {i} reads differently"
                            ),
                            Err(_) => failed_reads += 1,
                        }
                    }
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
    eprintln!(
        "bit flips: {refused} opens refused, {opened} opened ({unlisted} could not list the chats, \
         {failed_reads} messages failed to read, none read wrong)"
    );
}
