//! A `gc` landing at every step of a read-only scan, deterministically: the fault seam's step
//! hook (`fault::Controller::on_step`) runs `Store::gc` exactly at the k-th named step of a
//! read-only `refresh` (and of `open_read_only`), for every k the scan has. Whatever the step,
//! the reader either takes the new batches whole and reads every byte right, or refuses with
//! `Error::ReadOnly` saying to open again, keeping what it had read, byte for byte; a new open
//! then sees the collected store. Never a torn, mixed or wrong read.
//!
//! A file of its own: the hook is per store directory, but each case runs a `gc`, which is
//! slow enough that keeping these cases apart keeps the rest of the suite quick.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::path::Path;
use std::sync::{Arc, Mutex};

use undertext::{ChatId, ChatMeta, Error, NewMessage, Options, Part, Store};
use undertext_tests::read_only::message_text;

fn small() -> Options {
    Options::default().segment_size(4096)
}

fn texts(store: &Store, id: ChatId) -> Vec<String> {
    let c = store.chat("o", id).unwrap();
    c.messages()
        .unwrap()
        .iter()
        .map(|m| match &m.parts[..] {
            [Part::Text(t)] => t.clone(),
            other => panic!("expected one text part, found {other:?}"),
        })
        .collect()
}

fn want(chat: u64, n: u64) -> Vec<String> {
    (0..n).map(|i| message_text(chat * 100 + i)).collect()
}

/// Three chats of 8 messages over several sealed segments, closed.
fn closed_store(dir: &Path) -> Vec<ChatId> {
    let store = Store::open(dir, small()).unwrap();
    let mut ids = Vec::new();
    for c in 0..3u64 {
        let id = store.create_chat("o", ChatMeta::default()).unwrap();
        let chat = store.chat("o", id).unwrap();
        for i in 0..8 {
            chat.append(NewMessage::user(message_text(c * 100 + i))).unwrap();
        }
        ids.push(id);
    }
    store.close().unwrap();
    ids
}

/// What a writer did after the reader opened: 6 more messages in chats 1 and 2, chat 0
/// deleted (so the `gc` has something to collect and rewrites the log).
fn write_more(dir: &Path, ids: &[ChatId]) {
    let w = Store::open(dir, small()).unwrap();
    for (c, id) in ids.iter().enumerate().skip(1) {
        let chat = w.chat("o", *id).unwrap();
        for i in 8..14 {
            chat.append(NewMessage::user(message_text(c as u64 * 100 + i))).unwrap();
        }
    }
    w.delete_chat("o", ids[0]).unwrap();
    w.close().unwrap();
}

/// Steps seen so far, and the name of the one the `gc` ran at.
type Seen = Arc<Mutex<(usize, Option<String>)>>;

/// Installs a hook on `dir` that runs a `gc` at the `k`-th step (1-based; never when `k` is
/// 0) and counts the steps; returns the controller and the step count.
fn gc_at_step(dir: &Path, k: usize) -> (undertext::fault::Installed, Seen) {
    let faults = undertext::fault::install(dir).unwrap();
    let seen = Arc::new(Mutex::new((0usize, None)));
    let s = seen.clone();
    let d = dir.to_path_buf();
    faults.on_step(move |name| {
        let mut g = s.lock().unwrap();
        g.0 += 1;
        if g.0 == k {
            g.1 = Some(name.to_string());
            drop(g);
            Store::gc(&d, small()).unwrap();
        }
    });
    (faults, seen)
}

/// The store as a new read-only open sees it after the writer's work and the `gc`.
fn assert_collected(dir: &Path, ids: &[ChatId], what: &str) {
    let fresh = Store::open_read_only(dir).unwrap();
    assert!(fresh.chat("o", ids[0]).is_err(), "{what}: the deleted chat is gone after gc");
    for c in 1..3u64 {
        assert_eq!(texts(&fresh, ids[c as usize]), want(c, 14), "{what}: chat {c} in a new open");
    }
}

#[test]
fn a_gc_at_any_step_of_a_refresh_gives_the_new_batches_whole_or_a_clear_error_never_a_wrong_byte() {
    // How many steps a refresh over the writer's new batches takes (no gc).
    let steps = {
        let dir = tempfile::tempdir().unwrap();
        let ids = closed_store(dir.path());
        let ro = Store::open_read_only(dir.path()).unwrap();
        write_more(dir.path(), &ids);
        let (_faults, seen) = gc_at_step(dir.path(), 0);
        ro.refresh().unwrap();
        let n = seen.lock().unwrap().0;
        assert!(n >= 4, "a refresh over several segments has its steps: {n}");
        n
    };
    let (mut whole, mut refused) = (0, 0);
    for k in 1..=steps {
        let dir = tempfile::tempdir().unwrap();
        let ids = closed_store(dir.path());
        let ro = Store::open_read_only(dir.path()).unwrap();
        let before: Vec<Vec<String>> = ids.iter().map(|id| texts(&ro, *id)).collect();
        write_more(dir.path(), &ids);
        let (faults, seen) = gc_at_step(dir.path(), k);
        let outcome = ro.refresh();
        drop(faults);
        let step =
            seen.lock().unwrap().1.clone().unwrap_or_else(|| panic!("step {k} of {steps} was reached"));
        let what = format!("gc at step {k} ({step})");
        match outcome {
            Ok(_) => {
                whole += 1;
                assert!(ro.chat("o", ids[0]).is_err(), "{what}: the deletion was read");
                for c in 1..3u64 {
                    assert_eq!(texts(&ro, ids[c as usize]), want(c, 14), "{what}: chat {c} after refresh");
                }
            }
            Err(Error::ReadOnly(m)) => {
                refused += 1;
                assert!(m.contains("open the store again"), "{what}: {m}");
                // What was read before stays readable, byte for byte, from the files it holds.
                for (c, id) in ids.iter().enumerate() {
                    assert_eq!(texts(&ro, *id), before[c], "{what}: chat {c} kept as read");
                }
            }
            Err(other) => panic!("{what}: expected the new batches or Error::ReadOnly, found {other:?}"),
        }
        assert_collected(dir.path(), &ids, &what);
    }
    eprintln!(
        "a gc at each of {steps} steps of a refresh: {whole} took the batches whole, {refused} refused"
    );
    assert!(refused >= 1, "a gc after the scan listed the segments must be refused");
}

#[test]
fn a_gc_at_any_step_of_a_read_only_open_gives_a_consistent_store_or_a_clear_error() {
    let steps = {
        let dir = tempfile::tempdir().unwrap();
        closed_store(dir.path());
        let (_faults, seen) = gc_at_step(dir.path(), 0);
        Store::open_read_only(dir.path()).unwrap();
        let n = seen.lock().unwrap().0;
        assert!(n >= 4, "an open over several segments has its steps: {n}");
        n
    };
    for k in 1..=steps {
        let dir = tempfile::tempdir().unwrap();
        let ids = closed_store(dir.path());
        write_more(dir.path(), &ids);
        let (faults, seen) = gc_at_step(dir.path(), k);
        let outcome = Store::open_read_only(dir.path());
        drop(faults);
        let step = seen.lock().unwrap().1.clone().unwrap_or_default();
        let what = format!("gc at step {k} ({step}) of an open");
        match outcome {
            Ok(ro) => {
                // Opened on one log or the other, never a mix: the writer's work is there whole.
                for c in 1..3u64 {
                    assert_eq!(texts(&ro, ids[c as usize]), want(c, 14), "{what}: chat {c}");
                }
                assert!(ro.chat("o", ids[0]).is_err(), "{what}: the deleted chat");
            }
            Err(Error::ReadOnly(m)) => assert!(m.contains("open the store again"), "{what}: {m}"),
            Err(other) => panic!("{what}: expected a store or Error::ReadOnly, found {other:?}"),
        }
        assert_collected(dir.path(), &ids, &what);
    }
}
