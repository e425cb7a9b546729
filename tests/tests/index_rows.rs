//! What the index keeps per blob and per message (issue 19's disk goal), and that the grants
//! a blob's row has no room for still count and still go with their chats.
//!
//! Index layout 7: one `blobs` row per blob holds its location and its grants (before, a
//! blob bound to a chat cost a row in `blobs`, one in `grants` and one in `chat_grants`);
//! `messages` values are varints (before, a fixed 38-byte tuple).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use redb::{ReadableDatabase, ReadableTableMetadata, TableHandle};
use undertext::{BlobId, ChatMeta, Durability, Error, NewMessage, Options, Part, Role, Store};

fn opts() -> Options {
    Options::default().durability(Durability::None)
}

fn attaching(id: BlobId) -> NewMessage {
    NewMessage {
        role: Role::User,
        parts: vec![Part::Attachment { mime: "text/plain".into(), blob: id }],
        feedback: false,
    }
}

/// (table name, rows, stored leaf bytes) of every table of a closed store's index.
fn tables(dir: &std::path::Path) -> Vec<(String, u64, u64)> {
    let db = redb::Database::open(dir.join("index.redb")).unwrap();
    let tx = db.begin_read().unwrap();
    let mut out = Vec::new();
    for h in tx.list_tables().unwrap() {
        let t = tx.open_untyped_table(h.clone()).unwrap();
        out.push((h.name().to_string(), t.len().unwrap(), t.stats().unwrap().stored_bytes()));
    }
    out
}

#[test]
fn a_blob_stored_with_a_chat_costs_one_index_row_and_a_message_under_48_bytes() {
    let dir = tempfile::tempdir().unwrap();
    const N: u64 = 200;
    {
        let store = Store::open(dir.path(), opts()).unwrap();
        let c = store.create_chat("langgraph", ChatMeta::default()).unwrap();
        let chat = store.chat("langgraph", c).unwrap();
        for i in 0..N {
            let body = format!("item {i}: a tool result of some length, stored as its own blob");
            let id = BlobId::of(body.as_bytes());
            chat.append_with_blobs(&[body.as_bytes()], vec![attaching(id)]).unwrap();
        }
        store.close().unwrap();
    }
    let tables = tables(dir.path());
    let rows = |name: &str| tables.iter().find(|t| t.0 == name).map_or(0, |t| t.1);
    // Every blob row, grant row and grant-by-chat row there is: one per blob.
    let per_blob = rows("blobs") + rows("grants") + rows("chat_grants");
    assert_eq!(per_blob, N, "index rows for {N} blobs bound to one chat: {tables:?}");
    let (_, messages, bytes) = tables.iter().find(|t| t.0 == "messages").unwrap().clone();
    assert_eq!(messages, N);
    // The key (chat, seq, revision) is 24 bytes; the location, role, turn, time and
    // has-step took 38 more as a fixed tuple.
    assert!(bytes / messages < 48, "{} bytes per message row: {tables:?}", bytes / messages);
}

#[test]
fn a_blob_attached_in_many_chats_stays_readable_until_the_last_of_them_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let content = b"a system prompt every chat attaches".as_slice();
    let (id, chats, bobs) = {
        let store = Store::open(dir.path(), opts()).unwrap();
        let mut chats = Vec::new();
        let mut id = None;
        // Seven chats of alice bind a grant each (more than a blob's row holds), one of bob's
        // another; alice has no grant of her own.
        for _ in 0..7 {
            let c = store.create_chat("alice", ChatMeta::default()).unwrap();
            let chat = store.chat("alice", c).unwrap();
            match id {
                None => {
                    let first = BlobId::of(content);
                    chat.append_with_blobs(&[content], vec![attaching(first)]).unwrap();
                    id = Some(first);
                }
                Some(id) => {
                    chat.append(attaching(id)).unwrap();
                }
            }
            chats.push(c);
        }
        let bobs = store.create_chat("bob", ChatMeta::default()).unwrap();
        store.chat("bob", bobs).unwrap().append_with_blobs(&[content], vec![NewMessage::user("hi")]).unwrap();
        store.close().unwrap();
        (id.unwrap(), chats, bobs)
    };
    // Alice's first four chats are in the blob's row, her last three and bob's in `grants`.
    let spilled = tables(dir.path()).iter().find(|t| t.0 == "grants").map_or(0, |t| t.1);
    assert_eq!(spilled, 4);
    let store = Store::open(dir.path(), opts()).unwrap();
    assert!(store.check().unwrap().is_ok());
    // Deleted one by one, newest first (the last grants written go first), then the rest.
    let mut order = chats.clone();
    order.reverse();
    order.swap(1, 6);
    for (k, c) in order.iter().enumerate() {
        assert_eq!(&*store.get_blob("alice", &id).unwrap(), content, "before deleting chat {k}");
        store.delete_chat("alice", *c).unwrap();
        let report = store.check().unwrap();
        assert!(report.is_ok(), "after deleting chat {k}: {report:?}");
    }
    let e = store.get_blob("alice", &id).unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e}");
    assert_eq!(&*store.get_blob("bob", &id).unwrap(), content);
    store.close().unwrap();
    // The same after a reopen (from redb, no memtable), and after gc.
    let store = Store::open(dir.path(), opts()).unwrap();
    assert!(matches!(store.get_blob("alice", &id).unwrap_err(), Error::NotFound { .. }));
    assert_eq!(&*store.get_blob("bob", &id).unwrap(), content);
    store.close().unwrap();
    Store::gc(dir.path(), opts()).unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    assert!(matches!(store.get_blob("alice", &id).unwrap_err(), Error::NotFound { .. }));
    assert_eq!(&*store.get_blob("bob", &id).unwrap(), content);
    store.delete_chat("bob", bobs).unwrap();
    assert!(matches!(store.get_blob("bob", &id).unwrap_err(), Error::NotFound { .. }));
    assert!(store.check().unwrap().is_ok());
}

/// A chat's inline-text rows (`inline_texts`, and `chat_inline_texts` by chat) go with the
/// chat and only with it, edits and shared texts included: the class of a deletion range
/// that misses rows (which `check` cannot see: a rebuild replays the same deletion).
#[test]
fn deleting_a_chat_drops_exactly_its_inline_text_rows() {
    let dir = tempfile::tempdir().unwrap();
    // Texts over 128 characters: a view may preview them, so the index lists them.
    let pad = "with enough detail that a view may preview it ".repeat(3);
    let shared = format!("a task both chats were given, {pad}");
    let shared = shared.as_str();
    let (doomed_only, kept) = {
        let store = Store::open(dir.path(), opts()).unwrap();
        let doomed = store.create_chat("alice", ChatMeta::default()).unwrap();
        let kept = store.create_chat("alice", ChatMeta::default()).unwrap();
        let (a, b) = (store.chat("alice", doomed).unwrap(), store.chat("alice", kept).unwrap());
        a.append(NewMessage::user(shared)).unwrap();
        b.append(NewMessage::user(shared)).unwrap();
        for i in 0..300 {
            a.append(NewMessage::user(format!("only in the doomed chat, turn {i} {pad}"))).unwrap();
            b.append(NewMessage::user(format!("only in the kept chat, turn {i} {pad}"))).unwrap();
            // Short texts are never previewed: no rows.
            a.append(NewMessage::user(format!("short {i}"))).unwrap();
        }
        // A second revision of one message: its texts are rows of their own.
        a.edit(5, NewMessage::user(format!("an edited turn of the doomed chat {pad}")), a.revision())
            .unwrap();
        store.delete_chat("alice", doomed).unwrap();
        store.close().unwrap();
        (BlobId::of(format!("only in the doomed chat, turn 7 {pad}").as_bytes()), kept)
    };
    let tables = tables(dir.path());
    let rows = |name: &str| tables.iter().find(|t| t.0 == name).map_or(0, |t| t.1);
    assert_eq!(rows("inline_texts"), 301, "{tables:?}");
    assert_eq!(rows("chat_inline_texts"), 301, "{tables:?}");
    let store = Store::open(dir.path(), opts()).unwrap();
    assert!(store.check().unwrap().is_ok());
    let shared_id = BlobId::of(shared.as_bytes());
    assert_eq!(
        store.read_context("alice", &shared_id, 0..shared.len() as u64, undertext::Unit::Bytes).unwrap(),
        shared
    );
    let gone = store.read_context("alice", &doomed_only, 0..1, undertext::Unit::Bytes).unwrap_err();
    assert!(matches!(gone, Error::NotFound { .. }), "{gone}");
    store.delete_chat("alice", kept).unwrap();
    store.close().unwrap();
    let tables = self::tables(dir.path());
    let rows = |name: &str| tables.iter().find(|t| t.0 == name).map_or(0, |t| t.1);
    assert_eq!((rows("inline_texts"), rows("chat_inline_texts")), (0, 0), "{tables:?}");
}
