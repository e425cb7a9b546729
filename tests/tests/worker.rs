//! Claims of the worker: past the soft line it prepares a checkpoint off the request path;
//! at the hard line a view swaps it in instead of calling the model, so a tool loop with a
//! slow summarizer crosses the hard line several times without ever finding nothing ready;
//! a checkpoint made stale by an edit is not used; a summarizer's error is reported.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::sync::Arc;
use std::time::Duration;

use undertext::{Budget, Decision};
use undertext::{ChatMeta, Error, Message, NewMessage, Options, Store};
use undertext::{CheckpointOptions, Extractive, Summarizer};
use undertext::{HardLinePolicy, WorkerOptions};
use undertext_tests::pace::Pace;
use undertext_tests::steps::read_step;

/// The extractive summarizer, its summaries cut to 600 chars (a model's are short).
struct Short;

impl Summarizer for Short {
    fn id(&self) -> &str {
        "short-extractive"
    }
    fn summarize(&self, m: &[Message]) -> undertext::Result<String> {
        Extractive { max_chars: 1200 }.summarize(m).map(|s| s.chars().take(600).collect())
    }
    fn merge(&self, s: &[String]) -> undertext::Result<String> {
        Extractive { max_chars: 1200 }.merge(s)
    }
}

/// Runs `steps` steps of a tool loop, a user turn every 4, viewing after each.
fn drive(chat: &undertext::Chat, budget: &Budget, steps: usize) {
    for i in 0..steps {
        if i % 4 == 0 {
            chat.append(NewMessage::user(format!("task {i}"))).unwrap();
        }
        chat.append_batch(read_step(i)).unwrap();
        let _ = chat.view(budget).unwrap();
    }
}

#[test]
fn a_tool_loop_with_a_slow_summarizer_crosses_the_hard_line_without_finding_nothing_ready() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    // Refuse at the hard line if nothing is prepared: a refusal would mean the loop had to wait.
    let opts = WorkerOptions {
        // A summarizer called one call at a time: the pace counts its calls in a row.
        threads: 1,
        at_hard_line: HardLinePolicy::Refuse,
        checkpoint: CheckpointOptions { segment_tokens: 1_000, fan_in: 4, ..CheckpointOptions::default() },
        ..WorkerOptions::default()
    };
    // The setting: 2 s per summarizer call, 2.5 s per model step, so 1.25 calls per
    // step. Paced by the loop (tests/src/pace.rs), not by the clock: one call per step and a
    // second every fourth step, whatever CPU the worker gets on a shared machine (with no
    // call per step, 58 of the 100 views are refused).
    let pace = Pace::new();
    let worker = store.start_worker(pace.pacing(Arc::new(Short)), opts).unwrap();
    let open = pace.opener();
    let budget = Budget::new(14_000, 2_000);
    let mut swaps = Vec::new();
    let mut refused = 0;
    for i in 0..100 {
        if i % 4 == 0 {
            chat.append(NewMessage::user(format!("next task {i}"))).unwrap();
        }
        chat.append_batch(read_step(i)).unwrap();
        let v = chat.view(&budget).unwrap();
        if let Some(d) = v.swap() {
            swaps.push(d);
        }
        if matches!(v.decision(), Decision::Refused { .. }) {
            refused += 1;
        }
        if std::env::var("DEBUG_WORKER").is_ok() {
            eprintln!(
                "step {i}: len {} est {} decision {:?} published {:?} prepared {:?}",
                chat.len(),
                v.estimate(),
                std::mem::discriminant(v.decision()),
                chat.published_checkpoint(),
                chat.prepared().map(|p| (p.base_revision, p.reach))
            );
        }
        // The model's turn: the worker works meanwhile.
        pace.model_step(&store, if i % 4 == 3 { 2 } else { 1 });
    }
    swaps.sort();
    eprintln!(
        "{} swaps at the hard line (median {:?}, max {:?}); {} jobs; {refused} refused",
        swaps.len(),
        swaps.get(swaps.len() / 2),
        swaps.last(),
        worker.jobs_done()
    );
    assert!(swaps.len() >= 2, "the loop should cross the hard line several times, swapped {}", swaps.len());
    assert_eq!(refused, 0, "a view found nothing prepared at the hard line");
    assert!(worker.errors().is_empty(), "{:?}", worker.errors());
    let (base, reach) = chat.published_checkpoint().unwrap();
    assert!(reach > 100 && base == chat.revision());
    drop(open);
    worker.stop();
}

#[test]
fn a_prepared_checkpoint_made_stale_by_an_edit_is_not_published() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    let opts = WorkerOptions {
        at_hard_line: HardLinePolicy::Refuse,
        checkpoint: CheckpointOptions { segment_tokens: 1_000, fan_in: 4, ..CheckpointOptions::default() },
        ..WorkerOptions::default()
    };
    let worker = store.start_worker(Arc::new(Extractive::default()), opts).unwrap();
    let budget = Budget::new(14_000, 2_000);
    drive(&chat, &budget, 30);
    // Let the worker finish what it was asked.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while chat.prepared().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let prepared = chat.prepared().expect("the worker prepared a checkpoint past the soft line");
    chat.edit(1, NewMessage::assistant("edited"), chat.revision()).unwrap();
    assert_ne!(prepared.base_revision, chat.revision());
    match chat.publish_checkpoint(&prepared) {
        Err(Error::Conflict(_)) => {}
        other => panic!("a stale checkpoint must not publish: {other:?}"),
    }
    worker.stop();
}

/// A summarizer that always fails.
struct Failing;

impl Summarizer for Failing {
    fn id(&self) -> &str {
        "failing"
    }
    fn summarize(&self, _: &[Message]) -> undertext::Result<String> {
        Err(Error::InvalidArgument("the model is down".into()))
    }
    fn merge(&self, _: &[String]) -> undertext::Result<String> {
        Err(Error::InvalidArgument("the model is down".into()))
    }
}

#[test]
fn a_failing_summarizer_is_reported_and_retried_by_policy() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    let opts = WorkerOptions {
        at_hard_line: HardLinePolicy::Refuse,
        retries: 2,
        checkpoint: CheckpointOptions { segment_tokens: 1_000, fan_in: 4, ..CheckpointOptions::default() },
        ..WorkerOptions::default()
    };
    let worker = store.start_worker(Arc::new(Failing), opts).unwrap();
    let budget = Budget::new(14_000, 2_000);
    drive(&chat, &budget, 30);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while worker.errors().len() < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let errors = worker.errors();
    assert!(errors.len() >= 3, "one failure and two retries expected: {errors:?}");
    assert!(errors.iter().all(|e| e.contains("the model is down")), "{errors:?}");
    assert!(chat.prepared().is_none());
    worker.stop();
}
