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
//!
//! A chat being written does the same with what it wrote (issue 34: an import of one session
//! of 1,000,000 messages held an entry per message): once its writes are in redb, an append
//! that finds [`KEEP_WRITTEN`] or more entries written in memory starts new `Entries` whose
//! seqs below the chat's length load from the index ([`Entries::indexed`]), so the memory a
//! chat holds does not grow with its length.

use std::sync::atomic::{AtomicUsize, Ordering};

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
    /// Entries set in `vec` (written or loaded).
    resident: AtomicUsize,
}

/// Entries written in memory (seqs from [`Entries::lazy`] on) that a chat keeps before an
/// append replaces them by the index's (128 pages).
pub(crate) const KEEP_WRITTEN: u64 = 4096;

impl Entries {
    /// Entries set in memory only (a new chat, or one loaded whole).
    pub(crate) fn in_memory(chat: ChatId, revision: u64) -> Entries {
        Entries { vec: AppendVec::new(), chat, revision, lazy: 0, resident: AtomicUsize::new(0) }
    }

    /// Entries of `chat` at `revision` whose seqs `0..len` load from the index when asked for.
    pub(crate) fn from_index(chat: ChatId, revision: u64, len: u64) -> Entries {
        Entries { vec: AppendVec::new(), chat, revision, lazy: len, resident: AtomicUsize::new(0) }
    }

    /// New entries of the same chat at `revision` whose seqs `0..len` all load from the
    /// index: for a chat whose every record up to its length is in redb, so that what it
    /// wrote leaves memory (see the module's documentation).
    pub(crate) fn indexed(&self, revision: u64, len: u64) -> Entries {
        Entries::from_index(self.chat, revision, len)
    }

    /// Seqs below this that are not in memory load from the index; the ones from it on were
    /// written in memory.
    pub(crate) fn lazy(&self) -> u64 {
        self.lazy
    }

    /// How many entries are in memory (written, or loaded from the index).
    pub(crate) fn resident(&self) -> usize {
        self.resident.load(Ordering::Relaxed)
    }

    /// New entries at `revision` (an edit's or a truncation's), no longer than `len`: the
    /// ones in memory are set by the caller, the others load from the index as before.
    pub(crate) fn next_revision(&self, revision: u64, len: u64) -> Entries {
        Entries {
            vec: AppendVec::new(),
            chat: self.chat,
            revision,
            lazy: self.lazy.min(len),
            resident: AtomicUsize::new(0),
        }
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
        if let Ok(i) = usize::try_from(seq)
            && self.vec.set(i, e).is_ok()
        {
            self.resident.fetch_add(1, Ordering::Relaxed);
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
        super::load::fill_entries(core, &tx, self.chat, self.revision, start..end, self, false)?;
        Ok(self.peek(seq))
    }
}
