//! The index's seal: what lets an open trust the index file without verifying every page.
//!
//! Verifying the index at open (redb's `check_integrity`) reads every page: time linear in
//! the index (61-92 ms for the 71 MB index of 100,000 chats). A file the store itself closed
//! cleanly, after verifying it at open (or trusting an earlier seal), and that nothing has
//! written since, needs no second verification. The seal (`index.seal`, beside `index.redb`) says which file
//! that was: at a clean close, once redb has closed the file, the file's modification time is
//! set to a value no later write can give it (five seconds before now, at a nanosecond no clock
//! tick lands on: below the time of any later write even on a file system that keeps times to
//! the second or two), and the file's identity and times are written to the seal.
//!
//! An open that finds the file as the seal describes trusts it; any other state is verified:
//! a write by anything (redb after a crash, a tool, damage written to the file) sets the
//! modification time to the time of that write, later than the sentinel; a file replaced or
//! copied has another inode; a metadata change sets the change time. What the seal cannot
//! see is what no write makes: bits decaying on the medium under an unchanged inode, which
//! [`Store::check`](crate::Store::check) finds (as `PRAGMA integrity_check` does for SQLite,
//! which never verifies at open).
//!
//! The seal is a hint, never needed for correctness: a missing, torn or stale seal means one
//! verification at the next open. It is written in place and not synced: a torn one is a
//! prefix of its text, which does not parse; after a power cut, either the file's metadata and
//! the seal both reached the disk, or they disagree and the open verifies.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::base::io;

/// How the index file was trusted when the store opened ([`StoreStats::index_at_open`]).
///
/// [`StoreStats::index_at_open`]: crate::StoreStats::index_at_open
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use undertext::{IndexAtOpen, Options, Store};
/// let store = Store::open(dir.path(), Options::default())?;
/// assert_eq!(store.stats()?.index_at_open, IndexAtOpen::Created);
/// store.create_chat("me", Default::default())?;
/// store.close()?;
/// // Closed cleanly: the next open trusts the sealed file without reading every page.
/// let store = Store::open(dir.path(), Options::default())?;
/// assert_eq!(store.stats()?.index_at_open, IndexAtOpen::Sealed);
/// # Ok::<(), undertext::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexAtOpen {
    /// The file was created (a new store, or an index rebuilt from the log).
    Created,
    /// Every page was verified against redb's checksums.
    Verified,
    /// The file was as this store's last clean close sealed it: trusted, not read.
    Sealed,
    /// Not verified: [`Options::verify_index_on_open`](crate::Options::verify_index_on_open)
    /// was off and no seal held.
    Unverified,
    /// A read-only open's index, built in memory from the log.
    InMemory,
}

/// Seals the index file when the index is dropped, if the store closed cleanly and the file
/// is trusted. It is the index's last field, dropped after redb has closed the file.
#[derive(Debug)]
pub(crate) struct Sealer {
    /// The index file; `None` for an index in memory.
    path: Option<PathBuf>,
    /// This open verified the file, created it, or found it sealed (or rebuilt it since).
    trusted: std::sync::atomic::AtomicBool,
    /// The store is closing cleanly: everything is in the file.
    armed: std::sync::atomic::AtomicBool,
    /// What the file's writes did: a file any of whose writes or syncs failed is not sealed.
    journal: std::sync::Arc<super::Journal>,
}

impl Sealer {
    pub(crate) fn new(
        path: Option<PathBuf>,
        trusted: bool,
        journal: std::sync::Arc<super::Journal>,
    ) -> Sealer {
        use std::sync::atomic::AtomicBool;
        Sealer { path, trusted: AtomicBool::new(trusted), armed: AtomicBool::new(false), journal }
    }

    /// The file was made anew from the log: trusted whatever the open found.
    pub(crate) fn trust(&self) {
        self.trusted.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The store closes cleanly: seal the file once redb has closed it.
    pub(crate) fn arm(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for Sealer {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(path) = &self.path else { return };
        if !(self.armed.load(Relaxed) && self.trusted.load(Relaxed)) || self.journal.failed.load(Relaxed) {
            return;
        }
        if let Err(e) = seal(path) {
            tracing::warn!(error = %e, path = %path.display(), "sealing the index failed; the next open verifies it");
        }
    }
}

/// The seal's file name, beside `index.redb`.
const SEAL_FILE: &str = "index.seal";

/// The first line of a seal: the format and its version.
const MAGIC: &str = "undertext index seal 1";

/// What a seal records of the index file: enough that any change to it shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    fn encode(&self) -> String {
        format!(
            "{MAGIC}\n{} {} {} {} {} {} {}\n",
            self.dev, self.ino, self.len, self.mtime.0, self.mtime.1, self.ctime.0, self.ctime.1
        )
    }

    /// The stamp a seal's text holds, or `None` for anything else (torn, foreign, older).
    fn decode(text: &str) -> Option<Stamp> {
        let mut lines = text.split('\n');
        if lines.next()? != MAGIC {
            return None;
        }
        let fields: Vec<&str> = lines.next()?.split(' ').collect();
        if lines.next() != Some("") || lines.next().is_some() || fields.len() != 7 {
            return None;
        }
        let u = |i: usize| fields[i].parse::<u64>().ok();
        let s = |i: usize| fields[i].parse::<i64>().ok();
        Some(Stamp { dev: u(0)?, ino: u(1)?, len: u(2)?, mtime: (s(3)?, s(4)?), ctime: (s(5)?, s(6)?) })
    }
}

/// Whether the index file at `index`, whose `stat` (not following a link) is `meta`, is now
/// the file a clean close sealed (asked before anything opens it). Any doubt (no file, no
/// seal, an unreadable one, another file) is `false`.
pub(crate) fn holds(index: &Path, meta: Option<&std::fs::Metadata>) -> bool {
    let Some(meta) = meta.filter(|m| m.is_file()) else { return false };
    let Ok(text) = read_small(&seal_path(index)) else { return false };
    Stamp::decode(&text) == Some(Stamp::of(meta))
}

/// Seals the index file at `index`, which the store closed cleanly and trusts (see the module
/// docs). A failure leaves at worst a seal that does not hold: the next open verifies.
pub(crate) fn seal(index: &Path) -> std::io::Result<()> {
    let mut opts = OpenOptions::new();
    opts.write(true);
    let file = io::open(&opts, index)?;
    file.set_modified(sentinel(SystemTime::now()))?;
    let stamp = Stamp::of(&file.metadata()?);
    drop(file);
    // Written in place: a torn seal (a crash, a full disk) is a prefix of this text, which
    // does not parse, and the next open verifies. No temporary file appears in the directory.
    let seal = seal_path(index);
    let mut opts = OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    let out = io::open(&opts, &seal)?;
    io::write_all_at(&out, stamp.encode().as_bytes(), 0, &seal)
}

/// A modification time no write after `now` can give a file: five seconds earlier (a file
/// system that keeps whole seconds, or two, still stores it below any later write's time), at a
/// nanosecond taken from `now` itself and this process (clock ticks land on few of them).
fn sentinel(now: SystemTime) -> SystemTime {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs().saturating_sub(5);
    let mix = u64::from(since.subsec_nanos()) ^ u64::from(std::process::id()).rotate_left(17);
    let nanos = (mix.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 34) % 1_000_000_000;
    UNIX_EPOCH + Duration::new(secs, nanos as u32)
}

fn seal_path(index: &Path) -> PathBuf {
    index.with_file_name(SEAL_FILE)
}

/// The text of a small file, refused past a few hundred bytes (a seal is about 80).
fn read_small(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let file: File = io::open_read(path)?;
    let mut text = String::new();
    file.take(512).read_to_string(&mut text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holds_now(index: &Path) -> bool {
        holds(index, std::fs::symlink_metadata(index).ok().as_ref())
    }

    #[test]
    fn a_seal_holds_for_the_file_it_describes_and_no_other_state() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("index.redb");
        std::fs::write(&index, b"pages").unwrap();
        assert!(!holds_now(&index), "no seal yet");
        seal(&index).unwrap();
        assert!(holds_now(&index));
        // A write right after the seal, in the same clock tick, still shows.
        {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new().write(true).open(&index).unwrap();
            f.write_all_at(b"P", 0).unwrap();
        }
        assert!(!holds_now(&index), "a write after the seal");
        seal(&index).unwrap();
        assert!(holds_now(&index));
        // The modification time put back by hand: the change time shows it.
        let m = std::fs::metadata(&index).unwrap().modified().unwrap();
        std::fs::OpenOptions::new().write(true).open(&index).unwrap().set_modified(m).unwrap();
        assert!(!holds_now(&index), "a metadata change after the seal");
        seal(&index).unwrap();
        // Another file in its place, with the same bytes.
        std::fs::copy(&index, dir.path().join("copy")).unwrap();
        std::fs::rename(dir.path().join("copy"), &index).unwrap();
        assert!(!holds_now(&index), "another file");
        seal(&index).unwrap();
        std::fs::remove_file(dir.path().join(SEAL_FILE)).unwrap();
        assert!(!holds_now(&index), "the seal removed");
    }

    #[test]
    fn a_torn_or_foreign_seal_does_not_hold() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("index.redb");
        std::fs::write(&index, b"pages").unwrap();
        seal(&index).unwrap();
        let text = std::fs::read_to_string(dir.path().join(SEAL_FILE)).unwrap();
        // Every prefix of the text (what a torn write leaves), and another version's.
        let prefixes = (0..text.len()).map(|n| &text[..n]);
        for bad in prefixes.chain([text.replace("seal 1", "seal 2").as_str()]) {
            std::fs::write(dir.path().join(SEAL_FILE), bad).unwrap();
            assert!(!holds_now(&index), "{bad:?}");
        }
        std::fs::write(dir.path().join(SEAL_FILE), format!("{text}{text}")).unwrap();
        assert!(!holds_now(&index), "two seals");
    }

    #[test]
    fn the_sentinel_is_before_now_at_an_odd_nanosecond() {
        let now = SystemTime::now();
        let s = sentinel(now);
        let before = now.duration_since(s).unwrap();
        assert!(before > Duration::from_secs(4) && before <= Duration::from_secs(6), "{before:?}");
    }
}
