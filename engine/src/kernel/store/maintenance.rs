//! Durability on demand, index rebuild, integrity check and statistics.

use std::ops::Deref;
use std::sync::Arc;

use super::core::Core;
use crate::base::blob::chunk::Manifest;
use crate::base::blob::{BlobId, codec_flag_none, decompress};
use crate::base::error::{Error, Result};
use crate::disk::index::{self, Applied};
use crate::disk::log::format::{self, RecordRef};
use crate::disk::log::scan::{ScanEnd, verify_segment, walk_batches};
use crate::disk::log::{Position, list_segments, log_dir, segment_path};
use crate::disk::record::Kind;

/// One damaged frame found by [`Store::check`](crate::Store::check).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckProblem {
    /// Segment number.
    pub segment: u64,
    /// Offset of the damaged frame (segment header, batch or record).
    pub offset: u64,
    /// What failed.
    pub reason: String,
}

/// The result of [`Store::check`](crate::Store::check).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Segments read.
    pub segments: u64,
    /// Valid batches.
    pub batches: u64,
    /// Valid records.
    pub records: u64,
    /// Blob records whose content matched their id.
    pub blobs: u64,
    /// Every problem, in log order.
    pub problems: Vec<CheckProblem>,
    /// Every difference between the index and the log (compared only when the log has no
    /// problem): the index is derived, and [`Store::rebuild_index`](crate::Store::rebuild_index) repairs these.
    pub index_problems: Vec<String>,
}

impl CheckReport {
    /// True when nothing is damaged, in the log or in the index.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty() && self.index_problems.is_empty()
    }
}

/// Sizes and counters of an open store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreStats {
    /// Segment files in the log.
    pub segments: u64,
    /// Bytes of data in the log (sealed segments, and the active one up to its last batch).
    pub log_bytes: u64,
    /// Bytes of the segment files on disk, including the active segment's preallocated tail.
    pub log_file_bytes: u64,
    /// Bytes of the index file.
    pub index_bytes: u64,
    /// `fdatasync` calls on the log since open.
    pub log_syncs: u64,
    /// Blobs committed to the index (entries still in the memtable are not counted).
    pub indexed_blobs: u64,
    /// Chats held in memory.
    pub chats_in_memory: u64,
    /// Blob bodies (whole blobs or chunks of chunked ones) read since open.
    pub blob_bodies_read: u64,
    /// How the index file was trusted at open: verified page by page, or sealed by the last
    /// clean close (engine/FORMAT.md, "The index's seal").
    pub index_at_open: crate::IndexAtOpen,
}

/// A segment's bytes: the shared map of a sealed one, or a copy of the active one.
pub(super) enum SegBytes {
    Mapped(Arc<memmap2::Mmap>),
    Owned(Vec<u8>),
}

impl Deref for SegBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            SegBytes::Mapped(m) => m,
            SegBytes::Owned(v) => v,
        }
    }
}

/// Makes every acknowledged write durable, log and index, whatever the durability mode.
pub(crate) fn sync(core: &Core) -> Result<()> {
    if core.read_only.is_some() {
        // Nothing was written through it.
        return Ok(());
    }
    core.log.sync_all()?;
    core.index.flush(true, |p| core.log.sync_to(p))?;
    Ok(())
}

/// Rebuilds the index from the log alone, into a fresh file that replaces the current
/// one (which is not read: a damaged index is no obstacle). Appends wait while it runs;
/// reads go on.
pub(crate) fn rebuild_index(core: &Core) -> Result<()> {
    if let Some(why) = core.read_only {
        return Err(why.refusal());
    }
    let _flushes = core.index.pause_flushes();
    core.log.with_appends_paused(|written| {
        let (entries, applied) = log_entries(core, written)?;
        core.index.rebuild_from(&entries, applied)?;
        let mut mem = core.index.mem.write();
        mem.clear();
        mem.set_applied(applied);
        Ok(())
    })
}

/// The work of `Store::rebuild_index_at` (documented there).
pub(crate) fn rebuild_index_at(dir: &std::path::Path, opts: crate::Options) -> Result<()> {
    if !dir.join("log").is_dir() {
        return Err(Error::NotFound { what: format!("store at {}", dir.display()) });
    }
    {
        let _lock = super::lock::acquire(dir)?;
        let p = dir.join(index::INDEX_FILE);
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove", &p, e)),
        }
        crate::disk::log::sync_dir(dir)?;
    }
    // With no index file, open replays the whole log into a new one.
    let opened = super::Kernel::open(dir, crate::Options { create_if_missing: false, ..opts })?;
    let (kernel, _) = super::read_only::writable(opened)?;
    sync(&kernel.core)
}

/// The index entries of every batch of the log up to `written`, and the position they
/// reach.
fn log_entries(core: &Core, written: Position) -> Result<(Vec<index::BatchEntries>, Applied)> {
    let mut entries = Vec::new();
    let mut next_txid = 0u64;
    let mut last_batch = 0u64;
    for n in list_segments(&log_dir(&core.dir))? {
        if n > written.segment {
            break;
        }
        let bytes = segment_bytes(core, n, written)?;
        format::decode_segment_header(&bytes, n)
            .map_err(|e| Error::corrupt(n, 0, format!("segment header: {e}")))?;
        let (_, how) = walk_batches(&bytes, format::SEGMENT_HEADER_LEN, |b| {
            next_txid = next_txid.max(b.txid + 1);
            if n == written.segment {
                last_batch = b.offset;
            }
            entries.push(index::entries_of(n, b)?);
            Ok::<(), Error>(())
        })?;
        if let ScanEnd::Damaged { offset, reason, .. } = how {
            return Err(Error::corrupt(n, offset, reason));
        }
    }
    Ok((entries, Applied { position: written, next_txid, batch_start: last_batch }))
}

/// The work of `Store::check` (documented there).
pub(crate) fn check(core: &Core) -> Result<CheckReport> {
    let written = core.log.written();
    let mut report = CheckReport::default();
    let mut chain = crate::disk::log::continuity::CheckChain::default();
    let gap = |(segment, offset, reason)| CheckProblem { segment, offset, reason };
    for n in list_segments(&log_dir(&core.dir))? {
        if n > written.segment {
            break;
        }
        report.problems.extend(chain.before(n).into_iter().map(gap));
        let bytes = segment_bytes(core, n, written)?;
        report.segments += 1;
        let mut blobs = 0u64;
        let seg = verify_segment(&bytes, n, |r| {
            let why = check_record(core, r)?;
            if why.is_none() && (r.kind == Kind::Blob || r.kind == Kind::Manifest) {
                blobs += 1;
            }
            why
        });
        let chained = chain.after(n, n < written.segment, &seg);
        report.batches += seg.batches;
        report.records += seg.records;
        report.blobs += blobs;
        report.problems.extend(seg.problems.into_iter().map(|p| CheckProblem {
            segment: n,
            offset: p.offset,
            reason: p.reason,
        }));
        report.problems.extend(chained.into_iter().map(gap));
    }
    report.problems.extend(chain.before(written.segment + 1).into_iter().map(gap));
    report.problems.sort_by_key(|p| (p.segment, p.offset));
    // A read-only store's index was built from this log moments ago, in memory: there is
    // no index file to compare (and the scratch file would be a write).
    if report.problems.is_empty() && core.read_only.is_none() {
        report.index_problems = check_index(core)?;
    }
    Ok(report)
}

/// The differences between the index and one built from the log anew.
fn check_index(core: &Core) -> Result<Vec<String>> {
    core.log.with_appends_paused(|written| {
        // Everything written is in redb before the comparison (no append can add more).
        match core.index.flush(false, |_| Ok(())) {
            Ok(_) => {}
            // A full disk (or another failing I/O call) is not a difference from the log.
            Err(e @ Error::Io { .. }) => return Err(e),
            Err(e) => return Ok(vec![format!("the index does not take new entries: {e}")]),
        }
        let _flushes = core.index.pause_flushes();
        let (entries, applied) = log_entries(core, written)?;
        let body =
            |b: &[u8; 32]| core.get_blob(&crate::base::blob::BlobId(*b), crate::base::blob::Verify::Hash);
        match core.index.diff_with_log(&entries, applied, &body) {
            Ok(d) => Ok(d),
            Err(e @ Error::Index { .. }) => Ok(vec![format!("the index cannot be read: {e}")]),
            Err(e) => Err(e),
        }
    })
}

/// Extra checks of one valid record; `Some(reason)` when it is wrong.
fn check_record(core: &Core, r: &RecordRef<'_>) -> Option<Option<String>> {
    if r.kind == Kind::AppendKey {
        return Some(crate::disk::record::append_key::AppendKeyRec::decode(r.payload).err());
    }
    if r.kind >= Kind::FIRST_OPTIONAL {
        return Some(None);
    }
    if r.kind == Kind::Manifest {
        return Some(check_manifest(core, r.payload));
    }
    if r.kind != Kind::Blob {
        return Some(crate::disk::record::check(r.kind, r.payload).err());
    }
    if r.payload.len() < 32 {
        return Some(Some(format!("blob record of {} bytes is shorter than its id", r.payload.len())));
    }
    let mut idb = [0u8; 32];
    idb.copy_from_slice(&r.payload[..32]);
    let id = BlobId(idb);
    let body = &r.payload[32..];
    let content = if r.codec == codec_flag_none() {
        std::borrow::Cow::Borrowed(body)
    } else {
        match decompress(r.codec, body, r.raw_len as usize) {
            Ok(v) => std::borrow::Cow::Owned(v),
            Err(e) => return Some(Some(e)),
        }
    };
    if BlobId::of(&content) != id {
        return Some(Some(format!("blob content does not hash to its id {id}")));
    }
    match core.index.blob(&id) {
        Ok(Some(_)) => Some(None),
        Ok(None) => Some(Some(format!("blob {id} is in the log but not in the index"))),
        Err(e) => Some(Some(format!("index lookup of blob {id}: {e}"))),
    }
}

/// A manifest decodes, and every chunk it lists is stored.
fn check_manifest(core: &Core, payload: &[u8]) -> Option<String> {
    let m = match Manifest::decode(payload) {
        Ok(m) => m,
        Err(e) => return Some(e),
    };
    for cid in m.refs() {
        match core.index.blob(&cid) {
            Ok(Some(_)) => {}
            Ok(None) => return Some(format!("chunked blob {}: chunk {cid} is not stored", m.id)),
            Err(e) => return Some(format!("index lookup of chunk {cid}: {e}")),
        }
    }
    match core.index.blob(&m.id) {
        Ok(Some(_)) => None,
        Ok(None) => Some(format!("blob {} is in the log but not in the index", m.id)),
        Err(e) => Some(format!("index lookup of blob {}: {e}", m.id)),
    }
}

pub(super) fn segment_bytes(core: &Core, n: u64, written: Position) -> Result<SegBytes> {
    if n < core.log.active_segment() {
        return Ok(SegBytes::Mapped(core.reader.map(n)?));
    }
    let path = segment_path(&log_dir(&core.dir), n);
    if n != written.segment {
        return Ok(SegBytes::Owned(std::fs::read(&path).map_err(|e| Error::io("read", &path, e))?));
    }
    // The active segment: its data only, not the preallocated zeros after it.
    let file = std::fs::File::open(&path).map_err(|e| Error::io("open", &path, e))?;
    let mut v = vec![0u8; written.offset as usize];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut v, 0).map_err(|e| Error::io("read", &path, e))?;
    Ok(SegBytes::Owned(v))
}

/// Sizes and counters.
pub(crate) fn stats(core: &Core, chats_in_memory: u64) -> Result<StoreStats> {
    let logd = log_dir(&core.dir);
    let written = core.log.written();
    let (mut log_bytes, mut log_file_bytes) = (0, 0);
    let segs = list_segments(&logd)?;
    for &n in &segs {
        let p = segment_path(&logd, n);
        let len = std::fs::metadata(&p).map_err(|e| Error::io("stat", &p, e))?.len();
        log_file_bytes += len;
        log_bytes += if n == written.segment { written.offset } else { len };
    }
    let index_bytes = std::fs::metadata(core.index.path()).map(|m| m.len()).unwrap_or(0);
    Ok(StoreStats {
        segments: segs.len() as u64,
        log_bytes,
        log_file_bytes,
        index_bytes,
        log_syncs: core.log.sync_count(),
        indexed_blobs: core.index.blob_count()?,
        chats_in_memory,
        blob_bodies_read: core.blob_bodies_read.load(std::sync::atomic::Ordering::Relaxed),
        index_at_open: core.index.at_open(),
    })
}
