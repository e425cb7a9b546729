//! Claims of the long autonomous loop (one task, hundreds of tool calls), the main case:
//! the protected tail is bounded, so the settled steps of the current turn are previewed and
//! checkpointed; the task stays verbatim in every view; every view is a request OpenAI and
//! Anthropic accept and reports the estimate of exactly what it sends; a view is refused
//! only when the protected minimum alone is over the hard line.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::sync::Arc;

use undertext::{Budget, Decision, Heuristic};
use undertext::{Chat, ChatMeta, Durability, NewMessage, Options, Part, Role, Store, ToolContent};
use undertext::{CheckpointOptions, Extractive};
use undertext::{HardLinePolicy, WorkerOptions};
use undertext_tests::pace::Pace;
use undertext_tests::views::{anthropic_problems, estimate_of_sent, openai_problems};
use undertext_tests::{Rng, seed};

const TASK: &str = "Fix the failing test in tests/test_parser.py: the parser drops the last \
token of a quoted string. Run the suite before and after.";

fn store(dir: &std::path::Path) -> Store {
    Store::open(dir, Options::default().durability(Durability::None)).unwrap()
}

fn new_chat(store: &Store) -> Chat {
    store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap()
}

/// Command output of `n` characters in lines, different for each `k`.
fn output(k: u64, n: usize) -> String {
    let mut s = String::with_capacity(n + 80);
    let mut line = 0;
    while s.len() < n {
        s.push_str(&format!(
            "step {k} line {line}: src/parser.rs:{} token {} ok\n",
            line * 7 % 900,
            k * 31 + line
        ));
        line += 1;
    }
    s
}

/// One step of an agent: an assistant message with 1–3 calls (parallel when more than one)
/// and their results, sized like real tool output (mostly small, sometimes over the
/// 8 KiB archiving threshold). Returns the call ids.
fn step(chat: &Chat, rng: &mut Rng, k: u64) {
    let calls = if rng.range(0, 5) == 0 { rng.range(2, 4) } else { 1 };
    let parts = (0..calls)
        .map(|c| Part::ToolCall {
            id: format!("call-{k}-{c}"),
            name: "bash".into(),
            args: format!("{{\"command\": \"sed -n {k},{}p src/parser.rs\"}}", k + 40),
        })
        .collect();
    chat.append(NewMessage { role: Role::Assistant, parts, feedback: false }).unwrap();
    for c in 0..calls {
        let n = match rng.range(0, 10) {
            0 => rng.range(9_000, 30_000),
            1..=3 => rng.range(2_000, 7_000),
            _ => rng.range(100, 1_500),
        } as usize;
        chat.append(NewMessage::tool_result(format!("call-{k}-{c}"), output(k * 10 + c, n))).unwrap();
    }
}

fn task_is_verbatim(v: &undertext::View) -> bool {
    v.messages().iter().any(|m| m.role == Role::User && m.parts == vec![Part::Text(TASK.into())])
}

fn assert_valid(v: &undertext::View, b: &Budget, what: &str) {
    let e = Heuristic;
    assert_eq!(openai_problems(v), Vec::<String>::new(), "{what}: not a valid OpenAI request");
    assert_eq!(anthropic_problems(v), Vec::<String>::new(), "{what}: not a valid Anthropic request");
    assert_eq!(v.estimate(), estimate_of_sent(&e, v, b), "{what}: the estimate is not that of what is sent");
}

#[test]
fn a_400_step_single_task_loop_at_32k_is_never_refused_and_keeps_the_task_verbatim() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    // Refuse at the hard line: no view can stall waiting for the worker, so "never
    // refused" means the guard and the prepared checkpoints kept every view inside.
    // A summarizer as slow as a model: 2 s per call against a 3 s model step, so the worker
    // makes 1.5 calls per step (one, then two), counted, not timed (`pace`).
    let pace = Pace::new();
    let worker = store
        .start_worker(
            pace.summarizer(),
            WorkerOptions {
                // A summarizer called one call at a time: the pace counts its calls in a row.
                threads: 1,
                at_hard_line: HardLinePolicy::Refuse,
                checkpoint: CheckpointOptions { segment_tokens: 2_000, ..CheckpointOptions::default() },
                ..WorkerOptions::default()
            },
        )
        .unwrap();
    let _open = pace.opener();
    let chat = new_chat(&store);
    chat.append(NewMessage::system("You are a coding agent. Use the bash tool.")).unwrap();
    chat.append(NewMessage::user(TASK)).unwrap();
    let b = Budget::new(32_000, 4_096);
    let mut rng = Rng::new(seed(0x100F_0400));
    let (mut sent, mut everything, mut swaps, mut previews) = (0u64, 0u64, 0, 0);
    for k in 0..400 {
        let v = chat.view(&b).unwrap();
        assert!(!matches!(v.decision(), Decision::Refused { .. }), "step {k}: refused: {:?}", v.decision());
        assert!(task_is_verbatim(&v), "step {k}: the task is not verbatim in the view");
        assert_valid(&v, &b, &format!("step {k}"));
        swaps += usize::from(v.swap().is_some());
        previews += usize::from(
            matches!(v.decision(), Decision::Compacted { previewed, .. } if !previewed.is_empty()),
        );
        sent += v.estimate();
        everything += chat.estimate(&Budget::new(1 << 40, 0)).unwrap();
        // The model call: the worker works meanwhile.
        pace.model_step(&store, 1 + (k % 2) as u32);
        step(&chat, &mut rng, k);
    }
    assert!(swaps > 0, "no checkpoint was ever swapped in");
    assert!(previews > 0, "the guard never previewed a settled result of the current turn");
    assert!(worker.errors().is_empty(), "{:?}", worker.errors());
    let ratio = sent as f64 / everything as f64;
    eprintln!("400 steps at 32k: {swaps} swaps, {previews} compacted views, sent/everything = {ratio:.3}");
    assert!(ratio < 0.7, "sent {sent} of {everything} ({ratio:.3})");
}

/// A history of one of three shapes: a single-task loop, a chat with a user turn every few
/// steps, or a loop with approvals (structured, answered or not, and a pending approval
/// nested in a tool result's JSON).
fn seeded_history(chat: &Chat, rng: &mut Rng, shape: u64) {
    chat.append(NewMessage::system("system prompt")).unwrap();
    chat.append(NewMessage::user(TASK)).unwrap();
    let steps = rng.range(5, 60);
    for k in 0..steps {
        if shape == 1 && rng.range(0, 4) == 0 {
            chat.append(NewMessage::user(format!("now also look at module {k}"))).unwrap();
        }
        if shape == 2 && rng.range(0, 12) == 0 {
            let id = format!("call-{k}-0");
            chat.append(NewMessage {
                role: Role::Assistant,
                parts: vec![Part::ToolCall { id: id.clone(), name: "deploy".into(), args: "{}".into() }],
                feedback: false,
            })
            .unwrap();
            let pending = format!("{{\"status\": \"pending_approval\", \"tool\": \"deploy\", \"k\": {k}}}");
            chat.append(NewMessage::tool_result(id, pending)).unwrap();
            continue;
        }
        if shape == 2 && rng.range(0, 12) == 0 {
            let answered = rng.range(0, 2) == 0;
            chat.append(NewMessage {
                role: Role::Assistant,
                parts: vec![Part::ApprovalRequest {
                    id: format!("ap{k}"),
                    call_id: None,
                    prompt: "may I delete the cache?".into(),
                }],
                feedback: false,
            })
            .unwrap();
            if answered {
                chat.append(NewMessage {
                    role: Role::User,
                    parts: vec![Part::ApprovalResponse {
                        id: format!("ap{k}"),
                        approved: true,
                        reason: None,
                    }],
                    feedback: false,
                })
                .unwrap();
            }
            continue;
        }
        step(chat, rng, k);
    }
}

#[test]
fn every_view_of_seeded_loops_and_chats_is_a_valid_request_counted_exactly_and_refused_only_when_unservable()
{
    let base = seed(0x100F_0001);
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let _worker = store
        .start_worker(
            Arc::new(Extractive::default()),
            WorkerOptions {
                at_hard_line: HardLinePolicy::Synchronous,
                checkpoint: CheckpointOptions { segment_tokens: 1_500, ..CheckpointOptions::default() },
                ..WorkerOptions::default()
            },
        )
        .unwrap();
    let mut views = 0;
    for h in 0..36u64 {
        let mut rng = Rng::new(base + h);
        let chat = new_chat(&store);
        seeded_history(&chat, &mut rng, h % 3);
        let total = chat.estimate(&Budget::new(1 << 40, 0)).unwrap();
        for _ in 0..5 {
            let window = (total * rng.range(15, 130) / 100).max(2_000);
            let mut b = Budget::new(window, window / 10);
            if rng.range(0, 2) == 0 {
                b.tool_schemas = vec![undertext::compaction::tool::schema_openai()];
            }
            let v = chat.view(&b).unwrap();
            views += 1;
            let what = format!("history {h} (shape {}), window {window}", h % 3);
            assert_valid(&v, &b, &what);
            // The user messages of the last two turns (the task of a single-task loop) stay.
            let msgs = chat.messages().unwrap();
            let last_turn = msgs.last().unwrap().turn;
            for m in msgs.iter().filter(|m| {
                m.role == Role::User
                    && matches!(m.parts.as_slice(), [Part::Text(_)])
                    && m.turn + 1 >= last_turn
            }) {
                assert!(
                    v.messages().iter().any(|vm| vm.role == Role::User && vm.parts == m.parts),
                    "{what}: user message {} of the last two turns is not verbatim",
                    m.seq
                );
            }
            if let Decision::Refused { limit, .. } = v.decision() {
                // What no compaction can remove: the protected minimum, and the summary of
                // a published checkpoint (the summarizer's, sized by it, not by the engine).
                let summary: u64 = v
                    .messages()
                    .iter()
                    .filter(|m| matches!(m.parts.as_slice(), [Part::Summary(_)]))
                    .map(|m| undertext_tests::views::sent_tokens(&Heuristic, &m.parts))
                    .sum();
                let minimum = chat.protected_minimum(&b).unwrap() + summary;
                // A pending approval keeps everything after it out of any checkpoint: those
                // histories may be refused for that reason too.
                let pending = chat.first_pending_approval(None).unwrap().is_some();
                assert!(
                    minimum > *limit || pending,
                    "{what}: refused although the protected minimum and the summary ({minimum}) fit under {limit}"
                );
            }
        }
    }
    assert!(views >= 150);
}

#[test]
fn a_cut_stopped_by_an_approval_inside_a_tool_result_moves_back_before_its_call() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let chat = new_chat(&store);
    chat.append(NewMessage::user(TASK)).unwrap();
    let mut rng = Rng::new(7);
    for k in 0..30 {
        step(&chat, &mut rng, k);
    }
    chat.append(NewMessage {
        role: Role::Assistant,
        parts: vec![Part::ToolCall { id: "deploy".into(), name: "deploy".into(), args: "{}".into() }],
        feedback: false,
    })
    .unwrap();
    let result_seq = chat
        .append(NewMessage::tool_result(
            "deploy",
            r#"{"approval_status": "pending", "action": "deploy prod"}"#,
        ))
        .unwrap();
    for k in 30..60 {
        step(&chat, &mut rng, k);
    }
    let opts =
        CheckpointOptions { segment_tokens: 1_000, protect_max_tokens: Some(2_000), ..Default::default() };
    let cp = chat.build_checkpoint(&Extractive::default(), &opts).unwrap();
    assert_eq!(cp.reach, result_seq - 1, "the cut must fall before the call, not between call and result");
    chat.publish_checkpoint(&cp).unwrap();
    let b = Budget::new(1 << 30, 0);
    let v = chat.view(&b).unwrap();
    assert_valid(&v, &b, "view over the checkpoint");
    let after = v.messages().iter().find(|m| m.seqs.start == cp.reach).unwrap();
    assert_eq!(after.role, Role::Assistant, "the first raw message after the summary is the call");
}

#[test]
fn previews_of_results_archived_on_append_are_counted_as_sent_with_default_options() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let chat = new_chat(&store);
    chat.append(NewMessage::user(TASK)).unwrap();
    for k in 0..12 {
        let id = format!("c{k}");
        chat.append(NewMessage {
            role: Role::Assistant,
            parts: vec![Part::ToolCall { id: id.clone(), name: "cat".into(), args: "{}".into() }],
            feedback: false,
        })
        .unwrap();
        // Over the default 8 KiB archive threshold: archived on append, with a 2,000-char preview.
        chat.append(NewMessage::tool_result(&id, output(k, 12_000))).unwrap();
    }
    assert!(matches!(
        &chat.get(2).unwrap().parts[0],
        Part::ToolResult { content: ToolContent::Archived { .. }, .. }
    ));
    let total = chat.estimate(&Budget::new(1 << 40, 0)).unwrap();
    for pct in [72, 80, 89, 95, 99] {
        let b = Budget::new(total * 100 / pct, 0);
        let v = chat.view(&b).unwrap();
        assert!(matches!(v.decision(), Decision::Compacted { .. }), "{pct} %: {:?}", v.decision());
        assert_eq!(v.estimate(), estimate_of_sent(&Heuristic, &v, &b), "{pct} %: under-counted");
        assert!(v.estimate() <= b.hard_limit());
    }
}

#[test]
fn the_compaction_tool_loop_returns_lint_problems_then_applies_a_corrected_plan() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let chat = new_chat(&store);
    chat.append(NewMessage::user(TASK)).unwrap();
    // Seq 0 the task, then step k = assistant call at 1 + 2k, its result at 2 + 2k.
    for k in 0..40 {
        let id = format!("c{k}");
        chat.append(NewMessage {
            role: Role::Assistant,
            parts: vec![Part::ToolCall { id: id.clone(), name: "cat".into(), args: "{}".into() }],
            feedback: false,
        })
        .unwrap();
        chat.append(NewMessage::tool_result(&id, output(k, 3_000))).unwrap();
    }
    let total = chat.estimate(&Budget::new(1 << 40, 0)).unwrap();
    let mut b = Budget::new(total * 3, 0);
    b.nudge = Some(0.25);
    let v = chat.view(&b).unwrap();
    let nudge = v.nudge().expect("over the nudge line the view carries the nudge");
    assert!(nudge.contains(undertext::compaction::tool::NAME) && nudge.contains("\n1 assistant "));
    assert!(Budget::new(total * 10, 0).nudge.is_none(), "the nudge line is off by default");
    assert!(
        serde_json::from_str::<serde_json::Value>(&undertext::compaction::tool::schema_anthropic()).is_ok()
    );
    let len = chat.len();
    let rev = v.revision();
    // The scripted model's first plan: a squish that starts on a tool result (splitting
    // it from its call) and a trim of the last result, inside the protected tail.
    let bad =
        format!(r#"{{"squishes": [{{"from": 2, "to": 9, "rewrite": "read"}}], "trims": [{}]}}"#, len - 1);
    let answer = chat.compaction_tool_call(&bad, rev, &b).unwrap();
    assert!(answer.starts_with("compaction refused"), "{answer}");
    assert!(answer.contains("boundary") && answer.contains("protected"), "{answer}");
    assert_eq!(chat.revision(), rev);
    assert_eq!(
        chat.view(&b).unwrap().to_openai_json(),
        v.to_openai_json(),
        "a refused plan changed the view"
    );
    // The corrected plan: a squish of whole steps, from a call to a result.
    let good =
        r#"{"squishes": [{"from": 1, "to": 9, "rewrite": "read parser.rs lines 0-80"}], "trims": [10]}"#;
    let answer = chat.compaction_tool_call(good, rev, &b).unwrap();
    assert!(answer.starts_with("compaction applied"), "{answer}");
    let after = chat.view(&b).unwrap();
    assert!(after.estimate() < v.estimate());
    assert!(after.messages().iter().any(|m| m.seqs == (1..9)));
    assert_eq!(chat.len(), len, "the compaction exchange must leave no trace in the chat");
    assert_valid(&after, &b, "after compaction");
    let garbage = chat.compaction_tool_call("{\"trims\": \"all\"}", rev, &b).unwrap();
    assert!(garbage.contains("expected an array"), "{garbage}");
}

#[test]
fn budget_lines_are_exact_for_every_usable_size() {
    assert_eq!(Budget::new(90, 0).soft_limit(), 63);
    for usable in 1..300_000u64 {
        let b = Budget::new(usable, 0);
        assert_eq!(
            (b.target_limit(), b.soft_limit(), b.hard_limit()),
            (usable / 2, usable * 7 / 10, usable * 9 / 10),
            "usable {usable}"
        );
    }
}

#[test]
fn a_view_waits_for_no_sync_and_its_previews_are_durable_with_the_chats_next_write() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = undertext::fault::install(dir.path()).unwrap();
    ctl.track_durability();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let chat = new_chat(&store);
    chat.append(NewMessage::user(TASK)).unwrap();
    let mut texts = std::collections::HashMap::new();
    for k in 0..20 {
        let id = format!("c{k}");
        chat.append(NewMessage {
            role: Role::Assistant,
            parts: vec![Part::ToolCall { id: id.clone(), name: "cat".into(), args: "{}".into() }],
            feedback: false,
        })
        .unwrap();
        // Under the 8 KiB archive threshold: inline, so a preview needs an archive written.
        let text = output(k, 3_000);
        let seq = chat.append(NewMessage::tool_result(&id, &text)).unwrap();
        texts.insert(seq, text);
    }
    let total = chat.estimate(&Budget::new(1 << 40, 0)).unwrap();
    let b = Budget::new(total * 100 / 85, 0);
    let syncs = ctl.syncs();
    let v = chat.view(&b).unwrap();
    assert_eq!(ctl.syncs(), syncs, "building the view waited for a sync");
    let Decision::Compacted { previewed, .. } = v.decision().clone() else { panic!("{:?}", v.decision()) };
    assert!(!previewed.is_empty());
    let ids: Vec<(u64, undertext::ArchiveRef)> = v
        .messages()
        .iter()
        .filter_map(|m| match m.parts.first() {
            Some(Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. }) => {
                Some((m.seqs.start, *archive))
            }
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), previewed.len());
    // Readable at once, before any sync.
    for (seq, a) in &ids {
        assert_eq!(&store.read_context("o", &a.id, 0..a.chars, undertext::Unit::Chars).unwrap(), &texts[seq]);
    }
    // The model's answer is the chat's next write; then the power goes.
    chat.append(NewMessage::assistant("the parser drops the last token; fixing")).unwrap();
    ctl.cut_power_now();
    drop(chat);
    drop(store);
    ctl.restore_power_cut().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    for (seq, a) in &ids {
        let back = store.read_context("o", &a.id, 0..a.chars, undertext::Unit::Chars).unwrap();
        assert_eq!(&back, &texts[seq], "preview of message {seq} lost its way back after the power cut");
    }
}

#[test]
fn a_task_over_the_instructions_bound_is_previewed_with_a_way_back_and_never_summarized() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let chat = new_chat(&store);
    chat.append(NewMessage::system("You are a coding agent.")).unwrap();
    let long_task = format!("{TASK}\n{}", output(999, 6_000));
    chat.append(NewMessage::user(&long_task)).unwrap();
    let mut rng = Rng::new(3);
    for k in 0..40 {
        step(&chat, &mut rng, k);
    }
    let opts =
        CheckpointOptions { segment_tokens: 1_000, protect_max_tokens: Some(1_500), ..Default::default() };
    let cp = chat.build_checkpoint(&Extractive::default(), &opts).unwrap();
    assert!(cp.reach > 2, "the checkpoint covers the task's turn");
    chat.publish_checkpoint(&cp).unwrap();
    let mut b = Budget::new(1 << 30, 0);
    // Under the bound: the task verbatim, before the summary; the system message first.
    let v = chat.view(&b).unwrap();
    assert_eq!(v.messages()[0].role, Role::System);
    let task_at = v.messages().iter().position(|m| m.parts == vec![Part::Text(long_task.clone())]).unwrap();
    let summary_at =
        v.messages().iter().position(|m| matches!(m.parts.as_slice(), [Part::Summary(_)])).unwrap();
    assert!(task_at < summary_at);
    // Over the bound: a preview that names its archive, which reads back whole.
    b.instructions_max_tokens = Some(200);
    let v = chat.view(&b).unwrap();
    assert_valid(&v, &b, "task previewed");
    let task = v.messages().iter().find(|m| m.seqs == (1..2)).expect("the task stays in the view");
    let [Part::Text(preview)] = task.parts.as_slice() else { panic!("{:?}", task.parts) };
    assert!(preview.len() < long_task.len() && preview.contains("read_context"), "{preview}");
    let id = undertext::BlobId::of(long_task.as_bytes());
    assert!(preview.contains(&id.to_string()));
    let n = long_task.chars().count() as u64;
    assert_eq!(store.read_context("o", &id, 0..n, undertext::Unit::Chars).unwrap(), long_task);
}
