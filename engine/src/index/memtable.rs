//! Index entries written to the log but not yet committed to redb.

use std::collections::HashMap;

use super::{Applied, BatchEntries, PendingRecord};
use crate::blob::BlobId;
use crate::log::{Location, Position};

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
        self.pending_bytes = 0;
        self.flushing_records = records.clone();
        (BatchEntries { blobs, records }, self.applied)
    }

    /// Ends a flush: on success the flushed entries leave memory; on failure they return
    /// to `active`, ahead of newer records, to be retried.
    pub(crate) fn finish_flush(&mut self, ok: bool) {
        let flushed = std::mem::take(&mut self.flushing);
        let mut records = std::mem::take(&mut self.flushing_records);
        if !ok {
            for (k, v) in flushed {
                self.active.entry(k).or_insert(v);
            }
            records.append(&mut self.records);
            self.pending_bytes = records.iter().map(|r| r.payload.len() + 64).sum();
            self.records = records;
        }
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
