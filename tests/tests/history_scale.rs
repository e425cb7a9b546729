//! Claim: memory stays bounded however many chats exist. 10,000 chats × 1,000 messages
//! are written, the store reopened, and random chats opened cold and read whole; resident
//! memory stays under 200 MB. Long: run with
//! `cargo test --release -p undertext-tests --test history_scale -- --ignored --nocapture`
//! (`UNDERTEXT_SCALE_CHATS` / `UNDERTEXT_SCALE_MSGS` shrink it).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::time::Instant;

use undertext::{ChatId, ChatMeta, Durability, NewMessage, Options, Part, Store};
use undertext_tests::Rng;

fn status_mb(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb / 1024.0
}

fn rss_mb() -> f64 {
    status_mb("VmRSS:")
}

fn rss_detail() -> String {
    format!("anon {:.0} MB, file {:.0} MB", status_mb("RssAnon:"), status_mb("RssFile:"))
}

fn text(chat: u64, seq: u64) -> String {
    format!("chat {chat} message {seq}: the agent read a file and reported what it found there.")
}

#[test]
#[ignore = "scale: 10,000 chats x 1,000 messages; minutes of work (see the module doc)"]
fn ten_thousand_chats_of_a_thousand_messages_stay_under_200_mb_resident() {
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (chats, msgs) = (env("UNDERTEXT_SCALE_CHATS", 10_000), env("UNDERTEXT_SCALE_MSGS", 1_000));
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let opts = Options::default().durability(Durability::None);
    let t = Instant::now();
    let mut ids = Vec::new();
    {
        let store = Store::open(dir.path(), opts.clone()).unwrap();
        for c in 0..chats {
            let id = store.create_chat("o", ChatMeta::default()).unwrap();
            let chat = store.chat("o", id).unwrap();
            for b in 0..msgs.div_ceil(100) {
                let batch = (b * 100..((b + 1) * 100).min(msgs))
                    .map(|s| NewMessage::assistant(text(id.0, s)))
                    .collect();
                chat.append_batch(batch).unwrap();
            }
            ids.push(id);
            if c % 1000 == 999 {
                eprintln!(
                    "{} chats written in {:?}, rss {:.0} MB ({}), {} chats in memory",
                    c + 1,
                    t.elapsed(),
                    rss_mb(),
                    rss_detail(),
                    store.stats().unwrap().chats_in_memory
                );
            }
        }
        store.close().unwrap();
    }
    let write_rss = rss_mb();
    let t = Instant::now();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    eprintln!("reopen {:?}; stats {:?}", t.elapsed(), store.stats().unwrap());
    let mut rng = Rng::new(9);
    let mut worst = 0.0f64;
    for i in 0..300 {
        let id: ChatId = ids[rng.range(0, ids.len() as u64) as usize];
        let t = Instant::now();
        let chat = store.chat("o", id).unwrap();
        let all = chat.messages().unwrap();
        if i < 3 {
            eprintln!("cold open + read of {} messages: {:?}", all.len(), t.elapsed());
        }
        assert_eq!(all.len() as u64, msgs);
        let seq = rng.range(0, msgs) as usize;
        assert_eq!(all[seq].parts, vec![Part::Text(text(id.0, seq as u64))]);
        worst = worst.max(rss_mb());
    }
    eprintln!(
        "rss: after writing {write_rss:.0} MB, worst while reading cold chats {worst:.0} MB ({})",
        rss_detail()
    );
    assert!(worst < 200.0, "resident memory reached {worst:.0} MB");
}
