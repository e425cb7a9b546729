//! Claim: publication never lands a stale checkpoint. Threads edit, append, build and
//! publish checkpoints on one chat at once (10,000 operations by default,
//! `UNDERTEXT_STRESS_OPS` to change); a reader checks every snapshot: the published
//! checkpoint never goes back (a slow job never overwrites a newer one); afterwards a
//! checkpoint overtaken by an edit is refused and a fresh one lands. How many publications
//! win the race depends on scheduling and is only printed. (The loom model of this race is
//! still to come.)

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use undertext::{ChatMeta, Durability, Error, NewMessage, Options, Store};
use undertext::{CheckpointOptions, Extractive};
use undertext_tests::Rng;

#[test]
fn overlapping_edits_appends_and_publications_never_publish_a_stale_checkpoint() {
    let total: u64 =
        std::env::var("UNDERTEXT_STRESS_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
    let id = store.create_chat("o", ChatMeta::default()).unwrap();
    let chat = store.chat("o", id).unwrap();
    for i in 0..40 {
        if i % 5 == 0 {
            chat.append(NewMessage::user(format!("turn {i}"))).unwrap();
        }
        chat.append(NewMessage::assistant(format!("message {i} with a few words"))).unwrap();
    }
    let ops = AtomicU64::new(0);
    let published = AtomicU64::new(0);
    let conflicts = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let opts = CheckpointOptions { segment_tokens: 30, fan_in: 4, ..CheckpointOptions::default() };
    std::thread::scope(|s| {
        // Editors and an appender.
        for t in 0..3u64 {
            let (chat, ops) = (&chat, &ops);
            s.spawn(move || {
                let mut rng = Rng::new(t);
                while ops.fetch_add(1, Ordering::Relaxed) < total {
                    if t == 2 {
                        if rng.range(0, 6) == 0 {
                            chat.append(NewMessage::user("next turn")).unwrap();
                        }
                        chat.append(NewMessage::assistant("appended")).unwrap();
                    } else {
                        let len = chat.len();
                        let seq = rng.range(1, len);
                        let starts = chat.snapshot().header(seq).unwrap().starts_turn;
                        let m = if starts {
                            NewMessage::user("edited turn")
                        } else {
                            NewMessage::assistant("edited")
                        };
                        match chat.edit(seq, m, chat.revision()) {
                            Ok(_) | Err(Error::StaleRevision { .. }) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            });
        }
        // Two publishers racing each other and the editors.
        for _ in 0..2 {
            let (chat, stop, published, conflicts, opts) = (&chat, &stop, &published, &conflicts, &opts);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let cp = chat.build_checkpoint(&Extractive::default(), opts).unwrap();
                    match chat.publish_checkpoint(&cp) {
                        Ok(()) => {
                            published.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(Error::Conflict(_)) => {
                            conflicts.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
        // The reader: every snapshot keeps the invariant.
        {
            let (chat, stop) = (&chat, &stop);
            s.spawn(move || {
                let mut last_reach = 0;
                let mut seen = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let snap = chat.snapshot();
                    if let Some((_, reach)) = chat.published_checkpoint() {
                        assert!(reach >= last_reach, "a checkpoint went back from {last_reach} to {reach}");
                        last_reach = reach;
                    }
                    drop(snap);
                    seen += 1;
                }
                assert!(seen > 100);
            });
        }
        while ops.load(Ordering::Relaxed) < total {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let (p, c) = (published.load(Ordering::Relaxed), conflicts.load(Ordering::Relaxed));
    eprintln!("{total} operations: {p} publications, {c} refused as stale or not newer");
    assert!(p + c > 0, "the publishers made no attempt");
    // After the race, the guard still holds: a checkpoint overtaken by an edit is refused,
    // a fresh one lands and moves the reach forward.
    let before = chat.published_checkpoint().map_or(0, |(_, r)| r);
    let stale = chat.build_checkpoint(&Extractive::default(), &opts).unwrap();
    chat.edit(1, NewMessage::assistant("last edit"), chat.revision()).unwrap();
    assert!(matches!(chat.publish_checkpoint(&stale), Err(Error::Conflict(_))));
    chat.append(NewMessage::user("one more turn")).unwrap();
    chat.append(NewMessage::user("and another")).unwrap();
    let fresh = chat.build_checkpoint(&Extractive::default(), &opts).unwrap();
    assert!(fresh.reach > before, "two new user turns settle everything before them");
    chat.publish_checkpoint(&fresh).unwrap();
    assert_eq!(chat.published_checkpoint(), Some((chat.revision(), fresh.reach)));
}
