//! Pending approvals: the first message of a chat that waits for one.

use serde_json::{Value, json};
use undertext::approval::{ApprovalPatterns, Pending, PendingRule};

use crate::args::{self, Str};
use crate::buf::Buf;
use crate::guard::call;
use crate::handles::ChatHandle;
use crate::status::{FfiError, FfiResult, Status, UNDERTEXT_NOT_FOUND};

/// Parses patterns: `[{"name": "...", "key": "...", "values": [json, ...]}]`.
pub(crate) fn patterns(text: &str) -> FfiResult<ApprovalPatterns> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| FfiError::invalid(format!("patterns_json: expected JSON ({e})")))?;
    let Value::Array(items) = v else {
        return Err(FfiError::invalid(format!("patterns_json: expected a JSON array of rules, found {v}")));
    };
    let rule = |i: usize, r: &Value| -> FfiResult<PendingRule> {
        let what = format!("patterns_json[{i}]");
        let expected = "an object {\"name\": string, \"key\": string, \"values\": array}";
        let Value::Object(o) = r else {
            return Err(FfiError::invalid(format!("{what}: expected {expected}, found {r}")));
        };
        let string = |k: &str| match o.get(k) {
            Some(Value::String(s)) => Ok(s.clone()),
            found => Err(FfiError::invalid(format!(
                "{what}.{k}: expected a string, found {}",
                found.map_or_else(|| "nothing".to_string(), |v| v.to_string())
            ))),
        };
        let values = match o.get("values") {
            Some(Value::Array(a)) => a.clone(),
            found => {
                return Err(FfiError::invalid(format!(
                    "{what}.values: expected an array, found {}",
                    found.map_or_else(|| "nothing".to_string(), |v| v.to_string())
                )));
            }
        };
        if let Some(k) = o.keys().find(|k| !["name", "key", "values"].contains(&k.as_str())) {
            return Err(FfiError::invalid(format!("{what}: unknown member \"{k}\" (expected {expected})")));
        }
        Ok(PendingRule { name: string("name")?, key: string("key")?, values })
    };
    let rules = items.iter().enumerate().map(|(i, r)| rule(i, r)).collect::<FfiResult<Vec<_>>>()?;
    Ok(ApprovalPatterns { rules })
}

/// The first message of the chat's current revision that holds a pending approval, as JSON
/// in `*out`: `{"seq", "kind": "request", "id"}` for a structured approval request with no
/// response of the same id, or `{"seq", "kind": "json", "rule"}` for a tool result whose
/// text holds JSON (at any depth) that a rule matches (archived results are scanned
/// whole). Nothing in a tool result ever answers a request. `UNDERTEXT_NOT_FOUND` when no
/// approval is pending. `patterns_json` with a NULL pointer means the default rules;
/// otherwise it replaces them: `[{"name", "key", "values": [...]}]` (an object whose `key`
/// holds one of `values` — strings compared case-insensitively — is pending).
///
/// # Safety
/// `patterns_json` is a valid string argument; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_first_pending_approval(
    chat: ChatHandle,
    patterns_json: Str,
    out: *mut Buf,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (text, out) =
            unsafe { (args::opt_text(patterns_json, "patterns_json")?, args::output(out, "out")?) };
        let custom = text.map(patterns).transpose()?;
        let (c, _) = chat.object()?;
        let found = c.first_pending_approval(custom.as_ref())?;
        let v = match found {
            Some((seq, Pending::Request(id))) => json!({"seq": seq, "kind": "request", "id": id}),
            Some((seq, Pending::Json(rule))) => json!({"seq": seq, "kind": "json", "rule": rule}),
            None => {
                return Err(FfiError::new(
                    UNDERTEXT_NOT_FOUND,
                    format!("no pending approval in chat {} at revision {}", c.id().0, c.revision()),
                ));
            }
        };
        out.set(Buf::text(v.to_string()));
        Ok(())
    })
}
