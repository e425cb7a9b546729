//! The history tools a harness offers its model (`read_messages`, `read_context`): their
//! schemas and their one call (see the engine's `recall::tools`); and full-text search of an
//! owner's history (`Store::search`), the way back to what a view left out.

use crate::args::{self, Str};
use crate::buf::Buf;
use crate::guard::call;
use crate::handles::StoreHandle;
use crate::status::{FfiError, Status};
use crate::views::{UNDERTEXT_FORMAT_ANTHROPIC, UNDERTEXT_FORMAT_OPENAI};

/// Runs history tool `name` (`"read_messages"` or `"read_context"`) with the model's
/// tool-call arguments `args_json` for `owner`; the tool-result text for the model in
/// `*out`. Mistakes in the arguments, and ids not found for this owner, are answered in that
/// text (it starts with `error:`) with `UNDERTEXT_OK`; only storage failures are errors.
/// Nothing is written.
///
/// # Safety
/// `owner`, `name` and `args_json` are valid string arguments; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_history_tool_call(
    store: StoreHandle,
    owner: Str,
    name: Str,
    args_json: Str,
    out: *mut Buf,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (owner, name, text, out) = unsafe {
            (
                args::text(owner, "owner")?,
                args::text(name, "name")?,
                args::text(args_json, "args_json")?,
                args::output(out, "out")?,
            )
        };
        let (s, _) = store.object()?;
        out.set(Buf::text(s.history_tool_call(owner, name, text)?));
        Ok(())
    })
}

/// The history tools' schemas as a JSON array in `*out`, in `format`:
/// `UNDERTEXT_FORMAT_OPENAI` or `UNDERTEXT_FORMAT_ANTHROPIC`.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_history_tool_schemas(format: u32, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let list = match format {
            UNDERTEXT_FORMAT_OPENAI => undertext::recall::tools::schemas_openai(),
            UNDERTEXT_FORMAT_ANTHROPIC => undertext::recall::tools::schemas_anthropic(),
            f => {
                return Err(FfiError::invalid(format!(
                    "format: expected UNDERTEXT_FORMAT_OPENAI (1) or _ANTHROPIC (2), found {f}"
                )));
            }
        };
        out.set(Buf::text(format!("[{}]", list.join(","))));
        Ok(())
    })
}

/// Full-text search over `owner`'s history (message texts, tool calls, tool results inline
/// and archived, summaries, approval prompts): every chat of `owner`, or only chat `chat_id`
/// when it is not 0 (chat ids start at 1); hidden messages only when `include_hidden`. At
/// most `limit` hits (1 to 10,000), best first, as JSON in `*out`, the shape of the CLI's
/// `search --json`: `{"hits": [{"chat": "chat-<16 hex>", "seq", "archive": hex | null,
/// "unit", "start", "end", "snippet", "score", "part", "field"}]}`. `start .. end` (in
/// `unit`) is the matched words' span: read it with `undertext_read_context` on `archive`,
/// or in the text of part `part` of message `seq`. Another owner's chat as `chat_id` is
/// `UNDERTEXT_NOT_FOUND`, like an absent chat; a query of no words finds no hits.
///
/// # Safety
/// `owner` and `query` are valid string arguments; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_search(
    store: StoreHandle,
    owner: Str,
    query: Str,
    chat_id: u64,
    limit: u32,
    include_hidden: bool,
    out: *mut Buf,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (owner, query, out) =
            unsafe { (args::text(owner, "owner")?, args::text(query, "query")?, args::output(out, "out")?) };
        if !(1..=10_000).contains(&limit) {
            return Err(FfiError::invalid(format!("limit: expected 1 to 10000, found {limit}")));
        }
        let scope = undertext::SearchScope {
            chat: (chat_id != 0).then_some(undertext::ChatId(chat_id)),
            include_hidden,
        };
        let (s, _) = store.object()?;
        let hits = s.search(owner, query, scope, limit as usize)?;
        out.set(Buf::text(undertext::SearchHit::list_json(&hits).to_string()));
        Ok(())
    })
}

/// The span one hit of `undertext_search` names, read back from the log, as UTF-8 in
/// `*out`: exactly the matched words. `hit_json` is one element of the `"hits"` array (its
/// JSON text); what is not that shape is `UNDERTEXT_INVALID_ARGUMENT` naming the key, a hit
/// of another owner's chat `UNDERTEXT_NOT_FOUND`.
///
/// # Safety
/// `owner` and `hit_json` are valid string arguments; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_read_hit(
    store: StoreHandle,
    owner: Str,
    hit_json: Str,
    out: *mut Buf,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (owner, hit, out) = unsafe {
            (args::text(owner, "owner")?, args::text(hit_json, "hit_json")?, args::output(out, "out")?)
        };
        let v: serde_json::Value = serde_json::from_str(hit).map_err(|e| {
            FfiError::invalid(format!("hit_json: expected a JSON object, found invalid JSON ({e})"))
        })?;
        let hit = undertext::SearchHit::from_json(&v)?;
        let (s, _) = store.object()?;
        out.set(Buf::text(s.read_hit(owner, &hit)?));
        Ok(())
    })
}
