//! Optional compression of blob bodies. The codec is recorded per record, so a store
//! can hold records written with different settings.
//!
//! Zstandard compresses a body of up to [`DICT_MAX_LEN`] bytes with the built-in dictionary 2
//! (codec 4, `dict2.bin`, made by `benches/src/bin/make_codec_dict2.rs`): the vocabulary small
//! records of an agent harness share (saver record keys, message field names: dictionary 1's
//! content, `scripts/make-codec-dict`) that one record of a few hundred bytes cannot teach the
//! compressor, and Zstandard entropy tables computed from real agent traffic, so a small frame
//! can use the dictionary's tables instead of describing its own and a reader does not build
//! them for every record. Codec 3 (dictionary 1 alone, no tables) is still read. The
//! dictionaries are part of the format and never change; tests pin their hashes.

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
    /// Zstandard with the built-in dictionary [`super::DICT1`] (read only: written until
    /// codec 4 replaced it).
    pub const ZSTD_DICT1: u8 = 3;
    /// Zstandard with the built-in dictionary [`super::DICT2`].
    pub const ZSTD_DICT2: u8 = 4;
}

/// The built-in dictionary of codec 3 (a raw-content Zstandard dictionary).
const DICT1: &[u8] = include_bytes!("dict1.bin");

/// The built-in dictionary of codec 4: dictionary 1's content behind a Zstandard dictionary
/// header with entropy tables (FORMAT.md "Compression").
const DICT2: &[u8] = include_bytes!("dict2.bin");

/// Zstandard bodies up to this size use the built-in dictionary: beyond it the body teaches
/// the compressor what the dictionary would (the gain is under 1 %), and its own tables
/// are built once for many bytes.
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
                Ok(v) => (if dict { flag::ZSTD_DICT2 } else { flag::ZSTD }, v),
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
        flag::ZSTD | flag::ZSTD_DICT1 | flag::ZSTD_DICT2 => {
            let v = zstd_decompress(stored, raw_len, f).map_err(|e| format!("zstd: {e}"))?;
            if v.len() != raw_len {
                return Err(format!("zstd: expected {raw_len} bytes, found {}", v.len()));
            }
            Ok(v)
        }
        other => Err(format!("unknown codec flag {other}")),
    }
}

thread_local! {
    // Contexts are reused per thread: creating one costs more than compressing 2 KB, and a
    // dictionary's tables are built when it is loaded, once. One compression context per
    // (level, dictionary or not) and one decompressor per zstd codec (1, 3, 4).
    static ZSTD_C: RefCell<[Option<(i32, zstd::bulk::Compressor<'static>)>; 2]> = const { RefCell::new([None, None]) };
    static ZSTD_D: RefCell<[Option<zstd::bulk::Decompressor<'static>>; 3]> = const { RefCell::new([None, None, None]) };
}

fn zstd_compress(body: &[u8], level: i32, dict: bool) -> std::io::Result<Vec<u8>> {
    ZSTD_C.with(|cell| {
        let slot = &mut cell.borrow_mut()[usize::from(dict)];
        if slot.as_ref().is_none_or(|(l, _)| *l != level) {
            let c = if dict {
                let mut c = zstd::bulk::Compressor::with_dictionary(level, DICT2)?;
                // The codec byte names the dictionary and the record header the raw length:
                // the frame repeats neither.
                c.set_parameter(zstd::zstd_safe::CParameter::DictIdFlag(false))?;
                c.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(false))?;
                c
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

/// Decompresses a frame of zstd codec `f` (1, 3 or 4).
fn zstd_decompress(stored: &[u8], raw_len: usize, f: u8) -> std::io::Result<Vec<u8>> {
    let (i, dict) = match f {
        flag::ZSTD_DICT1 => (1, Some(DICT1)),
        flag::ZSTD_DICT2 => (2, Some(DICT2)),
        _ => (0, None),
    };
    ZSTD_D.with(|cell| {
        let slot = &mut cell.borrow_mut()[i];
        if slot.is_none() {
            *slot = Some(match dict {
                Some(d) => zstd::bulk::Decompressor::with_dictionary(d)?,
                None => zstd::bulk::Decompressor::new()?,
            });
        }
        match slot.as_mut() {
            Some(d) => d.decompress(stored, raw_len),
            None => Err(std::io::Error::other("no zstd decompressor")),
        }
    })
}

impl std::str::FromStr for Compression {
    type Err = crate::base::error::Error;

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
            crate::base::error::Error::InvalidArgument(format!(
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
        // Codec 3 (and 4, which keeps this content) stores are decoded with exactly these
        // bytes: a changed dictionary would make every such store unreadable. A new
        // dictionary is a new codec number.
        assert_eq!(DICT1.len(), 2987);
        assert_eq!(
            crate::base::blob::BlobId::of(DICT1).to_string(),
            "10ab9d7fd2a9911f62b89de9d0e8d2681b17abdac0a51ec7bebb781b1de7a4ec"
        );
    }

    #[test]
    fn the_dictionary_of_codec_4_is_the_one_stores_were_written_with() {
        // dictionary 1's content behind a header (magic, id 0x555402) and entropy tables.
        assert_eq!(DICT2.len(), 3145);
        assert_eq!(DICT2[..4], [0x37, 0xa4, 0x30, 0xec], "a Zstandard dictionary's magic number");
        assert_eq!(DICT2[4..8], 0x0055_5402u32.to_le_bytes());
        assert!(DICT2.ends_with(DICT1), "codec 4 keeps dictionary 1's content");
        assert_eq!(
            crate::base::blob::BlobId::of(DICT2).to_string(),
            "caf8e9874cd8b65a7921ffafc52ab1e24df51ec45cb1f28c55ee27662c6c2313"
        );
    }

    #[test]
    fn a_small_record_is_compressed_with_dictionary_2_and_reads_back() {
        let rec = br#"{"k":"W","c":"1f1ede1d-fb2c-6db8-812d-df086dd50cda","t":"96a22b63-632b-bac1-1577-3049a1ff277d","tp":"~__pregel_pull, tools","w":[[0,"messages",0],[1,"branch:to:model",1,"null"]],"e":[8,6,4,2,0]}"#;
        let (f, out) = compress(Compression::Zstd(1), rec);
        assert_eq!(f, flag::ZSTD_DICT2, "a {}-byte record did not use the dictionary", rec.len());
        let stored = out.unwrap_or_default();
        let plain = zstd::bulk::compress(rec, 1).unwrap_or_default();
        assert!(stored.len() < plain.len(), "dictionary {} bytes, without {}", stored.len(), plain.len());
        assert_eq!(decompress(f, &stored, rec.len()).as_deref(), Ok(&rec[..]));
        // Past DICT_MAX_LEN the body is compressed alone.
        let big = "fn main() { println!(\"hello\"); }\n".repeat(DICT_MAX_LEN / 10);
        let (f, out) = compress(Compression::Zstd(1), big.as_bytes());
        assert_eq!(f, flag::ZSTD);
        assert_eq!(decompress(f, &out.unwrap_or_default(), big.len()).as_deref(), Ok(big.as_bytes()));
    }

    #[test]
    fn records_of_the_codecs_written_before_still_read() {
        let text = "The tool returned 42 lines; the test `case_17` failed with an assertion.\n".repeat(8);
        // Codec 1: plain Zstandard frames (stores before codec 3, and large bodies).
        let plain = zstd::bulk::compress(text.as_bytes(), 1).unwrap_or_default();
        assert_eq!(decompress(flag::ZSTD, &plain, text.len()).as_deref(), Ok(text.as_bytes()));
        // Codec 3: frames against dictionary 1, as sessions 7 and 8 wrote them.
        let d1 =
            zstd::bulk::Compressor::with_dictionary(1, DICT1).and_then(|mut c| c.compress(text.as_bytes()));
        let d1 = d1.unwrap_or_default();
        assert_eq!(decompress(flag::ZSTD_DICT1, &d1, text.len()).as_deref(), Ok(text.as_bytes()));
        // Codec 4: what this build writes.
        let (f, d2) = compress(Compression::Zstd(1), text.as_bytes());
        assert_eq!(f, flag::ZSTD_DICT2);
        assert_eq!(decompress(f, &d2.unwrap_or_default(), text.len()).as_deref(), Ok(text.as_bytes()));
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
