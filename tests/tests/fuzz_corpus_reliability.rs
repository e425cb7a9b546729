//! The corpora of the reliability fuzz targets, replayed (and their seeds regenerated).
//!
//! * `op_sequence_corpus_replays` runs the `op_sequence` target's checks (operation
//!   sequences on a real store against an in-memory model; `fuzz/src/op_sequence.rs`, included
//!   with `#[path]`, the same file the fuzz target calls) on every file of
//!   `fuzz/corpus/op_sequence/` and `fuzz/regressions/op_sequence/`.
//! * `approval_corpus_replays` does the same for the `approval` target (`fuzz/src/approval.rs`),
//!   `compaction_lint_corpus_replays` for the `compaction_lint` target.
//! * `write_reliability_seed_corpora` (ignored) rewrites the `seed-*` files of both corpora:
//!   `cargo test -p undertext-tests --test fuzz_corpus_reliability -- --ignored`.

#![allow(clippy::unwrap_used, reason = "test helpers outside #[test] fns: a failed unwrap is a failed test")]

#[path = "../../fuzz/src/approval.rs"]
mod approval;
#[path = "../../fuzz/src/compaction_lint.rs"]
mod compaction_lint;
#[path = "../../fuzz/src/op_sequence.rs"]
mod op_sequence;

use undertext_tests::{files_in, fuzz_dir, replay_corpus};

#[test]
fn op_sequence_corpus_replays() {
    replay_corpus("op_sequence", 8, op_sequence::check);
}

#[test]
fn approval_corpus_replays() {
    replay_corpus("approval", 8, approval::check);
}

#[test]
fn compaction_lint_corpus_replays() {
    replay_corpus("compaction_lint", 6, compaction_lint::check);
}

/// Seeds: hand-made inputs that reach every operation and every rule.
fn op_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let ops = |flags: u8, list: &[(u8, u8, u8)]| {
        let mut v = vec![flags];
        for &(o, a, b) in list {
            v.extend([o, a, b]);
        }
        v
    };
    vec![
        ("appends", ops(0, &[(0, 3, 0), (1, 40, 1), (2, 15, 2), (0, 200, 3)])),
        ("edit-truncate", ops(1, &[(0, 3, 0), (1, 4, 0), (2, 5, 0), (3, 1, 0), (4, 1, 0), (0, 9, 0)])),
        ("blob-bodies-small-segments", ops(0, &[(0, 15, 0), (1, 15, 3), (2, 15, 5), (5, 15, 7), (0, 15, 9)])),
        ("reopen-sync", ops(3, &[(0, 3, 0), (6, 0, 2), (1, 8, 1), (6, 0, 1), (3, 0, 0)])),
        ("rebuild", ops(2, &[(0, 3, 0), (5, 9, 1), (7, 0, 0), (1, 2, 1), (6, 0, 3), (7, 0, 0)])),
        ("lz4", ops(4, &[(0, 15, 0), (5, 15, 1), (6, 0, 2), (3, 0, 0)])),
        ("truncate-all-edit-again", ops(0, &[(0, 1, 0), (4, 0, 0), (0, 2, 0), (3, 0, 0), (4, 9, 0)])),
        ("both-chats", ops(1, &[(0, 1, 0), (0, 1, 1), (3, 0, 1), (4, 0, 0), (6, 0, 0), (3, 0, 1)])),
    ]
}

fn approval_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let with = |ctrl: u8, text: &[u8]| {
        let mut v = vec![ctrl];
        v.extend_from_slice(text);
        v
    };
    vec![
        ("plain", with(0, b"cargo test: 42 passed")),
        ("mcp-request", with(0, &[0xF8])),
        ("mcp-response", with(0, &[0xF9])),
        ("requires-action", with(0, b"out: \xFA")),
        ("nested-string", with(0, &[0xFB])),
        ("prose-injection", with(1, &[0xFC])),
        ("request-answered", with(3, &[0xF8, b' ', 0xF9])),
        ("archived", with(4, &[0xF8])),
        ("archived-request-answered", with(7, b"log\n\xFA\n")),
        ("broken-json", with(0, &[0xFD, 0xFE, 0xFF, 0xFD, b'"', b'x'])),
    ]
}

fn lint_seeds() -> Vec<(&'static str, Vec<u8>)> {
    // [len, protected, bound, message codes..., plan items (kind, a, b)...]
    vec![
        ("empty-plan", vec![6, 5, 10, 0, 2, 3, 1, 0, 1]),
        ("trim-result", vec![6, 5, 10, 0, 2, 3, 1, 0, 1, 0, 2, 0]),
        ("trim-not-result", vec![6, 5, 10, 0, 2, 3, 1, 0, 1, 0, 1, 0]),
        ("squish-call-with-result", vec![6, 5, 0, 0, 2, 3, 1, 0, 1, 9, 1, 3]),
        ("squish-overlap-protected", vec![8, 4, 10, 0, 1, 2, 3, 1, 0, 1, 1, 1, 1, 4, 3, 2, 6]),
        ("squish-out-of-range-reversed", vec![4, 9, 1, 0, 1, 0, 1, 1, 3, 9, 5, 2, 1]),
        ("boundaries-too-large", vec![7, 7, 1, 0, 2, 3, 2, 3, 1, 0, 1, 2, 4, 255, 1, 6]),
    ]
}

#[test]
#[ignore = "rewrites the seed corpora; run by hand"]
fn write_reliability_seed_corpora() {
    for (target, seeds) in
        [("op_sequence", op_seeds()), ("approval", approval_seeds()), ("compaction_lint", lint_seeds())]
    {
        let dir = fuzz_dir().join("corpus").join(target);
        std::fs::create_dir_all(&dir).unwrap();
        for f in files_in(&dir) {
            if f.file_name().unwrap().to_string_lossy().starts_with("seed-") {
                std::fs::remove_file(f).unwrap();
            }
        }
        for (name, data) in seeds {
            std::fs::write(dir.join(format!("seed-{name}")), data).unwrap();
        }
    }
}
