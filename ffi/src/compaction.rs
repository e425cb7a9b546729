//! Compaction: the chat's index for a model to choose from, and plans (trims and
//! squishes, given as JSON) checked by the linter and recorded.

use serde_json::{Value, json};
use undertext::LintProblem;
use undertext::compaction::{Plan, tool};

use crate::args::{self, Str};
use crate::buf::Buf;
use crate::guard::call;
use crate::handles::ChatHandle;
use crate::status::{FfiError, FfiResult, Status};

/// Parses a plan with the engine's grammar (`undertext::compaction::tool::parse_plan`):
/// JSON that is not a plan is `UNDERTEXT_INVALID_ARGUMENT`, the message prefixed `plan: `.
pub(crate) fn plan(text: &str) -> FfiResult<Plan> {
    tool::parse_plan(text).map_err(|why| FfiError::invalid(format!("plan: {why}")))
}

fn problems(ps: &[LintProblem]) -> Value {
    Value::Array(ps.iter().map(|p| json!({"rule": p.rule, "detail": p.detail})).collect())
}

/// Every message of the chat's current revision for a model to choose what to compact,
/// as a JSON array in `*out`: `[{"seq", "role", "tokens", "preview"}]` (`tokens`: the
/// estimate for the message; `preview`: its first 60 characters).
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_index(chat: ChatHandle, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (c, _) = chat.object()?;
        let lines: Vec<Value> = c
            .index()?
            .iter()
            .map(|l| json!({"seq": l.seq, "role": l.role.as_str(), "tokens": l.tokens, "preview": l.preview}))
            .collect();
        out.set(Buf::text(Value::Array(lines).to_string()));
        Ok(())
    })
}

/// Checks compaction plan `plan_json` against the chat now, without applying it. The plan
/// is `{"trims": [seq, ...], "squishes": [{"from": seq, "to": seq, "rewrite": "..."}]}`
/// (a trim replaces one tool result by a pointer to its archive; a squish replaces
/// messages `from .. to`, `to` exclusive, by the rewrite). The grammar is the engine's, the
/// one the model's compaction tool call uses: both members are optional (`null` is absent,
/// `{}` a plan of no changes: no problems, and `undertext_chat_compact` records nothing);
/// any other member, of the plan or of a squish, is refused.
/// Every problem, as a JSON array in `*out`: `[{"rule", "detail"}]`, empty when the plan
/// is acceptable (rules: `overlap`, `protected`, `boundary`, `longer`, `too_large`,
/// `trim`, `range`). JSON that is not such a plan is `UNDERTEXT_INVALID_ARGUMENT`.
///
/// # Safety
/// `plan_json` is a valid string argument; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_lint(chat: ChatHandle, plan_json: Str, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (text, out) = unsafe { (args::text(plan_json, "plan_json")?, args::output(out, "out")?) };
        let plan = plan(text)?;
        let (c, _) = chat.object()?;
        out.set(Buf::text(problems(&c.lint(&plan)?).to_string()));
        Ok(())
    })
}

/// Records compaction plan `plan_json` (the shape of `undertext_chat_lint`) if the chat is
/// still at `expected_revision` (`UNDERTEXT_STALE_REVISION` otherwise) and the linter
/// finds nothing: otherwise nothing is written and the status is `UNDERTEXT_PLAN_REFUSED`,
/// with every problem in the last error. The plan is applied when views are built; the
/// original messages are never changed. How many changes the plan holds in `*out_changes`.
///
/// # Safety
/// `plan_json` is a valid string argument; `out_changes` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_compact(
    chat: ChatHandle,
    plan_json: Str,
    expected_revision: u64,
    out_changes: *mut u64,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (text, out) =
            unsafe { (args::text(plan_json, "plan_json")?, args::output(out_changes, "out_changes")?) };
        let plan = plan(text)?;
        let (c, _) = chat.object()?;
        out.set(c.compact(&plan, expected_revision)? as u64);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::*;

    #[test]
    fn a_plan_is_read_by_the_engines_grammar() {
        let text = r#"{"trims":[3,5],"squishes":[{"from":0,"to":2,"rewrite":"setup"}]}"#;
        assert_eq!(plan(text).unwrap(), tool::parse_plan(text).unwrap());
        assert_eq!(plan("{}").unwrap(), Plan::default());
    }

    #[test]
    fn a_malformed_plan_is_an_invalid_argument_saying_what_was_expected_and_found() {
        let cases = [
            ("[1]", "plan: expected a JSON object, found [1]"),
            ("{\"trim\":[1]}", "plan: expected only \"trims\", \"squishes\", found \"trim\""),
            ("{\"trims\":3}", "plan: trims: expected an array of seqs, found 3"),
            (
                "{\"squishes\":[{\"from\":0,\"rewrite\":\"x\"}]}",
                "plan: squishes[0]: expected a member \"to\"",
            ),
            ("{\"squishes\":[{\"from\":0,\"to\":1,\"rewrite\":\"x\",\"why\":1}]}", "found \"why\""),
            ("{", "plan: expected a JSON object, found invalid JSON"),
        ];
        for (text, want) in cases {
            let e = plan(text).unwrap_err();
            assert_eq!(e.status, crate::status::UNDERTEXT_INVALID_ARGUMENT, "{text}");
            assert!(e.message.contains(want), "{text}: {}", e.message);
        }
    }
}
