//! The background indexer: moves new log records into redb, and makes redb durable
//! periodically. It never runs on a writer's path.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;

use crate::disk::index::Index;
use crate::disk::log::writer::LogWriter;
use crate::kernel::options::Options;

/// The index is made durable once this many blobs and records were noted since its last
/// durable commit, whatever the time. redb gives back the pages a non-durable commit replaces
/// only at the next durable one: a bulk writer (an import of a long session, ~70,000
/// messages a second) whose non-durable commits between two durable ones rewrote most of the
/// index left the file at 2.1× its pages (285 MB for a 1M-message import; 157 MB made
/// durable every 100 ms). 8,192 rows is about 0.1 s of such a writer and never reached by an
/// agent loop, whose index stays durable each [`Options::index_durable_interval`].
const DURABLE_ROWS: u64 = 8192;

/// Runs until `stop` fires or its sender is dropped, then makes the index durable.
pub(crate) fn run(index: Arc<Index>, log: Arc<LogWriter>, opts: Options, stop: Receiver<()>) {
    let mut last_durable = Instant::now();
    loop {
        let stopping = match stop.recv_timeout(opts.index_flush_interval) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => true,
            Err(RecvTimeoutError::Timeout) => false,
        };
        let durable = stopping || last_durable.elapsed() >= opts.index_durable_interval || {
            let mem = index.mem.read();
            mem.bytes_since_durable() >= opts.index_durable_bytes || mem.rows_since_durable() >= DURABLE_ROWS
        };
        match index.flush(durable, |p| log.sync_to(p)) {
            Ok(_) => {
                if durable {
                    last_durable = Instant::now();
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "index flush failed; the log is intact and reopen replays it")
            }
        }
        if stopping {
            return;
        }
    }
}
