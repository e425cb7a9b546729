//! [`Store`]: the open store, its writer sequencer and its readers.

pub(crate) mod blobs;
pub(crate) mod core;
mod gc;
mod indexer;
mod lock;
mod maintenance;
mod read_only;
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

use crate::error::{Error, Result};
use crate::index::{self, Applied, Index};
use crate::log::reader::LogReader;
use crate::log::recovery::{RecoverError, Recovered, recover};
use crate::log::writer::{LogWriter, WriterConfig};
use crate::log::{Layout, Position, format, log_dir};
use crate::options::Options;

/// An open Undertext store: a directory holding the log (`log/*.seg`), the derived index
/// (`index.redb`) and a lock file. Cheap to clone; all clones share one store.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use undertext::{Store, Options};
/// let store = Store::open(dir.path(), Options::default())?;
/// let id = store.put_blob("o", b"$ cargo test\n...\ntest result: ok. 42 passed")?;
/// assert_eq!(store.put_blob("o", b"$ cargo test\n...\ntest result: ok. 42 passed")?, id); // stored once
/// assert_eq!(&*store.get_blob("o", &id)?, b"$ cargo test\n...\ntest result: ok. 42 passed");
/// # Ok::<(), undertext::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) core: Arc<core::Core>,
    pub(crate) chats: crate::history::ChatCache,
    pub(crate) archives: crate::archive::ArchiveCache,
    pub(crate) worker: Mutex<Option<Arc<crate::worker::Shared>>>,
    indexer: Mutex<Option<(Sender<()>, JoinHandle<()>)>>,
    /// The directory lock; taken out only by `gc`, which keeps it across its swap.
    lock: Mutex<Option<lock::DirLock>>,
    /// What open repaired or could not do (see [`Store::open_warnings`]).
    open_warnings: Vec<String>,
    /// How far a read-only store has replayed the log (`None`: opened for writing).
    follower: Option<read_only::Follower>,
}

impl Store {
    /// Opens the store in `path`, creating it if `opts.create_if_missing`.
    ///
    /// Takes an exclusive lock: another opener gets [`Error::Locked`] at once. Replays the
    /// log from where the index last became durable, cuts a torn tail (reported through
    /// `tracing` and [`Store::open_warnings`]), and refuses corruption before the tail with
    /// [`Error::Corrupt`]. A log that is not whole — a segment file missing, a sealed segment
    /// emptied or cut short, a gap in transaction ids, or a log that ends before the position
    /// the index records — is refused with [`Error::Corrupt`] too, never opened short. Store
    /// entries that are links or not regular files (`LOCK`, `index.redb`, `log/`, segments)
    /// are refused, never followed.
    ///
    /// On a full disk, when open must write to bring the index up to date with the log (after
    /// a crash), it gives the store read-only instead (as [`Store::open_read_only`] does; the
    /// first of [`Store::open_warnings`] says why): every batch of the log is readable, writes
    /// fail with [`Error::ReadOnly`] saying the disk is full, and the files are left as found.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Store> {
        if let Some(url) =
            path.as_ref().to_str().filter(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
        {
            #[cfg(feature = "fleet")]
            return Store::open_fleet(url, opts);
            #[cfg(not(feature = "fleet"))]
            return Err(Error::InvalidArgument(format!(
                "{}: fleet mode needs undertext built with the cargo feature `fleet`",
                crate::error::hide_password(url)
            )));
        }
        let dir = path.as_ref().to_path_buf();
        if opts.segment_size < 4096 {
            return Err(Error::InvalidArgument(format!(
                "segment_size: expected at least 4096 bytes, found {}",
                opts.segment_size
            )));
        }
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
        crate::log::recovery::precheck(&logd)?;
        let (index, applied) = match Index::open(&dir, opts.index_cache_bytes) {
            // Opening the index had to write (redb repairing an interrupted commit) and the
            // disk is full: read the log alone.
            Err(e) if crate::log::recovery::is_no_space(&e) => {
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
                        dir.join(crate::index::INDEX_FILE).display()
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
        index.mem.write().set_applied(now);
        let cfg = WriterConfig { dir: logd.clone(), layout: layout(&opts), durability: opts.durability };
        let open_warnings = rec.warnings;
        let log = Arc::new(LogWriter::new(cfg, rec.segment, rec.file, rec.end, now.next_txid));
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
            chunk_cache: crate::blob::cache::ChunkCache::new(opts_cache),
            read_only: None,
            remote: Default::default(),
        });
        let inner = Inner {
            chats: crate::history::ChatCache::new(core.clone(), next_chat),
            archives: crate::archive::ArchiveCache::default(),
            worker: Mutex::new(None),
            core,
            indexer: Mutex::new(Some((tx, handle))),
            lock: Mutex::new(Some(lock)),
            open_warnings,
            follower: None,
        };
        Ok(Store { inner: Arc::new(inner) })
    }

    /// What this open repaired or could not do, one line each: a torn tail cut (a write a
    /// crash cut off, never acknowledged), a segment header torn at creation rewritten, the
    /// log's preallocation skipped for lack of space. Empty after a clean close. Also logged
    /// through `tracing`; the CLI prints them to stderr.
    pub fn open_warnings(&self) -> &[String] {
        &self.inner.open_warnings
    }

    /// The store directory.
    pub fn path(&self) -> &Path {
        &self.inner.core.dir
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &Options {
        &self.inner.core.opts
    }

    /// Closes the store: stops the indexer and makes the index durable, so the next open
    /// replays nothing. Dropping the last handle does the same, ignoring errors. When the
    /// last handle goes, an index file (of at most 64 MiB) that is at least a quarter free
    /// pages is compacted, and the active log segment is cut to its data (the next open
    /// preallocates again).
    pub fn close(self) -> Result<()> {
        self.sync()?;
        Ok(())
    }
}

impl Store {
    /// Fleet mode: connects to the PostgreSQL catalog at `url` and opens a local replica of
    /// it (durability is PostgreSQL's commit, so the replica syncs nothing).
    #[cfg(feature = "fleet")]
    fn open_fleet(url: &str, opts: Options) -> Result<Store> {
        let u = crate::fleet::FleetUrl::parse(url)?;
        let fleet = Arc::new(crate::fleet::Fleet::connect(&u)?);
        let local = Options {
            durability: crate::options::Durability::None,
            create_if_missing: true,
            preallocate: false,
            ..opts
        };
        let store = Store::open(fleet.replica_dir(), local)?;
        let remote: Arc<dyn remote::Remote> = fleet;
        store
            .inner
            .core
            .remote
            .set(remote)
            .map_err(|_| Error::InvalidArgument("fleet: the replica already has a remote".into()))?;
        Ok(store)
    }
}

/// `path` as a fleet URL (`postgres://…`), if it is one.
fn fleet_url(path: &Path) -> Option<&str> {
    path.to_str().filter(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
}

/// The error of a directory-only operation (`gc`, read-only opens, index rebuilds) given a
/// fleet URL: it would otherwise take the URL for a directory name.
pub(crate) fn refuse_fleet_url(path: &Path, what: &str) -> Result<()> {
    match fleet_url(path) {
        Some(url) => Err(Error::InvalidArgument(format!(
            "{what} works on a store directory, found the fleet URL {} (fleet stores are opened with \
             Store::open; their {what} is not built yet)",
            crate::error::hide_password(url)
        ))),
        None => Ok(()),
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
        replayed.push(index::entries_of(seg, b));
        Ok(())
    })?;
    Ok((rec, replayed))
}

impl Drop for Inner {
    fn drop(&mut self) {
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
    }
}
