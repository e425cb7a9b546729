//! `get_blob` of a 64 KB blob from a sealed segment, against a plain 64 KB memcpy.
//!
//! Setup: a store with `segment_size = 4 MiB`; the 64 KB target blobs are put first, then 5 MB of
//! distinct random filler so the segment holding them is sealed (and read through its mapping);
//! then `sync()`. Contents, as separate bench ids:
//! * `text`: 64 KB of a real transcript (default options, so stored with the default
//!   compression if it pays);
//! * `random`: 64 KB of random, incompressible bytes (stored raw whatever the option);
//! * `text-lz4`: the same text in a store opened with `Compression::Lz4`;
//! * `text-raw`: the same text in a store opened with `Compression::None`.
//!
//! Each is read with `Verify::None`, `Verify::Checksum` and `Verify::Hash`; `none+copy` is
//! `Verify::None` followed by copying the bytes out into a preallocated buffer, so that the bytes
//! are actually touched, as the memcpy baseline touches them. The baseline `memcpy` is
//! `dst.copy_from_slice(&src)` of 64 KB into a preallocated `Vec`, black-boxed.
//!
//! ```text
//! cargo bench -p undertext-benches --bench get_blob -- --warm-up-time 1 --measurement-time 3
//! ```
#![expect(clippy::expect_used, reason = "bench harness: failure should abort the bench")]

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use undertext::{BlobId, Compression, Options, Store, Verify};
use undertext_benches::{bench_tempdir, distinct_blobs, random_bytes, text_bytes};

const BLOB: usize = 64 * 1024;
const SEGMENT_SIZE: u64 = 4 << 20;
const FILLER_BYTES: usize = 5 << 20;

/// Opens a store under `dir`, puts `content`, then enough filler to seal its segment; syncs.
fn store_with_sealed(dir: &Path, compression: Compression, content: &[u8], seed: u64) -> (Store, BlobId) {
    let store = Store::open(dir, Options::default().segment_size(SEGMENT_SIZE).compression(compression))
        .expect("open store");
    let id = store.put_blob("o", content).expect("put target blob");
    for filler in distinct_blobs(FILLER_BYTES / BLOB, BLOB, seed) {
        store.put_blob("o", &filler).expect("put filler");
    }
    store.sync().expect("sync");
    for verify in [Verify::None, Verify::Checksum, Verify::Hash] {
        let got = store.get_blob_with("o", &id, verify).expect("read back");
        assert!(*got == *content, "read back differs with {verify:?}");
    }
    (store, id)
}

fn get_blob(c: &mut Criterion) {
    let tmp = bench_tempdir().expect("bench temp dir");
    eprintln!("get_blob: stores under {}", tmp.path().display());
    let text = text_bytes(BLOB, 1 << 20).expect("transcript text");
    let random = random_bytes(BLOB, 0x5EED);

    let cases = [
        ("text", Compression::default(), &text, 1),
        ("random", Compression::default(), &random, 2),
        ("text-lz4", Compression::Lz4, &text, 3),
        ("text-raw", Compression::None, &text, 4),
    ];
    let stores: Vec<_> = cases
        .iter()
        .map(|&(name, compression, content, seed)| {
            let (store, id) = store_with_sealed(&tmp.path().join(name), compression, content, seed);
            let blob = store.get_blob_with("o", &id, Verify::None).expect("read");
            eprintln!("get_blob: {name}: {blob:?}");
            (name, store, id)
        })
        .collect();

    let mut g = c.benchmark_group("get_blob_64k");
    g.throughput(Throughput::Bytes(BLOB as u64));

    {
        let src = text.clone();
        let mut dst = vec![0u8; BLOB];
        g.bench_function("memcpy", |b| {
            b.iter(|| black_box(&mut dst[..]).copy_from_slice(black_box(&src[..])));
        });
    }

    for (name, store, id) in &stores {
        for (vname, verify) in
            [("none", Verify::None), ("checksum", Verify::Checksum), ("hash", Verify::Hash)]
        {
            g.bench_function(BenchmarkId::new(vname, name), |b| {
                b.iter(|| black_box(store.get_blob_with("o", black_box(id), verify).expect("get")));
            });
        }
        let mut dst = vec![0u8; BLOB];
        g.bench_function(BenchmarkId::new("none+copy", name), |b| {
            b.iter(|| {
                let blob = store.get_blob_with("o", black_box(id), Verify::None).expect("get");
                black_box(&mut dst[..]).copy_from_slice(&blob);
            });
        });
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = get_blob
}
criterion_main!(benches);
