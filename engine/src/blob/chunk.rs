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

use std::ops::Range;

use super::BlobId;

/// Smallest accepted average chunk size.
pub const MIN_AVG: u32 = 256;
/// Largest accepted average chunk size.
pub const MAX_AVG: u32 = 4 << 20;

const HEAD: usize = 32 + 8 + 4;
const ENTRY: usize = 32 + 4;

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
/// use undertext::blob::chunk::cut_points;
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

/// The list of chunks a large blob is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Manifest {
    /// The whole blob's id.
    pub id: BlobId,
    /// Each chunk's id and the offset just past it (cumulative length).
    pub chunks: Vec<(BlobId, u64)>,
}

impl Manifest {
    /// Total length of the blob.
    pub(crate) fn len(&self) -> u64 {
        self.chunks.last().map_or(0, |c| c.1)
    }

    /// Serializes as described in the module docs.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEAD + ENTRY * self.chunks.len());
        out.extend_from_slice(self.id.as_bytes());
        out.extend_from_slice(&self.len().to_le_bytes());
        out.extend_from_slice(&(self.chunks.len() as u32).to_le_bytes());
        let mut start = 0;
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
        let count = u32::from_le_bytes(arr4(&b[40..44])) as usize;
        let want = HEAD + ENTRY * count;
        if b.len() != want {
            return Err(format!("manifest of {count} chunks needs {want} bytes, found {}", b.len()));
        }
        let mut chunks = Vec::with_capacity(count);
        let mut end = 0u64;
        for e in b[HEAD..].chunks_exact(ENTRY) {
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
        Ok(Manifest { id, chunks })
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
        Manifest { id: BlobId::of(b"whole"), chunks }
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
