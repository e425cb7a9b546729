//! Claims of checkpoints: the summary tree has the right depth and summarizes every segment
//! once; a refresh after 10 more segments summarizes only those and the merges on their path;
//! publication is refused after an edit or when not newer, fine after appends; the view is
//! the summary plus the messages after the reach; the cut stops before a pending approval.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::sync::atomic::{AtomicUsize, Ordering};

use undertext::Budget;
use undertext::Conflict;
use undertext::{Chat, ChatMeta, Error, Message, NewMessage, Options, Part, Role, Store};
use undertext::{CheckpointOptions, Extractive, Summarizer};

/// Counts calls, and summarizes like `Extractive`.
#[derive(Default)]
struct Counting {
    summarize: AtomicUsize,
    merge: AtomicUsize,
}

impl Summarizer for Counting {
    fn id(&self) -> &str {
        "counting"
    }
    fn summarize(&self, m: &[Message]) -> undertext::Result<String> {
        self.summarize.fetch_add(1, Ordering::Relaxed);
        Extractive::default().summarize(m)
    }
    fn merge(&self, s: &[String]) -> undertext::Result<String> {
        self.merge.fetch_add(1, Ordering::Relaxed);
        Extractive::default().merge(s)
    }
}

fn opts() -> CheckpointOptions {
    // Every message of ~20 words is a segment of its own.
    CheckpointOptions { segment_tokens: 5, fan_in: 4, ..CheckpointOptions::default() }
}

fn chat(store: &Store) -> Chat {
    store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap()
}

fn words(i: usize) -> String {
    format!("step {i}: the agent read a file and noted what it found in section {i} of the report")
}

#[test]
fn a_tree_of_257_segments_has_depth_5_and_a_refresh_summarizes_only_what_is_new() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = chat(&store);
    c.append(NewMessage::user("start")).unwrap();
    for i in 0..256 {
        c.append(NewMessage::assistant(words(i))).unwrap();
    }
    c.append(NewMessage::user("turn two")).unwrap();
    c.append(NewMessage::user("turn three")).unwrap();
    let s = Counting::default();
    let cp = c.build_checkpoint(&s, &opts()).unwrap();
    assert_eq!(cp.segments.len(), 257);
    assert_eq!(cp.reach, 257, "the last two user turns stay raw");
    assert_eq!(cp.stats.depth, 5, "257 → 65 → 17 → 5 → 2 → 1");
    assert_eq!((cp.stats.summarized, s.summarize.load(Ordering::Relaxed)), (257, 257));
    assert_eq!(cp.stats.merged, 64 + 16 + 4 + 1 + 1);
    // Building again summarizes nothing.
    let again = c.build_checkpoint(&s, &opts()).unwrap();
    assert_eq!((again.stats.summarized, again.stats.merged), (0, 0));
    assert_eq!(again.summary, cp.summary);
    // Ten more settled segments: 8 assistant messages and the two user turns that become settled.
    for i in 0..8 {
        c.append(NewMessage::assistant(words(1000 + i))).unwrap();
    }
    c.append(NewMessage::user("turn four")).unwrap();
    c.append(NewMessage::user("turn five")).unwrap();
    let before = s.summarize.load(Ordering::Relaxed);
    let refreshed = c.build_checkpoint(&s, &opts()).unwrap();
    assert_eq!(refreshed.segments.len(), 267);
    assert_eq!(refreshed.stats.summarized, 10);
    assert_eq!(s.summarize.load(Ordering::Relaxed) - before, 10);
    assert!(
        refreshed.stats.merged <= 2 * refreshed.stats.depth,
        "merged {} on a path of depth {}",
        refreshed.stats.merged,
        refreshed.stats.depth
    );
    // The refresh starts from segment summaries, never from the old checkpoint summary.
    assert_ne!(refreshed.root, cp.root);
}

#[test]
fn publication_is_guarded_by_revision_and_reach() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = chat(&store);
    c.append(NewMessage::user("start")).unwrap();
    for i in 0..20 {
        c.append(NewMessage::assistant(words(i))).unwrap();
    }
    c.append(NewMessage::user("two")).unwrap();
    c.append(NewMessage::user("three")).unwrap();
    let s = Extractive::default();
    let stale = c.build_checkpoint(&s, &opts()).unwrap();
    c.edit(3, NewMessage::assistant("edited"), c.revision()).unwrap();
    match c.publish_checkpoint(&stale) {
        Err(Error::Conflict(Conflict::Edited { base, now })) => assert_eq!((base, now), (0, 1)),
        other => panic!("expected Edited, got {other:?}"),
    }
    assert_eq!(c.published_checkpoint(), None);
    let cp = c.build_checkpoint(&s, &opts()).unwrap();
    // Appends after the base are fine.
    c.append(NewMessage::assistant("more")).unwrap();
    c.publish_checkpoint(&cp).unwrap();
    assert_eq!(c.published_checkpoint(), Some((1, cp.reach)));
    match c.publish_checkpoint(&cp) {
        Err(Error::Conflict(Conflict::NotNewer { published_reach })) => assert_eq!(published_reach, cp.reach),
        other => panic!("expected NotNewer, got {other:?}"),
    }
    // The view is the task (the first user turn's message, verbatim: a summary never
    // replaces it), the summary, and every message from the reach.
    let v = c.view(&Budget::new(1_000_000, 0)).unwrap();
    assert_eq!(v.messages()[0].seqs, 0..1);
    assert_eq!(v.messages()[0].parts, vec![Part::Text("start".into())]);
    assert_eq!(v.messages()[1].seqs, 0..cp.reach);
    assert!(matches!(&v.messages()[1].parts[0], Part::Summary(t) if t.contains(&cp.summary)));
    assert_eq!(v.messages()[2].seqs.start, cp.reach);
    assert_eq!(v.messages().last().unwrap().seqs.end, c.len());
    // It survives a reopen.
    let id = c.id();
    drop(c);
    drop(store);
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = store.chat("o", id).unwrap();
    assert_eq!(c.published_checkpoint(), Some((1, cp.reach)));
    assert_eq!(c.view(&Budget::new(1_000_000, 0)).unwrap().messages()[1].seqs, 0..cp.reach);
    // An edit inside the reach makes the view show the messages again.
    c.edit(2, NewMessage::assistant("edited again"), c.revision()).unwrap();
    let v = c.view(&Budget::new(1_000_000, 0)).unwrap();
    assert_eq!(v.messages()[0].seqs, 0..1);
    assert_eq!(v.messages()[1].seqs, 1..2);
}

#[test]
fn the_cut_stops_before_a_pending_approval() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = chat(&store);
    c.append(NewMessage::user("start")).unwrap();
    for i in 0..5 {
        c.append(NewMessage::assistant(words(i))).unwrap();
    }
    let pending = c
        .append(NewMessage {
            role: Role::Assistant,
            parts: vec![Part::ApprovalRequest { id: "a".into(), call_id: None, prompt: "delete?".into() }],
            feedback: false,
        })
        .unwrap();
    for i in 0..5 {
        c.append(NewMessage::assistant(words(100 + i))).unwrap();
    }
    c.append(NewMessage::user("two")).unwrap();
    c.append(NewMessage::user("three")).unwrap();
    let cp = c.build_checkpoint(&Extractive::default(), &opts()).unwrap();
    assert_eq!(cp.reach, pending, "the cut stops before the pending approval");
    c.append(NewMessage {
        role: Role::User,
        parts: vec![Part::ApprovalResponse { id: "a".into(), approved: true, reason: None }],
        feedback: false,
    })
    .unwrap();
    c.append(NewMessage::user("four")).unwrap();
    let cp2 = c.build_checkpoint(&Extractive::default(), &opts()).unwrap();
    assert!(cp2.reach > pending, "answered, the approval no longer stops the cut");
}

/// Records what it was asked to summarize.
#[derive(Default)]
struct Recording {
    seen: std::sync::Mutex<Vec<String>>,
}

impl Summarizer for Recording {
    fn id(&self) -> &str {
        "recording"
    }
    fn summarize(&self, m: &[Message]) -> undertext::Result<String> {
        let mut seen = self.seen.lock().unwrap();
        for msg in m {
            if let Some(Part::Text(t)) = msg.parts.first() {
                seen.push(t.clone());
            }
        }
        Extractive::default().summarize(m)
    }
    fn merge(&self, s: &[String]) -> undertext::Result<String> {
        Extractive::default().merge(s)
    }
}

#[test]
fn a_checkpoint_after_a_retry_takes_the_completed_steps_of_every_attempt_in_order() {
    use undertext::StepStatus;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = chat(&store);
    c.append(NewMessage::user("fix the build")).unwrap();
    let after_user = c.len();
    for k in 0..3 {
        c.record_step(
            1,
            "first",
            k,
            StepStatus::Complete,
            vec![NewMessage::assistant(format!("first attempt step {k}"))],
        )
        .unwrap();
    }
    c.record_step(
        1,
        "first",
        3,
        StepStatus::Interrupted,
        vec![NewMessage::assistant("first attempt cut off")],
    )
    .unwrap();
    // The harness retries: it truncates the failed attempt and runs a new stream.
    c.truncate(after_user, c.revision()).unwrap();
    for k in 0..2 {
        c.record_step(
            1,
            "retry",
            k,
            StepStatus::Complete,
            vec![NewMessage::assistant(format!("retry step {k}"))],
        )
        .unwrap();
    }
    c.append(NewMessage::user("two")).unwrap();
    c.append(NewMessage::user("three")).unwrap();
    let s = Recording::default();
    c.build_checkpoint(
        &s,
        &CheckpointOptions { segment_tokens: 100_000, fan_in: 4, ..CheckpointOptions::default() },
    )
    .unwrap();
    let seen = s.seen.lock().unwrap().clone();
    for want in [
        "first attempt step 0",
        "first attempt step 1",
        "first attempt step 2",
        "retry step 0",
        "retry step 1",
    ] {
        assert!(seen.iter().any(|t| t == want), "{want:?} not summarized: {seen:?}");
    }
    assert!(!seen.iter().any(|t| t == "first attempt cut off"), "an interrupted step is not source material");
    let first: Vec<&String> = seen.iter().filter(|t| t.starts_with("first attempt step")).collect();
    assert_eq!(first, ["first attempt step 0", "first attempt step 1", "first attempt step 2"], "in order");
}

#[test]
fn steps_still_in_the_chat_stay_out_of_the_summary_and_only_interrupted_attempts_are_lost_work() {
    use undertext::StepStatus;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let c = chat(&store);
    c.append(NewMessage::user("fix the build")).unwrap();
    let after_user = c.len();
    // An attempt cut off and retried: its completed step is in no current message.
    c.record_step(1, "lost", 0, StepStatus::Complete, vec![NewMessage::assistant("lost attempt step 0")])
        .unwrap();
    c.record_step(1, "lost", 1, StepStatus::Interrupted, vec![NewMessage::assistant("lost attempt cut")])
        .unwrap();
    c.truncate(after_user, c.revision()).unwrap();
    // A long autonomous loop: every step recorded with `record_step`, all still in the chat.
    for k in 0..60u32 {
        let seq = c.len();
        c.record_step(
            1,
            "main",
            k,
            StepStatus::Complete,
            vec![NewMessage::assistant(format!("kept seq {seq}"))],
        )
        .unwrap();
    }
    let s = Recording::default();
    let cp = c
        .build_checkpoint(
            &s,
            &CheckpointOptions { segment_tokens: 200, fan_in: 4, protect_max_tokens: Some(200) },
        )
        .unwrap();
    let reach = cp.reach;
    assert!(reach > 10 && reach < c.len(), "a cut inside the loop, found reach {reach} of {}", c.len());
    let seen = s.seen.lock().unwrap().clone();
    let past: Vec<&String> = seen
        .iter()
        .filter(|t| t.strip_prefix("kept seq ").is_some_and(|n| n.parse::<u64>().unwrap() >= reach))
        .collect();
    assert!(past.is_empty(), "messages at or after the reach {reach} summarized: {past:?}");
    for seq in 1..reach {
        let want = format!("kept seq {seq}");
        assert_eq!(seen.iter().filter(|t| **t == want).count(), 1, "{want:?} summarized once: {seen:?}");
    }
    assert!(seen.iter().any(|t| t == "lost attempt step 0"), "the retried attempt is lost work: {seen:?}");
    assert!(!seen.iter().any(|t| t == "lost attempt cut"), "an interrupted step is not source material");
    for n in reach..c.len() {
        assert!(!cp.summary.contains(&format!("kept seq {n}")), "the summary mentions message {n}");
    }
}
