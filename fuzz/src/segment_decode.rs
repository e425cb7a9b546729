//! Arbitrary bytes decoded as a log segment: `verify_segment`, `walk_batches`,
//! `next_valid_batch`, `decode_batch`, `decode_record_at` and `decode_segment_header` must
//! never panic, hang or allocate without bound, and what they return must be consistent
//! with the bytes and with each other (the invariants are asserted below).
//!
//! Shared verbatim by the cargo-fuzz target `segment_decode` and the test
//! `segment_decode_corpus_replays_without_panic` in `tests/tests/fuzz_corpus.rs`, which
//! includes this file with `#[path]`. Use only `std` and `undertext` here.

use undertext::internals::Kind;
use undertext::log::format::{
    self, ALIGN, BATCH_HEADER_LEN, BATCH_MAGIC, BatchRef, FrameError, RECORD_HEADER_LEN, RecordRef,
    SEGMENT_HEADER_LEN, align_up, decode_batch, decode_batch_header, decode_record_at, decode_segment_header,
    encode_segment_header,
};
use undertext::log::scan::{
    Probe, ScanEnd, next_valid_batch, probe_valid_batch, verify_segment, walk_batches,
};

/// Inputs up to this length also get the quadratic checks (minimality of
/// `next_valid_batch`).
const SMALL: usize = 2048;

/// Open finding: for a batch whose header is intact but whose record count exceeds the
/// records its body holds, `decode_batch` reports `BadRecord` at the body's *end* (the
/// next batch's offset, or the end of the file), so `verify_segment` blames that offset.
/// Reproducers: `fuzz/regressions/segment_decode/bad-record-offset-*`.
pub const BAD_RECORD_OFFSET: &str = "bad-record-offset";

/// Every open finding that [`check_tolerating`] can be told to let pass.
pub const KNOWN_OPEN: &[&str] = &[];

/// Runs every check on `data` as given, then on a copy whose checksums were recomputed
/// (see [`reseal`]), so that mutated lengths and counts reach the structural checks
/// instead of stopping at a checksum the fuzzer cannot forge.
pub fn check(data: &[u8]) {
    check_tolerating(data, &[]);
}

/// [`check`], but letting the open findings named in `tolerate` (from [`KNOWN_OPEN`])
/// pass, so that a fuzzing run can look for other failures past a known one.
pub fn check_tolerating(data: &[u8], tolerate: &[&str]) {
    let lax = Lax { record_offset: tolerate.contains(&BAD_RECORD_OFFSET) };
    check_bytes(data, lax);
    let resealed = reseal(data);
    if resealed != data {
        check_bytes(&resealed, lax);
    }
}

/// Which open findings' invariants are relaxed.
#[derive(Clone, Copy)]
struct Lax {
    /// A bad record may be reported at the end of its batch's body (see
    /// [`BAD_RECORD_OFFSET`]).
    record_offset: bool,
}

fn check_bytes(data: &[u8], lax: Lax) {
    let walk32 = check_walk(data, SEGMENT_HEADER_LEN);
    check_walk(data, 0);
    let first = data.first().map_or(0, |&b| u64::from(b));
    for segment in [1, first] {
        check_header(data, segment);
        check_verify(data, segment, &walk32, lax);
    }
    let from_input = |at: usize| -> usize {
        let mut a = [0u8; 2];
        for (i, v) in a.iter_mut().enumerate() {
            *v = data.get(at + i).copied().unwrap_or(0);
        }
        usize::from(u16::from_le_bytes(a)) % (data.len() + 1)
    };
    let picked = from_input(1);
    for off in [
        0,
        8,
        SEGMENT_HEADER_LEN,
        SEGMENT_HEADER_LEN + 1,
        SEGMENT_HEADER_LEN + BATCH_HEADER_LEN,
        data.len().saturating_sub(BATCH_HEADER_LEN),
        data.len(),
        data.len() + 1,
        picked,
        align_up(picked),
        usize::MAX,
        usize::MAX - BATCH_HEADER_LEN + 1,
        usize::MAX - 2 * BATCH_HEADER_LEN,
    ] {
        check_decode_batch(data, off, lax);
        check_decode_record(data, off);
    }
    for from in [0, SEGMENT_HEADER_LEN, picked, from_input(3), data.len()] {
        check_next_valid(data, from);
    }
}

/// The segment header decodes only from 32 bytes that carry the magic, version 1 and the
/// expected number; the header this build writes always decodes.
fn check_header(data: &[u8], segment: u64) {
    let r = decode_segment_header(data, segment);
    if data.len() < SEGMENT_HEADER_LEN {
        assert_eq!(r, Err(format::SegmentHeaderError::Short));
        return;
    }
    if r.is_ok() {
        assert_eq!(data[0..8], format::SEGMENT_MAGIC);
        assert_eq!(data[8..12], format::FORMAT_VERSION.to_le_bytes());
        assert_eq!(data[16..24], segment.to_le_bytes());
    }
    if data[..SEGMENT_HEADER_LEN] == encode_segment_header(segment) {
        assert_eq!(r, Ok(()));
    }
}

/// Everything a decoded batch promises: it starts at `offset`, ends inside the input, and
/// its records tile its body exactly, each payload a slice of the input right after its
/// header.
fn check_batch(data: &[u8], offset: usize, b: &BatchRef<'_>) {
    assert_eq!(b.offset, offset as u64);
    assert!(b.end <= data.len() as u64, "batch end {} > len {}", b.end, data.len());
    let end = b.end as usize;
    assert!(end >= offset + BATCH_HEADER_LEN);
    assert_eq!((end - offset) % ALIGN, 0, "batch length not aligned");
    let header = decode_batch_header(data, offset);
    let Ok((body, count, txid, _)) = header else {
        panic!("decoded batch at {offset} has a bad header: {header:?}")
    };
    assert_eq!(offset + BATCH_HEADER_LEN + body, end);
    assert_eq!(count as usize, b.records.len());
    assert_eq!(txid, b.txid);
    let mut at = offset + BATCH_HEADER_LEN;
    for r in &b.records {
        assert_eq!(r.offset, at as u64, "records must tile the batch body");
        check_record(data, r);
        at += RECORD_HEADER_LEN + align_up(r.payload.len());
        assert!(at <= end, "record runs past its batch");
    }
    assert_eq!(at, end, "records must fill the batch body");
}

/// A decoded record's payload is the input's bytes right after its header, and decoding
/// the record again on its own gives the same record.
fn check_record(data: &[u8], r: &RecordRef<'_>) {
    assert!(
        r.offset + (RECORD_HEADER_LEN + r.payload.len()) as u64 <= data.len() as u64,
        "payload outside input"
    );
    let at = r.offset as usize;
    let start = at + RECORD_HEADER_LEN;
    assert_eq!(
        r.payload.as_ptr(),
        data[start..].as_ptr(),
        "payload is not the input's bytes after the record header"
    );
    assert_eq!(decode_record_at(data, at, r.offset).as_ref(), Ok(r));
}

/// Walks batches from `start`; returns (batches, records, end, how it ended).
fn check_walk(data: &[u8], start: usize) -> (u64, u64, u64, ScanEnd) {
    let (mut batches, mut records) = (0u64, 0u64);
    let mut next = start;
    let walked = walk_batches::<()>(data, start, |b| {
        assert_eq!(b.offset, next as u64, "walk skipped bytes");
        check_batch(data, next, b);
        batches += 1;
        records += b.records.len() as u64;
        next = b.end as usize;
        Ok(())
    });
    let Ok((end, how)) = walked else { unreachable!("the callback never fails") };
    assert_eq!(end, next as u64);
    if start >= data.len() {
        assert_eq!((end, &how), (start as u64, &ScanEnd::Clean));
    } else {
        assert!(end <= data.len() as u64, "walk end {end} > len {}", data.len());
        match &how {
            // Clean: every byte was a batch, or the rest is zeros (preallocated space).
            ScanEnd::Clean => assert!(
                end == data.len() as u64 || data[end as usize..].iter().all(|&b| b == 0),
                "clean walk stopped at {end} before non-zero bytes"
            ),
            ScanEnd::Damaged { offset, reason, valid_after } => {
                assert_eq!(*offset, end);
                assert!(!reason.is_empty());
                assert!(decode_batch(data, next).is_err());
                let after = probe_valid_batch(data, next + ALIGN);
                assert_eq!(*valid_after, after != Probe::NotFound);
            }
        }
        // The callback's error stops the walk at the first valid batch.
        let stopped = walk_batches(data, start, |b| Err(b.offset));
        match decode_batch(data, start) {
            Ok(_) => assert_eq!(stopped, Err(start as u64)),
            Err(_) => assert!(stopped.is_ok()),
        }
    }
    (batches, records, end, how)
}

/// `verify_segment` reports the header problem first at offset 0, then problems in offset
/// order, each inside the input; its counts agree with a walk from 32, and it finds no
/// problem exactly when the header is intact and that walk is clean.
fn check_verify(data: &[u8], segment: u64, walk32: &(u64, u64, u64, ScanEnd), lax: Lax) {
    let mut seen: Vec<u64> = Vec::new();
    let mut flagged = 0usize;
    let report = verify_segment(data, segment, |r| {
        check_record(data, r);
        assert!(r.offset >= (SEGMENT_HEADER_LEN + BATCH_HEADER_LEN) as u64);
        assert!(seen.last().is_none_or(|&p| p < r.offset), "records out of order");
        seen.push(r.offset);
        // A content check like the store's: exercise problems raised by `extra`.
        (r.kind == Kind::Blob && r.payload.len() < 32).then(|| {
            flagged += 1;
            "blob record shorter than its id".to_string()
        })
    });
    assert_eq!(report.records, seen.len() as u64);
    let header_ok = decode_segment_header(data, segment).is_ok();
    let header_problems = report.problems.iter().filter(|p| p.reason.starts_with("segment header")).count();
    assert_eq!(header_problems, usize::from(!header_ok));
    if !header_ok {
        assert_eq!(report.problems[0].offset, 0);
    }
    let len = data.len() as u64;
    if data.len() < SEGMENT_HEADER_LEN {
        assert_eq!((report.batches, report.records), (0, 0));
        assert_eq!(report.problems.len(), 1);
        return;
    }
    // Valid batches are disjoint frames after the segment header.
    assert!(
        report.batches * BATCH_HEADER_LEN as u64 + report.records * RECORD_HEADER_LEN as u64
            <= len - SEGMENT_HEADER_LEN as u64
    );
    for (i, p) in report.problems.iter().enumerate() {
        if i == 0 && !header_ok {
            continue;
        }
        assert!(
            p.offset >= SEGMENT_HEADER_LEN as u64
                && (p.offset < len || (lax.record_offset && p.offset == len)),
            "problem offset {} outside the frames of a {len}-byte segment: {p:?}",
            p.offset
        );
        assert!(!p.reason.is_empty());
    }
    assert!(
        report.problems.windows(2).all(|w| w[0].offset <= w[1].offset),
        "problems out of offset order: {:?}",
        report.problems
    );
    let frame_problems = report.problems.len() - header_problems - flagged;
    let (batches, records, _, how) = walk32;
    assert!(report.batches >= *batches && report.records >= *records);
    if *how == ScanEnd::Clean {
        assert_eq!((report.batches, report.records), (*batches, *records));
        assert_eq!(frame_problems, 0);
    } else {
        assert!(frame_problems > 0, "walk found damage that verify missed");
    }
}

/// `decode_batch` at any offset, even past the end: a batch it accepts lies inside the
/// input; a damaged record it names lies inside the batch's body.
fn check_decode_batch(data: &[u8], off: usize, lax: Lax) {
    match decode_batch(data, off) {
        Ok(b) => check_batch(data, off, &b),
        Err(FrameError::BadRecord(at, reason)) => {
            assert!(!reason.is_empty());
            let header = decode_batch_header(data, off);
            let Ok((body, ..)) = header else {
                panic!("bad record {at} in a batch whose header is bad: {header:?}")
            };
            let body_start = (off + BATCH_HEADER_LEN) as u64;
            let body_end = body_start + body as u64;
            assert!(body_end <= data.len() as u64);
            assert!(
                at >= body_start && (at < body_end || (lax.record_offset && at == body_end)),
                "bad record at {at} outside its batch body {body_start}..{body_end}"
            );
        }
        Err(FrameError::Incomplete(reason)) | Err(FrameError::Bad(reason)) => {
            assert!(!reason.is_empty());
        }
    }
}

/// `decode_record_at` at any offset: an accepted record's payload is in the input.
fn check_decode_record(data: &[u8], at: usize) {
    if let Ok(r) = decode_record_at(data, at, at as u64) {
        check_record(data, &r);
    }
}

/// `next_valid_batch` returns an aligned offset at or after `from` where a batch decodes,
/// and (for small inputs) the first such offset.
fn check_next_valid(data: &[u8], from: usize) {
    let first = align_up(from);
    let found = next_valid_batch(data, from);
    if let Some(v) = found {
        assert!(v >= first && v.is_multiple_of(ALIGN));
        match decode_batch(data, v) {
            Ok(b) => check_batch(data, v, &b),
            Err(e) => panic!("next_valid_batch returned {v}, which does not decode: {e:?}"),
        }
    }
    if data.len() <= SMALL {
        let scan_to = found.unwrap_or(data.len());
        let earlier = (first..scan_to).step_by(ALIGN).find(|&o| decode_batch(data, o).is_ok());
        assert_eq!(earlier, None, "next_valid_batch skipped a valid batch");
    }
}

/// A copy of `data` with every checksum recomputed: the segment header's, and for each
/// batch header found at an aligned offset after it, its records', its body's and its
/// own. Lengths and counts are left as they are, however wrong.
pub fn reseal(data: &[u8]) -> Vec<u8> {
    let mut b = data.to_vec();
    if b.len() < SEGMENT_HEADER_LEN {
        return b;
    }
    let c = crc32c(0, &b[0..28]);
    b[28..32].copy_from_slice(&c.to_le_bytes());
    let mut off = SEGMENT_HEADER_LEN;
    while off + BATCH_HEADER_LEN <= b.len() {
        if u32_at(&b, off) != BATCH_MAGIC {
            off += ALIGN;
            continue;
        }
        let body_len = u32_at(&b, off + 4) as usize;
        let count = u32_at(&b, off + 8);
        let body_start = off + BATCH_HEADER_LEN;
        let body_end = body_start.saturating_add(body_len);
        let whole = body_end <= b.len() && body_len.is_multiple_of(ALIGN);
        if whole {
            let mut at = body_start;
            for _ in 0..count {
                if at + RECORD_HEADER_LEN > body_end {
                    break;
                }
                let len = u32_at(&b, at) as usize;
                let payload_end = at + RECORD_HEADER_LEN + len;
                if payload_end > body_end {
                    break;
                }
                let c = crc32c(crc32c(0, &b[at..at + 12]), &b[at + 16..payload_end]);
                b[at + 12..at + 16].copy_from_slice(&c.to_le_bytes());
                at += RECORD_HEADER_LEN + align_up(len);
            }
            let c = crc32c(0, &b[body_start..body_end]);
            b[off + 24..off + 28].copy_from_slice(&c.to_le_bytes());
        }
        let c = crc32c(0, &b[off..off + 28]);
        b[off + 28..off + 32].copy_from_slice(&c.to_le_bytes());
        off = if whole { body_end } else { off + ALIGN };
    }
    b
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

/// CRC-32C (Castagnoli), continuing from `crc` like `crc32c::crc32c_append`.
pub fn crc32c(crc: u32, bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 == 1 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    let mut c = !crc;
    for &byte in bytes {
        c = TABLE[((c ^ u32::from(byte)) & 0xFF) as usize] ^ (c >> 8);
    }
    !c
}
