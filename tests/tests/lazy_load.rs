//! Claims of lazy loading (issue 38): a chat loaded from the index reads exactly as the same
//! chat written in this process — every message, header and view, through edits, truncations,
//! hides, erasures and checkpoints — although it loads its entries a page at a time, in the
//! order reads ask for them. Histories are random walks over many pages (32 messages each),
//! shaped as agent loops: one user task, long runs of assistant/tool steps, a few later user
//! turns and harness feedback arriving as user messages.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext::{
    Budget, Chat, ChatId, ChatMeta, CheckpointOptions, Durability, Extractive, NewMessage, Options, Part,
    Role, Store, ToolContent,
};
use undertext_tests::{Rng, seed};

fn opts() -> Options {
    Options::default().durability(Durability::None).archive_threshold(2_000)
}

/// One agent step: an assistant tool call and its result (sometimes over the archive
/// threshold), or now and then a user turn or harness feedback.
fn step(chat: &Chat, rng: &mut Rng, k: u64) {
    match rng.range(0, 40) {
        0 => {
            chat.append(NewMessage::user(format!("turn {k}: go on"))).unwrap();
        }
        1 => {
            chat.append(NewMessage::feedback(format!("format error at step {k}"))).unwrap();
        }
        _ => {
            let id = format!("c{k}");
            let call = NewMessage {
                role: Role::Assistant,
                parts: vec![Part::ToolCall { id: id.clone(), name: "bash".into(), args: "{}".into() }],
                feedback: false,
            };
            let n = if rng.range(0, 8) == 0 { 2_500 } else { 200 };
            let result = NewMessage {
                role: Role::Tool,
                parts: vec![Part::ToolResult {
                    call_id: id,
                    content: ToolContent::Text(format!("out {k} {} ", rng.next_u64()).repeat(n / 20)),
                    is_error: false,
                }],
                feedback: false,
            };
            chat.append_batch(vec![call, result]).unwrap();
        }
    }
}

/// What a chat reads as: every message with hidden ones, each header, and views at two
/// budgets (the model view a harness sends).
fn reading(chat: &Chat) -> (Vec<String>, Vec<String>, Vec<String>) {
    let snap = chat.snapshot();
    let messages = snap.messages_with_hidden().unwrap().iter().map(|m| format!("{m:?}")).collect();
    let headers =
        (0..snap.len()).map(|s| format!("{:?} {}", snap.header(s).unwrap(), snap.is_hidden(s))).collect();
    let views = [Budget::new(1_000_000, 0), Budget::new(16_000, 2_000)]
        .iter()
        .map(|b| match chat.view(b) {
            Ok(v) => v.to_openai_json(),
            Err(e) => format!("refused: {e}"),
        })
        .collect();
    (messages, headers, views)
}

/// The chat as a fresh process loads it, read in an order that asks for late pages first.
fn cold_reading(dir: &std::path::Path, id: ChatId) -> (Vec<String>, Vec<String>, Vec<String>) {
    let store = Store::open(dir, opts()).unwrap();
    let chat = store.chat("o", id).unwrap();
    let (messages, headers, views) = {
        // Views first (the tail and the task), then everything from the end backwards.
        let views: Vec<String> = [Budget::new(1_000_000, 0), Budget::new(16_000, 2_000)]
            .iter()
            .map(|b| match chat.view(b) {
                Ok(v) => v.to_openai_json(),
                Err(e) => format!("refused: {e}"),
            })
            .collect();
        let snap = chat.snapshot();
        let mut headers: Vec<String> = (0..snap.len())
            .rev()
            .map(|s| format!("{:?} {}", snap.header(s).unwrap(), snap.is_hidden(s)))
            .collect();
        headers.reverse();
        let messages = snap.messages_with_hidden().unwrap().iter().map(|m| format!("{m:?}")).collect();
        (messages, headers, views)
    };
    drop(chat);
    store.close().unwrap();
    (messages, headers, views)
}

#[test]
fn a_chat_loaded_a_page_at_a_time_reads_exactly_as_the_chat_written_in_memory() {
    let base = seed(0x1A2B10AD);
    for h in 0..4u64 {
        let mut rng = Rng::new(base + h);
        let dir = tempfile::tempdir().unwrap();
        let id = {
            let store = Store::open(dir.path(), opts()).unwrap();
            let id = store.create_chat("o", ChatMeta::default()).unwrap();
            store.chat("o", id).unwrap().append(NewMessage::user("fix the failing parser tests")).unwrap();
            store.close().unwrap();
            id
        };
        for round in 0..6u64 {
            let store = Store::open(dir.path(), opts()).unwrap();
            let chat = store.chat("o", id).unwrap();
            for k in 0..rng.range(40, 160) {
                step(&chat, &mut rng, round * 1_000 + k);
            }
            let len = chat.snapshot().len();
            let rev = chat.snapshot().revision();
            // A change somewhere in the history, often on a page not loaded yet.
            let at = rng.range(1, len);
            let is_tool = chat.snapshot().header(at).unwrap().role == Role::Tool;
            match rng.range(0, 5) {
                0 if !is_tool => {
                    let _ = chat.edit(at, NewMessage::assistant(format!("edited in round {round}")), rev);
                }
                1 if len > 100 => {
                    chat.truncate(len - rng.range(1, 60), rev).unwrap();
                }
                2 => {
                    let _ = chat.hide(std::slice::from_ref(&(at..at + 1)), rev);
                }
                3 => {
                    let _ = chat.erase(std::slice::from_ref(&(at..at + 1)), rev);
                }
                _ => {}
            }
            if rng.range(0, 2) == 0 {
                chat.append(NewMessage::user(format!("round {round}: next"))).unwrap();
                chat.append(NewMessage::assistant("ok")).unwrap();
                chat.append(NewMessage::user("and then")).unwrap();
                if let Ok(cp) = chat.build_checkpoint(&Extractive::default(), &CheckpointOptions::default()) {
                    chat.publish_checkpoint(&cp).unwrap();
                }
            }
            let warm = reading(&chat);
            drop(chat);
            store.close().unwrap();
            let cold = cold_reading(dir.path(), id);
            assert_eq!(cold.1, warm.1, "history {h} round {round}: headers");
            assert_eq!(cold.0, warm.0, "history {h} round {round}: messages");
            assert_eq!(cold.2, warm.2, "history {h} round {round}: views");
        }
    }
}

/// A checkpoint stands for its messages only while none of them changed since its base: an
/// edit below its reach on a page the loaded chat never read must drop it from the view,
/// cold as warm (the change is found in the index's revisions, not in an entry per message).
#[test]
fn an_edit_under_a_checkpoint_on_a_page_never_loaded_drops_the_checkpoint_cold_as_warm() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let id = store.create_chat("o", ChatMeta::default()).unwrap();
    let chat = store.chat("o", id).unwrap();
    chat.append(NewMessage::user("task")).unwrap();
    for b in 0..10u64 {
        chat.append_batch((0..50).map(|i| NewMessage::assistant(format!("note {b} {i}"))).collect()).unwrap();
    }
    for t in ["second", "third"] {
        chat.append(NewMessage::user(t)).unwrap();
        chat.append(NewMessage::assistant("ok")).unwrap();
    }
    let cp = chat.build_checkpoint(&Extractive::default(), &CheckpointOptions::default()).unwrap();
    chat.publish_checkpoint(&cp).unwrap();
    let budget = Budget::new(1_000_000, 0);
    let summarized =
        |chat: &Chat| chat.view(&budget).unwrap().messages().iter().any(|m| m.seqs.end > m.seqs.start + 1);
    assert!(summarized(&chat), "the checkpoint is in the view");
    drop(chat);
    store.close().unwrap();

    // A fresh process edits message 100 (a page its view never reads) and views.
    let store = Store::open(dir.path(), opts()).unwrap();
    let chat = store.chat("o", id).unwrap();
    assert!(summarized(&chat), "cold: the checkpoint is in the view");
    let rev = chat.snapshot().revision();
    chat.edit(100, NewMessage::assistant("changed"), rev).unwrap();
    assert!(!summarized(&chat), "warm: an edit under the reach drops the checkpoint");
    drop(chat);
    store.close().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let chat = store.chat("o", id).unwrap();
    assert!(!summarized(&chat), "cold: an edit under the reach drops the checkpoint");
    let m = chat.snapshot().get(100).unwrap();
    assert!(matches!(&m.parts[..], [Part::Text(t)] if t == "changed"), "{m:?}");
}

/// Issue 34: a chat being written lets the entries it wrote leave memory once the index has
/// them (at an append that finds 4,096 or more written since they last left), and loads them
/// again a page at a time when read. Written in one process past several such evictions, with
/// edits, truncations, hides and erasures landing on pages that left memory, it reads exactly
/// as the same chat loaded cold; and while it is written it never holds more than about two
/// evictions' worth of entries, however long it grows.
#[test]
fn a_chat_whose_written_entries_left_memory_reads_exactly_as_cold_and_holds_a_bounded_number() {
    let base = seed(0xE71C7ED);
    for h in 0..2u64 {
        let mut rng = Rng::new(base + h);
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), opts()).unwrap();
        let id = store.create_chat("o", ChatMeta::default()).unwrap();
        let chat = store.chat("o", id).unwrap();
        chat.append(NewMessage::user("fix the failing parser tests")).unwrap();
        let (mut k, mut most) = (0u64, 0usize);
        for round in 0..4u64 {
            let target = chat.snapshot().len() + 4_500;
            while chat.snapshot().len() < target {
                step(&chat, &mut rng, k);
                k += 1;
                most = most.max(chat.snapshot().resident_entries());
            }
            // A change somewhere in the history, most often on a page that left memory: a
            // user message edited, the chat cut, a whole step hidden or erased.
            let snap = chat.snapshot();
            let (len, rev) = (snap.len(), snap.revision());
            let role = |s: u64| snap.header(s).unwrap().role;
            let from = rng.range(1, len - 100);
            let user = (from..len).find(|&s| role(s) == Role::User).unwrap();
            let step =
                (from..len - 1).find(|&s| role(s) == Role::Assistant && role(s + 1) == Role::Tool).unwrap();
            match round {
                0 => {
                    chat.edit(user, NewMessage::user(format!("edited in round {round}")), rev).unwrap();
                }
                1 => {
                    chat.truncate(len - rng.range(1, 60), rev).unwrap();
                }
                2 => {
                    chat.hide(std::slice::from_ref(&(step..step + 2)), rev).unwrap();
                }
                _ => {
                    chat.erase(std::slice::from_ref(&(step..step + 2)), rev).unwrap();
                }
            }
            most = most.max(chat.snapshot().resident_entries());
        }
        let len = chat.snapshot().len();
        assert!(len > 17_000, "history {h}: {len} messages");
        // Two evictions' worth wait for the index at most, plus the few pages (32 entries
        // each) the change's reads loaded.
        assert!(most <= 2 * 4_096 + 8 * 32, "history {h}: {most} entries in memory while writing {len}");
        let warm = reading(&chat);
        drop(chat);
        store.close().unwrap();
        let cold = cold_reading(dir.path(), id);
        assert_eq!(cold.1, warm.1, "history {h}: headers");
        assert_eq!(cold.0, warm.0, "history {h}: messages");
        assert_eq!(cold.2, warm.2, "history {h}: views");
    }
}
