//! Handles: what a checkpoint message names so a model can read back what it summarizes.
//!
//! A checkpoint stands for messages `0..reach`; its summary is data written by a summarizer,
//! which may drop any detail. The message the view sends for it therefore carries, beside
//! the summary and derived from the checkpoint itself (never from the summary's text, so
//! merges and refreshes cannot lose them), the handles of what it covers: the chat and the
//! seq range, which `read_messages` reads back whole through the owner's grant, and the
//! archives of the tool results under it — the newest [`LISTED`] by seq and content
//! address (which `read_context` takes), the rest behind the range handle
//! (`read_messages` with `archives_only`). Bounded: a few hundred characters whatever the
//! chat's length.

use std::sync::Arc;

use crate::base::blob::BlobId;
use crate::base::error::Result;
use crate::chat::history::{ChatRef, Snapshot};
use crate::model::message::{ChatId, Part, ToolContent};

/// Archived results listed by id in a checkpoint message; the others are behind the range
/// handle.
pub(crate) const LISTED: usize = 8;

/// The first line of the checkpoint message for a checkpoint reaching `reach` of base
/// revision `base`: the handles of what it covers (see the module's documentation). Made
/// once per checkpoint and kept in the chat's state.
pub(crate) fn checkpoint_line(
    chat: &ChatRef<'_>,
    snap: &Snapshot,
    reach: u64,
    base: u64,
) -> Result<Arc<str>> {
    if let Some((r, b, text)) = &*chat.state.view.handles.lock()
        && (*r, *b) == (reach, base)
    {
        return Ok(text.clone());
    }
    // Only the messages that may hold an archived result are read (the index and every
    // append say which): a checkpoint over 100,000 messages reads its few tool results, not
    // every message (issue 38).
    // The index lists the versions that may hold one once it has the chat's writes.
    let core = &snap.inner.core;
    // Not waiting for the writer's lock (a write holds it through its sync): with the lock
    // taken, everything written so far is flushed instead.
    core.ensure_flushed(chat.state.last_end().unwrap_or_else(|| core.log.written()))?;
    let candidates = crate::disk::index::may_archive_below(&core.index.read()?, chat.state.id.0, reach)?;
    let mut archived = Vec::new();
    for seq in candidates.into_iter().filter(|s| *s < snap.len()) {
        if snap.inner.entry(seq)?.is_none_or(|e| !e.may_archive) || snap.is_erased(seq) {
            continue;
        }
        for p in &snap.get(seq)?.parts {
            if let Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } = p {
                archived.push((seq, archive.id));
            }
        }
    }
    let text = line_text(chat.state.id, reach, &archived);
    let text: Arc<str> = text.into();
    *chat.state.view.handles.lock() = Some((reach, base, text.clone()));
    Ok(text)
}

/// The handles line of a checkpoint of chat `id` reaching `reach`, over the archived results
/// `archived` (seq, archive id, in seq order) under it.
pub fn line_text(id: ChatId, reach: u64, archived: &[(u64, BlobId)]) -> String {
    let mut text = format!(
        "[checkpoint: summary of messages 0..{reach} of {id}; every original stays readable: \
         read_messages(chat=\"{id}\", start, end)"
    );
    if !archived.is_empty() {
        let shown = archived.len().min(LISTED);
        text.push_str("; archived results under it (seq: archive for read_context): ");
        let list: Vec<String> =
            archived[archived.len() - shown..].iter().map(|(s, a)| format!("{s}: {a}")).collect();
        text.push_str(&list.join(", "));
        if archived.len() > shown {
            text.push_str(&format!(
                "; {} earlier ones: read_messages(chat=\"{id}\", start=0, end={reach}, archives_only=true)",
                archived.len() - shown
            ));
        }
    }
    text.push(']');
    text
}
