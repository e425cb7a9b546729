//! The model view of a chat, its index for compaction, usage calibration and compaction
//! plans: the `Chat` side of the budget and compaction modules.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::chat::Chat;
use super::record::{self, CompactionRec, UsageRec, kind};
use super::state::now_ms;
use super::types::{ArchiveRef, Message, Part, Role, ToolContent};
use super::view_memo::ViewMemo;
use crate::archive;
use crate::blob::BlobId;
use crate::budget::Budget;
use crate::budget::view::{
    Candidate, Decision, IndexLine, View, ViewMessage, guard, message_tokens, preview60,
};
use crate::checkpoint::protected_from;
use crate::compaction::{LintProblem, Plan, lint};
use crate::error::{Error, Result};
use crate::store::core::{RecordOut, Txn};

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

impl Chat {
    /// The model view under `budget`: every message (compaction records applied), pinned
    /// pages, and, over the soft line, older tool results turned into previews oldest first
    /// until the estimate is at or below the target — never a pinned page, never inside
    /// the last two user turns. Still over the hard line: [`Decision::Refused`].
    ///
    /// Previewing an inline tool result archives it (content-addressed, so a second view
    /// writes nothing new): the preview's archive id always reads the result back whole.
    pub fn view(&self, budget: &Budget) -> Result<View> {
        budget.validate()?;
        let swap = self.pay_before_the_wall(budget)?;
        let snap = self.snapshot();
        let inner = &snap.inner;
        let model = inner.meta.model.clone();
        let mut view = match self.view_from_memo(&snap, budget)? {
            Some(v) => v,
            None => self.build_view(&snap, budget)?,
        };
        view.swap = swap;
        view.revision = inner.revision;
        view.step = self.state().view_counter.fetch_add(1, Ordering::Relaxed);
        let mut recent = self.state().views.lock();
        recent.push_back((view.step, view.raw_estimate, model));
        while recent.len() > 256 {
            recent.pop_front();
        }
        Ok(view)
    }

    /// Forgets the remembered view, so the next [`Chat::view`] builds from scratch. For
    /// tests that compare the incremental view with a rebuilt one; never needed for
    /// correctness.
    #[doc(hidden)]
    pub fn clear_view_memo(&self) {
        *self.state().view_memo.lock() = None;
    }

    /// The view built from scratch; remembered in the chat's view memo.
    fn build_view(&self, snap: &super::Snapshot, budget: &Budget) -> Result<View> {
        let core = self.store().inner.core.clone();
        let e = core.opts.estimator.clone();
        let inner = &snap.inner;
        // A published checkpoint stands for messages 0..reach while none of them changed
        // since its base revision; the view then holds its summary and the messages after.
        let unchanged_since = |r: std::ops::Range<u64>, rev: u64| {
            r.end <= inner.len
                && (r.start..r.end).all(|i| inner.entries.get(i as usize).is_some_and(|e| e.revision <= rev))
        };
        let cp = inner.checkpoint.as_ref().filter(|p| unchanged_since(0..p.rec.reach, p.rec.base_revision));
        let base = cp.map_or(0, |p| p.rec.reach);
        let msgs = snap.range(base..inner.len)?;
        let at = |seq: u64| &msgs[(seq - base) as usize];
        let prot = base + protected_from(&msgs);
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
            let parts = vec![Part::Summary(format!(
                "[checkpoint: summary of messages 0..{}; the originals stay readable]\n{}",
                p.rec.reach, p.summary
            ))];
            out.push(ViewMessage {
                seqs: 0..p.rec.reach,
                role: Role::User,
                tokens: message_tokens(&*e, &parts),
                parts,
            });
        }
        let lead = base + msgs.iter().take_while(|m| m.role == Role::System).count() as u64;
        let mut seq = base;
        while seq < inner.len {
            if seq == lead && !inner.pins.is_empty() {
                let mut text = String::from("[pinned context: pages kept in view]\n");
                for p in inner.pins.iter() {
                    let page =
                        self.store().read_context(self.owner(), &p.archive, p.range.clone(), p.unit)?;
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
                    seqs: seq..*to,
                    role: Role::User,
                    tokens: message_tokens(&*e, &parts),
                    parts,
                });
                seq = *to;
                continue;
            }
            let m = at(seq);
            let mut parts = m.parts.clone();
            if let Some(id) = trims.get(&seq) {
                let r = archive::grant(&core, self.owner(), id)?.map(|a| archive::to_ref(&a));
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
            } else if seq < prot {
                for (i, p) in parts.iter().enumerate() {
                    if let Part::ToolResult { content, .. } = p {
                        let pinned_here = matches!(content, ToolContent::Archived { archive, .. } if pinned.contains(&archive.id));
                        if !pinned_here {
                            candidates.push(Candidate { at: out.len(), part: i, seq });
                        }
                    }
                }
            }
            // An unchanged message's estimate is computed once per store and cached.
            let tokens = match inner.entries.get(seq as usize) {
                Some(entry) if !trims.contains_key(&seq) => {
                    *entry.tokens.get_or_init(|| message_tokens(&*e, &parts))
                }
                _ => message_tokens(&*e, &parts),
            };
            out.push(ViewMessage { seqs: seq..seq + 1, role: m.role, tokens, parts });
            seq += 1;
        }
        let factor = inner.calibration.get(&inner.meta.model).copied().unwrap_or(1.0);
        let mut planned = guard(
            &*e,
            budget,
            out,
            candidates,
            factor,
            core.opts.guard_preview_chars,
            &core.opts.preview_marker,
        );
        if !planned.to_archive.is_empty() {
            let mut txn = Txn::default();
            let mut wait = None;
            for t in &planned.to_archive {
                let (_, w) = archive::archive_into(&core, &mut txn, self.owner(), t)?;
                wait = wait.max(w);
            }
            let c = core.append(txn)?;
            core.wait_durable(wait.map_or(c.end, |w| w.max(c.end)))?;
        }
        for (at, part) in std::mem::take(&mut planned.reshrink) {
            if let Part::ToolResult { content: ToolContent::Archived { archive, preview }, .. } =
                &mut Arc::make_mut(&mut planned.view.messages)[at].parts[part]
            {
                *preview =
                    self.store().preview(self.owner(), &archive.id, core.opts.guard_preview_chars, None)?;
            }
        }
        let view = planned.view;
        // A trim whose archive has no grant renders as a pointer that a later grant would
        // change: such a view is not remembered.
        if memo_ok {
            let appendable = inner.pins.is_empty() || lead < inner.len;
            *self.state().view_memo.lock() = Some(ViewMemo::new(
                inner,
                budget,
                appendable,
                view.messages.clone(),
                view.decision.clone(),
                view.estimate,
                view.raw_estimate,
                view.factor,
            ));
        }
        Ok(view)
    }

    /// The view from the memo: the same view when nothing changed, the memo's messages
    /// plus the appended ones when only appends happened and the total still fits under
    /// the soft line. `None`: build it from scratch.
    fn view_from_memo(&self, snap: &super::Snapshot, budget: &Budget) -> Result<Option<View>> {
        let inner = &snap.inner;
        let mut memo = self.state().view_memo.lock();
        let Some(m) = memo.as_mut().filter(|m| m.covers(inner, budget)) else { return Ok(None) };
        if m.len < inner.len {
            if m.decision != Decision::Fits || !m.appendable {
                return Ok(None);
            }
            let e = self.store().inner.core.opts.estimator.clone();
            let fresh = snap.range(m.len..inner.len)?;
            let mut raw = m.raw_estimate;
            let mut add = Vec::with_capacity(fresh.len());
            for (seq, msg) in (m.len..inner.len).zip(fresh) {
                let tokens = match inner.entries.get(seq as usize) {
                    Some(entry) => *entry.tokens.get_or_init(|| message_tokens(&*e, &msg.parts)),
                    None => message_tokens(&*e, &msg.parts),
                };
                raw += tokens;
                add.push(ViewMessage { seqs: seq..seq + 1, role: msg.role, tokens, parts: msg.parts });
            }
            let estimate = (raw as f64 * m.factor).ceil() as u64;
            if estimate > budget.soft_limit() {
                return Ok(None);
            }
            Arc::make_mut(&mut m.messages).extend(add);
            m.len = inner.len;
            m.raw_estimate = raw;
            m.estimate = estimate;
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
        }))
    }

    /// With a worker running: past its soft line, ask it to prepare a checkpoint; past the
    /// hard line, publish the prepared one (the swap), or follow the hard-line policy.
    /// Returns how long the swap took, when there was one.
    fn pay_before_the_wall(&self, budget: &Budget) -> Result<Option<std::time::Duration>> {
        let Some(wk) = self.store().inner.worker.lock().clone() else { return Ok(None) };
        let est = self.estimate_after_checkpoint()?;
        let usable = budget.usable() as f64;
        if (est as f64) <= wk.opts.soft * usable {
            return Ok(None);
        }
        let published = self.published_checkpoint().map_or(0, |(_, r)| r);
        let fresh = |c: &Self| c.prepared().filter(|p| p.base_revision == c.revision());
        // One job in flight per chat; a new one once the prepared checkpoint is stale or
        // already published.
        let usable_prepared = fresh(self).is_some_and(|p| p.reach > published);
        if !usable_prepared && self.state().requested.swap(1, Ordering::AcqRel) == 0 {
            wk.request(self.owner(), self.id());
        }
        if est <= budget.hard_limit() {
            return Ok(None);
        }
        let mut cp = fresh(self).filter(|p| p.reach > published);
        if cp.is_none() {
            match wk.opts.at_hard_line {
                crate::worker::HardLinePolicy::Refuse => {}
                crate::worker::HardLinePolicy::Synchronous => {
                    // Nothing settled (all protected, or behind a pending approval): the view
                    // goes on without a checkpoint, and the guard decides.
                    if self.settled_cut(&self.snapshot().messages()?) > 0 {
                        let built = self.build_checkpoint(&*wk.summarizer, &wk.opts.checkpoint)?;
                        cp = Some(Arc::new(built)).filter(|p| p.reach > published);
                    }
                }
                crate::worker::HardLinePolicy::Wait(limit) => {
                    let deadline = std::time::Instant::now() + limit;
                    while cp.is_none() && std::time::Instant::now() < deadline {
                        let seen = wk.jobs_done();
                        cp = fresh(self).filter(|p| p.reach > published);
                        if cp.is_none() {
                            wk.wait_job(seen, deadline.saturating_duration_since(std::time::Instant::now()));
                            cp = fresh(self).filter(|p| p.reach > published);
                            // The chat's job ended (done, nothing settled, or failed for good)
                            // without a usable checkpoint: nothing more is coming.
                            if cp.is_none() && self.state().requested.load(Ordering::Acquire) == 0 {
                                break;
                            }
                        }
                    }
                }
            }
        }
        let Some(cp) = cp else { return Ok(None) };
        let t = std::time::Instant::now();
        match self.publish_checkpoint(&cp) {
            Ok(()) => Ok(Some(t.elapsed())),
            // Raced with an edit or another publication: the view goes on without it.
            Err(Error::Conflict(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The estimated input tokens of the chat as it stands (calibrated, tool schemas of
    /// `budget` included), without building a view: each message's estimate is cached, so
    /// after the first call this costs a sum over the messages. Compaction records, pins and
    /// previews are not applied; use [`Chat::view`] for what will be sent.
    pub fn estimate(&self, budget: &Budget) -> Result<u64> {
        let snap = self.snapshot();
        let inner = &snap.inner;
        let e = self.store().inner.core.opts.estimator.clone();
        let mut raw: u64 = budget.tool_schemas.iter().map(|s| e.text_tokens(s)).sum();
        for seq in 0..inner.len {
            let Some(entry) = inner.entries.get(seq as usize) else { continue };
            raw += match entry.tokens.get() {
                Some(t) => *t,
                None => {
                    *entry.tokens.get_or_init(|| snap.get(seq).map_or(0, |m| message_tokens(&*e, &m.parts)))
                }
            };
        }
        let factor = inner.calibration.get(&inner.meta.model).copied().unwrap_or(1.0);
        Ok((raw as f64 * factor).ceil() as u64)
    }

    /// Reports the real input tokens of the call made with view `step`. When they are above
    /// the estimate, the correction factor for this chat and its model rises to match at
    /// once; when below, it eases down. The factor is persisted and applies to later views.
    /// Returns the new factor.
    pub fn report_usage(&self, step: u64, actual_input_tokens: u64) -> Result<f64> {
        let Some((raw, model)) =
            self.state().views.lock().iter().find(|(s, ..)| *s == step).map(|(_, r, m)| (*r, m.clone()))
        else {
            return Err(Error::NotFound {
                what: format!("view step {step} (only the last 256 views are kept)"),
            });
        };
        let core = self.store().inner.core.clone();
        let mut w = self.state().w.lock();
        self.state().live()?;
        let old = w.calibration.get(&model).copied().unwrap_or(1.0);
        let ratio = actual_input_tokens as f64 / raw.max(1) as f64;
        let new = if ratio > old { ratio } else { old + (ratio - old) * 0.3 }.clamp(0.25, 8.0);
        let now = now_ms();
        let rec = UsageRec { chat: self.id().0, model: model.clone(), factor: new, at_ms: now };
        let mut txn = Txn::default();
        txn.push(RecordOut::history(kind::USAGE, record::encode(&rec)?.into_vec()));
        let c = core.append(txn)?;
        let mut cal = (*w.calibration).clone();
        cal.insert(model, new);
        w.calibration = Arc::new(cal);
        w.last_end = c.end;
        self.state().publish(&w);
        drop(w);
        core.wait_durable(c.end)?;
        Ok(new)
    }

    /// Every message with its seq, role, token estimate and a 60-character preview, for a
    /// model to choose what to compact.
    pub fn index(&self) -> Result<Vec<IndexLine>> {
        let e = self.store().inner.core.opts.estimator.clone();
        Ok(self
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

    /// Checks a plan without applying it: every problem, each naming its rule.
    pub fn lint(&self, plan: &Plan) -> Result<Vec<LintProblem>> {
        let core = &self.store().inner.core;
        let msgs = self.messages()?;
        Ok(lint(plan, &msgs, protected_from(&msgs), core.opts.squish_max_tokens, &*core.opts.estimator))
    }

    /// Records a compaction plan, applied when views are built (originals untouched), if
    /// the chat is still at `expected_revision` and the linter finds nothing; otherwise
    /// nothing is written and [`Error::Lint`] lists every problem at once. Trimmed tool
    /// results are archived so their pointer can be followed. Returns how many changes the
    /// plan holds.
    pub fn compact(&self, plan: &Plan, expected_revision: u64) -> Result<usize> {
        let core = self.store().inner.core.clone();
        let snap = self.snapshot();
        if snap.revision() != expected_revision {
            return Err(Error::StaleRevision { expected: expected_revision, found: snap.revision() });
        }
        let msgs = snap.messages()?;
        let problems =
            lint(plan, &msgs, protected_from(&msgs), core.opts.squish_max_tokens, &*core.opts.estimator);
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
                            let (r, w) = archive::archive_into(&core, &mut txn, self.owner(), text)?;
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
        let mut w = self.state().w.lock();
        self.state().live()?;
        if w.revision != expected_revision {
            return Err(Error::StaleRevision { expected: expected_revision, found: w.revision });
        }
        let rec = CompactionRec { chat: self.id().0, revision: w.revision, trims, squishes, at_ms: now_ms() };
        txn.push(RecordOut::history(kind::COMPACTION, record::encode(&rec)?.into_vec()));
        let c = core.append(txn)?;
        let mut list = (*w.compactions).clone();
        list.push(rec);
        w.compactions = Arc::new(list);
        w.last_end = c.end;
        self.state().publish(&w);
        drop(w);
        core.wait_durable(wait.map_or(c.end, |x| x.max(c.end)))?;
        Ok(plan.trims.len() + plan.squishes.len())
    }
}
