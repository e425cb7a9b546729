//! Stores written with the dictionary codecs (FORMAT.md "Compression") read byte for byte as
//! the builds that wrote them read them: each dictionary is part of the format, and a changed
//! `dict1.bin` or `dict2.bin` (or a decoder that no longer uses it for its codec) fails here.
//!
//! Both fixtures are `import`s of the same two Claude Code transcripts
//! (`spotter/short.jsonl` and a sub-agent's `agent-acompact-70d8e7.jsonl`), each with what its
//! build's `show --json` printed beside it (`NAME.show.json`):
//! * `tests/fixtures/store-disk19-codec3`: codec 3 (dictionary 1, raw content), written by the
//!   CLI of the first build with dictionaries (issue 19);
//! * `tests/fixtures/store-s9-codec4`: codec 4 (dictionary 2: the same content with entropy
//!   tables), written by the CLI of the build that added them (issue 18).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

mod common;

use common::FixtureStore;

const CHATS: [&str; 2] = ["chat-0000000000000001", "chat-0000000000000002"];

/// `fixture` holds blob and message records of `codec`, and reads as written: by a writer
/// open, by a read-only open, and after its index is rebuilt from the log.
fn assert_reads_as_written(fixture: &FixtureStore, codec: u8) {
    let tmp = tempfile::tempdir().unwrap();
    let store = fixture.copy_to(tmp.path());
    let (blobs, messages) = FixtureStore::records_of_codec(&store, codec);
    assert!(
        blobs > 0 && messages > 0,
        "{} holds codec-{codec} records: {blobs} blobs, {messages} messages",
        fixture.name
    );
    assert!(
        fixture.show(&store, &[]) == fixture.expected_show(),
        "show --json differs from the build that wrote the store"
    );
    assert!(
        fixture.show(&store, &["--read-only"]) == fixture.expected_show(),
        "a read-only open reads differently"
    );
    fixture.assert_checks_and_rebuilds_as_written(&store);
}

#[test]
fn a_store_of_codec_3_records_reads_byte_for_byte_as_its_build_read_it() {
    assert_reads_as_written(&FixtureStore { name: "store-disk19-codec3", chats: &CHATS }, 3);
}

#[test]
fn a_store_of_codec_4_records_reads_byte_for_byte_as_its_build_read_it() {
    assert_reads_as_written(&FixtureStore { name: "store-s9-codec4", chats: &CHATS }, 4);
}
