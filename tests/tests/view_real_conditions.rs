//! Claims of the view under real model conditions (providers cache the unchanged prefix of a
//! request and bill it at about a tenth of the input price):
//! - between cuts each request extends the previous one (its stable prefix is the whole
//!   previous request); a cut, when due, does everything due at once (down to the target),
//!   and `stable_prefix_messages` is exactly the longest common prefix of whole messages;
//! - a session under the soft line is sent exactly as resending everything (0 breaks);
//! - the task stays verbatim in every view, however many user messages (harness feedback)
//!   follow it, also under a checkpoint;
//! - a refused view reports the results it previews;
//! - the Anthropic rendering carries at most 4 cache breakpoints, on the task and the last
//!   message among them.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::sync::Arc;

use undertext::{Budget, Decision, View, ViewMessage};
use undertext::{Chat, ChatMeta, Durability, NewMessage, Options, Part, Role, Store};
use undertext::{CheckpointOptions, Extractive};
use undertext::{HardLinePolicy, WorkerOptions};
use undertext_tests::{Rng, seed};

const TASK: &str = "Find why the nightly build of the parser fails and fix it; run the whole suite after.";

fn open(dir: &std::path::Path) -> Store {
    Store::open(dir, Options::default().durability(Durability::None)).unwrap()
}

fn new_chat(store: &Store) -> Chat {
    store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap()
}

/// One agent step as real loops produce them: one call (sometimes parallel calls), results
/// mostly small, sometimes large; no user message between steps.
fn step(chat: &Chat, rng: &mut Rng, k: u64) {
    let calls = if rng.range(0, 6) == 0 { 2 } else { 1 };
    let parts = (0..calls)
        .map(|c| Part::ToolCall {
            id: format!("c{k}-{c}"),
            name: "bash".into(),
            args: format!("{{\"n\": {k}}}"),
        })
        .collect();
    chat.append(NewMessage { role: Role::Assistant, parts, feedback: false }).unwrap();
    for c in 0..calls {
        let n = match rng.range(0, 8) {
            0 => rng.range(6_000, 20_000),
            _ => rng.range(200, 3_000),
        } as usize;
        let text: String = (0..n)
            .map(|i| if i % 67 == 66 { '\n' } else { (b'a' + ((i as u64 * 7 + k) % 26) as u8) as char })
            .collect();
        chat.append(NewMessage::tool_result(format!("c{k}-{c}"), format!("step {k}: {text}"))).unwrap();
    }
}

/// The longest common prefix of whole messages.
fn lcp(a: &[ViewMessage], b: &[ViewMessage]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn previewed(v: &View) -> Vec<u64> {
    v.previewed().to_vec()
}

#[test]
fn between_cuts_each_request_extends_the_previous_one_and_a_cut_goes_down_to_the_target() {
    let base = seed(0xCAC4E);
    for h in 0..6u64 {
        let mut rng = Rng::new(base + h);
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        // The background worker prepares checkpoints (a model call's time between views is
        // modelled by waiting for it to be idle).
        let _worker = store.start_worker(Arc::new(Extractive::default()), WorkerOptions::default()).unwrap();
        let chat = new_chat(&store);
        chat.append(NewMessage::system("You are a coding agent.")).unwrap();
        chat.append(NewMessage::user(TASK)).unwrap();
        let b = Budget::new(32_000, 4_000);
        let mut prev: Option<View> = None;
        let mut swaps = 0;
        let (mut breaks, mut cuts) = (0, 0);
        let mut last_cut_to_target = None;
        for k in 0..140 {
            step(&chat, &mut rng, k);
            let v = chat.view(&b).unwrap();
            assert!(!matches!(v.decision(), Decision::Refused { .. }), "history {h} step {k}: refused");
            if let Some(p) = &prev {
                let shared = lcp(p.messages(), v.messages());
                assert_eq!(v.stable_prefix_messages(), shared, "history {h} step {k}: stable prefix");
                let raw: u64 = v.messages()[..shared].iter().map(|m| m.tokens).sum();
                assert_eq!(v.stable_prefix_tokens(), (raw as f64 * v.calibration()).ceil() as u64);
                assert_eq!(v.stable_prefix_tokens() + v.reread_tokens(), v.estimate());
                let new_cut = v.swap().is_some() || previewed(&v).iter().any(|s| !p.previewed().contains(s));
                swaps += usize::from(v.swap().is_some());
                if shared < p.messages().len() {
                    breaks += 1;
                    // A break is a cut, never a preview undone or a result changed for nothing.
                    assert!(new_cut, "history {h} step {k}: the request changed without a cut");
                }
                if new_cut {
                    cuts += 1;
                    // Everything due at once: a cut that leaves room (at or under the target)
                    // is not followed by another at the next view.
                    if last_cut_to_target == Some(k - 1) {
                        panic!("history {h} step {k}: two cuts in a row");
                    }
                    if v.estimate() <= b.target_limit() {
                        last_cut_to_target = Some(k);
                    }
                }
                // The task is the second message of every view, verbatim.
                assert_eq!(v.messages()[1].parts, vec![Part::Text(TASK.into())]);
            }
            prev = Some(v);
            store.wait_worker_idle(std::time::Duration::from_secs(10));
        }
        eprintln!("history {h}: {breaks} breaks, {cuts} cuts ({swaps} swaps) in 140 views");
        assert!(cuts > 0, "history {h}: the session never crossed the soft line");
        // Fewer breaks than a guard that cuts a little at every step over the line.
        assert!(breaks * 4 < 140, "history {h}: {breaks} breaks in 140 views");
    }
}

#[test]
fn a_session_under_the_soft_line_is_billed_exactly_as_resending_everything() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let chat = new_chat(&store);
    chat.append(NewMessage::user(TASK)).unwrap();
    let b = Budget::new(1_000_000, 8_000);
    let mut rng = Rng::new(7);
    let mut prev_len = 0;
    for k in 0..60 {
        step(&chat, &mut rng, k);
        let v = chat.view(&b).unwrap();
        assert_eq!(v.decision(), &Decision::Fits);
        assert!(v.previewed().is_empty());
        // Every message sent before is sent again unchanged: the whole previous request is
        // the cached prefix, only the new step is read in full.
        assert_eq!(v.stable_prefix_messages(), prev_len, "step {k}");
        let everything: u64 = chat.messages().unwrap().len() as u64;
        assert_eq!(v.messages().len() as u64, everything);
        prev_len = v.messages().len();
    }
}

#[test]
fn the_task_stays_verbatim_in_every_view_however_many_user_messages_follow() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let summarizer = Arc::new(Extractive::default());
    let opts = WorkerOptions {
        at_hard_line: HardLinePolicy::Synchronous,
        checkpoint: CheckpointOptions::default(),
        ..Default::default()
    };
    let _worker = store.start_worker(summarizer, opts).unwrap();
    let chat = new_chat(&store);
    chat.append(NewMessage::system("You are a coding agent.")).unwrap();
    chat.append(NewMessage::user(TASK)).unwrap();
    let b = Budget::new(16_000, 2_000);
    let mut rng = Rng::new(11);
    let mut swapped = 0;
    for k in 0..120 {
        step(&chat, &mut rng, k);
        // Harness feedback as a user message every few steps (a format error, a reminder).
        if k % 3 == 2 {
            chat.append(NewMessage::user("Please always provide EXACTLY ONE action in triple backticks."))
                .unwrap();
        }
        let v = chat.view(&b).unwrap();
        swapped += usize::from(v.swap().is_some());
        let task_at = v.messages().iter().position(|m| m.parts == vec![Part::Text(TASK.into())]);
        assert!(task_at.is_some(), "step {k}: the task is missing from the view");
        assert!(task_at.unwrap() <= 1, "step {k}: the task is not in front");
        store.wait_worker_idle(std::time::Duration::from_secs(10));
    }
    assert!(swapped > 0, "no checkpoint was ever swapped in: the claim under a checkpoint is untested");
}

#[test]
fn a_refused_view_reports_the_results_it_previews() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let chat = new_chat(&store);
    chat.append(NewMessage::user(TASK)).unwrap();
    let mut rng = Rng::new(3);
    for k in 0..30 {
        step(&chat, &mut rng, k);
    }
    // The last step alone is larger than the window: 40 parallel calls whose results are
    // each under the archiving threshold (they stay inline) — nothing can save the call.
    let parts = (0..40)
        .map(|c| Part::ToolCall { id: format!("big{c}"), name: "cat".into(), args: "{}".into() })
        .collect();
    chat.append(NewMessage { role: Role::Assistant, parts, feedback: false }).unwrap();
    for c in 0..40 {
        chat.append(NewMessage::tool_result(format!("big{c}"), format!("{c} {}", "word ".repeat(1_400))))
            .unwrap();
    }
    let v = chat.view(&Budget::new(32_000, 4_000)).unwrap();
    assert!(matches!(v.decision(), Decision::Refused { .. }), "{:?}", v.decision());
    assert!(!v.previewed().is_empty(), "a refused view carrying previews reports none");
    for s in v.previewed() {
        let m = v.messages().iter().find(|m| m.seqs.start == *s).unwrap();
        assert!(
            m.parts.iter().any(|p| matches!(
                p,
                Part::ToolResult { content: undertext::ToolContent::Archived { .. }, .. }
            ))
        );
    }
}

#[test]
fn the_anthropic_rendering_marks_at_most_four_cache_breakpoints_on_the_task_and_the_last_message() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let chat = new_chat(&store);
    chat.append(NewMessage::system("You are a coding agent.")).unwrap();
    chat.append(NewMessage::user(TASK)).unwrap();
    let mut rng = Rng::new(5);
    let b = Budget::new(32_000, 4_000);
    for k in 0..80 {
        step(&chat, &mut rng, k);
        let v = chat.view(&b).unwrap();
        let req: serde_json::Value = serde_json::from_str(&v.to_anthropic_json()).unwrap();
        let msgs = req["messages"].as_array().unwrap();
        let marked: Vec<(usize, usize)> = msgs
            .iter()
            .enumerate()
            .flat_map(|(i, m)| {
                m["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| b.get("cache_control").is_some())
                    .map(move |(j, _)| (i, j))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert!(!marked.is_empty() && marked.len() <= 4, "step {k}: {} breakpoints", marked.len());
        assert_eq!(msgs[0]["content"][0]["text"], TASK);
        assert!(
            msgs[0]["content"][0].get("cache_control").is_some(),
            "step {k}: the task is not a breakpoint"
        );
        let last = msgs.len() - 1;
        let last_block = msgs[last]["content"].as_array().unwrap().len() - 1;
        assert!(marked.contains(&(last, last_block)), "step {k}: the last block is not a breakpoint");
    }
}
