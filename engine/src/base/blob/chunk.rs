//! Content-defined chunking of large blobs.
//!
//! A blob above [`Options::chunk_threshold`](crate::Options) is cut by FastCDC (the 2020
//! algorithm) into chunks that are stored as ordinary blobs, and a *manifest* record
//! lists them. Cut points depend on the content around them, not on offsets, so a value
//! that shares a prefix, a suffix or a middle with a stored value produces the same
//! chunks there and costs only its new ones. The blob's id stays the BLAKE3 of its whole
//! content: callers never see chunks.
//!
//! Manifest payload (little-endian; `engine/FORMAT.md`, record kind 13):
//!
//! ```text
//! id [32] | total_len u64 | count u32 | count × (chunk id [32] | chunk len u32)
//! ```
//!
//! A *delta* manifest (bit 31 of `count` set) extends a stored manifest, its *base*: the
//! base's first `keep` chunks (`base_len` bytes), then its own `count & 0x7fff_ffff`:
//!
//! ```text
//! id [32] | total_len u64 | count|1<<31 u32 | base id [32] | keep u32 | base_len u64 | entries
//! ```
//!
//! Successive versions of a growing value share all their chunks but the last few, so the
//! next version's manifest names the previous one and lists only what differs: a few
//! dozen bytes instead of 36 bytes per chunk of the whole value, every version.

use std::ops::Range;

use super::BlobId;

/// Smallest accepted average chunk size.
pub const MIN_AVG: u32 = 256;
/// Largest accepted average chunk size.
pub const MAX_AVG: u32 = 4 << 20;

const HEAD: usize = 32 + 8 + 4;
const BASE: usize = 32 + 4 + 8;
const ENTRY: usize = 32 + 4;
/// The flag in `count` marking a delta manifest.
const DELTA: u32 = 1 << 31;

/// The chunk boundaries of `content` for an average chunk size `avg` (min `avg / 4`,
/// max `avg × 4`). Deterministic: the same bytes always give the same cuts.
///
/// The last FastCDC chunk ends where the content ends, not at a content-defined cut, so a
/// value that grows at its end would store it again, whole, every time. It is therefore
/// cut further into pieces of `avg / 8` counted from its start: a value with a few bytes
/// appended reuses every full piece and stores only the last one and what was added (a
/// growing list costs about what it grew, not an average chunk per version).
///
/// ```
/// use undertext::internals::cut_points;
/// let data: Vec<u8> = (0..200_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
/// let cuts = cut_points(&data, 16 << 10);
/// assert_eq!(cuts.first().map(|r| r.start), Some(0));
/// assert_eq!(cuts.last().map(|r| r.end), Some(data.len()));
/// assert!(cuts.iter().all(|r| r.len() <= 64 << 10));
/// ```
pub fn cut_points(content: &[u8], avg: u32) -> Vec<Range<usize>> {
    let avg = avg.clamp(MIN_AVG, MAX_AVG);
    let mut cuts: Vec<Range<usize>> = fastcdc::v2020::FastCDC::new(content, avg / 4, avg, avg * 4)
        .map(|c| c.offset..c.offset + c.length)
        .collect();
    if let Some(tail) = cuts.pop() {
        let piece = (avg / 8) as usize;
        let mut at = tail.start;
        while at < tail.end {
            let end = (at + piece).min(tail.end);
            cuts.push(at..end);
            at = end;
        }
    }
    cuts
}

/// The stored manifest a delta manifest extends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Base {
    /// The base blob (stored as a manifest).
    pub id: BlobId,
    /// How many of the base's chunks come first.
    pub keep: u32,
    /// Their total length: where this manifest's own chunks start.
    pub len: u64,
}

/// The list of chunks a large blob is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Manifest {
    /// The whole blob's id.
    pub id: BlobId,
    /// For a delta manifest, the base whose first chunks come first.
    pub base: Option<Base>,
    /// Each chunk's id and the offset just past it in the blob (cumulative length; a delta
    /// manifest's own chunks start at `base.len`).
    pub chunks: Vec<(BlobId, u64)>,
}

impl Manifest {
    /// A manifest listing every chunk itself.
    pub(crate) fn full(id: BlobId, chunks: Vec<(BlobId, u64)>) -> Manifest {
        Manifest { id, base: None, chunks }
    }

    /// Total length of the blob.
    pub(crate) fn len(&self) -> u64 {
        self.chunks.last().map_or(self.base.map_or(0, |b| b.len), |c| c.1)
    }

    /// Every blob this manifest names: its chunks, and its base.
    pub(crate) fn refs(&self) -> impl Iterator<Item = BlobId> + '_ {
        self.chunks.iter().map(|c| c.0).chain(self.base.map(|b| b.id))
    }

    /// This delta manifest as a full one, given its base's full chunk list.
    pub(crate) fn resolved(self, base_chunks: &[(BlobId, u64)]) -> Result<Manifest, String> {
        let Some(base) = self.base else { return Ok(self) };
        let keep = base.keep as usize;
        let kept_len = if keep == 0 { Some(0) } else { base_chunks.get(keep - 1).map(|c| c.1) };
        if kept_len != Some(base.len) {
            return Err(format!(
                "delta manifest of {} keeps {keep} chunks ({} bytes) of base {}, which has {} chunks{}",
                self.id,
                base.len,
                base.id,
                base_chunks.len(),
                kept_len.map_or(String::new(), |l| format!(" ({l} bytes in the first {keep})"))
            ));
        }
        let mut chunks = Vec::with_capacity(keep + self.chunks.len());
        chunks.extend_from_slice(&base_chunks[..keep]);
        chunks.extend_from_slice(&self.chunks);
        Ok(Manifest { id: self.id, base: None, chunks })
    }

    /// Serializes as described in the module docs.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEAD + BASE + ENTRY * self.chunks.len());
        out.extend_from_slice(self.id.as_bytes());
        out.extend_from_slice(&self.len().to_le_bytes());
        let count = self.chunks.len() as u32;
        let mut start = 0;
        match self.base {
            None => out.extend_from_slice(&count.to_le_bytes()),
            Some(b) => {
                out.extend_from_slice(&(count | DELTA).to_le_bytes());
                out.extend_from_slice(b.id.as_bytes());
                out.extend_from_slice(&b.keep.to_le_bytes());
                out.extend_from_slice(&b.len.to_le_bytes());
                start = b.len;
            }
        }
        for (id, end) in &self.chunks {
            out.extend_from_slice(id.as_bytes());
            out.extend_from_slice(&((end - start) as u32).to_le_bytes());
            start = *end;
        }
        out
    }

    /// Reads what [`Manifest::encode`] wrote; the error says what does not add up.
    pub(crate) fn decode(b: &[u8]) -> Result<Manifest, String> {
        if b.len() < HEAD {
            return Err(format!("manifest of {} bytes is shorter than its {HEAD}-byte header", b.len()));
        }
        let id = BlobId(arr32(&b[..32]));
        let total = u64::from_le_bytes(arr8(&b[32..40]));
        let raw_count = u32::from_le_bytes(arr4(&b[40..44]));
        let count = (raw_count & !DELTA) as usize;
        let (base, head) = if raw_count & DELTA == 0 {
            (None, HEAD)
        } else {
            if b.len() < HEAD + BASE {
                return Err(format!(
                    "delta manifest of {} bytes is shorter than its {}-byte header",
                    b.len(),
                    HEAD + BASE
                ));
            }
            let base = Base {
                id: BlobId(arr32(&b[HEAD..HEAD + 32])),
                keep: u32::from_le_bytes(arr4(&b[HEAD + 32..HEAD + 36])),
                len: u64::from_le_bytes(arr8(&b[HEAD + 36..HEAD + 44])),
            };
            (Some(base), HEAD + BASE)
        };
        let want = head + ENTRY * count;
        if b.len() != want {
            return Err(format!("manifest of {count} chunks needs {want} bytes, found {}", b.len()));
        }
        let mut chunks = Vec::with_capacity(count);
        let mut end = base.map_or(0, |b| b.len);
        for e in b[head..].chunks_exact(ENTRY) {
            let len = u32::from_le_bytes(arr4(&e[32..36]));
            if len == 0 {
                return Err(format!("manifest chunk {} is empty", chunks.len()));
            }
            end += u64::from(len);
            chunks.push((BlobId(arr32(&e[..32])), end));
        }
        if end != total {
            return Err(format!("manifest says {total} bytes, its chunks add up to {end}"));
        }
        Ok(Manifest { id, base, chunks })
    }

    /// Indexes of the chunks that overlap `range` (bytes), and the offset of the first.
    pub(crate) fn overlapping(&self, range: &Range<u64>) -> (Range<usize>, u64) {
        let first = self.chunks.partition_point(|c| c.1 <= range.start);
        let last = if range.end <= range.start {
            first
        } else {
            self.chunks.partition_point(|c| c.1 < range.end) + 1
        };
        let last = last.min(self.chunks.len()).max(first);
        let start = if first == 0 { 0 } else { self.chunks[first - 1].1 };
        (first..last, start)
    }
}

fn arr32(b: &[u8]) -> [u8; 32] {
    let mut a = [0u8; 32];
    a.copy_from_slice(b);
    a
}

fn arr8(b: &[u8]) -> [u8; 8] {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    a
}

fn arr4(b: &[u8]) -> [u8; 4] {
    let mut a = [0u8; 4];
    a.copy_from_slice(b);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(lens: &[u64]) -> Manifest {
        let mut end = 0;
        let chunks = lens
            .iter()
            .enumerate()
            .map(|(i, l)| {
                end += l;
                (BlobId::of(&[i as u8]), end)
            })
            .collect();
        Manifest::full(BlobId::of(b"whole"), chunks)
    }

    #[test]
    fn a_delta_manifest_round_trips_and_resolves_against_its_base() {
        let base = manifest(&[10, 20, 30]);
        let delta = Manifest {
            id: BlobId::of(b"next"),
            base: Some(Base { id: base.id, keep: 2, len: 30 }),
            chunks: vec![(BlobId::of(b"new"), 45)],
        };
        let bytes = delta.encode();
        assert_eq!(bytes.len(), HEAD + BASE + ENTRY);
        let back = Manifest::decode(&bytes).unwrap();
        assert_eq!(back, delta);
        assert_eq!(back.len(), 45);
        assert_eq!(back.refs().collect::<Vec<_>>(), vec![BlobId::of(b"new"), base.id]);
        let full = back.resolved(&base.chunks).unwrap();
        assert_eq!(full.base, None);
        assert_eq!(full.chunks.iter().map(|c| c.1).collect::<Vec<_>>(), vec![10, 30, 45]);
        let wrong = Manifest { base: Some(Base { id: base.id, keep: 2, len: 31 }), ..delta.clone() };
        let e = wrong.resolved(&base.chunks).unwrap_err();
        assert!(e.contains("keeps 2 chunks (31 bytes)") && e.contains("(30 bytes in the first 2)"), "{e}");
        let e = Manifest::decode(&bytes[..HEAD + 10]).unwrap_err();
        assert!(e.contains("shorter than its 88-byte header"), "{e}");
    }

    #[test]
    fn manifest_round_trips_and_rejects_damage() {
        let m = manifest(&[10, 20, 30]);
        let bytes = m.encode();
        assert_eq!(Manifest::decode(&bytes).ok(), Some(m.clone()));
        let short = Manifest::decode(&bytes[..bytes.len() - 1]).err().unwrap_or_default();
        assert!(short.contains("3 chunks needs 152 bytes, found 151"), "{short}");
        let mut lying = bytes.clone();
        lying[32] = 61; // total 61, chunks add to 60
        let lie = Manifest::decode(&lying).err().unwrap_or_default();
        assert!(lie.contains("says 61 bytes, its chunks add up to 60"), "{lie}");
    }

    #[test]
    fn overlapping_picks_exactly_the_chunks_a_range_touches() {
        let m = manifest(&[10, 20, 30]); // 0..10, 10..30, 30..60
        assert_eq!(m.overlapping(&(0..10)), (0..1, 0));
        assert_eq!(m.overlapping(&(9..11)), (0..2, 0));
        assert_eq!(m.overlapping(&(10..30)), (1..2, 10));
        assert_eq!(m.overlapping(&(29..31)), (1..3, 10));
        assert_eq!(m.overlapping(&(59..60)), (2..3, 30));
        assert_eq!(m.overlapping(&(60..60)), (3..3, 60));
        assert_eq!(m.overlapping(&(15..15)), (1..1, 10));
    }

    #[test]
    fn an_append_leaves_every_earlier_chunk_but_the_last_unchanged() {
        let mut data: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
        let before = cut_points(&data, 16 << 10);
        data.extend_from_slice(&[7u8; 1000]);
        let after = cut_points(&data, 16 << 10);
        let kept = before.len() - 1;
        assert_eq!(before[..kept], after[..kept]);
    }

    #[test]
    fn the_tail_after_the_last_cut_is_cut_in_pieces_an_append_reuses() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
        let cuts = cut_points(&data, 16 << 10);
        let cdc: Vec<_> = fastcdc::v2020::FastCDC::new(&data, 4 << 10, 16 << 10, 64 << 10).collect();
        let tail_start = cdc.last().map_or(0, |c| c.offset);
        let pieces: Vec<_> = cuts.iter().filter(|r| r.start >= tail_start).collect();
        assert!(pieces.iter().all(|r| r.len() <= 2 << 10));
        assert_eq!(pieces.iter().map(|r| r.len()).sum::<usize>(), data.len() - tail_start);
    }
}
