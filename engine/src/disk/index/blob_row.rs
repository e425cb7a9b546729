//! A blob's row in the index: where its record is and which owners hold a grant on it, in
//! one row per blob id (index layout 7; issue 19's disk goal: before, a blob cost a row in
//! `blobs`, one in `grants` and one in `chat_grants`).
//!
//! A grant bound to a chat is not removed when the chat is deleted: it counts only while the
//! chat it is bound to exists (its row in `chats`), and a chat id is never reused. So a
//! deletion touches no blob row, and no table of grants by chat is needed. Own grants (chat
//! 0) always count.
//!
//! A blob held by many grants (the same content attached in many chats) keeps its first
//! [`INLINE_GRANTS`] in its row and the others in `grants`, one row each, so that a new grant
//! never rewrites a long row.

use redb::{ReadableTable, TableDefinition};

use super::history::CHATS;
use super::redb_err;
use crate::base::error::{Error, Result};
use crate::disk::log::Location;
use crate::disk::record::compact::{Reader, varint, varint_loc};

/// Blob id -> encoded [`BlobRow`].
pub(crate) const BLOBS: TableDefinition<'_, [u8; 32], &[u8]> = TableDefinition::new("blobs");
/// (owner, blob id, chat) -> grant bits: the grants a blob's row has no room for.
pub(crate) const GRANTS: TableDefinition<'_, (&str, [u8; 32], u64), u8> = TableDefinition::new("grants");

/// Grants kept in a blob's row; more go to [`GRANTS`].
pub(crate) const INLINE_GRANTS: usize = 4;

/// One grant: (owner, chat it is bound to or 0 for the owner's own, grant bits).
pub(crate) type Grant = (String, u64, u8);

/// What the index knows of one blob id.
///
/// ```text
/// flags u8 (1: a location follows, 2: more grants are in `grants`)
/// [segment, offset, length: varints]
/// grant count: varint, then per grant: owner (varint length, UTF-8), chat varint, bits u8
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BlobRow {
    /// Where its blob or manifest record is (`None`: granted, not stored in this log).
    pub loc: Option<Location>,
    /// Its first grants, in the order they were written.
    pub grants: Vec<Grant>,
    /// True once a grant did not fit: the later ones are in [`GRANTS`].
    pub spilled: bool,
}

const HAS_LOC: u8 = 1;
const SPILLED: u8 = 2;

/// The grants an owner holds on one blob, as grant bits (1 a blob grant, 2 an archive grant).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Held {
    /// Of its own grant (written in a batch of no chat).
    pub own: u8,
    /// Of the grant bound to the chat asked about.
    pub chat: u8,
    /// Of every grant it holds that counts: its own, and those bound to a chat that exists.
    pub any: u8,
}

impl BlobRow {
    /// The row's bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.grants.iter().map(|g| g.0.len() + 12).sum::<usize>());
        let flags = if self.loc.is_some() { HAS_LOC } else { 0 } | if self.spilled { SPILLED } else { 0 };
        out.push(flags);
        if let Some(l) = self.loc {
            varint_loc(&mut out, (l.segment, l.offset, l.len));
        }
        varint(&mut out, self.grants.len() as u64);
        for (owner, chat, bits) in &self.grants {
            varint(&mut out, owner.len() as u64);
            out.extend_from_slice(owner.as_bytes());
            varint(&mut out, *chat);
            out.push(*bits);
        }
        out
    }

    /// Reads a row back; a row that does not decode is index damage.
    pub(crate) fn decode(bytes: &[u8]) -> Result<BlobRow> {
        let mut r = Fields(Reader(bytes));
        let (loc, flags) = r.head()?;
        let n = r.varint()?;
        let mut grants = Vec::with_capacity(n.min(INLINE_GRANTS as u64) as usize);
        for _ in 0..n {
            let len = r.varint()?;
            let owner = std::str::from_utf8(r.bytes(len)?)
                .map_err(|e| bad(format!("an owner that is not UTF-8: {e}")))?
                .to_string();
            grants.push((owner, r.varint()?, r.u8()?));
        }
        if !r.0.0.is_empty() {
            return Err(bad(format!("{} bytes after the grants", r.0.0.len())));
        }
        Ok(BlobRow { loc, grants, spilled: flags & SPILLED != 0 })
    }

    /// The location alone (a lookup that needs no grant reads only the row's head).
    pub(crate) fn location(bytes: &[u8]) -> Result<Option<Location>> {
        Ok(Fields(Reader(bytes)).head()?.0)
    }
}

/// Sets the location of blob `id` (a blob or manifest record applied), keeping its grants.
pub(crate) fn set_location(
    blobs: &mut redb::Table<'_, [u8; 32], &'static [u8]>,
    id: &[u8; 32],
    loc: Location,
) -> Result<()> {
    let mut row = match blobs.get(id).map_err(redb_err)? {
        Some(g) => BlobRow::decode(g.value())?,
        None => BlobRow::default(),
    };
    row.loc = Some(loc);
    blobs.insert(id, row.encode().as_slice()).map_err(redb_err)?;
    Ok(())
}

/// Adds grant `bits` of `owner` on `id`, bound to `chat` (0: the owner's own): to the grant
/// of the same owner and chat if there is one, else as a new grant in the row while it has
/// room, else in [`GRANTS`].
pub(crate) fn add_grant(
    blobs: &mut redb::Table<'_, [u8; 32], &'static [u8]>,
    spill: &mut redb::Table<'_, (&'static str, [u8; 32], u64), u8>,
    (owner, id, chat): (&str, &[u8; 32], u64),
    bits: u8,
) -> Result<()> {
    let mut row = match blobs.get(id).map_err(redb_err)? {
        Some(g) => BlobRow::decode(g.value())?,
        None => BlobRow::default(),
    };
    if let Some(g) = row.grants.iter_mut().find(|(o, c, _)| o == owner && *c == chat) {
        if g.2 | bits == g.2 {
            return Ok(());
        }
        g.2 |= bits;
    } else if !row.spilled && row.grants.len() < INLINE_GRANTS {
        row.grants.push((owner.to_string(), chat, bits));
    } else {
        let old = spill.get((owner, *id, chat)).map_err(redb_err)?.map_or(0, |g| g.value());
        spill.insert((owner, *id, chat), old | bits).map_err(redb_err)?;
        if row.spilled {
            return Ok(());
        }
        row.spilled = true;
    }
    blobs.insert(id, row.encode().as_slice()).map_err(redb_err)?;
    Ok(())
}

/// The grants `owner` holds on `id` in redb, with those bound to `chat` apart.
pub(crate) fn held(
    tx: &redb::ReadTransaction,
    owner: &str,
    id: &[u8; 32],
    chat: Option<u64>,
) -> Result<Held> {
    let Some(blobs) = super::query::table(tx, BLOBS)? else { return Ok(Held::default()) };
    let Some(g) = blobs.get(id).map_err(redb_err)? else { return Ok(Held::default()) };
    let row = BlobRow::decode(g.value())?;
    drop(g);
    let mut mine: Vec<(u64, u8)> =
        row.grants.iter().filter(|(o, ..)| o == owner).map(|&(_, c, b)| (c, b)).collect();
    if row.spilled {
        let t = tx.open_table(GRANTS).map_err(redb_err)?;
        for item in t.range((owner, *id, 0u64)..=(owner, *id, u64::MAX)).map_err(redb_err)? {
            let (k, v) = item.map_err(redb_err)?;
            mine.push((k.value().2, v.value()));
        }
    }
    let mut h = Held::default();
    let mut chats = None;
    for (c, bits) in mine {
        if c == 0 {
            h.own |= bits;
            h.any |= bits;
            continue;
        }
        if Some(c) == chat {
            h.chat |= bits;
        }
        // A grant bound to a deleted chat no longer counts; looked up only when it adds bits.
        if h.any | bits != h.any && chat_exists(tx, &mut chats, c)? {
            h.any |= bits;
        }
    }
    Ok(h)
}

/// True when chat `c` has its `chats` row (`chats` is the table, opened on first use).
fn chat_exists(
    tx: &redb::ReadTransaction,
    chats: &mut Option<Option<redb::ReadOnlyTable<u64, &'static [u8]>>>,
    c: u64,
) -> Result<bool> {
    if chats.is_none() {
        *chats = Some(super::query::table(tx, CHATS)?);
    }
    match chats.as_ref().and_then(Option::as_ref) {
        Some(t) => Ok(t.get(c).map_err(redb_err)?.is_some()),
        None => Ok(false),
    }
}

fn bad(why: impl std::fmt::Display) -> Error {
    Error::index_msg(format!("a row of the blobs table does not decode: {why}"))
}

/// A row's fields, read from the front.
struct Fields<'a>(Reader<'a>);

impl<'a> Fields<'a> {
    fn u8(&mut self) -> Result<u8> {
        self.0.u8().map_err(bad)
    }

    fn bytes(&mut self, n: u64) -> Result<&'a [u8]> {
        self.0.bytes(n).map_err(bad)
    }

    fn varint(&mut self) -> Result<u64> {
        self.0.varint().map_err(bad)
    }

    /// The flags and the location.
    fn head(&mut self) -> Result<(Option<Location>, u8)> {
        let flags = self.u8()?;
        if flags & !(HAS_LOC | SPILLED) != 0 {
            return Err(bad(format!("flags {flags:#x}, expected bits of {:#x}", HAS_LOC | SPILLED)));
        }
        if flags & HAS_LOC == 0 {
            return Ok((None, flags));
        }
        let (segment, offset, len) = self.0.loc().map_err(bad)?;
        Ok((Some(Location { segment, offset, len }), flags))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code: a failed step fails the test")]

    use super::*;

    #[test]
    fn a_blob_row_reads_back_as_written() {
        let rows = [
            BlobRow::default(),
            BlobRow {
                loc: Some(Location { segment: 3, offset: 1 << 40, len: u32::MAX }),
                ..Default::default()
            },
            BlobRow {
                loc: Some(Location { segment: 1, offset: 4096, len: 700 }),
                grants: vec![("langgraph".into(), 1, 1), ("é".into(), 0, 3)],
                spilled: true,
            },
        ];
        for row in rows {
            let bytes = row.encode();
            assert_eq!(BlobRow::decode(&bytes).unwrap(), row);
            assert_eq!(BlobRow::location(&bytes).unwrap(), row.loc);
        }
    }

    #[test]
    fn a_damaged_blob_row_is_an_index_error_that_says_what_is_wrong() {
        let row = BlobRow { loc: None, grants: vec![("o".into(), 2, 1)], spilled: false }.encode();
        for (bytes, says) in [
            (&row[..row.len() - 1], "ends early"),
            (&[0x80u8][..], "flags 0x80"),
            (&[1u8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f][..], "overflows"),
        ] {
            let e = BlobRow::decode(bytes).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("blobs table"), "{e}");
        }
        let mut long = row.clone();
        long.push(0);
        assert!(BlobRow::decode(&long).unwrap_err().to_string().contains("1 bytes after"));
    }
}
