//! Claims of re-importing (issue 17, "re-import is exact"): a session already in the store
//! is compared with the new transcript; the rest is appended when the stored messages are an
//! exact prefix, otherwise the chat is cut to the longest common prefix and the rest appended
//! as a new revision (reported as `sessions_rewritten`, the old content readable through
//! `snapshot_at`). Shown on a Claude Code session whose last response was still being
//! written, on two transcripts that share a session id, and by a seeded property: any
//! sequence of grown and rewritten versions, imported in order, leaves the chat equal to one
//! clean import of the last version.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::path::{Path, PathBuf};

use undertext::import::{self, Format, ImportReport, Session};
use undertext::{Durability, NewMessage, Options, Part, Role, Store, ToolContent};
use undertext_tests::{Rng, seed};

fn open(dir: &Path) -> Store {
    Store::open(dir, Options::default().durability(Durability::None).archive_threshold(256)).unwrap()
}

/// The chat of `key`: its messages as (role, parts).
fn content(store: &Store, key: &str) -> Vec<(Role, Vec<Part>)> {
    let (id, _) = import::imported_chats(store, "o").unwrap()[key];
    store.chat("o", id).unwrap().messages().unwrap().into_iter().map(|m| (m.role, m.parts)).collect()
}

fn import_text(store: &Store, dir: &Path, name: &str, text: &str) -> (ImportReport, String) {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let parsed = import::parse_file(&path, Format::Auto).unwrap();
    assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
    let key = parsed.sessions[0].key.clone();
    (import::import_sessions(store, "o", &parsed.sessions, |_| {}).unwrap(), key)
}

/// Claude Code lines: a user prompt, then one response written as two lines (text, then the
/// tool call), the call's result, and a closing answer.
fn claude_lines(session: &str, prompt: &str) -> Vec<String> {
    let line = |ty: &str, msg: serde_json::Value| {
        serde_json::json!({"type": ty, "sessionId": session, "uuid": "u", "message": msg}).to_string()
    };
    vec![
        line("user", serde_json::json!({"role": "user", "content": prompt})),
        line(
            "assistant",
            serde_json::json!({"id": "msg_1", "role": "assistant", "content": [{"type": "text", "text": "Looking."}]}),
        ),
        line(
            "assistant",
            serde_json::json!({"id": "msg_1", "role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}]}),
        ),
        line(
            "user",
            serde_json::json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Cargo.toml\nsrc\n"}]}),
        ),
        line(
            "assistant",
            serde_json::json!({"id": "msg_2", "role": "assistant", "content": [{"type": "text", "text": "Two entries."}]}),
        ),
    ]
}

#[test]
fn a_claude_code_session_imported_while_its_last_response_was_half_written_is_completed_on_reimport() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(&tmp.path().join("s"));
    let lines = claude_lines("sess-1", "list the files");
    // Written up to the text line of the response: the call is not in the file yet.
    let (first, key) = import_text(&store, tmp.path(), "a.jsonl", &(lines[..2].join("\n") + "\n"));
    assert_eq!((first.sessions_new, first.messages), (1, 2));
    let (id, _) = import::imported_chats(&store, "o").unwrap()[&key];
    let before = store.chat("o", id).unwrap().revision();

    let (again, _) = import_text(&store, tmp.path(), "a.jsonl", &(lines.join("\n") + "\n"));
    assert_eq!((again.sessions_rewritten, again.messages_replaced, again.sessions_unchanged), (1, 1, 0));
    // The chat equals a clean import of the whole file: the response holds its call.
    let clean = open(&tmp.path().join("clean"));
    import_text(&clean, tmp.path(), "a.jsonl", &(lines.join("\n") + "\n"));
    assert_eq!(content(&store, &key), content(&clean, &key));
    let chat = store.chat("o", id).unwrap();
    assert!(matches!(&chat.get(1).unwrap().parts[..], [Part::Text(_), Part::ToolCall { .. }]));
    // The half-written version is still readable at the older revision.
    let old = chat.snapshot_at(before).unwrap();
    assert_eq!(old.len(), 2);
    assert_eq!(old.get(1).unwrap().parts, [Part::Text("Looking.".into())]);
    // Importing the same file a third time changes nothing.
    let (third, _) = import_text(&store, tmp.path(), "a.jsonl", &(lines.join("\n") + "\n"));
    assert_eq!((third.sessions_unchanged, third.sessions_rewritten, third.messages), (1, 0, 0));
}

#[test]
fn two_transcripts_sharing_a_session_id_are_not_spliced_the_second_replaces_the_first_as_a_revision() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(&tmp.path().join("s"));
    let a = claude_lines("shared-id", "list the files");
    let b = claude_lines("shared-id", "delete the files");
    let (_, key) = import_text(&store, tmp.path(), "a.jsonl", &(a.join("\n") + "\n"));
    let a_content = content(&store, &key);
    let (id, _) = import::imported_chats(&store, "o").unwrap()[&key];
    let rev_a = store.chat("o", id).unwrap().revision();
    let (r, _) = import_text(&store, tmp.path(), "b.jsonl", &(b.join("\n") + "\n"));
    assert_eq!((r.sessions_rewritten, r.sessions_extended, r.sessions_unchanged), (1, 0, 0));
    // No splice: the chat is exactly B, not A's messages followed by B's tail.
    let clean = open(&tmp.path().join("clean"));
    import_text(&clean, tmp.path(), "b.jsonl", &(b.join("\n") + "\n"));
    assert_eq!(content(&store, &key), content(&clean, &key));
    // A is still there at its revision.
    let old = store.chat("o", id).unwrap().snapshot_at(rev_a).unwrap();
    let old: Vec<(Role, Vec<Part>)> =
        old.messages().unwrap().into_iter().map(|m| (m.role, m.parts)).collect();
    assert_eq!(old, a_content);
}

/// A random message: user text, assistant text with calls, a tool result (some longer than
/// the archive threshold), or a system note.
fn random_message(rng: &mut Rng, n: u64) -> NewMessage {
    let words = |rng: &mut Rng, k: u64| -> String {
        (0..rng.range(1, k)).map(|i| format!("w{}-{i} ", rng.range(0, 50))).collect()
    };
    match rng.range(0, 10) {
        0..=2 => NewMessage::user(words(rng, 8)),
        3..=5 => {
            let mut parts = vec![Part::Text(words(rng, 6))];
            for c in 0..rng.range(0, 3) {
                parts.push(Part::ToolCall {
                    id: format!("call-{n}-{c}"),
                    name: "sh".into(),
                    args: format!("{{\"cmd\": \"{}\"}}", rng.range(0, 9)),
                });
            }
            NewMessage { role: Role::Assistant, parts, feedback: false }
        }
        6..=8 => {
            let long = rng.range(0, 3) == 0;
            let text = if long { words(rng, 200).repeat(3) } else { words(rng, 10) };
            let content = ToolContent::Text(text);
            let is_error = rng.range(0, 5) == 0;
            NewMessage {
                role: Role::Tool,
                parts: vec![Part::ToolResult { call_id: format!("call-{n}"), content, is_error }],
                feedback: false,
            }
        }
        _ => NewMessage::system(words(rng, 5)),
    }
}

fn session(messages: Vec<NewMessage>) -> Session {
    Session {
        key: "prop:1".into(),
        parent_key: None,
        format: Format::OpenAi,
        title: "prop".into(),
        model: String::new(),
        source: PathBuf::from("prop.json"),
        messages,
        at_ms: Vec::new(),
        tool_results: 0,
        tool_result_bytes: 0,
        tool_calls: 0,
        condensations: Vec::new(),
    }
}

/// The next version of a transcript: grown, rewritten at a random message (then maybe grown),
/// cut short, one message's text or result changed in place, or the same.
fn next_version(rng: &mut Rng, v: &[NewMessage], counter: &mut u64) -> Vec<NewMessage> {
    let mut out = v.to_vec();
    let mut add = |out: &mut Vec<NewMessage>, rng: &mut Rng, k: u64| {
        for _ in 0..k {
            *counter += 1;
            out.push(random_message(rng, *counter));
        }
    };
    match rng.range(0, 6) {
        0 | 1 => {
            let k = rng.range(1, 6);
            add(&mut out, rng, k);
        }
        2 if !out.is_empty() => {
            out.truncate(rng.range(0, out.len() as u64) as usize);
            let k = rng.range(0, 5);
            add(&mut out, rng, k);
        }
        3 if !out.is_empty() => out.truncate(rng.range(0, out.len() as u64) as usize),
        4 if !out.is_empty() => {
            let i = rng.range(0, out.len() as u64) as usize;
            *counter += 1;
            out[i] = random_message(rng, *counter);
        }
        _ => {}
    }
    out
}

#[test]
fn any_sequence_of_grown_and_rewritten_versions_imported_in_order_equals_a_clean_import_of_the_last() {
    let s = seed(0x17_5e55);
    let tmp = tempfile::tempdir().unwrap();
    let (mut all_rewritten, mut all_extended) = (0, 0);
    for round in 0..12u64 {
        let mut rng = Rng::new(s ^ round.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let store = open(&tmp.path().join(format!("r{round}")));
        let mut counter = 0;
        let mut version: Vec<NewMessage> = Vec::new();
        let (mut rewritten, mut revisions) = (0, 0);
        for _ in 0..rng.range(2, 14) {
            version = next_version(&mut rng, &version, &mut counter);
            if version.is_empty() {
                continue; // a transcript with no message makes no chat
            }
            let r = import::import_sessions(&store, "o", &[session(version.clone())], |_| {}).unwrap();
            rewritten += r.sessions_rewritten;
            all_extended += r.sessions_extended;
            revisions += 1;
            // After every import the chat is that version, exactly.
            let clean = open(&tmp.path().join(format!("c{round}-{revisions}")));
            import::import_sessions(&clean, "o", &[session(version.clone())], |_| {}).unwrap();
            assert_eq!(content(&store, "prop:1"), content(&clean, "prop:1"), "seed {s} round {round}");
            drop(clean);
            std::fs::remove_dir_all(tmp.path().join(format!("c{round}-{revisions}"))).unwrap();
        }
        // Every rewrite is a revision of its own: the chat's revision counts them.
        if revisions > 0 {
            let (id, _) = import::imported_chats(&store, "o").unwrap()["prop:1"];
            assert_eq!(store.chat("o", id).unwrap().revision(), rewritten, "seed {s} round {round}");
        }
        all_rewritten += rewritten;
    }
    assert!(
        all_rewritten > 5 && all_extended > 5,
        "the rounds rewrote {all_rewritten} and grew {all_extended} times"
    );
}

#[test]
fn two_files_of_one_import_claiming_the_same_session_are_reported_and_the_later_one_is_the_chat() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(&tmp.path().join("s"));
    let (a, b) = (tmp.path().join("a.jsonl"), tmp.path().join("b.jsonl"));
    std::fs::write(&a, claude_lines("dup", "list the files").join("\n") + "\n").unwrap();
    std::fs::write(&b, claude_lines("dup", "delete the files").join("\n") + "\n").unwrap();
    let mut sessions = import::parse_file(&a, Format::Auto).unwrap().sessions;
    sessions.extend(import::parse_file(&b, Format::Auto).unwrap().sessions);
    let r = import::import_sessions(&store, "o", &sessions, |_| {}).unwrap();
    let [conflict] = &r.key_conflicts[..] else { panic!("{:?}", r.key_conflicts) };
    assert_eq!(conflict.file, b);
    let msg = conflict.to_string();
    assert!(
        msg.contains("a.jsonl") && msg.contains("expected one transcript per session, found two"),
        "{msg}"
    );
    assert_eq!((r.sessions_new, r.sessions_rewritten), (1, 1));
    let clean = open(&tmp.path().join("clean"));
    import::import_sessions(&clean, "o", &sessions[1..], |_| {}).unwrap();
    assert_eq!(content(&store, "claude-code:dup"), content(&clean, "claude-code:dup"));
}
