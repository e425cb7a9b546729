//! A chat as its model view sees it ([`ChatView`]) and the work of `Chat::view`: the view
//! from the memo or built anew (`build`), the hard line (`wall`), usage (`usage`), and
//! compaction with approvals (`compaction`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::base::error::Result;
use crate::chat::checkpoint;
use crate::chat::history::ChatRef;
use crate::chat::worker::Slot;
use crate::model::message::{Part, ToolContent};
use crate::rules::budget::Budget;
use crate::rules::budget::view::{Decision, Omitted, Stable, View, ViewMessage};

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
        let kept = self.chat.state.view.cut.lock().previewed.clone();
        let mut view = self.view_now(budget)?;
        let mut swap = None;
        // A cut is due (over the soft line with what earlier views cut): the one break of
        // the provider's cache this crossing costs is also the moment to swap the prepared
        // checkpoint in — everything due at once, so the next views extend this one.
        if view.due && before.is_some() {
            swap = self.swap_in(before.clone())?;
            if swap.is_some() {
                self.chat.state.view.cut.lock().previewed = kept.clone();
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
            self.chat.state.view.cut.lock().previewed = kept;
            view = self.view_now(budget)?;
        }
        let snap = self.chat.snapshot();
        let inner = &snap.inner;
        view.swap = swap;
        view.revision = inner.revision;
        view.step = self.chat.state.view.counter.fetch_add(1, Ordering::Relaxed);
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
        let mut recent = self.chat.state.view.recent.lock();
        recent.push_back((view.step, view.raw_estimate, inner.meta.model.clone()));
        while recent.len() > 256 {
            recent.pop_front();
        }
        Ok(view)
    }

    /// What `view` leaves out of the chat's history as `snap` holds it.
    pub(super) fn omitted(&self, view: &View, snap: &crate::chat::history::Snapshot) -> Omitted {
        let inner = &snap.inner;
        // The summarized ranges depend only on the revision and the view's seqs: a view of
        // the same shape (an unchanged chat viewed again) reuses the last one's.
        let shape: Vec<std::ops::Range<u64>> = view.messages.iter().map(|m| m.seqs.clone()).collect();
        let cached = self
            .chat
            .state
            .view
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
                    *self.chat.state.view.summarized.lock() =
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
    /// (whole messages), and remembers `view` as the previous request. Fingerprints are
    /// compared up to the first difference: each is made once and kept with its message, so
    /// a view extended from the memo fingerprints only its new messages, and the first view
    /// of a chat none (there is nothing to compare it with).
    pub(super) fn stable_prefix(&self, view: &View) -> Stable {
        let mut last = self.chat.state.view.last_request.lock();
        let shared = if Arc::ptr_eq(&view.messages, &last.messages) {
            view.messages.len()
        } else {
            let same = |(a, b): &(&ViewMessage, &ViewMessage)| a.tokens == b.tokens && a.print() == b.print();
            view.messages.iter().zip(last.messages.iter()).take_while(same).count()
        };
        let raw: u64 = view.messages[..shared].iter().map(|m| m.tokens).sum();
        let tokens = ((raw as f64 * view.factor).ceil() as u64).min(view.estimate);
        last.messages = view.messages.clone();
        Stable { messages: shared, tokens }
    }

    /// The view of the chat as it stands: from the memo, or built.
    /// The view-memo mutex is taken once, and held while a view is built: a concurrent view
    /// of the chat waits for it and reads it from the memo.
    pub(super) fn view_now(&self, budget: &Budget) -> Result<View> {
        let snap = self.chat.snapshot();
        let mut memo = self.chat.state.view.memo.lock();
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
        *self.chat.state.view.memo.lock() = None;
    }
}
