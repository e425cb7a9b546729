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

/// Issue 34: a session longer than [`import::CHUNK`] messages is written a chunk to a
/// transaction, so that memory does not grow with it. The chat ends whole and unmarked; the
/// chat being written holds a bounded number of entries; a re-import compares it a chunk at a
/// time (unchanged, grown, rewritten inside a later chunk); and a chat an interrupted import
/// left holding a prefix, marked [`import::INCOMPLETE`], is completed and unmarked by the next.
#[test]
fn a_session_longer_than_a_chunk_is_written_in_chunks_whole_and_a_prefix_left_marked_is_completed() {
    let tmp = tempfile::tempdir().unwrap();
    let chunk = import::CHUNK;
    let mut rng = Rng::new(seed(0x34_c4a2));
    let n = 2 * chunk + 777;
    let msgs: Vec<NewMessage> = (0..n as u64).map(|i| random_message(&mut rng, i)).collect();
    let store = open(&tmp.path().join("a"));
    let r = import::import_sessions(&store, "o", &[session(msgs.clone())], |_| {}).unwrap();
    assert_eq!((r.sessions_new, r.messages), (1, n as u64));
    let (id, len) = import::imported_chats(&store, "o").unwrap()["prop:1"];
    assert_eq!(len, n as u64);
    let chat = store.chat("o", id).unwrap();
    assert!(!chat.meta().extra.contains_key(import::INCOMPLETE), "unmarked once whole");
    // The entries written leave memory once indexed (at most two chunks' worth wait for it,
    // plus the chunk being written).
    let resident = chat.snapshot().resident_entries();
    assert!(resident <= 3 * chunk, "{resident} entries in memory after writing {n}");

    // The same transcript again: nothing added; grown: the rest appended.
    let r = import::import_sessions(&store, "o", &[session(msgs.clone())], |_| {}).unwrap();
    assert_eq!((r.sessions_unchanged, r.messages), (1, 0));
    let mut grown = msgs.clone();
    grown.extend((0..10).map(|i| random_message(&mut rng, n as u64 + i)));
    let r = import::import_sessions(&store, "o", &[session(grown.clone())], |_| {}).unwrap();
    assert_eq!((r.sessions_extended, r.messages), (1, 10));
    // Rewritten inside the second chunk: cut there, the rest appended as a revision.
    let mut changed = grown.clone();
    changed[chunk + 5] = NewMessage::user("changed in the second chunk");
    let r = import::import_sessions(&store, "o", &[session(changed.clone())], |_| {}).unwrap();
    assert_eq!(r.sessions_rewritten, 1);
    assert_eq!(r.messages_replaced, (grown.len() - chunk - 5) as u64);
    let clean = open(&tmp.path().join("clean"));
    import::import_sessions(&clean, "o", &[session(changed.clone())], |_| {}).unwrap();
    assert_eq!(content(&store, "prop:1"), content(&clean, "prop:1"));

    // An import cut off after its first chunk: the chat holds a prefix, marked.
    let cut = open(&tmp.path().join("cut"));
    let mut meta = undertext::ChatMeta::default();
    meta.extra.insert(import::KEY.into(), "prop:1".into());
    meta.extra.insert(import::INCOMPLETE.into(), "true".into());
    let id = cut.create_chat("o", meta).unwrap();
    cut.chat("o", id).unwrap().append_batch(changed[..chunk].to_vec()).unwrap();
    let r = import::import_sessions(&cut, "o", &[session(changed.clone())], |_| {}).unwrap();
    assert_eq!((r.sessions_extended, r.messages), (1, (changed.len() - chunk) as u64));
    assert!(!cut.chat("o", id).unwrap().meta().extra.contains_key(import::INCOMPLETE));
    assert_eq!(content(&cut, "prop:1"), content(&clean, "prop:1"));
    // Cut off after its last chunk, before the mark was cleared: the next import clears it.
    let mut meta = cut.chat("o", id).unwrap().meta();
    meta.extra.insert(import::INCOMPLETE.into(), "true".into());
    cut.chat("o", id).unwrap().set_meta(meta).unwrap();
    let r = import::import_sessions(&cut, "o", &[session(changed.clone())], |_| {}).unwrap();
    assert_eq!((r.sessions_unchanged, r.messages), (1, 0));
    assert!(!cut.chat("o", id).unwrap().meta().extra.contains_key(import::INCOMPLETE));
}

/// Every chat of `owner` by import key: its metadata and messages (role, parts, turn, time).
fn chats_of(store: &Store) -> Vec<(String, String, Vec<String>)> {
    let mut out: Vec<_> = import::imported_chats(store, "o")
        .unwrap()
        .into_iter()
        .map(|(key, (id, _))| {
            let chat = store.chat("o", id).unwrap();
            let meta = format!("{:?}", chat.meta());
            let msgs = chat
                .snapshot()
                .messages_with_hidden()
                .unwrap()
                .iter()
                .map(|m| format!("{:?} {:?} {} {} {}", m.role, m.parts, m.turn, m.at_ms, m.revision))
                .collect();
            (key, meta, msgs)
        })
        .collect();
    out.sort();
    out
}

/// A Claude Code session of `n` messages: a user task, then tool calls and results (parallel
/// calls now and then: call, result, call, result in one response), user turns, lines without
/// a time, and a summary line titling it at the end.
fn long_claude_session(n: u64, variant: u64) -> String {
    let mut lines = Vec::new();
    let mut line = |v: serde_json::Value| lines.push(v.to_string());
    let ts = |i: u64| {
        format!(
            "2026-02-11T{:02}:{:02}:{:02}.{:03}Z",
            (i / 3_600_000) % 24,
            (i / 60_000) % 60,
            (i / 1000) % 60,
            i % 1000
        )
    };
    line(
        serde_json::json!({"type": "user", "sessionId": "long", "timestamp": ts(0), "message": {"role": "user", "content": "fix the parser"}}),
    );
    let mut i = 1;
    while i < n {
        let text = if i % 997 == 0 { format!("turn {i} v{variant}") } else { format!("turn {i}") };
        let time = if i % 13 == 0 { serde_json::Value::Null } else { serde_json::Value::String(ts(i)) };
        match i % 50 {
            0 => line(
                serde_json::json!({"type": "user", "sessionId": "long", "timestamp": time, "message": {"role": "user", "content": text}}),
            ),
            _ => {
                let id = format!("m{i}");
                let calls = if i % 7 == 0 { 2 } else { 1 };
                for c in 0..calls {
                    line(
                        serde_json::json!({"type": "assistant", "sessionId": "long", "timestamp": time, "message": {"id": id, "role": "assistant", "content": [
                        {"type": "tool_use", "id": format!("t{i}-{c}"), "name": "Bash", "input": {"command": text}}]}}),
                    );
                    line(
                        serde_json::json!({"type": "user", "sessionId": "long", "timestamp": time, "message": {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": format!("t{i}-{c}"), "content": format!("ok {i} {c}")}]}}),
                    );
                }
            }
        }
        i += 2;
    }
    line(serde_json::json!({"type": "summary", "summary": format!("long session v{variant}")}));
    lines.join("\n") + "\n"
}

/// Issue 34: a JSONL transcript read a line at a time (`import::import_streaming`, what the
/// CLI does for files over `import::STREAM_MIN_BYTES`) becomes the same chat, with the same
/// report, as the file parsed whole and imported (`parse_file` + `import_sessions`): every
/// Claude Code transcript of the shared set, then a long session of several chunks imported
/// new, again unchanged, grown, rewritten inside a later chunk, and cut short.
#[test]
fn a_transcript_read_a_line_at_a_time_is_the_chat_and_report_of_the_file_parsed_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let (whole, lines) = (open(&tmp.path().join("whole")), open(&tmp.path().join("lines")));
    let import_both = |path: &Path| {
        let parsed = import::parse_file(path, Format::Auto).unwrap();
        let r = import::import_sessions(&whole, "o", &parsed.sessions, |_| {}).unwrap();
        let st = import::import_streaming(&lines, "o", path, parsed.format).unwrap();
        assert_eq!(st.report, r, "{}", path.display());
        assert_eq!(st.problems, parsed.problems, "{}", path.display());
        let s = st.session.unwrap();
        let p = &parsed.sessions[0];
        assert_eq!(st.messages, p.messages.len() as u64);
        assert_eq!((&s.key, &s.title, &s.model), (&p.key, &p.title, &p.model));
        assert_eq!(
            (s.tool_results, s.tool_result_bytes, s.tool_calls),
            (p.tool_results, p.tool_result_bytes, p.tool_calls)
        );
        r
    };
    let dir = undertext_tests::transcripts::transcripts_dir().join("claude_code");
    let files = import::transcript_files(&[dir]).unwrap();
    assert!(files.len() >= 10, "{} Claude Code transcripts", files.len());
    for f in &files {
        import_both(f);
    }
    assert_eq!(chats_of(&lines), chats_of(&whole));

    let n = 2 * import::CHUNK as u64 + 1_000;
    let file = tmp.path().join("long.jsonl");
    for (variant, len, want) in [
        (0, n, "new"),
        (0, n, "unchanged"),
        (0, n + 300, "grown"),
        (1, n + 300, "rewritten"),
        (1, n - 500, "cut"),
    ] {
        std::fs::write(&file, long_claude_session(len, variant)).unwrap();
        let r = import_both(&file);
        let got = [r.sessions_new, r.sessions_unchanged, r.sessions_extended, r.sessions_rewritten];
        let at = ["new", "unchanged", "grown", "rewritten"].iter().position(|w| *w == want).unwrap_or(3);
        assert_eq!(got[at], 1, "{want}: {r:?}");
        assert_eq!(chats_of(&lines), chats_of(&whole), "{want}");
    }
    let (id, _) = import::imported_chat(&lines, "o", "claude-code:long").unwrap().unwrap();
    let chat = lines.chat("o", id).unwrap();
    assert!(!chat.meta().extra.contains_key(import::INCOMPLETE));
    assert!(chat.snapshot().resident_entries() <= 3 * import::CHUNK);
}
