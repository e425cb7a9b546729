//! The view memo: the last view a chat built, kept so that the next `Chat::view` after
//! appends costs the new messages, not the whole history.
//!
//! A harness calls `view` once per model call, after appending the last step's messages.
//! When nothing but appends happened since the memo was made (same revision, checkpoint,
//! compaction records, pins, calibration, budget) and the memo's view fit under the soft
//! line, the new view is the memo's messages plus the appended ones, as long as the total
//! still fits; otherwise the view is built from scratch. The memo holds the `Arc`s of the
//! state it was built from, so `Arc::ptr_eq` identifies them without aliasing.

use std::collections::HashMap;
use std::sync::Arc;

use super::state::{Published, SnapInner};
use crate::disk::record::CompactionRec;
use crate::model::message::{ChatMeta, Pin};
use crate::rules::budget::Budget;
use crate::rules::budget::view::{Decision, ViewMessage};

/// The last view of a chat and what it was built from.
#[derive(Debug)]
pub(crate) struct ViewMemo {
    revision: u64,
    /// Messages `0..len` are in the view.
    pub len: u64,
    meta: Arc<ChatMeta>,
    pins: Arc<Vec<Pin>>,
    compactions: Arc<Vec<CompactionRec>>,
    calibration: Arc<HashMap<String, f64>>,
    checkpoint: Option<Arc<Published>>,
    budget: Budget,
    /// True when appended messages can only land at the end of the view (no pinned page
    /// still waits for the first non-system message).
    pub appendable: bool,
    pub messages: Arc<Vec<ViewMessage>>,
    pub decision: Decision,
    pub estimate: u64,
    pub raw_estimate: u64,
    /// Raw tokens the view's previews save (the estimate before them is `raw_estimate +
    /// raw_saved`).
    pub raw_saved: u64,
    pub factor: f64,
}

fn same<T>(a: &Option<Arc<T>>, b: &Option<Arc<T>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

impl ViewMemo {
    /// A memo of a view built from `inner` under `budget`.
    #[expect(
        clippy::too_many_arguments,
        reason = "one memo field per view output; a struct would only rename them"
    )]
    pub(crate) fn new(
        inner: &SnapInner,
        budget: &Budget,
        appendable: bool,
        messages: Arc<Vec<ViewMessage>>,
        decision: Decision,
        estimate: u64,
        raw_estimate: u64,
        factor: f64,
    ) -> ViewMemo {
        ViewMemo {
            revision: inner.revision,
            len: inner.len,
            meta: inner.meta.clone(),
            pins: inner.pins.clone(),
            compactions: inner.compactions.clone(),
            calibration: inner.calibration.clone(),
            checkpoint: inner.checkpoint.clone(),
            budget: budget.clone(),
            appendable,
            messages,
            decision,
            estimate,
            raw_estimate,
            raw_saved: 0,
            factor,
        }
    }

    /// True when the state the memo was built from is `inner`'s, up to appends.
    pub(crate) fn covers(&self, inner: &SnapInner, budget: &Budget) -> bool {
        self.revision == inner.revision
            && self.len <= inner.len
            && Arc::ptr_eq(&self.meta, &inner.meta)
            && Arc::ptr_eq(&self.pins, &inner.pins)
            && Arc::ptr_eq(&self.compactions, &inner.compactions)
            && Arc::ptr_eq(&self.calibration, &inner.calibration)
            && same(&self.checkpoint, &inner.checkpoint)
            && self.budget == *budget
    }
}

/// What earlier views of a chat cut, so the next view keeps it: the tool results the guard
/// previewed (by seq and part). Providers cache the unchanged prefix of a request; a preview
/// made at one view and undone at the next would break it twice. A result previewed once
/// stays previewed in every later view while it is a candidate (see `budget::view::guard`).
#[derive(Debug, Default)]
pub(crate) struct CutMemo {
    /// (seq, part) of every result previewed by an earlier view.
    pub previewed: std::collections::BTreeSet<(u64, usize)>,
}

/// The request the chat's previous view served, to tell how much of the next one is an
/// exact prefix of it (what a provider's prompt cache keeps). Its messages are shared with
/// the view (and mostly with the view memo); their fingerprints are made when a next view
/// compares with them, so a view that no other follows (a process's only one) makes none.
#[derive(Debug, Default)]
pub(crate) struct LastRequest {
    /// The previous request's messages.
    pub messages: std::sync::Arc<Vec<crate::rules::budget::ViewMessage>>,
}
