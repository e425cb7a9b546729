//! Appends to a chat: messages (with the blobs stored beside them) and model steps. The work
//! that needs nothing of the chat's writer state (archiving, grants, bodies) is done before
//! its lock is taken.

use std::ops::Range;
use std::sync::Arc;

use super::chat::ChatRef;
use super::entries::KEEP_WRITTEN;
use super::state::{Entry, kept_tokens, now_ms};
use crate::base::blob::BlobId;
use crate::base::error::{Error, Result};
use crate::disk::log::Position;
use crate::disk::record::append_key::AppendKeyRec;
use crate::disk::record::{self, BodyRec, Kind, MsgRec, PartRec, PartsRec, StepRec, StepTagRec};
use crate::kernel::store::core::{Core, RecordOut, Txn};
use crate::model::message::*;

pub(super) fn check_message(m: &NewMessage, at: usize) -> Result<()> {
    if m.feedback && m.role != Role::User {
        return Err(Error::InvalidArgument(format!(
            "message {at}: only a user message may be feedback, found a {} message",
            m.role.as_str()
        )));
    }
    for (i, p) in m.parts.iter().enumerate() {
        if let Part::ToolCall { args, name, .. } = p
            && let Err(e) = serde_json::from_str::<serde_json::Value>(args)
        {
            return Err(Error::InvalidArgument(format!(
                "message {at}, part {i}: tool call {name:?} arguments must be JSON ({e})"
            )));
        }
    }
    Ok(())
}

/// Applies the archiving policy to message `at` about to be written in `chat`: a tool result
/// longer than `archive_threshold` is archived in `txn` and replaced by a preview and the
/// archive reference. A reference the harness supplies must name an archive the owner may
/// read; its sizes are taken from the store, never from the caller. An attachment must name a
/// blob the owner holds a grant on, or one of `put` (stored by this transaction): else it is
/// [`Error::NotFound`], as for a blob never stored. Each reference binds a grant to the chat.
pub(super) fn prepare(
    core: &Core,
    txn: &mut Txn,
    (owner, chat): (&str, ChatId),
    (mut m, at): (NewMessage, usize),
    put: &[BlobId],
    wait: &mut Option<Position>,
) -> Result<NewMessage> {
    for p in &mut m.parts {
        if let Part::Attachment { blob, .. } = p {
            if !put.contains(blob) && !crate::kernel::store::blobs::granted(core, owner, blob, u8::MAX)? {
                return Err(Error::NotFound {
                    what: format!(
                        "blob {blob} of the attachment in message {at} (store it first, or pass it along)"
                    ),
                });
            }
            crate::kernel::store::blobs::grant_into(core, txn, owner, *blob, Some(chat.0))?;
            continue;
        }
        let Part::ToolResult { content, .. } = p else { continue };
        match content {
            ToolContent::Text(text) if text.len() > core.opts.archive_threshold => {
                let (r, preview, w) = crate::chat::archive::archive_with_preview(
                    core,
                    txn,
                    (owner, chat.0),
                    text,
                    (core.opts.preview_chars, &core.opts.preview_marker),
                )?;
                *wait = (*wait).max(w);
                *content = ToolContent::Archived { archive: r, preview };
            }
            ToolContent::Archived { archive, .. } => {
                let pending = txn.has_blob(&archive.id);
                match crate::chat::archive::grant(core, owner, &archive.id)? {
                    Some(a) => {
                        *archive = crate::chat::archive::to_ref(&a);
                        crate::chat::archive::bind_into(core, txn, &a, Some(chat.0))?;
                    }
                    None if pending => {}
                    // A text a view previewed without an archive (held inline by a chat of
                    // the owner): archived with this append.
                    None => match crate::chat::archive::inline_text(core, owner, &archive.id)? {
                        Some(text) => {
                            let (r, w) = crate::chat::archive::archive_into_chat(
                                core,
                                txn,
                                owner,
                                &text,
                                Some(chat.0),
                            )?;
                            *wait = (*wait).max(w);
                            *archive = r;
                        }
                        None => return Err(Error::NotFound { what: format!("archive {}", archive.id) }),
                    },
                }
            }
            ToolContent::Text(_) => {}
        }
    }
    Ok(m)
}

/// The token estimate a message record `out` keeps in its index row (see `MsgHead::tokens`).
pub(super) fn row_tokens(out: &RecordOut) -> Option<u64> {
    out.listing.as_ref()?.head.tokens
}

/// Encodes a message body: inline when small, else a (deduplicated) blob in `txn`.
pub(super) fn body(
    core: &Core,
    txn: &mut Txn,
    parts: &[Part],
    wait: &mut Option<Position>,
) -> Result<BodyRec> {
    let recs: Vec<PartRec> = parts.iter().map(PartRec::from_part).collect();
    let approx: usize = parts.iter().map(part_len).sum();
    if approx <= core.opts.inline_body_max {
        return Ok(BodyRec::Inline(recs));
    }
    let bytes = record::encode(&PartsRec { parts: recs })?;
    let (id, existing) = txn.blob(core, &bytes)?;
    *wait = (*wait).max(existing);
    Ok(BodyRec::Blob(id.0))
}

fn part_len(p: &Part) -> usize {
    match p {
        Part::Text(t) | Part::Summary(t) => t.len(),
        Part::ToolCall { id, name, args } => id.len() + name.len() + args.len(),
        Part::ToolResult { call_id, content, .. } => {
            call_id.len()
                + match content {
                    ToolContent::Text(t) => t.len(),
                    ToolContent::Archived { preview, .. } => preview.len() + 64,
                }
        }
        Part::ApprovalRequest { id, call_id, prompt } => {
            id.len() + call_id.as_ref().map_or(0, |c| c.len()) + prompt.len()
        }
        Part::ApprovalResponse { id, reason, .. } => id.len() + reason.as_ref().map_or(0, |r| r.len()),
        Part::Attachment { mime, .. } => mime.len() + 32,
    }
}

/// The times an append stamps its messages with, and records written before them in its
/// transaction (a chat's creation).
struct Timed<'a> {
    /// One time per message (Unix ms); `None`: now.
    at_ms: Option<&'a [u64]>,
    /// Records committed first, in the same transaction.
    prelude: Vec<RecordOut>,
    /// The chat's new metadata, written after the messages in the same transaction.
    meta: Option<ChatMeta>,
    /// The append's idempotency key: an append to the chat with the same key made before
    /// is returned instead (see [`ChatRef::append_batch_idempotent`]).
    key: Option<&'a str>,
}

impl Timed<'_> {
    const NOW: Timed<'static> = Timed { at_ms: None, prelude: Vec::new(), meta: None, key: None };
}

/// Lets the entries a chat wrote leave memory once the index has them (see `entries.rs`):
/// when [`KEEP_WRITTEN`] or more were written since its entries were last replaced and redb
/// holds every batch of the chat before this one, the writer takes new entries whose seqs
/// below `base` (this append's first) load from the index at `revision`. At twice that, the
/// index is flushed first, so a writer faster than the background indexer keeps no more.
/// A flush that fails leaves the entries in memory (the batch is written either way).
fn evict_written(core: &Core, w: &mut super::state::Writer, base: u64, revision: u64) {
    let written = base.saturating_sub(w.entries.lazy());
    if written < KEEP_WRITTEN {
        return;
    }
    if core.index.flushed() < w.last_end && written >= 2 * KEEP_WRITTEN {
        let _ = core.ensure_flushed(w.last_end);
    }
    if core.index.flushed() >= w.last_end {
        w.entries = Arc::new(w.entries.indexed(revision, base));
    }
}

impl ChatRef<'_> {
    /// The work of `Chat::append` (documented there).
    pub(crate) fn append(&self, message: NewMessage) -> Result<u64> {
        Ok(self.append_batch(vec![message])?.start)
    }

    /// Appends messages atomically: after a crash all of them are there or none.
    pub(crate) fn append_batch(&self, messages: Vec<NewMessage>) -> Result<Range<u64>> {
        self.append_inner(&[], messages, None, None, Timed::NOW).map(|(_, r, _)| r)
    }

    /// Appends messages atomically, each stamped with its own time (`at_ms`, one per
    /// message) instead of now: the importers' path, so an imported message keeps the time
    /// its transcript gives it. The chat's last activity becomes the latest of its times
    /// (never earlier than it was).
    pub(crate) fn append_batch_at(&self, messages: Vec<NewMessage>, at_ms: &[u64]) -> Result<Range<u64>> {
        self.append_inner(&[], messages, None, None, Timed { at_ms: Some(at_ms), ..Timed::NOW })
            .map(|(_, r, _)| r)
    }

    /// The work of `Chat::append_batch_idempotent` (documented there): under the chat's
    /// write lock (in fleet mode, once the replica holds every batch committed for the chat,
    /// so also one whose commit's answer was lost), an append-key record of the chat with
    /// `key` gives the seqs it took, and nothing is written; else the messages are appended
    /// with such a record in their batch.
    pub(crate) fn append_batch_idempotent(&self, messages: Vec<NewMessage>, key: &str) -> Result<Range<u64>> {
        if key.is_empty() || key.len() > record::append_key::MAX_KEY {
            return Err(Error::InvalidArgument(format!(
                "idempotency key: expected 1 to {} bytes, found {}",
                record::append_key::MAX_KEY,
                key.len()
            )));
        }
        self.append_inner(&[], messages, None, None, Timed { key: Some(key), ..Timed::NOW })
            .map(|(_, r, _)| r)
    }

    /// The work of `Chat::append_batch_with_meta` (documented there).
    pub(crate) fn append_batch_with_meta(
        &self,
        messages: Vec<NewMessage>,
        meta: ChatMeta,
    ) -> Result<Range<u64>> {
        self.append_inner(&[], messages, None, None, Timed { meta: Some(meta), ..Timed::NOW })
            .map(|(_, r, _)| r)
    }

    /// The first write of a chat created with its messages (`history::create_chat_with`): the
    /// chat's creation records (`prelude`) and its messages in one transaction.
    pub(super) fn append_creating(
        &self,
        messages: Vec<NewMessage>,
        at_ms: Option<&[u64]>,
        prelude: Vec<RecordOut>,
    ) -> Result<Range<u64>> {
        self.append_inner(&[], messages, None, None, Timed { at_ms, prelude, ..Timed::NOW })
            .map(|(_, r, _)| r)
    }

    /// The work of `Chat::append_with_blobs` (documented there).
    pub(crate) fn append_with_blobs(
        &self,
        blobs: &[&[u8]],
        messages: Vec<NewMessage>,
    ) -> Result<(Vec<BlobId>, Range<u64>)> {
        self.append_inner(blobs, messages, None, None, Timed::NOW).map(|(ids, r, _)| (ids, r))
    }

    /// Hides messages and appends `messages` in one transaction (see `history::hide`):
    /// returns the new revision and the appended seqs.
    pub(super) fn append_hiding(
        &self,
        messages: Vec<NewMessage>,
        hide: super::hide::HideArgs<'_>,
    ) -> Result<(u64, Range<u64>)> {
        self.append_inner(&[], messages, None, Some(hide), Timed::NOW).map(|(_, r, rev)| (rev, r))
    }

    fn append_inner(
        &self,
        blobs: &[&[u8]],
        messages: Vec<NewMessage>,
        step: Option<(StepTag, bool)>,
        hide: Option<super::hide::HideArgs<'_>>,
        timed: Timed<'_>,
    ) -> Result<(Vec<BlobId>, Range<u64>, u64)> {
        for (i, m) in messages.iter().enumerate() {
            check_message(m, i)?;
        }
        if let Some(at) = timed.at_ms
            && at.len() != messages.len()
        {
            return Err(Error::InvalidArgument(format!(
                "message times: expected one per message ({}), found {}",
                messages.len(),
                at.len()
            )));
        }
        if step.is_some() && messages.iter().any(NewMessage::starts_turn) {
            return Err(Error::InvalidArgument("a step's messages cannot start a user turn".into()));
        }
        let core = self.core().clone();
        let chat = self.id();
        // Everything that needs nothing of the chat's writer state is done before its lock is
        // taken: blobs hashed, chunked and compressed, archives indexed with their previews,
        // grants looked up, bodies encoded. Under the lock: the records that carry the chat's
        // sequence numbers, and the commit.
        let mut txn = Txn::default();
        for r in timed.prelude {
            txn.push(r);
        }
        let mut wait = None;
        let mut ids = Vec::with_capacity(blobs.len());
        let owner = self.state.owner.clone();
        // Blobs stored with the messages are granted to the owner, bound to this chat.
        for b in blobs {
            let (id, w) = txn.blob(&core, b)?;
            crate::kernel::store::blobs::grant_into(&core, &mut txn, &owner, id, Some(chat.0))?;
            ids.push(id);
            wait = wait.max(w);
        }
        let messages = messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| prepare(&core, &mut txn, (&owner, chat), (m, i), &ids, &mut wait))
            .collect::<Result<Vec<_>>>()?;
        let bodies = messages
            .iter()
            .map(|m| body(&core, &mut txn, &m.parts, &mut wait))
            .collect::<Result<Vec<_>>>()?;
        let (mut w, _fleet) = self.state.lock_write()?;
        if let Some((tag, _)) = &step
            && tag.turn != w.last_turn
        {
            return Err(Error::InvalidArgument(format!(
                "steps are recorded for the current user turn {}, found turn {}",
                w.last_turn, tag.turn
            )));
        }
        if let Some(key) = timed.key
            && let Some((first, count)) = core.index.append_key(chat.0, key)?
        {
            if count != messages.len() as u64 {
                return Err(Error::InvalidArgument(format!(
                    "idempotency key {key:?}: it was used for an append of {count} message(s) to chat {} \
                     (seqs {first}..{}), this one has {}; nothing was written",
                    chat.0,
                    first + count,
                    messages.len()
                )));
            }
            // The first append's own promise: durable before it is acknowledged.
            let (end, revision) = (w.last_end, w.revision);
            drop(w);
            core.wait_durable(end)?;
            return Ok((ids, first..first + count, revision));
        }
        let now = now_ms();
        let (revision, hidden) = match hide {
            Some(h) => {
                let (rev, hidden) = self.hide_records(&w, h, &mut txn, now)?;
                (rev, Some(hidden))
            }
            None => (w.revision, None),
        };
        let base = w.len;
        let mut turn = w.last_turn;
        let mut pending = Vec::with_capacity(messages.len());
        let step_rec = step.as_ref().map(|(t, _)| StepTagRec {
            turn: t.turn,
            stream_id: t.stream_id.clone(),
            step: t.step,
        });
        for (i, (m, body)) in messages.iter().zip(bodies).enumerate() {
            let starts = m.starts_turn();
            turn += starts as u64;
            let seq = base + i as u64;
            let at_ms = timed.at_ms.and_then(|t| t.get(i).copied()).unwrap_or(now);
            let may_archive = body.may_archive();
            let rec = MsgRec {
                chat: chat.0,
                seq,
                revision,
                role: record::role_byte(m.role, m.feedback),
                turn,
                at_ms,
                step: step_rec.clone(),
                body,
            };
            let out = RecordOut::message(&rec, core.opts.compression)?;
            let tokens = row_tokens(&out);
            let at = txn.push(out);
            pending.push((at, seq, m.role, turn, starts, at_ms, may_archive, tokens));
        }
        if let Some(key) = timed.key {
            let rec = AppendKeyRec {
                chat: chat.0,
                first: base,
                count: messages.len() as u64,
                key: key.to_string(),
            };
            txn.push(RecordOut::of_chat(Kind::AppendKey, rec.chat, rec.encode()));
        }
        if let Some((tag, complete)) = &step {
            let rec = StepRec {
                chat: chat.0,
                turn: tag.turn,
                stream_id: tag.stream_id.clone(),
                step: tag.step,
                complete: *complete,
                revision,
                seqs: (base..base + messages.len() as u64).collect(),
                at_ms: now,
            };
            txn.push(RecordOut::of_chat(Kind::Step, rec.chat, record::encode(&rec)?.into_vec()));
        }
        let meta_version = w.meta_version + 1;
        if let Some(m) = &timed.meta {
            let rec = super::edit::meta_rec(chat, meta_version, m);
            txn.push(RecordOut::of_chat(Kind::Meta, rec.chat, record::encode(&rec)?.into_vec()));
        }
        let c = core.append(txn)?;
        evict_written(&core, &mut w, base, revision);
        let tag = step.map(|(t, _)| Arc::new(t));
        for (at, seq, role, turn, starts, at_ms, may_archive, tokens) in pending {
            let e = Entry {
                seq,
                revision,
                role,
                turn,
                starts_turn: starts,
                at_ms,
                step: std::sync::OnceLock::from(tag.clone()),
                loc: c.locations[at],
                may_archive,
                tokens: kept_tokens(&core, tokens),
                previews: Default::default(),
                pending_json: Default::default(),
            };
            w.entries.set(seq, e);
        }
        w.hidden = super::hide::hidden_after(&w, hidden);
        w.revision = revision;
        w.len = base + messages.len() as u64;
        w.last_turn = turn;
        w.last_ms = match timed.at_ms {
            // As the index counts it: the latest record of the chat.
            Some(at) => at.iter().copied().fold(w.last_ms, u64::max),
            None => now,
        };
        w.last_end = c.end;
        if let Some(m) = timed.meta {
            w.meta = Arc::new(m);
            w.meta_version = meta_version;
        }
        self.state.publish(&w);
        drop(w);
        core.wait_durable(wait.map_or(c.end, |x| x.max(c.end)))?;
        Ok((ids, base..base + messages.len() as u64, revision))
    }

    /// Records a completed (or interrupted) model step of the current user turn: its
    /// messages are appended, tagged (turn, stream, step), in one transaction, durable
    /// before this returns. A retry is a new `stream_id` for the same turn.
    pub(crate) fn record_step(
        &self,
        turn: u64,
        stream_id: &str,
        step: u32,
        status: StepStatus,
        messages: Vec<NewMessage>,
    ) -> Result<Range<u64>> {
        if stream_id.is_empty() || stream_id.len() > 256 {
            return Err(Error::InvalidArgument(format!(
                "stream id: expected 1 to 256 bytes, found {}",
                stream_id.len()
            )));
        }
        let tag = StepTag { turn, stream_id: stream_id.to_string(), step };
        self.append_inner(&[], messages, Some((tag, status == StepStatus::Complete)), None, Timed::NOW)
            .map(|(_, r, _)| r)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code: a failed step fails the test")]

    use std::time::Duration;

    use crate::{ChatMeta, Durability, Error, NewMessage, Options, Part, Store, ToolContent, Unit};

    fn held_back() -> Options {
        // No background flush during the test: what reaches redb is what a call flushed.
        Options::default().durability(Durability::None).index_flush_interval(Duration::from_secs(3600))
    }

    #[test]
    fn append_keys_are_found_pending_and_flushed_pass_check_survive_a_rebuild_and_go_with_their_chat() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), held_back()).unwrap();
        let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
        let gone = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
        // In the memtable (no flush for an hour), then in redb.
        assert_eq!(chat.append_idempotent(NewMessage::user("a"), "k1").unwrap(), 0);
        assert_eq!(chat.append_idempotent(NewMessage::user("a"), "k1").unwrap(), 0);
        gone.append_idempotent(NewMessage::user("b"), "k1").unwrap();
        store.sync().unwrap();
        assert_eq!(chat.append_idempotent(NewMessage::user("a"), "k1").unwrap(), 0);
        assert_eq!(chat.append_batch_idempotent(vec![NewMessage::user("c"); 2], "k2").unwrap(), 1..3);
        let report = store.check().unwrap();
        assert!(report.is_ok(), "{report:?}");
        store.rebuild_index().unwrap();
        assert_eq!(chat.append_batch_idempotent(vec![NewMessage::user("c"); 2], "k2").unwrap(), 1..3);
        assert_eq!(chat.len(), 3);
        store.delete_chat("o", gone.id()).unwrap();
        let id = chat.id();
        drop((chat, gone, store));
        Store::gc(dir.path(), held_back()).unwrap();
        let store = Store::open(dir.path(), held_back()).unwrap();
        assert!(store.check().unwrap().is_ok());
        let chat = store.chat("o", id).unwrap();
        assert_eq!(chat.append_idempotent(NewMessage::user("a"), "k1").unwrap(), 0);
        assert_eq!(chat.append_idempotent(NewMessage::user("d"), "k3").unwrap(), 3);
        // A reader follows a log holding append keys.
        let reader = Store::open_read_only_with(dir.path(), held_back()).unwrap();
        assert_eq!(reader.chat("o", id).unwrap().len(), 4);
    }

    #[test]
    fn appends_find_pending_grants_and_miss_absent_ones_without_flushing_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), held_back()).unwrap();
        let core = store.core_for_tests().clone();
        let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
        let text = "line of tool output\n".repeat(1000);
        // The harness archives first, then appends the reference: the grant is still pending.
        let a = store.archive("o", &text).unwrap();
        let flushed = core.index.flushed();
        assert!(flushed < core.log.written(), "the archive's grant waits in the memtable");
        let preview = "a preview".to_string();
        let seq = chat
            .append(NewMessage {
                role: crate::Role::Tool,
                parts: vec![Part::ToolResult {
                    call_id: "c1".into(),
                    content: ToolContent::Archived { archive: a, preview },
                    is_error: false,
                }],
                feedback: false,
            })
            .unwrap();
        assert_eq!(core.index.flushed(), flushed, "the append found the pending grant without a flush");
        // A miss: an archive the owner holds no grant on, and an attachment of a blob it never stored.
        let other = store.archive("p", "someone else's text").unwrap();
        let miss = chat.append(NewMessage {
            role: crate::Role::Tool,
            parts: vec![Part::ToolResult {
                call_id: "c2".into(),
                content: ToolContent::Archived { archive: other, preview: "x".into() },
                is_error: false,
            }],
            feedback: false,
        });
        assert!(matches!(miss, Err(Error::NotFound { .. })), "{miss:?}");
        // (That miss looks for the text held inline by a chat of the owner, a lookup of the
        // index's inline texts, which flushes: not covered here.)
        let blob = store.put_blob("p", b"not o's").unwrap();
        let flushed = core.index.flushed();
        let miss = chat.append(NewMessage {
            role: crate::Role::User,
            parts: vec![Part::Attachment { blob, mime: "text/plain".into() }],
            feedback: false,
        });
        assert!(matches!(miss, Err(Error::NotFound { .. })), "{miss:?}");
        assert_eq!(core.index.flushed(), flushed, "the attachment's grant miss did not flush the index");
        // Readable at once, with the sizes the store holds.
        let Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } =
            &chat.get(seq).unwrap().parts[0]
        else {
            panic!("not archived")
        };
        assert_eq!(archive, &a);
        assert_eq!(store.read_context("o", &a.id, 3..4, Unit::Lines).unwrap(), "line of tool output\n");
    }
}
