//! Whether the log is whole: segment files numbered 1, 2, 3, … without a gap, each a regular
//! file, every sealed segment holding at least one batch, and transaction ids going up by one
//! per batch across all of them (`engine/FORMAT.md`, "Opening a store").
//!
//! Recovery reads in full only the segments it replays. For the sealed segments before them
//! it reads the two ends: the segment header and the first batch header, and the last batch,
//! found from the end of the file (it must end exactly there: a sealed segment is cut to its
//! data). A segment cut short, emptied or deleted breaks the chain of transaction ids and is
//! refused, whatever the index says. When the quick look from the end finds a batch whose id
//! does not chain, the segment's batch headers are walked from the start before refusing, so a
//! payload that happens to hold a batch frame can never make a whole log look broken.
//!
//! Damage that is not missing data (a flipped bit in a sealed segment) makes the ends
//! unreadable; that is left to reads (which refuse the damaged record) and to `check`.

use std::fs::{File, Metadata};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::format::{self, BATCH_HEADER_LEN, SEGMENT_HEADER_LEN, SegmentHeaderError};
use super::segment_path;
use crate::base::error::{Error, Result};
use crate::base::io;

/// What kind of file system object `m` describes, for messages.
pub(crate) fn kind_of(m: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_file() {
        "a regular file"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "an unknown kind of file"
    }
}

/// Refuses a segment entry that is not a regular file (a link is never followed), and a gap
/// in the segment numbers (the first is 1).
pub(crate) fn check_numbering(dir: &Path, segments: &[u64]) -> Result<()> {
    for &n in segments {
        let path = segment_path(dir, n);
        let m = std::fs::symlink_metadata(&path).map_err(|e| Error::io("stat", &path, e))?;
        if !m.is_file() {
            return Err(Error::io(
                "open",
                &path,
                std::io::Error::other(format!("expected a regular file, found {}", kind_of(&m))),
            ));
        }
    }
    let mut want = 1u64;
    for &n in segments {
        if n != want {
            let missing = if n == want + 1 { format!("{want}") } else { format!("{want} to {}", n - 1) };
            return Err(Error::corrupt(
                want,
                0,
                format!(
                    "the segment file is missing: the log holds segments {}, not segment {missing}; \
                     their records would be lost, so the store is not opened for writing (restore the \
                     missing file; or salvage what remains with a read-only open: `Store::open_read_only`, \
                     `undertext --read-only …`)",
                    ranges(segments)
                ),
            ));
        }
        want = n + 1;
    }
    Ok(())
}

/// `1-3, 5, 7-9`.
fn ranges(ns: &[u64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ns.len() {
        let mut j = i;
        while j + 1 < ns.len() && ns[j + 1] == ns[j] + 1 {
            j += 1;
        }
        out.push(if i == j { ns[i].to_string() } else { format!("{}-{}", ns[i], ns[j]) });
        i = j + 1;
    }
    out.join(", ")
}

/// The chain of transaction ids through the log, checked as recovery goes.
#[derive(Debug, Default)]
pub(crate) struct Chain {
    /// The id the next batch must carry, once one batch is known.
    expect: Option<u64>,
    /// A sealed segment whose last batch was found from the end of the file (not yet walked
    /// from its start): walked before a mismatch is believed.
    quick: Option<(PathBuf, u64)>,
    /// Batches seen in the segment being walked.
    walked: u64,
    /// The segment whose earlier batches the index already holds (replay resumed in it).
    resumed: Option<u64>,
}

impl Chain {
    /// A sealed segment that replay does not read: its first batch must chain on, its last
    /// batch sets what the next must carry.
    pub(crate) fn sealed(&mut self, dir: &Path, n: u64) -> Result<()> {
        let path = segment_path(dir, n);
        let file = io::open_read(&path).map_err(|e| Error::io("open", &path, e))?;
        let len = file.metadata().map_err(|e| Error::io("stat", &path, e))?.len();
        let cut_short = |at: u64, what: String| {
            Error::corrupt(
                n,
                at,
                format!("{what}: the sealed segment was cut short or emptied (it is {len} bytes)"),
            )
        };
        if len < SEGMENT_HEADER_LEN as u64 {
            return Err(cut_short(0, format!("the segment header needs {SEGMENT_HEADER_LEN} bytes")));
        }
        let mut head = vec![0u8; (len as usize).min(SEGMENT_HEADER_LEN + BATCH_HEADER_LEN)];
        file.read_exact_at(&mut head, 0).map_err(|e| Error::io("read", &path, e))?;
        match format::decode_segment_header(&head, n) {
            Ok(()) => {}
            Err(SegmentHeaderError::Version(v)) => {
                return Err(Error::UnsupportedVersion {
                    path: crate::base::error::DisplayPath(path),
                    expected: format::FORMAT_VERSION,
                    found: v,
                });
            }
            Err(e) => {
                // Damage, not missing data: reads and `check` report it.
                tracing::warn!(segment = n, reason = %e, "sealed segment header damaged; its batches are not chained");
                return self.unknown();
            }
        }
        if head.len() < SEGMENT_HEADER_LEN + BATCH_HEADER_LEN
            || crate::disk::log::prealloc::is_zero(&head[SEGMENT_HEADER_LEN..])
        {
            return Err(cut_short(
                SEGMENT_HEADER_LEN as u64,
                "no batch after the segment header (every sealed segment holds at least one)".into(),
            ));
        }
        let first = match format::decode_batch_header(&head, SEGMENT_HEADER_LEN) {
            Ok((.., txid, _)) => txid,
            Err(e) => {
                tracing::warn!(segment = n, reason = %e.reason(), "first batch header damaged; not chained");
                return self.unknown();
            }
        };
        self.check(n, SEGMENT_HEADER_LEN as u64, first)?;
        let last = match last_from_end(&file, len) {
            Some(t) => {
                self.quick = Some((path, n));
                t
            }
            None => match walk_headers(&file, len, n)? {
                Some(t) => t,
                None => return self.unknown(),
            },
        };
        self.expect = Some(last.saturating_add(1));
        Ok(())
    }

    /// Damage hides a segment's ids: the chain starts again after it.
    fn unknown(&mut self) -> Result<()> {
        self.expect = None;
        self.quick = None;
        Ok(())
    }

    /// Replay resumes in segment `n` after the batch of id `txid` the index holds.
    pub(crate) fn resume(&mut self, n: u64, txid: u64) {
        self.expect = Some(txid.saturating_add(1));
        self.quick = None;
        self.resumed = Some(n);
    }

    /// Replay starts walking segment `n`.
    pub(crate) fn begin_walk(&mut self, _n: u64) {
        self.walked = 0;
    }

    /// A batch replay read at `offset` of segment `n`.
    pub(crate) fn batch(&mut self, n: u64, offset: u64, txid: u64) -> Result<()> {
        self.check(n, offset, txid)?;
        self.quick = None;
        self.expect = Some(txid.saturating_add(1));
        self.walked += 1;
        Ok(())
    }

    /// The walk of sealed segment `n` ended at `end`: it must have held a batch.
    pub(crate) fn end_sealed(&mut self, n: u64, end: u64) -> Result<()> {
        if self.walked == 0 && self.resumed != Some(n) {
            return Err(Error::corrupt(
                n,
                end,
                "no batch in a sealed segment (every sealed segment holds at least one): it was emptied or cut short",
            ));
        }
        Ok(())
    }

    /// The batch at `offset` of segment `n` carries `txid`: it must be the one expected.
    fn check(&mut self, n: u64, offset: u64, txid: u64) -> Result<()> {
        let Some(want) = self.expect else { return Ok(()) };
        if txid == want {
            return Ok(());
        }
        if let Some((path, q)) = self.quick.take() {
            // The quick look from the end may have met a frame inside a payload: walk the
            // segment's headers from its start before believing it.
            let file = io::open_read(&path).map_err(|e| Error::io("open", &path, e))?;
            let len = file.metadata().map_err(|e| Error::io("stat", &path, e))?.len();
            match walk_headers(&file, len, q)? {
                Some(last) if last.saturating_add(1) == txid => return Ok(()),
                Some(last) => self.expect = Some(last.saturating_add(1)),
                None => return Ok(()),
            }
        }
        let Some(want) = self.expect else { return Ok(()) };
        if txid == want {
            return Ok(());
        }
        let why = if txid > want {
            format!(
                "transaction id: expected {want}, found {txid}: {} batch(es) of the log are missing before \
                 this one (a segment deleted, emptied or cut short); their records would be lost, so the \
                 store is not opened for writing (restore what is missing; or salvage what remains with a \
                 read-only open: `Store::open_read_only`, `undertext --read-only …`)",
                txid - want
            )
        } else {
            format!("transaction id: expected {want}, found {txid}: ids go back, the log is not one history")
        };
        Err(Error::corrupt(n, offset, why))
    }
}

/// The same rules for `Store::check`, over segments it verifies one after the other: a
/// missing segment number, a sealed segment without a batch, and a gap in transaction ids
/// between segments become problems `(segment, offset, reason)`.
#[derive(Debug)]
pub(crate) struct CheckChain {
    next_segment: u64,
    expect: Option<u64>,
}

impl Default for CheckChain {
    fn default() -> Self {
        CheckChain { next_segment: 1, expect: None }
    }
}

impl CheckChain {
    /// Segment `n` is next: the numbers skipped before it are missing.
    pub(crate) fn before(&mut self, n: u64) -> Vec<(u64, u64, String)> {
        let mut out = Vec::new();
        if n > self.next_segment {
            for m in self.next_segment..n {
                out.push((m, 0, "the segment file is missing: the records it held are lost".to_string()));
            }
            self.expect = None;
        }
        self.next_segment = self.next_segment.max(n + 1);
        out
    }

    /// Segment `n` was verified as `seg`; `sealed` when it is not the last.
    pub(crate) fn after(
        &mut self,
        n: u64,
        sealed: bool,
        seg: &super::scan::SegmentCheck,
    ) -> Vec<(u64, u64, String)> {
        let mut out = Vec::new();
        if let Some((offset, want, found)) = seg.txid_gap {
            out.push((
                n,
                offset,
                format!("transaction id: expected {want}, found {found}: batches of the log are missing before this one"),
            ));
        }
        if sealed && seg.batches == 0 && seg.problems.is_empty() {
            out.push((
                n,
                SEGMENT_HEADER_LEN as u64,
                "no batch in a sealed segment (every sealed segment holds at least one): it was emptied or cut short"
                    .to_string(),
            ));
        }
        if let (Some(want), Some((first, _))) = (self.expect, seg.txids)
            && first != want
            && seg.problems.iter().all(|p| p.offset > SEGMENT_HEADER_LEN as u64)
        {
            out.push((
                n,
                SEGMENT_HEADER_LEN as u64,
                format!(
                    "transaction id of the segment's first batch: expected {want}, found {first}: batches of the \
                     log are missing before it (a segment emptied or cut short)"
                ),
            ));
        }
        self.expect = match (seg.problems.is_empty() && seg.txid_gap.is_none(), seg.txids) {
            (true, Some((_, last))) => Some(last.saturating_add(1)),
            (true, None) => self.expect,
            (false, _) => None,
        };
        out
    }
}

/// Bytes read from the end of a sealed segment, at most, to find its last batch quickly.
const TAIL_WINDOWS: [u64; 2] = [8 << 10, 256 << 10];

/// The id of the batch that ends exactly at `len`, looked for in the last few KiB of the file
/// (header checksum and length checked; `None` when not found there).
fn last_from_end(file: &File, len: u64) -> Option<u64> {
    let magic = format::BATCH_MAGIC.to_le_bytes();
    for w in TAIL_WINDOWS {
        let w = w.min(len - SEGMENT_HEADER_LEN as u64);
        let base = len - w;
        let mut buf = vec![0u8; w as usize];
        file.read_exact_at(&mut buf, base).ok()?;
        // Frames start at 8-byte aligned offsets of the segment.
        let mut off = (len.saturating_sub(BATCH_HEADER_LEN as u64)) & !(format::ALIGN as u64 - 1);
        while off >= base {
            let rel = (off - base) as usize;
            if buf[rel..rel + 4] == magic
                && let Ok((body, .., txid, _)) = format::decode_batch_header(&buf, rel)
                && off + (BATCH_HEADER_LEN + body) as u64 == len
            {
                return Some(txid);
            }
            if off < format::ALIGN as u64 {
                break;
            }
            off -= format::ALIGN as u64;
        }
        if base == SEGMENT_HEADER_LEN as u64 {
            break;
        }
    }
    None
}

/// Walks the batch headers of a sealed segment from its start, following their lengths (the
/// bodies are not read): the id of the last batch, `None` when a damaged header hides it, an
/// error when the file ends inside a batch.
fn walk_headers(file: &File, len: u64, n: u64) -> Result<Option<u64>> {
    let mut off = SEGMENT_HEADER_LEN as u64;
    let mut last = None;
    let mut h = [0u8; BATCH_HEADER_LEN];
    while off < len {
        if off + BATCH_HEADER_LEN as u64 > len {
            return Err(Error::corrupt(
                n,
                off,
                format!(
                    "a batch header needs {BATCH_HEADER_LEN} bytes, the sealed segment ends {} bytes after it starts: \
                     the segment was cut short",
                    len - off
                ),
            ));
        }
        file.read_exact_at(&mut h, off).map_err(|e| Error::io("read", format!("log segment {n}"), e))?;
        match format::decode_batch_header(&h, 0) {
            Ok((body, .., txid, _)) => {
                let end = off + (BATCH_HEADER_LEN + body) as u64;
                if end > len {
                    return Err(Error::corrupt(
                        n,
                        off,
                        format!(
                            "the batch needs {} bytes, the sealed segment ends after {}: the segment was cut short",
                            end - off,
                            len - off
                        ),
                    ));
                }
                last = Some(txid);
                off = end;
            }
            // Zeros: the end of the data, as replay reads it.
            Err(_) if h.iter().all(|&b| b == 0) => return Ok(last),
            Err(_) => return Ok(None),
        }
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::log::format::{BatchBuf, RecordSpec, encode_segment_header};

    fn segment(n: u64, txids: std::ops::Range<u64>, payload: usize) -> Vec<u8> {
        let mut seg = encode_segment_header(n).to_vec();
        for t in txids {
            let mut b = BatchBuf::new();
            let p = vec![t as u8; payload];
            b.push(RecordSpec { kind: 1, codec: 0, raw_len: 0, parts: &[&p] }).unwrap();
            let mut f = b.finish();
            seg.extend_from_slice(f.seal(t));
        }
        seg
    }

    fn write(dir: &Path, n: u64, bytes: &[u8]) {
        std::fs::write(segment_path(dir, n), bytes).unwrap();
    }

    #[test]
    fn sealed_segments_chain_by_transaction_id_from_their_ends() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), 1, &segment(1, 0..5, 100));
        write(d.path(), 2, &segment(2, 5..7, 20_000)); // last batch larger than the first window
        write(d.path(), 3, &segment(3, 7..9, 10));
        let mut c = Chain::default();
        for n in 1..=3 {
            c.sealed(d.path(), n).unwrap();
        }
        assert_eq!(c.expect, Some(9));
    }

    #[test]
    fn a_sealed_segment_cut_short_emptied_or_skipped_breaks_the_chain() {
        let d = tempfile::tempdir().unwrap();
        let one = segment(1, 0..5, 100);
        let two = segment(2, 5..9, 100);
        let cases: Vec<(&str, Vec<u8>, Vec<u8>)> = vec![
            ("cut to its header", one[..SEGMENT_HEADER_LEN].to_vec(), two.clone()),
            ("cut by one byte", one[..one.len() - 1].to_vec(), two.clone()),
            ("cut by half", one[..one.len() / 2].to_vec(), two.clone()),
            ("cut to nothing", Vec::new(), two.clone()),
            ("a batch missing at the end", segment(1, 0..4, 100), two.clone()),
            ("a batch missing at the start", one.clone(), segment(2, 6..9, 100)),
        ];
        for (what, a, b) in cases {
            write(d.path(), 1, &a);
            write(d.path(), 2, &b);
            let mut c = Chain::default();
            let r = c.sealed(d.path(), 1).and_then(|()| c.sealed(d.path(), 2));
            assert!(matches!(r, Err(Error::Corrupt { .. })), "{what}: {r:?}");
        }
    }

    #[test]
    fn a_payload_holding_a_batch_frame_at_its_end_does_not_break_the_chain() {
        let d = tempfile::tempdir().unwrap();
        // A record whose payload ends with a whole batch frame of another id, ending exactly
        // where the segment ends: the quick look from the end finds the fake one first.
        let fake = segment(9, 1000..1001, 16)[SEGMENT_HEADER_LEN..].to_vec();
        let mut seg = encode_segment_header(1).to_vec();
        let mut b = BatchBuf::new();
        b.push(RecordSpec { kind: 1, codec: 0, raw_len: 0, parts: &[&[7u8; 16][..], &fake] }).unwrap();
        seg.extend_from_slice(b.finish().seal(0));
        assert_eq!(
            last_from_end(&File::open(write_and_path(d.path(), 1, &seg)).unwrap(), seg.len() as u64),
            Some(1000)
        );
        write(d.path(), 2, &segment(2, 1..3, 10));
        let mut c = Chain::default();
        c.sealed(d.path(), 1).unwrap();
        c.sealed(d.path(), 2).unwrap();
        assert_eq!(c.expect, Some(3));
    }

    fn write_and_path(dir: &Path, n: u64, bytes: &[u8]) -> PathBuf {
        write(dir, n, bytes);
        segment_path(dir, n)
    }

    #[test]
    fn check_reports_missing_segments_empty_sealed_segments_and_id_gaps() {
        use crate::disk::log::scan::verify_segment;
        let mut c = CheckChain::default();
        let one = segment(1, 0..3, 8);
        assert!(c.before(1).is_empty());
        assert!(c.after(1, true, &verify_segment(&one, 1, |_| None)).is_empty());
        // Segment 2 missing; segment 3 cut to its header; segment 4 with a gap inside.
        let gaps = c.before(3);
        assert_eq!(gaps.len(), 1);
        assert_eq!((gaps[0].0, gaps[0].1), (2, 0));
        let three = segment(3, 9..9, 8);
        let p = c.after(3, true, &verify_segment(&three, 3, |_| None));
        assert!(p.len() == 1 && p[0].2.contains("no batch"), "{p:?}");
        let mut four = segment(4, 20..22, 8);
        four.extend_from_slice(&segment(4, 23..24, 8)[SEGMENT_HEADER_LEN..]);
        let v = verify_segment(&four, 4, |_| None);
        assert!(v.problems.is_empty(), "an id gap is not a damaged frame: {:?}", v.problems);
        let p = c.after(4, false, &v);
        assert!(p.len() == 1 && p[0].2.contains("expected 22, found 23"), "{p:?}");
    }

    /// Whatever bytes a segment holds — cut anywhere, bits flipped anywhere, random — reading
    /// its ends never panics: it chains, is reported, or is left to reads as damage.
    #[test]
    fn any_bytes_in_a_sealed_segment_are_chained_reported_or_left_never_a_panic() {
        let d = tempfile::tempdir().unwrap();
        let good = segment(1, 0..40, 300);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..600 {
            let mut bytes = good.clone();
            match round % 4 {
                0 => bytes.truncate((next() as usize) % (good.len() + 1)),
                1 => {
                    for _ in 0..1 + next() % 4 {
                        let at = (next() as usize) % bytes.len();
                        bytes[at] ^= 1 << (next() % 8);
                    }
                }
                2 => bytes = (0..(next() % 600) as usize).map(|_| next() as u8).collect(),
                _ => {
                    let at = (next() as usize) % bytes.len();
                    bytes[at..].fill(0);
                }
            }
            write(d.path(), 1, &bytes);
            write(d.path(), 2, &segment(2, 40..41, 8));
            let mut c = Chain::default();
            let r = c.sealed(d.path(), 1).and_then(|()| c.sealed(d.path(), 2));
            if bytes == good {
                assert!(r.is_ok(), "round {round}: {r:?}");
            }
        }
    }

    #[test]
    fn numbering_must_start_at_one_without_gaps() {
        let d = tempfile::tempdir().unwrap();
        for n in [1, 2, 4, 5] {
            write(d.path(), n, &segment(n, 0..1, 8));
        }
        let e = check_numbering(d.path(), &[1, 2, 4, 5]).unwrap_err().to_string();
        assert!(e.contains("segment 3") && e.contains("1-2, 4-5"), "{e}");
        assert!(check_numbering(d.path(), &[2, 4, 5]).is_err());
        assert!(check_numbering(d.path(), &[1, 2]).is_ok());
        assert_eq!(ranges(&[1, 2, 3, 5, 7, 8]), "1-3, 5, 7-8");
    }
}
