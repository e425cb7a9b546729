//! The budget guard and the model view: what the next model call should see, within a
//! token budget, with a way back to everything left out.
//!
//! * [`estimate`] — the [`Estimator`] trait, the default [`Heuristic`], exact tiktoken
//!   counts behind the `tiktoken` feature.
//! * `view` — [`Chat::view`](crate::Chat::view): checkpoint, messages, compaction records,
//!   and the guard's previews; [`Decision`].
//! * `render` — the view as neutral messages, OpenAI chat JSON, Anthropic messages JSON.

mod render;
pub(crate) mod tail;
pub(crate) mod view;

pub use crate::model::message::IndexLine;
pub use view::{Decision, Omitted, View, ViewMessage};

/// The token budget of one model call. Fractions are of the usable input,
/// `window − reserve_output`.
///
/// ```
/// use undertext::Budget;
/// let b = Budget::new(200_000, 8_000);
/// assert_eq!(b.usable(), 192_000);
/// assert_eq!(b.soft_limit(), 134_400);
/// assert_eq!(b.hard_limit(), 172_800);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    /// The model's context window, in tokens.
    pub window: u64,
    /// Tokens kept free for the answer.
    pub reserve_output: u64,
    /// Above this fraction of the usable input, older tool results become previews.
    pub soft: f64,
    /// ...until the estimate is at or below this fraction.
    pub target: f64,
    /// Above this fraction after compaction, the call is refused.
    pub hard: f64,
    /// JSON text of the tool schemas sent with the call (their tokens count too).
    pub tool_schemas: Vec<String>,
    /// The protected tail: the last two user turns stay raw, but at most this many tokens;
    /// when they are larger, the last whole steps that fit (at least the last step). `None`:
    /// a quarter of the usable input.
    pub protect_max_tokens: Option<u64>,
    /// User messages of the protected turns (the task) stay verbatim in the view even when a
    /// checkpoint covers the steps around them, up to this many tokens in all; longer ones are
    /// previewed with a way back. `None`: 20,000 tokens or a quarter of the usable input,
    /// whichever is less.
    pub instructions_max_tokens: Option<u64>,
    /// The nudge line (a fraction of the usable input, off by default): a view whose
    /// estimate before the guard's previews is above it
    /// carries [`View::nudge`], a harness message asking the model to compact its own history
    /// with the compaction tool (the `compaction` module's `tool`).
    pub nudge: Option<f64>,
    /// The least a cut must save (calibrated tokens) to be made while the view is under the
    /// hard line: providers cache the unchanged prefix of a request at about a tenth of the
    /// price, and a cut re-bills everything after the first message it changes, so a cut
    /// that saves little costs more than it saves (like Anthropic's `clear_at_least`). Over
    /// the hard line every cut is made. `None`: a tenth of the usable input.
    pub min_cut_tokens: Option<u64>,
}

impl Budget {
    /// A budget with the default lines: soft 0.70, target 0.50, hard 0.90.
    pub fn new(window: u64, reserve_output: u64) -> Budget {
        Budget {
            window,
            reserve_output,
            soft: 0.70,
            target: 0.50,
            hard: 0.90,
            tool_schemas: Vec::new(),
            protect_max_tokens: None,
            instructions_max_tokens: None,
            nudge: None,
            min_cut_tokens: None,
        }
    }

    /// Usable input: `window − reserve_output`.
    pub fn usable(&self) -> u64 {
        self.window.saturating_sub(self.reserve_output)
    }

    /// `usable × f`, rounded down, in exact integer arithmetic: `f` is taken to the basis
    /// point (1/10,000), so `0.7` is exactly 7,000/10,000 (`usable as f64 * 0.7` is not).
    fn line(&self, f: f64) -> u64 {
        let bp = (f.clamp(0.0, 1.0) * 10_000.0).round() as u128;
        (u128::from(self.usable()) * bp / 10_000) as u64
    }

    /// Tokens at the soft line.
    pub fn soft_limit(&self) -> u64 {
        self.line(self.soft)
    }

    /// Tokens at the target line.
    pub fn target_limit(&self) -> u64 {
        self.line(self.target)
    }

    /// Tokens at the hard line.
    pub fn hard_limit(&self) -> u64 {
        self.line(self.hard)
    }

    /// Tokens the protected tail may hold (see [`Budget::protect_max_tokens`]).
    ///
    /// ```
    /// use undertext::Budget;
    /// assert_eq!(Budget::new(32_000, 4_000).protect_limit(), 7_000);
    /// ```
    pub fn protect_limit(&self) -> u64 {
        self.protect_max_tokens.unwrap_or(self.usable() / 4)
    }

    /// Tokens the kept user messages of the protected turns may hold (see
    /// [`Budget::instructions_max_tokens`]).
    pub fn instructions_limit(&self) -> u64 {
        self.instructions_max_tokens.unwrap_or((self.usable() / 4).min(20_000))
    }

    /// The least a cut must save under the hard line (see [`Budget::min_cut_tokens`]).
    ///
    /// ```
    /// use undertext::Budget;
    /// assert_eq!(Budget::new(32_000, 4_000).min_cut(), 2_800);
    /// ```
    pub fn min_cut(&self) -> u64 {
        self.min_cut_tokens.unwrap_or(self.usable() / 10)
    }

    /// Tokens at the nudge line, when there is one.
    pub fn nudge_limit(&self) -> Option<u64> {
        self.nudge.map(|f| self.line(f))
    }

    pub(crate) fn validate(&self) -> crate::Result<()> {
        let bad = |why: String| Err(crate::Error::InvalidArgument(format!("budget: {why}")));
        if self.usable() == 0 {
            return bad(format!(
                "window {}: expected more than the {} tokens reserved for the answer",
                self.window, self.reserve_output
            ));
        }
        // Written so that NaN fails too.
        if !(0.0 < self.target && self.target <= self.soft && self.soft <= self.hard && self.hard <= 1.0) {
            return bad(format!(
                "expected 0 < target <= soft <= hard <= 1, found target {} soft {} hard {}",
                self.target, self.soft, self.hard
            ));
        }
        if let Some(n) = self.nudge
            && !(0.0 < n && n <= 1.0)
        {
            return bad(format!("nudge {n}: expected 0 < nudge <= 1"));
        }
        Ok(())
    }
}
