//! Where a store's bytes go: the log by record kind and codec (payloads, record headers and
//! padding, batch headers, segment headers) and the index by table (rows, leaf and branch
//! pages, stored bytes). Issue 19's disk breakdown.
//!
//! ```text
//! cargo run --release -p undertext-benches --bin store_bytes -- STORE_DIR [TEXT_BYTES]
//! cargo run --release -p undertext-benches --bin store_bytes -- --open STORE_DIR [TIMES]
//! ```
//!
//! The store must be closed (the index is opened with redb directly). `TEXT_BYTES`, when
//! given, is the distinct text the store holds; every figure is then also shown as a
//! multiple of it. With `--open`, the store is instead opened and closed `TIMES` times
//! (default 1) and each open's wall time printed (the close is not timed): the reopen of
//! issue 19, for `valgrind --tool=callgrind`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use redb::{ReadableDatabase, ReadableTableMetadata, TableHandle};
use undertext::log::format::{self, BATCH_HEADER_LEN, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN, align_up};
use undertext_benches::Result;

fn kind_name(k: u8) -> &'static str {
    match k {
        1 => "blob",
        2 => "chat",
        3 => "chat metadata",
        4 => "message",
        5 => "revision",
        6 => "step",
        7 => "archive grant",
        8 => "pin",
        9 => "usage",
        10 => "compaction",
        11 => "summary",
        12 => "checkpoint",
        13 => "manifest",
        14 => "delete",
        15 => "blob grant",
        16 => "hide",
        17 => "message (compact)",
        _ => "other",
    }
}

#[derive(Default)]
struct Tally {
    count: u64,
    payload: u64,
    framing: u64,
}

fn segments(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("log"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    v.sort();
    Ok(v)
}

fn open_times(dir: &Path, times: usize) -> Result<()> {
    for _ in 0..times {
        let t = std::time::Instant::now();
        let store = undertext::Store::open(dir, undertext::Options::default())?;
        let took = t.elapsed();
        store.close()?;
        println!("open: {:.2} ms", took.as_secs_f64() * 1000.0);
    }
    Ok(())
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().is_some_and(|a| a == "--open") {
        args.next();
        let dir = PathBuf::from(args.next().ok_or("usage: store_bytes --open STORE_DIR [TIMES]")?);
        let times = args.next().map(|s| s.parse()).transpose()?.unwrap_or(1);
        return open_times(&dir, times);
    }
    if args.peek().is_some_and(|a| a == "--compact") {
        args.next();
        let dir = PathBuf::from(args.next().ok_or("usage: store_bytes --compact STORE_DIR")?);
        let index = dir.join("index.redb");
        let before = std::fs::metadata(&index)?.len();
        let t = std::time::Instant::now();
        let mut db = redb::Database::open(&index)?;
        let opened = t.elapsed();
        let compacted = db.compact()?;
        drop(db);
        let after = std::fs::metadata(&index)?.len();
        println!(
            "index {before} -> {after} bytes (compacted: {compacted}); open {:.1} ms, open + compact {:.1} ms",
            opened.as_secs_f64() * 1e3,
            t.elapsed().as_secs_f64() * 1e3
        );
        return Ok(());
    }
    let dir = PathBuf::from(args.next().ok_or("usage: store_bytes STORE_DIR [TEXT_BYTES]")?);
    let text: Option<f64> = args.next().map(|s| s.parse()).transpose()?;
    let times = |b: u64| text.map(|t| format!(" ({:.3}x)", b as f64 / t)).unwrap_or_default();

    let mut by_kind: BTreeMap<(u8, u8), Tally> = BTreeMap::new();
    let (mut batches, mut batch_headers, mut seg_headers, mut zeros_after, mut files) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    for p in segments(&dir)? {
        let seg = std::fs::read(&p)?;
        files += seg.len() as u64;
        seg_headers += SEGMENT_HEADER_LEN as u64;
        let mut at = SEGMENT_HEADER_LEN;
        while at + BATCH_HEADER_LEN <= seg.len() {
            let Ok(b) = format::decode_batch(&seg, at) else { break };
            batches += 1;
            batch_headers += BATCH_HEADER_LEN as u64;
            for r in &b.records {
                let t = by_kind.entry((r.kind, r.codec)).or_default();
                t.count += 1;
                t.payload += r.payload.len() as u64;
                t.framing += (RECORD_HEADER_LEN + align_up(r.payload.len()) - r.payload.len()) as u64;
            }
            at = b.end as usize;
        }
        zeros_after += (seg.len() - at) as u64;
    }
    println!("log: {} segment file bytes, {batches} batches", files);
    println!("| kind | codec | records | payload bytes | header+padding bytes | per record |");
    println!("|---|--:|--:|--:|--:|--:|");
    let (mut payload, mut framing) = (0, 0);
    for ((k, c), t) in &by_kind {
        payload += t.payload;
        framing += t.framing;
        println!(
            "| {k} {} | {c} | {} | {}{} | {}{} | {:.0} |",
            kind_name(*k),
            t.count,
            t.payload,
            times(t.payload),
            t.framing,
            times(t.framing),
            (t.payload + t.framing) as f64 / t.count as f64
        );
    }
    println!("| batch headers | | {batches} | | {batch_headers}{} | |", times(batch_headers));
    println!("| segment headers | | | | {seg_headers} | |");
    println!("| zeros after the data | | | | {zeros_after} | |");
    println!("record payloads {payload}{}, record framing {framing}{}", times(payload), times(framing));

    let index = dir.join("index.redb");
    let ilen = std::fs::metadata(&index)?.len();
    println!("\nindex: {ilen} bytes{}", times(ilen));
    let db = redb::Database::open(&index)?;
    let tx = db.begin_read()?;
    println!(
        "| table | rows | leaf pages | branch pages | stored leaf bytes | metadata bytes | fragmented bytes |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|");
    for h in tx.list_tables()? {
        let name = h.name().to_string();
        let t = tx.open_untyped_table(h)?;
        let s = t.stats()?;
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} |",
            t.len()?,
            s.leaf_pages(),
            s.branch_pages(),
            s.stored_bytes(),
            s.metadata_bytes(),
            s.fragmented_bytes()
        );
    }
    Ok(())
}
