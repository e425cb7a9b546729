//! [`View`]: the model view of a chat under a [`Budget`], and the guard that keeps it there.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use super::Budget;
use crate::estimate::Estimator;
pub(crate) use crate::estimate::message_tokens;
use crate::model::{ArchiveRef, Message, Part, Role, ToolContent};

/// One message of the view: original messages, or a condensed stand-in for a range.
#[derive(Debug, Clone, PartialEq)]
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
}

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
pub(crate) fn guard(
    e: &dyn Estimator,
    budget: &Budget,
    mut messages: Vec<ViewMessage>,
    candidates: Vec<Candidate>,
    factor: f64,
    preview_text: &mut dyn FnMut(&str) -> ToolContent,
    reshrink: &mut dyn FnMut(&ArchiveRef) -> crate::Result<String>,
) -> crate::Result<View> {
    let schema_tokens: u64 = budget.tool_schemas.iter().map(|s| e.text_tokens(s)).sum();
    let raw = |msgs: &[ViewMessage]| msgs.iter().map(|m| m.tokens).sum::<u64>() + schema_tokens;
    let cal = |r: u64| (r as f64 * factor).ceil() as u64;
    let raw0 = raw(&messages);
    let before = cal(raw0);
    let mut previewed = Vec::new();
    let mut total_raw = raw0;
    if before > budget.soft_limit() {
        // Settled results, oldest first, until the target; then, only if that leaves the
        // view over the hard line, results of the protected tail before its last step
        // (oldest first), just until the hard line: a view is refused only when the
        // protected minimum and what cannot be previewed are over it.
        let (settled, tail): (Vec<Candidate>, Vec<Candidate>) = candidates.into_iter().partition(|c| !c.tail);
        for (tier, line) in [(settled, budget.target_limit()), (tail, budget.hard_limit())] {
            for c in tier {
                if cal(total_raw) <= line {
                    break;
                }
                let m = &mut messages[c.at];
                let Part::ToolResult { content, .. } = &mut m.parts[c.part] else { continue };
                let cell = c.memo.as_ref().and_then(|m| m.get(c.part));
                let made = match cell.and_then(OnceLock::get) {
                    Some(p) => p.clone(),
                    None => {
                        let made = preview_part(e, content, preview_text, reshrink)?;
                        if let Some(cell) = cell {
                            let _ = cell.set(made.clone());
                        }
                        made
                    }
                };
                let (old_t, new_t) = (made.old_tokens, made.new_tokens);
                if new_t >= old_t {
                    continue;
                }
                *content = made.content;
                m.tokens = m.tokens - old_t + new_t;
                total_raw = total_raw - old_t + new_t;
                previewed.push(c.seq);
            }
        }
    }
    let estimate = cal(total_raw);
    let decision = if estimate > budget.hard_limit() {
        Decision::Refused { estimate, limit: budget.hard_limit(), over_by: estimate - budget.hard_limit() }
    } else if before > budget.soft_limit() {
        Decision::Compacted { previewed, tokens_saved: before - estimate }
    } else {
        Decision::Fits
    };
    Ok(View {
        messages: Arc::new(messages),
        decision,
        estimate,
        raw_estimate: total_raw,
        step: 0,
        revision: 0,
        factor,
        swap: None,
        nudge: None,
    })
}
