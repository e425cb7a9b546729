//! Claims of archives inside chats: a large tool result is archived on append and keeps a
//! preview plus the reference; every byte comes back through `read_context`; a reference
//! to another owner's archive is refused; pins are kept, listed in snapshots, survive a
//! reopen, and are checked like reads.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext::{ChatMeta, Error, NewMessage, Options, Part, Role, Store, ToolContent, Unit};

fn big_output() -> String {
    (0..3000).map(|i| format!("{i:05} result row: value={}\n", i * 7)).collect()
}

#[test]
fn a_large_tool_result_is_archived_on_append_and_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let chat = store.chat("a", store.create_chat("a", ChatMeta::default()).unwrap()).unwrap();
    let out = big_output();
    let seq = chat.append(NewMessage::tool_result("c1", out.clone())).unwrap();
    let small = chat.append(NewMessage::tool_result("c2", "short")).unwrap();
    let m = chat.get(seq).unwrap();
    let Part::ToolResult { content: ToolContent::Archived { archive, preview }, .. } = &m.parts[0] else {
        panic!("expected an archived result, got {:?}", m.parts)
    };
    assert_eq!(archive.bytes, out.len() as u64);
    assert_eq!(archive.lines, 3000);
    assert!(preview.len() < out.len() / 5, "preview of {} bytes", preview.len());
    assert!(preview.contains(&archive.id.to_string()), "the preview names its archive");
    assert!(preview.contains("incomplete"));
    // The exact figure the preview dropped comes back.
    assert!(!preview.contains("01500 result row: value=10500"));
    let line = store.read_context("a", &archive.id, 1500..1501, Unit::Lines).unwrap();
    assert_eq!(line, "01500 result row: value=10500\n");
    assert_eq!(store.read_context("a", &archive.id, 0..archive.chars, Unit::Chars).unwrap(), out);
    // Small results stay inline.
    let s = chat.get(small).unwrap();
    assert!(matches!(&s.parts[0], Part::ToolResult { content: ToolContent::Text(t), .. } if t == "short"));
    // A preview archived again keeps the original id.
    assert_eq!(store.archive("a", preview).unwrap().id, archive.id);
}

#[test]
fn a_reference_to_an_archive_the_owner_cannot_read_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let theirs = store.archive("alice", &big_output()).unwrap();
    let chat = store.chat("bob", store.create_chat("bob", ChatMeta::default()).unwrap()).unwrap();
    let forged = NewMessage {
        role: Role::Tool,
        parts: vec![Part::ToolResult {
            call_id: "c".into(),
            content: ToolContent::Archived { archive: theirs, preview: "looks legit".into() },
            is_error: false,
        }],
        feedback: false,
    };
    assert!(matches!(chat.append(forged), Err(Error::NotFound { .. })));
    assert_eq!(chat.len(), 0);
    assert!(matches!(store.read_context("bob", &theirs.id, 0..10, Unit::Chars), Err(Error::NotFound { .. })));
    assert!(matches!(chat.pin(&theirs.id, 0..10, Unit::Chars), Err(Error::NotFound { .. })));
    // Once bob archives the same text himself he may read it: one blob, two grants.
    let before = store.stats().unwrap().log_bytes;
    assert_eq!(store.archive("bob", &big_output()).unwrap().id, theirs.id);
    let grown = store.stats().unwrap().log_bytes - before;
    assert!(grown < 1024, "the second grant stored {grown} bytes");
    assert!(store.read_context("bob", &theirs.id, 0..10, Unit::Chars).is_ok());
}

#[test]
fn pins_are_listed_in_snapshots_survive_reopen_and_are_validated() {
    let dir = tempfile::tempdir().unwrap();
    let (id, archive) = {
        let store = Store::open(dir.path(), Options::default()).unwrap();
        let id = store.create_chat("a", ChatMeta::default()).unwrap();
        let chat = store.chat("a", id).unwrap();
        let a = store.archive("a", &big_output()).unwrap();
        chat.pin(&a.id, 10..20, Unit::Lines).unwrap();
        chat.pin(&a.id, 0..100, Unit::Chars).unwrap();
        chat.pin(&a.id, 0..100, Unit::Chars).unwrap(); // idempotent
        let e = chat.pin(&a.id, 0..a.lines + 1, Unit::Lines).unwrap_err().to_string();
        assert!(e.contains("holds 3000 lines"), "{e}");
        assert_eq!(chat.snapshot().pins().len(), 2);
        chat.unpin(&a.id, 0..100, Unit::Chars).unwrap();
        assert!(matches!(chat.unpin(&a.id, 0..100, Unit::Chars), Err(Error::NotFound { .. })));
        (id, a)
    };
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let pins = store.chat("a", id).unwrap().snapshot().pins().to_vec();
    assert_eq!(pins.len(), 1);
    assert_eq!((pins[0].archive, pins[0].unit, pins[0].range.clone()), (archive.id, Unit::Lines, 10..20));
}
