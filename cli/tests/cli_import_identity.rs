//! Claims of issue 37.3, 37.4 and 37.6 through the built binary: an imported chat is found by
//! its source session id (`show <session-uuid>`) and its import key; a bare short number is
//! refused as ambiguous instead of read as hex; an OpenHands chat is titled by its task, not
//! `<uploaded_files>`; the `chats` list keeps one line per chat, whatever the titles; the
//! import summary and `stats` report the same index size.

#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

mod common;

use std::path::{Path, PathBuf};

use common::{json, run};

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data").join(rel)
}

fn spotter(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/transcripts/claude_code/spotter").join(name)
}

const SESSION: &str = "258c7280-ae70-4798-800f-63464d01a85d";

#[test]
fn show_finds_an_imported_chat_by_its_session_id_and_import_key_and_refuses_an_ambiguous_number() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    let file = spotter(&format!("{SESSION}.jsonl"));
    let r = json(&store, &["import", "--json", file.to_str().unwrap()]);
    assert_eq!(r["sessions_new"], 1);
    let by_id = run(&store, &["show", "chat-0000000000000001"]);
    assert!(by_id.status.success(), "{by_id:?}");
    for name in [SESSION.to_string(), format!("claude-code:{SESSION}"), "0x1".to_string()] {
        let o = run(&store, &["show", &name]);
        assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(o.stdout, by_id.stdout, "{name} opens the same chat");
    }
    let o = run(&store, &["show", "1"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("ambiguous") && err.contains("chat-0000000000000001") && err.contains("0x1"),
        "{err}"
    );
    let o = run(&store, &["show", "no-such-session"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("session id or import key"));
}

#[test]
fn an_openhands_chat_is_titled_by_its_task_and_the_chats_list_keeps_one_line_per_chat() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    let file = spotter(&format!("{SESSION}.jsonl"));
    let eval = data("openhands_eval");
    let sdk = data("openhands_sdk");
    let r = json(
        &store,
        &["import", "--json", file.to_str().unwrap(), eval.to_str().unwrap(), sdk.to_str().unwrap()],
    );
    assert!(r["sessions_new"].as_u64().unwrap() >= 3, "{r}");
    let list = json(&store, &["chats", "--json"]);
    for c in list["chats"].as_array().unwrap() {
        let title = c["title"].as_str().unwrap();
        assert!(!title.starts_with('<'), "a wrapper tag is no title: {title:?}");
        assert!(!title.is_empty());
    }
    let eval_title = list["chats"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["extra"]["import.format"] == "openhands")
        .map(|c| c["title"].as_str().unwrap().to_string())
        .unwrap();
    assert_eq!(eval_title, "Widget.resize() ignores the height argument. Fix it.");
    // An evaluation log is found by its instance id (the folder under llm_completions/).
    let o = run(&store, &["show", "--json", "acme__widgets-3"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let shown: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(shown["chats"][0]["title"], "Widget.resize() ignores the height argument. Fix it.", "{shown}");
    let o = common::run_env(&store, &["chats"], &[("COLUMNS", "80")]);
    assert!(o.status.success());
    let text = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let n = list["chats"].as_array().unwrap().len();
    // A header, one line per chat, a footer.
    assert_eq!(lines.len(), n + 2, "{text}");
    for l in &lines[1..=n] {
        assert!(l.starts_with("chat-"), "every chat's line starts with its id: {l:?}");
        assert!(l.chars().count() <= 80, "fits the terminal: {l:?}");
    }
}

#[test]
fn the_import_summary_and_stats_report_the_same_index_size() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    let dir = spotter("");
    let r = json(&store, &["import", "--json", dir.to_str().unwrap()]);
    let st = json(&store, &["stats", "--json"]);
    assert_eq!(r["index_bytes"], st["index_bytes"], "import {r} vs stats {st}");
    assert_eq!(r["log_bytes"], st["log_bytes"]);
}
