//! Claims of the importers of issue 17, on hand-made fixtures in `tests/data/` written from
//! the formats' descriptions:
//! * mini-swe-agent's text trajectories follow mini-swe-agent's own rule: exactly one bash
//!   block is a tool call `bash` whose result is the next user message, text unchanged; zero
//!   or several blocks are no call, and the harness's complaint stays a user message;
//! * an OpenHands evaluation completion log is read from `fncall_messages` and
//!   `fncall_response`, not from the text-encoded `messages`;
//! * an OpenHands SDK conversation folder is one chat: actions and their observations are
//!   calls and results, parallel actions of one response one assistant message, and a
//!   `Condensation` a compaction record (and metadata), not a message;
//! * detection by shape, and a harness file that yields no tool call says so;
//! * per fixture, sessions, messages, tool calls and results as the rules count them; every
//!   tool result read back byte for byte with `read_context`; call/result pairs intact in the
//!   OpenAI and Anthropic renderings of the view.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::Value;
use undertext::Budget;
use undertext::import::{self, Format, Session};
use undertext::{Durability, Options, Part, Role, Store, ToolContent, Unit};

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data").join(rel)
}

const MINI: &str = "mini_swe_agent_text/acme__sums-17.traj.json";
const EVAL: &str =
    "openhands_eval/llm_completions/acme__widgets-3/claude-3-5-sonnet-20241022-1733000000.25.json";
const SDK: &str = "openhands_sdk/8d0f2c7e5a1b4e39b6a2f0c4d1e9a7b3";

fn only(rel: &str) -> Session {
    let p = import::parse_file(&data(rel), Format::Auto).unwrap();
    assert!(p.problems.is_empty(), "{rel}: {:?}", p.problems);
    let [s] = <[Session; 1]>::try_from(p.sessions).unwrap();
    s
}

fn roles(s: &Session) -> Vec<Role> {
    s.messages.iter().map(|m| m.role).collect()
}

/// (call id, name, args) of every call of message `i`.
fn calls(s: &Session, i: usize) -> Vec<(String, String, String)> {
    s.messages[i]
        .parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall { id, name, args } => Some((id.clone(), name.clone(), args.clone())),
            _ => None,
        })
        .collect()
}

/// (call id, text, is_error) of the result in message `i`.
fn result(s: &Session, i: usize) -> (String, String, bool) {
    match &s.messages[i].parts[..] {
        [Part::ToolResult { call_id, content: ToolContent::Text(t), is_error }] => {
            (call_id.clone(), t.clone(), *is_error)
        }
        other => panic!("message {i} is not one result: {other:?}"),
    }
}

fn raw(rel: &str) -> Value {
    serde_json::from_slice(&std::fs::read(data(rel)).unwrap()).unwrap()
}

#[test]
fn mini_swe_agent_text_one_bash_block_is_a_call_answered_by_the_next_user_message_others_are_not() {
    let s = only(MINI);
    assert_eq!(s.format, Format::MiniSweAgent);
    assert_eq!(s.title, "acme__sums-17");
    assert_eq!(s.model, "anthropic/claude-sonnet-4-20250514");
    use Role::*;
    // system, task, then: call+result, two blocks+complaint, no block+complaint, three
    // call+result pairs (a fix, a timeout notice, the submission).
    assert_eq!(
        roles(&s),
        [
            System, User, Assistant, Tool, Assistant, User, Assistant, User, Assistant, Tool, Assistant,
            Tool, Assistant, Tool
        ]
    );
    assert_eq!((s.messages.len(), s.tool_calls, s.tool_results), (14, 4, 4));
    let doc = raw(MINI);
    let text = |i: usize| doc["messages"][i]["content"].as_str().unwrap().to_string();
    // The assistant's text is kept whole; the call carries the block, trimmed.
    assert_eq!(s.messages[2].parts[0], Part::Text(text(2)));
    assert_eq!(calls(&s, 2), [("bash-2".into(), "bash".into(), r#"{"command":"cat src/sums.py"}"#.into())]);
    assert_eq!(result(&s, 3), ("bash-2".into(), text(3), false));
    // Two blocks, then none: format errors, no call; the complaints stay user messages.
    assert!(calls(&s, 4).is_empty() && calls(&s, 6).is_empty());
    assert_eq!(s.messages[5].parts, [Part::Text(text(5))]);
    assert_eq!(s.messages[7].parts, [Part::Text(text(7))]);
    // A timeout notice is the result of its call; so is the submission's output.
    assert_eq!(result(&s, 11), ("bash-10".into(), text(11), false));
    assert_eq!(result(&s, 13), ("bash-12".into(), text(13), false));
    let submit: Value = serde_json::from_str(&calls(&s, 12)[0].2).unwrap();
    assert_eq!(submit["command"], "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff");
}

#[test]
fn mini_swe_agent_without_trajectory_format_and_without_tool_messages_is_read_as_text() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("x.traj.json");
    let doc = serde_json::json!({"info": {}, "messages": [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "```bash\nls\n```"},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\na\n</output>"},
    ]});
    std::fs::write(&f, doc.to_string()).unwrap();
    let p = import::parse_file(&f, Format::Auto).unwrap();
    assert_eq!(
        (p.format, p.sessions[0].tool_calls, p.sessions[0].tool_results),
        (Format::MiniSweAgent, 1, 1)
    );
    // The real 1.1 trajectories (tool calling) keep their own calls and ids.
    let real = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/transcripts/mini_swe_agent/deepseek_reasoner_dev/pvlib__pvlib-python-1606.traj.json");
    let s = &import::parse_file(&real, Format::Auto).unwrap().sessions[0];
    assert_eq!((s.tool_calls, s.tool_results), (4, 4));
    assert!(
        s.messages
            .iter()
            .flat_map(|m| &m.parts)
            .all(|p| !matches!(p, Part::ToolCall { id, .. } if id.starts_with("bash-")))
    );
}

#[test]
fn a_mini_swe_agent_run_with_steps_but_no_readable_action_is_reported_not_passed_off_as_plain_chat() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("y.traj.json");
    let doc = serde_json::json!({"trajectory_format": "mini-swe-agent-1", "messages": [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "<bash>ls</bash>"},
        {"role": "user", "content": "Please always provide EXACTLY ONE action in triple backticks, found 0 actions."},
    ]});
    std::fs::write(&f, doc.to_string()).unwrap();
    let p = import::parse_file(&f, Format::Auto).unwrap();
    assert_eq!(p.sessions.len(), 1, "still imported");
    let [problem] = &p.problems[..] else { panic!("{:?}", p.problems) };
    assert_eq!(problem.line, 0);
    let msg = problem.to_string();
    assert!(
        msg.contains("y.traj.json") && msg.contains("mini-swe-agent") && msg.contains("expected tool calls"),
        "{msg}"
    );
}

#[test]
fn an_openhands_completion_log_is_read_from_fncall_messages_with_the_final_response() {
    let s = only(EVAL);
    assert_eq!(s.format, Format::OpenHands);
    assert_eq!(s.model, "claude-3-5-sonnet-20241022");
    use Role::*;
    assert_eq!(roles(&s), [System, User, Assistant, Tool, Assistant, Tool, Tool, Assistant, Tool, Assistant]);
    assert_eq!((s.tool_calls, s.tool_results), (5, 4));
    // Parallel calls in one message; a result in text blocks is their texts joined.
    let ids: Vec<String> = calls(&s, 4).into_iter().map(|c| c.0).collect();
    assert_eq!(ids, ["toolu_02", "toolu_03"]);
    assert_eq!(
        result(&s, 6),
        (
            "toolu_03".into(),
            "widgets/core.py:2:    def resize(self, width, height):\n[Command finished with exit code 0]"
                .into(),
            false
        )
    );
    // The final message is `fncall_response.choices[0].message`, with its call.
    assert_eq!(s.messages[9].parts[0], Part::Text("The fix is in place.".into()));
    assert_eq!(calls(&s, 9)[0].1, "finish");
    // Without `fncall_messages`, a log whose calls are only text says so.
    let tmp = tempfile::tempdir().unwrap();
    let mut doc = raw(EVAL);
    let obj = doc.as_object_mut().unwrap();
    obj.remove("fncall_messages");
    obj.remove("fncall_response");
    let f = tmp.path().join("text-only.json");
    std::fs::write(&f, doc.to_string()).unwrap();
    let p = import::parse_file(&f, Format::Auto).unwrap();
    assert_eq!((p.format, p.sessions[0].tool_calls), (Format::OpenHands, 0));
    assert_eq!(p.problems.len(), 1, "{:?}", p.problems);
    assert!(p.problems[0].reason.contains("read as openhands"), "{}", p.problems[0]);
    // A log of a model with native function calling has no `fncall_messages` (or a null
    // one): its `messages` carry the calls, and `response` the final message.
    let mut native = raw(EVAL);
    native["messages"] = native["fncall_messages"].clone();
    native["response"] = native["fncall_response"].clone();
    native["fncall_messages"] = Value::Null;
    native.as_object_mut().unwrap().remove("fncall_response");
    std::fs::write(&f, native.to_string()).unwrap();
    let p = import::parse_file(&f, Format::Auto).unwrap();
    assert!(p.problems.is_empty(), "{:?}", p.problems);
    assert_eq!((p.format, p.sessions[0].tool_calls, p.sessions[0].tool_results), (Format::OpenHands, 5, 4));
}

#[test]
fn an_openhands_sdk_folder_is_one_chat_of_actions_and_observations_and_a_condensation_is_no_message() {
    let s = only(SDK);
    assert_eq!(
        (s.format, s.key.as_str()),
        (Format::OpenHandsSdk, "openhands-sdk:8d0f2c7e-5a1b-4e39-b6a2-f0c4d1e9a7b3")
    );
    assert_eq!(s.model, "litellm_proxy/anthropic/claude-sonnet-4-20250514");
    assert_eq!(s.title, "Create hello.py that prints hello.");
    use Role::*;
    assert_eq!(
        roles(&s),
        [
            System, User, Assistant, Tool, Assistant, Tool, Tool, Assistant, Tool, User, Assistant, Tool,
            User, Assistant, Tool, Assistant
        ]
    );
    assert_eq!((s.messages.len(), s.tool_calls, s.tool_results), (16, 6, 6));
    // Two actions of one LLM response: one message, the thought then both calls.
    let ids: Vec<String> = calls(&s, 4).into_iter().map(|c| c.0).collect();
    assert_eq!(ids, ["toolu_b", "toolu_c"]);
    assert!(matches!(&s.messages[4].parts[0], Part::Text(t) if t.starts_with("Creating the file")));
    // An agent error answers its call as an error; observation blocks are joined.
    let (id, text, err) = result(&s, 6);
    assert_eq!((id.as_str(), err), ("toolu_c", true));
    assert!(text.starts_with("Error: the terminal session is busy"));
    assert_eq!(
        result(&s, 11).1,
        "The file /workspace/hello.py has been edited. Here's the result of running `cat -n` on a snippet:\n     1\tprint(\"hello world\")\n"
    );
    // The condensation forgot events 2..=7: messages 2..7.
    let [c] = &s.condensations[..] else { panic!("{:?}", s.condensations) };
    assert_eq!((c.from, c.to, c.contiguous, c.forgotten_events), (2, 7, true, 6));
    assert_eq!(c.summary, "Created /workspace/hello.py.");
}

fn store(dir: &Path) -> Store {
    // Every tool result above 16 bytes is archived, so each is read back with `read_context`.
    Store::open(dir, Options::default().durability(Durability::None).archive_threshold(16)).unwrap()
}

/// Every call is answered by the next message(s) and every result answers a call of the
/// assistant message just before: OpenAI (`tool_calls` then `role: "tool"` messages) and
/// Anthropic (`tool_use` blocks then `tool_result` blocks of the next user message).
fn pairs_intact(openai: &str, anthropic: &str) -> usize {
    let msgs: Vec<Value> = serde_json::from_str(openai).unwrap();
    let mut open: Vec<String> = Vec::new();
    let mut pairs = 0;
    for (i, m) in msgs.iter().enumerate() {
        if m["role"] == "tool" {
            let id = m["tool_call_id"].as_str().unwrap().to_string();
            assert!(open.contains(&id), "openai message {i}: result of {id} without its call just before");
            open.retain(|x| *x != id);
            pairs += 1;
            continue;
        }
        assert!(open.is_empty(), "openai message {i}: calls {open:?} left unanswered");
        for c in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            open.push(c["id"].as_str().unwrap().to_string());
        }
    }
    let doc: Value = serde_json::from_str(anthropic).unwrap();
    let msgs = doc["messages"].as_array().unwrap();
    let mut a_pairs = 0;
    for (i, m) in msgs.iter().enumerate() {
        let blocks = m["content"].as_array().unwrap();
        let uses: HashSet<&str> =
            blocks.iter().filter(|b| b["type"] == "tool_use").map(|b| b["id"].as_str().unwrap()).collect();
        if uses.is_empty() {
            continue;
        }
        assert_eq!(m["role"], "assistant");
        let Some(next) = msgs.get(i + 1) else { continue }; // the pending call of the last step
        assert_eq!(next["role"], "user", "anthropic message {}: calls not answered by a user message", i + 1);
        let results: HashSet<&str> = next["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "tool_result")
            .map(|b| b["tool_use_id"].as_str().unwrap())
            .collect();
        assert_eq!(uses, results, "anthropic message {i}: calls and the next message's results differ");
        a_pairs += results.len();
    }
    assert_eq!(pairs, a_pairs, "both renderings pair the same calls");
    pairs
}

#[test]
fn every_fixture_imports_with_its_counts_reads_back_byte_exact_and_renders_with_pairs_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let st = store(&tmp.path().join("s"));
    // (fixture, messages, tool calls, tool results, pairs in the view: the OpenHands log ends
    // with a pending call; the SDK folder's condensation squishes three pairs away)
    for (rel, n_msgs, n_calls, n_results, pairs) in
        [(MINI, 14, 4, 4, 4), (EVAL, 10, 5, 4, 4), (SDK, 16, 6, 6, 3)]
    {
        let s = only(rel);
        assert_eq!((s.messages.len(), s.tool_calls, s.tool_results), (n_msgs, n_calls, n_results), "{rel}");
        let r = import::import_sessions(&st, "o", std::slice::from_ref(&s), |_| {}).unwrap();
        assert_eq!((r.sessions_new, r.messages, r.tool_results), (1, n_msgs as u64, n_results), "{rel}");
        let (id, _) = import::imported_chats(&st, "o").unwrap()[&s.key];
        let chat = st.chat("o", id).unwrap();
        assert_eq!(chat.meta().extra[import::FORMAT], s.format.name());
        // Every tool result, read back whole, is the transcript's text.
        let mut archived = 0;
        for (m, want) in chat.messages().unwrap().iter().zip(&s.messages) {
            for (got, want) in m.parts.iter().zip(&want.parts) {
                let (
                    Part::ToolResult { content, .. },
                    Part::ToolResult { content: ToolContent::Text(text), .. },
                ) = (got, want)
                else {
                    continue;
                };
                let back = match content {
                    ToolContent::Archived { archive, .. } => {
                        archived += 1;
                        st.read_context("o", &archive.id, 0..archive.bytes, Unit::Bytes).unwrap()
                    }
                    ToolContent::Text(t) => t.clone(),
                };
                assert_eq!(&back, text, "{rel}: a result changed on the way");
            }
        }
        assert!(archived > 0, "{rel}: nothing was archived");
        let view = chat.view(&Budget::new(200_000, 8_000)).unwrap();
        assert_eq!(pairs_intact(&view.to_openai_json(), &view.to_anthropic_json()), pairs, "{rel}");
        // Under tight windows the guard previews results (or refuses): the pairs stay intact.
        let mut guarded = 0;
        for window in (300..3_000).step_by(100) {
            if let Ok(view) = chat.view(&Budget::new(window, 200)) {
                pairs_intact(&view.to_openai_json(), &view.to_anthropic_json());
                guarded += usize::from(!matches!(view.decision(), undertext::Decision::Fits));
            }
        }
        assert!(guarded > 0, "{rel}: no window between 300 and 3,000 tokens made the guard act");
    }
}

#[test]
fn an_openhands_condensation_becomes_a_compaction_record_and_metadata_and_is_not_recorded_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let st = store(&tmp.path().join("s"));
    let s = only(SDK);
    let r = import::import_sessions(&st, "o", std::slice::from_ref(&s), |_| {}).unwrap();
    assert_eq!((r.compactions, r.compactions_refused.len()), (1, 0), "{:?}", r.compactions_refused);
    let (id, _) = import::imported_chats(&st, "o").unwrap()[&s.key];
    let chat = st.chat("o", id).unwrap();
    let meta: Value = serde_json::from_str(&chat.meta().extra[import::CONDENSATIONS]).unwrap();
    assert_eq!(
        meta,
        serde_json::json!([{"from": 2, "to": 7, "forgotten": 6, "summary": "Created /workspace/hello.py.", "applied": true}])
    );
    // The model view shows the summary in place of the forgotten messages; nothing is lost.
    let view = chat.view(&Budget::new(200_000, 8_000)).unwrap();
    let openai = view.to_openai_json();
    assert!(openai.contains("Created /workspace/hello.py."), "{openai}");
    assert!(!openai.contains("ls -la /workspace"), "the forgotten call is still in the view");
    assert_eq!(chat.len(), 16, "the messages themselves are untouched");
    let again = import::import_sessions(&st, "o", std::slice::from_ref(&s), |_| {}).unwrap();
    assert_eq!((again.compactions, again.sessions_unchanged, again.messages), (0, 1, 0));
}

#[test]
fn a_condensation_inside_the_last_two_user_turns_is_kept_as_metadata_and_the_refusal_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    // The fixture without its last two user messages: everything is in the protected tail.
    let conv = tmp.path().join("conv");
    std::fs::create_dir_all(conv.join("events")).unwrap();
    for f in std::fs::read_dir(data(SDK).join("events")).unwrap() {
        let f = f.unwrap();
        let name = f.file_name().to_string_lossy().into_owned();
        let n: u32 = name["event-".len().."event-".len() + 5].parse().unwrap();
        if n <= 11 {
            std::fs::copy(f.path(), conv.join("events").join(&name)).unwrap();
        }
    }
    let p = import::parse_file(&conv, Format::Auto).unwrap();
    assert_eq!(p.format, Format::OpenHandsSdk);
    let st = store(&tmp.path().join("s"));
    let r = import::import_sessions(&st, "o", &p.sessions, |_| {}).unwrap();
    assert_eq!(r.compactions, 0);
    let [why] = &r.compactions_refused[..] else { panic!("{:?}", r.compactions_refused) };
    assert!(why.contains("protected") && why.contains(import::CONDENSATIONS), "{why}");
    let (id, _) = import::imported_chats(&st, "o").unwrap()[&p.sessions[0].key];
    let meta = st.chat("o", id).unwrap().meta().extra[import::CONDENSATIONS].clone();
    assert!(meta.contains("\"applied\":false") && meta.contains("Created /workspace/hello.py."), "{meta}");
}

#[test]
fn formats_are_detected_by_shape_and_a_single_sdk_event_file_is_refused_naming_the_folder() {
    assert_eq!(import::parse_file(&data(MINI), Format::Auto).unwrap().format, Format::MiniSweAgent);
    assert_eq!(import::parse_file(&data(EVAL), Format::Auto).unwrap().format, Format::OpenHands);
    assert_eq!(import::parse_file(&data(SDK), Format::Auto).unwrap().format, Format::OpenHandsSdk);
    let event = data(SDK).join("events/event-00002-e02-4b1c.json");
    let e = import::parse_file(&event, Format::Auto).unwrap_err().to_string();
    assert!(
        e.contains("OpenHands SDK conversation") && e.contains("expected the conversation's folder"),
        "{e}"
    );
    let e = import::parse_file(&data(SDK), Format::Codex).unwrap_err().to_string();
    assert!(e.contains("expected a file, found a folder"), "{e}");
    // A walk over `tests/data` finds the folder as one input, not its event files.
    let w = import::walk(&[data("openhands_sdk")]).unwrap();
    assert_eq!(w.files, [data(SDK)]);
    assert!(w.problems.is_empty());
}

#[test]
fn a_condensation_over_messages_a_reimport_rewrote_is_recorded_again() {
    let tmp = tempfile::tempdir().unwrap();
    let conv = tmp.path().join("conv");
    std::fs::create_dir_all(conv.join("events")).unwrap();
    std::fs::copy(data(SDK).join("base_state.json"), conv.join("base_state.json")).unwrap();
    for f in std::fs::read_dir(data(SDK).join("events")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), conv.join("events").join(f.file_name())).unwrap();
    }
    let st = store(&tmp.path().join("s"));
    let first =
        import::import_sessions(&st, "o", &import::parse_file(&conv, Format::Auto).unwrap().sessions, |_| {});
    assert_eq!(first.unwrap().compactions, 1);
    // The observation of event 3 (message 3, inside the condensed range) changes.
    let e3 = conv.join("events/event-00003-e03-4b1c.json");
    let text = std::fs::read_to_string(&e3).unwrap().replace("README.md", "NOTES.md");
    std::fs::write(&e3, text).unwrap();
    let r =
        import::import_sessions(&st, "o", &import::parse_file(&conv, Format::Auto).unwrap().sessions, |_| {})
            .unwrap();
    assert_eq!((r.sessions_rewritten, r.messages_replaced, r.compactions), (1, 13, 1));
}

/// A copy of the SDK fixture in `dir`.
fn sdk_copy(dir: &Path) -> PathBuf {
    let conv = dir.join("conv");
    std::fs::create_dir_all(conv.join("events")).unwrap();
    std::fs::copy(data(SDK).join("base_state.json"), conv.join("base_state.json")).unwrap();
    for f in std::fs::read_dir(data(SDK).join("events")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), conv.join("events").join(f.file_name())).unwrap();
    }
    conv
}

#[test]
fn a_damaged_sdk_folder_imports_what_it_can_and_names_every_event_it_skipped() {
    let damage: [(&str, &[u8]); 4] = [
        ("cut", b"{\"kind\": \"ActionEvent\", \"id\": "),
        ("list", b"[1, 2]"),
        (
            "wrong types",
            br#"{"kind": "ActionEvent", "id": 5, "thought": 3, "tool_call": "x", "llm_response_id": []}"#,
        ),
        ("bad utf-8", b"{\"kind\": \"MessageEvent\", \"llm_message\": {\"content\": \"\xC3\x28\"}}"),
    ];
    for i in 0..20 {
        for (what, bytes) in damage {
            let tmp = tempfile::tempdir().unwrap();
            let conv = sdk_copy(tmp.path());
            let f = std::fs::read_dir(conv.join("events"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("event-{i:05}")))
                .unwrap();
            std::fs::write(&f, bytes).unwrap();
            let p = import::parse_file(&conv, Format::Auto).unwrap();
            let s = &p.sessions[0];
            assert!(s.messages.len() <= 17, "event {i} {what}");
            for pr in &p.problems {
                assert!(pr.to_string().contains("expected"), "event {i} {what}: {pr}");
            }
            if what != "wrong types" {
                assert!(p.problems.iter().any(|pr| pr.file == f), "event {i} {what}: {:?}", p.problems);
            }
            // Whatever was read imports (call arguments stay JSON).
            let st = store(&tmp.path().join("s"));
            import::import_sessions(&st, "o", &p.sessions, |_| {}).unwrap();
        }
    }
    // A FIFO or a folder among the events is skipped with a problem, never read.
    let tmp = tempfile::tempdir().unwrap();
    let conv = sdk_copy(tmp.path());
    assert!(
        std::process::Command::new("mkfifo")
            .arg(conv.join("events/event-00020-fifo.json"))
            .status()
            .unwrap()
            .success()
    );
    std::fs::create_dir(conv.join("events/event-00021-dir.json")).unwrap();
    std::fs::write(conv.join("events/notes.json"), "{}").unwrap();
    let p = import::parse_file(&conv, Format::Auto).unwrap();
    assert_eq!(p.sessions[0].messages.len(), 16);
    let mut reasons: Vec<String> = p.problems.iter().map(ToString::to_string).collect();
    reasons.sort();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(
        reasons[0].contains("event-00020-fifo.json: expected a regular file, found a FIFO"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].contains("event-00021-dir.json: expected a regular file, found a folder"),
        "{reasons:?}"
    );
    assert!(
        reasons[2].contains("notes.json: expected an event file named event-NNNNN-<id>.json"),
        "{reasons:?}"
    );
    // A condensation naming events that are not there covers the messages of those that are.
    let c = conv.join("events/event-00009-e09-4b1c.json");
    let text =
        std::fs::read_to_string(&c).unwrap().replace("e02-4b1c", "gone-1").replace("e07-4b1c", "gone-2");
    std::fs::write(&c, text).unwrap();
    std::fs::remove_file(conv.join("events/event-00020-fifo.json")).unwrap();
    let s = import::parse_file(&conv, Format::Auto).unwrap().sessions;
    // Events 2 and 7 are unknown now: it forgot messages 3..6 (events 3 to 6), named 6.
    let c = &s[0].condensations[0];
    assert_eq!((c.from, c.to, c.contiguous, c.forgotten_events), (3, 6, true, 6));
}
