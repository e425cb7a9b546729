//! `undertext.Snapshot` (an immutable state of a chat) and the message iterator.

use std::collections::VecDeque;

use pyo3::prelude::*;
use pyo3::types::PyList;
use undertext::{Message, Part, Snapshot};

use crate::errors::{invalid, run};
use crate::json::load::Loader;
use crate::types::{PyChatMeta, PyMessage, PyPin};

/// Messages read from the engine per batch while iterating.
const BATCH: u64 = 64;

/// Messages read from the engine per batch by [`PySnapshot::texts`].
const TEXTS_BATCH: u64 = 256;

/// Messages read from the engine at a time for a list of them (`messages()`).
const LIST_BATCH: u64 = 2048;

/// An immutable state of a chat: it never changes, whatever is written later. Taking one
/// costs a few atomic operations.
#[pyclass(name = "Snapshot", module = "undertext", frozen)]
#[derive(Debug)]
pub struct PySnapshot {
    snap: Snapshot,
}

impl PySnapshot {
    pub(crate) fn new(snap: Snapshot) -> PySnapshot {
        PySnapshot { snap }
    }
}

#[pymethods]
impl PySnapshot {
    /// The chat id.
    #[getter]
    fn chat_id(&self) -> String {
        self.snap.chat_id().to_string()
    }

    /// The revision this snapshot shows.
    #[getter]
    fn revision(&self) -> u64 {
        self.snap.revision()
    }

    fn __len__(&self) -> usize {
        self.snap.len() as usize
    }

    /// The metadata at the time of the snapshot.
    #[getter]
    fn meta(&self) -> PyChatMeta {
        PyChatMeta::from(self.snap.meta())
    }

    /// The pinned pages at the time of the snapshot.
    #[getter]
    fn pins(&self) -> Vec<PyPin> {
        self.snap.pins().iter().map(PyPin::from).collect()
    }

    /// The message at `seq`.
    fn get(&self, py: Python<'_>, seq: u64) -> PyResult<PyMessage> {
        let snap = self.snap.clone();
        let m = run(py, move || snap.get(seq))?;
        PyMessage::new(py, &m)
    }

    /// `snapshot[i]`; negative indexes count from the end. `IndexError` outside.
    fn __getitem__(&self, py: Python<'_>, index: i64) -> PyResult<PyMessage> {
        let len = self.snap.len() as i64;
        let seq = if index < 0 { len + index } else { index };
        if seq < 0 || seq >= len {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "message {index} of a snapshot of {len}"
            )));
        }
        self.get(py, seq as u64)
    }

    /// Messages `start..end` (end defaults to the length); hidden ones only with
    /// `hidden=True`.
    #[pyo3(signature = (start=0, end=None, *, hidden=false))]
    fn messages<'py>(
        &self,
        py: Python<'py>,
        start: u64,
        end: Option<u64>,
        hidden: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let end = end.unwrap_or_else(|| self.snap.len());
        message_list(py, &self.snap, start..end, hidden)
    }

    /// An iterator over messages `start..end`, newest first with `reverse=True`; hidden ones
    /// only with `hidden=True`.
    #[pyo3(signature = (start=0, end=None, *, reverse=false, hidden=false))]
    fn iter(
        &self,
        py: Python<'_>,
        start: u64,
        end: Option<u64>,
        reverse: bool,
        hidden: bool,
    ) -> PyResult<PyMessageIter> {
        PyMessageIter::new(py, self.snap.clone(), start, end, reverse, hidden)
    }

    fn __iter__(&self, py: Python<'_>) -> PyResult<PyMessageIter> {
        PyMessageIter::new(py, self.snap.clone(), 0, None, false, false)
    }

    /// The messages of `start..end` that are not hidden, newest first with `reverse=True`, at
    /// most `limit` of them, as `(seq, value)` pairs: the value is the message's text (its
    /// text parts, concatenated; `Message.text`), or with `json=True` the value
    /// `json.loads` gives for that text (its `JSONDecodeError` when it is not JSON); `None`
    /// for a message without a text part (a summary, tool calls). Reads only the messages it
    /// returns (and the hidden ones among them), and makes no `Message` objects: what an
    /// adapter keeping one item per message reads its items with.
    #[pyo3(signature = (start=0, end=None, *, reverse=false, limit=None, json=false))]
    fn texts<'py>(
        &self,
        py: Python<'py>,
        start: u64,
        end: Option<u64>,
        reverse: bool,
        limit: Option<usize>,
        json: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let len = self.snap.len();
        let end = end.unwrap_or(len).min(len);
        if start > end {
            return Err(invalid(py, format!("range: expected start <= end, found {start}..{end}")));
        }
        let out = PyList::empty(py);
        let mut loader = Loader::new(py);
        let (mut lo, mut hi) = (start, end);
        while lo < hi && limit.is_none_or(|l| out.len() < l) {
            // Live messages are most of a chat: ask for what is still wanted.
            let want = limit.map_or(TEXTS_BATCH, |l| ((l - out.len()) as u64).min(TEXTS_BATCH));
            let r = if reverse { hi.saturating_sub(want).max(lo)..hi } else { lo..(lo + want).min(hi) };
            let snap = self.snap.clone();
            let rr = r.clone();
            let ms = run(py, move || snap.range(rr))?;
            if reverse {
                hi = r.start;
            } else {
                lo = r.end;
            }
            let ms: Box<dyn Iterator<Item = &Message>> =
                if reverse { Box::new(ms.iter().rev()) } else { Box::new(ms.iter()) };
            for m in ms {
                if limit.is_some_and(|l| out.len() >= l) {
                    break;
                }
                let value = match text_of(m) {
                    None => py.None().into_bound(py),
                    Some(t) if json => loader.loads(&t)?,
                    Some(t) => pyo3::types::PyString::new(py, &t).into_any(),
                };
                out.append((m.seq, value))?;
            }
        }
        Ok(out)
    }

    /// Whether message `seq` is hidden (`Chat.hide`). `IndexError` past the length.
    fn is_hidden(&self, seq: u64) -> PyResult<bool> {
        if seq >= self.snap.len() {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "message {seq} of a snapshot of {}",
                self.snap.len()
            )));
        }
        Ok(self.snap.is_hidden(seq))
    }

    /// The hidden seqs: sorted, disjoint `(start, end)` pairs (`end` excluded).
    #[getter]
    fn hidden(&self) -> Vec<(u64, u64)> {
        self.snap.hidden().iter().map(|r| (r.start, r.end)).collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "Snapshot(chat_id={:?}, revision={}, len={})",
            self.chat_id(),
            self.snap.revision(),
            self.snap.len()
        )
    }
}

/// A message's text parts, concatenated; `None` when it has none.
fn text_of(m: &Message) -> Option<std::borrow::Cow<'_, str>> {
    let mut texts = m.parts.iter().filter_map(|p| match p {
        Part::Text(t) => Some(t.as_str()),
        _ => None,
    });
    let first = texts.next()?;
    match texts.next() {
        None => Some(std::borrow::Cow::Borrowed(first)),
        Some(second) => {
            let mut s = format!("{first}{second}");
            s.extend(texts);
            Some(std::borrow::Cow::Owned(s))
        }
    }
}

/// An iterator over the messages of one snapshot, in either direction, read in batches.
#[pyclass(name = "MessageIterator", module = "undertext")]
#[derive(Debug)]
pub struct PyMessageIter {
    snap: Snapshot,
    /// Positions not yet read: `lo..hi`.
    lo: u64,
    hi: u64,
    reverse: bool,
    /// Whether hidden messages are read too.
    hidden: bool,
    buf: VecDeque<Message>,
}

/// Messages `range` of `snap` as a list, read from the engine and made into Python objects
/// [`LIST_BATCH`] at a time, so that the engine's copies of a long range are never all alive
/// beside the objects made of them. A range the engine refuses (`start > end`, past the end)
/// is read whole, for its error.
pub(crate) fn message_list<'py>(
    py: Python<'py>,
    snap: &Snapshot,
    range: std::ops::Range<u64>,
    hidden: bool,
) -> PyResult<Bound<'py, PyList>> {
    let read = |r: std::ops::Range<u64>| {
        let snap = snap.clone();
        run(py, move || if hidden { snap.range_with_hidden(r) } else { snap.range(r) })
    };
    if range.start >= range.end || range.end > snap.len() {
        return PyMessage::list(py, &read(range)?);
    }
    let list = PyList::empty(py);
    let mut lo = range.start;
    while lo < range.end {
        let hi = (lo + LIST_BATCH).min(range.end);
        for m in read(lo..hi)? {
            list.append(PyMessage::new(py, &m)?)?;
        }
        lo = hi;
    }
    Ok(list)
}

impl PyMessageIter {
    pub(crate) fn new(
        py: Python<'_>,
        snap: Snapshot,
        start: u64,
        end: Option<u64>,
        reverse: bool,
        hidden: bool,
    ) -> PyResult<PyMessageIter> {
        let len = snap.len();
        let end = end.unwrap_or(len).min(len);
        if start > end {
            return Err(invalid(py, format!("range: expected start <= end, found {start}..{end}")));
        }
        Ok(PyMessageIter { snap, lo: start, hi: end, reverse, hidden, buf: VecDeque::new() })
    }
}

#[pymethods]
impl PyMessageIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<PyMessage>> {
        // A batch may be all hidden: read on until one holds a message or none is left.
        while self.buf.is_empty() && self.lo < self.hi {
            let r = if self.reverse {
                self.hi.saturating_sub(BATCH).max(self.lo)..self.hi
            } else {
                self.lo..(self.lo + BATCH).min(self.hi)
            };
            let snap = self.snap.clone();
            let (rr, hidden) = (r.clone(), self.hidden);
            let ms = run(py, move || if hidden { snap.range_with_hidden(rr) } else { snap.range(rr) })?;
            if self.reverse {
                self.hi = r.start;
                self.buf.extend(ms.into_iter().rev());
            } else {
                self.lo = r.end;
                self.buf.extend(ms);
            }
        }
        self.buf.pop_front().map(|m| PyMessage::new(py, &m)).transpose()
    }
}
