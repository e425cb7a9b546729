//! Read-only opens (`Store::open_read_only`): beside a live writer in another process, on a
//! closed store (not a byte changed), through `gc`, and refusing every write.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::process::Command;
use std::time::Duration;

use undertext::{ChatId, ChatMeta, Error, NewMessage, Part, Store};
use undertext_tests::child::spawn_until_ready;
use undertext_tests::read_only::{
    assert_unchanged, closed_store, message_text, small, store_files as files, writer_then_reader,
};

fn text_of(m: &undertext::Message) -> String {
    match &m.parts[..] {
        [Part::Text(t)] => t.clone(),
        other => panic!("expected one text part, found {other:?}"),
    }
}

#[test]
fn a_read_only_session_leaves_a_closed_store_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let ids = closed_store(dir.path());
    let before = files(dir.path());
    assert!(
        before.keys().filter(|k| k.ends_with(".seg")).count() > 2,
        "several segments: {:?}",
        before.keys()
    );
    {
        let ro = Store::open_read_only(dir.path()).unwrap();
        assert!(ro.is_read_only());
        assert!(ro.open_warnings().is_empty(), "{:?}", ro.open_warnings());
        for (c, id) in ids.iter().enumerate() {
            let got: Vec<String> =
                ro.chat("o", *id).unwrap().messages().unwrap().iter().map(text_of).collect();
            let want: Vec<String> = (0..8).map(|i| message_text(c as u64 * 100 + i)).collect();
            assert_eq!(got, want);
        }
        assert_eq!(ro.chats("o", Default::default()).unwrap().chats.len(), 3);
        assert_eq!(ro.refresh().unwrap().batches, 0);
        assert!(ro.check().unwrap().is_ok());
        ro.stats().unwrap();
        ro.close().unwrap();
    }
    assert_unchanged(dir.path(), &before, "a read-only session changed the store's files");
}

#[test]
fn writes_through_a_read_only_store_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ids = closed_store(dir.path());
    let before = files(dir.path());
    let ro = Store::open_read_only(dir.path()).unwrap();
    let is_ro = |r: Result<_, Error>, what: &str| match r {
        Err(Error::ReadOnly(m)) => assert!(m.contains("writes are refused"), "{what}: {m}"),
        Err(e) => panic!("{what}: expected Error::ReadOnly, found {e}"),
        Ok(_) => panic!("{what}: expected Error::ReadOnly, found success"),
    };
    is_ro(ro.put_blob("o", b"x").map(|_| ()), "put_blob");
    is_ro(ro.create_chat("o", ChatMeta::default()).map(|_| ()), "create_chat");
    let chat = ro.chat("o", ids[0]).unwrap();
    is_ro(chat.append(NewMessage::user("no")).map(|_| ()), "append");
    is_ro(ro.rebuild_index(), "rebuild_index");
    assert_eq!(chat.len(), 8);
    drop((chat, ro));
    assert_unchanged(dir.path(), &before, "a read-only session");
}

#[test]
fn a_read_only_open_does_not_take_the_lock_and_the_writer_is_not_blocked() {
    let dir = tempfile::tempdir().unwrap();
    let (_writer, id, chat, ro) = writer_then_reader(dir.path());
    assert_eq!(ro.chat("o", id).unwrap().len(), 1, "it sees what was acknowledged before it opened");
    for i in 1..20 {
        chat.append(NewMessage::user(message_text(i))).unwrap();
    }
    let r = ro.refresh().unwrap();
    assert_eq!(r.batches, 19);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    let got: Vec<String> = ro.chat("o", id).unwrap().messages().unwrap().iter().map(text_of).collect();
    assert_eq!(got, (0..20).map(message_text).collect::<Vec<_>>());
    // The writer can still be reopened by nobody else: its lock is its own.
    assert!(matches!(Store::open(dir.path(), small()), Err(Error::Locked { .. })));
}

#[test]
fn a_refresh_extends_appended_chats_and_forgets_only_the_chats_changed_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), small()).unwrap();
    let ids: Vec<ChatId> = (0..2u64)
        .map(|c| {
            let id = writer.create_chat("o", ChatMeta::default()).unwrap();
            writer.chat("o", id).unwrap().append(NewMessage::user(message_text(c * 100))).unwrap();
            id
        })
        .collect();
    let ro = Store::open_read_only(dir.path()).unwrap();
    for id in &ids {
        assert_eq!(ro.chat("o", *id).unwrap().len(), 1);
    }
    assert_eq!(ro.stats().unwrap().chats_in_memory, 2);
    let r = ro.refresh().unwrap();
    assert_eq!(r.batches, 0);
    assert_eq!(ro.stats().unwrap().chats_in_memory, 2, "a refresh with nothing new forgets no chat");
    writer.chat("o", ids[1]).unwrap().append(NewMessage::user(message_text(101))).unwrap();
    assert_eq!(ro.refresh().unwrap().batches, 1);
    assert_eq!(ro.stats().unwrap().chats_in_memory, 2, "a chat only appended to is extended in memory");
    let got: Vec<String> = ro.chat("o", ids[1]).unwrap().messages().unwrap().iter().map(text_of).collect();
    assert_eq!(got, vec![message_text(100), message_text(101)], "and reads its new record");
    assert_eq!(ro.chat("o", ids[0]).unwrap().len(), 1);
    writer.chat("o", ids[1]).unwrap().edit(1, NewMessage::user(message_text(102)), 0).unwrap();
    assert_eq!(ro.refresh().unwrap().batches, 1);
    assert_eq!(ro.stats().unwrap().chats_in_memory, 1, "only the chat edited is forgotten");
    let got: Vec<String> = ro.chat("o", ids[1]).unwrap().messages().unwrap().iter().map(text_of).collect();
    assert_eq!(got, vec![message_text(100), message_text(102)], "and loads again with the edit");
}

#[test]
fn a_reader_beside_a_writer_process_sees_every_acknowledged_message_within_one_refresh() {
    let dir = tempfile::tempdir().unwrap();
    // A store that exists before the writer starts (the reader opens while it writes).
    Store::open(dir.path(), small()).unwrap().close().unwrap();
    let count = 120u64;
    let w = spawn_until_ready(
        Command::new(env!("CARGO_BIN_EXE_ro_writer")).arg(dir.path()).arg(count.to_string()),
        Duration::from_secs(60),
        "ro_writer",
    );
    let chat_line = w.next_line().unwrap();
    let id = ChatId(chat_line.strip_prefix("chat ").unwrap().parse().unwrap());
    let ro = Store::open_read_only(dir.path()).unwrap();
    let mut seen = 0u64;
    loop {
        let line = w.next_line().unwrap();
        if line == "done" {
            break;
        }
        let acked: u64 = line.strip_prefix("ack ").unwrap().parse().unwrap();
        // Check every few acks (more appends, and seals, land between refreshes).
        if !acked.is_multiple_of(7) && acked + 1 != count {
            continue;
        }
        ro.refresh().unwrap();
        let msgs = ro.chat("o", id).unwrap().messages().unwrap();
        assert!(
            msgs.len() as u64 > acked,
            "after a refresh: {} messages, message {acked} was acknowledged",
            msgs.len()
        );
        for (i, m) in msgs.iter().enumerate() {
            assert_eq!(text_of(m), message_text(i as u64), "message {i}");
        }
        seen = msgs.len() as u64;
    }
    assert_eq!(seen, count);
    let status = w.wait();
    assert!(status.success(), "{status:?}");
    assert!(
        files(dir.path()).keys().filter(|k| k.ends_with(".seg")).count() > 5,
        "the writer sealed segments"
    );
}

#[test]
fn reader_processes_see_every_acknowledged_message_within_one_refresh_while_the_writer_seals() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    Store::open(dir.path(), small()).unwrap().close().unwrap();
    let count = 90u64;
    let w = spawn_until_ready(
        Command::new(env!("CARGO_BIN_EXE_ro_writer")).arg(dir.path()).arg(count.to_string()),
        Duration::from_secs(60),
        "ro_writer",
    );
    let id = w.next_line().unwrap().strip_prefix("chat ").unwrap().parse::<u64>().unwrap();
    let mut readers: Vec<_> = (0..2)
        .map(|_| {
            let mut c = Command::new(env!("CARGO_BIN_EXE_ro_reader"))
                .arg(dir.path())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut out = BufReader::new(c.stdout.take().unwrap());
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            assert_eq!(line.trim(), "ready");
            (c, out)
        })
        .collect();
    let mut checks = 0;
    loop {
        let line = w.next_line().unwrap();
        if line == "done" {
            break;
        }
        let acked: u64 = line.strip_prefix("ack ").unwrap().parse().unwrap();
        if !acked.is_multiple_of(5) && acked + 1 != count {
            continue;
        }
        for (c, out) in &mut readers {
            writeln!(c.stdin.as_mut().unwrap(), "check {id} {acked}").unwrap();
            let mut answer = String::new();
            out.read_line(&mut answer).unwrap();
            assert!(answer.starts_with("ok "), "after ack {acked}: {answer}");
        }
        checks += 1;
    }
    assert!(checks >= count / 5);
    assert!(w.wait().success());
    for (mut c, _) in readers {
        drop(c.stdin.take());
        assert!(c.wait().unwrap().success());
    }
}

#[test]
fn after_a_gc_the_reader_keeps_what_it_read_and_refresh_says_to_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let ids = closed_store(dir.path());
    let ro = Store::open_read_only(dir.path()).unwrap();
    let before = ro.chat("o", ids[1]).unwrap().messages().unwrap();
    {
        let w = Store::open(dir.path(), small()).unwrap();
        w.delete_chat("o", ids[0]).unwrap();
        w.close().unwrap();
    }
    Store::gc(dir.path(), small()).unwrap();
    // Reads of what was indexed go on through the files it holds, byte for byte.
    let again: Vec<String> = ro.chat("o", ids[1]).unwrap().messages().unwrap().iter().map(text_of).collect();
    assert_eq!(again, before.iter().map(text_of).collect::<Vec<_>>());
    match ro.refresh() {
        Err(Error::ReadOnly(m)) => assert!(m.contains("open the store again"), "{m}"),
        other => panic!("expected Error::ReadOnly saying to reopen, found {other:?}"),
    }
    let fresh = Store::open_read_only(dir.path()).unwrap();
    assert!(fresh.chat("o", ids[0]).is_err(), "the deleted chat is gone after gc");
    assert_eq!(fresh.chat("o", ids[1]).unwrap().len(), 8);
}
