//! Compression survey over the real agent transcripts.
//!
//! ```text
//! cargo run --release -p undertext-benches --bin compression_survey -- /work/shared/data/transcripts
//! ```
//!
//! For the whole corpus (every file compressed whole, as one record) and for the corpus cut into
//! records of about 512 B, 2 KB, 16 KB and 64 KB (each record compressed on its own),
//! measures zstd level 1, zstd level 3 and lz4_flex (block format, `compress_prepend_size`),
//! and for records of at most 16 KB zstd level 1 with the engine's built-in dictionaries
//! (codec 3, `engine/src/base/blob/dict1.bin`, made without these transcripts; codec 4,
//! `dict2.bin`, whose entropy tables were computed from them, so its figures are in-sample):
//! compression ratio (raw / compressed), compression and decompression speed in MB/s of raw
//! bytes (1 MB = 10^6 bytes), best of 3 runs. Prints a markdown table.
//!
//! `UNDERTEXT_SURVEY_DICT2=PATH` measures another dictionary in dictionary 2's place (e.g. one
//! made by `make_codec_dict2` from other transcripts, for a held-out comparison).
//!
//! zstd uses one reused `bulk::Compressor` / `bulk::Decompressor` context per run, as a storage
//! engine would; decompression is into a buffer sized from the known raw length. Every record is
//! checked to round-trip before timing.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use undertext_benches::{Result, chunk_records, transcript_files, transcripts_dir};

const RUNS: usize = 3;

#[derive(Debug, Clone, Copy)]
enum Codec {
    Zstd(i32),
    /// Zstandard with the engine's built-in dictionary 1 (codec 3, bodies up to 16 KiB).
    ZstdDict1(i32),
    /// Zstandard with the built-in dictionary 2 (codec 4: dictionary 1's content and entropy
    /// tables computed from these transcripts, so its figures here are in-sample).
    ZstdDict2(i32),
    Lz4,
}

/// The engine's codec-3 dictionary (engine/FORMAT.md "Compression").
const DICT1: &[u8] = include_bytes!("../../../engine/src/base/blob/dict1.bin");
/// The engine's codec-4 dictionary.
const DICT2: &[u8] = include_bytes!("../../../engine/src/base/blob/dict2.bin");

/// The file `UNDERTEXT_SURVEY_DICT2` names, read by `main` before any measurement.
static DICT2_FROM_ENV: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

/// Dictionary 2, or the file `UNDERTEXT_SURVEY_DICT2` names.
fn dict2() -> &'static [u8] {
    DICT2_FROM_ENV.get().map_or(DICT2, Vec::as_slice)
}

impl Codec {
    fn name(self) -> String {
        match self {
            Self::Zstd(l) => format!("zstd -{l}"),
            Self::ZstdDict1(l) => format!("zstd -{l}, dictionary 1"),
            Self::ZstdDict2(l) => format!("zstd -{l}, dictionary 2"),
            Self::Lz4 => "lz4_flex (block)".to_owned(),
        }
    }

    /// Compresses every record; returns the compressed records.
    fn compress_all(self, records: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        match self {
            Self::Zstd(level) => {
                let mut c = zstd::bulk::Compressor::new(level)?;
                records.iter().map(|r| c.compress(r).map_err(Into::into)).collect()
            }
            Self::ZstdDict1(level) | Self::ZstdDict2(level) => {
                let dict = if matches!(self, Self::ZstdDict1(_)) { DICT1 } else { dict2() };
                let mut c = zstd::bulk::Compressor::with_dictionary(level, dict)?;
                records.iter().map(|r| c.compress(r).map_err(Into::into)).collect()
            }
            Self::Lz4 => Ok(records.iter().map(|r| lz4_flex::compress_prepend_size(r)).collect()),
        }
    }

    /// Decompresses every record, handing each to `sink`.
    fn decompress_all(
        self,
        compressed: &[Vec<u8>],
        raw_lens: &[usize],
        mut sink: impl FnMut(usize, &[u8]),
    ) -> Result<()> {
        match self {
            Self::Zstd(_) | Self::ZstdDict1(_) | Self::ZstdDict2(_) => {
                let mut d = match self {
                    Self::ZstdDict1(_) => zstd::bulk::Decompressor::with_dictionary(DICT1)?,
                    Self::ZstdDict2(_) => zstd::bulk::Decompressor::with_dictionary(dict2())?,
                    _ => zstd::bulk::Decompressor::new()?,
                };
                for (i, (c, &len)) in compressed.iter().zip(raw_lens).enumerate() {
                    let out = d.decompress(c, len)?;
                    sink(i, &out);
                }
            }
            Self::Lz4 => {
                for (i, c) in compressed.iter().enumerate() {
                    let out = lz4_flex::decompress_size_prepended(c)?;
                    sink(i, &out);
                }
            }
        }
        Ok(())
    }
}

struct Row {
    granularity: String,
    records: usize,
    codec: String,
    raw: u64,
    compressed: u64,
    comp_mbs: f64,
    decomp_mbs: f64,
}

fn mbs(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

fn measure(granularity: &str, records: &[&[u8]], codec: Codec) -> Result<Row> {
    let raw: u64 = records.iter().map(|r| r.len() as u64).sum();
    let raw_lens: Vec<usize> = records.iter().map(|r| r.len()).collect();

    // Correctness first (untimed).
    let compressed = codec.compress_all(records)?;
    let mut ok = true;
    codec.decompress_all(&compressed, &raw_lens, |i, out| ok &= out == records[i])?;
    if !ok {
        return Err(format!("{} did not round-trip", codec.name()).into());
    }
    let compressed_bytes: u64 = compressed.iter().map(|c| c.len() as u64).sum();

    let mut best_c = Duration::MAX;
    let mut best_d = Duration::MAX;
    for _ in 0..RUNS {
        let t = Instant::now();
        let out = codec.compress_all(black_box(records))?;
        best_c = best_c.min(t.elapsed());
        black_box(out);

        let t = Instant::now();
        codec.decompress_all(black_box(&compressed), &raw_lens, |_, out| {
            black_box(out);
        })?;
        best_d = best_d.min(t.elapsed());
    }

    Ok(Row {
        granularity: granularity.to_owned(),
        records: records.len(),
        codec: codec.name(),
        raw,
        compressed: compressed_bytes,
        comp_mbs: mbs(raw, best_c),
        decomp_mbs: mbs(raw, best_d),
    })
}

fn main() -> Result<()> {
    if let Some(p) = std::env::var_os("UNDERTEXT_SURVEY_DICT2") {
        let d = std::fs::read(&p).map_err(|e| {
            format!("UNDERTEXT_SURVEY_DICT2: cannot read {}: {e}", PathBuf::from(&p).display())
        })?;
        let _ = DICT2_FROM_ENV.set(d);
    }
    let dir = std::env::args_os().nth(1).map_or_else(transcripts_dir, PathBuf::from);
    let files = transcript_files(&dir)?;
    let contents: Vec<Vec<u8>> = files.iter().map(std::fs::read).collect::<std::io::Result<_>>()?;
    let total: usize = contents.iter().map(Vec::len).sum();
    eprintln!("{} files, {} bytes under {}", files.len(), total, dir.display());

    let whole: Vec<&[u8]> = contents.iter().map(Vec::as_slice).collect();
    let mut sets: Vec<(String, Vec<&[u8]>)> = vec![("whole files".to_owned(), whole)];
    for (label, target) in [
        ("~512 B records", 512),
        ("~2 KB records", 2048),
        ("~16 KB records", 16 << 10),
        ("~64 KB records", 64 << 10),
    ] {
        let recs: Vec<&[u8]> = contents.iter().flat_map(|c| chunk_records(c, target)).collect();
        sets.push((label.to_owned(), recs));
    }

    let codecs = [Codec::Zstd(1), Codec::Zstd(3), Codec::Lz4, Codec::ZstdDict1(1), Codec::ZstdDict2(1)];
    let mut rows = Vec::new();
    for (label, recs) in &sets {
        // The dictionary only where the engine uses it: bodies of at most 16 KiB.
        let small = label.starts_with("~512") || label.starts_with("~2 KB") || label.starts_with("~16 KB");
        for &codec in
            codecs.iter().filter(|c| small || !matches!(c, Codec::ZstdDict1(_) | Codec::ZstdDict2(_)))
        {
            eprintln!("measuring {label} / {}", codec.name());
            rows.push(measure(label, recs, codec)?);
        }
    }

    println!(
        "| records | count | codec | raw bytes | compressed bytes | ratio | compress MB/s | decompress MB/s |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {:.2} | {:.0} | {:.0} |",
            r.granularity,
            r.records,
            r.codec,
            r.raw,
            r.compressed,
            r.raw as f64 / r.compressed as f64,
            r.comp_mbs,
            r.decomp_mbs
        );
    }
    Ok(())
}
