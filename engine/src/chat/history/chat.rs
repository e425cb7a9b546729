//! One chat of one owner as the layers above history see it ([`ChatRef`]), and its reads:
//! metadata versions, snapshots at a revision, attempts. Its writes are in `append` (messages
//! and steps) and `edit` (edits, truncation, metadata, pins); the store-level calls that
//! create, delete, open and list chats in `chats`. `api::Chat` and `api::Store` delegate here.

use std::ops::Range;
use std::sync::Arc;

use super::load::{entries_at, len_at_end_of, read_meta_at};
use super::snap::Snapshot;
use super::state::{ChatState, ChatVersion, SnapInner, read_message};
use crate::base::error::{Error, Result};
use crate::chat::archive::ArchiveCache;
use crate::disk::log::Location;
use crate::disk::record::{self, StepRec};
use crate::kernel::store::core::Core;
use crate::model::message::*;

/// One chat of one owner as the layers above history see it: its state, and the archive
/// cache its pins are checked through. `Chat` (in `api`) holds the state; each of its calls
/// borrows one of these.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChatRef<'a> {
    pub state: &'a Arc<ChatState>,
    pub archives: &'a ArchiveCache,
}

impl ChatRef<'_> {
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.state.core
    }

    /// The whole text of archive `a`, as this chat's owner reads it (`None`: it cannot be
    /// read): what the approval rules look into for an archived tool result.
    pub(crate) fn archive_text(&self, a: &ArchiveRef) -> Option<String> {
        crate::chat::archive::read_context(
            self.core(),
            self.archives,
            self.owner(),
            &a.id,
            0..a.chars,
            Unit::Chars,
        )
        .ok()
    }

    /// The chat's id.
    pub(crate) fn id(&self) -> ChatId {
        self.state.id
    }

    /// Its owner.
    pub(crate) fn owner(&self) -> &str {
        &self.state.owner
    }

    /// The current snapshot (a few atomic operations, no lock).
    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot { inner: self.state.cell.load() }
    }

    /// Current revision: starts at 0, +1 per edit, truncation or hide; appends do not change it.
    pub(crate) fn revision(&self) -> u64 {
        self.state.cell.load().revision
    }

    /// Number of messages (the next `seq`).
    pub(crate) fn len(&self) -> u64 {
        self.state.cell.load().len
    }

    /// True when the chat has no message.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Current metadata.
    pub(crate) fn meta(&self) -> ChatMeta {
        (*self.state.cell.load().meta).clone()
    }

    /// The metadata as of `version`.
    pub(crate) fn meta_at(&self, version: u64) -> Result<ChatMeta> {
        let core = self.core();
        let end = self.state.w.lock().last_end;
        core.ensure_flushed(end)?;
        let tx = core.index.read()?;
        let Some(loc) = crate::disk::index::meta_location(&tx, self.id().0, version)? else {
            return Err(Error::NotFound { what: format!("metadata version {version} of {}", self.id()) });
        };
        read_meta_at(core, loc)
    }

    /// Message `seq` (current revision).
    pub(crate) fn get(&self, seq: u64) -> Result<crate::model::message::Message> {
        self.snapshot().get(seq)
    }

    /// Messages in `range` (current revision).
    pub(crate) fn range(&self, range: Range<u64>) -> Result<Vec<crate::model::message::Message>> {
        self.snapshot().range(range)
    }

    /// Every message (current revision).
    pub(crate) fn messages(&self) -> Result<Vec<crate::model::message::Message>> {
        self.snapshot().messages()
    }

    /// The chat as it was when `revision` ended (or now, for the current revision).
    pub(crate) fn snapshot_at(&self, revision: u64) -> Result<Snapshot> {
        let current = self.snapshot();
        if revision == current.revision() {
            return Ok(current);
        }
        if revision > current.revision() {
            return Err(Error::InvalidArgument(format!(
                "revision {revision}: the chat is at revision {}",
                current.revision()
            )));
        }
        let core = self.core();
        core.ensure_flushed(self.state.w.lock().last_end)?;
        let tx = core.index.read()?;
        let len = len_at_end_of(&tx, self.id(), revision)?.ok_or_else(|| {
            Error::index_msg(format!("revision {} of {} is missing from the index", revision + 1, self.id()))
        })?;
        let entries = entries_at(core, &tx, self.id(), revision, len, super::load::may_lose(core))?;
        let hidden = super::load::hidden_at(&tx, self.id(), revision)?
            .with_erased_versions(len, |seq| entries.peek(seq).map(|e| e.revision));
        let hidden = super::load::lost_hidden(hidden, &entries, len);
        let cur = &current.inner;
        Ok(Snapshot {
            inner: crate::base::snapshot::SnapArc::new(SnapInner {
                chat: cur.chat,
                owner: cur.owner.clone(),
                created_ms: cur.created_ms,
                version: ChatVersion {
                    revision,
                    len,
                    entries: Arc::new(entries),
                    hidden: Arc::new(hidden),
                    ..cur.version.clone()
                },
                core: core.clone(),
            }),
        })
    }

    /// Every recorded attempt at user turn `turn`, in the order their streams first
    /// appeared, each with its steps in the order they were recorded.
    pub(crate) fn attempts(&self, turn: u64) -> Result<Vec<Attempt>> {
        let core = self.core();
        core.ensure_flushed(self.state.w.lock().last_end)?;
        let tx = core.index.read()?;
        let chat = self.id();
        let mut out: Vec<Attempt> = Vec::new();
        for loc in crate::disk::index::step_locations(&tx, chat.0, turn)? {
            let (segment, offset) = (loc.segment, loc.offset);
            let raw = core.read(loc, crate::base::blob::Verify::Checksum)?;
            let s: StepRec =
                record::decode(&raw.payload, "step").map_err(|e| Error::corrupt(segment, offset, e))?;
            let mut msgs = Vec::with_capacity(s.seqs.len());
            for &seq in &s.seqs {
                let crate::disk::index::MsgVal { segment, offset, len, .. } =
                    crate::disk::index::message_version(&tx, chat.0, seq, s.revision)?.ok_or_else(|| {
                        Error::index_msg(format!(
                            "{chat}: message {seq} of revision {} is missing",
                            s.revision
                        ))
                    })?;
                msgs.push(read_message(core, chat, Location { segment, offset, len })?);
            }
            let st = Step {
                step: s.step,
                status: record::status_of(s.complete),
                messages: msgs,
                seqs: s.seqs,
                at_ms: s.at_ms,
            };
            match out.iter_mut().find(|a| a.stream_id == s.stream_id) {
                Some(a) => a.steps.push(st),
                None => out.push(Attempt { stream_id: s.stream_id, steps: vec![st] }),
            }
        }
        Ok(out)
    }
}
