//! `undertext.Store`: open and close, blobs, chats, archives, maintenance, the worker.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyList, PyType};
use undertext::{
    Chat, ChatId, ChatMeta, Compression, Durability, MetaField, Options, Page, PageCursor, Store,
};

use crate::chat::PyChat;
use crate::convert::{Text, unit_of};
use crate::errors::{closed, invalid, run};
use crate::held::Held;
use crate::types::{PyArchiveRef, PyChatInfo};
use crate::worker::{PyWorker, WorkerSlot, worker_options};

/// Blobs `Store.get_blobs` reads per crossing into the engine: each batch's engine copies
/// are freed before the next is read (their memory reused, not faulted in anew: a cold read
/// of 600 item blobs took 353 page faults in one batch, 218 in batches of 64).
const GET_BLOBS_BATCH: usize = 64;

/// An open Undertext store: one directory, one process at a time.
///
/// Open it with `Store.open(path)`, preferably as a context manager:
///
/// ```python
/// with undertext.Store.open("agent-data") as store:
///     chat = store.create_chat("alice", title="fix the build")
/// ```
///
/// Every call releases the GIL while the engine works, so threads run in parallel.
#[pyclass(name = "Store", module = "undertext", frozen)]
#[derive(Debug)]
pub struct PyStore {
    store: RwLock<Option<Store>>,
    workers: Mutex<Vec<WorkerSlot>>,
    /// Engine handles of the chats its `Chat`s use (dropped at close).
    held: Held,
    /// A temporary store, whose directory is removed when it closes (`_removed_on_close`).
    removed_on_close: AtomicBool,
}

impl PyStore {
    fn of(store: Store) -> PyStore {
        let held = Held::for_store(&store);
        PyStore {
            store: RwLock::new(Some(store)),
            workers: Mutex::new(Vec::new()),
            held,
            removed_on_close: AtomicBool::new(false),
        }
    }

    fn guard(&self) -> std::sync::RwLockReadGuard<'_, Option<Store>> {
        match self.store.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The engine store, or `Closed`.
    pub(crate) fn get(&self, py: Python<'_>) -> PyResult<Store> {
        self.guard().clone().ok_or_else(|| self.closed_error(py))
    }

    /// Resolves chat `id` of `owner` (in fleet mode: one round trip that brings it up to what
    /// other processes committed) and holds the handle for the `Chat`s' later calls.
    pub(crate) fn resolve_chat(&self, py: Python<'_>, owner: &str, id: ChatId) -> PyResult<Chat> {
        self.resolve_chat_with(py, owner, id, true)
    }

    /// [`Self::resolve_chat`]; without `refresh`, through `Store::chat_without_refresh`.
    pub(crate) fn resolve_chat_with(
        &self,
        py: Python<'_>,
        owner: &str,
        id: ChatId,
        refresh: bool,
    ) -> PyResult<Chat> {
        let store = self.get(py)?;
        let o = owner.to_owned();
        let chat =
            run(py, move || if refresh { store.chat(&o, id) } else { store.chat_without_refresh(&o, id) })?;
        // Held under the store's read lock: a `close` either comes after (and drops it) or
        // has already taken the store (and it is not held, so nothing keeps the store open).
        let g = self.guard();
        if g.is_some() {
            self.held.hold(chat.clone());
        }
        drop(g);
        Ok(chat)
    }

    /// `Closed`, saying whether the directory is gone with it.
    fn closed_error(&self, py: Python<'_>) -> PyErr {
        closed(py, self.removed_on_close.load(Ordering::Relaxed))
    }

    /// The held handle of chat `id` of `owner`, resolving it when none is held.
    pub(crate) fn held_chat(&self, py: Python<'_>, owner: &str, id: ChatId) -> PyResult<Chat> {
        if self.guard().is_none() {
            return Err(self.closed_error(py));
        }
        match self.held.get(owner, id) {
            Some(chat) => Ok(chat),
            None => self.resolve_chat(py, owner, id),
        }
    }
}

fn durability(py: Python<'_>, s: &str) -> PyResult<Durability> {
    Ok(match s {
        "immediate" => Durability::Immediate,
        "group" => Durability::Group,
        "none" => Durability::None,
        other => {
            return Err(invalid(
                py,
                format!("durability: expected \"immediate\", \"group\" or \"none\", found {other:?}"),
            ));
        }
    })
}

/// `"zstd"` (level 1), `"zstd:<level>"`, `"lz4"` or `"none"`.
fn compression(py: Python<'_>, s: &str) -> PyResult<Compression> {
    let bad = || {
        invalid(
            py,
            format!("compression: expected \"zstd\", \"zstd:<1..22>\", \"lz4\" or \"none\", found {s:?}"),
        )
    };
    Ok(match s {
        "none" => Compression::None,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd(1),
        other => {
            let level: i32 = other.strip_prefix("zstd:").and_then(|l| l.parse().ok()).ok_or_else(bad)?;
            if !(1..=22).contains(&level) {
                return Err(bad());
            }
            Compression::Zstd(level)
        }
    })
}

fn meta_of(title: String, model: String, draft: String, extra: Option<BTreeMap<String, String>>) -> ChatMeta {
    ChatMeta { title, model, draft, extra: extra.unwrap_or_default() }
}

fn chat_id(py: Python<'_>, s: &str) -> PyResult<ChatId> {
    s.parse::<ChatId>().map_err(|e| crate::errors::to_py(py, e))
}

/// Lazily paged iterator over an owner's chats (`Store.chats`).
#[pyclass(name = "ChatIterator", module = "undertext")]
#[derive(Debug)]
pub struct PyChatIter {
    store: Py<PyStore>,
    owner: String,
    page_size: usize,
    buf: std::collections::VecDeque<undertext::ChatSummary>,
    after: Option<PageCursor>,
    done: bool,
}

#[pymethods]
impl PyChatIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<PyChatInfo>> {
        if self.buf.is_empty() && !self.done {
            let store = self.store.get().get(py)?;
            let (owner, page) = (self.owner.clone(), Page { limit: self.page_size, after: self.after });
            let p = run(py, move || store.chats(&owner, page))?;
            self.after = p.next;
            self.done = p.next.is_none();
            self.buf.extend(p.chats);
        }
        Ok(self.buf.pop_front().map(|s| PyChatInfo::from(&s)))
    }
}

#[pymethods]
impl PyStore {
    /// Opens (or creates) the store in directory `path`.
    ///
    /// Raises `Locked` if another process holds it, `Corrupt` if the log is damaged before
    /// its tail (a torn tail is cut and reported through logging), `NotFound` when
    /// `create_if_missing` is false and there is no store.
    #[classmethod]
    /// Every option left out (None) keeps the engine's default (`undertext::Options`), so the
    /// defaults live in one place.
    #[pyo3(signature = (path, *, durability=None, create_if_missing=None, archive_threshold=None,
        preview_chars=None, segment_size=None, preallocate=None, chat_cache_capacity=None,
        compression=None, guard_preview_chars=None, inline_body_max=None, verify_index_on_open=None))]
    #[expect(clippy::too_many_arguments, reason = "keyword-only options of a Python call")]
    fn open(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        path: std::path::PathBuf,
        durability: Option<Text>,
        create_if_missing: Option<bool>,
        archive_threshold: Option<usize>,
        preview_chars: Option<usize>,
        segment_size: Option<u64>,
        preallocate: Option<bool>,
        chat_cache_capacity: Option<usize>,
        compression: Option<Text>,
        guard_preview_chars: Option<usize>,
        inline_body_max: Option<usize>,
        verify_index_on_open: Option<bool>,
    ) -> PyResult<PyStore> {
        let mut opts = Options::default();
        if let Some(d) = durability {
            opts = opts.durability(self::durability(py, &d)?);
        }
        if let Some(c) = compression {
            opts = opts.compression(self::compression(py, &c)?);
        }
        if let Some(v) = create_if_missing {
            opts = opts.create_if_missing(v);
        }
        if let Some(v) = archive_threshold {
            opts = opts.archive_threshold(v);
        }
        if let Some(v) = preview_chars {
            opts = opts.preview_chars(v);
        }
        if let Some(v) = segment_size {
            opts = opts.segment_size(v);
        }
        if let Some(v) = preallocate {
            opts = opts.preallocate(v);
        }
        if let Some(v) = chat_cache_capacity {
            opts = opts.chat_cache_capacity(v);
        }
        if let Some(v) = guard_preview_chars {
            opts = opts.guard_preview_chars(v);
        }
        if let Some(v) = inline_body_max {
            opts = opts.inline_body_max(v);
        }
        if let Some(v) = verify_index_on_open {
            opts = opts.verify_index_on_open(v);
        }
        let store = run(py, move || Store::open(path, opts))?;
        Ok(PyStore::of(store))
    }

    /// Opens the store in directory `path` read-only: beside a live writer in another process
    /// (no lock is taken, so no `Locked`), or to salvage a damaged store (what verifies is
    /// readable; what does not is listed in `open_warnings`). Never writes a byte. It sees what
    /// was written before the call; `refresh()` brings it up to date. Every write raises
    /// `UndertextError` ("store is open read-only: writes are refused ...").
    #[classmethod]
    fn open_read_only(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        path: std::path::PathBuf,
    ) -> PyResult<PyStore> {
        let store = run(py, move || Store::open_read_only(path))?;
        Ok(PyStore::of(store))
    }

    /// Read-only stores: replays what the writer appended since the open or the last refresh
    /// and returns how many batches that was. Chats fetched before keep what they showed;
    /// fetch them again (`store.chat(owner, id)`) to see new messages. Raises
    /// `UndertextError` when a `gc` replaced the log (open the store again), and
    /// `InvalidArgument` on a store opened for writing.
    fn refresh(&self, py: Python<'_>) -> PyResult<u64> {
        let store = self.get(py)?;
        let r = run(py, move || store.refresh().map(|r| r.batches));
        // The refreshed chats' states were replaced: the `Chat`s resolve them again.
        self.held.clear();
        r
    }

    /// True for a store opened with `open_read_only`.
    #[getter]
    fn read_only(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.get(py)?.is_read_only())
    }

    /// What the open repaired, or (read-only) skipped as damaged, one line each.
    #[getter]
    fn open_warnings(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        Ok(self.get(py)?.open_warnings().to_vec())
    }

    /// Stops the workers started from this store, makes the index durable and releases the
    /// directory lock. Later calls raise `Closed`; closing twice is harmless.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let workers: Vec<WorkerSlot> = match self.workers.lock() {
            Ok(mut g) => g.drain(..).collect(),
            Err(p) => p.into_inner().drain(..).collect(),
        };
        for w in workers {
            crate::worker::stop_slot(py, &w)?;
        }
        let taken = match self.store.write() {
            Ok(mut g) => g.take(),
            Err(p) => p.into_inner().take(),
        };
        // The held chat handles keep the engine store open: dropped before it closes.
        self.held.clear();
        match taken {
            Some(store) => run(py, move || store.close()),
            None => Ok(()),
        }
    }

    /// Marks a temporary store: its directory is removed when it closes, so `Closed` says so
    /// instead of advising to open it again (`temporary_store()` and the adapters'
    /// `temporary()` call it).
    fn _removed_on_close(&self) {
        self.removed_on_close.store(true, Ordering::Relaxed);
    }

    /// True once `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        match self.store.read() {
            Ok(g) => g.is_none(),
            Err(p) => p.into_inner().is_none(),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    /// The store directory.
    #[getter]
    fn path(&self, py: Python<'_>) -> PyResult<std::path::PathBuf> {
        Ok(self.get(py)?.path().to_path_buf())
    }

    /// Stores `data` (`bytes` or `bytearray`) for `owner` and returns its content address
    /// (64 hex digits), granting the blob to `owner`. The same bytes are stored once.
    fn put_blob(&self, py: Python<'_>, owner: Text, data: PyBackedBytes) -> PyResult<String> {
        let store = self.get(py)?;
        Ok(run(py, move || store.put_blob(&owner, &data))?.to_string())
    }

    /// Stores several blobs for `owner` in one transaction (after a crash: all or none).
    fn put_blobs(&self, py: Python<'_>, owner: Text, data: Vec<Vec<u8>>) -> PyResult<Vec<String>> {
        let store = self.get(py)?;
        let ids = run(py, move || {
            let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
            store.put_blobs(&owner, &refs)
        })?;
        Ok(ids.iter().map(|i| i.to_string()).collect())
    }

    /// The bytes of blob `blob_id` of `owner`. `verify="hash"` (the default) checks the
    /// record's checksum and the content's BLAKE3 against the id; `verify="checksum"` the
    /// record's CRC-32C and the id it carries (damaged bytes are `Corrupt` either way).
    /// `NotFound` for a blob `owner` holds no grant on (never stored, or stored only by
    /// other owners), `Corrupt`.
    #[pyo3(signature = (owner, blob_id, *, verify=None))]
    fn get_blob<'py>(
        &self,
        py: Python<'py>,
        owner: Text,
        blob_id: &Bound<'py, PyAny>,
        verify: Option<&str>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let store = self.get(py)?;
        let id = crate::convert::blob_id(py, blob_id)?;
        let verify = crate::convert::verify_of(py, verify)?;
        let blob = run(py, move || store.get_blob_with(&owner, &id, verify))?;
        Ok(PyBytes::new(py, &blob))
    }

    /// The bytes of each blob of `blob_ids` of `owner`, in order, as `get_blob` gives them,
    /// read in one call (a crossing into the engine, the GIL released, per 64 blobs: a reader
    /// of hundreds of small blobs pays the call's overhead a few times, and holds the engine's
    /// copy of at most 64 of them beside the `bytes` made). Raises as `get_blob` for the
    /// first blob that is not granted (`NotFound`) or damaged (`Corrupt`); an id that is not
    /// 64 hex digits or an `ArchiveRef` raises `InvalidArgument` before anything is read.
    /// `verify` as for `get_blob`: `"checksum"` spares hashing each blob again, what a
    /// reader of hundreds of small blobs it wrote itself (a checkpoint's items) pays most.
    #[pyo3(signature = (owner, blob_ids, *, verify=None))]
    fn get_blobs<'py>(
        &self,
        py: Python<'py>,
        owner: Text,
        blob_ids: Vec<Bound<'py, PyAny>>,
        verify: Option<&str>,
    ) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let store = self.get(py)?;
        let ids = blob_ids.iter().map(|b| crate::convert::blob_id(py, b)).collect::<PyResult<Vec<_>>>()?;
        let verify = crate::convert::verify_of(py, verify)?;
        let mut out = Vec::with_capacity(ids.len());
        for batch in ids.chunks(GET_BLOBS_BATCH) {
            let blobs = run(py, || store.get_blobs_with(&owner, batch, verify))?;
            out.extend(blobs.iter().map(|b| PyBytes::new(py, b)));
        }
        Ok(out)
    }

    /// Bytes `start:end` of blob `blob_id` of `owner`, as `get_blob(owner, blob_id)[start:end]`
    /// but reading only what the range needs: a chunked blob (one above 64 KiB, stored as
    /// content-defined chunks) reads only the chunks the range overlaps. A range with
    /// `start > end` or `end` past the blob's length raises `InvalidArgument` giving the
    /// length; a blob `owner` holds no grant on `NotFound`; damaged bytes `Corrupt`.
    fn get_blob_range<'py>(
        &self,
        py: Python<'py>,
        owner: Text,
        blob_id: &Bound<'py, PyAny>,
        start: u64,
        end: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let store = self.get(py)?;
        let id = crate::convert::blob_id(py, blob_id)?;
        let bytes = run(py, move || store.get_blob_range(&owner, &id, start..end))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Length in bytes of blob `blob_id` of `owner`, without reading its content (a chunked
    /// blob's chunks are not read). `NotFound` for a blob `owner` holds no grant on.
    fn blob_len(&self, py: Python<'_>, owner: Text, blob_id: &Bound<'_, PyAny>) -> PyResult<u64> {
        let store = self.get(py)?;
        let id = crate::convert::blob_id(py, blob_id)?;
        run(py, move || store.blob_len(&owner, &id))
    }

    /// Whether `owner` holds a grant on a stored blob `blob_id` (`False` for a blob only
    /// other owners hold, as for one never stored).
    fn contains_blob(&self, py: Python<'_>, owner: Text, blob_id: &Bound<'_, PyAny>) -> PyResult<bool> {
        let store = self.get(py)?;
        let id = crate::convert::blob_id(py, blob_id)?;
        run(py, move || store.contains_blob(&owner, &id))
    }

    /// Makes every commit so far durable (one fsync).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let store = self.get(py)?;
        run(py, move || store.sync())
    }

    /// What `owner` holds, counted from its own chats, as a dict: `chats`, `messages`,
    /// `text_bytes`, `tool_results`, `archived_results`, `archived_bytes`. No other owner's
    /// writes move these figures, so an owner can be shown them (unlike `stats()`).
    fn owner_stats<'py>(&self, py: Python<'py>, owner: Text) -> PyResult<Bound<'py, PyDict>> {
        let store = self.get(py)?;
        let s = run(py, move || store.owner_stats(&owner))?;
        let d = PyDict::new(py);
        d.set_item("chats", s.chats)?;
        d.set_item("messages", s.messages)?;
        d.set_item("text_bytes", s.text_bytes)?;
        d.set_item("tool_results", s.tool_results)?;
        d.set_item("archived_results", s.archived_results)?;
        d.set_item("archived_bytes", s.archived_bytes)?;
        Ok(d)
    }

    /// Store-wide sizes and counters, for the store's operator (they move when any owner
    /// writes: never show them to an owner; `owner_stats` is for that), as a dict: `segments`, `log_bytes`,
    /// `log_file_bytes`, `index_bytes`, `log_syncs`, `indexed_blobs`, `chats_in_memory`
    /// `blob_bodies_read` (whole blobs or chunks read from the log since open) and
    /// `index_at_open` (`"created"`, `"verified"`, `"sealed"`: trusted as the last clean close
    /// left it, `"unverified"`, or `"in_memory"` for a read-only open).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let store = self.get(py)?;
        let s = run(py, move || store.stats())?;
        let d = PyDict::new(py);
        d.set_item("segments", s.segments)?;
        d.set_item("log_bytes", s.log_bytes)?;
        d.set_item("log_file_bytes", s.log_file_bytes)?;
        d.set_item("index_bytes", s.index_bytes)?;
        d.set_item("log_syncs", s.log_syncs)?;
        d.set_item("indexed_blobs", s.indexed_blobs)?;
        d.set_item("chats_in_memory", s.chats_in_memory)?;
        d.set_item("blob_bodies_read", s.blob_bodies_read)?;
        let at_open = match s.index_at_open {
            undertext::IndexAtOpen::Created => "created",
            undertext::IndexAtOpen::Verified => "verified",
            undertext::IndexAtOpen::Sealed => "sealed",
            undertext::IndexAtOpen::Unverified => "unverified",
            undertext::IndexAtOpen::InMemory => "in_memory",
        };
        d.set_item("index_at_open", at_open)?;
        Ok(d)
    }

    /// Verifies every checksum of the log, and the index against the log; a dict with counts,
    /// `ok`, `problems` (the log's) and `index_problems` (the index's, which
    /// `undertext check --rebuild` repairs).
    fn check<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let store = self.get(py)?;
        let r = run(py, move || store.check())?;
        let d = PyDict::new(py);
        d.set_item("ok", r.is_ok())?;
        d.set_item("segments", r.segments)?;
        d.set_item("batches", r.batches)?;
        d.set_item("records", r.records)?;
        d.set_item("blobs", r.blobs)?;
        let problems = PyList::empty(py);
        for p in &r.problems {
            let pd = PyDict::new(py);
            pd.set_item("segment", p.segment)?;
            pd.set_item("offset", p.offset)?;
            pd.set_item("reason", &p.reason)?;
            problems.append(pd)?;
        }
        d.set_item("problems", problems)?;
        d.set_item("index_problems", &r.index_problems)?;
        Ok(d)
    }

    /// Creates a chat for `owner` and returns it.
    #[pyo3(
        signature = (owner, *, title=Text::from(""), model=Text::from(""), draft=Text::from(""), extra=None),
        text_signature = "($self, owner, *, title='', model='', draft='', extra=None)"
    )]
    fn create_chat(
        slf: &Bound<'_, Self>,
        owner: Text,
        title: Text,
        model: Text,
        draft: Text,
        extra: Option<BTreeMap<Text, Text>>,
    ) -> PyResult<PyChat> {
        let py = slf.py();
        let store = slf.get().get(py)?;
        let meta = meta_of(title.0, model.0, draft.0, extra.map(crate::convert::strings));
        let o = owner.clone();
        let id = run(py, move || store.create_chat(&o, meta))?;
        Ok(PyChat::new(slf.clone().unbind(), owner.0, id))
    }

    /// Deletes chat `chat_id` of `owner`: later opens get `NotFound`; snapshots already
    /// taken still read. Its records stay in the log until `Store.gc` removes them.
    fn delete_chat(&self, py: Python<'_>, owner: Text, chat_id: Text) -> PyResult<()> {
        let store = self.get(py)?;
        let id = self::chat_id(py, &chat_id)?;
        let r = run(py, move || store.delete_chat(&owner, id));
        self.held.forget(id);
        r
    }

    /// Rewrites the log of the closed store in `path` without deleted chats' records and
    /// the blobs only they used (takes the store's lock: `Locked` while it is open).
    /// Returns a dict: `deleted_chats`, `records_before`, `records_after`, `blobs_removed`, `erased_versions`,
    /// `log_bytes_before`, `log_bytes_after`.
    #[classmethod]
    #[pyo3(signature = (path, *, segment_size=None, compression=None))]
    fn gc<'py>(
        _cls: &Bound<'py, PyType>,
        py: Python<'py>,
        path: std::path::PathBuf,
        segment_size: Option<u64>,
        compression: Option<Text>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut opts = Options::default().create_if_missing(false);
        if let Some(v) = segment_size {
            opts = opts.segment_size(v);
        }
        if let Some(c) = compression {
            opts = opts.compression(self::compression(py, &c)?);
        }
        let r = run(py, move || Store::gc(path, opts))?;
        let d = PyDict::new(py);
        d.set_item("deleted_chats", r.deleted_chats)?;
        d.set_item("records_before", r.records_before)?;
        d.set_item("records_after", r.records_after)?;
        d.set_item("blobs_removed", r.blobs_removed)?;
        d.set_item("log_bytes_before", r.log_bytes_before)?;
        d.set_item("log_bytes_after", r.log_bytes_after)?;
        d.set_item("erased_versions", r.erased_versions)?;
        Ok(d)
    }

    /// Opens chat `chat_id` of `owner`. Another owner's chat is the same `NotFound` as an
    /// absent one. On a fleet store this is where other processes' writes to the chat are
    /// seen (one PostgreSQL round trip); the returned `Chat` then reads without one, showing
    /// this state and this process's own writes until `Chat.refresh()` or the next
    /// `Store.chat` of the chat (every write brings the chat up to date first).
    /// `refresh=False`: no round trip when this store brought the chat up to date before (a
    /// `find_chats` or `chats` that returned it, an earlier open, a write): the chat as of
    /// then (`Store::chat_without_refresh`).
    #[pyo3(signature = (owner, chat_id, *, refresh=true))]
    fn chat(slf: &Bound<'_, Self>, owner: Text, chat_id: Text, refresh: bool) -> PyResult<PyChat> {
        let py = slf.py();
        let id = self::chat_id(py, &chat_id)?;
        slf.get().resolve_chat_with(py, &owner, id, refresh)?;
        Ok(PyChat::new(slf.clone().unbind(), owner.0, id))
    }

    /// Every chat of `owner`, newest activity first, as `ChatInfo` (pages of `page_size`
    /// are fetched as the iteration goes).
    #[pyo3(signature = (owner, *, page_size=100))]
    fn chats(slf: &Bound<'_, Self>, owner: Text, page_size: usize) -> PyResult<PyChatIter> {
        let py = slf.py();
        if page_size == 0 || page_size > 1000 {
            return Err(invalid(py, format!("page_size: expected 1..=1000, found {page_size}")));
        }
        slf.get().get(py)?;
        Ok(PyChatIter {
            store: slf.clone().unbind(),
            owner: owner.0,
            page_size,
            buf: Default::default(),
            after: None,
            done: false,
        })
    }

    /// The chats of `owner` whose title equals `title` (when given) and whose `extra`
    /// holds every pair of `extra` (when given), newest activity first. An index lookup
    /// (`Store::find_chats`) by the title, else by the first pair of `extra`; the other
    /// conditions filter what it finds. With neither, every chat of the owner.
    #[pyo3(signature = (owner, *, title=None, extra=None))]
    fn find_chats(
        &self,
        py: Python<'_>,
        owner: Text,
        title: Option<Text>,
        extra: Option<BTreeMap<Text, Text>>,
    ) -> PyResult<Vec<PyChatInfo>> {
        let store = self.get(py)?;
        let extra = extra.unwrap_or_default();
        let found = run(py, move || {
            let keep = |c: &undertext::ChatSummary| {
                title.as_ref().is_none_or(|t| c.meta.title == t.0)
                    && extra.iter().all(|(k, v)| c.meta.extra.get(&k.0) == Some(&v.0))
            };
            let by = match (&title, extra.iter().next()) {
                (Some(t), _) => Some((MetaField::Title, t.0.as_str())),
                (None, Some((k, v))) => Some((MetaField::Extra(&k.0), v.0.as_str())),
                (None, None) => None,
            };
            if let Some((field, value)) = by {
                return Ok(store.find_chats(&owner, field, value)?.into_iter().filter(keep).collect());
            }
            let mut out = Vec::new();
            let mut after = None;
            loop {
                let p = store.chats(&owner, Page { limit: 1000, after })?;
                out.extend(p.chats);
                match p.next {
                    Some(n) => after = Some(n),
                    None => return Ok(out),
                }
            }
        })?;
        Ok(found.iter().map(PyChatInfo::from).collect())
    }

    /// Imports agent transcripts (files, or folders walked for `.jsonl`, `.json` and
    /// `.traj`) into chats of `owner`: one chat per session, keyed by a stable session key
    /// in its metadata (`extra["import.key"]`), so importing the same transcript again adds
    /// nothing. `format` is `"auto"` or a format name (`claude-code`, `codex`, `openai`,
    /// ...). Returns a dict: `files`, `sessions_new`, `sessions_unchanged`,
    /// `sessions_extended`, `messages`, `tool_results`, `archived`, `linked`, and
    /// `problems` (the lines skipped, each `"file:line: reason"`).
    #[pyo3(signature = (owner, paths, *, format=Text::from("auto")), text_signature = "($self, owner, paths, *, format='auto')")]
    fn import_transcripts<'py>(
        &self,
        py: Python<'py>,
        owner: Text,
        paths: Vec<std::path::PathBuf>,
        format: Text,
    ) -> PyResult<Bound<'py, PyDict>> {
        use undertext::import;
        let store = self.get(py)?;
        let format: import::Format = format.parse().map_err(|e| crate::errors::to_py(py, e))?;
        let (files, report, problems) = run(py, move || {
            let files = import::transcript_files(&paths)?;
            let (mut sessions, mut problems) = (Vec::new(), Vec::new());
            for f in &files {
                let parsed = import::parse_file(f, format)?;
                sessions.extend(parsed.sessions);
                problems.extend(parsed.problems.iter().map(|p| p.to_string()));
            }
            let report = import::import_sessions(&store, &owner, &sessions, |_| {})?;
            Ok((files.len(), report, problems))
        })?;
        let d = PyDict::new(py);
        d.set_item("files", files)?;
        d.set_item("sessions_new", report.sessions_new)?;
        d.set_item("sessions_unchanged", report.sessions_unchanged)?;
        d.set_item("sessions_extended", report.sessions_extended)?;
        d.set_item("messages", report.messages)?;
        d.set_item("tool_results", report.tool_results)?;
        d.set_item("archived", report.archived)?;
        d.set_item("linked", report.linked)?;
        d.set_item("problems", problems)?;
        Ok(d)
    }

    /// Archives `text` for `owner`; the id is its content address.
    fn archive(&self, py: Python<'_>, owner: Text, text: Text) -> PyResult<PyArchiveRef> {
        let store = self.get(py)?;
        Ok(PyArchiveRef { r: run(py, move || store.archive(&owner, &text))? })
    }

    /// The reference of archive `archive_id`, if `owner` may read it.
    fn archive_ref(
        &self,
        py: Python<'_>,
        owner: Text,
        archive_id: &Bound<'_, PyAny>,
    ) -> PyResult<PyArchiveRef> {
        let store = self.get(py)?;
        let id = crate::convert::archive_id(py, archive_id)?;
        Ok(PyArchiveRef { r: run(py, move || store.archive_ref(&owner, &id))? })
    }

    /// `text[start:end]` of archive `archive_id`, exactly. `unit` is `"chars"` (Python
    /// `str` indexes, the default), `"utf16"`, `"bytes"` or `"lines"`. A range past the end,
    /// or one that splits a UTF-8 sequence or surrogate pair, raises `InvalidArgument`.
    #[pyo3(
        signature = (owner, archive_id, start, end, unit=Text::from("chars")),
        text_signature = "($self, owner, archive_id, start, end, unit='chars')"
    )]
    fn read_context(
        &self,
        py: Python<'_>,
        owner: Text,
        archive_id: &Bound<'_, PyAny>,
        start: u64,
        end: u64,
        unit: Text,
    ) -> PyResult<String> {
        let store = self.get(py)?;
        let id = crate::convert::archive_id(py, archive_id)?;
        let unit = unit_of(py, &unit)?;
        run(py, move || store.read_context(&owner, &id, start..end, unit))
    }

    /// Runs a history tool the harness offers its model (`"read_messages"` or
    /// `"read_context"`) with the model's tool-call `args` (JSON text) for `owner`; returns
    /// the tool-result text. Mistakes in the arguments come back in that text, never raised.
    fn history_tool_call(&self, py: Python<'_>, owner: Text, name: Text, args: Text) -> PyResult<String> {
        let store = self.get(py)?;
        run(py, move || store.history_tool_call(&owner, &name, &args))
    }

    /// Full-text search over `owner`'s history: message texts, tool calls (name and
    /// arguments), tool results inline and archived, summaries and approval prompts, of
    /// every chat of `owner` or of chat `chat` (an id), hidden messages left out unless
    /// `include_hidden`. At most `limit` hits, best first. Each hit is a dict with the keys
    /// of the CLI's `search --json`: `chat`, `seq`, `archive` (hex id or None), `unit`,
    /// `start`, `end`, `snippet`, `score`, `part`, `field`; `Store.read_hit` reads its span.
    /// Another owner's chat as `chat` is the same `NotFound` as an absent one.
    #[pyo3(signature = (owner, query, chat=None, limit=10, include_hidden=false))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        owner: Text,
        query: Text,
        chat: Option<Text>,
        limit: i64,
        include_hidden: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let store = self.get(py)?;
        let limit = usize::try_from(limit)
            .ok()
            .filter(|n| (1..=10_000).contains(n))
            .ok_or_else(|| invalid(py, format!("limit: expected 1 to 10000, found {limit}")))?;
        let scope =
            undertext::SearchScope { chat: chat.map(|c| self::chat_id(py, &c)).transpose()?, include_hidden };
        let hits = run(py, move || store.search(&owner, &query, scope, limit))?;
        let out = PyList::empty(py);
        for h in &hits {
            out.append(crate::convert::json_out(py, &h.to_json())?)?;
        }
        Ok(out)
    }

    /// The span a hit of `Store.search` names (a dict with its keys), read back from the
    /// log: exactly the matched words. A dict that is not a hit raises `InvalidArgument`.
    fn read_hit(&self, py: Python<'_>, owner: Text, hit: &Bound<'_, PyAny>) -> PyResult<String> {
        let store = self.get(py)?;
        let v = crate::convert::flat_json_in(py, hit, "hit")?;
        let hit = undertext::SearchHit::from_json(&v).map_err(|e| crate::errors::to_py(py, e))?;
        run(py, move || store.read_hit(&owner, &hit))
    }

    /// The history tools' schemas (JSON texts) in `shape` `"openai"` (default) or
    /// `"anthropic"`.
    #[staticmethod]
    #[pyo3(signature = (shape=Text::from("openai")), text_signature = "(shape='openai')")]
    fn history_tool_schemas(py: Python<'_>, shape: Text) -> PyResult<Vec<String>> {
        match &*shape {
            "openai" => Ok(undertext::recall::tools::schemas_openai()),
            "anthropic" => Ok(undertext::recall::tools::schemas_anthropic()),
            other => Err(crate::errors::exception(
                py,
                "InvalidArgument",
                &format!("shape: expected \"openai\" or \"anthropic\", found {other:?}"),
                &[],
            )),
        }
    }

    /// A preview of archive `archive_id` in about `max_chars` characters (head, tail, and
    /// with `query` the lines holding it), with a marker saying what is left out.
    #[pyo3(signature = (owner, archive_id, max_chars=2000, query=None))]
    fn preview(
        &self,
        py: Python<'_>,
        owner: Text,
        archive_id: &Bound<'_, PyAny>,
        max_chars: usize,
        query: Option<Text>,
    ) -> PyResult<String> {
        let store = self.get(py)?;
        let id = crate::convert::archive_id(py, archive_id)?;
        run(py, move || store.preview(&owner, &id, max_chars, query.as_deref()))
    }

    /// Starts the background pre-compaction worker with `summarizer` (an `Extractive`, a
    /// callable `f(messages) -> str`, or an object with `summarize` and `merge`). It is
    /// called with the GIL taken on the worker's own threads; what it raises is reported
    /// in `Worker.errors` / `Worker.exceptions` and the job is retried `retries` times.
    /// `threads` (default 4) calls are made at once, each taking the GIL: a summarizer that
    /// waits on a model (releasing the GIL) overlaps its calls; pass 1 for one that must
    /// not be called from two threads.
    #[pyo3(
        signature = (summarizer, *, threads=4, soft=2.0/3.0, segment_tokens=8000, fan_in=4,
            at_hard_line=Text::from("wait"), wait_seconds=30.0, retries=2),
        text_signature = "($self, summarizer, *, threads=4, soft=0.6666666666666666, segment_tokens=8000, \
                          fan_in=4, at_hard_line='wait', wait_seconds=30.0, retries=2)"
    )]
    #[expect(clippy::too_many_arguments, reason = "keyword-only options of a Python call")]
    fn start_worker(
        &self,
        py: Python<'_>,
        summarizer: &Bound<'_, PyAny>,
        threads: usize,
        soft: f64,
        segment_tokens: u64,
        fan_in: usize,
        at_hard_line: Text,
        wait_seconds: f64,
        retries: u32,
    ) -> PyResult<PyWorker> {
        let store = self.get(py)?;
        let (s, exceptions) = crate::worker::summarizer_of(summarizer)?;
        let opts =
            worker_options(py, threads, soft, segment_tokens, fan_in, &at_hard_line, wait_seconds, retries)?;
        let w = run(py, move || store.start_worker(s, opts))?;
        let slot: WorkerSlot = Arc::new(Mutex::new(Some(w)));
        match self.workers.lock() {
            Ok(mut g) => g.push(slot.clone()),
            Err(p) => p.into_inner().push(slot.clone()),
        }
        Ok(PyWorker::new(slot, exceptions))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.get(py) {
            Ok(s) => format!("Store({:?})", s.path().display().to_string()),
            Err(_) => "Store(<closed>)".to_string(),
        }
    }
}
