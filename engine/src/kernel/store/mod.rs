//! The kernel of an open store: the log and its writer, the index and its indexer thread,
//! the directory lock, transactions and group commit ([`core`]), blobs and their grants,
//! gc, check, statistics and the read-only follower. It names nothing above it: the public
//! `Store` (in `api`) is built on a [`Kernel`] and the caches of the layers above.

pub(crate) mod blobs;
pub(crate) mod core;
mod erase;
pub(crate) mod gc;
mod indexer;
pub(crate) mod listed;
mod lock;
pub(crate) mod maintenance;
pub(crate) mod read_only;
pub(crate) mod remote;

pub use blobs::MAX_BLOB_LEN;
pub use gc::GcReport;
pub use maintenance::{CheckProblem, CheckReport, StoreStats};
pub use read_only::Refreshed;

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{Sender, channel};
use std::thread::JoinHandle;

use parking_lot::Mutex;

use crate::base::error::{Error, Result};
use crate::disk::index::{self, Applied, Index};
use crate::disk::log::reader::LogReader;
use crate::disk::log::recovery::{RecoverError, Recovered, recover};
use crate::disk::log::writer::{LogWriter, WriterConfig};
use crate::disk::log::{Layout, Position, format, log_dir};
use crate::kernel::options::Options;

/// An open store's kernel: its [`Core`](core::Core), and for a writer the indexer thread and
/// the directory lock, or for a read-only open its follower. Dropping it closes the store.
#[derive(Debug)]
pub(crate) struct Kernel {
    pub(crate) core: Arc<core::Core>,
    indexer: Mutex<Option<(Sender<()>, JoinHandle<()>)>>,
    /// The directory lock; taken out only by `gc`, which keeps it across its swap.
    lock: Mutex<Option<lock::DirLock>>,
    /// What open repaired or could not do (see `Store::open_warnings`).
    pub(crate) open_warnings: Vec<String>,
    /// How far a read-only store has replayed the log (`None`: opened for writing).
    pub(crate) follower: Option<read_only::Follower>,
}

impl Kernel {
    /// Opens the store in `path` for writing (see `Store::open`); returns the kernel and the
    /// next chat id the index knows of.
    pub(crate) fn open(path: &Path, opts: Options) -> Result<(Kernel, u64)> {
        let dir = path.to_path_buf();
        if opts.segment_size < 4096 {
            return Err(Error::InvalidArgument(format!(
                "segment_size: expected at least 4096 bytes, found {}",
                opts.segment_size
            )));
        }
        opts.check_previews()?;
        if !dir.join(lock::LOCK_FILE).exists() && !dir.join("log").exists() {
            if !opts.create_if_missing {
                return Err(Error::NotFound { what: format!("store at {}", dir.display()) });
            }
            std::fs::create_dir_all(&dir).map_err(|e| Error::io("create_dir", &dir, e))?;
        }
        let lock = lock::acquire(&dir)?;
        gc::finish_swap(&dir)?;
        lock::refuse_odd_entries(&dir)?;
        let logd = log_dir(&dir);
        crate::disk::log::recovery::precheck(&logd)?;
        let (index, applied) = match Index::open(&dir, opts.index_cache_bytes, opts.verify_index_on_open) {
            // Opening the index had to write (redb repairing an interrupted commit) and the
            // disk is full: read the log alone.
            Err(e) if crate::disk::log::recovery::is_no_space(&e) => {
                drop(lock);
                return read_only::after_disk_full(&dir, opts, &e);
            }
            r => r?,
        };
        let from_batch = Some((applied.batch_start, applied.next_txid.saturating_sub(1)));
        let (rec, replayed) =
            replay(&logd, applied.position, from_batch, layout(&opts)).map_err(|e| match e {
                // The index is derived, but what it records is what the log held: a log
                // that no longer reaches it has lost data, and opening would hide the loss.
                RecoverError::IndexAhead { log_end, why } => Error::Corrupt {
                    segment: log_end.segment,
                    offset: log_end.offset,
                    reason: format!(
                        "log data is missing: {why}. The store is not opened, so that nothing is lost \
                         silently; restore the missing log files, or remove {} to give the missing data \
                         up (the index is then rebuilt from the log that remains)",
                        dir.join(crate::disk::index::INDEX_FILE).display()
                    ),
                },
                RecoverError::Other(e) => e,
            })?;
        let now = Applied {
            position: Position::new(rec.segment, rec.end),
            next_txid: applied.next_txid.max(rec.next_txid),
            batch_start: rec.last_batch,
        };
        let caught_up = if !replayed.is_empty() || now != applied {
            index.apply_replayed(&replayed, now)
        } else {
            Ok(())
        };
        if let Err(e) = caught_up {
            if !index.ran_out_of_space() {
                return Err(e);
            }
            // The index cannot catch up with the log on a full disk: give it up as found and
            // read the log alone.
            drop(rec);
            index.abandon()?;
            drop(lock);
            return read_only::after_disk_full(&dir, opts, &e);
        }
        index.opened();
        lock::also_held_by(lock.key(), index.descriptors());
        index.mem.write().set_applied(now);
        let cfg = WriterConfig { dir: logd.clone(), layout: layout(&opts), durability: opts.durability };
        let open_warnings = rec.warnings;
        let log =
            Arc::new(LogWriter::new(cfg, rec.segment, rec.file, rec.end, now.next_txid, rec.prealloc_to));
        let index = Arc::new(index);
        let (tx, rx) = channel();
        let handle = {
            let (index, log, opts) = (index.clone(), log.clone(), opts.clone());
            std::thread::Builder::new()
                .name("undertext-indexer".into())
                .spawn(move || indexer::run(index, log, opts, rx))
                .map_err(|e| Error::io("spawn indexer thread", &dir, e))?
        };
        let next_chat = index.next_chat()?;
        let reader = LogReader::new(logd, opts.max_mapped_segments);
        let opts_cache = opts.chunk_cache_bytes;
        let core = Arc::new(core::Core {
            dir,
            opts,
            log,
            reader,
            index,
            blob_bodies_read: Default::default(),
            recent_manifests: Default::default(),
            chunk_cache: crate::base::blob::cache::ChunkCache::new(opts_cache),
            grants: Default::default(),
            listed: Default::default(),
            read_only: None,
            remote: Default::default(),
        });
        let kernel = Kernel {
            core,
            indexer: Mutex::new(Some((tx, handle))),
            lock: Mutex::new(Some(lock)),
            open_warnings,
            follower: None,
        };
        Ok((kernel, next_chat))
    }

    /// Whether the store is read-only (opened so, or given so by a full disk at open).
    pub(crate) fn is_read_only(&self) -> bool {
        self.follower.is_some()
    }
}

type Replayed = Vec<index::BatchEntries>;

/// How the log sizes and creates segments under `opts`.
fn layout(opts: &Options) -> Layout {
    Layout { segment_size: opts.segment_size, preallocate: opts.preallocate }
}

fn replay(
    logd: &Path,
    from: Position,
    from_batch: Option<(u64, u64)>,
    layout: Layout,
) -> Result<(Recovered, Replayed), RecoverError> {
    let mut replayed = Vec::new();
    let rec = recover(logd, from, from_batch, layout, |seg, b: &format::BatchRef<'_>| {
        replayed.push(index::entries_of(seg, b)?);
        Ok(())
    })?;
    Ok((rec, replayed))
}

impl Drop for Kernel {
    fn drop(&mut self) {
        if self.core.log.is_forked() {
            // A fork child's copy of the store (see `io::process`): its indexer thread does not
            // exist here (joining it would wait forever), and closing would write the parent's
            // files (redb's header, the log's trimmed tail). Leak it all; the process's exit
            // closes the descriptors, which releases nothing the parent holds.
            std::mem::forget(self.core.clone());
            std::mem::forget(self.indexer.lock().take());
            if let Some(lock) = self.lock.lock().take() {
                // This process's copies of the descriptors holding the store's locks are
                // closed, so that it can open the store once the parent has closed it.
                lock::release_forked(lock.key());
                std::mem::forget(lock);
            }
            return;
        }
        if self.follower.is_some() {
            // A read-only store has no indexer, and writes nothing, not even at close.
            return;
        }
        if let Some((tx, handle)) = self.indexer.lock().take() {
            let _ = tx.send(());
            let _ = handle.join();
        }
        // The last handle is gone and the index is durable: give its free pages back, and
        // the active segment's preallocated zeros.
        if let Err(e) = self.core.index.compact_if_fragmented() {
            tracing::warn!(error = %e, "compacting the index at close failed; it stays usable");
        }
        if let Err(e) = self.core.log.trim_active() {
            tracing::warn!(error = %e, "cutting the log's preallocated tail at close failed; it stays usable");
        }
        // Closed cleanly: redb closes the file when `core`, the first field, drops, and the
        // file is then sealed, while the directory lock (a later field) is still held. Not when
        // something else still holds the core: the index would close after the lock's release.
        if Arc::strong_count(&self.core) == 1 {
            self.core.index.seal_at_close();
        }
    }
}

/// The directory of a store's search index, beside its log and `index.redb`.
pub(crate) const SEARCH_DIR: &str = "search";
