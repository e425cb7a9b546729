//! The chunk cache: chunks of chunked blobs, decompressed and checked, kept in memory so
//! that reading the next version of a growing value reads only its new chunks from the log.
//!
//! Two generations approximate least-recently-used at O(1) per call: entries enter the
//! young map; when it holds half the budget it becomes the old map (the previous old map is
//! dropped); a hit in the old map moves the entry back to the young one. At most about the
//! budget is held.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::{Blob, BlobId};

/// Decompressed chunks by id, within a byte budget (`Options::chunk_cache_bytes`).
#[derive(Debug)]
pub(crate) struct ChunkCache {
    budget: usize,
    gens: Mutex<Gens>,
}

#[derive(Debug, Default)]
struct Gens {
    young: HashMap<BlobId, Blob>,
    young_bytes: usize,
    old: HashMap<BlobId, Blob>,
}

impl ChunkCache {
    /// A cache holding at most about `budget` bytes (0: nothing is cached).
    pub(crate) fn new(budget: usize) -> ChunkCache {
        ChunkCache { budget, gens: Mutex::new(Gens::default()) }
    }

    /// The cached bytes of chunk `id`.
    pub(crate) fn get(&self, id: &BlobId) -> Option<Blob> {
        if self.budget == 0 {
            return None;
        }
        let mut g = self.gens.lock();
        if let Some(b) = g.young.get(id) {
            return Some(b.clone());
        }
        let b = g.old.remove(id)?;
        g.add(*id, b.clone(), self.budget);
        Some(b)
    }

    /// Keeps chunk `id` (checked bytes only). A chunk above a quarter of the budget is not kept.
    pub(crate) fn insert(&self, id: BlobId, bytes: Blob) {
        if self.budget == 0 || bytes.len() > self.budget / 4 {
            return;
        }
        self.gens.lock().add(id, bytes, self.budget);
    }
}

impl Gens {
    fn add(&mut self, id: BlobId, bytes: Blob, budget: usize) {
        let len = bytes.len();
        if self.young.insert(id, bytes).is_none() {
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
            c.insert(*id, blob(500, i as u8));
        }
        let held: Vec<usize> = (0..10).filter(|&i| c.get(&ids[i]).is_some()).collect();
        assert!(held.contains(&9) && held.contains(&8), "the newest are held: {held:?}");
        assert!(!held.contains(&0), "the oldest went: {held:?}");
        assert!(held.len() * 500 <= 4000, "{} bytes held over a 4000-byte budget", held.len() * 500);
        assert_eq!(c.get(&ids[9]).map(|b| b[0]), Some(9));
        c.insert(BlobId::of(b"big"), blob(1001, 1));
        assert!(c.get(&BlobId::of(b"big")).is_none(), "above a quarter of the budget: not kept");
        let off = ChunkCache::new(0);
        off.insert(ids[0], blob(1, 0));
        assert!(off.get(&ids[0]).is_none());
    }
}
