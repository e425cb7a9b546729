//! The redb index, derived from the log: where each blob lives, and how far into the log
//! the index reaches.
//!
//! New records first land in an in-memory memtable (under the log writer's lock, so
//! readers see a batch whole or not at all). The background indexer moves them into
//! redb with non-durable commits and, periodically, makes redb durable after syncing the
//! log up to the position it records. On open, the log is replayed from that position.

mod history;
mod memtable;

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, MutexGuard, RwLock};
use redb::{
    Database, Durability as RedbDurability, ReadableDatabase, ReadableTableMetadata, TableDefinition,
};

use crate::blob::{Blob, BlobId};
use crate::error::{Error, Result};
use crate::io::{self, Journal, SeamBackend};
use crate::log::format::{BatchRef, kind};
use crate::log::{Location, Position};
pub(crate) use history::{
    ARCHIVES, CALIB, CHATS, COMPACTIONS, ChatRow, GRANT_ARCHIVE, GRANT_INLINE, GRANTS, HistoryIndex,
    MESSAGES, METAS, MsgVal, OWNER_CHATS, PINS, REVISIONS, STEPS, batch_chats, chat_of, is_grant,
};
use history::{BODY_TEXTS_TODO, CHAT_INLINE_TEXTS, INLINE_TEXTS, MsgKey};
pub(crate) use history::{CHECKPOINTS, FIELD_EXTRA, FIELD_TITLE, SUMMARIES, find_chats};
pub(crate) use memtable::Memtable;

/// Blob id -> (segment, record offset, payload length).
const BLOBS: TableDefinition<'_, [u8; 32], (u64, u64, u32)> = TableDefinition::new("blobs");
/// Bookkeeping: applied position, next transaction id, index format version.
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");

/// Version of the index layout. A different version on disk is rebuilt from the log.
/// 3: the `grants` and `chat_grants` tables.
/// 4: the `inline_texts`, `chat_inline_texts` and `body_texts_todo` tables (a view's
/// previews of inline texts are read through them, without an archive written).
/// 5: `chat_lookup` and `chat_fields` (chats by metadata value, `Store::find_chats`).
const INDEX_VERSION: u64 = 5;

/// The file name of the index inside the store directory.
pub(crate) const INDEX_FILE: &str = "index.redb";

/// The index: redb plus the memtable of records not yet in redb.
#[derive(Debug)]
pub(crate) struct Index {
    /// Behind a lock only so that [`Index::compact_if_fragmented`] can take it whole at close;
    /// every other use takes it shared, briefly, to begin a transaction.
    db: RwLock<Database>,
    path: PathBuf,
    cache_bytes: usize,
    pub(crate) mem: RwLock<Memtable>,
    /// Serializes flushes (the indexer thread, `sync`, rebuild).
    flush_lock: Mutex<()>,
    /// Everything before this position is in redb (visible to read transactions).
    flushed: Mutex<Position>,
    /// What redb's writes did while the store opens (see [`Index::abandon`]).
    journal: Arc<Journal>,
    /// Advanced after every redb commit that may have removed a grant (a chat's deletion
    /// applied, the index rebuilt or cleared): a grant decision cached under an older value
    /// is not used again (see [`Index::grants_epoch`]).
    grants_epoch: AtomicU64,
}

/// A message version that holds a text inline: see [`Index::inline_text`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InlineText {
    pub chat: u64,
    pub seq: u64,
    pub revision: u64,
    /// The part that is the text.
    pub part: u32,
    /// The message record.
    pub loc: Location,
}

/// What one batch adds to the index: blob locations, and history records to apply.
#[derive(Debug, Default)]
pub(crate) struct BatchEntries {
    pub blobs: Vec<(BlobId, Location)>,
    pub records: Vec<PendingRecord>,
}

/// A non-blob record waiting to be applied to redb.
#[derive(Debug, Clone)]
pub(crate) struct PendingRecord {
    pub kind: u8,
    pub loc: Location,
    pub payload: Vec<u8>,
    /// For a grant (archive or blob grant record): the chats whose records share its batch,
    /// which it is bound to (empty: the owner's own). Empty for every other kind.
    pub chats: Vec<u64>,
}

/// What the index knows about how far it reaches into the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Applied {
    pub position: Position,
    pub next_txid: u64,
    /// Offset of the batch that ends at `position` (0 when `position` starts a segment):
    /// on open, that batch must decode and end there, or the index is not this log's.
    pub batch_start: u64,
}

fn redb_err(e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::index(e)
}

/// Runs `f`, turning a panic into [`Error::Index`].
///
/// Why a `catch_unwind`: redb trusts the bytes of its file. A damaged page that its checksums
/// do not cover (the header, the commit slots, the allocator state) can make redb index out
/// of bounds or hit an `unwrap` while opening, verifying, compacting or closing the file, and
/// such a panic would take the caller's process down (at close, from `Drop`, an abort). The
/// index is derived from the log, so the only right answer to damage in it is an error that
/// says to rebuild. Only calls that read a file not yet verified are wrapped: `open` and
/// verification, compaction at close, and dropping a replaced database. Nothing they share
/// with other threads is left half-changed by a panic (the database is not used again).
pub(crate) fn guard<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            Err(Error::index_msg(format!("{what}: redb failed on a damaged page ({msg})")))
        }
    }
}

/// The error for an index file that is damaged: what failed, where.
fn damaged(path: &Path, what: &str, e: Error) -> Error {
    let (e, source) = match e {
        Error::Index { message, source } => (message, source),
        other => (other.to_string(), None),
    };
    Error::Index { message: format!("{} is damaged: {what}: {e}", path.display()), source }
}

/// Opens (or creates) the redb file at `path` through the file seam, and verifies every page
/// of it against redb's checksums.
///
/// A file redb cannot open at all (not a redb file: its header is unreadable) is what an
/// interrupted creation leaves (a crash, a failed write of the first pages): it holds nothing
/// the log does not, so it is deleted and created anew, and the log replay fills it. A file
/// that opens but whose pages fail verification is not something a crash leaves (redb's
/// commits are crash-safe, and redb has already repaired an interrupted one): that is
/// damage, and it is reported.
fn open_verified(path: &Path, cache_bytes: usize, journal: &Arc<Journal>) -> Result<Database> {
    let create = || -> Result<(Database, u64)> {
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(true).truncate(false);
        let file = io::open(&opts, path).map_err(|e| Error::io("open", path, e))?;
        let len = file.metadata().map_err(|e| Error::io("stat", path, e))?.len();
        let backend = SeamBackend::new(file, path.to_path_buf(), journal.clone())
            .map_err(|e| Error::io("open", path, e))?;
        let db = guard("opening the index", || {
            Database::builder().set_cache_size(cache_bytes).create_with_backend(backend).map_err(redb_err)
        })?;
        Ok((db, len))
    };
    let (mut db, len) = match create() {
        Ok(x) => x,
        Err(e @ Error::Io { .. }) => return Err(e),
        Err(e) => {
            tracing::warn!(error = %e, path = %path.display(), "index unreadable; rebuilding it from the log");
            io::remove_file(path).map_err(|e| Error::io("remove", path, e))?;
            create()?
        }
    };
    if len == 0 {
        return Ok(db);
    }
    match guard("verifying the index", || db.check_integrity().map_err(redb_err)) {
        Ok(true) => Ok(db),
        Ok(false) => {
            // redb found a commit that did not verify and went back to the last one that does
            // (or rebuilt its free-page map): the index reaches less far, and the log replay
            // that follows catches it up.
            tracing::warn!(path = %path.display(), "index repaired by redb: it went back to its last intact commit");
            Ok(db)
        }
        Err(e) => {
            // Dropping a database that failed verification can fail too; it is not used again.
            let _ = guard("closing the damaged index", || {
                drop(db);
                Ok(())
            });
            Err(damaged(path, "its pages fail verification", e))
        }
    }
}

impl Index {
    /// Opens (or creates) the index. A missing (or empty) file starts empty, and an index of
    /// another layout version is cleared: the log rebuilds both. A file that redb cannot open,
    /// or whose pages fail redb's checksums, is damage: [`Error::Index`], whose message advises
    /// `check --rebuild` (which rebuilds from a fresh file, [`Index::rebuild_from`]).
    ///
    /// Every page is verified here, once per open (redb checks its page checksums only when
    /// asked), so that no later read decodes a damaged page: a flipped bit in a chat's length
    /// or a message's location would otherwise be believed.
    ///
    /// A write that fails for lack of space (redb repairing an interrupted commit, a layout
    /// change clearing the tables) is returned as [`Error::Io`] of kind `StorageFull`.
    pub(crate) fn open(store_dir: &Path, cache_bytes: usize) -> Result<(Index, Applied)> {
        let path = store_dir.join(INDEX_FILE);
        let found = std::fs::symlink_metadata(&path).ok().map(|m| m.len());
        let journal = Arc::new(Journal::recording(found));
        let said = |e: Error| no_space_said(&journal.no_space, &path, e);
        let db = match open_verified(&path, cache_bytes, &journal) {
            Ok(db) => db,
            Err(e) => {
                if journal.no_space.load(Ordering::Relaxed) {
                    // redb's repair ran out of space: put back what it wrote.
                    if let Err(r) = journal.undo(&path).map_err(|e| Error::io("restore", &path, e)) {
                        tracing::warn!(error = %r, "putting the index back as found failed");
                    }
                }
                return Err(said(e));
            }
        };
        // The store directory's entries (`LOCK`, `log/`, `index.redb`) must survive a power cut.
        io::sync_dir(store_dir).map_err(|e| Error::io("fsync", store_dir, e))?;
        let index = Index {
            db: RwLock::new(db),
            path: path.clone(),
            cache_bytes,
            mem: RwLock::new(Memtable::default()),
            flush_lock: Mutex::new(()),
            flushed: Mutex::new(Position::new(0, 0)),
            journal: journal.clone(),
            grants_epoch: AtomicU64::new(0),
        };
        let applied = index.read_applied().and_then(|applied| match applied {
            Some((a, INDEX_VERSION)) => Ok(a),
            Some((_, v)) => {
                tracing::warn!(
                    found = v,
                    expected = INDEX_VERSION,
                    "index layout version differs; rebuilding"
                );
                index.clear()?;
                Ok(Applied { position: Position::new(1, 0), next_txid: 0, batch_start: 0 })
            }
            None => Ok(Applied { position: Position::new(1, 0), next_txid: 0, batch_start: 0 }),
        });
        match applied {
            Ok(applied) => Ok((index, applied)),
            Err(e) if index.ran_out_of_space() => {
                let e = said(e);
                index.abandon()?;
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// An empty index held in memory only (redb's in-memory backend), for a read-only open:
    /// it is built from the log and never touches a file. `store_dir` names where the store
    /// is, for messages; nothing is created there.
    pub(crate) fn in_memory(store_dir: &Path, cache_bytes: usize) -> Result<Index> {
        let db = Database::builder()
            .set_cache_size(cache_bytes)
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(redb_err)?;
        Ok(Index {
            db: RwLock::new(db),
            path: store_dir.join(INDEX_FILE),
            cache_bytes,
            mem: RwLock::new(Memtable::default()),
            flush_lock: Mutex::new(()),
            flushed: Mutex::new(Position::new(0, 0)),
            journal: Arc::new(Journal::default()),
            grants_epoch: AtomicU64::new(0),
        })
    }

    /// True once a write of redb's failed because the disk (or the quota) is full.
    pub(crate) fn ran_out_of_space(&self) -> bool {
        self.journal.no_space.load(Ordering::Relaxed)
    }

    /// The store is open: redb's writes are no longer kept for [`Index::abandon`].
    pub(crate) fn opened(&self) {
        self.journal.stop();
    }

    /// Gives up an index that could not be written while the store opened (a full disk):
    /// closes it and puts the file back as open found it — every byte redb's repair or
    /// catch-up wrote is written back (overwriting allocated blocks needs no space), what it
    /// appended is cut off, and a file open created is removed.
    pub(crate) fn abandon(self) -> Result<()> {
        let Index { db, path, journal, .. } = self;
        // A database whose write failed may fail to close too; it is not used again.
        let _ = guard("closing the index", || {
            drop(db);
            Ok(())
        });
        journal.undo(&path).map_err(|e| Error::io("restore", &path, e))
    }

    fn read_applied(&self) -> Result<Option<(Applied, u64)>> {
        let db = self.db.read();
        let tx = db.begin_read().map_err(redb_err)?;
        let meta = match tx.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(redb_err(e)),
        };
        let get = |k: &str| -> Result<Option<u64>> { Ok(meta.get(k).map_err(redb_err)?.map(|v| v.value())) };
        let (Some(seg), Some(off), Some(txid), Some(ver)) =
            (get("applied_segment")?, get("applied_offset")?, get("next_txid")?, get("version")?)
        else {
            return Ok(None);
        };
        let batch_start = get("applied_batch")?.unwrap_or(0);
        Ok(Some((Applied { position: Position::new(seg, off), next_txid: txid, batch_start }, ver)))
    }

    /// Replaces the index with one built from `batches` (every batch of the log, in order)
    /// in a fresh file: the current file is not read, so a damaged one is no obstacle. The
    /// new file is written beside it (`index.redb.rebuild`) and renamed over it once durable,
    /// so a crash leaves the old index or the new one. The caller holds off flushes and
    /// appends.
    pub(crate) fn rebuild_from(&self, batches: &[BatchEntries], applied: Applied) -> Result<()> {
        let tmp = self.path.with_extension("redb.rebuild");
        remove_if_present(&tmp)?;
        let db = build_at(&tmp, self.cache_bytes, batches, applied)?;
        io::rename(&tmp, &self.path).map_err(|e| Error::io("rename", &tmp, e))?;
        if let Some(dir) = self.path.parent() {
            io::sync_dir(dir).map_err(|e| Error::io("fsync", dir, e))?;
        }
        let old = std::mem::replace(&mut *self.db.write(), db);
        // The replaced database may be the damaged one: closing it must not take the process down.
        if let Err(e) = guard("closing the replaced index", || {
            drop(old);
            Ok(())
        }) {
            tracing::warn!(error = %e, "closing the replaced index failed; the rebuilt one is in place");
        }
        *self.flushed.lock() = applied.position;
        self.grants_changed();
        Ok(())
    }

    /// Compares this index with one built from `batches` (every batch of the log up to the
    /// position this index has applied) in a scratch file beside it, table by table and
    /// entry by entry. Returns one line per difference (at most 20 per table). The caller
    /// has flushed the memtable and holds off flushes and appends.
    ///
    /// The texts of body blobs (`body` reads one) are listed in both first (see
    /// [`Index::list_body_texts`]): an index lists them when a lookup needs them, so two
    /// indexes of one log agree only once both have.
    pub(crate) fn diff_with_log(
        &self,
        batches: &[BatchEntries],
        applied: Applied,
        body: &dyn Fn(&[u8; 32]) -> Result<Blob>,
    ) -> Result<Vec<String>> {
        let tmp = self.path.with_extension("redb.check");
        remove_if_present(&tmp)?;
        let fresh = build_at(&tmp, self.cache_bytes, batches, applied);
        let out = fresh.and_then(|fresh| {
            list_body_texts_in(|| self.db.read(), body)?;
            list_body_texts_in(|| &fresh, body)?;
            let (ours, theirs) = (self.read()?, fresh.begin_read().map_err(redb_err)?);
            guard("comparing the index with the log", || diff_tables(&ours, &theirs))
        });
        remove_if_present(&tmp)?;
        out
    }

    /// The first message version holding text `id` inline (a text part or an inline tool
    /// result) in a chat of `owner`, and where its record is; `None` when no chat of `owner`
    /// holds it (another owner's chats are not looked at: the same answer as for a text no
    /// chat holds). Messages whose parts are in a body blob are found once
    /// [`Index::list_body_texts`] has listed them; records still in the memtable once flushed.
    pub(crate) fn inline_text(&self, owner: &str, id: &[u8; 32]) -> Result<Option<InlineText>> {
        let tx = self.read()?;
        let texts = match tx.open_table(INLINE_TEXTS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(redb_err(e)),
        };
        let (chats, messages) =
            (tx.open_table(CHATS).map_err(redb_err)?, tx.open_table(MESSAGES).map_err(redb_err)?);
        let m = u64::MAX;
        let mut last_chat = None;
        for item in texts.range((*id, 0, 0, 0, 0)..=(*id, m, m, m, u32::MAX)).map_err(redb_err)? {
            let (_, chat, seq, revision, part) = item.map_err(redb_err)?.0.value();
            if last_chat == Some(chat) {
                continue;
            }
            last_chat = Some(chat);
            let Some(row) = chats.get(chat).map_err(redb_err)? else { continue };
            if ChatRow::decode(row.value())?.owner != owner {
                continue;
            }
            if let Some(v) = messages.get((chat, seq, revision)).map_err(redb_err)? {
                let (segment, offset, len, ..) = v.value();
                let loc = Location { segment, offset, len };
                return Ok(Some(InlineText { chat, seq, revision, part, loc }));
            }
        }
        Ok(None)
    }

    /// Lists the inline texts of the message versions whose parts are in a body blob (the
    /// indexer queues them in `body_texts_todo`, as it reads no blob): `body` reads a body
    /// blob. A body that cannot be read is reported and stays queued. Returns how many
    /// messages were listed.
    pub(crate) fn list_body_texts(&self, body: &dyn Fn(&[u8; 32]) -> Result<Blob>) -> Result<u64> {
        list_body_texts_in(|| self.db.read(), body)
    }

    /// Deletes every table (before a rebuild).
    pub(crate) fn clear(&self) -> Result<()> {
        let db = self.db.read();
        let tx = db.begin_write().map_err(redb_err)?;
        tx.delete_table(BLOBS).map_err(redb_err)?;
        tx.delete_table(META).map_err(redb_err)?;
        history::delete_tables(&tx)?;
        tx.commit().map_err(redb_err)?;
        self.grants_changed();
        Ok(())
    }

    /// Looks a blob up: memtable first, then redb.
    pub(crate) fn blob(&self, id: &BlobId) -> Result<Option<Location>> {
        if let Some(loc) = self.mem.read().blob(id) {
            return Ok(Some(loc));
        }
        let db = self.db.read();
        let tx = db.begin_read().map_err(redb_err)?;
        let t = match tx.open_table(BLOBS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(redb_err(e)),
        };
        let found = t.get(id.as_bytes()).map_err(redb_err)?;
        Ok(found.map(|g| {
            let (segment, offset, len) = g.value();
            Location { segment, offset, len }
        }))
    }

    /// Looks several blobs up: the memtable first, then redb in one read transaction.
    pub(crate) fn blobs(&self, ids: &[BlobId]) -> Result<Vec<Option<Location>>> {
        let mut out: Vec<Option<Location>> = {
            let mem = self.mem.read();
            ids.iter().map(|id| mem.blob(id)).collect()
        };
        if out.iter().all(Option::is_some) {
            return Ok(out);
        }
        let db = self.db.read();
        let tx = db.begin_read().map_err(redb_err)?;
        let t = match tx.open_table(BLOBS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(out),
            Err(e) => return Err(redb_err(e)),
        };
        for (id, slot) in ids.iter().zip(&mut out) {
            if slot.is_none() {
                *slot = t.get(id.as_bytes()).map_err(redb_err)?.map(|g| {
                    let (segment, offset, len) = g.value();
                    Location { segment, offset, len }
                });
            }
        }
        Ok(out)
    }

    /// Number of blobs in redb (for stats and tests).
    pub(crate) fn blob_count(&self) -> Result<u64> {
        let db = self.db.read();
        let tx = db.begin_read().map_err(redb_err)?;
        match tx.open_table(BLOBS) {
            Ok(t) => t.len().map_err(redb_err),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(0),
            Err(e) => Err(redb_err(e)),
        }
    }

    /// Applies replayed batches (recovery, rebuild) straight into redb in one durable
    /// transaction, recording `applied` as the position reached.
    pub(crate) fn apply_replayed(&self, batches: &[BatchEntries], applied: Applied) -> Result<()> {
        let mut tx = self.db.read().begin_write().map_err(redb_err)?;
        tx.set_quick_repair(true);
        for b in batches {
            apply_entries(&tx, &b.blobs, &b.records)?;
        }
        write_meta(&tx, applied)?;
        tx.commit().map_err(redb_err)?;
        if batches.iter().any(|b| revokes(&b.records)) {
            self.grants_changed();
        }
        *self.flushed.lock() = applied.position;
        Ok(())
    }

    /// Moves the memtable into redb. With `durable`, first `sync_log(position)` makes the
    /// log durable up to the position recorded, then redb commits with fsync.
    pub(crate) fn flush(&self, durable: bool, sync_log: impl FnOnce(Position) -> Result<()>) -> Result<bool> {
        let _g = self.flush_lock.lock();
        let (entries, applied) = {
            let mut mem = self.mem.write();
            if mem.is_empty() && (!durable || mem.bytes_since_durable() == 0) {
                return Ok(false);
            }
            if durable {
                mem.reset_durable_bytes();
            }
            mem.start_flush()
        };
        let Some(applied) = applied else {
            self.mem.write().finish_flush(true);
            return Ok(false);
        };
        let r = self.commit_flush(durable, sync_log, &entries, applied);
        if r.is_ok() && revokes(&entries.records) {
            self.grants_changed();
        }
        // Entries stay visible in the memtable's flushing set until redb has them.
        self.mem.write().finish_flush(r.is_ok());
        r?;
        *self.flushed.lock() = applied.position;
        Ok(true)
    }

    fn commit_flush(
        &self,
        durable: bool,
        sync_log: impl FnOnce(Position) -> Result<()>,
        entries: &BatchEntries,
        applied: Applied,
    ) -> Result<()> {
        if durable {
            sync_log(applied.position)?;
        }
        let mut tx = self.db.read().begin_write().map_err(redb_err)?;
        if durable {
            tx.set_quick_repair(true);
        } else {
            tx.set_durability(RedbDurability::None).map_err(redb_err)?;
        }
        apply_entries(&tx, &entries.blobs, &entries.records)?;
        write_meta(&tx, applied)?;
        tx.commit().map_err(redb_err)
    }

    /// The grants epoch: it advances after every commit that may have removed a grant from
    /// redb. A positive grant decision read from redb may be cached under the epoch read
    /// *before* the lookup, and used only while the epoch is still that value: a revocation
    /// committed after the lookup then invalidates it, and one committed before it was seen.
    pub(crate) fn grants_epoch(&self) -> u64 {
        self.grants_epoch.load(Ordering::SeqCst)
    }

    fn grants_changed(&self) {
        self.grants_epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// The next chat id to hand out (one past the highest created).
    pub(crate) fn next_chat(&self) -> Result<u64> {
        let tx = self.db.read().begin_read().map_err(redb_err)?;
        match tx.open_table(META) {
            Ok(m) => Ok(m.get("next_chat").map_err(redb_err)?.map(|g| g.value()).unwrap_or(1)),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(1),
            Err(e) => Err(redb_err(e)),
        }
    }

    /// Everything written before this position is in redb.
    pub(crate) fn flushed(&self) -> Position {
        *self.flushed.lock()
    }

    /// A read transaction on redb (for history queries).
    pub(crate) fn read(&self) -> Result<redb::ReadTransaction> {
        self.db.read().begin_read().map_err(redb_err)
    }

    /// Holds off flushes while a rebuild runs.
    pub(crate) fn pause_flushes(&self) -> MutexGuard<'_, ()> {
        self.flush_lock.lock()
    }

    /// The index file path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Gives the index file's free pages back to the file system when they are at least a
    /// quarter of the file and at least [`COMPACT_MIN_FREE`] bytes, for an index file of at
    /// most [`COMPACT_MAX_FILE`]. redb keeps the pages its
    /// frequent non-durable commits free until a later durable commit can reuse them, so an
    /// index that grew quickly can be mostly free pages (measured: 1.08 MB, 0.31 MB after
    /// compaction, for the 1,000-put LangGraph bench of benches/README.md). Runs at close;
    /// skipped (`Ok(false)`) while a read transaction is alive. The index stays valid if this
    /// fails midway: redb compacts with its own crash-safe commits, and a damaged index is
    /// rebuilt from the log on open.
    pub(crate) fn compact_if_fragmented(&self) -> Result<bool> {
        guard("compacting the index", || self.compact_if_fragmented_unguarded())
    }

    fn compact_if_fragmented_unguarded(&self) -> Result<bool> {
        let _g = self.flush_lock.lock();
        let file_len = std::fs::metadata(&self.path).map_err(|e| Error::io("stat", &self.path, e))?.len();
        if file_len > COMPACT_MAX_FILE {
            return Ok(false);
        }
        let free = {
            let tx = self.db.read().begin_write().map_err(redb_err)?;
            let free = tx.stats().map_err(redb_err)?.fragmented_bytes();
            tx.abort().map_err(redb_err)?;
            free
        };
        if free < COMPACT_MIN_FREE || free.saturating_mul(4) < file_len {
            return Ok(false);
        }
        match self.db.write().compact() {
            Ok(_) => Ok(true),
            Err(redb::CompactionError::TransactionInProgress) => Ok(false),
            Err(e) => Err(redb_err(e)),
        }
    }
}

/// Free index pages below this are not worth a compaction at close.
const COMPACT_MIN_FREE: u64 = 256 << 10;

/// An index file above this is not examined at close: counting its free pages walks every
/// page of every table, which would make closing a large store slow. (A large index has
/// proportionally little slack: redb reuses freed pages after each durable commit.)
const COMPACT_MAX_FILE: u64 = 64 << 20;

fn remove_if_present(p: &Path) -> Result<()> {
    match std::fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove", p, e)),
    }
}

/// A new index file at `path` holding `batches`, committed durably.
fn build_at(path: &Path, cache_bytes: usize, batches: &[BatchEntries], applied: Applied) -> Result<Database> {
    let db = open_verified(path, cache_bytes, &Arc::new(Journal::default()))?;
    let mut tx = db.begin_write().map_err(redb_err)?;
    tx.set_quick_repair(true);
    for b in batches {
        apply_entries(&tx, &b.blobs, &b.records)?;
    }
    write_meta(&tx, applied)?;
    tx.commit().map_err(redb_err)?;
    Ok(db)
}

/// `e` as [`Error::Io`] of kind `StorageFull` when a write of redb's failed for lack of space
/// (`no_space`), else as it is.
fn no_space_said(no_space: &std::sync::atomic::AtomicBool, path: &Path, e: Error) -> Error {
    if !no_space.load(Ordering::Relaxed) || matches!(e, Error::Io { .. }) {
        return e;
    }
    let why = match e {
        Error::Index { message, .. } => message,
        other => other.to_string(),
    };
    Error::io("write", path, std::io::Error::new(std::io::ErrorKind::StorageFull, why))
}

/// Every difference between two indexes, table by table.
fn diff_tables(ours: &redb::ReadTransaction, theirs: &redb::ReadTransaction) -> Result<Vec<String>> {
    let mut out = Vec::new();
    diff_table(ours, theirs, BLOBS, &mut out)?;
    diff_table(ours, theirs, META, &mut out)?;
    history::diff_tables(ours, theirs, &mut out)?;
    Ok(out)
}

/// The differences in one table: entries only one side has, and entries whose values
/// differ. Both tables are walked together in key order (no copy of either is held).
pub(crate) fn diff_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    ours: &redb::ReadTransaction,
    theirs: &redb::ReadTransaction,
    def: TableDefinition<'_, K, V>,
    out: &mut Vec<String>,
) -> Result<()> {
    use redb::{ReadableTable, TableHandle};
    use std::cmp::Ordering;
    let name = def.name().to_string();
    let open = |tx: &redb::ReadTransaction| match tx.open_table(def) {
        Ok(t) => Ok(Some(t)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(redb_err(e)),
    };
    let (ta, tb) = (open(ours)?, open(theirs)?);
    let mut ia = match &ta {
        Some(t) => Some(t.iter().map_err(redb_err)?),
        None => None,
    };
    let mut ib = match &tb {
        Some(t) => Some(t.iter().map_err(redb_err)?),
        None => None,
    };
    type Row = (Vec<u8>, Vec<u8>);
    fn next<K: redb::Key + 'static, V: redb::Value + 'static>(
        it: &mut Option<redb::Range<'_, K, V>>,
    ) -> Result<Option<Row>> {
        let Some(it) = it else { return Ok(None) };
        match it.next() {
            None => Ok(None),
            Some(item) => {
                let (k, v) = item.map_err(redb_err)?;
                Ok(Some((
                    K::as_bytes(&k.value()).as_ref().to_vec(),
                    V::as_bytes(&v.value()).as_ref().to_vec(),
                )))
            }
        }
    }
    let mut found = 0u64;
    let mut say = |line: String| {
        found += 1;
        if found <= 20 {
            out.push(format!("table {name}: {line}"));
        }
    };
    let (mut a, mut b) = (next(&mut ia)?, next(&mut ib)?);
    loop {
        let order = match (&a, &b) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((ka, _)), Some((kb, _))) => K::compare(ka, kb),
        };
        match order {
            Ordering::Less => {
                if let Some((k, _)) = &a {
                    say(format!("entry {} is in the index but not in the log", hex(k)));
                }
                a = next(&mut ia)?;
            }
            Ordering::Greater => {
                if let Some((k, _)) = &b {
                    say(format!("entry {} is in the log but not in the index", hex(k)));
                }
                b = next(&mut ib)?;
            }
            Ordering::Equal => {
                if let (Some((k, v)), Some((_, w))) = (&a, &b)
                    && v != w
                {
                    say(format!("entry {}: the index holds {}, the log gives {}", hex(k), hex(v), hex(w)));
                }
                a = next(&mut ia)?;
                b = next(&mut ib)?;
            }
        }
    }
    if found > 20 {
        out.push(format!("table {name}: {} more differences", found - 20));
    }
    Ok(())
}

fn hex(b: &[u8]) -> String {
    const MAX: usize = 48;
    let mut s: String = b.iter().take(MAX).map(|x| format!("{x:02x}")).collect();
    if b.len() > MAX {
        s.push_str(&format!("… ({} bytes)", b.len()));
    }
    s
}

/// Messages listed per write transaction by [`list_body_texts_in`].
const BODY_TEXTS_BATCH: usize = 256;

/// [`Index::list_body_texts`] on the database `db` gives (taken briefly for each
/// transaction: `body` may read the index).
fn list_body_texts_in<D: std::ops::Deref<Target = Database>>(
    db: impl Fn() -> D,
    body: &dyn Fn(&[u8; 32]) -> Result<Blob>,
) -> Result<u64> {
    let mut done = 0;
    let mut from: MsgKey = (0, 0, 0);
    loop {
        let todo: Vec<(MsgKey, [u8; 32])> = {
            let tx = db().begin_read().map_err(redb_err)?;
            let t = match tx.open_table(BODY_TEXTS_TODO) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(done),
                Err(e) => return Err(redb_err(e)),
            };
            let mut v = Vec::new();
            for item in t.range(from..).map_err(redb_err)?.take(BODY_TEXTS_BATCH) {
                let (k, b) = item.map_err(redb_err)?;
                v.push((k.value(), b.value()));
            }
            v
        };
        let Some(&((c, s, r), _)) = todo.last() else { return Ok(done) };
        from = (c, s, r.saturating_add(1));
        let mut listed = Vec::with_capacity(todo.len());
        for (key, b) in todo {
            let texts = body(&b).and_then(|blob| {
                crate::record::body_texts(&blob)
                    .map_err(|e| Error::index_msg(format!("body blob {}: {e}", BlobId(b))))
            });
            match texts {
                Ok(t) => listed.push((key, t)),
                Err(e) => {
                    tracing::warn!(error = %e, chat = key.0, seq = key.1, "a message body's texts cannot be listed; read_context will not find them")
                }
            }
        }
        let mut tx = db().begin_write().map_err(redb_err)?;
        tx.set_durability(RedbDurability::None).map_err(redb_err)?;
        {
            let mut queued = tx.open_table(BODY_TEXTS_TODO).map_err(redb_err)?;
            let mut inline = tx.open_table(INLINE_TEXTS).map_err(redb_err)?;
            let mut by_chat = tx.open_table(CHAT_INLINE_TEXTS).map_err(redb_err)?;
            for (key, texts) in &listed {
                // Still queued: not taken by a deletion of its chat since it was read.
                if queued.remove(*key).map_err(redb_err)?.is_some() {
                    history::add_texts(&mut inline, &mut by_chat, *key, texts)?;
                    done += 1;
                }
            }
        }
        tx.commit().map_err(redb_err)?;
        if r == u64::MAX {
            return Ok(done);
        }
    }
}

fn write_meta(tx: &redb::WriteTransaction, a: Applied) -> Result<()> {
    let mut m = tx.open_table(META).map_err(redb_err)?;
    m.insert("applied_segment", a.position.segment).map_err(redb_err)?;
    m.insert("applied_offset", a.position.offset).map_err(redb_err)?;
    m.insert("next_txid", a.next_txid).map_err(redb_err)?;
    m.insert("applied_batch", a.batch_start).map_err(redb_err)?;
    m.insert("version", INDEX_VERSION).map_err(redb_err)?;
    Ok(())
}

/// The index entries a batch produces: each blob record's id and location, and a copy of
/// every history record to apply.
pub(crate) fn entries_of(segment: u64, batch: &BatchRef<'_>) -> BatchEntries {
    let mut out = BatchEntries::default();
    // Only a batch holding a grant needs its chats (decoding them costs a little).
    let chats = if batch.records.iter().any(|r| is_grant(r.kind)) {
        batch_chats(batch.records.iter().map(|r| (r.kind, r.payload)))
    } else {
        Vec::new()
    };
    for r in &batch.records {
        let loc = Location { segment, offset: r.offset, len: r.payload.len() as u32 };
        if r.kind == kind::BLOB || r.kind == kind::MANIFEST {
            if r.payload.len() >= 32 {
                let mut id = [0u8; 32];
                id.copy_from_slice(&r.payload[..32]);
                out.blobs.push((BlobId(id), loc));
            }
        } else if r.kind < kind::FIRST_OPTIONAL {
            let chats = if is_grant(r.kind) { chats.clone() } else { Vec::new() };
            out.records.push(PendingRecord { kind: r.kind, loc, payload: r.payload.to_vec(), chats });
        }
    }
    out
}

/// True when applying `records` may remove a grant (a chat's deletion takes the grants
/// bound to it).
fn revokes(records: &[PendingRecord]) -> bool {
    records.iter().any(|r| r.kind == crate::record::kind::DELETE)
}

fn apply_entries(
    tx: &redb::WriteTransaction,
    blobs: &[(BlobId, Location)],
    records: &[PendingRecord],
) -> Result<()> {
    if !blobs.is_empty() {
        let mut t = tx.open_table(BLOBS).map_err(redb_err)?;
        for (id, loc) in blobs {
            t.insert(id.as_bytes(), (loc.segment, loc.offset, loc.len)).map_err(redb_err)?;
        }
    }
    if !records.is_empty() {
        let mut h = HistoryIndex::open_write(tx)?;
        for r in records {
            h.apply(r)?;
        }
        h.finish()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code: a failed step fails the test")]

    use super::*;

    #[test]
    fn an_index_error_from_redb_keeps_the_redb_error_as_its_source() {
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = Index::open(dir.path(), 1 << 20).unwrap();
        let loc = Location { segment: 1, offset: 0, len: 3 };
        let entries = BatchEntries { blobs: vec![(BlobId::of(b"abc"), loc)], records: Vec::new() };
        index
            .apply_replayed(
                &[entries],
                Applied { position: Position::new(1, 40), next_txid: 1, batch_start: 0 },
            )
            .unwrap();
        // The blobs table opened with another value type: redb refuses it.
        let wrong: TableDefinition<'_, [u8; 32], u64> = TableDefinition::new("blobs");
        let tx = index.read().unwrap();
        let e = tx.open_table(wrong).map(|_| ()).map_err(redb_err).unwrap_err();
        let source = std::error::Error::source(&e).expect("the redb error is kept");
        assert!(source.downcast_ref::<redb::TableError>().is_some(), "{source:?}");
        // The message is as before: redb's words, and the advice to rebuild.
        assert_eq!(
            e.to_string(),
            format!(
                "index error: {source} (the index is derived from the log, which this does not damage: run \
                 `undertext check --rebuild` to rebuild it)"
            )
        );
        // Damage found without a redb error has no source.
        assert!(std::error::Error::source(&Error::index_msg("a value that does not decode")).is_none());
    }
}
