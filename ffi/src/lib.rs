//! The C ABI of Undertext: `include/undertext.h`, generated from this crate by cbindgen.
//!
//! Conventions (each holds for every function):
//! * Every function returns an `undertext_status_t`: `UNDERTEXT_OK` (0) or an error code;
//!   `undertext_last_error` then gives the message (what was expected, what was found) of
//!   the last failed call on the calling thread.
//! * Results come through out-parameters, written only on success.
//! * Objects are opaque handles (`undertext_store_t`, `undertext_chat_t`,
//!   `undertext_snapshot_t`, `undertext_view_t`, `undertext_checkpoint_t`,
//!   `undertext_worker_t`): a generation-checked slot number, never a pointer. A freed or
//!   closed handle gives `UNDERTEXT_STALE_HANDLE`; closing a store frees every handle made
//!   from it. Handles may be used from any thread.
//! * Strings passed in are `undertext_str_t {ptr, len}`: UTF-8, explicit length, no
//!   terminator needed (invalid UTF-8 is `UNDERTEXT_INVALID_UTF8`). Bytes handed out are
//!   `undertext_buf_t {ptr, len}` (no terminator), freed with `undertext_buf_free`.
//! * No panic crosses the boundary: it is caught and returned as `UNDERTEXT_INTERNAL`.
//! * A store belongs to the process that opened it: in a `fork()` child, writes, reads and
//!   views through the parent's handles fail with `UNDERTEXT_FORKED` (which lists them), and
//!   freeing the handles writes nothing; open a store in the child after the fork.
//!
//! Safety contract of every `unsafe` function: each pointer argument is NULL or valid for
//! what its documentation says (NULL and misalignment are detected and reported; a
//! dangling pointer cannot be).
//!
//! Every function maps to one engine call; this crate holds no logic of its own beyond
//! checking arguments.

mod approvals;
mod archives;
mod args;
mod blob_append;
mod blobs;
mod buf;
mod chats;
mod checkpoints;
mod compaction;
mod guard;
mod handles;
mod hide;
mod json;
mod maintenance;
mod messages;
mod recall;
mod snapshots;
mod status;
mod store;
mod summarizer;
mod views;
mod worker;

pub use approvals::*;
pub use archives::*;
pub use args::Str;
pub use blob_append::*;
pub use blobs::*;
pub use buf::{Buf, undertext_buf_free};
pub use chats::*;
pub use checkpoints::*;
pub use compaction::*;
pub use handles::{ChatHandle, CheckpointHandle, SnapshotHandle, StoreHandle, ViewHandle, WorkerHandle};
pub use hide::*;
pub use maintenance::*;
pub use messages::*;
pub use snapshots::*;
pub use status::*;
pub use store::*;
pub use summarizer::{SummarizeFn, SummarizerIn, SummaryOut, undertext_summary_out_set};
pub use views::*;
pub use worker::*;

use guard::call;

/// Copies the message of the last failed call on this thread into `buf` (`cap` bytes,
/// UTF-8, no terminator) and its full length into `*out_len`. If `cap` is too small,
/// nothing is copied and `UNDERTEXT_BUFFER_TOO_SMALL` is returned with the needed length in
/// `*out_len`; call again with a larger buffer. `buf` may be NULL when `cap` is 0 (to ask
/// for the length). The message stays until the next failed call on this thread; this
/// function does not change it.
///
/// # Safety
/// `buf` is NULL or points to `cap` writable bytes; `out_len` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_last_error(buf: *mut u8, cap: usize, out_len: *mut usize) -> Status {
    let message = guard::with_last_error(|m| m.to_string());
    call(|| {
        // SAFETY: forwarded contract.
        let out_len = unsafe { args::output(out_len, "out_len") }?;
        let n = message.len();
        if n > cap {
            out_len.set(n);
            return Err(status::FfiError::new(
                UNDERTEXT_BUFFER_TOO_SMALL,
                // Keep the caller's message readable: report the size only in the status.
                message.clone(),
            ));
        }
        if n > 0 {
            if buf.is_null() {
                return Err(status::FfiError::new(UNDERTEXT_NULL_POINTER, message.clone()));
            }
            // SAFETY: `buf` is non-NULL and the caller guarantees `cap` >= n writable bytes;
            // the source is our own copy of the message, so the regions do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(message.as_ptr(), buf, n) };
        }
        out_len.set(n);
        Ok(())
    })
}

/// The version of this library (`"0.1.0"`) as a static string; no need to free it.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_version(out: *mut Str) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let v: &'static str = env!("CARGO_PKG_VERSION");
        out.set(Str { ptr: v.as_ptr(), len: v.len() });
        Ok(())
    })
}
