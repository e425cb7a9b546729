//! Status codes returned by every function, and the error type that carries a status and
//! its message inside the crate.

use undertext::Error;

/// The status every `undertext_*` function returns: [`UNDERTEXT_OK`] or an error code;
/// the error's message is then readable with `undertext_last_error`.
pub type Status = i32;

/// Success.
pub const UNDERTEXT_OK: Status = 0;
/// A required pointer argument was NULL (or misaligned for its type).
pub const UNDERTEXT_NULL_POINTER: Status = 1;
/// A string argument was not valid UTF-8.
pub const UNDERTEXT_INVALID_UTF8: Status = 2;
/// An argument was malformed (bad enum value, empty owner, invalid JSON, ...).
pub const UNDERTEXT_INVALID_ARGUMENT: Status = 3;
/// A range or position is past the end of what it indexes (the message gives the length).
pub const UNDERTEXT_OUT_OF_RANGE: Status = 4;
/// A handle was never issued, is of another kind, or is the zero handle.
pub const UNDERTEXT_BAD_HANDLE: Status = 5;
/// A handle was freed or closed (its slot's generation moved on), or its store was closed.
pub const UNDERTEXT_STALE_HANDLE: Status = 6;
/// Not found, or owned by another owner (the two are indistinguishable by design).
pub const UNDERTEXT_NOT_FOUND: Status = 7;
/// An edit or truncation was based on a revision that is no longer current.
pub const UNDERTEXT_STALE_REVISION: Status = 8;
/// A checkpoint publication was refused (the chat was edited, or it is not newer).
pub const UNDERTEXT_CONFLICT: Status = 9;
/// The store is held open by another process or handle.
pub const UNDERTEXT_LOCKED: Status = 10;
/// Stored data failed its checksum or content address, or passed it but is not what its
/// record says (an archive that is not UTF-8, a code this build does not know).
pub const UNDERTEXT_CORRUPT: Status = 11;
/// An operating-system I/O call failed.
pub const UNDERTEXT_IO: Status = 12;
/// The on-disk format is not understood by this build.
pub const UNDERTEXT_UNSUPPORTED: Status = 13;
/// The derived index failed (the log is intact), or the writer is poisoned: reopen.
pub const UNDERTEXT_INDEX: Status = 14;
/// A buffer given by the caller is too small (the needed length is returned).
pub const UNDERTEXT_BUFFER_TOO_SMALL: Status = 15;
/// A buffer passed to `undertext_buf_free` was not handed out by this library, or was
/// already freed.
pub const UNDERTEXT_BAD_BUFFER: Status = 16;
/// A C callback (the summarizer) reported an error.
pub const UNDERTEXT_CALLBACK: Status = 17;
/// A compaction plan was refused by the linter; nothing was written. The last error lists
/// every problem (`rule: detail`, separated by `; `); `undertext_chat_lint` gives them as
/// JSON.
pub const UNDERTEXT_PLAN_REFUSED: Status = 18;
/// A write through a store opened with `undertext_store_open_read_only`, or a read-only
/// store whose log a `gc` replaced (open it again): the message says which.
pub const UNDERTEXT_READ_ONLY: Status = 19;
/// The store was opened by another process, of which the caller is a `fork()` child: the
/// child has copies of the parent's handles but not its threads, and writing through them
/// would lose acknowledged writes of either process. Appends and every other write, reads of
/// messages and blobs, views, opening, creating and listing chats, `undertext_store_sync`
/// and `undertext_store_close` fail so in the child; nothing is read or written, and freeing
/// the handles there (`undertext_chat_close`, `undertext_snapshot_free`, and
/// `undertext_store_close`, which frees the handle and returns this status) writes nothing.
/// The message names both processes. Open a store in the child after the fork (one process
/// holds a store at a time: the parent's is `UNDERTEXT_LOCKED` while the parent has it
/// open), or `exec` a new program.
pub const UNDERTEXT_FORKED: Status = 20;
/// A read-only open met a store that a live process is creating or collecting (`gc`), again
/// and again for about a second: not damage; retry the open in a moment. The message names
/// the process.
pub const UNDERTEXT_BUSY: Status = 21;
/// A bug in Undertext (a caught panic); the message says where.
pub const UNDERTEXT_INTERNAL: Status = 99;

/// An error on its way to C: a status and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FfiError {
    pub(crate) status: Status,
    pub(crate) message: String,
}

/// Result of the crate's internal calls.
pub(crate) type FfiResult<T> = Result<T, FfiError>;

impl FfiError {
    pub(crate) fn new(status: Status, message: impl Into<String>) -> FfiError {
        FfiError { status, message: message.into() }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> FfiError {
        FfiError::new(UNDERTEXT_INVALID_ARGUMENT, message)
    }

    pub(crate) fn out_of_range(message: impl Into<String>) -> FfiError {
        FfiError::new(UNDERTEXT_OUT_OF_RANGE, message)
    }
}

impl From<Error> for FfiError {
    fn from(e: Error) -> FfiError {
        let status = match &e {
            Error::Io { .. } | Error::Backend { .. } => UNDERTEXT_IO,
            Error::Corrupt { .. } | Error::CorruptContent { .. } => UNDERTEXT_CORRUPT,
            Error::Locked { .. } => UNDERTEXT_LOCKED,
            Error::NotFound { .. } => UNDERTEXT_NOT_FOUND,
            Error::StaleRevision { .. } => UNDERTEXT_STALE_REVISION,
            Error::InvalidArgument(_) => UNDERTEXT_INVALID_ARGUMENT,
            Error::Lint { .. } => UNDERTEXT_PLAN_REFUSED,
            Error::UnsupportedVersion { .. } => UNDERTEXT_UNSUPPORTED,
            Error::Conflict(_) => UNDERTEXT_CONFLICT,
            Error::Index { .. } | Error::Poisoned(_) => UNDERTEXT_INDEX,
            Error::ReadOnly(_) => UNDERTEXT_READ_ONLY,
            Error::Forked { .. } => UNDERTEXT_FORKED,
            Error::Busy { .. } => UNDERTEXT_BUSY,
            _ => UNDERTEXT_INTERNAL,
        };
        FfiError::new(status, e.to_string())
    }
}
