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
//! and the last step: [`Chat::protected_minimum`](crate::Chat::protected_minimum)) is over
//! the hard line, and *refused* otherwise — the case the engine must never produce.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Session;
use crate::api::Store;
use crate::archive::Unit;
use crate::budget::{Budget, Decision};
use crate::checkpoint::{CheckpointOptions, Extractive};
use crate::error::{Error, Result};
use crate::history::{ChatMeta, Part, Role, ToolContent};
use crate::worker::{HardLinePolicy, Worker, WorkerOptions};

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
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            window: 32_000,
            reserve_output: 4_096,
            at_hard_line: HardLinePolicy::Refuse,
            latency: Duration::ZERO,
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
}

/// Starts the worker a replay needs on `store` (the extractive summarizer).
pub fn start_worker(store: &Store, opts: &ReplayOptions) -> Result<Worker> {
    store.start_worker(Arc::new(Extractive::default()), opts.worker_options())
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
    for m in &session.messages {
        if m.role == Role::Assistant {
            if !opts.latency.is_zero() {
                store.wait_worker_idle(opts.latency);
            }
            let t = Instant::now();
            let v = chat.view(&budget)?;
            let took = t.elapsed();
            row.steps += 1;
            row.points.push(StepPoint {
                seq: chat.len(),
                sent: v.estimate(),
                everything,
                swapped: v.swap().is_some(),
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
        everything += crate::budget::view::message_tokens(&*estimator, &m.parts);
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
pub fn session_of_chat(store: &Store, owner: &str, id: crate::history::ChatId) -> Result<Session> {
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
        messages.push(crate::history::NewMessage { role: m.role, parts, feedback: false });
    }
    let meta = chat.meta();
    let mut s = Session::new(
        super::Format::OpenAi,
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
pub fn full_tokens(store: &Store, m: &crate::history::NewMessage) -> u64 {
    crate::budget::view::message_tokens(&*store.options().estimator, &m.parts)
}
