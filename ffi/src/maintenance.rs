//! Store maintenance: sync on demand, statistics, the integrity check and offline garbage
//! collection.

use serde_json::json;
use undertext::{GcReport, Options, OwnerStats, Store, StoreStats};

use crate::args::{self, Str};
use crate::buf::Buf;
use crate::guard::call;
use crate::handles::StoreHandle;
use crate::status::Status;
use crate::store::{StoreOptions, to_options};

/// What one owner's own chats hold (`undertext_owner_stats`): figures no other owner's
/// writes move, so an owner can be shown them (unlike `undertext_store_stats`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct OwnerStatsC {
    /// The owner's chats (deleted ones not counted).
    pub chats: u64,
    /// Their visible messages.
    pub messages: u64,
    /// Bytes of text in them as written (texts, summaries, tool calls, inline results,
    /// approval prompts).
    pub text_bytes: u64,
    /// Tool results among them.
    pub tool_results: u64,
    /// Tool results kept as archives.
    pub archived_results: u64,
    /// Bytes of those archives as written.
    pub archived_bytes: u64,
}

impl From<OwnerStats> for OwnerStatsC {
    fn from(s: OwnerStats) -> Self {
        OwnerStatsC {
            chats: s.chats,
            messages: s.messages,
            text_bytes: s.text_bytes,
            tool_results: s.tool_results,
            archived_results: s.archived_results,
            archived_bytes: s.archived_bytes,
        }
    }
}

/// Store-wide sizes and counters of an open store (`undertext_store_stats`), for the
/// store's operator: they move when any owner writes, so never show them to an owner.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreStatsC {
    /// Segment files in the log.
    pub segments: u64,
    /// Bytes of data in the log (sealed segments, and the active one up to its last batch).
    pub log_bytes: u64,
    /// Bytes of the segment files on disk, including preallocated space.
    pub log_file_bytes: u64,
    /// Bytes of the index file.
    pub index_bytes: u64,
    /// `fdatasync` calls on the log since the store was opened.
    pub log_syncs: u64,
    /// Blobs committed to the index (entries not yet flushed to it are not counted).
    pub indexed_blobs: u64,
    /// Chats held in memory.
    pub chats_in_memory: u64,
    /// Blob bodies (whole blobs, or chunks of chunked ones) read since open.
    pub blob_bodies_read: u64,
}

impl From<StoreStats> for StoreStatsC {
    fn from(s: StoreStats) -> Self {
        StoreStatsC {
            segments: s.segments,
            log_bytes: s.log_bytes,
            log_file_bytes: s.log_file_bytes,
            index_bytes: s.index_bytes,
            log_syncs: s.log_syncs,
            indexed_blobs: s.indexed_blobs,
            chats_in_memory: s.chats_in_memory,
            blob_bodies_read: s.blob_bodies_read,
        }
    }
}

/// What `undertext_gc` did.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct GcReportC {
    /// Deleted chats whose records (other than creation and deletion) were dropped by this
    /// collection; a chat collected before does not count again.
    pub deleted_chats: u64,
    /// Records in the log before.
    pub records_before: u64,
    /// Records in the log after.
    pub records_after: u64,
    /// Blob and chunk-manifest records dropped (used only by deleted chats).
    pub blobs_removed: u64,
    /// Bytes of log data before.
    pub log_bytes_before: u64,
    /// Bytes of log data after.
    pub log_bytes_after: u64,
}

impl From<GcReport> for GcReportC {
    fn from(r: GcReport) -> Self {
        GcReportC {
            deleted_chats: r.deleted_chats,
            records_before: r.records_before,
            records_after: r.records_after,
            blobs_removed: r.blobs_removed,
            log_bytes_before: r.log_bytes_before,
            log_bytes_after: r.log_bytes_after,
        }
    }
}

/// Makes every acknowledged write durable, log and index, whatever the durability mode
/// (with `UNDERTEXT_DURABILITY_NONE`, call it at the points that must survive a crash).
#[unsafe(no_mangle)]
pub extern "C" fn undertext_store_sync(store: StoreHandle) -> Status {
    call(|| {
        let (s, _) = store.object()?;
        s.sync()?;
        Ok(())
    })
}

/// What `owner`'s own chats hold, in `*out` (see `undertext_owner_stats_t`).
///
/// # Safety
/// `owner` is a valid `undertext_str_t`; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_owner_stats(
    store: StoreHandle,
    owner: Str,
    out: *mut OwnerStatsC,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let (owner, out) = unsafe { (args::text(owner, "owner")?, args::output(out, "out")?) };
        let (s, _) = store.object()?;
        out.set(s.owner_stats(owner)?.into());
        Ok(())
    })
}

/// Store-wide sizes and counters of the store now, in `*out`: for the store's operator
/// (they move when any owner writes; `undertext_owner_stats` is what an owner may see).
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_store_stats(store: StoreHandle, out: *mut StoreStatsC) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (s, _) = store.object()?;
        out.set(s.stats()?.into());
        Ok(())
    })
}

/// What opening the store repaired or, for a read-only open, skipped as damaged (a damaged
/// frame, a damaged segment header, missing segments or transaction ids), as a JSON array of
/// strings in `*out` (empty after a clean open). Free it with `undertext_buf_free`.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_store_open_warnings(store: StoreHandle, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (s, _) = store.object()?;
        out.set(Buf::text(json!(s.open_warnings()).to_string()));
        Ok(())
    })
}

/// Verifies every checksum of the log, every blob against its id, and the index against the
/// log, and reports as JSON in `*out`: `{"ok": bool, "segments", "batches", "records",
/// "blobs", "problems": [{"segment", "offset", "reason"}], "index_problems": [text]}`. Damage
/// is reported in `problems` (the log) and `index_problems` (the index, which
/// `undertext check --rebuild` repairs); the call still returns `UNDERTEXT_OK`. A failure
/// to read the files at all is an error status.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_store_check(store: StoreHandle, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (s, _) = store.object()?;
        let r = s.check()?;
        let problems: Vec<_> = r
            .problems
            .iter()
            .map(|p| json!({"segment": p.segment, "offset": p.offset, "reason": p.reason}))
            .collect();
        let v = json!({
            "ok": r.is_ok(),
            "segments": r.segments,
            "batches": r.batches,
            "records": r.records,
            "blobs": r.blobs,
            "problems": problems,
            "index_problems": r.index_problems,
        });
        out.set(Buf::text(v.to_string()));
        Ok(())
    })
}

/// Garbage-collects the store in directory `path`, offline: rewrites its log without the
/// records of chats deleted with `undertext_chat_delete` and the blobs only they used
/// (blobs no chat references, stored with `undertext_put_blob` or `undertext_archive`, are
/// kept). `options` is NULL (defaults) or the options the store is used with; the store
/// is never created. It opens the store itself, so it fails with `UNDERTEXT_LOCKED` while
/// the store is open (close it first, in this process or any other). A crash during the
/// swap is finished or rolled back by the next open. What was done in `*out`.
///
/// # Safety
/// `path` is a valid string argument; `options` is NULL or points to an
/// `undertext_options_t`; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_gc(
    path: Str,
    options: *const StoreOptions,
    out: *mut GcReportC,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (path, out) =
            unsafe { (args::path(path, "path", "a store directory")?, args::output(out, "out")?) };
        let opts = if options.is_null() {
            Options::default()
        } else {
            // SAFETY: non-NULL; the caller guarantees a valid struct.
            to_options(unsafe { args::input(options, "options") }?)?
        };
        out.set(Store::gc(path, opts)?.into());
        Ok(())
    })
}
