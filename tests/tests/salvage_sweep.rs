//! The salvage sweep (issue 34.4): each sealed segment of a store deleted in turn, a
//! read-only open (`Store::open_read_only`) reads every message whose batch is in a surviving
//! segment — exactly as written, also in the chats that touched the lost segment — and
//! reports each lost one as `NotFound` naming the damage, never another message's bytes;
//! the writer's refusal gives advice that works (the read-only open it names opens), and
//! nothing is written. (A chat whose creation record was in the lost segment has no owner
//! left to be read as: owners are walls.)

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::path::{Path, PathBuf};

use undertext::{ChatId, ChatMeta, Compression, Error, NewMessage, Options, Part, Store};
use undertext_tests::read_only::{assert_unchanged, message_text, store_files};

/// 3 chats of 10 messages written round-robin over 4 KiB segments, without compression (so a
/// message's text in a file says which segment holds it); returns the chat ids and the
/// segment files in order.
fn fill(dir: &Path) -> (Vec<ChatId>, Vec<PathBuf>) {
    let opts = Options::default().segment_size(4096).compression(Compression::None);
    let store = Store::open(dir, opts).unwrap();
    let ids: Vec<ChatId> = (0..3).map(|_| store.create_chat("o", ChatMeta::default()).unwrap()).collect();
    for i in 0..10u64 {
        for (c, id) in ids.iter().enumerate() {
            store.chat("o", *id).unwrap().append(NewMessage::user(message_text(c as u64 * 100 + i))).unwrap();
        }
    }
    store.close().unwrap();
    let mut segs: Vec<PathBuf> =
        std::fs::read_dir(dir.join("log")).unwrap().map(|e| e.unwrap().path()).collect();
    segs.sort();
    assert!(segs.len() >= 6, "expected at least 6 segments, found {}", segs.len());
    (ids, segs)
}

fn holds(file: &Path, text: &str) -> bool {
    std::fs::read(file).is_ok_and(|b| b.windows(64).any(|w| w == &text.as_bytes()[..64]))
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() { copy_dir(&p, &dest) } else { std::fs::copy(&p, &dest).map(drop).unwrap() }
    }
}

#[test]
fn each_sealed_segment_deleted_in_turn_leaves_every_surviving_message_readable() {
    let base = tempfile::tempdir().unwrap();
    let (ids, segs) = fill(base.path());
    // The last segment is the active one; every other is sealed.
    for (gone, lost_file) in segs.iter().enumerate().take(segs.len() - 1) {
        let work = tempfile::tempdir().unwrap();
        copy_dir(base.path(), work.path());
        let seg = work.path().join("log").join(lost_file.file_name().unwrap());
        std::fs::remove_file(&seg).unwrap();
        let before = store_files(work.path());
        // The writer refuses, and its advice names what works.
        let refused = Store::open(work.path(), Options::default()).map(drop).unwrap_err();
        let why = refused.to_string();
        assert!(!why.contains("check --rebuild"), "segment {gone}: advice that cannot work: {why}");
        assert!(why.contains("read-only") || why.contains("read_only"), "segment {gone}: {why}");
        let ro = Store::open_read_only(work.path()).unwrap();
        let (mut read, mut lost) = (0, 0);
        for (c, id) in ids.iter().enumerate() {
            let chat = match ro.chat("o", *id) {
                Ok(chat) => chat,
                // The chats were created in the first segment: a chat whose creation record
                // is lost has no owner left to read it as (owners are walls).
                Err(Error::NotFound { .. }) if gone == 0 => continue,
                Err(e) => panic!("segment {gone}: chat {c} does not open: {e}"),
            };
            for i in 0..10u64 {
                let text = message_text(c as u64 * 100 + i);
                let survives = !holds(lost_file, &text);
                match chat.get(i) {
                    Ok(m) => {
                        assert!(survives, "segment {gone}: chat {c} message {i} read from a deleted segment");
                        assert_eq!(m.parts, vec![Part::Text(text)], "segment {gone}: chat {c} message {i}");
                        read += 1;
                    }
                    Err(Error::NotFound { what }) => {
                        assert!(!survives, "segment {gone}: chat {c} message {i} survives, yet: {what}");
                        assert!(what.contains("missing or damaged"), "{what}");
                        lost += 1;
                    }
                    // Lost at the chat's end: nothing left says the chat was longer.
                    Err(Error::InvalidArgument(_)) if !survives && i >= chat.len() => lost += 1,
                    Err(e) => panic!("segment {gone}: chat {c} message {i}: {e}"),
                }
            }
            // The chat's default read gives what survives, in order.
            let live = chat.messages().unwrap_or_else(|e| panic!("segment {gone}: chat {c} messages(): {e}"));
            assert!(live.windows(2).all(|w| w[0].seq < w[1].seq));
        }
        if gone > 0 {
            assert!(lost > 0 && read > 0, "segment {gone}: {read} read, {lost} lost");
        }
        drop(ro);
        assert_unchanged(work.path(), &before, "salvage wrote to the store");
    }
}
