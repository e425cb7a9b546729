//! Message records a read-only refresh decoded to list them, kept for the read that follows.
//!
//! A [`Store::refresh`](crate::Store::refresh) decodes every new message record once to index
//! it (its key, header fields and inline texts; a compact record is decompressed for that).
//! A reader that follows a live writer then reads those same messages; without this it would
//! decompress each record a second time. The refresh leaves each decoded compact record here,
//! by its location in the log, and the first read of that location takes it instead of
//! reading and decoding the record again (a later read of the same message decodes it as
//! usual).
//!
//! What is kept was read from the log and verified by its batch's checksum in the same
//! refresh that listed it; a log record never changes in place (a `gc` writes a new log, which
//! a read-only store refuses to follow: see `store::read_only`), so the decoded record is the
//! one a read of its location would decode. The store keeps at most [`LISTED_BYTES`] of them,
//! the oldest dropped first.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use parking_lot::Mutex;

use crate::disk::log::Location;
use crate::disk::record::{BodyRec, MsgRec, PartRec};

/// The most decoded records a store keeps for reads to take, in (estimated) bytes of their
/// texts.
pub(crate) const LISTED_BYTES: usize = 4 << 20;

/// Decoded message records by location, oldest first out (see the module's documentation):
/// a refresh [`put`](Listed::put)s them, a read [`take`](Listed::take)s one once.
#[derive(Debug, Default)]
pub(crate) struct Listed {
    inner: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    by_loc: HashMap<Location, (MsgRec, usize), BuildHasherDefault<LocHasher>>,
    /// Locations in the order they were put (some since taken), to drop the oldest first.
    order: VecDeque<Location>,
    bytes: usize,
}

impl Listed {
    /// Keeps `records` (decoded by a refresh, each at its location) for the reads that follow,
    /// dropping the oldest beyond [`LISTED_BYTES`].
    pub(crate) fn put(&self, records: Vec<(Location, MsgRec)>) {
        if records.is_empty() {
            return;
        }
        let mut k = self.inner.lock();
        for (loc, rec) in records {
            let size = estimate(&rec);
            if let Some((_, old)) = k.by_loc.insert(loc, (rec, size)) {
                k.bytes -= old;
            }
            k.bytes += size;
            k.order.push_back(loc);
        }
        while k.bytes > LISTED_BYTES {
            let Some(loc) = k.order.pop_front() else { break };
            if let Some((_, size)) = k.by_loc.remove(&loc) {
                k.bytes -= size;
            }
        }
        // Taken records leave their locations in `order`: keep it within a small multiple of
        // what is still held.
        if k.order.len() > 2 * k.by_loc.len() + 1024 {
            let Kept { by_loc, order, .. } = &mut *k;
            order.retain(|l| by_loc.contains_key(l));
        }
    }

    /// The record decoded at `loc`, if a refresh left it here and no read took it yet.
    pub(crate) fn take(&self, loc: Location) -> Option<MsgRec> {
        let mut k = self.inner.lock();
        if k.by_loc.is_empty() {
            return None;
        }
        let (rec, size) = k.by_loc.remove(&loc)?;
        k.bytes -= size;
        if k.by_loc.is_empty() {
            // Everything put was taken (a reader following the writer): no order to keep.
            k.order.clear();
        }
        Some(rec)
    }
}

/// Hashes a [`Location`] by folding its numbers with one multiply each: locations are the
/// log's own positions (nothing outside chooses them), and SipHash over three numbers cost a
/// reader more per message than this map's whole work.
#[derive(Debug, Default)]
struct LocHasher(u64);

impl Hasher for LocHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(23) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

/// What a decoded record holds in memory, roughly: its texts and a fixed cost per part.
fn estimate(rec: &MsgRec) -> usize {
    let parts = match &rec.body {
        BodyRec::Inline(parts) => parts,
        BodyRec::Blob(_) => return 128,
    };
    let strings = |p: &PartRec| -> usize {
        match p {
            PartRec::Text(t) | PartRec::Summary(t) => t.len(),
            PartRec::ToolCall { id, name, args } => id.len() + name.len() + args.len(),
            PartRec::ToolResultText { call_id, text, .. } => call_id.len() + text.len(),
            PartRec::ToolResultArchived { call_id, preview, .. } => call_id.len() + preview.len(),
            PartRec::ApprovalRequest { id, call_id, prompt } => {
                id.len() + call_id.as_ref().map_or(0, String::len) + prompt.len()
            }
            PartRec::ApprovalResponse { id, reason, .. } => id.len() + reason.as_ref().map_or(0, String::len),
            PartRec::Attachment { mime, .. } => mime.len(),
        }
    };
    128 + parts.iter().map(|p| 64 + strings(p)).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, text: usize) -> MsgRec {
        MsgRec {
            chat: 1,
            seq,
            revision: 0,
            role: 0,
            turn: 0,
            at_ms: 0,
            step: None,
            body: BodyRec::Inline(vec![PartRec::Text("x".repeat(text))]),
        }
    }

    fn at(offset: u64) -> Location {
        Location { segment: 1, offset, len: 10 }
    }

    #[test]
    fn a_listed_record_is_taken_once_and_only_at_its_own_location() {
        let l = Listed::default();
        l.put(vec![(at(8), rec(0, 10)), (at(64), rec(1, 10))]);
        assert!(l.take(Location { segment: 2, offset: 8, len: 10 }).is_none(), "another segment");
        assert!(l.take(Location { segment: 1, offset: 8, len: 11 }).is_none(), "another length");
        assert_eq!(l.take(at(8)).map(|r| r.seq), Some(0));
        assert!(l.take(at(8)).is_none(), "taken already: the read decodes the record again");
        assert_eq!(l.take(at(64)).map(|r| r.seq), Some(1));
    }

    #[test]
    fn the_oldest_records_go_first_beyond_the_budget() {
        let l = Listed::default();
        let big = LISTED_BYTES / 4;
        l.put((0..6).map(|i| (at(i * 8), rec(i, big))).collect());
        assert!(l.take(at(0)).is_none() && l.take(at(8)).is_none() && l.take(at(16)).is_none());
        assert_eq!(l.take(at(40)).map(|r| r.seq), Some(5));
        assert!(l.inner.lock().bytes <= LISTED_BYTES);
    }

    #[test]
    fn records_taken_as_they_come_leave_nothing_behind() {
        let l = Listed::default();
        for i in 0..100_000 {
            l.put(vec![(at(i * 8), rec(i, 1))]);
            assert!(l.take(at(i * 8)).is_some());
        }
        let k = l.inner.lock();
        assert_eq!((k.by_loc.len(), k.bytes), (0, 0));
        assert!(k.order.len() <= 1025, "{} locations kept in order", k.order.len());
        drop(k);
        // Taken out of order, some left: the order is pruned, not kept whole.
        for i in 0..100_000 {
            l.put(vec![(at(i * 8), rec(i, 1)), (at(i * 8 + 4), rec(i, 1))]);
            assert!(l.take(at(i * 8 + 4)).is_some());
        }
        let k = l.inner.lock();
        assert!(k.bytes <= LISTED_BYTES && !k.by_loc.is_empty());
        assert!(k.order.len() <= 2 * k.by_loc.len() + 1026, "{} locations kept in order", k.order.len());
    }
}
