//! Claims of the history layer, one test each: dense seqs and turns, atomic batches,
//! revisions with readable history, steps and attempts, metadata versions, listing,
//! ownership, and everything surviving a reopen.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext::{ChatMeta, Error, NewMessage, Options, Page, Part, Role, StepStatus, Store, ToolContent};

fn open(dir: &std::path::Path) -> Store {
    Store::open(dir, Options::default()).unwrap()
}

#[test]
fn seqs_are_dense_and_turns_count_user_messages() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    assert_eq!(chat.append(NewMessage::system("sys")).unwrap(), 0);
    assert_eq!(chat.append(NewMessage::user("q1")).unwrap(), 1);
    let call = NewMessage {
        role: Role::Assistant,
        parts: vec![Part::ToolCall { id: "c1".into(), name: "read".into(), args: r#"{"path":"x"}"#.into() }],
        feedback: false,
    };
    let r = chat.append_batch(vec![call, NewMessage::tool_result("c1", "contents")]).unwrap();
    assert_eq!(r, 2..4);
    // A user message carrying only a tool result does not start a turn (Anthropic shape).
    let carrier = NewMessage {
        role: Role::User,
        parts: vec![Part::ToolResult {
            call_id: "c1".into(),
            content: ToolContent::Text("x".into()),
            is_error: false,
        }],
        feedback: false,
    };
    chat.append(carrier).unwrap();
    chat.append(NewMessage::user("q2")).unwrap();
    let turns: Vec<u64> = chat.messages().unwrap().iter().map(|m| m.turn).collect();
    assert_eq!(turns, vec![0, 1, 1, 1, 1, 2]);
    assert_eq!(chat.revision(), 0, "appends never change the revision");
    let bad = NewMessage {
        role: Role::Assistant,
        parts: vec![Part::ToolCall { id: "c".into(), name: "n".into(), args: "{not json".into() }],
        feedback: false,
    };
    let err = chat.append(bad).unwrap_err();
    assert!(err.to_string().contains("must be JSON"), "{err}");
    assert_eq!(chat.len(), 6, "a refused append adds nothing");
}

#[test]
fn edits_and_truncation_bump_the_revision_and_keep_old_revisions_readable() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    for i in 0..5 {
        chat.append(NewMessage::assistant(format!("m{i}"))).unwrap();
    }
    let r1 = chat.edit(2, NewMessage::assistant("m2 edited"), 0).unwrap();
    assert_eq!(r1, 1);
    match chat.edit(2, NewMessage::assistant("x"), 0) {
        Err(Error::StaleRevision { expected: 0, found: 1 }) => {}
        other => panic!("expected StaleRevision, got {other:?}"),
    }
    let r2 = chat.truncate(3, r1).unwrap();
    assert_eq!(r2, 2);
    chat.append(NewMessage::assistant("m3 again")).unwrap();
    let text = |m: &undertext::Message| match &m.parts[0] {
        Part::Text(t) => t.clone(),
        p => panic!("{p:?}"),
    };
    let now: Vec<String> = chat.messages().unwrap().iter().map(text).collect();
    assert_eq!(now, vec!["m0", "m1", "m2 edited", "m3 again"]);
    let at0: Vec<String> = chat.snapshot_at(0).unwrap().messages().unwrap().iter().map(text).collect();
    assert_eq!(at0, vec!["m0", "m1", "m2", "m3", "m4"]);
    let at1: Vec<String> = chat.snapshot_at(1).unwrap().messages().unwrap().iter().map(text).collect();
    assert_eq!(at1, vec!["m0", "m1", "m2 edited", "m3", "m4"]);
    assert!(chat.snapshot_at(9).is_err());
    drop(chat);
    drop(store);
    let store = open(dir.path());
    let chat = store.chat("o", undertext::ChatId(1)).unwrap();
    assert_eq!(chat.revision(), 2);
    let now2: Vec<String> = chat.messages().unwrap().iter().map(text).collect();
    assert_eq!(now2, now);
    let at0b: Vec<String> = chat.snapshot_at(0).unwrap().messages().unwrap().iter().map(text).collect();
    assert_eq!(at0b, at0);
}

#[test]
fn steps_of_every_attempt_come_back_in_order_with_their_status() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let id = store.create_chat("o", ChatMeta::default()).unwrap();
    let chat = store.chat("o", id).unwrap();
    chat.append(NewMessage::user("do it")).unwrap();
    chat.record_step(1, "s1", 0, StepStatus::Complete, vec![NewMessage::assistant("a0")]).unwrap();
    chat.record_step(1, "s1", 1, StepStatus::Interrupted, vec![NewMessage::assistant("a1 cut")]).unwrap();
    chat.record_step(1, "s2", 0, StepStatus::Complete, vec![NewMessage::assistant("b0")]).unwrap();
    let err = chat.record_step(5, "s3", 0, StepStatus::Complete, vec![]).unwrap_err();
    assert!(err.to_string().contains("current user turn 1"), "{err}");
    drop(chat);
    drop(store);
    let store = open(dir.path());
    let chat = store.chat("o", id).unwrap();
    let attempts = chat.attempts(1).unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].stream_id, "s1");
    assert_eq!(
        attempts[0].steps.iter().map(|s| (s.step, s.status)).collect::<Vec<_>>(),
        vec![(0, StepStatus::Complete), (1, StepStatus::Interrupted)]
    );
    assert_eq!(attempts[1].stream_id, "s2");
    assert_eq!(attempts[1].steps[0].messages[0].parts, vec![Part::Text("b0".into())]);
    assert_eq!(attempts[1].steps[0].messages[0].step.as_ref().unwrap().stream_id, "s2");
    assert!(chat.attempts(2).unwrap().is_empty());
}

#[test]
fn wrong_owner_is_not_found_on_every_read_path_and_listing_is_per_owner() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let a = store.create_chat("alice", ChatMeta { title: "a".into(), ..Default::default() }).unwrap();
    let b = store.create_chat("bob", ChatMeta { title: "b".into(), ..Default::default() }).unwrap();
    let absent = undertext::ChatId(999);
    let e1 = store.chat("bob", a).unwrap_err().to_string();
    let e2 = store.chat("bob", absent).unwrap_err().to_string();
    assert_eq!(e1.replace(&a.to_string(), "X"), e2.replace(&absent.to_string(), "X"), "same text");
    let alice = store.chats("alice", Page::default()).unwrap();
    assert_eq!(alice.chats.iter().map(|c| c.id).collect::<Vec<_>>(), vec![a]);
    let bob = store.chats("bob", Page::default()).unwrap();
    assert_eq!(bob.chats.iter().map(|c| c.id).collect::<Vec<_>>(), vec![b]);
}

#[test]
fn metadata_is_versioned_and_listing_is_newest_activity_first_across_pages() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let ids: Vec<_> = (0..7)
        .map(|i| store.create_chat("o", ChatMeta { title: format!("t{i}"), ..Default::default() }).unwrap())
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(3));
    store.chat("o", ids[2]).unwrap().append(NewMessage::user("bump")).unwrap();
    let chat = store.chat("o", ids[4]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(3));
    assert_eq!(chat.set_meta(ChatMeta { title: "renamed".into(), ..Default::default() }).unwrap(), 2);
    assert_eq!(chat.meta_at(1).unwrap().title, "t4");
    assert_eq!(chat.meta().title, "renamed");
    let mut seen = Vec::new();
    let mut page = Page { limit: 3, after: None };
    loop {
        let p = store.chats("o", page.clone()).unwrap();
        seen.extend(p.chats.iter().map(|c| c.id));
        match p.next {
            Some(c) => page.after = Some(c),
            None => break,
        }
    }
    assert_eq!(seen.len(), 7, "{seen:?}");
    assert_eq!(&seen[..2], &[ids[4], ids[2]]);
}

#[test]
fn messages_and_metadata_written_together_are_one_batch_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let store = open(dir.path());
        let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
        let before = store.check().unwrap().batches;
        let meta = ChatMeta { title: "two entries".into(), ..chat.meta() };
        let seqs =
            chat.append_batch_with_meta(vec![NewMessage::user("a"), NewMessage::user("b")], meta).unwrap();
        assert_eq!(seqs, 0..2);
        assert_eq!(store.check().unwrap().batches, before + 1, "one transaction: one batch, one sync");
        assert_eq!((chat.meta().title.as_str(), chat.snapshot().meta_version()), ("two entries", 2));
        chat.id()
    };
    let store = open(dir.path());
    let chat = store.chat("o", id).unwrap();
    assert_eq!(
        (chat.len(), chat.meta().title.as_str(), chat.snapshot().meta_version()),
        (2, "two entries", 2)
    );
    assert!(store.check().unwrap().is_ok());
}
