//! Claims of the importers on every file of `shared/data/transcripts`: per format, the
//! sessions and tool results a store holds after the import equal `MANIFEST.txt` (and so do
//! the bytes of those results); every file's own counts equal its row; importing again adds
//! nothing; side chains point at their parent's chat; the store checks clean; and every
//! stored tool result reads back as the transcript's text, byte for byte, whether it stayed
//! inline or was archived. The texts are cross-checked against the independent extractor of
//! `undertext_tests::transcripts`.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use undertext::import::{self, Format, Session};
use undertext::{Durability, Options, Part, Store, ToolContent, Unit};
use undertext_tests::transcripts;

fn manifest_format(f: Format) -> &'static str {
    match f {
        Format::ClaudeCode => "claude_code_jsonl",
        Format::MiniSweAgent => "mini_swe_agent_traj_json",
        Format::SweAgent => "swe_agent_traj",
        Format::TauBench => "tau_bench_json",
        other => panic!("no sample of {other} ships"),
    }
}

fn parse_all(dir: &Path) -> Vec<(PathBuf, Vec<Session>)> {
    let files = import::transcript_files(&[dir.to_path_buf()]).unwrap();
    files
        .into_iter()
        .map(|f| {
            let p = import::parse_file(&f, Format::Auto).unwrap();
            assert!(p.problems.is_empty(), "{}: {:?}", f.display(), p.problems);
            (f, p.sessions)
        })
        .collect()
}

fn store(dir: &Path) -> Store {
    Store::open(dir, Options::default().durability(Durability::None)).unwrap()
}

#[test]
fn every_file_parses_to_the_sessions_and_tool_results_its_manifest_row_counts() {
    let dir = transcripts::transcripts_dir();
    let rows: HashMap<PathBuf, transcripts::ManifestRow> =
        transcripts::manifest(&dir).into_iter().map(|r| (r.file.clone(), r)).collect();
    let parsed = parse_all(&dir);
    assert_eq!(parsed.len(), rows.len(), "one MANIFEST row per transcript file");
    for (file, sessions) in &parsed {
        let rel = file.strip_prefix(&dir).unwrap();
        let row = rows.get(rel).unwrap_or_else(|| panic!("{} has no MANIFEST row", rel.display()));
        let format = sessions[0].format;
        assert_eq!(manifest_format(format), row.format, "{}: detected {format}", rel.display());
        assert_eq!(sessions.len() as u64, row.sessions, "{}: sessions", rel.display());
        let results: u64 = sessions.iter().map(|s| s.tool_results).sum();
        let bytes: u64 = sessions.iter().map(|s| s.tool_result_bytes).sum();
        assert_eq!(results, row.tool_results, "{}: tool results", rel.display());
        assert_eq!(bytes, row.tool_result_bytes, "{}: tool result bytes", rel.display());
    }
}

#[test]
fn an_import_of_every_transcript_holds_the_manifest_counts_adds_nothing_again_and_reads_back_exactly() {
    let dir = transcripts::transcripts_dir();
    let parsed = parse_all(&dir);
    let sessions: Vec<Session> = parsed.iter().flat_map(|(_, s)| s.iter().cloned()).collect();
    let tmp = tempfile::tempdir().unwrap();
    let store = store(tmp.path());
    let first = import::import_sessions(&store, "o", &sessions, |_| {}).unwrap();
    assert_eq!(first.sessions_new as usize, sessions.len());

    // What the store holds, per format, equals the manifest's totals.
    let mut want: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for r in transcripts::manifest(&dir) {
        let e = want.entry(r.format.clone()).or_default();
        e.0 += r.sessions;
        e.1 += r.tool_results;
        e.2 += r.tool_result_bytes;
    }
    let inv = import::inventory(&store, "o").unwrap();
    let got: BTreeMap<String, (u64, u64, u64)> = inv
        .per_format
        .iter()
        .map(|(k, f)| {
            let name = manifest_format(k.parse::<Format>().unwrap()).to_string();
            (name, (f.sessions, f.tool_results, f.tool_result_bytes))
        })
        .collect();
    assert_eq!(got, want);
    assert!(inv.archived_results > 0, "results over 8 KiB are archived");

    // Importing again adds nothing.
    let again = import::import_sessions(&store, "o", &sessions, |_| {}).unwrap();
    assert_eq!((again.sessions_new, again.messages, again.tool_results), (0, 0, 0));
    assert_eq!(again.sessions_unchanged as usize, sessions.iter().filter(|s| !s.messages.is_empty()).count());
    assert_eq!(import::inventory(&store, "o").unwrap(), inv);

    // Side chains name their parent's chat, when the parent's file ships.
    let chats = import::imported_chats(&store, "o").unwrap();
    let mut linked = 0;
    for s in sessions.iter().filter(|s| s.parent_key.is_some()) {
        let chat = store.chat("o", chats[&s.key].0).unwrap();
        let parent = s.parent_key.as_ref().unwrap();
        match chats.get(parent) {
            Some((pid, _)) => {
                assert_eq!(chat.meta().extra.get(import::PARENT_CHAT), Some(&pid.to_string()), "{}", s.key);
                linked += 1;
            }
            None => assert_eq!(chat.meta().extra.get(import::PARENT_CHAT), None),
        }
    }
    assert_eq!(linked, 11, "12 side chains ship, one of a session that does not");

    // Every tool result reads back as the transcript's text.
    let (mut inline, mut archived) = (0, 0);
    for s in &sessions {
        let chat = store.chat("o", chats[&s.key].0).unwrap();
        let stored = chat.messages().unwrap();
        assert_eq!(stored.len(), s.messages.len(), "{}", s.key);
        for (m, o) in stored.iter().zip(&s.messages) {
            assert_eq!(m.role, o.role);
            for (p, q) in m.parts.iter().zip(&o.parts) {
                let (
                    Part::ToolResult { content, call_id, .. },
                    Part::ToolResult { content: ToolContent::Text(text), call_id: want_id, .. },
                ) = (p, q)
                else {
                    assert_eq!(p, q);
                    continue;
                };
                assert_eq!(call_id, want_id);
                match content {
                    ToolContent::Text(t) => {
                        assert_eq!(t, text);
                        inline += 1;
                    }
                    ToolContent::Archived { archive, .. } => {
                        let back =
                            store.read_context("o", &archive.id, 0..archive.bytes, Unit::Bytes).unwrap();
                        assert_eq!(back, *text, "{} seq {}", s.key, m.seq);
                        archived += 1;
                    }
                }
            }
        }
    }
    assert_eq!(inline + archived, 3182);
    assert!(store.check().unwrap().is_ok());
}

#[test]
fn the_imported_texts_equal_the_independent_extractor_s() {
    // The extractor joins a result's text blocks with "\n", the importer (as MANIFEST.txt
    // counts) without: compare the results of one block, and the count of all.
    let dir = transcripts::transcripts_dir();
    let mut ours: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
    for (f, sessions) in parse_all(&dir) {
        let texts = sessions
            .iter()
            .flat_map(|s| &s.messages)
            .flat_map(|m| &m.parts)
            .filter_map(|p| match p {
                Part::ToolResult { content: ToolContent::Text(t), .. } => Some(t.clone()),
                _ => None,
            })
            .collect();
        ours.insert(f, texts);
    }
    let mut theirs: BTreeMap<PathBuf, Vec<transcripts::ToolResult>> = BTreeMap::new();
    for r in transcripts::extract(&dir).into_iter().filter(|r| r.in_manifest) {
        theirs.entry(r.path.clone()).or_default().push(r);
    }
    let mut compared = 0;
    for (f, rs) in &theirs {
        let mine = &ours[f];
        assert_eq!(mine.len(), rs.len(), "{}", f.display());
        for (a, b) in mine.iter().zip(rs) {
            if b.text_blocks <= 1 {
                assert_eq!(*a, b.text, "{}", f.display());
                compared += 1;
            } else {
                assert_eq!(a.len() + b.text_blocks - 1, b.text.len(), "{}", f.display());
            }
        }
    }
    assert!(compared > 3100, "compared {compared}");
}

/// A real mini-swe-agent run (`pvlib__pvlib-python-1606`), with the harness's format errors
/// put back where mini-swe-agent sends them: after an answer without an action, a user
/// message with its `format_error_template`. The shipped runs hold none; the rest of the
/// file is unchanged.
fn with_format_errors(v: &mut serde_json::Value) -> Vec<String> {
    let errors = [
        "Please always provide EXACTLY ONE action in triple backticks, found 0 actions.\n\nPlease format your action in triple backticks as shown in <response_example>.",
        "Please always provide EXACTLY ONE action in triple backticks, found 2 actions.\n\nPlease format your action in triple backticks as shown in <response_example>.",
    ];
    let list = v["messages"].as_array_mut().unwrap();
    // After the first step's observation (system, task, assistant, tool).
    let at = list.iter().position(|m| m["role"] == "tool").unwrap() + 1;
    let mut inserted = Vec::new();
    for (k, e) in errors.iter().enumerate() {
        let answer = serde_json::json!({"role": "assistant", "content": format!("THOUGHT: I should look again ({k}).")});
        let error = serde_json::json!({"role": "user", "content": e});
        list.insert(at + 2 * k, answer);
        list.insert(at + 2 * k + 1, error);
        inserted.push(e.to_string());
    }
    inserted
}

#[test]
fn harness_feedback_in_a_mini_swe_agent_run_starts_no_turn_and_the_task_stays_the_one_turn() {
    let file = transcripts::transcripts_dir()
        .join("mini_swe_agent/deepseek_reasoner_dev/pvlib__pvlib-python-1606.traj.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let task =
        v["messages"].as_array().unwrap().iter().find(|m| m["role"] == "user").unwrap()["content"].clone();
    let errors = with_format_errors(&mut v);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("pvlib__pvlib-python-1606.traj.json");
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let parsed = import::parse_file(&path, Format::Auto).unwrap();
    assert_eq!(parsed.format, Format::MiniSweAgent);
    let feedback: Vec<&undertext::NewMessage> =
        parsed.sessions[0].messages.iter().filter(|m| m.feedback).collect();
    assert_eq!(feedback.len(), errors.len(), "each format error is feedback, nothing else");
    let store_dir = tmp.path().join("store");
    {
        let store = store(&store_dir);
        import::import_sessions(&store, "o", &parsed.sessions, |_| {}).unwrap();
    }
    // Read back after a reopen: the flag is in the message records.
    let store = store(&store_dir);
    let (id, _) = import::imported_chat(&store, "o", &parsed.sessions[0].key).unwrap().unwrap();
    let msgs = store.chat("o", id).unwrap().messages().unwrap();
    let users: Vec<&undertext::Message> = msgs.iter().filter(|m| m.role == undertext::Role::User).collect();
    assert_eq!(users.len(), 1 + errors.len());
    let Part::Text(t) = &users[0].parts[0] else { panic!("the task is text") };
    assert_eq!(serde_json::Value::String(t.clone()), task);
    assert!(!users[0].feedback, "the task statement is not feedback");
    assert_eq!(users[0].turn, 1, "the task opens turn 1");
    for (m, e) in users[1..].iter().zip(&errors) {
        assert!(m.feedback, "message {} is marked", m.seq);
        assert_eq!(m.parts, vec![Part::Text(e.clone())]);
    }
    let turns: Vec<u64> = msgs.iter().map(|m| m.turn).collect();
    assert_eq!(msgs[0].role, undertext::Role::System);
    assert!(
        msgs[1..].iter().all(|m| m.turn == 1),
        "one turn, the task's (after the system prompt): {turns:?}"
    );
    // Importing the same file again adds nothing (the flag compares equal).
    let again = import::import_sessions(&store, "o", &parsed.sessions, |_| {}).unwrap();
    assert_eq!((again.sessions_new, again.messages), (0, 0));
}

#[test]
fn claude_code_is_meta_lines_are_feedback_and_the_shipped_loops_keep_their_task_unmarked() {
    let dir = transcripts::transcripts_dir();
    for (file, sessions) in parse_all(&dir) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for s in &sessions {
            let first_user = s.messages.iter().position(|m| m.starts_turn() || m.feedback);
            if let Some(i) = first_user
                && sessions[0].format != Format::ClaudeCode
            {
                assert!(!s.messages[i].feedback, "{}: the task is not feedback", file.display());
            }
            if s.format == Format::ClaudeCode {
                let marked = s.messages.iter().filter(|m| m.feedback).count();
                let meta = text
                    .lines()
                    .filter(|l| l.contains("\"isMeta\":true") && l.contains("\"type\":\"user\""))
                    .count();
                assert!(marked <= meta, "{}: {marked} marked, {meta} isMeta lines", file.display());
                if meta > 0 {
                    assert!(marked > 0, "{}: isMeta lines are feedback", file.display());
                }
            }
        }
    }
}
