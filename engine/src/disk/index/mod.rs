//! The redb index, derived from the log: where each blob lives, and how far into the log
//! the index reaches.
//!
//! New records first land in an in-memory memtable (under the log writer's lock, so
//! readers see a batch whole or not at all). The background indexer moves them into
//! redb with non-durable commits and, periodically, makes redb durable after syncing the
//! log up to the position it records. On open, the log is replayed from that position.
//!
//! The only module that names redb: the floors above read through [`ReadTx`] and the
//! questions of `query`, which answer in plain values.
//!
//! Files: `open` (opening and verifying the file), `backend` (redb's file backend behind the
//! file seam), `flush` (memtable and replayed batches into redb), `blob_row` (a blob's
//! location and grants, one row per blob), `lookup` (blobs, grants, inline texts, the next
//! chat id), `query` (the history questions of the floors above), `rebuild` (rebuild, check
//! against the log, clear, compaction), `history` (the history tables and their rows),
//! `memtable`, `pending_texts` (the inline texts of the memtable's message records).

mod aside_texts;
mod backend;
mod blob_row;
mod flush;
mod history;
mod lookup;
mod memtable;
mod open;
mod pending_texts;
mod query;
mod rebuild;
mod seal;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, MutexGuard, RwLock};
use redb::{Database, ReadableDatabase, TableDefinition};

use crate::base::blob::BlobId;
use crate::base::error::{Error, Result};
use crate::disk::log::{Location, Position};
use crate::disk::record::Kind;
pub(crate) use backend::Journal;
use blob_row::BLOBS;
pub(crate) use blob_row::Held;
pub(crate) use flush::{entries_keeping, entries_of};
pub(crate) use history::{
    ChatRow, GRANT_ARCHIVE, GRANT_INLINE, HistoryIndex, MsgVal, batch_chats, chat_of, is_grant,
};
pub(crate) use history::{FIELD_EXTRA, FIELD_TITLE};
pub(crate) use memtable::Memtable;
pub(crate) use pending_texts::{Listing, texts_of};
pub(crate) use query::{
    ReadTx, all_chats, archive_record, calibration, changed_below, chat_row, checkpoint_location,
    compaction_locations, erasures, find_chats, hides_until, len_at_end_of, may_archive_below, message_at,
    message_version, message_versions, meta_location, owner_chats, owners, pins, step_locations, summary,
    truncations_until,
};
use rebuild::diff_table;
pub use seal::IndexAtOpen;

/// Bookkeeping: applied position, next transaction id, index format version.
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");

/// Version of the index layout. A different version on disk is rebuilt from the log.
/// 3: the `grants` and `chat_grants` tables.
/// 4: the `inline_texts`, `chat_inline_texts` and `body_texts_todo` tables (a view's
/// previews of inline texts are read through them, without an archive written).
/// 5: `chat_lookup` and `chat_fields` (chats by metadata value, `Store::find_chats`).
/// 6: `inline_texts` lists the text parts of user messages only (and inline tool results of
/// every message): no view previews the others (issue 19: half of a LangGraph saver's index).
/// 7: one `blobs` row per blob holds its location and its grants (`chat_grants` gone,
/// `grants` only for a blob with many grants); a grant bound to a deleted chat stays and no
/// longer counts; `messages` values are varints (issue 19: two fifths of a LangGraph saver's
/// index).
/// 8: a `messages` value says whether the message may hold an archived tool result, and
/// `may_archive` lists those versions, so that a checkpoint's handles line reads only them
/// (issue 38: a first view read every message under the checkpoint).
/// 9: `chat_inline_texts` is keyed by (chat, seq, revision, part, text), in the order a chat
/// is written (issue 34: keyed by the text's address, a long chat's import inserted at random
/// places and its time per message grew once the table outgrew redb's cache).
/// 10: `inline_texts` lists only texts longer than 128 characters, the shortest a view can
/// preview (issue 34: every short user text was one insert at a random place of the table;
/// issue 38: most of a small chat's index rows); `chats` rows are varints (88 bytes of rkyv
/// before) and `metas` values too; `owner_chats` is keyed ascending, read backwards (keyed
/// newest first, its pages were half empty).
/// 11: a `messages` value ends with the message's token estimate by the default estimator
/// when the record holds its parts (issue 38: the estimates were 40 % of a first view).
const INDEX_VERSION: u64 = 11;

/// The file name of the index inside the store directory.
pub(crate) const INDEX_FILE: &str = "index.redb";

/// The index: redb plus the memtable of records not yet in redb.
#[derive(Debug)]
pub(crate) struct Index {
    /// Behind a lock only so that [`Index::compact_if_fragmented`] can take it whole at close;
    /// every other use takes it shared, briefly, to begin a transaction.
    db: RwLock<Database>,
    path: PathBuf,
    cache_bytes: usize,
    pub(crate) mem: RwLock<Memtable>,
    /// Serializes flushes (the indexer thread, `sync`, rebuild).
    flush_lock: Mutex<()>,
    /// Everything before this position is in redb (visible to read transactions).
    flushed: Mutex<Position>,
    /// What redb's writes did while the store opens (see [`Index::abandon`]).
    journal: Arc<Journal>,
    /// Advanced after every redb commit that may have removed a grant (a chat's deletion
    /// applied, the index rebuilt or cleared): a grant decision cached under an older value
    /// is not used again (see [`Index::grants_epoch`]).
    grants_epoch: AtomicU64,
    /// A read-only store's index, in memory (`Index::in_memory`): nothing of it is ever
    /// recovered, so its commits skip redb's quick-repair state.
    in_memory: bool,
    /// A read-only store's inline texts, listed in memory when a lookup needs them.
    aside: Mutex<aside_texts::AsideTexts>,
    /// The process that opened the store: a fork child's copy reads and writes nothing.
    opener: crate::base::io::Opener,
    /// Set once this open committed anything to redb: a close after none (a process that
    /// only read) does not count the index's free pages, which walks every page.
    changed: std::sync::atomic::AtomicBool,
    /// How the file was trusted at open.
    at_open: seal::IndexAtOpen,
    /// Seals the file at a clean close. Last: dropped after `db` has closed the file.
    sealer: seal::Sealer,
}

/// A message version that holds a text inline: see [`Index::inline_text`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InlineText {
    pub chat: u64,
    pub seq: u64,
    pub revision: u64,
    /// The part that is the text.
    pub part: u32,
    /// The message record.
    pub loc: Location,
}

/// What one batch adds to the index: blob locations, and history records to apply.
#[derive(Debug, Default)]
pub(crate) struct BatchEntries {
    pub blobs: Vec<(BlobId, Location)>,
    pub records: Vec<PendingRecord>,
}

/// A non-blob record waiting to be applied to redb.
#[derive(Debug, Clone)]
pub(crate) struct PendingRecord {
    pub kind: Kind,
    pub loc: Location,
    pub payload: Vec<u8>,
    /// For a grant (archive or blob grant record): the chats whose records share its batch,
    /// which it is bound to (empty: the owner's own). Empty for every other kind.
    pub chats: Vec<u64>,
    /// For a message record: its key, header fields and where its inline texts are, from
    /// [`texts_of`] (listed once, by whoever makes the record, outside the log's lock).
    pub texts: Option<pending_texts::Listing>,
}

/// What the index knows about how far it reaches into the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Applied {
    pub position: Position,
    pub next_txid: u64,
    /// Offset of the batch that ends at `position` (0 when `position` starts a segment):
    /// on open, that batch must decode and end there, or the index is not this log's.
    pub batch_start: u64,
}

/// [`Error::index`] for an error of redb: a full disk behind it is said as one.
fn redb_err(e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::index(e, redb_io)
}

/// The I/O error `e` is, or that the redb error `e` carries (redb's errors do not give it as
/// their `source()`).
fn redb_io<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    fn storage(s: &redb::StorageError) -> Option<&std::io::Error> {
        match s {
            redb::StorageError::Io(io) => Some(io),
            _ => None,
        }
    }
    if let Some(io) = e.downcast_ref::<std::io::Error>() {
        return Some(io);
    }
    if let Some(redb::Error::Io(io)) = e.downcast_ref::<redb::Error>() {
        return Some(io);
    }
    if let Some(s) = e.downcast_ref::<redb::StorageError>() {
        return storage(s);
    }
    if let Some(redb::CommitError::Storage(s)) = e.downcast_ref::<redb::CommitError>() {
        return storage(s);
    }
    if let Some(redb::TransactionError::Storage(s)) = e.downcast_ref::<redb::TransactionError>() {
        return storage(s);
    }
    if let Some(redb::TableError::Storage(s)) = e.downcast_ref::<redb::TableError>() {
        return storage(s);
    }
    if let Some(redb::DatabaseError::Storage(s)) = e.downcast_ref::<redb::DatabaseError>() {
        return storage(s);
    }
    if let Some(redb::CompactionError::Storage(s)) = e.downcast_ref::<redb::CompactionError>() {
        return storage(s);
    }
    if let Some(redb::SavepointError::Storage(s)) = e.downcast_ref::<redb::SavepointError>() {
        return storage(s);
    }
    None
}

/// Runs `f`, turning a panic into [`Error::Index`].
///
/// Why a `catch_unwind`: redb trusts the bytes of its file. A damaged page that its checksums
/// do not cover (the header, the commit slots, the allocator state) can make redb index out
/// of bounds or hit an `unwrap` while opening, verifying, compacting or closing the file, and
/// such a panic would take the caller's process down (at close, from `Drop`, an abort). The
/// index is derived from the log, so the only right answer to damage in it is an error that
/// says to rebuild. Only calls that read a file not yet verified are wrapped: `open` and
/// verification, compaction at close, and dropping a replaced database. Nothing they share
/// with other threads is left half-changed by a panic (the database is not used again).
///
/// Such a panic is not printed: the panic hook (installed on first use, see [`quiet_hook`])
/// stays silent for a panic inside `f` on this thread, so a user sees only the error; every
/// other panic goes to the hook that was there before.
pub(crate) fn guard<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    quiet_hook();
    let caught = GUARDED.with(|depth| {
        depth.set(depth.get() + 1);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        depth.set(depth.get() - 1);
        r
    });
    match caught {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            Err(Error::index_msg(format!("{what}: redb failed on a damaged page ({msg})")))
        }
    }
}

thread_local! {
    /// How many [`guard`] calls this thread is inside: a panic then is caught by one.
    static GUARDED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Installs, once per process, a panic hook that says nothing about a panic caught by
/// [`guard`] and hands every other panic to the hook that was set before it (the default
/// one, or the application's own).
fn quiet_hook() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARDED.try_with(|depth| depth.get()).unwrap_or(0) == 0 {
                previous(info);
            }
        }));
    });
}

impl Index {
    /// The grants epoch: it advances after every commit that may have removed a grant from
    /// redb. A positive grant decision read from redb may be cached under the epoch read
    /// *before* the lookup, and used only while the epoch is still that value: a revocation
    /// committed after the lookup then invalidates it, and one committed before it was seen.
    pub(crate) fn grants_epoch(&self) -> u64 {
        self.grants_epoch.load(Ordering::SeqCst)
    }

    fn grants_changed(&self) {
        self.grants_epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// Everything written before this position is in redb.
    pub(crate) fn flushed(&self) -> Position {
        *self.flushed.lock()
    }

    /// A consistent read of the index, for the queries of [`query`].
    pub(crate) fn read(&self) -> Result<ReadTx> {
        crate::disk::log::same_process(&self.opener)?;
        self.db.read().begin_read().map(ReadTx).map_err(redb_err)
    }

    /// Holds off flushes while a rebuild runs.
    pub(crate) fn pause_flushes(&self) -> MutexGuard<'_, ()> {
        self.flush_lock.lock()
    }

    /// The descriptors redb holds on the index file (and locks through).
    pub(crate) fn descriptors(&self) -> Vec<std::os::fd::RawFd> {
        self.journal.fds.lock().clone()
    }

    /// The index file path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code: a failed step fails the test")]

    use super::*;

    #[test]
    fn an_index_error_from_redb_keeps_the_redb_error_as_its_source() {
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = Index::open(dir.path(), 1 << 20, true).unwrap();
        let loc = Location { segment: 1, offset: 0, len: 3 };
        let entries = BatchEntries { blobs: vec![(BlobId::of(b"abc"), loc)], records: Vec::new() };
        index
            .apply_replayed(
                &[entries],
                Applied { position: Position::new(1, 40), next_txid: 1, batch_start: 0 },
            )
            .unwrap();
        // The blobs table opened with another value type: redb refuses it.
        let wrong: TableDefinition<'_, [u8; 32], u64> = TableDefinition::new("blobs");
        let tx = index.read().unwrap();
        let e = tx.0.open_table(wrong).map(|_| ()).map_err(redb_err).unwrap_err();
        let source = std::error::Error::source(&e).expect("the redb error is kept");
        assert!(source.downcast_ref::<redb::TableError>().is_some(), "{source:?}");
        // The message is as before: redb's words, and the advice to rebuild.
        assert_eq!(
            e.to_string(),
            format!(
                "index error: {source} (the index is derived from the log, which this does not damage: run \
                 `undertext check --rebuild` to rebuild it)"
            )
        );
        // Damage found without a redb error has no source.
        assert!(std::error::Error::source(&Error::index_msg("a value that does not decode")).is_none());
    }
}
