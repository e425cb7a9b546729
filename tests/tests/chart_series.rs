//! Claims of `replay::series::Series` (the chart's series computed without a store): at every
//! model step it gives the point the replay on a scratch store gives (`undertext plot` and
//! `serve`'s chart before it: the view's estimate just before the assistant message, after
//! waiting for the worker's job of the view before; whether a checkpoint was swapped in;
//! resending everything) — on every session of the shared transcripts at two windows, and on
//! a long tool loop whose source chat was edited and truncated, with approvals (a request and
//! its response, an approval pending in a tool result), a task over the instructions bound,
//! results archived by the source store, and parallel results.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::time::Duration;

use undertext::import::{self, Format};
use undertext::{ChatMeta, Durability, NewMessage, Options, Part, Role, Store, ToolContent, Unit};
use undertext_cli::replay::series::Series;
use undertext_cli::replay::{ReplayOptions, StepPoint, ViewPricer, full_tokens, start_worker};
use undertext_tests::sweep::each_point;
use undertext_tests::{Rng, seed, transcripts};

fn scratch() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store =
        Store::open(dir.path(), Options::default().durability(Durability::None).preallocate(false)).unwrap();
    (dir, store)
}

/// The chart's replay as it ran on a scratch store (`cli::chart::Replay::advance`): a view
/// before each assistant message, the worker's job it asked for waited for, then the append.
fn store_replay(messages: &[NewMessage], opts: &ReplayOptions) -> Vec<StepPoint> {
    let (_dir, store) = scratch();
    let worker = start_worker(&store, opts).unwrap();
    let chat = store.chat("chart", store.create_chat("chart", ChatMeta::default()).unwrap()).unwrap();
    let budget = opts.budget();
    let mut points = Vec::new();
    let mut everything = 0;
    let mut pricer = ViewPricer::new();
    for m in messages {
        let tokens = full_tokens(&store, m);
        if m.role == Role::Assistant {
            let v = chat.view(&budget).unwrap();
            assert!(store.wait_worker_idle(Duration::from_secs(60)), "the worker is stuck");
            let call = pricer.call(&v);
            points.push(StepPoint {
                seq: chat.len(),
                sent: v.estimate(),
                everything,
                swapped: v.swap().is_some(),
                cached: call.cached,
                broke: call.broke,
            });
        }
        everything += tokens;
        chat.append(m.clone()).unwrap();
    }
    assert!(worker.errors().is_empty(), "{:?}", worker.errors());
    worker.stop();
    points
}

/// Compares two series point by point; returns the swaps seen.
fn same(what: &str, replayed: &[StepPoint], series: &[StepPoint]) -> u64 {
    assert_eq!(replayed.len(), series.len(), "{what}: steps");
    for (i, (a, b)) in replayed.iter().zip(series).enumerate() {
        assert_eq!(a, b, "{what}: step {i} (replay, series)");
    }
    replayed.iter().filter(|p| p.swapped).count() as u64
}

#[test]
fn every_shared_transcript_gives_the_series_of_its_replay_at_every_step() {
    let dir = transcripts::transcripts_dir();
    let all: Vec<_> = import::transcript_files(&[dir])
        .unwrap()
        .iter()
        .flat_map(|f| import::parse_file(f, Format::Auto).unwrap().sessions)
        .collect();
    // Each session is replayed on a store of its own: the sessions run on every core.
    let indices: Vec<u64> = (0..all.len() as u64).collect();
    let per_session = each_point(&indices, |i| {
        let s = &all[usize::try_from(i).unwrap()];
        let (mut steps, mut swaps, mut breaks) = (0, 0, 0);
        for (window, reserve) in [(8_000, 1_024), (32_000, 4_096)] {
            let opts = ReplayOptions { window, reserve_output: reserve, ..ReplayOptions::default() };
            let mut series = Series::new(&opts);
            for m in &s.messages {
                series.push(m.clone());
            }
            let replayed = store_replay(&s.messages, &opts);
            swaps += same(&format!("{} at window {window}", s.key), &replayed, series.points());
            steps += replayed.len();
            breaks += replayed.iter().filter(|p| p.broke).count();
        }
        (steps, swaps, breaks)
    });
    let sessions = per_session.len();
    let steps: usize = per_session.iter().map(|(n, _, _)| n).sum();
    let swaps: u64 = per_session.iter().map(|(_, n, _)| n).sum();
    let breaks: usize = per_session.iter().map(|(_, _, n)| n).sum();
    assert!(sessions > 0, "no transcripts found");
    assert!(
        swaps > 0,
        "{steps} steps of {sessions} sessions, no checkpoint swapped in: the test proves little"
    );
    // The points carry the prompt-cache model (the cached prefix, the breaks): equal too.
    assert!(breaks > 0, "{steps} steps of {sessions} sessions, no prefix break: the test proves little");
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

fn call(k: u64, n: usize) -> NewMessage {
    NewMessage {
        role: Role::Assistant,
        parts: (0..n)
            .map(|j| Part::ToolCall {
                id: format!("c{k}-{j}"),
                name: "bash".into(),
                args: format!("{{\"command\": \"sed -n {k},{}p src/lib.rs\"}}", k + 40),
            })
            .collect(),
        feedback: false,
    }
}

fn result(k: u64, j: usize, text: String) -> Part {
    Part::ToolResult { call_id: format!("c{k}-{j}"), content: ToolContent::Text(text), is_error: false }
}

/// A source chat: a system message, a task, then a long loop of tool calls (some parallel,
/// with their results in one message), an edit, an approval request and its response, a
/// second task over the instructions bound, a truncation, then an approval pending inside
/// a tool result (the last steps' checkpoints stop before it). Stored in `store` (results
/// over 8 KiB archived by it).
fn source_chat(store: &Store, rng: &mut Rng) -> undertext::Chat {
    let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    chat.append(NewMessage {
        role: Role::System,
        parts: vec![Part::Text("You are a careful engineer.".into())],
        feedback: false,
    })
    .unwrap();
    chat.append(NewMessage::user("Fix the failing parser test; run the suite before and after.")).unwrap();
    let mut k = 0u64;
    let mut steps = |chat: &undertext::Chat, rng: &mut Rng, n: u64| {
        for _ in 0..n {
            k += 1;
            let parallel = if rng.range(0, 8) == 0 { 2 } else { 1 };
            chat.append(call(k, parallel)).unwrap();
            let parts = (0..parallel)
                .map(|j| {
                    let size = match rng.range(0, 10) {
                        0 => rng.range(9_000, 20_000),
                        1..=4 => rng.range(1_500, 6_000),
                        _ => rng.range(80, 600),
                    };
                    // A few results repeat an earlier one (the same archive, read once).
                    let text = if rng.range(0, 6) == 0 {
                        output(1, size as usize)
                    } else {
                        output(k, size as usize)
                    };
                    result(k, j, text)
                })
                .collect();
            chat.append(NewMessage { role: Role::Tool, parts, feedback: false }).unwrap();
        }
    };
    steps(&chat, rng, 80);
    // An edit of a settled tool result.
    let r = chat.revision();
    chat.edit(
        5,
        NewMessage { role: Role::Tool, parts: vec![result(2, 0, output(999, 5_000))], feedback: false },
        r,
    )
    .unwrap();
    steps(&chat, rng, 20);
    // A structured approval request, answered two steps later.
    chat.append(NewMessage {
        role: Role::Assistant,
        parts: vec![Part::ApprovalRequest {
            id: "a1".into(),
            call_id: None,
            prompt: "delete build/?".into(),
        }],
        feedback: false,
    })
    .unwrap();
    steps(&chat, rng, 2);
    chat.append(NewMessage {
        role: Role::User,
        parts: vec![Part::ApprovalResponse { id: "a1".into(), approved: true, reason: None }],
        feedback: false,
    })
    .unwrap();
    steps(&chat, rng, 20);
    // A second task, over the instructions bound: a view over a checkpoint previews it.
    chat.append(NewMessage::user(format!("Now port the fix to the old branch.\n{}", output(7, 12_000))))
        .unwrap();
    steps(&chat, rng, 60);
    // A truncation and new steps at the same seqs.
    let (r, len) = (chat.revision(), chat.len());
    chat.truncate(len - 30, r).unwrap();
    steps(&chat, rng, 10);
    // An approval waiting inside a tool result: no checkpoint reaches past it.
    let approval = r#"{"type": "mcp_approval_request", "name": "rm", "arguments": "-rf build"}"#;
    chat.append(call(10_000, 1)).unwrap();
    chat.append(NewMessage {
        role: Role::Tool,
        parts: vec![result(10_000, 0, format!("waiting for the user\n{approval}\n"))],
        feedback: false,
    })
    .unwrap();
    steps(&chat, rng, 30);
    chat
}

#[test]
fn a_long_edited_loop_with_approvals_and_a_truncation_gives_the_series_of_its_replay() {
    let mut rng = Rng::new(seed(21));
    let (_dir, store) = scratch();
    let chat = source_chat(&store, &mut rng);
    let stored = chat.messages().unwrap();
    // The replay on a scratch store appends whole texts (archived results read back).
    let whole: Vec<NewMessage> = stored
        .iter()
        .map(|m| NewMessage {
            role: m.role,
            parts: m
                .parts
                .iter()
                .map(|p| match p {
                    Part::ToolResult {
                        call_id,
                        content: ToolContent::Archived { archive, .. },
                        is_error,
                    } => Part::ToolResult {
                        call_id: call_id.clone(),
                        content: ToolContent::Text(
                            store.read_context("o", &archive.id, 0..archive.bytes, Unit::Bytes).unwrap(),
                        ),
                        is_error: *is_error,
                    },
                    other => other.clone(),
                })
                .collect(),
            feedback: false,
        })
        .collect();
    assert!(
        stored
            .iter()
            .flat_map(|m| &m.parts)
            .any(|p| matches!(p, Part::ToolResult { content: ToolContent::Archived { .. }, .. }))
    );
    let mut swaps = 0;
    for (window, reserve) in [(8_000, 1_024), (16_000, 2_048), (32_000, 4_096)] {
        let opts = ReplayOptions { window, reserve_output: reserve, ..ReplayOptions::default() };
        let replayed = store_replay(&whole, &opts);
        // As the chart takes it: the stored messages, each archive read once from the source.
        let mut reads = 0;
        let mut series = Series::new(&opts);
        for m in &stored {
            series
                .push_stored(NewMessage { role: m.role, parts: m.parts.clone(), feedback: false }, &mut |a| {
                    reads += 1;
                    store.read_context("o", &a.id, 0..a.bytes, Unit::Bytes)
                })
                .unwrap();
        }
        swaps += same(&format!("the loop at window {window}"), &replayed, series.points());
        // And as a caller with whole texts gives it.
        let mut again = Series::new(&opts);
        for m in &whole {
            again.push(m.clone());
        }
        same(&format!("the loop at window {window}, whole texts"), &replayed, again.points());
        let archived: std::collections::HashSet<_> = stored
            .iter()
            .flat_map(|m| &m.parts)
            .filter_map(|p| match p {
                Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } => Some(archive.id),
                _ => None,
            })
            .collect();
        assert_eq!(reads, archived.len(), "each archive is read once");
    }
    assert!(swaps > 3, "{swaps} checkpoints swapped in: the test proves little");
}
