//! Snapshots: immutable views of a chat at a revision, taken without a lock.

use undertext::Snapshot;

use crate::args;
use crate::buf::Buf;
use crate::guard::call;
use crate::handles::{self, ChatHandle, Object, SnapshotHandle, store_of};
use crate::status::{FfiError, FfiResult, Status};

/// Facts about a snapshot.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SnapshotInfo {
    /// The chat's id.
    pub chat_id: u64,
    /// The revision it shows.
    pub revision: u64,
    /// Number of messages in it.
    pub len: u64,
    /// The metadata version it shows.
    pub meta_version: u64,
}

/// Message `seq` of `snap` as JSON, or `UNDERTEXT_OUT_OF_RANGE` giving the length.
pub(crate) fn read_one(snap: &Snapshot, seq: u64) -> FfiResult<Buf> {
    if seq >= snap.len() {
        return Err(FfiError::out_of_range(format!(
            "message {seq}: the chat has {} messages at revision {}",
            snap.len(),
            snap.revision()
        )));
    }
    Ok(Buf::text(crate::json::message(&snap.get(seq)?).to_string()))
}

/// Messages `start..end` of `snap` as a JSON array, or `UNDERTEXT_OUT_OF_RANGE`.
pub(crate) fn read_range(snap: &Snapshot, start: u64, end: u64) -> FfiResult<Buf> {
    if start > end {
        return Err(FfiError::invalid(format!("range {start}..{end} is reversed")));
    }
    if end > snap.len() {
        return Err(FfiError::out_of_range(format!(
            "range {start}..{end}: the chat has {} messages at revision {}",
            snap.len(),
            snap.revision()
        )));
    }
    Ok(Buf::text(crate::json::messages(&snap.range(start..end)?).to_string()))
}

fn insert(chat: ChatHandle, snap: Snapshot) -> FfiResult<SnapshotHandle> {
    let (_, parent) = chat.object()?;
    let id = handles::insert(Object::Snapshot(snap), Some(store_of(chat.id, parent)))?;
    Ok(SnapshotHandle { id })
}

/// Takes the chat's current snapshot (a few atomic operations, no lock; safe while other
/// threads append). It never changes; free it with `undertext_snapshot_free`.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_snapshot(chat: ChatHandle, out: *mut SnapshotHandle) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (c, _) = chat.object()?;
        out.set(insert(chat, c.snapshot())?);
        Ok(())
    })
}

/// The chat as it was when `revision` ended (or now, for the current revision).
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_snapshot_at(
    chat: ChatHandle,
    revision: u64,
    out: *mut SnapshotHandle,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (c, _) = chat.object()?;
        if revision > c.revision() {
            return Err(FfiError::out_of_range(format!(
                "revision {revision}: the chat is at revision {}",
                c.revision()
            )));
        }
        out.set(insert(chat, c.snapshot_at(revision)?)?);
        Ok(())
    })
}

/// The snapshot's chat id, revision, length and metadata version.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_snapshot_info(snap: SnapshotHandle, out: *mut SnapshotInfo) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (s, _) = snap.object()?;
        out.set(SnapshotInfo {
            chat_id: s.chat_id().0,
            revision: s.revision(),
            len: s.len(),
            meta_version: s.meta_version(),
        });
        Ok(())
    })
}

/// Message `seq` of the snapshot as JSON (the shape of `undertext_chat_get`).
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_snapshot_get(snap: SnapshotHandle, seq: u64, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (s, _) = snap.object()?;
        out.set(read_one(&s, seq)?);
        Ok(())
    })
}

/// Messages `start .. end` of the snapshot as a JSON array; hidden messages
/// (`undertext_chat_hide`) are left out (`undertext_snapshot_get` reads one by its seq).
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_snapshot_range(
    snap: SnapshotHandle,
    start: u64,
    end: u64,
    out: *mut Buf,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (s, _) = snap.object()?;
        out.set(read_range(&s, start, end)?);
        Ok(())
    })
}

/// Frees a snapshot handle.
#[unsafe(no_mangle)]
pub extern "C" fn undertext_snapshot_free(snap: SnapshotHandle) -> Status {
    call(|| {
        handles::remove(snap.id, SnapshotHandle::KIND)?;
        Ok(())
    })
}
