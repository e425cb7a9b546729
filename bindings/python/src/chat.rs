//! `undertext.Chat`: one chat's messages, edits, steps, pins, view and checkpoints. Each
//! method is one engine call on `undertext::Chat`, made with the GIL released.

use std::collections::BTreeMap;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyRange};
use undertext::CheckpointOptions;
use undertext::compaction::{Plan, Squish};
use undertext::{Chat, ChatId, StepStatus};

use crate::convert::{Text, message_in, messages_in, unit_of};
use crate::errors::run;
use crate::snapshot::{PyMessageIter, PySnapshot, message_list};
use crate::store::PyStore;
use crate::types::{PyAttempt, PyChatMeta, PyIndexLine, PyMessage, PyPin};
use crate::view::{PyBudget, PyCheckpoint, PyView, refused};

/// A chat of one owner: an append-only message log with revision-guarded edits.
///
/// Get one from `Store.create_chat` or `Store.chat`. `len(chat)` is the next seq,
/// `chat[seq]` a message, `iter(chat)` the messages of one snapshot in order.
#[pyclass(name = "Chat", module = "undertext", frozen)]
#[derive(Debug)]
pub struct PyChat {
    store: Py<PyStore>,
    owner: String,
    id: ChatId,
}

fn range_of(py: Python<'_>, r: std::ops::Range<u64>) -> PyResult<Bound<'_, PyRange>> {
    PyRange::new(py, r.start as isize, r.end as isize)
}

fn plan_of(trims: Vec<u64>, squishes: Vec<(u64, u64, String)>) -> Plan {
    Plan {
        trims,
        squishes: squishes.into_iter().map(|(from, to, rewrite)| Squish { from, to, rewrite }).collect(),
    }
}

impl PyChat {
    pub(crate) fn new(store: Py<PyStore>, owner: String, id: ChatId) -> PyChat {
        PyChat { store, owner, id }
    }

    /// Runs `f` on the engine chat (the handle the store holds for it: no round trip in
    /// fleet mode) with the GIL released.
    pub(crate) fn with<T, F>(&self, py: Python<'_>, f: F) -> PyResult<T>
    where
        F: FnOnce(&Chat) -> undertext::Result<T> + Send,
        T: Send,
    {
        let chat = self.store.get().held_chat(py, &self.owner, self.id)?;
        run(py, move || f(&chat))
    }
}

#[pymethods]
impl PyChat {
    /// The chat id (`chat-` and 16 hex digits).
    #[getter]
    fn id(&self) -> String {
        self.id.to_string()
    }

    /// The owner (tenant) of the chat.
    #[getter]
    fn owner(&self) -> &str {
        &self.owner
    }

    /// Brings the chat up to what other processes committed (a fleet store: one PostgreSQL
    /// round trip; an embedded store: nothing to fetch). Reads of a `Chat` show its state as
    /// of `Store.chat`, the last `refresh()` or the last write through this store, whichever
    /// came last; raises `NotFound` once the chat is deleted.
    ///
    /// ```python
    /// chat = store.chat("alice", chat_id)
    /// chat.refresh()          # another process appended meanwhile: now len(chat) counts it
    /// ```
    fn refresh(&self, py: Python<'_>) -> PyResult<()> {
        self.store.get().resolve_chat(py, &self.owner, self.id).map(|_| ())
    }

    /// The current revision: it rises on every edit or truncation, not on appends.
    #[getter]
    fn revision(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |c| Ok(c.revision()))
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |c| Ok(c.len() as usize))
    }

    /// The current metadata.
    #[getter]
    fn meta(&self, py: Python<'_>) -> PyResult<PyChatMeta> {
        self.with(py, |c| Ok(PyChatMeta::from(&c.meta())))
    }

    /// The version of the current metadata (1 at creation).
    #[getter]
    fn meta_version(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |c| Ok(c.snapshot().meta_version()))
    }

    /// Changes the given metadata fields (the others keep their value); returns the new
    /// metadata version. `extra` replaces the whole key-value map.
    #[pyo3(signature = (*, title=None, model=None, draft=None, extra=None))]
    fn set_meta(
        &self,
        py: Python<'_>,
        title: Option<Text>,
        model: Option<Text>,
        draft: Option<Text>,
        extra: Option<BTreeMap<Text, Text>>,
    ) -> PyResult<u64> {
        self.with(py, move |c| c.set_meta(changed(c.meta(), title, model, draft, extra)))
    }

    /// The metadata as it was at `version`.
    fn meta_at(&self, py: Python<'_>, version: u64) -> PyResult<PyChatMeta> {
        self.with(py, move |c| c.meta_at(version).map(|m| PyChatMeta::from(&m)))
    }

    /// Appends one message (a dict) and returns its seq. Durable when this returns (per
    /// the store's durability). Tool results over the archive threshold are archived and
    /// replaced by a preview. With `key` (an idempotency key, 1 to 256 bytes), an append with
    /// the same key made to this chat before is returned instead, and nothing is written.
    #[pyo3(signature = (message, *, key=None))]
    fn append(&self, py: Python<'_>, message: &Bound<'_, PyAny>, key: Option<Text>) -> PyResult<u64> {
        let m = message_in(py, message)?;
        self.with(py, move |c| match key {
            Some(k) => c.append_idempotent(m, &k.0),
            None => c.append(m),
        })
    }

    /// Appends messages in one transaction; returns the `range` of their seqs. With any of
    /// `title`, `model`, `draft`, `extra` given, the metadata changes as `set_meta` changes it,
    /// in the same transaction (one log sync for both). With `key`, as `append`'s (not with
    /// a metadata change).
    #[pyo3(signature = (messages, *, title=None, model=None, draft=None, extra=None, key=None))]
    #[expect(clippy::too_many_arguments, reason = "Python keyword arguments")]
    fn append_batch<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
        title: Option<Text>,
        model: Option<Text>,
        draft: Option<Text>,
        extra: Option<BTreeMap<Text, Text>>,
        key: Option<Text>,
    ) -> PyResult<Bound<'py, PyRange>> {
        let ms = messages_in(py, messages)?;
        let changes = title.is_some() || model.is_some() || draft.is_some() || extra.is_some();
        let r = self.with(py, move |c| {
            if let Some(k) = key {
                if changes {
                    return Err(undertext::Error::InvalidArgument(
                        "append_batch: key= is not taken with a metadata change (title, model, draft, extra)"
                            .into(),
                    ));
                }
                return c.append_batch_idempotent(ms, &k.0);
            }
            if !changes {
                return c.append_batch(ms);
            }
            c.append_batch_with_meta(ms, changed(c.meta(), title, model, draft, extra))
        })?;
        range_of(py, r)
    }

    /// Stores `blobs` (a list of `bytes`) and appends `messages` (which may attach them, or
    /// blobs already stored) in ONE transaction, made durable by one log sync. Returns the
    /// blobs' ids (64 hex digits, in order) and the `range` of the messages' seqs. An
    /// attachment naming a blob neither stored nor passed raises `NotFound`, and nothing
    /// is written.
    fn append_with_blobs<'py>(
        &self,
        py: Python<'py>,
        blobs: Vec<Vec<u8>>,
        messages: &Bound<'py, PyAny>,
    ) -> PyResult<(Vec<String>, Bound<'py, PyRange>)> {
        let ms = messages_in(py, messages)?;
        let (ids, r) = self.with(py, move |c| {
            let refs: Vec<&[u8]> = blobs.iter().map(|b| b.as_slice()).collect();
            c.append_with_blobs(&refs, ms)
        })?;
        Ok((ids.iter().map(|i| i.to_string()).collect(), range_of(py, r)?))
    }

    /// Records a model step of user turn `turn` (a retry is a new `stream_id`): its messages
    /// are appended, tagged, in one transaction. `complete=False` marks an interrupted
    /// response. Returns the `range` of their seqs.
    #[pyo3(signature = (turn, stream_id, step, messages, *, complete=true))]
    fn record_step<'py>(
        &self,
        py: Python<'py>,
        turn: u64,
        stream_id: Text,
        step: u32,
        messages: &Bound<'py, PyAny>,
        complete: bool,
    ) -> PyResult<Bound<'py, PyRange>> {
        let ms = messages_in(py, messages)?;
        let status = if complete { StepStatus::Complete } else { StepStatus::Interrupted };
        let r = self.with(py, move |c| c.record_step(turn, &stream_id, step, status, ms))?;
        range_of(py, r)
    }

    /// Every recorded attempt at user turn `turn`, in order.
    fn attempts(&self, py: Python<'_>, turn: u64) -> PyResult<Vec<PyAttempt>> {
        let a = self.with(py, move |c| c.attempts(turn))?;
        a.iter().map(|a| PyAttempt::new(py, a)).collect()
    }

    /// The message at `seq` (current revision). `NotFound` past the end.
    fn get(&self, py: Python<'_>, seq: u64) -> PyResult<PyMessage> {
        let m = self.with(py, move |c| c.get(seq))?;
        PyMessage::new(py, &m)
    }

    /// `chat[i]`: the message at seq `i`; negative indexes count from the end. `IndexError`
    /// outside the chat.
    fn __getitem__(&self, py: Python<'_>, index: i64) -> PyResult<PyMessage> {
        let m = self.with(py, move |c| {
            let len = c.len() as i64;
            let seq = if index < 0 { len + index } else { index };
            if seq < 0 || seq >= len {
                return Ok(Err(format!("message {index} of a chat of {len}")));
            }
            c.get(seq as u64).map(Ok)
        })?;
        match m {
            Ok(m) => PyMessage::new(py, &m),
            Err(msg) => Err(pyo3::exceptions::PyIndexError::new_err(msg)),
        }
    }

    /// Messages `start..end` (end defaults to the length) of the current revision; hidden
    /// ones (see `hide`) only with `hidden=True`.
    #[pyo3(signature = (start=0, end=None, *, hidden=false))]
    fn messages<'py>(
        &self,
        py: Python<'py>,
        start: u64,
        end: Option<u64>,
        hidden: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let snap = self.with(py, |c| Ok(c.snapshot()))?;
        let end = end.unwrap_or_else(|| snap.len());
        message_list(py, &snap, start..end, hidden)
    }

    /// An iterator over messages `start..end` of one snapshot (later writes do not show),
    /// oldest first, or newest first with `reverse=True`. Messages are read in batches.
    /// Hidden ones are skipped unless `hidden=True`.
    #[pyo3(signature = (start=0, end=None, *, reverse=false, hidden=false))]
    fn iter(
        &self,
        py: Python<'_>,
        start: u64,
        end: Option<u64>,
        reverse: bool,
        hidden: bool,
    ) -> PyResult<PyMessageIter> {
        let snap = self.with(py, |c| Ok(c.snapshot()))?;
        PyMessageIter::new(py, snap, start, end, reverse, hidden)
    }

    fn __iter__(&self, py: Python<'_>) -> PyResult<PyMessageIter> {
        self.iter(py, 0, None, false, false)
    }

    /// Replaces message `seq` if the chat is still at `expected_revision` (else
    /// `StaleRevision`); returns the new revision. The old version stays readable through
    /// `snapshot(old_revision)`.
    fn edit(
        &self,
        py: Python<'_>,
        seq: u64,
        message: &Bound<'_, PyAny>,
        expected_revision: u64,
    ) -> PyResult<u64> {
        let m = message_in(py, message)?;
        self.with(py, move |c| c.edit(seq, m, expected_revision))
    }

    /// Drops messages from `from_seq` on if the chat is still at `expected_revision` (else
    /// `StaleRevision`); returns the new revision.
    fn truncate(&self, py: Python<'_>, from_seq: u64, expected_revision: u64) -> PyResult<u64> {
        self.with(py, move |c| c.truncate(from_seq, expected_revision))
    }

    /// Hides the messages of `ranges` (each a `(start, end)` pair or a `range` of step 1)
    /// if the chat is still at `expected_revision` (else `StaleRevision`); returns the new
    /// revision. Hidden messages leave the model view, checkpoints and the default reads;
    /// `chat[seq]` and `messages(hidden=True)` still read them. A tool call and its results
    /// are hidden together or not at all (`InvalidArgument` otherwise).
    fn hide(&self, py: Python<'_>, ranges: &Bound<'_, PyAny>, expected_revision: u64) -> PyResult<u64> {
        let rs = crate::convert::seq_ranges(py, ranges)?;
        self.with(py, move |c| c.hide(&rs, expected_revision))
    }

    /// Erases the messages of `ranges` (as `hide` takes them) if the chat is still at
    /// `expected_revision` (else `StaleRevision`); returns the new revision. Use it where a
    /// deletion must be honoured: an erased message is hidden, no read returns it at any
    /// revision (`chat[seq]` raises `NotFound`), and the next `Store.gc` drops its bytes
    /// (text, tool results, archives and attachments only it used, summaries built over it)
    /// from the files. `hide` is the soft deletion that keeps them.
    fn erase(&self, py: Python<'_>, ranges: &Bound<'_, PyAny>, expected_revision: u64) -> PyResult<u64> {
        let rs = crate::convert::seq_ranges(py, ranges)?;
        self.with(py, move |c| c.erase(&rs, expected_revision))
    }

    /// `hide` and `append_batch` in one transaction (after a crash, both or neither);
    /// returns the new revision and the `range` of the appended seqs.
    fn hide_and_append<'py>(
        &self,
        py: Python<'py>,
        ranges: &Bound<'py, PyAny>,
        messages: &Bound<'py, PyAny>,
        expected_revision: u64,
    ) -> PyResult<(u64, Bound<'py, PyRange>)> {
        let rs = crate::convert::seq_ranges(py, ranges)?;
        let ms = messages_in(py, messages)?;
        let (rev, r) = self.with(py, move |c| c.hide_and_append(&rs, ms, expected_revision))?;
        Ok((rev, range_of(py, r)?))
    }

    /// An immutable snapshot: of now, or of the chat as it was when `revision` ended.
    #[pyo3(signature = (revision=None))]
    fn snapshot(&self, py: Python<'_>, revision: Option<u64>) -> PyResult<PySnapshot> {
        let s = self.with(py, move |c| match revision {
            None => Ok(c.snapshot()),
            Some(r) => c.snapshot_at(r),
        })?;
        Ok(PySnapshot::new(s))
    }

    /// Pins `start..end` (in `unit`) of an archive into the model view: the budget guard
    /// will not shrink it. The owner must be able to read the archive.
    #[pyo3(
        signature = (archive_id, start, end, unit=Text::from("chars")),
        text_signature = "($self, archive_id, start, end, unit='chars')"
    )]
    fn pin(
        &self,
        py: Python<'_>,
        archive_id: &Bound<'_, PyAny>,
        start: u64,
        end: u64,
        unit: Text,
    ) -> PyResult<()> {
        let (id, unit) = (crate::convert::archive_id(py, archive_id)?, unit_of(py, &unit)?);
        self.with(py, move |c| c.pin(&id, start..end, unit))
    }

    /// Removes a pin (same archive, range and unit).
    #[pyo3(
        signature = (archive_id, start, end, unit=Text::from("chars")),
        text_signature = "($self, archive_id, start, end, unit='chars')"
    )]
    fn unpin(
        &self,
        py: Python<'_>,
        archive_id: &Bound<'_, PyAny>,
        start: u64,
        end: u64,
        unit: Text,
    ) -> PyResult<()> {
        let (id, unit) = (crate::convert::archive_id(py, archive_id)?, unit_of(py, &unit)?);
        self.with(py, move |c| c.unpin(&id, start..end, unit))
    }

    /// The pinned pages.
    #[getter]
    fn pins(&self, py: Python<'_>) -> PyResult<Vec<PyPin>> {
        self.with(py, |c| Ok(c.snapshot().pins().iter().map(PyPin::from).collect()))
    }

    /// The model view under `budget`. Over the soft line older tool results become
    /// previews; still over the hard line raises `Refused` (its `.view` holds the view).
    fn view(&self, py: Python<'_>, budget: PyRef<'_, PyBudget>) -> PyResult<PyView> {
        let b = budget.budget.clone();
        let v = self.with(py, move |c| c.view(&b))?;
        let view = PyView::new(v);
        match refused(py, &view) {
            Some(e) => Err(e),
            None => Ok(view),
        }
    }

    /// The estimated input tokens of the chat as it stands (no view built).
    fn estimate(&self, py: Python<'_>, budget: PyRef<'_, PyBudget>) -> PyResult<u64> {
        let b = budget.budget.clone();
        self.with(py, move |c| c.estimate(&b))
    }

    /// The least any view must send under `budget` (system messages, the task, the last
    /// step): a refused view whose minimum is over the hard line cannot be served.
    fn protected_minimum(&self, py: Python<'_>, budget: PyRef<'_, PyBudget>) -> PyResult<u64> {
        let b = budget.budget.clone();
        self.with(py, move |c| c.protected_minimum(&b))
    }

    /// The model-driven compaction tool: `args` is the JSON text of the model's call to
    /// `compact_history`; returns the tool result text (applied, or every lint problem).
    #[pyo3(signature = (args, *, expected_revision, budget))]
    fn compaction_tool_call(
        &self,
        py: Python<'_>,
        args: Text,
        expected_revision: u64,
        budget: PyRef<'_, PyBudget>,
    ) -> PyResult<String> {
        let b = budget.budget.clone();
        self.with(py, move |c| c.compaction_tool_call(&args, expected_revision, &b))
    }

    /// Reports the real input tokens of the call made with view `step` (`View.step`);
    /// returns the new calibration factor.
    fn report_usage(&self, py: Python<'_>, step: u64, actual_input_tokens: u64) -> PyResult<f64> {
        self.with(py, move |c| c.report_usage(step, actual_input_tokens))
    }

    /// Every message's seq, role, token estimate and a short preview.
    fn index(&self, py: Python<'_>) -> PyResult<Vec<PyIndexLine>> {
        self.with(py, |c| Ok(c.index()?.iter().map(PyIndexLine::from).collect()))
    }

    /// Checks a compaction plan without applying it: a list of `(rule, detail)`. A squish
    /// is `(from, to, rewrite)`.
    #[pyo3(signature = (trims=Vec::new(), squishes=Vec::new()), text_signature = "($self, trims=(), squishes=())")]
    fn lint(
        &self,
        py: Python<'_>,
        trims: Vec<u64>,
        squishes: Vec<(u64, u64, Text)>,
    ) -> PyResult<Vec<(String, String)>> {
        let plan = plan_of(trims, squishes.into_iter().map(|(a, b, t)| (a, b, t.0)).collect());
        let p = self.with(py, move |c| c.lint(&plan))?;
        Ok(p.into_iter().map(|p| (p.rule.to_string(), p.detail)).collect())
    }

    /// Records a compaction plan (applied when views are built, originals untouched) if the
    /// chat is at `expected_revision` and the linter finds nothing (else `LintRejected`).
    /// Returns the number of changes.
    #[pyo3(
        signature = (trims=Vec::new(), squishes=Vec::new(), *, expected_revision),
        text_signature = "($self, trims=(), squishes=(), *, expected_revision)"
    )]
    fn compact(
        &self,
        py: Python<'_>,
        trims: Vec<u64>,
        squishes: Vec<(u64, u64, Text)>,
        expected_revision: u64,
    ) -> PyResult<usize> {
        let plan = plan_of(trims, squishes.into_iter().map(|(a, b, t)| (a, b, t.0)).collect());
        self.with(py, move |c| c.compact(&plan, expected_revision))
    }

    /// The first message holding a pending approval: `(seq, {"kind": "request"|"json",
    /// "detail": str})`, or None.
    fn first_pending_approval<'py>(&self, py: Python<'py>) -> PyResult<Option<(u64, Bound<'py, PyDict>)>> {
        let p = self.with(py, |c| c.first_pending_approval(None))?;
        let Some((seq, pending)) = p else { return Ok(None) };
        let d = PyDict::new(py);
        match pending {
            undertext::approval::Pending::Request(id) => {
                d.set_item("kind", "request")?;
                d.set_item("detail", id)?;
            }
            undertext::approval::Pending::Json(rule) => {
                d.set_item("kind", "json")?;
                d.set_item("detail", rule)?;
            }
        }
        Ok(Some((seq, d)))
    }

    /// Builds a checkpoint of the settled history with `summarizer` (default: the engine's
    /// `Extractive`). Not published: see `publish_checkpoint`. An exception raised by a
    /// Python summarizer propagates as itself.
    #[pyo3(signature = (summarizer=None, *, segment_tokens=8000, fan_in=4))]
    fn build_checkpoint(
        &self,
        py: Python<'_>,
        summarizer: Option<&Bound<'_, PyAny>>,
        segment_tokens: u64,
        fan_in: usize,
    ) -> PyResult<PyCheckpoint> {
        let s = match summarizer {
            Some(s) => crate::worker::summarizer_of(s)?.0,
            None => std::sync::Arc::new(undertext::Extractive::default()),
        };
        let opts = CheckpointOptions { segment_tokens, fan_in, ..CheckpointOptions::default() };
        crate::worker::clear_raised();
        match self.with(py, move |c| c.build_checkpoint(&*s, &opts)) {
            Ok(cp) => Ok(PyCheckpoint::new(cp)),
            Err(e) => Err(crate::worker::take_raised(py).unwrap_or(e)),
        }
    }

    /// Publishes `checkpoint` if the chat was not edited since it was built and it reaches
    /// beyond the published one (else `Conflict`).
    fn publish_checkpoint(&self, py: Python<'_>, checkpoint: PyRef<'_, PyCheckpoint>) -> PyResult<()> {
        let cp = checkpoint.cp.clone();
        self.with(py, move |c| c.publish_checkpoint(&cp))
    }

    /// `(base_revision, reach)` of the published checkpoint, or None.
    #[getter]
    fn published_checkpoint(&self, py: Python<'_>) -> PyResult<Option<(u64, u64)>> {
        self.with(py, |c| Ok(c.published_checkpoint()))
    }

    /// The checkpoint the worker prepared for this chat, or None (it may be stale: compare
    /// its `base_revision` with `revision`).
    #[getter]
    fn prepared_checkpoint(&self, py: Python<'_>) -> PyResult<Option<PyCheckpoint>> {
        self.with(py, |c| Ok(c.prepared().map(PyCheckpoint::from_arc)))
    }

    fn __repr__(&self) -> String {
        format!("Chat(id={:?}, owner={:?})", self.id.to_string(), self.owner)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyChat>().is_ok_and(|o| {
            let o = o.get();
            o.id == self.id && o.owner == self.owner && o.store.is(&self.store)
        })
    }

    fn __hash__(&self) -> u64 {
        self.id.0
    }
}

/// `m` with the fields given changed (`extra` replaces the whole map): what `set_meta` and
/// `append_batch` with metadata write.
fn changed(
    mut m: undertext::ChatMeta,
    title: Option<Text>,
    model: Option<Text>,
    draft: Option<Text>,
    extra: Option<BTreeMap<Text, Text>>,
) -> undertext::ChatMeta {
    if let Some(t) = title {
        m.title = t.0;
    }
    if let Some(t) = model {
        m.model = t.0;
    }
    if let Some(t) = draft {
        m.draft = t.0;
    }
    if let Some(e) = extra {
        m.extra = crate::convert::strings(e);
    }
    m
}
