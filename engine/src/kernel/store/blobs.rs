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

use super::core::{Core, RecordOut, Txn, not_found};
use crate::base::blob::{Blob, BlobId, Verify};
use crate::base::error::Result;
pub(crate) use crate::disk::index::Held;
use crate::disk::record::{self, GrantRec, Kind};

pub use super::core::MAX_BLOB_LEN;

/// The grants `owner` holds on `id` as its own or (with `chat`) bound to that chat, in
/// records not yet in redb and in redb: what a write needs to know to leave out a grant the
/// owner holds already. No flush: the memtable is read first, and a record leaves it only
/// once redb holds it. (`any` is redb's alone: see [`granted`] for a read's check.)
pub(crate) fn held(core: &Core, owner: &str, id: &BlobId, chat: Option<u64>) -> Result<Held> {
    let pending = core.index.mem.read().pending_grant(owner, &id.0);
    let mut h = held_in_redb(core, owner, id, chat)?;
    for (c, bits) in pending.bound {
        if c == 0 {
            h.own |= bits;
        }
        if Some(c) == chat {
            h.chat |= bits;
        }
    }
    Ok(h)
}

/// The grants `owner` holds on `id` in redb (and, with `chat`, the one bound to that chat).
fn held_in_redb(core: &Core, owner: &str, id: &BlobId, chat: Option<u64>) -> Result<Held> {
    core.index.held(owner, id, chat)
}

/// True when `owner` holds a grant with any of `bits` on `id`, consulting records written
/// moments ago: a grant still in the memtable counts as it is. No flush, hit or miss: the
/// memtable is read before redb, and a record leaves it only once redb holds it, so a grant
/// written before this call is found in one or the other. Only while a chat's deletion waits
/// for redb is the index flushed first (that deletion may revoke a pending grant).
///
/// A grant found in redb is remembered in [`Core::grants`] under the index's grants epoch
/// read before the lookup, and answers later calls without a read transaction until a
/// revocation (a chat's deletion applied to redb) advances the epoch.
pub(crate) fn granted(core: &Core, owner: &str, id: &BlobId, bits: u8) -> Result<bool> {
    if granted_locally(core, owner, id, bits)? {
        return Ok(true);
    }
    // Fleet mode: a grant another process committed is pulled before the answer is no.
    match core.remote() {
        Some(remote) => {
            remote.catch_up_granting(core, owner, std::slice::from_ref(id))?;
            granted_locally(core, owner, id, bits)
        }
        None => Ok(false),
    }
}

fn granted_locally(core: &Core, owner: &str, id: &BlobId, bits: u8) -> Result<bool> {
    let epoch = core.index.grants_epoch();
    if core.grants.holds(owner, id, bits, epoch) {
        return Ok(true);
    }
    let deleting = {
        let mem = core.index.mem.read();
        if !mem.deleting() {
            if mem.pending_grant(owner, &id.0).any() & bits != 0 {
                return Ok(true);
            }
            false
        } else {
            true
        }
    };
    if deleting {
        // A pending grant may be one the deletion revokes: redb decides, once it has both.
        core.ensure_flushed(core.log.written())?;
    }
    let any = held_in_redb(core, owner, id, None)?.any;
    if any & bits != 0 {
        core.grants.note(owner, id, any, epoch);
        return Ok(true);
    }
    Ok(false)
}

/// Grants found in redb, by blob and owner: the bits held and the grants epoch they were
/// read under ([`Index::grants_epoch`](crate::disk::index::Index::grants_epoch)). Only grants
/// found are kept (a grant written later is looked up then); an entry whose epoch is not the
/// current one is not used, so a grant revoked by a chat's deletion is never answered from
/// here once the deletion is in redb (which `delete_chat` waits for).
#[derive(Debug, Default)]
pub(crate) struct GrantCache {
    /// Keyed by id with [`IdHash`](crate::base::blob::IdHash): ids are uniform already.
    map: parking_lot::RwLock<std::collections::HashMap<BlobId, Vec<Held1>, crate::base::blob::IdHash>>,
}

/// One owner's grants on a blob: owner, bits, grants epoch read under.
type Held1 = (Box<str>, u8, u64);

/// Blobs whose grants are remembered; the map is emptied when it reaches this.
const GRANT_CACHE_BLOBS: usize = 1 << 14;

impl GrantCache {
    /// True when `owner` was found holding a grant with any of `bits` on `id` under `epoch`.
    pub(crate) fn holds(&self, owner: &str, id: &BlobId, bits: u8, epoch: u64) -> bool {
        let map = self.map.read();
        map.get(id).is_some_and(|v| v.iter().any(|(o, b, e)| &**o == owner && *e == epoch && b & bits != 0))
    }

    /// Remembers that `owner` holds grants `bits` on `id`, as read under `epoch`.
    pub(crate) fn note(&self, owner: &str, id: &BlobId, bits: u8, epoch: u64) {
        let mut map = self.map.write();
        if map.len() >= GRANT_CACHE_BLOBS && !map.contains_key(id) {
            map.clear();
        }
        let v = map.entry(*id).or_default();
        v.retain(|(o, _, e)| &**o != owner && *e == epoch);
        v.push((owner.into(), bits, epoch));
    }
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
    if !txn.records.iter().any(|r| r.kind == Kind::Grant && r.payload == payload) {
        txn.push(RecordOut::history(Kind::Grant, payload));
    }
    Ok(())
}

/// Stores `contents` for `owner` in one transaction, granting each to `owner` (see
/// `Store::put_blobs`).
pub(crate) fn put_blobs(core: &Core, owner: &str, contents: &[&[u8]]) -> Result<Vec<BlobId>> {
    crate::model::message::check_owner(owner)?;
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
fn readable(core: &Core, owner: &str, id: &BlobId) -> Result<()> {
    crate::model::message::check_owner(owner)?;
    match granted(core, owner, id, u8::MAX)? {
        true => Ok(()),
        false => Err(not_found(id)),
    }
}

/// Blobs `ids` of `owner`, in order (see `Store::get_blobs`): the grants not known already
/// looked up in one index read transaction, then the locations in another.
pub(crate) fn get_blobs(core: &Core, owner: &str, ids: &[BlobId], verify: Verify) -> Result<Vec<Blob>> {
    crate::model::message::check_owner(owner)?;
    all_readable(core, owner, ids)?;
    core.get_blobs(ids, verify)
}

/// Checks that `owner` may read every blob of `ids`: [`granted`] for each, with the redb
/// lookups of those neither remembered nor pending made in one read transaction. While a
/// chat's deletion waits for redb, or in fleet mode, each is looked up alone, and in fleet
/// mode those not granted locally are caught up with the remote together.
fn all_readable(core: &Core, owner: &str, ids: &[BlobId]) -> Result<()> {
    let epoch = core.index.grants_epoch();
    let unknown: Vec<&BlobId> = {
        let mem = core.index.mem.read();
        if mem.deleting() || core.remote().is_some() {
            drop(mem);
            let mut missing = Vec::new();
            for id in ids {
                if !granted_locally(core, owner, id, u8::MAX)? {
                    missing.push(*id);
                }
            }
            let Some(first) = missing.first() else { return Ok(()) };
            let Some(remote) = core.remote() else { return Err(not_found(first)) };
            // One catch-up for every blob not granted here, not one per blob.
            remote.catch_up_granting(core, owner, &missing)?;
            for id in &missing {
                if !granted_locally(core, owner, id, u8::MAX)? {
                    return Err(not_found(id));
                }
            }
            return Ok(());
        }
        ids.iter()
            .filter(|id| {
                !core.grants.holds(owner, id, u8::MAX, epoch) && mem.pending_grant(owner, &id.0).any() == 0
            })
            .collect()
    };
    if unknown.is_empty() {
        return Ok(());
    }
    for (id, h) in unknown.iter().zip(core.index.held_each(owner, &unknown)?) {
        if h.any == 0 {
            return Err(not_found(id));
        }
        core.grants.note(owner, id, h.any, epoch);
    }
    Ok(())
}

/// Blob `id` of `owner`, checking as much as `verify` asks (see `Store::get_blob_with`).
pub(crate) fn get_blob(core: &Core, owner: &str, id: &BlobId, verify: Verify) -> Result<Blob> {
    readable(core, owner, id)?;
    core.get_blob(id, verify)
}

/// Bytes `range` of blob `id` of `owner` (see `Store::get_blob_range`).
pub(crate) fn get_blob_range(core: &Core, owner: &str, id: &BlobId, range: Range<u64>) -> Result<Vec<u8>> {
    readable(core, owner, id)?;
    core.get_blob_range(id, range, core.opts.verify)
}

/// Length of blob `id` of `owner` in bytes.
pub(crate) fn blob_len(core: &Core, owner: &str, id: &BlobId) -> Result<u64> {
    readable(core, owner, id)?;
    core.blob_len(id)
}

/// True when `owner` holds a grant on a stored blob with this id.
pub(crate) fn contains_blob(core: &Core, owner: &str, id: &BlobId) -> Result<bool> {
    crate::model::message::check_owner(owner)?;
    Ok(granted(core, owner, id, u8::MAX)? && core.blob_loc(id)?.is_some())
}
