//! What a read-only store's `refresh()` brings in, chat by chat: a chat the writer only
//! appended to is extended in memory with the new messages (not loaded again), every other
//! change (edit, truncation, hide, metadata, checkpoint, pin, usage, deletion) is picked up
//! whole; after every refresh a chat reads on the reader exactly as on the writer. A `gc`
//! between refreshes still gives `Error::ReadOnly` (open again).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]
#![allow(clippy::single_range_in_vec_init, reason = "hide takes a list of ranges; a list of one is meant")]

use undertext::Budget;
use undertext::{Chat, ChatId, ChatMeta, Error, NewMessage, Part, Role, StepStatus, Store};
use undertext::{CheckpointOptions, Extractive};
use undertext_tests::read_only::{
    collect_after_deleting, message_text, small, writer_then_reader, writer_with_two_chats,
};

/// Everything a reader of `chat` can see, as plain values: revision, length, metadata,
/// every message (hidden ones too) with its hidden flag, the published checkpoint, the
/// model view's messages and the attempts of every turn.
fn seen(chat: &Chat) -> String {
    let snap = chat.snapshot();
    let messages: Vec<String> = snap
        .messages_with_hidden()
        .unwrap()
        .iter()
        .map(|m| {
            format!(
                "{} r{} t{} {:?} {:?} hidden={}",
                m.seq,
                m.revision,
                m.turn,
                m.role,
                m.parts,
                snap.is_hidden(m.seq)
            )
        })
        .collect();
    let view = chat.view(&Budget::new(1 << 30, 0)).unwrap();
    let turns = messages.len() as u64 + 1;
    let attempts: Vec<String> = (0..turns).map(|t| format!("{:?}", chat.attempts(t).unwrap())).collect();
    format!(
        "revision {} len {} meta {:?} checkpoint {:?}\n{}\nview {:?} calibration {}\nattempts {:?}",
        chat.revision(),
        chat.len(),
        chat.meta(),
        chat.published_checkpoint(),
        messages.join("\n"),
        view.messages(),
        view.calibration(),
        attempts
    )
}

/// Refreshes `ro` and checks that chat `id` reads there as `writer` shows it, opened again
/// after the refresh; returns how many chats the reader holds in memory after the refresh.
fn refresh_and_compare(ro: &Store, writer: &Chat, id: ChatId, what: &str) -> u64 {
    let r = ro.refresh().unwrap();
    assert!(r.warnings.is_empty(), "{what}: {:?}", r.warnings);
    let in_memory = ro.stats().unwrap().chats_in_memory;
    let got = ro.chat("o", id).unwrap();
    assert_eq!(seen(&got), seen(writer), "{what}: the reader's chat after a refresh");
    in_memory
}

#[test]
fn appends_after_a_refresh_extend_the_chat_in_memory_and_read_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), small()).unwrap();
    let ids: Vec<ChatId> = (0..3).map(|_| writer.create_chat("o", ChatMeta::default()).unwrap()).collect();
    let chats: Vec<Chat> = ids.iter().map(|id| writer.chat("o", *id).unwrap()).collect();
    chats[0].append(NewMessage::user(message_text(0))).unwrap();
    let ro = Store::open_read_only(dir.path()).unwrap();
    let early = ro.chat("o", ids[0]).unwrap();
    for id in &ids {
        ro.chat("o", *id).unwrap();
    }
    assert_eq!(ro.stats().unwrap().chats_in_memory, 3);
    let mut k = 1;
    // Rounds of appends (single, batches, a recorded step; across several segments), each
    // followed by one refresh.
    for round in 0..12u64 {
        for (c, chat) in chats.iter().enumerate() {
            if (round + c as u64).is_multiple_of(3) {
                continue;
            }
            match round % 4 {
                0 => {
                    chat.append(NewMessage::user(message_text(k))).unwrap();
                }
                1 => {
                    chat.append_batch((0..3).map(|i| NewMessage::assistant(message_text(k + i))).collect())
                        .unwrap();
                }
                2 => {
                    chat.append(NewMessage::user(format!("task {round}"))).unwrap();
                    let turn = chat.snapshot().messages().unwrap().last().unwrap().turn;
                    let msgs = vec![NewMessage::assistant(message_text(k))];
                    chat.record_step(turn, &format!("s{round}"), 0, StepStatus::Complete, msgs).unwrap();
                }
                _ => {
                    chat.append(NewMessage::tool_result("none", message_text(k))).unwrap();
                }
            }
            k += 3;
        }
        let before = ro.stats().unwrap().chats_in_memory;
        for (c, chat) in chats.iter().enumerate() {
            let in_memory = refresh_and_compare(&ro, chat, ids[c], &format!("round {round}, chat {c}"));
            assert_eq!(in_memory, before, "round {round}: appends keep every chat in memory (extended)");
        }
    }
    assert!(
        std::fs::read_dir(dir.path().join("log")).unwrap().count() > 3,
        "the appends crossed several segments"
    );
    // A handle opened before the refreshes keeps what it held.
    assert_eq!(early.len(), 1);
    assert_eq!(early.messages().unwrap().len(), 1);
}

#[test]
fn edits_truncations_hides_metadata_checkpoints_pins_and_usage_are_picked_up_by_a_refresh() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), small()).unwrap();
    let id = writer.create_chat("o", ChatMeta::default()).unwrap();
    let other = writer.create_chat("o", ChatMeta::default()).unwrap();
    let chat = writer.chat("o", id).unwrap();
    let long = |i: u64| message_text(i).repeat(4);
    for i in 0..6 {
        chat.append(NewMessage::user(format!("task {i}"))).unwrap();
        chat.append(NewMessage::assistant(long(i))).unwrap();
    }
    let ro = Store::open_read_only(dir.path()).unwrap();
    ro.chat("o", other).unwrap();
    refresh_and_compare(&ro, &chat, id, "at open");
    let check = |what: &str| refresh_and_compare(&ro, &chat, id, what);

    chat.edit(3, NewMessage::assistant("edited"), chat.revision()).unwrap();
    check("an edit");
    // An edit and appends in the same refresh.
    chat.append(NewMessage::user("after the edit")).unwrap();
    chat.edit(1, NewMessage::assistant("edited again"), chat.revision()).unwrap();
    chat.append(NewMessage::assistant(long(20))).unwrap();
    check("appends around an edit");
    chat.truncate(9, chat.revision()).unwrap();
    check("a truncation");
    // Appends at the new revision, over seqs the truncation dropped (older versions of
    // those seqs are in the index).
    chat.append(NewMessage::user("task after the truncation")).unwrap();
    chat.append(NewMessage::assistant(long(30))).unwrap();
    check("appends after a truncation");
    chat.hide(&[2..3], chat.revision()).unwrap();
    check("a hide");
    chat.hide_and_append(&[4..5], vec![NewMessage::assistant(long(40))], chat.revision()).unwrap();
    check("a hide and an append in one transaction");
    chat.set_meta(ChatMeta { title: "renamed".into(), ..ChatMeta::default() }).unwrap();
    check("metadata");
    chat.append(NewMessage::user("task before the checkpoint")).unwrap();
    let cp = chat.build_checkpoint(&Extractive::default(), &CheckpointOptions::default()).unwrap();
    chat.publish_checkpoint(&cp).unwrap();
    assert!(chat.published_checkpoint().is_some());
    check("a published checkpoint");
    let archive = writer.archive("o", &"line\n".repeat(50)).unwrap();
    chat.pin(&archive.id, 0..2, undertext::Unit::Lines).unwrap();
    check("a pin");
    chat.append(NewMessage::assistant(long(50))).unwrap();
    let step = chat.view(&Budget::new(1 << 30, 0)).unwrap().step();
    chat.report_usage(step, 12_345).unwrap();
    check("usage and an append");
    // Nothing new: the chats stay as they were.
    let in_memory = check("nothing new");
    assert_eq!(in_memory, 2);
    writer.chat("o", other).unwrap().append(NewMessage::user("elsewhere")).unwrap();
    check("another chat appended to");
    writer.delete_chat("o", id).unwrap();
    ro.refresh().unwrap();
    assert!(
        matches!(ro.chat("o", id), Err(Error::NotFound { .. })),
        "a deleted chat is gone after a refresh"
    );
    let got: Vec<Vec<Part>> =
        ro.chat("o", other).unwrap().messages().unwrap().into_iter().map(|m| m.parts).collect();
    assert_eq!(got, vec![vec![Part::Text("elsewhere".into())]]);
    assert_eq!(ro.chat("o", other).unwrap().messages().unwrap()[0].role, Role::User);
}

#[test]
fn a_gc_between_refreshes_of_an_extended_chat_gives_read_only_and_keeps_what_was_read() {
    let dir = tempfile::tempdir().unwrap();
    let (writer, id, gone, chat) = writer_with_two_chats(dir.path());
    for i in 0..20 {
        chat.append(NewMessage::user(message_text(i))).unwrap();
        writer.chat("o", gone).unwrap().append(NewMessage::user(message_text(100 + i))).unwrap();
    }
    let ro = Store::open_read_only(dir.path()).unwrap();
    let held = ro.chat("o", id).unwrap();
    for i in 20..40 {
        chat.append(NewMessage::user(message_text(i))).unwrap();
    }
    refresh_and_compare(&ro, &chat, id, "before the gc");
    let _writer = collect_after_deleting(dir.path(), writer, chat, gone, id, 40);
    match ro.refresh() {
        Err(Error::ReadOnly(m)) => assert!(m.contains("open the store again"), "{m}"),
        other => panic!("expected Error::ReadOnly after a gc, found {other:?}"),
    }
    let now = ro.chat("o", id).unwrap();
    assert_eq!(now.len(), 40, "what the reader had read stays readable");
    assert_eq!(texts(&now), (0..40).map(message_text).collect::<Vec<_>>());
    assert_eq!(held.len(), 20);
    let again = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(again.chat("o", id).unwrap().len(), 41);
}

/// The texts of `chat`'s messages, each a single text part.
fn texts(chat: &Chat) -> Vec<String> {
    chat.messages()
        .unwrap()
        .iter()
        .map(|m| match &m.parts[..] {
            [Part::Text(t)] => t.clone(),
            other => panic!("expected one text part, found {other:?}"),
        })
        .collect()
}

/// An assistant message calling tool `name` (call `id`).
fn tool_call(id: &str, name: &str) -> NewMessage {
    NewMessage {
        role: Role::Assistant,
        parts: vec![Part::ToolCall { id: id.into(), name: name.into(), args: "{\"path\":\"a\"}".into() }],
        feedback: false,
    }
}

/// Every message of `chat`, hidden ones too, as plain values.
fn all_messages(chat: &Chat) -> Vec<String> {
    chat.snapshot()
        .messages_with_hidden()
        .unwrap()
        .iter()
        .map(|m| {
            format!(
                "{} r{} t{} {:?} {:?} {:?} {}",
                m.seq, m.revision, m.turn, m.role, m.parts, m.step, m.at_ms
            )
        })
        .collect()
}

#[test]
fn messages_a_refresh_listed_read_the_same_as_a_fresh_open_reads_them_and_again_after() {
    let dir = tempfile::tempdir().unwrap();
    let (_writer, id, chat, ro) = writer_then_reader(dir.path());
    // Every kind of message a refresh lists: user and assistant texts (compressed compact
    // records), a tool call and its result, short ones stored as they are, a batch.
    for i in 1..30u64 {
        let m = match i % 5 {
            0 => NewMessage::user(message_text(i)),
            1 => NewMessage::assistant(message_text(i)),
            2 => tool_call(&format!("c{i}"), "read"),
            3 => NewMessage::tool_result(format!("c{}", i - 1), message_text(i)),
            _ => NewMessage::user(format!("short {i}")),
        };
        chat.append(m).unwrap();
    }
    chat.append_batch(vec![NewMessage::user(message_text(40)), NewMessage::assistant(message_text(41))])
        .unwrap();
    let r = ro.refresh().unwrap();
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    let held = ro.chat("o", id).unwrap();
    let first = all_messages(&held);
    assert_eq!(first, all_messages(&chat), "the reader's first read (taken as the refresh decoded them)");
    assert_eq!(all_messages(&held), first, "read again (decoded from the log)");
    let fresh = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(all_messages(&fresh.chat("o", id).unwrap()), first, "a fresh open");
}

#[test]
fn a_text_of_a_message_a_refresh_replayed_is_found_by_its_content_address() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), small()).unwrap();
    let id = writer.create_chat("o", ChatMeta::default()).unwrap();
    let other = writer.create_chat("p", ChatMeta::default()).unwrap();
    let gone = writer.create_chat("o", ChatMeta::default()).unwrap();
    let chat = writer.chat("o", id).unwrap();
    chat.append(NewMessage::user(message_text(0))).unwrap();
    let ro = Store::open_read_only(dir.path()).unwrap();
    let (task, result, said) = (message_text(1), message_text(2), message_text(3));
    chat.append(NewMessage::user(task.clone())).unwrap();
    chat.append(tool_call("c1", "read")).unwrap();
    chat.append(NewMessage::tool_result("c1", result.clone())).unwrap();
    chat.append(NewMessage::assistant(said.clone())).unwrap();
    writer.chat("p", other).unwrap().append(NewMessage::user(message_text(4))).unwrap();
    writer.chat("o", gone).unwrap().append(NewMessage::user(message_text(5))).unwrap();
    ro.refresh().unwrap();
    let read = |owner: &str, text: &str| {
        let n = text.chars().count() as u64;
        ro.read_context(owner, &undertext::BlobId::of(text.as_bytes()), 0..n, undertext::Unit::Chars)
    };
    // Found before any read of the chat (its texts are listed at the first lookup), and the
    // same as the writer finds.
    assert_eq!(read("o", &task).unwrap(), task, "a user's text");
    assert_eq!(read("o", &result).unwrap(), result, "an inline tool result");
    assert_eq!(
        read("o", &result).unwrap(),
        writer
            .read_context("o", &undertext::BlobId::of(result.as_bytes()), 0..1500, undertext::Unit::Chars)
            .unwrap()
    );
    // Not found where the writer's index does not find it either: an assistant's text (no
    // view previews it), another owner's text, a deleted chat's.
    for (owner, text, what) in
        [("o", &said, "an assistant's text"), ("o", &message_text(4), "another owner's")]
    {
        assert!(matches!(read(owner, text), Err(Error::NotFound { .. })), "{what}");
        let id = undertext::BlobId::of(text.as_bytes());
        assert!(matches!(
            writer.read_context(owner, &id, 0..1, undertext::Unit::Chars),
            Err(Error::NotFound { .. })
        ));
    }
    assert_eq!(read("o", &message_text(5)).unwrap(), message_text(5));
    writer.delete_chat("o", gone).unwrap();
    // Texts appended after the first lookup are listed at the next one.
    let later = message_text(6);
    chat.append(NewMessage::user(later.clone())).unwrap();
    ro.refresh().unwrap();
    assert!(matches!(read("o", &message_text(5)), Err(Error::NotFound { .. })), "a deleted chat's text");
    assert_eq!(read("o", &later).unwrap(), later);
    assert_eq!(read("o", &task).unwrap(), task);
}

#[test]
fn a_gc_after_a_refresh_whose_messages_were_not_read_yet_serves_them_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let (writer, id, gone, chat) = writer_with_two_chats(dir.path());
    chat.append(NewMessage::user(message_text(0))).unwrap();
    let ro = Store::open_read_only(dir.path()).unwrap();
    for i in 1..20 {
        chat.append(NewMessage::user(message_text(i))).unwrap();
        writer.chat("o", gone).unwrap().append(NewMessage::user(message_text(100 + i))).unwrap();
    }
    ro.refresh().unwrap();
    // The refresh decoded the 19 new messages; the writer deletes a chat and collects the
    // log (every segment rewritten, the messages at other places) before the reader reads.
    let _writer = collect_after_deleting(dir.path(), writer, chat, gone, id, 20);
    let now = ro.chat("o", id).unwrap();
    assert_eq!(texts(&now), (0..20).map(message_text).collect::<Vec<_>>(), "as written, once each");
    assert_eq!(texts(&now), (0..20).map(message_text).collect::<Vec<_>>(), "and again");
    match ro.refresh() {
        Err(Error::ReadOnly(m)) => assert!(m.contains("open the store again"), "{m}"),
        other => panic!("expected Error::ReadOnly after a gc, found {other:?}"),
    }
    let again = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(texts(&again.chat("o", id).unwrap()), (0..21).map(message_text).collect::<Vec<_>>());
}

#[test]
fn a_segment_lost_behind_later_ones_is_reported_by_the_refreshes_that_follow() {
    let dir = tempfile::tempdir().unwrap();
    let (_writer, id, chat, ro) = writer_then_reader(dir.path());
    // Refreshes that replay something: the next ones probe the segments after the tail's by
    // name instead of listing the log directory.
    for i in 1..4 {
        chat.append(NewMessage::user(message_text(i))).unwrap();
        assert!(ro.refresh().unwrap().batches > 0);
    }
    for i in 4..40 {
        chat.append(NewMessage::user(message_text(i))).unwrap();
    }
    let log = dir.path().join("log");
    let mut segs: Vec<u64> = std::fs::read_dir(&log)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.strip_suffix(".seg")?.parse().ok())
        .collect();
    segs.sort_unstable();
    assert!(segs.len() >= 8, "{segs:?}");
    let lost = segs[segs.len() - 3];
    std::fs::remove_file(log.join(format!("{lost:08}.seg"))).unwrap();
    let mut warnings = Vec::new();
    for _ in 0..3 {
        warnings.extend(ro.refresh().unwrap().warnings);
    }
    assert!(warnings.iter().any(|w| w.contains(&format!("log segment {lost} is missing"))), "{warnings:?}");
    assert!(warnings.iter().any(|w| w.contains("batches between are missing")), "{warnings:?}");
    // Read past the gap as a fresh open reads the same log: the chat's messages in the lost
    // segment are missing, in both the same way.
    let fresh = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(
        ro.chat("o", id).map(|c| c.len()).map_err(|e| e.to_string()),
        fresh.chat("o", id).map(|c| c.len()).map_err(|e| e.to_string())
    );
    // Each message reads the same through both: as written, or lost ("missing or damaged").
    let reads = |s: &Store| -> Vec<Result<String, String>> {
        let c = s.chat("o", id).unwrap();
        (0..c.len()).map(|q| c.get(q).map(|m| format!("{:?}", m.parts)).map_err(|e| e.to_string())).collect()
    };
    let (a, b) = (reads(&ro), reads(&fresh));
    assert_eq!(a, b);
    assert!(a.iter().any(|r| r.as_ref().is_err_and(|e| e.contains("missing or damaged"))), "{a:?}");
}
