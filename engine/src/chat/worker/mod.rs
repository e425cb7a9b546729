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
//! Threads: the summarizer is called on the worker's own threads, never on a caller's
//! (except under [`HardLinePolicy::Synchronous`], where the view builds on its own thread,
//! one call at a time).
//!
//! # A summarizer that takes seconds
//!
//! A model summarizer takes seconds a call, and a first checkpoint is many calls (a segment
//! each, then the merges). The worker plans for the summarizer it has:
//!
//! * **It measures.** Every summarizer call of a job is timed (a moving average, see
//!   [`Worker::measured`]), and so are the calls in sequence a job makes
//!   ([`BuildStats::rounds`](crate::chat::checkpoint::BuildStats)): the expected job time is their
//!   product.
//! * **It starts early enough** ([`WorkerOptions::adaptive`]). Each view tells the worker
//!   the chat's estimate (`Shared::due`); from the growth per view and the time between
//!   views the worker knows how long until the hard line, and asks for the job once that is
//!   less than the expected job time × [`WorkerOptions::margin`] (plus a step) — never later
//!   than the fixed soft line. The decision is [`start_line`], a pure function. Before any
//!   call is measured, [`WorkerOptions::call_time`] (if the harness states it) plans the
//!   first job, the calls of a whole tree of the chat.
//! * **It summarizes segments at once.** The segments not in the summary cache are
//!   summarized up to [`WorkerOptions::threads`] calls at once, then each level's new merges
//!   likewise: a first job takes about `ceil(segments / threads)` calls plus a few merges in
//!   sequence, not their sum. `threads` bounds the worker's calls at once over all its jobs.
//! * **It refreshes from the cache.** Complete groups of the summary tree never change as the
//!   chat grows, and the groups a refresh grew into are carried to the last merge and merged
//!   by the next job (see [`checkpoint`](crate::chat::checkpoint)): the job after a swap is one
//!   round of independent calls (the new segments, the segment the old cut fell in, carried
//!   groups' merges) and the last merge — two calls in sequence when `threads` covers the
//!   round, never the old segments or the tree's path again.
//!
//! The view hooks in with one call: where it compared the estimate after the published
//! checkpoint with `soft × usable`, it asks `wk.due(chat_id, estimate, budget)`, on every view
//! while a worker runs (so the worker sees the chat grow). Until it does, the fixed soft line
//! applies and the measures only feed [`Worker::measured`].
//!
//! Measured informally (`tests/tests/worker_latency.rs`, a summarizer sleeping 20–40 ms a
//! call; figures vary with the machine):
//!
//! * a first job of 12 segments, `threads: 2`: 12 summarize and 4 merge calls in 9 rounds,
//!   205 ms at 21 ms a call (342 ms one at a time);
//! * a 160-step loop at a 32k window, 3,000-token segments: each job after a swap summarized
//!   4–5 new segments (6–8 calls): 7–8 rounds on one thread, 2 rounds on eight;
//! * with the view asking `due` (a 10 ms model step, 40 ms a call, `threads: 2`, 240 steps
//!   at 32k): at the fixed soft line 5 of 5 hard-line crossings found nothing ready and
//!   waited 91–196 ms; with the adaptive line and `call_time: 40 ms`, 1 of 7 waited (37 ms).
//!
//! Deadlocks: a pool thread waits only for a call slot, held by another pool thread for one
//! summarizer call; a caller's thread never takes a slot, and a view waiting at the hard line
//! holds nothing a pool thread needs (a Python front-end releases the GIL while it waits).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

mod plan;

pub use plan::{Outlook, due, start_line};

use crate::base::error::{Error, Result};
use crate::chat::archive::ArchiveCache;
use crate::chat::checkpoint::pool::{Calls, Slots};
use crate::chat::checkpoint::{self, Checkpoint, CheckpointOptions, Summarizer};
use crate::chat::history::{ChatId, ChatRef, ChatState};
use crate::rules::budget::Budget;

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
///
/// ```
/// use undertext::WorkerOptions;
/// // A model summarizer that may be called from two threads at once: a job summarizes two
/// // segments at a time, and starts early enough for the summarizer's measured time.
/// let opts = WorkerOptions { threads: 2, ..WorkerOptions::default() };
/// assert!(opts.adaptive && opts.margin >= 1.0);
/// ```
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Worker threads, and the summarizer calls the worker makes at once: a job summarizes
    /// up to this many segments (then merges) at once, and all jobs together never make
    /// more calls at once. Default 4: a slow model summarizer's job then takes a few calls in
    /// a row instead of one per segment, which is what keeps views from waiting at the hard
    /// line (benches/REPLAY.md: with a 2 s summarizer and 1 s of model time, no view waited
    /// with 4; one waited 4.0 s with 1). The summarizer is called from that many threads at
    /// once ([`Summarizer`] is `Send + Sync`); set 1 for one that must not be.
    pub threads: usize,
    /// Fraction of the usable window past which a checkpoint is prepared, at the latest.
    /// Default 2/3.
    pub soft: f64,
    /// Start a job earlier than the soft line when the summarizer's measured time and the
    /// chat's growth say it would not be ready at the hard line (see [`start_line`]; the view
    /// asks through the worker's `due`, see the module's documentation). Default true.
    pub adaptive: bool,
    /// The expected job time is multiplied by this (at least 1) when planning the start.
    /// Default 1.5.
    pub margin: f64,
    /// The time of one summarizer call before the worker has measured one (a harness that
    /// knows its model's latency says so, and the first job is planned too). `None` (the
    /// default): the first job starts at the soft line. The calls in sequence of a job not
    /// yet measured are those of a whole tree: `ceil(segments / threads)` plus a merge per
    /// level, the segments counted from the estimate.
    ///
    /// ```
    /// use std::time::Duration;
    /// use undertext::WorkerOptions;
    /// let opts = WorkerOptions { threads: 4, call_time: Some(Duration::from_secs(2)), ..WorkerOptions::default() };
    /// assert!(opts.adaptive);
    /// ```
    pub call_time: Option<Duration>,
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
            threads: 4,
            soft: 2.0 / 3.0,
            adaptive: true,
            margin: 1.5,
            call_time: None,
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
    /// The bound on summarizer calls at once (`opts.threads`).
    slots: Slots,
    /// What the worker measured of its summarizer.
    measured: Mutex<Meter>,
    /// Each chat's growth, by chat id, as its views report it.
    growth: Mutex<HashMap<u64, plan::Growth>>,
}

/// What the worker measured of its summarizer (see [`Worker::measured`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Measured {
    /// Summarizer calls made by jobs (successful ones).
    pub calls: u64,
    /// Time of one call (a moving average).
    pub per_call: Option<Duration>,
    /// Jobs that called the summarizer.
    pub jobs: u64,
    /// Calls in sequence per job (a moving average of
    /// [`BuildStats::rounds`](crate::chat::checkpoint::BuildStats) over jobs that made calls).
    pub rounds_per_job: Option<f64>,
    /// The wall time of the last job that called the summarizer.
    pub last_job: Option<Duration>,
}

impl Measured {
    /// The expected time of a job: calls in sequence per job × time per call.
    pub fn expected_job(&self) -> Option<Duration> {
        Duration::try_from_secs_f64(self.per_call?.as_secs_f64() * self.rounds_per_job?).ok()
    }
}

#[derive(Debug, Default)]
struct Meter {
    calls: u64,
    per_call: plan::Average,
    jobs: u64,
    rounds: plan::Average,
    last_job: Option<Duration>,
}

/// Chats whose growth the worker keeps at most (the least recently grown are forgotten).
const GROWTH_KEPT: usize = 4096;

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerShared")
            .field("summarizer", &self.summarizer.id())
            .field("opts", &self.opts)
            .finish()
    }
}

impl Shared {
    fn new(tx: Option<Sender<Job>>, summarizer: Arc<dyn Summarizer>, opts: WorkerOptions) -> Shared {
        Shared {
            tx: Mutex::new(tx),
            summarizer,
            slots: Slots::new(opts.threads),
            opts,
            done: (Mutex::new(0), Condvar::new()),
            pending: (Mutex::new(0), Condvar::new()),
            errors: Mutex::new(Vec::new()),
            measured: Mutex::new(Meter::default()),
            growth: Mutex::new(HashMap::new()),
        }
    }

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

    /// A view found `chat`'s estimate (of the messages after its published checkpoint, as
    /// `checkpoint::estimate_after_checkpoint` makes it) at `estimate` under `budget`:
    /// records the chat's growth, and says whether a checkpoint should be prepared now —
    /// past the soft line, or earlier by the adaptive start line ([`start_line`]).
    ///
    /// The view calls it on every view while a worker runs, in place of comparing the
    /// estimate with `opts.soft × usable` (see the module's documentation).
    pub(crate) fn due(&self, chat: ChatId, estimate: u64, budget: &Budget) -> bool {
        self.due_at(chat, estimate, budget.usable(), budget.hard_limit(), Instant::now())
    }

    /// [`due`](Self::due) at `now`, with the budget's usable input and hard line.
    fn due_at(&self, chat: ChatId, estimate: u64, usable: u64, hard: u64, now: Instant) -> bool {
        let soft_line = (self.opts.soft * usable as f64).floor() as u64;
        let growth = {
            let mut map = self.growth.lock();
            if map.len() >= GROWTH_KEPT && !map.contains_key(&chat.0) {
                // Forget the half seen longest ago.
                let mut seen: Vec<Instant> = map.values().filter_map(plan::Growth::seen).collect();
                seen.sort_unstable();
                let cut = seen.get(seen.len() / 2).copied();
                map.retain(|_, g| g.seen().zip(cut).is_some_and(|(s, c)| s > c));
            }
            let g = map.entry(chat.0).or_default();
            g.observe(estimate, now);
            g.get()
        };
        let outlook = if self.opts.adaptive {
            let m = self.measured();
            let rounds = m.rounds_per_job.unwrap_or_else(|| self.whole_tree_rounds(estimate));
            let job = m
                .per_call
                .or(self.opts.call_time)
                .and_then(|c| Duration::try_from_secs_f64(c.as_secs_f64() * rounds).ok());
            growth.zip(job).map(|((growth_per_step, step), job)| Outlook { growth_per_step, step, job })
        } else {
            None
        };
        plan::due(estimate, soft_line, hard, outlook.as_ref(), self.opts.margin)
    }

    /// Calls in sequence of a job that builds the whole tree of a chat whose estimate is
    /// `estimate`: its segments `threads` at a time, then a merge per level.
    fn whole_tree_rounds(&self, estimate: u64) -> f64 {
        let c = &self.opts.checkpoint;
        let segments = estimate.div_ceil(c.segment_tokens.max(1)).max(1);
        let (mut levels, mut n) = (0u64, segments);
        while n > 1 {
            n = n.div_ceil(c.fan_in.max(2) as u64);
            levels += 1;
        }
        (segments.div_ceil(self.opts.threads.max(1) as u64) + levels) as f64
    }

    /// What the worker measured of its summarizer.
    pub(crate) fn measured(&self) -> Measured {
        let m = self.measured.lock();
        Measured {
            calls: m.calls,
            per_call: m.per_call.get().and_then(|s| Duration::try_from_secs_f64(s).ok()),
            jobs: m.jobs,
            rounds_per_job: m.rounds.get(),
            last_job: m.last_job,
        }
    }

    fn note_call(&self, d: Duration) {
        let mut m = self.measured.lock();
        m.calls += 1;
        m.per_call.add(d.as_secs_f64());
    }

    fn note_job(&self, rounds: usize, took: Duration) {
        if rounds == 0 {
            // Nothing new: not a job the next one will be like.
            return;
        }
        let mut m = self.measured.lock();
        m.jobs += 1;
        m.rounds.add(rounds as f64);
        m.last_job = Some(took);
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
    opener: crate::base::io::Opener,
}

/// Starts a worker for `host` (see `Store::start_worker`); `dir` names the store in errors.
pub(crate) fn start(
    host: Arc<dyn Host>,
    dir: &Path,
    summarizer: Arc<dyn Summarizer>,
    opts: WorkerOptions,
) -> Result<Worker> {
    if !(0.0 < opts.soft && opts.soft < 1.0)
        || opts.threads == 0
        || !(opts.margin >= 1.0 && opts.margin.is_finite())
    {
        return Err(Error::InvalidArgument(format!(
            "worker: expected 0 < soft < 1, threads >= 1 and a finite margin >= 1, found soft {} threads {} margin {}",
            opts.soft, opts.threads, opts.margin
        )));
    }
    let (tx, rx) = channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    let shared = Arc::new(Shared::new(Some(tx), summarizer, opts));
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
    Ok(Worker { shared, threads, host, opener: crate::base::io::Opener::here() })
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

    /// What the worker measured of its summarizer: calls, the time of one (a moving
    /// average), calls in sequence per job, and so the expected job time the adaptive start
    /// line plans with.
    ///
    /// ```
    /// use undertext::Measured;
    /// let m = Measured {
    ///     per_call: Some(std::time::Duration::from_secs(2)),
    ///     rounds_per_job: Some(2.0),
    ///     ..Measured::default()
    /// };
    /// assert_eq!(m.expected_job(), Some(std::time::Duration::from_secs(4)));
    /// ```
    pub fn measured(&self) -> Measured {
        self.shared.measured()
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
    // The segments not in the cache, then each level's merges, several calls at once on
    // scoped threads of this job, within the worker's bound; every call timed.
    let timed = |d: Duration| shared.note_call(d);
    let calls = Calls { parallel: shared.opts.threads, slots: Some(&shared.slots), timed: Some(&timed) };
    let started = Instant::now();
    let Some(cp) = checkpoint::build_with(&chat, &*shared.summarizer, &opts, &calls)? else { return Ok(()) };
    shared.note_job(cp.stats.rounds, started.elapsed());
    host.slot().set_prepared(&state, cp);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(opts: WorkerOptions) -> Shared {
        Shared::new(None, Arc::new(checkpoint::Extractive::default()), opts)
    }

    /// A chat growing 300 tokens a view, a view a second, under a usable input of 12,000
    /// (soft line 8,000, hard line 10,800): due at the soft line until the worker has
    /// measured a slow summarizer, then as early as the growth needs.
    #[test]
    fn a_chat_is_due_earlier_once_the_summarizer_is_measured_slow() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let s = shared(WorkerOptions::default());
        let chat = ChatId(7);
        let due_by_step = |s: &Shared, from: u64| {
            (from..40).find(|i| s.due_at(chat, 300 * i, 12_000, 10_800, at(*i))).map(|i| 300 * i)
        };
        assert_eq!(due_by_step(&s, 0), Some(8_100), "nothing measured: the soft line");
        // A job of 9 calls in sequence, 2 s each: 18 s, 27 with the margin, 28 steps.
        for _ in 0..9 {
            s.note_call(Duration::from_secs(2));
        }
        s.note_job(9, Duration::from_secs(18));
        assert_eq!(s.measured().expected_job(), Some(Duration::from_secs(18)));
        // The estimate falls (a swap), then grows again: due 28 steps before the hard line.
        assert!(!s.due_at(chat, 0, 12_000, 10_800, at(100)));
        let first = (1..40).find(|i| s.due_at(chat, 300 * i, 12_000, 10_800, at(100 + i))).map(|i| 300 * i);
        assert_eq!(first, Some(2_400 + 300), "line 10,800 - 28 × 300 = 2,400");
        // Not adaptive: the soft line whatever was measured.
        let fixed = shared(WorkerOptions { adaptive: false, ..WorkerOptions::default() });
        fixed.note_call(Duration::from_secs(2));
        fixed.note_job(9, Duration::from_secs(18));
        assert_eq!(due_by_step(&fixed, 0), Some(8_100));
        // Through a budget: 14,000 − 2,000 usable, nothing grown yet.
        assert!(!s.due(ChatId(8), 100, &Budget::new(14_000, 2_000)));
        assert!(s.due(ChatId(8), 9_000, &Budget::new(14_000, 2_000)));
    }

    /// Before any call is measured, a summarizer's stated time plans the first job: a whole
    /// tree of the chat's segments.
    #[test]
    fn a_stated_call_time_plans_the_first_job() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let opts = WorkerOptions {
            // One call at a time: every call of the tree is in a row.
            threads: 1,
            call_time: Some(Duration::from_secs(2)),
            checkpoint: CheckpointOptions {
                segment_tokens: 1_000,
                fan_in: 4,
                ..CheckpointOptions::default()
            },
            ..WorkerOptions::default()
        };
        // With the default 4 calls at once, 3 segments are one round, then the merge.
        assert_eq!(shared(WorkerOptions { threads: 4, ..opts.clone() }).whole_tree_rounds(3_000), 2.0);
        let s = shared(opts.clone());
        // 3,000 tokens: 3 segments and a merge, 4 calls of 2 s: 8 s, 12 with the margin,
        // 13 steps of 300 tokens: 3,900 before the hard line.
        assert_eq!(s.whole_tree_rounds(3_000), 4.0);
        assert_eq!(s.whole_tree_rounds(17_000), 17.0 + 3.0, "17 -> 5 -> 2 -> 1");
        let first = (1..40).find(|i| s.due_at(ChatId(1), 300 * i, 12_000, 10_800, at(*i))).map(|i| 300 * i);
        assert!(first.unwrap() < 8_000, "before the soft line: {first:?}");
        // Without a stated time: the soft line.
        let s = shared(WorkerOptions { call_time: None, ..opts });
        let first = (1..40).find(|i| s.due_at(ChatId(1), 300 * i, 12_000, 10_800, at(*i))).map(|i| 300 * i);
        assert_eq!(first, Some(8_100));
    }

    #[test]
    fn jobs_with_nothing_new_do_not_count() {
        let s = shared(WorkerOptions::default());
        s.note_call(Duration::from_millis(100));
        s.note_job(0, Duration::from_millis(1));
        assert_eq!(s.measured().jobs, 0);
        assert_eq!(s.measured().expected_job(), None);
        s.note_job(2, Duration::from_millis(200));
        assert_eq!(s.measured().expected_job().map(|d| d.as_millis()), Some(200));
    }
}
