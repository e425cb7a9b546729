//! Hashing for in-memory maps keyed by [`BlobId`](super::BlobId).
//!
//! An id is a BLAKE3 hash: its bytes are already uniform, so a map needs only 8 of them.
//! The default `SipHash` reads all 32 (plus a length) on every lookup, which the archive
//! cache and the grant cache pay twice per `read_context`. The 8 bytes are mixed with a key
//! drawn once per process (from std's own random hash keys) by two folded multiplies, so that
//! which ids share a bucket cannot be chosen from outside: content ground to collide in the
//! low bits of its id collides no more than any other.

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// Builds [`IdHasher`]s with this process's key. For maps keyed by `BlobId` only.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdHash {
    keys: [u64; 2],
}

impl Default for IdHash {
    fn default() -> IdHash {
        static KEYS: OnceLock<[u64; 2]> = OnceLock::new();
        let keys = *KEYS.get_or_init(|| {
            // std's RandomState is seeded from the OS once per process (then varied per
            // instance): random 64-bit keys without another dependency.
            let r = std::collections::hash_map::RandomState::new();
            [r.hash_one(1u64), r.hash_one(2u64) | 1]
        });
        IdHash { keys }
    }
}

impl BuildHasher for IdHash {
    type Hasher = IdHasher;

    fn build_hasher(&self) -> IdHasher {
        IdHasher { keys: self.keys, h: 0 }
    }
}

/// Hashes the first 8 bytes of each `write` (a `BlobId` writes its 32 bytes once, after a
/// length prefix, which is ignored: it is the same for every id).
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdHasher {
    keys: [u64; 2],
    h: u64,
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut a = [0u8; 8];
        let n = bytes.len().min(8);
        a[..n].copy_from_slice(&bytes[..n]);
        // Two rounds: after one, the low bits of the result depend on the input's high bits
        // only through the product's high half, which spreads them poorly for some keys (ids
        // that differ only in bytes 4..8 fell into fewer than 100 of 256 buckets for about one
        // process key in seven); the second multiply mixes every bit of the first's result.
        let x = fold(self.h ^ u64::from_le_bytes(a) ^ self.keys[0], self.keys[1]);
        self.h = fold(x, MIX);
    }

    fn write_usize(&mut self, _len: usize) {}

    fn finish(&self) -> u64 {
        self.h
    }
}

/// The second round's multiplier: odd, with bits spread over both halves (the 64-bit golden
/// ratio, as in Fibonacci hashing).
const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

/// The high and low halves of the 128-bit product `x × m` folded together: every bit of the
/// result depends on every bit of both.
fn fold(x: u64, m: u64) -> u64 {
    let p = u128::from(x) * u128::from(m);
    (p as u64) ^ ((p >> 64) as u64)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    use super::IdHash;
    use crate::base::blob::BlobId;

    #[test]
    fn ids_that_differ_in_their_first_8_bytes_hash_apart_and_equal_ids_hash_alike() {
        let h = IdHash::default();
        let ids: Vec<BlobId> = (0..10_000u32).map(|i| BlobId::of(&i.to_le_bytes())).collect();
        let hashes: HashSet<u64> = ids.iter().map(|id| h.hash_one(id)).collect();
        assert_eq!(hashes.len(), ids.len());
        assert_eq!(h.hash_one(ids[7]), IdHash::default().hash_one(BlobId(ids[7].0)));
        // Ids equal in their low bytes (ground to share a bucket) still spread over buckets.
        let mut same_low = Vec::new();
        for i in 0..256u64 {
            let mut b = [0u8; 32];
            b[..8].copy_from_slice(&(i << 32).to_le_bytes());
            same_low.push(h.hash_one(BlobId(b)) & 0xFF);
        }
        let buckets: HashSet<u64> = same_low.into_iter().collect();
        assert!(buckets.len() > 100, "{} of 256 buckets", buckets.len());
    }

    /// The process key is random, so one test run sees one key: this checks 2,000 keys, each
    /// against ids ground to agree in every byte but one 8-bit or 32-bit field of the 8 hashed
    /// (256 of them fall in about 162 of 256 buckets when spread at random).
    #[test]
    fn ids_that_differ_only_in_some_of_the_hashed_bytes_spread_over_buckets_for_every_key() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2_000 {
            let h = IdHash { keys: [next(), next() | 1] };
            for shift in [0u32, 8, 24, 32, 56] {
                let buckets: HashSet<u64> = (0..256u64)
                    .map(|i| {
                        let mut b = [0u8; 32];
                        b[..8].copy_from_slice(&(i << shift).to_le_bytes());
                        h.hash_one(BlobId(b)) & 0xFF
                    })
                    .collect();
                assert!(
                    buckets.len() > 120,
                    "keys {:x?}, byte at bit {shift}: {} of 256 buckets",
                    h.keys,
                    buckets.len()
                );
            }
        }
    }
}
