//! Changes to what a chat holds: edits of a message and truncation (each a new revision),
//! metadata versions, and pins.

use std::ops::Range;
use std::sync::Arc;

use super::append::{body, check_message, prepare, row_tokens};
use super::chat::ChatRef;
use super::state::{Entry, Writer, kept_tokens, now_ms};
use crate::base::error::{Error, Result};
use crate::disk::record::{self, Kind, MetaRec, MsgRec, RevRec};
use crate::kernel::store::core::{RecordOut, Txn};
use crate::model::message::*;

pub(super) fn meta_rec(chat: ChatId, version: u64, m: &ChatMeta) -> MetaRec {
    MetaRec {
        chat: chat.0,
        version,
        title: m.title.clone(),
        model: m.model.clone(),
        draft: m.draft.clone(),
        extra: m.extra.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        at_ms: now_ms(),
    }
}

impl ChatRef<'_> {
    /// Replaces the metadata; returns the new version (versions start at 1).
    pub(crate) fn set_meta(&self, meta: ChatMeta) -> Result<u64> {
        self.set_meta_at(meta, None)
    }

    /// Replaces the metadata, the record dated `at_ms` instead of now when given (an
    /// importer's bookkeeping, which is no activity of the conversation: it passes the chat's
    /// last activity so that it stays as it was).
    pub(crate) fn set_meta_at(&self, meta: ChatMeta, at_ms: Option<u64>) -> Result<u64> {
        let core = self.core();
        let (mut w, _fleet) = self.state.lock_write()?;
        let version = w.meta_version + 1;
        let mut rec = meta_rec(self.id(), version, &meta);
        let at = at_ms.unwrap_or(rec.at_ms);
        rec.at_ms = at;
        let mut txn = Txn::default();
        txn.push(RecordOut::of_chat(Kind::Meta, rec.chat, record::encode(&rec)?.into_vec()));
        let c = core.append(txn)?;
        w.meta = Arc::new(meta);
        w.meta_version = version;
        w.last_ms = if at_ms.is_some() { w.last_ms.max(at) } else { at };
        w.last_end = c.end;
        self.state.publish(&w);
        drop(w);
        core.wait_durable(c.end)?;
        Ok(version)
    }

    fn check_revision(w: &Writer, expected: u64) -> Result<()> {
        if w.revision != expected {
            return Err(Error::StaleRevision { expected, found: w.revision });
        }
        Ok(())
    }

    /// The work of `Chat::edit` (documented there).
    pub(crate) fn edit(&self, seq: u64, message: NewMessage, expected_revision: u64) -> Result<u64> {
        check_message(&message, 0)?;
        let core = self.core().clone();
        let chat = self.id();
        // As in an append, the work that needs no writer state is done before the lock.
        let mut txn = Txn::default();
        let mut wait = None;
        let message =
            prepare(&core, &mut txn, (&self.state.owner.clone(), chat), (message, 0), &[], &mut wait)?;
        let body = body(&core, &mut txn, &message.parts, &mut wait)?;
        let (mut w, _fleet) = self.state.lock_write()?;
        Self::check_revision(&w, expected_revision)?;
        if seq >= w.len {
            return Err(Error::InvalidArgument(format!(
                "edit of message {seq}: the chat has {} messages",
                w.len
            )));
        }
        let old = w
            .entries
            .get(&core, seq)?
            .cloned()
            .ok_or_else(|| Error::index_msg(format!("message {seq} missing")))?;
        if w.hidden.erased(seq, old.revision) {
            return Err(Error::InvalidArgument(format!(
                "edit of message {seq}: it was erased (an erased message cannot be edited; append a new one)"
            )));
        }
        if old.starts_turn != message.starts_turn() {
            return Err(Error::InvalidArgument(format!(
                "edit of message {seq} would change whether it starts a user turn; truncate and append instead"
            )));
        }
        let revision = w.revision + 1;
        let now = now_ms();
        let rev = RevRec {
            chat: chat.0,
            revision,
            truncate: false,
            seq,
            len_before: w.len,
            len_after: w.len,
            at_ms: now,
        };
        txn.push(RecordOut::of_chat(Kind::Revision, rev.chat, record::encode(&rev)?.into_vec()));
        let rec = MsgRec {
            chat: chat.0,
            seq,
            revision,
            role: record::role_byte(message.role, message.feedback),
            turn: old.turn,
            at_ms: now,
            step: None,
            body,
        };
        let may_archive = rec.body.may_archive();
        let out = RecordOut::message(&rec, core.opts.compression)?;
        let tokens = row_tokens(&out);
        let at = txn.push(out);
        let c = core.append(txn)?;
        // The entries in memory go on at the new revision (the others load from the index
        // as before: an edit changes only `seq`).
        let entries = w.entries.next_revision(revision, w.len);
        entries.set(
            seq,
            Entry {
                revision,
                role: message.role,
                at_ms: now,
                step: std::sync::OnceLock::from(None),
                loc: c.locations[at],
                may_archive,
                tokens: kept_tokens(&core, tokens),
                previews: Default::default(),
                pending_json: Default::default(),
                ..old.clone()
            },
        );
        for i in (0..w.len).filter(|i| *i != seq) {
            if let Some(e) = w.entries.peek(i) {
                entries.set(i, e.clone());
            }
        }
        w.entries = Arc::new(entries);
        w.revision = revision;
        w.last_ms = now;
        w.last_end = c.end;
        self.state.publish(&w);
        drop(w);
        core.wait_durable(wait.map_or(c.end, |x| x.max(c.end)))?;
        Ok(revision)
    }

    /// Drops messages from `from_seq` on, if the chat is still at `expected_revision`;
    /// returns the new revision. The dropped messages stay readable at older revisions.
    pub(crate) fn truncate(&self, from_seq: u64, expected_revision: u64) -> Result<u64> {
        let core = self.core().clone();
        let (mut w, _fleet) = self.state.lock_write()?;
        Self::check_revision(&w, expected_revision)?;
        if from_seq > w.len {
            return Err(Error::InvalidArgument(format!(
                "truncate from {from_seq}: the chat has {} messages",
                w.len
            )));
        }
        let revision = w.revision + 1;
        let now = now_ms();
        let rev = RevRec {
            chat: self.id().0,
            revision,
            truncate: true,
            seq: from_seq,
            len_before: w.len,
            len_after: from_seq,
            at_ms: now,
        };
        let mut txn = Txn::default();
        txn.push(RecordOut::of_chat(Kind::Revision, rev.chat, record::encode(&rev)?.into_vec()));
        let c = core.append(txn)?;
        w.last_turn = match from_seq.checked_sub(1) {
            None => 0,
            Some(last) => w.entries.get(&core, last)?.map_or(0, |e| e.turn),
        };
        let entries = w.entries.next_revision(revision, from_seq);
        for i in 0..from_seq {
            if let Some(e) = w.entries.peek(i) {
                entries.set(i, e.clone());
            }
        }
        w.entries = Arc::new(entries);
        if !w.hidden.is_empty() {
            w.hidden = Arc::new(w.hidden.truncated(from_seq));
        }
        w.len = from_seq;
        w.revision = revision;
        w.last_ms = now;
        w.last_end = c.end;
        self.state.publish(&w);
        drop(w);
        core.wait_durable(c.end)?;
        Ok(revision)
    }

    /// Pins `range` (in `unit`) of archive `archive` into the model view: the budget guard
    /// will not shrink it again. The owner must be able to read the archive, and the range
    /// must be valid in it.
    pub(crate) fn pin(
        &self,
        archive: &crate::base::blob::BlobId,
        range: Range<u64>,
        unit: crate::chat::archive::Unit,
    ) -> Result<()> {
        self.set_pin(archive, range, unit, true)
    }

    /// Removes a pin made with `pin` (the same archive, range and unit).
    pub(crate) fn unpin(
        &self,
        archive: &crate::base::blob::BlobId,
        range: Range<u64>,
        unit: crate::chat::archive::Unit,
    ) -> Result<()> {
        self.set_pin(archive, range, unit, false)
    }

    fn set_pin(
        &self,
        archive: &crate::base::blob::BlobId,
        range: Range<u64>,
        unit: crate::chat::archive::Unit,
        on: bool,
    ) -> Result<()> {
        let pin = Pin { archive: *archive, unit, range: range.clone() };
        if on {
            // Validates ownership and the range (errors say where and how long).
            crate::chat::archive::read_context(
                self.core(),
                self.archives,
                &self.state.owner,
                archive,
                range.clone(),
                unit,
            )?;
        }
        let core = self.core().clone();
        let (mut w, _fleet) = self.state.lock_write()?;
        let present = w.pins.contains(&pin);
        if on == present {
            if on {
                return Ok(());
            }
            return Err(Error::NotFound {
                what: format!("pin of {archive} {}..{} ({})", range.start, range.end, unit.as_str()),
            });
        }
        let now = now_ms();
        let rec = record::PinRec {
            chat: self.id().0,
            id: archive.0,
            unit: crate::chat::archive::unit_code(unit),
            start: range.start,
            end: range.end,
            pinned: on,
            at_ms: now,
        };
        let mut txn = Txn::default();
        txn.push(RecordOut::of_chat(Kind::Pin, rec.chat, record::encode(&rec)?.into_vec()));
        let c = core.append(txn)?;
        let mut pins = (*w.pins).clone();
        if on {
            pins.push(pin);
        } else {
            pins.retain(|p| *p != pin);
        }
        w.pins = Arc::new(pins);
        w.last_ms = now;
        w.last_end = c.end;
        self.state.publish(&w);
        drop(w);
        core.wait_durable(c.end)
    }
}
