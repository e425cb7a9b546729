//! The kernel's seam for fleet mode: a shared catalog and blob store behind [`Core`].
//!
//! An embedded store has no remote: its log is the truth. A fleet store (the `fleet` module,
//! PostgreSQL) keeps the truth in the remote and uses the local log and index as a replica:
//! every transaction is committed to the remote first and then appended locally with the
//! same encoded records, and batches other processes committed are pulled into the local log
//! before a chat is read or written. So history, archives, checkpoints and views read the
//! local log and index exactly as in embedded mode.
//!
//! Records form *streams*, each with a version that goes up by one per committed batch: one
//! per chat (every batch that names the chat), one per owner (its own grants) and one global
//! stream (cached summaries). A batch is committed only while its stream's row is locked in
//! the remote and the local replica holds every earlier batch of that stream, so a stream's
//! batches reach every replica in the order the remote committed them, none missing.

use std::sync::Arc;

use super::core::{Committed, Core, Txn};
use crate::base::blob::BlobId;
use crate::base::error::Result;

/// What the remote says about one chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChatHead {
    /// Batches committed for the chat.
    pub version: u64,
    /// True once the chat is deleted.
    pub deleted: bool,
    /// The highest version this process pulled from the remote (rather than committed
    /// itself): a chat state loaded before it must be loaded again.
    pub pulled: u64,
    /// The version the local replica holds.
    pub applied: u64,
    /// The highest version this process pulled that did more than append messages (an
    /// edit, truncation, hide, metadata, pin, compaction, calibration or checkpoint): a chat
    /// state loaded at or after it follows later pulls by reading only the appended messages;
    /// one loaded before it loads again.
    pub changed: u64,
}

/// What change notification says of one chat (fleet mode's LISTEN/NOTIFY,
/// `fleet/notify.rs`; see [`Remote::notified`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notified {
    /// The listening session: it changes when the listener reconnects (a chat brought up to
    /// date in another epoch must be brought up to date once more: a commit while the
    /// listener was away is never notified).
    pub epoch: u64,
    /// The highest version of the chat notified in this epoch (0: none).
    pub version: u64,
    /// True when a notification of this epoch said the chat is deleted.
    pub deleted: bool,
}

/// A shared catalog and blob store (implemented by the `fleet` module).
pub(crate) trait Remote: Send + Sync + std::fmt::Debug {
    /// Commits `txn` to the remote (its blobs uploaded first, then its records in one
    /// catalog transaction under its stream's lock), then appends it to the local replica.
    fn commit(&self, core: &Core, txn: Txn) -> Result<Committed>;

    /// Locks chat `chat` in the remote for a write by this thread (until the returned lock is
    /// committed through [`Remote::commit`] or dropped) and brings the local replica up to
    /// the chat's last committed batch. `None`: the chat does not exist.
    fn lock_chat(&self, core: &Core, chat: u64) -> Result<Option<(WriteLock, ChatHead)>>;

    /// Brings the local replica up to chat `chat` of `owner`'s last committed batch, without
    /// a lock. `None`: the remote holds no such chat of `owner` (nothing is pulled).
    fn catch_up_chat(&self, core: &Core, chat: u64, owner: &str) -> Result<Option<ChatHead>>;

    /// Brings the local replica up to date with `owner`'s own stream and every chat of
    /// `owner`; returns the chats of `owner` (id, head), deleted ones included.
    fn catch_up_owner(&self, core: &Core, owner: &str) -> Result<Vec<(u64, ChatHead)>>;

    /// Brings the local replica up to date with what may grant `owner` one of `blobs`:
    /// `owner`'s own stream and the chats of `owner` the remote says grant one of them (all
    /// of the owner's chats when it cannot say: [`Remote::catch_up_owner`], the default).
    fn catch_up_granting(&self, core: &Core, owner: &str, _blobs: &[BlobId]) -> Result<()> {
        self.catch_up_owner(core, owner).map(drop)
    }

    /// Brings the local replica up to the last committed batch of each of `chats` that is a
    /// chat of `owner` (one query for them all); returns those chats (id, head), deleted ones
    /// included. The others are left out.
    fn catch_up_chats(&self, core: &Core, owner: &str, chats: &[u64]) -> Result<Vec<(u64, ChatHead)>>;

    /// Brings the local replica up to the chats of `owner` whose metadata `field` is `value`
    /// as the remote names them (with any whose field the remote does not know), and to those
    /// of `also` (the replica's own chats with that value: another process may have changed
    /// it), in one round trip; returns them (id, head), deleted ones included. `None` when the
    /// remote cannot say which chats have the value (then [`Remote::catch_up_owner`] and the
    /// local index answer; nothing was pulled).
    fn catch_up_found(
        &self,
        _core: &Core,
        _owner: &str,
        _field: crate::model::message::MetaField<'_>,
        _value: &str,
        _also: &[u64],
    ) -> Result<Option<Vec<(u64, ChatHead)>>> {
        Ok(None)
    }

    /// One page of `owner`'s chats not deleted, newest activity first then by id, after the
    /// cursor `after` (last activity in ms, id), at most `limit`, answered by the remote
    /// without pulling them: their ids. `None` when it cannot say (then
    /// [`Remote::catch_up_owner`] and the local index answer).
    fn page(&self, _owner: &str, _after: Option<(u64, u64)>, _limit: usize) -> Result<Option<Vec<u64>>> {
        Ok(None)
    }

    /// Copies blob `id` (a blob or manifest record) from the remote into the local
    /// replica, verified against its id. False: the remote does not hold it.
    fn fetch_blob(&self, core: &Core, id: &BlobId) -> Result<bool>;

    /// Copies those of blobs `ids` the remote holds into the local replica, as
    /// [`Remote::fetch_blob`] each, in one request where the remote can: how many it copied.
    fn fetch_blobs(&self, core: &Core, ids: &[BlobId]) -> Result<usize> {
        let mut n = 0;
        for id in ids {
            n += usize::from(self.fetch_blob(core, id)?);
        }
        Ok(n)
    }

    /// A fresh chat id, unique across every process sharing the remote.
    fn allocate_chat(&self) -> Result<u64>;

    /// Releases a lock taken with [`Remote::lock_chat`] (rolls back if nothing was
    /// committed).
    fn release(&self, chat: u64);

    /// Change notification: whether another process committed to chat `chat`, learned
    /// without a query. `None`: this store does not listen (not yet, or not at all: through a
    /// transaction pooler, with `notify=off`, or on a schema older than version 2, or while
    /// its listening connection is down); a reader must then query ([`Remote::catch_up_chat`])
    /// to see foreign writes. `Some(n)`: a state of the chat brought up to version `v` (the
    /// `ChatHead::version` of a catch-up begun in epoch `n.epoch`, or later) is current as far
    /// as notifications tell while `n.epoch` is unchanged and `n.version <= v`. The first
    /// call starts the listener.
    fn notified(&self, _chat: u64) -> Option<Notified> {
        None
    }

    /// The versions of chat `chat` the local replica holds, without a query: (applied,
    /// pulled), as in [`ChatHead`].
    fn replica_versions(&self, _chat: u64) -> (u64, u64) {
        (0, 0)
    }

    /// The chats of `owner` titled `title`, answered by the remote without pulling the
    /// owner's chats: `None` when it cannot say (then [`Remote::catch_up_owner`] and the
    /// local index answer). `Store::find_chats` by title can pull only these chats
    /// ([`Remote::catch_up_chat`] each) instead of every chat of the owner.
    #[cfg_attr(not(feature = "fleet"), expect(dead_code, reason = "asked only through `fleet::titled`"))]
    fn titled(&self, _owner: &str, _title: &str) -> Result<Option<Vec<u64>>> {
        Ok(None)
    }
}

/// A chat locked in the remote for a write by this thread; dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct WriteLock {
    remote: Arc<dyn Remote>,
    chat: u64,
}

impl WriteLock {
    #[cfg_attr(not(feature = "fleet"), expect(dead_code, reason = "only the fleet backend locks chats"))]
    pub(crate) fn new(remote: Arc<dyn Remote>, chat: u64) -> WriteLock {
        WriteLock { remote, chat }
    }
}

impl Drop for WriteLock {
    fn drop(&mut self) {
        self.remote.release(self.chat);
    }
}
