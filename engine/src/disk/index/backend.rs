//! The index's redb storage backend: redb's own file backend (locks, reads), with every write,
//! resize and sync passed through the seam first.

use std::fs::File;
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

/// What the index's writes did while the store was opening, so that an open that cannot
/// finish (a full disk) can put the file back as it found it.
#[derive(Debug, Default)]
pub(crate) struct Journal {
    /// Set when a write, resize or sync failed because the disk (or the quota) is full: redb
    /// reports it only as text.
    pub(crate) no_space: AtomicBool,
    /// Set when any write, resize or sync of the file failed: the file is not sealed at close
    /// (see `seal`), so the next open verifies it.
    pub(crate) failed: AtomicBool,
    /// While `Some`: the file's length when it was opened (`None`: there was no file), and
    /// the bytes each write replaced (offset, old bytes), in order.
    undo: Mutex<Option<(Option<u64>, Vec<Replaced>)>>,
    /// The descriptors the backend holds on the file (redb locks it through them): a fork
    /// child closes its copies when it gives up the parent's store (see `store::lock`).
    pub(crate) fds: Mutex<Vec<std::os::fd::RawFd>>,
}

/// Bytes a write replaced: where, and what was there.
type Replaced = (u64, Vec<u8>);

impl Journal {
    /// A journal that keeps what each write replaces in a file of `found` bytes (`None`: the
    /// file does not exist yet).
    pub(crate) fn recording(found: Option<u64>) -> Journal {
        Journal {
            no_space: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            undo: Mutex::new(Some((found, Vec::new()))),
            fds: Mutex::new(Vec::new()),
        }
    }

    /// Stops keeping what writes replace (the open finished) and frees what was kept.
    pub(crate) fn stop(&self) {
        *self.undo.lock() = None;
    }

    /// Puts the file at `path` back as it was found: removes it if there was none; else cuts
    /// it to the length it had and writes back every byte the writes replaced before that,
    /// newest first. Removing or cutting a file and overwriting allocated blocks need no
    /// space. Stops recording.
    pub(crate) fn undo(&self, path: &std::path::Path) -> std::io::Result<()> {
        let Some((found, writes)) = self.undo.lock().take() else { return Ok(()) };
        let Some(len) = found else { return crate::base::io::remove_file(path) };
        let file = crate::base::io::open(std::fs::OpenOptions::new().write(true), path)?;
        let file = &file;
        crate::base::io::set_len(file, len, path)?;
        for (at, old) in writes.iter().rev() {
            crate::base::io::check(crate::base::io::Op::Write, path, Some(file))?;
            #[cfg(feature = "fault-injection")]
            crate::base::io::fault::record_write(path, file, *at, old.len() as u64);
            file.write_all_at(old, *at)?;
        }
        crate::base::io::sync_all(file, path)
    }
}

/// redb's file backend behind the seam.
#[derive(Debug)]
pub(crate) struct SeamBackend {
    inner: FileBackend,
    /// A second descriptor of the same file, for the seam (fault builds identify the file
    /// through it; the real I/O goes through `inner`).
    file: File,
    path: PathBuf,
    journal: Arc<Journal>,
    /// A fork child's copy of the backend refuses every write (see `io::process`).
    opener: crate::base::io::Opener,
}

impl SeamBackend {
    /// A backend writing to `file`, which was opened read-write at `path`, noting its writes
    /// in `journal`.
    pub(crate) fn new(file: File, path: PathBuf, journal: Arc<Journal>) -> std::io::Result<Self> {
        use std::os::fd::AsRawFd;
        let seam_file = file.try_clone()?;
        journal.fds.lock().extend([file.as_raw_fd(), seam_file.as_raw_fd()]);
        let inner = FileBackend::new(file).map_err(std::io::Error::other)?;
        Ok(SeamBackend { inner, file: seam_file, path, journal, opener: crate::base::io::Opener::here() })
    }

    /// Keeps the bytes a write of `len` bytes at `offset` replaces, while the journal records.
    fn keep_old(&self, offset: u64, len: usize) -> Result<(), std::io::Error> {
        let mut undo = self.journal.undo.lock();
        let Some((found, writes)) = undo.as_mut() else { return Ok(()) };
        // Past the length found, the undo cuts the file: nothing there to keep (and writing
        // zeros back into a hole would need space).
        let end = (offset + len as u64).min(found.unwrap_or(0));
        if end > offset {
            let mut old = vec![0u8; (end - offset) as usize];
            self.file.read_exact_at(&mut old, offset)?;
            writes.push((offset, old));
        }
        Ok(())
    }

    fn noted(&self, r: Result<(), std::io::Error>) -> Result<(), std::io::Error> {
        if r.is_err() {
            self.journal.failed.store(true, Ordering::Relaxed);
        }
        if let Err(e) = &r
            && matches!(e.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded)
        {
            self.journal.no_space.store(true, Ordering::Relaxed);
        }
        r
    }
}

impl StorageBackend for SeamBackend {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.noted((|| {
            self.opener.refuse_io()?;
            crate::base::io::check(crate::base::io::Op::SetLen, &self.path, Some(&self.file))?;
            #[cfg(feature = "fault-injection")]
            crate::base::io::fault::record_set_len(&self.path, &self.file, len);
            self.inner.set_len(len)
        })())
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.noted((|| {
            self.opener.refuse_io()?;
            crate::base::io::check(crate::base::io::Op::Sync, &self.path, Some(&self.file))?;
            self.inner.sync_data()?;
            #[cfg(feature = "fault-injection")]
            crate::base::io::fault::synced(&self.path, &self.file)?;
            Ok(())
        })())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.noted((|| {
            self.opener.refuse_io()?;
            crate::base::io::check(crate::base::io::Op::Write, &self.path, Some(&self.file))?;
            #[cfg(feature = "fault-injection")]
            crate::base::io::fault::check_space(&self.path, &self.file, offset, data.len() as u64)?;
            #[cfg(feature = "fault-injection")]
            crate::base::io::fault::record_write(&self.path, &self.file, offset, data.len() as u64);
            self.keep_old(offset, data.len())?;
            self.inner.write(offset, data)
        })())
    }

    fn close(&self) -> Result<(), std::io::Error> {
        self.inner.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}
