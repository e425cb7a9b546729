//! The fuzz corpus, replayed and regenerated.
//!
//! * `segment_decode_corpus_replays_without_panic` runs the `segment_decode` fuzz target's
//!   checks on every file of `fuzz/corpus/segment_decode/` and `fuzz/regressions/segment_decode/`.
//!   The checks are not copied: `fuzz/src/segment_decode.rs` is compiled into this test with
//!   `#[path]`, the same file the fuzz target calls, so the two cannot drift apart.
//! * `write_segment_seed_corpus` (ignored) rewrites the deterministic seed files
//!   (`seed-*`) of that corpus from real stores and hand-made damage:
//!   `cargo test -p undertext-tests --test fuzz_corpus -- --ignored`.
//! * `read_context_corpus_replays` runs the `read_context` fuzz target's checks
//!   (`fuzz/src/read_context.rs`, included the same way) on every file of
//!   `fuzz/corpus/read_context/` and `fuzz/regressions/read_context/`;
//!   `write_read_context_seed_corpus` (ignored) rewrites that corpus's `seed-*` files.

#![allow(clippy::unwrap_used, reason = "test helpers outside #[test] fns: a failed unwrap is a failed test")]

#[path = "../../fuzz/src/read_context.rs"]
mod read_context;
#[path = "../../fuzz/src/segment_decode.rs"]
mod segment_decode;

use undertext::internals::Kind;
use undertext::log::format::{BatchBuf, RecordSpec, SEGMENT_HEADER_LEN, encode_segment_header};
use undertext::{Compression, Durability, Options, Store};
use undertext_tests::{Rng, files_in, fuzz_dir, replay_corpus, segment_files};

/// Prefix of the generated seed files; other corpus files (found by fuzzing) are kept.
const SEED_PREFIX: &str = "seed-";
/// Upper bound for the generated seeds together.
const SEED_BUDGET: usize = 300 << 10;

/// Whether the fuzz target's checks pass on `data`, strictly or tolerating one finding.
fn passes(data: &[u8], tolerate: Option<&str>) -> bool {
    std::panic::catch_unwind(|| match tolerate {
        None => segment_decode::check(data),
        Some(finding) => segment_decode::check_tolerating(data, &[finding]),
    })
    .is_ok()
}

/// Every corpus file passes the fuzz target's checks. So does every regression file,
/// except those named after an open finding (`<finding>-…`, see `KNOWN_OPEN` in
/// `fuzz/src/segment_decode.rs`): those must still fail the strict checks, and pass once
/// that one finding is tolerated. When the engine is fixed they pass and this test says
/// to drop the finding from `KNOWN_OPEN`.
#[test]
fn segment_decode_corpus_replays_without_panic() {
    let corpus = files_in(&fuzz_dir().join("corpus/segment_decode"));
    assert!(
        corpus.len() >= 10,
        "fuzz/corpus/segment_decode holds {} files; regenerate the seeds with \
         `cargo test -p undertext-tests --test fuzz_corpus -- --ignored`",
        corpus.len()
    );
    for path in &corpus {
        let data = std::fs::read(path).unwrap();
        assert!(
            passes(&data, None),
            "segment_decode check failed on {} ({} bytes)",
            path.display(),
            data.len()
        );
    }
    for path in files_in(&fuzz_dir().join("regressions/segment_decode")) {
        let data = std::fs::read(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let open = segment_decode::KNOWN_OPEN.iter().find(|f| name.starts_with(&format!("{f}-")));
        match open {
            None => {
                assert!(passes(&data, None), "segment_decode check failed on regression {}", path.display())
            }
            Some(finding) => {
                assert!(
                    !passes(&data, None),
                    "{} passes now: if the engine fixed {finding:?}, remove it from \
                     KNOWN_OPEN in fuzz/src/segment_decode.rs",
                    path.display()
                );
                assert!(
                    passes(&data, Some(finding)),
                    "{} fails for another reason than {finding:?}",
                    path.display()
                );
            }
        }
    }
}

/// The checksum fix-up the fuzz target applies is the engine's own: resealing an intact
/// segment changes nothing, and a resealed damaged one decodes again.
#[test]
fn reseal_matches_the_engine_checksums() {
    assert_eq!(segment_decode::crc32c(0, b"123456789"), 0xE306_9283);
    let seg = crafted_segment();
    assert_eq!(segment_decode::reseal(&seg), seg);
    let mut damaged = seg.clone();
    damaged[SEGMENT_HEADER_LEN + 40] ^= 0x20; // a payload byte of the first record
    let r = undertext::log::scan::verify_segment(&damaged, 1, |_| None);
    assert_eq!(r.problems.len(), 1, "{r:?}");
    let r = undertext::log::scan::verify_segment(&segment_decode::reseal(&damaged), 1, |_| None);
    assert!(r.problems.is_empty(), "{r:?}");
}

/// A segment holding the odd frames a store rarely writes: an empty batch, an empty
/// payload, an optional record kind, a blob record too short for its id, a batch of many
/// records.
fn crafted_segment() -> Vec<u8> {
    let mut seg = encode_segment_header(1).to_vec();
    let batches: [&[(u8, &[u8])]; 4] = [
        &[(Kind::Blob.byte(), b"0123456789abcdef0123456789abcdef payload")],
        &[],
        &[(Kind::FIRST_OPTIONAL + 72, b""), (Kind::Blob.byte(), b"short")],
        &[
            (Kind::Blob.byte(), &[7u8; 33]),
            (Kind::Blob.byte(), &[8u8; 40]),
            (Kind::FIRST_OPTIONAL + 1, &[9u8; 1]),
        ],
    ];
    for (txid, records) in batches.iter().enumerate() {
        let mut b = BatchBuf::new();
        for &(k, p) in *records {
            b.push(RecordSpec { kind: k, codec: 0, raw_len: p.len() as u32, parts: &[p] }).unwrap();
        }
        seg.extend_from_slice(b.finish().seal(txid as u64 + 1));
    }
    seg
}

fn text(rng: &mut Rng, len: usize) -> Vec<u8> {
    const WORDS: [&str; 10] = [
        "user: ",
        "assistant: ",
        "tool_call ",
        "{\"path\": \"src/main.rs\"} ",
        "fn main() ",
        "Ok(()) ",
        "error[E0502]: ",
        "tokens ",
        "the ",
        "\n",
    ];
    let mut out = Vec::with_capacity(len + 32);
    while out.len() < len {
        out.extend_from_slice(WORDS[rng.range(0, WORDS.len() as u64) as usize].as_bytes());
    }
    out.truncate(len);
    out
}

/// Runs `fill` on a fresh store with 16 KiB segments and returns its segment files' bytes.
fn store_segments(compression: Compression, fill: impl FnOnce(&Store)) -> Vec<Vec<u8>> {
    let dir = tempfile::tempdir().unwrap();
    let opts =
        Options::default().segment_size(4096 * 4).compression(compression).durability(Durability::None);
    let store = Store::open(dir.path(), opts).unwrap();
    fill(&store);
    store.close().unwrap();
    segment_files(dir.path()).iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn flipped(bytes: &[u8], at: usize, mask: u8) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[at] ^= mask;
    b
}

/// Overwrites the little-endian u32 at `at`, then recomputes every checksum: a structural
/// lie (count, length) that the checksums do not catch.
fn lie(bytes: &[u8], at: usize, f: impl FnOnce(u32) -> u32) -> Vec<u8> {
    let mut b = bytes.to_vec();
    let v = u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    b[at..at + 4].copy_from_slice(&f(v).to_le_bytes());
    segment_decode::reseal(&b)
}

#[test]
#[ignore = "writes fuzz/corpus/segment_decode; run by hand to regenerate the seeds"]
fn write_segment_seed_corpus() {
    let mut rng = Rng::new(0x5EED_C0DE);
    let mut seeds: Vec<(String, Vec<u8>)> = Vec::new();

    // Real segments: compressible text through LZ4 and Zstd, random bytes stored raw,
    // single-blob batches and multi-blob batches, sealed segments and an active tail.
    let lz4 = store_segments(Compression::Lz4, |s| {
        // Text with a random tail each, so that 16 KiB of segment fill up.
        for i in 0..60 {
            let mut blob = text(&mut rng, 300 + 50 * i);
            blob.extend(rng.bytes(250));
            s.put_blob("o", &blob).unwrap();
        }
    });
    assert!(lz4.len() >= 2, "expected a sealed and an active segment");
    seeds.push(("real-lz4-text-sealed".into(), lz4[0].clone()));
    seeds.push(("real-lz4-text-tail".into(), lz4[lz4.len() - 1].clone()));
    let zstd = store_segments(Compression::Zstd(3), |s| {
        let blobs: Vec<Vec<u8>> = (0..6).map(|i| text(&mut rng, 64 << i)).collect();
        let refs: Vec<&[u8]> = blobs.iter().map(Vec::as_slice).collect();
        s.put_blobs("o", &refs).unwrap();
    });
    seeds.push(("real-zstd-text-batch".into(), zstd[0].clone()));
    let random = store_segments(Compression::Lz4, |s| {
        for n in [1usize, 31, 32, 33, 500] {
            s.put_blob("o", &rng.bytes(n)).unwrap();
        }
        let blobs: Vec<Vec<u8>> = (0..4).map(|i| rng.bytes(700 + i)).collect();
        let refs: Vec<&[u8]> = blobs.iter().map(Vec::as_slice).collect();
        s.put_blobs("o", &refs).unwrap();
    });
    seeds.push(("real-random-mixed".into(), random[0].clone()));
    let small = store_segments(Compression::None, |s| {
        s.put_blob("o", b"hello").unwrap();
        s.put_blobs("o", &[b"call".as_slice(), b"result".as_slice()]).unwrap();
    });
    let small = small[0].clone();
    seeds.push(("real-none-small".into(), small.clone()));
    seeds.push(("crafted-odd-frames".into(), crafted_segment()));

    // Edges of the segment header.
    seeds.push(("empty".into(), Vec::new()));
    seeds.push(("header-only".into(), encode_segment_header(1).to_vec()));
    // 'U' (85), the first byte of every header, is also the number the target takes from it.
    seeds.push(("header-only-85".into(), encode_segment_header(85).to_vec()));
    seeds.push(("random-bytes".into(), rng.bytes(96)));

    // Torn tails: cut inside the header, inside a batch header, inside a record.
    for cut in [
        SEGMENT_HEADER_LEN - 1,
        SEGMENT_HEADER_LEN + 1,
        SEGMENT_HEADER_LEN + 20,
        SEGMENT_HEADER_LEN + 50,
        small.len() - 1,
    ] {
        seeds.push((format!("truncated-at-{cut}"), small[..cut].to_vec()));
    }
    let tail = &lz4[lz4.len() - 1];
    seeds.push(("truncated-lz4-tail".into(), tail[..tail.len() * 2 / 3].to_vec()));

    // Bit flips: segment magic and number, batch magic, body length, count and checksum,
    // record length and kind, payload.
    for (name, at, mask) in [
        ("segment-magic", 2, 0x01),
        ("segment-number", 16, 0x02),
        ("batch-magic", 32, 0x10),
        ("batch-body-len", 36, 0x08),
        ("batch-count", 40, 0x01),
        ("batch-body-crc", 56, 0x80),
        ("record-len", 64, 0x04),
        ("record-kind", 68, 0x01),
        ("payload", 90, 0x40),
    ] {
        seeds.push((format!("flip-{name}"), flipped(&small, at, mask)));
    }
    seeds.push(("flip-lz4-middle".into(), flipped(&lz4[0], lz4[0].len() / 2, 0x10)));

    // Checksums intact, structure wrong: counts and lengths that disagree with the body.
    seeds.push(("lie-count-minus-one".into(), lie(&small, 40, |v| v - 1)));
    seeds.push(("lie-count-zero".into(), lie(&small, 40, |_| 0)));
    seeds.push(("lie-body-len-plus-8".into(), lie(&small, 36, |v| v + 8)));
    seeds.push(("lie-body-len-huge".into(), lie(&small, 36, |_| 0x7FFF_FFF8)));
    seeds.push(("lie-record-len-plus-8".into(), lie(&small, 64, |v| v + 8)));

    let total: usize = seeds.iter().map(|(_, b)| b.len()).sum();
    assert!(total < SEED_BUDGET, "seeds take {total} bytes");
    let dir = fuzz_dir().join("corpus/segment_decode");
    std::fs::create_dir_all(&dir).unwrap();
    for old in files_in(&dir) {
        let name = old.file_name().unwrap().to_string_lossy();
        if name.starts_with(SEED_PREFIX) {
            std::fs::remove_file(&old).unwrap();
        }
    }
    for (name, bytes) in &seeds {
        std::fs::write(dir.join(format!("{SEED_PREFIX}{name}")), bytes).unwrap();
    }
    eprintln!("wrote {} seeds ({total} bytes) to {}", seeds.len(), dir.display());
}

/// Every file of the `read_context` corpus and regressions passes the fuzz target's checks:
/// `ArchiveText::read` agrees with naive slicing in every unit.
#[test]
fn read_context_corpus_replays() {
    // Regenerate: `cargo test -p undertext-tests --test fuzz_corpus -- --ignored`.
    replay_corpus("read_context", 10, read_context::check);
}

/// Random ranges: every unit and every way of drawing a bound.
fn mixed_ranges(rng: &mut Rng, n: usize) -> Vec<(u8, u16, u16)> {
    (0..n).map(|_| (rng.next_u64() as u8 & 0x3F, rng.next_u64() as u16, rng.next_u64() as u16)).collect()
}

#[test]
#[ignore = "writes fuzz/corpus/read_context; run by hand to regenerate the seeds"]
fn write_read_context_seed_corpus() {
    let mut rng = Rng::new(0x5EED_7E47);
    let all_pieces: Vec<u8> = (0xF5..=0xFF).collect();
    // Every (unit, start mode, end mode): 64 ranges over two seeds.
    let every_mode: Vec<(u8, u16, u16)> =
        (0..64u8).map(|c| (c, rng.next_u64() as u16 % 64, rng.next_u64() as u16 % 64)).collect();
    let mut seeds: Vec<(String, Vec<u8>)> = vec![
        ("empty".into(), Vec::new()),
        ("header-only".into(), read_context::encode(0, &[], b"")),
        ("ascii-lines".into(), read_context::encode(0, &mixed_ranges(&mut rng, 12), b"hello\nworld\n\nlast")),
        ("pieces".into(), read_context::encode(3, &every_mode[..32], &all_pieces)),
        ("pieces-every-mode".into(), read_context::encode(7, &every_mode[32..], &all_pieces)),
    ];
    // Across 4 KiB strides: a long run, then characters straddling the stride boundary.
    for (name, lead, tail) in [
        ("astral-at-stride", 4094, "\u{1F600}\u{10FFFF}"),
        ("astral-after-stride", 4096, "\u{1F600}"),
        ("cjk-at-stride", 4095, "\u{4E2D}\u{6587}"),
        ("crlf-at-stride", 4095, "\r\n\r\n"),
        ("two-byte-at-stride", 4093, "\u{E9}\u{E9}\u{E9}"),
    ] {
        let mut t = "a".repeat(lead).into_bytes();
        t.extend_from_slice(tail.as_bytes());
        t.extend_from_slice(b"\nend");
        seeds.push((name.into(), read_context::encode(1, &mixed_ranges(&mut rng, 16), &t)));
    }
    let texts: [(&str, u8, String); 9] = [
        ("astral-only", 0, "\u{10FFFF}".repeat(1100)),
        ("two-byte-only", 0, "\u{E9}".repeat(2100)),
        ("cjk-repeated", 31, "\u{4E2D}\u{6587}\u{5B57}\u{7B26} ".repeat(20)),
        (
            "zwj-flags-skin",
            15,
            "\u{1F469}\u{200D}\u{1F469}\u{200D}\u{1F467} \u{1F44B}\u{1F3FD} \u{1F1EB}\u{1F1F7}\n".repeat(8),
        ),
        ("combining", 20, "e\u{301}\u{302}a\u{20DD}\n".repeat(30)),
        ("rtl", 25, "\u{645}\u{631}\u{62D}\u{628}\u{627} \u{5E9}\u{5DC}\u{5D5}\u{5DD}\u{200F}\n".repeat(10)),
        ("nul-and-cr", 12, "a\0b\r\rc\r\n\0\n".repeat(40)),
        ("newlines-only", 31, "\n".repeat(300)),
        ("bmp-edges", 9, "\u{80}\u{7FF}\u{800}\u{FFFF}\u{FFFD}\u{FEFF}\u{10000}".repeat(30)),
    ];
    for (name, rep, t) in texts {
        seeds.push((name.into(), read_context::encode(rep, &mixed_ranges(&mut rng, 20), t.as_bytes())));
    }
    let mut invalid = rng.bytes(300);
    invalid.extend_from_slice(&[0xC3, 0xE4, 0xB8, 0xF0, 0x9F, 0x98, b'\n', 0xED, 0xA0, 0x80]);
    seeds.push(("invalid-utf8".into(), read_context::encode(4, &mixed_ranges(&mut rng, 20), &invalid)));
    // Two real tool results with multibyte characters, cut to 3 KB.
    let real = undertext_tests::transcripts::tool_results(&undertext_tests::transcripts::transcripts_dir());
    for (i, (_, t)) in
        real.iter().filter(|(_, t)| t.len() > 200 && t.chars().any(|c| c.len_utf8() > 2)).take(2).enumerate()
    {
        let mut cut = t.len().min(3000);
        while !t.is_char_boundary(cut) {
            cut -= 1;
        }
        seeds.push((
            format!("real-tool-result-{i}"),
            read_context::encode(2, &mixed_ranges(&mut rng, 20), &t.as_bytes()[..cut]),
        ));
    }

    let total: usize = seeds.iter().map(|(_, b)| b.len()).sum();
    assert!(total < 100 << 10, "seeds take {total} bytes");
    for (name, bytes) in &seeds {
        let r = std::panic::catch_unwind(|| read_context::check(bytes));
        assert!(r.is_ok(), "seed {name} fails the checks");
    }
    let dir = fuzz_dir().join("corpus/read_context");
    std::fs::create_dir_all(&dir).unwrap();
    for old in files_in(&dir) {
        if old.file_name().unwrap().to_string_lossy().starts_with(SEED_PREFIX) {
            std::fs::remove_file(&old).unwrap();
        }
    }
    for (name, bytes) in &seeds {
        std::fs::write(dir.join(format!("{SEED_PREFIX}{name}")), bytes).unwrap();
    }
    eprintln!("wrote {} seeds ({total} bytes) to {}", seeds.len(), dir.display());
}
