//! Garbage collection: the log rewritten without what only deleted chats used.
//!
//! **What is garbage.** A chat deleted with [`Store::delete_chat`](crate::Store::delete_chat) leaves its records in the
//! log. `gc` drops them (all but the chat's creation and deletion records, so its id is
//! never reused), the grants bound to them (archive and blob grants written in their
//! batches: see `store/blobs.rs`), and every blob that only they referenced: message bodies,
//! archived tool results (with their offset index), attachments, checkpoint summaries, and
//! the chunks of chunked blobs, counted through their manifests. A blob is kept while any
//! owner's grant holds it (an owner's own grant from [`Store::put_blob`](crate::Store::put_blob) or
//! [`Store::archive`](crate::Store::archive), or one bound to a live chat) or a live record references it; so is a
//! blob nothing ever referenced or granted (stored by a build before grants).
//!
//! **How.** The live records are copied, byte for byte and in their original order, into a
//! new log beside the store (`gc.new/`), whose index is rebuilt from it; then the two are
//! swapped in under the store's lock. The swap is a few renames announced by a marker file
//! (`GC-SWAP`): a crash before the marker leaves the old store and a stray `gc.new/` that the
//! next open removes; a crash after it is rolled forward by the next open. Offline: `gc`
//! opens the store itself, so no other handle can hold it.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use super::core::Core;
use super::erase::{self, Erasures, Fate};
use super::{Kernel, maintenance};
use crate::base::blob::BlobId;
use crate::base::blob::chunk::Manifest;
use crate::base::error::{Error, Result};
use crate::base::io;
use crate::disk::index::INDEX_FILE;
use crate::disk::log::format::{self, BatchBuf, RecordRef, RecordSpec};
use crate::disk::log::scan::{ScanEnd, walk_batches};
use crate::disk::log::{list_segments, log_dir, segment_path};
use crate::disk::record::Kind;
use crate::disk::record::{
    self, ArchiveRec, CheckpointRec, CompactionRec, DeleteRec, GrantRec, PartRec, PartsRec, PinRec,
    SummaryRec,
};
use crate::kernel::options::Options;

const NEW_DIR: &str = "gc.new";
const OLD_DIR: &str = "gc.old";
const MARKER: &str = "GC-SWAP";

/// What a garbage collection did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Deleted chats whose records (other than creation and deletion) were dropped by
    /// this collection; a chat collected before does not count again.
    pub deleted_chats: u64,
    /// Records in the log before and after.
    pub records_before: u64,
    /// Records in the log after.
    pub records_after: u64,
    /// Blob and manifest records dropped (unreferenced by any live record).
    pub blobs_removed: u64,
    /// Bytes of log data before.
    pub log_bytes_before: u64,
    /// Bytes of log data after.
    pub log_bytes_after: u64,
    /// Message versions erased by this collection (`Chat::erase`): each left as a
    /// tombstone without its content. A version erased before does not count again.
    pub erased_versions: u64,
}

/// Where a record belongs: a chat, or the store as a whole.
fn chat_of(r: &RecordRef<'_>) -> std::result::Result<Option<u64>, String> {
    Kind::of(r.kind).map_or(Ok(None), |k| crate::disk::index::chat_of(k, r.payload))
}

/// The known records of a batch with their kinds (an optional kind this build does not
/// know is copied as it is and holds nothing; open refuses a store with an unknown
/// required kind).
fn known<'a>(records: &'a [RecordRef<'a>]) -> impl Iterator<Item = (Kind, &'a [u8])> + Clone + 'a {
    records.iter().filter_map(|r| Some((Kind::of(r.kind)?, r.payload)))
}

/// Whether a grant in a batch bound to `chats` stays: the owner's own (no chat), or bound to
/// a chat that is not deleted.
fn grant_stays(chats: &[u64], deleted: &HashSet<u64>) -> bool {
    chats.is_empty() || chats.iter().any(|c| !deleted.contains(c))
}

/// The chats a grant in this batch is bound to.
fn chats_of_batch(records: &[RecordRef<'_>]) -> Vec<u64> {
    if known(records).any(|(k, _)| crate::disk::index::is_grant(k)) {
        crate::disk::index::batch_chats(known(records))
    } else {
        Vec::new()
    }
}

fn blob_id(r: &RecordRef<'_>) -> Option<BlobId> {
    let mut id = [0u8; 32];
    id.copy_from_slice(r.payload.get(..32)?);
    Some(BlobId(id))
}

fn part_refs(parts: &[PartRec], out: &mut Vec<BlobId>) {
    for p in parts {
        match p {
            PartRec::ToolResultArchived { archive, .. } => out.push(BlobId(archive.id)),
            PartRec::Attachment { blob, .. } => out.push(BlobId(*blob)),
            _ => {}
        }
    }
}

/// The work of `Store::gc` (documented there).
pub(crate) fn gc(dir: &Path, opts: Options) -> Result<GcReport> {
    let dir = dir.to_path_buf();
    // A store open read-only for a full disk is refused: `gc` writes, and holds the lock.
    let opened = Kernel::open(&dir, Options { create_if_missing: false, ..opts.clone() })?;
    let (store, _) = super::read_only::writable(opened)?;
    maintenance::sync(&store.core)?;
    let new = dir.join(NEW_DIR);
    remove_dir(&new)?;
    let report = copy_live(&store.core, &new.join("log"), opts.segment_size)?;
    // The new log's index, rebuilt from it by an ordinary open.
    let (fresh, _) =
        super::read_only::writable(Kernel::open(&new, Options { create_if_missing: false, ..opts })?)?;
    maintenance::sync(&fresh.core)?;
    drop(fresh);
    crate::disk::log::sync_dir(&new)?;
    // Close the old store but keep its lock: the swap happens with no file of the old
    // log or index open, and no other opener in between.
    let lock = store.lock.lock().take();
    drop(store);
    // The search index (derived, rebuilt at the next search) may hold the words of what
    // this collection drops: it goes before the swap, so no crash leaves it beside the
    // new log.
    remove_dir(&dir.join(super::SEARCH_DIR))?;
    let marker = dir.join(MARKER);
    let f = io::open(OpenOptions::new().write(true).create(true).truncate(true), &marker)
        .map_err(|e| Error::io("create", &marker, e))?;
    io::sync_all(&f, &marker).map_err(|e| Error::io("fsync", &marker, e))?;
    crate::disk::log::sync_dir(&dir)?;
    finish_swap(&dir)?;
    drop(lock);
    Ok(report)
}

/// Writes the live records into a new log at `to`; returns the counts.
fn copy_live(core: &Core, to: &Path, segment_size: u64) -> Result<GcReport> {
    let written = core.log.written();
    let segments: Vec<u64> =
        list_segments(&log_dir(&core.dir))?.into_iter().filter(|n| *n <= written.segment).collect();
    let mut report = GcReport::default();
    // Pass 1: deleted chats, erasures, checkpoints, archive offset indexes, manifests.
    let mut deleted = HashSet::new();
    let mut erasures = Erasures::default();
    let mut archive_index: HashMap<BlobId, BlobId> = HashMap::new();
    let mut manifests: HashMap<BlobId, Vec<BlobId>> = HashMap::new();
    each_record(core, &segments, written, |n, r| {
        report.records_before += 1;
        let bad = |e: String| Error::corrupt(n, r.offset, e);
        match Kind::of(r.kind) {
            Some(Kind::Delete) => {
                deleted.insert(record::decode::<DeleteRec>(r.payload, "delete").map_err(bad)?.chat);
            }
            Some(k @ (Kind::Erase | Kind::Checkpoint)) => erasures.note(k, r.payload).map_err(bad)?,
            Some(Kind::Archive) => {
                let a: ArchiveRec = record::decode(r.payload, "archive").map_err(bad)?;
                archive_index.insert(BlobId(a.id), BlobId(a.index));
            }
            Some(Kind::Manifest) => {
                let m = Manifest::decode(r.payload).map_err(bad)?;
                manifests.insert(m.id, m.refs().collect());
            }
            _ => {}
        }
        Ok(())
    })?;
    erasures.taint(&deleted);
    // Pass 1b (only with erasures): what the versions of chats with erasures reference.
    if !erasures.is_empty() {
        each_record(core, &segments, written, |n, r| {
            let Some(kind) = Kind::of(r.kind).filter(|k| k.is_message()) else { return Ok(()) };
            let bad = |e: String| Error::corrupt(n, r.offset, e);
            let f = record::message_fields(kind, r.payload).map_err(bad)?;
            if deleted.contains(&f.chat) || !erasures.touches(f.chat) {
                return Ok(());
            }
            let mut body = |id: &BlobId| core.get_blob(id, core.opts.verify).map(Some);
            let Some(Holds::Refs(refs)) = holds(kind, r.payload, &bad, &mut body)? else { return Ok(()) };
            erasures.note_version(f.chat, f.seq, f.revision, refs);
            Ok(())
        })?;
        erasures.settle();
    }
    let gone = Gone { deleted: &deleted, erasures: &erasures };
    // Pass 2: what kept records and kept grants hold, and what dropped records, erased
    // versions and dropped grants held.
    let (mut live, mut dead) = (HashSet::new(), HashSet::new());
    each_batch(core, &segments, written, |n, records| {
        let (chats, tainted) = gone.batch(records);
        records.iter().try_for_each(|r| {
            let fate = gone.fate(n, r, &chats, tainted)?;
            reach(core, n, r, fate, &archive_index, &mut live, &mut dead)
        })
    })?;
    let live = closure(live, &manifests);
    let dead: HashSet<BlobId> = closure(dead, &manifests).difference(&live).copied().collect();
    // Pass 3: copy, in order, what stays (a tombstone for an erased version); batches keep
    // their records' order and are renumbered (a batch left empty disappears).
    let mut out = NewLog::create(to, segment_size)?;
    let mut emptied = HashSet::new();
    each_batch(core, &segments, written, |n, records| {
        let mut batch = BatchBuf::new();
        let (chats, tainted) = gone.batch(records);
        for r in records {
            let bad = |e: String| Error::corrupt(n, r.offset, e);
            let kind = Kind::of(r.kind);
            let fate = match kind {
                Some(Kind::Blob | Kind::Manifest) => {
                    let id = blob_id(r).ok_or_else(|| bad("blob record shorter than its id".into()))?;
                    if !dead.contains(&id) && out.first_copy(id) { Fate::Keep } else { Fate::Drop }
                }
                _ => gone.fate(n, r, &chats, tainted)?,
            };
            if fate == Fate::Drop {
                report.blobs_removed += kind.is_some_and(Kind::is_blob) as u64;
                if let Some(c) = chat_of(r).map_err(bad)?.filter(|c| deleted.contains(c)) {
                    emptied.insert(c);
                }
                continue;
            }
            report.records_after += 1;
            let stone;
            let spec = if fate == Fate::Tombstone {
                report.erased_versions += 1;
                let Some(kind) = kind else {
                    return Err(bad("an unknown record kind has no tombstone".into()));
                };
                stone = erase::tombstone(kind, r.payload, core.opts.compression).map_err(bad)?;
                let raw_len = u32::try_from(stone.len()).map_err(|_| bad("a tombstone over 4 GiB".into()))?;
                RecordSpec { kind: Kind::MessageCompact.byte(), codec: 0, raw_len, parts: &[&stone] }
            } else {
                RecordSpec { kind: r.kind, codec: r.codec, raw_len: r.raw_len, parts: &[r.payload] }
            };
            batch.push(spec).map_err(Error::InvalidArgument)?;
        }
        if !batch.is_empty() {
            out.write(batch)?;
        }
        Ok(())
    })?;
    report.deleted_chats = emptied.len() as u64;
    report.log_bytes_before = maintenance::stats(core, 0)?.log_bytes;
    report.log_bytes_after = out.finish()?;
    Ok(report)
}

/// The blobs a history record holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Holds {
    /// A grant (an archive's text and offset index, or a granted blob): held while the grant
    /// stays.
    Grant(Vec<BlobId>),
    /// What a chat's (or the store's) record references: held while the record stays.
    Refs(Vec<BlobId>),
}

/// The blobs record (`kind`, `payload`) holds, or `None` when it holds none. A message whose
/// body is a blob holds it, and what the body's parts reference when `body` gives the body's
/// bytes (`Ok(None)`: only the body itself is counted). `bad` makes the error of a record
/// that does not decode. Shared by this module and fleet mode's collection.
pub(crate) fn holds(
    kind: Kind,
    payload: &[u8],
    bad: &dyn Fn(String) -> Error,
    body: &mut dyn FnMut(&BlobId) -> Result<Option<crate::base::blob::Blob>>,
) -> Result<Option<Holds>> {
    let mut refs = Vec::new();
    match kind {
        Kind::Message | Kind::MessageCompact => match record::message(kind, payload).map_err(bad)?.body {
            record::BodyRec::Inline(parts) => part_refs(&parts, &mut refs),
            record::BodyRec::Blob(id) => {
                refs.push(BlobId(id));
                if let Some(b) = body(&BlobId(id))? {
                    let parts: PartsRec = record::decode(&b, "message body").map_err(bad)?;
                    part_refs(&parts.parts, &mut refs);
                }
            }
        },
        Kind::Pin => refs.push(BlobId(record::decode::<PinRec>(payload, "pin").map_err(bad)?.id)),
        Kind::Compaction => {
            let c: CompactionRec = record::decode(payload, "compaction").map_err(bad)?;
            refs.extend(c.trims.iter().map(|t| BlobId(t.1)));
        }
        Kind::Checkpoint => {
            refs.push(BlobId(record::decode::<CheckpointRec>(payload, "checkpoint").map_err(bad)?.summary));
        }
        Kind::Summary => {
            refs.push(BlobId(record::decode::<SummaryRec>(payload, "summary").map_err(bad)?.text));
        }
        Kind::Archive => {
            let a: ArchiveRec = record::decode(payload, "archive").map_err(bad)?;
            return Ok(Some(Holds::Grant(vec![BlobId(a.id), BlobId(a.index)])));
        }
        Kind::Grant => {
            let g: GrantRec = record::decode(payload, "grant").map_err(bad)?;
            return Ok(Some(Holds::Grant(vec![BlobId(g.id)])));
        }
        Kind::Chat
        | Kind::Meta
        | Kind::Revision
        | Kind::Step
        | Kind::Usage
        | Kind::Delete
        | Kind::Hide
        | Kind::Erase
        | Kind::AppendKey
        | Kind::Blob
        | Kind::Manifest => return Ok(None),
    }
    Ok(Some(Holds::Refs(refs)))
}

/// What a collection drops: deleted chats and erasures.
struct Gone<'a> {
    deleted: &'a HashSet<u64>,
    erasures: &'a Erasures,
}

impl Gone<'_> {
    /// The chats a batch's grants are bound to, and whether its summaries are derived from
    /// erased content.
    fn batch(&self, records: &[RecordRef<'_>]) -> (Vec<u64>, bool) {
        let tainted = self.erasures.batch_tainted(known(records));
        (chats_of_batch(records), tainted)
    }

    /// What becomes of history record `r` (not a blob or manifest) of segment `n`.
    fn fate(&self, n: u64, r: &RecordRef<'_>, chats: &[u64], tainted: bool) -> Result<Fate> {
        let bad = |e: String| Error::corrupt(n, r.offset, e);
        let Some(kind) = Kind::of(r.kind) else { return Ok(Fate::Keep) };
        match kind {
            Kind::Archive | Kind::Grant => {
                let granted = if kind == Kind::Grant {
                    record::decode::<GrantRec>(r.payload, "grant").map_err(bad)?.id
                } else {
                    record::decode::<ArchiveRec>(r.payload, "archive").map_err(bad)?.id
                };
                let stays =
                    grant_stays(chats, self.deleted) && !self.erasures.orphaned(chats, &BlobId(granted));
                Ok(if stays { Fate::Keep } else { Fate::Drop })
            }
            Kind::Chat | Kind::Delete => Ok(Fate::Keep),
            _ => match chat_of(r).map_err(bad)? {
                Some(c) if self.deleted.contains(&c) => Ok(Fate::Drop),
                chat => self.erasures.fate(kind, r.payload, chat, tainted).map_err(bad),
            },
        }
    }
}

/// Adds what record `r` holds to `live` when it stays, or to `dead` when `gc` drops it (or
/// writes its tombstone, which holds nothing).
fn reach(
    core: &Core,
    n: u64,
    r: &RecordRef<'_>,
    fate: Fate,
    archive_index: &HashMap<BlobId, BlobId>,
    live: &mut HashSet<BlobId>,
    dead: &mut HashSet<BlobId>,
) -> Result<()> {
    let bad = |e: String| Error::corrupt(n, r.offset, e);
    let mut body = |id: &BlobId| core.get_blob(id, core.opts.verify).map(Some);
    let into = if fate == Fate::Keep { live } else { dead };
    let Some(kind) = Kind::of(r.kind) else { return Ok(()) };
    let mut refs = match holds(kind, r.payload, &bad, &mut body)? {
        None => return Ok(()),
        // A grant holds its blob (an archive grant, the offset index too) while it stays.
        Some(Holds::Grant(ids)) => {
            into.extend(ids);
            return Ok(());
        }
        Some(Holds::Refs(ids)) => ids,
    };
    // An archive's offset index goes wherever its text goes.
    let extra: Vec<BlobId> = refs.iter().filter_map(|id| archive_index.get(id).copied()).collect();
    refs.extend(extra);
    into.extend(refs);
    Ok(())
}

/// Calls `f` on every valid record of the log, in order.
fn each_record(
    core: &Core,
    segments: &[u64],
    written: crate::disk::log::Position,
    mut f: impl FnMut(u64, &RecordRef<'_>) -> Result<()>,
) -> Result<()> {
    each_batch(core, segments, written, |n, records| records.iter().try_for_each(|r| f(n, r)))
}

/// Calls `f` on the records of every batch of the log, in order.
fn each_batch(
    core: &Core,
    segments: &[u64],
    written: crate::disk::log::Position,
    mut f: impl FnMut(u64, &[RecordRef<'_>]) -> Result<()>,
) -> Result<()> {
    for &n in segments {
        let bytes = maintenance::segment_bytes(core, n, written)?;
        format::decode_segment_header(&bytes, n)
            .map_err(|e| Error::corrupt(n, 0, format!("segment header: {e}")))?;
        let (_, how) = walk_batches(&bytes, format::SEGMENT_HEADER_LEN, |b| f(n, &b.records))?;
        if let ScanEnd::Damaged { offset, reason, .. } = how {
            return Err(Error::corrupt(n, offset, reason));
        }
    }
    Ok(())
}

/// `ids` and every chunk their manifests list.
pub(crate) fn closure(ids: HashSet<BlobId>, manifests: &HashMap<BlobId, Vec<BlobId>>) -> HashSet<BlobId> {
    let mut out = HashSet::new();
    let mut todo: Vec<BlobId> = ids.into_iter().collect();
    while let Some(id) = todo.pop() {
        if out.insert(id)
            && let Some(chunks) = manifests.get(&id)
        {
            todo.extend(chunks.iter().copied());
        }
    }
    out
}

/// The log being written: segments of about `segment_size` bytes, batches renumbered.
struct NewLog {
    dir: PathBuf,
    segment_size: u64,
    segment: u64,
    file: Option<(File, u64)>,
    txid: u64,
    blobs: HashSet<BlobId>,
    bytes: u64,
}

impl NewLog {
    fn create(dir: &Path, segment_size: u64) -> Result<NewLog> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("create_dir", dir, e))?;
        Ok(NewLog {
            dir: dir.to_path_buf(),
            segment_size,
            segment: 0,
            file: None,
            txid: 1,
            blobs: HashSet::new(),
            bytes: 0,
        })
    }

    /// True the first time `id` is asked about.
    fn first_copy(&mut self, id: BlobId) -> bool {
        self.blobs.insert(id)
    }

    fn write(&mut self, batch: BatchBuf) -> Result<()> {
        let mut frame = batch.finish();
        let len = frame.len() as u64;
        let full = self
            .file
            .as_ref()
            .is_none_or(|(_, at)| *at > format::SEGMENT_HEADER_LEN as u64 && at + len > self.segment_size);
        if full {
            self.seal()?;
            self.segment += 1;
            self.file = Some((self.new_segment()?, format::SEGMENT_HEADER_LEN as u64));
        }
        let path = segment_path(&self.dir, self.segment);
        let Some((f, at)) = self.file.as_mut() else { return Ok(()) };
        io::write_all_at(f, frame.seal(self.txid), *at, &path).map_err(|e| Error::io("write", &path, e))?;
        self.txid += 1;
        *at += len;
        self.bytes += len;
        Ok(())
    }

    /// Creates the file of segment `self.segment` with its header.
    fn new_segment(&self) -> Result<File> {
        let path = segment_path(&self.dir, self.segment);
        let f = io::open(OpenOptions::new().read(true).write(true).create(true).truncate(true), &path)
            .map_err(|e| Error::io("create", &path, e))?;
        io::write_all_at(&f, &format::encode_segment_header(self.segment), 0, &path)
            .map_err(|e| Error::io("write", &path, e))?;
        Ok(f)
    }

    fn seal(&mut self) -> Result<()> {
        if let Some((f, _)) = self.file.take() {
            let path = segment_path(&self.dir, self.segment);
            io::sync_all(&f, &path).map_err(|e| Error::io("fsync", &path, e))?;
            self.bytes += format::SEGMENT_HEADER_LEN as u64;
        }
        Ok(())
    }

    /// Syncs everything; returns the bytes of log data written.
    fn finish(mut self) -> Result<u64> {
        if self.file.is_none() && self.segment == 0 {
            // An empty log still has its first segment.
            self.segment = 1;
            self.file = Some((self.new_segment()?, format::SEGMENT_HEADER_LEN as u64));
        }
        self.seal()?;
        crate::disk::log::sync_dir(&self.dir)?;
        Ok(self.bytes)
    }
}

fn remove_dir(p: &Path) -> Result<()> {
    io::remove_tree(p).map_err(|e| Error::io("remove", p, e))
}

/// True when something (a file, a directory or a link) is at `p`.
fn present(p: &Path) -> Result<bool> {
    match std::fs::symlink_metadata(p) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io("stat", p, e)),
    }
}

/// Finishes (or cleans up after) a garbage collection in `dir`; called by `Store::open`
/// under the store's lock, so also at the start of every `gc`. Every step is repeatable, so
/// a crash or a failure anywhere in here (or in an earlier run of it) is finished by the
/// next call:
///
/// * With the marker: for the log and then the index, when the new one is still in
///   `gc.new/`, the current one moves to `gc.old/` (replacing a stale copy an earlier
///   collection's cleanup left there) and the new one takes its place; then the marker goes.
/// * Then, marker or not: `gc.new/` is removed (a collection that did not reach its swap, or
///   the emptied directory of one that did), and so is `gc.old/` (the log and index before a
///   finished swap) — unless the store has no `log/`, in which case `gc.old/` may hold the
///   only copy of the data and is left for the user (open then refuses the missing log).
pub(crate) fn finish_swap(dir: &Path) -> Result<()> {
    let marker = dir.join(MARKER);
    let new = dir.join(NEW_DIR);
    let old = dir.join(OLD_DIR);
    if present(&marker)? {
        io::create_dir_all(&old).map_err(|e| Error::io("create_dir", &old, e))?;
        for name in ["log", INDEX_FILE] {
            let (cur, fresh, aside) = (dir.join(name), new.join(name), old.join(name));
            if !present(&fresh)? {
                continue; // moved in already
            }
            if present(&cur)? {
                // `cur` is still in place, so whatever is at `aside` is not this swap's:
                // the leftover of an earlier collection whose cleanup did not finish.
                remove_dir(&aside)?;
                io::rename(&cur, &aside).map_err(|e| Error::io("rename", &cur, e))?;
            }
            io::rename(&fresh, &cur).map_err(|e| Error::io("rename", &fresh, e))?;
        }
        crate::disk::log::sync_dir(dir)?;
        io::remove_file(&marker).map_err(|e| Error::io("remove", &marker, e))?;
        crate::disk::log::sync_dir(dir)?;
    }
    remove_dir(&new)?;
    if present(&old)? {
        if present(&crate::disk::log::log_dir(dir))? {
            remove_dir(&old)?;
        } else {
            tracing::warn!(path = %old.display(), "the store has no log/ but gc.old/ holds one: leaving it");
        }
    }
    Ok(())
}
