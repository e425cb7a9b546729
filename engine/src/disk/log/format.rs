//! Byte layout of segment headers, batch frames and record frames.
//!
//! `engine/FORMAT.md` is the prose specification of this file; change both together.
//! All integers are little-endian. Every frame starts at an 8-byte aligned offset.

/// Magic bytes at the start of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"UTXTSEG\0";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Size of the segment header.
pub const SEGMENT_HEADER_LEN: usize = 32;
/// Magic number opening every batch frame (`"UTB1"` in little-endian byte order).
pub const BATCH_MAGIC: u32 = u32::from_le_bytes(*b"UTB1");
/// Size of a batch header.
pub const BATCH_HEADER_LEN: usize = 32;
/// Size of a record header.
pub const RECORD_HEADER_LEN: usize = 16;
/// Frames are aligned to this many bytes (records can be read in place by rkyv).
pub const ALIGN: usize = 8;
/// Largest payload of one record (1 GiB). Larger values must be chunked by the caller.
pub const MAX_RECORD_LEN: usize = 1 << 30;
/// Largest body of one batch (2 GiB), so that lengths fit the `u32` fields with room to spare.
pub const MAX_BATCH_BODY: usize = 1 << 31;

/// Rounds `n` up to the frame alignment (saturating at the largest aligned `usize`).
pub const fn align_up(n: usize) -> usize {
    n.saturating_add(ALIGN - 1) & !(ALIGN - 1)
}

fn crc(parts: &[&[u8]]) -> u32 {
    parts.iter().fold(0, |acc, p| crc32c::crc32c_append(acc, p))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Bytes as hex digits, for messages.
fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Encodes the 32-byte header of segment number `segment`.
pub fn encode_segment_header(segment: u64) -> [u8; SEGMENT_HEADER_LEN] {
    let mut h = [0u8; SEGMENT_HEADER_LEN];
    h[0..8].copy_from_slice(&SEGMENT_MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&segment.to_le_bytes());
    let c = crc(&[&h[0..28]]);
    h[28..32].copy_from_slice(&c.to_le_bytes());
    h
}

/// Why a segment header was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentHeaderError {
    /// Fewer than 32 bytes are present.
    Short,
    /// Magic, checksum or segment number do not match.
    Bad(String),
    /// A valid header of a format version this build does not read.
    Version(u32),
}

impl std::fmt::Display for SegmentHeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SegmentHeaderError::Short => {
                write!(f, "expected a {SEGMENT_HEADER_LEN}-byte segment header, found fewer bytes")
            }
            SegmentHeaderError::Bad(why) => f.write_str(why),
            SegmentHeaderError::Version(v) => {
                write!(f, "format version: expected {FORMAT_VERSION}, found {v}")
            }
        }
    }
}

/// Checks the header of a segment that should be number `segment`.
pub fn decode_segment_header(bytes: &[u8], segment: u64) -> Result<(), SegmentHeaderError> {
    if bytes.len() < SEGMENT_HEADER_LEN {
        return Err(SegmentHeaderError::Short);
    }
    let h = &bytes[..SEGMENT_HEADER_LEN];
    if h[0..8] != SEGMENT_MAGIC {
        return Err(SegmentHeaderError::Bad(format!(
            "segment magic: expected {}, found {}",
            hex(&SEGMENT_MAGIC),
            hex(&h[0..8])
        )));
    }
    let stored = u32_at(h, 28);
    let computed = crc(&[&h[0..28]]);
    if stored != computed {
        return Err(SegmentHeaderError::Bad(format!(
            "segment header checksum: expected {computed:#010x}, found {stored:#010x}"
        )));
    }
    let version = u32_at(h, 8);
    if version != FORMAT_VERSION {
        return Err(SegmentHeaderError::Version(version));
    }
    let found = u64_at(h, 16);
    if found != segment {
        return Err(SegmentHeaderError::Bad(format!("segment number: expected {segment}, found {found}")));
    }
    Ok(())
}

/// One record to be written: its kind, codec flag, uncompressed length and stored bytes.
#[derive(Debug, Clone, Copy)]
pub struct RecordSpec<'a> {
    /// Record kind: its byte (`record::Kind` names them; FORMAT.md, "Record kinds").
    pub kind: u8,
    /// Codec of the compressible part of the payload (0 = none).
    pub codec: u8,
    /// Uncompressed length of the compressible part.
    pub raw_len: u32,
    /// Payload parts, concatenated as stored.
    pub parts: &'a [&'a [u8]],
}

/// Builds one batch frame in memory. The transaction id and header checksum are
/// filled in by [`BatchBuf::seal`] under the writer lock.
#[derive(Debug, Default)]
pub struct BatchBuf {
    buf: Vec<u8>,
    count: u32,
}

impl BatchBuf {
    /// An empty batch.
    pub fn new() -> Self {
        BatchBuf { buf: vec![0u8; BATCH_HEADER_LEN], count: 0 }
    }

    /// Appends a record; returns its offset relative to the start of the batch frame.
    pub fn push(&mut self, rec: RecordSpec<'_>) -> Result<u64, String> {
        let len: usize = rec.parts.iter().map(|p| p.len()).sum();
        if len > MAX_RECORD_LEN {
            return Err(format!("record of {len} bytes exceeds the {MAX_RECORD_LEN}-byte limit"));
        }
        let at = self.buf.len();
        if align_up(at + RECORD_HEADER_LEN + len) - BATCH_HEADER_LEN > MAX_BATCH_BODY {
            return Err(format!("batch would exceed the {MAX_BATCH_BODY}-byte limit"));
        }
        let mut h = [0u8; RECORD_HEADER_LEN];
        h[0..4].copy_from_slice(&(len as u32).to_le_bytes());
        h[4] = rec.kind;
        h[5] = rec.codec;
        h[8..12].copy_from_slice(&rec.raw_len.to_le_bytes());
        let mut c = crc32c::crc32c(&h[0..12]);
        for p in rec.parts {
            c = crc32c::crc32c_append(c, p);
        }
        h[12..16].copy_from_slice(&c.to_le_bytes());
        self.buf.reserve(RECORD_HEADER_LEN + align_up(len));
        self.buf.extend_from_slice(&h);
        for p in rec.parts {
            self.buf.extend_from_slice(p);
        }
        self.buf.resize(align_up(self.buf.len()), 0);
        self.count += 1;
        Ok(at as u64)
    }

    /// Number of records pushed so far.
    pub fn len(&self) -> u32 {
        self.count
    }

    /// True when no record was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Total frame length in bytes (header + body).
    pub fn frame_len(&self) -> usize {
        self.buf.len()
    }

    /// Computes the body checksum (outside the writer lock) and returns the frame
    /// ready for [`BatchBuf::seal`].
    pub fn finish(mut self) -> Frame {
        let body_len = (self.buf.len() - BATCH_HEADER_LEN) as u32;
        let body_crc = crc32c::crc32c(&self.buf[BATCH_HEADER_LEN..]);
        self.buf[0..4].copy_from_slice(&BATCH_MAGIC.to_le_bytes());
        self.buf[4..8].copy_from_slice(&body_len.to_le_bytes());
        self.buf[8..12].copy_from_slice(&self.count.to_le_bytes());
        self.buf[24..28].copy_from_slice(&body_crc.to_le_bytes());
        Frame { buf: self.buf }
    }
}

/// A finished batch frame waiting for its transaction id.
#[derive(Debug)]
pub struct Frame {
    buf: Vec<u8>,
}

impl Frame {
    /// Writes the transaction id and the header checksum; returns the bytes to write.
    pub fn seal(&mut self, txid: u64) -> &[u8] {
        self.buf[16..24].copy_from_slice(&txid.to_le_bytes());
        let c = crc(&[&self.buf[0..28]]);
        self.buf[28..32].copy_from_slice(&c.to_le_bytes());
        &self.buf
    }

    /// Frame length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Never true: a frame always has a header.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// A record decoded from a batch, borrowing its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// Offset of the record header within the segment.
    pub offset: u64,
    /// Record kind.
    pub kind: u8,
    /// Codec flag.
    pub codec: u8,
    /// Uncompressed length of the compressible part.
    pub raw_len: u32,
    /// The stored payload.
    pub payload: &'a [u8],
}

/// A decoded batch frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRef<'a> {
    /// Offset of the batch header within the segment.
    pub offset: u64,
    /// Offset just past the frame (where the next frame starts).
    pub end: u64,
    /// Transaction id.
    pub txid: u64,
    /// The records, in the order they were written.
    pub records: Vec<RecordRef<'a>>,
}

/// Why a frame could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The bytes end before the frame does: a write that did not finish.
    Incomplete(String),
    /// The frame is damaged (bad magic, checksum or bounds).
    Bad(String),
    /// A damaged record inside a batch whose header is intact: offset of the record.
    BadRecord(u64, String),
}

impl FrameError {
    /// The human-readable reason.
    pub fn reason(&self) -> &str {
        match self {
            FrameError::Incomplete(r) | FrameError::Bad(r) | FrameError::BadRecord(_, r) => r,
        }
    }
}

/// Decodes the batch header at `offset` and returns (body length, record count, txid, body crc).
pub fn decode_batch_header(seg: &[u8], offset: usize) -> Result<(usize, u32, u64, u32), FrameError> {
    let end = offset.checked_add(BATCH_HEADER_LEN).filter(|&e| e <= seg.len());
    let Some(end) = end else {
        return Err(FrameError::Incomplete(format!(
            "batch header needs {BATCH_HEADER_LEN} bytes, {} remain",
            seg.len().saturating_sub(offset)
        )));
    };
    let h = &seg[offset..end];
    let magic = u32_at(h, 0);
    let stored = u32_at(h, 28);
    let computed = crc(&[&h[0..28]]);
    if magic != BATCH_MAGIC {
        return Err(FrameError::Bad(format!(
            "batch magic: expected {BATCH_MAGIC:#010x}, found {magic:#010x}"
        )));
    }
    if stored != computed {
        return Err(FrameError::Bad(format!(
            "batch header checksum: expected {computed:#010x}, found {stored:#010x}"
        )));
    }
    let body_len = u32_at(h, 4) as usize;
    if !body_len.is_multiple_of(ALIGN) || body_len > MAX_BATCH_BODY {
        return Err(FrameError::Bad(format!("batch body length {body_len} is not valid")));
    }
    Ok((body_len, u32_at(h, 8), u64_at(h, 16), u32_at(h, 24)))
}

/// Decodes and fully verifies the batch frame at `offset` of a segment's bytes.
pub fn decode_batch(seg: &[u8], offset: usize) -> Result<BatchRef<'_>, FrameError> {
    let (body_len, count, txid, body_crc) = decode_batch_header(seg, offset)?;
    let body_start = offset + BATCH_HEADER_LEN;
    let body_end = body_start + body_len;
    if body_end > seg.len() {
        return Err(FrameError::Incomplete(format!(
            "batch body needs {body_len} bytes, {} remain",
            seg.len() - body_start
        )));
    }
    let body = &seg[body_start..body_end];
    let body_ok = crc32c::crc32c(body) == body_crc;
    // Walk the records even when the body checksum failed, to name the damaged record.
    let mut records = Vec::with_capacity((count as usize).min(body_len / RECORD_HEADER_LEN));
    let mut at = 0usize;
    for i in 0..count {
        if at >= body.len() {
            // The header (checksummed) promises more records than the body holds: the
            // batch as a whole is wrong, not a record inside it.
            return Err(FrameError::Bad(format!("batch header says {count} records, its body holds {i}")));
        }
        let rec_off = (body_start + at) as u64;
        let rec = decode_record_at(body, at, rec_off)
            .map_err(|r| FrameError::BadRecord(rec_off, format!("record {i} of batch: {r}")))?;
        at += RECORD_HEADER_LEN + align_up(rec.payload.len());
        records.push(rec);
    }
    if !body_ok {
        return Err(FrameError::Bad("batch body checksum mismatch".into()));
    }
    if at != body_len {
        return Err(FrameError::Bad(format!(
            "batch body: {count} records span {at} bytes, header says {body_len}"
        )));
    }
    Ok(BatchRef { offset: offset as u64, end: body_end as u64, txid, records })
}

/// Decodes and verifies one record whose header starts at `at` within `bytes`.
/// `abs` is the record's offset within its segment (reported back in the result).
pub fn decode_record_at(bytes: &[u8], at: usize, abs: u64) -> Result<RecordRef<'_>, String> {
    let hend = at.checked_add(RECORD_HEADER_LEN).filter(|&e| e <= bytes.len());
    let Some(hend) = hend else {
        return Err("record header runs past the end of its batch".into());
    };
    let h = &bytes[at..hend];
    let len = u32_at(h, 0) as usize;
    if len > MAX_RECORD_LEN || hend + len > bytes.len() {
        return Err(format!("record length {len} runs past the end of its batch"));
    }
    let payload = &bytes[hend..hend + len];
    let stored = u32_at(h, 12);
    let computed = crc(&[&h[0..12], payload]);
    if stored != computed {
        return Err(format!("record checksum: expected {computed:#010x}, found {stored:#010x}"));
    }
    Ok(RecordRef { offset: abs, kind: h[4], codec: h[5], raw_len: u32_at(h, 8), payload })
}

/// Reads a record header without verifying the checksum (for `Verify::None` reads).
pub fn record_header_unverified(h: &[u8]) -> Option<(usize, u8, u8, u32)> {
    if h.len() < RECORD_HEADER_LEN {
        return None;
    }
    Some((u32_at(h, 0) as usize, h[4], h[5], u32_at(h, 8)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(records: &[(&[u8], u8)]) -> Vec<u8> {
        let mut b = BatchBuf::new();
        for (p, k) in records {
            b.push(RecordSpec { kind: *k, codec: 0, raw_len: p.len() as u32, parts: &[p] })
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let mut f = b.finish();
        f.seal(7).to_vec()
    }

    #[test]
    fn batch_round_trips_with_alignment() {
        let bytes = batch(&[(b"hello", 1), (b"", 2), (b"0123456789", 1)]);
        assert_eq!(bytes.len() % ALIGN, 0);
        let b = decode_batch(&bytes, 0).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(b.txid, 7);
        assert_eq!(b.end as usize, bytes.len());
        let payloads: Vec<&[u8]> = b.records.iter().map(|r| r.payload).collect();
        assert_eq!(payloads, vec![&b"hello"[..], b"", b"0123456789"]);
        assert!(b.records.iter().all(|r| r.offset % ALIGN as u64 == 0));
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let bytes = batch(&[(b"some payload bytes", 1), (b"more", 1)]);
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_batch(&b, 0).is_err(), "flip of bit {bit} went unnoticed");
        }
    }

    #[test]
    fn every_truncation_is_incomplete_or_bad_never_a_batch() {
        let bytes = batch(&[(b"abcdefghijklmnop", 1)]);
        for cut in 0..bytes.len() {
            assert!(decode_batch(&bytes[..cut], 0).is_err(), "cut at {cut} decoded");
        }
    }

    #[test]
    fn segment_header_names_expected_and_found() {
        let h = encode_segment_header(5);
        assert_eq!(decode_segment_header(&h, 5), Ok(()));
        match decode_segment_header(&h, 6) {
            Err(SegmentHeaderError::Bad(r)) => assert!(r.contains("expected 6, found 5"), "{r}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(decode_segment_header(&h[..10], 5), Err(SegmentHeaderError::Short));
    }
}
