//! Preallocated segments. An `fdatasync` after appending to a file must also commit the
//! file's new size and blocks; after overwriting blocks already written it flushes data
//! only. Measured on this machine's disk (benches/README.md, "floor" rows), the second is
//! about 1.8× faster, so segments are created at full size, filled with zeros, and the
//! writer overwrites them. The next segment is prepared in the background
//! (`NNNNNNNN.seg.prep`) and renamed into place when the active one is sealed.
//!
//! Zeros after the last batch are not a torn tail: a batch header is never all zero (it
//! starts with a magic number), so a scan that meets a zero header with only zeros after it
//! has reached the end of the data.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use super::format::{self, SEGMENT_HEADER_LEN};
use super::{segment_path, sync_dir};
use crate::base::error::{Error, Result};
use crate::base::io;

/// The prepared (not yet active) file of segment `n`.
pub(crate) fn prep_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:08}.seg.prep"))
}

/// True when every byte is zero.
pub(crate) fn is_zero(b: &[u8]) -> bool {
    let mut words = b.chunks_exact(8);
    words.all(|w| u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]) == 0)
        && words.remainder().iter().all(|&x| x == 0)
}

/// Writes zeros into `file` over `from..to`.
pub(crate) fn zero_fill(file: &File, from: u64, to: u64, path: &Path) -> Result<()> {
    const CHUNK: usize = 1 << 20;
    let zeros = vec![0u8; CHUNK];
    let mut at = from;
    while at < to {
        let n = ((to - at) as usize).min(CHUNK);
        io::write_all_at(file, &zeros[..n], at, path).map_err(|e| Error::io("write", path, e))?;
        at += n as u64;
    }
    Ok(())
}

/// Creates segment `n` durably: its header, then zeros up to `size` (when `size` is larger).
fn write_new(path: &Path, n: u64, size: u64) -> Result<File> {
    let file = io::open(OpenOptions::new().read(true).write(true).create_new(true), path)
        .map_err(|e| Error::io("create", path, e))?;
    io::write_all_at(&file, &format::encode_segment_header(n), 0, path)
        .map_err(|e| Error::io("write", path, e))?;
    zero_fill(&file, SEGMENT_HEADER_LEN as u64, size, path)?;
    io::sync_all(&file, path).map_err(|e| Error::io("fsync", path, e))?;
    Ok(file)
}

/// Prepares segment `n` in the background's own file, then publishes it as `.prep`.
pub(crate) fn prepare(dir: &Path, n: u64, size: u64) -> Result<()> {
    let tmp = dir.join(format!("{n:08}.seg.prep.tmp"));
    let _ = io::remove_file(&tmp);
    write_new(&tmp, n, size)?;
    io::rename(&tmp, &prep_path(dir, n)).map_err(|e| Error::io("rename", &tmp, e))
}

/// Makes segment `n` the active one: the prepared file if one is complete, else a new
/// file written now. The directory is synced so the new name is durable.
pub(crate) fn activate(dir: &Path, n: u64, size: u64) -> Result<File> {
    let path = segment_path(dir, n);
    let prep = prep_path(dir, n);
    let ready = std::fs::metadata(&prep).is_ok_and(|m| m.len() == size.max(SEGMENT_HEADER_LEN as u64));
    if ready {
        io::rename(&prep, &path).map_err(|e| Error::io("rename", &prep, e))?;
        sync_dir(dir)?;
        return io::open(OpenOptions::new().read(true).write(true), &path)
            .map_err(|e| Error::io("open", &path, e));
    }
    let _ = io::remove_file(&prep);
    let file = write_new(&path, n, size)?;
    sync_dir(dir)?;
    Ok(file)
}

/// Removes prepared files left by an earlier process (they are re-made on demand).
pub(crate) fn remove_leftovers(dir: &Path) -> Result<()> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io("read_dir", dir, e))?;
    for entry in rd.flatten() {
        let name = entry.file_name();
        if name.to_str().is_some_and(|n| n.ends_with(".seg.prep") || n.ends_with(".seg.prep.tmp")) {
            let _ = io::remove_file(&entry.path());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_detection_checks_every_byte() {
        let mut v = vec![0u8; 4099];
        assert!(is_zero(&v));
        assert!(is_zero(&v[3..]));
        for i in [0, 1, 7, 8, 2048, 4098] {
            v[i] = 1;
            assert!(!is_zero(&v), "byte {i}");
            assert!(!is_zero(&v[..=i]));
            v[i] = 0;
        }
    }

    #[test]
    fn activate_uses_a_prepared_file_or_makes_one() {
        let dir = tempfile::tempdir().unwrap();
        prepare(dir.path(), 2, 8192).unwrap();
        let f = activate(dir.path(), 2, 8192).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 8192);
        assert!(!prep_path(dir.path(), 2).exists());
        let g = activate(dir.path(), 3, 8192).unwrap();
        assert_eq!(g.metadata().unwrap().len(), 8192);
        let bytes = std::fs::read(segment_path(dir.path(), 3)).unwrap();
        assert_eq!(format::decode_segment_header(&bytes, 3), Ok(()));
        assert!(is_zero(&bytes[SEGMENT_HEADER_LEN..]));
    }
}
