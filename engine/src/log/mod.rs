//! The append-only log: segment files of framed, checksummed batches of records.
//!
//! * [`format`] — the byte layout (see `engine/FORMAT.md`).
//! * `writer` — appends batches and runs group commit.
//! * `reader` — reads records back: mapped for sealed segments, `pread` for the active one.
//! * `scan` — walks segments frame by frame, for recovery, rebuild and `check`.

pub mod format;
pub(crate) mod prealloc;
pub(crate) mod reader;
pub(crate) mod recovery;
pub mod scan;
pub(crate) mod writer;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

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

/// fsyncs a directory so that file creations and removals in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    crate::io::sync_dir(dir).map_err(|e| Error::io("fsync", dir, e))
}
