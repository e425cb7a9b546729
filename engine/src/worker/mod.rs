//! The background pre-compaction worker: pay before the wall.
//!
//! When a view finds a chat past the worker's soft line (default 2/3 of the usable window),
//! it asks the worker for a checkpoint; a worker thread builds it from a snapshot, off the
//! request path, and keeps it *prepared*. When a view finds the chat past the hard line, it
//! publishes the prepared checkpoint — a guarded transaction, not a model call — and the
//! messages after the checkpoint's reach ride on top raw. A prepared checkpoint made stale by
//! an edit is dropped and rebuilt. If none is ready at the hard line, [`HardLinePolicy`]
//! decides.
//!
//! Threads: the summarizer is called on the worker's own threads, never on a caller's.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::archive::ArchiveCache;
use crate::checkpoint::{self, Checkpoint, CheckpointOptions, Summarizer};
use crate::error::{Error, Result};
use crate::history::{ChatId, ChatRef, ChatState};

/// What a view does at the hard line when no prepared checkpoint is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HardLinePolicy {
    /// Wait up to this long for the worker's job, then refuse.
    Wait(Duration),
    /// Let the guard refuse the call.
    Refuse,
    /// Build the checkpoint now, on the caller's thread.
    Synchronous,
}

/// Settings of the worker.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Worker threads. Default 1.
    pub threads: usize,
    /// Fraction of the usable window past which a checkpoint is prepared. Default 2/3.
    pub soft: f64,
    /// How checkpoints are built.
    pub checkpoint: CheckpointOptions,
    /// What happens at the hard line with nothing prepared. Default `Wait(30 s)`.
    pub at_hard_line: HardLinePolicy,
    /// A failed job is retried this many times. Default 2.
    pub retries: u32,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            threads: 1,
            soft: 2.0 / 3.0,
            checkpoint: CheckpointOptions::default(),
            at_hard_line: HardLinePolicy::Wait(Duration::from_secs(30)),
            retries: 2,
        }
    }
}

/// A job: prepare a checkpoint of this chat.
#[derive(Debug)]
struct Job {
    owner: String,
    chat: ChatId,
    attempt: u32,
    /// The protected tail's bound of the budget that asked (see `budget::tail`).
    protect: Option<u64>,
}

/// State shared by the worker threads and the store's views.
pub(crate) struct Shared {
    tx: Mutex<Option<Sender<Job>>>,
    pub(crate) summarizer: Arc<dyn Summarizer>,
    pub(crate) opts: WorkerOptions,
    /// Jobs finished, signalled whenever one ends.
    done: (Mutex<u64>, Condvar),
    /// Jobs requested and not finished (queued or running), signalled when it drops.
    pending: (Mutex<u64>, Condvar),
    errors: Mutex<Vec<String>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerShared")
            .field("summarizer", &self.summarizer.id())
            .field("opts", &self.opts)
            .finish()
    }
}

impl Shared {
    /// Asks for a checkpoint of `chat` (no-op if the worker is stopping).
    pub(crate) fn request(&self, owner: &str, chat: ChatId, protect: Option<u64>) {
        if let Some(tx) = &*self.tx.lock() {
            *self.pending.0.lock() += 1;
            if tx.send(Job { owner: owner.to_string(), chat, attempt: 0, protect }).is_err() {
                self.job_left();
            }
        }
    }

    /// A requested job left the queue for good (finished, or not sent).
    fn job_left(&self) {
        let (m, cv) = &self.pending;
        let mut n = m.lock();
        *n = n.saturating_sub(1);
        cv.notify_all();
    }

    /// Waits until no job is queued or running, or `timeout` passes; true when idle.
    pub(crate) fn wait_idle(&self, timeout: Duration) -> bool {
        let (m, cv) = &self.pending;
        let deadline = std::time::Instant::now() + timeout;
        let mut n = m.lock();
        while *n > 0 {
            if cv.wait_until(&mut n, deadline).timed_out() {
                return *n == 0;
            }
        }
        true
    }

    /// Waits until the number of finished jobs moves past `seen`, or `timeout` passes.
    pub(crate) fn wait_job(&self, seen: u64, timeout: Duration) -> bool {
        let (m, cv) = &self.done;
        let mut n = m.lock();
        if *n > seen {
            return true;
        }
        !cv.wait_for(&mut n, timeout).timed_out() || *n > seen
    }

    pub(crate) fn jobs_done(&self) -> u64 {
        *self.done.0.lock()
    }
}

/// What the worker needs of the store that runs it (`api`'s store implements it: a lower
/// layer reaches up only through a trait it defines). A running worker holds its host, so
/// the store stays open while its threads run.
pub(crate) trait Host: Send + Sync + std::fmt::Debug + 'static {
    /// Chat `id` of `owner` (the same `NotFound` for another owner's chat as for none).
    fn chat(&self, owner: &str, id: ChatId) -> Result<Arc<ChatState>>;
    /// The archive cache the store's reads go through.
    fn archives(&self) -> &ArchiveCache;
    /// The store's worker slot.
    fn slot(&self) -> &Slot;
}

/// A store's worker state: the running worker, which views consult, and the checkpoints it
/// prepared, per chat in memory (a chat that leaves memory, or is deleted, takes its
/// prepared checkpoint with it).
#[derive(Debug, Default)]
pub(crate) struct Slot {
    running: Mutex<Option<Arc<Shared>>>,
    /// True while `running` holds a worker (set under its lock): a view asks without taking
    /// the store-wide lock when no worker runs.
    any_running: AtomicBool,
    /// By chat id: the chat's state in memory the checkpoint was prepared for, and the
    /// checkpoint. An entry whose state is gone (or was replaced by a reload) is stale.
    prepared: Mutex<HashMap<u64, Prepared>>,
}

/// A prepared checkpoint and the chat state (in memory) it was prepared for.
type Prepared = (Weak<ChatState>, Arc<Checkpoint>);

impl Slot {
    /// The running worker, if any.
    pub(crate) fn running(&self) -> Option<Arc<Shared>> {
        if !self.any_running.load(Ordering::Acquire) {
            return None;
        }
        self.running.lock().clone()
    }

    /// Waits until the running worker has no job queued or running, or `timeout` passes;
    /// true at once without a worker.
    pub(crate) fn wait_idle(&self, timeout: Duration) -> bool {
        self.running().is_none_or(|s| s.wait_idle(timeout))
    }

    /// The checkpoint prepared for `chat`, if any (it may be stale: compare its
    /// `base_revision` with the chat's revision). None once the chat is deleted (here, or in
    /// fleet mode by another process).
    pub(crate) fn prepared(&self, chat: &Arc<ChatState>) -> Option<Arc<Checkpoint>> {
        if chat.deleted.load(Ordering::Acquire) {
            return None;
        }
        let map = self.prepared.lock();
        let (held, cp) = map.get(&chat.id.0)?;
        std::ptr::eq(held.as_ptr(), Arc::as_ptr(chat)).then(|| cp.clone())
    }

    /// Keeps `cp` prepared for `chat` (replacing what was), and forgets the checkpoints of
    /// chats no longer in memory.
    pub(crate) fn set_prepared(&self, chat: &Arc<ChatState>, cp: Checkpoint) {
        let mut map = self.prepared.lock();
        map.retain(|_, (held, _)| held.strong_count() > 0);
        map.insert(chat.id.0, (Arc::downgrade(chat), Arc::new(cp)));
    }

    /// Forgets what was prepared for `chat` (deleted).
    pub(crate) fn forget(&self, chat: &Arc<ChatState>) {
        let mut map = self.prepared.lock();
        if map.get(&chat.id.0).is_some_and(|(held, _)| std::ptr::eq(held.as_ptr(), Arc::as_ptr(chat))) {
            map.remove(&chat.id.0);
        }
    }
}

/// A running worker. Dropping it (or [`Worker::stop`]) ends its threads after their current job.
#[derive(Debug)]
pub struct Worker {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    host: Arc<dyn Host>,
    /// The process that started the worker: a fork child has none of its threads.
    opener: crate::io::Opener,
}

/// Starts a worker for `host` (see `Store::start_worker`); `dir` names the store in errors.
pub(crate) fn start(
    host: Arc<dyn Host>,
    dir: &Path,
    summarizer: Arc<dyn Summarizer>,
    opts: WorkerOptions,
) -> Result<Worker> {
    if !(0.0 < opts.soft && opts.soft < 1.0) || opts.threads == 0 {
        return Err(Error::InvalidArgument(format!(
            "worker: expected 0 < soft < 1 and threads >= 1, found soft {} threads {}",
            opts.soft, opts.threads
        )));
    }
    let (tx, rx) = channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    let shared = Arc::new(Shared {
        tx: Mutex::new(Some(tx)),
        summarizer,
        opts,
        done: (Mutex::new(0), Condvar::new()),
        pending: (Mutex::new(0), Condvar::new()),
        errors: Mutex::new(Vec::new()),
    });
    let mut threads = Vec::new();
    for i in 0..shared.opts.threads {
        let (shared, rx, host) = (shared.clone(), rx.clone(), host.clone());
        let h = std::thread::Builder::new()
            .name(format!("undertext-worker-{i}"))
            .spawn(move || run(&*host, &shared, &rx))
            .map_err(|e| Error::io("spawn worker thread", dir, e))?;
        threads.push(h);
    }
    {
        let slot = host.slot();
        let mut r = slot.running.lock();
        *r = Some(shared.clone());
        slot.any_running.store(true, Ordering::Release);
    }
    Ok(Worker { shared, threads, host, opener: crate::io::Opener::here() })
}

impl Worker {
    /// Jobs finished (successfully or not).
    pub fn jobs_done(&self) -> u64 {
        self.shared.jobs_done()
    }

    /// Waits until the worker has no job queued or running, or `timeout` passes (a harness
    /// gives it the time of a model call this way; returns at once when nothing is pending).
    /// True when it is idle.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        self.shared.wait_idle(timeout)
    }

    /// Errors reported by failed jobs (a summarizer's error, a build failure), oldest first.
    pub fn errors(&self) -> Vec<String> {
        self.shared.errors.lock().clone()
    }

    /// Stops the worker: no new jobs; threads end after their current one.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if self.opener.forked().is_some() {
            // A fork child: the threads (and whatever locks they held) are the parent's;
            // joining one would wait forever.
            std::mem::forget(std::mem::take(&mut self.threads));
            return;
        }
        self.shared.tx.lock().take();
        let mut w = self.host.slot().running.lock();
        if w.as_ref().is_some_and(|s| Arc::ptr_eq(s, &self.shared)) {
            *w = None;
            self.host.slot().any_running.store(false, Ordering::Release);
        }
        drop(w);
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn run(host: &dyn Host, shared: &Shared, rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = match rx.lock().recv() {
            Ok(j) => j,
            Err(_) => return,
        };
        let r = prepare(host, shared, &job);
        let retry = r.is_err() && job.attempt < shared.opts.retries;
        if !retry && let Ok(state) = host.chat(&job.owner, job.chat) {
            // The chat may ask for the next job.
            state.requested.store(0, Ordering::Release);
        }
        if let Err(e) = &r {
            let msg = format!("checkpoint of {} (attempt {}): {e}", job.chat, job.attempt + 1);
            tracing::warn!(%msg, "worker job failed");
            shared.errors.lock().push(msg);
            if retry
                && let Some(tx) = &*shared.tx.lock()
                && tx.send(Job { attempt: job.attempt + 1, ..job }).is_ok()
            {
                // Still pending: the retry is queued.
                let (m, cv) = &shared.done;
                *m.lock() += 1;
                cv.notify_all();
                continue;
            }
        }
        shared.job_left();
        let (m, cv) = &shared.done;
        *m.lock() += 1;
        cv.notify_all();
    }
}

/// Builds a checkpoint of the job's chat and keeps it prepared, unless the chat moved on.
fn prepare(host: &dyn Host, shared: &Shared, job: &Job) -> Result<()> {
    let state = host.chat(&job.owner, job.chat)?;
    let chat = ChatRef { state: &state, archives: host.archives() };
    // Summaries of unchanged segments are cached: rebuilding costs only what is new.
    // Nothing settled yet (the protected tail, or a pending approval, holds it all):
    // there is nothing to prepare, which is not a failure.
    let opts = CheckpointOptions { protect_max_tokens: job.protect, ..shared.opts.checkpoint.clone() };
    let Some(cp) = checkpoint::build_if_settled(&chat, &*shared.summarizer, &opts)? else { return Ok(()) };
    host.slot().set_prepared(&state, cp);
    Ok(())
}
