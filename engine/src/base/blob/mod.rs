//! Content addressing: [`BlobId`], the bytes returned by reads ([`Blob`]), and compression.

pub(crate) mod cache;
pub mod chunk;
mod codec;
mod id_hash;

pub use codec::Compression;
pub(crate) use codec::{compress, decompress};
pub(crate) use id_hash::IdHash;

/// The codec flag of an uncompressed body.
pub(crate) const fn codec_flag_none() -> u8 {
    codec::flag::NONE
}

use std::fmt;
use std::ops::{Deref, Range};
use std::str::FromStr;
use std::sync::Arc;

use crate::base::error::Error;

/// The content address of a blob: the BLAKE3 hash of its uncompressed bytes.
///
/// `Display` and `FromStr` use 64 lowercase hex digits.
///
/// ```
/// use undertext::BlobId;
/// let id = BlobId::of(b"hello");
/// let text = id.to_string();
/// assert_eq!(text.len(), 64);
/// assert_eq!(text.parse::<BlobId>().unwrap(), id);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlobId(pub [u8; 32]);

impl BlobId {
    /// Hashes `content` to its id.
    pub fn of(content: &[u8]) -> BlobId {
        BlobId(*blake3::hash(content).as_bytes())
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlobId({self})")
    }
}

impl FromStr for BlobId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return Err(Error::InvalidArgument(format!(
                "blob id: expected 64 hex digits, found {} characters",
                s.chars().count()
            )));
        }
        // One table lookup a digit, any bad digit noted on the way and named after: a
        // reader of hundreds of ids (a checkpoint's items) parses each on every read.
        let mut out = [0u8; 32];
        let mut bad = 0u8;
        for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
            let (hi, lo) = (HEX[usize::from(pair[0])], HEX[usize::from(pair[1])]);
            bad |= (hi | lo) & NOT_HEX;
            *o = hi << 4 | lo;
        }
        if bad != 0
            && let Some(at) = bytes.iter().position(|&c| HEX[usize::from(c)] == NOT_HEX)
        {
            return Err(Error::InvalidArgument(format!(
                "blob id: expected a hex digit at position {at}, found {:?}",
                char::from(bytes[at])
            )));
        }
        Ok(BlobId(out))
    }
}

/// Marks a byte that is not a hex digit in [`HEX`].
const NOT_HEX: u8 = 0x80;

/// Each byte's value as a hex digit (either case), or [`NOT_HEX`].
const HEX: [u8; 256] = {
    let mut t = [NOT_HEX; 256];
    let mut c = 0;
    while c < 10 {
        t[b'0' as usize + c] = c as u8;
        c += 1;
    }
    let mut c = 0;
    while c < 6 {
        t[b'a' as usize + c] = 10 + c as u8;
        t[b'A' as usize + c] = 10 + c as u8;
        c += 1;
    }
    t
};

/// How much a read checks before returning bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verify {
    /// Record checksum and BLAKE3 of the content against the id (the default).
    #[default]
    Hash,
    /// Record checksum (CRC-32C) only.
    Checksum,
    /// Frame bounds only; for callers that verify themselves or benchmark the read path.
    None,
}

/// The bytes of a blob, either owned or borrowed zero-copy from a mapped sealed segment.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use undertext::{Store, Options};
/// let store = Store::open(dir.path(), Options::default())?;
/// let id = store.put_blob("o", b"tool output")?;
/// let blob = store.get_blob("o", &id)?;
/// assert_eq!(&*blob, b"tool output");
/// # Ok::<(), undertext::Error>(())
/// ```
#[derive(Clone)]
pub struct Blob {
    backing: Backing,
    range: Range<usize>,
}

#[derive(Clone)]
enum Backing {
    Owned(Arc<[u8]>),
    Mapped(Arc<memmap2::Mmap>),
}

impl Blob {
    pub(crate) fn owned(v: Vec<u8>) -> Blob {
        let range = 0..v.len();
        Blob { backing: Backing::Owned(v.into()), range }
    }

    pub(crate) fn mapped(map: Arc<memmap2::Mmap>, range: Range<usize>) -> Blob {
        Blob { backing: Backing::Mapped(map), range }
    }

    /// The bytes from `start` on (no copy). `start` must be at most `len()`.
    pub(crate) fn skip(mut self, start: usize) -> Blob {
        self.range.start = (self.range.start + start).min(self.range.end);
        self
    }

    /// Copies the bytes into a `Vec`.
    pub fn to_vec(&self) -> Vec<u8> {
        self.deref().to_vec()
    }

    /// True when the bytes are borrowed from a mapped segment (no copy was made).
    pub fn is_zero_copy(&self) -> bool {
        matches!(self.backing, Backing::Mapped(..))
    }
}

impl Deref for Blob {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.backing {
            Backing::Owned(v) => &v[self.range.clone()],
            Backing::Mapped(m) => &m[self.range.clone()],
        }
    }
}

impl AsRef<[u8]> for Blob {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for Blob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Blob").field("len", &self.len()).field("zero_copy", &self.is_zero_copy()).finish()
    }
}

impl PartialEq<[u8]> for Blob {
    fn eq(&self, other: &[u8]) -> bool {
        **self == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_hex_round_trips_and_rejects_bad_input() {
        let id = BlobId::of(b"x");
        assert_eq!(id.to_string().parse::<BlobId>().ok(), Some(id));
        assert_eq!(id.to_string().to_uppercase().parse::<BlobId>().ok(), Some(id));
        let short = "abc".parse::<BlobId>().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(short.contains("expected 64 hex digits, found 3"), "{short}");
        let bad = "g".repeat(64).parse::<BlobId>().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(bad.contains("position 0"), "{bad}");
        let multibyte = "é".repeat(32).parse::<BlobId>();
        assert!(multibyte.is_err());
    }

    #[test]
    fn every_byte_at_every_position_parses_as_its_hex_value_or_is_named() {
        let id = BlobId::of(b"every digit");
        let hex = id.to_string();
        for at in 0..64 {
            for c in 0..=255u8 {
                let mut s = hex.clone().into_bytes();
                s[at] = c;
                let Ok(s) = String::from_utf8(s) else { continue };
                let digit = char::from(c).to_digit(16);
                match (s.parse::<BlobId>(), digit) {
                    (Ok(got), Some(d)) => {
                        let nibble = if at % 2 == 0 { got.0[at / 2] >> 4 } else { got.0[at / 2] & 0x0f };
                        assert_eq!(u32::from(nibble), d, "{s}");
                    }
                    (Err(e), None) => {
                        let e = e.to_string();
                        assert!(e.contains(&format!("position {at}, found {:?}", char::from(c))), "{e}");
                    }
                    (got, digit) => panic!("{s:?}: parsed {got:?}, its digit {digit:?}"),
                }
            }
        }
    }

    #[test]
    fn id_is_blake3_of_content() {
        assert_eq!(BlobId::of(b"abc").0, *blake3::hash(b"abc").as_bytes());
    }
}
