//! Claim: the index is derived. Removing it, or rebuilding it in place, gives identical
//! answers for every blob.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext::{BlobId, Options, Store};
use undertext_tests::{content, seed};

fn fill(store: &Store, seed: u64, n: u64) -> Vec<(BlobId, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let c = content(seed, 0, i);
            (store.put_blob("o", &c).unwrap(), c)
        })
        .collect()
}

fn small_segments() -> Options {
    Options::default().segment_size(64 << 10)
}

#[test]
fn removing_the_index_files_loses_nothing() {
    let seed = seed(11);
    let dir = tempfile::tempdir().unwrap();
    let blobs = {
        let store = Store::open(dir.path(), small_segments()).unwrap();
        let b = fill(&store, seed, 300);
        store.close().unwrap();
        b
    };
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let store = Store::open(dir.path(), small_segments()).unwrap();
    assert!(store.stats().unwrap().segments > 3, "the log should span several segments");
    for (id, c) in &blobs {
        assert_eq!(BlobId::of(c), *id);
        assert_eq!(*store.get_blob("o", id).unwrap(), **c);
    }
    assert!(store.check().unwrap().is_ok());
}

#[test]
fn rebuild_index_in_place_gives_identical_answers() {
    let seed = seed(12);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_segments()).unwrap();
    let blobs = fill(&store, seed, 200);
    store.sync().unwrap();
    let before = store.stats().unwrap().indexed_blobs;
    store.rebuild_index().unwrap();
    assert_eq!(store.stats().unwrap().indexed_blobs, before);
    for (id, c) in &blobs {
        assert_eq!(*store.get_blob("o", id).unwrap(), **c);
    }
    // Writes continue after a rebuild, and a reopen replays nothing surprising.
    let more = fill(&store, seed + 1, 20);
    drop(store);
    let store = Store::open(dir.path(), small_segments()).unwrap();
    for (id, c) in blobs.iter().chain(&more) {
        assert_eq!(*store.get_blob("o", id).unwrap(), **c);
    }
}

/// An index that records more log than the store holds (another store's, or this store's
/// after its log lost data) cannot be told apart from missing log data: open refuses, saying
/// so and how to give the data up; without that index the store opens and rebuilds it.
#[test]
fn an_index_reaching_beyond_the_log_is_refused_until_it_is_removed() {
    let seed = seed(13);
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let blobs_a = {
        let s = Store::open(a.path(), Options::default()).unwrap();
        let x = fill(&s, seed, 10);
        s.close().unwrap();
        x
    };
    {
        let s = Store::open(b.path(), Options::default()).unwrap();
        fill(&s, seed + 7, 400);
        s.close().unwrap();
    }
    // b's index reaches far beyond a's log: opening a must notice and refuse.
    std::fs::copy(b.path().join("index.redb"), a.path().join("index.redb")).unwrap();
    match Store::open(a.path(), Options::default()) {
        Err(undertext::Error::Corrupt { reason, .. }) => {
            assert!(reason.contains("missing") && reason.contains("index.redb"), "{reason}");
        }
        other => panic!("expected a refusal, found {:?}", other.map(|_| "an open store")),
    }
    std::fs::remove_file(a.path().join("index.redb")).unwrap();
    let s = Store::open(a.path(), Options::default()).unwrap();
    for (id, c) in &blobs_a {
        assert_eq!(*s.get_blob("o", id).unwrap(), **c);
    }
}

/// An index written by a build of another layout (its `version` differs: what every index
/// layout change, such as layout 9's `chat_inline_texts` key, leaves on disk) is rebuilt from
/// the log at the first open: every chat, message and inline text answers as before, and the
/// rebuilt index carries this build's version.
#[test]
fn an_index_of_another_layout_version_is_rebuilt_at_open_and_answers_the_same() {
    use redb::{ReadableDatabase, ReadableTable};
    use undertext::{ChatMeta, NewMessage, Unit};
    const META: redb::TableDefinition<'_, &str, u64> = redb::TableDefinition::new("meta");
    let dir = tempfile::tempdir().unwrap();
    let (chats, texts) = {
        let store = Store::open(dir.path(), Options::default()).unwrap();
        let mut chats = Vec::new();
        let mut texts = Vec::new();
        for c in 0..3 {
            let id = store.create_chat("alice", ChatMeta::default()).unwrap();
            let chat = store.chat("alice", id).unwrap();
            for i in 0..40 {
                // Over 128 characters, so that the index lists it (a view may preview it).
                let text = format!("chat {c}, user turn {i}: {}", "a task told in some detail ".repeat(5));
                chat.append(NewMessage::user(text.clone())).unwrap();
                chat.append(NewMessage::assistant(format!("answer {i}"))).unwrap();
                texts.push(text);
            }
            let edited = format!("chat {c}, an edited turn: {}", "told again in more detail ".repeat(5));
            chat.edit(4, NewMessage::user(edited.clone()), chat.revision()).unwrap();
            texts.push(edited);
            chats.push((id, chat.messages().unwrap()));
        }
        store.close().unwrap();
        (chats, texts)
    };
    let path = dir.path().join("index.redb");
    let current = {
        let db = redb::Database::open(&path).unwrap();
        let tx = db.begin_write().unwrap();
        let current = {
            let mut meta = tx.open_table(META).unwrap();
            let v = meta.get("version").unwrap().unwrap().value();
            meta.insert("version", v - 1).unwrap();
            v
        };
        tx.commit().unwrap();
        current
    };
    let store = Store::open(dir.path(), Options::default()).unwrap();
    for (id, messages) in &chats {
        assert_eq!(&store.chat("alice", *id).unwrap().messages().unwrap(), messages);
    }
    for text in &texts {
        let id = BlobId::of(text.as_bytes());
        assert_eq!(&store.read_context("alice", &id, 0..text.len() as u64, Unit::Bytes).unwrap(), text);
    }
    assert!(store.check().unwrap().is_ok());
    store.close().unwrap();
    let db = redb::Database::open(&path).unwrap();
    let version = db.begin_read().unwrap().open_table(META).unwrap().get("version").unwrap().unwrap().value();
    assert_eq!(version, current);
}
