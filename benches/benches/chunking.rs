//! Chunking throughput on 1 MiB blobs (FastCDC + BLAKE3), next to plain BLAKE3.
//!
//! Issue 11's target: chunking ≥ 1 GB/s on 1 MB blobs, reported next to plain BLAKE3. One
//! criterion group, `chunking_1mb`, `Throughput::Bytes(1 MiB)`, two contents as bench
//! parameters:
//! * `random`: 1 MiB of pseudo-random bytes (SplitMix64, fixed seed);
//! * `text`: 1 MiB of text-like bytes: words drawn pseudo-randomly from a fixed list of 64,
//!   separated by spaces, with a newline about every 12 words (FastCDC's speed can depend on
//!   the content).
//!
//! Variants:
//! * `blake3_whole`: `BlobId::of` of the 1 MiB buffer: what an unchunked blob costs to address
//!   (the baseline);
//! * `fastcdc_cuts`: `blob::chunk::cut_points(buf, 16 KiB)` alone (the engine's default
//!   `chunk_avg`);
//! * `fastcdc_plus_blake3`: what `Txn::blob` (engine/src/kernel/store/core.rs) computes for a blob
//!   above `chunk_threshold` besides storing it: the whole blob's id, the cut points, and the id
//!   of every chunk;
//! * `engine_put_blob_none_durability`: `Store::put_blob` of a fresh 1 MiB blob into a store
//!   opened with `Durability::None` and the default compression (zstd -1, per chunk): the
//!   engine's full CPU cost of a chunked put (index lookups per chunk, compression, the log
//!   write into the page cache), no `fdatasync`;
//! * `engine_put_blob_none_durability_raw`: the same with `Compression::None`, to separate the
//!   compression from the rest.
//!
//! The two `engine_*` variants time only `put_blob`: before each put (untimed) the buffer is
//! refilled with new content from the same generator, so every chunk is new and nothing is
//! deduplicated; every [`ROTATE_BYTES`] the store is closed and a fresh one opened (untimed) so
//! the disk use stays bounded. Stores live under `bench_tempdir()`.
//!
//! ```text
//! cargo bench -p undertext-benches --bench chunking -- --warm-up-time 1 --measurement-time 5
//! ```
#![expect(clippy::expect_used, reason = "bench harness: failure should abort the bench")]

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use undertext::internals::cut_points;
use undertext::{BlobId, Compression, Durability, Options, Store};
use undertext_benches::{Rng, bench_tempdir};

/// Blob size: 1 MiB.
const BLOB: usize = 1 << 20;
/// Average chunk size, the engine's default `Options::chunk_avg`.
const AVG: u32 = 16 * 1024;
/// Bytes put into one store before it is replaced by a fresh one.
const ROTATE_BYTES: usize = 256 << 20;

/// The words the text-like content is made of (64, separated by spaces).
const WORDS: &str = "the of and to in is that for it as with was on be by this are or from at an but not \
    have which function return error value file line test result string number message context assistant \
    user tool call output input chunk store blob commit index segment record snapshot archive budget \
    render compaction approval checkpoint worker cargo build struct impl fn let";

/// Fills `buf` with pseudo-random bytes.
fn fill_random(rng: &mut Rng, buf: &mut [u8]) {
    rng.fill(buf);
}

/// Fills `buf` with words from [`WORDS`] picked by `rng`, a space between words and a newline
/// about every 12th; the last word is cut where `buf` ends.
fn fill_text(rng: &mut Rng, buf: &mut [u8]) {
    let words: Vec<&[u8]> = WORDS.split_ascii_whitespace().map(str::as_bytes).collect();
    let mut at = 0;
    while at < buf.len() {
        let r = rng.next_u64();
        let word = words[(r % words.len() as u64) as usize];
        let sep = if (r >> 32).is_multiple_of(12) { b'\n' } else { b' ' };
        for &b in word.iter().chain(std::iter::once(&sep)) {
            if at == buf.len() {
                break;
            }
            buf[at] = b;
            at += 1;
        }
    }
}

/// What the engine computes to chunk a blob: its id, then each chunk's id and end offset.
fn chunk_and_address(buf: &[u8]) -> (BlobId, Vec<(BlobId, u64)>) {
    let id = BlobId::of(buf);
    let chunks =
        cut_points(buf, AVG).into_iter().map(|r| (BlobId::of(&buf[r.clone()]), r.end as u64)).collect();
    (id, chunks)
}

/// A store that is replaced by a fresh one (in a new subdirectory) once it holds
/// [`ROTATE_BYTES`], so that a long measurement does not fill the disk.
struct RotatingStore {
    base: PathBuf,
    compression: Compression,
    generation: u32,
    put_bytes: usize,
    store: Option<Store>,
}

impl RotatingStore {
    fn new(base: &Path, compression: Compression) -> Self {
        let mut s = Self { base: base.to_path_buf(), compression, generation: 0, put_bytes: 0, store: None };
        s.rotate();
        s
    }

    fn dir(&self) -> PathBuf {
        self.base.join(format!("gen-{}", self.generation))
    }

    fn rotate(&mut self) {
        if let Some(old) = self.store.take() {
            old.close().expect("close store");
            std::fs::remove_dir_all(self.dir()).expect("remove old store");
            self.generation += 1;
        }
        let opts = Options::default().durability(Durability::None).compression(self.compression);
        self.store = Some(Store::open(self.dir(), opts).expect("open store"));
        self.put_bytes = 0;
    }

    /// The store to put `len` more bytes into, rotated first if it is full.
    fn for_put(&mut self, len: usize) -> &Store {
        if self.put_bytes + len > ROTATE_BYTES {
            self.rotate();
        }
        self.put_bytes += len;
        self.store.as_ref().expect("store is open")
    }
}

fn chunking(c: &mut Criterion) {
    let tmp = bench_tempdir().expect("bench temp dir");
    eprintln!("chunking: stores under {}", tmp.path().display());
    type Fill = fn(&mut Rng, &mut [u8]);
    let contents: [(&str, Fill, u64); 2] = [("random", fill_random, 0x5EED), ("text", fill_text, 0x7E47)];

    let mut g = c.benchmark_group("chunking_1mb");
    g.throughput(Throughput::Bytes(BLOB as u64));

    for (name, fill, seed) in contents {
        let mut rng = Rng::new(seed);
        let mut buf = vec![0u8; BLOB];
        fill(&mut rng, &mut buf);
        let cuts = cut_points(&buf, AVG);
        let tail = cuts.iter().filter(|r| r.len() <= (AVG / 8) as usize).count();
        eprintln!(
            "chunking: {name}: {} chunks (mean {} bytes; {tail} of them are the tail's pieces of at most {} bytes)",
            cuts.len(),
            BLOB / cuts.len(),
            AVG / 8
        );

        g.bench_function(BenchmarkId::new("blake3_whole", name), |b| {
            b.iter(|| black_box(BlobId::of(black_box(&buf))));
        });
        g.bench_function(BenchmarkId::new("fastcdc_cuts", name), |b| {
            b.iter(|| black_box(cut_points(black_box(&buf), AVG)));
        });
        g.bench_function(BenchmarkId::new("fastcdc_plus_blake3", name), |b| {
            b.iter(|| black_box(chunk_and_address(black_box(&buf))));
        });

        for (variant, compression) in [
            ("engine_put_blob_none_durability", Compression::default()),
            ("engine_put_blob_none_durability_raw", Compression::None),
        ] {
            let mut stores = RotatingStore::new(&tmp.path().join(format!("{variant}-{name}")), compression);
            let mut fresh = vec![0u8; BLOB];
            g.bench_function(BenchmarkId::new(variant, name), |b| {
                b.iter_custom(|iters| {
                    let mut spent = Duration::ZERO;
                    for _ in 0..iters {
                        fill(&mut rng, &mut fresh);
                        let store = stores.for_put(BLOB);
                        let start = Instant::now();
                        black_box(store.put_blob("o", black_box(&fresh)).expect("put_blob"));
                        spent += start.elapsed();
                    }
                    spent
                });
            });
            if let Some(store) = stores.store.take() {
                store.close().expect("close store");
            }
        }
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5))
}

criterion_group! {
    name = benches;
    config = config();
    targets = chunking
}
criterion_main!(benches);
