//! Claim: history behaves like a plain in-memory model. 200 seeded histories of random
//! appends, batches, edits, truncations, steps with retries, metadata changes and reopens
//! (with a tiny chat cache, so chats keep leaving memory and coming back from the index)
//! are checked after every operation: same messages, revisions, old revisions, attempts.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::collections::BTreeMap;

use undertext::{ChatId, ChatMeta, Durability, Error, NewMessage, Options, Part, Role, StepStatus, Store};
use undertext_tests::{Rng, seed};

#[derive(Clone, Debug, PartialEq)]
struct M {
    role: Role,
    text: String,
    turn: u64,
}

/// (stream id, steps as (step, complete, message texts)), in the order streams appeared.
type Attempts = Vec<(String, Vec<(u32, bool, Vec<String>)>)>;

#[derive(Default, Debug)]
struct ChatModel {
    messages: Vec<M>,
    revision: u64,
    /// Final message list of every finished revision.
    old: BTreeMap<u64, Vec<M>>,
    /// turn -> streams in order -> steps (step, complete, texts)
    attempts: BTreeMap<u64, Attempts>,
    title: String,
    stream: u32,
    step: u32,
}

impl ChatModel {
    fn turn(&self) -> u64 {
        self.messages.last().map_or(0, |m| m.turn)
    }
}

fn opts() -> Options {
    Options::default().durability(Durability::None).chat_cache_capacity(2)
}

fn texts(store: &Store, id: ChatId) -> Vec<M> {
    let chat = store.chat("owner", id).unwrap();
    chat.messages().unwrap().into_iter().map(to_m).collect()
}

fn to_m(m: undertext::Message) -> M {
    let text = match &m.parts[..] {
        [Part::Text(t)] => t.clone(),
        other => panic!("unexpected parts {other:?}"),
    };
    M { role: m.role, text, turn: m.turn }
}

fn check(store: &Store, id: ChatId, model: &ChatModel, rng: &mut Rng, ctx: &str) {
    let chat = store.chat("owner", id).unwrap();
    let snap = chat.snapshot();
    assert_eq!(snap.revision(), model.revision, "{ctx}: revision");
    assert_eq!(snap.len(), model.messages.len() as u64, "{ctx}: len");
    assert_eq!(texts(store, id), model.messages, "{ctx}: messages");
    assert_eq!(chat.meta().title, model.title, "{ctx}: title");
    if let Some((&rev, old)) = model.old.iter().nth(rng.range(0, model.old.len() as u64 + 1) as usize) {
        let got: Vec<M> = chat.snapshot_at(rev).unwrap().messages().unwrap().into_iter().map(to_m).collect();
        assert_eq!(&got, old, "{ctx}: snapshot_at({rev})");
    }
    let turn = model.turn();
    let got = chat.attempts(turn).unwrap();
    let want = model.attempts.get(&turn).cloned().unwrap_or_default();
    let got: Attempts = got
        .into_iter()
        .map(|a| {
            let steps = a
                .steps
                .into_iter()
                .map(|s| {
                    let t = s.messages.into_iter().map(|m| to_m(m).text).collect();
                    (s.step, s.status == StepStatus::Complete, t)
                })
                .collect();
            (a.stream_id, steps)
        })
        .collect();
    assert_eq!(got, want, "{ctx}: attempts of turn {turn}");
}

#[test]
fn two_hundred_seeded_histories_match_the_model_after_every_operation() {
    let base = seed(0x4157_0001);
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), opts()).unwrap();
    let mut ops = 0u64;
    for h in 0..200u64 {
        let mut rng = Rng::new(base.wrapping_add(h));
        // Three chats per history, interleaved, so the tiny cache evicts and reloads them.
        let mut chats: Vec<(ChatId, ChatModel)> = (0..3)
            .map(|i| {
                let title = format!("h{h}c{i}");
                let id = store
                    .create_chat("owner", ChatMeta { title: title.clone(), ..Default::default() })
                    .unwrap();
                (id, ChatModel { title, ..Default::default() })
            })
            .collect();
        for op in 0..rng.range(20, 45) {
            let k = rng.range(0, 3) as usize;
            let (id, model) = &mut chats[k];
            let chat = store.chat("owner", *id).unwrap();
            let ctx = format!("history {h} op {op} chat {k}");
            let n = model.messages.len() as u64;
            match rng.range(0, 100) {
                0..=29 => {
                    let user = rng.range(0, 3) == 0;
                    let text = format!("{ctx} append");
                    let m = if user { NewMessage::user(&text) } else { NewMessage::assistant(&text) };
                    chat.append(m).unwrap();
                    let turn = model.turn() + user as u64;
                    model.messages.push(M {
                        role: if user { Role::User } else { Role::Assistant },
                        text,
                        turn,
                    });
                }
                30..=44 => {
                    let count = rng.range(1, 4);
                    let mut batch = Vec::new();
                    for j in 0..count {
                        let text = format!("{ctx} batch {j}");
                        // Mostly short bodies, sometimes one large enough to become a blob.
                        let text = if rng.range(0, 6) == 0 { text.repeat(60) } else { text };
                        batch.push(NewMessage::assistant(&text));
                        let turn = model.turn();
                        model.messages.push(M { role: Role::Assistant, text, turn });
                    }
                    chat.append_batch(batch).unwrap();
                }
                45..=56 if n > 0 => {
                    let seq = rng.range(0, n);
                    let old = model.messages[seq as usize].clone();
                    let text = format!("{ctx} edit");
                    let m = NewMessage::text(old.role, &text);
                    if rng.range(0, 5) == 0 {
                        let stale = model.revision.wrapping_sub(1);
                        match chat.edit(seq, m, stale) {
                            Err(Error::StaleRevision { expected, found }) => {
                                assert_eq!((expected, found), (stale, model.revision), "{ctx}");
                            }
                            other => panic!("{ctx}: stale edit gave {other:?}"),
                        }
                    } else {
                        let r = chat.edit(seq, m, model.revision).unwrap();
                        model.old.insert(model.revision, model.messages.clone());
                        model.revision += 1;
                        assert_eq!(r, model.revision);
                        model.messages[seq as usize].text = text;
                    }
                }
                57..=64 => {
                    let from = rng.range(0, n + 1);
                    let r = chat.truncate(from, model.revision).unwrap();
                    model.old.insert(model.revision, model.messages.clone());
                    model.revision += 1;
                    assert_eq!(r, model.revision);
                    model.messages.truncate(from as usize);
                }
                65..=84 => {
                    // A step of the current turn; sometimes a retry opens a new stream.
                    if rng.range(0, 4) == 0 || model.stream == 0 {
                        model.stream += 1;
                        model.step = 0;
                    }
                    let turn = model.turn();
                    let stream = format!("t{turn}s{}", model.stream);
                    let complete = rng.range(0, 4) != 0;
                    let count = rng.range(0, 3);
                    let step_texts: Vec<String> = (0..count).map(|j| format!("{ctx} step {j}")).collect();
                    let msgs = step_texts.iter().map(NewMessage::assistant).collect();
                    let status = if complete { StepStatus::Complete } else { StepStatus::Interrupted };
                    chat.record_step(turn, &stream, model.step, status, msgs).unwrap();
                    for t in &step_texts {
                        model.messages.push(M { role: Role::Assistant, text: t.clone(), turn });
                    }
                    let streams = model.attempts.entry(turn).or_default();
                    let entry = (model.step, complete, step_texts);
                    match streams.iter_mut().find(|(s, _)| *s == stream) {
                        Some((_, steps)) => steps.push(entry),
                        None => streams.push((stream, vec![entry])),
                    }
                    model.step += 1;
                }
                85..=89 => {
                    model.title = format!("{ctx} title");
                    chat.set_meta(ChatMeta { title: model.title.clone(), ..Default::default() }).unwrap();
                }
                90..=95 => {
                    drop(chat);
                    drop(store);
                    store = Store::open(dir.path(), opts()).unwrap();
                }
                _ => {
                    let text = format!("{ctx} user");
                    chat.append(NewMessage::user(&text)).unwrap();
                    let turn = model.turn() + 1;
                    model.messages.push(M { role: Role::User, text, turn });
                    model.stream = 0;
                }
            }
            let (id, model) = &chats[k];
            let mut crng = Rng::new(ops);
            check(&store, *id, model, &mut crng, &ctx);
            ops += 1;
        }
        for (k, (id, model)) in chats.iter().enumerate() {
            check(&store, *id, model, &mut Rng::new(h), &format!("history {h} end chat {k}"));
        }
    }
    assert!(store.check().unwrap().is_ok());
    eprintln!("{ops} operations checked");
}
