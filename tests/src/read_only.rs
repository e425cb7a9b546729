//! Shared by the read-only tests and their writer child: the messages they write, the closed
//! store they read, and the snapshot of a store's files that shows a read wrote nothing.

#![allow(clippy::expect_used, reason = "test helpers: a failed step fails the test")]

use std::collections::BTreeMap;
use std::path::Path;

use undertext::{Chat, ChatId, ChatMeta, NewMessage, Options, Store};

/// The text of message `i`: long enough that a few fill a 4 KiB segment, and each byte
/// depends on `i`, so a torn or misplaced read cannot pass for it.
pub fn message_text(i: u64) -> String {
    let mut s = format!("message {i}: ");
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    // 1,500 letters: compressed (compact message records are, when that pays) a record is
    // still about 900 bytes, so a few messages seal a 4 KiB segment.
    while s.len() < 1500 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push(char::from(b'a' + (x % 26) as u8));
    }
    s
}

/// The options of the read-only tests' stores: 4 KiB segments, so that a few messages seal one.
pub fn small() -> Options {
    Options::default().segment_size(4096)
}

/// A writer on `dir` ([`small`] segments) holding one chat of owner `o` with one user message
/// ([`message_text`] 0), and a read-only open made after it: (writer, chat id, the writer's
/// handle on the chat, the read-only store).
pub fn writer_then_reader(dir: &Path) -> (Store, ChatId, Chat, Store) {
    let writer = Store::open(dir, small()).expect("open the writer");
    let id = writer.create_chat("o", ChatMeta::default()).expect("create a chat");
    let chat = writer.chat("o", id).expect("its handle");
    chat.append(NewMessage::user(message_text(0))).expect("the first message");
    let ro = Store::open_read_only(dir).expect("open read-only");
    (writer, id, chat, ro)
}

/// A writer on `dir` ([`small`] segments) with two chats of owner `o`, both empty: the one a
/// test keeps and one it deletes before a gc ([`collect_after_deleting`]): (writer, kept
/// chat id, the other's id, the writer's handle on the kept chat).
pub fn writer_with_two_chats(dir: &Path) -> (Store, ChatId, ChatId, Chat) {
    let writer = Store::open(dir, small()).expect("open the writer");
    let id = writer.create_chat("o", ChatMeta::default()).expect("create the kept chat");
    let gone = writer.create_chat("o", ChatMeta::default()).expect("create the other chat");
    let chat = writer.chat("o", id).expect("its handle");
    (writer, id, gone, chat)
}

/// What a reader of `dir` meets after a gc: the writer deletes chat `gone`, closes, the log is
/// collected (`Store::gc`, every segment rewritten), and a new writer appends
/// [`message_text`] `next` to chat `id`. Returns the new writer.
pub fn collect_after_deleting(
    dir: &Path,
    writer: Store,
    chat: Chat,
    gone: ChatId,
    id: ChatId,
    next: u64,
) -> Store {
    writer.delete_chat("o", gone).expect("delete the other chat");
    drop(chat);
    writer.close().expect("close the writer");
    Store::gc(dir, small()).expect("collect the log");
    let writer = Store::open(dir, small()).expect("open a new writer");
    writer
        .chat("o", id)
        .expect("the kept chat")
        .append(NewMessage::user(message_text(next)))
        .expect("append");
    writer
}

/// A closed store of 3 chats of 8 messages ([`message_text`] `c * 100 + i` for chat `c`),
/// written one chat after the other over [`small`] segments; returns the chat ids.
pub fn closed_store(dir: &Path) -> Vec<ChatId> {
    let store = Store::open(dir, small()).expect("open the store");
    let mut ids = Vec::new();
    for c in 0..3u64 {
        let id = store.create_chat("o", ChatMeta::default()).expect("create a chat");
        let chat = store.chat("o", id).expect("open the chat");
        for i in 0..8 {
            chat.append(NewMessage::user(message_text(c * 100 + i))).expect("append");
        }
        ids.push(id);
    }
    store.close().expect("close the store");
    ids
}

/// Every file under `dir` (path relative to `dir` -> bytes).
pub fn store_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("list a store directory") {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let name = p.strip_prefix(dir).expect("under the store").display().to_string();
                out.insert(name, std::fs::read(&p).expect("read a store file"));
            }
        }
    }
    out
}

/// Asserts that `dir` holds exactly the files of `before` ([`store_files`]), byte for byte,
/// naming the ones that differ (not their bytes).
pub fn assert_unchanged(dir: &Path, before: &BTreeMap<String, Vec<u8>>, what: &str) {
    let now = store_files(dir);
    let differ: Vec<&String> =
        before.keys().chain(now.keys()).filter(|k| before.get(*k) != now.get(*k)).collect();
    assert!(differ.is_empty(), "{what}: these files changed: {differ:?}");
}
