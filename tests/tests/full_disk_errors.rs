//! Every error a full disk causes says the disk is full, and none advises a rebuild (issue 34,
//! point 10).
//!
//! Claim: `ENOSPC` at any file operation of an append, an import, an index flush or a `check`
//! gives an error whose text says the disk is full and never advises `check --rebuild` (the
//! index is not damaged: there is no space); a healthy store's `check` on a full disk does not
//! report damage. The full disk is injected through the io seam (`undertext::fault`): each
//! operation is first run clean to count its file operations, then once per operation N with
//! every operation from N on failing with `ENOSPC` (a disk that filled up stays full), and
//! once with the seam's full-disk model (writes that need new blocks fail).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::path::Path;
use std::time::Duration;

use undertext::fault::{self, FaultKind};
use undertext::import::{self, Format};
use undertext::{ChatId, ChatMeta, Durability, NewMessage, Options, Store};

fn opts() -> Options {
    // No background flush: the index is flushed where the operation under test flushes it, so
    // a run is the same file operations every time.
    Options::default()
        .durability(Durability::Group)
        .create_if_missing(true)
        .index_flush_interval(Duration::from_secs(3600))
        .index_durable_interval(Duration::from_secs(3600))
        .index_durable_bytes(u64::MAX)
}

/// What runs under the full disk, on a store prepared by [`prepare`].
#[derive(Debug, Clone, Copy)]
enum Work {
    Append,
    Import,
    Flush,
    Check,
}

/// A store with a chat of 30 messages, its index flushed; for `Flush`, 20 more messages
/// appended and not yet in the index.
fn prepare(dir: &Path, work: Work) -> (Store, ChatId) {
    let store = Store::open(dir, opts()).unwrap();
    let id = store.create_chat("o", ChatMeta::default()).unwrap();
    let chat = store.chat("o", id).unwrap();
    for i in 0..30 {
        chat.append(NewMessage::user(format!("message {i} {}", "y".repeat(i * 40)))).unwrap();
    }
    store.sync().unwrap();
    if let Work::Flush = work {
        for i in 0..20 {
            chat.append(NewMessage::assistant(format!("later {i} {}", "z".repeat(i * 70)))).unwrap();
        }
    }
    (store, id)
}

fn sessions() -> Vec<import::Session> {
    let files = import::transcript_files(&[undertext_tests::transcripts::transcripts_dir()]).unwrap();
    files.iter().take(3).flat_map(|f| import::parse_file(f, Format::Auto).unwrap().sessions).collect()
}

/// Runs `work` on `store`; `Ok(Some(report))` for a check's report.
fn run(
    store: &Store,
    id: ChatId,
    work: Work,
    sessions: &[import::Session],
) -> undertext::Result<Option<String>> {
    match work {
        Work::Append => {
            let chat = store.chat("o", id).unwrap();
            for i in 0..10 {
                chat.append(NewMessage::user(format!("new {i} {}", "q".repeat(3000))))?;
            }
            store.put_blob("o", &vec![7u8; 200_000])?;
            store.sync()?;
            Ok(None)
        }
        Work::Import => {
            import::import_sessions(store, "o", sessions, |_| {})?;
            store.sync()?;
            Ok(None)
        }
        Work::Flush => store.sync().map(|_| None),
        Work::Check => {
            let r = store.check()?;
            assert!(r.is_ok(), "check of a healthy store on a full disk reports damage: {r:?}");
            Ok(Some(format!("{r:?}")))
        }
    }
}

/// The error's text must say the disk is full and must not advise a rebuild.
fn assert_said(label: &str, e: &undertext::Error) {
    let msg = e.to_string();
    assert!(msg.contains("disk is full"), "{label}: the error does not say the disk is full: {msg}");
    assert!(!msg.contains("--rebuild"), "{label}: the error advises a rebuild for a full disk: {msg}");
    assert!(
        !matches!(e, undertext::Error::Index { .. }),
        "{label}: a full disk reported as Error::Index: {e:?}"
    );
}

/// Runs `work` under a full disk that begins at operation `from` (`None`: the seam's model of
/// a full disk); returns how many operations failed. Close errors are checked too.
fn one(work: Work, from: Option<u64>, sessions: &[import::Session]) -> (u64, u64) {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("s");
    let (store, id) = prepare(&dir, work);
    let ctl = fault::install(&dir).unwrap();
    match from {
        Some(n) => ctl.fail_from(n, FaultKind::Enospc),
        None => ctl.set_disk_full(true),
    }
    let label = format!("{work:?}, disk full from operation {from:?}");
    let mut errors = 0;
    if let Err(e) = run(&store, id, work, sessions) {
        assert_said(&label, &e);
        errors += 1;
    }
    if let Err(e) = store.close() {
        assert_said(&format!("{label}, close"), &e);
        errors += 1;
    }
    (ctl.ops(), errors)
}

fn sweep(work: Work) {
    let sessions = if let Work::Import = work { sessions() } else { Vec::new() };
    let clean_ops = {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("s");
        let (store, id) = prepare(&dir, work);
        let ctl = fault::install(&dir).unwrap();
        run(&store, id, work, &sessions).unwrap();
        store.close().unwrap();
        ctl.ops()
    };
    assert!(clean_ops >= 3, "{work:?} made only {clean_ops} file operations");
    let mut failed = 0;
    for n in 1..=clean_ops {
        failed += one(work, Some(n), &sessions).1;
    }
    failed += one(work, None, &sessions).1;
    eprintln!("{work:?}: {clean_ops} file operations, {failed} errors, each saying the disk is full");
    if !matches!(work, Work::Check) {
        assert!(failed >= clean_ops / 2, "{work:?}: only {failed} of {clean_ops} full-disk runs failed");
    }
}

#[test]
fn a_full_disk_during_an_append_is_said_and_never_advises_a_rebuild() {
    sweep(Work::Append);
}

#[test]
fn a_full_disk_during_an_import_is_said_and_never_advises_a_rebuild() {
    sweep(Work::Import);
}

#[test]
fn a_full_disk_during_an_index_flush_is_said_and_never_advises_a_rebuild() {
    sweep(Work::Flush);
}

#[test]
fn a_healthy_stores_check_on_a_full_disk_reports_no_damage_and_never_advises_a_rebuild() {
    sweep(Work::Check);
}
