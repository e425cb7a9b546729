//! What closing gives back: the index its free pages, the log its preallocated zeros.
//!
//! redb cannot reuse the pages that its non-durable commits free until a later durable
//! commit, so an index written by many small flushes grows mostly free pages. Closing the
//! store compacts such an index; nothing it indexes is lost.

use std::time::Duration;

use undertext::{BlobId, Durability, Options, Store};

fn churn_options() -> Options {
    Options::default().durability(Durability::None).// Many small non-durable index commits(// Many small non-durable index commits).one durable one at close.
        index_flush_interval(Duration::from_millis(1)).index_durable_interval(Duration::from_secs(3600))
}

#[test]
fn closing_compacts_an_index_of_mostly_free_pages_and_keeps_every_entry() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("index.redb");
    let mut ids: Vec<(BlobId, Vec<u8>)> = Vec::new();
    let open_len = {
        let store = Store::open(dir.path(), churn_options()).unwrap();
        for i in 0..4000u32 {
            let body = format!("tool result {i}: {}", "x".repeat((i % 97) as usize)).into_bytes();
            ids.push((store.put_blob("o", &body).unwrap(), body));
            if i % 50 == 0 {
                std::thread::sleep(Duration::from_millis(2)); // let a flush land between batches
            }
        }
        store.sync().unwrap();
        std::fs::metadata(&index).unwrap().len()
    };
    let closed_len = std::fs::metadata(&index).unwrap().len();
    assert!(
        closed_len < open_len,
        "the index should shrink at close: {open_len} bytes open, {closed_len} bytes closed"
    );
    let store = Store::open(dir.path(), Options::default()).unwrap();
    for (id, body) in &ids {
        assert_eq!(&*store.get_blob("o", id).unwrap(), body.as_slice());
    }
    assert!(store.check().unwrap().is_ok());
}

#[test]
fn a_closed_store_holds_its_data_an_open_writes_no_zeros_and_the_first_write_preallocates_again() {
    let dir = tempfile::tempdir().unwrap();
    let seg = dir.path().join("log").join("00000001.seg");
    let len = || std::fs::metadata(&seg).unwrap().len();
    let mut blobs = Vec::new();
    {
        let store = Store::open(dir.path(), Options::default()).unwrap();
        assert_eq!(len(), 1 << 20, "a new store's first segment is preallocated to 1 MiB");
        for i in 0..50u32 {
            let body = format!("result {i}").into_bytes();
            blobs.push((store.put_blob("o", &body).unwrap(), body));
        }
    }
    let closed = len();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(store.stats().unwrap().log_bytes, closed, "closed, the segment is exactly its data");
    assert_eq!(len(), closed, "an open writes no zeros: a process that only reads pays for none");
    blobs.push((store.put_blob("o", b"after reopen").unwrap(), b"after reopen".to_vec()));
    assert_eq!(len(), 1 << 20, "the first write preallocates the segment again");
    drop(store);
    let store = Store::open(dir.path(), Options::default()).unwrap();
    for (id, body) in &blobs {
        assert_eq!(&*store.get_blob("o", id).unwrap(), body.as_slice());
    }
    assert!(store.check().unwrap().is_ok());
}

#[test]
fn a_closed_store_keeps_no_prepared_segment() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let data_bytes = {
        let store =
            Store::open(dir.path(), Options::default().compression(undertext::Compression::None)).unwrap();
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..48 {
            // 48 × 64 KiB of incompressible bytes: segments 1 and 2 fill, 3 is active.
            let body: Vec<u8> = (0..64 << 10)
                .map(|_| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng as u8
                })
                .collect();
            store.put_blob("o", &body).unwrap();
        }
        store.sync().unwrap();
        assert!(store.stats().unwrap().segments >= 3);
        store.stats().unwrap().log_bytes
    };
    let names: Vec<String> =
        std::fs::read_dir(&log).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(names.iter().all(|n| n.ends_with(".seg")), "only segments stay after close: {names:?}");
    let on_disk: u64 = std::fs::read_dir(&log).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    assert_eq!(on_disk, data_bytes, "the closed log's files are its data");
}
