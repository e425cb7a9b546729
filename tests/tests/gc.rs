//! Deleting chats and collecting garbage.
//!
//! Claims: a deleted chat can no longer be opened, listed or written, across reopen and
//! index rebuild, and its id is never reused; `gc` drops the deleted chats' records and
//! every blob only they used (archives with their chunks included), keeps every byte of
//! the live chats, of archives a live chat shares, and of blobs nothing references; the
//! swap survives a crash at any of its steps.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::path::Path;

use undertext::{
    ArchiveRef, BlobId, ChatId, ChatMeta, Durability, Error, NewMessage, Options, Page, Part, Store,
    ToolContent, Unit,
};
use undertext_tests::{Rng, seed};

fn opts() -> Options {
    Options::default().durability(Durability::None).segment_size(256 << 10)
}

fn big_text(rng: &mut Rng, tag: &str, n: usize) -> String {
    let mut s = format!("{tag}\n");
    while s.len() < n {
        s.push_str(&format!("{tag} line {} value {}\n", s.len(), rng.next_u64()));
    }
    s
}

fn archive_of(store: &Store, owner: &str, id: ChatId, seq: u64) -> ArchiveRef {
    let m = store.chat(owner, id).unwrap().get(seq).unwrap();
    match &m.parts[0] {
        Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } => *archive,
        other => panic!("expected an archived result, found {other:?}"),
    }
}

/// A store with a live chat and a chat to delete, each with large (archived, chunked) tool
/// results, one result shared by both, and a raw blob nothing references.
struct Fixture {
    live: ChatId,
    doomed: ChatId,
    live_texts: Vec<(u64, String)>,
    shared: String,
    doomed_only: String,
    raw: Vec<u8>,
}

fn fill(dir: &Path) -> Fixture {
    let mut rng = Rng::new(seed(0x6C));
    let store = Store::open(dir, opts()).unwrap();
    let live = store.create_chat("o", ChatMeta::default()).unwrap();
    let doomed = store.create_chat("o", ChatMeta::default()).unwrap();
    let shared = big_text(&mut rng, "shared", 150_000);
    let doomed_only = big_text(&mut rng, "doomed", 400_000);
    let mut live_texts = Vec::new();
    for (id, texts) in [
        (
            live,
            vec![big_text(&mut rng, "live-a", 90_000), shared.clone(), big_text(&mut rng, "live-b", 20_000)],
        ),
        (doomed, vec![doomed_only.clone(), shared.clone(), big_text(&mut rng, "doomed-b", 300_000)]),
    ] {
        let chat = store.chat("o", id).unwrap();
        chat.append(NewMessage::user("go")).unwrap();
        for (k, t) in texts.iter().enumerate() {
            chat.append(NewMessage {
                role: undertext::Role::Assistant,
                parts: vec![Part::ToolCall { id: format!("c{k}"), name: "read".into(), args: "{}".into() }],
                feedback: false,
            })
            .unwrap();
            let seq = chat.append(NewMessage::tool_result(format!("c{k}"), t.clone())).unwrap();
            if id == live {
                live_texts.push((seq, t.clone()));
            }
        }
        chat.append(NewMessage::assistant("x".repeat(20_000))).unwrap(); // a body blob
    }
    let raw = rng.bytes(200_000);
    store.put_blob("o", &raw).unwrap();
    store.delete_chat("o", doomed).unwrap();
    store.close().unwrap();
    Fixture { live, doomed, live_texts, shared, doomed_only, raw }
}

fn assert_live_intact(store: &Store, f: &Fixture) {
    let chat = store.chat("o", f.live).unwrap();
    for (seq, text) in &f.live_texts {
        let a = archive_of(store, "o", f.live, *seq);
        let back = store.read_context("o", &a.id, 0..a.chars, Unit::Chars).unwrap();
        assert_eq!(&back, text, "live archive at seq {seq}");
    }
    assert_eq!(chat.get(chat.len() - 1).unwrap().parts, vec![Part::Text("x".repeat(20_000))]);
    assert_eq!(&*store.get_blob("o", &undertext::BlobId::of(&f.raw)).unwrap(), &f.raw[..]);
    let shared = undertext::BlobId::of(f.shared.as_bytes());
    assert_eq!(store.read_context("o", &shared, 0..20, Unit::Chars).unwrap(), &f.shared[..20]);
}

#[test]
fn a_deleted_chat_cannot_be_opened_listed_or_written_and_its_id_is_not_reused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let keep = store.create_chat("o", ChatMeta::default()).unwrap();
    let gone = store.create_chat("o", ChatMeta::default()).unwrap();
    let handle = store.chat("o", gone).unwrap();
    handle.append(NewMessage::user("hello")).unwrap();
    let snap = handle.snapshot();
    assert!(matches!(store.delete_chat("p", gone), Err(Error::NotFound { .. })), "another owner deleted it");
    store.delete_chat("o", gone).unwrap();
    assert!(matches!(store.chat("o", gone), Err(Error::NotFound { .. })));
    assert!(matches!(handle.append(NewMessage::user("again")), Err(Error::NotFound { .. })));
    assert!(matches!(store.delete_chat("o", gone), Err(Error::NotFound { .. })));
    assert_eq!(snap.len(), 1, "a snapshot taken before still reads");
    let listed =
        |s: &Store| s.chats("o", Page::default()).unwrap().chats.iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(listed(&store), vec![keep]);
    drop(handle);
    store.close().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    assert!(matches!(store.chat("o", gone), Err(Error::NotFound { .. })));
    store.rebuild_index().unwrap();
    assert!(matches!(store.chat("o", gone), Err(Error::NotFound { .. })));
    assert_eq!(listed(&store), vec![keep]);
    let next = store.create_chat("o", ChatMeta::default()).unwrap();
    assert!(next.0 > gone.0, "id {} reused", next.0);
    store.chat("o", keep).unwrap().append(NewMessage::user("still here")).unwrap();
}

#[test]
fn gc_drops_what_only_deleted_chats_used_and_keeps_every_live_byte() {
    let dir = tempfile::tempdir().unwrap();
    let f = fill(dir.path());
    let before = Store::open(dir.path(), opts()).unwrap().stats().unwrap().log_bytes;
    let report = Store::gc(dir.path(), opts()).unwrap();
    eprintln!("{report:?}");
    assert_eq!(report.deleted_chats, 1);
    assert!(report.blobs_removed > 10, "chunks of the deleted chat's archives: {report:?}");
    assert!(report.log_bytes_after < report.log_bytes_before);
    assert_eq!(report.log_bytes_before, before);
    let store = Store::open(dir.path(), opts()).unwrap();
    assert_live_intact(&store, &f);
    let gone = undertext::BlobId::of(f.doomed_only.as_bytes());
    assert!(
        matches!(store.unscoped_get_blob(&gone), Err(Error::NotFound { .. })),
        "the deleted chat's archive stayed"
    );
    assert!(matches!(store.archive_ref("o", &gone), Err(Error::NotFound { .. })));
    assert!(matches!(store.chat("o", f.doomed), Err(Error::NotFound { .. })));
    let check = store.check().unwrap();
    assert!(check.problems.is_empty(), "{:?}", check.problems);
    let next = store.create_chat("o", ChatMeta::default()).unwrap();
    assert!(next.0 > f.doomed.0);
    drop(store);
    // A second collection has nothing left to remove.
    let again = Store::gc(dir.path(), opts()).unwrap();
    // (The new chat added its creation and metadata records.)
    assert_eq!((again.blobs_removed, again.records_after), (0, report.records_after + 2));
    assert_eq!(again.deleted_chats, 0, "a chat collected before counts again");
}

#[test]
fn gc_refuses_while_the_store_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    assert!(matches!(Store::gc(dir.path(), opts()), Err(Error::Locked { .. })));
    drop(store);
    assert!(matches!(Store::gc(dir.path().join("absent"), opts()), Err(Error::NotFound { .. })));
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

/// The swap's crash points, rebuilt on disk: the compacted log and index in `gc.new/`,
/// the marker written, and none, one or both of the renames done. Every open afterwards
/// rolls forward to the collected store; without the marker, `gc.new/` is dropped and the
/// old store is intact.
#[test]
fn a_crash_at_any_step_of_the_swap_ends_in_the_old_or_the_collected_store() {
    let base = tempfile::tempdir().unwrap();
    let orig = base.path().join("orig");
    let f = fill(&orig);
    let collected = base.path().join("collected");
    copy_dir(&orig, &collected);
    Store::gc(&collected, opts()).unwrap();
    for step in 0..4 {
        let dir = base.path().join(format!("crash{step}"));
        copy_dir(&orig, &dir);
        let new = dir.join("gc.new");
        std::fs::create_dir_all(&new).unwrap();
        copy_dir(&collected.join("log"), &new.join("log"));
        std::fs::copy(collected.join("index.redb"), new.join("index.redb")).unwrap();
        if step > 0 {
            std::fs::write(dir.join("GC-SWAP"), b"").unwrap();
        }
        std::fs::create_dir_all(dir.join("gc.old")).unwrap();
        if step > 1 {
            std::fs::rename(dir.join("log"), dir.join("gc.old/log")).unwrap();
            std::fs::rename(new.join("log"), dir.join("log")).unwrap();
        }
        if step > 2 {
            std::fs::rename(dir.join("index.redb"), dir.join("gc.old/index.redb")).unwrap();
            std::fs::rename(new.join("index.redb"), dir.join("index.redb")).unwrap();
        }
        let store = Store::open(&dir, opts()).unwrap();
        assert_live_intact(&store, &f);
        let doomed = undertext::BlobId::of(f.doomed_only.as_bytes());
        let gone = matches!(store.unscoped_get_blob(&doomed), Err(Error::NotFound { .. }));
        assert_eq!(gone, step > 0, "crash step {step}: rolled {}", if gone { "forward" } else { "back" });
        assert!(!new.exists() && !dir.join("GC-SWAP").exists(), "crash step {step}: leftovers");
        assert!(store.check().unwrap().problems.is_empty(), "crash step {step}");
    }
}

#[test]
fn gc_keeps_the_base_of_a_live_delta_manifest_that_only_a_deleted_chat_attached() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed(0x6D));
    let mut value = big_text(&mut rng, "state", 600_000).into_bytes();
    let mut live_versions = Vec::new();
    {
        let store = Store::open(dir.path(), opts()).unwrap();
        let live = store.create_chat("o", ChatMeta::default()).unwrap();
        let doomed = store.create_chat("o", ChatMeta::default()).unwrap();
        // Versions alternate between the chats: each is a delta on the one before, so
        // every live version's manifest chain runs through versions only `doomed` attached.
        for i in 0..24 {
            value.extend_from_slice(big_text(&mut rng, "step", 1_000).as_bytes());
            let chat = store.chat("o", if i % 2 == 0 { doomed } else { live }).unwrap();
            let id = BlobId::of(&value);
            let msg = NewMessage {
                role: undertext::Role::User,
                parts: vec![Part::Attachment { mime: "application/json".into(), blob: id }],
                feedback: false,
            };
            chat.append_with_blobs(&[&value], vec![msg]).unwrap();
            if i % 2 == 1 {
                live_versions.push((id, value.clone()));
            }
        }
        store.delete_chat("o", doomed).unwrap();
    }
    let report = Store::gc(dir.path(), opts()).unwrap();
    assert_eq!(report.deleted_chats, 1);
    let store = Store::open(dir.path(), opts()).unwrap();
    for (i, (id, bytes)) in live_versions.iter().enumerate() {
        let got = store.get_blob("o", id).unwrap_or_else(|e| panic!("live version {i} after gc: {e}"));
        assert!(&*got == bytes.as_slice(), "live version {i} differs after gc");
    }
    assert!(store.check().unwrap().problems.is_empty());
}

/// Claim: `gc` fails cleanly at any of its file operations (through the same fault seam as
/// the log and the index): the failing call returns an error, and the next open finds the
/// old store or the collected one, every live byte intact, nothing half-swapped.
#[test]
fn a_failed_file_operation_anywhere_in_gc_leaves_the_old_or_the_collected_store() {
    use undertext::fault::{self, FaultKind};
    let base = tempfile::tempdir().unwrap();
    let orig = base.path().join("orig");
    let f = fill(&orig);
    let clean_dir = base.path().join("clean");
    copy_dir(&orig, &clean_dir);
    let ops = {
        let ctl = fault::install(&clean_dir).unwrap();
        Store::gc(&clean_dir, opts()).unwrap();
        ctl.ops()
    };
    assert!(ops >= 20, "gc made only {ops} file operations");
    let (mut failed, mut rolled_forward) = (0u64, 0u64);
    for n in 1..=ops {
        let dir = base.path().join(format!("fault{n}"));
        copy_dir(&orig, &dir);
        let kind = if n % 2 == 1 { FaultKind::Eio } else { FaultKind::Enospc };
        let r = {
            let ctl = fault::install(&dir).unwrap();
            ctl.fail_at(n, kind);
            Store::gc(&dir, opts())
        };
        failed += u64::from(r.is_err());
        let store =
            Store::open(&dir, opts()).unwrap_or_else(|e| panic!("fault at gc operation {n}: reopen: {e}"));
        assert_live_intact(&store, &f);
        let doomed = undertext::BlobId::of(f.doomed_only.as_bytes());
        let gone = matches!(store.unscoped_get_blob(&doomed), Err(Error::NotFound { .. }));
        rolled_forward += u64::from(gone);
        if r.is_ok() {
            assert!(
                gone,
                "fault at gc operation {n}: gc returned Ok but the doomed chat's blob is still there"
            );
        }
        assert!(!dir.join("gc.new").exists() && !dir.join("GC-SWAP").exists(), "fault at {n}: leftovers");
        assert!(store.check().unwrap().problems.is_empty(), "fault at gc operation {n}");
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }
    eprintln!(
        "gc fault sweep: {ops} operations, {failed} gc calls failed, {rolled_forward} reopens found the collected store"
    );
    assert!(failed > 0, "no injected fault made gc fail");
}
