//! Usage: a view's estimate, the provider's reported input tokens calibrating it, and the
//! smallest view the protected tail allows.

use std::sync::Arc;

use super::ChatView;
use crate::base::error::{Error, Result};
use crate::chat::history::{now_ms, tokens_kept};
use crate::disk::record::{self, Kind, UsageRec};
use crate::kernel::store::core::{RecordOut, Txn};
use crate::rules::budget::Budget;
use crate::rules::budget::tail;
use crate::rules::budget::view::message_tokens;

impl ChatView<'_> {
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
        let Some((raw, model)) = self
            .chat
            .state
            .view
            .recent
            .lock()
            .iter()
            .find(|(s, ..)| *s == step)
            .map(|(_, r, m)| (*r, m.clone()))
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
        txn.push(RecordOut::of_chat(Kind::Usage, rec.chat, record::encode(&rec)?.into_vec()));
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
}
