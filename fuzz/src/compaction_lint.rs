//! Arbitrary bytes as a chat and a compaction plan for the linter (`compaction::lint`).
//!
//! Input layout: byte 0 is the number of messages (`% 40`), byte 1 where the protected part
//! starts (`% (len + 2)`), byte 2 the squish token bound (× 16); then one byte per message
//! (`% 4`: user text, assistant text, assistant tool call, tool result; the upper bits pick
//! the call it answers and the text length); then 3 bytes per plan item `[kind, a, b]`:
//! `kind` even is a trim of `a`, odd a squish `a..b` with a rewrite of `kind / 2` words.
//! Seqs may fall outside the chat, on purpose.
//!
//! On each input: `lint` does not panic and is deterministic; every problem names one of the
//! documented rules and says what it found; an empty plan has no problem; a squish outside
//! the chat or reversed is reported under `range`; a trim of a message that is not a tool
//! result, under `trim`; two overlapping valid squishes, under `overlap`; a squish or trim
//! reaching into the protected part, under `protected`.
//!
//! Shared verbatim by the cargo-fuzz target `compaction_lint` and the replay test in
//! `tests/tests/fuzz_corpus_reliability.rs`, which includes this file with `#[path]`. Use only
//! `std` and `undertext` here.

use undertext::Heuristic;
use undertext::LintProblem;
use undertext::compaction::{Plan, Squish, lint};
use undertext::{Message, Part, Role, ToolContent};

/// The rules `lint` may report.
pub const RULES: [&str; 7] = ["overlap", "protected", "boundary", "longer", "too_large", "trim", "range"];

fn message(seq: u64, code: u8) -> Message {
    let n = usize::from(code >> 2) + 1;
    let call = format!("c{}", (code >> 4) % 4);
    let (role, parts) = match code % 4 {
        0 => (Role::User, vec![Part::Text("please fix the parser ".repeat(n))]),
        1 => (Role::Assistant, vec![Part::Text("looking ".repeat(n))]),
        2 => (
            Role::Assistant,
            vec![Part::ToolCall { id: call, name: "read_file".into(), args: "{\"path\":\"a.rs\"}".into() }],
        ),
        _ => (
            Role::Tool,
            vec![Part::ToolResult {
                call_id: call,
                content: ToolContent::Text("fn main() {}\n".repeat(n * 4)),
                is_error: false,
            }],
        ),
    };
    Message { seq, revision: 0, role, turn: 1, parts, step: None, at_ms: 0, feedback: false }
}

fn has(problems: &[LintProblem], rule: &str) -> bool {
    problems.iter().any(|p| p.rule == rule)
}

/// Checks the linter on one input. Panics on a broken property.
pub fn check(data: &[u8]) {
    let [n, prot, bound, rest @ ..] = data else { return };
    let len = usize::from(n % 40).min(rest.len());
    let msgs: Vec<Message> = rest[..len].iter().enumerate().map(|(i, &c)| message(i as u64, c)).collect();
    let len = len as u64;
    let protected_from = u64::from(*prot) % (len + 2);
    let max_tokens = u64::from(*bound) * 16;
    let mut plan = Plan::default();
    for item in rest[len as usize..].chunks_exact(3).take(16) {
        let (kind, a, b) = (item[0], u64::from(item[1]) % (len + 3), u64::from(item[2]) % (len + 3));
        if kind % 2 == 0 {
            plan.trims.push(a);
        } else {
            plan.squishes.push(Squish { from: a, to: b, rewrite: "summary ".repeat(usize::from(kind / 2)) });
        }
    }
    let e = Heuristic;
    let problems = lint(&plan, &msgs, protected_from, max_tokens, &e);
    assert_eq!(problems, lint(&plan, &msgs, protected_from, max_tokens, &e), "lint is not deterministic");
    for p in &problems {
        assert!(RULES.contains(&p.rule), "unknown rule {:?}", p.rule);
        assert!(!p.detail.is_empty(), "problem {} without detail", p.rule);
    }
    assert!(
        lint(&Plan::default(), &msgs, protected_from, max_tokens, &e).is_empty(),
        "an empty plan has problems"
    );
    for s in &plan.squishes {
        if s.from >= s.to || s.to > len {
            assert!(
                has(&problems, "range"),
                "squish {}..{} outside the chat of {len} not reported",
                s.from,
                s.to
            );
        } else if s.to > protected_from {
            assert!(
                has(&problems, "protected"),
                "squish {}..{} into the protected part not reported",
                s.from,
                s.to
            );
        }
    }
    for &t in &plan.trims {
        let is_result = msgs
            .get(t as usize)
            .is_some_and(|m| m.parts.iter().any(|p| matches!(p, Part::ToolResult { .. })));
        if !is_result {
            assert!(has(&problems, "trim"), "trim of {t} (not a tool result) not reported");
        }
        if t < len && t >= protected_from {
            assert!(has(&problems, "protected"), "trim of {t} in the protected part not reported");
        }
    }
    let valid: Vec<&Squish> = plan.squishes.iter().filter(|s| s.from < s.to && s.to <= len).collect();
    for (i, x) in valid.iter().enumerate() {
        for y in &valid[i + 1..] {
            if x.from < y.to && y.from < x.to {
                assert!(
                    has(&problems, "overlap"),
                    "overlapping squishes {}..{} and {}..{} not reported",
                    x.from,
                    x.to,
                    y.from,
                    y.to
                );
            }
        }
    }
}
