//! The questions the floors above ask the index, one function each over a [`ReadTx`]. Rows
//! come out as plain values (locations, ranges, seqs, decoded rows), so no redb type and no
//! table leaves this folder.
//!
//! A table that does not exist answers as an empty one: a store written before the table
//! was added, or one that never needed it, has none (see [`table`]).

use std::collections::HashMap;
use std::ops::Range;

use redb::{Key, ReadOnlyTable, ReadTransaction, ReadableTable, TableDefinition, Value};

use super::history::{
    APPEND_KEYS, ARCHIVES, CALIB, CHAT_LOOKUP, CHATS, CHECKPOINTS, COMPACTIONS, ChatRow, ERASED, HIDDEN,
    MAY_ARCHIVE, MESSAGES, METAS, MsgVal, OWNER_CHATS, PINS, REVISIONS, STEPS, SUMMARIES, decode_loc,
    decode_msg_val, owner_key, value_hash,
};
use super::redb_err;
use crate::base::blob::BlobId;
use crate::base::error::{Error, Result};
use crate::disk::log::Location;
use crate::disk::record::{self, ArchiveRec};

/// A consistent read of the index: every query of one `ReadTx` sees the same commit.
/// From [`Index::read`](super::Index::read).
pub(crate) struct ReadTx(pub(super) ReadTransaction);

impl std::fmt::Debug for ReadTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadTx")
    }
}

/// Table `def` of `tx`, or `None` when the index has no such table (see the module doc).
pub(super) fn table<K: Key + 'static, V: Value + 'static>(
    tx: &ReadTransaction,
    def: TableDefinition<'_, K, V>,
) -> Result<Option<ReadOnlyTable<K, V>>> {
    match tx.open_table(def) {
        Ok(t) => Ok(Some(t)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(redb_err(e)),
    }
}

fn loc((segment, offset, len): (u64, u64, u32)) -> Location {
    Location { segment, offset, len }
}

/// The index row of `chat`, if the chat exists.
pub(crate) fn chat_row(tx: &ReadTx, chat: u64) -> Result<Option<ChatRow>> {
    let Some(t) = table(&tx.0, CHATS)? else { return Ok(None) };
    match t.get(chat).map_err(redb_err)? {
        Some(g) => Ok(Some(ChatRow::decode(g.value())?)),
        None => Ok(None),
    }
}

/// Every chat the index holds (deleted ones are gone from `chats`): (chat, owner, len,
/// revision), in chat order. For the background search indexer, which catches up the chats
/// whose length or revision moved.
pub(crate) fn all_chats(tx: &ReadTx) -> Result<Vec<(u64, String, u64, u64)>> {
    let Some(t) = table(&tx.0, CHATS)? else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for item in t.iter().map_err(redb_err)? {
        let (k, v) = item.map_err(redb_err)?;
        let row = ChatRow::decode(v.value())?;
        out.push((k.value(), row.owner, row.len, row.revision));
    }
    Ok(out)
}

/// Visits the chats of `owner`, most recently active first (ties by id), starting at
/// `from` (the (last activity, chat) of a listing's cursor, which is visited too), until
/// `visit` returns `false`.
pub(crate) fn owner_chats(
    tx: &ReadTx,
    owner: &str,
    from: Option<(u64, u64)>,
    mut visit: impl FnMut(u64) -> Result<bool>,
) -> Result<()> {
    let Some(t) = table(&tx.0, OWNER_CHATS)? else { return Ok(()) };
    let end = match from {
        Some((last_ms, chat)) => owner_key(owner, last_ms, chat),
        None => (owner, u64::MAX, u64::MAX),
    };
    for item in t.range((owner, 0, 0)..=end).map_err(redb_err)?.rev() {
        let (k, _) = item.map_err(redb_err)?;
        if !visit(u64::MAX - k.value().2)? {
            break;
        }
    }
    Ok(())
}

/// Every owner holding chats, with how many, by name.
pub(crate) fn owners(tx: &ReadTx) -> Result<Vec<(String, u64)>> {
    let mut out: Vec<(String, u64)> = Vec::new();
    let Some(t) = table(&tx.0, OWNER_CHATS)? else { return Ok(out) };
    for item in t.range::<(&str, u64, u64)>(..).map_err(redb_err)? {
        let (k, _) = item.map_err(redb_err)?;
        let (owner, _, _) = k.value();
        match out.last_mut() {
            Some((o, n)) if o == owner => *n += 1,
            _ => out.push((owner.to_string(), 1)),
        }
    }
    Ok(out)
}

/// The chats of `owner` whose metadata `field`/`key` holds `value`, by id.
pub(crate) fn find_chats(
    tx: &ReadTx,
    owner: &str,
    (field, key): (u8, &str),
    value: &str,
) -> Result<Vec<u64>> {
    let Some(t) = table(&tx.0, CHAT_LOOKUP)? else { return Ok(Vec::new()) };
    let h = value_hash(value);
    let mut out = Vec::new();
    for item in t.range((owner, field, key, h, 0)..=(owner, field, key, h, u64::MAX)).map_err(redb_err)? {
        out.push(item.map_err(redb_err)?.0.value().4);
    }
    Ok(out)
}

/// The newest version of message `seq` of `chat` written at or before `revision`, if the
/// index holds one.
pub(crate) fn message_at(tx: &ReadTx, chat: u64, seq: u64, revision: u64) -> Result<Option<MsgVal>> {
    let Some(t) = table(&tx.0, MESSAGES)? else { return Ok(None) };
    let mut out = None;
    for item in t.range((chat, seq, 0u64)..=(chat, seq, revision)).map_err(redb_err)? {
        out = Some(item.map_err(redb_err)?.1);
    }
    out.map(|v| decode_msg_val(v.value())).transpose()
}

/// The version of message `seq` of `chat` written at exactly `revision`, if any.
pub(crate) fn message_version(tx: &ReadTx, chat: u64, seq: u64, revision: u64) -> Result<Option<MsgVal>> {
    let Some(t) = table(&tx.0, MESSAGES)? else { return Ok(None) };
    t.get((chat, seq, revision)).map_err(redb_err)?.map(|g| decode_msg_val(g.value())).transpose()
}

/// Versions of messages, by seq from a range's start: (the revision that wrote it, its row).
pub(crate) type Versions = Vec<Option<(u64, MsgVal)>>;

/// For each seq of `seqs` of `chat` from its start, the newest version written at or before
/// `revision` (with the revision that wrote it); `None` when the index has no messages table.
///
/// `seqs.end` comes from the index too, so nothing is sized by it: the vector grows with the
/// messages the index actually holds (keys arrive by seq, then revision), and a seq the
/// messages do not reach is damage, unless `lost` (a salvage, whose index is the log's
/// batches that verify): then a missing message is a `None` entry, up to `seqs.end`.
pub(crate) fn message_versions(
    tx: &ReadTx,
    chat: u64,
    revision: u64,
    seqs: Range<u64>,
    lost: bool,
) -> Result<Option<Versions>> {
    let Some(t) = table(&tx.0, MESSAGES)? else { return Ok(None) };
    let from = seqs.start;
    let missing = |k: usize| {
        Error::index_msg(format!(
            "{} revision {revision}: message {} is missing from the index",
            crate::model::message::ChatId(chat),
            from + k as u64
        ))
    };
    let mut vals: Versions = Vec::new();
    for item in t.range((chat, from, 0u64)..(chat, seqs.end, 0u64)).map_err(redb_err)? {
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
    Ok(Some(vals))
}

/// The length `chat` had when `revision` ended (`None`: it is the current revision).
pub(crate) fn len_at_end_of(tx: &ReadTx, chat: u64, revision: u64) -> Result<Option<u64>> {
    let Some(t) = table(&tx.0, REVISIONS)? else { return Ok(None) };
    Ok(t.get((chat, revision + 1)).map_err(redb_err)?.map(|g| g.value().1))
}

/// The hides of `chat` up to `revision`: (revision, range hidden), in key order.
pub(crate) fn hides_until(tx: &ReadTx, chat: u64, revision: u64) -> Result<Vec<(u64, Range<u64>)>> {
    let Some(t) = table(&tx.0, HIDDEN)? else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for item in t.range((chat, 0, 0)..=(chat, revision, u64::MAX)).map_err(redb_err)? {
        let (k, v) = item.map_err(redb_err)?;
        let (_, rev, start) = k.value();
        out.push((rev, start..v.value()));
    }
    Ok(out)
}

/// The truncations of `chat` up to `revision`: (revision, length after it).
pub(crate) fn truncations_until(tx: &ReadTx, chat: u64, revision: u64) -> Result<Vec<(u64, u64)>> {
    let Some(t) = table(&tx.0, REVISIONS)? else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for item in t.range((chat, 0)..=(chat, revision)).map_err(redb_err)? {
        let (k, v) = item.map_err(redb_err)?;
        let (_, _, len_after, truncate) = v.value();
        if truncate {
            out.push((k.value().1, len_after));
        }
    }
    Ok(out)
}

/// The erasures of `chat`, at any revision: (revision, range erased).
pub(crate) fn erasures(tx: &ReadTx, chat: u64) -> Result<Vec<(u64, Range<u64>)>> {
    let Some(t) = table(&tx.0, ERASED)? else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for item in t.range((chat, 0, 0)..=(chat, u64::MAX, u64::MAX)).map_err(redb_err)? {
        let (k, v) = item.map_err(redb_err)?;
        let (_, rev, start) = k.value();
        out.push((rev, start..v.value()));
    }
    Ok(out)
}

/// Whether a message below `reach` of `chat` has a version written after revision `base`,
/// up to revision `upto`: an edit of one (the message has a version at that revision; a
/// hide's revision has none), or a truncation below `reach` (what was appended after it has
/// later versions). The caller has the chat's writes up to `upto` flushed.
pub(crate) fn changed_below(tx: &ReadTx, chat: u64, reach: u64, base: u64, upto: u64) -> Result<bool> {
    if base >= upto {
        return Ok(false);
    }
    let Some(revisions) = table(&tx.0, REVISIONS)? else { return Ok(false) };
    let messages = table(&tx.0, MESSAGES)?;
    for item in revisions.range((chat, base + 1)..=(chat, upto)).map_err(redb_err)? {
        let (k, v) = item.map_err(redb_err)?;
        let rev = k.value().1;
        let (seq, _, len_after, truncate) = v.value();
        let changed = if truncate {
            len_after < reach
        } else if seq < reach {
            // An edit writes a version at its revision; a hide's revision has none.
            match &messages {
                Some(m) => m.get((chat, seq, rev)).map_err(redb_err)?.is_some(),
                None => false,
            }
        } else {
            false
        };
        if changed {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The seqs below `reach` of `chat` with a version that may hold an archived tool result
/// (any version: the caller checks the one it reads), ascending, each once.
pub(crate) fn may_archive_below(tx: &ReadTx, chat: u64, reach: u64) -> Result<Vec<u64>> {
    let Some(t) = table(&tx.0, MAY_ARCHIVE)? else { return Ok(Vec::new()) };
    let mut out: Vec<u64> = Vec::new();
    for item in t.range((chat, 0u64, 0u64)..(chat, reach, 0u64)).map_err(redb_err)? {
        let seq = item.map_err(redb_err)?.0.value().1;
        if out.last() != Some(&seq) {
            out.push(seq);
        }
    }
    Ok(out)
}

/// The seqs (first, count) the append made to `chat` with idempotency key `key` took, if
/// redb holds one.
pub(crate) fn append_key(tx: &ReadTx, chat: u64, key: &str) -> Result<Option<(u64, u64)>> {
    let Some(t) = table(&tx.0, APPEND_KEYS)? else { return Ok(None) };
    Ok(t.get((chat, key)).map_err(redb_err)?.map(|g| g.value()))
}

/// Where metadata version `version` of `chat` is in the log, if it exists.
pub(crate) fn meta_location(tx: &ReadTx, chat: u64, version: u64) -> Result<Option<Location>> {
    let Some(t) = table(&tx.0, METAS)? else { return Ok(None) };
    t.get((chat, version)).map_err(redb_err)?.map(|g| decode_loc(g.value())).transpose()
}

/// Where the step records of user turn `turn` of `chat` are in the log, in the order they
/// were indexed (by stream, then position).
pub(crate) fn step_locations(tx: &ReadTx, chat: u64, turn: u64) -> Result<Vec<Location>> {
    let Some(t) = table(&tx.0, STEPS)? else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for item in t.range((chat, turn, 0u64, 0u64)..=(chat, turn, u64::MAX, u64::MAX)).map_err(redb_err)? {
        let (k, v) = item.map_err(redb_err)?;
        let (_, _, segment, offset) = k.value();
        out.push(Location { segment, offset, len: v.value() });
    }
    Ok(out)
}

/// The pages pinned in `chat`: (archive, unit code as the pin record holds it, range).
pub(crate) fn pins(tx: &ReadTx, chat: u64) -> Result<Vec<(BlobId, u8, Range<u64>)>> {
    let Some(t) = table(&tx.0, PINS)? else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    let lo = (chat, [0u8; 32], 0u8, 0u64, 0u64);
    let hi = (chat, [0xffu8; 32], u8::MAX, u64::MAX, u64::MAX);
    for item in t.range(lo..=hi).map_err(redb_err)? {
        let (k, _) = item.map_err(redb_err)?;
        let (_, id, unit, start, end) = k.value();
        out.push((BlobId(id), unit, start..end));
    }
    Ok(out)
}

/// Where the compaction records of `chat` are in the log, in log order.
pub(crate) fn compaction_locations(tx: &ReadTx, chat: u64) -> Result<Vec<Location>> {
    let Some(t) = table(&tx.0, COMPACTIONS)? else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for item in t.range((chat, 0u64, 0u64)..=(chat, u64::MAX, u64::MAX)).map_err(redb_err)? {
        let (k, v) = item.map_err(redb_err)?;
        let (_, segment, offset) = k.value();
        out.push(Location { segment, offset, len: v.value() });
    }
    Ok(out)
}

/// The calibration factors of `chat`, by model.
pub(crate) fn calibration(tx: &ReadTx, chat: u64) -> Result<HashMap<String, f64>> {
    let Some(t) = table(&tx.0, CALIB)? else { return Ok(HashMap::new()) };
    let mut out = HashMap::new();
    for item in t.range((chat, "")..(chat + 1, "")).map_err(redb_err)? {
        let (k, v) = item.map_err(redb_err)?;
        out.insert(k.value().1.to_string(), f64::from_bits(v.value()));
    }
    Ok(out)
}

/// Where the latest published checkpoint record of `chat` is in the log, if any.
pub(crate) fn checkpoint_location(tx: &ReadTx, chat: u64) -> Result<Option<Location>> {
    let Some(t) = table(&tx.0, CHECKPOINTS)? else { return Ok(None) };
    Ok(t.get(chat).map_err(redb_err)?.map(|g| loc(g.value())))
}

/// The blob of the summary `summarizer` wrote for the segment keyed `key`, if one is cached.
pub(crate) fn summary(tx: &ReadTx, key: &BlobId, summarizer: &str) -> Result<Option<BlobId>> {
    let Some(t) = table(&tx.0, SUMMARIES)? else { return Ok(None) };
    Ok(t.get((key.0, summarizer)).map_err(redb_err)?.map(|g| BlobId(g.value())))
}

/// The archive record of `owner`'s grant on archive `id`, if redb holds one.
pub(crate) fn archive_record(tx: &ReadTx, owner: &str, id: &BlobId) -> Result<Option<ArchiveRec>> {
    let Some(t) = table(&tx.0, ARCHIVES)? else { return Ok(None) };
    match t.get((owner, id.0)).map_err(redb_err)? {
        Some(g) => Ok(Some(record::decode::<ArchiveRec>(g.value(), "archive").map_err(Error::index_msg)?)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use redb::ReadableDatabase;

    use super::*;

    /// An index holding messages 0 and 1 of chat 1, at revision 0 (the database, which must
    /// outlive the read, and a read of it).
    fn two_messages() -> (redb::Database, ReadTx) {
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
                    tokens: None,
                };
                let value = super::super::history::encode_msg_val(MsgVal {
                    segment: 1,
                    offset: 64 * seq,
                    len: 10,
                    head,
                });
                t.insert((1u64, seq, 0u64), value.as_slice()).unwrap();
            }
        }
        tx.commit().unwrap();
        let tx = ReadTx(db.begin_read().unwrap());
        (db, tx)
    }

    #[test]
    fn a_damaged_chat_length_far_past_its_messages_is_an_index_error_not_an_allocation() {
        let (_db, tx) = two_messages();
        // A flipped high bit: the length the row claims would not fit in memory.
        let e = message_versions(&tx, 1, 0, 0..1 << 45, false).err().unwrap();
        assert!(matches!(&e, Error::Index { message: m, .. } if m.contains("message 2 is missing")), "{e}");
        assert!(e.to_string().contains("check --rebuild"), "{e}");
    }

    #[test]
    fn a_chat_length_one_past_its_messages_is_an_index_error() {
        let (_db, tx) = two_messages();
        assert!(matches!(message_versions(&tx, 1, 0, 0..3, false), Err(Error::Index { .. })));
        let vals = message_versions(&tx, 1, 0, 0..2, false).unwrap().unwrap();
        assert_eq!(vals.len(), 2);
        assert!(vals.iter().all(Option::is_some));
    }

    #[test]
    fn a_salvage_reads_a_missing_message_as_lost_up_to_the_length_the_log_says() {
        let (_db, tx) = two_messages();
        let vals = message_versions(&tx, 1, 0, 0..4, true).unwrap().unwrap();
        assert_eq!(vals.iter().map(Option::is_some).collect::<Vec<_>>(), [true, true, false, false]);
    }

    #[test]
    fn a_table_the_index_never_made_answers_as_an_empty_one() {
        let (_db, tx) = two_messages();
        assert_eq!(chat_row(&tx, 1).unwrap(), None);
        assert!(pins(&tx, 1).unwrap().is_empty());
        assert!(hides_until(&tx, 1, 5).unwrap().is_empty());
        assert_eq!(checkpoint_location(&tx, 1).unwrap(), None);
        assert!(message_at(&tx, 1, 1, 0).unwrap().is_some());
        assert!(message_at(&tx, 2, 0, 0).unwrap().is_none());
    }
}
