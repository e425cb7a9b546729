//! Claim: a flipped bit in a sealed segment never comes back as data. The blob it falls
//! in reads as `Corrupt` naming its segment and record offset, every other blob still
//! reads, and `check` reports the damaged frame. This holds for reads that check only the
//! record's checksum (`Verify::Checksum`, what the LangGraph saver reads its items with) as
//! for those that hash the content too (the default).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext::{BlobId, Error, Options, Store, Verify};
use undertext_tests::{Frame, Rng, content, frames, seed, segment_files};

#[test]
fn one_flipped_bit_in_a_sealed_segment_is_reported_where_it_is_100_times() {
    let seed = seed(0xB17F);
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default().segment_size(32 << 10);
    let mut blobs: Vec<(BlobId, Vec<u8>)> = Vec::new();
    {
        let store = Store::open(dir.path(), opts.clone()).unwrap();
        for i in 0..120 {
            let c = content(seed, 0, i);
            blobs.push((store.put_blob("o", &c).unwrap(), c));
        }
        store.close().unwrap();
    }
    let segs = segment_files(dir.path());
    let sealed = &segs[..segs.len() - 1];
    assert!(sealed.len() >= 3, "need several sealed segments, have {}", sealed.len());
    let seg_no = |p: &std::path::Path| -> u64 { p.file_stem().unwrap().to_str().unwrap().parse().unwrap() };
    // Which blob lives in which record.
    let mut owner_of_record = std::collections::HashMap::new();
    for (k, (id, c)) in blobs.iter().enumerate() {
        // Find the record whose payload starts with this id.
        for p in sealed.iter().chain(segs.last()) {
            let bytes = std::fs::read(p).unwrap();
            for f in frames(p) {
                if let Frame::Record { offset, .. } = f
                    && bytes[offset as usize + 16..offset as usize + 48] == id.0
                {
                    owner_of_record.insert((seg_no(p), offset), k);
                }
            }
        }
        assert_eq!(BlobId::of(c), *id);
    }
    for trial in 0..100 {
        let path = &sealed[rng.range(0, sealed.len() as u64) as usize];
        let n = seg_no(path);
        let original = std::fs::read(path).unwrap();
        let byte = rng.range(0, original.len() as u64);
        let bit = rng.range(0, 8);
        let mut damaged = original.clone();
        damaged[byte as usize] ^= 1 << bit;
        std::fs::write(path, &damaged).unwrap();

        // Where the flip landed: a record, else a batch (header or padding), else the
        // segment header.
        // Map frames from the original bytes: the damaged file may not parse.
        std::fs::write(path, &original).unwrap();
        let map = frames(path);
        std::fs::write(path, &damaged).unwrap();
        let in_record = map.iter().find_map(|f| match *f {
            Frame::Record { offset, len } if (offset..offset + len).contains(&byte) => Some(offset),
            _ => None,
        });
        let in_batch = map.iter().find_map(|f| match *f {
            Frame::Batch { offset, end } if (offset..end).contains(&byte) => Some(offset),
            _ => None,
        });
        let expected_offset = in_record.or(in_batch).unwrap_or(0);
        let hit_blob = in_record.and_then(|o| owner_of_record.get(&(n, o)).copied());

        let store = Store::open(dir.path(), opts.clone()).unwrap();
        let each_way = blobs.iter().enumerate().flat_map(|(k, (id, c))| {
            let checksum_only = store.get_blobs_with("o", &[*id], Verify::Checksum).map(|mut b| b.remove(0));
            [(k, c, store.get_blob("o", id)), (k, c, checksum_only)]
        });
        for (k, c, got) in each_way {
            match got {
                Ok(got) => {
                    assert_ne!(Some(k), hit_blob, "trial {trial}: damaged blob {k} read back");
                    assert_eq!(*got, **c, "trial {trial}: blob {k} returned wrong bytes");
                }
                Err(Error::Corrupt { segment, offset, .. }) => {
                    assert_eq!(Some(k), hit_blob, "trial {trial}: undamaged blob {k} reported corrupt");
                    assert_eq!((segment, offset), (n, expected_offset), "trial {trial}");
                }
                Err(e) => panic!("trial {trial}: blob {k}: {e}"),
            }
        }
        let report = store.check().unwrap();
        assert!(
            report.problems.iter().any(|p| p.segment == n && p.offset == expected_offset),
            "trial {trial}: flip at {n}:{byte} bit {bit} (frame {expected_offset}) not reported: {:?}",
            report.problems
        );
        assert!(report.problems.iter().all(|p| p.segment == n), "trial {trial}: {:?}", report.problems);
        drop(store);
        std::fs::write(path, &original).unwrap();
    }
}
