//! Arbitrary bytes as a sequence of store operations, checked against an in-memory model
//! after every one: appends (small, inline and blob-sized bodies), edits, truncations,
//! blobs, reopen (with and without `sync`), an index rebuild. The model is a plain `Vec` of
//! messages per chat and a map of blobs; after each operation the chat's messages, length
//! and revision, and a blob read back, must equal the model's.
//!
//! Input layout: byte 0 selects the options (bit 0: segment size 4 KiB or 64 KiB, bit 1:
//! preallocation, bit 2: LZ4 instead of zstd); then one operation per 3 bytes `[op, a, b]`
//! (at most [`MAX_OPS`]). `op % 8`: 0–2 append a message of `a`-derived length with text
//! from `b` (`a % 16 == 15`: 9–12 KB, stored as a blob), 3 edit message `a % len`, 4 truncate
//! at `a % (len + 1)`, 5 put a blob, 6 reopen (`b` odd: `sync` first), 7 rebuild the index.
//! Operations address two chats (`b & 1`).
//!
//! Shared verbatim by the cargo-fuzz target `op_sequence` and the replay test in
//! `tests/tests/fuzz_corpus_reliability.rs`, which includes this file with `#[path]`. Use only
//! `std` and `undertext` here.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use undertext::{BlobId, ChatMeta, Compression, Durability, NewMessage, Options, Part, Role, Store};

/// Operations read from one input at most.
pub const MAX_OPS: usize = 64;

static RUN: AtomicU64 = AtomicU64::new(0);

/// A directory of its own under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let n = RUN.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("undertext-fuzz-ops-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("temp dir {}: {e}", p.display()));
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn options(flags: u8) -> Options {
    Options::default()
        .durability(Durability::None)
        .segment_size(if flags & 1 == 0 { 4096 } else { 64 << 10 })
        .preallocate(flags & 2 != 0)
        .compression(if flags & 4 == 0 { Compression::default() } else { Compression::Lz4 })
}

fn text(a: u8, b: u8) -> String {
    let len = if a % 16 == 15 { 9000 + 200 * usize::from(b % 16) } else { 1 + usize::from(a) * 7 };
    let word = ["tool ", "é ", "{\"k\": 1} ", "\n", "😀 ", "x"][usize::from(b % 6)];
    let mut s = format!("{a}/{b}:");
    while s.len() < len {
        s.push_str(word);
    }
    s
}

/// A chat's expected state.
#[derive(Debug, Default, Clone)]
struct ChatModel {
    messages: Vec<(Role, String)>,
    revision: u64,
}

fn parts_text(parts: &[Part]) -> String {
    match parts {
        [Part::Text(t)] => t.clone(),
        other => format!("{other:?}"),
    }
}

/// Runs the operations of `data` and checks the store against the model after each.
/// Panics on any difference or unexpected error.
pub fn check(data: &[u8]) {
    let Some((&flags, ops)) = data.split_first() else { return };
    let dir = TempDir::new();
    let opts = options(flags);
    let open = || Store::open(&dir.0, opts.clone()).unwrap_or_else(|e| panic!("open: {e}"));
    let mut store = open();
    let mut chats = Vec::new();
    for k in 0..2 {
        let id = store
            .create_chat("fuzz", ChatMeta { title: format!("chat {k}"), ..Default::default() })
            .unwrap_or_else(|e| panic!("create_chat: {e}"));
        chats.push((id, ChatModel::default()));
    }
    let mut blobs: HashMap<BlobId, Vec<u8>> = HashMap::new();
    for (step, op) in ops.chunks_exact(3).take(MAX_OPS).enumerate() {
        let (kind, a, b) = (op[0] % 8, op[1], op[2]);
        let (id, model) = &mut chats[usize::from(b & 1)];
        let chat = store.chat("fuzz", *id).unwrap_or_else(|e| panic!("step {step}: chat: {e}"));
        match kind {
            0..=2 => {
                let role = if kind == 0 { Role::User } else { Role::Assistant };
                let t = text(a, b);
                chat.append(NewMessage::text(role, t.clone()))
                    .unwrap_or_else(|e| panic!("step {step}: append: {e}"));
                model.messages.push((role, t));
            }
            3 if !model.messages.is_empty() => {
                let seq = u64::from(a) % model.messages.len() as u64;
                let role = model.messages[seq as usize].0;
                let t = format!("edited {step} {}", text(b, a));
                let r = chat
                    .edit(seq, NewMessage::text(role, t.clone()), model.revision)
                    .unwrap_or_else(|e| panic!("step {step}: edit: {e}"));
                model.messages[seq as usize].1 = t;
                model.revision = r;
            }
            4 => {
                let seq = u64::from(a) % (model.messages.len() as u64 + 1);
                match chat.truncate(seq, model.revision) {
                    Ok(r) => {
                        model.messages.truncate(seq as usize);
                        model.revision = r;
                    }
                    // Truncating at the end changes nothing and may be refused as such.
                    Err(undertext::Error::InvalidArgument(_)) if seq as usize == model.messages.len() => {}
                    Err(e) => panic!("step {step}: truncate at {seq}: {e}"),
                }
            }
            5 => {
                let content = text(a, b).into_bytes();
                let got =
                    store.put_blob("o", &content).unwrap_or_else(|e| panic!("step {step}: put_blob: {e}"));
                assert_eq!(got, BlobId::of(&content), "step {step}: blob id");
                blobs.insert(got, content);
            }
            6 => {
                drop(chat);
                if b & 2 != 0 {
                    store.sync().unwrap_or_else(|e| panic!("step {step}: sync: {e}"));
                }
                drop(store);
                store = open();
            }
            7 => store.rebuild_index().unwrap_or_else(|e| panic!("step {step}: rebuild: {e}")),
            _ => {}
        }
        for (id, model) in &chats {
            let chat = store.chat("fuzz", *id).unwrap_or_else(|e| panic!("step {step}: chat {id:?}: {e}"));
            let got: Vec<(Role, String)> = chat
                .messages()
                .unwrap_or_else(|e| panic!("step {step}: messages: {e}"))
                .into_iter()
                .map(|m| (m.role, parts_text(&m.parts)))
                .collect();
            assert_eq!(got.len(), model.messages.len(), "step {step}: length of chat {id:?}");
            assert!(got == model.messages, "step {step}: messages of chat {id:?} differ from the model");
            assert_eq!(chat.len(), model.messages.len() as u64, "step {step}: len()");
            assert_eq!(chat.revision(), model.revision, "step {step}: revision");
        }
        if let Some((id, content)) = blobs.iter().next() {
            let got = store.get_blob("o", id).unwrap_or_else(|e| panic!("step {step}: get_blob: {e}"));
            assert!(*got == content[..], "step {step}: blob {id} differs");
        }
    }
    let report = store.check().unwrap_or_else(|e| panic!("check: {e}"));
    assert!(report.is_ok(), "check: {:?}", report.problems);
}
