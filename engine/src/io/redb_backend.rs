//! The index's redb storage backend: redb's own file backend (locks, reads), with every write,
//! resize and sync passed through the seam first.

use std::fs::File;
use std::ops::Bound;
use std::path::PathBuf;

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

/// redb's file backend behind the seam.
#[derive(Debug)]
pub(crate) struct SeamBackend {
    inner: FileBackend,
    /// A second descriptor of the same file, for the seam (fault builds identify the file
    /// through it; the real I/O goes through `inner`).
    file: File,
    path: PathBuf,
}

impl SeamBackend {
    /// A backend writing to `file`, which was opened read-write at `path`.
    pub(crate) fn new(file: File, path: PathBuf) -> std::io::Result<Self> {
        let seam_file = file.try_clone()?;
        let inner = FileBackend::new(file).map_err(std::io::Error::other)?;
        Ok(SeamBackend { inner, file: seam_file, path })
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
        super::check(super::Op::SetLen, &self.path, Some(&self.file))?;
        #[cfg(feature = "fault-injection")]
        super::fault::record_set_len(&self.path, &self.file, len);
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        super::check(super::Op::Sync, &self.path, Some(&self.file))?;
        self.inner.sync_data()?;
        #[cfg(feature = "fault-injection")]
        super::fault::synced(&self.path, &self.file)?;
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        super::check(super::Op::Write, &self.path, Some(&self.file))?;
        #[cfg(feature = "fault-injection")]
        super::fault::check_space(&self.path, &self.file, offset, data.len() as u64)?;
        #[cfg(feature = "fault-injection")]
        super::fault::record_write(&self.path, &self.file, offset, data.len() as u64);
        self.inner.write(offset, data)
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
