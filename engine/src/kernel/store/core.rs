//! [`Core`]: the log, the reader and the index, shared by the store, its chats and their
//! snapshots. It holds no reference back to the store, so snapshots never keep it open.

use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::base::blob::cache::ChunkCache;
use crate::base::blob::chunk::{Base, Manifest, cut_points};
use crate::base::blob::{Blob, BlobId, Compression, Verify, codec_flag_none, compress, decompress};
use crate::base::error::{Error, Result};
use crate::disk::index::{BatchEntries, Index, Listing, PendingRecord};
use crate::disk::log::format::{self, BatchBuf, RecordSpec};
use crate::disk::log::reader::{LogReader, RawRecord};
use crate::disk::log::writer::LogWriter;
use crate::disk::log::{Location, Position};
use crate::disk::record::{self, Kind, MsgRec};
use crate::kernel::options::Options;

/// Largest blob stored as one record (1 GiB minus the id).
pub const MAX_BLOB_LEN: usize = format::MAX_RECORD_LEN - 32;

#[derive(Debug)]
pub(crate) struct Core {
    pub dir: PathBuf,
    pub opts: Options,
    pub log: Arc<LogWriter>,
    pub reader: LogReader,
    pub index: Arc<Index>,
    /// Blob bodies (whole blobs or chunks) read since open; shows that ranged reads of a
    /// chunked blob touch only the chunks they need.
    pub blob_bodies_read: AtomicU64,
    /// The last chunked blobs written per first chunk, bases of the next ones' delta
    /// manifests (see [`Txn::blob`]). Forgotten at close; bounded by [`RECENT_MANIFESTS`]
    /// first chunks of [`RECENT_PER_PREFIX`] blobs each.
    pub recent_manifests: parking_lot::Mutex<HashMap<BlobId, Vec<Recent>>>,
    /// Chunks read (decompressed, checked), kept within `Options::chunk_cache_bytes`.
    pub chunk_cache: ChunkCache,
    /// Read-only (`Store::open_read_only`, or a full disk at open): every append is refused,
    /// saying why.
    pub read_only: Option<super::read_only::ReadOnly>,
    /// Fleet mode: the shared catalog and blob store this store replicates (see
    /// `store/remote.rs`); unset for an embedded store.
    pub remote: std::sync::OnceLock<Arc<dyn super::remote::Remote>>,
    /// Grants found in redb (see [`super::blobs::granted`]).
    pub grants: super::blobs::GrantCache,
    /// Message records a read-only refresh decoded, for the reads that follow (see
    /// `store/listed.rs`); always empty in a store opened for writing.
    pub listed: super::listed::Listed,
}

/// One record of a transaction being built.
#[derive(Debug)]
pub(crate) struct RecordOut {
    pub kind: Kind,
    pub codec: u8,
    pub raw_len: u32,
    /// The stored payload (for a blob: id then stored body).
    pub payload: Vec<u8>,
    /// For a blob record, its id.
    pub blob: Option<BlobId>,
    /// The chat the record belongs to, when its writer said (see [`RecordOut::of_chat`]);
    /// `None` for a record of no chat, and for one copied from elsewhere (a fleet replica's),
    /// whose chat is read from its payload when a grant in its batch needs it.
    pub chat: Option<u64>,
    /// A message record's listing (its key, header and inline texts), when its writer gave
    /// it (see [`RecordOut::message`]); otherwise it is read from the payload.
    pub listing: Option<Listing>,
}

impl RecordOut {
    /// A history (non-blob) record whose chat its maker does not say: one of no chat (a
    /// grant, an archive, a cached summary), or one copied from elsewhere (a fleet
    /// replica's), which is read for its chat and listing when they are needed.
    pub(crate) fn history(kind: Kind, payload: Vec<u8>) -> RecordOut {
        RecordOut {
            kind,
            codec: 0,
            raw_len: payload.len() as u32,
            payload,
            blob: None,
            chat: None,
            listing: None,
        }
    }

    /// A history record of `chat`.
    pub(crate) fn of_chat(kind: Kind, chat: u64, payload: Vec<u8>) -> RecordOut {
        RecordOut { chat: Some(chat), ..RecordOut::history(kind, payload) }
    }

    /// The compact message record of `rec`, with its listing taken from `rec` itself.
    pub(crate) fn message(rec: &MsgRec, compression: Compression) -> Result<RecordOut> {
        let listing = record::message_listing(rec).map_err(|e| {
            let chat = crate::model::message::ChatId(rec.chat);
            Error::InvalidArgument(format!("message {} of {chat}: {e}", rec.seq))
        })?;
        let ((key, head), texts) = listing;
        let payload = record::compact::encode(rec, compression);
        Ok(RecordOut {
            listing: Some(Listing { key, head, texts }),
            ..RecordOut::of_chat(Kind::MessageCompact, rec.chat, payload)
        })
    }
}

/// A transaction: records that become visible (and durable) together.
#[derive(Debug, Default)]
pub(crate) struct Txn {
    pub records: Vec<RecordOut>,
    /// Ids of the blob and manifest records in `records` (a chunked blob adds many: a
    /// lookup per chunk must not scan them all).
    blobs: std::collections::HashSet<BlobId>,
}

impl Txn {
    /// Adds `content` as a blob unless the store (or this transaction) has it: one blob
    /// record, or above the chunking threshold its new chunks and a manifest. Returns the
    /// id, and the end position of an existing copy (of the blob or of a chunk it reuses),
    /// if any, to wait for.
    pub(crate) fn blob(&mut self, core: &Core, content: &[u8]) -> Result<(BlobId, Option<Position>)> {
        if content.len() > MAX_BLOB_LEN {
            return Err(Error::InvalidArgument(format!(
                "blob of {} bytes: at most {MAX_BLOB_LEN} bytes fit one record",
                content.len()
            )));
        }
        let id = BlobId::of(content);
        if let Some(found) = self.existing(core, &id)? {
            return Ok((id, found));
        }
        if content.len() <= core.opts.chunk_threshold {
            self.push_blob(core, id, content);
            return Ok((id, None));
        }
        let mut wait = None;
        let cuts = cut_points(content, core.opts.chunk_avg);
        let ids: Vec<BlobId> = cuts.iter().map(|r| BlobId::of(&content[r.clone()])).collect();
        // Every chunk looked up in one index read; the first pieces of the new ones in another.
        let stored = self.existing_all(core, &ids)?;
        let piece = (core.opts.chunk_avg / 8).max(1) as usize;
        let firsts: Vec<BlobId> = cuts
            .iter()
            .zip(&stored)
            .map(|(r, s)| match s {
                None if r.len() > piece => BlobId::of(&content[r.start..r.start + piece]),
                _ => BlobId([0; 32]),
            })
            .collect();
        let first_stored = match cuts.iter().zip(&stored).any(|(r, s)| s.is_none() && r.len() > piece) {
            true => self.existing_all(core, &firsts)?,
            false => vec![None; cuts.len()],
        };
        let mut chunks = Vec::with_capacity(cuts.len());
        for (k, r) in cuts.into_iter().enumerate() {
            let (part, cid) = (&content[r.clone()], ids[k]);
            // A chunk seen earlier in this blob is in the transaction by now.
            let found = if self.has_blob(&cid) { Some(None) } else { stored[k] };
            match found {
                Some(w) => wait = wait.max(w),
                None => {
                    let first = if self.has_blob(&firsts[k]) { Some(None) } else { first_stored[k] };
                    wait = wait.max(self.new_chunk(core, cid, part, first)?);
                }
            }
            chunks.push((cid, r.end as u64));
        }
        let manifest = self.manifest_for(core, id, chunks, &mut wait)?;
        self.push_manifest(manifest);
        Ok((id, wait))
    }

    /// The manifest of a new chunked blob. Among the last chunked blobs written that began
    /// with the same chunk (up to [`RECENT_PER_PREFIX`]: threads of a harness often share a
    /// system prompt), the one sharing the longest prefix of chunks becomes the base of a
    /// delta manifest when it shares at least half of this one's chunks, is stored, and ends
    /// a delta chain shorter than [`MAX_DELTA_CHAIN`] (a growing value costs the few entries
    /// that changed per version, not 36 bytes per chunk of the whole value); else a full one.
    fn manifest_for(
        &mut self,
        core: &Core,
        id: BlobId,
        chunks: Vec<(BlobId, u64)>,
        wait: &mut Option<Position>,
    ) -> Result<Manifest> {
        let Some(&(first, _)) = chunks.first() else { return Ok(Manifest::full(id, chunks)) };
        let candidates = core.recent_manifests.lock().get(&first).cloned().unwrap_or_default();
        let best = candidates
            .iter()
            .filter(|r| r.depth < MAX_DELTA_CHAIN)
            .map(|r| (r.chunks.iter().zip(&chunks).take_while(|(a, b)| a == b).count(), r))
            .filter(|&(keep, _)| keep < chunks.len() && keep * 2 >= chunks.len())
            .max_by_key(|&(keep, _)| keep);
        let mut delta = None;
        if let Some((keep, r)) = best
            && let Some(w) = self.existing(core, &r.id)?
        {
            *wait = (*wait).max(w);
            let base = Base { id: r.id, keep: keep as u32, len: chunks[keep - 1].1 };
            delta = Some((Manifest { id, base: Some(base), chunks: chunks[keep..].to_vec() }, r.depth + 1));
        }
        let chunks = Arc::new(chunks);
        let (manifest, depth) = delta.unwrap_or_else(|| (Manifest::full(id, chunks.to_vec()), 0));
        let mut map = core.recent_manifests.lock();
        if map.len() >= RECENT_MANIFESTS {
            map.clear();
        }
        let list = map.entry(first).or_default();
        if list.len() >= RECENT_PER_PREFIX {
            list.remove(0);
        }
        list.push(Recent { id, chunks, depth });
        Ok(manifest)
    }

    /// Stores a chunk the store does not hold. A chunk whose leading pieces are stored
    /// already is stored as a manifest of its pieces, reusing them: while a value grows at
    /// its end, its unfinished last chunk is stored as pieces of `chunk_avg / 8`
    /// ([`cut_points`]), so when a content-defined cut finally closes that chunk, its bytes
    /// are in the store and only the manifest and the last piece are new. Any other chunk is
    /// stored whole. `first` is what [`Txn::existing`] says of its first piece (looked up by
    /// the caller with the other chunks'). Returns the end of an existing piece to wait for,
    /// if any.
    fn new_chunk(
        &mut self,
        core: &Core,
        cid: BlobId,
        part: &[u8],
        first: Option<Option<Position>>,
    ) -> Result<Option<Position>> {
        let piece = (core.opts.chunk_avg / 8).max(1) as usize;
        if part.len() <= piece {
            self.push_blob(core, cid, part);
            return Ok(None);
        }
        let Some(mut wait) = first else {
            self.push_blob(core, cid, part);
            return Ok(None);
        };
        let ranges: Vec<Range<usize>> =
            (0..part.len()).step_by(piece).map(|s| s..(s + piece).min(part.len())).collect();
        let ids: Vec<BlobId> = ranges.iter().map(|r| BlobId::of(&part[r.clone()])).collect();
        let stored = self.existing_all(core, &ids[1..])?;
        let mut pieces = vec![(ids[0], piece as u64)];
        for (k, r) in ranges.into_iter().enumerate().skip(1) {
            let pid = ids[k];
            let found = if self.has_blob(&pid) { Some(None) } else { stored[k - 1] };
            match found {
                Some(w) => wait = wait.max(w),
                None => self.push_blob(core, pid, &part[r.clone()]),
            }
            pieces.push((pid, r.end as u64));
        }
        self.push_manifest(Manifest::full(cid, pieces));
        Ok(wait)
    }

    fn push_manifest(&mut self, m: Manifest) {
        let id = m.id;
        let payload = m.encode();
        self.blobs.insert(id);
        self.records.push(RecordOut {
            kind: Kind::Manifest,
            codec: codec_flag_none(),
            raw_len: payload.len() as u32,
            payload,
            blob: Some(id),
            chat: None,
            listing: None,
        });
    }

    /// `Some(wait)` when blob `id` is in this transaction (nothing to wait for) or in the
    /// store (wait for the end of its record).
    pub(crate) fn existing(&self, core: &Core, id: &BlobId) -> Result<Option<Option<Position>>> {
        if self.has_blob(id) {
            return Ok(Some(None));
        }
        Ok(core.index.blob(id)?.map(|loc| Some(record_end(loc))))
    }

    /// [`Txn::existing`] of each of `ids`, those not in this transaction looked up in one
    /// index read.
    fn existing_all(&self, core: &Core, ids: &[BlobId]) -> Result<Vec<Option<Option<Position>>>> {
        let out: Vec<_> = ids.iter().map(|id| self.has_blob(id).then_some(None)).collect();
        let missing: Vec<BlobId> = ids.iter().filter(|id| !self.has_blob(id)).copied().collect();
        if missing.is_empty() {
            return Ok(out);
        }
        let mut found = core.index.blobs(&missing)?.into_iter();
        Ok(out
            .into_iter()
            .map(|o| match o {
                Some(x) => Some(x),
                None => found.next().flatten().map(|loc| Some(record_end(loc))),
            })
            .collect())
    }

    /// True when this transaction already holds blob `id`.
    pub(crate) fn has_blob(&self, id: &BlobId) -> bool {
        self.blobs.contains(id)
    }

    fn push_blob(&mut self, core: &Core, id: BlobId, content: &[u8]) {
        let (codec, stored) = compress(core.opts.compression, content);
        let body = stored.as_deref().unwrap_or(content);
        let mut payload = Vec::with_capacity(32 + body.len());
        payload.extend_from_slice(id.as_bytes());
        payload.extend_from_slice(body);
        self.blobs.insert(id);
        self.records.push(RecordOut {
            kind: Kind::Blob,
            codec,
            raw_len: content.len() as u32,
            payload,
            blob: Some(id),
            chat: None,
            listing: None,
        });
    }

    /// Adds a history record; returns its index in the transaction.
    pub(crate) fn push(&mut self, r: RecordOut) -> usize {
        if let Some(id) = r.blob {
            self.blobs.insert(id);
        }
        self.records.push(r);
        self.records.len() - 1
    }
}

/// Where a committed transaction landed.
#[derive(Debug)]
pub(crate) struct Committed {
    /// Location of each record, in transaction order.
    pub locations: Vec<Location>,
    /// End of the batch: durable once the log is synced this far.
    pub end: Position,
}

/// The error for a blob not stored, or one the asking owner may not read (the same answer
/// for both, so an owner cannot probe another's content).
pub(crate) fn not_found(id: &BlobId) -> Error {
    Error::NotFound { what: format!("blob {id}") }
}

/// The end of a record: durable once the log is synced at least this far.
pub(crate) fn record_end(loc: Location) -> Position {
    Position::new(loc.segment, loc.offset + (format::RECORD_HEADER_LEN as u64) + loc.len as u64)
}

impl Core {
    /// Writes a transaction as one batch and notes it in the memtable (under the log
    /// writer's lock, so it becomes visible whole). Does not wait for durability.
    /// `on_written` runs under the log lock too, after the memtable is updated.
    pub(crate) fn append(&self, txn: Txn) -> Result<Committed> {
        if let Some(why) = self.read_only {
            return Err(why.refusal());
        }
        match self.remote.get() {
            Some(remote) if !txn.records.is_empty() => remote.commit(self, txn),
            _ => self.append_local(txn),
        }
    }

    /// The fleet remote, if this store replicates one.
    pub(crate) fn remote(&self) -> Option<&Arc<dyn super::remote::Remote>> {
        self.remote.get()
    }

    /// Appends a transaction to the local log only (an embedded store's commit; a fleet
    /// store's replica of what the remote committed).
    pub(crate) fn append_local(&self, mut txn: Txn) -> Result<Committed> {
        if let Some(why) = self.read_only {
            return Err(why.refusal());
        }
        if txn.records.is_empty() {
            return Ok(Committed { locations: Vec::new(), end: self.log.written() });
        }
        let mut batch = BatchBuf::new();
        let mut rels = Vec::with_capacity(txn.records.len());
        for r in &txn.records {
            let spec =
                RecordSpec { kind: r.kind.byte(), codec: r.codec, raw_len: r.raw_len, parts: &[&r.payload] };
            rels.push(batch.push(spec).map_err(Error::InvalidArgument)?);
        }
        let frame = batch.finish();
        let bytes = frame.len() as u64;
        // A grant is bound to the chats whose records share its batch (as `entries_of` finds
        // them when the log is replayed).
        // Their writer said which (a record copied from elsewhere is read for it).
        let chats = if txn.records.iter().any(|r| crate::disk::index::is_grant(r.kind)) {
            let mut chats: Vec<u64> = txn
                .records
                .iter()
                .filter_map(|r| {
                    r.chat.or_else(|| crate::disk::index::chat_of(r.kind, &r.payload).ok().flatten())
                })
                .collect();
            chats.sort_unstable();
            chats.dedup();
            chats
        } else {
            Vec::new()
        };
        // A message's inline texts are listed (hashed) by its writer, or here, outside the
        // log's lock: the memtable finds a pending text by them, and the flush writes the
        // same list.
        let texts: Vec<_> = txn
            .records
            .iter_mut()
            .map(|r| r.listing.take().or_else(|| crate::disk::index::texts_of(r.kind, &r.payload)))
            .collect();
        let mut locations = Vec::new();
        let end = self.log.append(frame, |start, end, next_txid| {
            let mut entries = BatchEntries::default();
            for ((r, rel), texts) in txn.records.into_iter().zip(&rels).zip(texts) {
                let loc = Location {
                    segment: start.segment,
                    offset: start.offset + rel,
                    len: r.payload.len() as u32,
                };
                locations.push(loc);
                match r.blob {
                    Some(id) => entries.blobs.push((id, loc)),
                    None => {
                        let chats =
                            if crate::disk::index::is_grant(r.kind) { chats.clone() } else { Vec::new() };
                        entries.records.push(PendingRecord {
                            kind: r.kind,
                            loc,
                            payload: r.payload,
                            chats,
                            texts,
                        })
                    }
                }
            }
            self.index.mem.write().note_batch(entries, start, end, next_txid, bytes);
        })?;
        // Back-pressure: writers faster than the indexer help it rather than let the
        // memtable grow without bound.
        // The batch is in the log and the memtable by now: the call has succeeded whatever
        // this flush does, so a failure here is reported and left to the next flush (or to
        // the replay at reopen) — returning it would tell the caller a written batch failed.
        if self.index.mem.read().pending_bytes() > self.opts.index_backlog_bytes
            && let Err(e) = self.index.flush(false, |p| self.log.sync_to(p))
        {
            tracing::warn!(error = %e, "index flush under back-pressure failed; the log holds the batch");
        }
        Ok(Committed { locations, end })
    }

    /// Waits until `end` is durable (per the durability setting).
    pub(crate) fn wait_durable(&self, end: Position) -> Result<()> {
        self.log.wait_durable(end)
    }

    /// Makes sure redb holds every record written before `pos` (flushing the memtable now
    /// if the background indexer has not yet).
    pub(crate) fn ensure_flushed(&self, pos: Position) -> Result<()> {
        if self.index.flushed() >= pos {
            return Ok(());
        }
        self.index.flush(false, |p| self.log.sync_to(p))?;
        Ok(())
    }

    /// Where blob `id` (a blob or manifest record) is in the local log. A fleet store copies
    /// a blob it does not hold yet from the remote first (verified against its id).
    pub(crate) fn blob_loc(&self, id: &BlobId) -> Result<Option<Location>> {
        match self.index.blob(id)? {
            Some(loc) => Ok(Some(loc)),
            None => self.fetched_loc(id),
        }
    }

    /// Where blob `id`, which this index does not hold, is once fetched from the fleet's
    /// remote store (none without one, or when the remote does not have it either).
    fn fetched_loc(&self, id: &BlobId) -> Result<Option<Location>> {
        match self.remote.get() {
            Some(remote) if remote.fetch_blob(self, id)? => self.index.blob(id),
            _ => Ok(None),
        }
    }

    /// Reads a record.
    pub(crate) fn read(&self, loc: Location, verify: Verify) -> Result<RawRecord> {
        self.reader.read(&self.log, loc, verify)
    }

    /// Reads and verifies a blob, reassembling a chunked one.
    pub(crate) fn get_blob(&self, id: &BlobId, verify: Verify) -> Result<Blob> {
        self.get_blob_at_depth(id, verify, 0)
    }

    fn get_blob_at_depth(&self, id: &BlobId, verify: Verify, depth: u8) -> Result<Blob> {
        if depth > 0
            && let Some(b) = self.chunk_cache.get(id, verify)
        {
            return Ok(b);
        }
        let b = self.read_blob_at_depth(id, verify, depth)?;
        if depth > 0 {
            self.chunk_cache.insert(*id, b.clone(), verify);
        }
        Ok(b)
    }

    /// Reads and verifies blobs `ids` (as [`get_blob`](Self::get_blob) each), their
    /// locations looked up together: the memtable, then one index read transaction.
    pub(crate) fn get_blobs(&self, ids: &[BlobId], verify: Verify) -> Result<Vec<Blob>> {
        let mut locs = self.index.blobs(ids)?;
        // Fleet: the blobs this replica lacks copied in one request, not one each.
        if let Some(remote) = self.remote.get() {
            let missing: Vec<BlobId> =
                ids.iter().zip(&locs).filter(|(_, l)| l.is_none()).map(|(id, _)| *id).collect();
            if missing.len() > 1 && remote.fetch_blobs(self, &missing)? > 0 {
                locs = self.index.blobs(ids)?;
            }
        }
        ids.iter()
            .zip(locs)
            .map(|(id, loc)| {
                // Not in this index: fetched (fleet) or NotFound, without asking the index again.
                let loc = match loc {
                    Some(loc) => loc,
                    None => self.fetched_loc(id)?.ok_or_else(|| not_found(id))?,
                };
                let stored = self.stored_at(loc, id, verify, 0)?;
                self.blob_from(id, verify, 0, stored)
            })
            .collect()
    }

    fn read_blob_at_depth(&self, id: &BlobId, verify: Verify, depth: u8) -> Result<Blob> {
        let stored = self.blob_record(id, verify, depth)?;
        self.blob_from(id, verify, depth, stored)
    }

    /// The bytes of blob `id` from its record's content: a whole blob as it is, a chunked one
    /// reassembled from its chunks.
    fn blob_from(&self, id: &BlobId, verify: Verify, depth: u8, stored: Stored) -> Result<Blob> {
        match stored {
            Stored::Whole(b) => Ok(b),
            Stored::Chunked(m) => {
                // Chunks are checked by checksum; the whole is then hashed once against
                // the id, which proves every chunk too.
                let each = if verify == Verify::Hash { Verify::Checksum } else { verify };
                let mut out = Vec::with_capacity(m.len() as usize);
                let mut read = Vec::with_capacity(m.chunks.len());
                for (cid, _) in &m.chunks {
                    let b = self.get_blob_at_depth(cid, each, depth + 1)?;
                    out.extend_from_slice(&b);
                    read.push((*cid, b));
                }
                let data = Blob::owned(out);
                if verify == Verify::Hash {
                    if BlobId::of(&data) != *id {
                        return Err(Error::corrupt_content(
                            format!("chunked blob {id}"),
                            format!("its chunks reassemble to content {}", BlobId::of(&data)),
                        ));
                    }
                    // The whole matches its id: every chunk in it is proven as if hashed.
                    for (cid, b) in read {
                        self.chunk_cache.insert(cid, b, Verify::Hash);
                    }
                }
                Ok(data)
            }
        }
    }

    /// Bytes `range` of blob `id`. A chunked blob reads only the chunks the range
    /// overlaps, each verified as `verify` asks.
    pub(crate) fn get_blob_range(&self, id: &BlobId, range: Range<u64>, verify: Verify) -> Result<Vec<u8>> {
        self.blob_range_at_depth(id, range, verify, 0)
    }

    fn blob_range_at_depth(
        &self,
        id: &BlobId,
        range: Range<u64>,
        verify: Verify,
        depth: u8,
    ) -> Result<Vec<u8>> {
        let out_of_bounds = |len: u64| {
            Error::InvalidArgument(format!(
                "byte range {}..{} of blob {id}: expected start <= end <= {len}",
                range.start, range.end
            ))
        };
        let cached = if depth > 0 { self.chunk_cache.get(id, verify) } else { None };
        let stored = match cached {
            Some(b) => Stored::Whole(b),
            None => {
                let stored = self.blob_record(id, verify, depth)?;
                if let (Stored::Whole(b), true) = (&stored, depth > 0) {
                    self.chunk_cache.insert(*id, b.clone(), verify);
                }
                stored
            }
        };
        match stored {
            Stored::Whole(b) => {
                let len = b.len() as u64;
                if range.start > range.end || range.end > len {
                    return Err(out_of_bounds(len));
                }
                Ok(b[range.start as usize..range.end as usize].to_vec())
            }
            Stored::Chunked(m) => {
                if range.start > range.end || range.end > m.len() {
                    return Err(out_of_bounds(m.len()));
                }
                let (which, mut at) = m.overlapping(&range);
                let mut out = Vec::with_capacity((range.end - range.start) as usize);
                for (cid, end) in &m.chunks[which] {
                    let lo = range.start.max(at) - at;
                    let hi = range.end.min(*end) - at;
                    out.extend(self.blob_range_at_depth(cid, lo..hi, verify, depth + 1)?);
                    at = *end;
                }
                Ok(out)
            }
        }
    }

    /// Length of blob `id` in bytes, without reading a chunked blob's chunks.
    pub(crate) fn blob_len(&self, id: &BlobId) -> Result<u64> {
        let loc = self.blob_loc(id)?.ok_or_else(|| not_found(id))?;
        let rec = self.read(loc, Verify::Checksum)?;
        if rec.kind == Kind::Manifest {
            let m = Manifest::decode(&rec.payload).map_err(|e| Error::corrupt(loc.segment, loc.offset, e))?;
            return Ok(m.len());
        }
        Ok(u64::from(rec.raw_len))
    }

    /// The resolved manifest of blob `id` when it is stored chunked; `None` when it is one
    /// record (whose body is not read).
    pub(crate) fn manifest_of(&self, id: &BlobId) -> Result<Option<Manifest>> {
        let loc = self.blob_loc(id)?.ok_or_else(|| not_found(id))?;
        let rec = self.read(loc, Verify::Checksum)?;
        if rec.kind != Kind::Manifest {
            return Ok(None);
        }
        match self.record_at(loc, rec, id, Verify::Checksum, 0)? {
            Stored::Chunked(m) => Ok(Some(m)),
            Stored::Whole(_) => Ok(None),
        }
    }

    /// The chunks `ids` (of a chunked blob's manifest), each verified as `verify` asks and
    /// kept in the chunk cache. Those not cached are looked up in one index read.
    pub(crate) fn chunks(&self, ids: &[BlobId], verify: Verify) -> Result<Vec<Blob>> {
        let mut out: Vec<Option<Blob>> = ids.iter().map(|id| self.chunk_cache.get(id, verify)).collect();
        let missing: Vec<BlobId> =
            ids.iter().zip(&out).filter(|(_, b)| b.is_none()).map(|(id, _)| *id).collect();
        if !missing.is_empty() {
            let locs = self.index.blobs(&missing)?;
            let mut found = missing.iter().zip(locs);
            for slot in out.iter_mut().filter(|b| b.is_none()) {
                let Some((id, loc)) = found.next() else { break };
                let loc = match loc {
                    Some(loc) => loc,
                    // Fleet mode: fetched from the remote (the index said it has none).
                    None => self.fetched_loc(id)?.ok_or_else(|| not_found(id))?,
                };
                let rec = self.read(loc, verify)?;
                let b = match self.record_at(loc, rec, id, verify, 1)? {
                    Stored::Whole(b) => b,
                    // A chunk stored as pieces: reassembled (and checked) as a whole.
                    Stored::Chunked(_) => self.read_blob_at_depth(id, verify, 1)?,
                };
                self.chunk_cache.insert(*id, b.clone(), verify);
                *slot = Some(b);
            }
        }
        out.into_iter().zip(ids).map(|(b, id)| b.ok_or_else(|| not_found(id))).collect()
    }

    /// The record of blob `id`: its verified bytes, or its manifest.
    fn blob_record(&self, id: &BlobId, verify: Verify, depth: u8) -> Result<Stored> {
        let loc = self.blob_loc(id)?.ok_or_else(|| not_found(id))?;
        self.stored_at(loc, id, verify, depth)
    }

    /// What the record at `loc` (blob `id`'s, as the index says) holds.
    fn stored_at(&self, loc: Location, id: &BlobId, verify: Verify, depth: u8) -> Result<Stored> {
        let rec = self.read(loc, verify)?;
        self.record_at(loc, rec, id, verify, depth)
    }

    /// What record `rec` (read at `loc` for blob `id`) holds: its verified bytes, or its
    /// manifest.
    fn record_at(
        &self,
        loc: Location,
        rec: RawRecord,
        id: &BlobId,
        verify: Verify,
        depth: u8,
    ) -> Result<Stored> {
        let corrupt = |why: String| Error::corrupt(loc.segment, loc.offset, why);
        if (rec.kind != Kind::Blob && rec.kind != Kind::Manifest) || rec.payload.len() < 32 {
            return Err(corrupt(format!(
                "expected a blob or manifest record, found kind {} of {} bytes",
                rec.kind,
                rec.payload.len()
            )));
        }
        if verify != Verify::None && rec.payload[..32] != id.0 {
            let mut found = [0u8; 32];
            found.copy_from_slice(&rec.payload[..32]);
            return Err(corrupt(format!("record holds blob {}, index says {id}", BlobId(found))));
        }
        if rec.kind == Kind::Manifest {
            if depth >= MAX_MANIFEST_DEPTH {
                return Err(corrupt(format!("manifest of blob {id} nests deeper than {MAX_MANIFEST_DEPTH}")));
            }
            let m = Manifest::decode(&rec.payload).map_err(corrupt)?;
            return self.resolve(m, 0).map(Stored::Chunked).map_err(|e| match e {
                Error::InvalidArgument(why) => corrupt(why),
                e => e,
            });
        }
        self.blob_bodies_read.fetch_add(1, Ordering::Relaxed);
        let body = rec.payload.skip(32);
        let data = if rec.codec == codec_flag_none() {
            body
        } else {
            Blob::owned(decompress(rec.codec, &body, rec.raw_len as usize).map_err(corrupt)?)
        };
        if verify == Verify::Hash && BlobId::of(&data) != *id {
            return Err(corrupt(format!("content hash: expected {id}, found {}", BlobId::of(&data))));
        }
        Ok(Stored::Whole(data))
    }
}

impl Core {
    /// A delta manifest with its base's chunks filled in (following the chain of bases);
    /// a full manifest as it is. A base that is missing or not a manifest, or a chain longer
    /// than [`MAX_DELTA_HOPS`], is damage (reported as `InvalidArgument(why)` to the caller,
    /// which names the record).
    fn resolve(&self, m: Manifest, hops: usize) -> Result<Manifest> {
        let Some(base) = m.base else { return Ok(m) };
        if hops >= MAX_DELTA_HOPS {
            return Err(Error::InvalidArgument(format!(
                "delta manifest of {} follows more than {MAX_DELTA_HOPS} bases",
                m.id
            )));
        }
        let Some(loc) = self.blob_loc(&base.id)? else {
            return Err(Error::InvalidArgument(format!(
                "delta manifest of {}: its base {} is not stored",
                m.id, base.id
            )));
        };
        let rec = self.read(loc, Verify::Checksum)?;
        if rec.kind != Kind::Manifest {
            return Err(Error::InvalidArgument(format!(
                "delta manifest of {}: its base {} is kind {}, expected a manifest",
                m.id, base.id, rec.kind
            )));
        }
        let b = Manifest::decode(&rec.payload).map_err(|e| Error::corrupt(loc.segment, loc.offset, e))?;
        let b = self.resolve(b, hops + 1)?;
        m.resolved(&b.chunks).map_err(Error::InvalidArgument)
    }
}

/// What the store remembers of a recently written chunked blob.
#[derive(Debug, Clone)]
pub(crate) struct Recent {
    id: BlobId,
    chunks: Arc<Vec<(BlobId, u64)>>,
    /// Delta manifests between it and a full manifest.
    depth: u8,
}

/// First chunks whose recent blobs are remembered as delta bases (the map is cleared when
/// full).
const RECENT_MANIFESTS: usize = 4096;

/// Recent blobs remembered per first chunk (the oldest goes first).
const RECENT_PER_PREFIX: usize = 8;

/// Delta manifests written in a row before a full one: a read follows at most this many
/// bases, and a version costs on average `1 / MAX_DELTA_CHAIN` of a full manifest.
const MAX_DELTA_CHAIN: u8 = 16;

/// Bases a read follows before it calls the chain damaged (a store written with another
/// `MAX_DELTA_CHAIN` still reads).
const MAX_DELTA_HOPS: usize = 256;

/// A chunk of a chunked blob is itself a manifest when it was stored as pieces (see
/// `Txn::new_chunk`), or when the chunking options changed between writes; nesting deeper
/// than this means a damaged manifest.
const MAX_MANIFEST_DEPTH: u8 = 4;

/// What a blob's record holds.
enum Stored {
    Whole(Blob),
    Chunked(Manifest),
}
