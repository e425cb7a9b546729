//! The exclusive lock on a store directory: one process (and one handle) at a time.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::error::{Error, Result};

/// Name of the lock file inside the store directory.
pub(crate) const LOCK_FILE: &str = "LOCK";

/// Holds the lock for as long as it lives; the OS releases it when the process dies.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
}

/// Takes the lock without waiting. A holder elsewhere gives `Error::Locked` with its pid.
pub(crate) fn acquire(dir: &Path) -> Result<DirLock> {
    let path = dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| Error::io("open", &path, e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let pid = text.trim().parse().unwrap_or(0);
            return Err(Error::Locked { pid });
        }
        Err(TryLockError::Error(e)) => return Err(Error::io("lock", &path, e)),
    }
    let write_pid = |f: &mut File| -> std::io::Result<()> {
        f.set_len(0)?;
        f.seek(SeekFrom::Start(0))?;
        write!(f, "{}", std::process::id())
    };
    write_pid(&mut file).map_err(|e| Error::io("write", &path, e))?;
    Ok(DirLock { _file: file })
}
