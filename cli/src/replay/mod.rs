//! Replay: an imported session driven through the budget guard and the background worker,
//! one model call at a time, against resending everything.
//!
//! For every assistant message of a session (a model call), the model view is built just
//! *before* that message is appended, under the budget, and its estimate is what the call
//! would send; *resend everything* is the estimate of every earlier message in full (archived
//! tool results at their full text). The worker ([`Store::start_worker`]) prepares
//! checkpoints past its soft line; a view at the hard line swaps one in. After the session,
//! every archived tool result is read back whole with `read_context` and compared with the
//! transcript's text, byte for byte.
//!
//! Model latency: before each model call the worker gets up to [`ReplayOptions::latency`]
//! to finish the job it is running (a real model call's time, during which a harness's
//! worker works too); nothing is slept when no job is pending. `0` is the worker's worst
//! case. A view at the hard line with nothing prepared is never waited for
//! ([`HardLinePolicy::Refuse`]): the guard alone decides. A refused view is *unservable*
//! ([`ReplayRow::unservable`]) when the protected minimum alone (system messages, the task
//! and the last step: [`Chat::protected_minimum`](undertext::Chat::protected_minimum)) is over
//! the hard line, and *refused* otherwise — the case the engine must never produce.
//!
//! Cost ([`cost`]): every call's request is priced under the prompt-cache model (the
//! longest common prefix of whole messages with the previous request of the chat): the
//! views as the guard built them ([`ReplayRow::views`]; refused views are priced as if sent,
//! as their tokens are counted), and on the same session two baselines: *resend everything*
//! ([`ReplayRow::resend`]), counted only on the calls where it fits the usable input
//! (`window − reserve_output`; the others are [`ReplayRow::resend_over`], and
//! [`ReplayRow::views_fit`] prices the views on the same calls), and the *naive* policy
//! ([`ReplayRow::naive`], [`cost::Naive`] at the budget's hard line and target).
//!
//! Summarizer time: [`ReplayOptions::summarizer_delay`] makes every summarizer call of the
//! worker sleep that long ([`Slow`]), so stalls at the hard line with a real, slow summarizer
//! can be measured; with a waiting [`ReplayOptions::at_hard_line`] a view at the hard line
//! with nothing prepared waits for the job, and the wait is a stall ([`ReplayRow::waits`]).

pub mod cost;
pub mod series;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cost::{Call, Naive, PrefixCache, Sent, Tally, message_id};
use undertext::Store;
use undertext::Unit;
use undertext::import::Session;
use undertext::{Budget, Decision};
use undertext::{ChatMeta, Message, Part, Role, ToolContent};
use undertext::{CheckpointOptions, Extractive, Summarizer};
use undertext::{Error, Result};
use undertext::{HardLinePolicy, Worker, WorkerOptions};

/// Settings of a replay.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayOptions {
    /// The model's context window, in tokens.
    pub window: u64,
    /// Tokens kept for the answer.
    pub reserve_output: u64,
    /// What a view at the hard line does with nothing prepared.
    pub at_hard_line: HardLinePolicy,
    /// The model call's time: before each view the worker gets up to this long to finish
    /// a pending job. Default 0 (the worst case).
    pub latency: Duration,
    /// Time every summarizer call of the worker takes (slept, then the extractive
    /// summarizer): a model summarizer's latency. Default 0.
    pub summarizer_delay: Duration,
    /// The worker's adaptive start line ([`WorkerOptions::adaptive`]): it depends on measured
    /// times, so it is off by default here — the chart's series ([`super::series`]) is
    /// computed without a clock; `undertext replay` turns it on (the engine's default).
    pub adaptive: bool,
    /// Summarizer calls the worker makes at once ([`WorkerOptions::threads`]). Default: the
    /// worker's (4).
    pub threads: usize,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            window: 32_000,
            reserve_output: 4_096,
            at_hard_line: HardLinePolicy::Refuse,
            latency: Duration::ZERO,
            summarizer_delay: Duration::ZERO,
            adaptive: false,
            threads: WorkerOptions::default().threads,
        }
    }
}

impl ReplayOptions {
    /// The budget of every view.
    pub fn budget(&self) -> Budget {
        Budget::new(self.window, self.reserve_output)
    }

    /// The worker options a replay uses: the extractive summarizer's segments sized to the
    /// window, [`ReplayOptions::at_hard_line`] at the hard line.
    pub fn worker_options(&self) -> WorkerOptions {
        WorkerOptions {
            at_hard_line: self.at_hard_line,
            checkpoint: CheckpointOptions {
                segment_tokens: (self.window / 16).max(500),
                ..CheckpointOptions::default()
            },
            adaptive: self.adaptive,
            threads: self.threads.max(1),
            ..WorkerOptions::default()
        }
    }
}

/// The figures of one replayed session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayRow {
    /// The session's key.
    pub key: String,
    /// Its title.
    pub title: String,
    /// Its format name.
    pub format: String,
    /// Model calls (assistant messages).
    pub steps: u64,
    /// Tokens sent with the guard: the sum of the views' estimates.
    pub guarded_tokens: u64,
    /// Tokens sent resending everything.
    pub naive_tokens: u64,
    /// The largest estimate of a view that was sent (refused views are not sent).
    pub peak_tokens: u64,
    /// Distinct messages the guard turned into previews.
    pub previews: u64,
    /// Tool results archived on append.
    pub archived: u64,
    /// Checkpoints swapped in at the hard line.
    pub checkpoints: u64,
    /// Views refused (over the hard line even after previews and checkpoints) although
    /// the protected minimum fits: what the engine must never do.
    pub refused: u64,
    /// Views refused because the protected minimum alone (system messages, task, last
    /// step) is over the hard line: no compaction can serve them.
    pub unservable: u64,
    /// For the first unservable view: its step, the protected minimum and the hard line.
    pub unservable_reason: Option<String>,
    /// Time stalled at the hard line: the swaps of prepared checkpoints, and the views that
    /// waited for one (with a waiting [`ReplayOptions::at_hard_line`]) and were refused.
    pub stall: Duration,
    /// Archived bytes read back and compared.
    pub recovered_bytes: u64,
    /// Archived results whose read-back differed from the transcript (0 when all is well).
    pub recovery_mismatches: u64,
    /// One point per step, in order.
    pub points: Vec<StepPoint>,
    /// The views under the prompt-cache model, every call.
    pub views: Tally,
    /// The views on the calls where resending everything fits the usable input (the calls
    /// of [`ReplayRow::resend`]).
    pub views_fit: Tally,
    /// Resending everything, on the calls where it fits the usable input.
    pub resend: Tally,
    /// Calls where resending everything would not fit the usable input (not in
    /// [`ReplayRow::resend`] nor [`ReplayRow::views_fit`]).
    pub resend_over: u64,
    /// The naive policy ([`Naive`]), every call.
    pub naive: Tally,
    /// Naive requests still over the hard line after its summary (priced as sent).
    pub naive_over: u64,
    /// The stalls at the hard line.
    pub waits: Waits,
}

/// Views at the hard line and how long they took: views that swapped a checkpoint in or were
/// refused; the time of each is the whole `Chat::view` call (a swap, or the wait for the
/// worker's job under a waiting hard-line policy, and the swap after it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waits {
    /// Views at the hard line.
    pub views: u64,
    /// Those that took over [`WAITED`] (a swap of a prepared checkpoint takes well under
    /// it: they waited for the worker).
    pub waited: u64,
    /// Those that took over 100 ms.
    pub over_100ms: u64,
    /// The longest.
    pub longest: Duration,
}

/// A hard-line view that took longer than this waited for the worker.
pub const WAITED: Duration = Duration::from_millis(10);

impl Waits {
    /// Counts one view at the hard line that took `took`.
    pub fn add(&mut self, took: Duration) {
        self.views += 1;
        self.waited += u64::from(took > WAITED);
        self.over_100ms += u64::from(took > Duration::from_millis(100));
        self.longest = self.longest.max(took);
    }

    /// Adds another session's.
    pub fn merge(&mut self, o: &Waits) {
        self.views += o.views;
        self.waited += o.waited;
        self.over_100ms += o.over_100ms;
        self.longest = self.longest.max(o.longest);
    }
}

impl ReplayRow {
    /// Adds `o`'s figures (not its key, title, points or reasons): a total.
    pub fn merge(&mut self, o: &ReplayRow) {
        self.steps += o.steps;
        self.guarded_tokens += o.guarded_tokens;
        self.naive_tokens += o.naive_tokens;
        self.peak_tokens = self.peak_tokens.max(o.peak_tokens);
        self.previews += o.previews;
        self.archived += o.archived;
        self.checkpoints += o.checkpoints;
        self.refused += o.refused;
        self.unservable += o.unservable;
        self.stall += o.stall;
        self.recovered_bytes += o.recovered_bytes;
        self.recovery_mismatches += o.recovery_mismatches;
        self.views.merge(&o.views);
        self.views_fit.merge(&o.views_fit);
        self.resend.merge(&o.resend);
        self.resend_over += o.resend_over;
        self.naive.merge(&o.naive);
        self.naive_over += o.naive_over;
        self.waits.merge(&o.waits);
    }
}

/// A summarizer that sleeps `delay` before each call of `inner`: a model summarizer's latency
/// with the extractive summarizer's output. Its id is `inner`'s (the summaries are the same).
#[derive(Debug, Clone)]
pub struct Slow<S> {
    /// The summarizer called after the sleep.
    pub inner: S,
    /// Slept per call.
    pub delay: Duration,
}

impl<S: Summarizer> Summarizer for Slow<S> {
    fn id(&self) -> &str {
        self.inner.id()
    }
    fn summarize(&self, messages: &[Message]) -> Result<String> {
        std::thread::sleep(self.delay);
        self.inner.summarize(messages)
    }
    fn merge(&self, summaries: &[String]) -> Result<String> {
        std::thread::sleep(self.delay);
        self.inner.merge(summaries)
    }
}

/// One model call of a replay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepPoint {
    /// The seq the assistant message got.
    pub seq: u64,
    /// Tokens of the view sent (with the guard).
    pub sent: u64,
    /// Tokens of every earlier message in full (resend everything).
    pub everything: u64,
    /// Whether a checkpoint was swapped in at this step.
    pub swapped: bool,
    /// Tokens of the view sent that are an exact prefix (whole messages) of the previous
    /// view: what the provider's cache serves ([`super::cost`]).
    pub cached: u64,
    /// The view's prefix is shorter than the previous view: it broke the cache.
    pub broke: bool,
}

/// Starts the worker a replay needs on `store` (the extractive summarizer, slowed by
/// [`ReplayOptions::summarizer_delay`]).
pub fn start_worker(store: &Store, opts: &ReplayOptions) -> Result<Worker> {
    if opts.summarizer_delay.is_zero() {
        store.start_worker(Arc::new(Extractive::default()), opts.worker_options())
    } else {
        let slow = Slow { inner: Extractive::default(), delay: opts.summarizer_delay };
        store.start_worker(Arc::new(slow), opts.worker_options())
    }
}

/// The prompt-cache model ([`super::cost`]) over the views of one chat: each view's messages
/// with their identities ([`message_id`]) against the previous view's.
#[derive(Debug, Default)]
pub struct ViewPricer {
    cache: PrefixCache,
    /// The previous view and its identities: a message equal to the previous view's at the
    /// same place keeps its identity without hashing it again.
    prev: Option<(undertext::View, Vec<u64>)>,
}

impl ViewPricer {
    /// A chat with no view sent yet.
    pub fn new() -> ViewPricer {
        ViewPricer::default()
    }

    /// Prices `v` as the next request of the chat.
    pub fn call(&mut self, v: &undertext::View) -> Call {
        let msgs = v.messages();
        let mut ids = Vec::with_capacity(msgs.len());
        for (i, m) in msgs.iter().enumerate() {
            let same = self.prev.as_ref().and_then(|(pv, pids)| {
                let pm = pv.messages().get(i)?;
                (pm.role == m.role && pm.parts == m.parts).then(|| pids[i])
            });
            ids.push(same.unwrap_or_else(|| message_id(m.role, &m.parts)));
        }
        let request = msgs.iter().zip(&ids).map(|(m, &id)| Sent { id, tokens: m.tokens }).collect();
        let call = self.cache.call(request);
        self.prev = Some((v.clone(), ids));
        call
    }
}

/// The baselines of the cost model on one session ([`super::cost`]): resending everything,
/// where it fits the usable input, and the naive policy, each under the prompt cache.
#[derive(Debug, Clone)]
pub struct Baselines {
    usable: u64,
    full: Vec<Sent>,
    everything: u64,
    naive: Naive,
    resend_cache: PrefixCache,
    naive_cache: PrefixCache,
}

/// One call of the [`Baselines`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaselineCall {
    /// Resending everything, when it fits the usable input.
    pub resend: Option<Call>,
    /// The naive policy.
    pub naive: Call,
    /// The naive request is still over the hard line after its summary.
    pub naive_over: bool,
}

impl Baselines {
    /// A session under `budget` (its usable input, hard line and target).
    pub fn new(budget: &Budget) -> Baselines {
        Baselines {
            usable: budget.usable(),
            full: Vec::new(),
            everything: 0,
            naive: Naive::new(budget.hard_limit(), budget.target_limit()),
            resend_cache: PrefixCache::new(),
            naive_cache: PrefixCache::new(),
        }
    }

    /// A message appended to the session (`tokens`: in full, archived results at their
    /// whole text).
    pub fn push(&mut self, role: Role, parts: &[Part], tokens: u64) {
        self.everything += tokens;
        self.full.push(Sent { id: message_id(role, parts), tokens });
    }

    /// A model call on the session so far.
    pub fn call(&mut self) -> BaselineCall {
        let resend = (self.everything <= self.usable).then(|| self.resend_cache.call(self.full.clone()));
        let before = self.naive.over_hard_line();
        let naive = self.naive_cache.call(self.naive.request(&self.full).to_vec());
        BaselineCall { resend, naive, naive_over: self.naive.over_hard_line() > before }
    }
}

/// Replays `session` into a new chat of `owner` in `store` (whose worker should be running,
/// see [`start_worker`]) and returns its figures.
pub fn replay_session(
    store: &Store,
    owner: &str,
    session: &Session,
    opts: &ReplayOptions,
) -> Result<ReplayRow> {
    let budget = opts.budget();
    let estimator = store.options().estimator.clone();
    let chat = store.chat(
        owner,
        store.create_chat(owner, ChatMeta { title: session.title.clone(), ..ChatMeta::default() })?,
    )?;
    let mut row = ReplayRow {
        key: session.key.clone(),
        title: session.title.clone(),
        format: session.format.name().to_string(),
        ..ReplayRow::default()
    };
    let mut previewed = std::collections::BTreeSet::new();
    let mut everything = 0u64;
    // The cost model: the session's messages in full (resend everything), the naive policy,
    // and the provider's cache of each.
    let mut baselines = Baselines::new(&budget);
    let mut pricer = ViewPricer::new();
    for m in &session.messages {
        if m.role == Role::Assistant {
            if !opts.latency.is_zero() {
                store.wait_worker_idle(opts.latency);
            }
            let t = Instant::now();
            let v = chat.view(&budget)?;
            let took = t.elapsed();
            let call = pricer.call(&v);
            row.views.add(&call);
            let base = baselines.call();
            if let Some(resend) = base.resend {
                row.views_fit.add(&call);
                row.resend.add(&resend);
            } else {
                row.resend_over += 1;
            }
            row.naive.add(&base.naive);
            row.naive_over += u64::from(base.naive_over);
            if v.swap().is_some() || matches!(v.decision(), Decision::Refused { .. }) {
                row.waits.add(took);
            }
            row.steps += 1;
            row.points.push(StepPoint {
                seq: chat.len(),
                sent: v.estimate(),
                everything,
                swapped: v.swap().is_some(),
                cached: call.cached,
                broke: call.broke,
            });
            row.guarded_tokens += v.estimate();
            row.naive_tokens += everything;
            if v.swap().is_some() {
                row.checkpoints += 1;
            }
            if let Some(d) = v.swap() {
                row.stall += d;
            } else if matches!(v.decision(), Decision::Refused { .. })
                && matches!(opts.at_hard_line, HardLinePolicy::Wait(_))
            {
                row.stall += took;
            }
            match v.decision() {
                Decision::Compacted { previewed: p, .. } => {
                    previewed.extend(p.iter().copied());
                    row.peak_tokens = row.peak_tokens.max(v.estimate());
                }
                Decision::Refused { limit, .. } => {
                    let minimum = chat.protected_minimum(&budget)?;
                    if minimum > *limit {
                        row.unservable += 1;
                        row.unservable_reason.get_or_insert_with(|| {
                            format!(
                                "step {} (seq {}): the protected minimum (system, task, last step) is {minimum} \
                                 tokens, over the hard line of {limit}",
                                row.steps,
                                chat.len()
                            )
                        });
                    } else {
                        row.refused += 1;
                    }
                }
                Decision::Fits => row.peak_tokens = row.peak_tokens.max(v.estimate()),
            }
        }
        let tokens = undertext::internals::message_tokens(&*estimator, &m.parts);
        everything += tokens;
        baselines.push(m.role, &m.parts, tokens);
        chat.append(m.clone())?;
    }
    row.previews = previewed.len() as u64;
    // Recoverability: every archived result reads back exactly.
    for (stored, original) in chat.messages()?.iter().zip(&session.messages) {
        for (p, o) in stored.parts.iter().zip(&original.parts) {
            let (
                Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. },
                Part::ToolResult { content: ToolContent::Text(text), .. },
            ) = (p, o)
            else {
                continue;
            };
            row.archived += 1;
            let back = store.read_context(owner, &archive.id, 0..archive.bytes, Unit::Bytes)?;
            row.recovered_bytes += back.len() as u64;
            if back != *text {
                row.recovery_mismatches += 1;
            }
        }
    }
    if chat.len() != session.messages.len() as u64 {
        return Err(Error::InvalidArgument(format!(
            "replay of {}: expected {} messages in the chat, found {}",
            session.key,
            session.messages.len(),
            chat.len()
        )));
    }
    Ok(row)
}

/// A stored chat as a session to replay: its messages, archived tool results read back whole.
pub fn session_of_chat(store: &Store, owner: &str, id: undertext::ChatId) -> Result<Session> {
    let chat = store.chat(owner, id)?;
    let mut messages = Vec::new();
    for m in chat.messages()? {
        let mut parts = Vec::with_capacity(m.parts.len());
        for p in m.parts {
            parts.push(match p {
                Part::ToolResult { call_id, content: ToolContent::Archived { archive, .. }, is_error } => {
                    let text = store.read_context(owner, &archive.id, 0..archive.bytes, Unit::Bytes)?;
                    Part::ToolResult { call_id, content: ToolContent::Text(text), is_error }
                }
                other => other,
            });
        }
        messages.push(undertext::NewMessage { role: m.role, parts, feedback: false });
    }
    let meta = chat.meta();
    let mut s = Session::new(
        undertext::import::Format::OpenAi,
        std::path::Path::new(&id.to_string()),
        format!("chat:{id}"),
        messages,
    );
    s.title = meta.title;
    s.model = meta.model;
    Ok(s)
}

/// Tokens of a message in full (archived tool results at their whole text), by the store's
/// estimator: what resending it costs without previews or checkpoints.
pub fn full_tokens(store: &Store, m: &undertext::NewMessage) -> u64 {
    undertext::internals::message_tokens(&*store.options().estimator, &m.parts)
}
