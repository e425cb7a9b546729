//! A panic redb raises on a damaged page of `index.redb`, which the engine catches at the
//! index boundary (the command then succeeds or fails with the advice to rebuild), is not
//! printed: the CLI's stderr holds no panic message or backtrace, only the command's own
//! error when it fails.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

mod common;

use common::{import, json, run, transcripts};

#[test]
fn a_redb_panic_caught_on_a_damaged_index_page_is_not_printed() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    import(&store, &[transcripts().join("mini_swe_agent")]);
    let listed = json(&store, &["chats", "--json"]);

    // One bit flipped at a few offsets of every page, where a used page keeps its header and
    // its first entries: on this store several of these make redb panic (an unwrap on a
    // missing child, a key that is not UTF-8, a slice out of range), others fail verification
    // with an error, some touch nothing.
    let index = store.join("index.redb");
    let clean = std::fs::read(&index).unwrap();
    let (mut ok, mut failed) = (0, 0);
    for page in 1..clean.len() / 4096 {
        for at in [40, 93, 146].map(|o| page * 4096 + o) {
            let mut bytes = clean.clone();
            bytes[at] ^= 0x01;
            std::fs::write(&index, &bytes).unwrap();
            let o = run(&store, &["chats", "--json"]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                !err.contains("panicked")
                    && !err.contains("RUST_BACKTRACE")
                    && !err.contains("stack backtrace"),
                "flip at {at}: a caught panic was printed:\n{err}"
            );
            match o.status.code() {
                Some(0) => {
                    assert_eq!(
                        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap(),
                        listed,
                        "flip at {at}"
                    );
                    ok += 1;
                }
                Some(1) => {
                    assert!(err.contains("index") && err.contains("check --rebuild"), "flip at {at}: {err}");
                    assert_eq!(err.trim().lines().count(), 1, "flip at {at}: one line: {err}");
                    failed += 1;
                }
                other => panic!("flip at {at}: exit {other:?}: {err}"),
            }
            // The command may have repaired or rewritten the file: the next try starts clean.
            std::fs::write(&index, &clean).unwrap();
        }
    }
    assert!(ok > 0 && failed > 0, "the flips should both pass and fail: {ok} passed, {failed} failed");
}
