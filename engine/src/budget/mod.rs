//! The budget guard and the model view: what the next model call should see, within a
//! token budget, with a way back to everything left out.
//!
//! * [`estimate`] — the [`Estimator`] trait, the default [`Heuristic`], exact tiktoken
//!   counts behind the `tiktoken` feature.
//! * `view` — [`Chat::view`](crate::Chat::view): checkpoint, messages, compaction records,
//!   and the guard's previews; [`Decision`].
//! * `render` — the view as neutral messages, OpenAI chat JSON, Anthropic messages JSON.

pub mod estimate;
mod render;
pub(crate) mod view;

#[cfg(feature = "tiktoken")]
pub use estimate::Tiktoken;
pub use estimate::{Estimator, Heuristic};
pub use view::{Decision, IndexLine, View, ViewMessage};

/// The token budget of one model call. Fractions are of the usable input,
/// `window − reserve_output`.
///
/// ```
/// use undertext::budget::Budget;
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
}

impl Budget {
    /// A budget with the default lines: soft 0.70, target 0.50, hard 0.90.
    pub fn new(window: u64, reserve_output: u64) -> Budget {
        Budget { window, reserve_output, soft: 0.70, target: 0.50, hard: 0.90, tool_schemas: Vec::new() }
    }

    /// Usable input: `window − reserve_output`.
    pub fn usable(&self) -> u64 {
        self.window.saturating_sub(self.reserve_output)
    }

    fn line(&self, f: f64) -> u64 {
        (self.usable() as f64 * f).floor() as u64
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

    pub(crate) fn validate(&self) -> crate::Result<()> {
        let ok = self.usable() > 0
            && 0.0 < self.target
            && self.target <= self.soft
            && self.soft <= self.hard
            && self.hard <= 1.0;
        if ok {
            Ok(())
        } else {
            Err(crate::Error::InvalidArgument(format!(
                "budget: expected window > reserve and 0 < target <= soft <= hard <= 1, found window {} reserve {} \
                 target {} soft {} hard {}",
                self.window, self.reserve_output, self.target, self.soft, self.hard
            )))
        }
    }
}
