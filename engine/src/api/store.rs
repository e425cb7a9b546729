//! [`Store`]: an open store — the kernel, and the per-store state of the layers above it
//! (the chats in memory, the archive cache, the worker slot).

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::Chat;
use crate::base::blob::{Blob, BlobId, Verify};
use crate::base::error::Result;
use crate::chat::archive::{self, ArchiveCache, Unit};
use crate::chat::checkpoint::Summarizer;
use crate::chat::history::{self, ChatCache, ChatState};
use crate::chat::search::{self, SearchHit, SearchIndex, SearchScope};
use crate::chat::worker::{self, Worker, WorkerOptions};
use crate::kernel::options::Options;
use crate::kernel::store::core::Core;
use crate::kernel::store::{
    CheckReport, GcReport, Kernel, Refreshed, StoreStats, blobs, gc, maintenance, read_only,
};
use crate::model::message::{ArchiveRef, ChatId, ChatMeta, ChatPage, ChatSummary, MetaField, Page};

/// An open Undertext store: a directory holding the log (`log/*.seg`), the derived index
/// (`index.redb`) and a lock file. Cheap to clone; all clones share one store.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use undertext::{Store, Options};
/// let store = Store::open(dir.path(), Options::default())?;
/// let id = store.put_blob("o", b"$ cargo test\n...\ntest result: ok. 42 passed")?;
/// assert_eq!(store.put_blob("o", b"$ cargo test\n...\ntest result: ok. 42 passed")?, id); // stored once
/// assert_eq!(&*store.get_blob("o", &id)?, b"$ cargo test\n...\ntest result: ok. 42 passed");
/// # Ok::<(), undertext::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Store {
    pub(super) inner: Arc<Inner>,
}

/// What all handles of one store share. The background search indexer is stopped first,
/// the caches are dropped, then the kernel (fields drop in order): that closes the store —
/// stops the indexer, makes the index durable, compacts it, trims the log, and seals the index
/// once redb has closed it, the directory still locked — once the last handle (or running
/// worker) is gone. The kernel is last so that nothing else holds the core when it drops.
#[derive(Debug)]
pub(super) struct Inner {
    /// The background search indexer, started by the first search of a writable store.
    pub(super) search_thread: std::sync::OnceLock<search::Background>,
    pub(super) chats: Arc<ChatCache>,
    pub(super) archives: Arc<ArchiveCache>,
    pub(super) worker: worker::Slot,
    pub(super) search: Arc<SearchIndex>,
    pub(super) kernel: Kernel,
}

/// A store over an opened kernel; `next_chat` is the first chat id not given yet.
fn store_of(kernel: Kernel, next_chat: u64) -> Store {
    let chats = Arc::new(ChatCache::new(kernel.core.clone(), next_chat));
    // A read-only store writes nothing to its directory, and a fleet store has none: their
    // search index lives in memory, built from the log at the first search.
    let search_dir = (!kernel.is_read_only() && kernel.core.remote().is_none())
        .then(|| kernel.core.dir.join(search::SEARCH_DIR));
    Store {
        inner: Arc::new(Inner {
            search_thread: std::sync::OnceLock::new(),
            chats,
            archives: Arc::new(ArchiveCache::default()),
            worker: Default::default(),
            search: Arc::new(SearchIndex::new(search_dir)),
            kernel,
        }),
    }
}

/// The worker reaches its store through this (it holds the `Inner`, so the store stays open
/// while the worker runs).
impl worker::Host for Inner {
    fn chat(&self, owner: &str, id: ChatId) -> Result<Arc<ChatState>> {
        history::open_chat(&self.chats, owner, id, true)
    }

    fn archives(&self) -> &ArchiveCache {
        &self.archives
    }

    fn slot(&self) -> &worker::Slot {
        &self.worker
    }
}

impl Store {
    /// The archive cache, for the archive layer's own tests.
    #[cfg(test)]
    pub(crate) fn archive_cache_for_tests(&self) -> &ArchiveCache {
        &self.inner.archives
    }

    #[cfg(test)]
    pub(crate) fn core_for_tests(&self) -> &Arc<Core> {
        self.core()
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.inner.kernel.core
    }

    /// `Ok` in the process that opened the store, [`crate::Error::Forked`] in a fork of it.
    pub(super) fn same_process(&self) -> Result<()> {
        self.core().log.same_process()
    }

    /// Opens the store in `path`, creating it if `opts.create_if_missing`.
    ///
    /// Takes an exclusive lock: another opener gets [`Error::Locked`] at once. Replays the
    /// log from where the index last became durable, cuts a torn tail (reported through
    /// `tracing` and [`Store::open_warnings`]), and refuses corruption before the tail with
    /// [`Error::Corrupt`]. A log that is not whole — a segment file missing, a sealed segment
    /// emptied or cut short, a gap in transaction ids, or a log that ends before the position
    /// the index records — is refused with [`Error::Corrupt`] too, never opened short. Store
    /// entries that are links or not regular files (`LOCK`, `index.redb`, `log/`, segments)
    /// are refused, never followed.
    ///
    /// On a full disk, when open must write to bring the index up to date with the log (after
    /// a crash), it gives the store read-only instead (as [`Store::open_read_only`] does; the
    /// first of [`Store::open_warnings`] says why): every batch of the log is readable, writes
    /// fail with [`Error::ReadOnly`] saying the disk is full, and the files are left as found.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Store> {
        if let Some(url) = fleet_url(path.as_ref()) {
            #[cfg(feature = "fleet")]
            return crate::kernel::fleet::open(url, opts)
                .map(|(kernel, next_chat)| store_of(kernel, next_chat));
            #[cfg(not(feature = "fleet"))]
            return Err(no_fleet_feature(url));
        }
        refuse_non_directory(path.as_ref())?;
        let (kernel, next_chat) = Kernel::open(path.as_ref(), opts).map_err(crate::Error::unwritable_said)?;
        Ok(store_of(kernel, next_chat))
    }

    /// Opens the store in `path` read-only, with default options: see
    /// [`Store::open_read_only_with`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Store> {
        Store::open_read_only_with(path, Options::default())
    }

    /// Opens the store in `path` read-only: beside a live writer in another process, or to
    /// salvage a damaged store.
    ///
    /// Takes no lock, writes no byte to the store directory, and never blocks the writer.
    /// The index is built in memory from the log (the writer's `index.redb` is not read); the
    /// store sees every batch written before this call, and [`Store::refresh`] brings it up
    /// to date. A batch still being written at the end of the log is not seen yet. Damage is
    /// skipped and reported in [`Store::open_warnings`]; everything that verifies is readable.
    /// Every write returns [`Error::ReadOnly`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use undertext::{Options, Store};
    /// let writer = Store::open(dir.path(), Options::default())?;
    /// let id = writer.put_blob("o", b"hello")?;
    /// let reader = Store::open_read_only(dir.path())?; // beside the live writer
    /// assert_eq!(&*reader.get_blob("o", &id)?, b"hello");
    /// let later = writer.put_blob("o", b"later")?;
    /// reader.refresh()?;
    /// assert_eq!(&*reader.get_blob("o", &later)?, b"later");
    /// assert!(matches!(reader.put_blob("o", b"no"), Err(undertext::Error::ReadOnly(_))));
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn open_read_only_with(path: impl AsRef<Path>, opts: Options) -> Result<Store> {
        refuse_fleet_url(path.as_ref(), "a read-only open")?;
        refuse_non_directory(path.as_ref())?;
        let (kernel, next_chat) = read_only::open(path.as_ref(), opts)?;
        Ok(store_of(kernel, next_chat))
    }

    /// True for a store opened with [`Store::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.inner.kernel.is_read_only()
    }

    /// Brings a read-only store up to date: replays every batch the writer appended since the
    /// open (or the last refresh), in the last segment and in segments created since. Chats
    /// read before keep what they showed (handles and snapshots); open them again to see the
    /// new records. The work is what the new batches cost: a chat the writer only appended
    /// to is extended with the new messages, not loaded again; a chat it changed otherwise
    /// (an edit, a hide, its metadata…) loads again at its next open; other chats stay as
    /// they were in memory.
    ///
    /// Fails with [`Error::ReadOnly`] when the writer's `gc` replaced the log since the open
    /// (open the store again), and on a store opened for writing (which is always current).
    pub fn refresh(&self) -> Result<Refreshed> {
        self.same_process()?;
        let caught = read_only::refresh(&self.inner.kernel)?;
        self.inner.chats.refreshed(&caught.chats, caught.next_chat);
        Ok(caught.refreshed)
    }

    /// What this open repaired or could not do, one line each: a torn tail cut (a write a
    /// crash cut off, never acknowledged), a segment header torn at creation rewritten, the
    /// log's preallocation skipped for lack of space. Empty after a clean close. Also logged
    /// through `tracing`; the CLI prints them to stderr.
    pub fn open_warnings(&self) -> &[String] {
        &self.inner.kernel.open_warnings
    }

    /// The store directory.
    pub fn path(&self) -> &Path {
        &self.core().dir
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &Options {
        &self.core().opts
    }

    /// Closes the store: stops the indexer and makes the index durable, so the next open
    /// replays nothing. Dropping the last handle does the same, ignoring errors. When the
    /// last handle goes, an index file (of at most 64 MiB) that is at least a quarter free
    /// pages is compacted, and the active log segment is cut to its data (the next open
    /// preallocates again).
    pub fn close(self) -> Result<()> {
        self.sync()
    }

    /// Creates a chat for `owner` and returns its id.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// use undertext::ChatMeta;
    /// let id = store.create_chat("alice", ChatMeta { title: "fix the build".into(), ..Default::default() })?;
    /// assert_eq!(store.chat("alice", id)?.meta().title, "fix the build");
    /// assert!(store.chat("bob", id).is_err()); // another owner: NotFound
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn create_chat(&self, owner: &str, meta: ChatMeta) -> Result<ChatId> {
        self.same_process()?;
        history::create_chat(&self.inner.chats, owner, meta)
    }

    /// Creates a chat holding `messages` in one transaction with them (after a crash it is
    /// there whole or not at all), each message dated `at_ms` (one per message) or now: the
    /// importers' path (`history::create_chat_with`).
    pub(crate) fn create_chat_with(
        &self,
        owner: &str,
        meta: ChatMeta,
        messages: Vec<crate::chat::history::NewMessage>,
        at_ms: Option<&[u64]>,
    ) -> Result<ChatId> {
        self.same_process()?;
        history::create_chat_with(&self.inner.chats, &self.inner.archives, owner, meta, messages, at_ms)
    }

    /// Deletes chat `id` of `owner`: it can no longer be opened, listed or written (open
    /// handles get [`Error::NotFound`]; snapshots already taken still read). Its records
    /// stay in the log until [`Store::gc`] removes them and every blob only they used; its
    /// id is never given to another chat.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// let id = store.create_chat("me", Default::default())?;
    /// store.delete_chat("me", id)?;
    /// assert!(matches!(store.chat("me", id), Err(undertext::Error::NotFound { .. })));
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn delete_chat(&self, owner: &str, id: ChatId) -> Result<()> {
        self.same_process()?;
        history::delete_chat(&self.inner.chats, owner, id, |state| self.inner.worker.forget(state))
    }

    /// Opens chat `id` of `owner`. A chat of another owner is the same
    /// [`Error::NotFound`] as an absent one.
    pub fn chat(&self, owner: &str, id: ChatId) -> Result<Chat> {
        self.same_process()?;
        let state = history::open_chat(&self.inner.chats, owner, id, true)?;
        Ok(Chat { store: self.clone(), state })
    }

    /// Opens chat `id` of `owner` as [`Store::chat`] does, except that in fleet mode it asks
    /// PostgreSQL nothing when this store has brought the chat up to date before (a
    /// [`Store::find_chats`] or [`Store::chats`] that returned it, an earlier open, a write):
    /// the handle shows the chat as of then, and another process's writes since are seen at
    /// the next place that asks (`Store::chat`, a write, a notified view; docs/FLEET.md). For
    /// a chat that a `find_chats` just returned this is one round trip less, with what the
    /// caller saw already: the chat as that call found it. A chat this store never brought
    /// up is asked for as by [`Store::chat`]. An embedded store: the same as [`Store::chat`].
    pub fn chat_without_refresh(&self, owner: &str, id: ChatId) -> Result<Chat> {
        self.same_process()?;
        let state = history::open_chat(&self.inner.chats, owner, id, false)?;
        Ok(Chat { store: self.clone(), state })
    }

    /// The chats of `owner` whose metadata `field` is exactly `value`, newest activity first
    /// (as [`Store::chats`]). An index lookup (the derived table `chat_lookup`, rebuilt from
    /// the log like every other): its cost grows with the chats found, not with the owner's
    /// chats. It sees every write made before it, and only the current metadata of each
    /// chat (a chat whose title changed is no longer found by the old one); deleted chats
    /// and other owners' chats are never returned.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// use undertext::{ChatMeta, MetaField};
    /// let extra = [("thread".to_string(), "t-1".to_string())].into();
    /// let id = store.create_chat("alice", ChatMeta { title: "fix".into(), extra, ..Default::default() })?;
    /// assert_eq!(store.find_chats("alice", MetaField::Extra("thread"), "t-1")?[0].id, id);
    /// assert_eq!(store.find_chats("alice", MetaField::Title, "fix")?.len(), 1);
    /// assert!(store.find_chats("bob", MetaField::Title, "fix")?.is_empty());
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn find_chats(&self, owner: &str, field: MetaField<'_>, value: &str) -> Result<Vec<ChatSummary>> {
        self.same_process()?;
        history::find_chats(&self.inner.chats, owner, field, value)
    }

    /// Every owner holding chats in this store, with how many, sorted by name: a maintenance
    /// call for the store's operator (it names owners; never show it to an owner). The CLI
    /// uses it to say which owners hold chats when the one asked for has none.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// store.create_chat("alice", Default::default())?;
    /// store.create_chat("alice", Default::default())?;
    /// store.create_chat("bob", Default::default())?;
    /// assert_eq!(store.owners()?, [("alice".to_string(), 2), ("bob".to_string(), 1)]);
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn owners(&self) -> Result<Vec<(String, u64)>> {
        self.same_process()?;
        history::owners(&self.inner.chats)
    }

    /// One page of `owner`'s chats, newest activity first.
    pub fn chats(&self, owner: &str, page: Page) -> Result<ChatPage> {
        self.same_process()?;
        history::chats(&self.inner.chats, owner, page)
    }

    /// Stores `content` for `owner` and returns its [`BlobId`], granting the blob to `owner`
    /// (its own grant: it stays until `owner`'s store is gone). Content already present is
    /// not written again, whoever stored it. In `Group` and `Immediate` durability the blob
    /// is durable when this returns.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// let a = store.put_blob("alice", b"same bytes")?;
    /// let b = store.put_blob("alice", b"same bytes")?;
    /// assert_eq!(a, b);
    /// assert_eq!(a, undertext::BlobId::of(b"same bytes"));
    /// assert!(store.get_blob("bob", &a).is_err()); // not bob's: NotFound, as if absent
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn put_blob(&self, owner: &str, content: &[u8]) -> Result<BlobId> {
        self.same_process()?;
        Ok(self.put_blobs(owner, &[content])?[0])
    }

    /// Stores several blobs for `owner` in one transaction: after a crash either all of them
    /// (and their grants) are present or none of the ones that were new. Returns their ids in
    /// order.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// let ids = store.put_blobs("alice", &[b"call".as_slice(), b"result".as_slice()])?;
    /// assert_eq!(&*store.get_blob("alice", &ids[1])?, b"result");
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn put_blobs(&self, owner: &str, contents: &[&[u8]]) -> Result<Vec<BlobId>> {
        self.same_process()?;
        blobs::put_blobs(self.core(), owner, contents)
    }

    /// Returns the blob `id` of `owner`, verified against its hash (see
    /// [`Store::get_blob_with`]).
    ///
    /// A blob `owner` holds no grant on — never stored, or stored only by others — is
    /// [`Error::NotFound`](crate::Error::NotFound); stored bytes that fail their checksum or
    /// hash are [`Error::Corrupt`](crate::Error::Corrupt) naming segment and offset.
    pub fn get_blob(&self, owner: &str, id: &BlobId) -> Result<Blob> {
        self.same_process()?;
        self.get_blob_with(owner, id, self.core().opts.verify)
    }

    /// Returns the blob `id` of `owner`, checking as much as `verify` asks. Uncompressed
    /// blobs in sealed segments are returned without a copy.
    pub fn get_blob_with(&self, owner: &str, id: &BlobId, verify: Verify) -> Result<Blob> {
        self.same_process()?;
        blobs::get_blob(self.core(), owner, id, verify)
    }

    /// The blobs `ids` of `owner`, in order, as [`Store::get_blob`] returns each, read in one
    /// call: the grants and the locations of all of them are looked up together (one index
    /// read transaction each, not two per blob), which is what a reader of hundreds of small
    /// blobs — a checkpoint's message list — pays for. The first blob `owner` may not read is
    /// [`Error::NotFound`](crate::Error::NotFound) for the whole call; damaged bytes are
    /// [`Error::Corrupt`](crate::Error::Corrupt).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// let ids = store.put_blobs("me", &[b"first", b"second"])?;
    /// let blobs = store.get_blobs("me", &ids)?;
    /// assert_eq!((&blobs[0][..], &blobs[1][..]), (&b"first"[..], &b"second"[..]));
    /// assert!(store.get_blobs("someone else", &ids).is_err());
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn get_blobs(&self, owner: &str, ids: &[BlobId]) -> Result<Vec<Blob>> {
        self.get_blobs_with(owner, ids, self.core().opts.verify)
    }

    /// [`Store::get_blobs`], checking as much as `verify` asks. [`Verify::Checksum`] is
    /// what a reader of many small blobs it wrote itself (a checkpoint's message items)
    /// can afford: each record's CRC-32C and the id it carries are checked, the content is
    /// not hashed again (a flipped bit on disk is still [`Error::Corrupt`], not data).
    ///
    /// [`Error::Corrupt`]: crate::Error::Corrupt
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// use undertext::Verify;
    /// let ids = store.put_blobs("me", &[b"first", b"second"])?;
    /// let blobs = store.get_blobs_with("me", &ids, Verify::Checksum)?;
    /// assert_eq!(&blobs[1][..], &b"second"[..]);
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn get_blobs_with(&self, owner: &str, ids: &[BlobId], verify: Verify) -> Result<Vec<Blob>> {
        self.same_process()?;
        blobs::get_blobs(self.core(), owner, ids, verify)
    }

    /// Bytes `range` of blob `id` of `owner`: for a chunked blob (see
    /// [`Options::chunk_threshold`]), only the chunks the range overlaps are read. A range
    /// past the end is an error giving the length.
    ///
    /// [`Options::chunk_threshold`]: crate::Options::chunk_threshold
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    /// let id = store.put_blob("me", &big)?;
    /// assert_eq!(store.get_blob_range("me", &id, 100_000..100_010)?, &big[100_000..100_010]);
    /// assert_eq!(store.blob_len("me", &id)?, 300_000);
    /// assert!(store.get_blob_range("me", &id, 0..300_001).is_err());
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn get_blob_range(&self, owner: &str, id: &BlobId, range: Range<u64>) -> Result<Vec<u8>> {
        self.same_process()?;
        blobs::get_blob_range(self.core(), owner, id, range)
    }

    /// Length of blob `id` of `owner` in bytes (a chunked blob's chunks are not read).
    pub fn blob_len(&self, owner: &str, id: &BlobId) -> Result<u64> {
        self.same_process()?;
        blobs::blob_len(self.core(), owner, id)
    }

    /// True when `owner` holds a grant on a stored blob with this id (false for a blob only
    /// other owners hold: the same answer as for a blob never stored).
    pub fn contains_blob(&self, owner: &str, id: &BlobId) -> Result<bool> {
        self.same_process()?;
        blobs::contains_blob(self.core(), owner, id)
    }

    /// Maintenance only (tests of `gc`, repair tools): whether a blob with this id is stored,
    /// whoever holds it. Not an owner's API: it answers for every owner's blobs.
    #[doc(hidden)]
    pub fn unscoped_contains_blob(&self, id: &BlobId) -> Result<bool> {
        self.same_process()?;
        Ok(self.core().index.blob(id)?.is_some())
    }

    /// Maintenance only: blob `id`, whoever holds it. Not an owner's API.
    #[doc(hidden)]
    pub fn unscoped_get_blob(&self, id: &BlobId) -> Result<Blob> {
        self.same_process()?;
        self.core().get_blob(id, self.core().opts.verify)
    }

    /// Archives `text` for `owner` and returns its reference. The id is the text's content
    /// address: the same text archived twice, or by two owners, is stored once. A preview
    /// built by this store (it names its archive) archives to the original's reference.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// use undertext::Unit;
    /// let log = "line one\nline two: 42 passed\n".repeat(1000);
    /// let a = store.archive("alice", &log)?;
    /// assert_eq!(a.lines, 2000);
    /// assert_eq!(store.read_context("alice", &a.id, 9..30, Unit::Chars)?, "line two: 42 passed\nl");
    /// assert!(store.read_context("bob", &a.id, 0..1, Unit::Chars).is_err()); // not bob's
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn archive(&self, owner: &str, text: &str) -> Result<ArchiveRef> {
        self.same_process()?;
        archive::archive(self.core(), &self.inner.archives, owner, text)
    }

    /// Full-text search over `owner`'s history: message texts, tool calls (name and
    /// arguments), tool results inline and archived (the archive's whole text), summaries
    /// and approval prompts, in one chat or all of `owner`'s chats (`scope`), hidden
    /// messages left out unless the scope includes them. At most `limit` hits, best first
    /// (BM25). Every word of `query` must be in a hit; when no text holds them all, texts
    /// holding any of them are ranked instead. Each hit names a span that
    /// [`Store::read_hit`] (or `read_context` on its archive) returns exactly.
    ///
    /// Another owner's chats are never searched (a chat scope of another owner is the
    /// same [`Error::NotFound`](crate::Error::NotFound) as an absent chat). The index is
    /// derived from the log and caught up by the search itself for the chats it covers, so a
    /// search sees every message written before it; appends never wait for it. A writable
    /// store keeps it in `search/` beside the log; a read-only store builds it in memory.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use undertext::{NewMessage, SearchScope, Store};
    /// let store = Store::open(dir.path(), Default::default())?;
    /// let chat = store.chat("alice", store.create_chat("alice", Default::default())?)?;
    /// chat.append(NewMessage::user("the build fails with exit code 101 in crate foo"))?;
    /// let hits = store.search("alice", "exit code 101", SearchScope::all(), 5)?;
    /// assert_eq!((hits[0].chat, hits[0].seq), (chat.id(), 0));
    /// assert_eq!(store.read_hit("alice", &hits[0])?, "exit code 101");
    /// assert!(store.search("bob", "exit code 101", SearchScope::all(), 5)?.is_empty());
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn search(
        &self,
        owner: &str,
        query: &str,
        scope: SearchScope,
        limit: usize,
    ) -> Result<Vec<SearchHit>> {
        self.same_process()?;
        let inner = &self.inner;
        if let Some(every) = self.options().search_index_interval
            && !self.is_read_only()
            && self.core().remote().is_none()
        {
            inner.search_thread.get_or_init(|| {
                search::Background::start(
                    inner.search.clone(),
                    inner.chats.clone(),
                    inner.archives.clone(),
                    every,
                )
            });
        }
        inner.search.search(&inner.chats, &inner.archives, owner, query, scope, limit)
    }

    /// The span a [`SearchHit`] names, read back from the log: `read_context` on its
    /// archive, or the range of its message's text.
    pub fn read_hit(&self, owner: &str, hit: &SearchHit) -> Result<String> {
        let range = hit.start..hit.end;
        if let Some(id) = &hit.archive {
            return self.read_context(owner, id, range, hit.unit);
        }
        let message = self.chat(owner, hit.chat)?.get(hit.seq)?;
        let text = hit.text_in(&message).ok_or_else(|| {
            crate::Error::InvalidArgument(format!(
                "message {} of chat {} has no {} in part {}",
                hit.seq,
                hit.chat,
                hit.field.as_str(),
                hit.part
            ))
        })?;
        crate::chat::archive::ArchiveText::new(text.to_string()).read(range, hit.unit).map(str::to_string)
    }

    /// Bytes of the search index's files (0 before the first search, and for a read-only
    /// store, whose index is in memory).
    pub fn search_index_bytes(&self) -> u64 {
        self.inner.search.size_bytes()
    }

    /// The reference of archive `id`, if `owner` may read it.
    pub fn archive_ref(&self, owner: &str, id: &BlobId) -> Result<ArchiveRef> {
        self.same_process()?;
        archive::archive_ref(self.core(), &self.inner.archives, owner, id)
    }

    /// Returns `range` of archive `id`, exactly, counted in `unit`. A range that would
    /// split a UTF-8 sequence or a surrogate pair is an error saying where; a range past
    /// the end is an error giving the length. Cost: O(log n + range length) once the
    /// archive is in memory (the first read verifies and loads it). An archive above the
    /// chunking threshold is not loaded whole: the read touches only the chunks around
    /// the two bounds and those the range covers.
    pub fn read_context(&self, owner: &str, id: &BlobId, range: Range<u64>, unit: Unit) -> Result<String> {
        self.same_process()?;
        archive::read_context(self.core(), &self.inner.archives, owner, id, range, unit)
    }

    /// Runs one of the history tools a harness offers its model ([`crate::chat::recall::tools`]:
    /// `search_history`, `read_messages`, `read_context`) with the model's tool-call `args` (JSON text), for
    /// `owner`, and returns the tool-result text to send back. Mistakes in the arguments, and
    /// ids not found for this owner, are answered in that text (the model can correct them);
    /// only storage failures are errors. Nothing is written.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// use undertext::NewMessage;
    /// let id = store.create_chat("a", Default::default())?;
    /// store.chat("a", id)?.append(NewMessage::user("the build fails on line 42"))?;
    /// let args = format!(r#"{{"chat": "{id}", "start": 0, "end": 1}}"#);
    /// assert!(store.history_tool_call("a", "read_messages", &args)?.contains("line 42"));
    /// assert!(store.history_tool_call("b", "read_messages", &args)?.starts_with("error: not found"));
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn history_tool_call(&self, owner: &str, name: &str, args: &str) -> Result<String> {
        self.same_process()?;
        let search = |query: &str, chat: Option<ChatId>, limit: usize| {
            let scope = chat.map_or_else(SearchScope::all, SearchScope::chat);
            self.search(owner, query, scope, limit)
        };
        let src = crate::chat::recall::tools::Source {
            core: self.core(),
            chats: &self.inner.chats,
            archives: &self.inner.archives,
            search: &search,
        };
        crate::chat::recall::tools::call(src, owner, name, args)
    }

    /// A preview of archive `id` in about `max_chars` characters: head and tail, and with
    /// a `query` the lines between them that contain it, with a marker that says what is
    /// left out and how to read it (template: [`Options::preview_marker`](crate::Options)).
    pub fn preview(&self, owner: &str, id: &BlobId, max_chars: usize, query: Option<&str>) -> Result<String> {
        self.same_process()?;
        archive::preview(self.core(), &self.inner.archives, owner, id, max_chars, query)
    }

    /// Starts the background pre-compaction worker with `summarizer`. One worker per store;
    /// starting another replaces it for new requests.
    pub fn start_worker(&self, summarizer: Arc<dyn Summarizer>, opts: WorkerOptions) -> Result<Worker> {
        self.same_process()?;
        worker::start(self.inner.clone(), self.path(), summarizer, opts)
    }

    /// Waits until the store's worker has no job queued or running, or `timeout` passes
    /// (see [`Worker::wait_idle`]); true at once without a worker.
    pub fn wait_worker_idle(&self, timeout: Duration) -> bool {
        self.inner.worker.wait_idle(timeout)
    }

    /// Makes every acknowledged write durable, log and index, whatever the durability mode.
    pub fn sync(&self) -> Result<()> {
        self.same_process()?;
        maintenance::sync(self.core())
    }

    /// Rebuilds the index from the log alone, into a fresh file that replaces the current
    /// one (which is not read: a damaged index is no obstacle). Appends wait while it runs;
    /// reads go on.
    pub fn rebuild_index(&self) -> Result<()> {
        self.same_process()?;
        maintenance::rebuild_index(self.core())?;
        // The search index is derived too: dropped, it is built again from the log by the
        // next search.
        self.inner.search.reset()
    }

    /// Rebuilds the index of the store in `path` from its log alone, for a store that does
    /// not open because its index is damaged ([`Error::Index`]): the index file is deleted
    /// under the store's lock, and an open rebuilds it from the log. Fails with
    /// [`Error::Locked`] while the store is open elsewhere.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use undertext::{Options, Store};
    /// let store = Store::open(dir.path(), Options::default())?;
    /// let id = store.create_chat("me", Default::default())?;
    /// store.close()?;
    /// let path = dir.path().join("index.redb");
    /// let mut bytes = std::fs::read(&path).unwrap();
    /// let mid = bytes.len() / 2;
    /// bytes[mid] ^= 0x10; // a bad disk
    /// std::fs::write(&path, bytes).unwrap();
    /// if let Err(undertext::Error::Index { .. }) = Store::open(dir.path(), Options::default()) {
    ///     Store::rebuild_index_at(dir.path(), Options::default())?;
    /// }
    /// assert!(Store::open(dir.path(), Options::default())?.chat("me", id).is_ok());
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn rebuild_index_at(path: impl AsRef<Path>, opts: Options) -> Result<()> {
        refuse_fleet_url(path.as_ref(), "an index rebuild")?;
        maintenance::rebuild_index_at(path.as_ref(), opts)?;
        // Done under no lock of its own: the store was not open (the rebuild took its lock).
        let dir = path.as_ref().join(search::SEARCH_DIR);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(crate::Error::io("remove_dir", &dir, e))
            }
            _ => Ok(()),
        }
    }

    /// Verifies every checksum in the log, every blob's content against its id, and the
    /// index against the log: every blob in the log is reachable through the index, and an
    /// index built from the log anew (in a scratch file) holds exactly the entries of the
    /// index in use. Reports each damaged frame, and each difference of the index
    /// ([`CheckReport::index_problems`]: the log is intact, and [`Store::rebuild_index`]
    /// repairs them).
    pub fn check(&self) -> Result<CheckReport> {
        self.same_process()?;
        maintenance::check(self.core())
    }

    /// What `owner` holds, counted from its own chats: figures that do not depend on what
    /// other owners stored, so an owner can be shown them (unlike [`Store::stats`]).
    pub fn owner_stats(&self, owner: &str) -> Result<crate::chat::history::OwnerStats> {
        self.same_process()?;
        history::owner_stats(&self.inner.chats, &self.inner.archives, owner)
    }

    /// Store-wide sizes and counters, for the store's operator (maintenance). They move when
    /// any owner writes, and content already stored is not written again, so they tell one
    /// owner whether another stored a given text: never show them to an owner; show
    /// [`Store::owner_stats`] instead.
    pub fn stats(&self) -> Result<StoreStats> {
        self.same_process()?;
        maintenance::stats(self.core(), self.inner.chats.len() as u64)
    }

    /// Rewrites the store in `path` without the records of deleted chats and the blobs
    /// only they used (see the module docs for exactly what is kept). Opens the store
    /// itself: it fails with [`Error::Locked`] while anyone has it open.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use undertext::{NewMessage, Options, Store};
    /// let store = Store::open(dir.path(), Options::default())?;
    /// let id = store.create_chat("me", Default::default())?;
    /// store.chat("me", id)?.append(NewMessage::user("x".repeat(100_000)))?;
    /// store.delete_chat("me", id)?;
    /// store.close()?;
    /// let report = Store::gc(dir.path(), Options::default())?;
    /// assert!(report.log_bytes_after < report.log_bytes_before);
    /// # Ok::<(), undertext::Error>(())
    /// ```
    ///
    /// Given a fleet URL (`postgres://…`, feature `fleet`), it collects online, while other
    /// processes write: the records of deleted chats leave the catalog, and a blob (in
    /// PostgreSQL or S3) that no record references is deleted once it is older than
    /// [`Options::gc_grace`], so uploads of writes in flight are never collected
    /// (engine/FORMAT.md, "Fleet mode"). The report counts catalog records and the bytes of
    /// record and blob payloads in PostgreSQL.
    pub fn gc(path: impl AsRef<Path>, opts: Options) -> Result<GcReport> {
        if let Some(url) = fleet_url(path.as_ref()) {
            #[cfg(feature = "fleet")]
            return crate::kernel::fleet::gc(url, opts);
            #[cfg(not(feature = "fleet"))]
            return Err(no_fleet_feature(url));
        }
        gc::gc(path.as_ref(), opts)
    }
}

/// `path` as a fleet URL (`postgres://…`), if it is one.
fn fleet_url(path: &Path) -> Option<&str> {
    path.to_str().filter(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
}

/// The error of a fleet URL given to a build without the feature `fleet`.
#[cfg(not(feature = "fleet"))]
fn no_fleet_feature(url: &str) -> crate::base::error::Error {
    crate::base::error::Error::InvalidArgument(format!(
        "{}: fleet mode needs undertext built with the cargo feature `fleet`",
        crate::base::error::hide_password(url)
    ))
}

/// The error of a directory-only operation (`gc`, read-only opens, index rebuilds) given a
/// fleet URL (`postgres://…`): it would otherwise take the URL for a directory name.
fn refuse_fleet_url(path: &Path, what: &str) -> Result<()> {
    match path.to_str().filter(|s| s.starts_with("postgres://") || s.starts_with("postgresql://")) {
        Some(url) => Err(crate::base::error::Error::InvalidArgument(format!(
            "{what} works on a store directory, found the fleet URL {} (fleet stores are opened with \
             Store::open; their {what} is not built yet)",
            crate::base::error::hide_password(url)
        ))),
        None => Ok(()),
    }
}

/// A store is a directory: a path that names something else is refused, saying what it is,
/// before anything is created or locked (an [`Error::Io`](crate::Error::Io) of kind
/// `NotADirectory`, Python's `NotADirectoryError` family).
fn refuse_non_directory(path: &Path) -> Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_dir() => Err(crate::base::error::Error::io(
            "open the store",
            path,
            std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                format!(
                    "expected a directory (or nothing, to create one), found {}",
                    if m.is_file() { "a file" } else { "something that is not a directory" }
                ),
            ),
        )),
        _ => Ok(()),
    }
}
