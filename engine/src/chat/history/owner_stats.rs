//! What one owner holds, counted from the owner's own chats alone (issue 34.6).
//!
//! Store-wide figures ([`StoreStats`](crate::StoreStats): log bytes, indexed blobs) move
//! when *any* owner writes, and content already stored by someone else is not written again,
//! so comparing them before and after storing a text tells whether another owner stored it.
//! These figures depend only on what the owner's chats hold: sizes are logical (the text as
//! written, before deduplication and compression), counts are of the owner's own messages.
//! An owner can be shown them; the store-wide ones are for the store's operator.

use crate::base::error::Result;
use crate::chat::archive::ArchiveCache;
use crate::chat::history::{ChatCache, ChatRef, Page, Part, ToolContent, chats, open_chat};

/// One owner's figures ([`Store::owner_stats`](crate::Store::owner_stats)).
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use undertext::{NewMessage, Options, Store};
/// let store = Store::open(dir.path(), Options::default())?;
/// let chat = store.chat("alice", store.create_chat("alice", Default::default())?)?;
/// chat.append(NewMessage::user("hello"))?;
/// let s = store.owner_stats("alice")?;
/// assert_eq!((s.chats, s.messages, s.text_bytes), (1, 1, 5));
/// assert_eq!(store.owner_stats("bob")?.chats, 0);
/// # Ok::<(), undertext::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnerStats {
    /// The owner's chats (deleted ones not counted).
    pub chats: u64,
    /// Their visible messages (hidden ones not counted).
    pub messages: u64,
    /// Bytes of text in them as written: message texts, summaries, tool calls' names and
    /// arguments, inline tool results, approval prompts.
    pub text_bytes: u64,
    /// Tool results among them.
    pub tool_results: u64,
    /// Tool results kept as archives (their previews sent in views).
    pub archived_results: u64,
    /// Bytes of those archives as written (each counted in full, even when the same text was
    /// stored before: the figure does not depend on what others stored).
    pub archived_bytes: u64,
}

/// Counts `owner`'s chats page by page and reads each chat's visible messages.
pub(crate) fn owner_stats(cache: &ChatCache, archives: &ArchiveCache, owner: &str) -> Result<OwnerStats> {
    let mut out = OwnerStats::default();
    let mut page = Page { limit: 1000, after: None };
    loop {
        let p = chats(cache, owner, page)?;
        for c in &p.chats {
            let state = open_chat(cache, owner, c.id, true)?;
            let snap = ChatRef { state: &state, archives }.snapshot();
            out.chats += 1;
            for m in snap.range(0..snap.len())? {
                out.messages += 1;
                for part in &m.parts {
                    count(part, &mut out);
                }
            }
        }
        match p.next {
            Some(next) => page = Page { limit: 1000, after: Some(next) },
            None => return Ok(out),
        }
    }
}

fn count(part: &Part, out: &mut OwnerStats) {
    let text = match part {
        Part::Text(t) | Part::Summary(t) => t.len(),
        Part::ToolCall { name, args, .. } => name.len() + args.len(),
        Part::ToolResult { content, .. } => {
            out.tool_results += 1;
            match content {
                ToolContent::Text(t) => t.len(),
                ToolContent::Archived { archive, .. } => {
                    out.archived_results += 1;
                    out.archived_bytes += archive.bytes;
                    0
                }
            }
        }
        Part::ApprovalRequest { prompt, .. } => prompt.len(),
        Part::ApprovalResponse { .. } | Part::Attachment { .. } => 0,
    };
    out.text_bytes += text as u64;
}
