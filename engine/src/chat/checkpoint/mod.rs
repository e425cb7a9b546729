//! Checkpoints: the settled history summarized, so a view is the summary plus the messages
//! after it.
//!
//! * The **cut**: the protected tail stays raw (the last two user turns, at most
//!   [`CheckpointOptions::protect_max_tokens`]: see [`crate::rules::budget::tail`]), and the cut
//!   stops before the step of the first pending approval ([`crate::rules::approval`]); it always
//!   falls at a cut point, never between a tool call and its result.
//! * **Segments**: the history before the cut, split at safe points (never between a tool
//!   call and its result) into runs of about `segment_tokens`; a segment's id is the hash of
//!   its messages, in order.
//! * The **summary tree**: segment summaries, cached by (segment id, summarizer id). At each
//!   level the complete groups of `fan_in` merge into the level above; what a level leaves
//!   over (fewer than `fan_in`, at its end) is carried to the last merge, which takes the top
//!   level and every carried node in order. Merged nodes are cached by (hash of their
//!   children, summarizer id). A refresh starts from segment summaries — never from the
//!   previous checkpoint's summary — and summarizes only what it has not seen: a complete
//!   group never changes as the chat grows. In a refresh, the last complete groups of a
//!   level holding nodes made by this build (at most two) are carried to the last merge too,
//!   and merged by the next build, their members cached by then, at once with that build's
//!   new segments. So the last merge takes at most `3 × fan_in − 1` nodes per level, and the
//!   checkpoint after a swap is one round of calls made at once (the new segments, the
//!   segment the old cut fell in, carried groups' merges) and the last merge: two calls in
//!   sequence when the worker has threads for the round, whatever the chat's length
//!   (`tests/tests/worker_latency.rs` counts them).
//! * **Calls**: a build a caller asks for calls the summarizer one call at a time on the
//!   caller's thread; the worker's jobs summarize the segments not in the cache several at
//!   once, then each level's new merges several at once (see `pool`).
//! * **Publication** is guarded: refused if the chat was edited since the checkpoint's base
//!   revision, or if it does not reach beyond the published checkpoint.

mod guard;
pub(crate) mod pool;
mod summarizer;

pub use summarizer::{Extractive, FnSummarizer, Summarizer};

use std::ops::Range;
use std::sync::Arc;

use crate::base::blob::BlobId;
use crate::base::error::{Error, Result};
use crate::chat::history::{ChatRef, tokens_kept};
use crate::disk::record::{self, CheckpointRec, Kind, SummaryRec};
use crate::kernel::store::core::{Core, RecordOut, Txn};
use crate::model::estimate::message_tokens;
use crate::model::message::{Message, Part, ToolContent};
use crate::rules::approval::{ApprovalPatterns, first_pending_by, pending_in_part};
use crate::rules::budget::tail;
use pool::Calls;

/// How a checkpoint is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointOptions {
    /// Target size of a segment, in estimated tokens. Default 8,000.
    pub segment_tokens: u64,
    /// Summaries merged at a time. Default 4.
    pub fan_in: usize,
    /// The protected tail (never covered) is the last two user turns, but at most this
    /// many tokens (see [`Budget::protect_max_tokens`](crate::rules::budget::Budget)). `None` (the
    /// default for direct builds): the last two user turns whole. The worker sets it from
    /// the budget of the view that asked for the checkpoint.
    pub protect_max_tokens: Option<u64>,
}

impl Default for CheckpointOptions {
    fn default() -> Self {
        CheckpointOptions { segment_tokens: 8_000, fan_in: 4, protect_max_tokens: None }
    }
}

/// A segment of settled history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Its messages.
    pub range: Range<u64>,
    /// The hash of its messages, in order.
    pub id: BlobId,
}

/// What a build did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildStats {
    /// Segments summarized now (not found in the cache).
    pub summarized: usize,
    /// Merges made now.
    pub merged: usize,
    /// Summaries (segments and merges) found in the cache.
    pub cached: usize,
    /// Levels of merging above the segments.
    pub depth: usize,
    /// Summarizer calls in sequence: the calls a worker's job made at once count once (a
    /// build on the caller's thread makes them one at a time: `summarized + merged`). The
    /// job's time is about this many times the time of one call.
    pub rounds: usize,
}

/// A checkpoint, built and not yet published (see [`Chat::publish_checkpoint`](crate::Chat::publish_checkpoint)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The revision it was built from.
    pub base_revision: u64,
    /// The first seq it does not cover.
    pub reach: u64,
    /// The summary of messages `0..reach`.
    pub summary: String,
    /// The root of the summary tree.
    pub root: BlobId,
    /// The segments, in order.
    pub segments: Vec<SegmentInfo>,
    /// The summarizer's id.
    pub summarizer: String,
    /// What the build did.
    pub stats: BuildStats,
    /// The blob holding `summary`, stored by the build (so publication writes one record).
    summary_blob: BlobId,
}

/// A segment's id: BLAKE3 of a canonical encoding of its messages (seq, role, and every
/// part as a tag byte and length-prefixed fields). Stable across releases: it keys cached
/// summaries, so it must not depend on a derived `Debug` or any in-memory layout.
fn segment_id(msgs: &[Message]) -> BlobId {
    let mut h = blake3::Hasher::new();
    h.update(b"undertext-segment-v2\0");
    for m in msgs {
        h.update(&m.seq.to_le_bytes());
        h.update(&[m.role.code()]);
        h.update(&(m.parts.len() as u64).to_le_bytes());
        for p in &m.parts {
            canonical_part(&mut h, p);
        }
    }
    BlobId(*h.finalize().as_bytes())
}

fn field(h: &mut blake3::Hasher, bytes: &[u8]) {
    h.update(&(bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

fn opt_field(h: &mut blake3::Hasher, v: Option<&str>) {
    match v {
        None => {
            h.update(&[0]);
        }
        Some(s) => {
            h.update(&[1]);
            field(h, s.as_bytes());
        }
    }
}

fn canonical_part(h: &mut blake3::Hasher, p: &Part) {
    match p {
        Part::Text(t) => {
            h.update(&[1]);
            field(h, t.as_bytes());
        }
        Part::ToolCall { id, name, args } => {
            h.update(&[2]);
            field(h, id.as_bytes());
            field(h, name.as_bytes());
            field(h, args.as_bytes());
        }
        Part::ToolResult { call_id, content, is_error } => {
            h.update(&[3, u8::from(*is_error)]);
            field(h, call_id.as_bytes());
            match content {
                // The same result, inline or archived, is the same content.
                ToolContent::Text(t) => {
                    h.update(&[0]);
                    h.update(BlobId::of(t.as_bytes()).0.as_slice());
                }
                ToolContent::Archived { archive, .. } => {
                    h.update(&[0]);
                    h.update(archive.id.0.as_slice());
                }
            }
        }
        Part::ApprovalRequest { id, call_id, prompt } => {
            h.update(&[4]);
            field(h, id.as_bytes());
            opt_field(h, call_id.as_deref());
            field(h, prompt.as_bytes());
        }
        Part::ApprovalResponse { id, approved, reason } => {
            h.update(&[5, u8::from(*approved)]);
            field(h, id.as_bytes());
            opt_field(h, reason.as_deref());
        }
        Part::Attachment { mime, blob } => {
            h.update(&[6]);
            field(h, mime.as_bytes());
            h.update(blob.0.as_slice());
        }
        Part::Summary(t) => {
            h.update(&[7]);
            field(h, t.as_bytes());
        }
    }
}

fn node_id(children: &[BlobId], summarizer: &str) -> BlobId {
    let mut h = blake3::Hasher::new();
    h.update(b"merge\0");
    h.update(summarizer.as_bytes());
    for c in children {
        h.update(&c.0);
    }
    BlobId(*h.finalize().as_bytes())
}

/// Splits `msgs` (all before the cut) into segments of about `target` tokens, never
/// separating a tool result from what precedes it.
pub fn segments(msgs: &[Message], tokens: impl Fn(&Message) -> u64, target: u64) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    let (mut start, mut acc) = (0u64, 0u64);
    for (i, m) in msgs.iter().enumerate() {
        let safe_before = !m.parts.iter().any(|p| matches!(p, Part::ToolResult { .. }));
        if acc >= target && safe_before && i as u64 > start {
            out.push(start..i as u64);
            start = i as u64;
            acc = 0;
        }
        acc += tokens(m);
    }
    if (start as usize) < msgs.len() {
        out.push(start..msgs.len() as u64);
    }
    out
}

struct Cache<'a> {
    core: &'a Core,
    summarizer: &'a str,
    txn: Txn,
}

impl Cache<'_> {
    fn get(&self, key: &BlobId) -> Result<Option<String>> {
        let tx = self.core.index.read()?;
        let Some(id) = crate::disk::index::summary(&tx, key, self.summarizer)? else { return Ok(None) };
        let blob = self.core.get_blob(&id, crate::base::blob::Verify::Hash)?;
        Ok(Some(String::from_utf8_lossy(&blob).into_owned()))
    }

    fn put(&mut self, key: BlobId, text: &str) -> Result<()> {
        let (id, _) = self.txn.blob(self.core, text.as_bytes())?;
        let rec = SummaryRec { key: key.0, summarizer: self.summarizer.to_string(), text: id.0 };
        self.txn.push(RecordOut::history(Kind::Summary, record::encode(&rec)?.into_vec()));
        Ok(())
    }
}

/// Where the settled history of `msgs` (the live messages of `snap`, a snapshot of this
/// chat; an index into `msgs`) ends: before the protected tail (the last two user turns, bounded by `protect_max`
/// tokens, see [`crate::rules::budget::tail`]) and before the step holding the first pending
/// approval — always at a cut point, so a view that starts there never opens with a tool
/// result. 0: nothing is settled yet.
///
/// Each message's token estimate and the scan of its tool results for pending approvals are
/// kept in its history entry (an unchanged message is not estimated or scanned again by the
/// next job); an edited message has a new entry, so they are made again.
pub(crate) fn settled_cut(
    chat: &ChatRef<'_>,
    snap: &crate::chat::history::Snapshot,
    msgs: &[crate::chat::history::Message],
    protect_max: Option<u64>,
) -> u64 {
    let e = chat.core().opts.estimator.clone();
    let keep = chat.core().opts.keep_derived;
    let max = protect_max.unwrap_or(u64::MAX);
    let mut cut = tail::protected_from(msgs, |i| message_tokens_kept(snap, keep, &*e, &msgs[i]), max) as u64;
    let full = |a: &crate::chat::history::ArchiveRef| chat.archive_text(a);
    let patterns = ApprovalPatterns::default();
    let mut json = |m: &Message| match entry_of(snap, m, keep) {
        Some(en) => match en.pending_json.get() {
            Some(found) => found.clone(),
            None => {
                let (found, exact) = pending_in_part(m, &patterns, &full);
                // A scan that could only read an archived result's preview is not kept.
                if exact {
                    let _ = en.pending_json.set(found.clone());
                }
                found
            }
        },
        None => pending_in_part(m, &patterns, &full).0,
    };
    // Responses anywhere in the chat answer requests before the cut.
    // The approval may sit inside a tool result: the cut moves back before its call.
    if let Some((seq, _)) = first_pending_by(msgs, &mut json) {
        let at = msgs.partition_point(|m| m.seq < seq);
        cut = cut.min(tail::cut_at_or_before(msgs, at) as u64);
    }
    cut
}

/// The history entry of `m` in `snap`, when it is the entry of this very message (same seq
/// and revision).
/// `None` when `keep` is false ([`Options::keep_derived`](crate::Options::keep_derived) off).
fn entry_of<'a>(
    snap: &'a crate::chat::history::Snapshot,
    m: &Message,
    keep: bool,
) -> Option<&'a crate::chat::history::Entry> {
    snap.inner.entry_or_none(m.seq).filter(|en| keep && en.revision == m.revision)
}

/// A message's token estimate, kept in its history entry once computed (with `keep`).
fn message_tokens_kept(
    snap: &crate::chat::history::Snapshot,
    keep: bool,
    e: &dyn crate::model::estimate::Estimator,
    m: &Message,
) -> u64 {
    let entry = entry_of(snap, m, true);
    let Ok(t) = tokens_kept::<std::convert::Infallible>(entry, keep, || Ok(message_tokens(e, &m.parts)));
    t
}

/// The work of `Chat::build_checkpoint` (documented there).
pub(crate) fn build(
    chat: &ChatRef<'_>,
    summarizer: &dyn Summarizer,
    opts: &CheckpointOptions,
) -> Result<Checkpoint> {
    build_if_settled(chat, summarizer, opts)?.ok_or_else(|| {
        Error::InvalidArgument(
            "nothing is settled yet: the whole chat is protected or waits for an approval".into(),
        )
    })
}

/// [`build`], or `None` when nothing is settled yet (the whole chat is protected or waits
/// for an approval): the chat's messages are read and its cut found once. The summarizer is
/// called one call at a time on this thread (a caller's build; see [`build_with`]).
pub(crate) fn build_if_settled(
    chat: &ChatRef<'_>,
    summarizer: &dyn Summarizer,
    opts: &CheckpointOptions,
) -> Result<Option<Checkpoint>> {
    build_with(chat, summarizer, opts, &Calls::SERIAL)
}

/// [`build_if_settled`], making the summarizer calls as `calls` says: the worker's jobs
/// summarize the segments not in the cache several at once, then merge each level's new
/// groups several at once (see [`pool`]).
pub(crate) fn build_with(
    chat: &ChatRef<'_>,
    summarizer: &dyn Summarizer,
    opts: &CheckpointOptions,
    calls: &Calls<'_>,
) -> Result<Option<Checkpoint>> {
    if opts.fan_in < 2 || opts.segment_tokens == 0 {
        return Err(Error::InvalidArgument(format!(
            "checkpoint options: expected fan_in >= 2 and segment_tokens > 0, found {} and {}",
            opts.fan_in, opts.segment_tokens
        )));
    }
    let core = chat.core().clone();
    let snap = chat.snapshot();
    // Hidden messages are not summarized: the cut, the segments and their ids are of the
    // live messages; a segment's range (in seqs) spans the hidden ones between them.
    let msgs = snap.messages()?;
    let seq_at = |i: u64| msgs.get(i as usize).map_or(snap.len(), |m| m.seq);
    let cut = settled_cut(chat, &snap, &msgs, opts.protect_max_tokens);
    if cut == 0 {
        return Ok(None);
    }
    core.ensure_flushed(core.log.written())?;
    let mut cache = Cache { core: &core, summarizer: summarizer.id(), txn: Txn::default() };
    let mut stats = BuildStats::default();
    let mut tree = Tree::default();
    let mut infos = Vec::new();
    // Interrupted work: completed steps of every recorded attempt of a settled turn whose
    // messages are no longer in the chat (a retry truncated them) are source material
    // too, in order, with the segment where their turn starts. Steps still in the chat are
    // not lost work: those past the cut stay raw after the reach, never in the summary.
    let lost = lost_steps(chat, &snap, &msgs, cut as usize)?;
    let e = core.opts.estimator.clone();
    let tokens = |m: &Message| message_tokens_kept(&snap, core.opts.keep_derived, &*e, m);
    let mut level: Vec<usize> = Vec::new();
    for r in segments(&msgs[..cut as usize], tokens, opts.segment_tokens) {
        let mut part: Vec<Message> = msgs[r.start as usize..r.end as usize].to_vec();
        let r = if r.start == 0 { 0 } else { seq_at(r.start) }..seq_at(r.end);
        for (turn_start, extra) in &lost {
            if r.contains(turn_start) {
                part.extend(extra.iter().cloned());
            }
        }
        let id = segment_id(&part);
        infos.push(SegmentInfo { range: r, id });
        level.push(tree.add(&cache, &mut stats, id, Work::Summarize(part))?);
    }
    // The tree: each level's complete groups of `fan_in` merge into the level above; what is
    // left over at a level (fewer than `fan_in`, at its end) is carried to the last merge.
    // A complete group never changes as the chat grows, so its merge stays cached. In a
    // refresh (the level has cached nodes), the last complete groups holding a node made
    // now (up to `CARRY_GROUPS`) are carried too this time: the next build merges them, their
    // members all cached, at once with its new segments — so a refresh is one round of calls
    // and the last merge.
    let mut carried: Vec<Vec<usize>> = Vec::new();
    while level.len() >= opts.fan_in {
        let full = level.len() / opts.fan_in * opts.fan_in;
        let mut rest = level.split_off(full);
        let mut groups: Vec<Vec<usize>> = level.chunks(opts.fan_in).map(<[usize]>::to_vec).collect();
        if level.iter().any(|&c| tree.cached(c)) {
            let fresh =
                groups.iter().rev().take(CARRY_GROUPS).take_while(|g| g.iter().any(|&c| !tree.cached(c)));
            let n = fresh.count();
            let tail: Vec<usize> = groups.split_off(groups.len() - n).into_iter().flatten().collect();
            rest.splice(0..0, tail);
        }
        carried.push(rest);
        if groups.is_empty() {
            level = Vec::new();
            break;
        }
        stats.depth += 1;
        level = groups
            .into_iter()
            .map(|g| tree.add_merge(&cache, &mut stats, summarizer.id(), g))
            .collect::<Result<_>>()?;
    }
    // The top level, then what each level below left over, in order of the messages.
    level.extend(carried.into_iter().rev().flatten());
    let root = match level[..] {
        [] => return Err(Error::InvalidArgument("no segment to summarize".into())),
        [one] => one,
        _ => {
            stats.depth += 1;
            tree.add_merge(&cache, &mut stats, summarizer.id(), level)?
        }
    };
    tree.run(&mut cache, summarizer, calls, &mut stats)?;
    let summary = tree.nodes[root].text.take().unwrap_or_default();
    let root = tree.nodes[root].id;
    let txn = std::mem::take(&mut cache.txn);
    let c = core.append(txn)?;
    core.wait_durable(c.end)?;
    let summary_blob = BlobId::of(summary.as_bytes());
    Ok(Some(Checkpoint {
        base_revision: snap.revision(),
        reach: infos.last().map_or(0, |s| s.range.end),
        summary,
        root,
        segments: infos,
        summarizer: summarizer.id().to_string(),
        stats,
        summary_blob,
    }))
}

/// Complete groups a refresh carries to the last merge at most, per level (see
/// `build_with`): the last merge takes at most `(CARRY_GROUPS + 1) × fan_in − 1` nodes per
/// level.
const CARRY_GROUPS: usize = 2;

/// What a node of the summary tree needs: a summary of its messages, or a merge of its
/// children's summaries (indexes in [`Tree::nodes`]).
enum Work {
    Summarize(Vec<Message>),
    Merge(Vec<usize>),
    /// Found in the cache, or made.
    Done,
}

struct Node {
    id: BlobId,
    text: Option<String>,
    work: Work,
    /// Calls in sequence before its summary is ready: 0 when cached, else one more than
    /// its children's.
    depth: usize,
}

/// The summary tree of a build: its nodes, each cached or to be made.
#[derive(Default)]
struct Tree {
    nodes: Vec<Node>,
}

impl Tree {
    /// Adds a node, looking it up in the cache; its index.
    fn add(&mut self, cache: &Cache<'_>, stats: &mut BuildStats, id: BlobId, work: Work) -> Result<usize> {
        let text = cache.get(&id)?;
        let (work, depth) = match (&text, work) {
            (Some(_), _) => {
                stats.cached += 1;
                (Work::Done, 0)
            }
            (None, Work::Merge(children)) => {
                let d = children.iter().map(|&c| self.nodes[c].depth).max().unwrap_or(0);
                (Work::Merge(children), d + 1)
            }
            (None, w) => (w, 1),
        };
        self.nodes.push(Node { id, text, work, depth });
        Ok(self.nodes.len() - 1)
    }

    /// Adds the merge of `children`.
    fn add_merge(
        &mut self,
        cache: &Cache<'_>,
        stats: &mut BuildStats,
        summarizer: &str,
        children: Vec<usize>,
    ) -> Result<usize> {
        let ids: Vec<BlobId> = children.iter().map(|&c| self.nodes[c].id).collect();
        self.add(cache, stats, node_id(&ids, summarizer), Work::Merge(children))
    }

    /// Whether node `i` was found in the cache (else this build makes it).
    fn cached(&self, i: usize) -> bool {
        self.nodes[i].depth == 0
    }

    /// Makes every node not cached, a round at a time: the nodes whose children are ready
    /// (the segments, and the merges of cached summaries first), together, as `calls` says;
    /// each summary is added to the cache.
    fn run(
        &mut self,
        cache: &mut Cache<'_>,
        summarizer: &dyn Summarizer,
        calls: &Calls<'_>,
        stats: &mut BuildStats,
    ) -> Result<()> {
        enum Call {
            Summarize(Vec<Message>),
            Merge(Vec<String>),
        }
        let top = self.nodes.iter().map(|n| n.depth).max().unwrap_or(0);
        for depth in 1..=top {
            let mut batch: Vec<(usize, Call)> = Vec::new();
            for i in 0..self.nodes.len() {
                if self.nodes[i].depth != depth {
                    continue;
                }
                let call = match std::mem::replace(&mut self.nodes[i].work, Work::Done) {
                    Work::Summarize(part) => Call::Summarize(part),
                    Work::Merge(children) => Call::Merge(
                        children.iter().map(|&c| self.nodes[c].text.clone().unwrap_or_default()).collect(),
                    ),
                    Work::Done => continue,
                };
                batch.push((i, call));
            }
            let made = calls.map(&batch, |(_, call)| match call {
                Call::Summarize(part) => summarizer.summarize(part),
                Call::Merge(texts) => summarizer.merge(texts),
            })?;
            stats.rounds += calls.rounds(made.len());
            for ((i, call), t) in batch.into_iter().zip(made) {
                match call {
                    Call::Summarize(_) => stats.summarized += 1,
                    Call::Merge(_) => stats.merged += 1,
                }
                cache.put(self.nodes[i].id, &t)?;
                self.nodes[i].text = Some(t);
            }
        }
        Ok(())
    }
}

/// For each settled user turn (of `msgs[..cut]`), the messages of completed steps of its
/// recorded attempts that are no longer in the chat (`msgs`, every live message: a step
/// still there, settled or in the raw tail after the cut, is not lost), keyed by the seq
/// where the turn starts. An attempt that began at or after the reach (the seq of
/// `msgs[cut]`) is work after the checkpoint and stays out of it. A message hidden on
/// purpose is not lost: its version still in the chat stays out of the summary.
fn lost_steps(
    chat: &ChatRef<'_>,
    snap: &crate::chat::history::Snapshot,
    msgs: &[Message],
    cut: usize,
) -> Result<Vec<(u64, Vec<Message>)>> {
    let inner = &snap.inner;
    let settled = &msgs[..cut];
    let reach = msgs.get(cut).map_or(snap.len(), |m| m.seq);
    let hidden_here = |m: &Message| {
        inner.hidden.contains(m.seq) && inner.entry_or_none(m.seq).is_some_and(|e| e.revision == m.revision)
    };
    let present = |m: &Message| {
        let at = msgs.partition_point(|c| c.seq < m.seq);
        msgs.get(at).is_some_and(|c| c.seq == m.seq && c.revision == m.revision && c.parts == m.parts)
    };
    let mut out = Vec::new();
    let mut turn_starts: Vec<(u64, u64)> = Vec::new();
    for m in settled {
        if turn_starts.last().is_none_or(|(t, _)| *t != m.turn) {
            turn_starts.push((m.turn, m.seq));
        }
    }
    for (turn, start) in turn_starts {
        let mut extra = Vec::new();
        for attempt in chat.attempts(turn)? {
            let began = attempt.steps.iter().flat_map(|s| s.seqs.iter().copied()).min();
            if began.is_none_or(|b| b >= reach) {
                continue;
            }
            for step in
                attempt.steps.into_iter().filter(|s| s.status == crate::chat::history::StepStatus::Complete)
            {
                for m in step.messages {
                    if !present(&m) && !hidden_here(&m) {
                        extra.push(m);
                    }
                }
            }
        }
        if !extra.is_empty() {
            out.push((start, extra));
        }
    }
    Ok(out)
}

/// Publishes `cp` in one transaction, if the chat was not edited since `cp.base_revision`
/// ([`Conflict::Edited`](crate::base::error::Conflict)) and `cp` reaches beyond the published
/// checkpoint; with `durable`, returns once the publication is on disk.
pub(crate) fn publish(chat: &ChatRef<'_>, cp: &Checkpoint, durable: bool) -> Result<()> {
    let core = chat.core().clone();
    let mut txn = Txn::default();
    // The build stored the summary's blob (as the tree's root summary); a checkpoint whose
    // summary was changed since is stored again.
    let (summary_id, wait) = if BlobId::of(cp.summary.as_bytes()) == cp.summary_blob {
        (cp.summary_blob, None)
    } else {
        txn.blob(&core, cp.summary.as_bytes())?
    };
    let (mut w, _fleet) = chat.state.lock_write()?;
    let published = w.checkpoint.as_ref().map(|p| p.rec.reach);
    guard::check_publish(w.revision, published, cp.base_revision, cp.reach).map_err(Error::Conflict)?;
    let rec = CheckpointRec {
        chat: chat.id().0,
        base_revision: cp.base_revision,
        reach: cp.reach,
        summary: summary_id.0,
        root: cp.root.0,
        summarizer: cp.summarizer.clone(),
        segments: cp.segments.iter().map(|s| (s.range.start, s.range.end, s.id.0)).collect(),
        at_ms: crate::chat::history::now_ms(),
    };
    txn.push(RecordOut::of_chat(Kind::Checkpoint, rec.chat, record::encode(&rec)?.into_vec()));
    let c = core.append(txn)?;
    w.checkpoint =
        Some(Arc::new(crate::chat::history::Published { rec, summary: cp.summary.as_str().into() }));
    w.last_end = c.end;
    chat.state.publish(&w);
    drop(w);
    if durable { core.wait_durable(wait.map_or(c.end, |x| x.max(c.end))) } else { Ok(()) }
}

/// The published checkpoint's (base revision, reach), if any.
pub(crate) fn published(chat: &ChatRef<'_>) -> Option<(u64, u64)> {
    chat.snapshot().inner.checkpoint.as_ref().map(|p| (p.rec.base_revision, p.rec.reach))
}

/// Estimated tokens of the messages a view would hold after the published checkpoint
/// (calibrated; compaction records and pins not applied). Cheap: per-message estimates
/// are cached.
pub(crate) fn estimate_after_checkpoint(chat: &ChatRef<'_>) -> Result<u64> {
    let snap = chat.snapshot();
    let inner = &snap.inner;
    let (e, keep) = (chat.core().opts.estimator.clone(), chat.core().opts.keep_derived);
    let base = inner.checkpoint.as_ref().map_or(0, |p| p.rec.reach).min(inner.len);
    let mut raw = inner.checkpoint.as_ref().map_or(0, |p| e.text_tokens(&p.summary));
    for seq in base..inner.len {
        let Some(entry) = inner.entry(seq)? else { continue };
        if inner.hidden.contains(seq) {
            continue;
        }
        raw += tokens_kept(Some(entry), keep, || Ok::<_, Error>(message_tokens(&*e, &snap.get(seq)?.parts)))?;
    }
    let factor = inner.calibration.get(&inner.meta.model).copied().unwrap_or(1.0);
    Ok((raw as f64 * factor).ceil() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::message::{ArchiveRef, Role};

    fn msg(parts: Vec<Part>) -> Message {
        Message {
            seq: 3,
            revision: 0,
            role: Role::Tool,
            turn: 1,
            parts,
            step: None,
            at_ms: 0,
            feedback: false,
        }
    }

    fn result(content: ToolContent) -> Part {
        Part::ToolResult { call_id: "c1".into(), content, is_error: false }
    }

    #[test]
    fn a_segment_id_is_the_content_not_its_storage_or_debug_form() {
        let text = "line one\nline two\n".to_string();
        let archived = ToolContent::Archived {
            archive: ArchiveRef {
                id: BlobId::of(text.as_bytes()),
                bytes: 18,
                chars: 18,
                utf16_units: 18,
                lines: 2,
            },
            preview: "[preview]".into(),
        };
        let inline = segment_id(&[msg(vec![result(ToolContent::Text(text.clone()))])]);
        assert_eq!(inline, segment_id(&[msg(vec![result(archived)])]), "inline and archived are one content");
        // Every field counts; field boundaries are not ambiguous.
        let variants = [
            vec![Part::Text("ab".into()), Part::Text("c".into())],
            vec![Part::Text("a".into()), Part::Text("bc".into())],
            vec![Part::Summary("ab".into()), Part::Text("c".into())],
            vec![Part::ToolCall { id: "a".into(), name: "b".into(), args: "{}".into() }],
            vec![Part::ToolCall { id: "ab".into(), name: "".into(), args: "{}".into() }],
            vec![result(ToolContent::Text("x".into()))],
            vec![Part::ToolResult {
                call_id: "c1".into(),
                content: ToolContent::Text("x".into()),
                is_error: true,
            }],
        ];
        let ids: std::collections::HashSet<BlobId> =
            variants.iter().map(|p| segment_id(&[msg(p.clone())])).collect();
        assert_eq!(ids.len(), variants.len());
        assert!(!ids.contains(&inline));
    }
}
