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
//! With `PHASE_MS` > 0 (an alternating run, no `gc`), the readers rest in the even phases of
//! `PHASE_MS` milliseconds from the start and work in the odd ones; the writer counts its
//! appends per phase and prints the rates of both kinds too
//! (`resting_per_sec=… working_per_sec=… ratio=…`, whole phases only), and the median time
//! of one append in each (`median_ratio` = resting / working: the rate the median append
//! allows with readers, relative to without; robust to the bursts of other work on a shared
//! machine, which skew the phases' counts): the two are measured in the same run,
//! interleaved, so the machine's drifting load weighs on both alike.
//!
//! Usage: `ro_soak_writer STORE_DIR ACK_FILE SECONDS [GC_EVERY] [SEGMENT_SIZE] [CHATS] [PHASE_MS]`

use std::fs::File;
use std::io::Write;
use std::time::{Duration, Instant};

use undertext::{ChatId, ChatMeta, Options, Store};
use undertext_tests::ro_soak::{Acks, OWNER, Slot, now_ms, soak_message};

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
    let opts = Options::default().segment_size(arg(5, 65536.0) as u64);
    let chats = arg(6, 8.0) as usize;
    let phase_ms = arg(7, 0.0) as u64;
    let open = || Store::open(dir, opts.clone()).unwrap_or_else(|e| fail("open", e));
    let mut store = open();
    let create =
        |s: &Store| s.create_chat(OWNER, ChatMeta::default()).unwrap_or_else(|e| fail("create_chat", e)).0;
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
    acks.start_ms = now_ms();
    publish(&acks);
    // Appends per phase (alternating runs).
    let mut per_phase: Vec<u64> = Vec::new();
    // How long each append took, in resting and in working phases.
    let mut latencies: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut next_gc = if gc_every > 0.0 { Some(start + Duration::from_secs_f64(gc_every)) } else { None };
    let mut handles: Vec<_> = acks
        .slots
        .iter()
        .map(|s| store.chat(OWNER, ChatId(s.chat)).unwrap_or_else(|e| fail("chat", e)))
        .collect();
    while start.elapsed() < secs {
        let i = (appends % chats as u64) as usize;
        let slot = &mut acks.slots[i];
        let n = if appends % 16 == 15 { 3 } else { 1 };
        let batch: Vec<_> = (slot.count..slot.count + n).map(|s| soak_message(slot.chat, s)).collect();
        let t = Instant::now();
        let seqs = handles[i].append_batch(batch).unwrap_or_else(|e| fail("append", e));
        let took = t.elapsed();
        if seqs != (slot.count..slot.count + n) {
            fail("append", format!("expected seqs {:?}, got {seqs:?}", slot.count..slot.count + n));
        }
        slot.count += n;
        appends += 1;
        if let Some(p) = (start.elapsed().as_millis() as u64).checked_div(phase_ms) {
            let p = p as usize;
            per_phase.resize(per_phase.len().max(p + 1), 0);
            per_phase[p] += 1;
            latencies[p % 2].push(took);
        }
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
    let phases = if let Some(whole) = (start.elapsed().as_millis() as u64).checked_div(phase_ms) {
        // Whole phases only: the last one may be cut by the end of the run.
        let whole = whole as usize;
        per_phase.resize(whole, 0);
        let secs = |even: bool| {
            (0..whole).filter(|p| p.is_multiple_of(2) == even).count() as f64 * phase_ms as f64 / 1e3
        };
        let sum = |even: bool| {
            per_phase
                .iter()
                .enumerate()
                .filter(|(p, _)| p.is_multiple_of(2) == even)
                .map(|(_, n)| n)
                .sum::<u64>() as f64
        };
        let (resting, working) = (sum(true) / secs(true), sum(false) / secs(false));
        let median = |v: &mut Vec<Duration>| {
            v.sort();
            v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e3)
        };
        let (m0, m1) = (median(&mut latencies[0]), median(&mut latencies[1]));
        format!(
            " resting_per_sec={resting:.1} working_per_sec={working:.1} ratio={:.3} \
             resting_median_append_ms={m0:.3} working_median_append_ms={m1:.3} median_ratio={:.3} phases={}",
            working / resting,
            m0 / m1,
            per_phase.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
        )
    } else {
        String::new()
    };
    drop(handles);
    store.close().unwrap_or_else(|e| fail("close", e));
    acks.done = true;
    publish(&acks);
    say(&format!(
        "done appends={appends} messages={messages} secs={appending:.3} per_sec={:.1} gcs={}{phases}",
        appends as f64 / appending,
        acks.gcs
    ));
}
