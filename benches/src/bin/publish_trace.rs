//! Publication under a syscall tracer: builds checkpoints (outside the markers) and
//! publishes 200 of them, each between two markers (`stat` of `/undertext-trace-mark-begin`
//! and `-end`), so that `strace -f -T -e trace=newfstatat,statx,pwrite64,write,fdatasync,futex`
//! shows exactly the system calls and their times inside each publication. The floor (2 KB `pwrite` +
//! `fdatasync`) follows, marked the same way. See benches/README.md (publication).

use std::os::unix::fs::FileExt;
use std::time::Instant;

use undertext::{ChatMeta, NewMessage, Options, Store};
use undertext::{CheckpointOptions, Extractive};

/// A `stat` of a path that does not exist: a marker in the trace that nothing else makes.
fn mark(what: &str) {
    let _ = std::fs::metadata(format!("/undertext-trace-mark-{what}"));
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path().join("u"), Options::default())?;
    let chat = store.chat("b", store.create_chat("b", ChatMeta::default())?)?;
    for i in 0..200 {
        chat.append(NewMessage::user(format!("turn {i}")))?;
        chat.append(NewMessage::assistant(format!("answer {i}: the file holds a parser")))?;
    }
    let (s, opts) = (Extractive::default(), CheckpointOptions::default());
    let mut publish = Vec::new();
    for _ in 0..200 {
        chat.append(NewMessage::user("one more turn"))?;
        let cp = chat.build_checkpoint(&s, &opts)?;
        mark("begin");
        let t = Instant::now();
        chat.publish_checkpoint(&cp)?;
        publish.push(t.elapsed());
        mark("end");
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.path().join("floor"))?;
    // Filled with zeros and synced, as the log preallocates its segments: the floor then
    // overwrites blocks that exist, like the publication does.
    f.write_all_at(&vec![0u8; 4 << 20], 0)?;
    f.sync_all()?;
    let rec = vec![7u8; 2048];
    let mut floor = Vec::new();
    for i in 0..200u64 {
        let i = i % 2048;
        mark("begin");
        let t = Instant::now();
        f.write_all_at(&rec, i * 2048)?;
        f.sync_data()?;
        floor.push(t.elapsed());
        mark("end");
    }
    publish.sort();
    floor.sort();
    println!("publish p50 {:?}  floor p50 {:?}", publish[100], floor[100]);
    Ok(())
}
