//! Soft deletion: hiding messages (`undertext_chat_hide`, alone or with an append in one
//! transaction) and asking a snapshot which messages are hidden.

use std::ops::Range;

use undertext::{Chat, Snapshot};

use crate::args;
use crate::buf::Buf;
use crate::guard::call;
use crate::handles::{ChatHandle, SnapshotHandle};
use crate::messages::{MessageIn, chat_for, messages_in};
use crate::status::{FfiError, FfiResult, Status};

/// A range of message seqs, `start` included, `end` excluded.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SeqRange {
    /// The first seq of the range.
    pub start: u64,
    /// One past the last seq of the range.
    pub end: u64,
}

/// The ranges argument, checked against the chat's length (`UNDERTEXT_OUT_OF_RANGE` past
/// it; an empty or reversed range is the engine's `UNDERTEXT_INVALID_ARGUMENT`).
///
/// # Safety
/// `ranges` points to `n` valid ranges (NULL only when `n` is 0).
unsafe fn ranges_in(c: &Chat, ranges: *const SeqRange, n: usize) -> FfiResult<Vec<Range<u64>>> {
    // SAFETY: forwarded contract of this function.
    let rs = unsafe { args::array(ranges, n, "ranges") }?;
    let len = c.len();
    for (i, r) in rs.iter().enumerate() {
        if r.end > len {
            return Err(FfiError::out_of_range(format!(
                "ranges[{i}]: hide {}..{}: the chat has {len} messages",
                r.start, r.end
            )));
        }
    }
    Ok(rs.iter().map(|r| r.start..r.end).collect())
}

/// A guarded change of the chat's messages `ranges` (a hide, an erasure): `f`'s new revision
/// in `*out_revision`.
///
/// # Safety
/// `ranges` points to `n` valid ranges (NULL only when `n` is 0); `out_revision` is NULL or
/// writable.
unsafe fn revise(
    chat: ChatHandle,
    ranges: *const SeqRange,
    n: usize,
    out_revision: *mut u64,
    f: impl FnOnce(&Chat, &[Range<u64>]) -> undertext::Result<u64>,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out_revision, "out_revision") }?;
        let (c, _) = chat.object()?;
        // SAFETY: forwarded contract.
        let rs = unsafe { ranges_in(&c, ranges, n) }?;
        out.set(f(&c, &rs)?);
        Ok(())
    })
}

/// Hides the messages of the `n` `ranges` (soft deletion) if the chat is still at
/// `expected_revision` (`UNDERTEXT_STALE_REVISION` otherwise); the new revision in
/// `*out_revision`. Hidden messages leave the model view, checkpoints and
/// `undertext_chat_range`/`undertext_snapshot_range`; `undertext_snapshot_get` still
/// reads them. Hiding a tool call without its results (or a result without its call) is
/// `UNDERTEXT_INVALID_ARGUMENT`, naming both messages.
///
/// # Safety
/// `ranges` points to `n` valid ranges (NULL only when `n` is 0); `out_revision` is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_hide(
    chat: ChatHandle,
    ranges: *const SeqRange,
    n: usize,
    expected_revision: u64,
    out_revision: *mut u64,
) -> Status {
    // SAFETY: forwarded contract.
    unsafe { revise(chat, ranges, n, out_revision, |c, rs| c.hide(rs, expected_revision)) }
}

/// Erases the messages of the `n` `ranges` if the chat is still at `expected_revision`
/// (`UNDERTEXT_STALE_REVISION` otherwise); the new revision in `*out_revision`. Use it where a
/// deletion must be honoured; `undertext_chat_hide` is the soft deletion that keeps the
/// records. An erased message is hidden (the same checks as a hide), no read returns it at
/// any revision (`undertext_snapshot_get` is `UNDERTEXT_NOT_FOUND`), and the next
/// `undertext_gc` drops its bytes from the store's files (its text, tool results, the
/// archives and attachments only it used, the summaries built over it).
///
/// # Safety
/// `ranges` points to `n` valid ranges (NULL only when `n` is 0); `out_revision` is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_erase(
    chat: ChatHandle,
    ranges: *const SeqRange,
    n: usize,
    expected_revision: u64,
    out_revision: *mut u64,
) -> Status {
    // SAFETY: forwarded contract.
    unsafe { revise(chat, ranges, n, out_revision, |c, rs| c.erase(rs, expected_revision)) }
}

/// `undertext_chat_hide` and `undertext_chat_append_batch` in one transaction (after a
/// crash both happened or neither): the new revision in `*out_revision`, the appended
/// seqs `*out_start .. *out_end`.
///
/// # Safety
/// `ranges` points to `n` valid ranges and `messages` to `n_messages` valid messages (each
/// NULL only when its count is 0); the out-pointers are NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_hide_and_append(
    chat: ChatHandle,
    ranges: *const SeqRange,
    n: usize,
    messages: *const MessageIn,
    n_messages: usize,
    expected_revision: u64,
    out_revision: *mut u64,
    out_start: *mut u64,
    out_end: *mut u64,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (ms, rev, start, end) = unsafe {
            (
                messages_in(messages, n_messages, "messages")?,
                args::output(out_revision, "out_revision")?,
                args::output(out_start, "out_start")?,
                args::output(out_end, "out_end")?,
            )
        };
        let c = chat_for(chat, &ms.iter().collect::<Vec<_>>())?;
        // SAFETY: forwarded contract.
        let rs = unsafe { ranges_in(&c, ranges, n) }?;
        let (r, seqs) = c.hide_and_append(&rs, ms, expected_revision)?;
        rev.set(r);
        start.set(seqs.start);
        end.set(seqs.end);
        Ok(())
    })
}

fn snapshot(snap: SnapshotHandle) -> FfiResult<Snapshot> {
    Ok(snap.object()?.0)
}

/// Whether message `seq` of the snapshot is hidden, in `*out`; `UNDERTEXT_OUT_OF_RANGE`
/// past the snapshot's length.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_snapshot_is_hidden(
    snap: SnapshotHandle,
    seq: u64,
    out: *mut bool,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let s = snapshot(snap)?;
        if seq >= s.len() {
            return Err(FfiError::out_of_range(format!(
                "message {seq}: the chat has {} messages at revision {}",
                s.len(),
                s.revision()
            )));
        }
        out.set(s.is_hidden(seq));
        Ok(())
    })
}

/// The snapshot's hidden seqs as JSON in `*out`: sorted, disjoint `[start, end]` pairs
/// (`end` excluded), `[]` when nothing is hidden.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_snapshot_hidden(snap: SnapshotHandle, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let s = snapshot(snap)?;
        let pairs: Vec<[u64; 2]> = s.hidden().iter().map(|r| [r.start, r.end]).collect();
        out.set(Buf::text(serde_json::to_string(&pairs).map_err(|e| FfiError::invalid(e.to_string()))?));
        Ok(())
    })
}
