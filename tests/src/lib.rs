//! Shared helpers for the integration tests of Undertext: a seeded generator, content
//! that is deterministic per (seed, stream, index), and a map of the frames in a segment.

pub mod child;
pub mod fleet;
pub mod mixed;
pub mod pace;
pub mod read_only;
pub mod ro_soak;
pub mod steps;
pub mod sweep;
pub mod transcripts;
pub mod views;

use std::path::Path;

use undertext::log::format::{self, SEGMENT_HEADER_LEN};
use undertext::log::scan::walk_batches;

/// SplitMix64: a tiny seeded generator, so every test run can be replayed from its seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `lo..hi` (`hi > lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo)
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// The seed for a test: `UNDERTEXT_SEED` if set, else a fixed default. Printed so a
/// failure can be replayed.
pub fn seed(default: u64) -> u64 {
    let s = std::env::var("UNDERTEXT_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    eprintln!("seed = {s} (set UNDERTEXT_SEED to replay)");
    s
}

/// Deterministic content for (seed, stream, index): text-like (compressible) or random
/// bytes, 16 bytes to about 24 KB, and unique per triple.
pub fn content(seed: u64, stream: u64, index: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ stream.wrapping_mul(0x1000_0000_01b3) ^ index.wrapping_mul(0x9e37_79b9));
    let len = match rng.range(0, 10) {
        0 => rng.range(16, 200),
        1..=6 => rng.range(200, 4096),
        _ => rng.range(4096, 24 << 10),
    } as usize;
    let mut out = format!("{seed}/{stream}/{index}:").into_bytes();
    let prefix = out.len();
    if rng.range(0, 2) == 0 {
        const WORDS: [&str; 8] = ["fn ", "let ", "result ", "Ok(()) ", "error: ", "42 ", "tokens ", "\n"];
        while out.len() < len {
            out.extend_from_slice(WORDS[rng.range(0, 8) as usize].as_bytes());
        }
        out.truncate(len.max(prefix));
    } else {
        out.extend(rng.bytes(len));
    }
    out
}

/// A frame found in a segment: what kind, where, how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// A batch header (32 bytes) at `offset`; `end` is where the batch ends.
    Batch {
        /// Offset of the batch header.
        offset: u64,
        /// End of the batch frame.
        end: u64,
    },
    /// A record (header and payload, without padding) at `offset`, `len` bytes long in all.
    Record {
        /// Offset of the record header.
        offset: u64,
        /// Header plus payload length.
        len: u64,
    },
}

/// Maps every batch and record of an intact segment file.
pub fn frames(segment_file: &Path) -> Vec<Frame> {
    let bytes = std::fs::read(segment_file).unwrap_or_default();
    let mut out = Vec::new();
    let _ = walk_batches::<()>(&bytes, SEGMENT_HEADER_LEN, |b| {
        out.push(Frame::Batch { offset: b.offset, end: b.end });
        for r in &b.records {
            out.push(Frame::Record {
                offset: r.offset,
                len: (format::RECORD_HEADER_LEN + r.payload.len()) as u64,
            });
        }
        Ok(())
    });
    out
}

/// Segment files of a store, ascending.
pub fn segment_files(store: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(store.join("log"))
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "seg"));
    v.sort();
    v
}

/// The fuzz directory of the repository (`fuzz/`: targets, corpora, regressions).
pub fn fuzz_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The files of `dir`, sorted; none if it does not exist.
pub fn files_in(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<std::path::PathBuf> = rd.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
    v.sort();
    v
}

/// Runs `check` (a fuzz target's checks, compiled in from `fuzz/src/`) on every file of
/// `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/`; the corpus must hold at least
/// `min_seeds` files (the test file that owns the target says how to regenerate them).
pub fn replay_corpus(target: &str, min_seeds: usize, check: impl Fn(&[u8]) + std::panic::RefUnwindSafe) {
    let corpus = files_in(&fuzz_dir().join("corpus").join(target));
    assert!(
        corpus.len() >= min_seeds,
        "fuzz/corpus/{target}: {} files, expected at least {min_seeds} (regenerate its seeds: see its test file)",
        corpus.len()
    );
    let regressions = files_in(&fuzz_dir().join("regressions").join(target));
    for f in corpus.iter().chain(&regressions) {
        let data = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        if std::panic::catch_unwind(|| check(&data)).is_err() {
            panic!("{target}: {} ({} bytes) fails the fuzz target's checks", f.display(), data.len());
        }
    }
    eprintln!("{target}: {} corpus files and {} regressions replayed", corpus.len(), regressions.len());
}
