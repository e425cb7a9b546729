//! Conversation history: owners, chats, messages, revisions, steps and attempts.

pub(crate) mod record;
mod types;

pub use types::*;
