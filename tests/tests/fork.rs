//! Claims: a store belongs to the process that opened it. In a `fork` child every call on the
//! parent's handles fails with `Error::Forked` (writes, reads, views, opening chats), dropping
//! them there writes nothing, and the parent's acknowledged writes — before and after the
//! fork — all survive its close and reopen, with `check` clean.
//!
//! One `#[test]` forks, so no other test thread of this binary is inside the store (or
//! holding the allocator) at the fork.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext::Budget;
use undertext::{Error, NewMessage, Options, Store};
use undertext_tests::child::fork_and_run;

/// What the child found, as an exit code: 0 = every call refused with `Forked`, else the
/// number of the first call that was not.
fn in_child(store: Store, chat_id: undertext::ChatId) -> i32 {
    let forked = |r: Result<(), Error>| matches!(r, Err(Error::Forked { .. }));
    if !forked(store.chat("o", chat_id).map(|_| ())) {
        return 1;
    }
    if !forked(store.create_chat("o", Default::default()).map(|_| ())) {
        return 2;
    }
    if !forked(store.put_blob("o", b"written by the child").map(|_| ())) {
        return 3;
    }
    if !forked(store.sync()) {
        return 4;
    }
    drop(store);
    0
}

#[test]
fn a_fork_child_is_refused_every_call_and_the_parents_writes_survive() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let id = store.create_chat("o", Default::default()).unwrap();
    let chat = store.chat("o", id).unwrap();
    chat.append(NewMessage::user("the task")).unwrap();
    for i in 0..50 {
        chat.append(NewMessage::assistant(format!("step {i} before the fork"))).unwrap();
    }
    store.sync().unwrap();

    // The child uses the chat handle it inherited: appends, reads and views are refused.
    let (s1, c1) = (store.clone(), chat.clone());
    let code = fork_and_run(move || {
        let chat = c1;
        let r = chat.append(NewMessage::assistant("an append in the child"));
        if !matches!(r, Err(Error::Forked { .. })) {
            return 10;
        }
        // A message the parent holds only in the log (not in memory) is read from it.
        chat.clear_view_memo();
        if !matches!(chat.view(&Budget::new(32_000, 4_000)), Err(Error::Forked { .. })) {
            return 11;
        }
        let e = chat.append(NewMessage::user("x")).unwrap_err().to_string();
        if !e.contains("is a fork of it") || !e.contains("spawn") {
            return 12;
        }
        drop(chat);
        in_child(s1, id)
    });
    assert_eq!(code, 0, "the child's call number {code} was not refused with Error::Forked");

    // A child that only drops every handle (as a worker process exiting does) writes nothing:
    // its copy of the store neither trims the active segment nor commits the index.
    let log_bytes = |d: &std::path::Path| -> Vec<(std::path::PathBuf, Vec<u8>)> {
        let mut v: Vec<_> = std::fs::read_dir(d.join("log"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "seg"))
            .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
            .collect();
        v.sort();
        v.push((d.join("index.redb"), std::fs::read(d.join("index.redb")).unwrap()));
        v
    };
    let before = log_bytes(dir.path());
    let (s2, c2) = (store.clone(), chat.clone());
    let code = fork_and_run(move || {
        drop(c2);
        drop(s2);
        0
    });
    assert_eq!(code, 0);
    assert!(before == log_bytes(dir.path()), "a fork child's drop changed the store's files");

    // The parent goes on writing, closes, and everything it was told is stored is there.
    for i in 0..50 {
        chat.append(NewMessage::assistant(format!("step {i} after the fork"))).unwrap();
    }
    drop(chat);
    drop(store);
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let msgs = store.chat("o", id).unwrap().messages().unwrap();
    assert_eq!(msgs.len(), 101, "acknowledged messages lost");
    assert!(store.check().unwrap().is_ok(), "check after the fork: {:?}", store.check().unwrap());
}
