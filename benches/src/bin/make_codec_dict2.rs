//! Writes `engine/src/base/blob/dict2.bin`: the built-in dictionary of codec 4 (Zstandard with a
//! dictionary that carries entropy tables; engine/FORMAT.md "Compression").
//!
//! ```text
//! cargo run --release -p undertext-benches --bin make_codec_dict2 -- [TRANSCRIPTS_DIR] [OUT]
//! ```
//!
//! The dictionary's *content* is dictionary 1's (`engine/src/base/blob/dict1.bin`, made by
//! `scripts/make-codec-dict`: the vocabulary of saver records and message fields, no
//! conversation text). What it adds are Zstandard's *entropy tables* — a Huffman table for
//! literals and FSE tables for the sequences' literal lengths, match lengths and offsets —
//! computed by `ZDICT_finalizeDictionary` from samples of real agent traffic: the texts of the
//! messages and tool results in `shared/data/transcripts` (every JSON string of 32 bytes or
//! more, cut into records of about 2 KB, the size of a message body) and the transcripts' JSON
//! lines themselves (cut the same way: what savers and session stores keep). The tables are
//! statistics of those bytes; no sample text is in the dictionary.
//!
//! Why: a record compressed alone has to describe its own tables, and the reader builds them
//! again for every record — for a 2 KB message a third of the decode (benches/README.md, "The
//! cold load regressed"). With the tables in the dictionary a frame can say "the dictionary's
//! tables" and the reader has them built once, when the dictionary is loaded.
//!
//! The dictionary is part of the on-disk format: `dict2.bin` never changes once released (a
//! test pins its BLAKE3 hash); running this again on the same transcripts reproduces it.

use std::path::PathBuf;

use undertext_benches::{Result, chunk_records, json_texts, transcript_files, transcripts_dir};

/// Dictionary 1: the content this dictionary keeps.
const DICT1: &[u8] = include_bytes!("../../../engine/src/base/blob/dict1.bin");

/// The dictionary id written into the dictionary's header: in the range the Zstandard format
/// leaves to private use (above 32,767 and below 2^31). Frames do not repeat it (the codec byte
/// names the dictionary).
const DICT_ID: u32 = 0x0055_5402;

/// The compression level the tables are tuned for: the engine's default, `Zstd(1)`.
const LEVEL: i32 = 1;

/// Record size the samples are cut to: a typical message body.
const RECORD: usize = 2048;

fn main() -> Result<()> {
    let mut args = std::env::args_os().skip(1);
    let dir = args.next().map_or_else(transcripts_dir, PathBuf::from);
    let out = args.next().map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../engine/src/base/blob/dict2.bin"),
        PathBuf::from,
    );

    let mut samples: Vec<u8> = Vec::new();
    let mut sizes: Vec<usize> = Vec::new();
    let mut push = |s: &[u8]| {
        samples.extend_from_slice(s);
        sizes.push(s.len());
    };
    for file in transcript_files(&dir)? {
        let data = std::fs::read(&file)?;
        // The JSON lines as they are.
        for r in chunk_records(&data, RECORD) {
            push(r);
        }
        // The texts inside them, unescaped, as a message body holds them.
        for r in chunk_records(&json_texts(&data), RECORD) {
            push(r);
        }
    }
    eprintln!("make_codec_dict2: {} samples, {} bytes", sizes.len(), samples.len());

    let dict = finalize(DICT1, &samples, &sizes)?;
    std::fs::write(&out, &dict)?;
    println!(
        "{}: {} bytes (content {} bytes), BLAKE3 {}",
        out.display(),
        dict.len(),
        DICT1.len(),
        blake3::hash(&dict)
    );
    Ok(())
}

/// `ZDICT_finalizeDictionary`: `content` with a header and entropy tables computed from the
/// samples (concatenated in `samples`, lengths in `sizes`).
fn finalize(content: &[u8], samples: &[u8], sizes: &[usize]) -> Result<Vec<u8>> {
    // Room for the header and tables (under 1 KB) before the content.
    let mut dst = vec![0u8; content.len() + 4096];
    let params = zstd_sys::ZDICT_params_t { compressionLevel: LEVEL, notificationLevel: 0, dictID: DICT_ID };
    let nb = u32::try_from(sizes.len())?;
    // SAFETY: every pointer comes from a live slice with its own length: `dst` is writable for
    // `dst.len()` bytes, `content` readable for `content.len()`, `samples` for the sum of
    // `sizes` (they were appended together), `sizes` for `nb` entries; the call neither keeps
    // nor frees any of them, and its result is checked with `ZDICT_isError` before use.
    let n = unsafe {
        zstd_sys::ZDICT_finalizeDictionary(
            dst.as_mut_ptr().cast(),
            dst.len(),
            content.as_ptr().cast(),
            content.len(),
            samples.as_ptr().cast(),
            sizes.as_ptr(),
            nb,
            params,
        )
    };
    // SAFETY: a pure function of the returned code.
    if unsafe { zstd_sys::ZDICT_isError(n) } != 0 {
        return Err(format!("ZDICT_finalizeDictionary failed (code {n})").into());
    }
    dst.truncate(n);
    Ok(dst)
}
