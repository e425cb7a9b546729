//! The writes and reads of one chat ([`ChatRef`]): appends, edits, truncation, metadata,
//! steps, attempts and pins; and the store-level calls that create, delete, open and list
//! chats. `api::Chat` and `api::Store` delegate here.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use super::cache::ChatCache;
use super::load::{chat_row, entries_at, len_at_end_of, read_meta, read_meta_at};
use super::snap::Snapshot;
use super::state::{ChatState, Entry, SnapInner, Writer, now_ms, read_message};
use crate::archive::ArchiveCache;
use crate::blob::BlobId;
use crate::error::{Error, Result};
use crate::index::{MESSAGES, METAS, OWNER_CHATS, STEPS};
use crate::log::{Location, Position};
use crate::model::*;
use crate::record::{
    self, BodyRec, ChatRec, DeleteRec, MetaRec, MsgRec, PartRec, PartsRec, RevRec, StepRec, StepTagRec, kind,
};
use crate::snapshot::AppendVec;
use crate::store::core::{Core, RecordOut, Txn};

fn check_message(m: &NewMessage, at: usize) -> Result<()> {
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

fn meta_rec(chat: ChatId, version: u64, m: &ChatMeta) -> MetaRec {
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

/// Applies the archiving policy to message `at` about to be written in `chat`: a tool result
/// longer than `archive_threshold` is archived in `txn` and replaced by a preview and the
/// archive reference. A reference the harness supplies must name an archive the owner may
/// read; its sizes are taken from the store, never from the caller. An attachment must name a
/// blob the owner holds a grant on, or one of `put` (stored by this transaction): else it is
/// [`Error::NotFound`], as for a blob never stored. Each reference binds a grant to the chat.
fn prepare(
    core: &Core,
    txn: &mut Txn,
    (owner, chat): (&str, ChatId),
    (mut m, at): (NewMessage, usize),
    put: &[BlobId],
    wait: &mut Option<Position>,
) -> Result<NewMessage> {
    for p in &mut m.parts {
        if let Part::Attachment { blob, .. } = p {
            if !put.contains(blob) && !crate::store::blobs::granted(core, owner, blob, u8::MAX)? {
                return Err(Error::NotFound {
                    what: format!(
                        "blob {blob} of the attachment in message {at} (store it first, or pass it along)"
                    ),
                });
            }
            crate::store::blobs::grant_into(core, txn, owner, *blob, Some(chat.0))?;
            continue;
        }
        let Part::ToolResult { content, .. } = p else { continue };
        match content {
            ToolContent::Text(text) if text.len() > core.opts.archive_threshold => {
                let (r, preview, w) = crate::archive::archive_with_preview(
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
                match crate::archive::grant(core, owner, &archive.id)? {
                    Some(a) => {
                        *archive = crate::archive::to_ref(&a);
                        crate::archive::bind_into(core, txn, &a, Some(chat.0))?;
                    }
                    None if pending => {}
                    // A text a view previewed without an archive (held inline by a chat of
                    // the owner): archived with this append.
                    None => match crate::archive::inline_text(core, owner, &archive.id)? {
                        Some(text) => {
                            let (r, w) =
                                crate::archive::archive_into_chat(core, txn, owner, &text, Some(chat.0))?;
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

/// Encodes a message body: inline when small, else a (deduplicated) blob in `txn`.
fn body(core: &Core, txn: &mut Txn, parts: &[Part], wait: &mut Option<Position>) -> Result<BodyRec> {
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

/// The work of `Store::create_chat` (documented there).
pub(crate) fn create_chat(chats: &ChatCache, owner: &str, meta: ChatMeta) -> Result<ChatId> {
    check_owner(owner)?;
    let core = chats.core();
    let id = chats.allocate()?;
    let now = now_ms();
    let mut txn = Txn::default();
    txn.push(RecordOut::history(
        kind::CHAT,
        record::encode(&ChatRec { chat: id.0, owner: owner.to_string(), created_ms: now })?.into_vec(),
    ));
    txn.push(RecordOut::history(kind::META, record::encode(&meta_rec(id, 1, &meta))?.into_vec()));
    let committed = core.append(txn)?;
    let w = Writer {
        revision: 0,
        len: 0,
        entries: Arc::new(AppendVec::new()),
        last_turn: 0,
        meta: Arc::new(meta),
        meta_version: 1,
        last_ms: now,
        pins: Arc::new(Vec::new()),
        compactions: Arc::new(Vec::new()),
        calibration: Arc::new(Default::default()),
        checkpoint: None,
        last_end: committed.end,
    };
    chats.insert(Arc::new(ChatState::new(core.clone(), id, owner.into(), now, w)));
    core.wait_durable(committed.end)?;
    Ok(id)
}

/// The work of `Store::delete_chat` (documented there).
pub(crate) fn delete_chat(
    chats: &ChatCache,
    owner: &str,
    id: ChatId,
    forget: impl FnOnce(&Arc<ChatState>),
) -> Result<()> {
    check_owner(owner)?;
    let state = chats.get(owner, id)?;
    let core = chats.core();
    let (mut w, _fleet) = state.lock_write()?;
    let mut txn = Txn::default();
    txn.push(RecordOut::history(
        kind::DELETE,
        record::encode(&DeleteRec { chat: id.0, at_ms: now_ms() })?.into_vec(),
    ));
    let c = core.append(txn)?;
    state.deleted.store(true, std::sync::atomic::Ordering::Release);
    w.last_end = c.end;
    drop(w);
    *state.view_memo.lock() = None;
    forget(&state);
    core.wait_durable(c.end)?;
    // The chat's grants go with it now, not at the indexer's next flush.
    core.ensure_flushed(c.end)
}

/// Opens chat `id` of `owner`. A chat of another owner is the same
/// [`Error::NotFound`] as an absent one.
pub(crate) fn open_chat(chats: &ChatCache, owner: &str, id: ChatId) -> Result<Arc<ChatState>> {
    check_owner(owner)?;
    chats.get(owner, id)
}

/// One page of `owner`'s chats, newest activity first.
pub(crate) fn chats(chats: &ChatCache, owner: &str, page: Page) -> Result<ChatPage> {
    check_owner(owner)?;
    if page.limit == 0 || page.limit > 1000 {
        return Err(Error::InvalidArgument(format!("page limit: expected 1..=1000, found {}", page.limit)));
    }
    let core = chats.core();
    if let Some(remote) = core.remote() {
        // Fleet mode: the owner's chats as other processes left them.
        remote.catch_up_owner(core, owner)?;
        for s in chats.cached_of(owner) {
            match s.sync() {
                Ok(()) | Err(Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    core.ensure_flushed(core.log.written())?;
    // Chats in memory are authoritative; the index may lag them by a flush.
    let mut cached: HashMap<u64, ChatSummary> = HashMap::new();
    for s in chats.cached_of(owner) {
        let snap = s.cell.load();
        cached.insert(s.id.0, summary_of(&snap));
    }
    let after = |c: &ChatSummary| match page.after {
        None => true,
        Some(cur) => (u64::MAX - c.last_activity_ms, c.id) > (u64::MAX - cur.last_activity_ms, cur.id),
    };
    let mut out: Vec<ChatSummary> = cached.values().filter(|c| after(c)).cloned().collect();
    let tx = core.index.read()?;
    if let Ok(t) = tx.open_table(OWNER_CHATS) {
        let start = match page.after {
            Some(c) => (owner, u64::MAX - c.last_activity_ms, c.id.0),
            None => (owner, 0, 0),
        };
        let mut taken = 0;
        for item in t.range(start..=(owner, u64::MAX, u64::MAX)).map_err(Error::index)? {
            let (k, _) = item.map_err(Error::index)?;
            let (_, _, chat) = k.value();
            if cached.contains_key(&chat) {
                continue;
            }
            let Some(summary) = indexed_summary(core, &tx, chat)? else {
                continue;
            };
            if !after(&summary) {
                continue;
            }
            out.push(summary);
            taken += 1;
            if taken > page.limit {
                break;
            }
        }
    }
    out.sort_by_key(|c| (u64::MAX - c.last_activity_ms, c.id));
    let more = out.len() > page.limit;
    out.truncate(page.limit);
    let next = if more {
        out.last().map(|c| PageCursor { last_activity_ms: c.last_activity_ms, id: c.id })
    } else {
        None
    };
    Ok(ChatPage { chats: out, next })
}

/// The work of `Store::find_chats` (documented there).
pub(crate) fn find_chats(
    chats: &ChatCache,
    owner: &str,
    field: MetaField<'_>,
    value: &str,
) -> Result<Vec<ChatSummary>> {
    check_owner(owner)?;
    let core = chats.core();
    if let Some(remote) = core.remote() {
        remote.catch_up_owner(core, owner)?;
    }
    // Every record written so far is in redb: the lookup table answers for all of them.
    core.ensure_flushed(core.log.written())?;
    let key = match field {
        MetaField::Title => (crate::index::FIELD_TITLE, ""),
        MetaField::Extra(k) => (crate::index::FIELD_EXTRA, k),
    };
    let tx = core.index.read()?;
    let found = crate::index::find_chats(&tx, owner, key, value)?;
    let cached: HashMap<u64, Arc<ChatState>> = if found.is_empty() {
        HashMap::new()
    } else {
        chats.cached_of(owner).into_iter().map(|s| (s.id.0, s)).collect()
    };
    let mut out = Vec::new();
    for chat in found {
        // A chat in memory is authoritative (its summary needs no log read).
        let summary = match cached.get(&chat) {
            Some(s) => summary_of(&s.cell.load()),
            None => match indexed_summary(core, &tx, chat)? {
                Some(s) => s,
                None => continue,
            },
        };
        // The hash matched: the value itself decides.
        let found = match field {
            MetaField::Title => summary.meta.title == value,
            MetaField::Extra(k) => summary.meta.extra.get(k).is_some_and(|v| v == value),
        };
        if found {
            out.push(summary);
        }
    }
    out.sort_by_key(|c| (u64::MAX - c.last_activity_ms, c.id));
    Ok(out)
}

/// The summary of a chat not in memory, from its index row (`None`: no such chat).
fn indexed_summary(core: &Core, tx: &redb::ReadTransaction, chat: u64) -> Result<Option<ChatSummary>> {
    let Some(row) = chat_row(tx, ChatId(chat))? else { return Ok(None) };
    Ok(Some(ChatSummary {
        id: ChatId(chat),
        meta: read_meta(core, &row)?,
        len: row.len,
        revision: row.revision,
        created_ms: row.created_ms,
        last_activity_ms: row.last_ms,
    }))
}

fn summary_of(s: &SnapInner) -> ChatSummary {
    ChatSummary {
        id: s.chat,
        meta: (*s.meta).clone(),
        len: s.len,
        revision: s.revision,
        created_ms: s.created_ms,
        last_activity_ms: s.last_ms,
    }
}

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

    /// Current revision: starts at 0, +1 per edit or truncation; appends do not change it.
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

    /// Replaces the metadata; returns the new version (versions start at 1).
    pub(crate) fn set_meta(&self, meta: ChatMeta) -> Result<u64> {
        let core = self.core();
        let (mut w, _fleet) = self.state.lock_write()?;
        let version = w.meta_version + 1;
        let mut txn = Txn::default();
        txn.push(RecordOut::history(
            kind::META,
            record::encode(&meta_rec(self.id(), version, &meta))?.into_vec(),
        ));
        let c = core.append(txn)?;
        w.meta = Arc::new(meta);
        w.meta_version = version;
        w.last_ms = now_ms();
        w.last_end = c.end;
        self.state.publish(&w);
        drop(w);
        core.wait_durable(c.end)?;
        Ok(version)
    }

    /// The metadata as of `version`.
    pub(crate) fn meta_at(&self, version: u64) -> Result<ChatMeta> {
        let core = self.core();
        let end = self.state.w.lock().last_end;
        core.ensure_flushed(end)?;
        let tx = core.index.read()?;
        let t = tx.open_table(METAS).map_err(Error::index)?;
        let Some(g) = t.get((self.id().0, version)).map_err(Error::index)? else {
            return Err(Error::NotFound { what: format!("metadata version {version} of {}", self.id()) });
        };
        let (segment, offset, len) = g.value();
        read_meta_at(core, Location { segment, offset, len })
    }

    /// The work of `Chat::append` (documented there).
    pub(crate) fn append(&self, message: NewMessage) -> Result<u64> {
        Ok(self.append_batch(vec![message])?.start)
    }

    /// Appends messages atomically: after a crash all of them are there or none.
    pub(crate) fn append_batch(&self, messages: Vec<NewMessage>) -> Result<Range<u64>> {
        self.append_inner(&[], messages, None).map(|(_, r, _)| r)
    }

    /// The work of `Chat::append_with_blobs` (documented there).
    pub(crate) fn append_with_blobs(
        &self,
        blobs: &[&[u8]],
        messages: Vec<NewMessage>,
    ) -> Result<(Vec<BlobId>, Range<u64>)> {
        self.append_inner(blobs, messages, None).map(|(ids, r, _)| (ids, r))
    }

    fn append_inner(
        &self,
        blobs: &[&[u8]],
        messages: Vec<NewMessage>,
        step: Option<(StepTag, bool)>,
    ) -> Result<(Vec<BlobId>, Range<u64>, u64)> {
        for (i, m) in messages.iter().enumerate() {
            check_message(m, i)?;
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
        let mut wait = None;
        let mut ids = Vec::with_capacity(blobs.len());
        let owner = self.state.owner.clone();
        // Blobs stored with the messages are granted to the owner, bound to this chat.
        for b in blobs {
            let (id, w) = txn.blob(&core, b)?;
            crate::store::blobs::grant_into(&core, &mut txn, &owner, id, Some(chat.0))?;
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
        let now = now_ms();
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
            let rec = MsgRec {
                chat: chat.0,
                seq,
                revision: w.revision,
                role: m.role.code(),
                turn,
                at_ms: now,
                step: step_rec.clone(),
                body,
            };
            let at = txn.push(RecordOut::history(kind::MESSAGE, record::encode(&rec)?.into_vec()));
            pending.push((at, seq, m.role, turn, starts));
        }
        if let Some((tag, complete)) = &step {
            let rec = StepRec {
                chat: chat.0,
                turn: tag.turn,
                stream_id: tag.stream_id.clone(),
                step: tag.step,
                complete: *complete,
                revision: w.revision,
                seqs: (base..base + messages.len() as u64).collect(),
                at_ms: now,
            };
            txn.push(RecordOut::history(kind::STEP, record::encode(&rec)?.into_vec()));
        }
        let c = core.append(txn)?;
        let tag = step.map(|(t, _)| Arc::new(t));
        for (at, seq, role, turn, starts) in pending {
            let e = Entry {
                seq,
                revision: w.revision,
                role,
                turn,
                starts_turn: starts,
                at_ms: now,
                step: std::sync::OnceLock::from(tag.clone()),
                loc: c.locations[at],
                tokens: Default::default(),
                previews: Default::default(),
                pending_json: Default::default(),
            };
            let _ = w.entries.set(seq as usize, e);
        }
        w.len = base + messages.len() as u64;
        w.last_turn = turn;
        w.last_ms = now;
        w.last_end = c.end;
        self.state.publish(&w);
        let revision = w.revision;
        drop(w);
        core.wait_durable(wait.map_or(c.end, |x| x.max(c.end)))?;
        Ok((ids, base..base + messages.len() as u64, revision))
    }

    /// Message `seq` (current revision).
    pub(crate) fn get(&self, seq: u64) -> Result<crate::model::Message> {
        self.snapshot().get(seq)
    }

    /// Messages in `range` (current revision).
    pub(crate) fn range(&self, range: Range<u64>) -> Result<Vec<crate::model::Message>> {
        self.snapshot().range(range)
    }

    /// Every message (current revision).
    pub(crate) fn messages(&self) -> Result<Vec<crate::model::Message>> {
        self.snapshot().messages()
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
            .get(seq as usize)
            .cloned()
            .ok_or_else(|| Error::index_msg(format!("message {seq} missing")))?;
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
        txn.push(RecordOut::history(kind::REVISION, record::encode(&rev)?.into_vec()));
        let rec = MsgRec {
            chat: chat.0,
            seq,
            revision,
            role: message.role.code(),
            turn: old.turn,
            at_ms: now,
            step: None,
            body,
        };
        let at = txn.push(RecordOut::history(kind::MESSAGE, record::encode(&rec)?.into_vec()));
        let c = core.append(txn)?;
        let entries = AppendVec::new();
        for i in 0..w.len as usize {
            if let Some(e) = w.entries.get(i) {
                let e = if i as u64 == seq {
                    Entry {
                        revision,
                        role: message.role,
                        at_ms: now,
                        step: std::sync::OnceLock::from(None),
                        loc: c.locations[at],
                        tokens: Default::default(),
                        previews: Default::default(),
                        pending_json: Default::default(),
                        ..old.clone()
                    }
                } else {
                    e.clone()
                };
                let _ = entries.set(i, e);
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
        txn.push(RecordOut::history(kind::REVISION, record::encode(&rev)?.into_vec()));
        let c = core.append(txn)?;
        let entries = AppendVec::new();
        for i in 0..from_seq as usize {
            if let Some(e) = w.entries.get(i) {
                let _ = entries.set(i, e.clone());
            }
        }
        w.last_turn =
            if from_seq == 0 { 0 } else { entries.get(from_seq as usize - 1).map_or(0, |e| e.turn) };
        w.entries = Arc::new(entries);
        w.len = from_seq;
        w.revision = revision;
        w.last_ms = now;
        w.last_end = c.end;
        self.state.publish(&w);
        drop(w);
        core.wait_durable(c.end)?;
        Ok(revision)
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
        let entries = entries_at(&tx, self.id(), revision, len)?;
        let cur = &current.inner;
        Ok(Snapshot {
            inner: crate::snapshot::SnapArc::new(SnapInner {
                chat: cur.chat,
                owner: cur.owner.clone(),
                revision,
                len,
                entries: Arc::new(entries),
                meta: cur.meta.clone(),
                meta_version: cur.meta_version,
                created_ms: cur.created_ms,
                last_ms: cur.last_ms,
                pins: cur.pins.clone(),
                compactions: cur.compactions.clone(),
                calibration: cur.calibration.clone(),
                checkpoint: cur.checkpoint.clone(),
                core: core.clone(),
            }),
        })
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
        self.append_inner(&[], messages, Some((tag, status == StepStatus::Complete))).map(|(_, r, _)| r)
    }

    /// Every recorded attempt at user turn `turn`, in the order their streams first
    /// appeared, each with its steps in the order they were recorded.
    pub(crate) fn attempts(&self, turn: u64) -> Result<Vec<Attempt>> {
        let core = self.core();
        core.ensure_flushed(self.state.w.lock().last_end)?;
        let tx = core.index.read()?;
        let steps = match tx.open_table(STEPS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(Error::index(e)),
        };
        let messages = tx.open_table(MESSAGES).map_err(Error::index)?;
        let chat = self.id();
        let mut out: Vec<Attempt> = Vec::new();
        let range = (chat.0, turn, 0u64, 0u64)..=(chat.0, turn, u64::MAX, u64::MAX);
        for item in steps.range(range).map_err(Error::index)? {
            let (k, v) = item.map_err(Error::index)?;
            let (_, _, segment, offset) = k.value();
            let loc = Location { segment, offset, len: v.value() };
            let raw = core.read(loc, crate::blob::Verify::Checksum)?;
            let s: StepRec =
                record::decode(&raw.payload, "step").map_err(|e| Error::corrupt(segment, offset, e))?;
            let mut msgs = Vec::with_capacity(s.seqs.len());
            for &seq in &s.seqs {
                let g = messages.get((chat.0, seq, s.revision)).map_err(Error::index)?.ok_or_else(|| {
                    Error::index_msg(format!("{chat}: message {seq} of revision {} is missing", s.revision))
                })?;
                let (segment, offset, len, ..) = g.value();
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

    /// Pins `range` (in `unit`) of archive `archive` into the model view: the budget guard
    /// will not shrink it again. The owner must be able to read the archive, and the range
    /// must be valid in it.
    pub(crate) fn pin(
        &self,
        archive: &crate::blob::BlobId,
        range: Range<u64>,
        unit: crate::archive::Unit,
    ) -> Result<()> {
        self.set_pin(archive, range, unit, true)
    }

    /// Removes a pin made with `pin` (the same archive, range and unit).
    pub(crate) fn unpin(
        &self,
        archive: &crate::blob::BlobId,
        range: Range<u64>,
        unit: crate::archive::Unit,
    ) -> Result<()> {
        self.set_pin(archive, range, unit, false)
    }

    fn set_pin(
        &self,
        archive: &crate::blob::BlobId,
        range: Range<u64>,
        unit: crate::archive::Unit,
        on: bool,
    ) -> Result<()> {
        let pin = Pin { archive: *archive, unit, range: range.clone() };
        if on {
            // Validates ownership and the range (errors say where and how long).
            crate::archive::read_context(
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
            unit: crate::archive::unit_code(unit),
            start: range.start,
            end: range.end,
            pinned: on,
            at_ms: now,
        };
        let mut txn = Txn::default();
        txn.push(RecordOut::history(kind::PIN, record::encode(&rec)?.into_vec()));
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
        });
        assert!(matches!(miss, Err(Error::NotFound { .. })), "{miss:?}");
        // (That miss looks for the text held inline by a chat of the owner, a lookup of the
        // index's inline texts, which flushes: not covered here.)
        let blob = store.put_blob("p", b"not o's").unwrap();
        let flushed = core.index.flushed();
        let miss = chat.append(NewMessage {
            role: crate::Role::User,
            parts: vec![Part::Attachment { blob, mime: "text/plain".into() }],
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
