//! Archives: large outputs kept whole, previews that say what they leave out, and
//! `read_context`, which returns any range of the original exactly, in any unit.
//!
//! An archive is a blob of UTF-8 text (its id is the text's content address) plus a blob
//! holding its [offset index](offsets). An `archive` record grants one owner the right to
//! read it; the same text archived by two owners is stored once with two grants.
//!
//! A text a message holds inline (a text part, an inline tool result) reads as an archive of
//! its content address too, for the owner of the chat that holds it, without an archive
//! written: a view previews such texts and names them by that address, and stays a read.
//! The index lists every inline text of every message (`inline_texts`, see FORMAT.md); the
//! text is read from its message and its offset index built once, then kept in the cache
//! like an archive's. Another owner gets the error of an unknown id.

mod cache;
mod offsets;
mod preview;

pub(crate) use cache::ArchiveCache;
/// An archive's whole text (`load`) and a range of it (`read_context`), through the cache.
pub(crate) use cache::{load_whole as load, read_context};

pub use offsets::Unit;
pub use preview::{derived_of, preview_inline, preview_of};

use std::borrow::Cow;
use std::ops::Range;

use self::offsets::{Dense, OffsetIndex};
use crate::base::blob::{BlobId, Verify};
use crate::base::error::{Error, Result};
use crate::disk::index::{GRANT_ARCHIVE, GRANT_INLINE, InlineText};
use crate::disk::log::Position;
use crate::disk::record::{self, ArchiveRec, Kind};
use crate::kernel::store::blobs;
use crate::kernel::store::core::{Core, RecordOut, Txn};
use crate::model::message::ArchiveRef;

/// A text with its offset index: exact slicing in any [`Unit`] in O(log n + range).
/// This is what `read_context` runs on; it is public for harnesses that hold a text in
/// memory and for the fuzz target that checks it against naive slicing.
///
/// ```
/// use undertext::ArchiveText;
/// use undertext::Unit;
/// let t = ArchiveText::new("a😀b\nsecond line\n".into());
/// assert_eq!(t.read(1..2, Unit::Chars)?, "😀");
/// assert_eq!(t.read(1..3, Unit::Utf16)?, "😀");
/// assert!(t.read(1..2, Unit::Utf16).is_err()); // would split the surrogate pair
/// assert_eq!(t.read(1..2, Unit::Lines)?, "second line\n");
/// assert_eq!(t.len(Unit::Bytes), 19);
/// # Ok::<(), undertext::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ArchiveText {
    text: String,
    index: OffsetIndex,
    /// Sub-marks of strides looked up so far (in memory only).
    dense: Dense,
}

impl ArchiveText {
    /// Indexes `text` (one pass).
    pub fn new(text: String) -> ArchiveText {
        let index = OffsetIndex::build(&text);
        ArchiveText::from_parts(text, index)
    }

    /// The whole text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Length in `unit`.
    pub fn len(&self, unit: Unit) -> u64 {
        self.index.total(unit, &self.text)
    }

    /// True for the empty text.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// `range` counted in `unit`, exactly; an error says where a bound splits a character
    /// and gives the length when a bound is past the end.
    pub fn read(&self, range: Range<u64>, unit: Unit) -> Result<&str> {
        if range.start > range.end {
            return Err(Error::InvalidArgument(format!("range {}..{} is reversed", range.start, range.end)));
        }
        let (bytes, nl) = (self.text.as_bytes(), self.text.ends_with('\n'));
        let mut window = |r: Range<usize>| Ok(Cow::Borrowed(&bytes[r]));
        let (a, b) = self.index.range_in(range, unit, nl, &mut window, Some(&self.dense))?;
        Ok(&self.text[a..b])
    }

    /// A text and its offset index, checked by the caller to belong together.
    pub(crate) fn from_parts(text: String, index: OffsetIndex) -> ArchiveText {
        let dense = Dense::for_index(&index);
        ArchiveText { text, index, dense }
    }

    /// A text, its offset index and the sub-marks already found for it (a chunked archive's
    /// pieces joined: see `cache.rs`).
    pub(crate) fn with_dense(text: String, index: OffsetIndex, dense: Dense) -> ArchiveText {
        ArchiveText { text, index, dense }
    }

    /// Bytes of the encoded offset index (the overhead stored with the archive).
    pub fn index_bytes(&self) -> usize {
        self.index.encode().len()
    }
}

pub(crate) fn to_ref(a: &ArchiveRec) -> ArchiveRef {
    ArchiveRef { id: BlobId(a.id), bytes: a.bytes, chars: a.chars, utf16_units: a.utf16, lines: a.lines }
}

/// Adds the blobs and the grant of an archive of `text` for `owner` to `txn`.
/// Returns the reference and the end of any existing copy to wait for.
pub(crate) fn archive_into(
    core: &Core,
    txn: &mut Txn,
    owner: &str,
    text: &str,
) -> Result<(ArchiveRef, Option<Position>)> {
    archive_into_chat(core, txn, owner, text, None)
}

/// [`archive_into`] for a transaction of `chat`: a grant already bound to that chat is not
/// written again.
pub(crate) fn archive_into_chat(
    core: &Core,
    txn: &mut Txn,
    owner: &str,
    text: &str,
    chat: Option<u64>,
) -> Result<(ArchiveRef, Option<Position>)> {
    let idx = OffsetIndex::build(text);
    add_archive(core, txn, owner, text, &idx, chat)
}

/// [`archive_into`] for a message of `chat` about to be appended, with its preview in about
/// `max_chars` characters (`template` marks what it leaves out): the text's offset index is
/// built once for the archive and the preview. A grant already bound to that chat is not
/// written again. Needs nothing of the chat's writer state: an append runs it before it takes
/// the chat's lock.
pub(crate) fn archive_with_preview(
    core: &Core,
    txn: &mut Txn,
    (owner, chat): (&str, u64),
    text: &str,
    (max_chars, template): (usize, &str),
) -> Result<(ArchiveRef, String, Option<Position>)> {
    let idx = OffsetIndex::build(text);
    let (r, wait) = add_archive(core, txn, owner, text, &idx, Some(chat))?;
    let preview = preview::build(text, &idx, &r.id.to_string(), max_chars, None, template);
    Ok((r, preview, wait))
}

/// Adds the blobs (`text`, its offset index `idx`) and the grant of an archive to `txn`.
fn add_archive(
    core: &Core,
    txn: &mut Txn,
    owner: &str,
    text: &str,
    idx: &OffsetIndex,
    chat: Option<u64>,
) -> Result<(ArchiveRef, Option<Position>)> {
    let (id, w1) = txn.blob(core, text.as_bytes())?;
    let (index_id, w2) = txn.blob(core, &idx.encode())?;
    let rec = ArchiveRec {
        owner: owner.to_string(),
        id: id.0,
        index: index_id.0,
        bytes: idx.end.bytes,
        chars: idx.end.chars,
        utf16: idx.end.utf16,
        lines: idx.lines(text.ends_with('\n')),
    };
    let r = to_ref(&rec);
    bind_into(core, txn, &rec, chat)?;
    Ok((r, w1.max(w2)))
}

/// Adds the archive grant `rec` to `txn` unless its owner already holds one that does as
/// much: its own, or (with `chat`) one bound to that chat, or the same grant earlier in `txn`.
/// Written with a chat's records, the grant is bound to that chat (it goes when the chat is
/// deleted); alone, it is the owner's own.
pub(crate) fn bind_into(core: &Core, txn: &mut Txn, rec: &ArchiveRec, chat: Option<u64>) -> Result<()> {
    let h = blobs::held(core, &rec.owner, &BlobId(rec.id), chat)?;
    if (h.own | h.chat) & GRANT_ARCHIVE != 0 {
        return Ok(());
    }
    let payload = record::encode(rec)?.into_vec();
    if !txn.records.iter().any(|x| x.kind == Kind::Archive && x.payload == payload) {
        txn.push(RecordOut::history(Kind::Archive, payload));
    }
    Ok(())
}

/// The grant of `owner` on archive `id`, if any (consulting records not yet in redb, without
/// a flush: see [`blobs::granted`]). An archive grant bound to a deleted chat no longer
/// counts.
pub(crate) fn grant(core: &Core, owner: &str, id: &BlobId) -> Result<Option<ArchiveRec>> {
    if !blobs::granted(core, owner, id, GRANT_ARCHIVE)? {
        return Ok(None);
    }
    // Its record: pending in the memtable, or (having left it) in redb.
    if let Some(a) = core.index.mem.read().pending_grant(owner, &id.0).archive {
        return Ok(Some(a));
    }
    match crate::disk::index::archive_record(&core.index.read()?, owner, id)? {
        Some(rec) => Ok(Some(rec)),
        None => Err(Error::index_msg(format!(
            "archive {id}: {owner:?} holds its grant, but its record is not indexed"
        ))),
    }
}

/// The code of a unit in pin records.
pub(crate) fn unit_code(u: Unit) -> u8 {
    match u {
        Unit::Chars => 0,
        Unit::Utf16 => 1,
        Unit::Bytes => 2,
        Unit::Lines => 3,
    }
}

/// The unit of a code in pin records.
pub(crate) fn unit_of(c: u8) -> Option<Unit> {
    Some(match c {
        0 => Unit::Chars,
        1 => Unit::Utf16,
        2 => Unit::Bytes,
        3 => Unit::Lines,
        _ => return None,
    })
}

fn not_found(id: &BlobId) -> Error {
    Error::NotFound { what: format!("archive {id}") }
}

/// Archives `text` for `owner` and returns its reference (see `Store::archive`). A preview
/// of an archive `owner` may read gives that archive's reference; a preview of a text held
/// inline archives that text.
pub(crate) fn archive(core: &Core, cache: &ArchiveCache, owner: &str, text: &str) -> Result<ArchiveRef> {
    let marker = &core.opts.preview_marker;
    let mut text = text;
    let original;
    if let Some(hex) = preview::marked_id(text, marker)
        && let Ok(id) = hex.parse::<BlobId>()
    {
        match grant(core, owner, &id)? {
            Some(a) if preview::is_preview_of(text, load(core, cache, owner, &id)?.as_str(), marker) => {
                return Ok(to_ref(&a));
            }
            Some(_) => {}
            None => {
                if let Some(t) = inline_text(core, owner, &id)?
                    && preview::is_preview_of(text, &t, marker)
                {
                    original = t;
                    text = &original;
                }
            }
        }
    }
    let mut txn = Txn::default();
    let (r, wait) = archive_into(core, &mut txn, owner, text)?;
    let c = core.append(txn)?;
    core.wait_durable(wait.map_or(c.end, |w| w.max(c.end)))?;
    Ok(r)
}

/// The reference of archive `id`, if `owner` may read it (an archive, or a text held inline).
pub(crate) fn archive_ref(core: &Core, cache: &ArchiveCache, owner: &str, id: &BlobId) -> Result<ArchiveRef> {
    match grant(core, owner, id)? {
        Some(a) => Ok(to_ref(&a)),
        None => {
            let t = load(core, cache, owner, id)?;
            Ok(ref_of(id, &t.text, &t.index))
        }
    }
}

/// The reference of `text` under id `id`, from its offset index `idx`.
pub(super) fn ref_of(id: &BlobId, text: &str, idx: &OffsetIndex) -> ArchiveRef {
    ArchiveRef {
        id: *id,
        bytes: idx.end.bytes,
        chars: idx.end.chars,
        utf16_units: idx.end.utf16,
        lines: idx.lines(text.ends_with('\n')),
    }
}

/// Where `owner` holds text `id` inline (see [`crate::disk::index::Index::inline_text`]): records
/// written moments ago are found in the memtable, without a flush of the index. On a miss,
/// the texts of message bodies stored as blobs that redb has queued are listed (each body once:
/// the one write a lookup can make, and only when bodies are queued), and in fleet mode the
/// owner's chats another process wrote are pulled, before the answer.
pub(crate) fn inline_place(core: &Core, owner: &str, id: &BlobId) -> Result<Option<InlineText>> {
    let body = |b: &[u8; 32]| core.get_blob(&BlobId(*b), Verify::Hash);
    // A read-only store lists the texts its refreshes replayed when a lookup first needs them.
    crate::kernel::store::read_only::list_deferred_texts(core);
    if let Some(p) = core.index.inline_text(owner, &id.0, &body)? {
        return Ok(Some(p));
    }
    let again = match core.remote() {
        // Fleet mode: chats of the owner another process wrote are pulled too.
        Some(remote) => {
            remote.catch_up_owner(core, owner)?;
            core.index.list_body_texts(&body)?;
            true
        }
        None => core.index.list_body_texts(&body)? > 0,
    };
    if !again {
        return Ok(None);
    }
    core.index.inline_text(owner, &id.0, &body)
}

/// Text `id` as a message of a chat of `owner` holds it inline, read from the message;
/// `None` when no chat of `owner` holds it.
pub(crate) fn inline_text(core: &Core, owner: &str, id: &BlobId) -> Result<Option<String>> {
    match inline_place(core, owner, id)? {
        Some(at) => text_at(core, id, &at).map(Some),
        None => Ok(None),
    }
}

/// Text `id`, read from the message version `at` holding it inline (checked against `id`).
pub(crate) fn text_at(core: &Core, id: &BlobId, at: &InlineText) -> Result<String> {
    let raw = core.read(at.loc, Verify::Checksum)?;
    let body = |b: &[u8; 32]| core.get_blob(&BlobId(*b), Verify::Hash);
    let text = record::message_part_text(raw.kind, &raw.payload, at.part, body)?.ok_or_else(|| {
        Error::index_msg(format!(
            "text {id}: the index lists it as part {} of message {} (revision {}) of chat {}, which holds no inline text there",
            at.part, at.seq, at.revision, at.chat
        ))
    })?;
    let found = BlobId::of(text.as_bytes());
    if found != *id {
        return Err(Error::index_msg(format!(
            "text {id}: part {} of message {} (revision {}) of chat {} holds text {found}",
            at.part, at.seq, at.revision, at.chat
        )));
    }
    Ok(text)
}

/// True when `owner` may read `id` as an archive: it holds an archive grant on it, or a chat
/// of its own holds the text inline (remembered in the grant cache under the grants epoch,
/// which a chat's deletion advances).
pub(crate) fn readable(core: &Core, owner: &str, id: &BlobId) -> Result<bool> {
    if blobs::granted(core, owner, id, GRANT_ARCHIVE)? {
        return Ok(true);
    }
    let epoch = core.index.grants_epoch();
    if core.grants.holds(owner, id, GRANT_INLINE, epoch) {
        return Ok(true);
    }
    let found = inline_place(core, owner, id)?.is_some();
    if found {
        core.grants.note(owner, id, GRANT_INLINE, epoch);
    }
    Ok(found)
}

/// A preview of archive `id` in about `max_chars` characters (see `Store::preview`).
pub(crate) fn preview(
    core: &Core,
    cache: &ArchiveCache,
    owner: &str,
    id: &BlobId,
    max_chars: usize,
    query: Option<&str>,
) -> Result<String> {
    let l = load(core, cache, owner, id)?;
    Ok(preview::build(&l.text, &l.index, &id.to_string(), max_chars, query, &core.opts.preview_marker))
}
