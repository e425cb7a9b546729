//! Claim: a log whose last segment is cut at any byte inside its last three batches opens,
//! and each of those batches is either whole or absent — whether the index is as a crash
//! leaves it (recording the log up to a point before the torn batches) or gone (and rebuilt
//! by replay).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext::{BlobId, Durability, Error, Options, Store};
use undertext_tests::{Frame, Rng, frames, seed, segment_files};

#[test]
fn truncation_at_every_offset_of_the_last_three_batches_keeps_batches_whole_or_absent() {
    // Not preallocated: a torn write shortens the file.
    torn_at_every_offset(false);
}

#[test]
fn a_torn_write_into_a_preallocated_segment_keeps_batches_whole_or_absent() {
    // Preallocated: the bytes after a torn write are the zeros that were there before.
    torn_at_every_offset(true);
}

fn torn_at_every_offset(preallocate: bool) {
    let seed = seed(0x7042);
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let opts =
        Options::default().durability(Durability::None).preallocate(preallocate).segment_size(256 << 10);
    let mut batches: Vec<Vec<(BlobId, Vec<u8>)>> = Vec::new();
    // The index as a crash leaves it: it records the log up to a point before the torn
    // batches (it is flushed only after the log is synced), here 37 of the 40 batches. An
    // index that records bytes the log then lacks is missing data, refused (`log_missing.rs`).
    let mut index_copy = Vec::new();
    let mut store = Store::open(dir.path(), opts.clone()).unwrap();
    {
        for b in 0..40u64 {
            if b == 37 {
                store.close().unwrap();
                index_copy = std::fs::read(dir.path().join("index.redb")).unwrap();
                store = Store::open(dir.path(), opts.clone()).unwrap();
            }
            let n = rng.range(1, 4) as usize;
            let contents: Vec<Vec<u8>> = (0..n)
                .map(|i| {
                    let mut c = format!("batch {b} blob {i} ").into_bytes();
                    let n = rng.range(8, 90) as usize;
                    c.extend(rng.bytes(n));
                    c
                })
                .collect();
            let refs: Vec<&[u8]> = contents.iter().map(|c| c.as_slice()).collect();
            let ids = store.put_blobs("o", &refs).unwrap();
            batches.push(ids.into_iter().zip(contents).collect());
        }
        store.close().unwrap();
    }
    let seg = segment_files(dir.path()).pop().unwrap();
    let original = std::fs::read(&seg).unwrap();
    let batch_frames: Vec<(u64, u64)> = frames(&seg)
        .into_iter()
        .filter_map(|f| match f {
            Frame::Batch { offset, end } => Some((offset, end)),
            Frame::Record { .. } => None,
        })
        .collect();
    assert_eq!(batch_frames.len(), batches.len());
    let first_cut = batch_frames[batch_frames.len() - 3].0;
    let data_end = batch_frames.last().unwrap().1;
    let mut opened = 0;
    for cut in first_cut..data_end {
        let mut torn = original[..cut as usize].to_vec();
        if preallocate {
            torn.resize(original.len(), 0);
        }
        std::fs::write(&seg, &torn).unwrap();
        let keep_index = cut % 2 == 0;
        if keep_index {
            std::fs::write(dir.path().join("index.redb"), &index_copy).unwrap();
        } else {
            std::fs::remove_file(dir.path().join("index.redb")).unwrap();
        }
        let store = Store::open(dir.path(), opts.clone())
            .unwrap_or_else(|e| panic!("open after cut at {cut} (index kept: {keep_index}): {e}"));
        for (i, &(_, end)) in batch_frames.iter().enumerate() {
            // In preallocated space a cut only zeroes bytes: a batch whose bytes past the cut
            // were zeros already (padding) is still whole.
            let whole =
                end <= cut || (preallocate && original[cut as usize..end as usize].iter().all(|&b| b == 0));
            for (id, content) in &batches[i] {
                match store.get_blob("o", id) {
                    Ok(got) => assert!(
                        whole && *got == **content,
                        "cut {cut} (index kept: {keep_index}): batch {i} partly present ({} bytes, whole: {whole}, equal: {})",
                        got.len(),
                        *got == **content
                    ),
                    Err(Error::NotFound { .. }) => {
                        assert!(!whole, "cut {cut}: whole batch {i} lost")
                    }
                    Err(e) => panic!("cut {cut}: batch {i}: {e}"),
                }
            }
        }
        // The store keeps working after the cut: a new write lands and reads back.
        let id = store.put_blob("o", format!("after cut {cut}").as_bytes()).unwrap();
        assert_eq!(&*store.get_blob("o", &id).unwrap(), format!("after cut {cut}").as_bytes());
        assert!(store.check().unwrap().is_ok());
        drop(store);
        opened += 1;
    }
    assert!(opened > 100, "only {opened} cuts tried");
}

#[test]
fn damage_before_the_tail_is_an_error_naming_segment_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default().durability(Durability::None);
    {
        let store = Store::open(dir.path(), opts.clone()).unwrap();
        for i in 0..10u32 {
            store.put_blob("o", format!("record number {i} with some text").as_bytes()).unwrap();
        }
        store.close().unwrap();
    }
    let seg = segment_files(dir.path()).pop().unwrap();
    let Frame::Batch { offset, .. } = frames(&seg)[0] else { panic!("first frame is a batch") };
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[offset as usize + 5] ^= 0x40;
    std::fs::write(&seg, &bytes).unwrap();
    // With the index gone, replay must cross the damaged batch and refuse.
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    match Store::open(dir.path(), opts) {
        Err(Error::Corrupt { segment, offset: at, reason }) => {
            assert_eq!(segment, 1);
            assert_eq!(at, offset, "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // Nothing was cut: the damaged bytes are still there for repair.
    assert_eq!(std::fs::read(&seg).unwrap(), bytes);
}
