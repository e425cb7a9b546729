//! The index's cost on the write and read paths of blobs granted in a chat, in instructions
//! (issue 19: one index row per blob must not make appends or `get_blob` dearer). A
//! load-independent companion of the `history` and `get_blob` benches.
//!
//! ```text
//! cargo build --release -p undertext-benches --bin index_row_counts
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/w target/release/index_row_counts write DIR 2000
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/r target/release/index_row_counts read DIR 2000
//! ```
//!
//! `write` creates a store in `DIR` (which must not exist) and appends `N` messages, each
//! with a new ~1 KB blob it attaches (the LangGraph saver's shape: a grant bound to the chat
//! per blob), syncs and closes: every instruction of every thread, the indexer's flushes into
//! redb included. `read` opens that store and reads each blob once with `get_blob` (each a
//! first grant check: the blob's index row, no cache), and closes. Callgrind's total divided
//! by `N` is the cost per append or read, the open and close included; without valgrind it
//! prints the wall time.

#![expect(clippy::unwrap_used, clippy::expect_used, reason = "bench harness: failure should abort the run")]

use std::path::PathBuf;
use std::time::Instant;

use undertext::{BlobId, ChatMeta, Durability, NewMessage, Options, Part, Role, Store};

const OWNER: &str = "langgraph";

fn content(i: u64) -> Vec<u8> {
    format!("item {i:06}: ")
        .into_bytes()
        .into_iter()
        .chain((0..1000u64).map(|k| b'a' + ((k * 7 + i) % 26) as u8))
        .collect()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: index_row_counts write|read DIR N";
    let mode = args.next().expect(usage);
    let dir = PathBuf::from(args.next().expect(usage));
    let n: u64 = args.next().expect(usage).parse().unwrap();
    let opts = Options::default().durability(Durability::None);
    let t = Instant::now();
    match mode.as_str() {
        "write" => {
            let store = Store::open(&dir, opts).unwrap();
            let c = store.create_chat(OWNER, ChatMeta::default()).unwrap();
            let chat = store.chat(OWNER, c).unwrap();
            for i in 0..n {
                let body = content(i);
                let part = Part::Attachment { mime: "application/msgpack".into(), blob: BlobId::of(&body) };
                chat.append_with_blobs(
                    &[&body],
                    vec![NewMessage { role: Role::Tool, parts: vec![part], feedback: false }],
                )
                .unwrap();
            }
            store.sync().unwrap();
            store.close().unwrap();
        }
        "read" => {
            let store = Store::open(&dir, opts).unwrap();
            let mut bytes = 0;
            for i in 0..n {
                bytes += store.get_blob(OWNER, &BlobId::of(&content(i))).unwrap().len();
            }
            assert!(bytes > 1000 * n as usize);
            store.close().unwrap();
        }
        _ => panic!("{usage}"),
    }
    println!("{mode}: {n} in {:.1} ms", t.elapsed().as_secs_f64() * 1000.0);
}
