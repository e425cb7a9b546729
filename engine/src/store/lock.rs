//! The exclusive lock on a store directory: one process (and one handle) at a time.
//!
//! Across processes: `flock` on `LOCK`, which also holds the holder's pid. Within this
//! process: a registry of open store directories, so a second handle is refused at once.
//!
//! One subtlety: `flock` locks belong to the open file description, and a `fork` (any
//! `Command::spawn` in the process) duplicates every descriptor until the child's `exec`
//! closes it. A store closed here while another thread forks can therefore look locked for
//! a few microseconds — by our own pid. Only in that case (the pid in `LOCK` is ours and the
//! registry says no handle is open) is the lock retried, for up to 2 s; another process's
//! lock is reported at once.

use std::collections::HashSet;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Name of the lock file inside the store directory.
pub(crate) const LOCK_FILE: &str = "LOCK";

/// Store directories open in this process.
static OPEN: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// Holds the lock for as long as it lives; the OS releases it when the process dies.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
    key: PathBuf,
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let mut g = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(set) = g.as_mut() {
            set.remove(&self.key);
        }
    }
}

fn read_pid(file: &mut File) -> u32 {
    let mut text = String::new();
    let _ = file.seek(SeekFrom::Start(0));
    let _ = file.read_to_string(&mut text);
    text.trim().parse().unwrap_or(0)
}

/// Takes the lock without waiting. A holder elsewhere gives `Error::Locked` with its pid.
pub(crate) fn acquire(dir: &Path) -> Result<DirLock> {
    let key = dir.canonicalize().map_err(|e| Error::io("canonicalize", dir, e))?;
    let me = std::process::id();
    {
        let mut g = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        let set = g.get_or_insert_with(HashSet::new);
        if !set.insert(key.clone()) {
            return Err(Error::Locked { pid: me });
        }
    }
    // From here on, an error must take the directory out of the registry again.
    let unregister = |e: Error| {
        let mut g = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(set) = g.as_mut() {
            set.remove(&key);
        }
        e
    };
    let path = dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| unregister(Error::io("open", &path, e)))?;
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(TryLockError::WouldBlock) => {
                let pid = read_pid(&mut file);
                // Our own pid with no handle open here: a forked child still holds a copy
                // of a descriptor we closed; it goes away at the child's exec.
                if pid != me || Instant::now() >= deadline {
                    return Err(unregister(Error::Locked { pid }));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(TryLockError::Error(e)) => return Err(unregister(Error::io("lock", &path, e))),
        }
    }
    let write_pid = |f: &mut File| -> std::io::Result<()> {
        f.set_len(0)?;
        f.seek(SeekFrom::Start(0))?;
        write!(f, "{me}")
    };
    write_pid(&mut file).map_err(|e| unregister(Error::io("write", &path, e)))?;
    Ok(DirLock { _file: file, key })
}
