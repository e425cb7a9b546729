//! Claim: `Store::find_chats` (an index lookup) answers exactly what a scan of the owner's
//! chats answers, for titles and `extra` entries, after metadata edits and deletions, after a
//! reopen and after `rebuild_index`; it never returns another owner's chats.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::collections::BTreeMap;

use undertext::{ChatId, ChatMeta, MetaField, Options, Page, Store};
use undertext_tests::{Rng, seed};

const OWNERS: [&str; 3] = ["alice", "bob", "carol"];
const KEYS: [&str; 3] = ["thread", "kind", "ns"];

/// A small random value (so that several chats share one), sometimes long.
fn value(rng: &mut Rng) -> String {
    match rng.range(0, 10) {
        0 => "x".repeat(300 + rng.range(0, 3) as usize),
        1 => String::new(),
        n => format!("v{}", n % 4),
    }
}

fn meta(rng: &mut Rng) -> ChatMeta {
    let mut extra = BTreeMap::new();
    for k in KEYS {
        if rng.range(0, 3) > 0 {
            extra.insert(k.to_string(), value(rng));
        }
    }
    ChatMeta { title: value(rng), model: "m".into(), draft: String::new(), extra }
}

/// What a scan of `owner`'s chats finds, as ids in `Store::chats` order.
fn scan(store: &Store, owner: &str, field: MetaField<'_>, value: &str) -> Vec<ChatId> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let p = store.chats(owner, Page { limit: 1000, after }).unwrap();
        for c in p.chats {
            let hit = match field {
                MetaField::Title => c.meta.title == value,
                MetaField::Extra(k) => c.meta.extra.get(k).is_some_and(|v| v == value),
            };
            if hit {
                out.push(c.id);
            }
        }
        match p.next {
            Some(n) => after = Some(n),
            None => return out,
        }
    }
}

/// Every (owner, field, value) query over the values in play gives the scan's answer.
fn assert_agrees(store: &Store, when: &str) {
    let mut values: Vec<String> = vec!["v0".into(), "v1".into(), "v2".into(), "v3".into(), String::new()];
    values.extend((300..303).map(|n| "x".repeat(n)));
    values.push("absent".into());
    let mut fields = vec![MetaField::Title];
    fields.extend(KEYS.iter().map(|k| MetaField::Extra(k)));
    fields.push(MetaField::Extra("never-set"));
    for owner in OWNERS {
        for field in &fields {
            for v in &values {
                let found: Vec<ChatId> =
                    store.find_chats(owner, *field, v).unwrap().iter().map(|c| c.id).collect();
                assert_eq!(found, scan(store, owner, *field, v), "{when}: {owner} {field:?} = {:.20}", v);
            }
        }
    }
}

#[test]
fn find_chats_equals_a_scan_on_random_metadata_through_edits_deletes_reopen_and_rebuild() {
    let seed = seed(18);
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut live: Vec<(&str, ChatId)> = Vec::new();
    {
        let store = Store::open(dir.path(), Options::default()).unwrap();
        for _ in 0..60 {
            let owner = OWNERS[rng.range(0, 3) as usize];
            live.push((owner, store.create_chat(owner, meta(&mut rng)).unwrap()));
        }
        assert_agrees(&store, "after create");
        // Metadata edits: the chat is found by its new values only.
        for _ in 0..40 {
            let (owner, id) = live[rng.range(0, live.len() as u64) as usize];
            store.chat(owner, id).unwrap().set_meta(meta(&mut rng)).unwrap();
        }
        assert_agrees(&store, "after edits");
        for _ in 0..10 {
            let (owner, id) = live.remove(rng.range(0, live.len() as u64) as usize);
            store.delete_chat(owner, id).unwrap();
        }
        assert_agrees(&store, "after deletes");
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert_agrees(&store, "after reopen");
    store.rebuild_index().unwrap();
    assert_agrees(&store, "after rebuild_index");
    assert!(store.check().unwrap().is_ok(), "the lookup tables differ from a rebuild");
    drop(store);
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert_agrees(&store, "after the index file was removed");
}

#[test]
fn another_owners_chat_is_never_found_and_a_changed_value_no_longer_finds_a_chat() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let extra: BTreeMap<String, String> = [("thread".to_string(), "t-1".to_string())].into();
    let m = ChatMeta { title: "same".into(), extra, ..ChatMeta::default() };
    let a = store.create_chat("alice", m.clone()).unwrap();
    let b = store.create_chat("bob", m.clone()).unwrap();
    let ids =
        |owner, field, v| store.find_chats(owner, field, v).unwrap().iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(ids("alice", MetaField::Extra("thread"), "t-1"), vec![a]);
    assert_eq!(ids("bob", MetaField::Title, "same"), vec![b]);
    assert_eq!(ids("mallory", MetaField::Title, "same"), vec![]);
    // The same key under the title field, and the title's value under an extra key, are
    // other fields.
    assert_eq!(ids("alice", MetaField::Extra("title"), "same"), vec![]);
    let chat = store.chat("alice", a).unwrap();
    chat.set_meta(ChatMeta { title: "renamed".into(), ..m }).unwrap();
    assert_eq!(ids("alice", MetaField::Title, "same"), vec![]);
    assert_eq!(ids("alice", MetaField::Title, "renamed"), vec![a]);
    let found = store.find_chats("alice", MetaField::Title, "renamed").unwrap();
    assert_eq!(found[0].meta.title, "renamed");
    assert_eq!(found[0].meta.extra.get("thread").map(String::as_str), Some("t-1"));
    store.delete_chat("alice", a).unwrap();
    assert_eq!(ids("alice", MetaField::Title, "renamed"), vec![]);
    assert_eq!(ids("bob", MetaField::Title, "same"), vec![b]);
    assert!(store.find_chats("", MetaField::Title, "same").is_err(), "an empty owner is refused");
}
