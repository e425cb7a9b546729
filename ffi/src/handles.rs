//! Opaque, generation-checked handles.
//!
//! Every object handed to C (store, chat, snapshot, view, checkpoint, worker) lives in one
//! process-wide table; C holds `(generation << 32) | slot`. Freeing an object empties its
//! slot and bumps the slot's generation, so a freed handle — or a copy of it, or a later
//! object reusing the slot — is recognized and refused with `UNDERTEXT_STALE_HANDLE`, never
//! dereferenced. Closing a store frees every handle made from it.
//!
//! The table's lock is held only to look up or insert; objects are cloned out (they are
//! cheap reference-counted handles) and dropped after the lock is released.

use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;
use undertext::Checkpoint;
use undertext::View;
use undertext::Worker;
use undertext::{Chat, Snapshot, Store};

use crate::status::{FfiError, FfiResult, UNDERTEXT_BAD_HANDLE, UNDERTEXT_STALE_HANDLE};

/// A built checkpoint and the chat it was built for.
#[derive(Debug)]
pub(crate) struct ChatCheckpoint {
    /// The chat's id.
    pub(crate) chat: u64,
    /// The checkpoint.
    pub(crate) cp: Checkpoint,
}

/// An object held for C.
#[derive(Debug, Clone)]
pub(crate) enum Object {
    Store(Store),
    Chat(Chat),
    Snapshot(Snapshot),
    View(Arc<View>),
    Checkpoint(Arc<ChatCheckpoint>),
    Worker(Arc<Worker>),
}

impl Object {
    fn kind(&self) -> &'static str {
        match self {
            Object::Store(_) => "store",
            Object::Chat(_) => "chat",
            Object::Snapshot(_) => "snapshot",
            Object::View(_) => "view",
            Object::Checkpoint(_) => "checkpoint",
            Object::Worker(_) => "worker",
        }
    }
}

#[derive(Debug)]
struct Entry {
    object: Object,
    /// The store handle it was made from (None for a store).
    parent: Option<u64>,
}

#[derive(Debug, Default)]
struct Slot {
    generation: u32,
    entry: Option<Entry>,
}

#[derive(Debug, Default)]
struct Table {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

static TABLE: LazyLock<Mutex<Table>> = LazyLock::new(|| Mutex::new(Table::default()));

fn split(id: u64) -> (u32, u32) {
    ((id >> 32) as u32, id as u32)
}

impl Table {
    fn slot(&self, id: u64, kind: &str) -> FfiResult<&Slot> {
        let (generation, index) = split(id);
        if generation == 0 {
            return Err(FfiError::new(
                UNDERTEXT_BAD_HANDLE,
                format!("{kind} handle {id:#x}: not a handle (the zero handle, or never issued)"),
            ));
        }
        let slot = self.slots.get(index as usize).ok_or_else(|| {
            FfiError::new(
                UNDERTEXT_BAD_HANDLE,
                format!("{kind} handle {id:#x}: never issued by this process"),
            )
        })?;
        if slot.generation != generation || slot.entry.is_none() {
            return Err(FfiError::new(
                UNDERTEXT_STALE_HANDLE,
                format!("{kind} handle {id:#x}: already freed or closed (or its store was closed)"),
            ));
        }
        Ok(slot)
    }

    fn entry(&self, id: u64, kind: &str) -> FfiResult<&Entry> {
        let e = self.slot(id, kind)?.entry.as_ref().ok_or_else(|| {
            FfiError::new(UNDERTEXT_STALE_HANDLE, format!("{kind} handle {id:#x}: already freed or closed"))
        })?;
        if e.object.kind() != kind {
            return Err(FfiError::new(
                UNDERTEXT_BAD_HANDLE,
                format!("handle {id:#x}: expected a {kind} handle, found a {} handle", e.object.kind()),
            ));
        }
        Ok(e)
    }

    fn take(&mut self, index: u32) -> Option<Entry> {
        let slot = self.slots.get_mut(index as usize)?;
        let e = slot.entry.take()?;
        // Generation 0 is never issued, so the zero handle is never valid.
        slot.generation = slot.generation.checked_add(1).unwrap_or(1);
        self.free.push(index);
        Some(e)
    }
}

/// Stores `object` (made from store handle `parent`) and returns its handle id.
pub(crate) fn insert(object: Object, parent: Option<u64>) -> FfiResult<u64> {
    let mut t = TABLE.lock();
    let index = match t.free.pop() {
        Some(i) => i,
        None => {
            let i = u32::try_from(t.slots.len())
                .map_err(|_| FfiError::invalid("handle table is full (2^32 live handles)"))?;
            t.slots.push(Slot { generation: 1, entry: None });
            i
        }
    };
    let slot = &mut t.slots[index as usize];
    slot.entry = Some(Entry { object, parent });
    Ok(((slot.generation as u64) << 32) | index as u64)
}

/// The object behind handle `id`, which must be a `kind` handle, and its parent store handle.
pub(crate) fn get(id: u64, kind: &str) -> FfiResult<(Object, Option<u64>)> {
    let t = TABLE.lock();
    let e = t.entry(id, kind)?;
    Ok((e.object.clone(), e.parent))
}

/// Frees handle `id` (a `kind` handle) and, for a store, every handle made from it.
/// Workers among them are stopped (their threads joined) after the table is unlocked.
pub(crate) fn remove(id: u64, kind: &str) -> FfiResult<()> {
    let objects = take(id, kind)?;
    for o in objects {
        if let Object::Worker(w) = o {
            stop(w);
        }
    }
    Ok(())
}

/// Stops a worker once no call on another thread still holds it (such calls are short:
/// they read counters), so that when this returns no worker thread runs a callback.
fn stop(mut w: Arc<Worker>) {
    loop {
        match Arc::try_unwrap(w) {
            Ok(worker) => return worker.stop(),
            Err(shared) => {
                w = shared;
                std::thread::yield_now();
            }
        }
    }
}

fn take(id: u64, kind: &str) -> FfiResult<Vec<Object>> {
    let mut t = TABLE.lock();
    t.entry(id, kind)?;
    let (_, index) = split(id);
    // Only stores have children; other frees do not scan the table.
    let children: Vec<u32> = if kind == StoreHandle::KIND {
        (0..t.slots.len() as u32)
            .filter(|&i| t.slots[i as usize].entry.as_ref().is_some_and(|e| e.parent == Some(id)))
            .collect()
    } else {
        Vec::new()
    };
    let mut out = Vec::with_capacity(children.len() + 1);
    // Children first, so the store itself is dropped last.
    for i in children {
        out.extend(t.take(i).map(|e| e.object));
    }
    out.extend(t.take(index).map(|e| e.object));
    Ok(out)
}

macro_rules! handle_impl {
    ($name:ident, $kind:literal, $variant:ident, $inner:ty) => {
        impl $name {
            pub(crate) const KIND: &'static str = $kind;

            /// The object behind this handle and its parent store handle.
            pub(crate) fn object(self) -> FfiResult<($inner, Option<u64>)> {
                match get(self.id, $kind)? {
                    (Object::$variant(o), parent) => Ok((o, parent)),
                    (other, _) => Err(FfiError::new(
                        UNDERTEXT_BAD_HANDLE,
                        format!("handle {:#x}: expected a {}, found a {}", self.id, $kind, other.kind()),
                    )),
                }
            }
        }
    };
}

/// An open store (`undertext_store_open`); closed with `undertext_store_close`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreHandle {
    /// `(generation << 32) | slot`; 0 is never a valid handle.
    pub id: u64,
}

handle_impl!(StoreHandle, "store", Store, Store);

/// An open chat of one owner (`undertext_chat_open`); freed with `undertext_chat_close`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatHandle {
    /// `(generation << 32) | slot`; 0 is never a valid handle.
    pub id: u64,
}

handle_impl!(ChatHandle, "chat", Chat, Chat);

/// An immutable snapshot of a chat; freed with `undertext_snapshot_free`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotHandle {
    /// `(generation << 32) | slot`; 0 is never a valid handle.
    pub id: u64,
}

handle_impl!(SnapshotHandle, "snapshot", Snapshot, Snapshot);

/// A model view built under a budget; freed with `undertext_view_free`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewHandle {
    /// `(generation << 32) | slot`; 0 is never a valid handle.
    pub id: u64,
}

handle_impl!(ViewHandle, "view", View, Arc<View>);

/// A built checkpoint, published or not; freed with `undertext_checkpoint_free`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointHandle {
    /// `(generation << 32) | slot`; 0 is never a valid handle.
    pub id: u64,
}

handle_impl!(CheckpointHandle, "checkpoint", Checkpoint, Arc<ChatCheckpoint>);

/// A running background worker; stopped and freed with `undertext_worker_stop`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerHandle {
    /// `(generation << 32) | slot`; 0 is never a valid handle.
    pub id: u64,
}

handle_impl!(WorkerHandle, "worker", Worker, Arc<Worker>);

/// The store handle a child object was made from (a store is its own).
pub(crate) fn store_of(id: u64, parent: Option<u64>) -> u64 {
    parent.unwrap_or(id)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::*;

    fn temp_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), undertext::Options::default()).unwrap();
        (dir, store)
    }

    #[test]
    fn a_freed_handle_is_stale_even_after_its_slot_is_reused() {
        let (_dir, store) = temp_store();
        let a = insert(Object::Store(store.clone()), None).unwrap();
        remove(a, "store").unwrap();
        let b = insert(Object::Store(store), None).unwrap();
        assert_eq!(a as u32, b as u32, "the slot is reused");
        assert_ne!(a, b, "with a new generation");
        assert_eq!(get(a, "store").unwrap_err().status, UNDERTEXT_STALE_HANDLE);
        assert!(get(b, "store").is_ok());
        assert_eq!(get(b, "chat").unwrap_err().status, UNDERTEXT_BAD_HANDLE);
        assert_eq!(get(0, "store").unwrap_err().status, UNDERTEXT_BAD_HANDLE);
        remove(b, "store").unwrap();
    }
}
