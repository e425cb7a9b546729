//! Child process of the search crash test: appends messages in `Group` durability, each
//! holding a word of its own, searches every few appends (so the search index commits part
//! of the history), and prints `ack <chat> <seq> <word>` for each append it was told is
//! durable. The parent kills it with SIGKILL at a random moment.
//!
//! Usage: `search_writer STORE_DIR SEED`

use std::io::Write;

use undertext::{NewMessage, SearchScope};
use undertext_tests::child::open_or_exit;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: search_writer STORE_DIR SEED");
        std::process::exit(2);
    }
    let Ok(seed) = args[2].parse::<u64>() else {
        eprintln!("SEED must be a number");
        std::process::exit(2);
    };
    let store = open_or_exit(&args[1], 256 << 10);
    let fail = |e: undertext::Error| -> ! {
        eprintln!("search_writer: {e}");
        std::process::exit(1)
    };
    let chat = store.create_chat("o", Default::default()).unwrap_or_else(|e| fail(e));
    let chat = store.chat("o", chat).unwrap_or_else(|e| fail(e));
    println!("ready");
    let mut out = std::io::stdout();
    for i in 0u64.. {
        let word = format!("w{seed:x}n{i}");
        let seq = chat
            .append(NewMessage::user(format!("message {i} of the run holds the word {word} and filler text")))
            .unwrap_or_else(|e| fail(e));
        let _ = writeln!(out, "ack {} {seq} {word}", chat.id());
        let _ = out.flush();
        if i % 7 == 3 {
            store.search("o", &word, SearchScope::all(), 3).unwrap_or_else(|e| fail(e));
        }
    }
}
