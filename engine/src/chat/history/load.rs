//! Loading chats and old revisions back from the index and the log.

use std::collections::HashMap;
use std::sync::Arc;

use super::entries::Entries;
use super::hidden::Hidden;
use super::state::{ChatVersion, Entry, Writer, kept_tokens};
use crate::base::error::{Error, Result};
use crate::disk::index::{self, ChatRow, MsgVal, ReadTx};
use crate::disk::log::{Location, Position};
use crate::disk::record::{self, CompactionRec, MetaRec};
use crate::kernel::store::core::Core;
use crate::model::message::{ChatId, ChatMeta, Pin};

/// The index row of a chat, if it exists.
pub(crate) fn chat_row(tx: &ReadTx, chat: ChatId) -> Result<Option<ChatRow>> {
    index::chat_row(tx, chat.0)
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
    core: &Core,
    tx: &ReadTx,
    chat: ChatId,
    revision: u64,
    len: u64,
    lost: bool,
) -> Result<Entries> {
    let out = Entries::in_memory(chat, revision);
    fill_entries(core, tx, chat, revision, 0..len, &out, lost)?;
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
/// An entry takes the token estimate its row keeps (see [`kept_tokens`]).
pub(crate) fn fill_entries(
    core: &Core,
    tx: &ReadTx,
    chat: ChatId,
    revision: u64,
    seqs: std::ops::Range<u64>,
    out: &Entries,
    lost: bool,
) -> Result<()> {
    let before = seqs.start.checked_sub(1);
    let mut prev_turn = match before.map(|p| out.peek(p)) {
        None => 0,
        Some(Some(e)) => e.turn,
        Some(None) => {
            let p = seqs.start - 1;
            match index::message_at(tx, chat.0, p, revision)? {
                Some(v) => v.head.turn,
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
    let Some(vals) = index::message_versions(tx, chat.0, revision, seqs, lost)? else { return Ok(()) };
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
            tokens: kept_tokens(core, head.tokens),
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
    fill_entries(core, &tx, chat, revision, seqs.clone(), &w.entries, may_lose(core))?;
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
        version: ChatVersion { revision, len: seqs.end, last_ms: row.last_ms, ..w.version.clone() },
        last_turn,
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
pub(crate) fn len_at_end_of(tx: &ReadTx, chat: ChatId, revision: u64) -> Result<Option<u64>> {
    index::len_at_end_of(tx, chat.0, revision)
}

/// The messages of `chat` hidden as of `revision`: every hide up to it, less what a later
/// truncation (up to it) dropped; with every erasure of the chat, at any revision (an
/// erased version is gone from every revision).
pub(crate) fn hidden_at(tx: &ReadTx, chat: ChatId, revision: u64) -> Result<Hidden> {
    let mut out = visible_at(tx, chat, revision)?;
    // A store written before erasure has no erasures.
    for (rev, range) in index::erasures(tx, chat.0)? {
        out.add_erased(std::iter::once(range), rev);
    }
    Ok(out)
}

/// The hides of `hidden_at`, without the erasures.
fn visible_at(tx: &ReadTx, chat: ChatId, revision: u64) -> Result<Hidden> {
    // (revision, range, false) for a hide, (revision, length.., true) for a truncation.
    let mut events: Vec<(u64, std::ops::Range<u64>, bool)> = index::hides_until(tx, chat.0, revision)?
        .into_iter()
        .map(|(rev, range)| (rev, range, false))
        .collect();
    if events.is_empty() {
        return Ok(Hidden::default());
    }
    for (rev, len_after) in index::truncations_until(tx, chat.0, revision)? {
        events.push((rev, len_after..len_after, true));
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
pub(crate) fn pins_of(tx: &ReadTx, chat: ChatId) -> Result<Vec<Pin>> {
    let mut out = Vec::new();
    for (archive, unit, range) in index::pins(tx, chat.0)? {
        // The index copies a pin record's unit code as it is: an unknown one is the record's
        // (a newer build's), which a rebuild copies again.
        let unit = crate::chat::archive::unit_of(unit).ok_or_else(|| {
            Error::corrupt_content(
                format!("{chat}'s pin of archive {archive}"),
                format!("unit code {unit} is not one this build knows (expected 0..=3)"),
            )
        })?;
        out.push(Pin { archive, unit, range });
    }
    Ok(out)
}

/// The compaction records of `chat`, in log order.
pub(crate) fn compactions_of(core: &Core, tx: &ReadTx, chat: ChatId) -> Result<Vec<CompactionRec>> {
    let mut out = Vec::new();
    for loc in index::compaction_locations(tx, chat.0)? {
        let raw = core.read(loc, crate::base::blob::Verify::Checksum)?;
        out.push(
            record::decode(&raw.payload, "compaction")
                .map_err(|e| Error::corrupt(loc.segment, loc.offset, e))?,
        );
    }
    Ok(out)
}

/// The calibration factors of `chat`, by model.
pub(crate) fn calibration_of(tx: &ReadTx, chat: ChatId) -> Result<HashMap<String, f64>> {
    index::calibration(tx, chat.0)
}

/// The published checkpoint of `chat`, if any.
pub(crate) fn checkpoint_of(
    core: &Core,
    tx: &ReadTx,
    chat: ChatId,
) -> Result<Option<Arc<super::state::Published>>> {
    let Some(loc) = index::checkpoint_location(tx, chat.0)? else { return Ok(None) };
    let raw = core.read(loc, crate::base::blob::Verify::Checksum)?;
    let rec: record::CheckpointRec =
        record::decode(&raw.payload, "checkpoint").map_err(|e| Error::corrupt(loc.segment, loc.offset, e))?;
    // Checked as the chat's message records are: by the record's checksum (and the blob id
    // it starts with), not hashed again (a first view read it; BLAKE3's first use in a
    // process also probes the CPU, 30-60 µs where `cpuid` traps to a hypervisor).
    let text = core.get_blob(&crate::base::blob::BlobId(rec.summary), crate::base::blob::Verify::Checksum)?;
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
        let entries = entries_at(core, &tx, chat, row.revision, row.len, true)?;
        let hidden = lost_hidden(hidden_at(&tx, chat, row.revision)?, &entries, row.len);
        (entries, hidden)
    } else {
        let entries = Entries::from_index(chat, row.revision, row.len);
        if let Some(last) = row.len.checked_sub(1) {
            let start = last - last % crate::base::snapshot::PAGE as u64;
            fill_entries(core, &tx, chat, row.revision, start..row.len, &entries, false)?;
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
        version: ChatVersion {
            revision: row.revision,
            len: row.len,
            entries: Arc::new(entries),
            meta: Arc::new(meta),
            meta_version: row.meta_version,
            last_ms: row.last_ms,
            pins: Arc::new(pins),
            compactions: Arc::new(compactions),
            calibration: Arc::new(calibration),
            checkpoint: checkpoint_of(core, &tx, chat)?,
            hidden: Arc::new(hidden),
        },
        last_turn,
        last_end: Position::new(0, 0),
    };
    Ok(Some((row, w)))
}
