//! Claims: content is stored once however often it is put; a second opener is refused at
//! once with the holder's pid; bad arguments are clear errors.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::process::Command;
use std::time::Instant;

use undertext::{BlobId, Durability, Error, Options, Store};
use undertext_tests::Rng;

/// Bytes the store holds: log data (not the preallocated tail) and the index file.
fn store_bytes(store: &Store) -> u64 {
    let s = store.stats().unwrap();
    s.log_bytes + s.index_bytes
}

#[test]
fn putting_one_megabyte_ten_times_stores_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    store.put_blob("o", b"warm up the index file").unwrap();
    store.sync().unwrap();
    let before = store_bytes(&store);
    let content = Rng::new(5).bytes(1 << 20); // incompressible: compression cannot hide a second copy
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.push(store.put_blob("o", &content).unwrap());
    }
    store.sync().unwrap();
    let grown = store_bytes(&store) - before;
    eprintln!("log+index grew by {grown} bytes; {:?}", store.stats().unwrap());
    assert!(ids.iter().all(|id| *id == ids[0]));
    // 1.1 MiB: the blob once, plus the log's frame and the index's page-level growth.
    assert!(grown < 11 * (1 << 20) / 10, "store grew by {grown} bytes for one 1 MiB blob put 10 times");
    assert!(grown >= 1 << 20, "the blob itself must be stored ({grown} bytes)");
    assert_eq!(*store.get_blob("o", &ids[0]).unwrap(), *content);
}

#[test]
fn a_second_process_gets_locked_with_the_holders_pid_without_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let _store = Store::open(dir.path(), Options::default()).unwrap();
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_lock_probe")).arg(dir.path()).output().unwrap();
    let wall = t.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    let parts: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(parts.first(), Some(&"locked"), "probe said: {text}");
    assert_eq!(parts[1], std::process::id().to_string(), "lock error must name the holder");
    let us: u64 = parts[2].parse().unwrap();
    // Not a timing assertion: a generous bound that only a blocking lock would cross.
    eprintln!("second opener refused after {us} µs (process wall time {wall:?})");
    assert!(us < 5_000_000, "open waited {us} µs: it must not block on the lock");
}

#[test]
fn a_second_handle_in_the_same_process_is_locked_too_and_the_lock_ends_with_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert!(matches!(Store::open(dir.path(), Options::default()), Err(Error::Locked { .. })));
    drop(store);
    Store::open(dir.path(), Options::default()).unwrap();
}

#[test]
fn bad_arguments_and_missing_things_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let err = Store::open(&missing, Options::default().create_if_missing(false)).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    let err = Store::open(dir.path(), Options::default().segment_size(10)).unwrap_err();
    assert!(err.to_string().contains("expected at least 4096 bytes, found 10"), "{err}");
    for opts in [Options::default().preview_chars(127), Options::default().guard_preview_chars(0)] {
        let err = Store::open(dir.path(), opts.clone()).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert!(err.to_string().contains("preview_chars: expected at least 128 characters"), "{err}");
        assert!(!dir.path().join("log").exists(), "a refused open made the store");
        let err = Store::open_read_only_with(dir.path(), opts).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
    Store::open(dir.path(), Options::default().preview_chars(128).guard_preview_chars(128))
        .unwrap()
        .close()
        .unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let err = store.get_blob("o", &BlobId::of(b"never stored")).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    assert!(!store.contains_blob("o", &BlobId::of(b"never stored")).unwrap());
}

#[test]
fn every_durability_mode_reads_back_after_reopen() {
    for durability in [Durability::Immediate, Durability::Group, Durability::None] {
        let dir = tempfile::tempdir().unwrap();
        let ids: Vec<_> = {
            let store = Store::open(dir.path(), Options::default().durability(durability)).unwrap();
            (0..50u32).map(|i| store.put_blob("o", &i.to_le_bytes().repeat(100)).unwrap()).collect()
        };
        let store = Store::open(dir.path(), Options::default()).unwrap();
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(
                *store.get_blob("o", id).unwrap(),
                *(i as u32).to_le_bytes().repeat(100),
                "{durability:?}"
            );
        }
    }
}

#[test]
fn group_commit_shares_fsyncs_between_concurrent_writers() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let before = store.stats().unwrap().log_syncs;
    let per_thread = 200u64;
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let store = &store;
            s.spawn(move || {
                for i in 0..per_thread {
                    store.put_blob("o", format!("writer {t} write {i}").as_bytes()).unwrap();
                }
            });
        }
    });
    let syncs = store.stats().unwrap().log_syncs - before;
    // Each put waited for an fsync; never more fsyncs than puts (no second fsync per commit).
    assert!(syncs <= 4 * per_thread, "{syncs} fsyncs for {} puts", 4 * per_thread);
    eprintln!("{} puts from 4 threads shared {syncs} fsyncs", 4 * per_thread);
}

/// Listing an owner's chats from the index (after a reopen, nothing cached): newest activity
/// first, ties (chats of one millisecond) by id, and paging with the cursor neither skips nor
/// repeats a chat, whatever the page size: the class of an index key order that the listing
/// reads backwards.
#[test]
fn chats_listed_from_the_index_page_newest_first_with_ties_by_id() {
    use undertext::{ChatMeta, NewMessage, Page};
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
        let ids: Vec<_> = (0..300).map(|_| store.create_chat("o", ChatMeta::default()).unwrap()).collect();
        store.create_chat("other", ChatMeta::default()).unwrap();
        for id in ids.iter().step_by(7) {
            store.chat("o", *id).unwrap().append(NewMessage::user("later")).unwrap();
        }
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let all = store.chats("o", Page { limit: 1000, after: None }).unwrap();
    assert!(all.next.is_none());
    let keys: Vec<_> = all.chats.iter().map(|c| (c.last_activity_ms, c.id)).collect();
    let mut want = keys.clone();
    want.sort_by_key(|&(ms, id)| (u64::MAX - ms, id));
    assert_eq!(keys, want);
    assert_eq!(keys.len(), 300);
    assert!(keys.windows(2).any(|w| w[0].0 == w[1].0), "no two chats share a millisecond: no ties tested");
    for limit in [1, 7, 64] {
        let (mut got, mut after) = (Vec::new(), None);
        loop {
            let page = store.chats("o", Page { limit, after }).unwrap();
            got.extend(page.chats.iter().map(|c| (c.last_activity_ms, c.id)));
            match page.next {
                Some(c) => after = Some(c),
                None => break,
            }
        }
        assert_eq!(got, keys, "pages of {limit}");
    }
}
