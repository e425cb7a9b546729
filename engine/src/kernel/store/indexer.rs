//! The background indexer: moves new log records into redb, and makes redb durable
//! periodically. It never runs on a writer's path.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;

use crate::disk::index::Index;
use crate::disk::log::writer::LogWriter;
use crate::kernel::options::Options;

/// Runs until `stop` fires or its sender is dropped, then makes the index durable.
pub(crate) fn run(index: Arc<Index>, log: Arc<LogWriter>, opts: Options, stop: Receiver<()>) {
    let mut last_durable = Instant::now();
    loop {
        let stopping = match stop.recv_timeout(opts.index_flush_interval) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => true,
            Err(RecvTimeoutError::Timeout) => false,
        };
        let durable = stopping
            || last_durable.elapsed() >= opts.index_durable_interval
            || index.mem.read().bytes_since_durable() >= opts.index_durable_bytes;
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
