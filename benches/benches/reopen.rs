//! Reopen after SIGKILL with a 1 GiB log, against the naive baseline: replaying the whole
//! log (the same reopen with the index deleted).
//!
//! Each measured iteration: a child (`kill_target`) opens the store and writes 2 KB blobs
//! from 4 threads in `Group` mode for 0.3–1.5 s (so the index lags the log by up to one
//! durable interval), is killed with SIGKILL, and the parent times `Store::open`.
//!
//! `reopen_clean_langgraph_300_pairs` (issue 19): a cleanly closed store of the LangGraph
//! bench's size and shape (one thread: 1,200 records as the saver writes them, a ~340-byte
//! JSON text and an attachment each, half of them storing a new ~1.3 KB item blob in the
//! same transaction), against SQLite holding the same records (WAL, as SqliteSaver sets it
//! up). Each iteration times the open and the first read of the newest record and its item
//! (Undertext: `Store::open`, `find_chats` by title, the last message, its blob; SQLite: a
//! new connection, the newest row); the close is not timed.

#![expect(clippy::unwrap_used, reason = "bench harness: failure should abort the bench")]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use undertext::{BlobId, Durability, MetaField, NewMessage, Options, Part, Role, Store};
use undertext_benches::{Rng, bench_tempdir, random_bytes};

const LOG_BYTES: u64 = 1 << 30;

fn fill(dir: &Path) {
    let store = Store::open(dir, Options::default().durability(Durability::None)).unwrap();
    let mut written = 0u64;
    let mut i = 0u64;
    while written < LOG_BYTES {
        let blobs: Vec<Vec<u8>> = (0..16).map(|k| random_bytes(64 << 10, i * 16 + k)).collect();
        let refs: Vec<&[u8]> = blobs.iter().map(|b| b.as_slice()).collect();
        store.put_blobs("o", &refs).unwrap();
        written += 16 * (64 << 10);
        i += 1;
    }
    store.close().unwrap();
}

fn kill_cycle(dir: &Path, rng: &mut Rng) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kill_target"))
        .arg(dir)
        .arg(rng.next_u64().to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    std::thread::sleep(Duration::from_millis(300 + rng.next_u64() % 1200));
    child.kill().unwrap();
    child.wait().unwrap();
}

/// True when the command line names benchmarks (criterion's filter) and none of this group:
/// its 1 GiB fill is then skipped (`cargo bench --bench reopen -- reopen_clean`).
fn filtered_out(group: &str) -> bool {
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    !filters.is_empty() && !filters.iter().any(|f| group.contains(f.as_str()))
}

fn reopen(c: &mut Criterion) {
    if filtered_out("reopen_after_sigkill_1GiB_log") {
        return;
    }
    let dir = bench_tempdir().unwrap();
    fill(dir.path());
    let mut rng = Rng::new(7);
    let mut g = c.benchmark_group("reopen_after_sigkill_1GiB_log");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(5));
    g.bench_function("undertext_replay_from_durable_index", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                kill_cycle(dir.path(), &mut rng);
                let t = Instant::now();
                let store = Store::open(dir.path(), Options::default()).unwrap();
                total += t.elapsed();
                drop(store);
            }
            total
        })
    });
    g.bench_function("naive_replay_whole_log", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                kill_cycle(dir.path(), &mut rng);
                std::fs::remove_file(dir.path().join("index.redb")).unwrap();
                let t = Instant::now();
                let store = Store::open(dir.path(), Options::default()).unwrap();
                total += t.elapsed();
                drop(store);
            }
            total
        })
    });
    g.finish();
}

/// Records of the LangGraph-sized thread (300 pairs: 600 supersteps, a write and a
/// checkpoint record each).
const LG_RECORDS: usize = 1200;

/// Record `i`'s JSON text (~340 bytes, distinct) and, for every other record, a new item
/// (~1.3 KB of word-like text).
fn lg_record(i: usize) -> (String, Option<Vec<u8>>) {
    let words = ["the", "build", "fails", "lockfile", "cargo", "update", "check", "error", "module", "value"];
    let mut rng = Rng::new(i as u64 + 1);
    let json = format!(
        "{{\"k\":\"C\",\"id\":\"1f0c{i:012x}\",\"p\":\"1f0c{:012x}\",\"c\":{{\"v\":4,\"ts\":\"2026-12-01T08:{:02}:{:02}\",\"cv\":{{\"messages\":\"{:032}\",\"branch:to:tools\":\"{:032}\"}}}},\"m\":{{\"source\":\"loop\",\"step\":{i},\"parents\":{{}}}},\"ch\":{{\"messages\":{{\"b\":{},\"i\":[0]}}}},\"e\":[8,6,4,2,0]}}",
        i.saturating_sub(1),
        (i / 60) % 60,
        i % 60,
        rng.next_u64(),
        rng.next_u64(),
        i.saturating_sub(2)
    );
    let item = i.is_multiple_of(2).then(|| {
        let mut t = format!("[result {i}]");
        while t.len() < 1300 {
            t.push(' ');
            t.push_str(words[(rng.next_u64() % words.len() as u64) as usize]);
        }
        t.into_bytes()
    });
    (json, item)
}

fn fill_langgraph(dir: &Path) {
    let store = Store::open(dir, Options::default().durability(Durability::None)).unwrap();
    let meta = undertext::ChatMeta { title: "thread-1".into(), ..Default::default() };
    let chat = store.chat("langgraph", store.create_chat("langgraph", meta).unwrap()).unwrap();
    let mut last = BlobId::of(b"");
    for i in 0..LG_RECORDS {
        let (json, item) = lg_record(i);
        if let Some(item) = &item {
            last = BlobId::of(item);
        }
        let msg = NewMessage {
            role: Role::System,
            parts: vec![Part::Text(json), Part::Attachment { mime: "lg".into(), blob: last }],
            feedback: false,
        };
        match &item {
            Some(b) => chat.append_with_blobs(&[b.as_slice()], vec![msg]).unwrap(),
            None => (Vec::new(), chat.append(msg).map(|s| s..s + 1).unwrap()),
        };
    }
    store.close().unwrap();
}

fn fill_sqlite(path: &Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).unwrap();
    assert!(mode.eq_ignore_ascii_case("wal"));
    conn.execute_batch(
        "CREATE TABLE checkpoints (thread_id TEXT NOT NULL, checkpoint_id TEXT NOT NULL, checkpoint BLOB,
             item BLOB, PRIMARY KEY (thread_id, checkpoint_id));",
    )
    .unwrap();
    let mut item: Vec<u8> = Vec::new();
    for i in 0..LG_RECORDS {
        let (json, new) = lg_record(i);
        if let Some(n) = new {
            item = n;
        }
        conn.execute(
            "INSERT INTO checkpoints VALUES ('thread-1', ?1, ?2, ?3)",
            rusqlite::params![format!("{i:012}"), json, item],
        )
        .unwrap();
    }
}

fn reopen_clean(c: &mut Criterion) {
    let dir = bench_tempdir().unwrap();
    let ut = dir.path().join("undertext");
    fill_langgraph(&ut);
    let db = dir.path().join("sqlite.db");
    fill_sqlite(&db);
    let mut g = c.benchmark_group("reopen_clean_langgraph_300_pairs");
    g.sample_size(30).measurement_time(Duration::from_secs(5));
    g.bench_function("undertext_open_and_first_read", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let store = Store::open(&ut, Options::default()).unwrap();
                let found = store.find_chats("langgraph", MetaField::Title, "thread-1").unwrap();
                let chat = store.chat("langgraph", found[0].id).unwrap();
                let m = chat.get(chat.len() - 1).unwrap();
                let Some(Part::Attachment { blob, .. }) = m.parts.get(1) else { panic!("an attachment") };
                let item = store.get_blob("langgraph", blob).unwrap();
                total += t.elapsed();
                assert!(item.len() > 1000);
                drop(store);
            }
            total
        })
    });
    g.bench_function("sqlite_open_and_first_read", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let conn = rusqlite::Connection::open(&db).unwrap();
                let (json, item): (String, Vec<u8>) = conn
                    .query_row(
                        "SELECT checkpoint, item FROM checkpoints WHERE thread_id = 'thread-1'
                         ORDER BY checkpoint_id DESC LIMIT 1",
                        [],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .unwrap();
                total += t.elapsed();
                assert!(json.len() > 100 && item.len() > 1000);
                drop(conn);
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, reopen_clean, reopen);
criterion_main!(benches);
