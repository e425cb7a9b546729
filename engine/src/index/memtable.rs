//! Index entries written to the log but not yet committed to redb.

use std::collections::HashMap;

use super::{Applied, BatchEntries, GRANT_ARCHIVE, PendingRecord};
use crate::blob::BlobId;
use crate::log::{Location, Position};
use crate::record::{self, ArchiveRec, GrantRec, kind};

/// Two generations: `active` takes new entries; `flushing` holds the blob entries being
/// committed to redb, still visible to readers until the commit is done. History records
/// are only queued here: readers of a chat use its in-memory state, which stays in memory
/// until its records are in redb.
#[derive(Debug, Default)]
pub(crate) struct Memtable {
    active: HashMap<BlobId, Location>,
    flushing: HashMap<BlobId, Location>,
    records: Vec<PendingRecord>,
    flushing_records: Vec<PendingRecord>,
    /// The end of the last batch noted, and the txid after it.
    applied: Option<Applied>,
    bytes_since_durable: u64,
    /// Payload bytes of history records waiting for redb.
    pending_bytes: usize,
    /// The grants among `records` and `flushing_records`: (owner, blob id) -> grant bits,
    /// so that a read right after a write need not flush the index to find its grant.
    grants: HashMap<(String, [u8; 32]), u8>,
    flushing_grants: HashMap<(String, [u8; 32]), u8>,
}

impl Memtable {
    /// Notes a written batch (called under the log writer's lock, in log order).
    pub(crate) fn note_batch(
        &mut self,
        entries: BatchEntries,
        start: Position,
        end: Position,
        next_txid: u64,
        bytes: u64,
    ) {
        for (id, loc) in entries.blobs {
            self.active.insert(id, loc);
        }
        self.pending_bytes += entries.records.iter().map(|r| r.payload.len() + 64).sum::<usize>();
        for r in &entries.records {
            if let Some((owner, id, bit)) = grant_of(r) {
                *self.grants.entry((owner, id)).or_default() |= bit;
            }
        }
        self.records.extend(entries.records);
        self.applied = Some(Applied { position: end, next_txid, batch_start: start.offset });
        self.bytes_since_durable += bytes;
    }

    /// Looks a blob up in both generations.
    pub(crate) fn blob(&self, id: &BlobId) -> Option<Location> {
        self.active.get(id).or_else(|| self.flushing.get(id)).copied()
    }

    /// True when nothing waits to be flushed.
    pub(crate) fn is_empty(&self) -> bool {
        self.active.is_empty() && self.records.is_empty()
    }

    /// Bytes of history records waiting for redb (for back-pressure on writers).
    pub(crate) fn pending_bytes(&self) -> usize {
        self.pending_bytes + self.active.len() * 64
    }

    /// Log bytes written since the last durable flush started.
    pub(crate) fn bytes_since_durable(&self) -> u64 {
        self.bytes_since_durable
    }

    /// Moves `active` to `flushing`; returns the entries and the position they reach.
    pub(crate) fn start_flush(&mut self) -> (BatchEntries, Option<Applied>) {
        let moved = std::mem::take(&mut self.active);
        let blobs: Vec<_> = moved.iter().map(|(k, v)| (*k, *v)).collect();
        self.flushing.extend(moved);
        let records = std::mem::take(&mut self.records);
        for (k, bits) in std::mem::take(&mut self.grants) {
            *self.flushing_grants.entry(k).or_default() |= bits;
        }
        self.pending_bytes = 0;
        self.flushing_records = records.clone();
        (BatchEntries { blobs, records }, self.applied)
    }

    /// Ends a flush: on success the flushed entries leave memory; on failure they return
    /// to `active`, ahead of newer records, to be retried.
    pub(crate) fn finish_flush(&mut self, ok: bool) {
        let flushed = std::mem::take(&mut self.flushing);
        let mut records = std::mem::take(&mut self.flushing_records);
        let grants = std::mem::take(&mut self.flushing_grants);
        if !ok {
            for (k, bits) in grants {
                *self.grants.entry(k).or_default() |= bits;
            }
            for (k, v) in flushed {
                self.active.entry(k).or_insert(v);
            }
            records.append(&mut self.records);
            self.pending_bytes = records.iter().map(|r| r.payload.len() + 64).sum();
            self.records = records;
        }
    }

    /// The grant bits `owner` holds on `id` in records not yet in redb, when no deletion is
    /// among them either (a pending deletion may revoke a grant: the caller then flushes).
    pub(crate) fn pending_grant(&self, owner: &str, id: &[u8; 32]) -> Option<u8> {
        let deleting = self.records.iter().chain(&self.flushing_records).any(|r| r.kind == kind::DELETE);
        if deleting {
            return None;
        }
        let key = (owner.to_string(), *id);
        let bits = self.grants.get(&key).copied().unwrap_or(0)
            | self.flushing_grants.get(&key).copied().unwrap_or(0);
        (bits != 0).then_some(bits)
    }

    /// Marks the start of a durable flush.
    pub(crate) fn reset_durable_bytes(&mut self) {
        self.bytes_since_durable = 0;
    }

    /// Forgets everything (after a rebuild took the entries from the log).
    pub(crate) fn clear(&mut self) {
        *self = Memtable::default();
    }

    /// Sets the position reached without new entries (after recovery or rebuild).
    pub(crate) fn set_applied(&mut self, a: Applied) {
        self.applied = Some(a);
    }
}

/// The owner, blob and grant bit of a grant record (`None` for another kind, or a record that
/// does not decode: the history index reports that one when it applies it).
fn grant_of(r: &PendingRecord) -> Option<(String, [u8; 32], u8)> {
    match r.kind {
        kind::ARCHIVE => {
            record::decode::<ArchiveRec>(&r.payload, "archive").ok().map(|a| (a.owner, a.id, GRANT_ARCHIVE))
        }
        kind::GRANT => record::decode::<GrantRec>(&r.payload, "grant")
            .ok()
            .map(|g| (g.owner, g.id, super::history::GRANT_BLOB)),
        _ => None,
    }
}
