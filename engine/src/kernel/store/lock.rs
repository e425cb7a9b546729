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

use std::collections::HashMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::base::error::{Error, Result};

/// Name of the lock file inside the store directory.
pub(crate) const LOCK_FILE: &str = "LOCK";

/// Store directories open in this process: who opened each (a fork child inherits the map,
/// and the parent's entries are not its own) and the descriptors that hold the store's locks
/// (`LOCK`'s, redb's on `index.redb`).
static OPEN: Mutex<Option<HashMap<PathBuf, Holder>>> = Mutex::new(None);

#[derive(Debug)]
struct Holder {
    pid: u32,
    fds: Vec<RawFd>,
}

/// In a fork child: gives up the parent's store in `key` — closes this process's copies of
/// the descriptors that hold its locks, so that once the parent closes the store, this
/// process can open it. The objects owning them are leaked (a fork child never drops or uses
/// the parent's store: see `io::process`), so nothing closes or uses them again.
fn release_inherited(map: &mut HashMap<PathBuf, Holder>, key: &Path, me: u32) {
    if let Some(h) = map.get(key).filter(|h| h.pid != me) {
        for &fd in &h.fds {
            // SAFETY: `fd` is this process's copy of a descriptor of the parent's store, whose
            // owning objects are leaked in this process and never used again (every call on
            // them is refused as `Forked` before it reaches a file); closing it only drops
            // this process's reference to the lock.
            unsafe { libc::close(fd) };
        }
        map.remove(key);
    }
}

/// In a fork child, gives up the parent's store in `key` (see [`release_inherited`]).
pub(crate) fn release_forked(key: &Path) {
    let mut g = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(map) = g.as_mut() {
        release_inherited(map, key, std::process::id());
    }
}

/// Notes that the store in `key` also holds its locks through `fds` (redb's on the index).
pub(crate) fn also_held_by(key: &Path, fds: Vec<RawFd>) {
    let mut g = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(h) = g.as_mut().and_then(|m| m.get_mut(key)) {
        h.fds.extend(fds);
    }
}

/// Holds the lock for as long as it lives; the OS releases it when the process dies.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
    key: PathBuf,
}

impl DirLock {
    /// The canonical store directory the lock is registered under.
    pub(crate) fn key(&self) -> &Path {
        &self.key
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let mut g = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(map) = g.as_mut()
            && map.get(&self.key).is_some_and(|h| h.pid == std::process::id())
        {
            map.remove(&self.key);
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
        let map = g.get_or_insert_with(HashMap::new);
        // A fork child's copy of the parent's entry: the parent holds the store (the lock
        // below says so with its pid), not this process.
        release_inherited(map, &key, me);
        if map.contains_key(&key) {
            return Err(Error::Locked { pid: me });
        }
        map.insert(key.clone(), Holder { pid: me, fds: Vec::new() });
    }
    // From here on, an error must take the directory out of the registry again.
    let unregister = |e: Error| {
        let mut g = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(map) = g.as_mut() {
            map.remove(&key);
        }
        e
    };
    let path = dir.join(LOCK_FILE);
    // Never through a link: a `LOCK` pointing elsewhere would have that file overwritten
    // with a pid. And only a regular file: a FIFO or a device is refused before any write.
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| unregister(Error::io("open", &path, not_a_link(e, &path))))?;
    let meta = file.metadata().map_err(|e| unregister(Error::io("stat", &path, e)))?;
    if !meta.is_file() {
        let found = crate::disk::log::continuity::kind_of(&meta);
        return Err(unregister(Error::io(
            "open",
            &path,
            std::io::Error::other(format!("expected a regular file, found {found}")),
        )));
    }
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
    // Written over the old pid in one write (padded with spaces to the old length, so a
    // concurrent reader sees the old pid or the new one, never a mix), then cut to length: no
    // block is freed and allocated again, so this works on a full disk.
    let write_pid = |f: &mut File| -> std::io::Result<()> {
        let old_len = (f.metadata()?.len() as usize).min(32);
        let pid = me.to_string();
        let text = format!("{pid:<old_len$}");
        f.write_all_at(text.as_bytes(), 0)?;
        f.set_len(pid.len() as u64)
    };
    write_pid(&mut file).map_err(|e| unregister(Error::io("write", &path, e)))?;
    also_held_by(&key, vec![file.as_raw_fd()]);
    Ok(DirLock { _file: file, key })
}

/// `ELOOP` from `O_NOFOLLOW` means "a symbolic link": say so.
fn not_a_link(e: std::io::Error, path: &Path) -> std::io::Error {
    if e.raw_os_error() == Some(libc::ELOOP)
        && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
    {
        return std::io::Error::new(
            e.kind(),
            "expected a regular file, found a symbolic link (never followed: its target is left alone)",
        );
    }
    e
}

/// Refuses a store entry of the wrong kind before anything opens it: `index.redb` must be a
/// regular file and `log/` a directory, neither a symbolic link (segments are checked by
/// recovery, `LOCK` by [`acquire`]).
pub(crate) fn refuse_odd_entries(dir: &Path) -> Result<()> {
    for (name, want_dir) in [(crate::disk::index::INDEX_FILE, false), ("log", true)] {
        let path = dir.join(name);
        let m = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("stat", &path, e)),
        };
        let ok = if want_dir { m.is_dir() } else { m.is_file() };
        if !ok {
            let want = if want_dir { "a directory" } else { "a regular file" };
            let found = crate::disk::log::continuity::kind_of(&m);
            return Err(Error::io(
                "open",
                &path,
                std::io::Error::other(format!(
                    "expected {want}, found {found} (store entries are never followed)"
                )),
            ));
        }
    }
    Ok(())
}
