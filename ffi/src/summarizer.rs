//! A summarizer given as C callbacks (`undertext_summarizer_t`).
//!
//! Which thread calls the callbacks, and when, is documented on
//! [`SummarizerIn`]; the header carries that text.

use std::cell::Cell;
use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;
use undertext::{Error, Message};
use undertext::{Extractive, Summarizer};

use crate::args::{self, Str};
use crate::guard::call;
use crate::status::{FfiError, FfiResult, Status, UNDERTEXT_BAD_HANDLE, UNDERTEXT_OK};

/// Where a summarizer callback puts its result, with `undertext_summary_out_set`. Valid
/// only during the callback it was passed to.
#[derive(Debug, Default)]
pub struct SummaryOut {
    text: Option<String>,
}

/// A summarizer callback: summarizes `input_json` and gives the summary with
/// `undertext_summary_out_set(out, ...)`, then returns `UNDERTEXT_OK`; any other status
/// fails the build (the text set, if any, is taken as the error message).
pub type SummarizeFn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, input_json: Str, out: *mut SummaryOut) -> Status>;

/// A summarizer made of C callbacks.
///
/// * `summarize` gets a JSON array of messages (the shape of `undertext_chat_get`) — one
///   segment of settled history — and returns its summary.
/// * `merge` gets a JSON array of summary strings, in order, and returns one summary.
/// * `id` names the summarizer: summaries are cached by (content, id), so the callbacks must
///   be deterministic for a given id (use a new id when the model or prompt changes).
///
/// Threads and timing: the callbacks are called
/// * on the calling thread, inside `undertext_chat_build_checkpoint`;
/// * on the worker's own threads (named `undertext-worker-N`), after
///   `undertext_worker_start`, whenever a view finds a chat past the worker's soft line —
///   concurrently from several threads when the worker has more than one;
/// * on the thread calling `undertext_chat_view`, when the worker's hard-line policy is
///   `UNDERTEXT_HARD_LINE_SYNCHRONOUS` and nothing is prepared at the hard line.
///
/// So they must be thread-safe with `user_data`. No callback runs after
/// `undertext_worker_stop` (or `undertext_store_close`) has returned, once no
/// `undertext_chat_view` call of that store is still running; `user_data` may be freed then.
/// Callbacks may call other `undertext_*` functions, except `undertext_worker_stop` and
/// `undertext_store_close` of their own store (those wait for the callback to return).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SummarizerIn {
    /// The summarizer's stable id (1 to 256 bytes).
    pub id: Str,
    /// Summarizes a segment of messages (required).
    pub summarize: SummarizeFn,
    /// Merges summaries into one (required).
    pub merge: SummarizeFn,
    /// Passed to every call, unchanged.
    pub user_data: *mut c_void,
}

/// `user_data`, carried to the worker threads.
#[derive(Debug, Clone, Copy)]
struct UserData(*mut c_void);

// SAFETY: the pointer is only passed back to the C callbacks, never dereferenced here; the
// header's contract (SummarizerIn docs) requires the callbacks to accept it from any thread.
unsafe impl Send for UserData {}
// SAFETY: as above: shared references only ever copy the pointer value.
unsafe impl Sync for UserData {}

type Callback = unsafe extern "C" fn(*mut c_void, Str, *mut SummaryOut) -> Status;

/// The callbacks as a [`Summarizer`].
#[derive(Debug)]
struct CSummarizer {
    id: String,
    summarize: Callback,
    merge: Callback,
    user_data: UserData,
}

/// Addresses of the `SummaryOut`s of callbacks running now: `undertext_summary_out_set`
/// accepts only these.
static LIVE_OUTS: LazyLock<Mutex<HashSet<usize>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

thread_local! {
    /// Set when a callback on this thread failed, so the caller's status is
    /// `UNDERTEXT_CALLBACK` rather than the engine's generic error.
    static CALLBACK_FAILED: Cell<bool> = const { Cell::new(false) };
}

/// Clears this thread's callback-failure flag.
pub(crate) fn reset_callback_failed() {
    CALLBACK_FAILED.with(|c| c.set(false));
}

/// Whether a callback on this thread failed since the last reset.
pub(crate) fn callback_failed() -> bool {
    CALLBACK_FAILED.with(|c| c.get())
}

impl CSummarizer {
    fn invoke(&self, f: Callback, which: &str, input: &str) -> undertext::Result<String> {
        let mut out = Box::new(SummaryOut::default());
        let addr = &mut *out as *mut SummaryOut;
        LIVE_OUTS.lock().insert(addr as usize);
        let arg = Str { ptr: input.as_ptr(), len: input.len() };
        // SAFETY: calling the C function pointer the harness registered, with its own
        // user_data, an input valid for the call and an out-pointer valid for the call (the
        // box lives until after it returns); the header documents this contract.
        let status = unsafe { f(self.user_data.0, arg, addr) };
        LIVE_OUTS.lock().remove(&(addr as usize));
        let text = out.text.take();
        if status != UNDERTEXT_OK {
            CALLBACK_FAILED.with(|c| c.set(true));
            return Err(Error::InvalidArgument(format!(
                "summarizer {:?}: the {which} callback returned status {status}{}",
                self.id,
                text.map(|t| format!(": {t}")).unwrap_or_default()
            )));
        }
        text.ok_or_else(|| {
            CALLBACK_FAILED.with(|c| c.set(true));
            Error::InvalidArgument(format!(
                "summarizer {:?}: the {which} callback returned UNDERTEXT_OK without calling undertext_summary_out_set",
                self.id
            ))
        })
    }
}

impl Summarizer for CSummarizer {
    fn id(&self) -> &str {
        &self.id
    }

    fn summarize(&self, messages: &[Message]) -> undertext::Result<String> {
        self.invoke(self.summarize, "summarize", &crate::json::messages(messages).to_string())
    }

    fn merge(&self, summaries: &[String]) -> undertext::Result<String> {
        self.invoke(self.merge, "merge", &serde_json::json!(summaries).to_string())
    }
}

/// Reads a summarizer argument: NULL is the built-in extractive summarizer (first line of
/// each message; deterministic, no model).
///
/// # Safety
/// `s` is NULL or points to a valid `undertext_summarizer_t` with a valid `id`.
pub(crate) unsafe fn summarizer_in(s: *const SummarizerIn) -> FfiResult<Arc<dyn Summarizer>> {
    if s.is_null() {
        return Ok(Arc::new(Extractive::default()));
    }
    // SAFETY: forwarded contract of this function, for the struct and its id.
    let (s, id) = unsafe {
        let s = args::input(s, "summarizer")?;
        (s, args::text(s.id, "summarizer.id")?)
    };
    if id.is_empty() || id.len() > 256 {
        return Err(FfiError::invalid(format!("summarizer.id: expected 1 to 256 bytes, found {}", id.len())));
    }
    let (Some(summarize), Some(merge)) = (s.summarize, s.merge) else {
        return Err(FfiError::new(
            crate::status::UNDERTEXT_NULL_POINTER,
            "summarizer: expected both summarize and merge callbacks, found NULL",
        ));
    };
    Ok(Arc::new(CSummarizer { id: id.to_string(), summarize, merge, user_data: UserData(s.user_data) }))
}

/// Gives the summary from inside a summarizer callback (the text is copied). Calling it
/// again replaces the text. `out` must be the pointer the running callback received:
/// any other is `UNDERTEXT_BAD_HANDLE`.
///
/// # Safety
/// `text` is a valid string argument.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_summary_out_set(out: *mut SummaryOut, text: Str) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let text = unsafe { args::text(text, "text") }?;
        let live = LIVE_OUTS.lock();
        if out.is_null() || !live.contains(&(out as usize)) {
            return Err(FfiError::new(
                UNDERTEXT_BAD_HANDLE,
                format!("out {out:p}: not the out-pointer of a summarizer callback running now"),
            ));
        }
        // SAFETY: `out` is the address of a live `SummaryOut` boxed by `invoke`, which
        // removes it from LIVE_OUTS (under this lock) before reading or freeing it; holding
        // the lock keeps it alive and unaliased while we write.
        unsafe { (*out).text = Some(text.to_string()) };
        drop(live);
        Ok(())
    })
}
