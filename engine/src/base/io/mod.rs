//! The file seam: every file operation of the log and the index that changes a file (create,
//! write, sync, rename, resize, map, remove, directory sync, and the directory creations and
//! removals of `gc`) goes through these functions.
//!
//! Every file is opened without following a symbolic link in its last component
//! (`O_NOFOLLOW`): a link planted in a store directory is refused, never written through.
//!
//! In a normal build each one is the `std` call it names, inlined: the seam costs nothing.
//! With the cargo feature `fault-injection`, each first asks the fault controller registered
//! for the store directory (see [`fault`]) whether to fail, and records what a power cut
//! would undo; the real operation on the real file follows.

#[cfg(feature = "fault-injection")]
pub mod fault;
mod process;

use std::fs::{File, OpenOptions};
use std::io::Result;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use memmap2::Mmap;

pub(crate) use process::Opener;

/// The kind of a file operation, as the fault controller counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Opening a file for writing, or creating one.
    Open,
    /// Writing bytes at an offset.
    Write,
    /// `fdatasync` or `fsync` of a file.
    Sync,
    /// Renaming a file.
    Rename,
    /// Setting a file's length.
    SetLen,
    /// Memory-mapping a file.
    Mmap,
    /// Removing a file.
    Remove,
    /// `fsync` of a directory.
    SyncDir,
    /// Creating a directory.
    CreateDir,
    /// Removing an (empty) directory.
    RemoveDir,
}

/// Asks the fault controller (fault builds only) whether `op` on a file under `at` fails.
#[inline(always)]
pub(crate) fn check(_op: Op, _at: &Path, _file: Option<&File>) -> Result<()> {
    #[cfg(feature = "fault-injection")]
    fault::before(_op, _at, _file)?;
    Ok(())
}

/// A named step of the engine's work on files under `at`, where a fault build's test may act
/// (see `fault::Controller::on_step`); nothing in a normal build.
#[inline(always)]
pub(crate) fn step(_at: &Path, _name: &str) {
    #[cfg(feature = "fault-injection")]
    fault::step(_at, _name);
}

/// Opens (or creates) `path` with `opts`, never following a symbolic link at `path`.
#[inline]
pub(crate) fn open(opts: &OpenOptions, path: &Path) -> Result<File> {
    check(Op::Open, path, None)?;
    let mut opts = opts.clone();
    opts.custom_flags(libc::O_NOFOLLOW);
    opts.open(path).map_err(|e| not_followed(e, path))
}

/// Opens `path` for reading only, never following a symbolic link at `path` (not a
/// change: no fault is asked for).
#[inline]
pub(crate) fn open_read(path: &Path) -> Result<File> {
    OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path).map_err(|e| not_followed(e, path))
}

/// `ELOOP` from `O_NOFOLLOW` says "too many levels of symbolic links": say what it means.
fn not_followed(e: std::io::Error, path: &Path) -> std::io::Error {
    if e.raw_os_error() == Some(libc::ELOOP)
        && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
    {
        return std::io::Error::new(
            e.kind(),
            "expected a regular file, found a symbolic link (store files are never opened through links)",
        );
    }
    e
}

/// Creates `dir` and any missing parent.
#[inline]
pub(crate) fn create_dir_all(dir: &Path) -> Result<()> {
    check(Op::CreateDir, dir, None)?;
    std::fs::create_dir_all(dir)
}

/// Removes `path` and everything under it, one seam operation per file and directory (so a
/// fault or a crash can stop it half-way); a path that does not exist is not an error.
/// Symbolic links are removed, never followed.
pub(crate) fn remove_tree(path: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.is_dir() {
        return remove_file(path);
    }
    for entry in std::fs::read_dir(path)? {
        remove_tree(&entry?.path())?;
    }
    check(Op::RemoveDir, path, None)?;
    std::fs::remove_dir(path)
}

/// `pwrite` of all of `buf` at `offset`; `at` names the file or a directory above it.
#[inline]
pub(crate) fn write_all_at(file: &File, buf: &[u8], offset: u64, at: &Path) -> Result<()> {
    check(Op::Write, at, Some(file))?;
    #[cfg(feature = "fault-injection")]
    fault::check_space(at, file, offset, buf.len() as u64)?;
    #[cfg(feature = "fault-injection")]
    fault::record_write(at, file, offset, buf.len() as u64);
    file.write_all_at(buf, offset)
}

/// `fdatasync`.
#[inline]
pub(crate) fn sync_data(file: &File, at: &Path) -> Result<()> {
    check(Op::Sync, at, Some(file))?;
    file.sync_data()?;
    #[cfg(feature = "fault-injection")]
    fault::synced(at, file)?;
    Ok(())
}

/// `fsync`.
#[inline]
pub(crate) fn sync_all(file: &File, at: &Path) -> Result<()> {
    check(Op::Sync, at, Some(file))?;
    file.sync_all()?;
    #[cfg(feature = "fault-injection")]
    fault::synced(at, file)?;
    Ok(())
}

/// Sets the file's length (cutting or extending with zeros).
#[inline]
pub(crate) fn set_len(file: &File, len: u64, at: &Path) -> Result<()> {
    check(Op::SetLen, at, Some(file))?;
    #[cfg(feature = "fault-injection")]
    fault::record_set_len(at, file, len);
    file.set_len(len)
}

/// Renames `from` to `to`.
#[inline]
pub(crate) fn rename(from: &Path, to: &Path) -> Result<()> {
    check(Op::Rename, from, None)?;
    std::fs::rename(from, to)
}

/// Removes a file.
#[inline]
pub(crate) fn remove_file(path: &Path) -> Result<()> {
    check(Op::Remove, path, None)?;
    std::fs::remove_file(path)
}

/// `fsync` of a directory, so that names created, renamed or removed in it are durable.
#[inline]
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    check(Op::SyncDir, dir, None)?;
    File::open(dir)?.sync_all()?;
    #[cfg(feature = "fault-injection")]
    fault::dir_synced(dir)?;
    Ok(())
}

/// A shared read-only map of the whole file.
///
/// # Safety
/// As [`Mmap::map`]: the caller makes sure no one shortens the file or changes the mapped
/// bytes while the map (or a slice of it) lives.
#[inline]
pub(crate) unsafe fn map(file: &File, at: &Path) -> Result<Mmap> {
    check(Op::Mmap, at, Some(file))?;
    // SAFETY: the caller upholds `Mmap::map`'s contract (this function's own).
    unsafe { Mmap::map(file) }
}
