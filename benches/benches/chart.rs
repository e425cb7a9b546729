//! The first chart of a 1,000-step chat (`undertext plot`, `serve`'s chart page): its series
//! as it was computed before — the chat replayed on a scratch store through the guard and
//! the worker, waiting for each step's job — against `replay::series::Series` (the same
//! points, no store), in the same run. The chat is a long tool loop like `demo`'s: one task,
//! then 1,000 steps whose results are this repository's source files (whole, or a slice),
//! the large ones archived by the source store and read back once per distinct archive.

#![expect(clippy::unwrap_used, reason = "bench harness: failure should abort the bench")]

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use undertext::{
    ChatMeta, Durability, Message, NewMessage, Options, Part, Role, Snapshot, Store, ToolContent, Unit,
};
use undertext_benches::bench_tempdir;
use undertext_cli::replay::series::Series;
use undertext_cli::replay::{ReplayOptions, StepPoint, ViewPricer, full_tokens, start_worker};

const STEPS: u64 = 1_000;

/// The engine's source files, in a fixed order; those quoting an approval request left out
/// (an approval pending in a result holds every checkpoint before it, which is not the
/// loop this measures).
fn sources() -> Vec<String> {
    let mut paths = Vec::new();
    let mut dirs = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/src")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                paths.push(p);
            }
        }
    }
    paths.sort();
    paths.iter().map(|p| std::fs::read_to_string(p).unwrap()).filter(|t| !t.contains("approval")).collect()
}

/// The source chat: a task, then per step a tool call and its result (a whole file every
/// third step, else up to 60 lines of one).
fn source(store: &Store) -> Snapshot {
    let files = sources();
    let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    chat.append(NewMessage::user("Review this repository's sources and docs; report what to fix.")).unwrap();
    for k in 0..STEPS {
        let id = format!("c{k}");
        let file = &files[(k as usize * 7) % files.len()];
        let text = if k % 3 == 0 {
            file.clone()
        } else {
            let from = (k as usize * 13) % file.lines().count().max(1);
            file.lines().skip(from).take(60).collect::<Vec<_>>().join("\n")
        };
        chat.append(NewMessage {
            role: Role::Assistant,
            parts: vec![Part::ToolCall {
                id: id.clone(),
                name: "read_file".into(),
                args: format!("{{\"file\": {k}}}"),
            }],
            feedback: false,
        })
        .unwrap();
        chat.append(NewMessage::tool_result(&id, if text.is_empty() { "(empty)".into() } else { text }))
            .unwrap();
    }
    chat.snapshot()
}

/// A stored message as the harness produced it: archived results read back whole.
fn whole(store: &Store, m: Message) -> NewMessage {
    let parts = m
        .parts
        .into_iter()
        .map(|p| match p {
            Part::ToolResult { call_id, content: ToolContent::Archived { archive, .. }, is_error } => {
                let text = store.read_context("o", &archive.id, 0..archive.bytes, Unit::Bytes).unwrap();
                Part::ToolResult { call_id, content: ToolContent::Text(text), is_error }
            }
            other => other,
        })
        .collect();
    NewMessage { role: m.role, parts, feedback: false }
}

/// The series as `cli::chart::Replay` computed it before: a scratch store and its worker.
fn store_replay(store: &Store, snap: &Snapshot, opts: &ReplayOptions) -> Vec<StepPoint> {
    let dir = bench_tempdir().unwrap();
    let scratch =
        Store::open(dir.path(), Options::default().durability(Durability::None).preallocate(false)).unwrap();
    let worker = start_worker(&scratch, opts).unwrap();
    let chat = scratch.chat("chart", scratch.create_chat("chart", ChatMeta::default()).unwrap()).unwrap();
    let budget = opts.budget();
    let (mut points, mut everything) = (Vec::new(), 0);
    let mut pricer = ViewPricer::new();
    for m in snap.range(0..snap.len()).unwrap() {
        let m = whole(store, m);
        let tokens = full_tokens(&scratch, &m);
        if m.role == Role::Assistant {
            let v = chat.view(&budget).unwrap();
            scratch.wait_worker_idle(Duration::from_secs(30));
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
        chat.append(m).unwrap();
    }
    worker.stop();
    scratch.close().unwrap();
    points
}

/// The series as `cli::chart::Charting` computes it now.
fn series(store: &Store, snap: &Snapshot, opts: &ReplayOptions) -> Vec<StepPoint> {
    let mut s = Series::new(opts);
    let mut read = |a: &undertext::ArchiveRef| store.read_context("o", &a.id, 0..a.bytes, Unit::Bytes);
    for m in snap.range(0..snap.len()).unwrap() {
        s.push_stored(NewMessage { role: m.role, parts: m.parts, feedback: false }, &mut read).unwrap();
    }
    s.points().to_vec()
}

fn first_chart(c: &mut Criterion) {
    let dir = bench_tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let snap = source(&store);
    let opts = ReplayOptions { window: 32_000, reserve_output: 4_096, ..ReplayOptions::default() };
    let (a, b) = (store_replay(&store, &snap, &opts), series(&store, &snap, &opts));
    assert_eq!(a, b, "the series differs from the replay");
    println!(
        "chart: {} steps, {} messages, {} swaps, peak sent {} tokens",
        b.len(),
        snap.len(),
        b.iter().filter(|p| p.swapped).count(),
        b.iter().map(|p| p.sent).max().unwrap_or(0)
    );
    let mut g = c.benchmark_group("first_chart_1000_steps");
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(10));
    g.bench_function("scratch_store_replay (before)", |bch| bch.iter(|| store_replay(&store, &snap, &opts)));
    g.bench_function("series (now)", |bch| bch.iter(|| series(&store, &snap, &opts)));
    g.finish();
}

criterion_group!(benches, first_chart);
criterion_main!(benches);
