//! The model view of a 1,000-message, ~200k-token chat, against SQLite (query + JSON
//! decode of the same messages) and against copying the view's bytes, in the same run; and
//! the cost of estimating it. (No checkpoint yet: checkpoints land with their own issue.)

#![expect(clippy::unwrap_used, reason = "bench harness: failure should abort the bench")]

use criterion::{Criterion, criterion_group, criterion_main};
use undertext::{Budget, Estimator, Heuristic};
use undertext::{ChatMeta, NewMessage, Options, Store};
use undertext_benches::{Rng, bench_tempdir};

fn body(i: u64) -> String {
    let mut rng = Rng::new(i);
    let words =
        ["parser", "token", "value", "error", "result", "function", "module", "test", "index", "chat"];
    let mut s = format!("message {i}: ");
    while s.len() < 800 {
        s.push_str(words[(rng.next_u64() % 10) as usize]);
        s.push(' ');
    }
    s
}

/// The SQLite side of a view: every message of chat 1 in order, its JSON body decoded.
fn sqlite_select_decode(conn: &rusqlite::Connection) -> Vec<(i64, String, serde_json::Value)> {
    let mut st = conn.prepare_cached("SELECT seq, role, body FROM m WHERE chat = 1 ORDER BY seq").unwrap();
    let rows = st
        .query_map([], |r| {
            let body: String = r.get(2)?;
            Ok((r.get(0)?, r.get(1)?, serde_json::from_str::<serde_json::Value>(&body).unwrap()))
        })
        .unwrap();
    rows.map(|r| r.unwrap()).collect()
}

fn view(c: &mut Criterion) {
    let dir = bench_tempdir().unwrap();
    let store = Store::open(dir.path().join("u"), Options::default()).unwrap();
    let chat = store.chat("b", store.create_chat("b", ChatMeta::default()).unwrap()).unwrap();
    for b in 0..10u64 {
        let batch = (0..100).map(|i| NewMessage::assistant(body(b * 100 + i))).collect();
        chat.append_batch(batch).unwrap();
    }
    store.sync().unwrap();
    let budget = Budget::new(1_000_000, 0);
    let v = chat.view(&budget).unwrap();
    let view_bytes: usize = v.to_openai_json().len();
    println!(
        "view: {} messages, estimate {} tokens, {} bytes as OpenAI JSON",
        v.messages().len(),
        v.estimate(),
        view_bytes
    );

    let conn = rusqlite::Connection::open(dir.path().join("s.db")).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; CREATE TABLE m (chat INTEGER, seq INTEGER, role TEXT, turn INTEGER, body TEXT,
         PRIMARY KEY (chat, seq)) WITHOUT ROWID; BEGIN;",
    )
    .unwrap();
    for i in 0..1000u64 {
        let b = serde_json::json!([{"type": "text", "text": body(i)}]).to_string();
        conn.execute("INSERT INTO m VALUES (1, ?1, 'assistant', 0, ?2)", rusqlite::params![i as i64, b])
            .unwrap();
    }
    conn.execute_batch("COMMIT").unwrap();

    let mut g = c.benchmark_group("view_1000_messages_200k_tokens");
    g.bench_function("undertext_view", |b| b.iter(|| chat.view(&budget).unwrap()));
    g.bench_function("undertext_view_as_openai_json", |b| {
        b.iter(|| chat.view(&budget).unwrap().to_openai_json())
    });
    g.bench_function("sqlite_select_json_decode", |b| b.iter(|| sqlite_select_decode(&conn)));
    let json = v.to_openai_json();
    g.bench_function("copy_view_bytes", |b| b.iter(|| json.clone()));
    g.bench_function("undertext_estimate_cached", |b| b.iter(|| chat.estimate(&budget).unwrap()));
    let texts: Vec<String> = (0..1000).map(body).collect();
    let h = Heuristic;
    g.bench_function("estimate_200k_tokens_heuristic", |b| {
        b.iter(|| texts.iter().map(|t| h.text_tokens(t)).sum::<u64>())
    });
    g.finish();
}

/// The same chat with a published checkpoint covering all but its last two user turns: the
/// view is the summary plus a few messages. SQLite builds the same view: the summary row and
/// the messages from the reach, decoded.
fn view_with_checkpoint(c: &mut Criterion) {
    use undertext::{CheckpointOptions, Extractive};
    let dir = bench_tempdir().unwrap();
    let store = Store::open(dir.path().join("u"), Options::default()).unwrap();
    let chat = store.chat("b", store.create_chat("b", ChatMeta::default()).unwrap()).unwrap();
    chat.append(NewMessage::user("start")).unwrap();
    for b in 0..10u64 {
        let batch = (0..100).map(|i| NewMessage::assistant(body(b * 100 + i))).collect();
        chat.append_batch(batch).unwrap();
    }
    chat.append(NewMessage::user("second turn")).unwrap();
    chat.append(NewMessage::assistant(body(5000))).unwrap();
    chat.append(NewMessage::user("third turn")).unwrap();
    let cp = chat.build_checkpoint(&Extractive::default(), &CheckpointOptions::default()).unwrap();
    chat.publish_checkpoint(&cp).unwrap();
    store.sync().unwrap();
    let budget = Budget::new(1_000_000, 0);
    let v = chat.view(&budget).unwrap();
    let json = v.to_openai_json();
    println!(
        "view with checkpoint: reach {}, {} view messages, estimate {} tokens, {} bytes as OpenAI JSON",
        cp.reach,
        v.messages().len(),
        v.estimate(),
        json.len()
    );
    let conn = rusqlite::Connection::open(dir.path().join("s.db")).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; CREATE TABLE m (chat INTEGER, seq INTEGER, role TEXT, turn INTEGER, body TEXT,
         PRIMARY KEY (chat, seq)) WITHOUT ROWID; CREATE TABLE cp (chat INTEGER PRIMARY KEY, reach INTEGER, summary TEXT);
         BEGIN;",
    )
    .unwrap();
    for m in chat.messages().unwrap() {
        let Some(undertext::Part::Text(t)) = m.parts.first() else { continue };
        let b = serde_json::json!([{"type": "text", "text": t}]).to_string();
        conn.execute(
            "INSERT INTO m VALUES (1, ?1, ?2, ?3, ?4)",
            rusqlite::params![m.seq as i64, m.role.as_str(), m.turn as i64, b],
        )
        .unwrap();
    }
    conn.execute("INSERT INTO cp VALUES (1, ?1, ?2)", rusqlite::params![cp.reach as i64, cp.summary])
        .unwrap();
    conn.execute_batch("COMMIT").unwrap();
    let mut g = c.benchmark_group("view_with_checkpoint_1000_messages");
    g.bench_function("undertext_view", |b| b.iter(|| chat.view(&budget).unwrap()));
    g.bench_function("sqlite_summary_and_tail_json_decode", |b| {
        b.iter(|| {
            let (reach, summary): (i64, String) = conn
                .query_row("SELECT reach, summary FROM cp WHERE chat = 1", [], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap();
            let mut st = conn
                .prepare_cached("SELECT seq, role, body FROM m WHERE chat = 1 AND seq >= ?1 ORDER BY seq")
                .unwrap();
            let rows = st
                .query_map([reach], |r| {
                    let body: String = r.get(2)?;
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        serde_json::from_str::<serde_json::Value>(&body).unwrap(),
                    ))
                })
                .unwrap();
            (summary, rows.map(|r| r.unwrap()).collect::<Vec<_>>())
        })
    });
    g.bench_function("copy_view_bytes", |b| b.iter(|| json.clone()));
    g.finish();
}

/// The view as a harness asks for it: after each append. One message is appended (not
/// timed), then the view is built (timed); every 200 appends the chat is cut back to its
/// 1,000 messages (not timed; the truncation changes the revision, so the next view is
/// rebuilt from scratch and that rebuild is in the figure). SQLite: insert the row (not
/// timed), then query every message and decode it (timed).
fn view_after_each_append(c: &mut Criterion) {
    use std::time::{Duration, Instant};
    let dir = bench_tempdir().unwrap();
    let opts = Options::default().durability(undertext::Durability::None);
    let store = Store::open(dir.path().join("u"), opts).unwrap();
    let chat = store.chat("b", store.create_chat("b", ChatMeta::default()).unwrap()).unwrap();
    for b in 0..10u64 {
        chat.append_batch((0..100).map(|i| NewMessage::assistant(body(b * 100 + i))).collect()).unwrap();
    }
    let budget = Budget::new(1_000_000, 0);
    let conn = rusqlite::Connection::open(dir.path().join("s.db")).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; CREATE TABLE m (chat INTEGER, seq INTEGER, role TEXT,
         turn INTEGER, body TEXT, PRIMARY KEY (chat, seq)) WITHOUT ROWID; BEGIN;",
    )
    .unwrap();
    for i in 0..1000u64 {
        let b = serde_json::json!([{"type": "text", "text": body(i)}]).to_string();
        conn.execute("INSERT INTO m VALUES (1, ?1, 'assistant', 0, ?2)", rusqlite::params![i as i64, b])
            .unwrap();
    }
    conn.execute_batch("COMMIT").unwrap();
    let mut g = c.benchmark_group("view_after_each_append_1000_messages");
    g.bench_function("undertext_view", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for i in 0..iters {
                if chat.len() >= 1200 {
                    chat.truncate(1000, chat.revision()).unwrap();
                }
                chat.append(NewMessage::assistant(body(2000 + i % 200))).unwrap();
                let t = Instant::now();
                std::hint::black_box(chat.view(&budget).unwrap());
                timed += t.elapsed();
            }
            timed
        })
    });
    let mut len = 1000i64;
    g.bench_function("sqlite_insert_then_select_json_decode", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for i in 0..iters {
                if len >= 1200 {
                    conn.execute("DELETE FROM m WHERE chat = 1 AND seq >= 1000", []).unwrap();
                    len = 1000;
                }
                let row = serde_json::json!([{"type": "text", "text": body(2000 + i % 200)}]).to_string();
                conn.execute("INSERT INTO m VALUES (1, ?1, 'assistant', 0, ?2)", rusqlite::params![len, row])
                    .unwrap();
                len += 1;
                let t = Instant::now();
                std::hint::black_box(sqlite_select_decode(&conn));
                timed += t.elapsed();
            }
            timed
        })
    });
    g.finish();
}

/// A tool result of about `n` bytes, distinct per `i`.
fn result(i: u64, n: usize) -> String {
    let line = format!("row {i}: {}\n", body(i).split_at(60).0);
    line.repeat(n / line.len() + 1)[..n].to_string()
}

/// Views whose guard previews inline tool results (60 steps of 6 KB results, inline in their
/// message records, under a budget that leaves room for about half): rebuilt from scratch
/// (the memo cleared, not timed), and after each new step (one call and its result appended,
/// not timed: the step before it becomes one the guard previews). Before 2026-12-01 such a
/// view archived every text it previewed (written to the log, and the offset index built three
/// times); since, it writes nothing. Prints the log bytes 50 views after new steps write.
fn view_previewing_inline_results(c: &mut Criterion) {
    use std::time::{Duration, Instant};
    let dir = bench_tempdir().unwrap();
    let opts = Options::default().durability(undertext::Durability::None);
    let store = Store::open(dir.path().join("u"), opts).unwrap();
    let chat = store.chat("b", store.create_chat("b", ChatMeta::default()).unwrap()).unwrap();
    chat.append(NewMessage::system("You are a careful agent.")).unwrap();
    chat.append(NewMessage::user("Fix the failing tests.")).unwrap();
    let step = |i: u64| {
        let call = undertext::Part::ToolCall { id: format!("c{i}"), name: "run".into(), args: "{}".into() };
        chat.append(NewMessage { role: undertext::Role::Assistant, parts: vec![call], feedback: false })
            .unwrap();
        chat.append(NewMessage::tool_result(format!("c{i}"), result(i, 6_000))).unwrap();
    };
    for i in 0..60 {
        step(i);
    }
    let budget = Budget::new(60_000, 0);
    let v = chat.view(&budget).unwrap();
    println!(
        "previewing view: {} messages, estimate {}, {:?}",
        v.messages().len(),
        v.estimate(),
        v.decision()
    );
    let mut next = 1_000u64;
    let log_before = store.stats().unwrap().log_bytes;
    for _ in 0..50 {
        step(next);
        next += 1;
        let appended = store.stats().unwrap().log_bytes;
        chat.view(&budget).unwrap();
        assert!(store.stats().unwrap().log_bytes >= appended);
    }
    let mut by_views = store.stats().unwrap().log_bytes - log_before;
    // What the 50 steps themselves wrote, measured alone on a second chat.
    let other = store.chat("b", store.create_chat("b", ChatMeta::default()).unwrap()).unwrap();
    let before_steps = store.stats().unwrap().log_bytes;
    for i in 0..50 {
        let call = undertext::Part::ToolCall {
            id: format!("c{}", 1_000 + i),
            name: "run".into(),
            args: "{}".into(),
        };
        other
            .append(NewMessage { role: undertext::Role::Assistant, parts: vec![call], feedback: false })
            .unwrap();
        other.append(NewMessage::tool_result(format!("c{}", 1_000 + i), result(1_000 + i, 6_000))).unwrap();
    }
    by_views = by_views.saturating_sub(store.stats().unwrap().log_bytes - before_steps);
    println!("log bytes written by 50 views after new steps (the steps' own bytes subtracted): {by_views}");
    let mut g = c.benchmark_group("view_previewing_inline_results_60_steps");
    g.bench_function("undertext_view_rebuilt", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                chat.clear_view_memo();
                let t = Instant::now();
                std::hint::black_box(chat.view(&budget).unwrap());
                timed += t.elapsed();
            }
            timed
        })
    });
    g.bench_function("undertext_view_after_each_new_step", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                if chat.len() >= 300 {
                    chat.truncate(122, chat.revision()).unwrap();
                }
                step(next);
                next += 1;
                let t = Instant::now();
                std::hint::black_box(chat.view(&budget).unwrap());
                timed += t.elapsed();
            }
            timed
        })
    });
    g.finish();
}

criterion_group!(benches, view, view_with_checkpoint, view_after_each_append, view_previewing_inline_results);
criterion_main!(benches);
