//! Claims of the token estimates the index keeps (layout 11, issue 38): a message whose parts
//! are in its record keeps its estimate by the default estimator with its index row, and a
//! first view after an open reads it there instead of estimating the message's text again —
//! with exactly the figures an estimate made from the text gives (every message's tokens and
//! the view's estimate, at a budget the view fits and at one where the guard previews), for
//! every shape a harness writes: text, tool calls, tool results inline and archived,
//! attachments, approvals, edits and hidden messages. Only a message whose parts are in a body
//! blob is estimated again. An index rebuilt from the log keeps the same estimates; a store
//! with another estimator never reads them.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use undertext::{
    Budget, Chat, ChatId, ChatMeta, Durability, Estimator, Heuristic, NewMessage, Options, Part, Role, Store,
    ToolContent,
};
use undertext_tests::{Rng, seed};

/// An estimator that counts the messages it estimates (each costs one `message_overhead`),
/// estimating as `inner` does and under the id it is given.
#[derive(Debug)]
struct Counting {
    id: &'static str,
    scale: u64,
    messages: AtomicU64,
}

impl Counting {
    fn new(id: &'static str, scale: u64) -> Arc<Counting> {
        Arc::new(Counting { id, scale, messages: AtomicU64::new(0) })
    }

    fn count(&self) -> u64 {
        self.messages.load(Ordering::Relaxed)
    }
}

impl Estimator for Counting {
    fn id(&self) -> &str {
        self.id
    }

    fn text_tokens(&self, text: &str) -> u64 {
        self.scale * Heuristic.text_tokens(text)
    }

    fn message_overhead(&self) -> u64 {
        self.messages.fetch_add(1, Ordering::Relaxed);
        Heuristic.message_overhead()
    }
}

fn opts(e: Arc<Counting>) -> Options {
    Options::default()
        .durability(Durability::None)
        .archive_threshold(2_000)
        .inline_body_max(4 << 10)
        .estimator(e)
}

/// The words of a random text of about `n` bytes: letters, digits, punctuation, wide
/// characters and newlines, as tool output mixes them.
fn text(rng: &mut Rng, n: usize) -> String {
    const WORDS: [&str; 10] =
        ["fn", "main()", "{", "let x = 42;", "错误", "💡", "src/lib.rs:17", "\n", "OK", "é"];
    let mut s = String::new();
    while s.len() < n {
        s.push_str(WORDS[rng.range(0, WORDS.len() as u64) as usize]);
        s.push(' ');
    }
    s
}

/// A history of every shape the index keeps an estimate for, written by `store`'s chat, and
/// the seqs of the messages whose parts went to a body blob.
fn write_history(store: &Store, rng: &mut Rng) -> (ChatId, Vec<u64>) {
    let mut in_blobs = Vec::new();
    let id = store.create_chat("o", ChatMeta::default()).unwrap();
    let chat = store.chat("o", id).unwrap();
    chat.append(NewMessage::system("you are a coding agent")).unwrap();
    chat.append(NewMessage::user(text(rng, 400))).unwrap();
    for k in 0..150u64 {
        let call_id = format!("c{k}");
        // Now and then the assistant thinks aloud at length: over 4 KiB of parts inline go
        // to a body blob.
        let said = if rng.range(0, 5) == 0 { 6_000 } else { 60 };
        let call = NewMessage {
            role: Role::Assistant,
            parts: vec![
                Part::Text(text(rng, said)),
                Part::ToolCall {
                    id: call_id.clone(),
                    name: "bash".into(),
                    args: format!("{{\"cmd\": \"ls {k}\"}}"),
                },
            ],
            feedback: false,
        };
        // Output of every size: inline, archived (over 2,000 bytes: its preview is inline).
        let size = [30, 300, 1_500, 2_500, 9_000][rng.range(0, 5) as usize];
        let result = NewMessage {
            role: Role::Tool,
            parts: vec![Part::ToolResult {
                call_id,
                content: ToolContent::Text(text(rng, size)),
                is_error: rng.range(0, 10) == 0,
            }],
            feedback: false,
        };
        let seqs = chat.append_batch(vec![call, result]).unwrap();
        if said > 4 << 10 {
            in_blobs.push(seqs.start);
        }
        match rng.range(0, 12) {
            0 => {
                chat.append(NewMessage::feedback(format!("format error at step {k}"))).unwrap();
            }
            1 => {
                let (blobs, _) = chat
                    .append_with_blobs(
                        &[format!("image {k}").as_bytes()],
                        vec![NewMessage::user(format!("look at this {k}"))],
                    )
                    .unwrap();
                let shot = NewMessage {
                    role: Role::User,
                    parts: vec![Part::Attachment { mime: "image/png".into(), blob: blobs[0] }],
                    feedback: false,
                };
                chat.append(shot).unwrap();
            }
            2 => {
                let ask = NewMessage {
                    role: Role::Assistant,
                    parts: vec![Part::ApprovalRequest {
                        id: format!("a{k}"),
                        call_id: None,
                        prompt: text(rng, 80),
                    }],
                    feedback: false,
                };
                let answer = NewMessage {
                    role: Role::User,
                    parts: vec![Part::ApprovalResponse {
                        id: format!("a{k}"),
                        approved: k % 2 == 0,
                        reason: Some(text(rng, 20)),
                    }],
                    feedback: false,
                };
                chat.append(ask).unwrap();
                chat.append(answer).unwrap();
            }
            3 => {
                let snap = chat.snapshot();
                let seq = rng.range(2, snap.len());
                let m = snap.range_with_hidden(seq..seq + 1).unwrap().remove(0);
                if !snap.is_hidden(seq)
                    && m.role == Role::Assistant
                    && !m.parts.iter().any(|p| matches!(p, Part::ToolCall { .. }))
                {
                    let edited =
                        NewMessage { role: m.role, parts: vec![Part::Text(text(rng, 90))], feedback: false };
                    chat.edit(seq, edited, snap.revision()).unwrap();
                }
            }
            4 => {
                // The last call and its result, hidden together.
                let snap = chat.snapshot();
                let end = snap.len();
                chat.hide(std::slice::from_ref(&(end - 2..end)), snap.revision()).unwrap();
            }
            _ => {}
        }
    }
    (id, in_blobs)
}

/// What one view says: every message sent (its seqs and tokens), the view's estimate and
/// the request as sent.
type Seen = (Vec<(std::ops::Range<u64>, u64)>, u64, String);

/// What a chat's views say at a budget it fits in and at one where the guard previews.
fn views(chat: &Chat) -> Vec<Seen> {
    [Budget::new(1_000_000, 0), Budget::new(40_000, 2_000)]
        .iter()
        .map(|b| {
            let v = chat.view(b).unwrap();
            let tokens = v.messages().iter().map(|m| (m.seqs.clone(), m.tokens)).collect();
            (tokens, v.estimate(), v.to_openai_json())
        })
        .collect()
}

/// The views of chat `id` in a fresh open of `dir` with estimator `e`, and how many messages
/// `e` estimated for them.
fn cold_views(dir: &std::path::Path, id: ChatId, e: Arc<Counting>) -> (Vec<Seen>, u64) {
    let store = Store::open(dir, opts(e.clone())).unwrap();
    let chat = store.chat("o", id).unwrap();
    let before = e.count();
    let v = views(&chat);
    let estimated = e.count() - before;
    drop(chat);
    store.close().unwrap();
    (v, estimated)
}

#[test]
fn a_first_view_reads_each_message_estimate_from_the_index_with_the_figures_its_text_gives() {
    let base = seed(0xE571_4A7E);
    for h in 0..3u64 {
        let mut rng = Rng::new(base + h);
        let dir = tempfile::tempdir().unwrap();
        let writer = Counting::new(Heuristic::ID, 1);
        let (id, in_blobs) = {
            let store = Store::open(dir.path(), opts(writer.clone())).unwrap();
            let written = write_history(&store, &mut rng);
            store.close().unwrap();
            written
        };
        // The reference: a store that derives nothing and keeps nothing estimates every
        // message from its text.
        let reference = {
            let store =
                Store::open(dir.path(), opts(Counting::new("reference", 1)).keep_derived(false)).unwrap();
            let v = views(&store.chat("o", id).unwrap());
            store.close().unwrap();
            v
        };
        // Only the messages in body blobs that the views show are estimated again.
        let shown = {
            let store = Store::open(dir.path(), opts(Counting::new(Heuristic::ID, 1))).unwrap();
            let snap = store.chat("o", id).unwrap().snapshot();
            in_blobs.iter().filter(|s| !snap.is_hidden(**s)).count() as u64
        };
        assert!(shown > 5, "history {h}: only {shown} messages in body blobs");
        let (kept, estimated) = cold_views(dir.path(), id, Counting::new(Heuristic::ID, 1));
        assert_eq!(
            kept, reference,
            "history {h}: views from the kept estimates differ from views of the text"
        );
        assert_eq!(estimated, shown, "history {h}: a first view estimated {estimated} messages again");
        // An index rebuilt from the log keeps the same estimates.
        std::fs::remove_file(dir.path().join("index.redb")).unwrap();
        let (rebuilt, estimated) = cold_views(dir.path(), id, Counting::new(Heuristic::ID, 1));
        assert_eq!(rebuilt, reference, "history {h}: views after a rebuild differ");
        assert_eq!(
            estimated, shown,
            "history {h}: after a rebuild a first view estimated {estimated} messages"
        );
    }
}

#[test]
fn a_store_with_another_estimator_never_reads_the_kept_estimates() {
    let mut rng = Rng::new(seed(0x07E4_E571));
    let dir = tempfile::tempdir().unwrap();
    let (id, _) = {
        let store = Store::open(dir.path(), opts(Counting::new(Heuristic::ID, 1))).unwrap();
        let written = write_history(&store, &mut rng);
        store.close().unwrap();
        written
    };
    // Twice the default's tokens per text, under its own id: every figure is its own.
    let doubled = Counting::new("doubled", 2);
    let (seen, estimated) = cold_views(dir.path(), id, doubled);
    let reference = {
        let store = Store::open(dir.path(), opts(Counting::new("doubled", 2)).keep_derived(false)).unwrap();
        let v = views(&store.chat("o", id).unwrap());
        store.close().unwrap();
        v
    };
    assert_eq!(seen, reference, "another estimator's views took the default's kept estimates");
    assert!(estimated > 100, "another estimator estimated only {estimated} messages");
}

#[test]
fn an_estimate_kept_by_an_append_is_what_the_same_process_views_with() {
    // The writer's own entries carry the estimate made as it wrote: its views, warm, equal
    // views estimated from the text.
    let mut rng = Rng::new(seed(0x3A4E_0001));
    let dir = tempfile::tempdir().unwrap();
    let writer = Counting::new(Heuristic::ID, 1);
    let store = Store::open(dir.path(), opts(writer.clone())).unwrap();
    let (id, _) = write_history(&store, &mut rng);
    let warm = views(&store.chat("o", id).unwrap());
    store.close().unwrap();
    let reference = {
        let store = Store::open(dir.path(), opts(Counting::new("reference", 1)).keep_derived(false)).unwrap();
        let v = views(&store.chat("o", id).unwrap());
        store.close().unwrap();
        v
    };
    assert_eq!(warm, reference);
}
