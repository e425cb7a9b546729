//! Loading chats and old revisions back from the index (redb) and the log.

use std::collections::HashMap;
use std::sync::Arc;

use super::entries::Entries;
use super::hidden::Hidden;
use super::state::{Entry, Writer};
use crate::base::error::{Error, Result};
use crate::disk::index::{
    CALIB, CHATS, CHECKPOINTS, COMPACTIONS, ChatRow, ERASED, HIDDEN, MESSAGES, MsgVal, PINS, REVISIONS,
    decode_msg_val,
};
use crate::disk::log::{Location, Position};
use crate::disk::record::{self, CompactionRec, MetaRec};
use crate::kernel::store::core::Core;
use crate::model::message::{ChatId, ChatMeta, Pin};

fn redb_err(e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::index(e)
}

/// The index row of a chat, if it exists.
pub(crate) fn chat_row(tx: &redb::ReadTransaction, chat: ChatId) -> Result<Option<ChatRow>> {
    let t = match tx.open_table(CHATS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(redb_err(e)),
    };
    match t.get(chat.0).map_err(redb_err)? {
        Some(g) => Ok(Some(ChatRow::decode(g.value())?)),
        None => Ok(None),
    }
}

/// Reads a chat's current metadata from the location in its row.
pub(crate) fn read_meta(core: &Core, row: &ChatRow) -> Result<ChatMeta> {
    let Some((segment, offset, len)) = row.meta_loc else {
        return Ok(ChatMeta::default());
    };
    read_meta_at(core, Location { segment, offset, len })
}

pub(crate) fn read_meta_at(core: &Core, loc: Location) -> Result<ChatMeta> {
    let raw = core.read(loc, crate::base::blob::Verify::Checksum)?;
    let m: MetaRec =
        record::decode(&raw.payload, "metadata").map_err(|e| Error::corrupt(loc.segment, loc.offset, e))?;
    Ok(m.to_meta())
}

/// The entries of `chat` as of `revision`, `len` messages long: for each seq the newest
/// version written at or before that revision.
///
/// With `lost` (a salvage: [`Store::open_read_only`](crate::Store::open_read_only), whose
/// index is the log's batches that verify), a message the index lacks is one the log lost:
/// its entry is a [`LOST`] one (read as `NotFound`, hidden by [`lost_hidden`]). Without,
/// it is damage to the index.
pub(crate) fn entries_at(
    tx: &redb::ReadTransaction,
    chat: ChatId,
    revision: u64,
    len: u64,
    lost: bool,
) -> Result<Entries> {
    let out = Entries::in_memory(chat, revision);
    fill_entries(tx, chat, revision, 0..len, &out, lost)?;
    Ok(out)
}

/// Where a message the log lost is (see [`entries_at`]): no segment has this number.
pub(crate) const LOST: Location = Location { segment: u64::MAX, offset: 0, len: 0 };

/// `hidden` with the lost messages of `entries` (`len` long) hidden too, so that views,
/// checkpoints and the default reads pass over them.
pub(crate) fn lost_hidden(mut hidden: Hidden, entries: &Entries, len: u64) -> Hidden {
    let lost: Vec<std::ops::Range<u64>> =
        (0..len).filter(|s| entries.peek(*s).is_some_and(|e| e.loc == LOST)).map(|s| s..s + 1).collect();
    if !lost.is_empty() {
        hidden.add(lost, 0);
    }
    hidden
}

/// True when chats of `core` may have lost messages (see [`entries_at`]).
pub(crate) fn may_lose(core: &Core) -> bool {
    core.read_only == Some(crate::kernel::store::read_only::ReadOnly::Asked)
}

/// Sets entries `seqs` of `chat` as of `revision` in `out`: for each seq the newest version
/// written at or before that revision. The entry before `seqs` tells whether the first one
/// starts a turn: when `out` does not hold it, it is read from the index too (not set).
pub(crate) fn fill_entries(
    tx: &redb::ReadTransaction,
    chat: ChatId,
    revision: u64,
    seqs: std::ops::Range<u64>,
    out: &Entries,
    lost: bool,
) -> Result<()> {
    let t = match tx.open_table(MESSAGES) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(e) => return Err(redb_err(e)),
    };
    let before = seqs.start.checked_sub(1);
    let mut prev_turn = match before.map(|p| out.peek(p)) {
        None => 0,
        Some(Some(e)) => e.turn,
        Some(None) => {
            let p = seqs.start - 1;
            let mut turn = None;
            for item in t.range((chat.0, p, 0u64)..(chat.0, p + 1, 0u64)).map_err(redb_err)? {
                let (k, v) = item.map_err(redb_err)?;
                if k.value().2 <= revision {
                    turn = Some(decode_msg_val(v.value())?.head.turn);
                }
            }
            match turn {
                Some(t) => t,
                None if lost => 0,
                None => {
                    return Err(Error::index_msg(format!(
                        "{chat} revision {revision}: message {p} is missing from the index"
                    )));
                }
            }
        }
    };
    let from = seqs.start;
    // `seqs.end` comes from the index too, so nothing is sized by it: the vector grows with
    // the messages the index actually holds (keys arrive by seq, then revision), and a length
    // the messages do not reach is damage.
    let missing = |k: usize| {
        Error::index_msg(format!(
            "{chat} revision {revision}: message {} is missing from the index",
            from + k as u64
        ))
    };
    let mut vals: Vec<Option<(u64, MsgVal)>> = Vec::new();
    for item in t.range((chat.0, from, 0u64)..(chat.0, seqs.end, 0u64)).map_err(redb_err)? {
        let (k, v) = item.map_err(redb_err)?;
        let (_, seq, rev) = k.value();
        if rev > revision {
            continue;
        }
        match usize::try_from(seq - from) {
            Ok(s) if s < vals.len() => vals[s] = Some((rev, decode_msg_val(v.value())?)),
            Ok(s) if s == vals.len() || lost => {
                vals.resize(s, None);
                vals.push(Some((rev, decode_msg_val(v.value())?)));
            }
            _ => return Err(missing(vals.len())),
        }
    }
    if (vals.len() as u64) < seqs.end - from {
        if !lost {
            return Err(missing(vals.len()));
        }
        // Lost at the end: `seqs.end` is what verifying records of the log say.
        vals.resize((seqs.end - from) as usize, None);
    }
    // Entries come from the index alone: no record is read until a message is.
    for (k, val) in vals.into_iter().enumerate() {
        let seq = from + k as u64;
        let Some((rev, MsgVal { segment, offset, len: l, head })) = val else {
            let step = std::sync::OnceLock::new();
            let _ = step.set(None);
            let e = Entry {
                seq,
                revision: 0,
                role: crate::chat::history::Role::User,
                turn: prev_turn,
                starts_turn: false,
                at_ms: 0,
                step,
                loc: LOST,
                may_archive: false,
                tokens: Default::default(),
                previews: Default::default(),
                pending_json: Default::default(),
            };
            out.set(seq, e);
            continue;
        };
        // The index took the role from a record it decoded (an unknown role fails there):
        // an unknown one here is damage to the index, which a rebuild repairs.
        let role = crate::chat::history::Role::from_code(head.role)
            .ok_or_else(|| Error::index_msg(format!("{chat}: message {seq} has role code {}", head.role)))?;
        let (turn, at_ms) = (head.turn, head.at_ms);
        let step = std::sync::OnceLock::new();
        if !head.has_step {
            let _ = step.set(None);
        }
        let e = Entry {
            seq,
            revision: rev,
            role,
            turn,
            starts_turn: turn > prev_turn,
            at_ms,
            step,
            loc: Location { segment, offset, len: l },
            may_archive: head.may_archive,
            tokens: Default::default(),
            previews: Default::default(),
            pending_json: Default::default(),
        };
        prev_turn = turn;
        out.set(seq, e);
    }
    Ok(())
}

/// `w` with the messages `seqs` appended, read from the index: the writer state of a chat
/// that a read-only refresh found only appended to at revision `revision` since `w` was
/// loaded (its other state did not change). `None` when the index does not show exactly
/// that (the chat is gone, at another revision, or not `seqs.end` long): the chat then
/// loads again whole. The entries are shared with `w` (the new ones set past its length,
/// which `w` and its snapshots never show).
pub(crate) fn extended(
    core: &Core,
    chat: ChatId,
    w: &Writer,
    revision: u64,
    seqs: std::ops::Range<u64>,
) -> Result<Option<Writer>> {
    if w.revision != revision || w.len != seqs.start {
        return Ok(None);
    }
    let tx = core.index.read()?;
    let Some(row) = chat_row(&tx, chat)? else { return Ok(None) };
    if row.revision != revision || row.len != seqs.end || row.meta_version != w.meta_version {
        return Ok(None);
    }
    if may_lose(core) && !w.hidden.is_empty() {
        // A salvage whose chat lost messages loads again whole (the lost ones are hidden).
        return Ok(None);
    }
    fill_entries(&tx, chat, revision, seqs.clone(), &w.entries, may_lose(core))?;
    if (seqs.start..seqs.end).any(|s| w.entries.peek(s).is_some_and(|e| e.loc == LOST)) {
        return Ok(None);
    }
    let last = seqs.end.checked_sub(1).map(|p| w.entries.peek(p));
    let last_turn = match last {
        Some(Some(e)) => e.turn,
        // No message table at all (damage): the whole load says what is missing.
        Some(None) => return Ok(None),
        None => 0,
    };
    Ok(Some(Writer {
        revision,
        len: seqs.end,
        entries: w.entries.clone(),
        last_turn,
        meta: w.meta.clone(),
        meta_version: w.meta_version,
        last_ms: row.last_ms,
        pins: w.pins.clone(),
        compactions: w.compactions.clone(),
        calibration: w.calibration.clone(),
        checkpoint: w.checkpoint.clone(),
        hidden: w.hidden.clone(),
        last_end: w.last_end,
    }))
}

/// `w` with the messages the index holds past its length appended, when the index shows
/// the chat at `w`'s revision and metadata version with only messages appended (fleet mode:
/// another process's appends, pulled into the replica); `None` otherwise (then the chat
/// loads again whole). See [`extended`].
pub(crate) fn appended(core: &Core, chat: ChatId, w: &Writer) -> Result<Option<Writer>> {
    let len = {
        let tx = core.index.read()?;
        match chat_row(&tx, chat)? {
            Some(row) if row.len >= w.len => row.len,
            _ => return Ok(None),
        }
    };
    extended(core, chat, w, w.revision, w.len..len)
}

/// The length a chat had when `revision` ended (`None`: it is the current revision).
pub(crate) fn len_at_end_of(tx: &redb::ReadTransaction, chat: ChatId, revision: u64) -> Result<Option<u64>> {
    let t = match tx.open_table(REVISIONS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(redb_err(e)),
    };
    Ok(t.get((chat.0, revision + 1)).map_err(redb_err)?.map(|g| g.value().1))
}

/// The messages of `chat` hidden as of `revision`: every hide up to it, less what a later
/// truncation (up to it) dropped; with every erasure of the chat, at any revision (an
/// erased version is gone from every revision).
pub(crate) fn hidden_at(tx: &redb::ReadTransaction, chat: ChatId, revision: u64) -> Result<Hidden> {
    let mut out = visible_at(tx, chat, revision)?;
    match tx.open_table(ERASED) {
        Ok(t) => {
            for item in t.range((chat.0, 0, 0)..=(chat.0, u64::MAX, u64::MAX)).map_err(redb_err)? {
                let (k, v) = item.map_err(redb_err)?;
                let (_, rev, start) = k.value();
                out.add_erased(std::iter::once(start..v.value()), rev);
            }
        }
        // A store written before erasure: nothing is erased.
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(redb_err(e)),
    }
    Ok(out)
}

/// The hides of `hidden_at`, without the erasures.
fn visible_at(tx: &redb::ReadTransaction, chat: ChatId, revision: u64) -> Result<Hidden> {
    let hides = match tx.open_table(HIDDEN) {
        Ok(t) => t,
        // A store written before soft deletion: nothing is hidden.
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Hidden::default()),
        Err(e) => return Err(redb_err(e)),
    };
    // (revision, Some(range)) for a hide, (revision, None) and the length for a truncation.
    let mut events: Vec<(u64, std::ops::Range<u64>, bool)> = Vec::new();
    for item in hides.range((chat.0, 0, 0)..=(chat.0, revision, u64::MAX)).map_err(redb_err)? {
        let (k, v) = item.map_err(redb_err)?;
        let (_, rev, start) = k.value();
        events.push((rev, start..v.value(), false));
    }
    if events.is_empty() {
        return Ok(Hidden::default());
    }
    let revs = tx.open_table(REVISIONS).map_err(redb_err)?;
    for item in revs.range((chat.0, 0)..=(chat.0, revision)).map_err(redb_err)? {
        let (k, v) = item.map_err(redb_err)?;
        let (_, rev) = k.value();
        let (_, _, len_after, truncate) = v.value();
        if truncate {
            events.push((rev, len_after..len_after, true));
        }
    }
    events.sort_by_key(|(rev, ..)| *rev);
    let mut out = Hidden::default();
    for (rev, range, truncate) in events {
        if truncate {
            out = out.truncated(range.start);
        } else {
            out.add([range], rev);
        }
    }
    Ok(out)
}

/// The pages pinned in `chat`.
pub(crate) fn pins_of(tx: &redb::ReadTransaction, chat: ChatId) -> Result<Vec<Pin>> {
    let t = match tx.open_table(PINS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(redb_err(e)),
    };
    let mut out = Vec::new();
    let lo = (chat.0, [0u8; 32], 0u8, 0u64, 0u64);
    let hi = (chat.0, [0xffu8; 32], u8::MAX, u64::MAX, u64::MAX);
    for item in t.range(lo..=hi).map_err(redb_err)? {
        let (k, _) = item.map_err(redb_err)?;
        let (_, id, unit, start, end) = k.value();
        // The index copies a pin record's unit code as it is: an unknown one is the record's
        // (a newer build's), which a rebuild copies again.
        let unit = crate::chat::archive::unit_of(unit).ok_or_else(|| {
            Error::corrupt_content(
                format!("{chat}'s pin of archive {}", crate::base::blob::BlobId(id)),
                format!("unit code {unit} is not one this build knows (expected 0..=3)"),
            )
        })?;
        out.push(Pin { archive: crate::base::blob::BlobId(id), unit, range: start..end });
    }
    Ok(out)
}

/// The compaction records of `chat`, in log order.
pub(crate) fn compactions_of(
    core: &Core,
    tx: &redb::ReadTransaction,
    chat: ChatId,
) -> Result<Vec<CompactionRec>> {
    let t = match tx.open_table(COMPACTIONS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(redb_err(e)),
    };
    let mut out = Vec::new();
    for item in t.range((chat.0, 0u64, 0u64)..=(chat.0, u64::MAX, u64::MAX)).map_err(redb_err)? {
        let (k, v) = item.map_err(redb_err)?;
        let (_, segment, offset) = k.value();
        let raw =
            core.read(Location { segment, offset, len: v.value() }, crate::base::blob::Verify::Checksum)?;
        out.push(record::decode(&raw.payload, "compaction").map_err(|e| Error::corrupt(segment, offset, e))?);
    }
    Ok(out)
}

/// The calibration factors of `chat`, by model.
pub(crate) fn calibration_of(tx: &redb::ReadTransaction, chat: ChatId) -> Result<HashMap<String, f64>> {
    let t = match tx.open_table(CALIB) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(HashMap::new()),
        Err(e) => return Err(redb_err(e)),
    };
    let mut out = HashMap::new();
    for item in t.range((chat.0, "")..(chat.0 + 1, "")).map_err(redb_err)? {
        let (k, v) = item.map_err(redb_err)?;
        out.insert(k.value().1.to_string(), f64::from_bits(v.value()));
    }
    Ok(out)
}

/// The published checkpoint of `chat`, if any.
pub(crate) fn checkpoint_of(
    core: &Core,
    tx: &redb::ReadTransaction,
    chat: ChatId,
) -> Result<Option<Arc<super::state::Published>>> {
    let t = match tx.open_table(CHECKPOINTS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(redb_err(e)),
    };
    let Some(g) = t.get(chat.0).map_err(redb_err)? else { return Ok(None) };
    let (segment, offset, len) = g.value();
    let raw = core.read(Location { segment, offset, len }, crate::base::blob::Verify::Checksum)?;
    let rec: record::CheckpointRec =
        record::decode(&raw.payload, "checkpoint").map_err(|e| Error::corrupt(segment, offset, e))?;
    let text = core.get_blob(&crate::base::blob::BlobId(rec.summary), crate::base::blob::Verify::Hash)?;
    let summary: Arc<str> = String::from_utf8_lossy(&text).into_owned().into();
    Ok(Some(Arc::new(super::state::Published { rec, summary })))
}

/// Loads a chat's writer state from the index. `None` if the chat does not exist.
pub(crate) fn load_writer(core: &Core, chat: ChatId) -> Result<Option<(ChatRow, Writer)>> {
    let tx = core.index.read()?;
    let Some(row) = chat_row(&tx, chat)? else {
        return Ok(None);
    };
    // A salvage loads every entry (to hide the lost ones); otherwise they load a page at a
    // time when asked for (see `entries.rs`), and only the last page is read here.
    let (entries, hidden) = if may_lose(core) {
        let entries = entries_at(&tx, chat, row.revision, row.len, true)?;
        let hidden = lost_hidden(hidden_at(&tx, chat, row.revision)?, &entries, row.len);
        (entries, hidden)
    } else {
        let entries = Entries::from_index(chat, row.revision, row.len);
        if let Some(last) = row.len.checked_sub(1) {
            let start = last - last % crate::base::snapshot::PAGE as u64;
            fill_entries(&tx, chat, row.revision, start..row.len, &entries, false)?;
        }
        (entries, hidden_at(&tx, chat, row.revision)?)
    };
    let last_turn = match row.len.checked_sub(1) {
        None => 0,
        Some(last) => entries
            .peek(last)
            .map(|e| e.turn)
            .ok_or_else(|| Error::index_msg(format!("{chat}: message {last} is missing from the index")))?,
    };
    let meta = read_meta(core, &row)?;
    let pins = pins_of(&tx, chat)?;
    let compactions = compactions_of(core, &tx, chat)?;
    let calibration = calibration_of(&tx, chat)?;
    let w = Writer {
        revision: row.revision,
        len: row.len,
        entries: Arc::new(entries),
        last_turn,
        meta: Arc::new(meta),
        meta_version: row.meta_version,
        last_ms: row.last_ms,
        pins: Arc::new(pins),
        compactions: Arc::new(compactions),
        calibration: Arc::new(calibration),
        checkpoint: checkpoint_of(core, &tx, chat)?,
        hidden: Arc::new(hidden),
        last_end: Position::new(0, 0),
    };
    Ok(Some((row, w)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use redb::ReadableDatabase;

    use super::*;

    /// An index holding messages 0 and 1 of chat 1, at revision 0.
    fn two_messages() -> redb::Database {
        let db =
            redb::Database::builder().create_with_backend(redb::backends::InMemoryBackend::new()).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(MESSAGES).unwrap();
            for seq in 0..2u64 {
                let head = crate::disk::record::MsgHead {
                    role: 1,
                    turn: 1,
                    at_ms: 0,
                    has_step: false,
                    may_archive: false,
                };
                let value = crate::disk::index::encode_msg_val(MsgVal {
                    segment: 1,
                    offset: 64 * seq,
                    len: 10,
                    head,
                });
                t.insert((1u64, seq, 0u64), value.as_slice()).unwrap();
            }
        }
        tx.commit().unwrap();
        db
    }

    #[test]
    fn a_damaged_chat_length_far_past_its_messages_is_an_index_error_not_an_allocation() {
        let db = two_messages();
        let tx = db.begin_read().unwrap();
        // A flipped high bit: the length the row claims would not fit in memory.
        let e = entries_at(&tx, ChatId(1), 0, 1 << 45, false).err().unwrap();
        assert!(matches!(&e, Error::Index { message: m, .. } if m.contains("message 2 is missing")), "{e}");
        assert!(e.to_string().contains("check --rebuild"), "{e}");
    }

    #[test]
    fn a_chat_length_one_past_its_messages_is_an_index_error() {
        let db = two_messages();
        let tx = db.begin_read().unwrap();
        assert!(matches!(entries_at(&tx, ChatId(1), 0, 3, false), Err(Error::Index { .. })));
        let e = entries_at(&tx, ChatId(1), 0, 2, false).unwrap();
        assert!(e.peek(1).is_some() && e.peek(2).is_none());
    }
}
