//! [`View`]: the model view of a chat under a [`Budget`], and the guard that keeps it there.

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use super::Budget;
use crate::model::estimate::Estimator;
pub(crate) use crate::model::estimate::message_tokens;
use crate::model::message::{ArchiveRef, Message, Part, Role, ToolContent};

/// One message of the view: original messages, or a condensed stand-in for a range.
#[derive(Clone)]
pub struct ViewMessage {
    /// The original messages it stands for (one seq, or a squished range; empty for
    /// pinned context, which is not a message of the chat).
    pub seqs: Range<u64>,
    /// Its role.
    pub role: Role,
    /// Its parts as the model will see them.
    pub parts: Vec<Part>,
    /// Estimated tokens (uncalibrated), overhead included.
    pub tokens: u64,
    /// Its fingerprint, made on first use (see [`ViewMessage::print`]).
    pub(crate) print: OnceLock<u64>,
}

impl ViewMessage {
    /// A fingerprint of the message as sent (seqs, role, parts, tokens): equal messages
    /// have equal fingerprints, different ones differ but with odds of about 2^-64. Made once
    /// and kept with the message, so a view extended from the memo fingerprints only its new
    /// messages when its stable prefix is measured.
    pub(crate) fn print(&self) -> u64 {
        *self.print.get_or_init(|| {
            use std::hash::{Hash, Hasher};
            let mut h = std::hash::DefaultHasher::new();
            (&self.seqs, self.role, &self.parts, self.tokens).hash(&mut h);
            h.finish()
        })
    }
}

impl std::fmt::Debug for ViewMessage {
    /// What is sent (the cached fingerprint, made or not, is not shown: equal messages print
    /// alike).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViewMessage")
            .field("seqs", &self.seqs)
            .field("role", &self.role)
            .field("parts", &self.parts)
            .field("tokens", &self.tokens)
            .finish()
    }
}

impl PartialEq for ViewMessage {
    /// Equal when what is sent is equal (the cached fingerprint is not compared).
    fn eq(&self, other: &Self) -> bool {
        self.seqs == other.seqs
            && self.role == other.role
            && self.tokens == other.tokens
            && self.parts == other.parts
    }
}

impl Eq for ViewMessage {}

/// What the guard did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// At or under the soft line: sent as is.
    Fits,
    /// Over the soft line: these tool results became previews (oldest first) until the
    /// estimate was at or under the target, or nothing more could be previewed. `previewed`
    /// is empty when everything over the soft line is protected (the protected tail,
    /// pinned archives): the view is sent as is, and the harness learns it is past the soft
    /// line (time to prepare a checkpoint).
    Compacted {
        /// Seqs of the previewed tool results.
        previewed: Vec<u64>,
        /// Tokens saved (calibrated).
        tokens_saved: u64,
    },
    /// Still over the hard line after compaction: do not send. The view's messages carry
    /// the previews made before refusing.
    Refused {
        /// The estimate (calibrated).
        estimate: u64,
        /// The hard line, in tokens.
        limit: u64,
        /// `estimate − limit`.
        over_by: u64,
    },
}

/// The model view of a chat: deterministic for a given state and budget.
#[derive(Debug, Clone)]
pub struct View {
    /// Shared with the chat's view memo: a view unchanged since the last call, or only
    /// extended by appends, is not rebuilt (see `Chat::view`).
    pub(crate) messages: Arc<Vec<ViewMessage>>,
    pub(crate) decision: Decision,
    pub(crate) estimate: u64,
    pub(crate) raw_estimate: u64,
    pub(crate) step: u64,
    pub(crate) revision: u64,
    pub(crate) factor: f64,
    pub(crate) swap: Option<std::time::Duration>,
    pub(crate) nudge: Option<String>,
    /// Seqs of the tool results sent as the guard's previews (whatever the decision).
    pub(crate) previewed: Vec<u64>,
    /// The exact prefix shared with the previous request (see [`View::stable_prefix_messages`]).
    pub(crate) stable: Stable,
    /// What the view leaves out (see [`View::omitted`]).
    pub(crate) omitted: Omitted,
    /// Raw (uncalibrated) tokens the previews save: the estimate before the guard is
    /// `raw_estimate + raw_saved`.
    pub(crate) raw_saved: u64,
    /// A cut was due: with what earlier views cut, the estimate was over the soft line (the
    /// moment to swap a prepared checkpoint in, too).
    pub(crate) due: bool,
}

/// What a view leaves out of the chat's history, with the handles that read it back: for a
/// harness to show "what was dropped", and for the model ([`Omitted::note`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Omitted {
    /// Seq ranges sent only as a summary (under a checkpoint or a squish), the messages kept
    /// verbatim beside it (system messages, the task) excepted; readable with
    /// `read_messages` (or [`Chat::range`](crate::Chat::range)).
    pub ranges: Vec<Range<u64>>,
    /// Tool results sent as previews, not whole: (seq, the archive id `read_context` reads
    /// it back by).
    pub results: Vec<(u64, crate::base::blob::BlobId)>,
    /// Estimated tokens left out (calibrated): what the previews save, plus the estimates
    /// of the summarized messages known to this process (at least that many).
    pub tokens: u64,
}

impl Omitted {
    /// True when the view sends every message whole.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty() && self.results.is_empty()
    }

    /// One line for the model saying what is left out and how to read it back (empty when
    /// nothing is): the ranges and how many results are previews, with the tools' names.
    ///
    /// ```
    /// use undertext::Omitted;
    /// let o = Omitted { ranges: vec![0..40], results: vec![], tokens: 9_000 };
    /// assert!(o.note().contains("messages 0..40"));
    /// assert!(Omitted::default().note().is_empty());
    /// ```
    pub fn note(&self) -> String {
        if self.is_empty() {
            return String::new();
        }
        let ranges: Vec<String> = self.ranges.iter().map(|r| format!("{}..{}", r.start, r.end)).collect();
        let mut s = format!("[left out of this context: about {} tokens", self.tokens);
        if !ranges.is_empty() {
            s.push_str(&format!("; messages {} as summaries (read_messages reads them)", ranges.join(", ")));
        }
        if !self.results.is_empty() {
            s.push_str(&format!(
                "; {} tool results as previews (read_context with the archive id each names)",
                self.results.len()
            ));
        }
        s.push(']');
        s
    }
}

/// How much of a view is an exact prefix of the previous request served for the chat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Stable {
    pub messages: usize,
    pub tokens: u64,
}

impl View {
    /// What the guard decided.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The messages to send.
    pub fn messages(&self) -> &[ViewMessage] {
        &self.messages
    }

    /// Estimated input tokens, calibration applied.
    pub fn estimate(&self) -> u64 {
        self.estimate
    }

    /// The estimate before calibration.
    pub fn raw_estimate(&self) -> u64 {
        self.raw_estimate
    }

    /// The calibration factor applied.
    pub fn calibration(&self) -> f64 {
        self.factor
    }

    /// The id to give [`Chat::report_usage`](crate::Chat::report_usage) when the model
    /// answers with its real input token count.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// When building this view published the worker's prepared checkpoint (the swap at the
    /// hard line), how long that took.
    pub fn swap(&self) -> Option<std::time::Duration> {
        self.swap
    }

    /// The chat revision the view was built from.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Over the budget's nudge line ([`Budget::nudge`]): a harness message to send as the
    /// last user message, asking the model to compact its history with the compaction tool
    /// (it holds the chat's index). `None` under the line or with no nudge line.
    pub fn nudge(&self) -> Option<&str> {
        self.nudge.as_deref()
    }

    /// Seqs of the tool results this view sends as previews (older results the guard cut, in
    /// this view or an earlier one it keeps), whatever the [`Decision`] — a refused view
    /// carries them too.
    pub fn previewed(&self) -> &[u64] {
        &self.previewed
    }

    /// How many leading messages of this view are exactly the leading messages of the
    /// previous view served for the chat (whole messages: role, parts and the seqs they
    /// stand for). A provider's prompt cache keeps the longest unchanged prefix of a request
    /// and bills it at about a tenth of the input price; everything after it is read again.
    /// Between cuts a view extends the previous one, so this is the previous view's length;
    /// a cut (a new preview, a checkpoint swapped in) shortens it to the first message it
    /// changed. 0 for a chat's first view in this process.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// # let chat = store.chat("a", store.create_chat("a", Default::default())?)?;
    /// use undertext::{Budget, NewMessage};
    /// let budget = Budget::new(32_000, 4_000);
    /// chat.append(NewMessage::user("fix the build"))?;
    /// let first = chat.view(&budget)?;
    /// assert_eq!(first.stable_prefix_messages(), 0);
    /// chat.append(NewMessage::assistant("on it"))?;
    /// let second = chat.view(&budget)?;
    /// assert_eq!(second.stable_prefix_messages(), 1); // the task, sent before: cached
    /// assert_eq!(second.stable_prefix_tokens() + second.reread_tokens(), second.estimate());
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn stable_prefix_messages(&self) -> usize {
        self.stable.messages
    }

    /// Estimated tokens (calibrated) of the stable prefix ([`View::stable_prefix_messages`]):
    /// what a provider can read from its cache.
    pub fn stable_prefix_tokens(&self) -> u64 {
        self.stable.tokens
    }

    /// What the view leaves out of the chat's history (summarized ranges, previewed results
    /// with their archive ids, tokens), with the handles that read it back.
    pub fn omitted(&self) -> &Omitted {
        &self.omitted
    }

    /// Estimated tokens (calibrated) the provider must read in full: the view's estimate
    /// minus its stable prefix.
    pub fn reread_tokens(&self) -> u64 {
        self.estimate.saturating_sub(self.stable.tokens)
    }
}

/// The first 60 characters of a message's text, on one line.
pub(crate) fn preview60(m: &Message) -> String {
    let mut s = String::new();
    for p in &m.parts {
        let t = match p {
            Part::Text(t) | Part::Summary(t) => t.as_str(),
            Part::ToolCall { name, .. } => name.as_str(),
            Part::ToolResult { content: ToolContent::Text(t), .. } => t.as_str(),
            Part::ToolResult { content: ToolContent::Archived { preview, .. }, .. } => preview.as_str(),
            Part::ApprovalRequest { prompt, .. } => prompt.as_str(),
            _ => "",
        };
        if !s.is_empty() && !t.is_empty() {
            s.push(' ');
        }
        s.push_str(t);
        if s.chars().count() >= 60 {
            break;
        }
    }
    s.chars().map(|c| if c.is_control() { ' ' } else { c }).take(60).collect()
}

/// A candidate for previewing: (index in view messages, index of the part).
pub(crate) struct Candidate {
    pub at: usize,
    pub part: usize,
    pub seq: u64,
    /// In the protected tail (before its last step): previewed only to avoid a refusal.
    pub tail: bool,
    /// Where the guard keeps this part's preview once made (the message's history entry:
    /// see [`PreviewMemo`]); `None`: made again at every view.
    pub memo: Option<Arc<[OnceLock<Previewed>]>>,
}

/// The guard's preview of one tool result of a stored message, with the estimated tokens of
/// the result's text before and after: a function of the message's content and the store's
/// options (estimator, guard preview size, marker) alone, so it is made once per message and
/// reused by every later view until the message changes (an edit makes a new history entry,
/// with an empty memo).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Previewed {
    /// The preview sent in place of the result.
    pub content: ToolContent,
    /// Tokens of the result's text as stored (inline text, or the archived result's preview).
    pub old_tokens: u64,
    /// Tokens of the preview's text.
    pub new_tokens: u64,
}

/// Per message: one cell per part for its guard preview, made on the first view that
/// previews one of its results. Kept in the message's history entry.
pub(crate) type PreviewMemo = OnceLock<Arc<[OnceLock<Previewed>]>>;

/// The cells of `memo` for a message of `parts` parts.
pub(crate) fn preview_cells(memo: &PreviewMemo, parts: usize) -> Arc<[OnceLock<Previewed>]> {
    memo.get_or_init(|| (0..parts).map(|_| OnceLock::new()).collect()).clone()
}

/// The guard's preview of a tool result's `content` and the tokens of its text before and
/// after (see [`Previewed`]).
fn preview_part(
    e: &dyn Estimator,
    content: &ToolContent,
    preview_text: &mut dyn FnMut(&str) -> ToolContent,
    reshrink: &mut dyn FnMut(&ArchiveRef) -> crate::Result<String>,
) -> crate::Result<Previewed> {
    let new = match content {
        ToolContent::Text(t) => preview_text(t),
        ToolContent::Archived { archive, .. } => {
            // Already archived: its preview is rebuilt at guard size from the archive.
            let preview = reshrink(archive)?;
            ToolContent::Archived { archive: *archive, preview }
        }
    };
    let text_of = |c: &ToolContent| match c {
        ToolContent::Text(t) => e.text_tokens(t),
        ToolContent::Archived { preview, .. } => e.text_tokens(preview),
    };
    Ok(Previewed { old_tokens: text_of(content), new_tokens: text_of(&new), content: new })
}

/// Applies the guard to `messages` (already with compaction records and pins applied).
/// `preview_text` gives the guard-size preview of an inline result (as an archived content
/// naming the text by its content address, readable without an archive written), `reshrink` that of an already archived
/// result (built from its archive), so every estimate counts exactly the text that is sent.
///
/// The guard is cache-aware. `kept` lists the results (seq, part) earlier views previewed:
/// each one still a settled candidate is previewed again first, so between cuts a view extends the
/// previous one and the provider's cached prefix holds. Only when that leaves the estimate
/// over the soft line does it cut, and then everything due at once: settled results, oldest
/// first, down to the target (and, only if still over the hard line, results of the
/// protected tail before its last step, just until the hard line) — one break of the cache
/// per crossing, not one per step. Under the hard line, a cut saving less than
/// [`Budget::min_cut`] is not made (it would cost more than it saves); the view then goes over
/// the soft line as it is. Returns the view and the results previewed in it (the next view's
/// `kept`).
#[expect(clippy::too_many_arguments, reason = "the guard's inputs; a struct would only rename them")]
pub(crate) fn guard(
    e: &dyn Estimator,
    budget: &Budget,
    mut messages: Vec<ViewMessage>,
    candidates: Vec<Candidate>,
    factor: f64,
    kept: &BTreeSet<(u64, usize)>,
    preview_text: &mut dyn FnMut(&str) -> ToolContent,
    reshrink: &mut dyn FnMut(&ArchiveRef) -> crate::Result<String>,
) -> crate::Result<(View, BTreeSet<(u64, usize)>)> {
    let schema_tokens: u64 = budget.tool_schemas.iter().map(|s| e.text_tokens(s)).sum();
    let raw = |msgs: &[ViewMessage]| msgs.iter().map(|m| m.tokens).sum::<u64>() + schema_tokens;
    let cal = |r: u64| (r as f64 * factor).ceil() as u64;
    let raw0 = raw(&messages);
    let before = cal(raw0);
    let mut total_raw = raw0;
    let mut made: Vec<Option<Previewed>> = (0..candidates.len()).map(|_| None).collect();
    // The preview of candidate `k` (made once, then from the message's memo cell); `None`
    // when it would not save anything.
    let mut preview_of = |k: usize, messages: &[ViewMessage]| -> crate::Result<Option<Previewed>> {
        let c = &candidates[k];
        let Part::ToolResult { content, .. } = &messages[c.at].parts[c.part] else { return Ok(None) };
        let cell = c.memo.as_ref().and_then(|m| m.get(c.part));
        let p = match cell.and_then(OnceLock::get) {
            Some(p) => p.clone(),
            None => {
                let p = preview_part(e, content, preview_text, reshrink)?;
                if let Some(cell) = cell {
                    let _ = cell.set(p.clone());
                }
                p
            }
        };
        Ok((p.new_tokens < p.old_tokens).then_some(p))
    };
    // 1. What earlier views cut stays cut — settled results only: the protected tail is
    //    previewed only as a last resort, decided again at every view.
    for k in 0..candidates.len() {
        let c = &candidates[k];
        if !c.tail
            && kept.contains(&(c.seq, c.part))
            && let Some(p) = preview_of(k, &messages)?
        {
            total_raw = total_raw - p.old_tokens + p.new_tokens;
            made[k] = Some(p);
        }
    }
    // 2. A new cut, when the soft line is crossed: everything due at once.
    let kept_est = cal(total_raw);
    if kept_est > budget.soft_limit() {
        let mut cut_raw = total_raw;
        let mut cut = Vec::new();
        let (settled, tail): (Vec<usize>, Vec<usize>) =
            (0..candidates.len()).filter(|&k| made[k].is_none()).partition(|&k| !candidates[k].tail);
        for (tier, line) in [(settled, budget.target_limit()), (tail, budget.hard_limit())] {
            for k in tier {
                if cal(cut_raw) <= line {
                    break;
                }
                if let Some(p) = preview_of(k, &messages)? {
                    cut_raw = cut_raw - p.old_tokens + p.new_tokens;
                    cut.push((k, p));
                }
            }
        }
        let saves = kept_est.saturating_sub(cal(cut_raw));
        if kept_est > budget.hard_limit() || saves >= budget.min_cut() {
            total_raw = cut_raw;
            for (k, p) in cut {
                made[k] = Some(p);
            }
        }
    }
    let mut previewed = Vec::new();
    let mut now_kept = BTreeSet::new();
    for (c, p) in candidates.iter().zip(made) {
        let Some(p) = p else { continue };
        let m = &mut messages[c.at];
        if let Part::ToolResult { content, .. } = &mut m.parts[c.part] {
            *content = p.content;
            m.tokens = m.tokens - p.old_tokens + p.new_tokens;
            m.print = OnceLock::new();
            now_kept.insert((c.seq, c.part));
            if previewed.last() != Some(&c.seq) {
                previewed.push(c.seq);
            }
        }
    }
    let estimate = cal(total_raw);
    let decision = if estimate > budget.hard_limit() {
        Decision::Refused { estimate, limit: budget.hard_limit(), over_by: estimate - budget.hard_limit() }
    } else if before > budget.soft_limit() {
        Decision::Compacted { previewed: previewed.clone(), tokens_saved: before - estimate }
    } else {
        Decision::Fits
    };
    let view = View {
        messages: Arc::new(messages),
        decision,
        estimate,
        raw_estimate: total_raw,
        step: 0,
        revision: 0,
        factor,
        swap: None,
        nudge: None,
        previewed,
        stable: Stable::default(),
        due: kept_est > budget.soft_limit(),
        omitted: Omitted::default(),
        raw_saved: raw0 - total_raw,
    };
    Ok((view, now_kept))
}
