//! The error type of every fallible engine call.

use std::fmt;
use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in Undertext.
///
/// Each variant says what was expected and what was found, so the message is
/// useful on its own when it crosses the C ABI or reaches Python.
///
/// ```
/// use undertext::Error;
/// let e = Error::Corrupt { segment: 3, offset: 4096, reason: "record checksum mismatch".into() };
/// assert_eq!(e.to_string(), "corrupt data in log segment 3 at offset 4096: record checksum mismatch");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O call failed. When it failed for lack of space (`ENOSPC`,
    /// `EDQUOT`) the message says the disk is full, and that this is not damage.
    #[error("{}", io_message(op, path, source))]
    Io {
        /// What the engine was doing (`"open"`, `"write"`, `"fdatasync"`, ...).
        op: &'static str,
        /// The file or directory involved.
        path: DisplayPath,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Stored bytes do not match their checksum or content address.
    #[error("corrupt data in log segment {segment} at offset {offset}: {reason}")]
    Corrupt {
        /// Segment number (the `NNNNNNNN` of `log/NNNNNNNN.seg`).
        segment: u64,
        /// Byte offset of the damaged frame inside that segment.
        offset: u64,
        /// What check failed.
        reason: String,
    },
    /// Another process (or another handle in this process) holds the store open.
    #[error("{}", locked_message(*pid))]
    Locked {
        /// Process id recorded in the lock file: this process's own id when another handle
        /// of this process holds the store, `0` when the holder has not written its pid yet
        /// (it is opening the store at this moment) or the lock file holds no pid.
        pid: u32,
    },
    /// The requested object does not exist, or belongs to another owner.
    #[error("not found: {what}")]
    NotFound {
        /// What was looked up.
        what: String,
    },
    /// An edit was based on a revision that is no longer current.
    #[error("stale revision: expected {expected}, found {found}")]
    StaleRevision {
        /// The revision the caller based its change on.
        expected: u64,
        /// The chat's current revision.
        found: u64,
    },
    /// An argument was out of range or malformed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The on-disk format is newer or otherwise not understood by this build.
    #[error("unsupported format in {path}: expected version {expected}, found {found}")]
    UnsupportedVersion {
        /// The file with the unknown version.
        path: DisplayPath,
        /// The version this build writes.
        expected: u32,
        /// The version found on disk.
        found: u32,
    },
    /// A checkpoint could not be published; nothing was written.
    #[error("checkpoint not published: {0}")]
    Conflict(Conflict),
    /// A compaction plan broke the linter's rules; nothing was applied.
    #[error("compaction plan rejected: {}", problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; "))]
    Lint {
        /// Every problem found, each naming its rule.
        problems: Vec<LintProblem>,
    },
    /// The derived index failed (damaged, or not this log's); the log is intact and the
    /// index can be rebuilt from it: `undertext check --rebuild`, [`Store::rebuild_index`],
    /// or [`Store::rebuild_index_at`] for a store whose index does not open. The message says so.
    ///
    /// [`Store::rebuild_index`]: crate::Store::rebuild_index
    /// [`Store::rebuild_index_at`]: crate::Store::rebuild_index_at
    ///
    /// `source()` gives the error of the index's database (redb) behind it, when there is
    /// one; damage found without one (a value that does not decode, an entry missing) has
    /// none.
    #[error(
        "index error: {message} (the index is derived from the log, which this does not damage: run `undertext check --rebuild` to rebuild it)"
    )]
    Index {
        /// What failed.
        message: String,
        /// The database error behind it, if any.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
    /// Stored content is not what its record says it is: an archive that is not UTF-8 text, a
    /// role or unit code this build does not know, a chunk that does not fit its manifest.
    /// The log holds these bytes (they passed its checksum), so rebuilding the index does not
    /// repair them; unlike [`Error::Corrupt`] the damage is named by the object it is in, not
    /// by a log position. A record written by a newer build can look like this too.
    ///
    /// ```
    /// use undertext::Error;
    /// let e = Error::CorruptContent { what: "archive 1f2e…".into(), reason: "not UTF-8 at byte 7".into() };
    /// assert!(e.to_string().starts_with("corrupt content in archive 1f2e…: not UTF-8 at byte 7"));
    /// ```
    #[error(
        "corrupt content in {what}: {reason} (the log holds these bytes as written, so rebuilding the index does not repair them; `undertext check` verifies every record)"
    )]
    CorruptContent {
        /// The object whose content is wrong (an archive, a message, a pin), by id.
        what: String,
        /// What was expected and what was found.
        reason: String,
    },
    /// The store was opened by another process, of which the caller is a `fork`
    /// (`multiprocessing` with the fork start method, a pre-forking server): the child has
    /// copies of the parent's handles but not its threads, and writing through them would lose
    /// either side's acknowledged writes. Every call in the child fails so; open the store in
    /// the child instead (after the fork). Nothing was read or written, and dropping the
    /// handles in the child writes nothing.
    ///
    /// ```
    /// use undertext::Error;
    /// let e = Error::Forked { opened_by: 100, caller: 101 };
    /// assert!(e.to_string().starts_with("this store was opened by process 100; process 101 is a fork of it"));
    /// ```
    #[error("{}", forked_message(*opened_by, *caller))]
    Forked {
        /// The process that opened the store.
        opened_by: u32,
        /// The calling process (a fork of `opened_by`).
        caller: u32,
    },
    /// A read-only open ([`Store::open_read_only`]) met a store that a live process is
    /// creating (its log not there yet) or collecting (a `gc` swapping its log in while it was
    /// read), again and again for about a second. This is not damage: retry the open in a
    /// moment. `pid` is the process holding the store's `LOCK`.
    ///
    /// [`Store::open_read_only`]: crate::Store::open_read_only
    ///
    /// ```
    /// use undertext::Error;
    /// let e = Error::Busy { pid: 42, reason: "the store at /s is being created by process 42".into() };
    /// assert!(e.to_string().starts_with("store is busy: the store at /s is being created by process 42"));
    /// ```
    #[error("store is busy: {reason}; this is not damage: retry the open in a moment")]
    Busy {
        /// The process holding the store's `LOCK` (the one creating or collecting it).
        pid: u32,
        /// What the store is in the middle of, and what the last try found.
        reason: String,
    },
    /// A previous I/O failure left the writer unable to continue; reopen the store.
    #[error("{}", poisoned_message(.0))]
    Poisoned(String),
    /// The store was opened read-only ([`Store::open_read_only`]): it never writes, so a
    /// write through it is refused; or the log it follows changed under it (a `gc` replaced
    /// its segments), and it must be opened again.
    ///
    /// [`Store::open_read_only`]: crate::Store::open_read_only
    #[error("store is open read-only: {0}")]
    ReadOnly(String),
    /// Fleet mode (feature `fleet`): the shared catalog (PostgreSQL) or blob store failed or
    /// could not be reached. Nothing this call wrote is visible unless the catalog committed it
    /// (a commit whose answer was lost is found again at the next read of the chat).
    #[error("fleet backend {url}: {reason}")]
    Backend {
        /// The backend, without its password.
        url: String,
        /// What was being done and what failed.
        reason: String,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { op, path: DisplayPath(path.into()), source }
    }

    pub(crate) fn corrupt(segment: u64, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corrupt { segment, offset, reason: reason.into() }
    }

    /// [`Error::Index`] for an error of the index's database, kept as its `source()`; but
    /// [`Error::Io`] when behind it is a write that failed for lack of space: a full disk is
    /// not damage, and no rebuild repairs it. `io_of` finds the I/O error an error of `e`'s
    /// `source()` chain carries (the index knows its database's error types, which do not
    /// all give it as their source).
    pub(crate) fn index<E: std::error::Error + Send + Sync + 'static>(
        e: E,
        io_of: for<'a> fn(&'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error>,
    ) -> Self {
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(c) = cur {
            if let Some(io) = io_of(c)
                && is_full(io)
            {
                let source = std::io::Error::new(io.kind(), format!("the index's write failed: {e}"));
                return Error::Io { op: "write", path: DisplayPath(PathBuf::from("index.redb")), source };
            }
            cur = c.source();
        }
        Error::Index { message: e.to_string(), source: Some(Box::new(e)) }
    }

    /// True when this is an I/O error saying the store cannot be written here: its file
    /// system is mounted read-only (`EROFS`) or its directory or files are not writable by
    /// this user (`EACCES`, `EPERM`). [`Store::open_read_only`](crate::Store::open_read_only)
    /// reads such a store.
    pub fn is_unwritable(&self) -> bool {
        matches!(self, Error::Io { source, .. } if is_unwritable(source))
    }

    /// `self`, its message naming the read-only open when the store cannot be written here
    /// (see [`Error::is_unwritable`]): for the errors of [`Store::open`](crate::Store::open).
    pub(crate) fn unwritable_said(self) -> Self {
        match self {
            Error::Io { op, path, source } if is_unwritable(&source) => {
                let why = if source.raw_os_error() == Some(libc::EROFS) {
                    "the store is on a read-only file system"
                } else {
                    "the store's directory or files are not writable by this user"
                };
                let source = std::io::Error::new(
                    source.kind(),
                    format!(
                        "{source}: {why}; to read it, open it read-only: `Store::open_read_only` (CLI \
                         `--read-only`, C `undertext_store_open_read_only`, Python `Store.open_read_only`)"
                    ),
                );
                Error::Io { op, path, source }
            }
            other => other,
        }
    }

    /// True when this is an I/O error saying the disk (or the user's quota) is full.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, Error::Io { source, .. } if is_full(source))
    }

    /// [`Error::Index`] for damage found in the index itself (no database error behind it).
    pub(crate) fn index_msg(message: impl Into<String>) -> Self {
        Error::Index { message: message.into(), source: None }
    }

    /// [`Error::CorruptContent`]: the content of `what` is wrong, as `reason` says.
    pub(crate) fn corrupt_content(what: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::CorruptContent { what: what.into(), reason: reason.into() }
    }
}

/// True when `e` says the disk (or the user's quota) is full: `ENOSPC` or `EDQUOT`.
pub(crate) fn is_full(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded)
        || matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// The message of [`Error::Poisoned`]: a writer stopped by a full disk says so.
fn poisoned_message(why: &str) -> String {
    let full = ["(os error 28)", "(os error 122)"].iter().any(|c| why.contains(c));
    if full && !why.contains("disk is full") {
        return format!(
            "store writer is poisoned by an earlier failure ({why}: the disk is full, which is not damage to \
             the store); free space, then reopen the store"
        );
    }
    format!("store writer is poisoned by an earlier failure ({why}); reopen the store")
}

/// True when `e` says a file cannot be written here: `EROFS`, `EACCES` or `EPERM`.
fn is_unwritable(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EROFS | libc::EACCES | libc::EPERM))
        || matches!(e.kind(), std::io::ErrorKind::ReadOnlyFilesystem | std::io::ErrorKind::PermissionDenied)
}

/// The message of [`Error::Io`]: the call, the file and the error; a full disk said plainly.
fn io_message(op: &str, path: &DisplayPath, source: &std::io::Error) -> String {
    let m = format!("{op} {path}: {source}");
    if !is_full(source) || m.contains("disk is full") {
        return m;
    }
    format!(
        "{m}: the disk is full (no space left, or the disk quota is used up); this is not damage to the \
         store: free space and try again"
    )
}

/// The message of [`Error::Forked`]: what happened and what to do instead.
fn forked_message(opened_by: u32, caller: u32) -> String {
    format!(
        "this store was opened by process {opened_by}; process {caller} is a fork of it and cannot use \
         the parent's handles (the parent's writer threads and locks do not exist here, and writing \
         would lose acknowledged data of either process): open the store in this process after the \
         fork, or start workers with the \"spawn\" or \"forkserver\" method; nothing was read or written"
    )
}

/// The message of [`Error::Locked`]: who holds the store, as far as can be told.
fn locked_message(pid: u32) -> String {
    if pid == std::process::id() {
        return format!(
            "store is locked: it is already open in this process (pid {pid}), another handle holds it; use \
             that handle, or close or drop it first"
        );
    }
    if pid == 0 {
        return "store is locked by another process that has not recorded its pid in LOCK (it is opening \
                the store right now); close it there first"
            .to_string();
    }
    format!("store is locked by another process (pid {pid}); close it there first")
}

/// Why a checkpoint publication was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Conflict {
    /// The chat was edited (or truncated) since the checkpoint's base revision.
    #[error("it was built on revision {base}, the chat is now at revision {now}")]
    Edited {
        /// The checkpoint's base revision.
        base: u64,
        /// The chat's revision now.
        now: u64,
    },
    /// A checkpoint reaching as far or further is already published.
    #[error("its reach is not beyond the published reach {published_reach}")]
    NotNewer {
        /// The reach of the published checkpoint.
        published_reach: u64,
    },
}

/// A path that prints with `Display` (for error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisplayPath(pub PathBuf);

impl fmt::Display for DisplayPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.display())
    }
}

/// One thing wrong with a plan. `rule` names the rule, `detail` says what was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LintProblem {
    /// `overlap`, `protected`, `boundary`, `longer`, `too_large`, `trim`, or `range`.
    pub rule: &'static str,
    /// What was expected and what was found.
    pub detail: String,
}

impl std::fmt::Display for LintProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.rule, self.detail)
    }
}

/// `url` with the password (if any) replaced by `***`.
pub(crate) fn hide_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let (auth_end, _) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let Some(at) = auth_end.rfind('@') else { return url.to_string() };
    let userinfo = &rest[..at];
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***{}", &rest[at..]),
        None => url.to_string(),
    }
}
