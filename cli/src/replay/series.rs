//! The series of a replay ([`super::replay`]'s [`StepPoint`]s) computed without a store: a
//! chart of a 1,000-step chat costs milliseconds, not the seconds of replaying it through a
//! scratch store, the guard and the worker.
//!
//! The replay the chart draws appends a chat's messages, in order, to a new chat of a scratch
//! store with default options and a worker (extractive summarizer, [`ReplayOptions`]'s
//! budget and segments, [`HardLinePolicy::Refuse`](undertext::HardLinePolicy)); before
//! each assistant message it takes the view and waits for the job that view asked for. Such a
//! chat only grows: no edits, compactions, pins, calibration or recorded attempts. So every
//! figure of a step is a function of the messages alone, and [`Series`] computes it with the
//! rules the store applies (`budget::tail`, the guard, `checkpoint::segments`, the
//! summarizer, `approval`), each message's derived values made once when it is pushed:
//!
//! * its stored form (a tool result over the archive threshold becomes its preview and
//!   reference) and the tokens of that form;
//! * per tool result, the tokens before and after the guard's preview;
//! * its scan for pending approvals;
//! * the summaries of settled segments and of their merges, by the messages they cover.
//!
//! A step's view is then arithmetic over the kept tokens since the published checkpoint, and
//! a worker job a walk over kept values. The view's request for the prompt-cache model
//! ([`super::cost`]: [`StepPoint::cached`], [`StepPoint::broke`]) names each message by its seq and
//! the parts the guard previewed (the checkpoint by its reach), in the view's order: system
//! messages and the task kept over the checkpoint, its summary, then the messages after it. `tests/tests/chart_series.rs` checks that the
//! points equal the store replay's at every step, on every shared transcript and on a long
//! loop with approvals and truncation.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::cost::{PrefixCache, Sent};
use super::{ReplayOptions, StepPoint};
use undertext::BlobId;
use undertext::Budget;
use undertext::Estimator;
use undertext::Options;
use undertext::Result;
use undertext::approval::first_pending_by;
use undertext::approval::{ApprovalPatterns, pending_in_text};
use undertext::internals::{RESULT_OVERHEAD, message_tokens, part_tokens};
use undertext::{ArchiveRef, Message, NewMessage, Part, Role, ToolContent};
use undertext::{CheckpointOptions, Extractive, Summarizer};

/// Complete groups a refresh carries to the last merge (as `checkpoint::build_with`).
const CARRY_GROUPS: usize = 2;

/// The chat the replay appends to: the first chat of its scratch store (chat ids start at 1),
/// named by the handles of every checkpoint message.
const SCRATCH_CHAT: undertext::ChatId = undertext::ChatId(1);

/// What a store derives from an archived text: kept per distinct text.
struct Archived {
    reference: ArchiveRef,
    preview: String,
    /// Tokens of the text, of its preview and of the guard's preview.
    tokens: u64,
    preview_tokens: u64,
    guard_tokens: u64,
    /// The approval rule the whole text matches, if any.
    pending: Option<String>,
}

/// One part of a stored message, for the guard.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Cell {
    /// Not a tool result: never previewed.
    Other,
    /// A tool result: the tokens of its text as stored and, once the guard first reached it,
    /// of its preview.
    Result(u64, Option<u64>),
}

/// A checkpoint as the series needs it: the first seq it does not cover, the tokens of its
/// summary, and those of the summary's message in a view.
#[derive(Debug, Clone, Copy)]
struct Cp {
    reach: u64,
    summary_tokens: u64,
    message_tokens: u64,
}

/// The replay's series of a chat fed one message at a time ([`Series::push`]), computed
/// without a store (see the module documentation).
///
/// ```
/// use undertext_cli::replay::ReplayOptions;
/// use undertext_cli::replay::series::Series;
/// use undertext::{NewMessage, Part, Role, ToolContent};
///
/// let mut s = Series::new(&ReplayOptions::default());
/// s.push(NewMessage::user("list the files"));
/// s.push(NewMessage {
///     role: Role::Assistant,
///     parts: vec![Part::ToolCall { id: "c1".into(), name: "ls".into(), args: "{}".into() }],
///     feedback: false,
/// });
/// assert_eq!(s.points().len(), 1);
/// assert!(s.points()[0].sent > 0);
/// ```
pub struct Series {
    opts: ReplayOptions,
    budget: Budget,
    checkpoint: CheckpointOptions,
    /// The worker's soft line, a fraction of the usable window.
    worker_soft: f64,
    store: Options,
    summarizer: Extractive,
    patterns: ApprovalPatterns,
    /// The chat as the scratch store holds it.
    msgs: Vec<Message>,
    starts: Vec<bool>,
    tokens: Vec<u64>,
    /// Per message, per part: the tokens of a tool result's text before and after the
    /// guard's preview.
    previews: Vec<Vec<Cell>>,
    /// Per message: its first tool result holding a pending approval, and the rule.
    pending: Vec<Option<(usize, String)>>,
    /// Tokens of the messages of the task previewed under a checkpoint, by seq.
    task_previewed: HashMap<u64, u64>,
    archives: HashMap<BlobId, Archived>,
    /// The summaries of the tree's nodes, by what they cover (see [`Series::checkpoint_to`]).
    nodes: HashMap<String, Arc<str>>,
    published: Option<Cp>,
    /// The reach of the checkpoint the worker prepared last.
    prepared: Option<u64>,
    /// The results (seq, part) earlier views previewed: the guard keeps them (see
    /// `budget::view::guard`).
    kept: BTreeSet<(u64, usize)>,
    everything: u64,
    points: Vec<StepPoint>,
    /// The request of the last view estimated: per view message, an identity (the seq, and
    /// which of its parts were previewed; the checkpoint by its reach) and its tokens.
    request: Vec<Sent>,
    /// The provider's prompt cache over the views ([`super::cost`]).
    cache: PrefixCache,
}

impl std::fmt::Debug for Series {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Series")
            .field("messages", &self.msgs.len())
            .field("steps", &self.points.len())
            .finish_non_exhaustive()
    }
}

impl Series {
    /// An empty chat replayed at `opts` (window, reserve; the hard-line policy is the
    /// replay's: a view never waits).
    pub fn new(opts: &ReplayOptions) -> Series {
        let worker = opts.worker_options();
        Series {
            opts: opts.clone(),
            budget: opts.budget(),
            checkpoint: worker.checkpoint,
            worker_soft: worker.soft,
            store: Options::default(),
            summarizer: Extractive::default(),
            patterns: ApprovalPatterns::default(),
            msgs: Vec::new(),
            starts: Vec::new(),
            tokens: Vec::new(),
            previews: Vec::new(),
            pending: Vec::new(),
            task_previewed: HashMap::new(),
            archives: HashMap::new(),
            nodes: HashMap::new(),
            published: None,
            prepared: None,
            kept: BTreeSet::new(),
            everything: 0,
            points: Vec::new(),
            request: Vec::new(),
            cache: PrefixCache::new(),
        }
    }

    /// The settings it replays at.
    pub fn options(&self) -> &ReplayOptions {
        &self.opts
    }

    /// One point per assistant message pushed, in order.
    pub fn points(&self) -> &[StepPoint] {
        &self.points
    }

    /// Messages pushed.
    pub fn len(&self) -> u64 {
        self.msgs.len() as u64
    }

    /// True before the first push.
    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    /// Appends `m` (tool results at their whole text, as the harness produced them; an
    /// archived result this series has not seen counts as its preview); for an assistant
    /// message, first the step's point: the view's estimate just before it, and whether that
    /// view swapped a checkpoint in. Returns the message's tokens in full.
    pub fn push(&mut self, m: NewMessage) -> u64 {
        if m.role == Role::Assistant {
            self.step();
        }
        let full = self.append(m);
        self.everything += full;
        full
    }

    /// [`Series::push`] of a message as a store holds it: an archived tool result stands for
    /// its whole text, which `read` gives (asked once per distinct archive: the next result
    /// archived with the same text costs a lookup).
    pub fn push_stored(
        &mut self,
        m: NewMessage,
        read: &mut dyn FnMut(&ArchiveRef) -> Result<String>,
    ) -> Result<u64> {
        let m = self.whole(m, read)?;
        Ok(self.push(m))
    }

    /// `m` with each archived result this series has not seen read with `read`: kept as
    /// an archive when its text is over the archive threshold (named by the id it has), else
    /// made inline, as the scratch store's append would.
    fn whole(
        &mut self,
        mut m: NewMessage,
        read: &mut dyn FnMut(&ArchiveRef) -> Result<String>,
    ) -> Result<NewMessage> {
        for p in &mut m.parts {
            let Part::ToolResult { content, .. } = p else { continue };
            let ToolContent::Archived { archive, .. } = content else { continue };
            if self.archives.contains_key(&archive.id) {
                continue;
            }
            let text = read(archive)?;
            if text.len() > self.store.archive_threshold {
                self.keep_archive(archive.id, &text);
            } else {
                *content = ToolContent::Text(text);
            }
        }
        Ok(m)
    }

    /// What archiving `text` (of id `id`) derives, kept by its id.
    fn keep_archive(&mut self, id: BlobId, text: &str) -> &Archived {
        let o = &self.store;
        let patterns = &self.patterns;
        self.archives.entry(id).or_insert_with(|| {
            let (reference, preview, guard) = undertext::internals::derived_of(
                text,
                o.preview_chars,
                o.guard_preview_chars,
                &o.preview_marker,
            );
            let e = &o.estimator;
            Archived {
                tokens: e.text_tokens(text),
                preview_tokens: e.text_tokens(&preview),
                guard_tokens: e.text_tokens(&guard),
                pending: pending_in_text(text, patterns),
                reference,
                preview,
            }
        })
    }

    fn e(&self) -> &dyn Estimator {
        &*self.store.estimator
    }

    /// The model step before an assistant message: `Chat::view` with the worker running
    /// (ask for a job past the worker's soft line, swap a prepared checkpoint in past the
    /// hard line, the guard), then the job it asked for, run to its end.
    fn step(&mut self) {
        let len = self.len();
        let published = self.published.as_ref().map_or(0, |p| p.reach);
        let before = self.prepared.filter(|&reach| reach > published);
        let mut swapped = false;
        let est = self.estimate_after_checkpoint();
        let job = (est as f64) > self.worker_soft * self.budget.usable() as f64 && before.is_none();
        let kept = self.kept.clone();
        let (mut sent, mut refused, due) = self.view_estimate();
        // A cut is due: the prepared checkpoint is swapped in at that cut, and the view built
        // again from what earlier views cut.
        if due && let Some(reach) = before {
            self.published = Some(self.checkpoint_to(reach));
            swapped = true;
            self.kept = kept.clone();
            (sent, refused, _) = self.view_estimate();
        }
        // Refused with nothing swapped in: the checkpoint prepared before the view is
        // swapped in under any hard-line policy, and the view built again.
        if !swapped
            && refused
            && let Some(reach) = before
        {
            self.published = Some(self.checkpoint_to(reach));
            swapped = true;
            self.kept = kept;
            sent = self.view_estimate().0;
        }
        let call = self.cache.call(std::mem::take(&mut self.request));
        self.points.push(StepPoint {
            seq: len,
            sent,
            everything: self.everything,
            swapped,
            cached: call.cached,
            broke: call.broke,
        });
        if job && let Some(reach) = self.build() {
            self.prepared = Some(reach);
        }
    }

    /// `checkpoint::estimate_after_checkpoint`: the published summary and every message
    /// after its reach.
    fn estimate_after_checkpoint(&self) -> u64 {
        let (base, summary) = self.published.map_or((0, 0), |p| (p.reach as usize, p.summary_tokens));
        calibrated(summary + self.tokens[base.min(self.tokens.len())..].iter().sum::<u64>())
    }

    /// The view's estimate, whether the guard refused it, and whether a cut was due: the
    /// published checkpoint's kept instructions and summary, the messages after it, then the
    /// guard — what earlier views cut first, a new cut only over the soft line (see
    /// `budget::view::guard`). Records what this view cut.
    fn view_estimate(&mut self) -> (u64, bool, bool) {
        let e = self.store.estimator.clone();
        let budget = self.budget.clone();
        let len = self.msgs.len();
        let base = self.published.as_ref().map_or(0, |p| p.reach as usize);
        let msgs = &self.msgs[base..];
        let prot = base
            + undertext::internals::protected_from(msgs, |i| self.tokens[base + i], budget.protect_limit());
        let last_step = base + undertext::internals::cut_at_or_before(msgs, msgs.len().saturating_sub(1));
        let mut raw: u64 = budget.tool_schemas.iter().map(|s| e.text_tokens(s)).sum();
        // The request, message by message, for the cache model: a stored message is named by
        // its seq (and below, the parts the guard previewed), a task message previewed under
        // the instructions bound by its seq and a mark, the checkpoint by its reach.
        let mut request = Vec::with_capacity(len - base + 4);
        if let Some(p) = self.published {
            let (system, task) = self.kept_instructions(p.reach);
            for s in system {
                let t = self.tokens[s as usize];
                raw += t;
                request.push(Sent { id: identity(&("message", s)), tokens: t });
            }
            let mut left = budget.instructions_limit();
            for s in task {
                let t = self.tokens[s as usize];
                if t <= left {
                    left -= t;
                    raw += t;
                    request.push(Sent { id: identity(&("message", s)), tokens: t });
                } else {
                    left = 0;
                    let t = self.task_preview_tokens(s);
                    raw += t;
                    request.push(Sent { id: identity(&("task preview", s)), tokens: t });
                }
            }
            raw += p.message_tokens;
            request.push(Sent { id: identity(&("checkpoint", p.reach)), tokens: p.message_tokens });
        }
        raw += self.tokens[base..].iter().sum::<u64>();
        let first = request.len();
        for seq in base..len {
            request.push(Sent { id: identity(&("message", seq as u64)), tokens: self.tokens[seq] });
        }
        // The guard's candidates, in its order: tool results before the last step, oldest
        // first; those of the protected tail only as a last resort.
        let mut candidates = Vec::new();
        for seq in base..last_step.min(len) {
            for part in 0..self.previews[seq].len() {
                if let Cell::Result(old, _) = self.previews[seq][part] {
                    candidates.push((seq, part, seq >= prot, old));
                }
            }
        }
        let mut total = raw;
        let mut made = vec![false; candidates.len()];
        for (k, &(seq, part, tail, old)) in candidates.iter().enumerate() {
            if !tail && self.kept.contains(&(seq as u64, part)) {
                let new = self.guard_tokens(seq, part);
                if new < old {
                    total = total - old + new;
                    made[k] = true;
                }
            }
        }
        let kept_est = calibrated(total);
        let due = kept_est > budget.soft_limit();
        if due {
            let mut cut_total = total;
            let mut cut = Vec::new();
            for (tail, line) in [(false, budget.target_limit()), (true, budget.hard_limit())] {
                for (k, &(seq, part, t, old)) in candidates.iter().enumerate() {
                    if t != tail || made[k] {
                        continue;
                    }
                    if calibrated(cut_total) <= line {
                        break;
                    }
                    let new = self.guard_tokens(seq, part);
                    if new < old {
                        cut_total = cut_total - old + new;
                        cut.push(k);
                    }
                }
            }
            if kept_est > budget.hard_limit()
                || kept_est.saturating_sub(calibrated(cut_total)) >= budget.min_cut()
            {
                total = cut_total;
                for k in cut {
                    made[k] = true;
                }
            }
        }
        self.kept =
            candidates.iter().zip(&made).filter(|(_, m)| **m).map(|(c, _)| (c.0 as u64, c.1)).collect();
        let estimate = calibrated(total);
        // The previews sent, in the guard's order, for the cache model.
        for (&(seq, part, _, old), m) in candidates.iter().zip(&made) {
            if *m {
                let new = self.guard_tokens(seq, part);
                let r = &mut request[first + seq - base];
                *r = Sent { id: identity(&(r.id, part)), tokens: r.tokens - old + new };
            }
        }
        self.request = request;
        (estimate, estimate > budget.hard_limit(), due)
    }

    /// Tokens of the guard's preview of tool result `part` of message `seq`, made the
    /// first time the guard reaches it (an archived result's with its archive).
    fn guard_tokens(&mut self, seq: usize, part: usize) -> u64 {
        match self.previews[seq][part] {
            Cell::Result(_, Some(new)) => new,
            Cell::Result(old, None) => {
                let o = &self.store;
                let new = match &self.msgs[seq].parts[part] {
                    Part::ToolResult { content: ToolContent::Text(t), .. } => o.estimator.text_tokens(
                        &undertext::internals::preview_inline(t, o.guard_preview_chars, &o.preview_marker).1,
                    ),
                    _ => old,
                };
                self.previews[seq][part] = Cell::Result(old, Some(new));
                new
            }
            Cell::Other => 0,
        }
    }

    /// The leading system messages before `reach`, and the turn-opening user messages of
    /// the first turn (the task) and the last two turns before `reach` (what a view keeps
    /// over a checkpoint).
    fn kept_instructions(&self, reach: u64) -> (Vec<u64>, Vec<u64>) {
        let len = self.len();
        let mut system = Vec::new();
        let mut seq = 0;
        while seq < reach && self.msgs.get(seq as usize).is_some_and(|m| m.role == Role::System) {
            system.push(seq);
            seq += 1;
        }
        let last_turn = self.msgs.last().map_or(0, |m| m.turn);
        let first_of = |t: u64| self.msgs.partition_point(|m| m.turn < t) as u64;
        let mut task = Vec::new();
        let mut turns = vec![1];
        turns.extend((last_turn.saturating_sub(1).max(2))..=last_turn);
        for t in turns.into_iter().filter(|&t| t <= last_turn) {
            let s = first_of(t);
            let opens = (s < len)
                && self.msgs[s as usize].turn == t
                && self.msgs[s as usize].role == Role::User
                && self.starts[s as usize];
            if opens && s >= seq && s < reach {
                task.push(s);
            }
        }
        (system, task)
    }

    /// Tokens of task message `s` with its texts previewed (over the instructions bound).
    fn task_preview_tokens(&mut self, s: u64) -> u64 {
        if let Some(t) = self.task_previewed.get(&s) {
            return *t;
        }
        let o = &self.store;
        let mut parts = self.msgs[s as usize].parts.clone();
        for p in &mut parts {
            if let Part::Text(t) = p {
                let id = BlobId::of(t.as_bytes());
                *t = undertext::internals::preview_of(t, &id, o.preview_chars, &o.preview_marker);
            }
        }
        let t = message_tokens(self.e(), &parts);
        self.task_previewed.insert(s, t);
        t
    }

    /// The worker's job on the chat as it stands: where the settled history ends (the
    /// checkpoint's reach), `None` when nothing is settled. Its summary is made when it is
    /// swapped in ([`Series::checkpoint_to`]): it depends only on the messages before the
    /// reach, which appends do not change.
    fn build(&self) -> Option<u64> {
        let msgs = &self.msgs;
        let tokens = &self.tokens;
        let mut cut =
            undertext::internals::protected_from(msgs, |i| tokens[i], self.budget.protect_limit()) as u64;
        let pending = &self.pending;
        if let Some((seq, _)) = first_pending_by(msgs, &mut |m: &Message| pending[m.seq as usize].clone()) {
            cut = cut.min(undertext::internals::cut_at_or_before(msgs, seq as usize) as u64);
        }
        (cut > 0).then_some(cut)
    }

    /// The merge of `children` (made once, by what it covers); whether it was made before.
    fn merge_node(&mut self, children: Vec<(String, Arc<str>, bool)>) -> (String, Arc<str>, bool) {
        let key = format!("m({})", children.iter().map(|c| c.0.as_str()).collect::<Vec<_>>().join(","));
        let cached = self.nodes.contains_key(&key);
        let text = self
            .nodes
            .entry(key.clone())
            .or_insert_with(|| {
                let texts: Vec<String> = children.iter().map(|c| c.1.to_string()).collect();
                merge(&self.summarizer, &texts).into()
            })
            .clone();
        (key, text, cached)
    }

    /// The checkpoint of the settled history before `reach`, as the worker builds it: the
    /// segments' summaries and their merges (each made once), in the worker's tree.
    fn checkpoint_to(&mut self, reach: u64) -> Cp {
        let settled = &self.msgs[..reach as usize];
        let tokens = &self.tokens;
        let ranges = undertext::internals::segments(
            settled,
            |m| tokens[m.seq as usize],
            self.checkpoint.segment_tokens,
        );
        // The worker's tree (`checkpoint::build_with`): each level's complete groups of
        // `fan_in` merge into the level above; what a level leaves over is carried to the last
        // merge, and in a refresh (a node of the level was cached) so are the last complete
        // groups holding a node made now (up to `CARRY_GROUPS`). A node is named by what it
        // covers (a segment's seqs, a merge's children), as the store's cache names it by
        // content; `bool`: found made by an earlier build.
        let mut level: Vec<(String, Arc<str>, bool)> = Vec::with_capacity(ranges.len());
        for r in ranges {
            let key = format!("s{}-{}", r.start, r.end);
            let cached = self.nodes.contains_key(&key);
            let text = self.nodes.entry(key.clone()).or_insert_with(|| {
                summarize(&self.summarizer, &settled[r.start as usize..r.end as usize]).into()
            });
            level.push((key, text.clone(), cached));
        }
        let fan_in = self.checkpoint.fan_in;
        let mut carried: Vec<Vec<(String, Arc<str>, bool)>> = Vec::new();
        while level.len() >= fan_in {
            let full = level.len() / fan_in * fan_in;
            let mut rest = level.split_off(full);
            let mut groups: Vec<Vec<(String, Arc<str>, bool)>> =
                level.chunks(fan_in).map(<[_]>::to_vec).collect();
            if level.iter().any(|n| n.2) {
                let n = groups.iter().rev().take(CARRY_GROUPS).take_while(|g| g.iter().any(|x| !x.2)).count();
                let tail: Vec<_> = groups.split_off(groups.len() - n).into_iter().flatten().collect();
                rest.splice(0..0, tail);
            }
            carried.push(rest);
            if groups.is_empty() {
                level = Vec::new();
                break;
            }
            level = groups.into_iter().map(|g| self.merge_node(g)).collect();
        }
        level.extend(carried.into_iter().rev().flatten());
        if level.len() > 1 {
            let root = self.merge_node(std::mem::take(&mut level));
            level.push(root);
        }
        let settled = &self.msgs[..reach as usize];
        let summary = level.pop().map_or_else(String::new, |(_, t, _)| t.to_string());
        let e = self.e();
        let mut archived = Vec::new();
        for m in settled {
            for p in &m.parts {
                if let Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } = p {
                    archived.push((m.seq, archive.id));
                }
            }
        }
        let line = undertext::internals::line_text(SCRATCH_CHAT, reach, &archived);
        let message = Part::Summary(format!("{line}\n{summary}"));
        Cp { reach, summary_tokens: e.text_tokens(&summary), message_tokens: message_tokens(e, &[message]) }
    }

    /// The scratch store's append: the turn, archiving on append, and what the guard and
    /// the worker derive from the message, made once. Returns its tokens in full (archived
    /// results at their whole text).
    fn append(&mut self, m: NewMessage) -> u64 {
        let seq = self.len();
        let starts = m.starts_turn();
        let feedback = m.feedback;
        let turn = self.msgs.last().map_or(0, |l| l.turn) + u64::from(starts);
        let mut parts = m.parts;
        let mut cells = Vec::with_capacity(parts.len());
        // A message's tokens are its parts' plus an overhead, a result's its text's plus a
        // fixed overhead (`estimate::message_tokens`): each text is counted once, and in full
        // an archived result counts its whole text instead of its preview.
        let e = self.store.estimator.clone();
        let mut stored = e.message_overhead();
        let mut full = e.message_overhead();
        // The first tool result holding a pending approval (`approval::pending_in_part`,
        // archived results scanned whole, each distinct text once).
        let mut pending = None;
        for (i, p) in parts.iter_mut().enumerate() {
            let Part::ToolResult { content, .. } = p else {
                let t = part_tokens(&*e, p);
                stored += t;
                full += t;
                cells.push(Cell::Other);
                continue;
            };
            let id = match content {
                ToolContent::Text(text) if text.len() > self.store.archive_threshold => {
                    let id = BlobId::of(text.as_bytes());
                    self.keep_archive(id, text);
                    Some(id)
                }
                ToolContent::Archived { archive, .. } if self.archives.contains_key(&archive.id) => {
                    Some(archive.id)
                }
                _ => None,
            };
            let (cell, whole, rule) = match (id.and_then(|id| self.archives.get(&id)), &*content) {
                (Some(a), _) => {
                    *content = ToolContent::Archived { archive: a.reference, preview: a.preview.clone() };
                    (Cell::Result(a.preview_tokens, Some(a.guard_tokens)), a.tokens, a.pending.clone())
                }
                (None, ToolContent::Text(text)) => {
                    let t = e.text_tokens(text);
                    (Cell::Result(t, None), t, pending_in_text(text, &self.patterns))
                }
                // A reference without its text (`Series::push`): counted by its preview.
                (None, ToolContent::Archived { preview, .. }) => {
                    let t = e.text_tokens(preview);
                    (Cell::Result(t, Some(t)), t, pending_in_text(preview, &self.patterns))
                }
            };
            if let Cell::Result(t, _) = cell {
                stored += RESULT_OVERHEAD + t;
            }
            full += RESULT_OVERHEAD + whole;
            if pending.is_none() {
                pending = rule.map(|r| (i, r));
            }
            cells.push(cell);
        }
        let msg = Message { seq, revision: 0, role: m.role, turn, parts, step: None, at_ms: 0, feedback };
        self.tokens.push(stored);
        self.previews.push(cells);
        self.pending.push(pending);
        self.starts.push(starts);
        self.msgs.push(msg);
        full
    }
}

/// An identity for the cache model (see [`Series::view_estimate`]).
fn identity(v: &impl std::hash::Hash) -> u64 {
    use std::hash::{DefaultHasher, Hasher};
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

/// `(raw × 1.0).ceil()`: a scratch chat has no calibration, and the store applies the
/// factor even so.
fn calibrated(raw: u64) -> u64 {
    (raw as f64 * 1.0).ceil() as u64
}

fn summarize(s: &Extractive, msgs: &[Message]) -> String {
    s.summarize(msgs).unwrap_or_default()
}

fn merge(s: &Extractive, texts: &[String]) -> String {
    s.merge(texts).unwrap_or_default()
}
