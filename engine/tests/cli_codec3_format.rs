//! A store written with codec 3 (Zstandard with the built-in dictionary 1, FORMAT.md
//! "Compression") reads byte for byte as the build that wrote it read it: the dictionary
//! is part of the format, and a changed `dict1.bin` (or a codec-3 decoder that no longer
//! uses it) fails here.
//!
//! The fixture `tests/fixtures/store-disk19-codec3` was written by the CLI built from the
//! `disk19` branch (issue 19, session 7): `import` of two Claude Code transcripts
//! (`spotter/short.jsonl` and a sub-agent's `agent-acompact-70d8e7.jsonl`). Next to it,
//! `store-disk19-codec3.show.json` is what that build's `show --json` printed.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

mod common;

use std::path::Path;

use common::FixtureStore;

const CHATS: [&str; 2] = ["chat-0000000000000001", "chat-0000000000000002"];

const FIXTURE: FixtureStore = FixtureStore { name: "store-disk19-codec3", chats: &CHATS };

/// How many blob records and compact message records (kind 17) of the log are codec 3.
fn codec3_records(store: &Path) -> (usize, usize) {
    use undertext::log::format;
    let (mut blobs, mut messages) = (0, 0);
    for e in std::fs::read_dir(store.join("log")).unwrap() {
        let seg = std::fs::read(e.unwrap().path()).unwrap();
        let mut at = format::SEGMENT_HEADER_LEN;
        while let Ok(b) = format::decode_batch(&seg, at) {
            for r in &b.records {
                // A blob's codec is in its record header; a compact message record's is
                // the second byte of its payload (after the encoding version).
                blobs += usize::from(r.kind == 1 && r.codec == 3);
                messages += usize::from(r.kind == 17 && r.payload.get(1) == Some(&3));
            }
            at = b.end as usize;
        }
    }
    (blobs, messages)
}

#[test]
fn a_store_of_codec_3_records_reads_byte_for_byte_as_its_build_read_it() {
    let tmp = tempfile::tempdir().unwrap();
    let store = FIXTURE.copy_to(tmp.path());
    let (blobs, messages) = codec3_records(&store);
    assert!(
        blobs > 0 && messages > 0,
        "the fixture holds codec-3 records: {blobs} blobs, {messages} messages"
    );
    assert!(
        FIXTURE.show(&store, &[]) == FIXTURE.expected_show(),
        "show --json differs from the build that wrote the store"
    );
    assert!(
        FIXTURE.show(&store, &["--read-only"]) == FIXTURE.expected_show(),
        "a read-only open reads differently"
    );
    FIXTURE.assert_checks_and_rebuilds_as_written(&store);
}
