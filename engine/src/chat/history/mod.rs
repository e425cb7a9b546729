//! Conversation history: owners, chats, messages, revisions, steps and attempts.
//!
//! A chat in memory is a writer (under a lock) and a published [`Snapshot`]; readers load
//! the snapshot without locks. The log holds every record; the index finds them again
//! when a chat that left memory is opened.

mod append;
mod cache;
mod chat;
mod chats;
mod edit;
mod entries;
mod hidden;
mod hide;
mod load;
mod owner_stats;
mod snap;
mod state;
pub(crate) mod view_memo;

pub use crate::model::message::*;
pub(crate) use cache::ChatCache;
pub(crate) use chat::ChatRef;
pub(crate) use chats::{
    chat_marks, chats, create_chat, create_chat_with, delete_chat, find_chats, open_chat, owners,
};
pub use owner_stats::OwnerStats;
pub(crate) use owner_stats::owner_stats;
pub use snap::Snapshot;
pub(crate) use snap::{compactions_in_effect, compactions_in_force};
pub(crate) use state::{ChatState, Entry, Published, SnapInner, now_ms, tokens_kept};
