//! The corpus of the `import` fuzz target, replayed (and its seeds regenerated).
//!
//! * `import_corpus_replays_without_panic` runs the target's checks (`fuzz/src/import.rs`,
//!   included with `#[path]`, the same file the fuzz target calls) on every file of
//!   `fuzz/corpus/import/` and `fuzz/regressions/import/`.
//! * `import_corpus_reaches_every_importer`: the corpus parses real-looking transcripts of
//!   every format into sessions with tool results, and holds files every importer refuses.
//! * `write_import_seed_corpus` (ignored) rewrites the `seed-*` files from the real
//!   transcripts in `shared/data/transcripts` (slices, shrunk copies, and a Codex rollout and
//!   OpenAI message lists derived from them, since no sample of those ships) and hand-made
//!   damage: `cargo test -p undertext-tests --test fuzz_corpus_import -- --ignored`.

#![allow(clippy::unwrap_used, reason = "test helpers outside #[test] fns: a failed unwrap is a failed test")]

#[path = "../../fuzz/src/import.rs"]
mod import;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};
use undertext::import::{Format, parse_bytes};
use undertext_tests::transcripts::transcripts_dir;
use undertext_tests::{files_in, fuzz_dir, replay_corpus};

/// Largest seed file.
const MAX_SEED: usize = 16 << 10;
/// Upper bound for the seeds together.
const SEED_BUDGET: usize = 400 << 10;

#[test]
fn import_corpus_replays_without_panic() {
    // Regenerate: `cargo test -p undertext-tests --test fuzz_corpus_import -- --ignored`.
    replay_corpus("import", 40, import::check);
}

/// For every explicit format the corpus holds a file that parses into a session with tool
/// results, and one that the importer refuses; auto detects every format somewhere.
#[test]
fn import_corpus_reaches_every_importer() {
    let mut with_results: BTreeMap<&str, usize> = BTreeMap::new();
    let mut refused: BTreeMap<&str, usize> = BTreeMap::new();
    let mut detected: BTreeMap<&str, usize> = BTreeMap::new();
    for f in files_in(&fuzz_dir().join("corpus/import")) {
        let data = std::fs::read(&f).unwrap();
        let Some((format, path, bytes)) = import::decode(&data) else { continue };
        match parse_bytes(Path::new(path), bytes, format) {
            Ok(p) => {
                for s in &p.sessions {
                    if format == Format::Auto {
                        *detected.entry(s.format.name()).or_default() += 1;
                    } else if s.tool_results > 0 {
                        *with_results.entry(format.name()).or_default() += 1;
                    }
                }
            }
            Err(_) => *refused.entry(format.name()).or_default() += 1,
        }
    }
    for name in &Format::NAMES[1..] {
        assert!(refused.contains_key(name), "no corpus file that {name} refuses");
        if *name == Format::OpenHandsSdk.name() {
            continue; // a folder format: every file is refused
        }
        assert!(with_results.contains_key(name), "no corpus file parses as {name} with tool results");
        assert!(detected.contains_key(name), "no corpus file auto-detected as {name}");
    }
    assert!(refused.contains_key("auto"), "no corpus file that detection refuses");
}

/// `s` cut to at most `n` bytes, at a character boundary.
fn cut_str(s: &str, n: usize) -> &str {
    let mut end = s.len().min(n);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `v` with every string cut to `max_str` bytes and every list to `max_arr` items. A string
/// holding JSON (tool-call arguments) is cut as a string too, and may stop being JSON.
fn shrink(v: &Value, max_str: usize, max_arr: usize) -> Value {
    match v {
        Value::String(s) => Value::String(cut_str(s, max_str).to_string()),
        Value::Array(a) => {
            Value::Array(a.iter().take(max_arr).map(|x| shrink(x, max_str, max_arr)).collect())
        }
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, x)| (k.clone(), shrink(x, max_str, max_arr))).collect())
        }
        other => other.clone(),
    }
}

/// `v` shrunk just enough to serialize within `budget` bytes.
fn shrink_to(v: &Value, budget: usize) -> Vec<u8> {
    let (mut s, mut a) = (400, 12);
    loop {
        let out = serde_json::to_vec(&shrink(v, s, a)).unwrap();
        if out.len() <= budget {
            return out;
        }
        (s, a) = (s * 3 / 4, (a - 1).max(2));
    }
}

/// The lines of a JSONL file that pass `keep`, each shrunk, joined until `budget` bytes.
fn shrink_lines(text: &str, skip: usize, keep: impl Fn(&Value) -> bool, budget: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for line in text.lines().skip(skip) {
        let v: Value = serde_json::from_str(line).unwrap();
        if !keep(&v) {
            continue;
        }
        let line = serde_json::to_vec(&shrink(&v, 240, 4)).unwrap();
        if out.len() + line.len() + 1 > budget {
            break;
        }
        out.extend_from_slice(&line);
        out.push(b'\n');
    }
    out
}

/// Whole lines of `bytes` from the start, at most `budget` bytes.
fn whole_lines(bytes: &[u8], budget: usize) -> Vec<u8> {
    let mut end = 0;
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'\n' {
            if i + 1 > budget {
                break;
            }
            end = i + 1;
        }
    }
    bytes[..end].to_vec()
}

/// `bytes` with `with` written over the byte at `at`.
fn damaged(bytes: &[u8], at: usize, with: &[u8]) -> Vec<u8> {
    let mut v = bytes[..at].to_vec();
    v.extend_from_slice(with);
    v.extend_from_slice(&bytes[at + 1..]);
    v
}

fn read(rel: &str) -> Vec<u8> {
    std::fs::read(transcripts_dir().join(rel)).unwrap()
}

fn json_lines(values: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in values {
        out.extend(serde_json::to_vec(v).unwrap());
        out.push(b'\n');
    }
    out
}

/// A Codex CLI rollout made from a Claude Code session's lines (no Codex sample ships):
/// user and assistant texts become `message` items, `tool_use` blocks `function_call`s
/// (every third a `custom_tool_call` with raw input), `tool_result` blocks their
/// `*_output`s, `thinking` blocks `reasoning`; with the session's id, model, `event_msg`
/// repeats and a `compacted` summary.
fn codex_from_claude(claude: &str, budget: usize) -> Vec<u8> {
    let lines: Vec<Value> = claude.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let sid = lines.iter().find_map(|v| v.get("sessionId")).cloned().unwrap_or(json!("s"));
    let model = lines.iter().find_map(|v| v.pointer("/message/model")).cloned().unwrap_or(json!("m"));
    let item = |ts: usize, ty: &str, payload: Value| json!({"timestamp": format!("t{ts}"), "type": ty, "payload": payload});
    let mut out = vec![
        item(0, "session_meta", json!({"id": sid, "cwd": "/work"})),
        item(1, "turn_context", json!({"model": model, "cwd": "/work"})),
    ];
    let mut customs = CallIds::default();
    for (i, v) in lines.iter().enumerate() {
        let text = |s: &str| cut_str(s, 240).to_string();
        match (v.get("type").and_then(Value::as_str), v.pointer("/message/content")) {
            (Some("user"), Some(Value::String(s))) => {
                let p = json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text(s)}]});
                out.push(item(i, "response_item", p));
                out.push(item(i, "event_msg", json!({"type": "user_message", "message": text(s)})));
            }
            (Some("user"), Some(Value::Array(blocks))) => {
                for b in blocks.iter().filter(|b| b.get("type") == Some(&json!("tool_result"))) {
                    let id = b.get("tool_use_id").cloned().unwrap_or(Value::Null);
                    let content = content_text(b.get("content"));
                    let (ty, output) = if customs.contains(&id) {
                        ("custom_tool_call_output", json!(text(&content)))
                    } else {
                        ("function_call_output", json!({"content": text(&content), "success": true}))
                    };
                    out.push(item(i, "response_item", json!({"type": ty, "call_id": id, "output": output})));
                }
            }
            (Some("assistant"), Some(Value::Array(blocks))) => {
                for b in blocks {
                    let p = match b.get("type").and_then(Value::as_str) {
                        Some("text") => json!({"type": "message", "role": "assistant",
                            "content": [{"type": "output_text", "text": text(b["text"].as_str().unwrap_or(""))}]}),
                        Some("thinking") => {
                            json!({"type": "reasoning", "summary": [], "encrypted_content": "gAAA"})
                        }
                        Some("tool_use") => {
                            let input = shrink(b.get("input").unwrap_or(&Value::Null), 200, 4);
                            if customs.len_all() % 3 == 2 {
                                customs.add(b["id"].clone(), true);
                                json!({"type": "custom_tool_call", "name": b["name"], "call_id": b["id"],
                                    "input": input.to_string()})
                            } else {
                                customs.add(b["id"].clone(), false);
                                json!({"type": "function_call", "name": b["name"], "call_id": b["id"],
                                    "arguments": input.to_string()})
                            }
                        }
                        _ => continue,
                    };
                    out.push(item(i, "response_item", p));
                }
            }
            _ => {}
        }
    }
    out.push(item(lines.len(), "compacted", json!({"message": "Summary: the tests pass."})));
    let mut bytes = json_lines(&out[..2]);
    for v in &out[2..] {
        let line = serde_json::to_vec(v).unwrap();
        if bytes.len() + line.len() + 1 > budget {
            break;
        }
        bytes.extend(line);
        bytes.push(b'\n');
    }
    bytes
}

/// Tool-use ids seen, and which became custom tool calls.
#[derive(Default)]
struct CallIds {
    all: Vec<(Value, bool)>,
}

impl CallIds {
    fn add(&mut self, id: Value, custom: bool) {
        self.all.push((id, custom));
    }
    fn len_all(&self) -> usize {
        self.all.len()
    }
    fn contains(&self, id: &Value) -> bool {
        self.all.iter().any(|(i, c)| *c && i == id)
    }
}

/// A content value as text: a string, or its blocks' texts joined.
fn content_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) => a.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect(),
        _ => String::new(),
    }
}

#[test]
#[ignore = "writes fuzz/corpus/import; run by hand to regenerate the seeds"]
fn write_import_seed_corpus() {
    use Format::*;
    let mut seeds: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add = |name: &str, format: Format, variant: u8, bytes: &[u8]| {
        let data = import::encode(format, variant, bytes);
        assert!(data.len() < MAX_SEED, "seed {name} has {} bytes", data.len());
        seeds.push((name.to_string(), data));
    };
    let budget = 12 << 10;

    // Claude Code: a whole small real session, slices of real sessions (raw and with long
    // strings cut), a side chain, a torn tail, and damage.
    let short = read("claude_code/spotter/short.jsonl");
    add("claude-short-whole", ClaudeCode, 0, &short);
    add("auto-claude-short", Auto, 0, &short);
    add("claude-short-torn", ClaudeCode, 0, &short[..6000]);
    let heavy = String::from_utf8(read("claude_code/spotter/tool_heavy.jsonl")).unwrap();
    let heavy_small = shrink_lines(&heavy, 0, |_| true, budget);
    add("claude-tool-heavy-shrunk", ClaudeCode, 0, &heavy_small);
    let main =
        String::from_utf8(read("claude_code/spotter/8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl")).unwrap();
    let convo =
        |v: &Value| matches!(v.get("type").and_then(Value::as_str), Some("user" | "assistant" | "summary"));
    add("claude-session-middle-shrunk", ClaudeCode, 0, &shrink_lines(&main, 200, convo, budget));
    let side = String::from_utf8(read(
        "claude_code/spotter/258c7280-ae70-4798-800f-63464d01a85d/subagents/agent-a881341.jsonl",
    ))
    .unwrap();
    let side_small = shrink_lines(&side, 0, |_| true, budget);
    add("claude-side-chain-shrunk", ClaudeCode, 1, &side_small);
    add("auto-claude-side-chain", Auto, 1, &side_small);
    add("claude-raw-prefix", ClaudeCode, 0, &whole_lines(main.as_bytes(), budget));
    add("claude-bad-utf8", ClaudeCode, 0, &damaged(&short, 3000, &[0xC3, 0x28]));
    add("claude-nul", ClaudeCode, 0, &damaged(&short, 500, &[0]));
    let odd = [
        json!({"type": "user", "sessionId": "s1", "message": {"role": "user", "content": 5}}),
        json!({"type": "assistant", "sessionId": "s1", "message": "not an object"}),
        json!({"type": "assistant", "message": {"id": "m1", "model": 7, "content": [
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": "ls -la"},
            {"type": "tool_use", "id": 9, "input": {"command": "pwd"}},
            {"type": "thinking", "thinking": "hm"}]}}),
        json!({"type": "user", "message": {"content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "a"}, {"type": "image"}], "is_error": "yes"}]}}),
        json!({"type": "assistant", "message": {"id": "m1", "content": "same id, a string"}}),
        json!({"type": "user", "message": {"content": []}}),
        json!({"type": "user", "message": {"content": [{"type": "tool_result"}]}}),
        json!({"type": "summary", "summary": 3}),
        json!({"type": "summary", "summary": "Title\nsecond line"}),
        json!({"type": "assistant", "isSidechain": true, "agentId": "a9", "message": {"content": null}}),
    ];
    add("claude-wrong-types", ClaudeCode, 1, &json_lines(&odd));
    add(
        "claude-not-objects",
        ClaudeCode,
        0,
        b"[1, 2]\n\"text\"\nnull\n\n   \n{\"type\": \"user\", \"sessionId\": \"x\"}\n{truncated\n42",
    );
    add("claude-no-claude-lines", ClaudeCode, 0, b"{\"a\": 1}\n{\"b\": 2}\n");
    add(
        "claude-crlf-blank",
        ClaudeCode,
        0,
        b"\r\n{\"type\":\"user\",\"sessionId\":\"c\",\"message\":{\"content\":\"hi\"}}\r\n\r\n",
    );

    // Codex: a rollout derived from a real Claude Code session (none ships), its torn tail,
    // and damage.
    let codex = codex_from_claude(&heavy, budget);
    add("codex-from-claude", Codex, 0, &codex);
    add("auto-codex", Auto, 2, &codex);
    add("codex-torn", Codex, 0, &codex[..codex.len() * 2 / 3]);
    add("codex-bad-utf8", Codex, 0, &damaged(&codex, codex.len() / 2, &[0xED, 0xA0, 0x80]));
    let odd = [
        json!({"type": "session_meta", "payload": {"id": 5}}),
        json!({"type": "turn_context", "payload": "gpt"}),
        json!({"type": "response_item", "payload": 5}),
        json!({"type": 7, "payload": {}}),
        json!({"type": "response_item", "payload": {"type": "message", "role": "tool", "content": "plain"}}),
        json!({"type": "response_item", "payload": {"type": "message", "role": "developer", "content": [{"x": 1}]}}),
        json!({"type": "response_item", "payload": {"type": "function_call", "arguments": {"cmd": ["ls"]}}}),
        json!({"type": "response_item", "payload": {"type": "custom_tool_call", "input": "*** Begin Patch", "call_id": "c2"}}),
        json!({"type": "response_item", "payload": {"type": "function_call_output", "call_id": 3, "output": [{"type": "text", "text": "o"}]}}),
        json!({"type": "response_item", "payload": {"type": "custom_tool_call_output", "call_id": "c2", "output": {"output": 5}}}),
        json!({"type": "compacted", "payload": {"replacement_history": []}}),
        json!({"type": "response_item"}),
    ];
    add("codex-wrong-types", Codex, 1, &json_lines(&odd));
    add("codex-claude-file", Codex, 0, &short);

    // OpenAI: message lists taken from a real tau-bench conversation and a real
    // mini-swe-agent run (none ships in plain OpenAI form), hand-made pairing cases, damage.
    let tau: Value = serde_json::from_slice(&read("tau_bench/gpt-4o-airline.json")).unwrap();
    let traj = Value::Array(tau[0]["traj"].as_array().unwrap().iter().take(14).cloned().collect());
    let openai_list = shrink_to(&traj, budget);
    add("openai-list-from-tau", OpenAi, 0, &openai_list);
    add("auto-openai-list", Auto, 3, &openai_list);
    let mini: Value = serde_json::from_slice(&read(
        "mini_swe_agent/deepseek_reasoner_dev/pvlib__pvlib-python-1606.traj.json",
    ))
    .unwrap();
    let msgs = Value::Array(mini["messages"].as_array().unwrap().iter().take(9).cloned().collect());
    let openai_obj = shrink_to(&json!({"messages": msgs}), budget);
    add("openai-object-from-mini", OpenAi, 1, &openai_obj);
    add("auto-openai-object", Auto, 7, &openai_obj);
    let pairing = json!([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "\n\nrun both"}, {"type": "image_url"}]},
        {"role": "assistant", "content": null, "tool_calls": [
            {"function": {"name": "sh", "arguments": "{\"cmd\": \"ls\"}"}},
            {"id": "b", "function": {"name": "sh", "arguments": "not json"}},
            {"id": "c", "function": {"arguments": {"cmd": "pwd"}}}]},
        {"role": "tool", "content": "first, by position"},
        {"role": "tool", "tool_call_ids": ["c"], "content": "third, by list"},
        {"role": "tool", "content": "second, by position"},
        {"role": "tool", "content": "nothing left to answer"},
        {"role": "exit", "content": "done"},
        {"role": 5}
    ]);
    add("openai-pairing", OpenAi, 0, &serde_json::to_vec(&pairing).unwrap());
    add("openai-missing-role", OpenAi, 0, br#"[{"role": "user", "content": "a"}, {"content": "b"}]"#);
    add("openai-wrong-types", OpenAi, 0, br#"{"messages": [{"role": "assistant", "content": 5, "tool_calls": "x"}, {"role": "tool", "tool_call_id": 3, "content": {"a": 1}}]}"#);
    add("openai-messages-not-list", OpenAi, 0, br#"{"messages": {"role": "user"}}"#);
    add("openai-scalar", OpenAi, 0, b"42");
    add("openai-truncated", OpenAi, 0, &openai_list[..openai_list.len() / 2]);
    add("openai-bad-utf8", OpenAi, 0, &damaged(&openai_list, 100, &[0xF0, 0x9F, 0x98]));

    // SWE-agent: real trajectories shrunk (with steps; history only, with function calls),
    // a raw prefix, damage.
    let swe: Value = serde_json::from_slice(&read(
        "swe_agent/tests/gpt4__swe-agent__test-repo__default_from_url__t-0.00__p-0.95__c-3.00__install-1/swe-agent__test-repo-i1.traj",
    ))
    .unwrap();
    let mut swe_small = serde_json::Map::new();
    for k in ["trajectory", "history", "info"] {
        swe_small.insert(k.into(), swe[k].clone());
    }
    let swe_small = shrink_to(&Value::Object(swe_small), budget);
    add("swe-agent-shrunk", SweAgent, 0, &swe_small);
    add("auto-swe-agent", Auto, 4, &swe_small);
    let fc = read("swe_agent/trajectories/function_calling_simple.traj");
    let fc_small = shrink_to(&serde_json::from_slice(&fc).unwrap(), budget);
    add("swe-agent-history-only", SweAgent, 1, &fc_small);
    add("swe-agent-raw-prefix", SweAgent, 0, &fc[..8000]);
    add(
        "swe-agent-wrong-types",
        SweAgent,
        0,
        br#"{"trajectory": [5, {"action": 3, "observation": ["a", {"b": 1}], "response": null}, {}], "history": [{"role": "user", "content": "task", "is_demo": "no"}, {"role": "user", "content": "demo", "is_demo": true}, {"role": "assistant", "content": "x"}, {"role": "tool", "content": "y"}]}"#,
    );
    add("swe-agent-trajectory-not-list", SweAgent, 0, br#"{"trajectory": "x", "history": {"role": "user"}}"#);
    add("swe-agent-neither", SweAgent, 0, br#"{"messages": []}"#);
    add("swe-agent-bad-utf8", SweAgent, 0, &damaged(&swe_small, 50, &[0xFF]));

    // mini-swe-agent: a real run shrunk, without `info`, damage.
    let mut mini_small = serde_json::Map::new();
    for k in ["info", "messages", "trajectory_format", "instance_id"] {
        mini_small.insert(k.into(), mini[k].clone());
    }
    let mini_small = Value::Object(mini_small);
    let mini_bytes = shrink_to(&mini_small, budget);
    add("mini-swe-agent-shrunk", MiniSweAgent, 0, &mini_bytes);
    add("auto-mini-swe-agent", Auto, 5, &mini_bytes);
    let mut no_info = mini_small.clone();
    no_info.as_object_mut().unwrap().remove("info");
    add("mini-swe-agent-no-info", MiniSweAgent, 1, &shrink_to(&no_info, 6 << 10));
    add(
        "mini-swe-agent-raw-prefix",
        MiniSweAgent,
        0,
        &read("mini_swe_agent/deepseek_reasoner_dev/pvlib__pvlib-python-1606.traj.json")[..6000],
    );
    add("mini-swe-agent-wrong-types", MiniSweAgent, 0, br#"{"info": {"config": {"model": {"model_name": 5}}}, "instance_id": 7, "messages": [{"role": "assistant", "tool_calls": [{"id": 1, "function": "sh"}]}, {"role": "tool"}]}"#);
    add("mini-swe-agent-messages-not-list", MiniSweAgent, 0, br#"{"info": {}, "messages": "hi"}"#);

    // tau-bench: two real conversations shrunk, damage.
    let two = Value::Array(tau.as_array().unwrap().iter().take(2).cloned().collect());
    let tau_bytes = shrink_to(&two, budget);
    add("tau-bench-shrunk", TauBench, 0, &tau_bytes);
    add("auto-tau-bench", Auto, 6, &tau_bytes);
    add("tau-bench-raw-prefix", TauBench, 0, &read("tau_bench/gpt-4o-airline.json")[..6000]);
    add("tau-bench-wrong-types", TauBench, 1, br#"[{"traj": [{"role": "assistant", "content": "", "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": "{"}}]}], "task_id": {"a": 1}, "trial": null}, {"traj": []}]"#);
    add("tau-bench-entry-without-traj", TauBench, 0, br#"[{"traj": []}, {"task_id": 1}]"#);
    add("tau-bench-not-list", TauBench, 0, br#"{"traj": []}"#);
    add("tau-bench-empty-list", TauBench, 0, b"[]");

    // mini-swe-agent text trajectories (bash blocks as actions): the hand-made fixture, one
    // without `trajectory_format`, and blocks at the edges of the rule.
    let fixture =
        |rel: &str| std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("data").join(rel)).unwrap();
    let mini_text = fixture("mini_swe_agent_text/acme__sums-17.traj.json");
    add("mini-swe-agent-text", MiniSweAgent, 0, &mini_text);
    add("auto-mini-swe-agent-text", Auto, 5, &mini_text);
    let edges = json!({"info": {}, "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "```bash\n\n```"},
        {"role": "user", "content": "empty command"},
        {"role": "assistant", "content": "```bash   \n  ls  \n```\n```bash\nunclosed"},
        {"role": "user", "content": "one closed block and one open"},
        {"role": "assistant", "content": "```bash ls\n```"},
        {"role": "user", "content": "fence not ending its line"},
        {"role": "assistant", "content": [{"type": "text", "text": "```bash\npwd\n```"}]},
        {"role": "exit", "content": "end"},
        {"role": "user", "content": "after exit"}
    ]});
    add("mini-swe-agent-text-edges", MiniSweAgent, 1, &serde_json::to_vec(&edges).unwrap());

    // OpenHands: the hand-made completion log, the same without `fncall_messages` (calls only
    // as text: a problem), wrong types; an SDK event file (a folder format: refused).
    let eval = fixture(
        "openhands_eval/llm_completions/acme__widgets-3/claude-3-5-sonnet-20241022-1733000000.25.json",
    );
    add("openhands-eval", OpenHands, 0, &eval);
    add("auto-openhands-eval", Auto, 8, &eval);
    let mut text_only: Value = serde_json::from_slice(&eval).unwrap();
    text_only.as_object_mut().unwrap().remove("fncall_messages");
    add("openhands-eval-text-only", OpenHands, 0, &serde_json::to_vec(&text_only).unwrap());
    add("openhands-wrong-types", OpenHands, 1, br#"{"fncall_messages": [{"role": "tool", "content": 5}, {"role": "assistant", "tool_calls": [{"function": {"name": 1}}]}], "fncall_response": {"choices": [{"message": "x"}]}}"#);
    add("openhands-not-list", OpenHands, 0, br#"{"fncall_messages": {"role": "user"}}"#);
    let event = fixture("openhands_sdk/8d0f2c7e5a1b4e39b6a2f0c4d1e9a7b3/events/event-00002-e02-4b1c.json");
    add("openhands-sdk-event-file", OpenHandsSdk, 0, &event);
    add("auto-openhands-sdk-event-file", Auto, 8, &event);

    // Auto on what fits no format.
    add("auto-empty", Auto, 0, b"");
    add("auto-whitespace", Auto, 0, b" \n\t\n");
    add("auto-unknown-json", Auto, 3, br#"{"hello": "world"}"#);
    add("auto-text", Auto, 0, b"just some text\nand more");
    add("auto-nul", Auto, 0, b"{\"messages\": []}\0");

    let total: usize = seeds.iter().map(|(_, b)| b.len()).sum();
    assert!(total < SEED_BUDGET, "seeds take {total} bytes");
    for (name, data) in &seeds {
        let r = std::panic::catch_unwind(|| import::check(data));
        assert!(r.is_ok(), "seed {name} fails the checks");
    }
    let dir = fuzz_dir().join("corpus/import");
    std::fs::create_dir_all(&dir).unwrap();
    for f in files_in(&dir) {
        if f.file_name().unwrap().to_string_lossy().starts_with("seed-") {
            std::fs::remove_file(f).unwrap();
        }
    }
    for (name, data) in &seeds {
        std::fs::write(dir.join(format!("seed-{name}")), data).unwrap();
    }
    eprintln!("wrote {} seeds ({total} bytes) to {}", seeds.len(), dir.display());
}
