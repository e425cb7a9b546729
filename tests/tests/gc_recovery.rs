//! `gc` interrupted anywhere, then `gc` again.
//!
//! Claim: whatever state a killed or failed `gc` leaves behind (a half-written `gc.new/`, the
//! swap marker, a half-done swap, a half-removed `gc.old/`), every later open finishes or
//! undoes it, and another `gc` succeeds: the store always opens, every live byte is intact,
//! the deleted chat's data is gone once a `gc` returned `Ok`, and no leftover stays.
//!
//! A kill at file operation *N* is modelled with the fault seam failing operation *N* and
//! every one after it (nothing the dying process would still do reaches the disk); a single
//! failed operation with the process going on is the other mode. Every operation of `gc` is
//! swept — the copy, the new index, the swap and the cleanup (directory creation and removal
//! go through the seam, one operation per file and directory).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::path::Path;

use undertext::fault::{self, FaultKind};
use undertext::{ChatId, ChatMeta, Durability, Error, NewMessage, Options, Part, Store, ToolContent, Unit};
use undertext_tests::{Rng, seed};

fn opts() -> Options {
    Options::default().durability(Durability::None).segment_size(64 << 10)
}

fn text(rng: &mut Rng, tag: &str, n: usize) -> String {
    let mut s = format!("{tag}\n");
    while s.len() < n {
        s.push_str(&format!("{tag} line {} value {}\n", s.len(), rng.next_u64()));
    }
    s
}

struct Fixture {
    live: ChatId,
    live_texts: Vec<(u64, String)>,
    doomed_only: String,
    raw: Vec<u8>,
}

/// A live chat and a deleted one, each with archived tool results (one shared), over a few
/// 64 KiB segments, and a raw blob nothing references.
fn fill(dir: &Path) -> Fixture {
    let mut rng = Rng::new(seed(0x6E));
    let store = Store::open(dir, opts()).unwrap();
    let live = store.create_chat("o", ChatMeta::default()).unwrap();
    let doomed = store.create_chat("o", ChatMeta::default()).unwrap();
    let shared = text(&mut rng, "shared", 40_000);
    let doomed_only = text(&mut rng, "doomed", 60_000);
    let mut live_texts = Vec::new();
    for (id, texts) in [
        (live, vec![text(&mut rng, "live-a", 30_000), shared.clone()]),
        (doomed, vec![doomed_only.clone(), shared.clone()]),
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
    }
    let raw = rng.bytes(30_000);
    store.put_blob("o", &raw).unwrap();
    store.delete_chat("o", doomed).unwrap();
    store.close().unwrap();
    Fixture { live, live_texts, doomed_only, raw }
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

/// Opens the store (which must work), checks every live byte and the log; returns whether
/// the deleted chat's own archive is gone.
fn open_and_verify(dir: &Path, f: &Fixture, what: &str) -> bool {
    let store = Store::open(dir, opts()).unwrap_or_else(|e| panic!("{what}: open: {e}"));
    let chat = store.chat("o", f.live).unwrap_or_else(|e| panic!("{what}: live chat: {e}"));
    for (seq, text) in &f.live_texts {
        let m = chat.get(*seq).unwrap_or_else(|e| panic!("{what}: message {seq}: {e}"));
        let Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } = &m.parts[0] else {
            panic!("{what}: message {seq} is not an archived result");
        };
        let back = store.read_context("o", &archive.id, 0..archive.chars, Unit::Chars).unwrap();
        assert_eq!(&back, text, "{what}: live archive at seq {seq}");
    }
    assert_eq!(
        &*store.get_blob("o", &undertext::BlobId::of(&f.raw)).unwrap(),
        &f.raw[..],
        "{what}: raw blob"
    );
    let problems = store.check().unwrap().problems;
    assert!(problems.is_empty(), "{what}: check: {problems:?}");
    let doomed = undertext::BlobId::of(f.doomed_only.as_bytes());
    matches!(store.unscoped_get_blob(&doomed), Err(Error::NotFound { .. }))
}

fn assert_no_leftovers(dir: &Path, what: &str) {
    for name in ["gc.new", "gc.old", "GC-SWAP"] {
        assert!(!dir.join(name).exists(), "{what}: {name} left behind");
    }
}

/// The defect of issue 16: `gc`'s cleanup died after the swap, leaving the old log in
/// `gc.old/`; the next `gc` then failed to move the log aside ("Directory not empty") with its
/// marker written, and no command could open the store any more.
#[test]
fn a_gc_old_left_by_an_interrupted_cleanup_stops_neither_the_next_gc_nor_open() {
    let base = tempfile::tempdir().unwrap();
    let orig = base.path().join("orig");
    let f = fill(&orig);
    let dir = base.path().join("store");
    copy_dir(&orig, &dir);
    Store::gc(&dir, opts()).unwrap();
    // What the interrupted cleanup left: the pre-gc log and index in gc.old/.
    copy_dir(&orig.join("log"), &dir.join("gc.old/log"));
    std::fs::copy(orig.join("index.redb"), dir.join("gc.old/index.redb")).unwrap();
    assert!(open_and_verify(&dir, &f, "open after the interrupted cleanup"));
    assert_no_leftovers(&dir, "open after the interrupted cleanup");
    // The same leftover again, this time met by a gc (whose own open removes it).
    copy_dir(&orig.join("log"), &dir.join("gc.old/log"));
    Store::gc(&dir, opts()).unwrap_or_else(|e| panic!("second gc: {e}"));
    assert!(open_and_verify(&dir, &f, "open after the second gc"));
    assert_no_leftovers(&dir, "after the second gc");
}

/// A stale `gc.old/` met by the swap itself (the marker written, the log still in place):
/// the stale copy is replaced, the swap finishes.
#[test]
fn a_swap_that_meets_a_stale_gc_old_replaces_it_and_finishes() {
    let base = tempfile::tempdir().unwrap();
    let orig = base.path().join("orig");
    let f = fill(&orig);
    let collected = base.path().join("collected");
    copy_dir(&orig, &collected);
    Store::gc(&collected, opts()).unwrap();
    let dir = base.path().join("store");
    copy_dir(&orig, &dir);
    copy_dir(&collected.join("log"), &dir.join("gc.new/log"));
    std::fs::copy(collected.join("index.redb"), dir.join("gc.new/index.redb")).unwrap();
    copy_dir(&orig.join("log"), &dir.join("gc.old/log"));
    std::fs::write(dir.join("gc.old/index.redb"), b"stale").unwrap();
    std::fs::write(dir.join("GC-SWAP"), b"").unwrap();
    assert!(
        open_and_verify(&dir, &f, "open of the swap with a stale gc.old"),
        "the swap was not rolled forward"
    );
    assert_no_leftovers(&dir, "the swap with a stale gc.old");
}

/// Open never deletes the only copy of a log: a store without `log/` keeps its `gc.old/`.
#[test]
fn open_keeps_gc_old_when_the_store_has_no_log() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("store");
    fill(&dir);
    std::fs::create_dir_all(dir.join("gc.old")).unwrap();
    std::fs::rename(dir.join("log"), dir.join("gc.old/log")).unwrap();
    let _ = Store::open(&dir, opts());
    assert!(dir.join("gc.old/log").is_dir(), "open removed the only copy of the log");
}

/// Every file operation of `gc`, killed (that operation and all after it fail) or failed
/// once; then open, `gc` again, open: never a store that cannot open, never a lost byte.
#[test]
fn gc_killed_or_failed_at_any_file_operation_then_gc_again_keeps_every_live_byte() {
    let base = tempfile::tempdir().unwrap();
    let orig = base.path().join("orig");
    let f = fill(&orig);
    let clean = base.path().join("clean");
    copy_dir(&orig, &clean);
    let (ops, swap_ops) = {
        let ctl = fault::install(&clean).unwrap();
        ctl.start_trace();
        Store::gc(&clean, opts()).unwrap();
        let trace = ctl.trace();
        let swap_from = trace.iter().position(|l| l.contains("GC-SWAP")).unwrap_or(trace.len());
        (ctl.ops(), trace.len() - swap_from)
    };
    assert!(ops >= 20, "gc made only {ops} file operations");
    assert!(swap_ops >= 8, "the swap and cleanup made only {swap_ops} file operations");
    let (mut runs, mut failed, mut first_open_rolled_forward) = (0u64, 0u64, 0u64);
    for n in 1..=ops {
        for kill in [true, false] {
            let what = format!("{} at gc operation {n}", if kill { "kill" } else { "single failure" });
            let dir = base.path().join(format!("run{n}-{kill}"));
            copy_dir(&orig, &dir);
            let r = {
                let ctl = fault::install(&dir).unwrap();
                let kind = if n % 2 == 1 { FaultKind::Eio } else { FaultKind::Enospc };
                if kill {
                    ctl.fail_from(n, kind);
                } else {
                    ctl.fail_at(n, kind);
                }
                Store::gc(&dir, opts())
            };
            runs += 1;
            failed += u64::from(r.is_err());
            let gone = open_and_verify(&dir, &f, &format!("{what}: first open"));
            first_open_rolled_forward += u64::from(gone);
            if r.is_ok() {
                assert!(gone, "{what}: gc returned Ok but the deleted chat's archive is still there");
            }
            assert_no_leftovers(&dir, &format!("{what}: first open"));
            Store::gc(&dir, opts()).unwrap_or_else(|e| panic!("{what}: the next gc: {e}"));
            assert!(
                open_and_verify(&dir, &f, &format!("{what}: after the next gc")),
                "{what}: not collected"
            );
            assert_no_leftovers(&dir, &format!("{what}: after the next gc"));
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
    eprintln!(
        "gc kill/fail sweep: {ops} operations ({swap_ops} in the swap and cleanup), {runs} runs, \
         {failed} gc calls failed, {first_open_rolled_forward} first opens found the collected store"
    );
    assert!(failed > 0, "no injected fault made gc fail");
}
