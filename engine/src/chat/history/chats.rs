//! The store-level calls on chats: create, delete, open, list a page, find by metadata.

use std::collections::HashMap;
use std::sync::Arc;

use super::cache::ChatCache;
use super::edit::meta_rec;
use super::load::{chat_row, read_meta};
use super::state::{ChatState, ChatVersion, SnapInner, Writer, now_ms};
use crate::base::error::{Error, Result};
use crate::disk::record::{self, ChatRec, DeleteRec, Kind};
use crate::kernel::store::core::{Core, RecordOut, Txn};
use crate::model::message::*;

/// The work of `Store::create_chat` (documented there).
pub(crate) fn create_chat(chats: &ChatCache, owner: &str, meta: ChatMeta) -> Result<ChatId> {
    check_owner(owner)?;
    let core = chats.core();
    let id = chats.allocate()?;
    let now = now_ms();
    let mut txn = Txn::default();
    txn.push(RecordOut::of_chat(
        Kind::Chat,
        id.0,
        record::encode(&ChatRec { chat: id.0, owner: owner.to_string(), created_ms: now })?.into_vec(),
    ));
    txn.push(RecordOut::of_chat(Kind::Meta, id.0, record::encode(&meta_rec(id, 1, &meta))?.into_vec()));
    let committed = core.append(txn)?;
    let w = empty_writer(id, meta, now, committed.end);
    chats.insert(Arc::new(ChatState::new(core.clone(), id, owner.into(), now, w)));
    core.wait_durable(committed.end)?;
    Ok(id)
}

/// Creates a chat of `owner` holding `messages`, in one transaction with them: after a crash
/// the chat is there with every message or not at all (an importer's session lands whole).
/// `at_ms`: one time per message (Unix ms), which also dates the chat's creation (its first
/// time) and so its last activity; `None` stamps everything now. In fleet mode the chat is
/// created first and its messages appended in a second transaction (a chat is locked in the
/// database only once it exists there).
pub(crate) fn create_chat_with(
    chats: &ChatCache,
    archives: &crate::chat::archive::ArchiveCache,
    owner: &str,
    meta: ChatMeta,
    messages: Vec<NewMessage>,
    at_ms: Option<&[u64]>,
) -> Result<ChatId> {
    check_owner(owner)?;
    let core = chats.core();
    if core.remote().is_some() {
        let id = create_chat(chats, owner, meta)?;
        let state = chats.get(owner, id, true)?;
        let chat = super::ChatRef { state: &state, archives };
        match at_ms {
            Some(at) => chat.append_batch_at(messages, at)?,
            None => chat.append_batch(messages)?,
        };
        return Ok(id);
    }
    let id = chats.allocate()?;
    let now = now_ms();
    let created = at_ms.and_then(|t| t.iter().copied().min()).unwrap_or(now);
    let mut rec = meta_rec(id, 1, &meta);
    rec.at_ms = created;
    let prelude = vec![
        RecordOut::of_chat(
            Kind::Chat,
            id.0,
            record::encode(&ChatRec { chat: id.0, owner: owner.to_string(), created_ms: created })?
                .into_vec(),
        ),
        RecordOut::of_chat(Kind::Meta, id.0, record::encode(&rec)?.into_vec()),
    ];
    let w = empty_writer(id, meta, created, core.log.written());
    // In memory only once its records are committed: a failed write leaves no chat (its id
    // is never given to another).
    let state = Arc::new(ChatState::new(core.clone(), id, owner.into(), created, w));
    super::ChatRef { state: &state, archives }.append_creating(messages, at_ms, prelude)?;
    chats.insert(state);
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
    let state = chats.get(owner, id, true)?;
    let core = chats.core();
    let (mut w, _fleet) = state.lock_write()?;
    let mut txn = Txn::default();
    txn.push(RecordOut::of_chat(
        Kind::Delete,
        id.0,
        record::encode(&DeleteRec { chat: id.0, at_ms: now_ms() })?.into_vec(),
    ));
    let c = core.append(txn)?;
    state.deleted.store(true, std::sync::atomic::Ordering::Release);
    w.last_end = c.end;
    drop(w);
    *state.view.memo.lock() = None;
    forget(&state);
    core.wait_durable(c.end)?;
    // The chat's grants go with it now, not at the indexer's next flush.
    core.ensure_flushed(c.end)
}

/// Opens chat `id` of `owner`. A chat of another owner is the same
/// [`Error::NotFound`] as an absent one.
pub(crate) fn open_chat(chats: &ChatCache, owner: &str, id: ChatId, refresh: bool) -> Result<Arc<ChatState>> {
    check_owner(owner)?;
    chats.get(owner, id, refresh)
}

/// One page of `owner`'s chats, newest activity first.
pub(crate) fn chats(chats: &ChatCache, owner: &str, page: Page) -> Result<ChatPage> {
    check_owner(owner)?;
    if page.limit == 0 || page.limit > 1000 {
        return Err(Error::InvalidArgument(format!("page limit: expected 1..=1000, found {}", page.limit)));
    }
    let core = chats.core();
    if let Some(remote) = core.remote() {
        // Fleet mode: the catalog pages the owner's chats by activity, and only the page's
        // chats are pulled (issue 35's cold start: not every chat of the owner).
        let after = page.after.map(|c| (c.last_activity_ms, c.id.0));
        if let Some(ids) = remote.page(owner, after, page.limit + 1)? {
            return remote_page(chats, owner, page, &ids);
        }
    }
    catch_up(chats, owner)?;
    // Chats in memory are authoritative; the index may lag them by a flush.
    let mut cached: HashMap<u64, ChatSummary> = HashMap::new();
    for s in chats.cached_of(owner) {
        let snap = s.cell.load();
        cached.insert(s.id.0, summary_of(&snap));
    }
    let mut out: Vec<ChatSummary> = cached.values().filter(|c| after_cursor(&page, c)).cloned().collect();
    let tx = core.index.read()?;
    let mut taken = 0;
    let from = page.after.map(|c| (c.last_activity_ms, c.id.0));
    crate::disk::index::owner_chats(&tx, owner, from, |chat| {
        if cached.contains_key(&chat) {
            return Ok(true);
        }
        let Some(summary) = indexed_summary(core, &tx, chat)? else { return Ok(true) };
        if !after_cursor(&page, &summary) {
            return Ok(true);
        }
        out.push(summary);
        taken += 1;
        Ok(taken <= page.limit)
    })?;
    Ok(page_of(out, page.limit))
}

/// The page of `out` (chats after the cursor, in any order, at least `limit + 1` of them when
/// more follow): the first `limit` in the listing's order, and the cursor of the next page
/// when there is one.
fn page_of(mut out: Vec<ChatSummary>, limit: usize) -> ChatPage {
    out.sort_by_key(|c| (u64::MAX - c.last_activity_ms, c.id));
    let more = out.len() > limit;
    out.truncate(limit);
    let next = if more {
        out.last().map(|c| PageCursor { last_activity_ms: c.last_activity_ms, id: c.id })
    } else {
        None
    };
    ChatPage { chats: out, next }
}

/// Whether `c` comes after the cursor of `page` in the listing's order (newest activity
/// first, then by id).
fn after_cursor(page: &Page, c: &ChatSummary) -> bool {
    match page.after {
        None => true,
        Some(cur) => (u64::MAX - c.last_activity_ms, c.id) > (u64::MAX - cur.last_activity_ms, cur.id),
    }
}

/// [`chats`] in fleet mode once the catalog named the page: `ids`, at most `page.limit + 1`
/// chats in the listing's order. They are brought up to date in one query (and those in
/// memory follow what it pulled), then summarized as embedded mode summarizes them.
fn remote_page(chats: &ChatCache, owner: &str, page: Page, ids: &[u64]) -> Result<ChatPage> {
    let core = chats.core();
    let heads: HashMap<u64, crate::kernel::store::remote::ChatHead> = match core.remote() {
        Some(remote) => remote.catch_up_chats(core, owner, ids)?.into_iter().collect(),
        None => HashMap::new(),
    };
    core.ensure_flushed(core.log.written())?;
    let cached: HashMap<u64, Arc<ChatState>> =
        chats.cached_of(owner).into_iter().map(|s| (s.id.0, s)).collect();
    let tx = core.index.read()?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let Some(head) = heads.get(id).filter(|h| !h.deleted) else { continue };
        let summary = match cached.get(id) {
            Some(s) => match s.follow_head(*head) {
                Ok(()) => summary_of(&s.cell.load()),
                Err(Error::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            },
            None => match indexed_summary(core, &tx, *id)? {
                Some(s) => s,
                None => continue,
            },
        };
        if after_cursor(&page, &summary) {
            out.push(summary);
        }
    }
    Ok(page_of(out, page.limit))
}

/// Every chat of `owner` with its revision and length, in no order: what
/// [`chats`] lists, without the metadata (no log read) or the sort. For the search index,
/// which compares them with what it covers on every search.
pub(crate) fn chat_marks(chats: &ChatCache, owner: &str) -> Result<Vec<(ChatId, u64, u64)>> {
    check_owner(owner)?;
    let core = chats.core();
    catch_up(chats, owner)?;
    // Chats in memory are authoritative; the index may lag them by a flush.
    let mut out: HashMap<u64, (u64, u64)> = HashMap::new();
    for s in chats.cached_of(owner) {
        let snap = s.cell.load();
        out.insert(s.id.0, (snap.revision, snap.len));
    }
    let tx = core.index.read()?;
    crate::disk::index::owner_chats(&tx, owner, None, |chat| {
        if !out.contains_key(&chat)
            && let Some(row) = chat_row(&tx, ChatId(chat))?
        {
            out.insert(chat, (row.revision, row.len));
        }
        Ok(true)
    })?;
    Ok(out.into_iter().map(|(c, (r, l))| (ChatId(c), r, l)).collect())
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
    let key = match field {
        MetaField::Title => (crate::disk::index::FIELD_TITLE, ""),
        MetaField::Extra(k) => (crate::disk::index::FIELD_EXTRA, k),
    };
    // Fleet mode: what the catch-up said of each chat it brought up (the chats in memory
    // follow it without another query).
    let mut heads: HashMap<u64, crate::kernel::store::remote::ChatHead> = HashMap::new();
    if let Some(remote) = core.remote() {
        // Fleet mode: the catalog names the chats with the title or extra field, so only
        // those are pulled (issue 35's cold start: not every chat of the owner), and so are
        // the chats the local replica names (another process may have changed their
        // metadata): the lookup and the pull are one statement.
        core.ensure_flushed(core.log.written())?;
        let local = crate::disk::index::find_chats(&core.index.read()?, owner, key, value)?;
        let named = remote.catch_up_found(core, owner, field, value, &local)?;
        heads = match named {
            Some(found) => found,
            None => remote.catch_up_owner(core, owner)?,
        }
        .into_iter()
        .collect();
    }
    // Every record written so far is in redb: the lookup table answers for all of them.
    core.ensure_flushed(core.log.written())?;
    let tx = core.index.read()?;
    let found = crate::disk::index::find_chats(&tx, owner, key, value)?;
    let cached: HashMap<u64, Arc<ChatState>> = if found.is_empty() {
        HashMap::new()
    } else {
        chats.cached_of(owner).into_iter().map(|s| (s.id.0, s)).collect()
    };
    let mut out = Vec::new();
    for chat in found {
        // A chat in memory is authoritative (its summary needs no log read), once brought up
        // to what other processes committed (fleet mode; a chat deleted there is skipped).
        let summary = match cached.get(&chat) {
            Some(s) => match heads.get(&chat).map_or_else(|| s.sync(), |h| s.follow_head(*h)) {
                Ok(()) => summary_of(&s.cell.load()),
                Err(crate::base::error::Error::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            },
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
fn indexed_summary(core: &Core, tx: &crate::disk::index::ReadTx, chat: u64) -> Result<Option<ChatSummary>> {
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

/// Every owner holding chats in this store, with how many, by name (a maintenance figure:
/// it names owners). From the index, brought up to date with the log first; in fleet mode,
/// the owners this process has seen.
pub(crate) fn owners(chats: &ChatCache) -> Result<Vec<(String, u64)>> {
    let core = chats.core();
    core.ensure_flushed(core.log.written())?;
    crate::disk::index::owners(&core.index.read()?)
}

/// Brings what this process holds of `owner`'s chats up to date before they are listed: in
/// fleet mode, the owner's chats as other processes left them; then the index, flushed up
/// to the log's end (chats in memory stay authoritative over it).
fn catch_up(chats: &ChatCache, owner: &str) -> Result<()> {
    let core = chats.core();
    if let Some(remote) = core.remote() {
        remote.catch_up_owner(core, owner)?;
        for s in chats.cached_of(owner) {
            match s.sync() {
                Ok(()) | Err(Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    core.ensure_flushed(core.log.written())
}

/// The writer state of a chat just created with `meta`, at `at_ms`, whose creation ends at
/// `end` of the log.
fn empty_writer(id: ChatId, meta: ChatMeta, at_ms: u64, end: crate::disk::log::Position) -> Writer {
    Writer {
        version: ChatVersion {
            revision: 0,
            len: 0,
            entries: Arc::new(super::entries::Entries::in_memory(id, 0)),
            meta: Arc::new(meta),
            meta_version: 1,
            last_ms: at_ms,
            pins: Arc::new(Vec::new()),
            compactions: Arc::new(Vec::new()),
            calibration: Arc::new(Default::default()),
            checkpoint: None,
            hidden: Default::default(),
        },
        last_turn: 0,
        last_end: end,
    }
}
