//! Reads records back: sealed segments through a shared memory map, the active segment
//! with `pread`.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::Mmap;
use parking_lot::RwLock;

use super::format::{self, RECORD_HEADER_LEN};
use super::writer::LogWriter;
use super::{Location, segment_path};
use crate::base::blob::{Blob, Verify};
use crate::base::error::{Error, Result};

/// A record read from the log: header fields and the payload bytes.
#[derive(Debug)]
pub(crate) struct RawRecord {
    pub kind: u8,
    pub codec: u8,
    pub raw_len: u32,
    pub payload: Blob,
}

/// Maps sealed segments on first use and keeps the most recently used maps for later
/// reads. Unmapping the least recently used ones bounds the file pages that count as the
/// process's resident memory, however large the log grows; a [`Blob`] still borrowing
/// from a dropped map keeps that map alive until it is dropped.
#[derive(Debug)]
pub(crate) struct LogReader {
    dir: PathBuf,
    maps: RwLock<HashMap<u64, (Arc<Mmap>, AtomicU64)>>,
    clock: AtomicU64,
    max_maps: usize,
    /// The map of the active segment, by segment number.
    active: RwLock<Option<(u64, Arc<Mmap>)>>,
    /// Segment files opened once and read through these handles rather than by path (a
    /// read-only open: a `gc` of the writer may replace the files under their names, and
    /// the handles keep the bytes this reader indexed).
    pinned: RwLock<HashMap<u64, Arc<File>>>,
}

impl LogReader {
    pub(crate) fn new(dir: PathBuf, max_maps: usize) -> Self {
        LogReader {
            dir,
            maps: RwLock::new(HashMap::new()),
            clock: AtomicU64::new(0),
            active: RwLock::new(None),
            max_maps: max_maps.max(1),
            pinned: RwLock::new(HashMap::new()),
        }
    }

    /// Reads segment `n` through `file` from now on, never by its path.
    pub(crate) fn pin(&self, n: u64, file: Arc<File>) {
        self.pinned.write().insert(n, file);
    }

    /// The pinned handle of segment `n`, if any.
    pub(crate) fn pinned(&self, n: u64) -> Option<Arc<File>> {
        self.pinned.read().get(&n).cloned()
    }

    /// The memory map of sealed segment `n`, created on first use.
    pub(crate) fn map(&self, n: u64) -> Result<Arc<Mmap>> {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        if let Some((m, used)) = self.maps.read().get(&n) {
            used.store(now, Ordering::Relaxed);
            return Ok(m.clone());
        }
        let path = segment_path(&self.dir, n);
        let file = match self.pinned(n) {
            Some(f) => f,
            None => Arc::new(File::open(&path).map_err(|e| Error::io("open", &path, e))?),
        };
        // SAFETY: `n` is a sealed segment: the writer never writes to it again and recovery
        // only truncates the last segment before any map exists. The store directory is
        // held under an exclusive lock, so no cooperating process modifies it either (a
        // read-only open holds no lock, but maps only segments the writer has sealed, which
        // it cut to their data before it created the next one, and never changes again; a
        // `gc` replaces them with new files, leaving the pinned ones as they were). The
        // map is read-only and every access is bounds-checked against its length.
        let map = unsafe { crate::base::io::map(&file, &path) }.map_err(|e| Error::io("mmap", &path, e))?;
        let map = Arc::new(map);
        let mut maps = self.maps.write();
        let map = maps.entry(n).or_insert((map, AtomicU64::new(now))).0.clone();
        while maps.len() > self.max_maps {
            let oldest =
                maps.iter().min_by_key(|(_, (_, used))| used.load(Ordering::Relaxed)).map(|(k, _)| *k);
            match oldest {
                Some(k) => maps.remove(&k),
                None => break,
            };
        }
        Ok(map)
    }

    /// A map of the active segment `n` (preallocated, so its length is known up front), or
    /// `None` if it cannot be mapped (reads then use `pread`). Kept apart from the sealed
    /// maps: a sealed segment is cut to its data, and is mapped anew at its final length.
    fn active_map(&self, n: u64, file: &File) -> Result<Option<Arc<Mmap>>> {
        if let Some((seg, m)) = &*self.active.read()
            && *seg == n
        {
            return Ok(Some(m.clone()));
        }
        // SAFETY: the active segment is written only with `pwrite` past the end of the data
        // the index has published, into preallocated space; a record is read through this map
        // only after its bytes were written and published, and they are never written again.
        // The file is never shortened below its data end (sealing cuts only the zero tail),
        // so no mapped page that a read touches can fall beyond the end of the file. The store
        // directory is locked against other processes.
        let map = match unsafe { crate::base::io::map(file, &self.dir) } {
            Ok(m) => Arc::new(m),
            Err(e) => {
                tracing::debug!(error = %e, segment = n, "active segment not mapped; reading with pread");
                return Ok(None);
            }
        };
        *self.active.write() = Some((n, map.clone()));
        Ok(Some(map))
    }

    /// Reads the record at `loc`, checking as much as `verify` asks.
    pub(crate) fn read(&self, writer: &LogWriter, loc: Location, verify: Verify) -> Result<RawRecord> {
        writer.same_process()?;
        let total = RECORD_HEADER_LEN + loc.len as usize;
        let corrupt = |why: String| Error::corrupt(loc.segment, loc.offset, why);
        let (bytes, base): (Blob, usize) = if loc.segment < writer.active_segment() {
            self.mapped(loc, total)?
        } else if let Some(file) = writer.active_file_for(loc.segment) {
            match self.active_map(loc.segment, &file)? {
                Some(map) if (loc.offset as usize).checked_add(total).is_some_and(|e| e <= map.len()) => {
                    let start = loc.offset as usize;
                    (Blob::mapped(map, start..start + total), 0)
                }
                _ => {
                    let mut buf = vec![0u8; total];
                    file.read_exact_at(&mut buf, loc.offset).map_err(|e| {
                        if e.kind() == std::io::ErrorKind::UnexpectedEof {
                            corrupt(format!("record of {total} bytes runs past the end of the segment"))
                        } else {
                            Error::io("read", segment_path(&self.dir, loc.segment), e)
                        }
                    })?;
                    (Blob::owned(buf), 0)
                }
            }
        } else {
            // The segment was sealed between the two checks above.
            self.mapped(loc, total)?
        };
        let rec = &bytes[base..base + total];
        let Some((len, kind, codec, raw_len)) = format::record_header_unverified(rec) else {
            return Err(corrupt("record header is short".into()));
        };
        if len != loc.len as usize {
            return Err(corrupt(format!("record length: index says {}, log says {len}", loc.len)));
        }
        if verify != Verify::None {
            format::decode_record_at(rec, 0, loc.offset).map_err(corrupt)?;
        }
        Ok(RawRecord { kind, codec, raw_len, payload: bytes.skip(base + RECORD_HEADER_LEN) })
    }

    fn mapped(&self, loc: Location, total: usize) -> Result<(Blob, usize)> {
        let map = self.map(loc.segment)?;
        let start = loc.offset as usize;
        if start.checked_add(total).is_none_or(|end| end > map.len()) {
            return Err(Error::corrupt(
                loc.segment,
                loc.offset,
                format!("record of {total} bytes runs past the segment end ({} bytes)", map.len()),
            ));
        }
        Ok((Blob::mapped(map, start..start + total), 0))
    }
}
