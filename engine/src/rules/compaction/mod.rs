//! Compaction records: trims (one tool result replaced by a pointer to its archive) and
//! squishes (a range of messages replaced by a shorter rewrite that names the range), and
//! the linter that checks a plan before anything is written.
//!
//! Records are applied when the view is built; the original messages are never touched.

pub mod tool;

use std::ops::Range;

use crate::model::estimate::Estimator;
use crate::model::estimate::message_tokens;
use crate::model::message::{Message, Part};

/// A plan of compaction: trims and squishes, checked as a whole.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Seqs of tool-result messages to replace by a pointer to their archive.
    pub trims: Vec<u64>,
    /// Ranges of messages to replace by a rewrite.
    pub squishes: Vec<Squish>,
}

/// Messages `from..to` replaced by `rewrite` in the view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Squish {
    /// First message replaced.
    pub from: u64,
    /// One past the last message replaced.
    pub to: u64,
    /// What the model sees instead (a pointer to `from..to` is added).
    pub rewrite: String,
}

use crate::base::error::LintProblem;

fn has_result(m: &Message) -> bool {
    m.parts.iter().any(|p| matches!(p, Part::ToolResult { .. }))
}

fn has_call(m: &Message) -> bool {
    m.parts.iter().any(|p| matches!(p, Part::ToolCall { .. }))
}

/// True when `msgs` is one tool call followed by results of exactly its calls.
fn is_call_with_results(msgs: &[Message]) -> bool {
    let Some((first, rest)) = msgs.split_first() else { return false };
    let ids: Vec<&str> = first
        .parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    !ids.is_empty()
        && !rest.is_empty()
        && rest.iter().all(|m| {
            m.parts
                .iter()
                .all(|p| matches!(p, Part::ToolResult { call_id, .. } if ids.contains(&call_id.as_str())))
        })
}

/// Checks `plan` against `messages` (the whole chat, by seq) and reports every problem.
/// `protected_from` is the first seq of the protected tail (the protected-tail rule of the budget module); `max_squish_tokens` bounds a squish unless it is one call with its results.
pub fn lint(
    plan: &Plan,
    messages: &[Message],
    protected_from: u64,
    max_squish_tokens: u64,
    e: &dyn Estimator,
) -> Vec<LintProblem> {
    let mut out = Vec::new();
    let mut p = |rule: &'static str, detail: String| out.push(LintProblem { rule, detail });
    let len = messages.len() as u64;
    let mut covered: Vec<(Range<u64>, String)> = Vec::new();
    for s in &plan.squishes {
        let name = format!("squish {}..{}", s.from, s.to);
        if s.from >= s.to || s.to > len {
            p("range", format!("{name}: expected from < to <= {len} (the chat's length)"));
            continue;
        }
        for (r, other) in &covered {
            if s.from < r.end && r.start < s.to {
                p("overlap", format!("{name} overlaps {other}"));
            }
        }
        covered.push((s.from..s.to, name.clone()));
        if s.to > protected_from {
            p(
                "protected",
                format!(
                    "{name} reaches the protected tail (the recent steps), which starts at {protected_from}"
                ),
            );
        }
        let range = &messages[s.from as usize..s.to as usize];
        if has_result(&range[0]) {
            p(
                "boundary",
                format!("{name} starts on a tool result (message {}), splitting it from its call", s.from),
            );
        }
        if has_call(&range[range.len() - 1]) {
            p(
                "boundary",
                format!("{name} ends on a tool call (message {}), splitting it from its result", s.to - 1),
            );
        }
        let replaced: u64 = range.iter().map(|m| message_tokens(e, &m.parts)).sum();
        let rewrite = e.text_tokens(&s.rewrite) + e.message_overhead();
        if rewrite >= replaced {
            p("longer", format!("{name}: the rewrite is {rewrite} tokens, what it replaces {replaced}"));
        }
        if replaced > max_squish_tokens && !is_call_with_results(range) {
            p("too_large", format!("{name} covers {replaced} tokens, more than {max_squish_tokens}"));
        }
    }
    let mut seen = Vec::new();
    for &t in &plan.trims {
        let name = format!("trim {t}");
        if seen.contains(&t) {
            p("trim", format!("{name} is named twice"));
            continue;
        }
        seen.push(t);
        if t >= len {
            p("trim", format!("{name}: the chat has {len} messages"));
            continue;
        }
        if !has_result(&messages[t as usize]) {
            p("trim", format!("{name}: message {t} is not a tool result"));
        }
        if t >= protected_from {
            p(
                "protected",
                format!(
                    "{name} is in the protected tail (the recent steps), which starts at {protected_from}"
                ),
            );
        }
        for (r, other) in &covered {
            if r.contains(&t) {
                p("overlap", format!("{name} is inside {other}"));
            }
        }
    }
    out
}
