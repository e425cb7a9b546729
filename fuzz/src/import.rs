//! Arbitrary bytes as a transcript file for every importer (`undertext::import::parse_bytes`).
//!
//! Input layout ([`encode`] builds one): byte 0 chooses the format, `FORMATS[b % 9]` (auto,
//! claude-code, codex, openai, swe-agent, mini-swe-agent, tau-bench, openhands,
//! openhands-sdk: a folder format, so every file is refused), and `b / 9` the file
//! name among [`PATHS`] (for an explicit format, odd values pick its second name, e.g. a
//! Claude Code `subagents/agent-*.jsonl`); the rest is the file's bytes. On each input
//! nothing may panic, hang or allocate without bound, and:
//!
//! * **errors are clear**: an `Err` is `InvalidArgument` naming the file and saying what was
//!   expected; a file that is not UTF-8 or holds a NUL byte is always an error;
//! * **deterministic**: parsing the same bytes twice gives equal results;
//! * **keys do not depend on the path** ("the same conversation always gets the same key,
//!   whatever path it is read from"): the same bytes read from another file name in another
//!   folder give the same outcome, keys, parent keys, formats, models, messages and problems;
//! * **auto is detection**: with `Auto`, `detect` fails exactly when parsing fails for
//!   detection, and otherwise parsing with the detected format gives the very same result;
//! * on `Ok`, every session has the format asked for (or detected, never `Auto`), the path
//!   as source, a non-empty key unique in the file, a parent key only for a Claude Code side
//!   chain (and never its own key); `tool_results` / `tool_result_bytes` count its
//!   `ToolResult` parts and their UTF-8 bytes; tool results are plain text (archiving is the
//!   append's job); every tool call's arguments are JSON (the append refuses anything else,
//!   so an import would fail); no message is empty;
//! * JSONL formats (Claude Code, Codex): the problems are exactly the non-blank lines that
//!   are not JSON objects, in order, each naming the file and its 1-based line; there is one
//!   session when some line is an object, none otherwise. JSON formats report no problems
//!   but, for a harness whose steps are tool calls (`Format::always_has_tool_calls`), one
//!   (line 0) per session with assistant messages and no tool call; OpenAI, SWE-agent,
//!   mini-swe-agent and OpenHands files give one session, tau-bench one per list entry;
//! * SWE-agent with a non-empty `trajectory` of N steps: the session ends with N pairs of an
//!   assistant message whose last part is the call `step-i` (tool `action`, arguments
//!   `{"action": ...}`) and a tool message holding only that call's result, and no other
//!   message holds a call (the prompt before them has no assistant message).
//!
//! Shared verbatim by the cargo-fuzz target `import` and the replay test in
//! `tests/tests/fuzz_corpus_import.rs`, which includes this file with `#[path]`. Use only
//! `std`, `undertext` and `serde_json` here (all three are dependencies of both crates).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::Value;
use undertext::import::{Format, Parsed, Session, detect, parse_bytes};
use undertext::{Error, Part, Role, ToolContent};

/// The formats byte 0 chooses from (`b % 9`).
pub const FORMATS: [Format; 9] = Format::ALL;

/// File names, each with the extension its format's files have: a Claude Code session and
/// side chain, a Codex rollout, OpenAI messages, a SWE-agent trajectory, a mini-swe-agent
/// trajectory, a tau-bench results file, and one with a non-ASCII name.
pub const PATHS: [&str; 9] = [
    "sessions/6f1c2a.jsonl",
    "sessions/6f1c2a/subagents/agent-a1b2c3.jsonl",
    "codex/rollout-2025-01-01T00-00-00-0199.jsonl",
    "openai/run.json",
    "swe/django__django-1.traj",
    "mini/astropy__astropy-12907.traj.json",
    "tau/gpt-4o-airline.json",
    "naïve dir/transcript ✓.json",
    "llm_completions/django__django-1/gpt-4o-1700000000.0.json",
];

/// The second path each format may be read from, to check that keys ignore it.
const OTHER_DIR: &str = "elsewhere/copy";

/// The default path (index into [`PATHS`]) of each explicit format, and its alternative.
fn path_for(format: Format, variant: usize) -> &'static str {
    let (a, b) = match format {
        Format::Auto => return PATHS[variant % PATHS.len()],
        Format::ClaudeCode => (0, 1),
        Format::Codex => (2, 7),
        Format::OpenAi => (3, 7),
        Format::SweAgent => (4, 7),
        Format::MiniSweAgent => (5, 7),
        Format::TauBench => (6, 7),
        Format::OpenHands => (8, 7),
        Format::OpenHandsSdk => (3, 7),
    };
    PATHS[if variant.is_multiple_of(2) { a } else { b }]
}

/// An input for [`check`]: the format's byte (with `variant` choosing the file name), then
/// `bytes`.
pub fn encode(format: Format, variant: u8, bytes: &[u8]) -> Vec<u8> {
    let i = FORMATS.iter().position(|f| *f == format).unwrap_or(0) as u8;
    let mut v = vec![i.wrapping_add(variant.wrapping_mul(FORMATS.len() as u8))];
    v.extend_from_slice(bytes);
    v
}

/// The same path in another folder, under another name with the same extension.
fn moved(path: &str) -> PathBuf {
    let name = Path::new(path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Path::new(OTHER_DIR).join(format!("renamed-{name}"))
}

/// The format, file name and file bytes an input stands for; `None` for the empty input.
pub fn decode(data: &[u8]) -> Option<(Format, &'static str, &[u8])> {
    let (&ctrl, bytes) = data.split_first()?;
    let format = FORMATS[usize::from(ctrl) % FORMATS.len()];
    Some((format, path_for(format, usize::from(ctrl) / FORMATS.len()), bytes))
}

/// Checks every importer on one input. Panics on a broken property.
pub fn check(data: &[u8]) {
    let Some((format, path_str, bytes)) = decode(data) else { return };
    let path = Path::new(path_str);

    let parsed = parse_bytes(path, bytes, format);
    let again = parse_bytes(path, bytes, format);
    assert!(same(&parsed, &again), "{format}: parsing the same bytes twice differs");

    let text = std::str::from_utf8(bytes).ok().filter(|_| !bytes.contains(&0));
    let parsed = match parsed {
        Err(e) => {
            clear_error(&e, path);
            None
        }
        Ok(p) => {
            let Some(text) = text else {
                panic!("{format}: a file that is not UTF-8 text parsed: {p:?}");
            };
            Some((p, text))
        }
    };

    // The same bytes from elsewhere: the same outcome and the same keys.
    let elsewhere_path = moved(path_str);
    let elsewhere = parse_bytes(&elsewhere_path, bytes, format);
    match (&parsed, &elsewhere) {
        (None, Err(e)) => clear_error(e, &elsewhere_path),
        (Some((p, _)), Ok(q)) => same_but_path(p, q),
        (p, q) => panic!("{format}: path {path:?} gives {:?}, {elsewhere_path:?} gives {q:?}", p.is_some()),
    }

    // Auto is detection followed by the detected format.
    let resolved = if format == Format::Auto {
        match detect(path, bytes) {
            Err(e) => {
                clear_error(&e, path);
                assert!(parsed.is_none(), "auto parsed a file that detect rejects ({e})");
                None
            }
            Ok(f) => {
                assert_ne!(f, Format::Auto, "detect answered auto");
                let direct = parse_bytes(path, bytes, f);
                match (&parsed, &direct) {
                    (None, Err(_)) => {}
                    (Some((p, _)), Ok(q)) => assert_eq!(p, q, "auto differs from the detected {f}"),
                    (p, q) => panic!("auto gives ok={}, detected {f} gives {q:?}", p.is_some()),
                }
                Some(f)
            }
        }
    } else {
        Some(format)
    };

    if let (Some((p, text)), Some(f)) = (&parsed, resolved) {
        check_parsed(p, text, f, path);
    }
}

/// Whether two parse results are equal (errors by their message).
fn same(a: &Result<Parsed, Error>, b: &Result<Parsed, Error>) -> bool {
    match (a, b) {
        (Ok(a), Ok(b)) => a == b,
        (Err(a), Err(b)) => a.to_string() == b.to_string(),
        _ => false,
    }
}

/// An importer error: `InvalidArgument`, naming the file, saying what was expected.
fn clear_error(e: &Error, path: &Path) {
    let Error::InvalidArgument(msg) = e else {
        panic!("import error of kind other than InvalidArgument: {e:?}");
    };
    assert!(msg.contains(&path.display().to_string()), "error does not name the file {path:?}: {msg}");
    assert!(msg.contains("expected"), "error does not say what was expected: {msg}");
}

/// `p` and `q` parsed the same bytes from different paths: all but sources, titles and the
/// problems' file names agree.
fn same_but_path(p: &Parsed, q: &Parsed) {
    assert_eq!(p.sessions.len(), q.sessions.len(), "session count depends on the path");
    for (a, b) in p.sessions.iter().zip(&q.sessions) {
        assert_eq!(a.key, b.key, "session key depends on the path");
        assert_eq!(a.parent_key, b.parent_key, "parent key depends on the path");
        assert_eq!(a.format, b.format);
        assert_eq!(a.model, b.model);
        assert_eq!(a.messages, b.messages, "messages depend on the path");
        assert_eq!((a.tool_results, a.tool_result_bytes), (b.tool_results, b.tool_result_bytes));
    }
    let lines = |p: &Parsed| p.problems.iter().map(|x| (x.line, x.reason.clone())).collect::<Vec<_>>();
    assert_eq!(lines(p), lines(q), "problems depend on the path");
}

/// The invariants of a successful parse of `text` as `format` from `path`.
fn check_parsed(p: &Parsed, text: &str, format: Format, path: &Path) {
    let mut keys = HashSet::new();
    for s in &p.sessions {
        check_session(s, format, path);
        assert!(keys.insert(s.key.as_str()), "two sessions share the key {:?}", s.key);
    }
    match format {
        Format::ClaudeCode | Format::Codex => check_jsonl(p, text, path),
        _ => {
            for x in &p.problems {
                assert_eq!(x.line, 0, "{format}: a JSON document reported a skipped line: {x}");
                assert!(format.always_has_tool_calls(), "{format}: a problem in a plain format: {x}");
                assert!(x.reason.contains("expected tool calls"), "{format}: {x}");
            }
            let missing = p
                .sessions
                .iter()
                .filter(|s| s.tool_calls == 0 && s.messages.iter().any(|m| m.role == Role::Assistant))
                .count();
            let expected = if format.always_has_tool_calls() { missing } else { 0 };
            assert_eq!(p.problems.len(), expected, "{format}: one problem per session without tool calls");
            let doc: Option<Value> = serde_json::from_str(text).ok();
            let Some(doc) = doc else { panic!("{format}: parsed a file that is not one JSON document") };
            match format {
                Format::TauBench => {
                    let n = doc.as_array().map_or(0, Vec::len);
                    assert_eq!(p.sessions.len(), n, "tau-bench: one session per list entry");
                }
                _ => assert_eq!(p.sessions.len(), 1, "{format}: one session per file"),
            }
            if format == Format::SweAgent {
                check_swe_agent_steps(&p.sessions[0], &doc);
            }
        }
    }
}

fn check_session(s: &Session, format: Format, path: &Path) {
    assert_eq!(s.format, format, "session of another format than parsed");
    assert_eq!(s.source, path, "session source is not the file");
    assert!(!s.key.is_empty(), "empty session key");
    if let Some(parent) = &s.parent_key {
        assert_eq!(format, Format::ClaudeCode, "a parent key outside Claude Code side chains");
        assert_ne!(parent, &s.key, "a session is its own parent");
    }
    let (mut n, mut bytes) = (0u64, 0u64);
    for (i, m) in s.messages.iter().enumerate() {
        assert!(!m.parts.is_empty(), "message {i} has no parts");
        for part in &m.parts {
            match part {
                Part::ToolCall { args, name, .. } => {
                    if let Err(e) = serde_json::from_str::<Value>(args) {
                        panic!("message {i}: tool call {name:?} arguments are not JSON ({e}): {args:?}");
                    }
                }
                Part::ToolResult { content, .. } => {
                    n += 1;
                    match content {
                        ToolContent::Text(t) => bytes += t.len() as u64,
                        ToolContent::Archived { .. } => panic!("message {i}: the parser archived a result"),
                    }
                }
                _ => {}
            }
        }
    }
    assert_eq!(s.tool_results, n, "tool_results does not count the ToolResult parts");
    assert_eq!(s.tool_result_bytes, bytes, "tool_result_bytes does not sum their text bytes");
}

/// JSONL: problems are exactly the non-blank lines that are not JSON objects.
fn check_jsonl(p: &Parsed, text: &str, path: &Path) {
    let mut bad = Vec::new();
    let mut objects = 0usize;
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(v) if v.is_object() => objects += 1,
            _ => bad.push(n as u64 + 1),
        }
    }
    let reported: Vec<u64> = p.problems.iter().map(|x| x.line).collect();
    assert_eq!(reported, bad, "problems are not the lines that are not JSON objects");
    for x in &p.problems {
        assert_eq!(x.file, path, "problem names another file");
        assert!(x.reason.contains("expected"), "problem does not say what was expected: {}", x.reason);
    }
    assert_eq!(p.sessions.len(), usize::from(objects > 0), "JSONL: one session when a line is an object");
}

/// SWE-agent: the trajectory's steps, in order, as call/result pairs at the end.
fn check_swe_agent_steps(s: &Session, doc: &Value) {
    let Some(steps) = doc.get("trajectory").and_then(Value::as_array).filter(|t| !t.is_empty()) else {
        return;
    };
    let n = steps.len();
    assert!(s.messages.len() >= 2 * n, "SWE-agent: {n} steps, only {} messages", s.messages.len());
    let (prompt, tail) = s.messages.split_at(s.messages.len() - 2 * n);
    for m in prompt {
        assert_ne!(m.role, Role::Assistant, "SWE-agent prompt holds an assistant message");
    }
    for (i, pair) in tail.chunks(2).enumerate() {
        let id = format!("step-{i}");
        let (call, result) = (&pair[0], &pair[1]);
        assert_eq!(call.role, Role::Assistant, "step {i}: not an assistant message");
        match call.parts.last() {
            Some(Part::ToolCall { id: got, name, args }) => {
                assert_eq!((got.as_str(), name.as_str()), (id.as_str(), "action"), "step {i}: wrong call");
                let v: Value = serde_json::from_str(args).unwrap_or(Value::Null);
                assert!(v.get("action").is_some_and(Value::is_string), "step {i}: args {args:?}");
            }
            other => panic!("step {i}: the assistant message ends with {other:?}"),
        }
        assert_eq!(call.parts.iter().filter(|p| matches!(p, Part::ToolCall { .. })).count(), 1);
        assert_eq!(result.role, Role::Tool, "step {i}: the result is not a tool message");
        match result.parts.as_slice() {
            [Part::ToolResult { call_id, .. }] => {
                assert_eq!(call_id, &id, "step {i}: result of another call")
            }
            other => panic!("step {i}: the tool message holds {other:?}"),
        }
    }
}
