//! The model view of a chat, its index for compaction, usage calibration, compaction plans
//! and the hard-line swap: the `Chat` side of the budget, compaction, checkpoint and worker
//! modules (it may use every floor below its own, and the chat modules before it).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::base::blob::BlobId;
use crate::base::error::LintProblem;
use crate::base::error::{Error, Result};
use crate::chat::archive;
use crate::chat::checkpoint;
use crate::chat::history::ChatRef;
use crate::chat::history::view_memo::ViewMemo;
use crate::chat::history::{now_ms, tokens_kept};
use crate::chat::worker::Slot;
use crate::disk::record::{self, CompactionRec, Kind, UsageRec};
use crate::kernel::store::core::{RecordOut, Txn};
use crate::model::message::{ArchiveRef, IndexLine, Message, Part, Role, ToolContent};
use crate::rules::budget::Budget;
use crate::rules::budget::tail;
use crate::rules::budget::view::{
    Candidate, Decision, Omitted, Stable, View, ViewMessage, guard, message_tokens, preview_cells, preview60,
};
use crate::rules::compaction::{Plan, lint};

fn pointer_for_trim(m: &Message, id: &BlobId, r: Option<&ArchiveRef>) -> String {
    let call = m
        .parts
        .iter()
        .find_map(|p| match p {
            Part::ToolResult { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .unwrap_or("?");
    let size = r.map(|r| format!("{} chars, {} lines", r.chars, r.lines)).unwrap_or_default();
    format!(
        "[trimmed: the result of tool call {call} ({size}) is in archive {id}; read it with read_context(\"{id}\", start..end)]"
    )
}

/// One chat as its view sees it: the chat (state and archive cache) and the store's worker
/// slot (the running worker, and the checkpoints it prepared). `api::Chat` builds one per
/// call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChatView<'a> {
    pub chat: ChatRef<'a>,
    pub worker: &'a Slot,
}

impl ChatView<'_> {
    /// The work of `Chat::view` (documented there).
    pub(crate) fn view(&self, budget: &Budget) -> Result<View> {
        budget.validate()?;
        // Fleet mode: what other processes committed, when change notification told of it.
        self.chat.state.follow_notified()?;
        // The checkpoint prepared before this view is the only one it swaps in without
        // waiting: a job finishing while the view is built must not change it.
        let before = self
            .worker
            .running()
            .and_then(|_| self.fresh_prepared(checkpoint::published(&self.chat).map_or(0, |(_, r)| r)));
        self.pay_before_the_wall(budget, before.is_some())?;
        // What earlier views cut: a view built again after a swap starts from it, not from
        // the cut the swap made unneeded.
        let kept = self.chat.state.cut.lock().previewed.clone();
        let mut view = self.view_now(budget)?;
        let mut swap = None;
        // A cut is due (over the soft line with what earlier views cut): the one break of
        // the provider's cache this crossing costs is also the moment to swap the prepared
        // checkpoint in — everything due at once, so the next views extend this one.
        if view.due && before.is_some() {
            swap = self.swap_in(before.clone())?;
            if swap.is_some() {
                self.chat.state.cut.lock().previewed = kept.clone();
                view = self.view_now(budget)?;
            }
        }
        // Over the hard line with nothing swapped in: the hard-line policy (wait for the
        // worker's job, or build now) — only when the guard alone could not bring it under.
        if swap.is_none()
            && matches!(view.decision, Decision::Refused { .. })
            && let Some(d) = self.wait_at_the_wall(budget, before)?
        {
            swap = Some(d);
            self.chat.state.cut.lock().previewed = kept;
            view = self.view_now(budget)?;
        }
        let snap = self.chat.snapshot();
        let inner = &snap.inner;
        view.swap = swap;
        view.revision = inner.revision;
        view.step = self.chat.state.view_counter.fetch_add(1, Ordering::Relaxed);
        view.stable = self.stable_prefix(&view);
        view.omitted = self.omitted(&view, &snap);
        // The nudge looks at the history's size before the guard's previews: the model is
        // asked to compact with judgement before the guard has to do it mechanically.
        let before = view.estimate
            + match &view.decision {
                Decision::Compacted { tokens_saved, .. } => *tokens_saved,
                _ => 0,
            };
        if let Some(line) = budget.nudge_limit().filter(|l| before > *l) {
            // What earlier compactions already did is marked, so the model does not plan it again.
            let mut idx = self.index()?;
            let (trims, squishes) = crate::chat::history::compactions_in_effect(&snap);
            crate::rules::compaction::tool::mark_compacted(&mut idx, &trims, &squishes);
            view.nudge = Some(crate::rules::compaction::tool::nudge_text(before, line, &idx));
        }
        let mut recent = self.chat.state.views.lock();
        recent.push_back((view.step, view.raw_estimate, inner.meta.model.clone()));
        while recent.len() > 256 {
            recent.pop_front();
        }
        Ok(view)
    }

    /// What `view` leaves out of the chat's history as `snap` holds it.
    fn omitted(&self, view: &View, snap: &crate::chat::history::Snapshot) -> Omitted {
        let inner = &snap.inner;
        // The summarized ranges depend only on the revision and the view's seqs: a view of
        // the same shape (an unchanged chat viewed again) reuses the last one's.
        let shape: Vec<std::ops::Range<u64>> = view.messages.iter().map(|m| m.seqs.clone()).collect();
        let cached = self
            .chat
            .state
            .summarized
            .lock()
            .as_ref()
            .and_then(|(rev, key, v)| (*rev == inner.revision && *key == shape).then(|| v.clone()));
        let (ranges, raw_summarized) = match cached {
            Some(v) => v,
            None => {
                // The seqs the view shows whole, sorted: walked beside each summarized range (a view
                // under a checkpoint summarizes the whole history: no hashing per seq).
                let mut whole: Vec<u64> = view
                    .messages
                    .iter()
                    .filter(|m| m.seqs.end == m.seqs.start + 1)
                    .map(|m| m.seqs.start)
                    .collect();
                whole.sort_unstable();
                let mut ranges: Vec<std::ops::Range<u64>> = Vec::new();
                let mut raw_summarized = 0u64;
                // Tokens are counted lazily: a figure missing now (or an entry not loaded)
                // may be there next time.
                let mut every_count = true;
                let hidden = inner.hidden.merged();
                for m in view.messages.iter().filter(|m| m.seqs.end > m.seqs.start + 1) {
                    // The summarized seqs: the message's range less the whole and the hidden
                    // seqs, as ranges (no walk over every seq: a checkpoint covers the chat).
                    let mut cuts: Vec<std::ops::Range<u64>> = whole[whole
                        .partition_point(|&s| s < m.seqs.start)
                        ..whole.partition_point(|&s| s < m.seqs.end)]
                        .iter()
                        .map(|&s| s..s + 1)
                        .chain(
                            hidden.iter().filter(|h| h.start < m.seqs.end && h.end > m.seqs.start).cloned(),
                        )
                        .collect();
                    cuts.sort_unstable_by_key(|r| r.start);
                    let mut at = m.seqs.start;
                    for cut in cuts.into_iter().chain(std::iter::once(m.seqs.end..m.seqs.end)) {
                        let part = at..cut.start.min(m.seqs.end);
                        if !part.is_empty() {
                            match ranges.last_mut() {
                                Some(r) if r.end == part.start => r.end = part.end,
                                _ => ranges.push(part.clone()),
                            }
                            let (sum, all) = inner.entries.tokens_in_memory(part);
                            raw_summarized += sum;
                            every_count &= all;
                        }
                        at = at.max(cut.end);
                    }
                }
                if every_count {
                    *self.chat.state.summarized.lock() =
                        Some((inner.revision, shape, (ranges.clone(), raw_summarized)));
                }
                (ranges, raw_summarized)
            }
        };
        let mut results = Vec::new();
        for m in view.messages.iter().filter(|m| m.seqs.end == m.seqs.start + 1) {
            for p in &m.parts {
                if let Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } = p {
                    results.push((m.seqs.start, archive.id));
                }
            }
        }
        let saved = (view.raw_saved as f64 * view.factor).ceil() as u64;
        let tokens = saved + (raw_summarized as f64 * view.factor).ceil() as u64;
        Omitted { ranges, results, tokens }
    }

    /// How much of `view` is an exact prefix of the previous request served for the chat
    /// (whole messages), and remembers `view` as the previous request. A view extended in
    /// place from the memo fingerprints only its new messages.
    fn stable_prefix(&self, view: &View) -> Stable {
        let mut last = self.chat.state.last_request.lock();
        // Each message's fingerprint is made once and kept with it: a view extended from
        // the memo fingerprints only its new messages.
        let prints: Vec<(u64, u64)> = view.messages.iter().map(|m| (m.print(), m.tokens)).collect();
        let shared = prints.iter().zip(&last.prints).take_while(|(a, b)| a == b).count();
        let raw: u64 = prints[..shared].iter().map(|p| p.1).sum();
        let tokens = ((raw as f64 * view.factor).ceil() as u64).min(view.estimate);
        last.prints = prints;
        Stable { messages: shared, tokens }
    }

    /// The view of the chat as it stands: from the memo, or built.
    /// The view-memo mutex is taken once, and held while a view is built: a concurrent view
    /// of the chat waits for it and reads it from the memo.
    fn view_now(&self, budget: &Budget) -> Result<View> {
        let snap = self.chat.snapshot();
        let mut memo = self.chat.state.view_memo.lock();
        match self.view_from_memo(&mut memo, &snap, budget)? {
            Some(v) => Ok(v),
            None => self.build_view(&mut memo, &snap, budget),
        }
    }

    /// Forgets the remembered view, so the next [`Chat::view`](crate::Chat::view) builds from scratch. For
    /// tests that compare the incremental view with a rebuilt one; never needed for
    /// correctness.
    #[doc(hidden)]
    pub(crate) fn clear_view_memo(&self) {
        *self.chat.state.view_memo.lock() = None;
    }

    /// The view built from scratch; remembered in `memo` (the chat's view memo, locked by
    /// the caller).
    ///
    /// A view is a read: it writes nothing. The texts it previews (inline tool results, the
    /// task's user texts under a checkpoint) are named by their content address, which
    /// `read_context` resolves through the index's list of the inline texts of every message
    /// (see `archive`), under the same owner rule as archives.
    fn build_view(
        &self,
        memo: &mut Option<ViewMemo>,
        snap: &crate::chat::history::Snapshot,
        budget: &Budget,
    ) -> Result<View> {
        let core = self.chat.core().clone();
        let e = core.opts.estimator.clone();
        let inner = &snap.inner;
        // A published checkpoint stands for messages 0..reach while none of them changed
        // (edited, or hidden) since its base revision; the view then holds its summary and
        // the messages after.
        let unchanged_since = |r: std::ops::Range<u64>, rev: u64| {
            r.end <= inner.len
                && !inner.hidden.hidden_since(&r, rev)
                && (r.start..r.end).all(|i| inner.entry_or_none(i).is_some_and(|e| e.revision <= rev))
        };
        let cp = match inner.checkpoint.as_ref() {
            Some(p) if self.checkpoint_holds(snap, p)? => Some(p),
            _ => None,
        };
        let base = cp.map_or(0, |p| p.rec.reach);
        let msgs = snap.range_with_hidden(base..inner.len)?;
        let at = |seq: u64| &msgs[(seq - base) as usize];
        // The rules (the protected tail, the last step, the leading system messages) see
        // the live messages only: hidden ones are not in the view.
        let live_owned: Vec<Message>;
        let live: &[Message] = if inner.hidden.is_empty() {
            &msgs
        } else {
            live_owned = msgs.iter().filter(|m| !inner.hidden.contains(m.seq)).cloned().collect();
            &live_owned
        };
        let seq_at = |i: usize| live.get(i).map_or(inner.len, |m| m.seq);
        // An unchanged message's estimate is computed once per store and kept (see
        // `Options::keep_derived`).
        let keep = core.opts.keep_derived;
        let cached_tokens = |seq: u64, parts: &[Part]| {
            let entry = inner.entry_or_none(seq);
            let Ok(t) = tokens_kept::<Infallible>(entry, keep, || Ok(message_tokens(&*e, parts)));
            t
        };
        let prot = seq_at(tail::protected_from(
            live,
            |i| cached_tokens(live[i].seq, &live[i].parts),
            budget.protect_limit(),
        ));
        // The last step: never previewed, even to avoid a refusal.
        let last_step =
            if live.is_empty() { base } else { seq_at(tail::cut_at_or_before(live, live.len() - 1)) };
        let pinned: Vec<BlobId> = inner.pins.iter().map(|p| p.archive).collect();
        // Compaction records still valid at this revision: every message they cover is
        // unchanged since they were made.
        let unchanged = |r: std::ops::Range<u64>, rev: u64| r.start >= base && unchanged_since(r, rev);
        let mut squish_at: HashMap<u64, (u64, String)> = HashMap::new();
        let mut trims: HashMap<u64, BlobId> = HashMap::new();
        for c in inner.compactions.iter() {
            for (from, to, rw) in &c.squishes {
                if unchanged(*from..*to, c.revision) {
                    squish_at.insert(*from, (*to, rw.clone()));
                }
            }
            for (seq, id) in &c.trims {
                if unchanged(*seq..*seq + 1, c.revision) {
                    trims.insert(*seq, BlobId(*id));
                }
            }
        }
        let mut out: Vec<ViewMessage> = Vec::new();
        let mut candidates = Vec::new();
        let mut memo_ok = true;
        if let Some(p) = cp {
            // What the checkpoint covers but a summary must never replace: the chat's
            // leading system messages and the user messages (the task) of the protected
            // turns, verbatim up to the instructions bound, previewed with a way back beyond.
            let (system, task) = self.kept_instructions(snap, p.rec.reach)?;
            for m in system {
                let tokens = cached_tokens(m.seq, &m.parts);
                out.push(ViewMessage {
                    print: Default::default(),
                    seqs: m.seq..m.seq + 1,
                    role: m.role,
                    tokens,
                    parts: m.parts,
                });
            }
            let mut left = budget.instructions_limit();
            for m in task {
                let tokens = cached_tokens(m.seq, &m.parts);
                let parts = if tokens <= left {
                    left -= tokens;
                    m.parts
                } else {
                    left = 0;
                    let mut parts = m.parts;
                    for p in &mut parts {
                        if let Part::Text(t) = p {
                            let id = BlobId::of(t.as_bytes());
                            let preview = archive::preview_of(
                                t,
                                &id,
                                core.opts.preview_chars,
                                &core.opts.preview_marker,
                            );
                            if preview != *t {
                                *t = preview;
                            }
                        }
                    }
                    parts
                };
                let tokens = message_tokens(&*e, &parts);
                out.push(ViewMessage {
                    print: Default::default(),
                    seqs: m.seq..m.seq + 1,
                    role: m.role,
                    tokens,
                    parts,
                });
            }
            let line = super::handles::checkpoint_line(&self.chat, snap, p.rec.reach, p.rec.base_revision)?;
            let parts = vec![Part::Summary(format!("{line}\n{}", p.summary))];
            out.push(ViewMessage {
                print: Default::default(),
                seqs: 0..p.rec.reach,
                role: Role::User,
                tokens: message_tokens(&*e, &parts),
                parts,
            });
        }
        let lead = seq_at(live.iter().take_while(|m| m.role == Role::System).count());
        let mut seq = base;
        while seq < inner.len {
            if seq == lead && !inner.pins.is_empty() {
                let mut text = String::from("[pinned context: pages kept in view]\n");
                for p in inner.pins.iter() {
                    let page = archive::read_context(
                        self.chat.core(),
                        self.chat.archives,
                        self.chat.owner(),
                        &p.archive,
                        p.range.clone(),
                        p.unit,
                    )?;
                    text.push_str(&format!(
                        "--- archive {} {}..{} ({}) ---\n{page}\n",
                        p.archive,
                        p.range.start,
                        p.range.end,
                        p.unit.as_str()
                    ));
                }
                let parts = vec![Part::Text(text)];
                out.push(ViewMessage {
                    print: Default::default(),
                    seqs: 0..0,
                    role: Role::System,
                    tokens: message_tokens(&*e, &parts),
                    parts,
                });
            }
            if let Some((to, rw)) = squish_at.get(&seq) {
                let parts = vec![Part::Summary(format!(
                    "[messages {seq}..{to} condensed; the originals stay readable as messages {seq}..{to}]\n{rw}"
                ))];
                out.push(ViewMessage {
                    print: Default::default(),
                    seqs: seq..*to,
                    role: Role::User,
                    tokens: message_tokens(&*e, &parts),
                    parts,
                });
                seq = *to;
                continue;
            }
            if inner.hidden.contains(seq) {
                seq += 1;
                continue;
            }
            let m = at(seq);
            let mut parts = m.parts.clone();
            if let Some(id) = trims.get(&seq) {
                let r = archive::grant(&core, self.chat.owner(), id)?.map(|a| archive::to_ref(&a));
                memo_ok &= r.is_some();
                let pointer = pointer_for_trim(m, id, r.as_ref());
                for p in &mut parts {
                    if let Part::ToolResult { content, .. } = p {
                        *content = match r {
                            Some(r) => ToolContent::Archived { archive: r, preview: pointer.clone() },
                            None => ToolContent::Text(pointer.clone()),
                        };
                    }
                }
            } else if seq < last_step {
                for (i, p) in parts.iter().enumerate() {
                    if let Part::ToolResult { content, .. } = p {
                        let pinned_here = matches!(content, ToolContent::Archived { archive, .. } if pinned.contains(&archive.id));
                        if !pinned_here {
                            let memo = (inner.entry_or_none(seq))
                                .filter(|_| core.opts.keep_derived)
                                .map(|e| preview_cells(&e.previews, parts.len()));
                            candidates.push(Candidate {
                                at: out.len(),
                                part: i,
                                seq,
                                tail: seq >= prot,
                                memo,
                            });
                        }
                    }
                }
            }
            let tokens = if trims.contains_key(&seq) {
                message_tokens(&*e, &parts)
            } else {
                cached_tokens(seq, &parts)
            };
            out.push(ViewMessage {
                print: Default::default(),
                seqs: seq..seq + 1,
                role: m.role,
                tokens,
                parts,
            });
            seq += 1;
        }
        let factor = inner.calibration.get(&inner.meta.model).copied().unwrap_or(1.0);
        // An archived result's guard preview is built from its archive, so the estimate
        // counts exactly the text that is sent.
        let chat = self.chat;
        let chars = core.opts.guard_preview_chars;
        let mut reshrink = |a: &ArchiveRef| -> Result<String> {
            archive::preview(chat.core(), chat.archives, chat.owner(), &a.id, chars, None)
        };
        let marker = core.opts.preview_marker.clone();
        let mut preview_text = |t: &str| {
            let (archive, preview) = archive::preview_inline(t, chars, &marker);
            ToolContent::Archived { archive, preview }
        };
        let kept = std::mem::take(&mut self.chat.state.cut.lock().previewed);
        let (view, kept) =
            guard(&*e, budget, out, candidates, factor, &kept, &mut preview_text, &mut reshrink)?;
        self.chat.state.cut.lock().previewed = kept;
        // A trim whose archive has no grant renders as a pointer that a later grant would
        // change: such a view is not remembered.
        if memo_ok {
            let appendable = inner.pins.is_empty() || lead < inner.len;
            let mut m = ViewMemo::new(
                inner,
                budget,
                appendable,
                view.messages.clone(),
                view.decision.clone(),
                view.estimate,
                view.raw_estimate,
                view.factor,
            );
            m.raw_saved = view.raw_saved;
            *memo = Some(m);
        }
        Ok(view)
    }

    /// Whether checkpoint `p` still stands for messages `0..reach` at the snapshot's revision:
    /// none of them was hidden or changed (edited, or truncated and written again) since its
    /// base revision. The changes are read from the index's revisions, not from an entry of
    /// every message it covers, and the answer is kept for the revision (appends do not
    /// change it).
    fn checkpoint_holds(
        &self,
        snap: &crate::chat::history::Snapshot,
        p: &crate::chat::history::Published,
    ) -> Result<bool> {
        let inner = &snap.inner;
        let (reach, base) = (p.rec.reach, p.rec.base_revision);
        if reach > inner.len || inner.hidden.hidden_since(&(0..reach), base) {
            return Ok(false);
        }
        let key = (inner.revision, reach, base);
        let state = &self.chat.state;
        if let Some((k, holds)) = *state.checkpoint_holds.lock()
            && k == key
        {
            return Ok(holds);
        }
        let core = &inner.core;
        // Not waiting for the writer's lock (a write holds it through its sync): with the
        // lock taken, everything written so far is flushed instead.
        core.ensure_flushed(state.last_end().unwrap_or_else(|| core.log.written()))?;
        let changed = crate::disk::index::changed_below(
            &core.index.read()?,
            inner.chat.0,
            reach,
            base,
            inner.revision,
        )?;
        *state.checkpoint_holds.lock() = Some((key, !changed));
        Ok(!changed)
    }

    /// The messages before `reach` that a view keeps whole although a checkpoint covers
    /// them: the chat's leading system messages, and the turn-opening user messages of the
    /// first user turn (the loop's task) and of the last two user turns. Found through the snapshot's entries (the turn of an
    /// entry never decreases with its seq), so the cost is in what is kept, not in the
    /// chat's length.
    fn kept_instructions(
        &self,
        snap: &crate::chat::history::Snapshot,
        reach: u64,
    ) -> Result<(Vec<Message>, Vec<Message>)> {
        let inner = &snap.inner;
        let entry = |i: u64| inner.entry(i);
        let mut system = Vec::new();
        let mut seq = 0;
        let hidden = |i: u64| inner.hidden.contains(i);
        while seq < reach && (hidden(seq) || entry(seq)?.is_some_and(|e| e.role == Role::System)) {
            if !hidden(seq) {
                system.push(snap.get(seq)?);
            }
            seq += 1;
        }
        let last_turn = match inner.len.checked_sub(1) {
            Some(last) => entry(last)?.map_or(0, |e| e.turn),
            None => 0,
        };
        // Every user message with text opens a turn, so the turn-opening message of turn t
        // is the first entry whose turn is t (turn 0 is what precedes the first user
        // message, and has none): two binary searches, whatever the chat's length.
        let first_of = |t: u64| -> Result<u64> {
            let (mut lo, mut hi) = (0u64, inner.len);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if entry(mid)?.is_some_and(|e| e.turn >= t) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            Ok(lo)
        };
        let mut task = Vec::new();
        // The loop's task (the message opening the first user turn) and the last two turns'
        // openers: harness feedback arriving as user messages must not evict the task.
        let mut turns = vec![1];
        turns.extend((last_turn.saturating_sub(1).max(2))..=last_turn);
        for t in turns.into_iter().filter(|&t| t <= last_turn) {
            let s = first_of(t)?;
            let opens = entry(s)?.is_some_and(|e| e.turn == t && e.role == Role::User && e.starts_turn);
            if opens && s >= seq && s < reach && !hidden(s) {
                task.push(snap.get(s)?);
            }
        }
        Ok((system, task))
    }

    /// The view from the memo: the same view when nothing changed, the memo's messages
    /// plus the appended ones when only appends happened, none opened a user turn over a
    /// checkpoint, and the total still fits under the soft line. `None`: build it from
    /// scratch.
    fn view_from_memo(
        &self,
        memo: &mut Option<ViewMemo>,
        snap: &crate::chat::history::Snapshot,
        budget: &Budget,
    ) -> Result<Option<View>> {
        let inner = &snap.inner;
        let Some(m) = memo.as_mut().filter(|m| m.covers(inner, budget)) else { return Ok(None) };
        if m.len < inner.len {
            // A view the guard compacted extends too: its previews stay (they are what earlier
            // views cut), the appended messages come raw, and the saving is unchanged.
            if matches!(m.decision, Decision::Refused { .. }) || !m.appendable {
                return Ok(None);
            }
            // Over a checkpoint the view keeps the task of the last two user turns: an
            // appended message opening a turn changes which, so the view is built again.
            if inner.checkpoint.is_some()
                && (m.len..inner.len).any(|s| inner.entry_or_none(s).is_some_and(|e| e.starts_turn))
            {
                return Ok(None);
            }
            let (e, keep) = (self.chat.core().opts.estimator.clone(), self.chat.core().opts.keep_derived);
            // Only appends since the memo (a hide is a new revision): nothing here is hidden,
            // but the default read would skip it anyway.
            let fresh = snap.range(m.len..inner.len)?;
            let mut raw = m.raw_estimate;
            let mut add = Vec::with_capacity(fresh.len());
            for msg in fresh {
                let seq = msg.seq;
                let entry = inner.entry_or_none(seq);
                let Ok(tokens) =
                    tokens_kept::<Infallible>(entry, keep, || Ok(message_tokens(&*e, &msg.parts)));
                raw += tokens;
                add.push(ViewMessage {
                    print: Default::default(),
                    seqs: seq..seq + 1,
                    role: msg.role,
                    tokens,
                    parts: msg.parts,
                });
            }
            let estimate = (raw as f64 * m.factor).ceil() as u64;
            // Over the soft line a cut is due; and a view that fit must be built again once
            // its history before the previews crosses the line (its decision changes).
            let before = ((raw + m.raw_saved) as f64 * m.factor).ceil() as u64;
            if estimate > budget.soft_limit()
                || (m.decision == Decision::Fits && before > budget.soft_limit())
            {
                return Ok(None);
            }
            Arc::make_mut(&mut m.messages).extend(add);
            m.len = inner.len;
            m.raw_estimate = raw;
            m.estimate = estimate;
            if let Decision::Compacted { tokens_saved, .. } = &mut m.decision {
                *tokens_saved = before - estimate;
            }
        }
        Ok(Some(View {
            messages: m.messages.clone(),
            decision: m.decision.clone(),
            estimate: m.estimate,
            raw_estimate: m.raw_estimate,
            step: 0,
            revision: 0,
            factor: m.factor,
            swap: None,
            nudge: None,
            previewed: match &m.decision {
                Decision::Compacted { previewed, .. } => previewed.clone(),
                _ => Vec::new(),
            },
            stable: Stable::default(),
            due: false,
            omitted: Default::default(),
            raw_saved: m.raw_saved,
        }))
    }

    /// With a worker running: past its start line (see `worker::plan`), ask it to prepare a checkpoint (of what
    /// lies before the protected tail of `budget`), unless one is prepared (`prepared`).
    /// Never waits; the swap itself is made when a cut is due (see [`ChatView::view`]).
    fn pay_before_the_wall(&self, budget: &Budget, prepared: bool) -> Result<()> {
        let Some(wk) = self.worker.running() else { return Ok(()) };
        let est = checkpoint::estimate_after_checkpoint(&self.chat)?;
        // The worker's start line: its soft line, or earlier when its summarizer's measured
        // time and the chat's growth say a job started there would not be ready in time.
        if !wk.due(self.chat.id(), est, budget) {
            return Ok(());
        }
        // One job in flight per chat; a new one once the prepared checkpoint is stale or
        // already published.
        if !prepared && self.chat.state.requested.swap(1, Ordering::AcqRel) == 0 {
            wk.request(self.chat.owner(), self.chat.id(), Some(budget.protect_limit()));
        }
        Ok(())
    }

    /// The prepared checkpoint, if it is of the current revision and reaches beyond
    /// `published`.
    fn fresh_prepared(&self, published: u64) -> Option<Arc<crate::chat::checkpoint::Checkpoint>> {
        self.worker
            .prepared(self.chat.state)
            .filter(|p| p.base_revision == self.chat.revision() && p.reach > published)
    }

    /// Publishes `cp` (the swap); how long it took. A conflict (an edit or another
    /// publication raced it) is not an error: the view goes on without it.
    fn swap_in(
        &self,
        cp: Option<Arc<crate::chat::checkpoint::Checkpoint>>,
    ) -> Result<Option<std::time::Duration>> {
        let Some(cp) = cp else { return Ok(None) };
        let t = std::time::Instant::now();
        // Not waited for, like the view's archives: the chat's next write makes it durable;
        // a crash before leaves the messages it covers, and the worker prepares it again.
        match checkpoint::publish(&self.chat, &cp, false) {
            Ok(()) => Ok(Some(t.elapsed())),
            Err(Error::Conflict(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A view was refused at the hard line with nothing swapped in: follow the worker's
    /// [`HardLinePolicy`](crate::chat::worker::HardLinePolicy) — wait for the chat's job, build
    /// the checkpoint now, or let the refusal stand (`prepared`: the checkpoint prepared
    /// before the view, swapped in under any policy). Returns the swap's time when a
    /// checkpoint was published.
    fn wait_at_the_wall(
        &self,
        budget: &Budget,
        prepared: Option<Arc<crate::chat::checkpoint::Checkpoint>>,
    ) -> Result<Option<std::time::Duration>> {
        let Some(wk) = self.worker.running() else { return Ok(None) };
        let published = checkpoint::published(&self.chat).map_or(0, |(_, r)| r);
        let protect = Some(budget.protect_limit());
        let mut cp = prepared;
        if cp.is_none() {
            match wk.opts.at_hard_line {
                crate::chat::worker::HardLinePolicy::Refuse => {}
                crate::chat::worker::HardLinePolicy::Synchronous => {
                    // Nothing settled (all protected, or behind a pending approval): the
                    // refusal stands.
                    let opts = crate::chat::checkpoint::CheckpointOptions {
                        protect_max_tokens: protect,
                        ..wk.opts.checkpoint.clone()
                    };
                    let built = checkpoint::build_if_settled(&self.chat, &*wk.summarizer, &opts)?;
                    cp = built.map(Arc::new).filter(|p| p.reach > published);
                }
                crate::chat::worker::HardLinePolicy::Wait(limit) => {
                    if self.chat.state.requested.swap(1, Ordering::AcqRel) == 0 {
                        wk.request(self.chat.owner(), self.chat.id(), protect);
                    }
                    let deadline = std::time::Instant::now() + limit;
                    while cp.is_none() && std::time::Instant::now() < deadline {
                        let seen = wk.jobs_done();
                        cp = self.fresh_prepared(published);
                        if cp.is_none() {
                            wk.wait_job(seen, deadline.saturating_duration_since(std::time::Instant::now()));
                            cp = self.fresh_prepared(published);
                            // The chat's job ended (done, nothing settled, or failed for good)
                            // without a usable checkpoint: nothing more is coming.
                            if cp.is_none() && self.chat.state.requested.load(Ordering::Acquire) == 0 {
                                break;
                            }
                        }
                    }
                }
            }
        }
        self.swap_in(cp)
    }

    /// The work of `Chat::estimate` (documented there).
    pub(crate) fn estimate(&self, budget: &Budget) -> Result<u64> {
        let snap = self.chat.snapshot();
        let inner = &snap.inner;
        let (e, keep) = (self.chat.core().opts.estimator.clone(), self.chat.core().opts.keep_derived);
        let mut raw: u64 = budget.tool_schemas.iter().map(|s| e.text_tokens(s)).sum();
        for seq in 0..inner.len {
            let Some(entry) = inner.entry(seq)? else { continue };
            if !inner.hidden.contains(seq) {
                raw += tokens_kept(Some(entry), keep, || {
                    Ok::<_, Error>(message_tokens(&*e, &snap.get(seq)?.parts))
                })?;
            }
        }
        let factor = inner.calibration.get(&inner.meta.model).copied().unwrap_or(1.0);
        Ok((raw as f64 * factor).ceil() as u64)
    }

    /// The work of `Chat::report_usage` (documented there).
    pub(crate) fn report_usage(&self, step: u64, actual_input_tokens: u64) -> Result<f64> {
        let Some((raw, model)) =
            self.chat.state.views.lock().iter().find(|(s, ..)| *s == step).map(|(_, r, m)| (*r, m.clone()))
        else {
            return Err(Error::NotFound {
                what: format!("view step {step} (only the last 256 views are kept)"),
            });
        };
        let core = self.chat.core().clone();
        let (mut w, _fleet) = self.chat.state.lock_write()?;
        let old = w.calibration.get(&model).copied().unwrap_or(1.0);
        let ratio = actual_input_tokens as f64 / raw.max(1) as f64;
        let new = if ratio > old { ratio } else { old + (ratio - old) * 0.3 }.clamp(0.25, 8.0);
        let now = now_ms();
        let rec = UsageRec { chat: self.chat.id().0, model: model.clone(), factor: new, at_ms: now };
        let mut txn = Txn::default();
        txn.push(RecordOut::history(Kind::Usage, record::encode(&rec)?.into_vec()));
        let c = core.append(txn)?;
        let mut cal = (*w.calibration).clone();
        cal.insert(model, new);
        w.calibration = Arc::new(cal);
        w.last_end = c.end;
        self.chat.state.publish(&w);
        drop(w);
        core.wait_durable(c.end)?;
        Ok(new)
    }

    /// The work of `Chat::protected_minimum` (documented there).
    pub(crate) fn protected_minimum(&self, budget: &Budget) -> Result<u64> {
        let snap = self.chat.snapshot();
        let inner = &snap.inner;
        let e = self.chat.core().opts.estimator.clone();
        let mut raw: u64 = budget.tool_schemas.iter().map(|s| e.text_tokens(s)).sum();
        // The last step: back from the end to the last cut point.
        let mut from = inner.len;
        let mut last = Vec::new();
        while from > 0 {
            from -= 1;
            if inner.hidden.contains(from) {
                continue;
            }
            let m = snap.get(from)?;
            let cut = tail::is_cut_point(&m);
            last.push(m);
            if cut {
                break;
            }
        }
        let (system, task) = self.kept_instructions(&snap, from)?;
        for m in system.iter().chain(&task).chain(&last) {
            raw += message_tokens(&*e, &m.parts);
        }
        let factor = inner.calibration.get(&inner.meta.model).copied().unwrap_or(1.0);
        Ok((raw as f64 * factor).ceil() as u64)
    }

    /// Every message with its seq, role, token estimate and a 60-character preview, for a
    /// model to choose what to compact.
    pub(crate) fn index(&self) -> Result<Vec<IndexLine>> {
        let e = self.chat.core().opts.estimator.clone();
        Ok(self
            .chat
            .messages()?
            .iter()
            .map(|m| IndexLine {
                seq: m.seq,
                role: m.role,
                tokens: message_tokens(&*e, &m.parts),
                preview: preview60(m),
            })
            .collect())
    }

    /// Checks a plan without applying it: every problem, each naming its rule. The
    /// protected tail is the last two user turns whole (see [`Chat::compaction_tool_call`](crate::Chat::compaction_tool_call)
    /// for the bound a budget sets).
    pub(crate) fn lint(&self, plan: &Plan) -> Result<Vec<LintProblem>> {
        let core = self.chat.core();
        // A plan names messages by seq: the linter indexes the whole chat, hidden ones
        // included (a trim or squish of a hidden message changes nothing in the view).
        let msgs = self.chat.snapshot().messages_with_hidden()?;
        Ok(lint(
            plan,
            &msgs,
            self.protected_seq(&msgs, None),
            core.opts.squish_max_tokens,
            &*core.opts.estimator,
        ))
    }

    /// The first seq of the protected tail of `msgs` (the whole chat), bounded by
    /// `protect_max` tokens when given.
    fn protected_seq(&self, msgs: &[Message], protect_max: Option<u64>) -> u64 {
        let e = self.chat.core().opts.estimator.clone();
        let max = protect_max.unwrap_or(u64::MAX);
        tail::protected_from(msgs, |i| message_tokens(&*e, &msgs[i].parts), max) as u64
    }

    /// The work of `Chat::compaction_tool_call` (documented there).
    pub(crate) fn compaction_tool_call(
        &self,
        args_json: &str,
        expected_revision: u64,
        budget: &Budget,
    ) -> Result<String> {
        let plan = match crate::rules::compaction::tool::parse_args(args_json) {
            Ok(p) => p,
            Err(why) => return Ok(crate::rules::compaction::tool::invalid_args_text(&why)),
        };
        match self.compact_within(&plan, expected_revision, Some(budget.protect_limit())) {
            Ok(n) => Ok(crate::rules::compaction::tool::applied_text(&plan, n)),
            Err(Error::Lint { problems }) => Ok(crate::rules::compaction::tool::problems_text(&problems)),
            Err(Error::StaleRevision { expected, found }) => {
                Ok(crate::rules::compaction::tool::stale_text(expected, found))
            }
            Err(e) => Err(e),
        }
    }

    /// The work of `Chat::compact` (documented there).
    pub(crate) fn compact(&self, plan: &Plan, expected_revision: u64) -> Result<usize> {
        self.compact_within(plan, expected_revision, None)
    }

    fn compact_within(&self, plan: &Plan, expected_revision: u64, protect_max: Option<u64>) -> Result<usize> {
        let core = self.chat.core().clone();
        let snap = self.chat.snapshot();
        if snap.revision() != expected_revision {
            return Err(Error::StaleRevision { expected: expected_revision, found: snap.revision() });
        }
        let msgs = snap.messages_with_hidden()?;
        let prot = self.protected_seq(&msgs, protect_max);
        let problems = lint(plan, &msgs, prot, core.opts.squish_max_tokens, &*core.opts.estimator);
        if !problems.is_empty() {
            return Err(Error::Lint { problems });
        }
        let mut txn = Txn::default();
        let mut wait = None;
        let mut trims = Vec::new();
        for &t in &plan.trims {
            for p in &msgs[t as usize].parts {
                if let Part::ToolResult { content, .. } = p {
                    let id = match content {
                        ToolContent::Text(text) => {
                            let (r, w) = archive::archive_into(&core, &mut txn, self.chat.owner(), text)?;
                            wait = wait.max(w);
                            r.id
                        }
                        ToolContent::Archived { archive, .. } => archive.id,
                    };
                    trims.push((t, id.0));
                    break;
                }
            }
        }
        let squishes = plan.squishes.iter().map(|s| (s.from, s.to, s.rewrite.clone())).collect();
        let (mut w, _fleet) = self.chat.state.lock_write()?;
        if w.revision != expected_revision {
            return Err(Error::StaleRevision { expected: expected_revision, found: w.revision });
        }
        let rec =
            CompactionRec { chat: self.chat.id().0, revision: w.revision, trims, squishes, at_ms: now_ms() };
        txn.push(RecordOut::history(Kind::Compaction, record::encode(&rec)?.into_vec()));
        let c = core.append(txn)?;
        let mut list = (*w.compactions).clone();
        list.push(rec);
        w.compactions = Arc::new(list);
        w.last_end = c.end;
        self.chat.state.publish(&w);
        drop(w);
        core.wait_durable(wait.map_or(c.end, |x| x.max(c.end)))?;
        Ok(plan.trims.len() + plan.squishes.len())
    }

    /// The first message of the current revision holding a pending approval (archived tool
    /// results are scanned whole), with the default patterns or `patterns`.
    pub(crate) fn first_pending_approval(
        &self,
        patterns: Option<&crate::rules::approval::ApprovalPatterns>,
    ) -> Result<Option<(u64, crate::rules::approval::Pending)>> {
        let default = crate::rules::approval::ApprovalPatterns::default();
        let p = patterns.unwrap_or(&default);
        let msgs = self.chat.messages()?;
        let chat = self.chat;
        let full = |a: &crate::model::message::ArchiveRef| {
            archive::read_context(
                chat.core(),
                chat.archives,
                chat.owner(),
                &a.id,
                0..a.chars,
                crate::Unit::Chars,
            )
            .ok()
        };
        Ok(crate::rules::approval::first_pending(&msgs, p, &full))
    }
}
