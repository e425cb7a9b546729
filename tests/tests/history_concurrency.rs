//! Claim: readers never wait and never see a torn state. Four writer threads append,
//! edit and truncate their own chats while four reader threads take snapshots: no reader
//! sees a torn message, a revision going back, or a length going back within a revision.
//! `UNDERTEXT_CONCURRENCY_SECS` sets the duration (default 10 s).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use undertext::{ChatId, ChatMeta, NewMessage, Options, Part, Store};
use undertext_tests::Rng;

fn body(chat: ChatId, seq: u64, rev: u64) -> String {
    let head = format!("{chat} seq {seq} rev {rev} ");
    let filler = "x".repeat((seq as usize * 37) % 1500);
    format!("{head}{filler} sum {}", head.len() + filler.len())
}

fn check_body(text: &str, chat: ChatId, seq: u64) {
    let (content, sum) = text.rsplit_once(" sum ").expect("sum marker");
    assert_eq!(content.len(), sum.parse::<usize>().unwrap(), "torn message");
    assert!(
        content.starts_with(&format!("{chat} seq {seq} rev ")),
        "message {seq} of {chat} holds {content:.40}"
    );
}

#[test]
fn four_writers_and_four_readers_never_see_a_torn_or_backward_state() {
    let secs: u64 =
        std::env::var("UNDERTEXT_CONCURRENCY_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let ids: Vec<ChatId> = (0..4).map(|_| store.create_chat("o", ChatMeta::default()).unwrap()).collect();
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let writes = AtomicU64::new(0);
    let deadline = Instant::now() + Duration::from_secs(secs);
    std::thread::scope(|s| {
        for (w, &id) in ids.iter().enumerate() {
            let (store, stop, writes) = (&store, &stop, &writes);
            s.spawn(move || {
                let chat = store.chat("o", id).unwrap();
                let mut rng = Rng::new(w as u64);
                while !stop.load(Ordering::Relaxed) {
                    let (rev, len) = (chat.revision(), chat.len());
                    match rng.range(0, 20) {
                        0 if len > 0 => {
                            let seq = rng.range(0, len);
                            chat.edit(seq, NewMessage::assistant(body(id, seq, rev + 1)), rev).unwrap();
                        }
                        1 if len > 5 => {
                            chat.truncate(len - rng.range(1, 5), rev).unwrap();
                        }
                        _ => {
                            let n = rng.range(1, 4);
                            let msgs =
                                (0..n).map(|i| NewMessage::assistant(body(id, len + i, rev))).collect();
                            chat.append_batch(msgs).unwrap();
                        }
                    }
                    writes.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for r in 0..4u64 {
            let (store, stop, reads, ids) = (&store, &stop, &reads, &ids);
            s.spawn(move || {
                let chats: Vec<_> = ids.iter().map(|&id| store.chat("o", id).unwrap()).collect();
                let mut last = vec![(0u64, 0u64); chats.len()];
                let mut rng = Rng::new(100 + r);
                while !stop.load(Ordering::Relaxed) {
                    let k = rng.range(0, chats.len() as u64) as usize;
                    let snap = chats[k].snapshot();
                    let now = (snap.revision(), snap.len());
                    assert!(now.0 >= last[k].0, "revision went back: {:?} -> {now:?}", last[k]);
                    if now.0 == last[k].0 {
                        assert!(
                            now.1 >= last[k].1,
                            "len went back within a revision: {:?} -> {now:?}",
                            last[k]
                        );
                    }
                    last[k] = now;
                    if !snap.is_empty() {
                        let seq = rng.range(0, snap.len());
                        let m = snap.get(seq).unwrap();
                        let Part::Text(t) = &m.parts[0] else { panic!("{:?}", m.parts) };
                        check_body(t, ids[k], seq);
                        assert!(m.revision <= snap.revision());
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let (r, w) = (reads.load(Ordering::Relaxed), writes.load(Ordering::Relaxed));
    eprintln!("{r} snapshot reads, {w} writes in {secs} s");
    assert!(r > 1000 && w > 100, "too little work to prove anything: {r} reads, {w} writes");
}
