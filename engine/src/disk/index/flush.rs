//! Moving records into redb: the memtable's flush (non-durable, or durable after the log),
//! replayed batches, and the entries a log batch gives the index.

use redb::Durability as RedbDurability;

use super::blob_row;
use super::pending_texts::listing_and_record;
use super::{
    Applied, BLOBS, BatchEntries, HistoryIndex, INDEX_VERSION, Index, META, PendingRecord, batch_chats,
    is_grant, redb_err,
};
use crate::base::blob::BlobId;
use crate::base::error::{Error, Result};
use crate::disk::log::format::BatchRef;
use crate::disk::log::{Location, Position};
use crate::disk::record::Kind;
use crate::disk::record::MsgRec;

impl Index {
    /// Applies replayed batches (recovery, rebuild) straight into redb in one durable
    /// transaction, recording `applied` as the position reached.
    pub(crate) fn apply_replayed(&self, batches: &[BatchEntries], applied: Applied) -> Result<()> {
        crate::disk::log::same_process(&self.opener)?;
        let mut tx = self.db.read().begin_write().map_err(redb_err)?;
        tx.set_quick_repair(!self.in_memory);
        apply_batches(&tx, batches)?;
        write_meta(&tx, applied)?;
        tx.commit().map_err(redb_err)?;
        self.changed.store(true, std::sync::atomic::Ordering::Relaxed);
        if batches.iter().any(|b| revokes(&b.records)) {
            self.grants_changed();
        }
        *self.flushed.lock() = applied.position;
        Ok(())
    }

    /// Moves the memtable into redb. With `durable`, first `sync_log(position)` makes the
    /// log durable up to the position recorded, then redb commits with fsync.
    pub(crate) fn flush(&self, durable: bool, sync_log: impl FnOnce(Position) -> Result<()>) -> Result<bool> {
        crate::disk::log::same_process(&self.opener)?;
        let _g = self.flush_lock.lock();
        let (entries, applied) = {
            let mut mem = self.mem.write();
            if mem.is_empty() && (!durable || mem.bytes_since_durable() == 0) {
                return Ok(false);
            }
            if durable {
                mem.reset_durable_bytes();
            }
            mem.start_flush()
        };
        let Some(applied) = applied else {
            self.mem.write().finish_flush(true);
            return Ok(false);
        };
        // redb answers every call after a failed write with "previous I/O error": when that
        // write failed for lack of space, say so (it is not damage to the index).
        let r = self
            .commit_flush(durable, sync_log, &entries, applied)
            .map_err(|e| super::open::no_space_said(&self.journal.no_space, &self.path, e));
        if r.is_ok() && revokes(&entries.records) {
            self.grants_changed();
        }
        // Entries stay visible in the memtable's flushing set until redb has them.
        self.mem.write().finish_flush(r.is_ok());
        r?;
        *self.flushed.lock() = applied.position;
        Ok(true)
    }

    fn commit_flush(
        &self,
        durable: bool,
        sync_log: impl FnOnce(Position) -> Result<()>,
        entries: &BatchEntries,
        applied: Applied,
    ) -> Result<()> {
        if durable {
            sync_log(applied.position)?;
        }
        let mut tx = self.db.read().begin_write().map_err(redb_err)?;
        if durable {
            tx.set_quick_repair(true);
        } else {
            tx.set_durability(RedbDurability::None).map_err(redb_err)?;
        }
        apply_entries(&tx, &entries.blobs, &entries.records)?;
        write_meta(&tx, applied)?;
        tx.commit().map_err(redb_err)?;
        self.changed.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

pub(super) fn write_meta(tx: &redb::WriteTransaction, a: Applied) -> Result<()> {
    let mut m = tx.open_table(META).map_err(redb_err)?;
    m.insert("applied_segment", a.position.segment).map_err(redb_err)?;
    m.insert("applied_offset", a.position.offset).map_err(redb_err)?;
    m.insert("next_txid", a.next_txid).map_err(redb_err)?;
    m.insert("applied_batch", a.batch_start).map_err(redb_err)?;
    m.insert("version", INDEX_VERSION).map_err(redb_err)?;
    Ok(())
}

/// The index entries a batch produces: each blob record's id and location, and a copy of
/// every history record to apply. A record of a required kind this build does not know is
/// `Error::Corrupt` (the store was written by a newer build); optional kinds are skipped.
pub(crate) fn entries_of(segment: u64, batch: &BatchRef<'_>) -> Result<BatchEntries> {
    entries_keeping(segment, batch, None)
}

/// [`entries_of`], also pushing onto `decoded` each compact message record as listing it
/// decoded it, by location (a read-only refresh hands them to the reads that follow); with
/// `decoded`, the inline texts of compact records are not hashed but deferred
/// ([`MessageTexts::Deferred`](crate::disk::record::MessageTexts::Deferred)), and a listed
/// message's payload is not copied (its listing is what is applied).
pub(crate) fn entries_keeping(
    segment: u64,
    batch: &BatchRef<'_>,
    mut decoded: Option<&mut Vec<(Location, MsgRec)>>,
) -> Result<BatchEntries> {
    let mut out = BatchEntries::default();
    let mut known = Vec::with_capacity(batch.records.len());
    for r in &batch.records {
        match Kind::of(r.kind) {
            Some(k) => known.push((k, r)),
            None if Kind::is_optional(r.kind) => {}
            None => {
                return Err(Error::corrupt(
                    segment,
                    r.offset,
                    format!(
                        "unknown required record kind {}: written by a newer build of Undertext?",
                        r.kind
                    ),
                ));
            }
        }
    }
    // Only a batch holding a grant needs its chats (decoding them costs a little).
    let chats = if known.iter().any(|(k, _)| is_grant(*k)) {
        batch_chats(known.iter().map(|(k, r)| (*k, r.payload)))
    } else {
        Vec::new()
    };
    for (kind, r) in known {
        let loc = Location { segment, offset: r.offset, len: r.payload.len() as u32 };
        if kind.is_blob() {
            if r.payload.len() >= 32 {
                let mut id = [0u8; 32];
                id.copy_from_slice(&r.payload[..32]);
                out.blobs.push((BlobId(id), loc));
            }
        } else {
            let chats = if is_grant(kind) { chats.clone() } else { Vec::new() };
            let texts = match listing_and_record(kind, r.payload, decoded.is_some()) {
                Some((listing, rec)) => {
                    if let (Some(out), Some(rec)) = (decoded.as_deref_mut(), rec) {
                        out.push((loc, rec));
                    }
                    Some(listing)
                }
                None => None,
            };
            // A listed message is applied from its listing: with `decoded` (a read-only
            // refresh, which applies straight to redb) its bytes are not copied.
            let payload = if decoded.is_some() && texts.is_some() { Vec::new() } else { r.payload.to_vec() };
            out.records.push(PendingRecord { kind, loc, payload, chats, texts });
        }
    }
    Ok(out)
}

/// True when applying `records` may remove a grant (a chat's deletion takes the grants
/// bound to it).
fn revokes(records: &[PendingRecord]) -> bool {
    records.iter().any(|r| r.kind == Kind::Delete)
}

pub(super) fn apply_entries(
    tx: &redb::WriteTransaction,
    blobs: &[(BlobId, Location)],
    records: &[PendingRecord],
) -> Result<()> {
    apply_parts(tx, std::iter::once(blobs), std::iter::once(records))
}

/// Applies the entries of `batches`, in order, opening each table once for all of them (a
/// refresh of a read-only store replays hundreds of small batches in one transaction, and
/// opening the history index's twenty-odd tables per batch cost more than applying them).
pub(super) fn apply_batches(tx: &redb::WriteTransaction, batches: &[BatchEntries]) -> Result<()> {
    apply_parts(tx, batches.iter().map(|b| b.blobs.as_slice()), batches.iter().map(|b| b.records.as_slice()))
}

/// Blob locations into `BLOBS`, then history records through one [`HistoryIndex`] (whose
/// chat rows carry over from one record to the next, as in a flush of the memtable).
fn apply_parts<'a>(
    tx: &redb::WriteTransaction,
    blobs: impl Iterator<Item = &'a [(BlobId, Location)]> + Clone,
    records: impl Iterator<Item = &'a [PendingRecord]> + Clone,
) -> Result<()> {
    if blobs.clone().any(|b| !b.is_empty()) {
        let mut t = tx.open_table(BLOBS).map_err(redb_err)?;
        for (id, loc) in blobs.flatten() {
            blob_row::set_location(&mut t, id.as_bytes(), *loc)?;
        }
    }
    if records.clone().any(|r| !r.is_empty()) {
        let mut h = HistoryIndex::open_write(tx)?;
        for r in records.flatten() {
            h.apply(r)?;
        }
        h.finish()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::entries_of;
    use crate::base::error::Error;
    use crate::disk::log::format::{BatchBuf, RecordSpec, decode_batch};
    use crate::disk::record::Kind;

    fn sealed(records: &[(u8, &[u8])]) -> Vec<u8> {
        let mut b = BatchBuf::new();
        for (kind, p) in records {
            let spec = RecordSpec { kind: *kind, codec: 0, raw_len: p.len() as u32, parts: &[p] };
            b.push(spec).unwrap_or_else(|e| panic!("{e}"));
        }
        b.finish().seal(1).to_vec()
    }

    #[test]
    fn a_required_kind_this_build_does_not_know_is_refused_and_an_optional_one_skipped() {
        let blob = [7u8; 40];
        for unknown in [0u8, Kind::ALL.len() as u8 + 1, Kind::FIRST_OPTIONAL - 1] {
            let bytes = sealed(&[(Kind::Blob.byte(), &blob), (unknown, b"x")]);
            let batch = decode_batch(&bytes, 0).unwrap_or_else(|e| panic!("{e:?}"));
            match entries_of(3, &batch) {
                Err(Error::Corrupt { reason, .. }) => {
                    assert!(reason.contains(&format!("unknown required record kind {unknown}")), "{reason}")
                }
                other => panic!("kind {unknown}: expected Corrupt, found {other:?}"),
            }
        }
        let bytes = sealed(&[(Kind::Blob.byte(), &blob), (Kind::FIRST_OPTIONAL + 5, b"x")]);
        let batch = decode_batch(&bytes, 0).unwrap_or_else(|e| panic!("{e:?}"));
        let entries = entries_of(3, &batch).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((entries.blobs.len(), entries.records.len()), (1, 0));
    }
}
