//! Opening the log after a clean close or a crash: replay from a position, cut a torn
//! tail, refuse corruption before the tail.

use std::fs::{File, OpenOptions};
use std::path::Path;

use super::format::{self, BatchRef, SEGMENT_HEADER_LEN, SegmentHeaderError};
use super::scan::{ScanEnd, walk_batches};
use super::{Layout, Position, continuity, list_segments, prealloc, segment_path};
use crate::base::error::{Error, Result};
use crate::base::io;

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
    /// What recovery repaired, one line each (a torn tail cut, a torn segment header
    /// rewritten), for [`crate::Store::open_warnings`].
    pub warnings: Vec<String>,
    /// The size to preallocate the last segment to before the first write (0: none). An
    /// open does not write the zeros itself: a process that only reads never pays for them
    /// (issue 38).
    pub prealloc_to: u64,
}

/// Why replay could not start from the requested position.
#[derive(Debug)]
pub(crate) enum RecoverError {
    /// The index claims a position the log does not reach (log data is missing, or the
    /// index belongs to another log): where the log ends, and what disagrees.
    IndexAhead {
        /// Where the log's data ends (or the segment that disagrees).
        log_end: Position,
        /// What the index claims and what the log holds.
        why: String,
    },
    /// Any other failure.
    Other(Error),
}

impl RecoverError {
    fn ahead(segment: u64, offset: u64, why: String) -> RecoverError {
        RecoverError::IndexAhead { log_end: Position::new(segment, offset), why }
    }
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
    let present = match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => true,
        Ok(m) => {
            return Err(Error::io(
                "open",
                dir,
                std::io::Error::other(format!(
                    "expected the log directory, found {}",
                    continuity::kind_of(&m)
                )),
            )
            .into());
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(Error::io("stat", dir, e).into()),
    };
    let segments = if present {
        prealloc::remove_leftovers(dir)?;
        list_segments(dir)?
    } else {
        Vec::new()
    };
    continuity::check_numbering(dir, &segments)?;
    let Some(&last) = segments.last() else {
        if from.segment > 1 || from.offset > SEGMENT_HEADER_LEN as u64 {
            let what = if present { "holds no segment" } else { "is missing" };
            return Err(RecoverError::ahead(
                1,
                0,
                format!(
                    "the index records the log up to segment {} offset {}, but the log directory {what}",
                    from.segment, from.offset
                ),
            ));
        }
        if !present {
            io::create_dir_all(dir).map_err(|e| Error::io("create_dir", dir, e))?;
            if let Some(parent) = dir.parent() {
                super::sync_dir(parent)?;
            }
        }
        let file = prealloc::activate(dir, 1, layout.prealloc(1))?;
        return Ok(Recovered {
            file,
            segment: 1,
            end: SEGMENT_HEADER_LEN as u64,
            next_txid: 0,
            last_batch: 0,
            warnings: Vec::new(),
            prealloc_to: 0,
        });
    };
    if from.segment > last {
        return Err(RecoverError::ahead(
            last,
            0,
            format!(
                "the index records the log up to segment {}, but the last log segment is {last}",
                from.segment
            ),
        ));
    }
    // The sealed segments replay does not read: their two ends must chain by transaction id.
    let mut chain = continuity::Chain::default();
    for &n in segments.iter().filter(|&&n| n < from.segment) {
        chain.sealed(dir, n)?;
    }
    let mut next_txid = 0u64;
    let mut last_batch = 0u64;
    let mut end = SEGMENT_HEADER_LEN as u64;
    let mut warnings = Vec::new();
    for &n in segments.iter().filter(|&&n| n >= from.segment) {
        let path = segment_path(dir, n);
        // Of the index's own segment, replay reads the header and what follows the batch the
        // index ends at: the bytes before it are the index's already (issue 38: an open read
        // the whole active segment, 20 MB for a 100,000-message chat).
        let skip_to = match from_batch {
            Some((batch_start, _)) if n == from.segment => batch_start.min(from.offset),
            None if n == from.segment => from.offset,
            _ => 0,
        };
        let is_last = n == last;
        let mut bytes = read_segment_from(&path, skip_to)?;
        if is_last && skip_to > SEGMENT_HEADER_LEN as u64 && format::decode_segment_header(&bytes, n).is_err()
        {
            // A torn header: the whole segment says whether it ever held a batch.
            bytes = read_segment(&path)?;
        }
        match format::decode_segment_header(&bytes, n) {
            Ok(()) => {}
            Err(SegmentHeaderError::Version(v)) => {
                return Err(Error::UnsupportedVersion {
                    path: crate::base::error::DisplayPath(path),
                    expected: format::FORMAT_VERSION,
                    found: v,
                }
                .into());
            }
            Err(e) if is_last && super::scan::next_valid_batch(&bytes, SEGMENT_HEADER_LEN).is_none() => {
                if from.segment == n && from.offset > SEGMENT_HEADER_LEN as u64 {
                    return Err(RecoverError::ahead(
                        n,
                        0,
                        format!(
                            "the index records segment {n} up to offset {}, but that segment has no valid header or batch ({e})",
                            from.offset
                        ),
                    ));
                }
                // A crash while the segment was being created: nothing in it was ever
                // acknowledged. Start it again.
                tracing::warn!(segment = n, reason = %e, "rewriting the header of a segment torn at creation");
                let warnings = vec![format!(
                    "log segment {n}: its header was torn while the segment was being created ({e}); \
                     it held no batch and was started again"
                )];
                let file = reopen_truncated(&path, 0)?;
                io::write_all_at(&file, &format::encode_segment_header(n), 0, &path)
                    .map_err(|e| Error::io("write", &path, e))?;
                io::sync_data(&file, &path).map_err(|e| Error::io("fdatasync", &path, e))?;
                return Ok(Recovered {
                    file,
                    segment: n,
                    end: SEGMENT_HEADER_LEN as u64,
                    next_txid,
                    last_batch: 0,
                    warnings,
                    prealloc_to: 0,
                });
            }
            Err(e) => return Err(Error::corrupt(n, 0, format!("segment header: {e}")).into()),
        }
        let start = if n == from.segment {
            from.offset.max(SEGMENT_HEADER_LEN as u64)
        } else {
            SEGMENT_HEADER_LEN as u64
        };
        if start > bytes.len() as u64 {
            return Err(RecoverError::ahead(
                n,
                bytes.len() as u64,
                format!(
                    "the index records segment {n} up to offset {start}, but the segment holds {} bytes",
                    bytes.len()
                ),
            ));
        }
        // The index's position must end the batch it names, with the transaction id it
        // expects: otherwise the log lost that batch, or the index belongs to another log.
        if n == from.segment
            && let Some((batch_start, txid)) = from_batch
            && start > SEGMENT_HEADER_LEN as u64
        {
            let ok = format::decode_batch(&bytes, batch_start as usize)
                .is_ok_and(|b| b.end == start && b.txid == txid);
            if !ok {
                return Err(RecoverError::ahead(
                    n,
                    batch_start,
                    format!(
                        "the index records a batch of transaction {txid} at segment {n} offsets {batch_start}..{start}; the log holds no such batch"
                    ),
                ));
            }
            chain.resume(n, txid);
        }
        last_batch = if n == from.segment { from_batch.map_or(0, |(s, _)| s) } else { 0 };
        chain.begin_walk(n);
        let (valid_end, how) = walk_batches(&bytes, start as usize, |b| {
            chain.batch(n, b.offset, b.txid)?;
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
            warnings.push(format!(
                "log segment {n}: cut a torn tail of {cut} bytes at offset {offset} ({reason}); \
                 a write cut off by a crash, never acknowledged"
            ));
            // Zero the torn bytes rather than shorten the file, so a preallocated segment
            // stays preallocated; zeros after the last batch read as the end of the data.
            let file = io::open(OpenOptions::new().read(true).write(true), &path)
                .map_err(|e| Error::io("open", &path, e))?;
            prealloc::zero_fill(&file, offset, bytes.len() as u64, &path)?;
            io::sync_all(&file, &path).map_err(|e| Error::io("fsync", &path, e))?;
        }
        if !is_last {
            chain.end_sealed(n, valid_end)?;
        }
    }
    let path = segment_path(dir, last);
    let file = io::open(OpenOptions::new().read(true).write(true), &path)
        .map_err(|e| Error::io("open", &path, e))?;
    let len = file.metadata().map_err(|e| Error::io("stat", &path, e))?.len();
    // Whatever replay saw may still sit only in the page cache (the previous process was
    // killed before its fsync): make it durable before the index records it as applied.
    // This is done before the zeros below are written, so that it costs next to nothing
    // after a clean close (nothing dirty). The zeros need no sync (zeros after the last
    // batch, or their absence, read the same): the first commit's `fdatasync` writes them
    // down. An open that waited for them paid 8–14 ms (issue 19's reopen).
    io::sync_data(&file, &path).map_err(|e| Error::io("fdatasync", &path, e))?;
    // A closed store's last segment was cut to its data: the writer preallocates it again
    // before its first write, at most OPEN_PREALLOC bytes (an open of a store in a large
    // segment writes no more zeros; a read-only use of the store writes none).
    let prealloc_to = layout.prealloc(last).min(len.saturating_add(OPEN_PREALLOC));
    Ok(Recovered { file, segment: last, end, next_txid, last_batch, warnings, prealloc_to })
}

/// The checks of a whole log that need no index: segment files numbered without a gap and
/// regular files, and the sealed segments chained by transaction id from their ends. Run
/// before the index is opened, so a log refused for them leaves every file as it was.
pub(crate) fn precheck(dir: &Path) -> Result<()> {
    if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        return Ok(()); // `recover` says what is wrong with it
    }
    let segments = list_segments(dir)?;
    continuity::check_numbering(dir, &segments)?;
    let mut chain = continuity::Chain::default();
    if let Some((_, sealed)) = segments.split_last() {
        for &n in sealed {
            chain.sealed(dir, n)?;
        }
    }
    Ok(())
}

/// A segment's bytes, read without following a link, except `SEGMENT_HEADER_LEN..skip_to`:
/// those read as zeros (left unread, and untouched in memory: the zeroed buffer's pages are
/// not written).
fn read_segment_from(path: &Path, skip_to: u64) -> Result<Vec<u8>> {
    if skip_to <= SEGMENT_HEADER_LEN as u64 {
        return read_segment(path);
    }
    let file = io::open_read(path).map_err(|e| Error::io("open", path, e))?;
    let len = file.metadata().map_err(|e| Error::io("stat", path, e))?.len();
    let as_usize = |v: u64| {
        usize::try_from(v)
            .map_err(|_| Error::io("read", path, std::io::Error::other("segment larger than memory")))
    };
    let mut bytes = vec![0u8; as_usize(len)?];
    let head = as_usize(len.min(SEGMENT_HEADER_LEN as u64))?;
    read_fully_at(&file, &mut bytes[..head], 0, path)?;
    let from = as_usize(skip_to.min(len))?;
    read_fully_at(&file, &mut bytes[from..], from as u64, path)?;
    Ok(bytes)
}

/// Fills `buf` from `file` at `offset`; a file that ends sooner leaves the rest zero.
fn read_fully_at(file: &File, buf: &mut [u8], offset: u64, path: &Path) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(k) => done += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("read", path, e)),
        }
    }
    Ok(())
}

/// A segment's bytes, read without following a link.
fn read_segment(path: &Path) -> Result<Vec<u8>> {
    let mut file = io::open_read(path).map_err(|e| Error::io("open", path, e))?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut bytes).map_err(|e| Error::io("read", path, e))?;
    Ok(bytes)
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

/// True when `e` says the disk (or the user's quota) is full.
pub(crate) fn is_no_space(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::StorageFull
        || source.kind() == std::io::ErrorKind::QuotaExceeded)
}
