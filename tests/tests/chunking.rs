//! Content-defined chunking of large blobs (issue: growing state stored once).
//!
//! Claims: every version of an edited value reads back exactly, whole and by range;
//! storage grows with what changed, not with the value's size; ranged reads of a chunked
//! value (bytes, or `read_context` in any unit) read only the chunks they need; chunked
//! blobs survive reopen, index rebuild and `check`, and damage to a chunk is reported; the
//! versions of a growing value get small delta manifests and every version survives.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::ops::Range;

use undertext::{BlobId, Compression, Durability, Options, Store, Unit};
use undertext_tests::{Rng, seed};

fn opts(compression: Compression) -> Options {
    Options::default().durability(Durability::None).compression(compression)
}

fn log_bytes(store: &Store) -> u64 {
    store.stats().unwrap().log_bytes
}

/// Text-like bytes: words from a small vocabulary, like serialized agent state.
fn words(rng: &mut Rng, n: usize) -> Vec<u8> {
    const VOCAB: &[&str] = &[
        "the",
        "tool",
        "result",
        "message",
        "assistant",
        "user",
        "file",
        "error",
        "line",
        "cargo",
        "test",
        "passed",
        "{\"role\":",
        "\"content\":",
        "src/lib.rs",
        "fn",
        "let",
        "0x1f",
        "42",
        "\n",
    ];
    let mut out = Vec::with_capacity(n + 16);
    while out.len() < n {
        out.extend_from_slice(VOCAB[rng.range(0, VOCAB.len() as u64) as usize].as_bytes());
        out.push(b' ');
        if rng.range(0, 50) == 0 {
            out.extend_from_slice(format!("{}", rng.next_u64()).as_bytes());
        }
    }
    out.truncate(n);
    out
}

/// One random edit; returns the bytes it changed (inserted or deleted).
fn edit(rng: &mut Rng, buf: &mut Vec<u8>, random_bytes: bool) -> u64 {
    let n = rng.range(1, 2048) as usize;
    let fresh = if random_bytes { rng.bytes(n) } else { words(rng, n) };
    match rng.range(0, 3) {
        0 => buf.extend_from_slice(&fresh),
        1 => {
            let at = rng.range(0, buf.len() as u64) as usize;
            buf.splice(at..at, fresh);
        }
        _ => {
            let at = rng.range(0, (buf.len() - n) as u64) as usize;
            buf.drain(at..at + n);
        }
    }
    n as u64
}

/// `chunks_per_edit`: the allowance in average chunks per edit. An edit at a random point
/// lands in a chunk picked in proportion to its length (the inspection paradox) and may move
/// the next cut point: measured on random bytes, an edit costs 1.5 to 2 x `chunk_avg` with its
/// manifest
/// (FastCDC 2020 with min = avg / 4, max = 4 x avg); compressed text costs much less.
fn edits_grow_storage_by_what_changed(compression: Compression, random_bytes: bool, chunks_per_edit: f64) {
    let mut rng = Rng::new(seed(11));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts(compression)).unwrap();
    let avg = u64::from(store.options().chunk_avg);
    let mut buf = if random_bytes { rng.bytes(1 << 20) } else { words(&mut rng, 1 << 20) };
    store.put_blob("o", &buf).unwrap();
    let start = log_bytes(&store);
    let mut versions: Vec<(BlobId, Vec<u8>)> = Vec::new();
    let (mut changed, edits) = (0u64, 60u64);
    for _ in 0..edits {
        changed += edit(&mut rng, &mut buf, random_bytes);
        versions.push((store.put_blob("o", &buf).unwrap(), buf.clone()));
    }
    let growth = log_bytes(&store) - start;
    let allowance = 3 * changed + (edits as f64 * avg as f64 * chunks_per_edit) as u64;
    eprintln!(
        "{compression:?}, random={random_bytes}: {edits} edits changed {changed} B; log grew {growth} B \
         (allowance {allowance} B = 3 x changed + {chunks_per_edit} x {avg} B per edit)"
    );
    assert!(growth <= allowance, "log grew {growth} B, allowance {allowance} B");
    for (id, want) in &versions {
        assert_eq!(&*store.get_blob("o", id).unwrap(), &want[..]);
        let a = rng.range(0, want.len() as u64);
        let b = rng.range(a, want.len() as u64 + 1);
        assert_eq!(store.get_blob_range("o", id, a..b).unwrap(), &want[a as usize..b as usize]);
    }
}

#[test]
fn random_edits_to_a_megabyte_of_text_store_only_new_chunks() {
    edits_grow_storage_by_what_changed(Compression::default(), false, 1.0);
}

#[test]
fn random_edits_to_a_megabyte_of_random_bytes_store_only_new_chunks_uncompressed() {
    edits_grow_storage_by_what_changed(Compression::None, true, 1.25);
}

#[test]
fn a_list_serialized_with_one_more_element_stores_about_one_new_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts(Compression::None)).unwrap();
    let mut rng = Rng::new(seed(12));
    let mut items: Vec<String> = (0..1000)
        .map(|i| format!("{{\"i\":{i},\"text\":\"{}\"}}", String::from_utf8(words(&mut rng, 200)).unwrap()))
        .collect();
    let list = |items: &[String]| format!("[{}]", items.join(",")).into_bytes();
    store.put_blob("o", &list(&items)).unwrap();
    let before = log_bytes(&store);
    items.push("{\"i\":1000,\"text\":\"one more\"}".to_string());
    let id = store.put_blob("o", &list(&items)).unwrap();
    let growth = log_bytes(&store) - before;
    let max_chunk = 4 * u64::from(store.options().chunk_avg);
    eprintln!("one element more: log grew {growth} B (largest chunk {max_chunk} B)");
    assert!(growth <= max_chunk + 8192, "grew {growth} B");
    assert_eq!(&*store.get_blob("o", &id).unwrap(), &list(&items)[..]);
}

#[test]
fn ranged_reads_of_a_chunked_blob_touch_only_the_chunks_they_need() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts(Compression::default())).unwrap();
    let mut rng = Rng::new(seed(13));
    let big = words(&mut rng, 2 << 20);
    let id = store.put_blob("o", &big).unwrap();
    let reads = |s: &Store| s.stats().unwrap().blob_bodies_read;
    let before = reads(&store);
    let got = store.get_blob_range("o", &id, 1_000_000..1_000_100).unwrap();
    assert_eq!(got, &big[1_000_000..1_000_100]);
    let touched = reads(&store) - before;
    assert!(touched <= 2, "a 100-byte read touched {touched} chunks");
    let before = reads(&store);
    assert_eq!(&*store.get_blob("o", &id).unwrap(), &big[..]);
    let whole = reads(&store) - before;
    assert!(whole >= 32, "the whole 2 MiB read only {whole} chunks: it was not chunked");
}

#[test]
fn read_context_of_a_chunked_archive_matches_slicing_in_every_unit_and_reads_few_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts(Compression::default())).unwrap();
    let mut rng = Rng::new(seed(14));
    // Multi-byte text: ASCII words, accents, CJK, emoji (surrogate pairs), long and short lines.
    let pieces = ["tool ", "résumé ", "数据 ", "😀 ", "line\n", "a\u{301} ", "\n", "🦀🦀 "];
    let mut text = String::new();
    while text.len() < 600_000 {
        text.push_str(pieces[rng.range(0, pieces.len() as u64) as usize]);
    }
    let a = store.archive("me", &text).unwrap();
    let id = a.id;
    let chars: Vec<char> = text.chars().collect();
    let utf16: Vec<u16> = text.encode_utf16().collect();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let reads = |s: &Store| s.stats().unwrap().blob_bodies_read;
    let mut worst = 0;
    for _ in 0..200 {
        let unit = [Unit::Chars, Unit::Utf16, Unit::Bytes, Unit::Lines][rng.range(0, 4) as usize];
        let n = match unit {
            Unit::Chars => chars.len(),
            Unit::Utf16 => utf16.len(),
            Unit::Bytes => text.len(),
            Unit::Lines => lines.len(),
        } as u64;
        let start = rng.range(0, n);
        let end = (start + rng.range(0, 300)).min(n);
        let range: Range<u64> = start..end;
        let want: Option<String> = match unit {
            Unit::Chars => Some(chars[start as usize..end as usize].iter().collect()),
            Unit::Utf16 => String::from_utf16(&utf16[start as usize..end as usize]).ok(),
            Unit::Bytes => text.get(start as usize..end as usize).map(str::to_string),
            Unit::Lines => Some(lines[start as usize..end as usize].concat()),
        };
        let before = reads(&store);
        let got = store.read_context("me", &id, range.clone(), unit);
        worst = worst.max(reads(&store) - before);
        match want {
            Some(w) => assert_eq!(got.unwrap(), w, "{unit:?} {range:?}"),
            None => assert!(got.is_err(), "{unit:?} {range:?} splits a character but read"),
        }
    }
    // The offset index, the last byte (is it a newline?), the chunks around each bound
    // (one 4 KiB stride of the offset index, which can span three 2 KiB tail pieces) and
    // those the range covers: a dozen at most, of the archive's ~40.
    eprintln!("read_context on a {} B chunked archive: at most {worst} blob bodies per read", text.len());
    assert!(worst <= 12, "a short read_context touched {worst} blob bodies");
    let past = store.read_context("me", &id, 0..chars.len() as u64 + 1, Unit::Chars).unwrap_err().to_string();
    assert!(past.contains(&format!("holds {} chars", chars.len())), "{past}");
}

#[test]
fn chunked_blobs_survive_reopen_rebuild_and_check() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed(15));
    let big = words(&mut rng, 500_000);
    let id = {
        let store = Store::open(dir.path(), opts(Compression::default())).unwrap();
        let id = store.put_blob("o", &big).unwrap();
        store.close().unwrap();
        id
    };
    let store = Store::open(dir.path(), opts(Compression::default())).unwrap();
    assert_eq!(&*store.get_blob("o", &id).unwrap(), &big[..]);
    let report = store.check().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    store.rebuild_index().unwrap();
    assert_eq!(&*store.get_blob("o", &id).unwrap(), &big[..]);
    assert_eq!(store.blob_len("o", &id).unwrap(), big.len() as u64);
}

/// The bytes a full manifest of `len` bytes of content would take, about.
fn full_manifest_bytes(len: usize) -> u64 {
    44 + 36 * (len as u64).div_ceil(16 << 10)
}

#[test]
fn a_growing_value_costs_small_delta_manifests_and_every_version_survives_reopen_and_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed(17));
    let mut value = words(&mut rng, 1 << 20);
    let mut versions: Vec<(BlobId, Vec<u8>)> = Vec::new();
    let (grown, per_version) = {
        let store = Store::open(dir.path(), opts(Compression::None)).unwrap();
        versions.push((store.put_blob("o", &value).unwrap(), value.clone()));
        let before = log_bytes(&store);
        // 40 versions: more than two chains of 16 deltas.
        for _ in 0..40 {
            value.extend_from_slice(&words(&mut rng, 1000));
            versions.push((store.put_blob("o", &value).unwrap(), value.clone()));
        }
        store.close().unwrap();
        let store = Store::open(dir.path(), opts(Compression::None)).unwrap();
        ((log_bytes(&store) - before) / 40, full_manifest_bytes(value.len()))
    };
    // Each version adds ~1,000 new bytes (uncompressed) plus the last piece rewritten
    // (at most 2 KiB) and record headers; a full manifest alone would be per_version.
    eprintln!(
        "log growth per 1,000-byte append to a 1 MiB value: {grown} B (a full manifest: {per_version} B)"
    );
    assert!(
        grown < 1000 + 2048 + per_version / 8,
        "each version cost {grown} B: expected the new bytes, one piece and a delta manifest"
    );
    let store = Store::open(dir.path(), opts(Compression::None)).unwrap();
    for (i, (id, bytes)) in versions.iter().enumerate() {
        assert!(&*store.get_blob("o", id).unwrap() == bytes.as_slice(), "version {i} differs after reopen");
        let r = bytes.len() as u64 / 3..bytes.len() as u64 - 10;
        assert_eq!(
            store.get_blob_range("o", id, r.clone()).unwrap(),
            &bytes[r.start as usize..r.end as usize]
        );
    }
    assert!(store.check().unwrap().problems.is_empty());
    store.rebuild_index().unwrap();
    let (last, bytes) = versions.last().unwrap();
    assert!(&*store.get_blob("o", last).unwrap() == bytes.as_slice());
    assert_eq!(store.blob_len("o", last).unwrap(), bytes.len() as u64);
}

#[test]
fn interleaved_growing_values_that_share_a_prefix_each_get_delta_manifests() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed(19));
    // Two threads of one harness: the same 300 KB start (a system prompt), then their own.
    let shared = words(&mut rng, 300_000);
    let mut values = [shared.clone(), shared];
    for v in &mut values {
        v.extend_from_slice(&words(&mut rng, 700_000));
    }
    let store = Store::open(dir.path(), opts(Compression::None)).unwrap();
    for v in &values {
        store.put_blob("o", v).unwrap();
    }
    let before = log_bytes(&store);
    let mut ids = Vec::new();
    for _ in 0..20 {
        for v in &mut values {
            v.extend_from_slice(&words(&mut rng, 1000));
            ids.push((store.put_blob("o", v).unwrap(), v.clone()));
        }
    }
    let grown = (log_bytes(&store) - before) / 40;
    let full = full_manifest_bytes(values[0].len());
    eprintln!("interleaved: {grown} B per 1,000-byte append (a full manifest: {full} B)");
    assert!(
        grown < 1000 + 2048 + full / 8,
        "each version cost {grown} B: the interleaving defeated the deltas"
    );
    for (id, bytes) in ids.iter().rev().take(4) {
        assert!(&*store.get_blob("o", id).unwrap() == bytes.as_slice());
    }
}

#[test]
fn reading_the_next_version_of_a_growing_value_reads_only_its_new_chunks() {
    let mut rng = Rng::new(seed(18));
    let first = words(&mut rng, 1 << 20);
    let more = words(&mut rng, 1000);
    let bodies_read_for_next_version = |cache: usize| {
        let dir = tempfile::tempdir().unwrap();
        let opts = opts(Compression::default()).chunk_cache_bytes(cache);
        let store = Store::open(dir.path(), opts).unwrap();
        let mut value = first.clone();
        let v1 = store.put_blob("o", &value).unwrap();
        assert!(&*store.get_blob("o", &v1).unwrap() == value.as_slice());
        value.extend_from_slice(&more);
        let v2 = store.put_blob("o", &value).unwrap();
        let before = store.stats().unwrap().blob_bodies_read;
        assert!(&*store.get_blob("o", &v2).unwrap() == value.as_slice());
        store.stats().unwrap().blob_bodies_read - before
    };
    let cached = bodies_read_for_next_version(Options::default().chunk_cache_bytes);
    let uncached = bodies_read_for_next_version(0);
    eprintln!(
        "next version of a 1 MiB value: {cached} blob bodies read with the chunk cache, {uncached} without"
    );
    assert!(cached <= 4, "with the cache, only the new chunks are read: {cached}");
    assert!(uncached >= 60, "without it, every chunk is read: {uncached}");
}

#[test]
fn a_damaged_chunk_is_reported_as_corrupt_not_returned() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed(16));
    let big = rng.bytes(300_000);
    let id = {
        let store = Store::open(dir.path(), opts(Compression::None)).unwrap();
        let id = store.put_blob("o", &big).unwrap();
        // A later batch, so the damaged one is not the log's tail (a damaged tail is cut
        // on open as torn, by design; see torn_tail.rs).
        store.put_blob("o", b"a later commit").unwrap();
        store.close().unwrap();
        id
    };
    // Flip a byte in the middle of the first chunk's body (random bytes are stored raw).
    let seg = undertext_tests::segment_files(dir.path())[0].clone();
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes.windows(64).position(|w| w == &big[1000..1064]).unwrap();
    bytes[at] ^= 0x40;
    std::fs::write(&seg, bytes).unwrap();
    let store = Store::open(dir.path(), opts(Compression::None)).unwrap();
    let err = store.get_blob("o", &id).unwrap_err();
    assert!(matches!(err, undertext::Error::Corrupt { .. }), "{err}");
    // A range in an undamaged chunk still reads.
    assert_eq!(store.get_blob_range("o", &id, 299_000..299_100).unwrap(), &big[299_000..299_100]);
    assert!(!store.check().unwrap().problems.is_empty());
}
