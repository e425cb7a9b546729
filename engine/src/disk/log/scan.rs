//! Walking a segment frame by frame: the shared core of recovery, rebuild and `check`.

use super::format::{self, BATCH_MAGIC, BatchRef, FrameError, RecordRef, SEGMENT_HEADER_LEN};

/// How a walk over a segment's batches ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every byte up to the end was part of a valid batch, or zero (preallocated space
    /// after the last batch; the walk returns where the zeros start).
    Clean,
    /// The frame at `offset` could not be decoded.
    Damaged {
        /// Offset of the frame that failed.
        offset: u64,
        /// What failed.
        reason: String,
        /// Whether a valid batch exists after the damaged frame. If not, and the segment
        /// is the last one, the damage is a torn tail; otherwise it is corruption.
        valid_after: bool,
    },
}

/// Calls `f` on each valid batch of `seg` from `start` on, in order, until the end or the
/// first damaged frame. Returns the offset just past the last valid batch and how it ended.
pub fn walk_batches<E>(
    seg: &[u8],
    start: usize,
    mut f: impl FnMut(&BatchRef<'_>) -> Result<(), E>,
) -> Result<(u64, ScanEnd), E> {
    let mut off = start;
    while off < seg.len() {
        match format::decode_batch(seg, off) {
            Ok(b) => {
                f(&b)?;
                off = b.end as usize;
            }
            Err(_) if super::prealloc::is_zero(&seg[off..]) => {
                // Preallocated space after the last batch: the end of the data.
                return Ok((off as u64, ScanEnd::Clean));
            }
            Err(e) => {
                // Giving up counts as "something valid may follow": never cut on a guess.
                let valid_after = probe_valid_batch(seg, off + format::ALIGN) != Probe::NotFound;
                let end =
                    ScanEnd::Damaged { offset: off as u64, reason: e.reason().to_string(), valid_after };
                return Ok((off as u64, end));
            }
        }
    }
    Ok((off as u64, ScanEnd::Clean))
}

/// The result of probing for a valid batch after damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// A fully valid batch starts here.
    Found(usize),
    /// No valid batch follows.
    NotFound,
    /// The probe spent its budget (crafted input full of valid-looking headers) without an
    /// answer. Callers must treat this as "maybe": recovery refuses rather than cut.
    GaveUp,
}

/// Probes 8-byte aligned offsets from `from` for a fully valid batch. A candidate's
/// header checksum is checked before its body, and the body bytes checksummed across all
/// candidates are capped at twice the input plus 1 MiB, so the probe stays linear even on
/// input crafted with valid headers everywhere.
pub fn probe_valid_batch(seg: &[u8], from: usize) -> Probe {
    let mut budget = seg.len().saturating_mul(2).saturating_add(1 << 20);
    let mut off = format::align_up(from);
    let magic = BATCH_MAGIC.to_le_bytes();
    while off.checked_add(format::BATCH_HEADER_LEN).is_some_and(|e| e <= seg.len()) {
        if seg[off..off + 4] == magic
            && let Ok((body_len, ..)) = format::decode_batch_header(seg, off)
        {
            // A body running past the end cannot be valid and costs nothing to rule out.
            let fits = off + format::BATCH_HEADER_LEN + body_len <= seg.len();
            if fits {
                if body_len > budget {
                    return Probe::GaveUp;
                }
                budget -= body_len;
                if format::decode_batch(seg, off).is_ok() {
                    return Probe::Found(off);
                }
            }
        }
        off += format::ALIGN;
    }
    Probe::NotFound
}

/// The offset of the first fully valid batch at or after `from`, if one is found within
/// the probe's budget (see [`probe_valid_batch`]).
pub fn next_valid_batch(seg: &[u8], from: usize) -> Option<usize> {
    match probe_valid_batch(seg, from) {
        Probe::Found(off) => Some(off),
        Probe::NotFound | Probe::GaveUp => None,
    }
}

/// One problem found by [`verify_segment`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Offset of the damaged frame (segment header, batch or record).
    pub offset: u64,
    /// What failed.
    pub reason: String,
}

/// What [`verify_segment`] found in one segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentCheck {
    /// Valid batches.
    pub batches: u64,
    /// Valid records.
    pub records: u64,
    /// Every damaged frame, in offset order.
    pub problems: Vec<Problem>,
    /// The transaction ids of the first and the last valid batch.
    pub txids: Option<(u64, u64)>,
    /// The first valid batch whose transaction id is not one more than that of the valid
    /// batch right before it: (its offset, the id expected, the id found). Not a damaged
    /// frame, so not in `problems`; `Store::check` reports it (batches are missing).
    pub txid_gap: Option<(u64, u64, u64)>,
}

/// Verifies every frame of a segment's bytes: the header (expecting number `segment`), each
/// batch and each record, and calls `extra` on each valid record for content checks (such
/// as a blob's hash). Never panics, whatever the bytes; work is linear in their length.
///
/// ```
/// use undertext::log::scan::verify_segment;
/// let report = verify_segment(b"not a segment", 1, |_| None);
/// assert_eq!(report.problems.len(), 1);
/// ```
pub fn verify_segment(
    seg: &[u8],
    segment: u64,
    mut extra: impl FnMut(&RecordRef<'_>) -> Option<String>,
) -> SegmentCheck {
    let mut out = SegmentCheck::default();
    if let Err(e) = format::decode_segment_header(seg, segment) {
        out.problems.push(Problem { offset: 0, reason: format!("segment header: {e}") });
        if seg.len() < SEGMENT_HEADER_LEN {
            return out;
        }
    }
    let mut off = SEGMENT_HEADER_LEN;
    let mut prev_end = None;
    while off < seg.len() {
        match format::decode_batch(seg, off) {
            Err(_) if super::prealloc::is_zero(&seg[off..]) => break,
            Ok(b) => {
                out.batches += 1;
                if let Some((_, last)) = out.txids
                    && prev_end == Some(b.offset)
                    && b.txid != last.wrapping_add(1)
                    && out.txid_gap.is_none()
                {
                    out.txid_gap = Some((b.offset, last.wrapping_add(1), b.txid));
                }
                out.txids = Some((out.txids.map_or(b.txid, |(first, _)| first), b.txid));
                prev_end = Some(b.end);
                for r in &b.records {
                    out.records += 1;
                    if let Some(reason) = extra(r) {
                        out.problems.push(Problem { offset: r.offset, reason });
                    }
                }
                off = b.end as usize;
            }
            Err(e) => {
                let header = format::decode_batch_header(seg, off);
                let (offset, next) = match (&e, header) {
                    // The header is intact, so its length can be trusted to skip the body.
                    (FrameError::BadRecord(at, _), Ok((body, ..))) => {
                        (*at, Some(off + format::BATCH_HEADER_LEN + body))
                    }
                    (FrameError::Bad(_), Ok((body, ..))) => {
                        (off as u64, Some(off + format::BATCH_HEADER_LEN + body))
                    }
                    _ => (off as u64, next_valid_batch(seg, off + format::ALIGN)),
                };
                out.problems.push(Problem { offset, reason: e.reason().to_string() });
                match next {
                    Some(n) if n > off && n <= seg.len() => off = n,
                    _ => break,
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::log::format::{BatchBuf, RecordSpec, encode_segment_header};

    fn segment(batches: usize) -> Vec<u8> {
        let mut seg = encode_segment_header(1).to_vec();
        for i in 0..batches {
            let mut b = BatchBuf::new();
            let p = vec![i as u8; 40 + i];
            b.push(RecordSpec { kind: 1, codec: 0, raw_len: 0, parts: &[&p] }).unwrap();
            let mut f = b.finish();
            seg.extend_from_slice(f.seal(i as u64));
        }
        seg
    }

    #[test]
    fn walk_stops_at_torn_tail_with_nothing_valid_after() {
        let seg = segment(3);
        let cut = seg.len() - 5;
        let mut seen = 0;
        let (end, how) = walk_batches::<()>(&seg[..cut], 32, |_| {
            seen += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, 2);
        assert!(matches!(how, ScanEnd::Damaged { valid_after: false, offset, .. } if offset == end));
    }

    #[test]
    fn damage_before_a_valid_batch_is_flagged() {
        let mut seg = segment(3);
        seg[40] ^= 1;
        let (end, how) = walk_batches::<()>(&seg, 32, |_| Ok(())).unwrap();
        assert_eq!(end, 32);
        assert!(matches!(how, ScanEnd::Damaged { valid_after: true, .. }));
    }

    #[test]
    fn verify_reports_each_damaged_frame_and_keeps_going() {
        let mut seg = segment(4);
        let clean = verify_segment(&seg, 1, |_| None);
        assert_eq!((clean.batches, clean.records, clean.problems.len()), (4, 4, 0));
        seg[33] ^= 0x10; // first batch header
        let n = seg.len();
        seg[n - 3] ^= 0x01; // last record's payload or padding
        let r = verify_segment(&seg, 1, |_| None);
        assert_eq!(r.problems.len(), 2, "{r:?}");
        assert_eq!(r.problems[0].offset, 32);
        assert_eq!(r.batches, 2);
    }
}
