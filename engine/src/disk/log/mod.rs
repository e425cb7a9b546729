//! The append-only log: segment files of framed, checksummed batches of records.
//!
//! * [`format`] — the byte layout (see `engine/FORMAT.md`).
//! * `writer` — appends batches and runs group commit.
//! * `reader` — reads records back: mapped for sealed segments, `pread` for the active one.
//! * `scan` — walks segments frame by frame, for recovery, rebuild and `check`.

pub(crate) mod continuity;
mod durability;
/// Record framing (the bytes of FORMAT.md), public for the test and fuzz crates only.
#[doc(hidden)]
pub mod format;
pub(crate) mod prealloc;
pub(crate) mod reader;
pub(crate) mod recovery;
/// Segment scanning for `check` and the tests, not part of the API.
#[doc(hidden)]
pub mod scan;
pub(crate) mod writer;

pub use durability::Durability;

use std::path::{Path, PathBuf};

use crate::base::error::{Error, Result};
use crate::base::io::Opener;

/// `Ok` in the process that opened the store; [`Error::Forked`] in a fork of it (see
/// `io::process`).
pub(crate) fn same_process(opener: &Opener) -> Result<()> {
    match opener.forked() {
        None => Ok(()),
        Some(caller) => Err(Error::Forked { opened_by: opener.pid(), caller }),
    }
}

/// A position in the log: a segment number and a byte offset inside it.
/// Positions order the log: everything before a position was written before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position {
    /// Segment number.
    pub segment: u64,
    /// Byte offset inside the segment.
    pub offset: u64,
}

impl Position {
    /// A position.
    pub const fn new(segment: u64, offset: u64) -> Self {
        Position { segment, offset }
    }
}

/// Where a record lives: its segment, the offset of its header, and its payload length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Location {
    /// Segment number.
    pub segment: u64,
    /// Offset of the record header in the segment.
    pub offset: u64,
    /// Payload length in bytes.
    pub len: u32,
}

/// Segment 1 holds this many bytes before it is sealed; each later segment twice the one
/// before, up to [`Options::segment_size`](crate::Options::segment_size).
pub(crate) const FIRST_SEGMENT_SIZE: u64 = 1 << 20;

/// How segments are sized and created.
///
/// Segments grow: 1 MiB, 2 MiB, 4 MiB, … up to `segment_size`. A preallocated segment is
/// created at its full capacity, so a new or small store holds at most about as many
/// preallocated zeros as it holds data (an empty store: 1 MiB, not a full segment), while a
/// large one reaches full-size segments after a handful.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The largest segment capacity.
    pub segment_size: u64,
    /// Create segments at full capacity, filled with zeros.
    pub preallocate: bool,
}

impl Layout {
    /// Bytes segment `n` holds before it is sealed (a single larger batch still gets a
    /// segment of its own).
    pub(crate) fn capacity(self, n: u64) -> u64 {
        let doublings = n.saturating_sub(1).min(40) as u32;
        (FIRST_SEGMENT_SIZE << doublings).min(self.segment_size)
    }

    /// The size segment `n` is created at (0: no preallocation).
    pub(crate) fn prealloc(self, n: u64) -> u64 {
        if self.preallocate { self.capacity(n) } else { 0 }
    }
}

/// The log directory inside a store directory.
pub(crate) fn log_dir(store: &Path) -> PathBuf {
    store.join("log")
}

/// The file of segment `n`.
pub(crate) fn segment_path(log_dir: &Path, n: u64) -> PathBuf {
    log_dir.join(format!("{n:08}.seg"))
}

/// Lists segment numbers present in `log_dir`, ascending. Other files are ignored.
pub(crate) fn list_segments(log_dir: &Path) -> Result<Vec<u64>> {
    let rd = std::fs::read_dir(log_dir).map_err(|e| Error::io("read_dir", log_dir, e))?;
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| Error::io("read_dir", log_dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(stem) = name.strip_suffix(".seg")
            && stem.len() >= 8
            && stem.bytes().all(|b| b.is_ascii_digit())
            && let Ok(n) = stem.parse::<u64>()
        {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// `listed` (ascending, as [`list_segments`] gives it) with every segment number from `from`
/// on that is absent below a listed one but whose file exists added back.
///
/// Why: a directory listing is read in several `getdents` calls and is not atomic with
/// respect to renames. A reader listing the log while the writer seals segments (each new
/// one is renamed into place from its `.prep` file) can miss segment `n` renamed behind the
/// listing's position and see `n + 1` renamed ahead of it. Segments are removed only by a
/// `gc`, which a reader notices otherwise, so a gap whose file opens by name is such a miss,
/// not a loss.
pub(crate) fn fill_listing_gaps(log_dir: &Path, listed: Vec<u64>, from: u64) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::with_capacity(listed.len());
    for n in listed {
        let start = out.last().map_or(from, |&prev| prev + 1).max(from);
        for gap in start..n {
            if std::fs::symlink_metadata(segment_path(log_dir, gap)).is_ok() {
                out.push(gap);
            }
        }
        out.push(n);
    }
    out
}

/// fsyncs a directory so that file creations and removals in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    crate::base::io::sync_dir(dir).map_err(|e| Error::io("fsync", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_a_listing_missed_between_two_listed_ones_is_added_back_only_if_its_file_exists() {
        let dir = tempfile::tempdir().unwrap();
        for n in [1, 2, 3, 4, 6] {
            std::fs::write(segment_path(dir.path(), n), b"x").unwrap();
        }
        // A listing that missed 3 (renamed behind it) and saw 4; 5 is really gone.
        assert_eq!(fill_listing_gaps(dir.path(), vec![1, 2, 4, 6], 1), [1, 2, 3, 4, 6]);
        // Gaps below `from` are not probed: those segments were read before.
        assert_eq!(fill_listing_gaps(dir.path(), vec![1, 4, 6], 4), [1, 4, 6]);
        // The reader's own tail segment missed, the one before it listed.
        assert_eq!(fill_listing_gaps(dir.path(), vec![1, 2, 4, 6], 3), [1, 2, 3, 4, 6]);
        assert_eq!(fill_listing_gaps(dir.path(), vec![4, 6], 3), [3, 4, 6]);
        assert_eq!(fill_listing_gaps(dir.path(), vec![], 1), Vec::<u64>::new());
    }

    #[test]
    fn segments_double_from_one_mebibyte_up_to_the_segment_size() {
        let l = Layout { segment_size: 64 << 20, preallocate: true };
        let caps: Vec<u64> = (1..=9).map(|n| l.capacity(n) >> 20).collect();
        assert_eq!(caps, [1, 2, 4, 8, 16, 32, 64, 64, 64]);
        assert_eq!(l.capacity(u64::MAX), 64 << 20);
        let small = Layout { segment_size: 4096, preallocate: true };
        assert_eq!(small.capacity(1), 4096);
        assert_eq!(Layout { preallocate: false, ..l }.prealloc(3), 0);
        assert_eq!(l.prealloc(3), 4 << 20);
    }
}
