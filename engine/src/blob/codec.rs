//! Optional compression of blob bodies. The codec is recorded per record, so a store
//! can hold records written with different settings.

use std::cell::RefCell;

/// Compression applied to blob bodies on write.
///
/// The default, `Zstd(1)`, was chosen by measurement on real agent transcripts
/// (`engine/FORMAT.md` gives the figures): 26–31 % smaller than LZ4 on 2–64 KB records,
/// at a compression cost that is noise next to an `fdatasync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Store bodies as they are.
    None,
    /// LZ4 block format (`lz4_flex`): faster reads, larger files.
    Lz4,
    /// Zstandard at the given level (1–22).
    Zstd(i32),
}

impl Default for Compression {
    fn default() -> Self {
        Compression::Zstd(1)
    }
}

/// Codec flag stored in the record header.
pub(crate) mod flag {
    pub const NONE: u8 = 0;
    pub const ZSTD: u8 = 1;
    pub const LZ4: u8 = 2;
}

/// Bodies shorter than this are never compressed: the saving cannot pay for the call.
const MIN_COMPRESS_LEN: usize = 128;

/// Compresses `body` if that saves at least 1/8 of its size.
/// Returns the codec flag and the stored bytes (`None` = store `body` as is).
pub(crate) fn compress(c: Compression, body: &[u8]) -> (u8, Option<Vec<u8>>) {
    if body.len() < MIN_COMPRESS_LEN {
        return (flag::NONE, None);
    }
    let (f, out) = match c {
        Compression::None => return (flag::NONE, None),
        Compression::Lz4 => (flag::LZ4, lz4_flex::block::compress(body)),
        Compression::Zstd(level) => match zstd_compress(body, level) {
            Ok(v) => (flag::ZSTD, v),
            Err(_) => return (flag::NONE, None),
        },
    };
    if out.len() <= body.len() - body.len() / 8 { (f, Some(out)) } else { (flag::NONE, None) }
}

/// Decompresses a stored body of codec `f` whose original length is `raw_len`.
pub(crate) fn decompress(f: u8, stored: &[u8], raw_len: usize) -> Result<Vec<u8>, String> {
    match f {
        flag::LZ4 => lz4_flex::block::decompress(stored, raw_len).map_err(|e| format!("lz4: {e}")),
        flag::ZSTD => {
            let v = zstd_decompress(stored, raw_len).map_err(|e| format!("zstd: {e}"))?;
            if v.len() != raw_len {
                return Err(format!("zstd: expected {raw_len} bytes, found {}", v.len()));
            }
            Ok(v)
        }
        other => Err(format!("unknown codec flag {other}")),
    }
}

thread_local! {
    // Contexts are reused per thread: creating one costs more than compressing 2 KB.
    static ZSTD_C: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> = const { RefCell::new(None) };
    static ZSTD_D: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

fn zstd_compress(body: &[u8], level: i32) -> std::io::Result<Vec<u8>> {
    ZSTD_C.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|(l, _)| *l != level) {
            *slot = Some((level, zstd::bulk::Compressor::new(level)?));
        }
        match slot.as_mut() {
            Some((_, c)) => c.compress(body),
            None => zstd::bulk::compress(body, level),
        }
    })
}

fn zstd_decompress(stored: &[u8], raw_len: usize) -> std::io::Result<Vec<u8>> {
    ZSTD_D.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new()?);
        }
        match slot.as_mut() {
            Some(d) => d.decompress(stored, raw_len),
            None => zstd::bulk::decompress(stored, raw_len),
        }
    })
}

impl std::str::FromStr for Compression {
    type Err = crate::error::Error;

    /// `none`, `lz4`, `zstd` (level 1) or `zstd:N` (N from 1 to 22).
    ///
    /// ```
    /// use undertext::Compression;
    /// assert_eq!("zstd:3".parse::<Compression>().unwrap(), Compression::Zstd(3));
    /// assert_eq!("lz4".parse::<Compression>().unwrap(), Compression::Lz4);
    /// assert!("zstd:40".parse::<Compression>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            crate::error::Error::InvalidArgument(format!(
                "compression: expected none, lz4, zstd or zstd:N with N from 1 to 22, found {s:?}"
            ))
        };
        Ok(match s {
            "none" => Compression::None,
            "lz4" => Compression::Lz4,
            "zstd" => Compression::Zstd(1),
            _ => match s.strip_prefix("zstd:").and_then(|n| n.parse::<i32>().ok()) {
                Some(n) if (1..=22).contains(&n) => Compression::Zstd(n),
                _ => return Err(bad()),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codecs_round_trip_text() {
        let text = "fn main() { println!(\"hello\"); }\n".repeat(200);
        for c in [Compression::Lz4, Compression::Zstd(1), Compression::Zstd(3)] {
            let (f, out) = compress(c, text.as_bytes());
            let stored = out.unwrap_or_else(|| panic!("{c:?} did not compress repetitive text"));
            assert!(stored.len() < text.len());
            assert_eq!(decompress(f, &stored, text.len()).as_deref(), Ok(text.as_bytes()));
        }
    }

    #[test]
    fn incompressible_and_tiny_bodies_are_stored_raw() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert_eq!(compress(Compression::Lz4, &noise).0, flag::NONE);
        assert_eq!(compress(Compression::Zstd(3), b"tiny").0, flag::NONE);
    }

    #[test]
    fn corrupt_compressed_bytes_are_an_error_not_a_panic() {
        let text = "abc".repeat(1000);
        let (f, out) = compress(Compression::Lz4, text.as_bytes());
        let mut stored = out.unwrap_or_default();
        for b in stored.iter_mut().take(8) {
            *b ^= 0xff;
        }
        let r = decompress(f, &stored, text.len());
        assert_ne!(r.as_deref(), Ok(text.as_bytes()), "damaged bytes decoded to the original");
        assert!(decompress(99, &stored, 1).is_err());
    }
}
