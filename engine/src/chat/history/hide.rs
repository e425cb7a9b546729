//! Soft deletion: hiding messages of a chat (a new revision), alone or with an append in the
//! same transaction.
//!
//! A hide is a `revision` record (not a truncation; the length stays) and a `hide` record
//! naming the ranges of seqs, in one batch. The messages' records stay in the log: reads
//! that ask for hidden messages still get them, and archives they reference keep their
//! owners' grants. Views, checkpoints and the default reads of a snapshot skip them.

use std::ops::Range;
use std::sync::Arc;

use super::chat::ChatRef;
use super::hidden::Hidden;
use super::state::Writer;
use crate::base::error::{Error, Result};
use crate::disk::record::{self, HideRec, Kind, RevRec};
use crate::kernel::store::core::{RecordOut, Txn};
use crate::model::message::{NewMessage, Part};
use crate::rules::budget::tail::is_cut_point;

/// What a hide adds to a write: its ranges, the revision the caller read, and whether the
/// hide is an erasure.
pub(super) type HideArgs<'a> = (&'a [Range<u64>], u64, Erase);

/// Whether a hide also erases (see `Chat::erase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Erase {
    /// A soft deletion: the records stay.
    No,
    /// An erasure: hidden now, and `gc` drops the bytes.
    Yes,
}

impl ChatRef<'_> {
    /// The work of `Chat::hide` (documented there).
    pub(crate) fn hide(&self, ranges: &[Range<u64>], expected_revision: u64) -> Result<u64> {
        self.append_hiding(Vec::new(), (ranges, expected_revision, Erase::No)).map(|(rev, _)| rev)
    }

    /// The work of `Chat::erase` (documented there).
    pub(crate) fn erase(&self, ranges: &[Range<u64>], expected_revision: u64) -> Result<u64> {
        self.append_hiding(Vec::new(), (ranges, expected_revision, Erase::Yes)).map(|(rev, _)| rev)
    }

    /// The work of `Chat::hide_and_append` (documented there).
    pub(crate) fn hide_and_append(
        &self,
        ranges: &[Range<u64>],
        messages: Vec<NewMessage>,
        expected_revision: u64,
    ) -> Result<(u64, Range<u64>)> {
        self.append_hiding(messages, (ranges, expected_revision, Erase::No))
    }

    /// Under the writer lock `w`: checks a hide (the revision, the ranges, the pairing rule)
    /// and pushes its `revision` and `hide` records into `txn`. Returns the new revision and
    /// the hidden set after it.
    pub(super) fn hide_records(
        &self,
        w: &Writer,
        (ranges, expected, erase): HideArgs<'_>,
        txn: &mut Txn,
        now: u64,
    ) -> Result<(u64, Hidden)> {
        if w.revision != expected {
            return Err(Error::StaleRevision { expected, found: w.revision });
        }
        if ranges.is_empty() {
            return Err(Error::InvalidArgument(
                "hide: expected at least one range of seqs, found none".into(),
            ));
        }
        for r in ranges {
            if r.start >= r.end {
                return Err(Error::InvalidArgument(format!(
                    "hide {}..{}: expected a non-empty range (start < end)",
                    r.start, r.end
                )));
            }
            if r.end > w.len {
                return Err(Error::InvalidArgument(format!(
                    "hide {}..{}: the chat has {} messages",
                    r.start, r.end, w.len
                )));
            }
        }
        let revision = w.revision + 1;
        let mut hidden = (*w.hidden).clone();
        hidden.add(ranges.iter().cloned(), revision);
        self.check_pairs(ranges, &w.hidden, &hidden)?;
        if erase == Erase::Yes {
            hidden.add_erased(ranges.iter().cloned(), revision);
        }
        let first = ranges.iter().map(|r| r.start).min().unwrap_or(0);
        let chat = self.id().0;
        let rev = RevRec {
            chat,
            revision,
            truncate: false,
            seq: first,
            len_before: w.len,
            len_after: w.len,
            at_ms: now,
        };
        txn.push(RecordOut::of_chat(Kind::Revision, chat, record::encode(&rev)?.into_vec()));
        let rec =
            HideRec { chat, revision, ranges: ranges.iter().map(|r| (r.start, r.end)).collect(), at_ms: now };
        let payload = record::encode(&rec)?.into_vec();
        if erase == Erase::Yes {
            txn.push(RecordOut::of_chat(Kind::Erase, chat, payload.clone()));
        }
        txn.push(RecordOut::of_chat(Kind::Hide, chat, payload));
        Ok((revision, hidden))
    }

    /// The pairing rule: a tool call and its results are hidden together or not at all. The
    /// results of a call follow it before the next cut point, so each check reads one step.
    /// Messages hidden `before` were checked when they were hidden. Runs under the writer
    /// lock, on the snapshot the lock holder last published.
    fn check_pairs(&self, ranges: &[Range<u64>], before: &Hidden, hidden: &Hidden) -> Result<()> {
        let snap = self.snapshot();
        for s in ranges.iter().flat_map(|r| r.clone()).filter(|s| !before.contains(*s)) {
            let m = snap.get(s)?;
            for p in &m.parts {
                match p {
                    Part::ToolCall { id, .. } => {
                        let mut t = s + 1;
                        while t < snap.len() {
                            let n = snap.get(t)?;
                            if is_cut_point(&n) {
                                break;
                            }
                            let answers = n
                                .parts
                                .iter()
                                .any(|q| matches!(q, Part::ToolResult { call_id, .. } if call_id == id));
                            if answers && !hidden.contains(t) {
                                return Err(unpaired(s, t, id, "call", "result"));
                            }
                            t += 1;
                        }
                    }
                    Part::ToolResult { call_id, .. } => {
                        let mut t = s;
                        while t > 0 {
                            t -= 1;
                            let n = snap.get(t)?;
                            let calls = n
                                .parts
                                .iter()
                                .any(|q| matches!(q, Part::ToolCall { id, .. } if id == call_id));
                            if calls {
                                if !hidden.contains(t) {
                                    return Err(unpaired(s, t, call_id, "result", "call"));
                                }
                                break;
                            }
                            if is_cut_point(&n) {
                                break;
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

fn unpaired(s: u64, t: u64, id: &str, this: &str, other: &str) -> Error {
    let (a, b) = if s < t { (s, t + 1) } else { (t, s + 1) };
    Error::InvalidArgument(format!(
        "hide: message {s} holds the {this} of tool call {id:?}, whose {other} is message {t}, \
         which would stay visible; hide both (e.g. {a}..{b}) or neither"
    ))
}

/// The hidden set a write leaves: `after` when it hid messages.
pub(super) fn hidden_after(w: &Writer, after: Option<Hidden>) -> Arc<Hidden> {
    after.map_or_else(|| w.hidden.clone(), Arc::new)
}
