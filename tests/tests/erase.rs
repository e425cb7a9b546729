//! Claims of erasure (`Chat::erase`, issue 34): an erased message is gone from every read
//! at once, at every revision; after `gc` its bytes are in no file of the store — its
//! text, its tool call and result, the archive and attachment only it used, its body blob,
//! the checkpoint summaries built over it and the search index — while every other
//! message, and every blob another chat or owner still holds, reads as before; the chat's
//! numbering stays; a collection after that erases nothing more.
//!
//! The store writes without compression so that a text in a file is its bytes: each test
//! first finds the secret in the files (the test can fail), then not.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]
#![allow(clippy::single_range_in_vec_init, reason = "a list of erased ranges may hold one range")]

use std::path::Path;

use undertext::Budget;
use undertext::{
    BlobId, Chat, ChatMeta, Compression, Error, NewMessage, Options, Part, Role, SearchScope, Store,
    ToolContent, Unit,
};
use undertext::{CheckpointOptions, Extractive};

fn opts() -> Options {
    Options::default().compression(Compression::None)
}

/// True when some file under `dir` holds `needle`.
fn in_files(dir: &Path, needle: &[u8]) -> bool {
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if std::fs::read(&p).unwrap().windows(needle.len()).any(|w| w == needle) {
                return true;
            }
        }
    }
    false
}

fn chat(store: &Store, owner: &str) -> Chat {
    store.chat(owner, store.create_chat(owner, ChatMeta::default()).unwrap()).unwrap()
}

fn call(id: &str, args: &str) -> NewMessage {
    NewMessage {
        role: Role::Assistant,
        parts: vec![Part::ToolCall { id: id.into(), name: "read".into(), args: args.into() }],
        feedback: false,
    }
}

fn view_text(c: &Chat) -> String {
    format!("{:?}", c.view(&Budget::new(1_000_000, 0)).unwrap().messages())
}

#[test]
fn an_erased_message_is_gone_from_every_read_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let c = chat(&store, "o");
    c.append_batch(vec![
        NewMessage::user("hello"),
        NewMessage::user("my card number is CARD-4111-SECRET"),
        NewMessage::assistant("noted"),
    ])
    .unwrap();
    assert_eq!(store.search("o", "CARD-4111-SECRET", SearchScope::all(), 5).unwrap().len(), 1);
    let id = c.id();
    let rev = c.erase(&[1..2], 0).unwrap();
    assert_eq!((rev, c.len()), (1, 3), "an erasure is a revision; the numbering stays");
    let snap = c.snapshot();
    assert!(snap.is_erased(1) && snap.is_hidden(1) && !snap.is_erased(0));
    match snap.get(1) {
        Err(Error::NotFound { what }) => assert!(what.contains("erased"), "{what}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    let all = snap.messages_with_hidden().unwrap();
    assert_eq!(all.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert!(all[1].parts.is_empty() && all[1].role == Role::User, "an erased message's place only");
    assert_eq!(snap.live_len(), 2);
    // The revision before the erasure: the erased version is left out there too.
    let old = c.snapshot_at(0).unwrap();
    assert!(old.is_erased(1) && old.get(1).is_err());
    assert_eq!(old.messages().unwrap().len(), 2);
    assert!(!view_text(&c).contains("CARD-4111"));
    for scope in [SearchScope::all(), SearchScope::chat(c.id()).including_hidden()] {
        assert!(store.search("o", "CARD-4111-SECRET", scope, 5).unwrap().is_empty());
    }
    match c.edit(1, NewMessage::user("replacement"), rev) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("erased"), "{why}"),
        other => panic!("expected the edit refused, got {other:?}"),
    }
    // Across a reopen and an index rebuild.
    drop((c, store));
    let store = Store::open(dir.path(), opts()).unwrap();
    store.rebuild_index().unwrap();
    let c = store.chat("o", id).unwrap();
    assert!(c.snapshot().is_erased(1) && c.snapshot_at(0).unwrap().get(1).is_err());
}

#[test]
fn gc_drops_the_bytes_of_erased_messages_and_what_only_they_used() {
    let dir = tempfile::tempdir().unwrap();
    let big = format!("ARCHIVE-SECRET {}", "file line of a tool result\n".repeat(2_000));
    let shared = format!("SHARED-RESULT {}", "another file line\n".repeat(1_000));
    let attachment = b"ATTACHMENT-SECRET bytes of an image".repeat(10);
    let (id, other, keep_seq) = {
        let store = Store::open(dir.path(), opts()).unwrap();
        let c = chat(&store, "o");
        c.append(NewMessage::user("read the files")).unwrap();
        c.append(call("c1", "{\"path\": \"ARGS-SECRET\"}")).unwrap();
        c.append(NewMessage::tool_result("c1", big.clone())).unwrap();
        c.append(call("c2", "{}")).unwrap();
        c.append(NewMessage::tool_result("c2", shared.clone())).unwrap();
        let att = NewMessage {
            role: Role::User,
            parts: vec![Part::Attachment { mime: "image/png".into(), blob: BlobId::of(&attachment) }],
            feedback: false,
        };
        c.append_with_blobs(&[&attachment], vec![att]).unwrap();
        c.append(NewMessage::assistant("x".repeat(10_000) + "BODY-SECRET")).unwrap(); // a body blob
        let keep_seq = c.append(NewMessage::assistant("KEPT-TEXT stays")).unwrap();
        // Another chat of the same owner holds the same second result: it is theirs too.
        let other = chat(&store, "o");
        other.append(NewMessage::user("again")).unwrap();
        other.append(call("d2", "{}")).unwrap();
        other.append(NewMessage::tool_result("d2", shared.clone())).unwrap();
        let rev = c.revision();
        c.erase(&[1..7], rev).unwrap();
        (c.id(), other.id(), keep_seq)
    };
    let secrets: [&[u8]; 5] =
        [b"ARCHIVE-SECRET", b"ARGS-SECRET", b"ATTACHMENT-SECRET", b"BODY-SECRET", b"SHARED-RESULT"];
    for s in secrets {
        assert!(in_files(dir.path(), s), "{} is in the files before gc", String::from_utf8_lossy(s));
    }
    let report = Store::gc(dir.path(), opts()).unwrap();
    assert_eq!(report.erased_versions, 6);
    assert!(report.log_bytes_after < report.log_bytes_before);
    for s in &secrets[..4] {
        assert!(!in_files(dir.path(), s), "{} is still in the files after gc", String::from_utf8_lossy(s));
    }
    assert!(in_files(dir.path(), b"SHARED-RESULT"), "another chat's result stays");
    let store = Store::open(dir.path(), opts()).unwrap();
    assert!(store.check().unwrap().is_ok());
    let c = store.chat("o", id).unwrap();
    assert_eq!(c.len(), 8, "the chat's numbering stays");
    let texts: Vec<_> = c.messages().unwrap().iter().map(|m| format!("{:?}", m.parts)).collect();
    assert_eq!(texts.len(), 2);
    assert!(texts[1].contains("KEPT-TEXT") && c.get(keep_seq).is_ok());
    assert!(c.snapshot().get(2).is_err() && c.snapshot_at(0).unwrap().get(2).is_err());
    assert!(store.get_blob("o", &BlobId::of(&attachment)).is_err());
    assert!(store.get_blob("o", &BlobId::of(big.as_bytes())).is_err());
    let o = store.chat("o", other).unwrap();
    let Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } = &o.get(2).unwrap().parts[0]
    else {
        panic!("the shared result is archived")
    };
    let back = store.read_context("o", &archive.id, 0..13, Unit::Chars).unwrap();
    assert_eq!(back, "SHARED-RESULT");
    assert!(store.search("o", "ARCHIVE-SECRET", SearchScope::all(), 5).unwrap().is_empty());
    assert_eq!(store.search("o", "KEPT-TEXT", SearchScope::all(), 5).unwrap().len(), 1);
    drop((c, o, store));
    let again = Store::gc(dir.path(), opts()).unwrap();
    assert_eq!(again.erased_versions, 0, "a collection after that erases nothing more");
    assert_eq!(again.records_after, again.records_before);
}

#[test]
fn gc_drops_the_checkpoint_and_summaries_built_over_an_erased_message() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let store = Store::open(dir.path(), opts()).unwrap();
        let c = chat(&store, "o");
        c.append(NewMessage::user("start")).unwrap();
        for i in 0..20 {
            let secret = if i == 4 { " SUMMARY-SECRET" } else { "" };
            c.append(NewMessage::assistant(format!("step {i}: the agent noted section {i}{secret}")))
                .unwrap();
        }
        c.append(NewMessage::user("two")).unwrap();
        c.append(NewMessage::user("three")).unwrap();
        let opts = CheckpointOptions { segment_tokens: 5, fan_in: 4, ..CheckpointOptions::default() };
        let cp = c.build_checkpoint(&Extractive::default(), &opts).unwrap();
        assert!(cp.summary.contains("SUMMARY-SECRET"));
        c.publish_checkpoint(&cp).unwrap();
        let rev = c.revision();
        c.erase(&[5..6], rev).unwrap();
        assert!(!view_text(&c).contains("SUMMARY-SECRET"));
        c.id()
    };
    assert!(in_files(dir.path(), b"SUMMARY-SECRET"));
    Store::gc(dir.path(), opts()).unwrap();
    assert!(!in_files(dir.path(), b"SUMMARY-SECRET"), "a summary or the message survived gc");
    let store = Store::open(dir.path(), opts()).unwrap();
    assert!(store.check().unwrap().is_ok());
    let c = store.chat("o", id).unwrap();
    assert_eq!(c.published_checkpoint(), None, "the checkpoint over the erased message is gone");
    let cp = c
        .build_checkpoint(
            &Extractive::default(),
            &CheckpointOptions { segment_tokens: 5, ..Default::default() },
        )
        .unwrap();
    assert!(!cp.summary.contains("SUMMARY-SECRET") && cp.summary.contains("section 3"));
}

#[test]
fn a_message_appended_at_an_erased_seq_after_a_truncation_is_not_erased() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let store = Store::open(dir.path(), opts()).unwrap();
        let c = chat(&store, "o");
        c.append_batch(vec![NewMessage::user("a"), NewMessage::user("OLD-SECRET b")]).unwrap();
        let rev = c.erase(&[1..2], 0).unwrap();
        let rev = c.truncate(1, rev).unwrap();
        assert_eq!(c.append(NewMessage::user("NEW-TEXT b")).unwrap(), 1);
        assert!(c.get(1).is_ok() && !c.snapshot().is_erased(1));
        assert!(c.snapshot_at(rev - 1).unwrap().get(1).is_err(), "the erased version stays erased");
        c.id()
    };
    Store::gc(dir.path(), opts()).unwrap();
    assert!(!in_files(dir.path(), b"OLD-SECRET") && in_files(dir.path(), b"NEW-TEXT"));
    let store = Store::open(dir.path(), opts()).unwrap();
    let c = store.chat("o", id).unwrap();
    assert!(format!("{:?}", c.get(1).unwrap().parts).contains("NEW-TEXT"));
}

#[test]
fn an_erasure_keeps_the_pairing_rule_and_the_revision_guard() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let c = chat(&store, "o");
    c.append_batch(vec![NewMessage::user("go"), call("c1", "{}"), NewMessage::tool_result("c1", "out")])
        .unwrap();
    assert!(matches!(c.erase(&[2..3], 0), Err(Error::InvalidArgument(_))), "a result without its call");
    assert!(matches!(c.erase(&[1..3], 7), Err(Error::StaleRevision { .. })));
    assert!(matches!(c.erase(&[1..9], 0), Err(Error::InvalidArgument(_))));
    c.erase(&[1..3], 0).unwrap();
    // Another owner cannot reach the chat to erase it.
    assert!(matches!(store.chat("mallory", c.id()), Err(Error::NotFound { .. })));
}

#[test]
fn a_checkpoint_built_after_the_erasure_stays_published_through_gc() {
    let dir = tempfile::tempdir().unwrap();
    let opts_cp = CheckpointOptions { segment_tokens: 5, fan_in: 4, ..CheckpointOptions::default() };
    let (id, published) = {
        let store = Store::open(dir.path(), opts()).unwrap();
        let c = chat(&store, "o");
        c.append(NewMessage::user("start")).unwrap();
        for i in 0..20 {
            let secret = if i == 4 { " LATER-SECRET" } else { "" };
            c.append(NewMessage::assistant(format!("step {i}: noted section {i}{secret}"))).unwrap();
        }
        c.append(NewMessage::user("two")).unwrap();
        c.append(NewMessage::user("three")).unwrap();
        let rev = c.revision();
        c.erase(&[5..6], rev).unwrap();
        let cp = c.build_checkpoint(&Extractive::default(), &opts_cp).unwrap();
        assert!(!cp.summary.contains("LATER-SECRET"));
        c.publish_checkpoint(&cp).unwrap();
        (c.id(), c.published_checkpoint())
    };
    assert!(published.is_some());
    Store::gc(dir.path(), opts()).unwrap();
    assert!(!in_files(dir.path(), b"LATER-SECRET"));
    let store = Store::open(dir.path(), opts()).unwrap();
    assert_eq!(
        store.chat("o", id).unwrap().published_checkpoint(),
        published,
        "built after: it read no erased text"
    );
}
