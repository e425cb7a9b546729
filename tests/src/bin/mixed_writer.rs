//! Child process of the mixed-workload crash test (`tests/tests/crash.rs`) and of
//! `scripts/crash-campaign`: runs the mixed workload (tests/src/mixed.rs) in `Group`
//! durability, with the background pre-compaction worker running, and prints every event
//! of every write call as one line (`begin …`, `ack …`, `fail …`), flushed before the next
//! call starts. The parent kills it with SIGKILL at a random moment and checks the store
//! against the events it read.
//!
//! Usage: `mixed_writer STORE_DIR SEED BASE CALLS`

use std::io::Write;
use std::sync::Arc;

use undertext::FnSummarizer;
use undertext::WorkerOptions;
use undertext_tests::child::open_or_exit;
use undertext_tests::mixed::{actions, run};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let parsed =
        (args.len() == 5).then(|| (args[2].parse::<u64>(), args[3].parse::<u64>(), args[4].parse::<usize>()));
    let Some((Ok(seed), Ok(base), Ok(calls))) = parsed else {
        eprintln!("usage: mixed_writer STORE_DIR SEED BASE CALLS");
        std::process::exit(2);
    };
    let store = open_or_exit(&args[1], 64 << 10);
    // The worker builds checkpoints off the request path: its summary writes land in the log
    // at moments of their own, which the kill can interrupt too.
    let summarizer = Arc::new(FnSummarizer::new(
        "worker",
        |m: &[undertext::Message]| Ok(format!("{} messages", m.len())),
        |t: &[String]| Ok(t.join(" + ")),
    ));
    let worker = match store.start_worker(summarizer, WorkerOptions::default()) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("worker failed to start: {e}");
            std::process::exit(1);
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ready");
    let _ = out.flush();
    let acts = actions(seed ^ base, calls);
    let stats = run(
        &store,
        seed,
        base,
        &acts,
        |e| {
            let _ = writeln!(out, "{}", e.encode());
            let _ = out.flush();
        },
        || false,
    );
    drop(out);
    let (jobs, errors) = (worker.jobs_done(), worker.errors());
    worker.stop();
    eprintln!(
        "workload finished: {} acknowledged, {} failed, {jobs} worker jobs done, worker errors {errors:?}",
        stats.acked, stats.failed
    );
}
