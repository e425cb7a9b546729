//! Claims: bad input to `undertext` gives one line on stderr that says what was wrong, a
//! non-zero exit code, and never a panic or a backtrace; a truncated JSONL loses only its bad
//! line, with file and line named.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::path::Path;
use std::process::{Command, Output};

fn run(store: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_undertext"))
        .arg("--store")
        .arg(store)
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap()
}

/// Asserts a failure with exactly one stderr line containing `want`, and returns it.
fn one_line_error(o: &Output, want: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "expected a failure, got success; stderr {err:?}");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line expected: {err:?}");
    assert!(err.contains(want), "{err:?} should mention {want:?}");
    err
}

fn claude_sample() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/transcripts/claude_code/spotter/tool_heavy.jsonl")
}

#[test]
fn a_truncated_jsonl_reports_its_file_and_line_and_imports_every_other_line() {
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(claude_sample()).unwrap();
    let lines = text.lines().count();
    // Cut the last line in the middle, as a crash while writing would.
    let cut = text.trim_end().rfind('\n').unwrap() + 40;
    let file = tmp.path().join("cut.jsonl");
    std::fs::write(&file, &text[..cut]).unwrap();
    let store = tmp.path().join("s");
    let o = run(&store, &["import", file.to_str().unwrap()]);
    let err = one_line_error(&o, &format!("cut.jsonl:{lines}:"));
    assert!(err.contains("expected a JSON object"), "{err}");
    // The rest is there: the whole file's results but the last line's.
    let o = run(&store, &["stats", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["chats"], 1);
    assert!(v["tool_results"].as_u64().unwrap() >= 5, "{v}");
}

#[test]
fn a_binary_file_is_refused_in_one_line_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("x.json");
    std::fs::write(&file, [0x7fu8, b'E', b'L', b'F', 0, 1, 2, 3, 0xff, 0xfe]).unwrap();
    let store = tmp.path().join("s");
    one_line_error(&run(&store, &["import", file.to_str().unwrap()]), "binary file");
    assert!(!store.exists(), "nothing imported, no store made");
}

#[test]
fn an_unknown_format_name_is_one_line_and_a_file_of_another_format_says_what_was_expected() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    let sample = claude_sample();
    let o = run(&store, &["import", "--format", "yaml", sample.to_str().unwrap()]);
    one_line_error(&o, "yaml");
    let o = run(&store, &["import", "--format", "codex", sample.to_str().unwrap()]);
    one_line_error(&o, "not a Codex rollout");
    let o = run(&store, &["import", "--format", "tau-bench", sample.to_str().unwrap()]);
    one_line_error(&o, "tau-bench");
}

#[test]
fn a_missing_store_is_one_line_saying_how_to_make_one() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("nowhere");
    for args in [vec!["chats"], vec!["stats"], vec!["show", "chat-0000000000000001"], vec!["check"]] {
        one_line_error(&run(&store, &args), "no store at");
    }
    assert!(!store.exists());
}

#[test]
fn bad_ids_ranges_and_units_are_one_line_each() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    let f = tmp.path().join("a.txt");
    std::fs::write(&f, "one\ntwo 😀\n").unwrap();
    let o = run(&store, &["archive", f.to_str().unwrap(), "--json"]);
    assert!(o.status.success());
    let a: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let id = a["id"].as_str().unwrap();
    one_line_error(&run(&store, &["read", "xyz"]), "expected");
    one_line_error(&run(&store, &["read", id, "--range", "3-4"]), "--range");
    one_line_error(&run(&store, &["read", id, "--unit", "word"]), "--unit");
    one_line_error(&run(&store, &["read", id, "--range", "0..99"]), "past the end");
    one_line_error(
        &run(&store, &["read", id, "--range", "9..10", "--unit", "utf16"]),
        "splits a surrogate pair",
    );
    one_line_error(&run(&store, &["show", "chat-zz"]), "chat id");
    one_line_error(&run(&store, &["show", "chat-00000000000000ff"]), "no chat");
    one_line_error(&run(&store, &["--owner", "bob", "read", id]), "not found");
    // What does work: exactly the text, nothing else.
    let o = run(&store, &["read", id, "--range", "1..2", "--unit", "line"]);
    assert_eq!(o.stdout, "two 😀\n".as_bytes());
    let o = run(&store, &["read", id, "--range", "8..10", "--unit", "utf16"]);
    assert_eq!(o.stdout, "😀".as_bytes());
}

#[test]
fn chats_of_an_owner_with_none_names_the_owners_that_hold_chats() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let store = undertext::Store::open(tmp.path(), undertext::Options::default()).unwrap();
        store.create_chat("alice", undertext::ChatMeta::default()).unwrap();
        store.create_chat("alice", undertext::ChatMeta::default()).unwrap();
        let gone = store.create_chat("carol", undertext::ChatMeta::default()).unwrap();
        store.delete_chat("carol", gone).unwrap();
        store.close().unwrap();
    }
    let o = run(tmp.path(), &["chats"]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{err}");
    assert!(out.contains("0 chats of owner \"local\""), "{out}");
    assert!(err.contains("\"alice\" (2)") && err.contains("--owner"), "{err}");
    assert!(!err.contains("carol"), "an owner whose chats are all deleted is named: {err}");
    // An owner with chats gets no note.
    let o = run(tmp.path(), &["--owner", "alice", "chats"]);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("note"), "{}", String::from_utf8_lossy(&o.stderr));
}
