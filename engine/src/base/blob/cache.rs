//! The chunk cache: chunks of chunked blobs, decompressed and checked, kept in memory so
//! that reading the next version of a growing value reads only its new chunks from the log.
//!
//! Two generations approximate least-recently-used at O(1) per call: entries enter the
//! young map; when it holds half the budget it becomes the old map (the previous old map is
//! dropped); a hit in the old map moves the entry back to the young one. At most about the
//! budget is held.
//!
//! Each chunk is kept with how far it was checked ([`Verify`]); a read that asks for more
//! than that reads the chunk again, so a byte never hashed is never served to a read that
//! asks for its hash.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::{Blob, BlobId, Verify};

/// Decompressed chunks by id, within a byte budget (`Options::chunk_cache_bytes`).
#[derive(Debug)]
pub(crate) struct ChunkCache {
    budget: usize,
    gens: Mutex<Gens>,
}

#[derive(Debug, Default)]
struct Gens {
    young: HashMap<BlobId, (Blob, u8)>,
    young_bytes: usize,
    old: HashMap<BlobId, (Blob, u8)>,
}

/// How much a level of verification checks: a chunk checked at a level satisfies a read
/// at that level or any lower one.
fn strength(v: Verify) -> u8 {
    match v {
        Verify::None => 0,
        Verify::Checksum => 1,
        Verify::Hash => 2,
    }
}

impl ChunkCache {
    /// A cache holding at most about `budget` bytes (0: nothing is cached).
    pub(crate) fn new(budget: usize) -> ChunkCache {
        ChunkCache { budget, gens: Mutex::new(Gens::default()) }
    }

    /// The cached bytes of chunk `id`, when they were checked at least as far as `verify`.
    pub(crate) fn get(&self, id: &BlobId, verify: Verify) -> Option<Blob> {
        if self.budget == 0 {
            return None;
        }
        let want = strength(verify);
        let mut g = self.gens.lock();
        if let Some((b, s)) = g.young.get(id) {
            return (*s >= want).then(|| b.clone());
        }
        let (b, s) = g.old.remove(id)?;
        g.add(*id, b.clone(), s, self.budget);
        (s >= want).then_some(b)
    }

    /// Keeps chunk `id`, checked as `verified` says. A chunk above a quarter of the budget is
    /// not kept; a chunk already kept at a stronger level keeps that level.
    pub(crate) fn insert(&self, id: BlobId, bytes: Blob, verified: Verify) {
        if self.budget == 0 || bytes.len() > self.budget / 4 {
            return;
        }
        self.gens.lock().add(id, bytes, strength(verified), self.budget);
    }
}

impl Gens {
    fn add(&mut self, id: BlobId, bytes: Blob, level: u8, budget: usize) {
        let len = bytes.len();
        let level = level.max(self.young.get(&id).map_or(0, |e| e.1));
        if self.young.insert(id, (bytes, level)).is_none() {
            self.young_bytes += len;
        }
        if self.young_bytes > budget / 2 {
            self.old = std::mem::take(&mut self.young);
            self.young_bytes = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(n: usize, fill: u8) -> Blob {
        Blob::owned(vec![fill; n])
    }

    #[test]
    fn a_cache_keeps_recent_chunks_within_its_budget() {
        let c = ChunkCache::new(4000);
        let ids: Vec<BlobId> = (0..10u8).map(|i| BlobId::of(&[i])).collect();
        for (i, id) in ids.iter().enumerate() {
            c.insert(*id, blob(500, i as u8), Verify::Hash);
        }
        let held: Vec<usize> = (0..10).filter(|&i| c.get(&ids[i], Verify::Hash).is_some()).collect();
        assert!(held.contains(&9) && held.contains(&8), "the newest are held: {held:?}");
        assert!(!held.contains(&0), "the oldest went: {held:?}");
        assert!(held.len() * 500 <= 4000, "{} bytes held over a 4000-byte budget", held.len() * 500);
        assert_eq!(c.get(&ids[9], Verify::Hash).map(|b| b[0]), Some(9));
        c.insert(BlobId::of(b"big"), blob(1001, 1), Verify::Hash);
        assert!(
            c.get(&BlobId::of(b"big"), Verify::None).is_none(),
            "above a quarter of the budget: not kept"
        );
        let off = ChunkCache::new(0);
        off.insert(ids[0], blob(1, 0), Verify::Hash);
        assert!(off.get(&ids[0], Verify::None).is_none());
    }

    #[test]
    fn a_chunk_checked_less_than_a_read_asks_is_not_served_to_it() {
        let c = ChunkCache::new(4000);
        let id = BlobId::of(b"x");
        c.insert(id, blob(10, 1), Verify::None);
        assert!(c.get(&id, Verify::None).is_some());
        assert!(c.get(&id, Verify::Checksum).is_none(), "never checksummed");
        assert!(c.get(&id, Verify::Hash).is_none(), "never hashed");
        c.insert(id, blob(10, 1), Verify::Hash);
        assert!(c.get(&id, Verify::Hash).is_some());
        c.insert(id, blob(10, 1), Verify::Checksum);
        assert!(c.get(&id, Verify::Hash).is_some(), "a weaker check does not lower what was proven");
    }
}
