//! Claims of the way back from the view: every message and tool result a view leaves out is
//! reachable from a handle the view's own text names — the checkpoint message names its chat
//! and seq range (`read_messages` reads every original back, through the owner's grant, and
//! lists the archived results under it), a preview names its archive (`read_context` reads
//! it whole) — through checkpoints swapped in one after the other (their handles come from
//! the checkpoint, never the summary's text). Another owner reads nothing through them.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::sync::Arc;

use undertext::Extractive;
use undertext::WorkerOptions;
use undertext::{Budget, View};
use undertext::{Chat, ChatMeta, Durability, NewMessage, Options, Part, Role, Store, ToolContent, Unit};
use undertext_tests::{Rng, seed};

/// A model step as real harnesses record it: one assistant message with one to four tool
/// calls (Claude Code and the Agents SDK call tools in parallel), then one message holding
/// every result (most inline, some over the archive threshold). Each result is unique and
/// ends with a fact, so a way back that returns only a head, or only the first results of a
/// long message, is caught. Returns (seq, result text) of each result.
fn step(chat: &Chat, rng: &mut Rng, k: u64) -> Vec<(u64, String)> {
    let calls = if rng.range(0, 3) == 0 { rng.range(2, 5) } else { 1 };
    let ids: Vec<String> = (0..calls).map(|i| format!("c{k}-{i}")).collect();
    chat.append(NewMessage {
        role: Role::Assistant,
        parts: ids
            .iter()
            .map(|id| Part::ToolCall {
                id: id.clone(),
                name: "bash".into(),
                args: format!("{{\"step\": \"{id}\"}}"),
            })
            .collect(),
        feedback: false,
    })
    .unwrap();
    let mut texts = Vec::new();
    for id in &ids {
        let n = if rng.range(0, 5) == 0 { rng.range(9_000, 25_000) } else { rng.range(300, 7_500) } as usize;
        let mut text = format!("fact-{id}-{} ", rng.next_u64() % 1_000_000);
        while text.len() < n {
            text.push_str(&format!("line {} of step {id}\n", text.len()));
        }
        text.push_str(&format!("last fact of {id}: {}\n", rng.next_u64() % 1_000_000));
        texts.push(text);
    }
    let seq = chat
        .append(NewMessage {
            role: Role::Tool,
            parts: ids
                .iter()
                .zip(&texts)
                .map(|(id, t)| Part::ToolResult {
                    call_id: id.clone(),
                    content: ToolContent::Text(t.clone()),
                    is_error: false,
                })
                .collect(),
            feedback: false,
        })
        .unwrap();
    texts.into_iter().map(|t| (seq, t)).collect()
}

/// Reads message `seq` back the way a model would: `read_messages` page after page, as each
/// answer's last line says, then `read_context` on every archive the pages name. True when
/// `original` comes back whole.
fn reads_back_whole(store: &Store, owner: &str, chat: &Chat, seq: u64, original: &str) -> bool {
    let mut pages = String::new();
    let mut args = format!(r#"{{"chat": "{}", "start": {seq}, "end": {}}}"#, chat.id(), seq + 1);
    for _ in 0..64 {
        let page = store.history_tool_call(owner, "read_messages", &args).unwrap();
        let next = page.rfind("offset=").map(|i| {
            page[i + 7..].chars().take_while(char::is_ascii_digit).collect::<String>().parse::<u64>().unwrap()
        });
        // The page without its last line when that line is the way on.
        let body = match next {
            Some(_) => &page[..page.rfind("\n[").unwrap_or(page.len())],
            None => &page[..],
        };
        pages.push_str(body);
        match next {
            Some(o) => {
                args = format!(
                    r#"{{"chat": "{}", "start": {seq}, "end": {}, "offset": {o}}}"#,
                    chat.id(),
                    seq + 1
                )
            }
            None => break,
        }
    }
    if pages.contains(original) {
        return true;
    }
    // An archived result: the page names its archive, which reads back whole.
    pages.match_indices(": archive ").any(|(i, _)| {
        let hex: String = pages[i + 10..].chars().take(64).collect();
        hex.parse::<undertext::BlobId>().is_ok_and(|id| {
            let chars = original.chars().count() as u64;
            store.read_context(owner, &id, 0..chars, Unit::Chars).is_ok_and(|back| back == original)
        })
    })
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
            // A view of the unchanged chat (its summarized ranges remembered) leaves out the same.
            let again = chat.view(&b).unwrap();
            if again.messages().iter().map(|m| m.seqs.clone()).eq(v.messages().iter().map(|m| m.seqs.clone()))
            {
                assert_eq!(again.omitted(), o, "history {h} step {k}: the same view, the same omissions");
            }
            // Every result not sent whole in the view is reachable.
            for (seq, original) in &results {
                let whole = v.messages().iter().any(|m| {
                    m.seqs == (*seq..*seq + 1)
                        && m.parts.iter().any(|p| matches!(p, Part::ToolResult { content: ToolContent::Text(t), .. } if t == original))
                });
                if whole {
                    continue;
                }
                if let Some((_, archive)) = o.results.iter().find(|(s, archive)| {
                    let chars = original.chars().count() as u64;
                    s == seq
                        && store
                            .read_context("o", archive, 0..chars, Unit::Chars)
                            .is_ok_and(|back| &back == original)
                }) {
                    // A preview: its archive id is in the view's text, and reads back whole.
                    assert!(
                        text.contains(&archive.to_string()),
                        "history {h} step {k}: seq {seq}'s archive is not named"
                    );
                    continue;
                }
                // Under a summary: the view names the chat and a range holding it.
                let r = o.ranges.iter().find(|r| r.contains(seq));
                let r = r.unwrap_or_else(|| {
                    let m = v.messages().iter().find(|m| m.seqs.contains(seq));
                    let shown = format!("{m:?}").chars().take(3_000).collect::<String>();
                    panic!("history {h} step {k}: seq {seq} is neither whole, previewed nor summarized: {shown} / omitted {:?}", o.results)
                });
                let handle = format!("{}", chat.id());
                assert!(text.contains(&handle), "history {h} step {k}: the chat's handle is not named");
                assert!(
                    reads_back_whole(&store, "o", &chat, *seq, original),
                    "history {h} step {k}: read_messages({seq}) (range {r:?}), read on to its end, did not give \
                     back the whole result of {} characters",
                    original.len()
                );
                let args = format!(r#"{{"chat": "{}", "start": {seq}, "end": {}}}"#, chat.id(), seq + 1);
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
        (
            "read_messages",
            &format!(r#"{{"chat": "{id}", "start": 0, "end": 1, "offset": 99999}}"#),
            "characters of the answer",
        ),
        (
            "read_messages",
            &format!(r#"{{"chat": "{id}", "start": 0, "end": 1, "offset": -3}}"#),
            "non-negative",
        ),
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

/// The checkpoint message's first line, as the view sends it.
fn checkpoint_line(v: &View) -> String {
    let cp = v.messages().iter().find(|m| m.seqs.end > m.seqs.start + 1).expect("a checkpoint in the view");
    let text = cp.parts.iter().find_map(|p| if let Part::Summary(t) = p { Some(t.clone()) } else { None });
    let text = text.expect("the checkpoint message is a summary");
    text.lines().next().unwrap().to_string()
}

/// The handles line of a checkpoint reaching `reach`, from every message read whole: what
/// the line must say however the chat got into memory.
fn line_from_every_message(chat: &Chat, reach: u64) -> String {
    let mut archived = Vec::new();
    for m in chat.snapshot().messages_with_hidden().unwrap().into_iter().filter(|m| m.seq < reach) {
        for p in &m.parts {
            if let Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } = p {
                archived.push((m.seq, archive.id));
            }
        }
    }
    undertext::internals::line_text(chat.id(), reach, &archived)
}

/// The handles line reads only the messages that may hold an archived result (issue 38): it
/// must still name every archived result under the checkpoint, whether the chat was written
/// in this process or loaded cold from the index, for a result inline in its message, one in
/// a message whose parts went to a body blob, a message edited to hold one and one edited to
/// hold none, and hidden messages.
#[test]
fn the_checkpoint_line_names_every_archived_result_whether_the_chat_was_written_here_or_loaded_cold() {
    let dir = tempfile::tempdir().unwrap();
    let opts =
        || Options::default().durability(Durability::None).archive_threshold(3_000).inline_body_max(4_000);
    let store = Store::open(dir.path(), opts()).unwrap();
    let id = store.create_chat("o", ChatMeta::default()).unwrap();
    let chat = store.chat("o", id).unwrap();
    chat.append(NewMessage::user("audit the parser")).unwrap();
    let mut rng = Rng::new(seed(0x11AD1E5));
    let result = |call: &str, n: usize, rng: &mut Rng| Part::ToolResult {
        call_id: call.into(),
        content: ToolContent::Text(format!("{call} {} ", rng.next_u64()).repeat(n / 24 + 1)),
        is_error: false,
    };
    let mut edited = Vec::new();
    for k in 0..40u64 {
        let call = format!("c{k}");
        chat.append(NewMessage {
            role: Role::Assistant,
            parts: vec![Part::ToolCall { id: call.clone(), name: "bash".into(), args: "{}".into() }],
            feedback: false,
        })
        .unwrap();
        let parts = match k % 4 {
            // One archived result.
            0 => vec![result(&call, 5_000, &mut rng)],
            // Small results whose sum goes to a body blob, one of them archived.
            1 => vec![
                result(&call, 1_500, &mut rng),
                result(&call, 1_500, &mut rng),
                result(&call, 4_000, &mut rng),
            ],
            // Small results in a body blob, none archived.
            2 => vec![result(&call, 2_500, &mut rng), result(&call, 2_500, &mut rng)],
            // Inline, none archived.
            _ => vec![result(&call, 200, &mut rng)],
        };
        let seq = chat.append(NewMessage { role: Role::Tool, parts, feedback: false }).unwrap();
        edited.push(seq);
    }
    // An archived result edited away, and one edited in where there was none.
    let rev = chat.snapshot().revision();
    let small = NewMessage { role: Role::Tool, parts: vec![result("c0", 100, &mut rng)], feedback: false };
    let rev = chat.edit(edited[0], small, rev).unwrap();
    let big = NewMessage { role: Role::Tool, parts: vec![result("c3", 6_000, &mut rng)], feedback: false };
    let rev = chat.edit(edited[3], big, rev).unwrap();
    let pair = edited[4] - 1..edited[4] + 1;
    chat.hide(std::slice::from_ref(&pair), rev).unwrap();
    chat.append(NewMessage::user("second turn")).unwrap();
    chat.append(NewMessage::assistant("ok")).unwrap();
    chat.append(NewMessage::user("third turn")).unwrap();
    let cp = chat.build_checkpoint(&Extractive::default(), &Default::default()).unwrap();
    chat.publish_checkpoint(&cp).unwrap();
    let expected = line_from_every_message(&chat, cp.reach);
    assert!(expected.contains("earlier ones") || expected.matches(": ").count() > 8, "{expected}");
    let b = Budget::new(1_000_000, 0);
    assert_eq!(checkpoint_line(&chat.view(&b).unwrap()), expected, "written in this process");
    drop(chat);
    store.close().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let chat = store.chat("o", id).unwrap();
    assert_eq!(checkpoint_line(&chat.view(&b).unwrap()), expected, "loaded cold from the index");
    drop(chat);
    store.close().unwrap();
    // And from an index rebuilt from the log.
    Store::rebuild_index_at(dir.path(), opts()).unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    assert_eq!(checkpoint_line(&store.chat("o", id).unwrap().view(&b).unwrap()), expected, "after a rebuild");
}
