//! Index entries written to the log but not yet committed to redb.

use std::collections::HashMap;

use super::pending_texts::{PendingPlaces, PendingTexts};
use super::{Applied, BatchEntries, GRANT_ARCHIVE, PendingRecord};
use crate::base::blob::BlobId;
use crate::disk::log::{Location, Position};
use crate::disk::record::{self, ArchiveRec, GrantRec, Kind};

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
    /// Blobs and records noted since the last durable flush started.
    rows_since_durable: u64,
    /// Payload bytes of history records waiting for redb.
    pending_bytes: usize,
    /// The grants among `records` and `flushing_records`, so that a read or a write right
    /// after a write need not flush the index to find a grant (see [`Pending`]).
    grants: HashMap<(String, [u8; 32]), Pending>,
    flushing_grants: HashMap<(String, [u8; 32]), Pending>,
    /// The inline texts of the message records among `records` and `flushing_records`, so
    /// that a lookup of a text need not flush the index to find it (see [`PendingTexts`]).
    texts: PendingTexts,
    flushing_texts: PendingTexts,
}

/// What pending grant records give one owner on one blob.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pending {
    /// (chat the grant is bound to, 0 for the owner's own; grant bits).
    pub bound: Vec<(u64, u8)>,
    /// The newest archive record among them, if any (what the `archives` table will hold).
    pub archive: Option<ArchiveRec>,
}

impl Pending {
    fn add(&mut self, other: Pending) {
        for b in other.bound {
            if !self.bound.contains(&b) {
                self.bound.push(b);
            }
        }
        if other.archive.is_some() {
            self.archive = other.archive;
        }
    }

    /// Every grant bit held.
    pub(crate) fn any(&self) -> u8 {
        self.bound.iter().fold(0, |a, (_, b)| a | b)
    }
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
        self.rows_since_durable += (entries.blobs.len() + entries.records.len()) as u64;
        for (id, loc) in entries.blobs {
            self.active.insert(id, loc);
        }
        self.pending_bytes += entries.records.iter().map(|r| r.payload.len() + 64).sum::<usize>();
        for r in &entries.records {
            if let Some((owner, id, bit, archive)) = grant_of(r) {
                let p = self.grants.entry((owner, id)).or_default();
                let chats = if r.chats.is_empty() { &[0][..] } else { &r.chats[..] };
                p.add(Pending { bound: chats.iter().map(|&c| (c, bit)).collect(), archive });
            }
            self.texts.add(r);
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

    /// Blobs and records noted since the last durable flush started: each is an index row or
    /// more that a flush writes, and redb reuses the pages a non-durable commit replaces
    /// only after the next durable one.
    pub(crate) fn rows_since_durable(&self) -> u64 {
        self.rows_since_durable
    }

    /// Moves `active` to `flushing`; returns the entries and the position they reach.
    pub(crate) fn start_flush(&mut self) -> (BatchEntries, Option<Applied>) {
        let moved = std::mem::take(&mut self.active);
        let blobs: Vec<_> = moved.iter().map(|(k, v)| (*k, *v)).collect();
        self.flushing.extend(moved);
        let records = std::mem::take(&mut self.records);
        for (k, p) in std::mem::take(&mut self.grants) {
            self.flushing_grants.entry(k).or_default().add(p);
        }
        self.flushing_texts.append(std::mem::take(&mut self.texts));
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
        let texts = std::mem::take(&mut self.flushing_texts);
        if !ok {
            let newer = std::mem::replace(&mut self.texts, texts);
            self.texts.append(newer);
            // Back ahead of newer grants: a newer archive record stays the one kept.
            let newer = std::mem::replace(&mut self.grants, grants);
            for (k, p) in newer {
                self.grants.entry(k).or_default().add(p);
            }
            for (k, v) in flushed {
                self.active.entry(k).or_insert(v);
            }
            records.append(&mut self.records);
            self.pending_bytes = records.iter().map(|r| r.payload.len() + 64).sum();
            self.records = records;
        }
    }

    /// The grants `owner` holds on `id` in records not yet in redb (the newer generation's
    /// archive record first). A record leaves the memtable only once redb holds it, so a
    /// grant written before this call is found here or, by a redb read begun after it, there.
    pub(crate) fn pending_grant(&self, owner: &str, id: &[u8; 32]) -> Pending {
        let key = (owner.to_string(), *id);
        let mut p = self.flushing_grants.get(&key).cloned().unwrap_or_default();
        if let Some(newer) = self.grants.get(&key) {
            p.add(newer.clone());
        }
        p
    }

    /// What records not yet in redb say about text `id` (the older generation first). As
    /// for grants, a record leaves the memtable only once redb holds it: a text written
    /// before this call is found here or, by a redb read begun after it, there.
    pub(crate) fn pending_texts(&self, id: &[u8; 32]) -> PendingPlaces {
        let mut out = PendingPlaces::default();
        self.flushing_texts.find(id, &mut out);
        self.texts.find(id, &mut out);
        out
    }

    /// The seqs (first, count) of the append to `chat` with idempotency key `key` among the
    /// records not yet in redb. As for grants, a record leaves the memtable only once redb
    /// holds it: a key written before this call is found here or, by a redb read begun after
    /// it, there.
    pub(crate) fn pending_append_key(&self, chat: u64, key: &str) -> Option<(u64, u64)> {
        self.flushing_records.iter().chain(&self.records).filter(|r| r.kind == Kind::AppendKey).find_map(
            |r| {
                let k = crate::disk::record::append_key::AppendKeyRec::decode(&r.payload).ok()?;
                (k.chat == chat && k.key == key).then_some((k.first, k.count))
            },
        )
    }

    /// True when a chat's deletion waits for redb: until it is applied, a pending grant
    /// bound to another chat may be one it revokes.
    pub(crate) fn deleting(&self) -> bool {
        self.records.iter().chain(&self.flushing_records).any(|r| r.kind == Kind::Delete)
    }

    /// Marks the start of a durable flush.
    pub(crate) fn reset_durable_bytes(&mut self) {
        self.bytes_since_durable = 0;
        self.rows_since_durable = 0;
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

/// The owner, blob and grant bit of a grant record, with the archive record for an archive
/// grant (`None` for another kind, or a record that does not decode: the history index
/// reports that one when it applies it).
fn grant_of(r: &PendingRecord) -> Option<(String, [u8; 32], u8, Option<ArchiveRec>)> {
    match r.kind {
        Kind::Archive => record::decode::<ArchiveRec>(&r.payload, "archive")
            .ok()
            .map(|a| (a.owner.clone(), a.id, GRANT_ARCHIVE, Some(a))),
        Kind::Grant => record::decode::<GrantRec>(&r.payload, "grant")
            .ok()
            .map(|g| (g.owner, g.id, super::history::GRANT_BLOB, None)),
        _ => None,
    }
}
