//! Claims of issue 37.4: an import stopped between sessions leaves every session it wrote
//! whole and none begun (no chat with 0 messages), says it was interrupted, and the next
//! import counts every session: the ones written as unchanged, the rest as new; a chat left
//! empty by an older build is counted as grown when the import fills it.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::cell::Cell;

use undertext::import::{self, Format};
use undertext::{ChatMeta, Durability, Options, Page, Store};

#[test]
fn an_interrupted_import_leaves_whole_sessions_and_the_next_import_counts_every_session() {
    let dir = undertext_tests::transcripts::transcripts_dir().join("claude_code/spotter");
    let files = import::transcript_files(&[dir]).unwrap();
    let sessions: Vec<_> =
        files.iter().flat_map(|f| import::parse_file(f, Format::Auto).unwrap().sessions).collect();
    assert!(sessions.len() > 4);
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(tmp.path(), Options::default().durability(Durability::None)).unwrap();
    let done = Cell::new(0u64);
    let r =
        import::import_sessions_until(&s, "o", &sessions, |_| done.set(done.get() + 1), || done.get() == 3)
            .unwrap();
    assert!(r.interrupted);
    assert_eq!(r.sessions_new, 3);
    let listed = s.chats("o", Page { limit: 1000, after: None }).unwrap().chats;
    assert_eq!(listed.len(), 3, "no session begun after the stop");
    for c in &listed {
        let key = c.meta.extra.get(import::KEY).unwrap();
        let want = sessions.iter().find(|x| &x.key == key).unwrap().messages.len() as u64;
        assert_eq!(c.len, want, "{key}: whole");
    }
    let r = import::import_sessions(&s, "o", &sessions, |_| {}).unwrap();
    assert!(!r.interrupted);
    assert_eq!((r.sessions_unchanged, r.sessions_new), (3, sessions.len() as u64 - 3));
    assert_eq!(r.sessions_new + r.sessions_unchanged + r.sessions_extended, sessions.len() as u64);
}

#[test]
fn a_chat_left_empty_by_an_earlier_import_is_counted_as_grown_when_filled() {
    let path = undertext_tests::transcripts::transcripts_dir()
        .join("claude_code/spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl");
    let sessions = import::parse_file(&path, Format::Auto).unwrap().sessions;
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(tmp.path(), Options::default().durability(Durability::None)).unwrap();
    // What an interrupted import of an older build left: the chat, no message.
    let mut meta = ChatMeta::default();
    meta.extra.insert(import::KEY.into(), sessions[0].key.clone());
    s.create_chat("o", meta).unwrap();
    let r = import::import_sessions(&s, "o", &sessions, |_| {}).unwrap();
    assert_eq!((r.sessions_new, r.sessions_extended, r.sessions_unchanged), (0, 1, 0));
    assert_eq!(r.messages, sessions[0].messages.len() as u64);
}
