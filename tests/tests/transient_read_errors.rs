//! A value kept with a message's history entry once computed (its token estimate, its step
//! tag) is not kept when the read it needs fails: a transient read error (the memory map of a
//! sealed log segment failing with EIO through the file seam) is that call's error, and once
//! the fault is gone the same call returns the right value — not an estimate that counted the
//! message as 0 tokens, nor a step tag cached as `None` (the fix of dde4f65).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::path::Path;
use std::time::Duration;

use undertext::Budget;
use undertext::fault::{self, FaultKind};
use undertext::{ChatId, ChatMeta, Error, NewMessage, Options, StepStatus, StepTag, Store};

/// Small segments (the messages end up in sealed, memory-mapped ones), nothing running in the
/// background that could take the injected fault.
fn opts() -> Options {
    Options::default()
        .segment_size(64 << 10)
        .preallocate(false)
        .index_flush_interval(Duration::from_secs(3600))
        .index_durable_interval(Duration::from_secs(3600))
}

/// A chat of steps whose messages span several segments; returns it, its estimate and the
/// step tag of each message.
fn build(dir: &Path) -> (ChatId, u64, Vec<Option<StepTag>>) {
    let store = Store::open(dir, opts()).unwrap();
    let id = store.create_chat("o", ChatMeta::default()).unwrap();
    let chat = store.chat("o", id).unwrap();
    chat.append(NewMessage::user("review the sources")).unwrap();
    for k in 0..40u32 {
        // Text that compresses little (message records are compressed when that pays), so 40
        // steps of it fill several 64 KiB segments.
        let text: String =
            (0..16).map(|j| undertext_tests::read_only::message_text(u64::from(k) * 100 + j)).collect();
        chat.record_step(1, "s", k, StepStatus::Complete, vec![NewMessage::assistant(text)]).unwrap();
    }
    let estimate = chat.estimate(&Budget::new(1_000_000, 0)).unwrap();
    let snap = chat.snapshot();
    let tags = (0..snap.len()).map(|seq| snap.header(seq).unwrap().step).collect();
    store.close().unwrap();
    (id, estimate, tags)
}

#[test]
fn a_read_error_while_a_kept_value_is_first_computed_is_that_calls_error_not_a_kept_zero_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let (id, estimate, tags) = build(dir.path());
    assert!(std::fs::read_dir(dir.path().join("log")).unwrap().count() > 3, "several segments");

    // Reopened: the chat's entries come from the index, nothing of them computed yet.
    let seam = fault::install(dir.path()).unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let chat = store.chat("o", id).unwrap();
    let budget = Budget::new(1_000_000, 0);

    // Every file operation fails: mapping a sealed segment to read a message does.
    seam.fail_from(seam.ops() + 1, FaultKind::Eio);
    let failed = chat.estimate(&budget);
    // (A segment mapped while the store opened still reads: its messages' tags are right.)
    let snap = chat.snapshot();
    let headers: Vec<_> = (0..snap.len()).map(|seq| snap.header(seq)).collect();
    seam.clear_faults();
    assert!(seam.injected() > 0, "the reads met the fault");
    assert!(matches!(failed, Err(Error::Io { .. })), "{failed:?}");
    let mut failed_headers = 0;
    for (h, tag) in headers.iter().zip(&tags) {
        match h {
            Ok(h) => assert_eq!(&h.step, tag, "message {}", h.seq),
            Err(e) => {
                assert!(matches!(e, Error::Io { .. }), "{e:?}");
                failed_headers += 1;
            }
        }
    }
    assert!(failed_headers > 0, "reading the step tags met the fault");

    // The fault is gone: the same calls give the values the chat has.
    assert_eq!(chat.estimate(&budget).unwrap(), estimate);
    let snap = chat.snapshot();
    let now: Vec<_> = (0..snap.len()).map(|seq| snap.header(seq).unwrap().step).collect();
    assert_eq!(now, tags);
}
