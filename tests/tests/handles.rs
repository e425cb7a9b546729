//! Claims of the way back from the view: every message and tool result a view leaves out is
//! reachable from a handle the view's own text names — the checkpoint message names its chat
//! and seq range (`read_messages` reads every original back, through the owner's grant, and
//! lists the archived results under it), a preview names its archive (`read_context` reads
//! it whole) — through checkpoints swapped in one after the other (their handles come from
//! the checkpoint, never the summary's text). Another owner reads nothing through them.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::sync::Arc;

use undertext::budget::{Budget, View};
use undertext::checkpoint::Extractive;
use undertext::worker::WorkerOptions;
use undertext::{Chat, ChatMeta, Durability, NewMessage, Options, Part, Role, Store, ToolContent, Unit};
use undertext_tests::{Rng, seed};

fn step(chat: &Chat, rng: &mut Rng, k: u64) -> Vec<(u64, String)> {
    let id = format!("c{k}");
    chat.append(NewMessage {
        role: Role::Assistant,
        parts: vec![Part::ToolCall {
            id: id.clone(),
            name: "bash".into(),
            args: format!("{{\"step\": {k}}}"),
        }],
        feedback: false,
    })
    .unwrap();
    let n = if rng.range(0, 5) == 0 { rng.range(9_000, 25_000) } else { rng.range(300, 4_000) } as usize;
    let mut text = format!("fact-{k}-{} ", rng.next_u64() % 1_000_000);
    while text.len() < n {
        text.push_str(&format!("line {} of step {k}\n", text.len()));
    }
    let seq = chat.append(NewMessage::tool_result(&id, &text)).unwrap();
    vec![(seq, text)]
}

/// The whole text the model sees.
fn seen(v: &View) -> String {
    v.to_openai_json()
}

#[test]
fn everything_a_view_leaves_out_comes_back_by_a_handle_its_text_names() {
    let base = seed(0x4A4D1E5);
    for h in 0..3u64 {
        let mut rng = Rng::new(base + h);
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
        let _worker = store.start_worker(Arc::new(Extractive::default()), WorkerOptions::default()).unwrap();
        let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
        chat.append(NewMessage::user("audit the parser and report every failing case")).unwrap();
        let mut results = Vec::new();
        let b = Budget::new(24_000, 3_000);
        let mut swaps = 0;
        for k in 0..150 {
            results.extend(step(&chat, &mut rng, k));
            let v = chat.view(&b).unwrap();
            swaps += usize::from(v.swap().is_some());
            store.wait_worker_idle(std::time::Duration::from_secs(10));
            if k % 10 != 9 {
                continue;
            }
            let text = seen(&v);
            let o = v.omitted();
            // Every result not sent whole in the view is reachable.
            for (seq, original) in &results {
                let whole = v.messages().iter().any(|m| {
                    m.seqs == (*seq..*seq + 1)
                        && m.parts.iter().any(|p| matches!(p, Part::ToolResult { content: ToolContent::Text(t), .. } if t == original))
                });
                if whole {
                    continue;
                }
                if let Some((_, archive)) = o.results.iter().find(|(s, _)| s == seq) {
                    // A preview: its archive id is in the view's text, and reads back whole.
                    assert!(
                        text.contains(&archive.to_string()),
                        "history {h} step {k}: seq {seq}'s archive is not named"
                    );
                    let chars = original.chars().count() as u64;
                    assert_eq!(&store.read_context("o", archive, 0..chars, Unit::Chars).unwrap(), original);
                    continue;
                }
                // Under a summary: the view names the chat and a range holding it.
                let r = o.ranges.iter().find(|r| r.contains(seq));
                let r = r.unwrap_or_else(|| {
                    panic!("history {h} step {k}: seq {seq} is neither whole, previewed nor summarized")
                });
                let handle = format!("{}", chat.id());
                assert!(text.contains(&handle), "history {h} step {k}: the chat's handle is not named");
                let args = format!(r#"{{"chat": "{}", "start": {seq}, "end": {}}}"#, chat.id(), seq + 1);
                let back = store.history_tool_call("o", "read_messages", &args).unwrap();
                let head: String = original.chars().take(2_000).collect();
                assert!(
                    back.contains(&head),
                    "history {h} step {k}: read_messages({seq}) did not return the result (range {r:?})"
                );
                // Another owner gets nothing through the same handle.
                let other = store.history_tool_call("intruder", "read_messages", &args).unwrap();
                assert!(other.starts_with("error: not found"), "{other}");
            }
        }
        assert!(swaps >= 2, "history {h}: {swaps} checkpoints swapped in: merges and refreshes untested");
        // The archived results under the last checkpoint are listed by the range handle.
        let v = chat.view(&b).unwrap();
        let cp =
            v.messages().iter().find(|m| m.seqs.end > m.seqs.start + 1).expect("a checkpoint in the view");
        let args = format!(
            r#"{{"chat": "{}", "start": 0, "end": {}, "archives_only": true}}"#,
            chat.id(),
            cp.seqs.end
        );
        let listed = store.history_tool_call("o", "read_messages", &args).unwrap();
        for m in chat.range(0..cp.seqs.end).unwrap() {
            for p in &m.parts {
                if let Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } = p {
                    assert!(listed.contains(&archive.id.to_string()), "archive of seq {} not listed", m.seq);
                }
            }
        }
    }
}

#[test]
fn history_tool_mistakes_are_answered_in_text() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let id = store.create_chat("o", ChatMeta::default()).unwrap();
    store.chat("o", id).unwrap().append(NewMessage::user("hello")).unwrap();
    for (name, args, expect) in [
        ("read_messages", "not json", "must be a JSON object"),
        ("read_messages", r#"{"chat": "chat-zz", "start": 0, "end": 1}"#, "chat id"),
        ("read_messages", &format!(r#"{{"chat": "{id}", "start": 5, "end": 9}}"#), "chat's length"),
        ("read_context", r#"{"archive": "00", "start": 0, "end": 1}"#, "64 hex digits"),
        (
            "read_context",
            &format!(r#"{{"archive": "{}", "start": 0, "end": 1}}"#, "ab".repeat(32)),
            "not found",
        ),
        ("drop_tables", "{}", "no history tool"),
    ] {
        let out = store.history_tool_call("o", name, args).unwrap();
        assert!(out.starts_with("error:") && out.contains(expect), "{name} {args}: {out}");
    }
}

#[test]
fn search_history_finds_what_left_the_view_and_says_how_to_read_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let id = store.create_chat("o", ChatMeta::default()).unwrap();
    let chat = store.chat("o", id).unwrap();
    chat.append(NewMessage::user("find the flaky test")).unwrap();
    chat.append(NewMessage::tool_result(
        "c1",
        "tests/parser_flaky.rs:77 assertion failed: quokka_count == 3",
    ))
    .unwrap();
    let out =
        store.history_tool_call("o", "search_history", r#"{"query": "quokka_count assertion"}"#).unwrap();
    assert!(out.contains(&id.to_string()) && out.contains("seq 1"), "{out}");
    assert!(out.contains(&format!("read_messages(chat=\"{id}\", start=1, end=2)")), "{out}");
    let other =
        store.history_tool_call("intruder", "search_history", r#"{"query": "quokka_count"}"#).unwrap();
    assert!(other.starts_with("no hit"), "{other}");
    let bad = store.history_tool_call("o", "search_history", r#"{"chat": "chat-zz", "query": "x"}"#).unwrap();
    assert!(bad.starts_with("error:"), "{bad}");
}
