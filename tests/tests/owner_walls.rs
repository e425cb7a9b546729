//! Owners are walls for every byte: a blob is read or referenced only through a grant its
//! owner holds (putting a blob grants it to the putter, archiving grants the archive, a
//! chat's appends bind grants to the chat), a blob an owner was not granted is the same
//! `NotFound` as an absent one, and `gc` keeps a blob while any owner's grant or live
//! reference holds it, dropping only the grants of deleted chats.
//!
//! The property test runs random operations of several owners over a small pool of contents
//! (so that owners store the same bytes), checks every owner's view of every content against
//! a model after each operation and after each `gc`, then deletes every chat and collects:
//! what stays stored is exactly what some owner's own grant holds.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use undertext::{BlobId, ChatId, ChatMeta, Durability, Error, NewMessage, Options, Part, Role, Store, Unit};
use undertext_tests::{Rng, seed};

fn opts() -> Options {
    Options::default().durability(Durability::None)
}

fn attaching(ids: &[BlobId]) -> NewMessage {
    NewMessage {
        role: Role::User,
        parts: ids
            .iter()
            .map(|id| Part::Attachment { mime: "application/octet-stream".into(), blob: *id })
            .collect(),
        feedback: false,
    }
}

/// The error's text with `id` replaced, to compare errors about different ids.
fn shape(e: &Error, id: &BlobId) -> String {
    e.to_string().replace(&id.to_string(), "<id>")
}

fn long_text(tag: &str) -> String {
    format!("{tag}\n") + &format!("line of {tag} output, with a number 42\n").repeat(400)
}

#[test]
fn a_blob_is_read_only_through_a_grant_and_another_owner_gets_the_same_not_found_as_for_an_absent_blob() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let secret = b"alice's api key: sk-0123456789";
    let id = store.put_blob("alice", secret).unwrap();
    let absent = BlobId::of(b"never stored by anyone");
    assert_eq!(&*store.get_blob("alice", &id).unwrap(), secret);

    let theirs = store.get_blob("bob", &id).unwrap_err();
    let none = store.get_blob("bob", &absent).unwrap_err();
    assert!(matches!(theirs, Error::NotFound { .. }), "{theirs}");
    assert_eq!(shape(&theirs, &id), shape(&none, &absent));
    let (l1, l2) = (store.blob_len("bob", &id).unwrap_err(), store.blob_len("bob", &absent).unwrap_err());
    assert_eq!(shape(&l1, &id), shape(&l2, &absent));
    let (r1, r2) = (
        store.get_blob_range("bob", &id, 0..1).unwrap_err(),
        store.get_blob_range("bob", &absent, 0..1).unwrap_err(),
    );
    assert_eq!(shape(&r1, &id), shape(&r2, &absent));
    assert!(!store.contains_blob("bob", &id).unwrap());
    assert!(store.contains_blob("alice", &id).unwrap());

    // An archive's id is in every preview a model sees: it grants its owner only.
    let log = long_text("build log");
    let a = store.archive("alice", &log).unwrap();
    assert_eq!(&*store.get_blob("alice", &a.id).unwrap(), log.as_bytes());
    assert!(matches!(store.get_blob("bob", &a.id), Err(Error::NotFound { .. })));
    assert!(matches!(store.read_context("bob", &a.id, 0..1, Unit::Chars), Err(Error::NotFound { .. })));

    // Storing the same bytes grants them to the one who stores them (they had the bytes).
    assert_eq!(store.put_blob("bob", secret).unwrap(), id);
    assert_eq!(&*store.get_blob("bob", &id).unwrap(), secret);
}

#[test]
fn an_attachment_naming_a_blob_the_owner_was_not_granted_is_refused_like_an_absent_one_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let id = store.put_blob("alice", b"alice's screenshot").unwrap();
    let archived = store.archive("alice", &long_text("alice's log")).unwrap().id;
    let absent = BlobId::of(b"guessed text");
    let bob = store.chat("bob", store.create_chat("bob", ChatMeta::default()).unwrap()).unwrap();
    bob.append(NewMessage::user("first")).unwrap();
    let before = store.stats().unwrap().log_bytes;

    let none = bob.append(attaching(&[absent])).unwrap_err();
    for theirs in [id, archived] {
        let e = bob.append(attaching(&[theirs])).unwrap_err();
        assert!(matches!(e, Error::NotFound { .. }), "{e}");
        assert_eq!(shape(&e, &theirs), shape(&none, &absent), "an existence oracle");
        let e = bob.append_with_blobs(&[b"bob's own".as_slice()], vec![attaching(&[theirs])]).unwrap_err();
        assert!(matches!(e, Error::NotFound { .. }), "{e}");
        let e = bob.edit(0, attaching(&[theirs]), 0).unwrap_err();
        assert!(matches!(e, Error::NotFound { .. }), "an edit: {e}");
    }
    assert_eq!(store.stats().unwrap().log_bytes, before, "a refused call wrote something");
    assert_eq!(bob.len(), 1);

    // Once bob stores the bytes himself, he may attach them.
    store.put_blob("bob", b"alice's screenshot").unwrap();
    bob.append(attaching(&[id])).unwrap();
}

/// The reported defect: `gc` did not count archive grants as references, so bob deleting a
/// chat that held the same text as alice's archive destroyed alice's archive.
#[test]
fn gc_keeps_an_owners_archive_when_another_owners_deleted_chat_held_the_same_text() {
    let dir = tempfile::tempdir().unwrap();
    let text = long_text("shared output");
    let (id, bob_chat) = {
        let store = Store::open(dir.path(), opts()).unwrap();
        let id = store.archive("alice", &text).unwrap().id;
        let bob_chat = store.create_chat("bob", ChatMeta::default()).unwrap();
        let chat = store.chat("bob", bob_chat).unwrap();
        chat.append(NewMessage::user("run it")).unwrap();
        chat.append(NewMessage {
            role: Role::Assistant,
            parts: vec![Part::ToolCall { id: "c1".into(), name: "run".into(), args: "{}".into() }],
            feedback: false,
        })
        .unwrap();
        chat.append(NewMessage::tool_result("c1", text.clone())).unwrap();
        store.delete_chat("bob", bob_chat).unwrap();
        store.close().unwrap();
        (id, bob_chat)
    };
    Store::gc(dir.path(), opts()).unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let a = store.archive_ref("alice", &id).unwrap();
    assert_eq!(store.read_context("alice", &id, 0..a.chars, Unit::Chars).unwrap(), text);
    assert!(matches!(store.read_context("bob", &id, 0..1, Unit::Chars), Err(Error::NotFound { .. })));
    assert!(matches!(store.chat("bob", bob_chat), Err(Error::NotFound { .. })));
}

#[test]
fn a_deleted_chats_grants_go_with_it_and_an_owners_own_blob_outlives_the_chat_that_attached_it() {
    let dir = tempfile::tempdir().unwrap();
    let only_chat = long_text("only in the chat");
    let (own, with_chat) = {
        let store = Store::open(dir.path(), opts()).unwrap();
        let own = store.put_blob("alice", b"alice keeps this").unwrap();
        let c = store.create_chat("alice", ChatMeta::default()).unwrap();
        let chat = store.chat("alice", c).unwrap();
        let (ids, _) =
            chat.append_with_blobs(&[b"stored with the chat".as_slice()], vec![attaching(&[own])]).unwrap();
        chat.append(NewMessage::tool_result("c", only_chat.clone())).unwrap();
        assert!(store.contains_blob("alice", &ids[0]).unwrap());
        store.delete_chat("alice", c).unwrap();
        // At once, not at gc: the chat's grants are gone.
        assert!(!store.contains_blob("alice", &ids[0]).unwrap());
        assert!(!store.contains_blob("alice", &BlobId::of(only_chat.as_bytes())).unwrap());
        assert!(store.contains_blob("alice", &own).unwrap());
        store.close().unwrap();
        (own, ids[0])
    };
    Store::gc(dir.path(), opts()).unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    assert_eq!(&*store.get_blob("alice", &own).unwrap(), b"alice keeps this");
    assert!(!store.unscoped_contains_blob(&with_chat).unwrap(), "the chat's blob outlived it");
    assert!(!store.unscoped_contains_blob(&BlobId::of(only_chat.as_bytes())).unwrap());
    assert!(store.check().unwrap().is_ok());
}

// ---- the property ----

const OWNERS: [&str; 3] = ["ann", "ben", "cat"];
const POOL: usize = 6;

/// Content `k` of the pool: long enough to be archived as a tool result.
fn content(k: usize) -> String {
    long_text(&format!("content {k}"))
}

/// What every owner may read, by the rule.
#[derive(Debug, Default)]
struct Model {
    /// Own grants: (owner, content).
    own: BTreeSet<(usize, usize)>,
    /// Live chats: id -> (owner, contents bound to it).
    chats: BTreeMap<ChatId, (usize, BTreeSet<usize>)>,
}

impl Model {
    fn granted(&self, owner: usize, k: usize) -> bool {
        self.own.contains(&(owner, k)) || self.chats.values().any(|(o, ks)| *o == owner && ks.contains(&k))
    }
}

/// Every owner's view of every content equals the model's, byte for byte: read together
/// with `get_blobs` first (before the single reads below remember any grant), then one by one.
fn verify(store: &Store, m: &Model, step: &str) {
    for (o, owner) in OWNERS.iter().enumerate() {
        let (granted, refused): (Vec<usize>, Vec<usize>) = (0..POOL).partition(|&k| m.granted(o, k));
        let ids: Vec<BlobId> = granted.iter().map(|&k| BlobId::of(content(k).as_bytes())).collect();
        let got = store.get_blobs(owner, &ids).unwrap_or_else(|e| panic!("{step}: {owner}'s get_blobs: {e}"));
        for (&k, b) in granted.iter().zip(&got) {
            assert!(&**b == content(k).as_bytes(), "{step}: {owner}'s get_blobs read wrong bytes for {k}");
        }
        // One content not granted among granted ones refuses the whole call.
        for &k in &refused {
            let mut with = ids.clone();
            with.insert(with.len() / 2, BlobId::of(content(k).as_bytes()));
            let r = store.get_blobs(owner, &with);
            assert!(
                matches!(r, Err(Error::NotFound { .. })),
                "{step}: {owner}'s get_blobs reads {k}, never granted"
            );
        }
        for k in 0..POOL {
            let text = content(k);
            let id = BlobId::of(text.as_bytes());
            let got = store.get_blob(owner, &id);
            if m.granted(o, k) {
                let got = got.unwrap_or_else(|e| panic!("{step}: {owner} lost content {k}: {e}"));
                assert!(&*got == text.as_bytes(), "{step}: {owner} read wrong bytes for content {k}");
            } else {
                assert!(
                    matches!(got, Err(Error::NotFound { .. })),
                    "{step}: {owner} reads content {k}, never granted"
                );
            }
            assert_eq!(
                store.contains_blob(owner, &id).unwrap(),
                m.granted(o, k),
                "{step}: {owner} tests for {k}"
            );
        }
    }
}

fn reopen_after_gc(dir: &Path, store: Store) -> Store {
    store.close().unwrap();
    Store::gc(dir, opts()).unwrap();
    Store::open(dir, opts()).unwrap()
}

#[test]
fn random_operations_of_several_owners_never_read_or_keep_alive_what_was_not_granted_and_lose_nothing_granted()
 {
    let seed = seed(0x0516);
    for round in 0..6u64 {
        let mut rng = Rng::new(seed.wrapping_add(round));
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path(), opts()).unwrap();
        let mut m = Model::default();
        for step in 0..60 {
            let o = rng.range(0, OWNERS.len() as u64) as usize;
            let owner = OWNERS[o];
            let k = rng.range(0, POOL as u64) as usize;
            let text = content(k);
            let id = BlobId::of(text.as_bytes());
            let pick_chat = |m: &Model, rng: &mut Rng| {
                let mine: Vec<ChatId> =
                    m.chats.iter().filter(|(_, (co, _))| *co == o).map(|(id, _)| *id).collect();
                (!mine.is_empty()).then(|| mine[rng.range(0, mine.len() as u64) as usize])
            };
            let what = match rng.range(0, 9) {
                0 => {
                    store.put_blob(owner, text.as_bytes()).unwrap();
                    m.own.insert((o, k));
                    "put_blob"
                }
                1 => {
                    store.archive(owner, &text).unwrap();
                    m.own.insert((o, k));
                    "archive"
                }
                2 => {
                    let c = store.create_chat(owner, ChatMeta::default()).unwrap();
                    m.chats.insert(c, (o, BTreeSet::new()));
                    "create_chat"
                }
                3 => {
                    let Some(c) = pick_chat(&m, &mut rng) else { continue };
                    store
                        .chat(owner, c)
                        .unwrap()
                        .append_with_blobs(&[text.as_bytes()], vec![attaching(&[id])])
                        .unwrap();
                    m.chats.get_mut(&c).unwrap().1.insert(k);
                    "append_with_blobs"
                }
                4 => {
                    let Some(c) = pick_chat(&m, &mut rng) else { continue };
                    let r = store.chat(owner, c).unwrap().append(attaching(&[id]));
                    if m.granted(o, k) {
                        r.unwrap();
                        m.chats.get_mut(&c).unwrap().1.insert(k);
                    } else {
                        assert!(matches!(r, Err(Error::NotFound { .. })), "round {round} step {step}: {r:?}");
                    }
                    "attach"
                }
                5 => {
                    let Some(c) = pick_chat(&m, &mut rng) else { continue };
                    store
                        .chat(owner, c)
                        .unwrap()
                        .append(NewMessage::tool_result("call", text.clone()))
                        .unwrap();
                    m.chats.get_mut(&c).unwrap().1.insert(k);
                    "tool result"
                }
                6 | 7 => {
                    let Some(c) = pick_chat(&m, &mut rng) else { continue };
                    store.delete_chat(owner, c).unwrap();
                    m.chats.remove(&c);
                    "delete_chat"
                }
                _ => {
                    store = reopen_after_gc(dir.path(), store);
                    "gc"
                }
            };
            verify(
                &store,
                &m,
                &format!("seed {seed} round {round} step {step} ({what} by {owner}, content {k})"),
            );
        }
        // Every chat deleted, then collected: what stays is exactly what own grants hold.
        for c in m.chats.keys().copied().collect::<Vec<_>>() {
            let (o, _) = m.chats.remove(&c).unwrap();
            store.delete_chat(OWNERS[o], c).unwrap();
        }
        store = reopen_after_gc(dir.path(), store);
        verify(&store, &m, &format!("seed {seed} round {round}: after deleting every chat and gc"));
        for k in 0..POOL {
            let held = OWNERS.iter().enumerate().any(|(o, _)| m.own.contains(&(o, k)));
            let id = BlobId::of(content(k).as_bytes());
            assert_eq!(
                store.unscoped_contains_blob(&id).unwrap(),
                held,
                "seed {seed} round {round}: content {k} stored = {held} by the grants"
            );
        }
        assert!(store.check().unwrap().is_ok(), "seed {seed} round {round}");
    }
}
