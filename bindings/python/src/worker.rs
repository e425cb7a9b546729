//! Python summarizers and `undertext.Worker`, the background pre-compaction worker.
//!
//! A Python summarizer is called with the GIL taken, on whichever thread the engine calls
//! it from (the worker's own threads, or the caller's for `Chat.build_checkpoint`). An
//! exception it raises becomes an engine error (so the engine reports it and retries the
//! job by policy) and is kept: `Worker.exceptions` holds the exception objects, and
//! `build_checkpoint` re-raises it as itself.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyList;
use undertext::{CheckpointOptions, Extractive, Summarizer};
use undertext::{Error, Message};
use undertext::{HardLinePolicy, Worker, WorkerOptions};

use crate::errors::{invalid, run_plain};
use crate::types::PyMessage;

/// A running worker, shared with the store that stops it on close.
pub(crate) type WorkerSlot = Arc<Mutex<Option<Worker>>>;

/// Exceptions raised by a Python summarizer.
type Raised = Arc<Mutex<Vec<Py<PyAny>>>>;

thread_local! {
    /// The last exception a Python summarizer raised on this thread.
    static LAST_RAISED: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// Forgets the exception recorded on this thread.
pub(crate) fn clear_raised() {
    LAST_RAISED.with(|l| l.borrow_mut().take());
}

/// The exception a Python summarizer raised on this thread, if any.
pub(crate) fn take_raised(_py: Python<'_>) -> Option<PyErr> {
    LAST_RAISED.with(|l| l.borrow_mut().take())
}

/// The engine's deterministic summarizer: the first line of each message; merges keep
/// each part's first lines within `max_chars`.
#[pyclass(name = "Extractive", module = "undertext", frozen)]
#[derive(Debug)]
pub struct PyExtractive {
    max_chars: usize,
}

#[pymethods]
impl PyExtractive {
    #[new]
    #[pyo3(signature = (max_chars=4000))]
    fn new(max_chars: usize) -> Self {
        PyExtractive { max_chars }
    }

    /// Characters a merged summary keeps at most.
    #[getter]
    fn max_chars(&self) -> usize {
        self.max_chars
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> (Bound<'py, PyAny>, (usize,)) {
        (slf.get_type().into_any(), (slf.get().max_chars,))
    }

    fn __repr__(&self) -> String {
        format!("Extractive(max_chars={})", self.max_chars)
    }
}

/// A summarizer made of Python callables.
#[derive(Debug)]
struct PySummarizer {
    id: String,
    summarize: Py<PyAny>,
    merge: Option<Py<PyAny>>,
    raised: Raised,
}

impl PySummarizer {
    /// Turns a Python exception into an engine error, keeping the exception.
    fn failed(&self, py: Python<'_>, what: &str, e: PyErr) -> Error {
        let ty = e.get_type(py).name().map(|n| n.to_string()).unwrap_or_else(|_| "Exception".into());
        let msg = e.value(py).str().map(|s| s.to_string()).unwrap_or_default();
        if let Ok(mut r) = self.raised.lock() {
            r.push(e.value(py).clone().into_any().unbind());
        }
        LAST_RAISED.with(|l| *l.borrow_mut() = Some(e.clone_ref(py)));
        Error::InvalidArgument(format!("summarizer {:?} raised {ty} in {what}: {msg}", self.id))
    }

    fn text(&self, py: Python<'_>, what: &str, r: PyResult<Bound<'_, PyAny>>) -> undertext::Result<String> {
        let r = r.and_then(|v| match v.extract::<String>() {
            Ok(s) => Ok(s),
            Err(_) => {
                let ty = v.get_type().name().map(|n| n.to_string()).unwrap_or_default();
                Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "summarizer {:?}: {what} must return a str, it returned {ty}",
                    self.id
                )))
            }
        });
        r.map_err(|e| self.failed(py, what, e))
    }
}

impl Summarizer for PySummarizer {
    fn id(&self) -> &str {
        &self.id
    }

    fn summarize(&self, messages: &[Message]) -> undertext::Result<String> {
        Python::attach(|py| {
            let r = PyMessage::list(py, messages).and_then(|l| self.summarize.bind(py).call1((l,)));
            self.text(py, "summarize", r)
        })
    }

    fn merge(&self, summaries: &[String]) -> undertext::Result<String> {
        Python::attach(|py| match &self.merge {
            Some(m) => {
                let r = PyList::new(py, summaries).and_then(|l| m.bind(py).call1((l,)));
                self.text(py, "merge", r)
            }
            None => Ok(summaries.join("\n\n")),
        })
    }
}

/// The engine summarizer for a Python object, and the list its exceptions go to.
pub(crate) fn summarizer_of(obj: &Bound<'_, PyAny>) -> PyResult<(Arc<dyn Summarizer>, Raised)> {
    let py = obj.py();
    let raised: Raised = Arc::new(Mutex::new(Vec::new()));
    if let Ok(e) = obj.cast::<PyExtractive>() {
        return Ok((Arc::new(Extractive { max_chars: e.get().max_chars }), raised));
    }
    let id_of = |o: &Bound<'_, PyAny>| -> String {
        if let Ok(Ok(id)) = o.getattr("id").map(|v| v.extract::<String>()) {
            return id;
        }
        for attr in ["__qualname__", "__name__"] {
            if let Ok(Ok(n)) = o.getattr(attr).map(|v| v.extract::<String>()) {
                return n;
            }
        }
        o.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "python".into())
    };
    if let Ok(s) = obj.getattr("summarize")
        && s.is_callable()
    {
        let merge = obj.getattr("merge").ok().filter(|m| m.is_callable()).map(|m| m.unbind());
        let id = id_of(obj);
        return Ok((
            Arc::new(PySummarizer { id, summarize: s.unbind(), merge, raised: raised.clone() }),
            raised,
        ));
    }
    if obj.is_callable() {
        let id = id_of(obj);
        return Ok((
            Arc::new(PySummarizer {
                id,
                summarize: obj.clone().unbind(),
                merge: None,
                raised: raised.clone(),
            }),
            raised,
        ));
    }
    let ty = obj.get_type().name().map(|n| n.to_string()).unwrap_or_default();
    Err(invalid(
        py,
        format!(
            "summarizer: expected undertext.Extractive, a callable f(messages) -> str, or an object \
             with summarize(messages) and merge(summaries), found {ty}"
        ),
    ))
}

/// Worker options from the keyword arguments of `Store.start_worker`.
#[expect(clippy::too_many_arguments, reason = "mirrors the keyword arguments of start_worker")]
pub(crate) fn worker_options(
    py: Python<'_>,
    threads: usize,
    soft: f64,
    segment_tokens: u64,
    fan_in: usize,
    at_hard_line: &str,
    wait_seconds: f64,
    retries: u32,
) -> PyResult<WorkerOptions> {
    let at_hard_line = match at_hard_line {
        "wait" => {
            let d = Duration::try_from_secs_f64(wait_seconds).map_err(|_| {
                invalid(py, format!("wait_seconds: expected a finite number >= 0, found {wait_seconds}"))
            })?;
            HardLinePolicy::Wait(d)
        }
        "refuse" => HardLinePolicy::Refuse,
        "synchronous" => HardLinePolicy::Synchronous,
        other => {
            return Err(invalid(
                py,
                format!("at_hard_line: expected \"wait\", \"refuse\" or \"synchronous\", found {other:?}"),
            ));
        }
    };
    Ok(WorkerOptions {
        threads,
        soft,
        checkpoint: CheckpointOptions { segment_tokens, fan_in, ..CheckpointOptions::default() },
        at_hard_line,
        retries,
        ..WorkerOptions::default()
    })
}

/// Stops the worker in `slot` (if still running) with the GIL released: its threads may
/// be waiting for the GIL to call a Python summarizer.
pub(crate) fn stop_slot(py: Python<'_>, slot: &WorkerSlot) -> PyResult<()> {
    let w = match slot.lock() {
        Ok(mut g) => g.take(),
        Err(p) => p.into_inner().take(),
    };
    if let Some(w) = w {
        run_plain(py, move || w.stop())?;
    }
    Ok(())
}

/// The background pre-compaction worker: past its soft line a view asks it to prepare a
/// checkpoint; at the hard line the prepared checkpoint is swapped in.
///
/// Use it as a context manager, or call `stop()`; closing the store stops it too.
#[pyclass(name = "Worker", module = "undertext", frozen)]
#[derive(Debug)]
pub struct PyWorker {
    slot: WorkerSlot,
    raised: Raised,
}

impl PyWorker {
    pub(crate) fn new(slot: WorkerSlot, raised: Raised) -> PyWorker {
        PyWorker { slot, raised }
    }

    fn read<T>(&self, f: impl FnOnce(&Worker) -> T) -> Option<T> {
        match self.slot.lock() {
            Ok(g) => g.as_ref().map(f),
            Err(p) => p.into_inner().as_ref().map(f),
        }
    }
}

#[pymethods]
impl PyWorker {
    /// Jobs finished, successfully or not (0 once stopped).
    #[getter]
    fn jobs_done(&self) -> u64 {
        self.read(|w| w.jobs_done()).unwrap_or(0)
    }

    /// Errors of failed jobs, oldest first (engine messages: a Python summarizer's
    /// exception shows with its type and message).
    #[getter]
    fn errors(&self) -> Vec<String> {
        self.read(|w| w.errors()).unwrap_or_default()
    }

    /// The exception objects a Python summarizer raised, oldest first.
    #[getter]
    fn exceptions(&self, py: Python<'_>) -> Vec<Py<PyAny>> {
        match self.raised.lock() {
            Ok(g) => g.iter().map(|e| e.clone_ref(py)).collect(),
            Err(p) => p.into_inner().iter().map(|e| e.clone_ref(py)).collect(),
        }
    }

    /// True while the worker runs.
    #[getter]
    fn running(&self) -> bool {
        self.read(|_| ()).is_some()
    }

    /// Stops the worker: no new jobs; its threads end after their current one.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        stop_slot(py, &self.slot)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.stop(py)?;
        Ok(false)
    }
}

impl Drop for PyWorker {
    fn drop(&mut self) {
        // The worker's threads may need the GIL to finish a Python summarizer call: stop
        // them with the GIL released, or the join would wait forever.
        let slot = self.slot.clone();
        Python::attach(|py| {
            let _ = stop_slot(py, &slot);
        });
    }
}
