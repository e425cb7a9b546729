//! Cold loads of a 1,000-message chat in instructions, for callgrind (benches/README.md, "The
//! cold load"): the work of `benches/history.rs`'s `cold_load_1000` without criterion's
//! timing, so two builds (or two codecs) compare on a shared machine.
//!
//! ```text
//! cargo build --release -p undertext-benches --bin cold_load_counts
//! valgrind --tool=callgrind --toggle-collect='cold_load_counts::load_round' \
//!     target/release/cold_load_counts real|letters [zstd|none] [ROUNDS]
//! ```
//!
//! Writes two chats of 1,000 messages of ~2 KB (`real`: pieces of the shared transcripts'
//! texts; `letters`: the bench's random letters), then loads them in turn ROUNDS times with a
//! one-chat cache, so every load is cold; prints the load count and the parts loaded.

use undertext::{ChatId, ChatMeta, Compression, NewMessage, Options, Store};
use undertext_benches::{Result, bench_tempdir, random_bytes, transcript_texts_2k};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let real = args.first().map(String::as_str) != Some("letters");
    let compression = match args.get(1).map(String::as_str) {
        Some("none") => Compression::None,
        _ => Compression::Zstd(1),
    };
    let rounds: usize = args.get(2).map_or(Ok(20), |s| s.parse())?;
    let texts = if real { transcript_texts_2k()? } else { Vec::new() };
    let text = |seed: u64| -> String {
        if real {
            texts[seed as usize % texts.len()].clone()
        } else {
            random_bytes(1536, seed).iter().map(|b| (b'a' + b % 26) as char).collect::<String>()
                + &" word".repeat(103)
        }
    };
    let dir = bench_tempdir()?;
    let store = Store::open(
        dir.path().join("u"),
        Options::default().chat_cache_capacity(1).compression(compression),
    )?;
    let mut ids: Vec<ChatId> = Vec::new();
    for k in 0..2u64 {
        let id = store.create_chat("b", ChatMeta::default())?;
        let chat = store.chat("b", id)?;
        for b in 0..10u64 {
            let batch = (0..100).map(|i| NewMessage::assistant(text(k * 10_000 + b * 100 + i))).collect();
            chat.append_batch(batch)?;
        }
        ids.push(id);
    }
    store.sync()?;
    let mut bytes = 0usize;
    for r in 0..rounds {
        bytes += load_round(&store, ids[r % 2])?;
    }
    println!("loads={rounds} parts={bytes}");
    Ok(())
}

/// One cold load: the chat is not in memory (a one-chat cache, the other chat loaded last).
#[inline(never)]
fn load_round(store: &Store, id: ChatId) -> Result<usize> {
    let chat = store.chat("b", id)?;
    let all = chat.messages()?;
    Ok(all.iter().map(|m| m.parts.len()).sum())
}
