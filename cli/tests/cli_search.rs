//! Claims of `undertext search`: it finds a message's text and an archived result's text,
//! `--json` prints `{"hits":[{"chat","seq","archive","unit","start","end","snippet",…}]}`
//! whose range reads the match back (the message's text, or `read ARCHIVE --range`),
//! `archive` is null for a message hit, `--chat` and `--limit` narrow it, and another
//! `--owner` finds nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

mod common;

use common::{json, run};
use undertext::{NewMessage, Options, Part, Role, Store, ToolContent};

#[test]
fn search_prints_hits_whose_ranges_read_back_and_only_the_owners() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let (id, text) = {
        let store = Store::open(&dir, Options::default()).unwrap();
        let id = store.create_chat("local", Default::default()).unwrap();
        let chat = store.chat("local", id).unwrap();
        let text = "Ünïcode first: the okapi ate 42 carrots";
        chat.append(NewMessage::user(text)).unwrap();
        let mut log = String::new();
        for i in 0..2000 {
            log.push_str(&format!("step {i} ok\n"));
        }
        log.push_str("panicked at axolotl.rs:7\n");
        let a = store.archive("local", &log).unwrap();
        chat.append(NewMessage {
            feedback: false,
            role: Role::Assistant,
            parts: vec![Part::ToolCall { id: "c".into(), name: "run".into(), args: "{}".into() }],
        })
        .unwrap();
        chat.append(NewMessage {
            feedback: false,
            role: Role::Tool,
            parts: vec![Part::ToolResult {
                call_id: "c".into(),
                content: ToolContent::Archived { archive: a, preview: "step 0 ok …".into() },
                is_error: true,
            }],
        })
        .unwrap();
        let other = store.create_chat("local", Default::default()).unwrap();
        store.chat("local", other).unwrap().append(NewMessage::user("another okapi here")).unwrap();
        store.close().unwrap();
        (id, text)
    };

    let out = json(&dir, &["search", "okapi 42", "--json"]);
    let hits = out["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{out}");
    let h = &hits[0];
    assert_eq!(h["chat"], id.to_string());
    assert_eq!(h["seq"], 0);
    assert!(h["archive"].is_null());
    assert_eq!(h["unit"], "chars");
    let (s, e) = (h["start"].as_u64().unwrap() as usize, h["end"].as_u64().unwrap() as usize);
    assert_eq!(text.chars().skip(s).take(e - s).collect::<String>(), "okapi ate 42");
    assert!(h["snippet"].as_str().unwrap().contains("okapi ate 42 carrots"));

    let out = json(&dir, &["search", "axolotl", "--json"]);
    let h = &out["hits"][0];
    assert_eq!(h["seq"], 2);
    let archive = h["archive"].as_str().unwrap();
    let range = format!("{}..{}", h["start"], h["end"]);
    let read = json(&dir, &["read", archive, "--range", &range, "--json"]);
    assert_eq!(read["text"], "axolotl");

    assert_eq!(json(&dir, &["search", "okapi", "--json"])["hits"].as_array().unwrap().len(), 2);
    assert_eq!(
        json(&dir, &["search", "okapi", "--limit", "1", "--json"])["hits"].as_array().unwrap().len(),
        1
    );
    let one = json(&dir, &["search", "okapi", "--chat", &id.to_string(), "--json"]);
    assert_eq!(one["hits"].as_array().unwrap().len(), 1);
    assert!(
        json(&dir, &["--owner", "bob", "search", "okapi", "--json"])["hits"].as_array().unwrap().is_empty()
    );
    let o = run(&dir, &["--owner", "bob", "search", "okapi", "--chat", &id.to_string()]);
    assert!(!o.status.success());

    let o = run(&dir, &["search", "okapi"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("2 hits for \"okapi\""), "{text}");
}
