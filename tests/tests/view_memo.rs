//! The view memo: a view served from the memo (unchanged chat) or extended by appends is
//! exactly the view built from scratch, through appends, edits, truncations, pins,
//! compaction records, calibration, checkpoint publication and budget changes.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext::Budget;
use undertext::compaction::Plan;
use undertext::{Chat, ChatMeta, Durability, NewMessage, Options, Part, Role, Store, ToolContent, Unit};
use undertext::{CheckpointOptions, Extractive};
use undertext_tests::{Rng, seed};

fn assert_same_as_rebuilt(chat: &Chat, b: &Budget, what: &str) {
    let memo = chat.view(b).unwrap();
    chat.clear_view_memo();
    let scratch = chat.view(b).unwrap();
    assert_eq!(memo.messages(), scratch.messages(), "{what}: messages differ");
    assert_eq!(memo.decision(), scratch.decision(), "{what}: decision differs");
    assert_eq!(memo.estimate(), scratch.estimate(), "{what}: estimate differs");
    assert_eq!(memo.to_openai_json(), scratch.to_openai_json(), "{what}: rendering differs");
}

fn text(rng: &mut Rng, n: usize) -> String {
    (0..n).map(|i| if i % 71 == 70 { '\n' } else { (b'a' + (rng.next_u64() % 26) as u8) as char }).collect()
}

#[test]
fn a_view_from_the_memo_equals_the_view_built_from_scratch() {
    let base = seed(0x5EED_0A11);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
    let mut checked = 0;
    for h in 0..12u64 {
        let mut rng = Rng::new(base + h);
        let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
        chat.append(NewMessage::system("system prompt")).unwrap();
        let mut calls = 0;
        for op in 0..80u64 {
            let budgets = [Budget::new(1 << 30, 0), Budget::new(20_000, 1_000), Budget::new(6_000, 500)];
            let b = &budgets[rng.range(0, 3) as usize];
            match rng.range(0, 12) {
                0..=3 => {
                    chat.append(NewMessage::user(format!("turn {op}"))).unwrap();
                }
                4..=6 => {
                    let id = format!("c{calls}");
                    calls += 1;
                    chat.append(NewMessage {
                        role: Role::Assistant,
                        parts: vec![Part::ToolCall { id: id.clone(), name: "run".into(), args: "{}".into() }],
                        feedback: false,
                    })
                    .unwrap();
                    let n = rng.range(20, 12_000) as usize;
                    chat.append(NewMessage::tool_result(&id, text(&mut rng, n))).unwrap();
                }
                7 => {
                    chat.append(NewMessage::assistant(text(&mut rng, 300))).unwrap();
                }
                8 if chat.len() > 3 => {
                    let seq = rng.range(1, chat.len());
                    if chat.messages().unwrap()[seq as usize].role == Role::User {
                        chat.edit(seq, NewMessage::user("edited"), chat.revision()).unwrap();
                    }
                }
                9 => {
                    let archived = chat.messages().unwrap().into_iter().find_map(|m| {
                        m.parts.iter().find_map(|p| match p {
                            Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } => {
                                Some(archive.id)
                            }
                            _ => None,
                        })
                    });
                    if let Some(id) = archived {
                        chat.pin(&id, 0..1, Unit::Lines).unwrap();
                    }
                }
                10 => {
                    let trims: Vec<u64> = chat
                        .index()
                        .unwrap()
                        .iter()
                        .filter(|l| l.role == Role::Tool)
                        .map(|l| l.seq)
                        .take(1)
                        .collect();
                    // The linter may refuse (recent part): either way the view must agree.
                    let _ = chat.compact(&Plan { trims, squishes: vec![] }, chat.revision());
                }
                _ => {
                    if let Ok(cp) =
                        chat.build_checkpoint(&Extractive::default(), &CheckpointOptions::default())
                    {
                        let _ = chat.publish_checkpoint(&cp);
                    }
                }
            }
            // A view now (fills the memo), then appends, then the view again (extends it).
            chat.view(b).unwrap();
            if rng.range(0, 2) == 0 {
                chat.append(NewMessage::assistant(format!("note {op}"))).unwrap();
            }
            if rng.range(0, 4) == 0 {
                let v = chat.view(b).unwrap();
                chat.report_usage(v.step(), v.estimate() * 6 / 5).unwrap();
            }
            assert_same_as_rebuilt(&chat, b, &format!("history {h}, op {op}"));
            checked += 1;
        }
    }
    eprintln!("{checked} memo views compared with views built from scratch");
}

#[test]
fn a_view_extended_by_new_user_turns_over_a_checkpoint_keeps_the_task_of_the_last_two_turns() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
    let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    chat.append(NewMessage::user("the first task")).unwrap();
    let mut rng = Rng::new(seed(0x7A5C));
    for k in 0..30 {
        let id = format!("c{k}");
        chat.append(NewMessage {
            role: Role::Assistant,
            parts: vec![Part::ToolCall { id: id.clone(), name: "run".into(), args: "{}".into() }],
            feedback: false,
        })
        .unwrap();
        chat.append(NewMessage::tool_result(&id, text(&mut rng, 2_000))).unwrap();
    }
    let opts = CheckpointOptions { protect_max_tokens: Some(2_000), ..CheckpointOptions::default() };
    let cp = chat.build_checkpoint(&Extractive::default(), &opts).unwrap();
    chat.publish_checkpoint(&cp).unwrap();
    let b = Budget::new(1 << 30, 0);
    // The view over the checkpoint keeps the first task (the last turn's opener); it fits and
    // is remembered.
    chat.view(&b).unwrap();
    // Two new turns after the checkpoint's reach: the first task is no longer the opener of
    // one of the last two turns, so the extended view must not keep it either.
    chat.append(NewMessage::user("a second task")).unwrap();
    chat.append(NewMessage::user("a third task")).unwrap();
    assert_same_as_rebuilt(&chat, &b, "two user turns appended over a checkpoint");
}
