//! Building a chat's model view: from the memo of the last one when nothing below it
//! changed, else from the snapshot (the guard's previews, the checkpoint when it holds, the
//! instructions a checkpoint keeps).

use std::convert::Infallible;
use std::sync::Arc;

use super::ChatView;
use crate::base::blob::BlobId;
use crate::base::error::Result;
use crate::chat::archive;
use crate::chat::history::view_memo::ViewMemo;
use crate::chat::history::{compactions_in_force, tokens_kept};
use crate::model::estimate::Estimator;
use crate::model::message::{ArchiveRef, Message, Part, Role, ToolContent};
use crate::rules::budget::Budget;
use crate::rules::budget::tail;
use crate::rules::budget::view::{
    Candidate, Decision, Stable, View, ViewMessage, guard, message_tokens, preview_cells,
};

/// The message that stands for squished messages `seq..to`: the rewrite, saying where the
/// originals are.
fn squished(e: &dyn Estimator, seq: u64, to: u64, rw: &str) -> ViewMessage {
    let parts = vec![Part::Summary(format!(
        "[messages {seq}..{to} condensed; the originals stay readable as messages {seq}..{to}]\n{rw}"
    ))];
    ViewMessage {
        print: Default::default(),
        seqs: seq..to,
        role: Role::User,
        tokens: message_tokens(e, &parts),
        parts,
    }
}

/// The text a trimmed tool result is replaced by: where its archive is and how to read it.
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

impl ChatView<'_> {
    /// The view built from scratch; remembered in `memo` (the chat's view memo, locked by
    /// the caller).
    ///
    /// A view is a read: it writes nothing. The texts it previews (inline tool results, the
    /// task's user texts under a checkpoint) are named by their content address, which
    /// `read_context` resolves through the index's list of the inline texts of every message
    /// (see `archive`), under the same owner rule as archives.
    pub(super) fn build_view(
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
        let (squish_at, trims) = compactions_in_force(inner, base);
        let mut out: Vec<ViewMessage> = Vec::new();
        let mut candidates = Vec::new();
        let mut memo_ok = true;
        if let Some(p) = cp {
            out = self.under_checkpoint(snap, p, budget, &cached_tokens)?;
        }
        let lead = seq_at(live.iter().take_while(|m| m.role == Role::System).count());
        let mut seq = base;
        while seq < inner.len {
            if seq == lead && !inner.pins.is_empty() {
                out.push(self.pinned_context(inner)?);
            }
            if let Some((to, rw)) = squish_at.get(&seq) {
                out.push(squished(&*e, seq, *to, rw));
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
        let view = self.guarded(inner, budget, out, candidates)?;
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

    /// The view's messages for what checkpoint `p` covers: the chat's leading system
    /// messages and the user messages (the task) of the protected turns, which a summary
    /// must never replace (verbatim up to the instructions bound, previewed with a way back
    /// beyond), then the summary with its handles line.
    fn under_checkpoint(
        &self,
        snap: &crate::chat::history::Snapshot,
        p: &crate::chat::history::Published,
        budget: &Budget,
        cached_tokens: &dyn Fn(u64, &[Part]) -> u64,
    ) -> Result<Vec<ViewMessage>> {
        let core = self.chat.core();
        let e = &*core.opts.estimator;
        let mut out = Vec::new();
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
                        let preview =
                            archive::preview_of(t, &id, core.opts.preview_chars, &core.opts.preview_marker);
                        if preview != *t {
                            *t = preview;
                        }
                    }
                }
                parts
            };
            let tokens = message_tokens(e, &parts);
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
            tokens: message_tokens(e, &parts),
            parts,
        });
        Ok(out)
    }

    /// The pages pinned in the chat, read from their archives, as one system message.
    fn pinned_context(&self, inner: &crate::chat::history::SnapInner) -> Result<ViewMessage> {
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
        Ok(ViewMessage {
            print: Default::default(),
            seqs: 0..0,
            role: Role::System,
            tokens: message_tokens(&*self.chat.core().opts.estimator, &parts),
            parts,
        })
    }

    /// `out` within `budget`: the guard previews tool results of `candidates` (archived ones
    /// from their archives, so the estimate counts exactly the text sent), keeping what
    /// earlier views of the chat cut.
    fn guarded(
        &self,
        inner: &crate::chat::history::SnapInner,
        budget: &Budget,
        out: Vec<ViewMessage>,
        candidates: Vec<Candidate>,
    ) -> Result<View> {
        let core = self.chat.core();
        let factor = inner.calibration.get(&inner.meta.model).copied().unwrap_or(1.0);
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
        let kept = std::mem::take(&mut self.chat.state.view.cut.lock().previewed);
        let (view, kept) = guard(
            &*core.opts.estimator,
            budget,
            out,
            candidates,
            factor,
            &kept,
            &mut preview_text,
            &mut reshrink,
        )?;
        self.chat.state.view.cut.lock().previewed = kept;
        Ok(view)
    }

    /// Whether checkpoint `p` still stands for messages `0..reach` at the snapshot's revision:
    /// none of them was hidden or changed (edited, or truncated and written again) since its
    /// base revision. The changes are read from the index's revisions, not from an entry of
    /// every message it covers, and the answer is kept for the revision (appends do not
    /// change it).
    pub(super) fn checkpoint_holds(
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
        if let Some((k, holds)) = *state.view.checkpoint_holds.lock()
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
        *state.view.checkpoint_holds.lock() = Some((key, !changed));
        Ok(!changed)
    }

    /// The messages before `reach` that a view keeps whole although a checkpoint covers
    /// them: the chat's leading system messages, and the turn-opening user messages of the
    /// first user turn (the loop's task) and of the last two user turns. Found through the snapshot's entries (the turn of an
    /// entry never decreases with its seq), so the cost is in what is kept, not in the
    /// chat's length.
    pub(super) fn kept_instructions(
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
        // message, and has none): searched from the end it is near (the task from the start,
        // the last turns from the end), so the entries read are a few pages at that end.
        let first_of = |t: u64, from_end: bool| -> Result<u64> {
            first_where(inner.len, from_end, |i| Ok(entry(i)?.is_some_and(|e| e.turn >= t)))
        };
        let mut task = Vec::new();
        // The loop's task (the message opening the first user turn) and the last two turns'
        // openers: harness feedback arriving as user messages must not evict the task.
        let mut turns = vec![1];
        turns.extend((last_turn.saturating_sub(1).max(2))..=last_turn);
        for t in turns.into_iter().filter(|&t| t <= last_turn) {
            let s = first_of(t, t != 1)?;
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
    pub(super) fn view_from_memo(
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
}

/// The first index in `0..len` where `holds` (`len` if none), for a predicate false then true
/// along the indexes: a gallop from the end `from_end` names (probes 1, 2, 4, … away from it),
/// then a binary search between the last two probes. Its probes stay within twice the
/// answer's distance from that end, where a binary search over `0..len` probes across all of
/// it (each probe of a chat's entries may load a page from the index).
fn first_where(len: u64, from_end: bool, holds: impl Fn(u64) -> Result<bool>) -> Result<u64> {
    // Invariant: `holds` is false below `lo` and true from `hi` on.
    let (mut lo, mut hi) = (0u64, len);
    let mut step = 1u64;
    if from_end {
        while lo < hi {
            let p = hi.saturating_sub(step).max(lo);
            if !holds(p)? {
                lo = p + 1;
                break;
            }
            hi = p;
            step = step.saturating_mul(2);
        }
    } else {
        while lo < hi {
            let p = lo.saturating_add(step - 1).min(hi - 1);
            if holds(p)? {
                hi = p;
                break;
            }
            lo = p + 1;
            step = step.saturating_mul(2);
        }
    }
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if holds(mid)? {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(lo)
}

#[cfg(test)]
mod tests {
    use super::first_where;
    use std::cell::RefCell;

    #[test]
    fn the_gallop_finds_what_a_binary_search_finds_and_probes_near_its_end() {
        for len in 0..70u64 {
            for answer in 0..=len {
                for from_end in [false, true] {
                    let probes = RefCell::new(Vec::new());
                    let found = first_where(len, from_end, |i| {
                        assert!(i < len, "probe {i} outside 0..{len}");
                        probes.borrow_mut().push(i);
                        Ok(i >= answer)
                    })
                    .unwrap();
                    assert_eq!(found, answer, "len {len}, from_end {from_end}");
                    let distance = if from_end { len - answer } else { answer };
                    let nearest_end = |i: u64| if from_end { len - i } else { i + 1 };
                    for &p in probes.borrow().iter() {
                        assert!(
                            nearest_end(p) <= 2 * distance + 2,
                            "len {len}, answer {answer}, from_end {from_end}: probe {p} in {:?}",
                            probes.borrow()
                        );
                    }
                }
            }
        }
    }
}
