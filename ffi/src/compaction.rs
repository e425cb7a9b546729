//! Compaction: the chat's index for a model to choose from, and plans (trims and
//! squishes, given as JSON) checked by the linter and recorded.

use serde_json::{Map, Value, json};
use undertext::compaction::{LintProblem, Plan, Squish};

use crate::args::{self, Str};
use crate::buf::Buf;
use crate::guard::call;
use crate::handles::ChatHandle;
use crate::status::{FfiError, FfiResult, Status};

/// Reads member `key` of `obj` as an unsigned integer.
fn uint(obj: &Map<String, Value>, key: &str, what: &str) -> FfiResult<u64> {
    match obj.get(key) {
        Some(v) => v.as_u64().ok_or_else(|| {
            FfiError::invalid(format!("{what}.{key}: expected an unsigned integer, found {v}"))
        }),
        None => Err(FfiError::invalid(format!("{what}: expected a member \"{key}\", found none"))),
    }
}

/// Refuses members other than `known`, naming the first one found.
fn only(obj: &Map<String, Value>, known: &[&str], what: &str) -> FfiResult<()> {
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(FfiError::invalid(format!(
            "{what}: unknown member \"{k}\" (expected {})",
            known.iter().map(|k| format!("\"{k}\"")).collect::<Vec<_>>().join(", ")
        ))),
        None => Ok(()),
    }
}

/// The array in member `key` of `obj` (absent: empty).
fn array<'a>(obj: &'a Map<String, Value>, key: &str) -> FfiResult<&'a [Value]> {
    match obj.get(key) {
        None => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(v) => Err(FfiError::invalid(format!("plan.{key}: expected an array, found {v}"))),
    }
}

/// Parses a plan: `{"trims": [seq, ...], "squishes": [{"from", "to", "rewrite"}, ...]}`;
/// both members are optional, no other member is allowed.
pub(crate) fn plan(text: &str) -> FfiResult<Plan> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| FfiError::invalid(format!("plan: expected JSON ({e})")))?;
    let Value::Object(obj) = v else {
        return Err(FfiError::invalid(format!("plan: expected a JSON object, found {v}")));
    };
    only(&obj, &["trims", "squishes"], "plan")?;
    let trims = array(&obj, "trims")?
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.as_u64().ok_or_else(|| {
                FfiError::invalid(format!("plan.trims[{i}]: expected a message seq, found {t}"))
            })
        })
        .collect::<FfiResult<Vec<u64>>>()?;
    let squishes = array(&obj, "squishes")?
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let what = format!("plan.squishes[{i}]");
            let Value::Object(o) = s else {
                return Err(FfiError::invalid(format!(
                    "{what}: expected an object {{\"from\", \"to\", \"rewrite\"}}, found {s}"
                )));
            };
            only(o, &["from", "to", "rewrite"], &what)?;
            let rewrite = match o.get("rewrite") {
                Some(Value::String(r)) => r.clone(),
                Some(v) => {
                    return Err(FfiError::invalid(format!("{what}.rewrite: expected a string, found {v}")));
                }
                None => {
                    return Err(FfiError::invalid(format!(
                        "{what}: expected a member \"rewrite\", found none"
                    )));
                }
            };
            Ok(Squish { from: uint(o, "from", &what)?, to: uint(o, "to", &what)?, rewrite })
        })
        .collect::<FfiResult<Vec<Squish>>>()?;
    Ok(Plan { trims, squishes })
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
/// messages `from .. to`, `to` exclusive, by the rewrite; both members are optional).
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
    fn a_plan_reads_trims_and_squishes() {
        let p = plan(r#"{"trims":[3,5],"squishes":[{"from":0,"to":2,"rewrite":"setup"}]}"#).unwrap();
        assert_eq!(p.trims, vec![3, 5]);
        assert_eq!(p.squishes, vec![Squish { from: 0, to: 2, rewrite: "setup".into() }]);
        assert_eq!(plan("{}").unwrap(), Plan::default());
    }

    #[test]
    fn a_malformed_plan_says_what_was_expected_and_found() {
        let cases = [
            ("[1]", "plan: expected a JSON object, found [1]"),
            ("{\"trim\":[1]}", "plan: unknown member \"trim\""),
            ("{\"trims\":3}", "plan.trims: expected an array, found 3"),
            ("{\"trims\":[-1]}", "plan.trims[0]: expected a message seq, found -1"),
            ("{\"squishes\":[{\"from\":0,\"rewrite\":\"x\"}]}", "plan.squishes[0]: expected a member \"to\""),
            (
                "{\"squishes\":[{\"from\":0,\"to\":1,\"rewrite\":7}]}",
                "plan.squishes[0].rewrite: expected a string",
            ),
            ("{\"squishes\":[{\"from\":0,\"to\":1,\"rewrite\":\"x\",\"why\":1}]}", "unknown member \"why\""),
            ("{", "plan: expected JSON"),
        ];
        for (text, want) in cases {
            let e = plan(text).unwrap_err();
            assert_eq!(e.status, crate::status::UNDERTEXT_INVALID_ARGUMENT, "{text}");
            assert!(e.message.contains(want), "{text}: {}", e.message);
        }
    }
}
