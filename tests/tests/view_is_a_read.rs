//! Claims of "a view is a read": a view that previews inline tool results and the task's
//! user text (under a checkpoint) appends nothing to the log and calls no fsync; every text
//! it names by an archive id reads back exactly through `read_context` (and `preview`,
//! `archive_ref`) — in the same process, after a reopen, after `rebuild_index`, and in a
//! read-only open, where the view itself works too; another owner gets the error of an
//! unknown id, and the owner too once the chat is deleted.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use undertext::{
    BlobId, Chat, ChatMeta, Error, NewMessage, Options, Page, Part, Role, Store, ToolContent, Unit,
};
use undertext::{Budget, Decision, View};
use undertext::{CheckpointOptions, Extractive};

use undertext_tests::views::Chars;

fn opts() -> Options {
    // Results up to 64 KB stay inline: the view's guard is what previews them.
    Options::default().estimator(Arc::new(Chars)).archive_threshold(64 << 10)
}

/// A tool result of `n` characters, multibyte in places, distinct per `i`.
fn result_text(i: u64, n: usize) -> String {
    let line = format!("row {i:03}: värde {} ✓ ok\n", i * 31);
    line.repeat(n / line.chars().count() + 1).chars().take(n).collect()
}

/// A chat with a long task, steps before a published checkpoint, a second user turn and steps
/// after it, whose
/// results alternate between bodies stored inline in the message record (3,000 chars) and
/// in a body blob (20,000 chars). Returns the chat and every text a view may preview, by id.
fn build(store: &Store) -> (Chat, HashMap<BlobId, String>) {
    let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    let mut texts = HashMap::new();
    chat.append(NewMessage::system("You are a careful agent.")).unwrap();
    let task = format!("Fix the build, then report.\n{}", result_text(999, 6_000));
    texts.insert(BlobId::of(task.as_bytes()), task.clone());
    chat.append(NewMessage::user(task)).unwrap();
    let step = |i: u64, texts: &mut HashMap<BlobId, String>| {
        chat.append(NewMessage {
            role: Role::Assistant,
            parts: vec![Part::ToolCall { id: format!("c{i}"), name: "read".into(), args: "{}".into() }],
            feedback: false,
        })
        .unwrap();
        let t = result_text(i, if i.is_multiple_of(2) { 3_000 } else { 20_000 });
        texts.insert(BlobId::of(t.as_bytes()), t.clone());
        chat.append(NewMessage::tool_result(format!("c{i}"), t)).unwrap();
    };
    for i in 0..6 {
        step(i, &mut texts);
    }
    let copts =
        CheckpointOptions { segment_tokens: 1_000, protect_max_tokens: Some(1_500), ..Default::default() };
    let cp = chat.build_checkpoint(&Extractive::default(), &copts).unwrap();
    assert!(cp.reach > 2, "the checkpoint covers the task's turn");
    chat.publish_checkpoint(&cp).unwrap();
    chat.append(NewMessage::user("Go on.")).unwrap();
    for i in 6..16 {
        step(i, &mut texts);
    }
    (chat, texts)
}

fn budget() -> Budget {
    let mut b = Budget::new(100_000, 0);
    b.instructions_max_tokens = Some(200);
    b
}

/// Every archive id the view names: archived tool-result contents, and previews of texts.
fn named_ids(v: &View) -> Vec<BlobId> {
    let mut ids = Vec::new();
    for m in v.messages().iter() {
        for p in &m.parts {
            match p {
                Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } => {
                    ids.push(archive.id)
                }
                Part::Text(t) if t.contains("read_context") => {
                    let at = t.find("archive ").unwrap() + "archive ".len();
                    ids.push(t[at..at + 64].parse().unwrap());
                }
                _ => {}
            }
        }
    }
    ids
}

/// A view that previews the task's text and inline results.
fn previewing_view(chat: &Chat) -> View {
    let v = chat.view(&budget()).unwrap();
    let Decision::Compacted { previewed, .. } = v.decision() else { panic!("{:?}", v.decision()) };
    assert!(previewed.len() >= 3, "the guard previews inline results: {previewed:?}");
    v
}

/// Every id reads back whole and exactly through `read_context`, `archive_ref` and `preview`.
fn assert_read_back(store: &Store, ids: &[BlobId], texts: &HashMap<BlobId, String>, when: &str) {
    for id in ids {
        let t = &texts[id];
        let n = t.chars().count() as u64;
        let back =
            store.read_context("o", id, 0..n, Unit::Chars).unwrap_or_else(|e| panic!("{when}: {id}: {e}"));
        assert!(back == *t, "{when}: archive {id} reads back different text");
        let r = store.archive_ref("o", id).unwrap();
        assert_eq!((r.id, r.chars, r.bytes), (*id, n, t.len() as u64), "{when}");
        let lines = store.read_context("o", id, 1..3, Unit::Lines).unwrap();
        assert_eq!(lines, t.split_inclusive('\n').skip(1).take(2).collect::<String>(), "{when}");
        let p = store.preview("o", id, 500, None).unwrap();
        assert!(p.contains(&id.to_string()) && p.len() < t.len(), "{when}");
    }
}

fn ids_and_texts(dir: &Path) -> (Vec<BlobId>, HashMap<BlobId, String>) {
    let store = Store::open(dir, opts()).unwrap();
    let (chat, texts) = build(&store);
    let ids = named_ids(&previewing_view(&chat));
    store.close().unwrap();
    (ids, texts)
}

#[test]
fn a_view_that_previews_inline_results_and_the_task_writes_nothing_to_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let (chat, texts) = build(&store);
    store.sync().unwrap();
    let seg_sizes = || {
        let mut v: Vec<(String, u64)> = std::fs::read_dir(dir.path().join("log"))
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().len()))
            .collect();
        v.sort();
        v
    };
    let (before, files_before) = (store.stats().unwrap(), seg_sizes());
    let v = previewing_view(&chat);
    chat.clear_view_memo();
    let again = chat.view(&budget()).unwrap();
    let (after, files_after) = (store.stats().unwrap(), seg_sizes());
    assert_eq!(after.log_bytes, before.log_bytes, "a view appended to the log");
    assert_eq!(after.log_syncs, before.log_syncs, "a view synced the log");
    assert_eq!(files_after, files_before, "a view changed a segment file");
    assert_eq!(again.messages(), v.messages(), "a view built again is the same view");
    let ids = named_ids(&v);
    let task = texts.iter().find(|(_, t)| t.starts_with("Fix the build")).map(|(id, _)| *id).unwrap();
    assert!(ids.contains(&task), "the task's text is previewed under the checkpoint");
    assert!(ids.len() >= 4, "{ids:?}");
    // Read back at once: the messages may not be in the index yet.
    assert_read_back(&store, &ids, &texts, "same process");
    assert_eq!(store.stats().unwrap().log_bytes, before.log_bytes, "reading a preview back writes nothing");
    let report = store.check().unwrap();
    assert!(report.is_ok(), "{:?}", report.index_problems);
}

#[test]
fn every_text_a_view_names_reads_back_after_reopen_rebuild_and_in_a_read_only_open() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, texts) = ids_and_texts(dir.path());
    {
        let store = Store::open(dir.path(), opts()).unwrap();
        assert_read_back(&store, &ids, &texts, "after reopen");
        store.rebuild_index().unwrap();
        assert_read_back(&store, &ids, &texts, "after rebuild_index");
        let report = store.check().unwrap();
        assert!(report.is_ok(), "{:?}", report.index_problems);
        store.close().unwrap();
    }
    let ro = Store::open_read_only_with(dir.path(), opts()).unwrap();
    assert_read_back(&ro, &ids, &texts, "read-only open");
}

#[test]
fn a_view_on_a_read_only_store_previews_and_its_texts_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, texts) = ids_and_texts(dir.path());
    let ro = Store::open_read_only_with(dir.path(), opts()).unwrap();
    let chat = ro.chat("o", ro.chats("o", Page::default()).unwrap().chats[0].id).unwrap();
    let v = previewing_view(&chat);
    let ro_ids = named_ids(&v);
    assert_eq!(ro_ids, ids, "the read-only view names what the writer's view named");
    assert_read_back(&ro, &ro_ids, &texts, "read-only view");
}

#[test]
fn another_owner_reading_a_previewed_text_gets_the_error_of_an_unknown_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let (chat, texts) = build(&store);
    let ids = named_ids(&previewing_view(&chat));
    let unknown = BlobId::of(b"no chat holds this text");
    let shape = |e: Error, id: &BlobId| match e {
        Error::NotFound { what } => what.replace(&id.to_string(), "<id>"),
        other => panic!("expected NotFound, found {other:?}"),
    };
    let want = shape(store.read_context("mallory", &unknown, 0..1, Unit::Chars).unwrap_err(), &unknown);
    let want_ref = shape(store.archive_ref("mallory", &unknown).unwrap_err(), &unknown);
    let want_preview = shape(store.preview("mallory", &unknown, 100, None).unwrap_err(), &unknown);
    for id in &ids {
        // The owner reads it first, so it is cached: the wall holds for a cached text too.
        store.read_context("o", id, 0..10, Unit::Chars).unwrap();
        assert_eq!(shape(store.read_context("mallory", id, 0..1, Unit::Chars).unwrap_err(), id), want);
        assert_eq!(shape(store.archive_ref("mallory", id).unwrap_err(), id), want_ref);
        assert_eq!(shape(store.preview("mallory", id, 100, None).unwrap_err(), id), want_preview);
    }
    // The owner's right goes with the chat.
    let held = ids[0];
    assert_eq!(texts[&held].chars().count() as u64, store.archive_ref("o", &held).unwrap().chars);
    store.delete_chat("o", chat.id()).unwrap();
    assert_eq!(shape(store.read_context("o", &held, 0..1, Unit::Chars).unwrap_err(), &held), want);
}

#[test]
fn archiving_a_preview_of_an_inline_text_archives_the_text_it_previews() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let (chat, texts) = build(&store);
    let v = previewing_view(&chat);
    let (archive, preview) = v
        .messages()
        .iter()
        .flat_map(|m| &m.parts)
        .find_map(|p| match p {
            Part::ToolResult { content: ToolContent::Archived { archive, preview }, .. } => {
                Some((*archive, preview.clone()))
            }
            _ => None,
        })
        .unwrap();
    let r = store.archive("o", &preview).unwrap();
    assert_eq!(r, archive, "the preview's own text is not archived");
    let n = texts[&archive.id].chars().count() as u64;
    assert!(store.read_context("o", &archive.id, 0..n, Unit::Chars).unwrap() == texts[&archive.id]);
}

#[test]
fn a_previewed_result_appended_as_it_is_archives_its_text_with_the_append() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let (chat, texts) = build(&store);
    let v = previewing_view(&chat);
    let part = v
        .messages()
        .iter()
        .flat_map(|m| &m.parts)
        .find(|p| matches!(p, Part::ToolResult { content: ToolContent::Archived { .. }, .. }))
        .unwrap()
        .clone();
    let Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } = &part else {
        unreachable!()
    };
    let id = archive.id;
    let other = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    other.append(NewMessage::user("Look at this.")).unwrap();
    let Part::ToolResult { call_id, .. } = &part else { unreachable!() };
    other
        .append(NewMessage {
            role: Role::Assistant,
            parts: vec![Part::ToolCall { id: call_id.clone(), name: "read".into(), args: "{}".into() }],
            feedback: false,
        })
        .unwrap();
    other.append(NewMessage { role: Role::Tool, parts: vec![part.clone()], feedback: false }).unwrap();
    // The text is archived now: it reads back after the chat that held it inline is gone.
    store.delete_chat("o", chat.id()).unwrap();
    let n = texts[&id].chars().count() as u64;
    assert!(store.read_context("o", &id, 0..n, Unit::Chars).unwrap() == texts[&id]);
}
