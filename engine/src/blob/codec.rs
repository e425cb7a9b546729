//! Optional compression of blob bodies. The codec is recorded per record, so a store
//! can hold records written with different settings.
//!
//! Zstandard compresses a body of up to [`DICT_MAX_LEN`] bytes with the built-in dictionary
//! (codec 3, `dict1.bin`, made by `scripts/make-codec-dict`): the vocabulary small records of
//! an agent harness share (saver record keys, message field names) that one record of a few
//! hundred bytes cannot teach the compressor. The dictionary is part of the format and never
//! changes; a test pins its hash.

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
    /// Zstandard with the built-in dictionary [`super::DICT1`].
    pub const ZSTD_DICT1: u8 = 3;
}

/// The built-in dictionary of codec 3 (a raw-content Zstandard dictionary).
const DICT1: &[u8] = include_bytes!("dict1.bin");

/// Zstandard bodies up to this size use the built-in dictionary: beyond it the body teaches
/// the compressor what the dictionary would (the gain is under 1 %).
const DICT_MAX_LEN: usize = 16 << 10;

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
        Compression::Zstd(level) => {
            let dict = body.len() <= DICT_MAX_LEN;
            match zstd_compress(body, level, dict) {
                Ok(v) => (if dict { flag::ZSTD_DICT1 } else { flag::ZSTD }, v),
                Err(_) => return (flag::NONE, None),
            }
        }
    };
    if out.len() <= body.len() - body.len() / 8 { (f, Some(out)) } else { (flag::NONE, None) }
}

/// Decompresses a stored body of codec `f` whose original length is `raw_len`.
pub(crate) fn decompress(f: u8, stored: &[u8], raw_len: usize) -> Result<Vec<u8>, String> {
    match f {
        flag::LZ4 => lz4_flex::block::decompress(stored, raw_len).map_err(|e| format!("lz4: {e}")),
        flag::ZSTD | flag::ZSTD_DICT1 => {
            let v =
                zstd_decompress(stored, raw_len, f == flag::ZSTD_DICT1).map_err(|e| format!("zstd: {e}"))?;
            if v.len() != raw_len {
                return Err(format!("zstd: expected {raw_len} bytes, found {}", v.len()));
            }
            Ok(v)
        }
        other => Err(format!("unknown codec flag {other}")),
    }
}

thread_local! {
    // Contexts are reused per thread: creating one costs more than compressing 2 KB. One
    // context per (level, dictionary or not) and one decompressor per dictionary or not.
    static ZSTD_C: RefCell<[Option<(i32, zstd::bulk::Compressor<'static>)>; 2]> = const { RefCell::new([None, None]) };
    static ZSTD_D: RefCell<[Option<zstd::bulk::Decompressor<'static>>; 2]> = const { RefCell::new([None, None]) };
}

fn zstd_compress(body: &[u8], level: i32, dict: bool) -> std::io::Result<Vec<u8>> {
    ZSTD_C.with(|cell| {
        let slot = &mut cell.borrow_mut()[usize::from(dict)];
        if slot.as_ref().is_none_or(|(l, _)| *l != level) {
            let c = if dict {
                zstd::bulk::Compressor::with_dictionary(level, DICT1)?
            } else {
                zstd::bulk::Compressor::new(level)?
            };
            *slot = Some((level, c));
        }
        match slot.as_mut() {
            Some((_, c)) => c.compress(body),
            None => zstd::bulk::compress(body, level),
        }
    })
}

fn zstd_decompress(stored: &[u8], raw_len: usize, dict: bool) -> std::io::Result<Vec<u8>> {
    ZSTD_D.with(|cell| {
        let slot = &mut cell.borrow_mut()[usize::from(dict)];
        if slot.is_none() {
            *slot = Some(if dict {
                zstd::bulk::Decompressor::with_dictionary(DICT1)?
            } else {
                zstd::bulk::Decompressor::new()?
            });
        }
        match slot.as_mut() {
            Some(d) => d.decompress(stored, raw_len),
            None => Err(std::io::Error::other("no zstd decompressor")),
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
    fn the_built_in_dictionary_is_the_one_stores_were_written_with() {
        // Codec 3 stores are decoded with exactly these bytes: a changed dictionary would
        // make every such store unreadable. A new dictionary is a new codec number.
        assert_eq!(DICT1.len(), 2987);
        assert_eq!(
            crate::blob::BlobId::of(DICT1).to_string(),
            "10ab9d7fd2a9911f62b89de9d0e8d2681b17abdac0a51ec7bebb781b1de7a4ec"
        );
    }

    #[test]
    fn a_small_record_is_compressed_with_the_dictionary_and_reads_back() {
        let rec = br#"{"k":"W","c":"1f1ede1d-fb2c-6db8-812d-df086dd50cda","t":"96a22b63-632b-bac1-1577-3049a1ff277d","tp":"~__pregel_pull, tools","w":[[0,"messages",0],[1,"branch:to:model",1,"null"]],"e":[8,6,4,2,0]}"#;
        let (f, out) = compress(Compression::Zstd(1), rec);
        assert_eq!(f, flag::ZSTD_DICT1, "a {}-byte record did not use the dictionary", rec.len());
        let stored = out.unwrap_or_default();
        let plain = zstd::bulk::compress(rec, 1).unwrap_or_default();
        assert!(stored.len() < plain.len(), "dictionary {} bytes, without {}", stored.len(), plain.len());
        assert_eq!(decompress(f, &stored, rec.len()).as_deref(), Ok(&rec[..]));
        // What stores written before codec 3 hold: plain Zstandard frames of small bodies.
        assert_eq!(decompress(flag::ZSTD, &plain, rec.len()).as_deref(), Ok(&rec[..]));
        // Past DICT_MAX_LEN the body is compressed alone.
        let big = "fn main() { println!(\"hello\"); }\n".repeat(DICT_MAX_LEN / 10);
        let (f, out) = compress(Compression::Zstd(1), big.as_bytes());
        assert_eq!(f, flag::ZSTD);
        assert_eq!(decompress(f, &out.unwrap_or_default(), big.len()).as_deref(), Ok(big.as_bytes()));
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
