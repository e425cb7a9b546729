//! Claims of soft deletion (`Chat::hide`): hidden messages leave the model view, the default
//! reads and checkpoints, but their records stay (read by seq, and with `*_with_hidden`);
//! a hide is a revision-guarded edit that a stale checkpoint cannot race; a tool call and its
//! result go together; the hidden set survives reopen, an index rebuild, `check`, `gc` and a
//! read-only open; a truncation below a hidden message forgets it; owners stay walled off.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]
#![allow(clippy::single_range_in_vec_init, reason = "a list of hidden ranges may hold one range")]

use undertext::Budget;
use undertext::Conflict;
use undertext::{Chat, ChatMeta, Error, NewMessage, Options, Part, Role, Store, ToolContent, Unit};
use undertext::{CheckpointOptions, Extractive};

fn chat(store: &Store) -> Chat {
    store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap()
}

fn seqs(c: &Chat) -> Vec<u64> {
    c.messages().unwrap().iter().map(|m| m.seq).collect()
}

fn view_seqs(c: &Chat) -> Vec<u64> {
    let v = c.view(&Budget::new(1_000_000, 0)).unwrap();
    v.messages().iter().flat_map(|m| m.seqs.clone()).collect()
}

fn view_text(c: &Chat) -> String {
    let v = c.view(&Budget::new(1_000_000, 0)).unwrap();
    format!("{:?}", v.messages().iter().map(|m| &m.parts).collect::<Vec<_>>())
}

/// user, assistant, user, assistant, user.
fn five(c: &Chat) {
    c.append_batch(vec![
        NewMessage::user("first question"),
        NewMessage::assistant("a wrong answer SECRET-1"),
        NewMessage::user("second question"),
        NewMessage::assistant("a right answer"),
        NewMessage::user("thanks"),
    ])
    .unwrap();
}

#[test]
fn hidden_messages_leave_the_view_and_default_reads_but_stay_readable_by_seq() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = chat(&store);
    five(&c);
    let rev = c.hide(&[1..2], 0).unwrap();
    assert_eq!(rev, 1);
    assert_eq!(c.revision(), 1);
    assert_eq!(c.len(), 5, "the length (the next seq) does not change");
    assert_eq!(seqs(&c), vec![0, 2, 3, 4]);
    let snap = c.snapshot();
    assert!(snap.is_hidden(1) && !snap.is_hidden(0));
    assert_eq!(snap.hidden(), vec![1..2]);
    assert_eq!(snap.live_len(), 4);
    assert_eq!(snap.range(0..3).unwrap().iter().map(|m| m.seq).collect::<Vec<_>>(), vec![0, 2]);
    assert_eq!(snap.iter().count(), 4);
    assert_eq!(snap.messages_with_hidden().unwrap().len(), 5);
    // The bytes stay: the message is read by its seq.
    assert_eq!(c.get(1).unwrap().parts, vec![Part::Text("a wrong answer SECRET-1".into())]);
    assert_eq!(view_seqs(&c), vec![0, 2, 3, 4]);
    assert!(!view_text(&c).contains("SECRET-1"));
    assert!(!c.index().unwrap().iter().any(|l| l.seq == 1), "the compaction index lists live messages only");
    // The revision before the hide shows it.
    assert!(!c.snapshot_at(0).unwrap().is_hidden(1));
    assert_eq!(c.snapshot_at(0).unwrap().messages().unwrap().len(), 5);
}

#[test]
fn a_hide_is_guarded_by_revision_and_bad_ranges_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = chat(&store);
    five(&c);
    c.edit(3, NewMessage::assistant("better"), 0).unwrap();
    match c.hide(&[1..2], 0) {
        Err(Error::StaleRevision { expected: 0, found: 1 }) => {}
        other => panic!("expected StaleRevision, got {other:?}"),
    }
    let bad = |ranges: &[std::ops::Range<u64>], needle: &str| match c.hide(ranges, 1) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(needle), "{m}"),
        other => panic!("expected InvalidArgument with {needle:?}, got {other:?}"),
    };
    bad(&[], "at least one range");
    #[allow(clippy::reversed_empty_ranges, reason = "the reversed range is the case under test")]
    bad(&[3..2], "non-empty");
    bad(&[2..2], "non-empty");
    bad(&[4..6], "the chat has 5 messages");
    assert_eq!(c.revision(), 1, "a refused hide writes nothing");
    assert!(c.snapshot().hidden().is_empty());
    // Hiding twice is fine; appends after a hide carry on.
    c.hide(&[1..2], 1).unwrap();
    c.hide(&[0..2], 2).unwrap();
    assert_eq!(c.snapshot().hidden(), vec![0..2]);
    assert_eq!(c.append(NewMessage::assistant("more")).unwrap(), 5);
    assert_eq!(seqs(&c), vec![2, 3, 4, 5]);
}

#[test]
fn a_tool_call_and_its_result_are_hidden_together_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = chat(&store);
    c.append_batch(vec![
        NewMessage::user("list the files"),
        NewMessage {
            role: Role::Assistant,
            parts: vec![
                Part::ToolCall { id: "c1".into(), name: "ls".into(), args: "{}".into() },
                Part::ToolCall { id: "c2".into(), name: "pwd".into(), args: "{}".into() },
            ],
            feedback: false,
        },
        NewMessage::tool_result("c1", "a.txt b.txt"),
        NewMessage::tool_result("c2", "/home"),
        NewMessage::assistant("two files"),
    ])
    .unwrap();
    for (ranges, needle) in [
        (vec![1..2], "result is message 2"),
        (vec![2..3], "call is message 1"),
        (vec![1..3], "result is message 3"),
        (vec![3..4], "call is message 1"),
    ] {
        match c.hide(&ranges, 0) {
            Err(Error::InvalidArgument(m)) => {
                assert!(m.contains(needle) && m.contains("hide both"), "{ranges:?}: {m}")
            }
            other => panic!("{ranges:?}: expected InvalidArgument, got {other:?}"),
        }
    }
    assert_eq!(c.revision(), 0);
    // The whole step, in one range or two.
    c.hide(&[1..2, 2..4], 0).unwrap();
    assert_eq!(seqs(&c), vec![0, 4]);
    assert_eq!(view_seqs(&c), vec![0, 4]);
}

#[test]
fn the_hidden_set_survives_reopen_rebuild_check_gc_and_read_only_opens() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let store = Store::open(dir.path(), Options::default()).unwrap();
        let c = chat(&store);
        five(&c);
        c.hide(&[1..2], 0).unwrap();
        c.append(NewMessage::assistant("after")).unwrap();
        c.hide(&[3..4], 1).unwrap();
        c.id()
    };
    let expect = |store: &Store, what: &str| {
        let c = store.chat("o", id).unwrap();
        assert_eq!(c.snapshot().hidden(), vec![1..2, 3..4], "{what}");
        assert_eq!(seqs(&c), vec![0, 2, 4, 5], "{what}");
        assert_eq!(c.revision(), 2, "{what}");
        // Each older revision shows what was hidden then.
        assert_eq!(c.snapshot_at(1).unwrap().hidden(), vec![1..2], "{what}");
        assert!(c.snapshot_at(0).unwrap().hidden().is_empty(), "{what}");
    };
    {
        let store = Store::open(dir.path(), Options::default()).unwrap();
        expect(&store, "reopen");
        let report = store.check().unwrap();
        assert!(report.is_ok(), "{report:?}");
        store.rebuild_index().unwrap();
        expect(&store, "rebuilt in place");
    }
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    {
        let store = Store::open(dir.path(), Options::default()).unwrap();
        expect(&store, "index rebuilt from the log");
    }
    let report = Store::gc(dir.path(), Options::default()).unwrap();
    assert!(report.records_after > 0);
    {
        let ro = Store::open_read_only(dir.path()).unwrap();
        expect(&ro, "read-only after gc");
    }
    let store = Store::open(dir.path(), Options::default()).unwrap();
    expect(&store, "reopen after gc");
}

#[test]
fn a_read_only_open_sees_a_hide_the_writer_made_after_it_opened() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = chat(&store);
    five(&c);
    let ro = Store::open_read_only(dir.path()).unwrap();
    c.hide(&[2..4], 0).unwrap();
    ro.refresh().unwrap();
    let r = ro.chat("o", c.id()).unwrap();
    assert_eq!(r.snapshot().hidden(), vec![2..4]);
    assert_eq!(seqs(&r), vec![0, 1, 4]);
}

#[test]
fn checkpoints_never_hold_hidden_messages_and_a_hide_refuses_a_stale_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = chat(&store);
    c.append(NewMessage::user("start")).unwrap();
    for i in 0..20 {
        let secret = if i == 4 { " SECRET-4" } else { "" };
        c.append(NewMessage::assistant(format!("step {i}: the agent noted section {i}{secret}"))).unwrap();
    }
    c.append(NewMessage::user("two")).unwrap();
    c.append(NewMessage::user("three")).unwrap();
    let s = Extractive::default();
    let opts = CheckpointOptions { segment_tokens: 5, fan_in: 4, ..CheckpointOptions::default() };
    let before = c.build_checkpoint(&s, &opts).unwrap();
    assert!(before.summary.contains("SECRET-4"), "the test's secret is summarized when visible");
    c.hide(&[5..6], 0).unwrap();
    match c.publish_checkpoint(&before) {
        Err(Error::Conflict(Conflict::Edited { base: 0, now: 1 })) => {}
        other => panic!("expected Edited, got {other:?}"),
    }
    let cp = c.build_checkpoint(&s, &opts).unwrap();
    assert!(!cp.summary.contains("SECRET-4"), "{}", cp.summary);
    assert_eq!(cp.segments.first().unwrap().range.start, 0);
    for w in cp.segments.windows(2) {
        assert_eq!(w[0].range.end, w[1].range.start, "segments tile 0..reach");
    }
    assert_eq!(cp.segments.last().unwrap().range.end, cp.reach);
    c.publish_checkpoint(&cp).unwrap();
    let v = c.view(&Budget::new(1_000_000, 0)).unwrap();
    // The task (the first user turn's message) stays in front, verbatim; then the summary.
    let summary = v.messages().iter().find(|m| m.seqs.end > m.seqs.start + 1).unwrap();
    assert_eq!(summary.seqs, 0..cp.reach);
    assert!(!view_text(&c).contains("SECRET-4"));
    // Hiding a message the published checkpoint covers: it no longer stands in the view (as
    // after an edit or a truncation below its reach), and the view holds the live messages.
    c.hide(&[3..4], 1).unwrap();
    let shown = view_seqs(&c);
    assert_eq!(shown.first(), Some(&0));
    assert!(!shown.contains(&3) && !shown.contains(&5), "{shown:?}");
    assert!(!view_text(&c).contains("SECRET-4"));
    // It stays so after a reopen (the index loads the hidden set and the checkpoint).
    let id = c.id();
    drop(c);
    drop(store);
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = store.chat("o", id).unwrap();
    assert_eq!(view_seqs(&c), shown);
}

#[test]
fn a_truncation_below_a_hidden_message_forgets_it_and_reopen_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = chat(&store);
    five(&c);
    c.hide(&[1..2, 3..4], 0).unwrap();
    c.truncate(3, 1).unwrap();
    assert_eq!(c.snapshot().hidden(), vec![1..2]);
    c.append_batch(vec![NewMessage::assistant("new three"), NewMessage::user("new four")]).unwrap();
    assert_eq!(seqs(&c), vec![0, 2, 3, 4]);
    let id = c.id();
    drop(c);
    drop(store);
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = store.chat("o", id).unwrap();
    assert_eq!(c.snapshot().hidden(), vec![1..2]);
    assert_eq!(seqs(&c), vec![0, 2, 3, 4]);
    assert_eq!(c.snapshot_at(1).unwrap().hidden(), vec![1..2, 3..4]);
}

#[test]
fn hide_and_append_is_one_revision_and_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = chat(&store);
    five(&c);
    let (rev, new) = c.hide_and_append(&[3..5], vec![NewMessage::assistant("a shorter answer")], 0).unwrap();
    assert_eq!((rev, new.clone()), (1, 5..6));
    assert_eq!(c.get(5).unwrap().revision, 1);
    assert_eq!(seqs(&c), vec![0, 1, 2, 5]);
    // A stale one writes neither part.
    assert!(matches!(
        c.hide_and_append(&[0..1], vec![NewMessage::user("x")], 0),
        Err(Error::StaleRevision { .. })
    ));
    assert_eq!(c.len(), 6);
    let id = c.id();
    drop(c);
    drop(store);
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = store.chat("o", id).unwrap();
    assert_eq!(seqs(&c), vec![0, 1, 2, 5]);
}

#[test]
fn owners_stay_walled_off_and_a_hidden_messages_archive_stays_its_owners() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default().archive_threshold(64)).unwrap();
    let c = chat(&store);
    let long = "line of tool output\n".repeat(50);
    c.append_batch(vec![
        NewMessage::user("run it"),
        NewMessage {
            role: Role::Assistant,
            parts: vec![Part::ToolCall { id: "c1".into(), name: "run".into(), args: "{}".into() }],
            feedback: false,
        },
        NewMessage::tool_result("c1", long.clone()),
        NewMessage::user("ok"),
    ])
    .unwrap();
    let Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } = &c.get(2).unwrap().parts[0]
    else {
        panic!("expected an archived result")
    };
    // Another owner cannot reach the chat to hide anything in it.
    assert!(matches!(store.chat("other", c.id()), Err(Error::NotFound { .. })));
    c.hide(&[1..3], 0).unwrap();
    // The archive stays readable by its owner, and only by it.
    let page = store.read_context("o", &archive.id, 0..19, Unit::Chars).unwrap();
    assert_eq!(page, &long[..19]);
    assert!(matches!(
        store.read_context("other", &archive.id, 0..19, Unit::Chars),
        Err(Error::NotFound { .. })
    ));
    assert_eq!(view_seqs(&c), vec![0, 3]);
}
