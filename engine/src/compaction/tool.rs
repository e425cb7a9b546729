//! The model-driven compaction loop: a tool the model calls to compact its own history.
//!
//! Past the budget's nudge line (`Budget::nudge`) the view carries
//! a harness message ([`nudge_text`]) with the chat's index (seq, role, tokens, first
//! characters of every message). The harness offers the tool ([`schema_openai`] or
//! [`schema_anthropic`]); the model answers with a plan of trims and squishes; the harness
//! hands the call's arguments to
//! [`Chat::compaction_tool_call`](crate::Chat::compaction_tool_call), which records the
//! plan or returns the linter's problems as text the model can act on, and the model tries
//! again. The exchange is never appended to the chat: afterwards the model sees only the
//! compacted view.
//!
//! ```
//! use undertext::compaction::tool;
//! let plan = tool::parse_args(r#"{"trims": [3], "squishes": [{"from": 5, "to": 9, "rewrite": "read 4 files"}]}"#).unwrap();
//! assert_eq!(plan.trims, vec![3]);
//! assert_eq!(plan.squishes[0].to, 9);
//! assert!(tool::parse_args(r#"{"trims": "3"}"#).is_err());
//! ```

use serde_json::{Value, json};

use super::{LintProblem, Plan, Squish};
use crate::model::IndexLine;

/// The tool's name.
pub const NAME: &str = "compact_history";

const DESCRIPTION: &str = "Compact the conversation history to free context. Trim a tool result \
(replace it by a pointer to its archive, readable later with read_context) or squish a range of \
messages [from, to) into a shorter rewrite. Seqs are those of the index in the harness message. \
Never split a tool call from its result; the most recent steps are protected. The originals stay \
stored; if the plan breaks a rule, nothing changes and the problems are returned: fix them and call again.";

fn parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "trims": {
                "type": "array",
                "description": "Seqs of tool-result messages to replace by a pointer to their archive.",
                "items": {"type": "integer", "minimum": 0}
            },
            "squishes": {
                "type": "array",
                "description": "Ranges of messages replaced by a shorter rewrite.",
                "items": {
                    "type": "object",
                    "properties": {
                        "from": {"type": "integer", "minimum": 0, "description": "First seq replaced."},
                        "to": {"type": "integer", "minimum": 1, "description": "One past the last seq replaced."},
                        "rewrite": {"type": "string", "description": "What the model sees instead."}
                    },
                    "required": ["from", "to", "rewrite"]
                }
            }
        },
        "required": []
    })
}

/// The tool's schema in OpenAI's chat-completions shape (`{"type": "function", ...}`), as
/// JSON text.
pub fn schema_openai() -> String {
    json!({
        "type": "function",
        "function": {"name": NAME, "description": DESCRIPTION, "parameters": parameters()}
    })
    .to_string()
}

/// The tool's schema in Anthropic's messages shape (`{"name", "description",
/// "input_schema"}`), as JSON text.
pub fn schema_anthropic() -> String {
    json!({"name": NAME, "description": DESCRIPTION, "input_schema": parameters()}).to_string()
}

/// Parses the model's call arguments into a [`Plan`]. The error says what was expected
/// and what was found, for the model to read.
pub fn parse_args(args: &str) -> Result<Plan, String> {
    let v: Value = serde_json::from_str(args)
        .map_err(|e| format!("expected a JSON object, found invalid JSON ({e})"))?;
    let Some(obj) = v.as_object() else { return Err(format!("expected a JSON object, found {v}")) };
    if let Some(k) = obj.keys().find(|k| *k != "trims" && *k != "squishes") {
        return Err(format!("expected only \"trims\" and \"squishes\", found \"{k}\""));
    }
    let seq = |x: &Value, what: &str| {
        x.as_u64().ok_or_else(|| format!("{what}: expected a non-negative integer seq, found {x}"))
    };
    let mut plan = Plan::default();
    match obj.get("trims") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for x in a {
                plan.trims.push(seq(x, "trims")?);
            }
        }
        Some(x) => return Err(format!("trims: expected an array of seqs, found {x}")),
    }
    match obj.get("squishes") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for x in a {
                let from = seq(x.get("from").unwrap_or(&Value::Null), "squish \"from\"")?;
                let to = seq(x.get("to").unwrap_or(&Value::Null), "squish \"to\"")?;
                let rewrite = x
                    .get("rewrite")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("squish {from}..{to}: expected \"rewrite\" text, found {x}"))?;
                plan.squishes.push(Squish { from, to, rewrite: rewrite.to_string() });
            }
        }
        Some(x) => return Err(format!("squishes: expected an array of {{from, to, rewrite}}, found {x}")),
    }
    if plan.trims.is_empty() && plan.squishes.is_empty() {
        return Err("expected at least one trim or squish, found none".into());
    }
    Ok(plan)
}

/// The tool result for arguments that do not parse.
pub fn invalid_args_text(why: &str) -> String {
    format!("compaction refused, nothing was changed: the arguments are invalid: {why}. Call {NAME} again.")
}

/// The tool result for a plan the linter refused: every problem, one per line.
pub fn problems_text(problems: &[LintProblem]) -> String {
    let mut s = format!(
        "compaction refused, nothing was changed: {} problem(s). Fix every one and call {NAME} again.\n",
        problems.len()
    );
    for p in problems {
        s.push_str(&format!("- {}: {}\n", p.rule, p.detail));
    }
    s
}

/// The tool result for a plan made against an older revision of the chat.
pub fn stale_text(expected: u64, found: u64) -> String {
    format!(
        "compaction refused, nothing was changed: the history changed since the index was made \
         (revision {expected}, now {found}); read the new index and call {NAME} again."
    )
}

/// The tool result for an applied plan.
pub fn applied_text(plan: &Plan, changes: usize) -> String {
    format!(
        "compaction applied: {} trim(s) and {} squish(es) ({changes} change(s)); the originals stay readable.",
        plan.trims.len(),
        plan.squishes.len()
    )
}

/// The harness message of a view over the nudge line: the estimate, the line, and the
/// chat's index for the model to choose from.
pub fn nudge_text(estimate: u64, line: u64, index: &[IndexLine]) -> String {
    let mut s = format!(
        "[harness] The conversation is about {estimate} tokens, over the compaction line of {line}. \
         Call {NAME} to trim old tool results or squish settled ranges of messages; the index \
         below lists every message as seq, role, tokens, first characters.\n"
    );
    for l in index {
        s.push_str(&format!("{} {} {} {}\n", l.seq, l.role.as_str(), l.tokens, l.preview));
    }
    s
}
