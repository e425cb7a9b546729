//! Opening the index file: verification, a layout version check, the in-memory index of a
//! read-only open, and giving the file back as found when the disk is full.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};
use redb::{Database, ReadableDatabase};

use super::backend::{Journal, SeamBackend};
use super::seal::{self, IndexAtOpen};
use super::{Applied, INDEX_FILE, INDEX_VERSION, Index, META, Memtable, guard, redb_err};
use crate::base::error::{Error, Result};
use crate::base::io;
use crate::disk::log::Position;

/// The error for an index file that is damaged: what failed, where.
fn damaged(path: &Path, what: &str, e: Error) -> Error {
    let (e, source) = match e {
        Error::Index { message, source } => (message, source),
        other => (other.to_string(), None),
    };
    Error::Index { message: format!("{} is damaged: {what}: {e}", path.display()), source }
}

/// Opens (or creates) the redb file at `path` through the file seam, and verifies every page
/// of it against redb's checksums (`verify`). Also says how the file is trusted: created (or
/// created anew), verified, or neither.
///
/// A file redb cannot open at all (not a redb file: its header is unreadable) is what an
/// interrupted creation leaves (a crash, a failed write of the first pages): it holds nothing
/// the log does not, so it is deleted and created anew, and the log replay fills it. A file
/// that opens but whose pages fail verification is not something a crash leaves (redb's
/// commits are crash-safe, and redb has already repaired an interrupted one): that is
/// damage, and it is reported.
pub(super) fn open_verified(
    path: &Path,
    cache_bytes: usize,
    journal: &Arc<Journal>,
    verify: bool,
) -> Result<(Database, IndexAtOpen)> {
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
    let (mut db, len, created) = match create() {
        Ok((db, len)) => (db, len, false),
        Err(e @ Error::Io { .. }) => return Err(e),
        Err(e) => {
            tracing::warn!(error = %e, path = %path.display(), "index unreadable; rebuilding it from the log");
            io::remove_file(path).map_err(|e| Error::io("remove", path, e))?;
            let (db, len) = create()?;
            (db, len, true)
        }
    };
    if len == 0 || created {
        return Ok((db, IndexAtOpen::Created));
    }
    if !verify {
        // `Options::verify_index_on_open` off, or the file sealed: redb has verified what it
        // repaired, if it had to; `Store::check` finds damage elsewhere.
        return Ok((db, IndexAtOpen::Unverified));
    }
    match guard("verifying the index", || db.check_integrity().map_err(redb_err)) {
        Ok(true) => Ok((db, IndexAtOpen::Verified)),
        Ok(false) => {
            // redb found a commit that did not verify and went back to the last one that does
            // (or rebuilt its free-page map): the index reaches less far, and the log replay
            // that follows catches it up.
            tracing::warn!(path = %path.display(), "index repaired by redb: it went back to its last intact commit");
            Ok((db, IndexAtOpen::Verified))
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
    /// Every page is verified here (redb checks its page checksums only when asked), so that
    /// no later read decodes a damaged page: a flipped bit in a chat's length or a message's
    /// location would otherwise be believed. A file this store's last clean close sealed, and
    /// that nothing has written since, is trusted without reading it (see [`super::seal`]).
    ///
    /// A write that fails for lack of space (redb repairing an interrupted commit, a layout
    /// change clearing the tables) is returned as [`Error::Io`] of kind `StorageFull`.
    pub(crate) fn open(store_dir: &Path, cache_bytes: usize, verify: bool) -> Result<(Index, Applied)> {
        let path = store_dir.join(INDEX_FILE);
        // One `stat` before redb opens the file (its open may write): what to put back if the
        // open fails for lack of space, and whether the seal holds.
        let meta = std::fs::symlink_metadata(&path).ok();
        let journal = Arc::new(Journal::recording(meta.as_ref().map(|m| m.len())));
        let sealed = seal::holds(&path, meta.as_ref());
        let said = |e: Error| no_space_said(&journal.no_space, &path, e);
        let (db, at_open) = match open_verified(&path, cache_bytes, &journal, verify && !sealed) {
            Ok(x) => x,
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
        // The store directory's entries (`LOCK`, `log/`, `index.redb`) must survive a power cut:
        // the directory is synced when this open created the index file (a new store, or an
        // index made anew). An index that was there was already synced by the open that made
        // it (an fsync of the directory costs milliseconds: issue 19's reopen).
        if at_open == IndexAtOpen::Created {
            io::sync_dir(store_dir).map_err(|e| Error::io("fsync", store_dir, e))?;
        }
        let at_open =
            if sealed && at_open == IndexAtOpen::Unverified { IndexAtOpen::Sealed } else { at_open };
        let trusted = at_open != IndexAtOpen::Unverified;
        let index = Index {
            db: RwLock::new(db),
            path: path.clone(),
            cache_bytes,
            mem: RwLock::new(Memtable::default()),
            flush_lock: Mutex::new(()),
            flushed: Mutex::new(Position::new(0, 0)),
            journal: journal.clone(),
            grants_epoch: AtomicU64::new(0),
            in_memory: false,
            aside: Default::default(),
            opener: crate::base::io::Opener::here(),
            changed: Default::default(),
            at_open,
            sealer: seal::Sealer::new(Some(path.clone()), trusted, journal.clone()),
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
            in_memory: true,
            aside: Default::default(),
            opener: crate::base::io::Opener::here(),
            changed: Default::default(),
            at_open: IndexAtOpen::InMemory,
            sealer: seal::Sealer::new(None, false, Arc::new(Journal::default())),
        })
    }

    /// How the file was trusted at open.
    pub(crate) fn at_open(&self) -> IndexAtOpen {
        self.at_open
    }

    /// The store closes cleanly, everything written: the file is sealed once redb has closed
    /// it, if this open trusted it (see [`super::seal`]).
    pub(crate) fn seal_at_close(&self) {
        self.sealer.arm();
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
        let Some(meta) = super::query::table(&tx, META)? else { return Ok(None) };
        let get = |k: &str| -> Result<Option<u64>> { Ok(meta.get(k).map_err(redb_err)?.map(|v| v.value())) };
        let (Some(seg), Some(off), Some(txid), Some(ver)) =
            (get("applied_segment")?, get("applied_offset")?, get("next_txid")?, get("version")?)
        else {
            return Ok(None);
        };
        let batch_start = get("applied_batch")?.unwrap_or(0);
        Ok(Some((Applied { position: Position::new(seg, off), next_txid: txid, batch_start }, ver)))
    }
}

/// `e` as [`Error::Io`] of kind `StorageFull` when a write of redb's failed for lack of space
/// (`no_space`), else as it is.
pub(super) fn no_space_said(no_space: &std::sync::atomic::AtomicBool, path: &Path, e: Error) -> Error {
    if !no_space.load(Ordering::Relaxed) || matches!(e, Error::Io { .. }) {
        return e;
    }
    let why = match e {
        Error::Index { message, .. } => message,
        other => other.to_string(),
    };
    let why = format!(
        "{why} (a write of the index failed: the disk is full; reopen the store once space is freed)"
    );
    Error::io("write", path, std::io::Error::new(std::io::ErrorKind::StorageFull, why))
}
