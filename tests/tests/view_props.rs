//! Property test over seeded histories: whatever the budget, the view never splits a tool
//! call from its result, never shrinks a pinned archive, keeps the protected tail raw (the
//! last two user turns, bounded by the budget's `protect_limit`: the last whole steps that fit),
//! every previewed result reads back whole through its archive id, and the decision agrees
//! with the estimate.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::collections::HashSet;

use undertext::{Budget, Decision};
use undertext::{ChatMeta, Durability, NewMessage, Options, Part, Role, Store, ToolContent, Unit};
use undertext_tests::{Rng, seed};

fn archive_of(p: &Part) -> Option<undertext::ArchiveRef> {
    match p {
        Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } => Some(*archive),
        _ => None,
    }
}

/// The protected tail, computed independently of the engine: the last two user turns when
/// their tokens fit `limit`, else the last whole steps that fit (a step starts at a message
/// with no tool result), at least the last one.
fn tail_start(msgs: &[undertext::Message], tokens: &[u64], last_turn: u64, limit: u64) -> u64 {
    let first = msgs.iter().position(|m| m.turn + 1 >= last_turn).unwrap();
    let (mut acc, mut best) = (0, None);
    for i in (first..msgs.len()).rev() {
        acc += tokens[i];
        let cut = !msgs[i].parts.iter().any(|p| matches!(p, Part::ToolResult { .. }));
        if cut && (acc <= limit || best.is_none()) {
            best = Some(i);
        }
        if cut && acc > limit {
            break;
        }
    }
    best.unwrap() as u64
}

#[test]
fn views_of_seeded_histories_keep_pairs_pins_recent_turns_and_a_way_back() {
    let base = seed(0x5EED_0005);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
    let mut views = 0;
    for h in 0..60u64 {
        let mut rng = Rng::new(base + h);
        let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
        chat.append(NewMessage::system("system prompt")).unwrap();
        let mut originals: Vec<(u64, String)> = Vec::new();
        for t in 0..rng.range(2, 9) {
            chat.append(NewMessage::user(format!("turn {t}"))).unwrap();
            for k in 0..rng.range(0, 4) {
                let id = format!("c{t}-{k}");
                chat.append(NewMessage {
                    role: Role::Assistant,
                    parts: vec![Part::ToolCall { id: id.clone(), name: "run".into(), args: "{}".into() }],
                    feedback: false,
                })
                .unwrap();
                let n = rng.range(50, 30_000) as usize;
                let text: String = (0..n)
                    .map(|i| if i % 61 == 60 { '\n' } else { (b'a' + (i % 26) as u8) as char })
                    .collect();
                let text = format!("{id}:{text}");
                let seq = chat.append(NewMessage::tool_result(&id, &text)).unwrap();
                originals.push((seq, text));
            }
            chat.append(NewMessage::assistant(format!("done with {t}"))).unwrap();
        }
        // Pin some archived results.
        let msgs = chat.messages().unwrap();
        let mut pinned = HashSet::new();
        for m in &msgs {
            if let Some(a) = m.parts.first().and_then(archive_of)
                && rng.range(0, 3) == 0
            {
                chat.pin(&a.id, 0..1, Unit::Lines).unwrap();
                pinned.insert(a.id);
            }
        }
        let last_turn = msgs.last().unwrap().turn;
        let full = chat.view(&Budget::new(1 << 40, 0)).unwrap();
        let total = full.estimate();
        let tokens: Vec<u64> =
            full.messages().iter().filter(|m| m.seqs.end == m.seqs.start + 1).map(|m| m.tokens).collect();
        for _ in 0..4 {
            let window = (total * rng.range(60, 200) / 100).max(10);
            let b = Budget::new(window, 0);
            let v = chat.view(&b).unwrap();
            let protected_from = tail_start(&msgs, &tokens, last_turn, b.protect_limit());
            views += 1;
            match v.decision() {
                Decision::Fits => assert!(v.estimate() <= b.soft_limit()),
                Decision::Compacted { .. } => assert!(v.estimate() <= b.hard_limit()),
                Decision::Refused { estimate, limit, over_by } => {
                    assert_eq!(
                        (*estimate, *limit, *over_by),
                        (v.estimate(), b.hard_limit(), v.estimate() - b.hard_limit())
                    )
                }
            }
            // The tail before its last step is previewed only when the view would be over
            // the hard line without those previews.
            let e = undertext::Heuristic;
            let restored: u64 = v
                .messages()
                .iter()
                .map(|vm| {
                    let tail = vm.seqs.end == vm.seqs.start + 1 && vm.seqs.start >= protected_from;
                    let parts = if tail { &msgs[vm.seqs.start as usize].parts } else { &vm.parts };
                    undertext_tests::views::sent_tokens(&e, parts)
                })
                .sum();
            let last_resort = restored > b.hard_limit();
            let last_step = msgs
                .iter()
                .rposition(|m| !m.parts.iter().any(|p| matches!(p, Part::ToolResult { .. })))
                .unwrap() as u64;
            let mut calls = HashSet::new();
            let mut results = HashSet::new();
            for vm in v.messages() {
                if vm.seqs.is_empty() {
                    continue; // pinned context
                }
                let orig = &msgs[vm.seqs.start as usize];
                let protected = orig.seq >= last_step || (orig.seq >= protected_from && !last_resort);
                for (p, o) in vm.parts.iter().zip(&orig.parts) {
                    match p {
                        Part::ToolCall { id, .. } => {
                            calls.insert(id.clone());
                        }
                        Part::ToolResult { call_id, .. } => {
                            results.insert(call_id.clone());
                        }
                        _ => {}
                    }
                    if p != o {
                        assert!(
                            !protected,
                            "history {h}: message {} of the protected tail (from {protected_from}) changed",
                            orig.seq
                        );
                        if let Some(a) = archive_of(o) {
                            assert!(!pinned.contains(&a.id), "history {h}: pinned archive shrunk");
                        }
                        let a = archive_of(p).expect("a changed result is a preview with its archive");
                        let (_, text) = originals.iter().find(|(s, _)| *s == orig.seq).unwrap();
                        assert_eq!(&store.read_context("o", &a.id, 0..a.chars, Unit::Chars).unwrap(), text);
                    }
                }
            }
            assert_eq!(calls, results, "history {h}: a call without its result or the reverse");
        }
    }
    assert!(views >= 200);
}
