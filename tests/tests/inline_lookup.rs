//! Claims of the lookup of a text a chat holds inline (issue 18): records not yet in redb
//! are looked at in the memtable, so a lookup never flushes the index to answer —
//! `read_context` and `archive_ref` of an id the owner cannot read, and an append of an
//! archived reference without a grant, write nothing to the index file; and a text appended
//! moments ago (held inline in its message record, or in a body blob) is found before any
//! flush and while the indexer flushes, but not by another owner nor once its chat is deleted.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::path::Path;
use std::time::Duration;

use undertext::fault::{self, Installed};
use undertext::{
    ArchiveRef, BlobId, Chat, ChatMeta, Error, NewMessage, Options, Part, Role, Store, ToolContent, Unit,
};

/// A store whose indexer does not flush during the test (unless `flush_every` says how often
/// it does), with results up to 64 KB kept inline in their messages, and its fault controller
/// (which only counts and traces here).
fn open(dir: &Path, flush_every: Duration) -> (Installed, Store) {
    let seam = fault::install(dir).unwrap();
    let opts = Options::default()
        .index_flush_interval(flush_every)
        .index_durable_interval(Duration::from_secs(3600))
        .archive_threshold(64 << 10);
    (seam, Store::open(dir, opts).unwrap())
}

/// A tool result of `n` characters, distinct per `i`.
fn result_text(i: u64, n: usize) -> String {
    let line = format!("row {i:04}: värde {} ✓\n", i * 37);
    line.repeat(n / line.chars().count() + 1).chars().take(n).collect()
}

/// Appends a tool step whose result is `text`; returns the text's id.
fn step(chat: &Chat, i: u64, text: &str) -> BlobId {
    chat.append(NewMessage {
        role: Role::Assistant,
        parts: vec![Part::ToolCall { id: format!("c{i}"), name: "read".into(), args: "{}".into() }],
        feedback: false,
    })
    .unwrap();
    chat.append(NewMessage::tool_result(format!("c{i}"), text)).unwrap();
    BlobId::of(text.as_bytes())
}

/// The operations on the index file the seam saw since the trace started.
fn index_writes(seam: &Installed) -> Vec<String> {
    seam.trace().into_iter().filter(|l| l.contains("index.redb")).collect()
}

fn is_not_found<T>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(Error::NotFound { .. }))
}

/// A text of at most 128 characters is never previewed (a view sends it whole, no preview
/// size is under 128), so it is not listed and its address is not found; a longer one is,
/// from the memtable and from redb, in characters not bytes.
#[test]
fn only_texts_longer_than_the_shortest_preview_are_found_by_address() {
    let dir = tempfile::tempdir().unwrap();
    let (_seam, store) = open(dir.path(), Duration::from_secs(3600));
    let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    let short = "é".repeat(128); // 256 bytes, 128 characters
    let long = "é".repeat(129);
    let (short_id, long_id) = (step(&chat, 0, &short), step(&chat, 1, &long));
    let user = "u".repeat(200);
    chat.append(NewMessage::user(user.clone())).unwrap();
    let user_id = BlobId::of(user.as_bytes());
    let check = |store: &Store, round: &str| {
        assert!(is_not_found(&store.read_context("o", &short_id, 0..10, Unit::Chars)), "{round}");
        assert_eq!(store.read_context("o", &long_id, 0..129, Unit::Chars).unwrap(), long, "{round}");
        assert_eq!(store.read_context("o", &user_id, 0..200, Unit::Chars).unwrap(), user, "{round}");
    };
    check(&store, "in the memtable");
    drop(chat); // the chat's handle holds the store open
    store.close().unwrap();
    check(&Store::open(dir.path(), Options::default()).unwrap(), "in redb");
}

#[test]
fn a_lookup_that_finds_no_text_writes_nothing_to_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let (seam, store) = open(dir.path(), Duration::from_secs(3600));
    let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    // Records wait in the memtable: a message held inline, and one whose body is a blob.
    let small = step(&chat, 1, &result_text(1, 3_000));
    let large = step(&chat, 2, &result_text(2, 20_000));
    seam.start_trace();

    let unknown = BlobId::of(b"no chat holds this text");
    assert!(is_not_found(&store.read_context("o", &unknown, 0..10, Unit::Chars)));
    assert!(is_not_found(&store.archive_ref("o", &unknown)));
    assert!(is_not_found(&store.preview("o", &unknown, 100, None)));
    // Another owner reads neither text (the answer for an unknown id).
    for id in [small, large] {
        assert!(is_not_found(&store.read_context("p", &id, 0..10, Unit::Chars)));
        assert!(is_not_found(&store.archive_ref("p", &id)));
    }
    // An archived reference without a grant, appended: refused, nothing written anywhere.
    let r = ArchiveRef { id: unknown, bytes: 10, chars: 10, utf16_units: 10, lines: 1 };
    let refused = chat.append(NewMessage {
        role: Role::Tool,
        parts: vec![Part::ToolResult {
            call_id: "c3".into(),
            content: ToolContent::Archived { archive: r, preview: "[…]".into() },
            is_error: false,
        }],
        feedback: false,
    });
    assert!(is_not_found(&refused), "{refused:?}");

    assert_eq!(index_writes(&seam), Vec::<String>::new(), "a lookup that found nothing wrote to the index");
    // The texts are there for their owner all along, still without an index write.
    assert_eq!(store.read_context("o", &small, 0..9, Unit::Chars).unwrap(), "row 0001:");
    assert_eq!(store.read_context("o", &large, 0..9, Unit::Chars).unwrap(), "row 0002:");
    assert_eq!(store.archive_ref("o", &large).unwrap().chars, 20_000);
    assert_eq!(index_writes(&seam), Vec::<String>::new(), "a lookup that found a text wrote to the index");
}

#[test]
fn a_text_appended_moments_ago_is_found_before_any_flush_and_not_after_its_chat_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let (seam, store) = open(dir.path(), Duration::from_secs(3600));
    let id = store.create_chat("o", ChatMeta::default()).unwrap();
    let chat = store.chat("o", id).unwrap();
    seam.start_trace();
    let texts: Vec<(BlobId, String)> = (0..6)
        .map(|i| {
            let t = result_text(i, if i % 2 == 0 { 3_000 } else { 20_000 });
            (step(&chat, i, &t), t)
        })
        .collect();
    for (id, text) in &texts {
        let n = text.chars().count() as u64;
        assert_eq!(&store.read_context("o", id, 0..n, Unit::Chars).unwrap(), text);
        assert_eq!(store.archive_ref("o", id).unwrap().bytes, text.len() as u64);
    }
    assert_eq!(index_writes(&seam), Vec::<String>::new(), "nothing was flushed to find them");

    // The chat's deletion, not yet in redb, hides its texts (a text not read before, so
    // that no cache answers: the lookup itself).
    let late = step(&chat, 9, &result_text(9, 2_000));
    store.delete_chat("o", id).unwrap();
    assert!(is_not_found(&store.read_context("o", &late, 0..5, Unit::Chars)));
    store.sync().unwrap();
    assert!(is_not_found(&store.read_context("o", &late, 0..5, Unit::Chars)));
}

#[test]
fn a_text_read_right_after_its_append_is_found_while_the_indexer_flushes() {
    let dir = tempfile::tempdir().unwrap();
    // The indexer moves the memtable into redb every millisecond: lookups race the handoff.
    let (_seam, store) = open(dir.path(), Duration::from_millis(1));
    let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    for i in 0..150 {
        let text = result_text(i, if i % 5 == 0 { 12_000 } else { 600 });
        let id = step(&chat, i, &text);
        assert_eq!(
            store.read_context("o", &id, 0..9, Unit::Chars).unwrap(),
            format!("row {i:04}:"),
            "text {i}"
        );
    }
}
