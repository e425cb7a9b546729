//! `put_blob` and `get_blob`: content-addressed, deduplicated, verified, and read only
//! through an owner's grant.
//!
//! **The owner rule.** An owner reads or references a blob only through a grant it holds:
//! storing a blob (`put_blob`, or with an append) grants it to the one who stored it;
//! archiving a text grants its archive; attaching a blob to a message needs a grant and binds
//! one to the chat. A blob an owner holds no grant on is [`Error::NotFound`], the same error
//! as a blob never stored, so an id (which previews show to models) tells nothing about what
//! another owner stored. A grant written with a chat's records is bound to that chat and goes
//! when the chat is deleted; one written alone is the owner's own and stays. `gc` keeps a
//! blob while any grant or live reference holds it (see `store/gc.rs`).

use std::ops::Range;

use super::Store;
use super::core::{Core, RecordOut, Txn};
use crate::blob::{Blob, BlobId, Verify};
use crate::error::{Error, Result};
use crate::index::GRANTS;
use crate::record::{self, GrantRec, kind};

pub use super::core::MAX_BLOB_LEN;

/// The grants an owner holds on one blob: bits of `GRANT_BLOB` (a blob grant) and
/// `GRANT_ARCHIVE` (an archive grant), as the index's `grants` table holds them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Held {
    /// Of its own grant (written in a batch of no chat).
    pub own: u8,
    /// Of the grant bound to the chat asked about.
    pub chat: u8,
    /// Of every grant it holds.
    pub any: u8,
}

/// The grants `owner` holds on `id` in redb (and, with `chat`, the one bound to that chat).
/// Records still in the memtable are not seen: see [`granted`] for a read's check.
pub(crate) fn held(core: &Core, owner: &str, id: &BlobId, chat: Option<u64>) -> Result<Held> {
    let tx = core.index.read()?;
    let t = match tx.open_table(GRANTS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Held::default()),
        Err(e) => return Err(Error::index(e)),
    };
    let mut h = Held::default();
    for item in t.range((owner, id.0, 0u64)..=(owner, id.0, u64::MAX)).map_err(Error::index)? {
        let (k, v) = item.map_err(Error::index)?;
        let (c, bits) = (k.value().2, v.value());
        if c == 0 {
            h.own |= bits;
        }
        if Some(c) == chat {
            h.chat |= bits;
        }
        h.any |= bits;
    }
    Ok(h)
}

/// True when `owner` holds a grant with any of `bits` on `id`, consulting records written
/// moments ago: a grant still in the memtable counts as it is (`pending`), or is flushed to
/// redb first (without `pending`: the caller then reads what the grant's records index, such
/// as an archive's sizes).
pub(crate) fn granted(core: &Core, owner: &str, id: &BlobId, bits: u8, pending: bool) -> Result<bool> {
    if granted_locally(core, owner, id, bits, pending)? {
        return Ok(true);
    }
    // Fleet mode: a grant another process committed is pulled before the answer is no.
    match core.remote() {
        Some(remote) => {
            remote.catch_up_owner(core, owner)?;
            granted_locally(core, owner, id, bits, pending)
        }
        None => Ok(false),
    }
}

fn granted_locally(core: &Core, owner: &str, id: &BlobId, bits: u8, pending: bool) -> Result<bool> {
    // Both read before the lookup: a flush that lands between the lookup's read transaction
    // and a later reading of `flushed` would hide a grant from both.
    let (written, flushed) = (core.log.written(), core.index.flushed());
    if held(core, owner, id, None)?.any & bits != 0 {
        return Ok(true);
    }
    if pending && core.index.mem.read().pending_grant(owner, &id.0).is_some_and(|b| b & bits != 0) {
        return Ok(true);
    }
    if flushed < written {
        core.ensure_flushed(written)?;
        return Ok(held(core, owner, id, None)?.any & bits != 0);
    }
    Ok(false)
}

/// Adds a grant of `id` to `owner` to `txn`, unless the owner already holds one that does as
/// much: its own grant, or (for a grant bound to `chat`) one bound to that chat, or the same
/// grant earlier in `txn`. A grant in a transaction that writes records of a chat is bound to
/// that chat; alone, it is the owner's own.
pub(crate) fn grant_into(
    core: &Core,
    txn: &mut Txn,
    owner: &str,
    id: BlobId,
    chat: Option<u64>,
) -> Result<()> {
    let h = held(core, owner, &id, chat)?;
    if h.own != 0 || h.chat != 0 {
        return Ok(());
    }
    let payload = record::encode(&GrantRec { owner: owner.to_string(), id: id.0 })?.into_vec();
    if !txn.records.iter().any(|r| r.kind == kind::GRANT && r.payload == payload) {
        txn.push(RecordOut::history(kind::GRANT, payload));
    }
    Ok(())
}

/// The error for a blob `owner` may not read: the same as for a blob never stored.
pub(crate) fn not_found(id: &BlobId) -> Error {
    Error::NotFound { what: format!("blob {id}") }
}

impl Store {
    /// Stores `content` for `owner` and returns its [`BlobId`], granting the blob to `owner`
    /// (its own grant: it stays until `owner`'s store is gone). Content already present is
    /// not written again, whoever stored it. In `Group` and `Immediate` durability the blob
    /// is durable when this returns.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// let a = store.put_blob("alice", b"same bytes")?;
    /// let b = store.put_blob("alice", b"same bytes")?;
    /// assert_eq!(a, b);
    /// assert_eq!(a, undertext::BlobId::of(b"same bytes"));
    /// assert!(store.get_blob("bob", &a).is_err()); // not bob's: NotFound, as if absent
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn put_blob(&self, owner: &str, content: &[u8]) -> Result<BlobId> {
        Ok(self.put_blobs(owner, &[content])?[0])
    }

    /// Stores several blobs for `owner` in one transaction: after a crash either all of them
    /// (and their grants) are present or none of the ones that were new. Returns their ids in
    /// order.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// let ids = store.put_blobs("alice", &[b"call".as_slice(), b"result".as_slice()])?;
    /// assert_eq!(&*store.get_blob("alice", &ids[1])?, b"result");
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn put_blobs(&self, owner: &str, contents: &[&[u8]]) -> Result<Vec<BlobId>> {
        crate::history::check_owner(owner)?;
        let core = &self.inner.core;
        let mut txn = Txn::default();
        let mut ids = Vec::with_capacity(contents.len());
        let mut wait = None;
        for c in contents {
            let (id, existing) = txn.blob(core, c)?;
            grant_into(core, &mut txn, owner, id, None)?;
            ids.push(id);
            wait = wait.max(existing);
        }
        let committed = core.append(txn)?;
        core.wait_durable(wait.map_or(committed.end, |w| w.max(committed.end)))?;
        Ok(ids)
    }

    /// Checks that `owner` may read blob `id`.
    fn readable(&self, owner: &str, id: &BlobId) -> Result<()> {
        crate::history::check_owner(owner)?;
        match granted(&self.inner.core, owner, id, u8::MAX, true)? {
            true => Ok(()),
            false => Err(not_found(id)),
        }
    }

    /// Returns the blob `id` of `owner`, verified against its hash (see
    /// [`Store::get_blob_with`]).
    ///
    /// A blob `owner` holds no grant on — never stored, or stored only by others — is
    /// [`Error::NotFound`](crate::Error::NotFound); stored bytes that fail their checksum or
    /// hash are [`Error::Corrupt`](crate::Error::Corrupt) naming segment and offset.
    pub fn get_blob(&self, owner: &str, id: &BlobId) -> Result<Blob> {
        self.get_blob_with(owner, id, self.inner.core.opts.verify)
    }

    /// Returns the blob `id` of `owner`, checking as much as `verify` asks. Uncompressed
    /// blobs in sealed segments are returned without a copy.
    pub fn get_blob_with(&self, owner: &str, id: &BlobId, verify: Verify) -> Result<Blob> {
        self.readable(owner, id)?;
        self.inner.core.get_blob(id, verify)
    }

    /// Bytes `range` of blob `id` of `owner`: for a chunked blob (see
    /// [`Options::chunk_threshold`]), only the chunks the range overlaps are read. A range
    /// past the end is an error giving the length.
    ///
    /// [`Options::chunk_threshold`]: crate::Options::chunk_threshold
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    /// let id = store.put_blob("me", &big)?;
    /// assert_eq!(store.get_blob_range("me", &id, 100_000..100_010)?, &big[100_000..100_010]);
    /// assert_eq!(store.blob_len("me", &id)?, 300_000);
    /// assert!(store.get_blob_range("me", &id, 0..300_001).is_err());
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn get_blob_range(&self, owner: &str, id: &BlobId, range: Range<u64>) -> Result<Vec<u8>> {
        self.readable(owner, id)?;
        self.inner.core.get_blob_range(id, range, self.inner.core.opts.verify)
    }

    /// Length of blob `id` of `owner` in bytes (a chunked blob's chunks are not read).
    pub fn blob_len(&self, owner: &str, id: &BlobId) -> Result<u64> {
        self.readable(owner, id)?;
        self.inner.core.blob_len(id)
    }

    /// True when `owner` holds a grant on a stored blob with this id (false for a blob only
    /// other owners hold: the same answer as for a blob never stored).
    pub fn contains_blob(&self, owner: &str, id: &BlobId) -> Result<bool> {
        crate::history::check_owner(owner)?;
        Ok(granted(&self.inner.core, owner, id, u8::MAX, true)? && self.inner.core.blob_loc(id)?.is_some())
    }

    /// Maintenance only (tests of `gc`, repair tools): whether a blob with this id is stored,
    /// whoever holds it. Not an owner's API: it answers for every owner's blobs.
    #[doc(hidden)]
    pub fn unscoped_contains_blob(&self, id: &BlobId) -> Result<bool> {
        Ok(self.inner.core.index.blob(id)?.is_some())
    }

    /// Maintenance only: blob `id`, whoever holds it. Not an owner's API.
    #[doc(hidden)]
    pub fn unscoped_get_blob(&self, id: &BlobId) -> Result<Blob> {
        self.inner.core.get_blob(id, self.inner.core.opts.verify)
    }
}
