//! The model view under a token budget, its decision, and usage calibration.

use std::sync::Arc;

use undertext::{Budget, Decision};

use crate::args::{self, Str};
use crate::buf::Buf;
use crate::guard::call;
use crate::handles::{self, ChatHandle, Object, ViewHandle, store_of};
use crate::status::{FfiError, FfiResult, Status};

/// Decision: at or under the soft line, sent as is.
pub const UNDERTEXT_DECISION_FITS: u32 = 0;
/// Decision: over the soft line; older tool results became previews (`n_previewed`).
pub const UNDERTEXT_DECISION_COMPACTED: u32 = 1;
/// Decision: still over the hard line after compaction: do not send (`over_by` says by how
/// much).
pub const UNDERTEXT_DECISION_REFUSED: u32 = 2;

/// View messages format: the view itself, `[{"seqs": [start, end], "role", "parts", "tokens"}]`.
pub const UNDERTEXT_FORMAT_NEUTRAL: u32 = 0;
/// View messages format: OpenAI chat messages (a JSON array).
pub const UNDERTEXT_FORMAT_OPENAI: u32 = 1;
/// View messages format: Anthropic messages (`{"system", "messages"}`).
pub const UNDERTEXT_FORMAT_ANTHROPIC: u32 = 2;

/// The token budget of one model call. Fill with `undertext_budget_default`; the fractions
/// are of the usable input, `window - reserve_output`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BudgetIn {
    /// The model's context window, in tokens.
    pub window: u64,
    /// Tokens kept free for the answer.
    pub reserve_output: u64,
    /// Above this fraction, older tool results become previews (default 0.70)...
    pub soft: f64,
    /// ...until the estimate is at or below this fraction (default 0.50).
    pub target: f64,
    /// Above this fraction after compaction, the call is refused (default 0.90).
    pub hard: f64,
    /// JSON texts of the tool schemas sent with the call (`n_tool_schemas` of them).
    pub tool_schemas: *const Str,
    /// Number of tool schemas.
    pub n_tool_schemas: usize,
}

/// What the budget guard decided, and the view's figures.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ViewDecision {
    /// One of `UNDERTEXT_DECISION_*`.
    pub kind: u32,
    /// Nonzero when building the view swapped in the worker's prepared checkpoint.
    pub swapped: u8,
    /// Estimated input tokens, calibration applied.
    pub estimate: u64,
    /// The estimate before calibration.
    pub raw_estimate: u64,
    /// The calibration factor applied.
    pub calibration: f64,
    /// Compacted: tokens saved (calibrated).
    pub tokens_saved: u64,
    /// How many tool results the view sends as the guard's previews, whatever the decision
    /// (their seqs: `undertext_view_previewed`).
    pub n_previewed: u64,
    /// Refused: the hard line, in tokens.
    pub limit: u64,
    /// Refused: `estimate - limit`.
    pub over_by: u64,
    /// The id to pass to `undertext_chat_report_usage` with the real input tokens.
    pub step: u64,
    /// The chat revision the view was built from.
    pub revision: u64,
    /// Messages in the view.
    pub n_messages: u64,
    /// When `swapped`: how long the swap took, in nanoseconds.
    pub swap_ns: u64,
    /// How many leading messages are exactly those of the previous view of the chat (the
    /// prefix a provider's prompt cache keeps).
    pub stable_prefix_messages: u64,
    /// Estimated tokens of that prefix (calibrated).
    pub stable_prefix_tokens: u64,
    /// Estimated tokens the provider reads in full: `estimate - stable_prefix_tokens`.
    pub reread_tokens: u64,
}

/// Reads a budget argument.
///
/// # Safety
/// `b` is NULL or points to a valid `undertext_budget_t` whose schemas are valid strings.
pub(crate) unsafe fn budget_in(b: *const BudgetIn) -> FfiResult<Budget> {
    // SAFETY: forwarded contract of this function, for the struct and its schema array.
    let (b, schemas) = unsafe {
        let b = args::input(b, "budget")?;
        (b, args::array(b.tool_schemas, b.n_tool_schemas, "budget.tool_schemas")?)
    };
    let tool_schemas = schemas
        .iter()
        .enumerate()
        // SAFETY: forwarded contract: each schema is a valid string argument.
        .map(|(i, s)| unsafe { args::text(*s, &format!("budget.tool_schemas[{i}]")) }.map(String::from))
        .collect::<FfiResult<Vec<_>>>()?;
    Ok(Budget {
        window: b.window,
        reserve_output: b.reserve_output,
        soft: b.soft,
        target: b.target,
        hard: b.hard,
        tool_schemas,
        ..Budget::new(b.window, b.reserve_output)
    })
}

/// Fills `*out` with a budget of `window` tokens keeping `reserve_output` for the answer,
/// with the default lines (soft 0.70, target 0.50, hard 0.90) and no tool schemas.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_budget_default(
    window: u64,
    reserve_output: u64,
    out: *mut BudgetIn,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let b = Budget::new(window, reserve_output);
        out.set(BudgetIn {
            window: b.window,
            reserve_output: b.reserve_output,
            soft: b.soft,
            target: b.target,
            hard: b.hard,
            tool_schemas: std::ptr::null(),
            n_tool_schemas: 0,
        });
        Ok(())
    })
}

/// Builds the model view of the chat under `budget`: compaction records and pins applied,
/// and over the soft line older tool results turned into previews (never a pin, never in
/// the last two user turns). Read it with `undertext_view_decision` and
/// `undertext_view_messages`; free it with `undertext_view_free`. With a worker running,
/// this may publish its prepared checkpoint (the swap at the hard line), or, under the
/// synchronous hard-line policy, call the summarizer on this thread.
///
/// # Safety
/// `budget` is NULL or valid; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_view(
    chat: ChatHandle,
    budget: *const BudgetIn,
    out: *mut ViewHandle,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (budget, out) = unsafe { (budget_in(budget)?, args::output(out, "out")?) };
        let (c, parent) = chat.object()?;
        let view = c.view(&budget)?;
        let id = handles::insert(Object::View(Arc::new(view)), Some(store_of(chat.id, parent)))?;
        out.set(ViewHandle { id });
        Ok(())
    })
}

/// The guard's decision and the view's figures.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_view_decision(view: ViewHandle, out: *mut ViewDecision) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (v, _) = view.object()?;
        let mut d = ViewDecision {
            estimate: v.estimate(),
            raw_estimate: v.raw_estimate(),
            calibration: v.calibration(),
            step: v.step(),
            revision: v.revision(),
            n_messages: v.messages().len() as u64,
            n_previewed: v.previewed().len() as u64,
            stable_prefix_messages: v.stable_prefix_messages() as u64,
            stable_prefix_tokens: v.stable_prefix_tokens(),
            reread_tokens: v.reread_tokens(),
            ..ViewDecision::default()
        };
        if let Some(t) = v.swap() {
            d.swapped = 1;
            d.swap_ns = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
        }
        match v.decision() {
            Decision::Fits => d.kind = UNDERTEXT_DECISION_FITS,
            Decision::Compacted { tokens_saved, .. } => {
                d.kind = UNDERTEXT_DECISION_COMPACTED;
                d.tokens_saved = *tokens_saved;
            }
            Decision::Refused { limit, over_by, .. } => {
                d.kind = UNDERTEXT_DECISION_REFUSED;
                d.limit = *limit;
                d.over_by = *over_by;
            }
        }
        out.set(d);
        Ok(())
    })
}

/// The view's messages as JSON in `*out`, in `format` (`UNDERTEXT_FORMAT_*`).
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_view_messages(view: ViewHandle, format: u32, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (v, _) = view.object()?;
        let text = match format {
            UNDERTEXT_FORMAT_NEUTRAL => crate::json::view_messages(v.messages()).to_string(),
            UNDERTEXT_FORMAT_OPENAI => v.to_openai_json(),
            UNDERTEXT_FORMAT_ANTHROPIC => v.to_anthropic_json(),
            f => {
                return Err(FfiError::invalid(format!(
                    "format: expected UNDERTEXT_FORMAT_NEUTRAL (0), _OPENAI (1) or _ANTHROPIC (2), found {f}"
                )));
            }
        };
        out.set(Buf::text(text));
        Ok(())
    })
}

/// The seqs of the tool results the view sends as the guard's previews, as a JSON array in
/// `*out`, whatever the decision (a refused view carries them too).
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_view_previewed(view: ViewHandle, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (v, _) = view.object()?;
        out.set(Buf::text(serde_json::json!(v.previewed()).to_string()));
        Ok(())
    })
}

/// Frees a view handle.
#[unsafe(no_mangle)]
pub extern "C" fn undertext_view_free(view: ViewHandle) -> Status {
    call(|| {
        handles::remove(view.id, ViewHandle::KIND)?;
        Ok(())
    })
}

/// Reports the real input tokens of the model call made with the view whose decision had
/// `step`; the chat's correction factor for its model in `*out_factor` (persisted, applied
/// to later views). `UNDERTEXT_NOT_FOUND` for an unknown step (the last 256 are kept).
///
/// # Safety
/// `out_factor` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_report_usage(
    chat: ChatHandle,
    step: u64,
    actual_input_tokens: u64,
    out_factor: *mut f64,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out_factor, "out_factor") }?;
        let (c, _) = chat.object()?;
        out.set(c.report_usage(step, actual_input_tokens)?);
        Ok(())
    })
}

/// The estimated input tokens of the chat as it stands (calibrated, tool schemas of
/// `budget` included), without building a view.
///
/// # Safety
/// `budget` is NULL or valid; `out_tokens` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_estimate(
    chat: ChatHandle,
    budget: *const BudgetIn,
    out_tokens: *mut u64,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (budget, out) = unsafe { (budget_in(budget)?, args::output(out_tokens, "out_tokens")?) };
        let (c, _) = chat.object()?;
        out.set(c.estimate(&budget)?);
        Ok(())
    })
}

/// The long-loop settings of a budget (all optional: zero is the default).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TailIn {
    /// The protected tail: the last two user turns, but at most this many tokens (then the
    /// last whole steps that fit, at least the last step). 0: a quarter of the usable input.
    pub protect_max_tokens: u64,
    /// The task (user messages of the last two turns) stays verbatim over a checkpoint up to
    /// this many tokens; longer, it is previewed with a way back. 0: 20,000 or a quarter of
    /// the usable input, whichever is less.
    pub instructions_max_tokens: u64,
    /// The nudge line, a fraction of the usable input (0: no nudge): over it the view
    /// carries a harness message asking the model to compact (`undertext_view_nudge`).
    pub nudge: f64,
}

/// `budget` with the long-loop settings of `tail` (NULL: the defaults).
///
/// # Safety
/// `budget` is NULL or valid; `tail` is NULL or valid.
unsafe fn budget_with_tail(budget: *const BudgetIn, tail: *const TailIn) -> FfiResult<Budget> {
    // SAFETY: forwarded contract of the caller, for each argument.
    let mut b = unsafe { budget_in(budget)? };
    if !tail.is_null() {
        // SAFETY: forwarded contract: not NULL (checked), valid.
        let t = unsafe { args::input(tail, "tail")? };
        b.protect_max_tokens = (t.protect_max_tokens > 0).then_some(t.protect_max_tokens);
        b.instructions_max_tokens = (t.instructions_max_tokens > 0).then_some(t.instructions_max_tokens);
        b.nudge = (t.nudge != 0.0).then_some(t.nudge);
    }
    Ok(b)
}

/// `undertext_chat_view` with the long-loop settings `tail` (NULL: the defaults).
///
/// # Safety
/// `budget` is NULL or valid; `tail` is NULL or valid; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_view_tail(
    chat: ChatHandle,
    budget: *const BudgetIn,
    tail: *const TailIn,
    out: *mut ViewHandle,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (budget, out) = unsafe { (budget_with_tail(budget, tail)?, args::output(out, "out")?) };
        let (c, parent) = chat.object()?;
        let view = c.view(&budget)?;
        let id = handles::insert(Object::View(Arc::new(view)), Some(store_of(chat.id, parent)))?;
        out.set(ViewHandle { id });
        Ok(())
    })
}

/// The view's nudge (a harness message asking the model to compact, with the chat's
/// index) in `*out`; an empty string when the view is under the nudge line or has none.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_view_nudge(view: ViewHandle, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (v, _) = view.object()?;
        out.set(Buf::text(v.nudge().unwrap_or("").to_string()));
        Ok(())
    })
}

/// The least any view of the chat must send under `budget` and `tail` (NULL: defaults):
/// system messages, the task and the last step. A refused view whose minimum is over the
/// hard line cannot be served by any compaction.
///
/// # Safety
/// `budget` is NULL or valid; `tail` is NULL or valid; `out_tokens` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_protected_minimum(
    chat: ChatHandle,
    budget: *const BudgetIn,
    tail: *const TailIn,
    out_tokens: *mut u64,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (budget, out) =
            unsafe { (budget_with_tail(budget, tail)?, args::output(out_tokens, "out_tokens")?) };
        let (c, _) = chat.object()?;
        out.set(c.protected_minimum(&budget)?);
        Ok(())
    })
}

/// The model-driven compaction tool: `args_json` is the JSON text of the model's call to
/// `compact_history`; checked against the chat at `expected_revision` with the protected
/// tail of `budget` and `tail` (NULL: defaults), recorded when the linter finds nothing.
/// The tool result text for the model in `*out`: what was applied, or every problem.
/// Nothing of the exchange is appended to the chat.
///
/// # Safety
/// `args_json` is a valid string argument; `budget` is NULL or valid; `tail` is NULL or
/// valid; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_compaction_tool_call(
    chat: ChatHandle,
    args_json: Str,
    expected_revision: u64,
    budget: *const BudgetIn,
    tail: *const TailIn,
    out: *mut Buf,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (text, budget, out) = unsafe {
            (args::text(args_json, "args_json")?, budget_with_tail(budget, tail)?, args::output(out, "out")?)
        };
        let (c, _) = chat.object()?;
        out.set(Buf::text(c.compaction_tool_call(text, expected_revision, &budget)?));
        Ok(())
    })
}

/// The compaction tool's schema as JSON in `*out`, in `format`: `UNDERTEXT_FORMAT_OPENAI`
/// (`{"type": "function", ...}`) or `UNDERTEXT_FORMAT_ANTHROPIC` (`{"name", "description",
/// "input_schema"}`).
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_compaction_tool_schema(format: u32, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let text = match format {
            UNDERTEXT_FORMAT_OPENAI => undertext::compaction::tool::schema_openai(),
            UNDERTEXT_FORMAT_ANTHROPIC => undertext::compaction::tool::schema_anthropic(),
            f => {
                return Err(FfiError::invalid(format!(
                    "format: expected UNDERTEXT_FORMAT_OPENAI (1) or _ANTHROPIC (2), found {f}"
                )));
            }
        };
        out.set(Buf::text(text));
        Ok(())
    })
}
