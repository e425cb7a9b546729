//! Child process of the read-only tests: opens a store for writing (4 KiB segments, so it
//! seals one every few appends), creates a chat, prints `ready` then `chat <id>`, then appends
//! `COUNT` messages, printing `ack <i>` once the append of message `i` returned (acknowledged
//! and durable), and `done` at the end.

use std::io::Write;

use undertext::{ChatMeta, NewMessage};
use undertext_tests::child::open_or_exit;
use undertext_tests::read_only::message_text;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(dir), Some(count)) = (args.get(1), args.get(2).and_then(|c| c.parse::<u64>().ok())) else {
        eprintln!("usage: ro_writer STORE_DIR COUNT");
        std::process::exit(2);
    };
    let store = open_or_exit(dir, 4096);
    let out = std::io::stdout();
    let say = |line: String| {
        let mut o = out.lock();
        if writeln!(o, "{line}").and_then(|_| o.flush()).is_err() {
            std::process::exit(3);
        }
    };
    let fail = |what: &str, e: undertext::Error| -> ! {
        eprintln!("{what}: {e}");
        std::process::exit(1)
    };
    let id = store.create_chat("o", ChatMeta::default()).unwrap_or_else(|e| fail("create_chat", e));
    let chat = store.chat("o", id).unwrap_or_else(|e| fail("chat", e));
    say("ready".into());
    say(format!("chat {}", id.0));
    for i in 0..count {
        chat.append(NewMessage::user(message_text(i))).unwrap_or_else(|e| fail("append", e));
        say(format!("ack {i}"));
    }
    store.close().unwrap_or_else(|e| fail("close", e));
    say("done".into());
}
