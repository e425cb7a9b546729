//! Opening the log after a clean close or a crash: replay from a position, cut a torn
//! tail, refuse corruption before the tail.

use std::fs::{File, OpenOptions};
use std::path::Path;

use super::format::{self, BatchRef, SEGMENT_HEADER_LEN, SegmentHeaderError};
use super::scan::{ScanEnd, walk_batches};
use super::{Layout, Position, list_segments, prealloc, segment_path};
use crate::error::{Error, Result};
use crate::io;

/// The state of the log after recovery: where the writer continues.
#[derive(Debug)]
pub(crate) struct Recovered {
    /// The last segment, open for writing.
    pub file: File,
    /// Its number.
    pub segment: u64,
    /// The end of its last valid batch.
    pub end: u64,
    /// One past the highest transaction id seen during replay (0 if none was replayed).
    pub next_txid: u64,
    /// Offset of the last batch in the last segment (0 if it has none).
    pub last_batch: u64,
}

/// Why replay could not start from the requested position.
#[derive(Debug)]
pub(crate) enum RecoverError {
    /// The index claims a position the log does not reach: the index must be rebuilt.
    IndexAhead(String),
    /// Any other failure.
    Other(Error),
}

impl From<Error> for RecoverError {
    fn from(e: Error) -> Self {
        RecoverError::Other(e)
    }
}

/// Replays every batch at or after `from` through `apply`, in log order, and returns
/// where the writer continues. A damaged frame in the last segment with no valid batch
/// after it is a torn tail: it is cut (and reported through `tracing`). Any other
/// damaged frame is `Error::Corrupt` naming segment and offset.
pub(crate) fn recover(
    dir: &Path,
    from: Position,
    from_batch: Option<(u64, u64)>,
    layout: Layout,
    mut apply: impl FnMut(u64, &BatchRef<'_>) -> Result<()>,
) -> Result<Recovered, RecoverError> {
    prealloc::remove_leftovers(dir)?;
    let segments = list_segments(dir)?;
    let Some(&last) = segments.last() else {
        if from.segment > 1 || from.offset > SEGMENT_HEADER_LEN as u64 {
            return Err(RecoverError::IndexAhead(format!(
                "index is at segment {} offset {}, but the log is empty",
                from.segment, from.offset
            )));
        }
        let file = prealloc::activate(dir, 1, layout.prealloc(1))?;
        return Ok(Recovered {
            file,
            segment: 1,
            end: SEGMENT_HEADER_LEN as u64,
            next_txid: 0,
            last_batch: 0,
        });
    };
    if from.segment > last {
        return Err(RecoverError::IndexAhead(format!(
            "index is at segment {}, but the last log segment is {last}",
            from.segment
        )));
    }
    let mut next_txid = 0u64;
    let mut last_batch = 0u64;
    let mut end = SEGMENT_HEADER_LEN as u64;
    for &n in segments.iter().filter(|&&n| n >= from.segment) {
        let path = segment_path(dir, n);
        let bytes = std::fs::read(&path).map_err(|e| Error::io("read", &path, e))?;
        let is_last = n == last;
        match format::decode_segment_header(&bytes, n) {
            Ok(()) => {}
            Err(SegmentHeaderError::Version(v)) => {
                return Err(Error::UnsupportedVersion {
                    path: crate::error::DisplayPath(path),
                    expected: format::FORMAT_VERSION,
                    found: v,
                }
                .into());
            }
            Err(e) if is_last && super::scan::next_valid_batch(&bytes, SEGMENT_HEADER_LEN).is_none() => {
                // A crash while the segment was being created: nothing in it was ever
                // acknowledged. Start it again.
                tracing::warn!(segment = n, reason = ?e, "rewriting the header of a segment torn at creation");
                let file = reopen_truncated(&path, 0)?;
                io::write_all_at(&file, &format::encode_segment_header(n), 0, &path)
                    .map_err(|e| Error::io("write", &path, e))?;
                io::sync_data(&file, &path).map_err(|e| Error::io("fdatasync", &path, e))?;
                if from.segment == n && from.offset > SEGMENT_HEADER_LEN as u64 {
                    return Err(RecoverError::IndexAhead(format!(
                        "index is at segment {n} offset {}, but that segment was torn at creation",
                        from.offset
                    )));
                }
                return Ok(Recovered {
                    file,
                    segment: n,
                    end: SEGMENT_HEADER_LEN as u64,
                    next_txid,
                    last_batch: 0,
                });
            }
            Err(e) => return Err(Error::corrupt(n, 0, format!("segment header: {e:?}")).into()),
        }
        let start = if n == from.segment {
            from.offset.max(SEGMENT_HEADER_LEN as u64)
        } else {
            SEGMENT_HEADER_LEN as u64
        };
        if start > bytes.len() as u64 {
            return Err(RecoverError::IndexAhead(format!(
                "index is at segment {n} offset {start}, but the segment holds {} bytes",
                bytes.len()
            )));
        }
        // The index's position must end the batch it names, with the transaction id it
        // expects: otherwise the index belongs to another log or to a longer past of this one.
        if n == from.segment
            && let Some((batch_start, txid)) = from_batch
            && start > SEGMENT_HEADER_LEN as u64
        {
            let ok = format::decode_batch(&bytes, batch_start as usize)
                .is_ok_and(|b| b.end == start && b.txid == txid);
            if !ok {
                return Err(RecoverError::IndexAhead(format!(
                    "index says a batch of txid {txid} ends at segment {n} offset {start}; the log disagrees"
                )));
            }
        }
        last_batch = if n == from.segment { from_batch.map_or(0, |(s, _)| s) } else { 0 };
        let (valid_end, how) = walk_batches(&bytes, start as usize, |b| {
            next_txid = next_txid.max(b.txid + 1);
            last_batch = b.offset;
            apply(n, b)
        })?;
        end = valid_end;
        if let ScanEnd::Damaged { offset, reason, valid_after } = how {
            if !is_last || valid_after {
                return Err(Error::corrupt(n, offset, reason).into());
            }
            let cut = bytes.len() as u64 - offset;
            tracing::warn!(segment = n, offset, bytes_cut = cut, %reason, "cutting torn tail of the log");
            // Zero the torn bytes rather than shorten the file, so a preallocated segment
            // stays preallocated; zeros after the last batch read as the end of the data.
            let file = io::open(OpenOptions::new().read(true).write(true), &path)
                .map_err(|e| Error::io("open", &path, e))?;
            prealloc::zero_fill(&file, offset, bytes.len() as u64, &path)?;
            io::sync_all(&file, &path).map_err(|e| Error::io("fsync", &path, e))?;
        }
    }
    let path = segment_path(dir, last);
    let file = io::open(OpenOptions::new().read(true).write(true), &path)
        .map_err(|e| Error::io("open", &path, e))?;
    let len = file.metadata().map_err(|e| Error::io("stat", &path, e))?.len();
    // A closed store's last segment was cut to its data: preallocate again, at most
    // OPEN_PREALLOC bytes (an open of a store in a large segment writes no more zeros).
    let want = layout.prealloc(last).min(len.saturating_add(OPEN_PREALLOC));
    if len < want {
        prealloc::zero_fill(&file, len, want, &path)?;
    }
    // Whatever replay saw may still sit only in the page cache (the previous process was
    // killed before its fsync): make it durable before the index records it as applied.
    io::sync_data(&file, &path).map_err(|e| Error::io("fdatasync", &path, e))?;
    Ok(Recovered { file, segment: last, end, next_txid, last_batch })
}

/// Zeros an open writes after the last segment's data at most (the rest of the segment
/// grows by appends).
const OPEN_PREALLOC: u64 = 4 << 20;

fn reopen_truncated(path: &Path, len: u64) -> Result<File> {
    let file =
        io::open(OpenOptions::new().read(true).write(true), path).map_err(|e| Error::io("open", path, e))?;
    io::set_len(&file, len, path).map_err(|e| Error::io("set_len", path, e))?;
    io::sync_all(&file, path).map_err(|e| Error::io("fsync", path, e))?;
    Ok(file)
}
