//! Plain value classes returned to Python: messages, chat metadata and summaries, archive
//! references, pins, attempts and steps, index lines.

use std::collections::BTreeMap;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use undertext::IndexLine;
use undertext::{ArchiveRef, Attempt, ChatMeta, ChatSummary, Message, Part, Pin, Step, StepStatus};

use crate::convert::{Repeats, known_str, parse_archive_id, parts_out, repeated_int, role_of, unit_of};

// Pickling and `copy.deepcopy`: each value class's `__reduce__` gives `(Class._from_state,
// (state,))`, where `state` is a tuple of its fields; `_from_state` builds it back (checking
// what a value of its kind must be: a known role or unit, a well-formed archive id).

/// `(type(obj)._from_state, (state,))`, what `__reduce__` returns.
fn reduce<'py>(
    obj: &Bound<'py, PyAny>,
    state: Bound<'py, PyTuple>,
) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyTuple>,))> {
    Ok((obj.get_type().getattr("_from_state")?, (state,)))
}

/// A stored message: its place in the chat, its role and its parts (dicts).
#[pyclass(name = "Message", module = "undertext", frozen)]
#[derive(Debug)]
pub struct PyMessage {
    /// Position in the chat, dense from 0.
    #[pyo3(get)]
    pub seq: u64,
    /// The revision this version of the message was written at.
    #[pyo3(get)]
    pub revision: u64,
    /// `"system"`, `"user"`, `"assistant"` or `"tool"`.
    #[pyo3(get)]
    pub role: &'static str,
    /// The user turn it belongs to.
    #[pyo3(get)]
    pub turn: u64,
    /// Its parts, as dicts with a `"type"`.
    #[pyo3(get)]
    pub parts: Py<PyList>,
    /// `(turn, stream_id, step)` for model output recorded with `record_step`, else None.
    #[pyo3(get)]
    pub step: Option<(u64, String, u32)>,
    /// When it was written, in milliseconds since the Unix epoch.
    #[pyo3(get)]
    pub at_ms: u64,
    /// Harness feedback (appended with `"feedback": True`): a user message that started no turn.
    #[pyo3(get)]
    pub feedback: bool,
    /// The text parts concatenated: for a message of one text part, the very string object
    /// its part dict holds (no second copy of the text).
    text: Py<PyString>,
}

impl PyMessage {
    /// The Python object of an engine message.
    pub(crate) fn new(py: Python<'_>, m: &Message) -> PyResult<PyMessage> {
        let parts = parts_out(py, &m.parts)?;
        let mut texts = m.parts.iter().enumerate().filter(|(_, p)| matches!(p, Part::Text(_)));
        let text = match (texts.next(), texts.next()) {
            (None, _) => known_str(py, ""),
            (Some((i, _)), None) => {
                parts.get_item(i)?.get_item(known_str(py, "text"))?.cast_into::<PyString>()?
            }
            (Some(_), Some(_)) => {
                let all: Vec<&str> = m
                    .parts
                    .iter()
                    .filter_map(|p| match p {
                        Part::Text(t) => Some(t.as_str()),
                        _ => None,
                    })
                    .collect();
                PyString::new(py, &all.concat())
            }
        };
        Ok(PyMessage {
            seq: m.seq,
            revision: m.revision,
            role: m.role.as_str(),
            turn: m.turn,
            parts: parts.unbind(),
            step: m.step.as_ref().map(|s| (s.turn, s.stream_id.clone(), s.step)),
            at_ms: m.at_ms,
            feedback: m.feedback,
            text: text.unbind(),
        })
    }

    /// A Python list of messages.
    pub(crate) fn list<'py>(py: Python<'py>, msgs: &[Message]) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for m in msgs {
            list.append(Py::new(py, PyMessage::new(py, m)?)?)?;
        }
        Ok(list)
    }
}

#[pymethods]
impl PyMessage {
    /// The text parts, concatenated ("" when there are none).
    #[getter]
    fn text<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        self.text.bind(py).clone()
    }

    /// The message as a dict; `{"role": d["role"], "parts": d["parts"]}` appends it again.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let key = |k| known_str(py, k);
        d.set_item(key("seq"), self.seq)?;
        d.set_item(key("revision"), self.revision)?;
        d.set_item(key("role"), key(self.role))?;
        d.set_item(key("turn"), repeated_int(py, Repeats::Turn, self.turn)?)?;
        let parts = self.parts.bind(py);
        d.set_item(key("parts"), parts.get_slice(0, parts.len()))?;
        d.set_item(key("step"), self.step.clone())?;
        d.set_item(key("at_ms"), repeated_int(py, Repeats::AtMs, self.at_ms)?)?;
        if self.feedback {
            d.set_item(key("feedback"), true)?;
        }
        Ok(d)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyTuple>,))> {
        let py = slf.py();
        let m = slf.get();
        let state = (
            m.seq,
            m.revision,
            m.role,
            m.turn,
            m.parts.bind(py),
            m.step.clone(),
            m.at_ms,
            m.feedback,
            m.text.bind(py),
        )
            .into_pyobject(py)?;
        reduce(slf.as_any(), state)
    }

    /// Builds a message back from `__reduce__`'s state (pickle, `copy`).
    #[staticmethod]
    #[expect(clippy::type_complexity, reason = "the state tuple, field by field")]
    fn _from_state(
        py: Python<'_>,
        state: (
            u64,
            u64,
            String,
            u64,
            Bound<'_, PyList>,
            Option<(u64, String, u32)>,
            u64,
            bool,
            Bound<'_, PyString>,
        ),
    ) -> PyResult<PyMessage> {
        let (seq, revision, role, turn, parts, step, at_ms, feedback, text) = state;
        Ok(PyMessage {
            seq,
            revision,
            role: role_of(py, &role)?.as_str(),
            turn,
            parts: parts.unbind(),
            step,
            at_ms,
            feedback,
            text: text.unbind(),
        })
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let t: String = self.text.bind(py).to_cow()?.chars().take(40).collect();
        Ok(format!("Message(seq={}, role={:?}, turn={}, text={:?})", self.seq, self.role, self.turn, t))
    }
}

/// A chat's mutable metadata.
#[pyclass(name = "ChatMeta", module = "undertext", frozen)]
#[derive(Debug, Clone)]
pub struct PyChatMeta {
    /// Title or slug.
    #[pyo3(get)]
    pub title: String,
    /// The model the chat talks to.
    #[pyo3(get)]
    pub model: String,
    /// An unsent draft.
    #[pyo3(get)]
    pub draft: String,
    /// Free key-value pairs (a copy).
    #[pyo3(get)]
    pub extra: BTreeMap<String, String>,
}

impl From<&ChatMeta> for PyChatMeta {
    fn from(m: &ChatMeta) -> Self {
        PyChatMeta {
            title: m.title.clone(),
            model: m.model.clone(),
            draft: m.draft.clone(),
            extra: m.extra.clone(),
        }
    }
}

#[pymethods]
impl PyChatMeta {
    fn __repr__(&self) -> String {
        format!(
            "ChatMeta(title={:?}, model={:?}, draft={:?}, extra={:?})",
            self.title, self.model, self.draft, self.extra
        )
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyTuple>,))> {
        let m = slf.get();
        let state = (m.title.as_str(), m.model.as_str(), m.draft.as_str(), m.extra.clone())
            .into_pyobject(slf.py())?;
        reduce(slf.as_any(), state)
    }

    /// Builds the metadata back from `__reduce__`'s state (pickle, `copy`).
    #[staticmethod]
    fn _from_state(state: (String, String, String, BTreeMap<String, String>)) -> PyChatMeta {
        let (title, model, draft, extra) = state;
        PyChatMeta { title, model, draft, extra }
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyChatMeta>().is_ok_and(|o| {
            let o = o.get();
            (&o.title, &o.model, &o.draft, &o.extra) == (&self.title, &self.model, &self.draft, &self.extra)
        })
    }
}

/// A line of `Store.chats`: a chat's id, metadata and counters.
#[pyclass(name = "ChatInfo", module = "undertext", frozen)]
#[derive(Debug)]
pub struct PyChatInfo {
    /// The chat id (`chat-` and 16 hex digits).
    #[pyo3(get)]
    pub id: String,
    /// Title or slug.
    #[pyo3(get)]
    pub title: String,
    /// The model.
    #[pyo3(get)]
    pub model: String,
    /// The draft.
    #[pyo3(get)]
    pub draft: String,
    /// Free key-value pairs (a copy).
    #[pyo3(get)]
    pub extra: BTreeMap<String, String>,
    /// Number of messages.
    #[pyo3(get)]
    pub len: u64,
    /// Current revision.
    #[pyo3(get)]
    pub revision: u64,
    /// Creation time (ms since the Unix epoch).
    #[pyo3(get)]
    pub created_ms: u64,
    /// Last write (ms since the Unix epoch).
    #[pyo3(get)]
    pub last_activity_ms: u64,
}

impl From<&ChatSummary> for PyChatInfo {
    fn from(s: &ChatSummary) -> Self {
        PyChatInfo {
            id: s.id.to_string(),
            title: s.meta.title.clone(),
            model: s.meta.model.clone(),
            draft: s.meta.draft.clone(),
            extra: s.meta.extra.clone(),
            len: s.len,
            revision: s.revision,
            created_ms: s.created_ms,
            last_activity_ms: s.last_activity_ms,
        }
    }
}

#[pymethods]
impl PyChatInfo {
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyTuple>,))> {
        let c = slf.get();
        let state = (
            c.id.as_str(),
            c.title.as_str(),
            c.model.as_str(),
            c.draft.as_str(),
            c.extra.clone(),
            c.len,
            c.revision,
            c.created_ms,
            c.last_activity_ms,
        )
            .into_pyobject(slf.py())?;
        reduce(slf.as_any(), state)
    }

    /// Builds the line back from `__reduce__`'s state (pickle, `copy`).
    #[staticmethod]
    fn _from_state(
        state: (String, String, String, String, BTreeMap<String, String>, u64, u64, u64, u64),
    ) -> PyChatInfo {
        let (id, title, model, draft, extra, len, revision, created_ms, last_activity_ms) = state;
        PyChatInfo { id, title, model, draft, extra, len, revision, created_ms, last_activity_ms }
    }

    fn __repr__(&self) -> String {
        format!(
            "ChatInfo(id={:?}, title={:?}, len={}, revision={})",
            self.id, self.title, self.len, self.revision
        )
    }
}

/// A reference to an archived text: its content address and sizes in every unit.
#[pyclass(name = "ArchiveRef", module = "undertext", frozen)]
#[derive(Debug)]
pub struct PyArchiveRef {
    pub(crate) r: ArchiveRef,
}

#[pymethods]
impl PyArchiveRef {
    /// The archive id (64 hex digits).
    #[getter]
    fn id(&self) -> String {
        self.r.id.to_string()
    }
    /// Length in UTF-8 bytes.
    #[getter]
    fn bytes(&self) -> u64 {
        self.r.bytes
    }
    /// Length in Unicode scalar values (`len(text)` in Python).
    #[getter]
    fn chars(&self) -> u64 {
        self.r.chars
    }
    /// Length in UTF-16 code units.
    #[getter]
    fn utf16_units(&self) -> u64 {
        self.r.utf16_units
    }
    /// Number of lines.
    #[getter]
    fn lines(&self) -> u64 {
        self.r.lines
    }
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyTuple>,))> {
        let r = &slf.get().r;
        let state = (r.id.to_string(), r.bytes, r.chars, r.utf16_units, r.lines).into_pyobject(slf.py())?;
        reduce(slf.as_any(), state)
    }

    /// Builds the reference back from `__reduce__`'s state (pickle, `copy`).
    #[staticmethod]
    fn _from_state(py: Python<'_>, state: (String, u64, u64, u64, u64)) -> PyResult<PyArchiveRef> {
        let (id, bytes, chars, utf16_units, lines) = state;
        let id = parse_archive_id(py, &id)?;
        Ok(PyArchiveRef { r: ArchiveRef { id, bytes, chars, utf16_units, lines } })
    }

    fn __str__(&self) -> String {
        self.r.id.to_string()
    }
    fn __repr__(&self) -> String {
        format!("ArchiveRef(id={:?}, chars={}, lines={})", self.r.id.to_string(), self.r.chars, self.r.lines)
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyArchiveRef>().is_ok_and(|o| o.get().r == self.r)
    }
    fn __hash__(&self) -> u64 {
        u64::from_le_bytes(self.r.id.0[..8].try_into().unwrap_or_default())
    }
}

/// A page of an archive kept in a chat's model view.
#[pyclass(name = "Pin", module = "undertext", frozen)]
#[derive(Debug)]
pub struct PyPin {
    /// The archive id.
    #[pyo3(get)]
    pub archive: String,
    /// First position (in `unit`).
    #[pyo3(get)]
    pub start: u64,
    /// One past the last position.
    #[pyo3(get)]
    pub end: u64,
    /// `"chars"`, `"utf16"`, `"bytes"` or `"lines"`.
    #[pyo3(get)]
    pub unit: &'static str,
}

impl From<&Pin> for PyPin {
    fn from(p: &Pin) -> Self {
        PyPin {
            archive: p.archive.to_string(),
            start: p.range.start,
            end: p.range.end,
            unit: p.unit.as_str(),
        }
    }
}

#[pymethods]
impl PyPin {
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyTuple>,))> {
        let p = slf.get();
        let state = (p.archive.as_str(), p.start, p.end, p.unit).into_pyobject(slf.py())?;
        reduce(slf.as_any(), state)
    }

    /// Builds the pin back from `__reduce__`'s state (pickle, `copy`).
    #[staticmethod]
    fn _from_state(py: Python<'_>, state: (String, u64, u64, String)) -> PyResult<PyPin> {
        let (archive, start, end, unit) = state;
        let archive = parse_archive_id(py, &archive)?.to_string();
        Ok(PyPin { archive, start, end, unit: unit_of(py, &unit)?.as_str() })
    }

    fn __repr__(&self) -> String {
        format!(
            "Pin(archive={:?}, start={}, end={}, unit={:?})",
            self.archive, self.start, self.end, self.unit
        )
    }
}

/// A recorded model step: number, status and the messages it produced.
#[pyclass(name = "Step", module = "undertext", frozen)]
#[derive(Debug)]
pub struct PyStep {
    /// Step number within its stream.
    #[pyo3(get)]
    pub step: u32,
    /// Whether the response finished (False: interrupted).
    #[pyo3(get)]
    pub complete: bool,
    /// The messages, as recorded.
    #[pyo3(get)]
    pub messages: Py<PyList>,
    /// The seq each message got in the chat.
    #[pyo3(get)]
    pub seqs: Vec<u64>,
    /// When it was recorded (ms since the Unix epoch).
    #[pyo3(get)]
    pub at_ms: u64,
}

/// One attempt at a user turn: a stream and its steps in recorded order.
#[pyclass(name = "Attempt", module = "undertext", frozen)]
#[derive(Debug)]
pub struct PyAttempt {
    /// The stream id.
    #[pyo3(get)]
    pub stream_id: String,
    /// Its steps.
    #[pyo3(get)]
    pub steps: Vec<Py<PyStep>>,
}

impl PyAttempt {
    pub(crate) fn new(py: Python<'_>, a: &Attempt) -> PyResult<PyAttempt> {
        let steps = a.steps.iter().map(|s| Py::new(py, step(py, s)?)).collect::<PyResult<Vec<_>>>()?;
        Ok(PyAttempt { stream_id: a.stream_id.clone(), steps })
    }
}

fn step(py: Python<'_>, s: &Step) -> PyResult<PyStep> {
    Ok(PyStep {
        step: s.step,
        complete: s.status == StepStatus::Complete,
        messages: PyMessage::list(py, &s.messages)?.unbind(),
        seqs: s.seqs.clone(),
        at_ms: s.at_ms,
    })
}

#[pymethods]
impl PyAttempt {
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyTuple>,))> {
        let py = slf.py();
        let a = slf.get();
        let steps: Vec<Py<PyStep>> = a.steps.iter().map(|s| s.clone_ref(py)).collect();
        let state = (a.stream_id.as_str(), steps).into_pyobject(py)?;
        reduce(slf.as_any(), state)
    }

    /// Builds the attempt back from `__reduce__`'s state (pickle, `copy`).
    #[staticmethod]
    fn _from_state(state: (String, Vec<Py<PyStep>>)) -> PyAttempt {
        let (stream_id, steps) = state;
        PyAttempt { stream_id, steps }
    }

    fn __repr__(&self) -> String {
        format!("Attempt(stream_id={:?}, steps={})", self.stream_id, self.steps.len())
    }
}

#[pymethods]
impl PyStep {
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyTuple>,))> {
        let py = slf.py();
        let s = slf.get();
        let state = (s.step, s.complete, s.messages.bind(py), s.seqs.clone(), s.at_ms).into_pyobject(py)?;
        reduce(slf.as_any(), state)
    }

    /// Builds the step back from `__reduce__`'s state (pickle, `copy`).
    #[staticmethod]
    fn _from_state(state: (u32, bool, Bound<'_, PyList>, Vec<u64>, u64)) -> PyStep {
        let (step, complete, messages, seqs, at_ms) = state;
        PyStep { step, complete, messages: messages.unbind(), seqs, at_ms }
    }

    fn __repr__(&self) -> String {
        format!("Step(step={}, complete={}, seqs={:?})", self.step, self.complete, self.seqs)
    }
}

/// A line of `Chat.index()`: what a model needs to choose what to compact.
#[pyclass(name = "IndexLine", module = "undertext", frozen)]
#[derive(Debug)]
pub struct PyIndexLine {
    /// The message's seq.
    #[pyo3(get)]
    pub seq: u64,
    /// Its role.
    #[pyo3(get)]
    pub role: &'static str,
    /// Estimated tokens.
    #[pyo3(get)]
    pub tokens: u64,
    /// A 60-character preview.
    #[pyo3(get)]
    pub preview: String,
}

impl From<&IndexLine> for PyIndexLine {
    fn from(l: &IndexLine) -> Self {
        PyIndexLine { seq: l.seq, role: l.role.as_str(), tokens: l.tokens, preview: l.preview.clone() }
    }
}

#[pymethods]
impl PyIndexLine {
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyTuple>,))> {
        let l = slf.get();
        let state = (l.seq, l.role, l.tokens, l.preview.as_str()).into_pyobject(slf.py())?;
        reduce(slf.as_any(), state)
    }

    /// Builds the line back from `__reduce__`'s state (pickle, `copy`).
    #[staticmethod]
    fn _from_state(py: Python<'_>, state: (u64, String, u64, String)) -> PyResult<PyIndexLine> {
        let (seq, role, tokens, preview) = state;
        Ok(PyIndexLine { seq, role: role_of(py, &role)?.as_str(), tokens, preview })
    }

    fn __repr__(&self) -> String {
        format!(
            "IndexLine(seq={}, role={:?}, tokens={}, preview={:?})",
            self.seq, self.role, self.tokens, self.preview
        )
    }
}
