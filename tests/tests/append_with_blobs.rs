//! Blobs and the messages that attach them, in one transaction.
//!
//! Claims: `append_with_blobs` costs one commit (one `fdatasync` in `Group` durability),
//! where `put_blobs` then `append` costs two; an attachment naming a blob that is neither
//! stored nor in the call is refused and writes nothing; `gc` keeps blobs a live chat
//! attaches and drops them with the chat.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext::{BlobId, ChatMeta, Error, NewMessage, Options, Part, Role, Store};

fn attaching(ids: &[BlobId]) -> NewMessage {
    NewMessage {
        role: Role::Assistant,
        parts: ids
            .iter()
            .map(|id| Part::Attachment { mime: "application/octet-stream".into(), blob: *id })
            .collect(),
        feedback: false,
    }
}

#[test]
fn blobs_and_their_message_commit_with_one_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    let syncs = |s: &Store| s.stats().unwrap().log_syncs;
    for i in 0..20u32 {
        let a = format!("channel value {i}").repeat(100);
        let b = format!("another value {i}").repeat(50);
        let before = syncs(&store);
        let (ids, seqs) = chat
            .append_with_blobs(
                &[a.as_bytes(), b.as_bytes()],
                vec![attaching(&[BlobId::of(a.as_bytes()), BlobId::of(b.as_bytes())])],
            )
            .unwrap();
        assert_eq!(syncs(&store) - before, 1, "one commit, one fdatasync");
        assert_eq!(ids, vec![BlobId::of(a.as_bytes()), BlobId::of(b.as_bytes())]);
        assert_eq!(&*store.get_blob("o", &ids[0]).unwrap(), a.as_bytes());
        assert_eq!(chat.get(seqs.start).unwrap().parts, attaching(&ids).parts);
    }
    // The two-call way, for comparison: two commits.
    let before = syncs(&store);
    let ids = store.put_blobs("o", &[b"x1".as_slice(), b"x2".as_slice()]).unwrap();
    chat.append(attaching(&ids)).unwrap();
    assert_eq!(syncs(&store) - before, 2);
}

#[test]
fn an_attachment_of_a_blob_never_stored_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    let missing = BlobId::of(b"never stored");
    let err = chat.append_with_blobs(&[b"stored now".as_slice()], vec![attaching(&[missing])]).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    assert!(err.to_string().contains(&missing.to_string()), "{err}");
    assert_eq!(chat.len(), 0);
    assert!(
        !store.unscoped_contains_blob(&BlobId::of(b"stored now")).unwrap(),
        "the refused call stored its blob"
    );
    assert!(matches!(chat.append(attaching(&[missing])), Err(Error::NotFound { .. })));
    // Stored earlier, attached later: fine.
    let id = store.put_blob("o", b"stored earlier").unwrap();
    chat.append(attaching(&[id])).unwrap();
}

#[test]
fn gc_keeps_attached_blobs_of_live_chats_and_drops_those_of_deleted_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (kept, dropped, shared) = {
        let store = Store::open(dir.path(), Options::default()).unwrap();
        let live = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
        let gone_id = store.create_chat("o", ChatMeta::default()).unwrap();
        let gone = store.chat("o", gone_id).unwrap();
        let k: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let d: Vec<u8> = (0..100_000u32).map(|i| (i * 13 % 241) as u8).collect();
        let s = b"shared value".to_vec();
        let (ki, _) =
            live.append_with_blobs(&[&k, &s], vec![attaching(&[BlobId::of(&k), BlobId::of(&s)])]).unwrap();
        let (di, _) =
            gone.append_with_blobs(&[&d, &s], vec![attaching(&[BlobId::of(&d), BlobId::of(&s)])]).unwrap();
        store.delete_chat("o", gone_id).unwrap();
        store.close().unwrap();
        (ki[0], di[0], ki[1])
    };
    let report = Store::gc(dir.path(), Options::default()).unwrap();
    assert!(report.blobs_removed >= 1, "{report:?}");
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert!(store.contains_blob("o", &kept).unwrap());
    assert!(store.contains_blob("o", &shared).unwrap());
    assert!(!store.unscoped_contains_blob(&dropped).unwrap());
    assert!(store.check().unwrap().problems.is_empty());
}
