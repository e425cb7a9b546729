//! Claims of the Codex CLI rollout importer, on a fixture written from the format's
//! description in `shared/data/transcripts/README.md` (no sample ships): one session keyed by
//! `session_meta.payload.id`; `function_call` / `custom_tool_call` paired with their outputs
//! by `call_id`; `event_msg` lines (which repeat the chat) and `reasoning` not imported; a
//! `compacted` line kept as a summary; detection without `--format`; a bad line reported
//! with its line number and skipped; and importing again adds nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext::import::{self, Format};
use undertext::{Durability, Options, Part, Role, Store, ToolContent};

const ROLLOUT: &str = r#"{"timestamp":"2025-09-01T10:00:00Z","type":"session_meta","payload":{"id":"0199-abcd","cwd":"/repo","originator":"codex_cli_rs"}}
{"timestamp":"2025-09-01T10:00:00Z","type":"turn_context","payload":{"cwd":"/repo","model":"gpt-5-codex"}}
{"timestamp":"2025-09-01T10:00:01Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"Why does the build fail?"}]}}
{"timestamp":"2025-09-01T10:00:01Z","type":"event_msg","payload":{"type":"user_message","message":"Why does the build fail?"}}
{"timestamp":"2025-09-01T10:00:02Z","type":"response_item","payload":{"type":"reasoning","summary":[],"encrypted_content":"gAAAA"}}
{"timestamp":"2025-09-01T10:00:03Z","type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{\"command\":[\"cargo\",\"build\"]}","call_id":"call_1"}}
{"timestamp":"2025-09-01T10:00:03Z","type":"response_item","payload":{"type":"custom_tool_call","name":"apply_patch","input":"*** Begin Patch","call_id":"call_2"}}
{"timestamp":"2025-09-01T10:00:09Z","type":"response_item","payload":{"type":"function_call_output","call_id":"call_1","output":"error[E0425]: cannot find value `x`\n --> src/main.rs:2:5"}}
{"timestamp":"2025-09-01T10:00:09Z","type":"response_item","payload":{"type":"custom_tool_call_output","call_id":"call_2","output":"Success. Updated src/main.rs"}}
{"timestamp":"2025-09-01T10:00:10Z","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":1200}}}}
this line is not JSON
{"timestamp":"2025-09-01T10:00:11Z","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Fixed: "},{"type":"output_text","text":"`x` was undefined."}]}}
{"timestamp":"2025-09-01T10:00:12Z","type":"compacted","payload":{"message":"The user asked about a failing build; fixed an undefined variable."}}
"#;

#[test]
fn a_codex_rollout_becomes_one_chat_with_calls_paired_by_call_id_and_a_bad_line_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rollout-2025-09-01.jsonl");
    std::fs::write(&path, ROLLOUT).unwrap();
    let parsed = import::parse_file(&path, Format::Auto).unwrap();
    assert_eq!(parsed.problems.len(), 1);
    assert_eq!(parsed.problems[0].line, 11);
    assert!(parsed.problems[0].to_string().contains("rollout-2025-09-01.jsonl:11:"));
    let [s] = &parsed.sessions[..] else { panic!("one session: {:?}", parsed.sessions) };
    assert_eq!(
        (s.format, s.key.as_str(), s.model.as_str()),
        (Format::Codex, "codex:0199-abcd", "gpt-5-codex")
    );
    assert_eq!(s.title, "Why does the build fail?");
    assert_eq!(s.tool_results, 2);
    let roles: Vec<Role> = s.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::Tool, Role::Assistant, Role::System]);
    // Both calls in one assistant message, each answered by its call id.
    let calls: Vec<(&str, &str)> = s.messages[1]
        .parts
        .iter()
        .map(|p| match p {
            Part::ToolCall { id, name, .. } => (id.as_str(), name.as_str()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(calls, [("call_1", "shell"), ("call_2", "apply_patch")]);
    let Part::ToolResult { call_id, content: ToolContent::Text(t), .. } = &s.messages[3].parts[0] else {
        panic!()
    };
    assert_eq!((call_id.as_str(), t.as_str()), ("call_2", "Success. Updated src/main.rs"));
    assert_eq!(s.messages[4].parts, [Part::Text("Fixed: `x` was undefined.".into())]);
    assert!(matches!(&s.messages[5].parts[0], Part::Summary(t) if t.contains("failing build")));

    let store = Store::open(dir.path().join("s"), Options::default().durability(Durability::None)).unwrap();
    let r = import::import_sessions(&store, "o", &parsed.sessions, |_| {}).unwrap();
    assert_eq!((r.sessions_new, r.messages, r.tool_results), (1, 6, 2));
    let again = import::import_sessions(&store, "o", &parsed.sessions, |_| {}).unwrap();
    assert_eq!((again.sessions_new, again.messages, again.sessions_unchanged), (0, 0, 1));
}

#[test]
fn a_claude_code_file_named_as_codex_is_refused_saying_what_was_expected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cc.jsonl");
    std::fs::write(
        &path,
        "{\"type\":\"user\",\"sessionId\":\"s1\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n",
    )
    .unwrap();
    let e = import::parse_file(&path, Format::Codex).unwrap_err().to_string();
    assert!(e.contains("not a Codex rollout") && e.contains("payload"), "{e}");
    assert_eq!(import::parse_file(&path, Format::Auto).unwrap().sessions[0].format, Format::ClaudeCode);
}
