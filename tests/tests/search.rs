//! Claims of `Store::search` (issue 33): it finds what was appended — message texts, tool
//! call names and arguments, inline and archived tool results — and each hit names a range
//! that reads back exactly; hidden messages only when asked; never another owner's; the
//! index rebuilt from the log, and a read-only open's index in memory, answer as the
//! writer's; after a crash, appended-and-synced messages are found.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]
#![allow(clippy::single_range_in_vec_init, reason = "hide takes a list of ranges; a list of one is meant")]

use std::process::{Command, Stdio};
use std::time::Duration;

use undertext::{
    ChatId, HitField, NewMessage, Options, Part, Role, SearchHit, SearchScope, Store, ToolContent,
};
use undertext_tests::child::spawn_until_ready;

/// A chat of `owner` with one message of each searchable kind; returns its id.
fn fill(store: &Store, owner: &str) -> ChatId {
    let id = store.create_chat(owner, Default::default()).unwrap();
    let chat = store.chat(owner, id).unwrap();
    chat.append(NewMessage::user("Why does the build of crate zebrafish fail? Ünïcode 😀 first")).unwrap();
    chat.append(NewMessage {
        feedback: false,
        role: Role::Assistant,
        parts: vec![
            Part::Text("Let me look at the manifest.".into()),
            Part::ToolCall {
                id: "c1".into(),
                name: "read_file".into(),
                args: r#"{"path": "crates/quokka/Cargo.toml"}"#.into(),
            },
        ],
    })
    .unwrap();
    chat.append(NewMessage {
        feedback: false,
        role: Role::Tool,
        parts: vec![Part::ToolResult {
            call_id: "c1".into(),
            content: ToolContent::Text(
                "[package]\nname = \"quokka\"\nversion = \"0.3.1\" # 😀 pinned by marmoset".into(),
            ),
            is_error: false,
        }],
    })
    .unwrap();
    let mut log = String::new();
    for i in 0..3000 {
        log.push_str(&format!("line {i}: compiling dependency number {i}\n"));
    }
    log.push_str("error[E0425]: cannot find value `axolotl_total` in this scope\n");
    for i in 0..500 {
        log.push_str(&format!("trailing line {i}\n"));
    }
    let a = store.archive(owner, &log).unwrap();
    chat.append(NewMessage {
        feedback: false,
        role: Role::Assistant,
        parts: vec![Part::ToolCall { id: "c2".into(), name: "run_tests".into(), args: "{}".into() }],
    })
    .unwrap();
    chat.append(NewMessage {
        feedback: false,
        role: Role::Tool,
        parts: vec![Part::ToolResult {
            call_id: "c2".into(),
            content: ToolContent::Archived { archive: a, preview: "line 0 … (archived)".into() },
            is_error: true,
        }],
    })
    .unwrap();
    id
}

fn open(dir: &std::path::Path) -> Store {
    Store::open(dir, Options::default()).unwrap()
}

fn top(store: &Store, owner: &str, q: &str) -> SearchHit {
    let hits = store.search(owner, q, SearchScope::all(), 5).unwrap();
    assert!(!hits.is_empty(), "no hit for {q:?}");
    hits[0].clone()
}

/// What a set of answers says, without the scores' last bits.
fn shape(hits: &[SearchHit]) -> Vec<String> {
    hits.iter()
        .map(|h| {
            format!("{} {} {:?} {}..{} {:?} {}", h.chat, h.seq, h.archive, h.start, h.end, h.snippet, h.part)
        })
        .collect()
}

const QUERIES: [&str; 8] = [
    "zebrafish",
    "quokka",
    "read_file",
    "axolotl_total",
    "marmoset pinned",
    "cannot find value",
    "0.3.1",
    "line",
];

#[test]
fn search_finds_texts_tool_calls_and_inline_and_archived_results_and_the_range_reads_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let id = fill(&store, "alice");

    let h = top(&store, "alice", "zebrafish");
    assert_eq!((h.chat, h.seq, h.archive, h.field), (id, 0, None, HitField::Text));
    assert_eq!(store.read_hit("alice", &h).unwrap(), "zebrafish");
    // Chars, not bytes: the range counts the scalar values of the message's text.
    let m = store.chat("alice", id).unwrap().get(0).unwrap();
    let text = h.text_in(&m).unwrap();
    assert_eq!(
        text.chars().skip(h.start as usize).take((h.end - h.start) as usize).collect::<String>(),
        "zebrafish"
    );

    let h = top(&store, "alice", "read_file");
    assert_eq!((h.seq, h.field, h.part), (1, HitField::ToolName, 1));
    assert_eq!(store.read_hit("alice", &h).unwrap(), "read_file");

    let h = top(&store, "alice", "crates quokka cargo");
    assert_eq!((h.seq, h.field), (1, HitField::ToolArgs));
    assert_eq!(store.read_hit("alice", &h).unwrap(), "crates/quokka/Cargo");

    let h = top(&store, "alice", "marmoset pinned");
    assert_eq!((h.seq, h.field), (2, HitField::ToolResult));
    assert_eq!(store.read_hit("alice", &h).unwrap(), "pinned by marmoset");
    assert!(h.snippet.contains("😀 pinned by marmoset"), "{}", h.snippet);

    // The archive's whole text is searched, not the preview; the range is the archive's.
    let h = top(&store, "alice", "axolotl_total");
    let a = h.archive.expect("an archive hit");
    assert_eq!((h.seq, h.field), (4, HitField::Archive));
    assert_eq!(store.read_context("alice", &a, h.start..h.end, h.unit).unwrap(), "axolotl_total");
    assert_eq!(store.read_hit("alice", &h).unwrap(), "axolotl_total");
    let h = top(&store, "alice", "cannot find value");
    assert_eq!(store.read_hit("alice", &h).unwrap(), "cannot find value");

    // Messages appended after a search are found by the next one.
    let chat = store.chat("alice", id).unwrap();
    chat.append(NewMessage::user("and now the pangolin")).unwrap();
    assert_eq!(top(&store, "alice", "pangolin").seq, 5);
    // One chat's scope; no words, no hits; a limit.
    assert_eq!(store.search("alice", "pangolin", SearchScope::chat(id), 5).unwrap().len(), 1);
    assert!(store.search("alice", " ,;", SearchScope::all(), 5).unwrap().is_empty());
    assert_eq!(store.search("alice", "line", SearchScope::all(), 1).unwrap().len(), 1);
    // Every word must be there; when no text has them all, any is ranked.
    let h = top(&store, "alice", "zebrafish nonexistentword");
    assert_eq!(h.seq, 0);
}

#[test]
fn search_leaves_out_hidden_messages_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let id = fill(&store, "alice");
    assert_eq!(top(&store, "alice", "marmoset").seq, 2);
    let chat = store.chat("alice", id).unwrap();
    // A call and its result are hidden together.
    chat.hide(&[1..3], chat.revision()).unwrap();
    assert!(store.search("alice", "read_file", SearchScope::all(), 5).unwrap().is_empty());
    assert!(store.search("alice", "marmoset", SearchScope::all(), 5).unwrap().is_empty());
    assert!(store.search("alice", "marmoset", SearchScope::chat(id), 5).unwrap().is_empty());
    let hits = store.search("alice", "marmoset", SearchScope::all().including_hidden(), 5).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(store.read_hit("alice", &hits[0]).unwrap(), "marmoset");
    // Still found by the others.
    assert_eq!(top(&store, "alice", "zebrafish").seq, 0);
}

#[test]
fn search_never_answers_from_another_owners_chats() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let a = fill(&store, "alice");
    let chat = store.chat("alice", a).unwrap();
    chat.append(NewMessage::user("alice alone says platypus")).unwrap();
    let b = store.create_chat("bob", Default::default()).unwrap();
    store.chat("bob", b).unwrap().append(NewMessage::user("bob says wombat")).unwrap();
    for q in QUERIES.iter().chain(&["platypus"]) {
        assert!(store.search("bob", q, SearchScope::all(), 10).unwrap().is_empty(), "bob found {q}");
    }
    assert!(store.search("alice", "wombat", SearchScope::all(), 10).unwrap().is_empty());
    assert_eq!(top(&store, "bob", "wombat").chat, b);
    // A chat scope of another owner is NotFound, as an absent chat.
    let e = store.search("bob", "platypus", SearchScope::chat(a), 10).unwrap_err();
    assert!(matches!(e, undertext::Error::NotFound { .. }), "{e}");
    let e2 = store.search("bob", "platypus", SearchScope::chat(ChatId(a.0 + 1000)), 10).unwrap_err();
    assert_eq!(
        e.to_string().replace(&a.to_string(), "X"),
        e2.to_string().replace(&ChatId(a.0 + 1000).to_string(), "X")
    );
    // A deleted chat's messages are no longer answered.
    store.delete_chat("alice", a).unwrap();
    assert!(store.search("alice", "platypus", SearchScope::all(), 10).unwrap().is_empty());
}

#[test]
fn search_answers_the_same_after_rebuild_index_and_on_a_read_only_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let id = fill(&store, "alice");
    fill(&store, "bob");
    let chat = store.chat("alice", id).unwrap();
    chat.edit(0, NewMessage::user("Why does the build of crate okapi fail?"), chat.revision()).unwrap();
    let queries: Vec<&str> = QUERIES.iter().copied().chain(["okapi"]).collect();
    let answers = |s: &Store| -> Vec<_> {
        queries
            .iter()
            .flat_map(|q| ["alice", "bob"].map(|o| shape(&s.search(o, q, SearchScope::all(), 10).unwrap())))
            .collect()
    };
    let before = answers(&store);
    assert!(
        store.search("alice", "zebrafish", SearchScope::all(), 5).unwrap().is_empty(),
        "the edit replaced it"
    );
    assert_eq!(top(&store, "alice", "okapi").seq, 0);
    store.sync().unwrap();
    let reader = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(answers(&reader), before, "read-only open");
    assert_eq!(reader.search_index_bytes(), 0, "a read-only store writes no index file");
    store.rebuild_index().unwrap();
    assert!(!dir.path().join("search").join("meta.json").exists(), "the search index is dropped");
    assert_eq!(answers(&store), before, "after rebuild_index");
    assert!(store.search_index_bytes() > 0);
    // The read-only store follows the writer's appends after a refresh.
    chat.append(NewMessage::user("a late capybara")).unwrap();
    store.sync().unwrap();
    reader.refresh().unwrap();
    assert_eq!(top(&reader, "alice", "capybara").seq, chat.len() - 1);
    let now = answers(&store);
    let len = chat.len();
    drop((chat, store));
    // `check --rebuild` on a closed store: the search index goes with `index.redb`.
    Store::rebuild_index_at(dir.path(), Options::default()).unwrap();
    assert!(!dir.path().join("search").exists());
    let store = open(dir.path());
    assert_eq!(answers(&store), now, "after rebuild_index_at");
    assert_eq!(top(&store, "alice", "capybara").seq, len - 1);
}

#[test]
fn after_a_crash_appended_and_synced_messages_are_found() {
    let dir = tempfile::tempdir().unwrap();
    let mut acked: Vec<(String, u64, String)> = Vec::new();
    for (kill, wait_ms) in [(0u64, 150u64), (1, 400), (2, 60)] {
        let child = spawn_until_ready(
            Command::new(env!("CARGO_BIN_EXE_search_writer"))
                .arg(dir.path())
                .arg(kill.to_string())
                .stderr(Stdio::inherit()),
            Duration::from_secs(30),
            &format!("kill {kill}"),
        );
        std::thread::sleep(Duration::from_millis(wait_ms));
        let (status, lines) = child.kill();
        assert!(!status.success(), "the child should have been killed, exited with {status}");
        for line in &lines {
            let parts: Vec<&str> = line.split(' ').collect();
            let ["ack", chat, seq, word] = parts[..] else { continue };
            let Ok(seq) = seq.parse() else { continue };
            acked.push((chat.to_string(), seq, word.to_string()));
        }
    }
    assert!(acked.len() >= 10, "the children acknowledged {} appends", acked.len());
    let store = open(dir.path());
    for (chat, seq, word) in &acked {
        let hits = store.search("o", word, SearchScope::all(), 3).unwrap();
        assert!(
            hits.iter().any(|h| h.chat.to_string() == *chat && h.seq == *seq),
            "{word} (chat {chat} seq {seq}) not found after the crash: {hits:?}"
        );
        assert_eq!(store.read_hit("o", &hits[0]).unwrap(), *word);
    }
    eprintln!("{} acknowledged appends found after 3 kills", acked.len());
}
