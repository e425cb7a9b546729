//! Writing parsed sessions into a store: one chat per session, idempotently.

use std::collections::HashMap;

use super::Session;
use crate::error::Result;
use crate::history::{ChatId, ChatMeta, Page, Part, ToolContent};
use crate::store::Store;

/// Metadata key holding a chat's session key ([`Session::key`]).
pub const KEY: &str = "import.key";
/// Metadata key holding the session key of the chat's parent (a side chain's main session).
pub const PARENT: &str = "import.parent";
/// Metadata key holding the parent's chat id, once the parent is in the store.
pub const PARENT_CHAT: &str = "import.parent_chat";
/// Metadata key holding the session's format name.
pub const FORMAT: &str = "import.format";
/// Metadata key holding the file the session was first imported from.
pub const SOURCE: &str = "import.source";

/// Messages appended per transaction.
const BATCH: usize = 256;

/// What [`import_sessions`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Sessions that became new chats.
    pub sessions_new: u64,
    /// Sessions already in the store, unchanged (nothing added).
    pub sessions_unchanged: u64,
    /// Sessions already in the store that had grown: their new messages were appended.
    pub sessions_extended: u64,
    /// Messages appended.
    pub messages: u64,
    /// Tool results among them.
    pub tool_results: u64,
    /// Tool results archived on append (longer than the store's `archive_threshold`).
    pub archived: u64,
    /// Side chains linked to their parent chat in this call.
    pub linked: u64,
}

/// The imported chats of `owner`: session key to (chat, messages stored).
pub fn imported_chats(store: &Store, owner: &str) -> Result<HashMap<String, (ChatId, u64)>> {
    let mut out = HashMap::new();
    let mut page = Page { limit: 1000, after: None };
    loop {
        let p = store.chats(owner, page.clone())?;
        for c in &p.chats {
            if let Some(k) = c.meta.extra.get(KEY) {
                out.insert(k.clone(), (c.id, c.len));
            }
        }
        match p.next {
            Some(n) => page.after = Some(n),
            None => return Ok(out),
        }
    }
}

/// Writes `sessions` into chats of `owner`. A session whose key is already a chat's
/// [`KEY`] adds only the messages past that chat's length (none when the transcript is
/// unchanged): importing the same transcript twice adds nothing. A side chain's chat records
/// its parent's key ([`PARENT`]) and, once the parent is in the store, its chat id
/// ([`PARENT_CHAT`]). `progress` is called after each session.
pub fn import_sessions(
    store: &Store,
    owner: &str,
    sessions: &[Session],
    mut progress: impl FnMut(&Session),
) -> Result<ImportReport> {
    let mut known = imported_chats(store, owner)?;
    let threshold = store.options().archive_threshold;
    let mut r = ImportReport::default();
    for s in sessions {
        let (id, have) = match known.get(&s.key) {
            Some(&(id, len)) => (id, len),
            None => {
                let mut meta =
                    ChatMeta { title: s.title.clone(), model: s.model.clone(), ..ChatMeta::default() };
                meta.extra.insert(KEY.into(), s.key.clone());
                meta.extra.insert(FORMAT.into(), s.format.name().into());
                meta.extra.insert(SOURCE.into(), s.source.display().to_string());
                if let Some(p) = &s.parent_key {
                    meta.extra.insert(PARENT.into(), p.clone());
                }
                let id = store.create_chat(owner, meta)?;
                known.insert(s.key.clone(), (id, 0));
                r.sessions_new += 1;
                (id, 0)
            }
        };
        let chat = store.chat(owner, id)?;
        let have = have.max(chat.len()) as usize;
        if have >= s.messages.len() {
            if have > 0 {
                r.sessions_unchanged += 1;
            }
        } else {
            if have > 0 {
                r.sessions_extended += 1;
            }
            for batch in s.messages[have..].chunks(BATCH) {
                for p in batch.iter().flat_map(|m| &m.parts) {
                    if let Part::ToolResult { content, .. } = p {
                        r.tool_results += 1;
                        if matches!(content, ToolContent::Text(t) if t.len() > threshold) {
                            r.archived += 1;
                        }
                    }
                }
                chat.append_batch(batch.to_vec())?;
                r.messages += batch.len() as u64;
            }
            known.insert(s.key.clone(), (id, s.messages.len() as u64));
        }
        progress(s);
    }
    // Link side chains to parents present now (in this call or an earlier one).
    for s in sessions.iter().filter(|s| s.parent_key.is_some()) {
        let (Some(&(id, _)), Some(parent)) = (known.get(&s.key), s.parent_key.as_ref()) else { continue };
        let Some(&(parent_id, _)) = known.get(parent) else { continue };
        let chat = store.chat(owner, id)?;
        let mut meta = chat.meta();
        if meta.extra.get(PARENT_CHAT) != Some(&parent_id.to_string()) {
            meta.extra.insert(PARENT_CHAT.into(), parent_id.to_string());
            chat.set_meta(meta)?;
            r.linked += 1;
        }
    }
    Ok(r)
}
