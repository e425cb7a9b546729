//! The view of a single-task loop (one user message, then only tool calls) at a 32k window,
//! after each step, with the worker preparing checkpoints in the background: the views that
//! swap a prepared checkpoint in at the hard line, and every other view, as percentiles. The
//! baseline, in the same run: SQLite reading the whole chat back (select + JSON decode of
//! every message), which is what resending everything costs a harness on SQLite.
//!
//! Target (issue 15): p99 of the view at the hard line with a prepared checkpoint ≤ 1 ms,
//! and the guard's per-view work not growing with the length of the protected turn.

#![expect(clippy::unwrap_used, reason = "bench harness: failure should abort the bench")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use undertext::Budget;
use undertext::{ChatMeta, NewMessage, Options, Part, Role, Store};
use undertext::{CheckpointOptions, Extractive};
use undertext::{HardLinePolicy, WorkerOptions};
use undertext_benches::{Rng, bench_tempdir};

fn output(k: u64, n: usize) -> String {
    let mut s = String::with_capacity(n + 64);
    let mut line = 0;
    while s.len() < n {
        s.push_str(&format!("step {k} line {line}: src/parser.rs:{} ok\n", (line * 7) % 900));
        line += 1;
    }
    s
}

fn step_messages(k: u64, rng: &mut Rng) -> Vec<NewMessage> {
    let id = format!("call-{k}");
    let n = match rng.next_u64() % 10 {
        0 => 12_000,
        1..=3 => 4_000,
        _ => 800,
    };
    vec![
        NewMessage {
            role: Role::Assistant,
            parts: vec![Part::ToolCall {
                id: id.clone(),
                name: "bash".into(),
                args: format!("{{\"k\": {k}}}"),
            }],
            feedback: false,
        },
        NewMessage::tool_result(id, output(k, n)),
    ]
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn sqlite_read_all(conn: &rusqlite::Connection) -> usize {
    let mut st = conn.prepare_cached("SELECT seq, role, body FROM m WHERE chat = 1 ORDER BY seq").unwrap();
    let rows = st
        .query_map([], |r| {
            let body: String = r.get(2)?;
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                serde_json::from_str::<serde_json::Value>(&body).unwrap(),
            ))
        })
        .unwrap();
    rows.count()
}

fn long_loop(c: &mut Criterion) {
    let dir = bench_tempdir().unwrap();
    let store = Store::open(dir.path().join("u"), Options::default()).unwrap();
    let worker = store
        .start_worker(
            Arc::new(Extractive::default()),
            WorkerOptions {
                at_hard_line: HardLinePolicy::Refuse,
                checkpoint: CheckpointOptions { segment_tokens: 2_000, ..CheckpointOptions::default() },
                ..WorkerOptions::default()
            },
        )
        .unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("s.db")).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; CREATE TABLE m (chat INTEGER, seq INTEGER, role TEXT, body TEXT,
         PRIMARY KEY (chat, seq)) WITHOUT ROWID;",
    )
    .unwrap();
    let budget = Budget::new(32_000, 4_096);
    let mut g = c.benchmark_group("long_loop_view_32k");
    g.sample_size(10);
    // One run = a fresh 400-step loop; every view timed (after its step is appended and the
    // worker had a model call's time to finish its job, neither timed).
    let (mut swaps, mut others, mut sqlite) = (Vec::new(), Vec::new(), Vec::new());
    g.bench_function("undertext_view_each_step_of_400", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                let chat = store.chat("b", store.create_chat("b", ChatMeta::default()).unwrap()).unwrap();
                chat.append(NewMessage::user("Fix the failing parser test.")).unwrap();
                let mut rng = Rng::new(7);
                for k in 0..400 {
                    for m in step_messages(k, &mut rng) {
                        chat.append(m).unwrap();
                    }
                    store.wait_worker_idle(Duration::from_secs(5));
                    let t = Instant::now();
                    let v = std::hint::black_box(chat.view(&budget).unwrap());
                    let d = t.elapsed();
                    timed += d;
                    if v.swap().is_some() { swaps.push(d) } else { others.push(d) }
                }
            }
            timed / 400
        })
    });
    // SQLite: the same 400 steps, each followed by reading the whole chat back.
    g.bench_function("sqlite_read_whole_chat_each_step_of_400", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                conn.execute("DELETE FROM m", []).unwrap();
                let mut rng = Rng::new(7);
                let mut seq = 0i64;
                for k in 0..400 {
                    for m in step_messages(k, &mut rng) {
                        let body = serde_json::json!([format!("{:?}", m.parts)]).to_string();
                        conn.execute(
                            "INSERT INTO m VALUES (1, ?1, ?2, ?3)",
                            rusqlite::params![seq, m.role.as_str(), body],
                        )
                        .unwrap();
                        seq += 1;
                    }
                    let t = Instant::now();
                    std::hint::black_box(sqlite_read_all(&conn));
                    let d = t.elapsed();
                    timed += d;
                    sqlite.push(d);
                }
            }
            timed / 400
        })
    });
    g.finish();
    assert!(worker.errors().is_empty(), "{:?}", worker.errors());
    for v in [&mut swaps, &mut others, &mut sqlite] {
        v.sort();
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "long loop 32k: swap views n={} p50 {:.0} µs p99 {:.0} µs max {:.0} µs; other views n={} p50 {:.0} µs p99 {:.0} µs; \
         SQLite whole-chat read n={} p50 {:.0} µs p99 {:.0} µs; p99 ratio (other views / SQLite) {:.3}",
        swaps.len(),
        us(percentile(&swaps, 0.5)),
        us(percentile(&swaps, 0.99)),
        us(percentile(&swaps, 1.0)),
        others.len(),
        us(percentile(&others, 0.5)),
        us(percentile(&others, 0.99)),
        sqlite.len(),
        us(percentile(&sqlite, 0.5)),
        us(percentile(&sqlite, 0.99)),
        us(percentile(&others, 0.99)) / us(percentile(&sqlite, 0.99)).max(1e-9)
    );
}

criterion_group!(benches, long_loop);
criterion_main!(benches);
