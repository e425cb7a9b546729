//! The writer of the read-only soak (`tests/tests/read_only_soak.rs`, `scripts/ro-soak`):
//! opens a store for writing (`SEGMENT_SIZE`-byte segments, so it seals often), creates
//! `CHATS` chats of owner `soak`, publishes the acknowledgement table (`ACK_FILE`), prints
//! `ready`, waits for `ACK_FILE.go` to exist, then for `SECONDS` appends
//! [`soak_message`]s round-robin (one in 16 appends is a batch of three messages),
//! publishing the table after every append returned. Every `GC_EVERY` seconds (0: never) it
//! deletes one chat (marked `deleting` in the table first), closes the store, runs
//! `Store::gc`, reopens and creates a fresh chat in that slot. At the end it marks the
//! table `done`, closes the store and prints
//! `done appends=… messages=… secs=… per_sec=… gcs=…` (the rate counts the appending
//! time only, not the collections).
//!
//! Usage: `ro_soak_writer STORE_DIR ACK_FILE SECONDS [GC_EVERY] [SEGMENT_SIZE] [CHATS]`

use std::fs::File;
use std::io::Write;
use std::time::{Duration, Instant};

use undertext::{ChatId, ChatMeta, Options, Store};
use undertext_tests::ro_soak::{Acks, OWNER, Slot, soak_message};

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("ro_soak_writer: {what}: {e}");
    std::process::exit(1)
}

fn say(line: &str) {
    let mut o = std::io::stdout().lock();
    if writeln!(o, "{line}").and_then(|_| o.flush()).is_err() {
        std::process::exit(3);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: f64| -> f64 {
        args.get(i).map_or(default, |a| a.parse().unwrap_or_else(|e| fail(&format!("argument {a:?}"), e)))
    };
    if args.len() < 4 {
        eprintln!("usage: ro_soak_writer STORE_DIR ACK_FILE SECONDS [GC_EVERY] [SEGMENT_SIZE] [CHATS]");
        std::process::exit(2);
    }
    let (dir, ack_path) = (&args[1], std::path::PathBuf::from(&args[2]));
    let secs = Duration::from_secs_f64(arg(3, 3.0));
    let gc_every = arg(4, 0.0);
    let opts = Options { segment_size: arg(5, 65536.0) as u64, ..Options::default() };
    let chats = arg(6, 8.0) as usize;
    let open = || Store::open(dir, opts.clone()).unwrap_or_else(|e| fail("open", e));
    let mut store = open();
    let create = |s: &Store| {
        s.create_chat(OWNER, ChatMeta::default()).unwrap_or_else(|e| fail("create_chat", e)).0
    };
    let mut acks = Acks {
        slots: (0..chats).map(|_| Slot { chat: create(&store), count: 0, deleting: false }).collect(),
        ..Acks::default()
    };
    let ack_file = File::create(&ack_path).unwrap_or_else(|e| fail("creating the acknowledgement table", e));
    let publish = |a: &Acks| a.publish(&ack_file).unwrap_or_else(|e| fail("publishing acknowledgements", e));
    publish(&acks);
    say("ready");
    let go = ack_path.with_extension("go");
    while !go.exists() {
        std::thread::sleep(Duration::from_millis(2));
    }
    let (mut appends, mut messages, mut gc_time) = (0u64, 0u64, Duration::ZERO);
    let start = Instant::now();
    let mut next_gc = if gc_every > 0.0 { Some(start + Duration::from_secs_f64(gc_every)) } else { None };
    let mut handles: Vec<_> =
        acks.slots.iter().map(|s| store.chat(OWNER, ChatId(s.chat)).unwrap_or_else(|e| fail("chat", e))).collect();
    while start.elapsed() < secs {
        let i = (appends % chats as u64) as usize;
        let slot = &mut acks.slots[i];
        let n = if appends % 16 == 15 { 3 } else { 1 };
        let batch: Vec<_> = (slot.count..slot.count + n).map(|s| soak_message(slot.chat, s)).collect();
        let seqs = handles[i].append_batch(batch).unwrap_or_else(|e| fail("append", e));
        if seqs != (slot.count..slot.count + n) {
            fail("append", format!("expected seqs {:?}, got {seqs:?}", slot.count..slot.count + n));
        }
        slot.count += n;
        appends += 1;
        messages += n;
        publish(&acks);
        if let Some(at) = next_gc
            && Instant::now() >= at
        {
            let t = Instant::now();
            let j = (acks.gcs % chats as u64) as usize;
            acks.slots[j].deleting = true;
            publish(&acks);
            store.delete_chat(OWNER, ChatId(acks.slots[j].chat)).unwrap_or_else(|e| fail("delete_chat", e));
            drop(handles);
            store.close().unwrap_or_else(|e| fail("close", e));
            Store::gc(dir, opts.clone()).unwrap_or_else(|e| fail("gc", e));
            store = open();
            acks.slots[j] = Slot { chat: create(&store), count: 0, deleting: false };
            acks.gcs += 1;
            publish(&acks);
            handles = acks
                .slots
                .iter()
                .map(|s| store.chat(OWNER, ChatId(s.chat)).unwrap_or_else(|e| fail("chat", e)))
                .collect();
            gc_time += t.elapsed();
            next_gc = Some(Instant::now() + Duration::from_secs_f64(gc_every));
        }
    }
    let appending = (start.elapsed() - gc_time).as_secs_f64();
    drop(handles);
    store.close().unwrap_or_else(|e| fail("close", e));
    acks.done = true;
    publish(&acks);
    say(&format!(
        "done appends={appends} messages={messages} secs={appending:.3} per_sec={:.1} gcs={}",
        appends as f64 / appending,
        acks.gcs
    ));
}
