//! The archive cache: what `read_context` needs of an archive, verified once and kept, so
//! that a warm read is a grant check, two searches of the offset index and a copy.
//!
//! An archive stored as one blob is kept whole ([`ArchiveText`]: its text, checked as UTF-8
//! and against its hash, and its offset index). A chunked archive is not loaded whole: its
//! entry holds the offset index (hashed once) and the chunk list, and each chunk a read
//! touches becomes a [`Piece`] the first time, verified as the store's `Options::verify`
//! asks (as the chunk cache does) and checked as UTF-8 once; later reads copy from pieces
//! without checking again. Nothing enters the cache before it is verified, and a read that
//! finds a piece damaged fails and leaves nothing behind. Once every chunk is loaded, the
//! pieces are joined into one text held whole in their place, so that warm reads of an
//! archive read to its end cost what reads of an unchunked one do.
//!
//! The cache holds texts by blob id; who may read them is decided before (the owner's grant,
//! itself cached under the index's grants epoch: see `store/blobs.rs`).

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use super::offsets::{Dense, OffsetIndex, Unit};
use super::{ArchiveText, grant, inline_place, not_found, readable, text_at};
use crate::base::blob::{BlobId, IdHash, Verify};
use crate::base::error::{Error, Result};
use crate::disk::index::GRANT_INLINE;
use crate::disk::record::ArchiveRec;
use crate::kernel::store::core::Core;

/// Bytes of archive text (and offset indexes) the cache keeps.
const CACHE_BYTES: usize = 64 << 20;

/// Recently read archives, kept up to a byte budget (least recently used first out).
///
/// A warm read runs under the read lock (readers do not wait for each other) and takes
/// nothing out: a whole text is read in place, so no reference count moves.
#[derive(Debug, Default)]
pub(crate) struct ArchiveCache {
    inner: RwLock<CacheInner>,
}

#[derive(Debug, Default)]
struct CacheInner {
    /// Archives by id (keyed with [`IdHash`]: ids are uniform already).
    map: HashMap<BlobId, Entry, IdHash>,
    /// Counts uses, for [`Entry::used`]. Advanced under the read lock without an atomic
    /// read-modify-write: two reads at once may both take the same value, which only leaves
    /// the order of two recently used archives undecided.
    clock: AtomicU64,
}

/// A cached archive, the clock value of its last use, and its last reader.
#[derive(Debug)]
struct Entry {
    loaded: Loaded,
    used: AtomicU64,
    reader: Reader,
}

/// The last owner found allowed to read an archive, and the grants epoch it was found under
/// (`Index::grants_epoch`, advanced by every commit that applies a deletion): while the epoch
/// is the same, the owner still may, as the grant cache answers (`store/blobs.rs`), without
/// its lock and lookup.
type Reader = Option<(Box<str>, u64)>;

/// A cached archive.
#[derive(Debug, Clone)]
enum Loaded {
    /// Held whole.
    Whole(Arc<ArchiveText>),
    /// Chunked: the pieces read so far.
    Chunked(Arc<Chunked>),
}

/// What [`ArchiveCache::read_or_take`] found.
enum Found<R> {
    /// The whole text, read by the last reader's owner.
    Read(R),
    /// The archive, and whether the owner asking was its last reader.
    Take(Loaded, bool),
}

impl Loaded {
    fn bytes(&self) -> usize {
        match self {
            Loaded::Whole(t) => t.text.len() + t.index.marks.len() * 32 + t.dense.bytes(),
            Loaded::Chunked(c) => {
                c.bytes.load(Ordering::Relaxed)
                    + c.index.marks.len() * 32
                    + c.dense.bytes()
                    + c.starts.first.len() * 4
            }
        }
    }
}

impl ArchiveCache {
    fn get(&self, id: &BlobId) -> Option<Loaded> {
        match self.read_or_take(id, "", u64::MAX, |_| ())? {
            Found::Take(l, _) => Some(l),
            Found::Read(()) => None,
        }
    }

    /// `read` run on archive `id` in place when the cache holds it whole and `owner` was its
    /// last reader under grants `epoch` (the warm read); otherwise archive `id` if cached, and
    /// whether `owner` was its last reader.
    fn read_or_take<R>(
        &self,
        id: &BlobId,
        owner: &str,
        epoch: u64,
        read: impl FnOnce(&ArchiveText) -> R,
    ) -> Option<Found<R>> {
        let g = self.inner.read();
        let e = g.map.get(id)?;
        e.used.store(g.tick(), Ordering::Relaxed);
        let allowed = e.reader.as_ref().is_some_and(|(o, at)| *at == epoch && **o == *owner);
        Some(match &e.loaded {
            Loaded::Whole(t) if allowed => Found::Read(read(t)),
            l => Found::Take(l.clone(), allowed),
        })
    }

    /// Remembers that `owner` was found allowed to read archive `id` under grants `epoch`
    /// (read before the check).
    fn allow(&self, id: &BlobId, owner: &str, epoch: u64) {
        if let Some(e) = self.inner.write().map.get_mut(id) {
            e.reader = Some((owner.into(), epoch));
        }
    }

    fn put(&self, id: BlobId, loaded: Loaded) {
        let mut g = self.inner.write();
        let used = AtomicU64::new(g.tick());
        g.map.insert(id, Entry { loaded, used, reader: None });
        g.evict();
    }

    /// Puts `whole`, the text of chunked archive `id` joined, in the place of `chunked` (kept
    /// with its clock and reader), unless the entry has changed since.
    fn join(&self, id: &BlobId, chunked: &Arc<Chunked>, whole: Arc<ArchiveText>) {
        let mut g = self.inner.write();
        if let Some(e) = g.map.get_mut(id)
            && matches!(&e.loaded, Loaded::Chunked(c) if Arc::ptr_eq(c, chunked))
        {
            e.loaded = Loaded::Whole(whole);
        }
    }

    /// Evicts after a chunked entry grew.
    fn grew(&self) {
        self.inner.write().evict();
    }
}

impl CacheInner {
    /// The next clock value (see [`CacheInner::clock`]).
    fn tick(&self) -> u64 {
        let t = self.clock.load(Ordering::Relaxed) + 1;
        self.clock.store(t, Ordering::Relaxed);
        t
    }

    fn evict(&mut self) {
        let mut bytes: usize = self.map.values().map(|e| e.loaded.bytes()).sum();
        while bytes > CACHE_BYTES && self.map.len() > 1 {
            let oldest = self.map.iter().min_by_key(|(_, e)| e.used.load(Ordering::Relaxed)).map(|(k, _)| *k);
            let Some(oldest) = oldest else {
                break;
            };
            if let Some(e) = self.map.remove(&oldest) {
                bytes -= e.loaded.bytes();
            }
        }
    }
}

/// A chunked archive: its offset index, its chunks, and the pieces read so far.
#[derive(Debug)]
struct Chunked {
    id: BlobId,
    index: OffsetIndex,
    ends_with_newline: bool,
    /// Chunk ids and the archive offset each ends at.
    chunks: Vec<(BlobId, u64)>,
    /// The offset each chunk ends at (a search touches less memory than one of `chunks`).
    ends: Vec<u64>,
    /// Where to look: the chunk holding byte `b << shift`, for each `b` (see
    /// [`Chunked::chunk_at`]).
    starts: ChunkTable,
    pieces: Vec<OnceLock<Piece>>,
    /// Bytes of the pieces loaded.
    bytes: AtomicUsize,
    /// Sub-marks of the strides looked up so far.
    dense: Dense,
    /// Set by the read that first finds every chunk loaded: that read joins the pieces into
    /// one text (see [`Chunked::joined`]), once.
    joining: AtomicBool,
}

/// One chunk of a chunked archive, split where its characters are whole: the continuation
/// bytes it starts with (the end of a character the previous chunk began), its whole
/// characters (checked as UTF-8), and the bytes of a character it begins but the next chunk
/// ends. A character cut by a chunk boundary is `tail` of one piece and `head` of the next.
#[derive(Debug)]
struct Piece {
    head: Vec<u8>,
    text: String,
    tail: Vec<u8>,
}

impl Piece {
    /// Splits chunk `raw`, which starts at archive byte `start`, or says where it is not UTF-8.
    fn of(id: &BlobId, start: u64, raw: &[u8]) -> Result<Piece> {
        let bad = |at: usize| not_utf8(id, start + at as u64);
        let head = raw.iter().take_while(|&&b| b & 0xC0 == 0x80).count();
        if head > 3 {
            return Err(bad(0));
        }
        // The last lead byte, and whether its character ends in this chunk.
        let mut cut = raw.len();
        if let Some(p) = (head..raw.len()).rev().take(4).find(|&i| raw[i] & 0xC0 != 0x80) {
            let width = match raw[p] {
                b if b < 0x80 => 1,
                b if b >= 0xF0 => 4,
                b if b >= 0xE0 => 3,
                _ => 2,
            };
            if p + width > raw.len() {
                cut = p;
            }
        }
        let text = std::str::from_utf8(&raw[head..cut]).map_err(|e| bad(head + e.valid_up_to()))?;
        Ok(Piece { head: raw[..head].to_vec(), text: text.to_string(), tail: raw[cut..].to_vec() })
    }

    fn len(&self) -> usize {
        self.head.len() + self.text.len() + self.tail.len()
    }
}

/// A table from archive offsets to chunks, in buckets of a power of two bytes no larger than
/// the shortest chunk but the last (and at least an eighth of the chunks' mean): a bucket
/// then holds at most one chunk end, and the chunk holding a byte is its bucket's entry or the
/// next, found without a branch; a step along the chunk ends follows only for uneven chunks.
#[derive(Debug)]
struct ChunkTable {
    shift: u32,
    first: Vec<u32>,
}

impl ChunkTable {
    fn new(ends: &[u64]) -> ChunkTable {
        let len = ends.last().copied().unwrap_or(0);
        let mean = (len / ends.len().max(1) as u64).max(1);
        let shortest = ends.windows(2).take(ends.len().saturating_sub(2)).map(|w| w[1] - w[0]);
        let shortest = ends.first().copied().into_iter().chain(shortest).min().unwrap_or(mean);
        let shift = shortest.clamp((mean / 8).max(1), mean).ilog2();
        let mut k = 0;
        let first = (0..=len >> shift)
            .map(|b| {
                while ends.get(k).is_some_and(|&end| end <= b << shift) {
                    k += 1;
                }
                k as u32
            })
            .collect();
        ChunkTable { shift, first }
    }

    /// The number of `ends` (those the table was built from) at or before `at`: the chunk
    /// holding byte `at`, or the count of chunks for `at` past the end.
    fn chunk_at(&self, ends: &[u64], at: u64) -> usize {
        let from = (at >> self.shift).try_into().ok().and_then(|b: usize| self.first.get(b));
        let Some(&from) = from else { return ends.len() };
        let mut k = from as usize;
        k += usize::from(ends.get(k).is_some_and(|&end| end <= at));
        while ends.get(k).is_some_and(|&end| end <= at) {
            k += 1;
        }
        k
    }
}

impl Chunked {
    /// Which chunk holds archive byte `at`: the number of chunks that end at or before it
    /// (the count of chunks for `at` ≥ the archive's length).
    fn chunk_at(&self, at: u64) -> usize {
        self.starts.chunk_at(&self.ends, at)
    }

    fn start_of(&self, k: usize) -> u64 {
        if k == 0 { 0 } else { self.ends[k - 1] }
    }

    /// The loaded piece holding byte `at`, and the archive offset its whole characters start
    /// at; `None` when its chunk is not loaded yet.
    fn loaded_at(&self, at: usize) -> Option<(&Piece, usize)> {
        let k = self.chunk_at(at as u64);
        let p = self.pieces.get(k)?.get()?;
        Some((p, self.start_of(k) as usize + p.head.len()))
    }

    /// Bytes `r` when they lie in the whole characters of one loaded piece, as a warm read's
    /// bounds mostly do: borrowed, with no chunk to load and nothing to put together.
    fn loaded_bytes(&self, r: Range<usize>) -> Option<&[u8]> {
        let (p, start) = self.loaded_at(r.start)?;
        p.text.as_bytes().get(r.start.checked_sub(start)?..r.end.checked_sub(start)?)
    }

    /// True once every chunk is loaded.
    fn complete(&self) -> bool {
        self.bytes.load(Ordering::Relaxed) as u64 == self.index.end.bytes
    }

    /// Loads the pieces of the chunks that bytes `ranges` overlap and are not loaded yet:
    /// their chunks read and verified in one batch.
    fn ensure(&self, core: &Core, cache: &ArchiveCache, ranges: &[Range<u64>]) -> Result<()> {
        if self.complete() {
            return Ok(());
        }
        let mut want: Vec<usize> = Vec::new();
        for r in ranges {
            if r.start >= r.end {
                continue;
            }
            for k in self.chunk_at(r.start)..=self.chunk_at(r.end - 1).min(self.chunks.len() - 1) {
                if self.pieces[k].get().is_none() && !want.contains(&k) {
                    want.push(k);
                }
            }
        }
        if want.is_empty() {
            return Ok(());
        }
        let ids: Vec<BlobId> = want.iter().map(|&k| self.chunks[k].0).collect();
        let raws = core.chunks(&ids, core.opts.verify)?;
        for (k, raw) in want.into_iter().zip(raws) {
            let start = self.start_of(k);
            if raw.len() as u64 != self.chunks[k].1 - start {
                return Err(Error::corrupt_content(
                    format!("archive {}", self.id),
                    format!(
                        "chunk {} holds {} bytes, its manifest says {}",
                        self.chunks[k].0,
                        raw.len(),
                        self.chunks[k].1 - start
                    ),
                ));
            }
            let p = Piece::of(&self.id, start, &raw)?;
            let n = p.len();
            if self.pieces[k].set(p).is_ok() {
                self.bytes.fetch_add(n, Ordering::Relaxed);
            }
        }
        cache.grew();
        Ok(())
    }

    /// The whole text, once every chunk is loaded, with the offset index and the sub-marks
    /// found so far: the first read that finds the archive complete gets it (later ones get
    /// `None`), and the cache holds it in place of the pieces, so that warm reads take the
    /// whole text's path (no chunk to find per bound, one copy for the result). Its bytes are
    /// the pieces' bytes (no more memory once the pieces go). `None` as well when the pieces
    /// do not join into UTF-8 text (a damaged chunk boundary): the pieces stay, and the reads
    /// that cross it fail as before.
    fn joined(&self) -> Option<ArchiveText> {
        if !self.complete()
            || self.joining.load(Ordering::Relaxed)
            || self.joining.swap(true, Ordering::Relaxed)
        {
            return None;
        }
        let mut bytes = Vec::with_capacity(self.index.end.bytes as usize);
        for p in &self.pieces {
            let p = p.get()?;
            bytes.extend_from_slice(&p.head);
            bytes.extend_from_slice(p.text.as_bytes());
            bytes.extend_from_slice(&p.tail);
        }
        let text = String::from_utf8(bytes).ok()?;
        Some(ArchiveText::with_dense(text, self.index.clone(), self.dense.clone()))
    }

    fn piece(&self, k: usize) -> Result<&Piece> {
        self.pieces[k].get().ok_or_else(|| {
            Error::corrupt_content(
                format!("archive {}", self.id),
                format!("chunk {k} was needed but not loaded: its offset index and its chunks disagree"),
            )
        })
    }

    /// The bytes `r` (loaded by [`Chunked::ensure`]): borrowed when they lie in one piece's
    /// whole characters.
    fn bytes_of(&self, r: Range<usize>) -> Result<Cow<'_, [u8]>> {
        if r.start >= r.end {
            return Ok(Cow::Borrowed(&[]));
        }
        let k = self.chunk_at(r.start as u64);
        let start = self.start_of(k) as usize;
        let p = self.piece(k)?;
        let text = start + p.head.len()..start + p.head.len() + p.text.len();
        if text.start <= r.start && r.end <= text.end {
            return Ok(Cow::Borrowed(&p.text.as_bytes()[r.start - text.start..r.end - text.start]));
        }
        let mut out = Vec::with_capacity(r.len());
        let mut k = k;
        while out.len() < r.len() && k < self.chunks.len() {
            let start = self.start_of(k) as usize;
            let p = self.piece(k)?;
            let mut at = start;
            for part in [&p.head[..], p.text.as_bytes(), &p.tail[..]] {
                let (lo, hi) = (r.start.max(at), r.end.min(at + part.len()));
                if lo < hi {
                    out.extend_from_slice(&part[lo - at..hi - at]);
                }
                at += part.len();
            }
            k += 1;
        }
        if out.len() < r.len() {
            return Err(Error::InvalidArgument(format!(
                "bytes {}..{} of archive {}: past its end",
                r.start, r.end, self.id
            )));
        }
        Ok(Cow::Owned(out))
    }

    /// Archive bytes `from..to` (loaded by [`Chunked::ensure`]) as text; both are character
    /// boundaries when the archive is whole. Whole characters are copied from the pieces
    /// without checking them again; a character cut by a chunk boundary is put together and
    /// checked. A character cut twice (a chunk of a few continuation bytes) takes the slow
    /// way: the bytes copied, then checked.
    fn text_of(&self, from: usize, to: usize) -> Result<String> {
        // Within one piece's whole characters (both bounds are boundaries there): one copy.
        if let Some((p, start)) = self.loaded_at(from)
            && let Some(s) = p.text.get(from.wrapping_sub(start)..to.wrapping_sub(start))
        {
            return Ok(s.to_string());
        }
        self.text_of_pieces(from, to).or_else(|_| {
            String::from_utf8(self.bytes_of(from..to)?.into_owned())
                .map_err(|e| not_utf8(&self.id, (from + e.utf8_error().valid_up_to()) as u64))
        })
    }

    fn text_of_pieces(&self, from: usize, to: usize) -> Result<String> {
        let damaged = |at: usize| not_utf8(&self.id, at as u64);
        let mut out = String::with_capacity(to - from);
        let mut at = from;
        while at < to {
            let k = self.chunk_at(at as u64);
            let start = self.start_of(k) as usize;
            let p = self.piece(k)?;
            let text_start = start + p.head.len();
            let text_end = text_start + p.text.len();
            if at < text_start {
                // Inside a character that began in the previous chunk: not a boundary.
                return Err(damaged(at));
            }
            if at < text_end {
                let end = to.min(text_end);
                let s = p.text.get(at - text_start..end - text_start).ok_or_else(|| damaged(at))?;
                out.push_str(s);
                at = end;
                continue;
            }
            // At the character cut by this chunk's end (or at the end itself), put together
            // on the stack: a character is at most 4 bytes.
            let next = if k + 1 < self.chunks.len() { &self.piece(k + 1)?.head[..] } else { &[] };
            let mut buf = [0u8; 4];
            let n = p.tail.len() + next.len();
            let Some(cut) = buf.get_mut(..n) else { return Err(damaged(at)) };
            cut[..p.tail.len()].copy_from_slice(&p.tail);
            cut[p.tail.len()..].copy_from_slice(next);
            let cut = &*cut;
            if cut.is_empty() {
                // An empty chunk (or the end): go on with the next.
                if k + 1 >= self.chunks.len() {
                    return Err(damaged(at));
                }
                at = self.start_of(k + 1) as usize;
                continue;
            }
            let c = std::str::from_utf8(cut).map_err(|_| damaged(at))?;
            if at + cut.len() > to || c.chars().count() != 1 {
                return Err(damaged(at));
            }
            out.push_str(c);
            at += cut.len();
        }
        Ok(out)
    }
}

/// `range` of archive `id` of `owner` in `unit`: see `Store::read_context`.
pub(crate) fn read_context(
    core: &Core,
    cache: &ArchiveCache,
    owner: &str,
    id: &BlobId,
    range: Range<u64>,
    unit: Unit,
) -> Result<String> {
    if range.start > range.end {
        return Err(Error::InvalidArgument(format!("range {}..{} is reversed", range.start, range.end)));
    }
    // Read before the checks: a deletion committed during them advances it, and what they
    // found is not remembered past it.
    let epoch = core.index.grants_epoch();
    let found = cache.read_or_take(id, owner, epoch, |t| t.read(range.clone(), unit).map(str::to_string));
    let loaded = match found {
        Some(Found::Read(r)) => return r,
        Some(Found::Take(l, true)) => l,
        Some(Found::Take(l, false)) => {
            if !readable(core, owner, id)? {
                return Err(not_found(id));
            }
            cache.allow(id, owner, epoch);
            l
        }
        None => {
            let l = load(core, cache, owner, id)?;
            cache.allow(id, owner, epoch);
            l
        }
    };
    match loaded {
        Loaded::Whole(t) => Ok(t.read(range, unit)?.to_string()),
        Loaded::Chunked(c) => {
            if !c.complete() {
                // The chunks around both bounds, read in one batch.
                let windows = [
                    c.index.window(range.start, unit, c.ends_with_newline),
                    c.index.window(range.end, unit, c.ends_with_newline),
                ];
                c.ensure(core, cache, &windows)?;
            }
            let mut window = |r: Range<usize>| match c.loaded_bytes(r.clone()) {
                Some(b) => Ok(Cow::Borrowed(b)),
                None => {
                    c.ensure(core, cache, std::slice::from_ref(&(r.start as u64..r.end as u64)))?;
                    c.bytes_of(r)
                }
            };
            let nl = c.ends_with_newline;
            let (from, to) = c.index.range_in(range, unit, nl, &mut window, Some(&c.dense))?;
            if !c.complete() {
                c.ensure(core, cache, std::slice::from_ref(&(from as u64..to as u64)))?;
            }
            let out = c.text_of(from, to)?;
            if let Some(t) = c.joined() {
                cache.join(id, &c, Arc::new(t));
            }
            Ok(out)
        }
    }
}

/// Archive `id` of `owner`, whole (for previews): from the cache, or loaded, verified and
/// kept.
pub(crate) fn load_whole(
    core: &Core,
    cache: &ArchiveCache,
    owner: &str,
    id: &BlobId,
) -> Result<Arc<ArchiveText>> {
    let Some(a) = grant(core, owner, id)? else { return load_inline(core, cache, owner, id) };
    if let Some(Loaded::Whole(t)) = cache.get(id) {
        return Ok(t);
    }
    let t = whole(core, &a, id)?;
    cache.put(*id, Loaded::Whole(t.clone()));
    Ok(t)
}

/// Checks the grant and puts archive `id` in the cache: whole when it is one blob, as a
/// chunked entry (no chunk read yet) when it is chunked. Without a grant, a text a chat of
/// `owner` holds inline is read from its message and kept whole.
fn load(core: &Core, cache: &ArchiveCache, owner: &str, id: &BlobId) -> Result<Loaded> {
    let Some(a) = grant(core, owner, id)? else {
        return Ok(Loaded::Whole(load_inline(core, cache, owner, id)?));
    };
    let l = match core.manifest_of(id)? {
        None => Loaded::Whole(whole(core, &a, id)?),
        Some(m) => {
            let index = offset_index(core, &a, id)?;
            if index.end.bytes != m.len() {
                return Err(index_mismatch(id, index.end.bytes, m.len()));
            }
            // The archive record counts a last line without a newline: whether the text ends
            // with one follows, without reading its last chunk.
            let ends_with_newline = index.end.bytes > 0 && a.lines == index.end.newlines;
            let pieces = (0..m.chunks.len()).map(|_| OnceLock::new()).collect();
            let ends: Vec<u64> = m.chunks.iter().map(|c| c.1).collect();
            let starts = ChunkTable::new(&ends);
            Loaded::Chunked(Arc::new(Chunked {
                id: *id,
                dense: Dense::for_index(&index),
                index,
                ends_with_newline,
                ends,
                starts,
                chunks: m.chunks,
                pieces,
                bytes: AtomicUsize::new(0),
                joining: AtomicBool::new(false),
            }))
        }
    };
    cache.put(*id, l.clone());
    Ok(l)
}

/// Text `id` that a chat of `owner` holds inline (no archive grant): read from its message,
/// indexed once and kept whole in the cache (a whole entry already there is used).
fn load_inline(core: &Core, cache: &ArchiveCache, owner: &str, id: &BlobId) -> Result<Arc<ArchiveText>> {
    let epoch = core.index.grants_epoch();
    let at = inline_place(core, owner, id)?.ok_or_else(|| not_found(id))?;
    core.grants.note(owner, id, GRANT_INLINE, epoch);
    if let Some(Loaded::Whole(t)) = cache.get(id) {
        return Ok(t);
    }
    let t = Arc::new(ArchiveText::new(text_at(core, id, &at)?));
    cache.put(*id, Loaded::Whole(t.clone()));
    Ok(t)
}

/// The offset index of archive `a`, verified against its hash.
fn offset_index(core: &Core, a: &ArchiveRec, id: &BlobId) -> Result<OffsetIndex> {
    let ib = core.get_blob(&BlobId(a.index), Verify::Hash)?;
    let index = OffsetIndex::decode(&ib)
        .map_err(|e| Error::corrupt_content(format!("archive {id}"), format!("its offset index: {e}")))?;
    Ok(index)
}

/// Archive `id` read whole and verified against its hash, with its offset index.
fn whole(core: &Core, a: &ArchiveRec, id: &BlobId) -> Result<Arc<ArchiveText>> {
    let blob = core.get_blob(id, Verify::Hash)?;
    let text =
        String::from_utf8(blob.to_vec()).map_err(|e| not_utf8(id, e.utf8_error().valid_up_to() as u64))?;
    let index = offset_index(core, a, id)?;
    if index.end.bytes != text.len() as u64 {
        return Err(index_mismatch(id, index.end.bytes, text.len() as u64));
    }
    Ok(Arc::new(ArchiveText::from_parts(text, index)))
}

/// The error for archive `id` whose text is not UTF-8 at byte `at`.
fn not_utf8(id: &BlobId, at: u64) -> Error {
    Error::corrupt_content(
        format!("archive {id}"),
        format!("expected UTF-8 text, found an invalid byte at {at}"),
    )
}

/// The error for archive `id` whose offset index covers `covered` bytes of a `len`-byte text.
fn index_mismatch(id: &BlobId, covered: u64, len: u64) -> Error {
    Error::corrupt_content(
        format!("archive {id}"),
        format!("its offset index covers {covered} bytes, its text holds {len}"),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code: a failed step fails the test")]

    use crate::{
        BlobId, ChatMeta, Compression, Durability, Error, NewMessage, Options, Part, Role, Store, Unit,
    };

    fn opts() -> Options {
        Options {
            durability: Durability::None,
            compression: Compression::None,
            chunk_threshold: 4096,
            chunk_avg: 1024,
            ..Options::default()
        }
    }

    /// Multibyte text whose characters are cut by many chunk boundaries.
    fn text() -> String {
        let pieces = ["日本語", "Привет ", "😀👩‍👩‍👧", "ascii ", "\n", "é"];
        let mut x = 7u64;
        let mut s = String::new();
        while s.len() < 200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.push_str(pieces[(x % pieces.len() as u64) as usize]);
        }
        s
    }

    /// A store (chunking on, no compression) where owner `o` archived [`text`]: the store's
    /// directory, the store, the text and the archive's id.
    fn text_archived_by_o() -> (tempfile::TempDir, Store, String, BlobId) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), opts()).unwrap();
        let t = text();
        let id = store.archive("o", &t).unwrap().id;
        (dir, store, t, id)
    }

    fn chars(t: &str, a: usize, b: usize) -> String {
        t.chars().skip(a).take(b - a).collect()
    }

    #[test]
    fn warm_reads_of_a_chunked_archive_are_exact_and_a_deleted_chats_grant_is_not_served_from_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), opts()).unwrap();
        let t = text();
        let n = t.chars().count();
        let c = store.create_chat("bob", ChatMeta::default()).unwrap();
        let chat = store.chat("bob", c).unwrap();
        chat.append(NewMessage::user("run it")).unwrap();
        chat.append(NewMessage {
            role: Role::Assistant,
            parts: vec![Part::ToolCall { id: "c1".into(), name: "run".into(), args: "{}".into() }],
            feedback: false,
        })
        .unwrap();
        chat.append(NewMessage::tool_result("c1", t.clone())).unwrap();
        let id = BlobId::of(t.as_bytes());
        for round in 0..3 {
            for k in 0..40 {
                let a = (k * 4973 + round * 17) % (n - 3000);
                let got = store.read_context("bob", &id, a as u64..a as u64 + 3000, Unit::Chars).unwrap();
                assert_eq!(got, chars(&t, a, a + 3000), "round {round}, chars {a}..");
            }
        }
        let whole = store.read_context("bob", &id, 0..n as u64, Unit::Chars).unwrap();
        assert!(whole == t, "the whole text, across every chunk boundary");
        assert!(matches!(store.read_context("alice", &id, 0..1, Unit::Chars), Err(Error::NotFound { .. })));
        store.delete_chat("bob", c).unwrap();
        let r = store.read_context("bob", &id, 0..10, Unit::Chars);
        assert!(matches!(r, Err(Error::NotFound { .. })), "the grant went with the chat: {r:?}");
    }

    #[test]
    fn whole_characters_are_copied_from_pieces_without_the_slow_way() {
        let (_dir, store, t, id) = text_archived_by_o();
        let n = t.chars().count() as u64;
        store.read_context("o", &id, 0..1, Unit::Chars).unwrap();
        let Some(super::Loaded::Chunked(c)) = store.archive_cache_for_tests().get(&id) else {
            panic!("not chunked")
        };
        // Every piece loaded (the cache then holds the text joined; `c` keeps the pieces).
        store.read_context("o", &id, 0..n, Unit::Chars).unwrap();
        assert!(c.complete());
        let bounds: Vec<usize> = t.char_indices().map(|(i, _)| i).step_by(997).collect();
        for w in bounds.windows(3) {
            let got = c.text_of_pieces(w[0], w[2]).unwrap();
            assert_eq!(got, t[w[0]..w[2]]);
        }
    }

    #[test]
    fn a_chunked_archive_read_to_the_last_chunk_is_held_joined_and_reads_the_same_in_every_unit() {
        let (_dir, store, t, id) = text_archived_by_o();
        let n = t.chars().count();
        let at = super::ArchiveText::new(t.clone());
        let units = [Unit::Chars, Unit::Utf16, Unit::Bytes, Unit::Lines];
        // Reads of the pieces, before the last chunk is loaded: what they give is what the
        // joined text must give.
        let mut want = Vec::new();
        for unit in units {
            let len = at.len(unit);
            for k in 0..25u64 {
                let a = (k * 7919) % (len - 300);
                let b = a + 1 + (k * 131) % 299;
                let mine = at.read(a..b, unit).map(str::to_string).map_err(|e| e.to_string());
                let got = store.read_context("o", &id, a..b, unit).map_err(|e| e.to_string());
                assert_eq!(got, mine, "{unit:?} {a}..{b} from the pieces");
                want.push((unit, a..b, mine));
            }
        }
        assert!(matches!(store.archive_cache_for_tests().get(&id), Some(super::Loaded::Chunked(_))));
        assert_eq!(store.read_context("o", &id, 0..n as u64, Unit::Chars).unwrap(), t);
        let Some(super::Loaded::Whole(w)) = store.archive_cache_for_tests().get(&id) else {
            panic!("a complete chunked archive is not held joined")
        };
        assert_eq!(w.as_str(), t);
        for (unit, r, mine) in &want {
            let got = store.read_context("o", &id, r.clone(), *unit).map_err(|e| e.to_string());
            assert_eq!(&got, mine, "{unit:?} {r:?} from the joined text");
        }
        let r = store.read_context("p", &id, 0..10, Unit::Chars);
        assert!(matches!(r, Err(Error::NotFound { .. })), "another owner, joined: {r:?}");
        let past = store.read_context("o", &id, 0..n as u64 + 1, Unit::Chars);
        assert!(matches!(past, Err(Error::InvalidArgument(_))), "{past:?}");
    }

    #[test]
    fn readers_on_several_threads_get_exact_ranges_while_the_pieces_load_and_are_joined() {
        let (_dir, store, t, id) = text_archived_by_o();
        let at = super::ArchiveText::new(t.clone());
        let n = at.len(Unit::Chars);
        std::thread::scope(|s| {
            for w in 0..4u64 {
                let (store, at) = (&store, &at);
                s.spawn(move || {
                    // Each thread walks the whole text in its own order, so that the last
                    // chunks load, and the pieces are joined, while the others read.
                    for k in 0..400u64 {
                        let a = (k * 7919 + w * 104_729) % (n - 500);
                        let b = a + 1 + (k * 37 + w) % 499;
                        let got = store.read_context("o", &id, a..b, Unit::Chars).unwrap();
                        assert_eq!(got, at.read(a..b, Unit::Chars).unwrap(), "thread {w}, chars {a}..{b}");
                    }
                    let r = store.read_context("p", &id, 0..1, Unit::Chars);
                    assert!(matches!(r, Err(Error::NotFound { .. })), "another owner: {r:?}");
                });
            }
        });
        // The walks between them cover every chunk: joined while they read.
        let joined = store.archive_cache_for_tests().get(&id);
        assert!(matches!(joined, Some(super::Loaded::Whole(_))), "the pieces were not joined");
        assert_eq!(store.read_context("o", &id, 0..n, Unit::Chars).unwrap(), t);
    }

    #[test]
    fn the_chunk_table_finds_the_chunk_a_search_of_the_chunk_ends_finds_at_every_byte() {
        let (_dir, store, t, id) = text_archived_by_o();
        store.read_context("o", &id, 0..1, Unit::Chars).unwrap();
        let Some(super::Loaded::Chunked(c)) = store.archive_cache_for_tests().get(&id) else {
            panic!("not chunked")
        };
        assert!(c.ends.len() > 50, "{} chunks", c.ends.len());
        for at in 0..t.len() as u64 + 600 {
            assert_eq!(c.chunk_at(at), c.ends.partition_point(|&end| end <= at), "byte {at}");
        }
        // Uneven chunks: a table over ends of every size, including empty chunks.
        let ends = [0, 1, 1, 5, 300, 301, 302, 4000, 4001, 9000];
        let table = super::ChunkTable::new(&ends);
        for at in 0..9100 {
            let want = ends.partition_point(|&end| end <= at);
            assert_eq!(table.chunk_at(&ends, at), want, "byte {at} of uneven chunks");
        }
    }

    #[test]
    fn a_damaged_chunk_fails_every_read_that_needs_it_while_its_neighbours_are_cached() {
        let dir = tempfile::tempdir().unwrap();
        let t = text();
        let id = {
            let store = Store::open(dir.path(), opts()).unwrap();
            let id = store.archive("o", &t).unwrap().id;
            store.put_blob("o", b"a later commit").unwrap();
            store.close().unwrap();
            id
        };
        // Damage a byte in the middle of the text as stored (uncompressed).
        let seg = std::fs::read_dir(dir.path().join("log"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "seg"))
            .unwrap();
        let mut bytes = std::fs::read(&seg).unwrap();
        let mid = (0..=t.len() / 2).rev().find(|&i| t.is_char_boundary(i)).unwrap();
        let needle = &t.as_bytes()[mid..mid + 64];
        let at = bytes.windows(64).position(|w| w == needle).unwrap();
        bytes[at + 32] ^= 0x01;
        std::fs::write(&seg, bytes).unwrap();
        let store = Store::open(dir.path(), opts()).unwrap();
        let n = t.chars().count() as u64;
        // Far from the damage: read, and cached.
        assert_eq!(store.read_context("o", &id, 0..100, Unit::Chars).unwrap(), chars(&t, 0, 100));
        assert_eq!(
            store.read_context("o", &id, n - 100..n, Unit::Chars).unwrap(),
            chars(&t, n as usize - 100, n as usize)
        );
        let damaged = t[..mid].chars().count() as u64;
        for _ in 0..2 {
            let r = store.read_context("o", &id, damaged - 50..damaged + 50, Unit::Chars);
            assert!(matches!(r, Err(Error::Corrupt { .. })), "{r:?}");
        }
        assert_eq!(store.read_context("o", &id, 0..100, Unit::Chars).unwrap(), chars(&t, 0, 100));
    }

    #[test]
    fn an_archive_chunk_that_is_not_utf8_is_corrupt_content_not_an_index_error() {
        use crate::disk::record::{self, ArchiveRec, Kind};
        use crate::kernel::store::core::{RecordOut, Txn};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), opts()).unwrap();
        let t = text();
        // The text's bytes with one made invalid: every chunk passes its checksum and hash
        // (the store holds exactly these bytes), but the archive is not UTF-8 text.
        let mut bad = t.clone().into_bytes();
        let mid = t.len() / 2;
        bad[mid] = 0xFF;
        let core = store.core_for_tests();
        let mut txn = Txn::default();
        let (id, _) = txn.blob(core, &bad).unwrap();
        let index = super::OffsetIndex::build(&t);
        let (index_id, _) = txn.blob(core, &index.encode()).unwrap();
        let rec = ArchiveRec {
            owner: "o".into(),
            id: id.0,
            index: index_id.0,
            bytes: index.end.bytes,
            chars: index.end.chars,
            utf16: index.end.utf16,
            lines: index.lines(t.ends_with('\n')),
        };
        txn.push(RecordOut::history(Kind::Archive, record::encode(&rec).unwrap().into_vec()));
        core.append(txn).unwrap();
        assert!(core.manifest_of(&id).unwrap().is_some(), "the archive is chunked");
        let r = store.read_context("o", &id, mid as u64 - 10..mid as u64 + 10, Unit::Bytes);
        let Err(e @ Error::CorruptContent { .. }) = r else {
            panic!("expected corrupt content, found {r:?}")
        };
        let msg = e.to_string();
        assert!(msg.contains(&format!("archive {id}")) && msg.contains("UTF-8"), "{msg}");
        assert!(!msg.contains("--rebuild"), "rebuilding the index does not repair content: {msg}");
    }
}
