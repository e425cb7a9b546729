//! What closing gives back: the index its free pages, the log its preallocated zeros, and a
//! seal that lets the next open trust the index without reading every page.
//!
//! redb cannot reuse the pages that its non-durable commits free until a later durable
//! commit, so an index written by many small flushes grows mostly free pages. Closing the
//! store compacts such an index; nothing it indexes is lost.
//!
//! The seal (engine/FORMAT.md, "The index's seal") holds only for the file as the clean close
//! left it: any write since, a copy, a file opened unverified, brings verification back.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::time::Duration;

use undertext::{BlobId, Durability, Error, IndexAtOpen, NewMessage, Options, Store};

fn churn_options() -> Options {
    // Many small non-durable index commits, one durable one at close.
    Options::default()
        .durability(Durability::None)
        .index_flush_interval(Duration::from_millis(1))
        .index_durable_interval(Duration::from_secs(3600))
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

/// A store of `chats` chats, three messages each, closed; returns what each chat holds.
fn closed_store(dir: &std::path::Path, chats: u32) -> Vec<(undertext::ChatId, Vec<undertext::Message>)> {
    let store = Store::open(dir, Options::default()).unwrap();
    let mut out = Vec::new();
    for c in 0..chats {
        let id = store.create_chat("o", Default::default()).unwrap();
        let chat = store.chat("o", id).unwrap();
        chat.append(NewMessage::user(format!("chat {c}: list the files"))).unwrap();
        chat.append(NewMessage::assistant(format!("chat {c}: {}", "src/main.rs ".repeat(20)))).unwrap();
        chat.append(NewMessage::user(format!("chat {c}: thanks"))).unwrap();
        out.push((id, chat.messages().unwrap()));
    }
    store.close().unwrap();
    out
}

fn reads_as_written(store: &Store, chats: &[(undertext::ChatId, Vec<undertext::Message>)]) {
    for (id, messages) in chats {
        assert_eq!(&store.chat("o", *id).unwrap().messages().unwrap(), messages);
    }
}

#[test]
fn a_cleanly_closed_index_opens_sealed_and_reads_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut chats = closed_store(dir.path(), 300);
    for round in 0..3 {
        let store = Store::open(dir.path(), Options::default()).unwrap();
        assert_eq!(store.stats().unwrap().index_at_open, IndexAtOpen::Sealed, "round {round}");
        reads_as_written(&store, &chats);
        if round == 1 {
            // A session that writes: its close seals the file it leaves.
            let chat = store.chat("o", chats[0].0).unwrap();
            chat.append(NewMessage::user("one more")).unwrap();
            chats[0].1 = chat.messages().unwrap();
        }
        store.close().unwrap();
    }
    assert!(Store::open(dir.path(), Options::default()).unwrap().check().unwrap().is_ok());
}

#[test]
fn any_write_to_a_sealed_index_brings_verification_back_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("index.redb");
    let chats = closed_store(dir.path(), 300);
    // The same bytes written back in place, right after the close: the file's content is
    // unchanged, but something wrote it.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&index).unwrap();
        let mut page = vec![0u8; 4096];
        f.read_exact_at(&mut page, 8192).unwrap();
        f.write_all_at(&page, 8192).unwrap();
    }
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(store.stats().unwrap().index_at_open, IndexAtOpen::Verified);
    reads_as_written(&store, &chats);
    store.close().unwrap();

    // Damage written in place right after a clean close (every page past the first two
    // inverted): refused at open, or found and repaired by redb, never trusted unread.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&index).unwrap();
        let len = f.metadata().unwrap().len();
        let mut bytes = vec![0u8; (len - 8192) as usize];
        f.read_exact_at(&mut bytes, 8192).unwrap();
        bytes.iter_mut().for_each(|b| *b = !*b);
        f.write_all_at(&bytes, 8192).unwrap();
    }
    match Store::open(dir.path(), Options::default()) {
        Err(Error::Index { message, .. }) => assert!(message.contains("check --rebuild"), "{message}"),
        Err(e) => panic!("expected the damaged index refused as Error::Index, found {e}"),
        Ok(store) => {
            // A file redb cannot open at all is made anew from the log.
            let at_open = store.stats().unwrap().index_at_open;
            assert!(matches!(at_open, IndexAtOpen::Created | IndexAtOpen::Verified), "{at_open:?}");
            reads_as_written(&store, &chats);
        }
    }
}

#[test]
fn an_index_copied_or_opened_unverified_is_verified_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("index.redb");
    let chats = closed_store(dir.path(), 50);
    // Another file in its place, same bytes, seal and all.
    std::fs::copy(&index, dir.path().join("copy")).unwrap();
    std::fs::rename(dir.path().join("copy"), &index).unwrap();
    let store = Store::open(dir.path(), Options::default().verify_index_on_open(false)).unwrap();
    assert_eq!(store.stats().unwrap().index_at_open, IndexAtOpen::Unverified);
    reads_as_written(&store, &chats);
    // An open that did not verify leaves no seal: its close cannot vouch for the file.
    store.close().unwrap();
    let store = Store::open(dir.path(), Options::default().verify_index_on_open(false)).unwrap();
    assert_eq!(store.stats().unwrap().index_at_open, IndexAtOpen::Unverified);
    store.close().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(store.stats().unwrap().index_at_open, IndexAtOpen::Verified);
    store.close().unwrap();
    // Verified, then closed: sealed again, trusted with verification off too.
    let store = Store::open(dir.path(), Options::default().verify_index_on_open(false)).unwrap();
    assert_eq!(store.stats().unwrap().index_at_open, IndexAtOpen::Sealed);
    reads_as_written(&store, &chats);
}

#[test]
fn a_store_closed_while_a_chat_handle_lives_seals_its_index_when_the_handle_drops() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let id = store.create_chat("o", Default::default()).unwrap();
    let chat = store.chat("o", id).unwrap();
    chat.append(NewMessage::user("still holding the chat")).unwrap();
    store.close().unwrap();
    chat.append(NewMessage::assistant("written after close() through the live handle")).unwrap();
    let messages = chat.messages().unwrap();
    drop(chat);
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(store.stats().unwrap().index_at_open, IndexAtOpen::Sealed);
    assert_eq!(store.chat("o", id).unwrap().messages().unwrap(), messages);
}
