//! Claims of `--read-only` and of the read commands' fallback: while another process holds
//! the store, `chats`, `show`, `view`, `read`, `stats` and `check` read it read-only (with a
//! note on stderr) and print what an ordinary open prints; `--read-only` on a closed store
//! changes no file; a write command under `--read-only` fails, saying why.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

mod common;

use common::{import, json, run, store_files as files, transcripts};

#[test]
fn read_commands_fall_back_to_read_only_beside_a_live_writer_and_read_only_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    import(&store, &[transcripts().join("mini_swe_agent")]);
    let chats = json(&store, &["chats", "--json"]);
    let ids: Vec<String> =
        chats["chats"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap().to_string()).collect();
    assert!(!ids.is_empty());
    let mut show = vec!["show", "--json"];
    show.extend(ids.iter().map(String::as_str));
    let shown = json(&store, &show);

    // --read-only on a closed store: the same output, not a byte changed.
    let before = files(&store);
    let mut ro_show = vec!["--read-only"];
    ro_show.extend(&show);
    assert_eq!(json(&store, &["--read-only", "chats", "--json"]), chats);
    assert_eq!(json(&store, &ro_show), shown);
    assert_eq!(json(&store, &["--read-only", "check", "--json"])["ok"], true);
    assert!(run(&store, &["--read-only", "stats"]).status.success());
    assert!(run(&store, &["--read-only", "view", &ids[0]]).status.success());
    let del = run(&store, &["--read-only", "delete", &ids[0]]);
    assert!(!del.status.success(), "a write under --read-only must fail");
    let err = String::from_utf8_lossy(&del.stderr);
    assert!(err.contains("read-only"), "{err}");
    let rebuild = run(&store, &["--read-only", "check", "--rebuild"]);
    assert!(!rebuild.status.success());
    let after = files(&store);
    let differ: Vec<&String> =
        before.keys().chain(after.keys()).filter(|k| before.get(*k) != after.get(*k)).collect();
    assert!(differ.is_empty(), "--read-only changed {differ:?}");

    // A live writer (this process) holds the store: read commands fall back, with a note.
    let writer = undertext::Store::open(&store, undertext::Options::default()).unwrap();
    for args in [vec!["chats", "--json"], show.clone(), vec!["stats", "--json"], vec!["check", "--json"]] {
        let o = run(&store, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{args:?}: {err}");
        assert!(
            err.contains("is locked by a running process") && err.contains("read-only"),
            "{args:?}: {err}"
        );
        let out: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        match args[0] {
            "chats" => assert_eq!(out, chats),
            "show" => assert_eq!(out, shown),
            "check" => assert_eq!(out["ok"], true, "{out}"),
            _ => {}
        }
    }
    let v = run(&store, &["view", &ids[0]]);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    // A write command does not fall back: the lock is the writer's.
    let del = run(&store, &["delete", &ids[0]]);
    assert!(!del.status.success());
    assert!(
        String::from_utf8_lossy(&del.stderr).contains("locked"),
        "{}",
        String::from_utf8_lossy(&del.stderr)
    );
    writer.close().unwrap();
}
