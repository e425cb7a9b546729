//! The adaptive start line: when the worker starts preparing a checkpoint, from what it has
//! measured. A pure decision, like the publication guard.
//!
//! A job must be done before the view that crosses the hard line. That view comes after
//! `headroom / growth` model steps (headroom: the tokens left under the hard line; growth:
//! what the chat grows per view), each taking the time between views; the job takes its
//! summarizer calls in sequence times the time of one call. So the job starts once
//! `headroom / growth × step < job × margin + step` — the extra step because a view is only
//! taken between steps — and never later than the fixed soft line.

use std::time::{Duration, Instant};

/// What the worker has seen of a chat and of its summarizer, for [`start_line`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outlook {
    /// Estimated tokens the chat grows per view (a model step), on average.
    pub growth_per_step: f64,
    /// The time between views (a model step), on average.
    pub step: Duration,
    /// The expected time of a job: summarizer calls in sequence per job × time per call.
    pub job: Duration,
}

/// The estimate (in tokens, as the view's lines) past which a job starts: the fixed
/// `soft_line`, or earlier when `outlook` says a job started there would not be done before
/// the view that crosses `hard_line`. `margin` (≥ 1) multiplies the expected job time.
/// Without an outlook (nothing measured yet), the soft line.
///
/// ```
/// use std::time::Duration;
/// use undertext::{Outlook};
/// use undertext::internals::{start_line};
/// // 300 tokens a step, a step a second, a job of 9 calls of 2 s: 18 s, 27 with a 1.5
/// // margin, so the job starts 28 steps (8,400 tokens) before the hard line.
/// let o = Outlook { growth_per_step: 300.0, step: Duration::from_secs(1), job: Duration::from_secs(18) };
/// assert_eq!(start_line(18_000, 25_000, Some(&o), 1.5), 25_000 - 8_400);
/// // A fast summarizer: the fixed soft line.
/// let fast = Outlook { job: Duration::from_millis(50), ..o };
/// assert_eq!(start_line(18_000, 25_000, Some(&fast), 1.5), 18_000);
/// ```
pub fn start_line(soft_line: u64, hard_line: u64, outlook: Option<&Outlook>, margin: f64) -> u64 {
    let Some(o) = outlook else { return soft_line };
    let step = o.step.as_secs_f64();
    if !(o.growth_per_step > 0.0 && o.growth_per_step.is_finite() && step > 0.0) {
        return soft_line;
    }
    let steps = o.job.as_secs_f64() * margin.max(1.0) / step + 1.0;
    let lead = o.growth_per_step * steps;
    let line = if lead.is_finite() && lead < hard_line as f64 { hard_line - lead.ceil() as u64 } else { 0 };
    line.min(soft_line)
}

/// Whether a chat whose estimate is `estimate` is due for a job (see [`start_line`]).
pub fn due(estimate: u64, soft_line: u64, hard_line: u64, outlook: Option<&Outlook>, margin: f64) -> bool {
    estimate > start_line(soft_line, hard_line, outlook, margin)
}

/// A moving average (exponential, weight `ALPHA` on the newest value).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Average(Option<f64>);

impl Average {
    const ALPHA: f64 = 0.3;

    pub(crate) fn add(&mut self, x: f64) {
        self.0 = Some(match self.0 {
            None => x,
            Some(a) => a + (x - a) * Self::ALPHA,
        });
    }

    pub(crate) fn get(&self) -> Option<f64> {
        self.0
    }
}

/// A chat's growth as its views see it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Growth {
    /// The last view that moved the estimate: when, and its estimate.
    last: Option<(Instant, u64)>,
    /// Tokens per step.
    per_step: Average,
    /// Seconds per step.
    step: Average,
}

impl Growth {
    /// A view at `now` found the estimate at `estimate`. A view that finds it unchanged (a
    /// view taken again, no message since) is not a step: the next growth spans both. One
    /// that finds it lower (a swap, an edit) starts over from there.
    pub(crate) fn observe(&mut self, estimate: u64, now: Instant) {
        match self.last {
            Some((_, e)) if e == estimate => return,
            Some((t, e)) if estimate > e => {
                self.per_step.add((estimate - e) as f64);
                self.step.add(now.saturating_duration_since(t).as_secs_f64());
            }
            _ => {}
        }
        self.last = Some((now, estimate));
    }

    /// Tokens per step and the time of a step, once a step was seen.
    pub(crate) fn get(&self) -> Option<(f64, Duration)> {
        Some((self.per_step.get()?, Duration::try_from_secs_f64(self.step.get()?).ok()?))
    }

    /// When the chat was last seen growing (or first seen).
    pub(crate) fn seen(&self) -> Option<Instant> {
        self.last.map(|(t, _)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outlook(growth: f64, step_ms: u64, job_ms: u64) -> Outlook {
        Outlook {
            growth_per_step: growth,
            step: Duration::from_millis(step_ms),
            job: Duration::from_millis(job_ms),
        }
    }

    #[test]
    fn nothing_measured_is_the_soft_line() {
        assert_eq!(start_line(700, 900, None, 1.5), 700);
        assert!(!due(700, 700, 900, None, 1.5));
        assert!(due(701, 700, 900, None, 1.5));
        // No growth, or no time between views: nothing to plan with.
        assert_eq!(start_line(700, 900, Some(&outlook(0.0, 1_000, 9_000)), 1.5), 700);
        assert_eq!(start_line(700, 900, Some(&outlook(10.0, 0, 9_000)), 1.5), 700);
        assert_eq!(start_line(700, 900, Some(&outlook(f64::NAN, 1_000, 9_000)), 1.5), 700);
    }

    #[test]
    fn a_slow_summarizer_starts_the_job_early_enough_for_the_growth() {
        // The issue's case at a 32k window: 9 calls of 2 s, 1 s between views, 300 tokens a
        // step. The job (18 s, 27 with the margin) needs 28 steps of headroom.
        let o = outlook(300.0, 1_000, 18_000);
        let line = start_line(18_000, 25_000, Some(&o), 1.5);
        assert_eq!(line, 16_600);
        // Started at the line, the job is done before the view that crosses the hard line.
        let steps_to_cross = (25_000 - line) / 300;
        assert!(steps_to_cross as f64 * 1.0 >= 18.0 * 1.5);
        // Faster growth or a slower summarizer: earlier; never before 0.
        assert_eq!(start_line(18_000, 25_000, Some(&outlook(600.0, 1_000, 18_000)), 1.5), 8_200);
        assert_eq!(start_line(18_000, 25_000, Some(&outlook(300.0, 1_000, 30_000)), 1.5), 11_200);
        assert_eq!(start_line(18_000, 25_000, Some(&outlook(300.0, 1_000, 600_000)), 1.5), 0);
        // A slower model (more time between views) leaves the summarizer more time: later,
        // but never later than the soft line.
        assert_eq!(start_line(18_000, 25_000, Some(&outlook(300.0, 1_100, 18_000)), 1.5), 17_336);
        assert_eq!(start_line(18_000, 25_000, Some(&outlook(300.0, 3_000, 18_000)), 1.5), 18_000);
        // The margin is at least 1.
        assert_eq!(start_line(18_000, 25_000, Some(&o), 0.1), start_line(18_000, 25_000, Some(&o), 1.0));
    }

    #[test]
    fn the_decision_is_monotone_in_the_estimate() {
        let o = outlook(500.0, 1_000, 4_000);
        let line = start_line(10_000, 12_000, Some(&o), 1.5);
        assert_eq!(line, 12_000 - 3_500);
        assert!(!due(line, 10_000, 12_000, Some(&o), 1.5));
        assert!((line + 1..20_000).step_by(97).all(|e| due(e, 10_000, 12_000, Some(&o), 1.5)));
        assert!((0..=line).step_by(97).all(|e| !due(e, 10_000, 12_000, Some(&o), 1.5)));
    }

    #[test]
    fn growth_is_learned_from_views_and_a_fall_starts_over() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut g = Growth::default();
        assert_eq!(g.get(), None);
        g.observe(1_000, at(0));
        assert_eq!(g.get(), None, "one view is no step");
        g.observe(1_400, at(1_000));
        assert_eq!(g.get(), Some((400.0, Duration::from_secs(1))));
        // A view taken again with nothing new is not a step.
        g.observe(1_400, at(1_010));
        assert_eq!(g.get(), Some((400.0, Duration::from_secs(1))));
        g.observe(1_800, at(2_000));
        assert_eq!(g.get(), Some((400.0, Duration::from_secs(1))));
        // A swap: the estimate falls; not growth.
        g.observe(600, at(3_000));
        assert_eq!(g.get(), Some((400.0, Duration::from_secs(1))));
        assert_eq!(g.seen(), Some(at(3_000)));
        // Faster growth moves the average towards it.
        g.observe(1_600, at(4_000));
        let (per, step) = g.get().unwrap();
        assert!((per - 580.0).abs() < 1e-9 && step == Duration::from_secs(1), "{per} {step:?}");
    }
}
