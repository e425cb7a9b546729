//! Claims of `undertext mcp`: a Model Context Protocol server on stdio that any client can
//! drive with plain JSON-RPC lines — `initialize`, `tools/list` (list_chats, search_history,
//! read_context, read_messages), `tools/call` — over a store held by a live writer (this
//! test's process): a message the writer appends after the server started is found by the
//! next search, and each hit's range reads back exactly.

#![cfg(feature = "mcp")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};
use undertext::{NewMessage, Options, Part, Role, Store, ToolContent};

struct Client {
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Client {
    fn send(&mut self, v: &Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// A request; returns its `result` (skipping notifications the server sends).
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "the server closed stdout");
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            if v.get("id") == Some(&json!(id)) {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// A tool call's text, and whether it is an error.
    fn call(&mut self, name: &str, args: Value) -> (String, bool) {
        let r = self.request("tools/call", json!({"name": name, "arguments": args}));
        let text = r["content"][0]["text"].as_str().unwrap_or_default().to_string();
        (text, r["isError"] == json!(true))
    }
}

#[test]
fn mcp_serves_the_four_tools_over_stdio_beside_a_live_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let store = Store::open(&dir, Options::default()).unwrap();
    let id = store.create_chat("local", Default::default()).unwrap();
    let chat = store.chat("local", id).unwrap();
    chat.append(NewMessage::user("where is the okapi config?")).unwrap();
    let mut log = String::new();
    for i in 0..1500 {
        log.push_str(&format!("row {i} fine\n"));
    }
    log.push_str("fatal: axolotl.toml not found\n");
    let a = store.archive("local", &log).unwrap();
    chat.append(NewMessage {
        feedback: false,
        role: Role::Tool,
        parts: vec![Part::ToolResult {
            call_id: "c".into(),
            content: ToolContent::Archived { archive: a, preview: "row 0 fine …".into() },
            is_error: true,
        }],
    })
    .unwrap();
    store.sync().unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_undertext"))
        .arg("--store")
        .arg(&dir)
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut c = Client {
        stdin: child.stdin.take().unwrap(),
        stdout: BufReader::new(child.stdout.take().unwrap()),
        next: 0,
    };
    let init = c.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}),
    );
    assert_eq!(init["serverInfo"]["name"], "undertext", "{init}");
    assert!(init["capabilities"]["tools"].is_object(), "{init}");
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    let tools = c.request("tools/list", json!({}));
    let mut names: Vec<&str> =
        tools["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(names, ["list_chats", "read_context", "read_messages", "search_history"]);

    let (text, err) = c.call("list_chats", json!({}));
    assert!(!err && text.contains(&id.to_string()) && text.contains("2 messages"), "{text}");

    let (text, err) = c.call("search_history", json!({"query": "axolotl toml"}));
    assert!(!err, "{text}");
    let want = format!("{id} seq 1: archive {}", a.id);
    assert!(text.contains(&want), "{text}");
    // The hit's range, read back through read_context.
    let range = text.split("chars ").nth(1).unwrap().split(' ').next().unwrap();
    let (s, e) = range.split_once("..").unwrap();
    let (s, e): (u64, u64) = (s.parse().unwrap(), e.parse().unwrap());
    let (got, err) = c.call("read_context", json!({"archive": a.id.to_string(), "start": s, "end": e}));
    assert!(!err);
    assert_eq!(got, "axolotl.toml");

    // Appended by the live writer after the server started: found by the next call.
    chat.append(NewMessage::user("a late quetzal arrives")).unwrap();
    store.sync().unwrap();
    let (text, _) = c.call("search_history", json!({"query": "quetzal", "chat": id.to_string()}));
    assert!(text.contains(&format!("{id} seq 2: text")), "{text}");
    let (text, err) = c.call("read_messages", json!({"chat": id.to_string(), "start": 0, "end": 3}));
    assert!(!err && text.contains("[2 user]") && text.contains("a late quetzal arrives"), "{text}");
    assert!(text.contains(&format!("archived as {}", a.id)), "{text}");

    // Errors are tool errors, not protocol failures; another owner's ids are unknown.
    let (text, err) = c.call("read_messages", json!({"chat": "chat-00000000000000ff", "start": 0, "end": 1}));
    assert!(err, "{text}");
    let (_, err) = c.call("nope", json!({}));
    assert!(err);

    drop(c);
    let status = child.wait().unwrap();
    assert!(status.success(), "the server ended with {status}");
}
