//! The hard line: paying for a prepared checkpoint before the window fills, swapping it
//! in at the wall, or waiting there for the worker (the configured policy).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::ChatView;
use crate::base::error::{Error, Result};
use crate::chat::checkpoint;
use crate::rules::budget::Budget;

impl ChatView<'_> {
    /// With a worker running: past its start line (see `worker::plan`), ask it to prepare a checkpoint (of what
    /// lies before the protected tail of `budget`), unless one is prepared (`prepared`).
    /// Never waits; the swap itself is made when a cut is due (see [`ChatView::view`]).
    pub(super) fn pay_before_the_wall(&self, budget: &Budget, prepared: bool) -> Result<()> {
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
    pub(super) fn fresh_prepared(&self, published: u64) -> Option<Arc<crate::chat::checkpoint::Checkpoint>> {
        self.worker
            .prepared(self.chat.state)
            .filter(|p| p.base_revision == self.chat.revision() && p.reach > published)
    }

    /// Publishes `cp` (the swap); how long it took. A conflict (an edit or another
    /// publication raced it) is not an error: the view goes on without it.
    pub(super) fn swap_in(
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
    pub(super) fn wait_at_the_wall(
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
}
