//! Claims (issue 34.6, owners are walls): nothing an owner can observe tells whether another
//! owner stored a given text. Two stores differ only in what `bob` stored — in one, the very
//! texts `alice` then writes (as a blob, an archive, a message and a tool result); in the
//! other, different texts of the same lengths. `alice` then does the same calls in both, and
//! every figure and answer she gets is the same: her `owner_stats`, her chat list, her
//! views, her search hits, her blob ids and reads. The store-wide `stats` (for the store's
//! operator) does differ — that is why owners get `owner_stats`.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext::Budget;
use undertext::{
    ChatMeta, Durability, NewMessage, Options, Page, Part, Role, SearchScope, Store, ToolContent, Unit,
};
use undertext_tests::{Rng, seed};

fn text(rng: &mut Rng, tag: &str, n: usize) -> String {
    let mut s = String::with_capacity(n + 40);
    while s.len() < n {
        s.push_str(&format!("{tag} line {} value {}\n", s.len(), rng.next_u64() % 100_000));
    }
    s.truncate(n);
    s
}

/// What `bob` stores: `texts` as a blob, an archive, a message and a tool result.
fn bob_stores(store: &Store, texts: &[String]) {
    let chat = store.chat("bob", store.create_chat("bob", ChatMeta::default()).unwrap()).unwrap();
    for t in texts {
        store.put_blob("bob", t.as_bytes()).unwrap();
        store.archive("bob", t).unwrap();
        chat.append(NewMessage::user(t.clone())).unwrap();
        chat.append(NewMessage {
            role: Role::Assistant,
            parts: vec![Part::ToolCall { id: "c".into(), name: "sh".into(), args: "{}".into() }],
            feedback: false,
        })
        .unwrap();
        chat.append(NewMessage::tool_result("c", t)).unwrap();
    }
}

/// Everything `alice` observes doing the same calls with `texts`, as one comparable text
/// (times, which the clock sets, left out).
fn alice_observes(store: &Store, texts: &[String]) -> Vec<String> {
    let mut seen = Vec::new();
    let chat = store.chat("alice", store.create_chat("alice", ChatMeta::default()).unwrap()).unwrap();
    for (i, t) in texts.iter().enumerate() {
        let id = store.put_blob("alice", t.as_bytes()).unwrap();
        seen.push(format!("blob {id} {:?}", store.get_blob("alice", &id).map(|b| b.len())));
        let a = store.archive("alice", t).unwrap();
        seen.push(format!("archive {a:?}"));
        seen.push(format!("read {:?}", store.read_context("alice", &a.id, 0..40, Unit::Chars)));
        chat.append(NewMessage::user(t.clone())).unwrap();
        chat.append(NewMessage {
            role: Role::Assistant,
            parts: vec![Part::ToolCall { id: format!("c{i}"), name: "sh".into(), args: "{}".into() }],
            feedback: false,
        })
        .unwrap();
        chat.append(NewMessage::tool_result(format!("c{i}"), t)).unwrap();
        seen.push(format!("owner stats {:?}", store.owner_stats("alice").unwrap()));
    }
    for m in chat.messages().unwrap() {
        for p in &m.parts {
            if let Part::ToolResult { content: ToolContent::Archived { archive, preview }, .. } = p {
                seen.push(format!("archived result {archive:?} {preview}"));
            }
        }
    }
    let list = store.chats("alice", Page::default()).unwrap();
    for c in &list.chats {
        seen.push(format!("chat {} {} {} {:?}", c.id, c.len, c.revision, c.meta));
    }
    for window in [8_000, 32_000, 200_000] {
        let v = chat.view(&Budget::new(window, 2_000)).unwrap();
        seen.push(format!("view {window}: {:?} {} {}", v.decision(), v.estimate(), v.to_openai_json()));
    }
    let hits = store.search("alice", "line value", SearchScope::all(), 20).unwrap();
    seen.push(format!(
        "search {:?}",
        hits.iter().map(|h| (h.chat, h.seq, h.archive, h.start, h.end)).collect::<Vec<_>>()
    ));
    seen.push(format!("owner stats at the end {:?}", store.owner_stats("alice").unwrap()));
    seen
}

#[test]
fn what_an_owner_observes_does_not_depend_on_whether_another_owner_stored_the_same_text() {
    let mut rng = Rng::new(seed(0x0A11CE));
    let sizes = [40, 900, 12_000, 70_000];
    let alice: Vec<String> = sizes.iter().map(|&n| text(&mut rng, "alice", n)).collect();
    let other: Vec<String> = sizes.iter().map(|&n| text(&mut rng, "other", n)).collect();
    let opts = || Options::default().durability(Durability::None).preallocate(false);
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (same, different) =
        (Store::open(d1.path(), opts()).unwrap(), Store::open(d2.path(), opts()).unwrap());
    bob_stores(&same, &alice);
    bob_stores(&different, &other);
    let (wide_same_before, wide_different_before) = (same.stats().unwrap(), different.stats().unwrap());
    let a = alice_observes(&same, &alice);
    let b = alice_observes(&different, &alice);
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x, y, "alice sees a difference that only bob's texts make");
    }
    // The store-wide figures are an oracle: alice's texts cost nothing new where bob stored
    // them first. They are for the operator, never for an owner.
    let grew = |before: &undertext::StoreStats, s: &Store| s.stats().unwrap().log_bytes - before.log_bytes;
    assert!(
        grew(&wide_same_before, &same) < grew(&wide_different_before, &different),
        "the store-wide log grows less when the text was there: the oracle owner_stats avoids"
    );
    let s = same.owner_stats("alice").unwrap();
    assert_eq!((s.chats, s.messages, s.tool_results), (1, 12, 4));
    assert_eq!(s.text_bytes + s.archived_bytes, 2 * sizes.iter().sum::<usize>() as u64 + 4 * 4);
}
