//! Point lookups in the index: blobs, grants, and texts held inline by a message (memtable first), the
//! next chat id; and the listing of the texts of message bodies stored as blobs.

use redb::{Database, Durability as RedbDurability, ReadableDatabase, ReadableTable};

use super::blob_row::{self, BlobRow, Held};
use super::history::{BODY_TEXTS_TODO, CHAT_INLINE_TEXTS, INLINE_TEXTS, MsgKey};
use super::history::{CHATS, MESSAGES};
use super::{BLOBS, ChatRow, Index, InlineText, META, history, redb_err};
use crate::base::blob::{Blob, BlobId};
use crate::base::error::{Error, Result};
use crate::disk::log::Location;

impl Index {
    /// The first message version holding text `id` inline (a text part or an inline tool
    /// result) in a chat of `owner`, and where its record is; `None` when no chat of `owner`
    /// holds it (another owner's chats, and chats whose deletion is written, are not looked
    /// at: the same answer as for a text no chat holds). Records not yet in redb are looked
    /// at in the memtable, without a flush (`body` reads the body blob of such a message whose
    /// parts are in one); messages in redb whose parts are in a body blob are found once
    /// [`Index::list_body_texts`] has listed them.
    pub(crate) fn inline_text(
        &self,
        owner: &str,
        id: &[u8; 32],
        body: &dyn Fn(&[u8; 32]) -> Result<Blob>,
    ) -> Result<Option<InlineText>> {
        // The memtable before redb: a record leaves it only once redb holds it.
        let pending = self.mem.read().pending_texts(id);
        let tx = self.read()?.0;
        let chats = super::query::table(&tx, CHATS)?;
        let owns = |chat: u64| -> Result<bool> {
            if pending.deleted.contains(&chat) {
                return Ok(false);
            }
            if let Some(o) = pending.owners.get(&chat) {
                return Ok(o == owner);
            }
            match chats.as_ref().map(|t| t.get(chat)).transpose().map_err(redb_err)?.flatten() {
                Some(row) => Ok(ChatRow::decode(row.value())?.owner == owner),
                None => Ok(false),
            }
        };
        if let Some(at) = indexed_text(&tx, id, &owns)? {
            return Ok(Some(at));
        }
        for at in pending.places.into_iter().chain(self.aside_places(id)) {
            if owns(at.chat)? {
                return Ok(Some(at));
            }
        }
        for ((chat, seq, revision), loc, b) in pending.bodies {
            if !owns(chat)? {
                continue;
            }
            let texts = crate::disk::record::body_texts(&body(&b)?)
                .map_err(|e| Error::index_msg(format!("body blob {}: {e}", BlobId(b))))?;
            if let Some(&(part, _)) = texts.iter().find(|(_, t)| t == id) {
                return Ok(Some(InlineText { chat, seq, revision, part, loc }));
            }
        }
        Ok(None)
    }

    /// Lists the inline texts of the message versions whose parts are in a body blob (the
    /// indexer queues them in `body_texts_todo`, as it reads no blob): `body` reads a body
    /// blob. A body that cannot be read is reported and stays queued. Returns how many
    /// messages were listed.
    pub(crate) fn list_body_texts(&self, body: &dyn Fn(&[u8; 32]) -> Result<Blob>) -> Result<u64> {
        list_body_texts_in(|| self.db.read(), body)
    }

    /// The seqs (first, count) the append to `chat` with idempotency key `key` took: the
    /// memtable first, then redb.
    pub(crate) fn append_key(&self, chat: u64, key: &str) -> Result<Option<(u64, u64)>> {
        if let Some(found) = self.mem.read().pending_append_key(chat, key) {
            return Ok(Some(found));
        }
        super::query::append_key(&self.read()?, chat, key)
    }

    /// Looks a blob up: memtable first, then redb.
    pub(crate) fn blob(&self, id: &BlobId) -> Result<Option<Location>> {
        if let Some(loc) = self.mem.read().blob(id) {
            return Ok(Some(loc));
        }
        let db = self.db.read();
        let tx = db.begin_read().map_err(redb_err)?;
        let Some(t) = super::query::table(&tx, BLOBS)? else { return Ok(None) };
        match t.get(id.as_bytes()).map_err(redb_err)? {
            Some(g) => BlobRow::location(g.value()),
            None => Ok(None),
        }
    }

    /// Looks several blobs up: the memtable first, then redb in one read transaction.
    pub(crate) fn blobs(&self, ids: &[BlobId]) -> Result<Vec<Option<Location>>> {
        let mut out: Vec<Option<Location>> = {
            let mem = self.mem.read();
            ids.iter().map(|id| mem.blob(id)).collect()
        };
        if out.iter().all(Option::is_some) {
            return Ok(out);
        }
        let db = self.db.read();
        let tx = db.begin_read().map_err(redb_err)?;
        let Some(t) = super::query::table(&tx, BLOBS)? else { return Ok(out) };
        for (id, slot) in ids.iter().zip(&mut out) {
            if slot.is_none()
                && let Some(g) = t.get(id.as_bytes()).map_err(redb_err)?
            {
                *slot = BlobRow::location(g.value())?;
            }
        }
        Ok(out)
    }

    /// Number of blobs in redb (for stats and tests): the rows that hold a location (a
    /// fleet replica may hold grants on a blob it has not fetched).
    pub(crate) fn blob_count(&self) -> Result<u64> {
        let db = self.db.read();
        let tx = db.begin_read().map_err(redb_err)?;
        let Some(t) = super::query::table(&tx, BLOBS)? else { return Ok(0) };
        let mut n = 0;
        for item in t.iter().map_err(redb_err)? {
            n += u64::from(BlobRow::location(item.map_err(redb_err)?.1.value())?.is_some());
        }
        Ok(n)
    }

    /// The grants `owner` holds on blob `id` in redb (records still in the memtable are not
    /// looked at), with those bound to `chat` apart. A grant bound to a deleted chat counts
    /// in neither `any` nor, the chat being gone, anywhere a write would ask.
    pub(crate) fn held(&self, owner: &str, id: &BlobId, chat: Option<u64>) -> Result<Held> {
        blob_row::held(&self.read()?.0, owner, &id.0, chat)
    }

    /// [`held`](Self::held) for several blobs (no chat), in one read transaction.
    pub(crate) fn held_each(&self, owner: &str, ids: &[&BlobId]) -> Result<Vec<Held>> {
        let tx = self.read()?.0;
        ids.iter().map(|id| blob_row::held(&tx, owner, &id.0, None)).collect()
    }

    /// The next chat id to hand out (one past the highest created).
    pub(crate) fn next_chat(&self) -> Result<u64> {
        let tx = self.db.read().begin_read().map_err(redb_err)?;
        let Some(m) = super::query::table(&tx, META)? else { return Ok(1) };
        Ok(m.get("next_chat").map_err(redb_err)?.map(|g| g.value()).unwrap_or(1))
    }
}

/// The first message version in redb's `inline_texts` holding text `id` in a chat that
/// `owns` accepts (one version per chat is looked at: a chat either is the owner's or not).
fn indexed_text(
    tx: &redb::ReadTransaction,
    id: &[u8; 32],
    owns: &dyn Fn(u64) -> Result<bool>,
) -> Result<Option<InlineText>> {
    let Some(texts) = super::query::table(tx, INLINE_TEXTS)? else { return Ok(None) };
    let messages = tx.open_table(MESSAGES).map_err(redb_err)?;
    let m = u64::MAX;
    let mut last_chat = None;
    for item in texts.range((*id, 0, 0, 0, 0)..=(*id, m, m, m, u32::MAX)).map_err(redb_err)? {
        let (_, chat, seq, revision, part) = item.map_err(redb_err)?.0.value();
        if last_chat == Some(chat) {
            continue;
        }
        last_chat = Some(chat);
        if !owns(chat)? {
            continue;
        }
        if let Some(v) = messages.get((chat, seq, revision)).map_err(redb_err)? {
            let history::MsgVal { segment, offset, len, .. } = history::decode_msg_val(v.value())?;
            let loc = Location { segment, offset, len };
            return Ok(Some(InlineText { chat, seq, revision, part, loc }));
        }
    }
    Ok(None)
}

/// Messages listed per write transaction by [`list_body_texts_in`].
const BODY_TEXTS_BATCH: usize = 256;

/// [`Index::list_body_texts`] on the database `db` gives (taken briefly for each
/// transaction: `body` may read the index).
pub(super) fn list_body_texts_in<D: std::ops::Deref<Target = Database>>(
    db: impl Fn() -> D,
    body: &dyn Fn(&[u8; 32]) -> Result<Blob>,
) -> Result<u64> {
    let mut done = 0;
    let mut from: MsgKey = (0, 0, 0);
    loop {
        let todo: Vec<(MsgKey, [u8; 32])> = {
            let tx = db().begin_read().map_err(redb_err)?;
            let Some(t) = super::query::table(&tx, BODY_TEXTS_TODO)? else { return Ok(done) };
            let mut v = Vec::new();
            for item in t.range(from..).map_err(redb_err)?.take(BODY_TEXTS_BATCH) {
                let (k, b) = item.map_err(redb_err)?;
                v.push((k.value(), b.value()));
            }
            v
        };
        let Some(&((c, s, r), _)) = todo.last() else { return Ok(done) };
        from = (c, s, r.saturating_add(1));
        let mut listed = Vec::with_capacity(todo.len());
        for (key, b) in todo {
            let texts = body(&b).and_then(|blob| {
                crate::disk::record::body_texts(&blob)
                    .map_err(|e| Error::index_msg(format!("body blob {}: {e}", BlobId(b))))
            });
            match texts {
                Ok(t) => listed.push((key, t)),
                Err(e) => {
                    tracing::warn!(error = %e, chat = key.0, seq = key.1, "a message body's texts cannot be listed; read_context will not find them")
                }
            }
        }
        let mut tx = db().begin_write().map_err(redb_err)?;
        tx.set_durability(RedbDurability::None).map_err(redb_err)?;
        {
            let mut queued = tx.open_table(BODY_TEXTS_TODO).map_err(redb_err)?;
            let mut inline = tx.open_table(INLINE_TEXTS).map_err(redb_err)?;
            let mut by_chat = tx.open_table(CHAT_INLINE_TEXTS).map_err(redb_err)?;
            for (key, texts) in &listed {
                // Still queued: not taken by a deletion of its chat since it was read.
                if queued.remove(*key).map_err(redb_err)?.is_some() {
                    history::add_texts(&mut inline, &mut by_chat, *key, texts)?;
                    done += 1;
                }
            }
        }
        tx.commit().map_err(redb_err)?;
        if r == u64::MAX {
            return Ok(done);
        }
    }
}
