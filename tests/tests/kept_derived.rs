//! Claims of `Options::keep_derived` (what a view and a checkpoint job derive from an
//! unchanged message is kept with its history entry: the guard's previews with their token
//! counts, its token estimate for the cut and the segments, its scan for pending approvals):
//! a replay through the guard and the worker gives, at every model step, the same view (every
//! message byte for byte, the decision, the estimate, the swap) and the same prepared
//! checkpoint as a replay that derives everything again — on every session of the shared
//! transcripts and on a long tool loop, with edits, an approval request edited into a tool
//! result and a truncation in the middle (each makes a new entry, whose kept values are
//! made again).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::time::Duration;

use undertext::Budget;
use undertext::Worker;
use undertext::import::{self, Format};
use undertext::{Chat, ChatMeta, Durability, NewMessage, Options, Part, Role, Store, ToolContent};
use undertext_cli::replay::{ReplayOptions, start_worker};
use undertext_tests::{Rng, seed, transcripts};

/// One store of a pair: its chat and the worker preparing its checkpoints.
struct Side {
    _dir: tempfile::TempDir,
    store: Store,
    worker: Option<Worker>,
    chat: Chat,
}

impl Side {
    fn new(keep: bool, opts: &ReplayOptions) -> Side {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(
            dir.path(),
            Options::default().durability(Durability::None).preallocate(false).keep_derived(keep),
        )
        .unwrap();
        let worker = start_worker(&store, opts).unwrap();
        let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
        Side { _dir: dir, store, worker: Some(worker), chat }
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            w.stop();
        }
    }
}

/// A chat replayed on two stores at once, one keeping derived values and one deriving them
/// again, compared at every model step.
struct Pair {
    kept: Side,
    again: Side,
    budget: Budget,
    steps: u64,
    swaps: u64,
    compacted: u64,
}

impl Pair {
    fn new(window: u64, reserve: u64) -> Pair {
        let opts = ReplayOptions { window, reserve_output: reserve, ..ReplayOptions::default() };
        Pair {
            kept: Side::new(true, &opts),
            again: Side::new(false, &opts),
            budget: opts.budget(),
            steps: 0,
            swaps: 0,
            compacted: 0,
        }
    }

    /// A model step's view on both (then the job it asked for, waited for), compared.
    fn view(&mut self, what: &str) {
        let a = self.kept.chat.view(&self.budget).unwrap();
        let b = self.again.chat.view(&self.budget).unwrap();
        assert!(self.kept.store.wait_worker_idle(Duration::from_secs(60)), "{what}: the worker is stuck");
        assert!(self.again.store.wait_worker_idle(Duration::from_secs(60)), "{what}: the worker is stuck");
        let at = format!("{what}, step {} (seq {})", self.steps, self.kept.chat.len());
        if a.messages() != b.messages() {
            let short = |v: &undertext::View| {
                v.messages().iter().map(|m| format!("{:?} {} tokens", m.seqs, m.tokens)).collect::<Vec<_>>()
            };
            let i = a.messages().iter().zip(b.messages()).position(|(x, y)| x != y);
            let cut =
                |m: Option<&undertext::ViewMessage>| format!("{m:?}").chars().take(1_500).collect::<String>();
            let state = |s: &Side| {
                let p = s.chat.prepared().map(|p| (p.base_revision, p.reach));
                let errors = s.worker.as_ref().map(Worker::errors);
                format!(
                    "revision {}, published {:?}, prepared {p:?}, errors {errors:?}",
                    s.chat.revision(),
                    s.chat.published_checkpoint()
                )
            };
            panic!(
                "{at}: the views differ (first at {i:?}):\nkept:  {}\nagain: {}\nkept:  {:?}\nagain: {:?}\nkept:  {}\nagain: {}",
                state(&self.kept),
                state(&self.again),
                short(&a),
                short(&b),
                cut(i.and_then(|i| a.messages().get(i))),
                cut(i.and_then(|i| b.messages().get(i)))
            );
        }
        assert_eq!(a.decision(), b.decision(), "{at}: the decision");
        assert_eq!((a.estimate(), a.raw_estimate()), (b.estimate(), b.raw_estimate()), "{at}: the estimate");
        assert_eq!(a.swap().is_some(), b.swap().is_some(), "{at}: the swap");
        let (pa, pb) = (self.kept.chat.prepared(), self.again.chat.prepared());
        assert_eq!(
            pa.as_ref().map(|p| (p.reach, &p.summary, &p.segments)),
            pb.as_ref().map(|p| (p.reach, &p.summary, &p.segments)),
            "{at}: the prepared checkpoint"
        );
        self.steps += 1;
        self.swaps += u64::from(a.swap().is_some());
        self.compacted += u64::from(matches!(a.decision(), undertext::Decision::Compacted { .. }));
    }

    fn append(&self, m: &NewMessage) {
        self.kept.chat.append(m.clone()).unwrap();
        self.again.chat.append(m.clone()).unwrap();
    }

    fn edit(&self, seq: u64, m: &NewMessage) {
        let r = self.kept.chat.revision();
        assert_eq!(r, self.again.chat.revision());
        self.kept.chat.edit(seq, m.clone(), r).unwrap();
        self.again.chat.edit(seq, m.clone(), r).unwrap();
    }

    fn truncate(&self, from: u64) {
        let r = self.kept.chat.revision();
        self.kept.chat.truncate(from, r).unwrap();
        self.again.chat.truncate(from, r).unwrap();
    }

    /// Replays `messages`: a view before each assistant message.
    fn replay(&mut self, what: &str, messages: &[NewMessage]) {
        for m in messages {
            if m.role == Role::Assistant {
                self.view(what);
            }
            self.append(m);
        }
    }
}

/// Command output of about `n` characters, different for each `k`.
fn output(k: u64, n: usize) -> String {
    let mut s = String::with_capacity(n + 80);
    let mut line = 0;
    while s.len() < n {
        s.push_str(&format!("step {k} line {line}: src/lib.rs:{} value {}\n", line * 7 % 900, k * 31 + line));
        line += 1;
    }
    s
}

fn call(k: u64) -> NewMessage {
    NewMessage {
        role: Role::Assistant,
        parts: vec![Part::ToolCall {
            id: format!("c{k}"),
            name: "bash".into(),
            args: format!("{{\"command\": \"sed -n {k},{}p src/lib.rs\"}}", k + 40),
        }],
        feedback: false,
    }
}

fn result(k: u64, text: String) -> NewMessage {
    NewMessage {
        role: Role::Tool,
        parts: vec![Part::ToolResult {
            call_id: format!("c{k}"),
            content: ToolContent::Text(text),
            is_error: false,
        }],
        feedback: false,
    }
}

#[test]
fn a_long_tool_loop_replays_to_the_same_views_and_checkpoints_with_kept_derived_values_as_without() {
    let mut rng = Rng::new(seed(21));
    let mut p = Pair::new(8_000, 1_024);
    p.append(&NewMessage {
        role: Role::User,
        parts: vec![Part::Text("Fix the failing parser test; run the suite before and after.".into())],
        feedback: false,
    });
    let mut k = 0u64;
    let mut steps = |p: &mut Pair, rng: &mut Rng, n: u64, what: &str| {
        for _ in 0..n {
            k += 1;
            p.view(what);
            p.append(&call(k));
            let size = match rng.range(0, 10) {
                0 => rng.range(9_000, 20_000),
                1..=4 => rng.range(1_500, 6_000),
                _ => rng.range(80, 600),
            };
            p.append(&result(k, output(k, size as usize)));
        }
    };
    steps(&mut p, &mut rng, 120, "the loop");
    // An edit of a tool result the guard has previewed: its entry is new, so is its preview.
    p.edit(4, &result(2, output(999, 5_000)));
    steps(&mut p, &mut rng, 20, "after an edit");
    // An approval request edited into a settled result: the cut stops before it.
    let approval = r#"{"type": "mcp_approval_request", "name": "rm", "arguments": "-rf build"}"#;
    p.edit(40, &result(20, format!("waiting for the user\n{approval}\n")));
    steps(&mut p, &mut rng, 20, "after an approval was edited in");
    // ... and edited out again.
    p.edit(40, &result(20, output(20, 3_000)));
    steps(&mut p, &mut rng, 20, "after the approval was edited out");
    // A truncation and new steps at the same seqs.
    let len = p.kept.chat.len();
    p.truncate(len - 30);
    steps(&mut p, &mut rng, 40, "after a truncation");
    assert!(p.compacted > 50, "the guard previewed at {} steps", p.compacted);
    assert!(p.swaps > 2, "{} checkpoints swapped in", p.swaps);
}

#[test]
fn every_shared_transcript_replays_to_the_same_views_and_checkpoints_with_kept_derived_values_as_without() {
    let dir = transcripts::transcripts_dir();
    let mut sessions = 0;
    for f in import::transcript_files(&[dir]).unwrap() {
        for s in import::parse_file(&f, Format::Auto).unwrap().sessions {
            let mut p = Pair::new(8_000, 1_024);
            p.replay(&s.key, &s.messages);
            sessions += 1;
        }
    }
    assert!(sessions > 0, "no transcripts found");
}

/// An estimator that counts the messages it estimates (each costs one `message_overhead`).
#[derive(Debug, Default)]
struct Counting(std::sync::atomic::AtomicU64);

impl undertext::Estimator for Counting {
    fn id(&self) -> &str {
        "counting"
    }

    fn text_tokens(&self, text: &str) -> u64 {
        text.len() as u64 / 4
    }

    fn message_overhead(&self) -> u64 {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        4
    }
}

#[test]
fn a_message_token_estimate_is_kept_with_kept_derived_values_and_made_again_without() {
    for keep in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let counting = std::sync::Arc::new(Counting::default());
        let opts =
            Options::default().durability(Durability::None).estimator(counting.clone()).keep_derived(keep);
        let store = Store::open(dir.path(), opts).unwrap();
        let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
        for k in 0..10 {
            chat.append(NewMessage::user(output(k, 200))).unwrap();
        }
        let estimated = || counting.0.load(std::sync::atomic::Ordering::Relaxed);
        let budget = Budget::new(100_000, 0);
        let first = chat.estimate(&budget).unwrap();
        let before = estimated();
        assert_eq!(chat.estimate(&budget).unwrap(), first, "keep_derived {keep}");
        let again = estimated() - before;
        assert_eq!(again, if keep { 0 } else { 10 }, "messages estimated again with keep_derived {keep}");
    }
}
