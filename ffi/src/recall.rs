//! The history tools a harness offers its model (`read_messages`, `read_context`): their
//! schemas and their one call (see the engine's `recall::tools`).

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
