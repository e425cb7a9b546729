//! redb tables of conversation history, derived from the history records of the log.
//! Every value points back into the log; the message text itself lives only there.

use redb::{ReadableTable, TableDefinition};

use super::blob_row::{self, BLOBS, GRANTS};
use super::{META, PendingRecord, redb_err};
use crate::base::error::{Error, Result};
use crate::disk::log::Location;
use crate::disk::record::Kind;
use crate::disk::record::append_key::AppendKeyRec;
use crate::disk::record::compact::{Reader, varint, varint_loc};
use crate::disk::record::{
    self, ArchiveRec, ChatRec, CheckpointRec, CompactionRec, DeleteRec, GrantRec, HideRec, MessageTexts,
    MetaRec, PinRec, RevRec, StepRec, SummaryRec, UsageRec,
};

type Loc = (u64, u64, u32);

/// chat -> encoded [`ChatRow`].
pub(crate) const CHATS: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("chats");
/// (owner, last activity ms, u64::MAX - chat) -> () : an owner's chats, read backwards for
/// newest first (ties by id). Keyed ascending (layout 10) so that the newest activity inserts
/// at the table's end and fills its pages; keyed newest first before, every insert split a
/// page at the table's start and left both halves half empty.
pub(crate) const OWNER_CHATS: TableDefinition<'_, (&str, u64, u64), ()> = TableDefinition::new("owner_chats");
/// A message version in the index: where its record is, and the header fields a cold load
/// needs without reading the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MsgVal {
    pub segment: u64,
    pub offset: u64,
    pub len: u32,
    /// The record's header fields (role, turn, at_ms, has step, may archive, estimate).
    pub head: record::MsgHead,
}

/// (chat, seq, revision) -> [`MsgVal`] as [`encode_msg_val`] writes it: every version of
/// every message.
pub(crate) const MESSAGES: TableDefinition<'_, (u64, u64, u64), &[u8]> = TableDefinition::new("messages");

/// A [`MESSAGES`] value: segment, offset, length, turn and at_ms as varints around one byte
/// of the role code (low 6 bits), may-archive (bit 6) and has-step (high bit), then the
/// token estimate as a varint when there is one: 13–23 bytes where the fixed tuple took 38
/// (index layout 7; may-archive since layout 8, the estimate since layout 11).
pub(crate) fn encode_msg_val(v: MsgVal) -> Vec<u8> {
    let mut out = Vec::with_capacity(28);
    varint_loc(&mut out, (v.segment, v.offset, v.len));
    let h = v.head;
    out.push(h.role & 0x3f | if h.may_archive { 0x40 } else { 0 } | if h.has_step { 0x80 } else { 0 });
    varint(&mut out, h.turn);
    varint(&mut out, h.at_ms);
    if let Some(t) = h.tokens {
        varint(&mut out, t);
    }
    out
}

/// Reads a [`MESSAGES`] value; one that does not decode is index damage.
pub(crate) fn decode_msg_val(bytes: &[u8]) -> Result<MsgVal> {
    let bad = |e: String| Error::index_msg(format!("a row of the messages table does not decode: {e}"));
    let mut r = Reader(bytes);
    let (segment, offset, len) = r.loc().map_err(bad)?;
    let flags = r.u8().map_err(bad)?;
    let (turn, at_ms) = (r.varint().map_err(bad)?, r.varint().map_err(bad)?);
    let tokens = if r.0.is_empty() { None } else { Some(r.varint().map_err(bad)?) };
    if !r.0.is_empty() {
        return Err(bad(format!("{} bytes after the value", r.0.len())));
    }
    let head = record::MsgHead {
        role: flags & 0x3f,
        turn,
        at_ms,
        has_step: flags & 0x80 != 0,
        may_archive: flags & 0x40 != 0,
        tokens,
    };
    Ok(MsgVal { segment, offset, len, head })
}
/// (chat, revision) -> (seq, length before, length after, truncate?).
pub(crate) const REVISIONS: TableDefinition<'_, (u64, u64), (u64, u64, u64, bool)> =
    TableDefinition::new("revisions");
/// (chat, revision, start) -> end: the ranges of seqs hidden at each revision (soft
/// deletion; see [`HideRec`]).
pub(crate) const HIDDEN: TableDefinition<'_, (u64, u64, u64), u64> = TableDefinition::new("hidden");
/// (chat, revision, start) -> end: the ranges of seqs erased at each revision (see
/// `Kind::Erase`).
pub(crate) const ERASED: TableDefinition<'_, (u64, u64, u64), u64> = TableDefinition::new("erased");
/// (chat, key) -> (first seq, count): the appends made with an idempotency key (see
/// `record::append_key`).
pub(crate) const APPEND_KEYS: TableDefinition<'_, (u64, &str), (u64, u64)> =
    TableDefinition::new("append_keys");
/// (chat, version) -> metadata record location: segment, offset and length as varints
/// (layout 10; a fixed 20-byte tuple before).
pub(crate) const METAS: TableDefinition<'_, (u64, u64), &[u8]> = TableDefinition::new("metas");
/// (chat, turn, segment, offset) -> step record payload length: steps in log order.
pub(crate) const STEPS: TableDefinition<'_, (u64, u64, u64, u64), u32> = TableDefinition::new("steps");

/// (owner, archive id) -> encoded `ArchiveRec`: who may read which archive.
pub(crate) const ARCHIVES: TableDefinition<'_, (&str, [u8; 32]), &[u8]> = TableDefinition::new("archives");
/// A grant bit (see `blob_row`): a blob grant record (kind 15).
pub(crate) const GRANT_BLOB: u8 = 1;
/// A grant bit: an archive grant record (kind 7).
pub(crate) const GRANT_ARCHIVE: u8 = 2;

/// Not a grant bit of the index: the grant cache's note (see `store/blobs.rs`) that the owner holds a
/// text inline in a message of one of its chats ([`INLINE_TEXTS`]), which it may read as an
/// archive by the text's content address.
pub(crate) const GRANT_INLINE: u8 = 4;

/// (content address, chat, seq, revision, part) -> () : the inline texts of every message
/// version (text parts and inline tool results, by the BLAKE3 of the text), so that a preview
/// a view makes of one can name the text by its content address and `read_context` find it,
/// although no archive of it was written.
pub(crate) const INLINE_TEXTS: TableDefinition<'_, ([u8; 32], u64, u64, u64, u32), ()> =
    TableDefinition::new("inline_texts");
/// (chat, seq, revision, part, content address) -> () : the rows of [`INLINE_TEXTS`] by
/// chat (to drop them when the chat is deleted), in the order a chat's messages are written,
/// so that appending to a long chat inserts here at the end (layout 9; before, keyed by the
/// text's address after the chat, every insert landed anywhere in the chat's rows).
pub(crate) const CHAT_INLINE_TEXTS: TableDefinition<'_, (u64, u64, u64, u32, [u8; 32]), ()> =
    TableDefinition::new("chat_inline_texts");
/// (chat, seq, revision) -> body blob id : message versions whose parts are in a body blob,
/// whose texts are not in [`INLINE_TEXTS`] yet (the indexer reads no blob; they are listed
/// when a lookup misses: see `Index::list_body_texts`).
pub(crate) const BODY_TEXTS_TODO: TableDefinition<'_, (u64, u64, u64), [u8; 32]> =
    TableDefinition::new("body_texts_todo");
/// (chat, seq, revision) -> () : the message versions that may hold an archived tool result
/// ([`record::MsgHead::may_archive`]), so that a checkpoint's handles line finds them without
/// an entry for every message it covers (index layout 8).
pub(crate) const MAY_ARCHIVE: TableDefinition<'_, (u64, u64, u64), ()> = TableDefinition::new("may_archive");

/// (chat, archive id, unit, start, end) -> () : pinned pages.
pub(crate) const PINS: TableDefinition<'_, (u64, [u8; 32], u8, u64, u64), ()> = TableDefinition::new("pins");

/// (chat, model) -> calibration factor (f64 bits).
pub(crate) const CALIB: TableDefinition<'_, (u64, &str), u64> = TableDefinition::new("calibration");
/// (chat, segment, offset) -> payload length of a compaction record.
pub(crate) const COMPACTIONS: TableDefinition<'_, (u64, u64, u64), u32> = TableDefinition::new("compactions");

/// (key, summarizer id) -> blob of the summary text.
pub(crate) const SUMMARIES: TableDefinition<'_, ([u8; 32], &str), [u8; 32]> =
    TableDefinition::new("summaries");
/// chat -> location of its latest published checkpoint record.
pub(crate) const CHECKPOINTS: TableDefinition<'_, u64, Loc> = TableDefinition::new("checkpoints");

/// (owner, field, key, value hash, chat) -> () : an owner's chats by a metadata value. Field
/// [`FIELD_TITLE`] (key `""`) is the title, [`FIELD_EXTRA`] an `extra` entry under `key`; the
/// value is kept as its [`value_hash`], so a long value costs 16 bytes here.
pub(crate) const CHAT_LOOKUP: TableDefinition<'_, (&str, u8, &str, [u8; 16], u64), ()> =
    TableDefinition::new("chat_lookup");
/// (chat, field, key) -> value hash: the `chat_lookup` rows of a chat's current metadata, to
/// replace them when the metadata changes and drop them with the chat.
pub(crate) const CHAT_FIELDS: TableDefinition<'_, (u64, u8, &str), [u8; 16]> =
    TableDefinition::new("chat_fields");
/// A `chat_lookup` field: the title.
pub(crate) const FIELD_TITLE: u8 = 0;
/// A `chat_lookup` field: an `extra` entry.
pub(crate) const FIELD_EXTRA: u8 = 1;

/// The hash a metadata value is looked up by: the first 16 bytes of its BLAKE3.
pub(crate) fn value_hash(value: &str) -> [u8; 16] {
    let mut h = [0u8; 16];
    h.copy_from_slice(&blake3::hash(value.as_bytes()).as_bytes()[..16]);
    h
}

/// The `chat_lookup` entries of a metadata record: (field, key, value hash).
fn lookup_fields(m: &MetaRec) -> Vec<(u8, String, [u8; 16])> {
    let mut out = vec![(FIELD_TITLE, String::new(), value_hash(&m.title))];
    out.extend(m.extra.iter().map(|(k, v)| (FIELD_EXTRA, k.clone(), value_hash(v))));
    out
}

/// What the index keeps per chat. Stored as varints (layout 10; an rkyv struct of 88 bytes
/// before): owner (length, UTF-8), `created_ms`, `last_ms`, `len`, `revision`,
/// `meta_version`, then `meta_loc` as segment + 1 (0: none) and, when present, offset and
/// length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChatRow {
    pub owner: String,
    pub created_ms: u64,
    pub last_ms: u64,
    pub len: u64,
    pub revision: u64,
    pub meta_version: u64,
    pub meta_loc: Option<(u64, u64, u32)>,
}

impl ChatRow {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.owner.len());
        varint(&mut out, self.owner.len() as u64);
        out.extend_from_slice(self.owner.as_bytes());
        for v in [self.created_ms, self.last_ms, self.len, self.revision, self.meta_version] {
            varint(&mut out, v);
        }
        match self.meta_loc {
            None => varint(&mut out, 0),
            Some((segment, offset, len)) => {
                varint(&mut out, segment + 1);
                varint(&mut out, offset);
                varint(&mut out, u64::from(len));
            }
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<ChatRow> {
        let bad = |e: String| Error::index_msg(format!("chat row: {e}"));
        let mut r = Reader(bytes);
        let n = r.varint().map_err(bad)?;
        let owner = String::from_utf8(r.bytes(n).map_err(bad)?.to_vec())
            .map_err(|e| bad(format!("an owner that is not UTF-8: {e}")))?;
        let mut next = || r.varint().map_err(bad);
        let (created_ms, last_ms, len, revision, meta_version) =
            (next()?, next()?, next()?, next()?, next()?);
        let meta_loc = match next()? {
            0 => None,
            segment => {
                let offset = next()?;
                let len = u32::try_from(next()?).map_err(|_| bad("a metadata length over 4 GiB".into()))?;
                Some((segment - 1, offset, len))
            }
        };
        if !r.0.is_empty() {
            return Err(bad(format!("{} bytes after its last field", r.0.len())));
        }
        Ok(ChatRow { owner, created_ms, last_ms, len, revision, meta_version, meta_loc })
    }
}

/// The `owner_chats` key of `chat` of `owner` last active at `last_ms`.
pub(crate) fn owner_key(owner: &str, last_ms: u64, chat: u64) -> (&str, u64, u64) {
    (owner, last_ms, u64::MAX - chat)
}

/// A location as three varints (segment, offset, length): a `metas` value.
pub(crate) fn encode_loc(l: Location) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    varint_loc(&mut out, loc(l));
    out
}

/// The location [`encode_loc`] wrote.
pub(crate) fn decode_loc(bytes: &[u8]) -> Result<Location> {
    let bad = |e: String| Error::index_msg(format!("metadata location: {e}"));
    let mut r = Reader(bytes);
    let (segment, offset, len) = r.loc().map_err(bad)?;
    if !r.0.is_empty() {
        return Err(bad(format!("{} bytes after its last field", r.0.len())));
    }
    Ok(Location { segment, offset, len })
}

fn loc(l: Location) -> Loc {
    (l.segment, l.offset, l.len)
}

fn bad(r: &PendingRecord, why: String) -> Error {
    Error::corrupt(r.loc.segment, r.loc.offset, why)
}

/// The history tables opened in a write transaction. Chat rows are cached for the
/// transaction and written once by [`HistoryIndex::finish`], so a batch of a hundred
/// messages costs one row update, not a hundred.
pub(crate) struct HistoryIndex<'t> {
    /// By chat id (a `BTreeMap`: a few chats per transaction, looked up once per record,
    /// cost less to compare than to hash).
    rows: std::collections::BTreeMap<u64, (ChatRow, Option<u64>)>,
    chats: redb::Table<'t, u64, &'static [u8]>,
    owners: redb::Table<'t, (&'static str, u64, u64), ()>,
    messages: redb::Table<'t, (u64, u64, u64), &'static [u8]>,
    revisions: redb::Table<'t, (u64, u64), (u64, u64, u64, bool)>,
    hidden: redb::Table<'t, (u64, u64, u64), u64>,
    erased: redb::Table<'t, (u64, u64, u64), u64>,
    append_keys: redb::Table<'t, (u64, &'static str), (u64, u64)>,
    metas: redb::Table<'t, (u64, u64), &'static [u8]>,
    steps: redb::Table<'t, (u64, u64, u64, u64), u32>,
    archives: redb::Table<'t, (&'static str, [u8; 32]), &'static [u8]>,
    blobs: redb::Table<'t, [u8; 32], &'static [u8]>,
    grants: redb::Table<'t, (&'static str, [u8; 32], u64), u8>,
    inline_texts: redb::Table<'t, ([u8; 32], u64, u64, u64, u32), ()>,
    chat_inline_texts: redb::Table<'t, (u64, u64, u64, u32, [u8; 32]), ()>,
    body_texts_todo: redb::Table<'t, (u64, u64, u64), [u8; 32]>,
    may_archive: redb::Table<'t, (u64, u64, u64), ()>,
    pins: redb::Table<'t, (u64, [u8; 32], u8, u64, u64), ()>,
    calib: redb::Table<'t, (u64, &'static str), u64>,
    compactions: redb::Table<'t, (u64, u64, u64), u32>,
    summaries: redb::Table<'t, ([u8; 32], &'static str), [u8; 32]>,
    checkpoints: redb::Table<'t, u64, Loc>,
    lookup: redb::Table<'t, (&'static str, u8, &'static str, [u8; 16], u64), ()>,
    fields: redb::Table<'t, (u64, u8, &'static str), [u8; 16]>,
    meta: redb::Table<'t, &'static str, u64>,
}

impl<'t> HistoryIndex<'t> {
    pub(crate) fn open_write(tx: &'t redb::WriteTransaction) -> Result<Self> {
        Ok(HistoryIndex {
            rows: std::collections::BTreeMap::new(),
            chats: tx.open_table(CHATS).map_err(redb_err)?,
            owners: tx.open_table(OWNER_CHATS).map_err(redb_err)?,
            messages: tx.open_table(MESSAGES).map_err(redb_err)?,
            revisions: tx.open_table(REVISIONS).map_err(redb_err)?,
            hidden: tx.open_table(HIDDEN).map_err(redb_err)?,
            erased: tx.open_table(ERASED).map_err(redb_err)?,
            append_keys: tx.open_table(APPEND_KEYS).map_err(redb_err)?,
            metas: tx.open_table(METAS).map_err(redb_err)?,
            steps: tx.open_table(STEPS).map_err(redb_err)?,
            archives: tx.open_table(ARCHIVES).map_err(redb_err)?,
            blobs: tx.open_table(BLOBS).map_err(redb_err)?,
            grants: tx.open_table(GRANTS).map_err(redb_err)?,
            inline_texts: tx.open_table(INLINE_TEXTS).map_err(redb_err)?,
            chat_inline_texts: tx.open_table(CHAT_INLINE_TEXTS).map_err(redb_err)?,
            body_texts_todo: tx.open_table(BODY_TEXTS_TODO).map_err(redb_err)?,
            may_archive: tx.open_table(MAY_ARCHIVE).map_err(redb_err)?,
            pins: tx.open_table(PINS).map_err(redb_err)?,
            calib: tx.open_table(CALIB).map_err(redb_err)?,
            compactions: tx.open_table(COMPACTIONS).map_err(redb_err)?,
            summaries: tx.open_table(SUMMARIES).map_err(redb_err)?,
            checkpoints: tx.open_table(CHECKPOINTS).map_err(redb_err)?,
            lookup: tx.open_table(CHAT_LOOKUP).map_err(redb_err)?,
            fields: tx.open_table(CHAT_FIELDS).map_err(redb_err)?,
            meta: tx.open_table(META).map_err(redb_err)?,
        })
    }

    /// The chat's row, for changing; written back by `finish`.
    fn row(&mut self, chat: u64, r: &PendingRecord) -> Result<&mut ChatRow> {
        if !self.rows.contains_key(&chat) {
            let Some(g) = self.chats.get(chat).map_err(redb_err)? else {
                return Err(bad(r, format!("record for chat {chat}, which was never created")));
            };
            let row = ChatRow::decode(g.value())?;
            drop(g);
            let last = row.last_ms;
            self.rows.insert(chat, (row, Some(last)));
        }
        match self.rows.get_mut(&chat) {
            Some((row, _)) => Ok(row),
            None => Err(bad(r, format!("chat {chat} row vanished"))),
        }
    }

    /// Writes the changed chat rows and their owner-listing keys, the keys in ascending order:
    /// the newest activity goes at the table's end, where in-order inserts fill its pages
    /// (chats of one millisecond, in id order, would insert backwards).
    pub(crate) fn finish(mut self) -> Result<()> {
        let mut listed = Vec::with_capacity(self.rows.len());
        for (chat, (row, old_last)) in std::mem::take(&mut self.rows) {
            self.chats.insert(chat, row.encode().as_slice()).map_err(redb_err)?;
            if let Some(old) = old_last {
                self.owners.remove(owner_key(&row.owner, old, chat)).map_err(redb_err)?;
            }
            listed.push((row.owner, row.last_ms, chat));
        }
        listed.sort_unstable_by(|a, b| owner_key(&a.0, a.1, a.2).cmp(&owner_key(&b.0, b.1, b.2)));
        for (owner, last_ms, chat) in &listed {
            self.owners.insert(owner_key(owner, *last_ms, *chat), ()).map_err(redb_err)?;
        }
        Ok(())
    }

    /// Makes `chat_lookup` find `chat` of `owner` by exactly `new` (its metadata's fields):
    /// rows of fields that changed or went are removed, new ones inserted.
    fn set_lookup(&mut self, chat: u64, owner: &str, new: &[(u8, String, [u8; 16])]) -> Result<()> {
        let mut old = Vec::new();
        for item in self.fields.range((chat, 0u8, "")..(chat.saturating_add(1), 0u8, "")).map_err(redb_err)? {
            let (k, v) = item.map_err(redb_err)?;
            let (_, field, key) = k.value();
            old.push((field, key.to_string(), v.value()));
        }
        for (field, key, h) in &old {
            if !new.contains(&(*field, key.clone(), *h)) {
                self.lookup.remove((owner, *field, key.as_str(), *h, chat)).map_err(redb_err)?;
                self.fields.remove((chat, *field, key.as_str())).map_err(redb_err)?;
            }
        }
        for (field, key, h) in new {
            if !old.contains(&(*field, key.clone(), *h)) {
                self.lookup.insert((owner, *field, key.as_str(), *h, chat), ()).map_err(redb_err)?;
                self.fields.insert((chat, *field, key.as_str()), *h).map_err(redb_err)?;
            }
        }
        Ok(())
    }

    /// Removes every row of `chat` (its records stay in the log until `gc`).
    fn delete_chat(&mut self, chat: u64, r: &PendingRecord) -> Result<()> {
        let (row, old_last) = match self.rows.remove(&chat) {
            Some(x) => x,
            None => {
                let Some(g) = self.chats.get(chat).map_err(redb_err)? else {
                    return Err(bad(r, format!("delete of chat {chat}, which was never created")));
                };
                let row = ChatRow::decode(g.value())?;
                drop(g);
                let last = row.last_ms;
                (row, Some(last))
            }
        };
        if let Some(old) = old_last {
            self.owners.remove(owner_key(&row.owner, old, chat)).map_err(redb_err)?;
        }
        self.chats.remove(chat).map_err(redb_err)?;
        let m = u64::MAX;
        self.messages.retain_in((chat, 0, 0)..=(chat, m, m), |_, _| false).map_err(redb_err)?;
        self.revisions.retain_in((chat, 0)..=(chat, m), |_, _| false).map_err(redb_err)?;
        self.hidden.retain_in((chat, 0, 0)..=(chat, m, m), |_, _| false).map_err(redb_err)?;
        self.erased.retain_in((chat, 0, 0)..=(chat, m, m), |_, _| false).map_err(redb_err)?;
        self.append_keys
            .retain_in((chat, "")..(chat.saturating_add(1), ""), |_, _| false)
            .map_err(redb_err)?;
        self.metas.retain_in((chat, 0)..=(chat, m), |_, _| false).map_err(redb_err)?;
        self.steps.retain_in((chat, 0, 0, 0)..=(chat, m, m, m), |_, _| false).map_err(redb_err)?;
        self.pins
            .retain_in((chat, [0; 32], 0, 0, 0)..=(chat, [255; 32], 255, m, m), |_, _| false)
            .map_err(redb_err)?;
        self.calib.retain_in((chat, "")..(chat.saturating_add(1), ""), |_, _| false).map_err(redb_err)?;
        self.compactions.retain_in((chat, 0, 0)..=(chat, m, m), |_, _| false).map_err(redb_err)?;
        self.checkpoints.remove(chat).map_err(redb_err)?;
        self.body_texts_todo.retain_in((chat, 0, 0)..=(chat, m, m), |_, _| false).map_err(redb_err)?;
        self.may_archive.retain_in((chat, 0, 0)..=(chat, m, m), |_, _| false).map_err(redb_err)?;
        let mut texts = Vec::new();
        let all = (chat, 0, 0, 0, [0u8; 32])..=(chat, m, m, u32::MAX, [255u8; 32]);
        for item in self.chat_inline_texts.range(all.clone()).map_err(redb_err)? {
            texts.push(item.map_err(redb_err)?.0.value());
        }
        for (chat, seq, rev, part, id) in texts {
            self.inline_texts.remove((id, chat, seq, rev, part)).map_err(redb_err)?;
        }
        self.chat_inline_texts.retain_in(all, |_, _| false).map_err(redb_err)?;
        self.set_lookup(chat, &row.owner, &[])?;
        // The grants bound to the chat stay in the blobs' rows: they count only while the
        // chat exists (see `blob_row`), and its row is gone.
        Ok(())
    }

    /// Records a grant of `id` to `owner`, bound to the chats of its batch (or the owner's own).
    fn grant(&mut self, owner: &str, id: [u8; 32], bit: u8, r: &PendingRecord) -> Result<()> {
        let own = [0u64];
        let chats: &[u64] = if r.chats.is_empty() { &own } else { &r.chats };
        for &chat in chats {
            blob_row::add_grant(&mut self.blobs, &mut self.grants, (owner, &id, chat), bit)?;
        }
        Ok(())
    }

    /// Applies one history record.
    pub(crate) fn apply(&mut self, r: &PendingRecord) -> Result<()> {
        match r.kind {
            Kind::Chat => {
                let c: ChatRec = record::decode(&r.payload, "chat").map_err(|e| bad(r, e))?;
                let row = ChatRow {
                    owner: c.owner,
                    created_ms: c.created_ms,
                    last_ms: c.created_ms,
                    len: 0,
                    revision: 0,
                    meta_version: 0,
                    meta_loc: None,
                };
                self.rows.insert(c.chat, (row, None));
                let next = self.meta.get("next_chat").map_err(redb_err)?.map(|g| g.value()).unwrap_or(1);
                if c.chat >= next {
                    self.meta.insert("next_chat", c.chat + 1).map_err(redb_err)?;
                }
            }
            Kind::Meta => {
                let m: MetaRec = record::decode(&r.payload, "metadata").map_err(|e| bad(r, e))?;
                self.metas.insert((m.chat, m.version), encode_loc(r.loc).as_slice()).map_err(redb_err)?;
                let row = self.row(m.chat, r)?;
                row.last_ms = row.last_ms.max(m.at_ms);
                if m.version >= row.meta_version {
                    row.meta_version = m.version;
                    row.meta_loc = Some(loc(r.loc));
                    let owner = row.owner.clone();
                    self.set_lookup(m.chat, &owner, &lookup_fields(&m))?;
                }
            }
            Kind::Message | Kind::MessageCompact => {
                // Listed when the record was made (or replayed); a record made without its
                // listing is read here (header fields only: an rkyv record is read in place).
                let read;
                let (key, head, texts) = match &r.texts {
                    Some(l) => (l.key, l.head, &l.texts),
                    None => {
                        let (key, head);
                        ((key, head), read, _) =
                            record::message_key_texts(r.kind, &r.payload, false).map_err(|e| bad(r, e))?;
                        (key, head, &read)
                    }
                };
                let (chat, seq, _) = key;
                let at_ms = head.at_ms;
                let (segment, offset, len) = loc(r.loc);
                let value = encode_msg_val(MsgVal { segment, offset, len, head });
                self.messages.insert(key, value.as_slice()).map_err(redb_err)?;
                if head.may_archive {
                    self.may_archive.insert(key, ()).map_err(redb_err)?;
                }
                match texts {
                    MessageTexts::Listed(texts) => {
                        add_texts(&mut self.inline_texts, &mut self.chat_inline_texts, key, texts)?
                    }
                    MessageTexts::InBlob(body) => {
                        self.body_texts_todo.insert(key, *body).map_err(redb_err)?;
                    }
                    // Listed in memory when a lookup first needs them (`index/aside_texts.rs`).
                    MessageTexts::Deferred => {}
                }
                let row = self.row(chat, r)?;
                row.len = row.len.max(seq + 1);
                row.last_ms = row.last_ms.max(at_ms);
            }
            Kind::Revision => {
                let v: RevRec = record::decode(&r.payload, "revision").map_err(|e| bad(r, e))?;
                let value = (v.seq, v.len_before, v.len_after, v.truncate);
                self.revisions.insert((v.chat, v.revision), value).map_err(redb_err)?;
                let row = self.row(v.chat, r)?;
                row.revision = row.revision.max(v.revision);
                row.len = v.len_after;
                row.last_ms = row.last_ms.max(v.at_ms);
            }
            Kind::Hide => {
                let h: HideRec = record::decode(&r.payload, "hide").map_err(|e| bad(r, e))?;
                for &(start, end) in &h.ranges {
                    self.hidden.insert((h.chat, h.revision, start), end).map_err(redb_err)?;
                }
                let row = self.row(h.chat, r)?;
                row.last_ms = row.last_ms.max(h.at_ms);
            }
            Kind::Erase => {
                let h: HideRec = record::decode(&r.payload, "erase").map_err(|e| bad(r, e))?;
                for &(start, end) in &h.ranges {
                    self.erased.insert((h.chat, h.revision, start), end).map_err(redb_err)?;
                }
            }
            Kind::AppendKey => {
                let k = AppendKeyRec::decode(&r.payload).map_err(|e| bad(r, e))?;
                self.append_keys.insert((k.chat, k.key.as_str()), (k.first, k.count)).map_err(redb_err)?;
            }
            Kind::Step => {
                let s: StepRec = record::decode(&r.payload, "step").map_err(|e| bad(r, e))?;
                self.steps
                    .insert((s.chat, s.turn, r.loc.segment, r.loc.offset), r.loc.len)
                    .map_err(redb_err)?;
            }
            Kind::Archive => {
                let a: ArchiveRec = record::decode(&r.payload, "archive").map_err(|e| bad(r, e))?;
                self.archives.insert((a.owner.as_str(), a.id), r.payload.as_slice()).map_err(redb_err)?;
                self.grant(&a.owner, a.id, GRANT_ARCHIVE, r)?;
            }
            Kind::Grant => {
                let g: GrantRec = record::decode(&r.payload, "grant").map_err(|e| bad(r, e))?;
                self.grant(&g.owner, g.id, GRANT_BLOB, r)?;
            }
            Kind::Pin => {
                let p: PinRec = record::decode(&r.payload, "pin").map_err(|e| bad(r, e))?;
                let key = (p.chat, p.id, p.unit, p.start, p.end);
                if p.pinned {
                    self.pins.insert(key, ()).map_err(redb_err)?;
                } else {
                    self.pins.remove(key).map_err(redb_err)?;
                }
                let row = self.row(p.chat, r)?;
                row.last_ms = row.last_ms.max(p.at_ms);
            }
            Kind::Usage => {
                let u: UsageRec = record::decode(&r.payload, "usage").map_err(|e| bad(r, e))?;
                self.calib.insert((u.chat, u.model.as_str()), u.factor.to_bits()).map_err(redb_err)?;
            }
            Kind::Compaction => {
                let c: CompactionRec = record::decode(&r.payload, "compaction").map_err(|e| bad(r, e))?;
                self.compactions
                    .insert((c.chat, r.loc.segment, r.loc.offset), r.loc.len)
                    .map_err(redb_err)?;
                let row = self.row(c.chat, r)?;
                row.last_ms = row.last_ms.max(c.at_ms);
            }
            Kind::Summary => {
                let s: SummaryRec = record::decode(&r.payload, "summary").map_err(|e| bad(r, e))?;
                self.summaries.insert((s.key, s.summarizer.as_str()), s.text).map_err(redb_err)?;
            }
            Kind::Checkpoint => {
                let c: CheckpointRec = record::decode(&r.payload, "checkpoint").map_err(|e| bad(r, e))?;
                self.checkpoints.insert(c.chat, loc(r.loc)).map_err(redb_err)?;
                let row = self.row(c.chat, r)?;
                row.last_ms = row.last_ms.max(c.at_ms);
            }
            Kind::Delete => {
                let d: DeleteRec = record::decode(&r.payload, "delete").map_err(|e| bad(r, e))?;
                self.delete_chat(d.chat, r)?;
            }
            Kind::Blob | Kind::Manifest => {
                return Err(bad(r, format!("record kind {} is a blob's, not history", r.kind)));
            }
        }
        Ok(())
    }
}

/// The (chat, seq, revision) of a message version.
pub(crate) type MsgKey = (u64, u64, u64);

/// Lists `texts` (part, content address) of message version `key` in the inline-text tables.
pub(crate) fn add_texts(
    inline: &mut redb::Table<'_, ([u8; 32], u64, u64, u64, u32), ()>,
    by_chat: &mut redb::Table<'_, (u64, u64, u64, u32, [u8; 32]), ()>,
    (chat, seq, rev): MsgKey,
    texts: &[(u32, [u8; 32])],
) -> Result<()> {
    for &(part, id) in texts {
        inline.insert((id, chat, seq, rev, part), ()).map_err(redb_err)?;
        by_chat.insert((chat, seq, rev, part, id), ()).map_err(redb_err)?;
    }
    Ok(())
}

/// Every difference between the history tables of two indexes.
pub(crate) fn diff_tables(
    ours: &redb::ReadTransaction,
    theirs: &redb::ReadTransaction,
    out: &mut Vec<String>,
) -> Result<()> {
    use super::diff_table;
    diff_table(ours, theirs, CHATS, out)?;
    diff_table(ours, theirs, OWNER_CHATS, out)?;
    diff_table(ours, theirs, MESSAGES, out)?;
    diff_table(ours, theirs, REVISIONS, out)?;
    diff_table(ours, theirs, HIDDEN, out)?;
    diff_table(ours, theirs, ERASED, out)?;
    diff_table(ours, theirs, APPEND_KEYS, out)?;
    diff_table(ours, theirs, METAS, out)?;
    diff_table(ours, theirs, STEPS, out)?;
    diff_table(ours, theirs, ARCHIVES, out)?;
    diff_table(ours, theirs, GRANTS, out)?;
    diff_table(ours, theirs, INLINE_TEXTS, out)?;
    diff_table(ours, theirs, CHAT_INLINE_TEXTS, out)?;
    diff_table(ours, theirs, BODY_TEXTS_TODO, out)?;
    diff_table(ours, theirs, MAY_ARCHIVE, out)?;
    diff_table(ours, theirs, PINS, out)?;
    diff_table(ours, theirs, CALIB, out)?;
    diff_table(ours, theirs, COMPACTIONS, out)?;
    diff_table(ours, theirs, SUMMARIES, out)?;
    diff_table(ours, theirs, CHECKPOINTS, out)?;
    diff_table(ours, theirs, CHAT_LOOKUP, out)?;
    diff_table(ours, theirs, CHAT_FIELDS, out)?;
    Ok(())
}

/// Deletes the history tables (before a rebuild).
pub(crate) fn delete_tables(tx: &redb::WriteTransaction) -> Result<()> {
    tx.delete_table(CHATS).map_err(redb_err)?;
    tx.delete_table(OWNER_CHATS).map_err(redb_err)?;
    tx.delete_table(MESSAGES).map_err(redb_err)?;
    tx.delete_table(REVISIONS).map_err(redb_err)?;
    tx.delete_table(HIDDEN).map_err(redb_err)?;
    tx.delete_table(ERASED).map_err(redb_err)?;
    tx.delete_table(APPEND_KEYS).map_err(redb_err)?;
    tx.delete_table(METAS).map_err(redb_err)?;
    tx.delete_table(STEPS).map_err(redb_err)?;
    tx.delete_table(ARCHIVES).map_err(redb_err)?;
    tx.delete_table(GRANTS).map_err(redb_err)?;
    // Of layouts before 7 (grants bound to a chat, by chat).
    tx.delete_table(TableDefinition::<(u64, [u8; 32]), ()>::new("chat_grants")).map_err(redb_err)?;
    tx.delete_table(INLINE_TEXTS).map_err(redb_err)?;
    tx.delete_table(CHAT_INLINE_TEXTS).map_err(redb_err)?;
    tx.delete_table(BODY_TEXTS_TODO).map_err(redb_err)?;
    tx.delete_table(MAY_ARCHIVE).map_err(redb_err)?;
    tx.delete_table(PINS).map_err(redb_err)?;
    tx.delete_table(CALIB).map_err(redb_err)?;
    tx.delete_table(COMPACTIONS).map_err(redb_err)?;
    tx.delete_table(SUMMARIES).map_err(redb_err)?;
    tx.delete_table(CHECKPOINTS).map_err(redb_err)?;
    tx.delete_table(CHAT_LOOKUP).map_err(redb_err)?;
    tx.delete_table(CHAT_FIELDS).map_err(redb_err)?;
    Ok(())
}

/// The chat a history record belongs to (`None`: it belongs to the store as a whole: blobs,
/// manifests, archive and blob grants, summaries).
pub(crate) fn chat_of(k: Kind, p: &[u8]) -> std::result::Result<Option<u64>, String> {
    Ok(Some(match k {
        Kind::Chat => record::decode::<ChatRec>(p, "chat")?.chat,
        Kind::Meta => record::decode::<MetaRec>(p, "metadata")?.chat,
        Kind::Message | Kind::MessageCompact => record::message_fields(k, p)?.chat,
        Kind::Revision => record::decode::<RevRec>(p, "revision")?.chat,
        Kind::Hide => record::decode::<HideRec>(p, "hide")?.chat,
        Kind::Erase => record::decode::<HideRec>(p, "erase")?.chat,
        Kind::Step => record::decode::<StepRec>(p, "step")?.chat,
        Kind::Pin => record::decode::<PinRec>(p, "pin")?.chat,
        Kind::Usage => record::decode::<UsageRec>(p, "usage")?.chat,
        Kind::Compaction => record::decode::<CompactionRec>(p, "compaction")?.chat,
        Kind::Checkpoint => record::decode::<CheckpointRec>(p, "checkpoint")?.chat,
        Kind::Delete => record::decode::<DeleteRec>(p, "delete")?.chat,
        Kind::AppendKey => AppendKeyRec::decode(p)?.chat,
        Kind::Blob | Kind::Manifest | Kind::Archive | Kind::Grant | Kind::Summary => return Ok(None),
    }))
}

/// True for the kinds that grant a blob to an owner.
pub(crate) fn is_grant(k: Kind) -> bool {
    matches!(k, Kind::Archive | Kind::Grant)
}

/// The chats a grant in a batch of these records is bound to: every chat whose records share
/// the batch (none: the grant is the owner's own). Records that do not decode are skipped
/// here (the history index reports them when it applies them).
pub(crate) fn batch_chats<'a>(records: impl Iterator<Item = (Kind, &'a [u8])>) -> Vec<u64> {
    let mut chats: Vec<u64> = records.filter_map(|(k, p)| chat_of(k, p).ok().flatten()).collect();
    chats.sort_unstable();
    chats.dedup();
    chats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_row_and_a_metadata_location_read_back_as_written_and_damage_is_an_error() {
        let rows = [
            ChatRow {
                owner: String::new(),
                created_ms: 0,
                last_ms: 0,
                len: 0,
                revision: 0,
                meta_version: 0,
                meta_loc: None,
            },
            ChatRow {
                owner: "ägare ✓".into(),
                created_ms: 1_796_600_905_247,
                last_ms: u64::MAX,
                len: 1 << 40,
                revision: 7,
                meta_version: 3,
                meta_loc: Some((0, u64::MAX, u32::MAX)),
            },
        ];
        for row in rows {
            let bytes = row.encode();
            assert_eq!(ChatRow::decode(&bytes).unwrap(), row);
            for cut in 0..bytes.len() {
                let e = ChatRow::decode(&bytes[..cut]).unwrap_err();
                assert!(e.to_string().contains("chat row"), "{e}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            let e = ChatRow::decode(&longer).unwrap_err();
            assert!(e.to_string().contains("1 bytes after its last field"), "{e}");
        }
        let l = Location { segment: 3, offset: 1 << 33, len: 4096 };
        let bytes = encode_loc(l);
        assert_eq!(decode_loc(&bytes).unwrap(), l);
        assert!(decode_loc(&bytes[..bytes.len() - 1]).is_err());
        let mut big = Vec::new();
        for v in [1, 2, u64::from(u32::MAX) + 1] {
            varint(&mut big, v);
        }
        assert!(decode_loc(&big).unwrap_err().to_string().contains("a length of 4294967296 bytes"));
        let mut bad_owner = Vec::new();
        varint(&mut bad_owner, 2);
        bad_owner.extend_from_slice(&[0xff, 0xfe]);
        assert!(ChatRow::decode(&bad_owner).unwrap_err().to_string().contains("not UTF-8"));
    }
}
