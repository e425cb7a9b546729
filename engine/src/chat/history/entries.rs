//! [`Entries`]: what a chat's snapshots know about its messages at one revision, loaded from
//! the index a page at a time when first asked for.
//!
//! A chat loaded from the index starts with no entry in memory: its first view reads the
//! pages it shows (the checkpoint's tail, the task), not an entry for every message (issue
//! 38: the first view of a 100,000-message chat built 100,000 entries). Messages appended or
//! edited in this process are set as they are written. Every entry below `lazy` that is not
//! set is the index's newest version of that seq at or before `revision`: the index held
//! every version of those seqs when the chat was loaded (a chat leaves memory only once its
//! records are in redb), and later writes to them are set in memory (an edit makes new
//! `Entries` at its revision; a truncation makes new ones no longer than it).

use super::state::Entry;
use crate::base::error::Result;
use crate::base::snapshot::AppendVec;
use crate::base::snapshot::PAGE;
use crate::kernel::store::core::Core;
use crate::model::message::ChatId;

/// A chat's entries at one revision (see the module's documentation).
#[derive(Debug)]
pub(crate) struct Entries {
    vec: AppendVec<Entry>,
    chat: ChatId,
    revision: u64,
    /// Seqs below this that are not in `vec` load from the index.
    lazy: u64,
}

impl Entries {
    /// Entries set in memory only (a new chat, or one loaded whole).
    pub(crate) fn in_memory(chat: ChatId, revision: u64) -> Entries {
        Entries { vec: AppendVec::new(), chat, revision, lazy: 0 }
    }

    /// Entries of `chat` at `revision` whose seqs `0..len` load from the index when asked for.
    pub(crate) fn from_index(chat: ChatId, revision: u64, len: u64) -> Entries {
        Entries { vec: AppendVec::new(), chat, revision, lazy: len }
    }

    /// New entries at `revision` (an edit's or a truncation's), no longer than `len`: the
    /// ones in memory are set by the caller, the others load from the index as before.
    pub(crate) fn next_revision(&self, revision: u64, len: u64) -> Entries {
        Entries { vec: AppendVec::new(), chat: self.chat, revision, lazy: self.lazy.min(len) }
    }

    /// The entry of `seq` if it is in memory (set, or loaded already).
    pub(crate) fn peek(&self, seq: u64) -> Option<&Entry> {
        self.vec.get(usize::try_from(seq).ok()?)
    }

    /// The sum of the token estimates kept by the entries of `range` that are in memory, and
    /// whether every entry of it is in memory with its estimate. Pages not loaded are
    /// skipped whole (a checkpoint's range is most of the chat).
    pub(crate) fn tokens_in_memory(&self, range: std::ops::Range<u64>) -> (u64, bool) {
        let (mut sum, mut all) = (0u64, true);
        let mut seq = range.start;
        while seq < range.end {
            let page_end = (seq - seq % PAGE as u64 + PAGE as u64).min(range.end);
            if !self.vec.has_page(usize::try_from(seq).unwrap_or(usize::MAX)) {
                all = false;
                seq = page_end;
                continue;
            }
            for s in seq..page_end {
                match self.peek(s).and_then(|e| e.tokens.get()) {
                    Some(t) => sum += t,
                    None => all = false,
                }
            }
            seq = page_end;
        }
        (sum, all)
    }

    /// Sets the entry of `seq` (once: a second set is ignored, the first stays).
    pub(crate) fn set(&self, seq: u64, e: Entry) {
        if let Ok(i) = usize::try_from(seq) {
            let _ = self.vec.set(i, e);
        }
    }

    /// The entry of `seq`, loading its page from the index if it is not in memory yet;
    /// `None` past the messages this revision has.
    pub(crate) fn get(&self, core: &Core, seq: u64) -> Result<Option<&Entry>> {
        if let Some(e) = self.peek(seq) {
            return Ok(Some(e));
        }
        if seq >= self.lazy {
            return Ok(None);
        }
        let start = seq - seq % PAGE as u64;
        let end = (start + PAGE as u64).min(self.lazy);
        let tx = core.index.read()?;
        super::load::fill_entries(&tx, self.chat, self.revision, start..end, self, false)?;
        Ok(self.peek(seq))
    }
}
