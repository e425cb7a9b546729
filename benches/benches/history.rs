//! History benches, each with its baseline in the same run:
//!
//! * `snapshot_acquire` — p50/p99 of `Chat::snapshot()` idle and with 4 busy writers on
//!   the same chat, against a `parking_lot::RwLock<Arc<_>>` read-and-clone under the same
//!   writers. Percentiles are printed (criterion reports means).
//! * `durable_append_2k` — 4 threads, each appending 2 KB messages to its own chat in
//!   `Group` durability, against SQLite (same schema: chat, seq, role, turn, body; WAL,
//!   `synchronous=FULL`, one INSERT per transaction). The appends per log `fdatasync` are
//!   printed to stderr as a diagnostic.
//! * `archived_append_100k` — append a 100 KB tool result, archived on append (chunked,
//!   offset index, preview), and the harness's way: `Store::archive`, then append the
//!   reference; against `put_blob` of the same bytes (storing the content, no chat). One
//!   writer, and 4 writers on the same chat (what the chat's lock serializes). The indexer
//!   runs as by default, so index work is pending as appends arrive.
//! * `cold_load_1000` — open a 1,000-message chat that is not in memory and decode every
//!   message, against SQLite `SELECT … WHERE chat = ? ORDER BY seq` with the JSON body
//!   decoded; once with 2 KB of random letters per message (`cold_load_1000_messages`, the
//!   original row) and once with 2 KB pieces of the shared transcripts' texts
//!   (`cold_load_1000_real_messages`).

#![expect(clippy::unwrap_used, reason = "bench harness: failure should abort the bench")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use parking_lot::{Mutex, RwLock};
use undertext::{ChatId, ChatMeta, Durability, NewMessage, Options, Store};
use undertext_benches::{bench_tempdir, random_bytes};

fn text_2k(seed: u64) -> String {
    // 2 KB of printable text, distinct per message.
    random_bytes(1536, seed).iter().map(|b| (b'a' + b % 26) as char).collect::<String>()
        + &" word".repeat(103)
}

fn percentiles(mut v: Vec<u64>) -> (u64, u64, u64) {
    v.sort_unstable();
    let p = |q: f64| v[((v.len() as f64 - 1.0) * q) as usize];
    (p(0.5), p(0.99), p(0.999))
}

fn snapshot_acquire(c: &mut Criterion) {
    let dir = bench_tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
    let id = store.create_chat("b", ChatMeta::default()).unwrap();
    let chat = store.chat("b", id).unwrap();
    for i in 0..1000 {
        chat.append(NewMessage::assistant(format!("message {i}"))).unwrap();
    }
    let lock = RwLock::new(Arc::new(chat.snapshot()));
    let mut g = c.benchmark_group("snapshot_acquire");
    for busy in [0usize, 4] {
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for w in 0..busy {
                let (chat, stop, lock) = (&chat, &stop, &lock);
                s.spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        chat.append(NewMessage::assistant(format!("w{w} {i}"))).unwrap();
                        *lock.write() = Arc::new(chat.snapshot());
                        i += 1;
                    }
                });
            }
            g.bench_function(format!("undertext_{busy}_writers"), |b| b.iter(|| chat.snapshot()));
            g.bench_function(format!("rwlock_arc_{busy}_writers"), |b| b.iter(|| lock.read().clone()));
            // Percentiles from individually timed acquisitions.
            for (name, f) in [
                ("undertext", &(|| drop(chat.snapshot())) as &(dyn Fn() + Sync)),
                ("rwlock_arc", &(|| drop(lock.read().clone())) as &(dyn Fn() + Sync)),
            ] {
                let mut lat = Vec::with_capacity(200_000);
                for _ in 0..200_000 {
                    let t = Instant::now();
                    f();
                    lat.push(t.elapsed().as_nanos() as u64);
                }
                let (p50, p99, p999) = percentiles(lat);
                println!(
                    "snapshot_acquire {name} with {busy} busy writers: p50 {p50} ns, p99 {p99} ns, p99.9 {p999} ns"
                );
            }
            stop.store(true, Ordering::Relaxed);
        });
    }
    g.finish();
}

struct SqliteChats {
    conn: Mutex<rusqlite::Connection>,
}

impl SqliteChats {
    fn create(path: &std::path::Path) -> SqliteChats {
        let conn = rusqlite::Connection::open(path).unwrap();
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).unwrap();
        assert!(mode.eq_ignore_ascii_case("wal"));
        conn.execute_batch(
            "PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS messages (chat INTEGER, seq INTEGER, role TEXT, turn INTEGER, body TEXT,
                 PRIMARY KEY (chat, seq)) WITHOUT ROWID;",
        )
        .unwrap();
        SqliteChats { conn: Mutex::new(conn) }
    }

    fn append(&self, chat: u64, seq: u64, text: &str) {
        let body = serde_json::json!([{ "type": "text", "text": text }]).to_string();
        let conn = self.conn.lock();
        let mut st = conn
            .prepare_cached(
                "INSERT INTO messages (chat, seq, role, turn, body) VALUES (?1, ?2, 'assistant', 1, ?3)",
            )
            .unwrap();
        st.execute(rusqlite::params![chat as i64, seq as i64, body]).unwrap();
    }

    fn load(&self, chat: u64) -> Vec<(i64, String, i64, serde_json::Value)> {
        let conn = self.conn.lock();
        let mut st = conn
            .prepare_cached("SELECT seq, role, turn, body FROM messages WHERE chat = ?1 ORDER BY seq")
            .unwrap();
        let rows = st
            .query_map([chat as i64], |r| {
                let body: String = r.get(3)?;
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, serde_json::from_str(&body).unwrap()))
            })
            .unwrap();
        rows.map(|r| r.unwrap()).collect()
    }
}

fn durable_append_2k(c: &mut Criterion) {
    const PER_ITER: u64 = 4 * 16;
    let mut g = c.benchmark_group("durable_append_2k_4_chats");
    g.throughput(Throughput::Elements(PER_ITER)).sample_size(20).measurement_time(Duration::from_secs(8));
    let dir = bench_tempdir().unwrap();
    let store = Store::open(dir.path().join("u"), Options::default()).unwrap();
    let chats: Vec<_> = (0..4)
        .map(|_| store.chat("b", store.create_chat("b", ChatMeta::default()).unwrap()).unwrap())
        .collect();
    let mut seed = 0u64;
    let mut appends = 0u64;
    let syncs_before = store.stats().unwrap().log_syncs;
    g.bench_function("undertext_group", |b| {
        b.iter_custom(|iters| {
            appends += iters * PER_ITER;
            let t = Instant::now();
            for _ in 0..iters {
                seed += 1;
                std::thread::scope(|s| {
                    for (k, chat) in chats.iter().enumerate() {
                        s.spawn(move || {
                            for i in 0..PER_ITER / 4 {
                                chat.append(NewMessage::assistant(text_2k(seed * 1000 + k as u64 * 100 + i)))
                                    .unwrap();
                            }
                        });
                    }
                });
            }
            t.elapsed()
        })
    });
    // Diagnostic, not a measurement: how many appends shared each log fdatasync.
    let syncs = store.stats().unwrap().log_syncs - syncs_before;
    eprintln!(
        "undertext_group: {appends} appends, {syncs} log fdatasyncs, {:.2} appends per fdatasync",
        appends as f64 / syncs.max(1) as f64
    );
    let sql = SqliteChats::create(&dir.path().join("s.db"));
    let next = Mutex::new([0u64; 4]);
    g.bench_function("sqlite_wal_full", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                seed += 1;
                std::thread::scope(|s| {
                    for k in 0..4u64 {
                        let (sql, next) = (&sql, &next);
                        s.spawn(move || {
                            for i in 0..PER_ITER / 4 {
                                let seq = {
                                    let mut n = next.lock();
                                    n[k as usize] += 1;
                                    n[k as usize]
                                };
                                sql.append(k, seq, &text_2k(seed * 1000 + k * 100 + i));
                            }
                        });
                    }
                });
            }
            t.elapsed()
        })
    });
    g.finish();
}

fn cold_load_1000(c: &mut Criterion) {
    cold_load_1000_of(c, "cold_load_1000_messages", &text_2k);
    // Real message text: the texts inside the shared transcripts (tool output, code, prose),
    // cut into ~2 KB messages; what a compressor meets in a harness, where `text_2k`'s random
    // letters are not.
    let texts = undertext_benches::transcript_texts_2k().unwrap();
    cold_load_1000_of(c, "cold_load_1000_real_messages", &|seed| texts[seed as usize % texts.len()].clone());
}

fn cold_load_1000_of(c: &mut Criterion, group: &str, text: &dyn Fn(u64) -> String) {
    let dir = bench_tempdir().unwrap();
    let opts = Options::default().chat_cache_capacity(1);
    let store = Store::open(dir.path().join("u"), opts).unwrap();
    let sql = SqliteChats::create(&dir.path().join("s.db"));
    let mut ids: Vec<ChatId> = Vec::new();
    for k in 0..2u64 {
        let id = store.create_chat("b", ChatMeta::default()).unwrap();
        let chat = store.chat("b", id).unwrap();
        for b in 0..10u64 {
            let batch = (0..100).map(|i| NewMessage::assistant(text(k * 10_000 + b * 100 + i))).collect();
            chat.append_batch(batch).unwrap();
        }
        let tx = sql.conn.lock();
        tx.execute_batch("BEGIN").unwrap();
        drop(tx);
        for s in 0..1000u64 {
            sql.append(k, s, &text(k * 10_000 + s));
        }
        sql.conn.lock().execute_batch("COMMIT").unwrap();
        ids.push(id);
    }
    store.sync().unwrap();
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(1000));
    let mut turn = 0usize;
    g.bench_function("undertext", |b| {
        b.iter(|| {
            // Alternate between two chats with a one-chat cache: every open is a cold load.
            turn += 1;
            let chat = store.chat("b", ids[turn % 2]).unwrap();
            let all = chat.messages().unwrap();
            assert_eq!(all.len(), 1000);
            all
        })
    });
    g.bench_function("sqlite_select_decode", |b| {
        b.iter(|| {
            turn += 1;
            let rows = sql.load((turn % 2) as u64);
            assert_eq!(rows.len(), 1000);
            rows
        })
    });
    g.finish();
    println!("{group}: chats in memory after the run: {}", store.stats().unwrap().chats_in_memory);
}

/// 100 KB of tool output, distinct per seed.
fn tool_output_100k(seed: u64) -> String {
    let mut s = String::with_capacity(100_200);
    let mut i = 0u64;
    while s.len() < 100_000 {
        s.push_str(&format!("{seed:016x} line {i}: ok {}\n", text_2k(seed ^ i).get(..40).unwrap_or("")));
        i += 1;
    }
    s
}

fn tool_result(call: &str, content: undertext::ToolContent) -> NewMessage {
    NewMessage {
        role: undertext::Role::Tool,
        parts: vec![undertext::Part::ToolResult { call_id: call.into(), content, is_error: false }],
        feedback: false,
    }
}

fn archived_append_100k(c: &mut Criterion) {
    use criterion::BatchSize;
    let mut g = c.benchmark_group("archived_append_100k");
    g.throughput(Throughput::Elements(1)).sample_size(30).measurement_time(Duration::from_secs(6));
    let dir = bench_tempdir().unwrap();
    let store = Store::open(dir.path().join("u"), Options::default().durability(Durability::None)).unwrap();
    let chat = store.chat("b", store.create_chat("b", ChatMeta::default()).unwrap()).unwrap();
    let mut seed = 1u64 << 40;
    let mut next = || {
        seed += 1;
        tool_output_100k(seed)
    };
    g.bench_function("undertext_append_archived", |b| {
        b.iter_batched(
            &mut next,
            |t| chat.append(tool_result("c", undertext::ToolContent::Text(t))).unwrap(),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("undertext_archive_then_append_ref", |b| {
        b.iter_batched(
            &mut next,
            |t| {
                let archive = store.archive("b", &t).unwrap();
                let preview = "(preview)".to_string();
                chat.append(tool_result("c", undertext::ToolContent::Archived { archive, preview })).unwrap()
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("put_blob_same_bytes", |b| {
        b.iter_batched(&mut next, |t| store.put_blob("b", t.as_bytes()).unwrap(), BatchSize::SmallInput)
    });
    // 4 writers on one chat, 4 archived appends each per iteration.
    g.throughput(Throughput::Elements(16));
    g.bench_function("undertext_append_archived_4_writers_one_chat", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let texts: Vec<Vec<String>> = (0..4).map(|_| (0..4).map(|_| next()).collect()).collect();
                let t = Instant::now();
                std::thread::scope(|s| {
                    for mine in texts {
                        let chat = &chat;
                        s.spawn(move || {
                            for text in mine {
                                chat.append(tool_result("c", undertext::ToolContent::Text(text))).unwrap();
                            }
                        });
                    }
                });
                total += t.elapsed();
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, snapshot_acquire, durable_append_2k, archived_append_100k, cold_load_1000);
criterion_main!(benches);
