//! Input that cannot exhaust memory or hang: files read with their type and size checked
//! first, folders walked once each.
//!
//! [`read_bounded`] refuses anything that is not a regular file (a FIFO would block the
//! read forever, `/dev/zero` never ends) and any file larger than the limit, before reading
//! a byte of it. [`walk`] visits every folder once (by device and inode), so a symlink back
//! into the walk (`x -> .`, `a/up -> ..`) neither loops nor imports a file twice, and skips
//! what is not a regular file, or cannot be looked at, with a [`Problem`] line.

use std::collections::HashSet;
use std::fs::Metadata;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::{Problem, openhands};
use crate::base::error::{Error, Result};

/// The largest input file `import` and `archive` read: [`MAX_BLOB_LEN`](crate::MAX_BLOB_LEN),
/// the largest value one log record holds (1 GiB less 32 bytes). A larger file is refused
/// from its size before it is read.
pub const MAX_INPUT_BYTES: u64 = crate::kernel::store::MAX_BLOB_LEN as u64;

/// What a file that is not a regular file is, for error messages.
fn kind_of(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        return "a folder";
    }
    if t.is_symlink() {
        return "a symbolic link";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    "not a regular file"
}

fn check_file(path: &Path, meta: &Metadata, limit: u64) -> Result<()> {
    if !meta.is_file() {
        return Err(Error::InvalidArgument(format!(
            "{}: expected a regular file, found {}",
            path.display(),
            kind_of(meta)
        )));
    }
    if meta.len() > limit {
        return Err(too_large(path, meta.len(), limit));
    }
    Ok(())
}

fn too_large(path: &Path, len: u64, limit: u64) -> Error {
    Error::InvalidArgument(format!(
        "{}: expected a file of at most {limit} bytes, found {len} bytes (not read)",
        path.display()
    ))
}

/// The whole content of the regular file `path`, at most `limit` bytes. The file's type and
/// size are checked before it is opened (opening a FIFO would block) and again on the open
/// handle; the read stops at `limit + 1` bytes, so a file that grows meanwhile is refused too.
///
/// ```
/// use undertext::import::{MAX_INPUT_BYTES, read_bounded};
/// # let dir = tempfile::tempdir().unwrap();
/// let f = dir.path().join("t.json");
/// std::fs::write(&f, "[]")?;
/// assert_eq!(read_bounded(&f, MAX_INPUT_BYTES)?, b"[]");
/// assert!(read_bounded(&f, 1).unwrap_err().to_string().contains("at most 1 bytes, found 2"));
/// assert!(read_bounded(dir.path(), 10).unwrap_err().to_string().contains("expected a regular file, found a folder"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io("stat", path, e))?;
    check_file(path, &meta, limit)?;
    let file = std::fs::File::open(path).map_err(|e| Error::io("open", path, e))?;
    let meta = file.metadata().map_err(|e| Error::io("stat", path, e))?;
    check_file(path, &meta, limit)?;
    let mut buf = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(limit.saturating_add(1)).read_to_end(&mut buf).map_err(|e| Error::io("read", path, e))?;
    if buf.len() as u64 > limit {
        return Err(too_large(path, buf.len() as u64, limit));
    }
    Ok(buf)
}

/// The inputs found under some paths, and what was skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Walk {
    /// Transcript files, and OpenHands SDK conversation folders, in path order, each once.
    pub files: Vec<PathBuf>,
    /// What was skipped: entries that are not regular files (FIFOs, devices, sockets),
    /// links that cannot be followed (loops, dangling), folders reached a second time
    /// through a link, folders that cannot be read.
    pub problems: Vec<Problem>,
}

/// Device and inode: what makes a file or folder the same one whatever the path.
type Identity = (u64, u64);

#[cfg(unix)]
fn identity(_: &Path, meta: &Metadata) -> Identity {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

#[cfg(not(unix))]
fn identity(path: &Path, _: &Metadata) -> Identity {
    let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let h = blake3::hash(canon.to_string_lossy().as_bytes());
    let b = h.as_bytes();
    let word = |i: usize| {
        u64::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3], b[i + 4], b[i + 5], b[i + 6], b[i + 7]])
    };
    (word(0), word(8))
}

fn is_transcript_name(name: &str) -> bool {
    [".jsonl", ".json", ".traj"].iter().any(|x| name.ends_with(x)) && name != "MANIFEST.json"
}

struct Walker {
    visited: HashSet<Identity>,
    out: Walk,
}

impl Walker {
    fn skip(&mut self, path: &Path, reason: String) {
        self.out.problems.push(Problem { file: path.to_path_buf(), line: 0, reason });
    }

    fn dir(&mut self, dir: &Path) {
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) => {
                return self.skip(dir, format!("expected a readable folder, found an error: {e} (skipped)"));
            }
        };
        let mut entries = Vec::new();
        for e in rd {
            match e {
                Ok(e) => entries.push(e.path()),
                Err(e) => {
                    self.skip(dir, format!("expected a readable folder, found an error: {e} (rest skipped)"))
                }
            }
        }
        entries.sort();
        for p in entries {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if name.starts_with('.') {
                continue;
            }
            let meta = match std::fs::metadata(&p) {
                Ok(m) => m,
                Err(e) => {
                    let what = match std::fs::symlink_metadata(&p) {
                        Ok(m) if m.file_type().is_symlink() => "a symbolic link that cannot be followed",
                        _ => "an entry that cannot be looked at",
                    };
                    self.skip(&p, format!("expected a file or folder, found {what}: {e} (skipped)"));
                    continue;
                }
            };
            if meta.is_dir() {
                self.folder(&p, &meta);
            } else if is_transcript_name(&name) {
                if meta.is_file() {
                    if self.visited.insert(identity(&p, &meta)) {
                        self.out.files.push(p);
                    }
                } else {
                    self.skip(&p, format!("expected a regular file, found {} (skipped)", kind_of(&meta)));
                }
            }
        }
    }

    fn folder(&mut self, dir: &Path, meta: &Metadata) {
        if !self.visited.insert(identity(dir, meta)) {
            let link = std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink());
            if link {
                self.skip(
                    dir,
                    "a link to a folder already walked (a loop or a second path to it): skipped, its files are \
                     imported once"
                        .into(),
                );
            }
            return;
        }
        if openhands::is_conversation_folder(dir) {
            self.out.files.push(dir.to_path_buf());
        } else {
            self.dir(dir);
        }
    }
}

/// The transcripts under `paths`: files as given, folders walked recursively (hidden entries
/// skipped; files ending in `.jsonl`, `.json` or `.traj`; an OpenHands SDK conversation
/// folder as one input), in path order, every file and folder once (by device and inode).
/// A path given that does not exist is an error; anything skipped on the way is a problem.
pub fn walk(paths: &[PathBuf]) -> Result<Walk> {
    let mut w = Walker { visited: HashSet::new(), out: Walk::default() };
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| Error::io("stat", p, e))?;
        if meta.is_dir() {
            w.folder(p, &meta);
        } else if meta.is_file() {
            if w.visited.insert(identity(p, &meta)) {
                w.out.files.push(p.clone());
            }
        } else {
            w.skip(p, format!("expected a regular file or a folder, found {} (not read)", kind_of(&meta)));
        }
    }
    Ok(w.out)
}
