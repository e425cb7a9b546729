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
use crate::model::message::IndexLine;

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

/// Parses a compaction plan written as JSON: the one grammar of plans, shared by the
/// model's tool call ([`parse_args`]) and the C ABI (`undertext_chat_lint`,
/// `undertext_chat_compact`).
///
/// The plan is an object with two optional members, `"trims"` (an array of message seqs)
/// and `"squishes"` (an array of `{"from": seq, "to": seq, "rewrite": "text"}`, `to`
/// exclusive); `null` is the same as an absent member. Any other member, of the plan or of
/// a squish, is refused, so a misspelt name never drops a change silently. `{}` is a plan
/// of no changes: checking it finds nothing and recording it writes nothing. The error
/// names the place in the plan, what was expected there and what was found.
///
/// ```
/// use undertext::compaction::tool;
/// assert!(tool::parse_plan("{}").unwrap().trims.is_empty());
/// let e = tool::parse_plan(r#"{"squishes": [{"from": 1, "to": 2, "rewrite": "r", "why": 1}]}"#).unwrap_err();
/// assert!(e.starts_with("squishes[0]: expected only"), "{e}");
/// ```
pub fn parse_plan(json: &str) -> Result<Plan, String> {
    let v: Value = serde_json::from_str(json)
        .map_err(|e| format!("expected a JSON object, found invalid JSON ({e})"))?;
    let Some(obj) = v.as_object() else { return Err(format!("expected a JSON object, found {v}")) };
    only(obj, &["trims", "squishes"], "")?;
    let mut plan = Plan::default();
    for (i, x) in array(obj, "trims", "an array of seqs")?.iter().enumerate() {
        plan.trims.push(seq(x, &format!("trims[{i}]"))?);
    }
    for (i, x) in array(obj, "squishes", "an array of {from, to, rewrite}")?.iter().enumerate() {
        let at = format!("squishes[{i}]");
        let Some(o) = x.as_object() else {
            return Err(format!("{at}: expected an object {{from, to, rewrite}}, found {x}"));
        };
        only(o, &["from", "to", "rewrite"], &at)?;
        let member = |k: &str| o.get(k).ok_or_else(|| format!("{at}: expected a member \"{k}\", found none"));
        let from = seq(member("from")?, &format!("{at}.from"))?;
        let to = seq(member("to")?, &format!("{at}.to"))?;
        let rewrite = member("rewrite")?;
        let Some(rewrite) = rewrite.as_str() else {
            return Err(format!("{at}.rewrite: expected text, found {rewrite}"));
        };
        plan.squishes.push(Squish { from, to, rewrite: rewrite.to_string() });
    }
    Ok(plan)
}

/// Parses the model's call arguments into a [`Plan`]: the grammar of [`parse_plan`], and a
/// call with nothing to do is refused (the model is told to name a change). The error says
/// what was expected and what was found, for the model to read.
pub fn parse_args(args: &str) -> Result<Plan, String> {
    let plan = parse_plan(args)?;
    if plan.trims.is_empty() && plan.squishes.is_empty() {
        return Err("expected at least one trim or squish, found none".into());
    }
    Ok(plan)
}

/// Refuses a member of `obj` not in `known` (`at`: where `obj` is in the plan).
fn only(obj: &serde_json::Map<String, Value>, known: &[&str], at: &str) -> Result<(), String> {
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => {
            let names: Vec<String> = known.iter().map(|n| format!("\"{n}\"")).collect();
            let at = if at.is_empty() { String::new() } else { format!("{at}: ") };
            Err(format!("{at}expected only {}, found \"{k}\"", names.join(", ")))
        }
        None => Ok(()),
    }
}

/// Member `key` of the plan as an array (absent or `null`: empty).
fn array<'a>(obj: &'a serde_json::Map<String, Value>, key: &str, what: &str) -> Result<&'a [Value], String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(x) => Err(format!("{key}: expected {what}, found {x}")),
    }
}

/// `x` as a message seq (`at`: where it is in the plan).
fn seq(x: &Value, at: &str) -> Result<u64, String> {
    x.as_u64().ok_or_else(|| format!("{at}: expected a non-negative integer seq, found {x}"))
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

/// The share of the nudge line the nudge's index may take: a sixteenth (with the nudge line
/// at 60 % of the usable input, under 4 % of it). A 704-message chat listed whole took 10,936
/// tokens, 39 % of a 32k window (issue 32).
pub const NUDGE_INDEX_SHARE: u64 = 16;

/// The least the nudge's index may take, in tokens, however small the window.
pub const NUDGE_INDEX_MIN_TOKENS: u64 = 256;

/// The bound [`nudge_text`] puts on its index for a nudge line of `line` tokens:
/// `max(line / NUDGE_INDEX_SHARE, NUDGE_INDEX_MIN_TOKENS)`.
pub fn nudge_index_bound(line: u64) -> u64 {
    (line / NUDGE_INDEX_SHARE).max(NUDGE_INDEX_MIN_TOKENS)
}

/// The mark an index line's preview starts with when an earlier compaction already trimmed
/// the message (see [`mark_compacted`]): trimming it again saves nothing.
pub const TRIMMED_MARK: &str = "[trimmed]";

/// The mark an index line's preview starts with when an earlier compaction squished it into
/// a range's rewrite.
pub const SQUISHED_MARK: &str = "[squished]";

/// Marks the lines of `index` that earlier compactions already changed: the preview of a
/// message in `trimmed` starts with [`TRIMMED_MARK`], of one inside a range of `squished`
/// (`from..to`) with [`SQUISHED_MARK`] and the range. A model reading the index then leaves
/// them alone ([`nudge_text`] lists them last).
pub fn mark_compacted(index: &mut [IndexLine], trimmed: &[u64], squished: &[std::ops::Range<u64>]) {
    for l in index {
        if let Some(r) = squished.iter().find(|r| r.contains(&l.seq)) {
            l.preview = format!("{SQUISHED_MARK} into {}..{} {}", r.start, r.end, l.preview);
        } else if trimmed.contains(&l.seq) {
            l.preview = format!("{TRIMMED_MARK} {}", l.preview);
        }
    }
}

fn compacted(l: &IndexLine) -> bool {
    l.preview.starts_with(TRIMMED_MARK) || l.preview.starts_with(SQUISHED_MARK)
}

/// The tool result for trims of results an earlier compaction already trimmed: nothing
/// changes and nothing is saved.
pub fn already_trimmed_text(seqs: &[u64]) -> String {
    let list: Vec<String> = seqs.iter().map(u64::to_string).collect();
    format!(
        "compaction no-op for trim(s) of message(s) {}: already trimmed by an earlier compaction, \
         0 tokens saved; trim other results or squish settled ranges instead.",
        list.join(", ")
    )
}

/// A plan as the JSON text [`parse_plan`] reads.
pub fn plan_json(plan: &Plan) -> String {
    json!({
        "trims": plan.trims,
        "squishes": plan.squishes.iter().map(|s| json!({"from": s.from, "to": s.to, "rewrite": s.rewrite})).collect::<Vec<_>>(),
    })
    .to_string()
}

/// The harness message of a view over the nudge line: the estimate, the line, and the
/// chat's index for the model to choose from, bounded to [`nudge_index_bound`] of the line
/// (see [`nudge_text_within`]).
pub fn nudge_text(estimate: u64, line: u64, index: &[IndexLine]) -> String {
    nudge_text_within(estimate, line, index, nudge_index_bound(line))
}

/// [`nudge_text`] with its index bounded to about `max_tokens` (counted with the
/// [`Heuristic`](crate::model::estimate::Heuristic) estimator): when every line does not fit, the
/// largest messages not yet compacted are listed (the ones worth trimming or squishing; on
/// equal size the newest), then the ones an earlier compaction already changed, in seq order,
/// and a last line says how many messages and tokens were left out ([`Chat::index`](crate::Chat::index)
/// lists them all).
pub fn nudge_text_within(estimate: u64, line: u64, index: &[IndexLine], max_tokens: u64) -> String {
    use crate::model::estimate::{Estimator, Heuristic};
    let mut s = format!(
        "[harness] The conversation is about {estimate} tokens, over the compaction line of {line}. \
         Call {NAME} to trim old tool results or squish settled ranges of messages; the index \
         below lists messages as seq, role, tokens, first characters ({TRIMMED_MARK} or \
         {SQUISHED_MARK}: an earlier compaction already did it).\n"
    );
    let lines: Vec<String> =
        index.iter().map(|l| format!("{} {} {} {}\n", l.seq, l.role.as_str(), l.tokens, l.preview)).collect();
    let h = Heuristic;
    let cost: Vec<u64> = lines.iter().map(|l| h.text_tokens(l)).collect();
    if cost.iter().sum::<u64>() <= max_tokens {
        lines.iter().for_each(|l| s.push_str(l));
        return s;
    }
    // Largest first (not yet compacted before compacted), the newest on a tie.
    let mut order: Vec<usize> = (0..index.len()).collect();
    order.sort_by_key(|&i| (compacted(&index[i]), std::cmp::Reverse(index[i].tokens), std::cmp::Reverse(i)));
    // Room for the closing line.
    let mut left = max_tokens.saturating_sub(24);
    let mut keep = vec![false; index.len()];
    for i in order {
        if cost[i] <= left {
            left -= cost[i];
            keep[i] = true;
        }
    }
    let (mut n, mut tokens) = (0u64, 0u64);
    for (i, l) in lines.iter().enumerate() {
        if keep[i] {
            s.push_str(l);
        } else {
            n += 1;
            tokens += index[i].tokens;
        }
    }
    s.push_str(&format!(
        "({n} smaller or already compacted messages of {tokens} tokens in all are not listed.)\n"
    ));
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::*;

    #[test]
    fn a_plan_reads_trims_and_squishes_and_null_is_absent() {
        let p = parse_plan(r#"{"trims":[3,5],"squishes":[{"from":0,"to":2,"rewrite":"setup"}]}"#).unwrap();
        assert_eq!(p.trims, vec![3, 5]);
        assert_eq!(p.squishes, vec![Squish { from: 0, to: 2, rewrite: "setup".into() }]);
        assert_eq!(parse_plan(r#"{"trims":null,"squishes":null}"#).unwrap(), Plan::default());
    }

    #[test]
    fn an_empty_plan_parses_but_an_empty_tool_call_is_refused() {
        assert_eq!(parse_plan("{}").unwrap(), Plan::default());
        assert_eq!(parse_args("{}").unwrap_err(), "expected at least one trim or squish, found none");
        assert_eq!(parse_args(r#"{"trims":[1]}"#).unwrap().trims, vec![1]);
    }

    #[test]
    fn a_malformed_plan_names_the_place_what_was_expected_and_what_was_found() {
        let cases = [
            ("[1]", "expected a JSON object, found [1]"),
            ("{", "expected a JSON object, found invalid JSON"),
            (r#"{"trim":[1]}"#, r#"expected only "trims", "squishes", found "trim""#),
            (r#"{"trims":3}"#, "trims: expected an array of seqs, found 3"),
            (r#"{"trims":[-1]}"#, "trims[0]: expected a non-negative integer seq, found -1"),
            (r#"{"trims":[1,"3"]}"#, r#"trims[1]: expected a non-negative integer seq, found "3""#),
            (r#"{"squishes":{}}"#, "squishes: expected an array of {from, to, rewrite}, found {}"),
            (r#"{"squishes":[7]}"#, "squishes[0]: expected an object {from, to, rewrite}, found 7"),
            (
                r#"{"squishes":[{"from":0,"rewrite":"x"}]}"#,
                r#"squishes[0]: expected a member "to", found none"#,
            ),
            (
                r#"{"squishes":[{"from":0,"to":1,"rewrite":7}]}"#,
                "squishes[0].rewrite: expected text, found 7",
            ),
            (r#"{"squishes":[{"from":0,"to":-1,"rewrite":"x"}]}"#, "squishes[0].to: expected a non-negative"),
            (
                r#"{"squishes":[{"from":0,"to":1,"rewrite":"x","why":1}]}"#,
                r#"squishes[0]: expected only "from", "to", "rewrite", found "why""#,
            ),
        ];
        for (text, want) in cases {
            let e = parse_plan(text).unwrap_err();
            assert!(e.starts_with(want), "{text}: {e}");
            assert_eq!(
                parse_args(text).unwrap_err(),
                e,
                "the tool call and the plan grammar differ on {text}"
            );
        }
    }
}
