//! The [`Summarizer`] trait harnesses implement with a model, and a deterministic
//! extractive summarizer for tests and the demo.

use crate::base::error::Result;
use crate::model::message::{Message, Part, ToolContent};

/// Turns messages into a summary, and several summaries into one. Implementations are
/// called off the request path (the worker) or by `build_checkpoint`; they must be
/// deterministic for a given `id` for the summary cache to be meaningful.
pub trait Summarizer: Send + Sync {
    /// A stable id: summaries are cached by (content, summarizer id).
    fn id(&self) -> &str;
    /// Summarizes a segment of messages.
    fn summarize(&self, messages: &[Message]) -> Result<String>;
    /// Merges summaries, in order, into one.
    fn merge(&self, summaries: &[String]) -> Result<String>;
}

/// A deterministic summarizer: the first line of each message (up to 100 characters),
/// prefixed by its seq and role; merges keep each part's first lines within a budget.
///
/// ```
/// use undertext::{Extractive, Summarizer};
/// let s = Extractive::default();
/// let merged = s.merge(&["a\nb".into(), "c".into()]).unwrap();
/// assert!(merged.contains('a') && merged.contains('c'));
/// ```
#[derive(Debug, Clone)]
pub struct Extractive {
    /// Characters a merged summary keeps at most.
    pub max_chars: usize,
}

impl Default for Extractive {
    fn default() -> Self {
        Extractive { max_chars: 4000 }
    }
}

fn first_line(m: &Message) -> String {
    let text = m
        .parts
        .iter()
        .map(|p| match p {
            Part::Text(t) | Part::Summary(t) => t.clone(),
            Part::ToolCall { name, args, .. } => format!("called {name} {args}"),
            Part::ToolResult { content: ToolContent::Text(t), .. } => format!("result: {t}"),
            Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } => {
                format!("result archived as {} ({} lines)", archive.id, archive.lines)
            }
            Part::ApprovalRequest { prompt, .. } => format!("asked approval: {prompt}"),
            Part::ApprovalResponse { approved, .. } => {
                format!("approval {}", if *approved { "granted" } else { "denied" })
            }
            Part::Attachment { mime, .. } => format!("attachment {mime}"),
        })
        .collect::<Vec<_>>()
        .join(" ");
    text.lines().next().unwrap_or("").chars().take(100).collect()
}

impl Summarizer for Extractive {
    fn id(&self) -> &str {
        "extractive-v1"
    }

    fn summarize(&self, messages: &[Message]) -> Result<String> {
        Ok(messages
            .iter()
            .map(|m| format!("[{} {}] {}", m.seq, m.role.as_str(), first_line(m)))
            .collect::<Vec<_>>()
            .join("\n"))
    }

    fn merge(&self, summaries: &[String]) -> Result<String> {
        let per = (self.max_chars / summaries.len().max(1)).max(40);
        Ok(summaries.iter().map(|s| s.chars().take(per).collect::<String>()).collect::<Vec<_>>().join("\n"))
    }
}

/// A [`Summarizer`] made of two closures — the way a harness plugs in a model from Rust.
///
/// ```
/// use undertext::{FnSummarizer, Summarizer};
/// let s = FnSummarizer::new(
///     "my-model-v1",
///     |msgs| Ok(format!("{} messages", msgs.len())),
///     |parts| Ok(parts.join(" / ")),
/// );
/// assert_eq!(s.merge(&["a".into(), "b".into()]).unwrap(), "a / b");
/// ```
pub struct FnSummarizer<S, M> {
    id: String,
    summarize: S,
    merge: M,
}

impl<S, M> FnSummarizer<S, M>
where
    S: Fn(&[Message]) -> Result<String> + Send + Sync,
    M: Fn(&[String]) -> Result<String> + Send + Sync,
{
    /// A summarizer with this id, summarizing with `summarize` and merging with `merge`.
    pub fn new(id: impl Into<String>, summarize: S, merge: M) -> Self {
        FnSummarizer { id: id.into(), summarize, merge }
    }
}

impl<S, M> std::fmt::Debug for FnSummarizer<S, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnSummarizer").field("id", &self.id).finish()
    }
}

impl<S, M> Summarizer for FnSummarizer<S, M>
where
    S: Fn(&[Message]) -> Result<String> + Send + Sync,
    M: Fn(&[String]) -> Result<String> + Send + Sync,
{
    fn id(&self) -> &str {
        &self.id
    }

    fn summarize(&self, messages: &[Message]) -> Result<String> {
        (self.summarize)(messages)
    }

    fn merge(&self, summaries: &[String]) -> Result<String> {
        (self.merge)(summaries)
    }
}
