//! The background pre-compaction worker, with a summarizer given as C callbacks.

use std::sync::Arc;
use std::time::Duration;

use undertext::{HardLinePolicy, WorkerOptions};

use crate::args::{self};
use crate::buf::Buf;
use crate::checkpoints::checkpoint_options;
use crate::guard::call;
use crate::handles::{self, Object, StoreHandle, WorkerHandle};
use crate::status::{FfiError, FfiResult, Status};
use crate::summarizer::{SummarizerIn, summarizer_in};

/// At the hard line with nothing prepared: wait up to `wait_ms` for the worker's job.
pub const UNDERTEXT_HARD_LINE_WAIT: u32 = 0;
/// At the hard line with nothing prepared: let the guard refuse the call.
pub const UNDERTEXT_HARD_LINE_REFUSE: u32 = 1;
/// At the hard line with nothing prepared: build the checkpoint on the viewing thread.
pub const UNDERTEXT_HARD_LINE_SYNCHRONOUS: u32 = 2;

/// The C default of `threads`: one summarizer callback at a time (a C callback is not
/// assumed reentrant; the Rust default is 4).
const C_DEFAULT_THREADS: usize = 1;

/// Settings of the worker. Fill with `undertext_worker_options_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct WorkerOptionsIn {
    /// Worker threads, and summarizer callbacks made at once (at least 1). Default 1 in C:
    /// callbacks are not assumed reentrant. Set 4 when they are: a slow model summarizer's
    /// job then takes a few calls in a row, not one per segment, and views do not wait for
    /// it at the hard line (the Rust and Python default).
    pub threads: u32,
    /// Fraction of the usable window past which a checkpoint is prepared (default 2/3).
    pub soft: f64,
    /// Target segment size in estimated tokens (0: default 8,000).
    pub segment_tokens: u64,
    /// Summaries merged at a time (0: default 4).
    pub fan_in: u32,
    /// One of `UNDERTEXT_HARD_LINE_*` (default `UNDERTEXT_HARD_LINE_WAIT`).
    pub at_hard_line: u32,
    /// For `UNDERTEXT_HARD_LINE_WAIT`: how long to wait, in milliseconds (default 30,000).
    pub wait_ms: u64,
    /// A failed job is retried this many times (default 2).
    pub retries: u32,
}

/// The worker's counters.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkerStats {
    /// Jobs finished, successfully or not.
    pub jobs_done: u64,
    /// Errors reported by failed jobs (read them with `undertext_worker_errors`).
    pub n_errors: u64,
}

fn to_options(o: &WorkerOptionsIn) -> FfiResult<WorkerOptions> {
    let at_hard_line = match o.at_hard_line {
        UNDERTEXT_HARD_LINE_WAIT => HardLinePolicy::Wait(Duration::from_millis(o.wait_ms)),
        UNDERTEXT_HARD_LINE_REFUSE => HardLinePolicy::Refuse,
        UNDERTEXT_HARD_LINE_SYNCHRONOUS => HardLinePolicy::Synchronous,
        p => {
            return Err(FfiError::invalid(format!(
                "options.at_hard_line: expected UNDERTEXT_HARD_LINE_WAIT (0), _REFUSE (1) or _SYNCHRONOUS (2), found {p}"
            )));
        }
    };
    Ok(WorkerOptions {
        threads: o.threads as usize,
        soft: o.soft,
        checkpoint: checkpoint_options(o.segment_tokens, o.fan_in),
        at_hard_line,
        retries: o.retries,
        ..WorkerOptions::default()
    })
}

/// Fills `*out` with the default worker options.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_worker_options_default(out: *mut WorkerOptionsIn) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let d = WorkerOptions::default();
        out.set(WorkerOptionsIn {
            threads: C_DEFAULT_THREADS as u32,
            soft: d.soft,
            segment_tokens: d.checkpoint.segment_tokens,
            fan_in: d.checkpoint.fan_in as u32,
            at_hard_line: UNDERTEXT_HARD_LINE_WAIT,
            wait_ms: 30_000,
            retries: d.retries,
        });
        Ok(())
    })
}

/// Starts the store's background pre-compaction worker with `summarizer` (NULL: the
/// built-in extractive one) and `options` (NULL: defaults). Past the soft line, a view
/// asks the worker to prepare a checkpoint; the worker's threads call the summarizer
/// callbacks (see `undertext_summarizer_t` for threads and timing); at the hard line a view
/// publishes the prepared checkpoint instead of waiting for a model. One worker per store:
/// starting another replaces it for new requests.
///
/// # Safety
/// `summarizer` and `options` are NULL or valid; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_worker_start(
    store: StoreHandle,
    summarizer: *const SummarizerIn,
    options: *const WorkerOptionsIn,
    out: *mut WorkerHandle,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (s, out) = unsafe { (summarizer_in(summarizer)?, args::output(out, "out")?) };
        let opts = if options.is_null() {
            WorkerOptions { threads: C_DEFAULT_THREADS, ..WorkerOptions::default() }
        } else {
            // SAFETY: non-NULL; the caller guarantees a valid struct.
            to_options(unsafe { args::input(options, "options") }?)?
        };
        let (st, _) = store.object()?;
        let w = st.start_worker(s, opts)?;
        out.set(WorkerHandle { id: handles::insert(Object::Worker(Arc::new(w)), Some(store.id))? });
        Ok(())
    })
}

/// The worker's counters.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_worker_stats(worker: WorkerHandle, out: *mut WorkerStats) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (w, _) = worker.object()?;
        out.set(WorkerStats { jobs_done: w.jobs_done(), n_errors: w.errors().len() as u64 });
        Ok(())
    })
}

/// The errors of failed jobs, oldest first, as a JSON array of strings in `*out`.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_worker_errors(worker: WorkerHandle, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (w, _) = worker.object()?;
        out.set(Buf::text(serde_json::json!(w.errors()).to_string()));
        Ok(())
    })
}

/// Stops the worker and frees its handle: no new jobs; returns once its threads have
/// finished their current job and ended, so no worker thread calls the summarizer after.
#[unsafe(no_mangle)]
pub extern "C" fn undertext_worker_stop(worker: WorkerHandle) -> Status {
    call(|| {
        handles::remove(worker.id, WorkerHandle::KIND)?;
        Ok(())
    })
}
