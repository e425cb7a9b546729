//! Checkpoints: build with a summarizer, inspect, publish under the guard.

use std::sync::Arc;

use undertext::CheckpointOptions;

use crate::args;
use crate::buf::Buf;
use crate::guard::call;
use crate::handles::{self, ChatCheckpoint, ChatHandle, CheckpointHandle, Object, store_of};
use crate::status::{FfiError, FfiResult, Status, UNDERTEXT_CALLBACK};
use crate::summarizer::{SummarizerIn, callback_failed, reset_callback_failed, summarizer_in};

/// What a checkpoint covers and what building it did.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckpointInfo {
    /// The chat revision it was built from.
    pub base_revision: u64,
    /// The first seq it does not cover (its summary stands for `0 .. reach`).
    pub reach: u64,
    /// Segments of settled history it summarizes.
    pub n_segments: u64,
    /// Segments summarized by this build (not found in the summary cache).
    pub summarized: u64,
    /// Merges made by this build.
    pub merged: u64,
    /// Summaries found in the cache.
    pub cached: u64,
    /// Levels of merging above the segments.
    pub depth: u64,
}

/// The published checkpoint of a chat.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PublishedInfo {
    /// Nonzero when a checkpoint is published; the other fields are 0 otherwise.
    pub present: u8,
    /// Its base revision.
    pub base_revision: u64,
    /// Its reach.
    pub reach: u64,
}

pub(crate) fn checkpoint_options(segment_tokens: u64, fan_in: u32) -> CheckpointOptions {
    let d = CheckpointOptions::default();
    CheckpointOptions {
        segment_tokens: if segment_tokens == 0 { d.segment_tokens } else { segment_tokens },
        fan_in: if fan_in == 0 { d.fan_in } else { fan_in as usize },
        ..d
    }
}

/// Maps a build error: a failed callback on this thread is `UNDERTEXT_CALLBACK`.
pub(crate) fn build_error(e: undertext::Error) -> FfiError {
    let mut f = FfiError::from(e);
    if callback_failed() {
        f.status = UNDERTEXT_CALLBACK;
    }
    f
}

fn insert(chat: ChatHandle, parent: Option<u64>, cp: ChatCheckpoint) -> FfiResult<CheckpointHandle> {
    let id = handles::insert(Object::Checkpoint(Arc::new(cp)), Some(store_of(chat.id, parent)))?;
    Ok(CheckpointHandle { id })
}

/// Builds a checkpoint of the chat's settled history (before the last two user turns and
/// the first pending approval) with `summarizer` (NULL: the built-in extractive one), on
/// this thread. Summaries of unchanged segments are reused. `segment_tokens` and `fan_in`
/// of 0 take the defaults (8,000 and 4). Not published: see
/// `undertext_chat_publish_checkpoint`. A failing callback gives `UNDERTEXT_CALLBACK`.
///
/// # Safety
/// `summarizer` is NULL or valid; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_build_checkpoint(
    chat: ChatHandle,
    summarizer: *const SummarizerIn,
    segment_tokens: u64,
    fan_in: u32,
    out: *mut CheckpointHandle,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (s, out) = unsafe { (summarizer_in(summarizer)?, args::output(out, "out")?) };
        let (c, parent) = chat.object()?;
        reset_callback_failed();
        let cp = c.build_checkpoint(&*s, &checkpoint_options(segment_tokens, fan_in)).map_err(build_error)?;
        out.set(insert(chat, parent, ChatCheckpoint { chat: c.id().0, cp })?);
        Ok(())
    })
}

/// What the checkpoint covers and what building it did.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_checkpoint_info(cp: CheckpointHandle, out: *mut CheckpointInfo) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (c, _) = cp.object()?;
        let c = &c.cp;
        out.set(CheckpointInfo {
            base_revision: c.base_revision,
            reach: c.reach,
            n_segments: c.segments.len() as u64,
            summarized: c.stats.summarized as u64,
            merged: c.stats.merged as u64,
            cached: c.stats.cached as u64,
            depth: c.stats.depth as u64,
        });
        Ok(())
    })
}

/// The checkpoint's summary (of messages `0 .. reach`) as UTF-8 in `*out`.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_checkpoint_summary(cp: CheckpointHandle, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (c, _) = cp.object()?;
        out.set(Buf::text(c.cp.summary.clone()));
        Ok(())
    })
}

/// Publishes the checkpoint in one guarded transaction: `UNDERTEXT_CONFLICT` (nothing
/// written) if the chat was edited or truncated since its base revision, or if it does not
/// reach beyond the published one. Appends since the base are fine: later views hold the
/// summary and the messages from `reach` on. A checkpoint of another chat is
/// `UNDERTEXT_INVALID_ARGUMENT`.
#[unsafe(no_mangle)]
pub extern "C" fn undertext_chat_publish_checkpoint(chat: ChatHandle, cp: CheckpointHandle) -> Status {
    call(|| {
        let (c, _) = chat.object()?;
        let (p, _) = cp.object()?;
        if p.chat != c.id().0 {
            return Err(FfiError::invalid(format!(
                "checkpoint: built for chat {}, not for chat {}",
                p.chat,
                c.id().0
            )));
        }
        c.publish_checkpoint(&p.cp)?;
        Ok(())
    })
}

/// The chat's published checkpoint, if any.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_published_checkpoint(
    chat: ChatHandle,
    out: *mut PublishedInfo,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (c, _) = chat.object()?;
        out.set(match c.published_checkpoint() {
            Some((base_revision, reach)) => PublishedInfo { present: 1, base_revision, reach },
            None => PublishedInfo::default(),
        });
        Ok(())
    })
}

/// The checkpoint the worker prepared for this chat (it may be stale: compare its base
/// revision with the chat's); `UNDERTEXT_NOT_FOUND` if none is prepared.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_prepared_checkpoint(
    chat: ChatHandle,
    out: *mut CheckpointHandle,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (c, parent) = chat.object()?;
        let Some(cp) = c.prepared() else {
            return Err(FfiError::from(undertext::Error::NotFound {
                what: format!("prepared checkpoint of chat {}", c.id().0),
            }));
        };
        out.set(insert(chat, parent, ChatCheckpoint { chat: c.id().0, cp: (*cp).clone() })?);
        Ok(())
    })
}

/// Frees a checkpoint handle.
#[unsafe(no_mangle)]
pub extern "C" fn undertext_checkpoint_free(cp: CheckpointHandle) -> Status {
    call(|| {
        handles::remove(cp.id, CheckpointHandle::KIND)?;
        Ok(())
    })
}
