//! Engine errors as Python exceptions, and [`run`]: the one way an engine call is made
//! from Python (GIL released, panics caught).
//!
//! The exception classes live in `undertext/_errors.py` so that they can also subclass
//! `KeyError`, `ValueError` and `OSError`; this module instantiates them by name.

use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use undertext::Conflict;
use undertext::Error;

/// Runs `f` with the GIL released and turns its error, or a panic, into a Python exception.
pub(crate) fn run<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    F: FnOnce() -> undertext::Result<T> + Send,
    T: Send,
{
    match py.detach(|| catch_unwind(AssertUnwindSafe(f))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(to_py(py, e)),
        Err(panic) => Err(internal(py, &panic_message(&*panic))),
    }
}

/// Like [`run`] for work that does not return an engine result.
pub(crate) fn run_plain<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    run(py, || Ok(f()))
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// An `undertext.<name>` exception with message `msg` and attributes `fields`.
pub(crate) fn exception(py: Python<'_>, name: &str, msg: &str, fields: &[(&str, Py<PyAny>)]) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = py.import("undertext._errors")?.getattr(name)?;
        let kwargs = PyDict::new(py);
        for (k, v) in fields {
            kwargs.set_item(*k, v)?;
        }
        let value = cls.call((msg,), Some(&kwargs))?;
        Ok(PyErr::from_value(value))
    };
    // If the exception module itself cannot be imported, that import error is the news.
    build().unwrap_or_else(|e| e)
}

/// `undertext.InvalidArgument` (a `ValueError`) with `msg`.
pub(crate) fn invalid(py: Python<'_>, msg: impl AsRef<str>) -> PyErr {
    exception(py, "InvalidArgument", msg.as_ref(), &[])
}

/// `undertext.InternalError`: a bug in undertext (a panic), never a crash of the interpreter.
pub(crate) fn internal(py: Python<'_>, msg: &str) -> PyErr {
    exception(py, "InternalError", &format!("internal error in undertext (please report): {msg}"), &[])
}

/// `undertext.Closed`: the store was closed. A temporary store's directory went with it
/// (`removed`): there is nothing to open again.
pub(crate) fn closed(py: Python<'_>, removed: bool) -> PyErr {
    let msg = if removed {
        "the store is closed, and its temporary directory was removed when it closed; \
         make a new one (undertext.temporary_store(), or the adapter's temporary())"
    } else {
        "the store is closed; open it again with undertext.Store.open(path)"
    };
    exception(py, "Closed", msg, &[])
}

fn int(py: Python<'_>, v: u64) -> Py<PyAny> {
    // u64 always converts to a Python int.
    v.into_pyobject(py).map(|b| b.into_any().unbind()).unwrap_or_else(|e| match e {})
}

fn text(py: Python<'_>, v: &str) -> Py<PyAny> {
    pyo3::types::PyString::new(py, v).into_any().unbind()
}

/// The Python exception for an engine error.
pub(crate) fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::Io { source, .. } => {
            let errno = source.raw_os_error().map_or_else(|| py.None(), |n| int(py, n as u64));
            exception(py, "IOFailure", &msg, &[("errno", errno)])
        }
        Error::Corrupt { segment, offset, reason } => exception(
            py,
            "Corrupt",
            &msg,
            &[
                ("segment", int(py, segment)),
                ("offset", int(py, offset)),
                ("what", py.None()),
                ("reason", text(py, &reason)),
            ],
        ),
        // Content damage named by the object it is in: no log position to give.
        Error::CorruptContent { what, reason } => exception(
            py,
            "Corrupt",
            &msg,
            &[
                ("segment", py.None()),
                ("offset", py.None()),
                ("what", text(py, &what)),
                ("reason", text(py, &reason)),
            ],
        ),
        Error::Locked { pid } => exception(py, "Locked", &msg, &[("pid", int(py, pid.into()))]),
        Error::NotFound { what } => exception(py, "NotFound", &msg, &[("what", text(py, &what))]),
        Error::StaleRevision { expected, found } => exception(
            py,
            "StaleRevision",
            &msg,
            &[("expected", int(py, expected)), ("found", int(py, found))],
        ),
        Error::InvalidArgument(_) => exception(py, "InvalidArgument", &msg, &[]),
        Error::UnsupportedVersion { expected, found, .. } => exception(
            py,
            "UnsupportedVersion",
            &msg,
            &[("expected", int(py, expected.into())), ("found", int(py, found.into()))],
        ),
        Error::Conflict(Conflict::Edited { base, now }) => exception(
            py,
            "Conflict",
            &msg,
            &[("kind", text(py, "edited")), ("base", int(py, base)), ("now", int(py, now))],
        ),
        Error::Conflict(Conflict::NotNewer { published_reach }) => exception(
            py,
            "Conflict",
            &msg,
            &[("kind", text(py, "not_newer")), ("published_reach", int(py, published_reach))],
        ),
        Error::Lint { problems } => {
            let list: Vec<(String, String)> =
                problems.iter().map(|p| (p.rule.to_string(), p.detail.clone())).collect();
            let problems = match list.into_pyobject(py) {
                Ok(l) => l.into_any().unbind(),
                Err(e) => return e,
            };
            exception(py, "LintRejected", &msg, &[("problems", problems)])
        }
        Error::Index { .. } => exception(py, "IndexFailure", &msg, &[]),
        Error::Poisoned(_) => exception(py, "Poisoned", &msg, &[]),
        Error::Forked { opened_by, caller } => exception(
            py,
            "Forked",
            &msg,
            &[("opened_by", int(py, opened_by.into())), ("caller", int(py, caller.into()))],
        ),
        Error::Busy { pid, .. } => exception(py, "Busy", &msg, &[("pid", int(py, pid.into()))]),
        // Fleet mode: PostgreSQL failed or is unreachable (the message names the URL).
        Error::Backend { .. } => exception(py, "IOFailure", &msg, &[("errno", py.None())]),
        // A kind added to the engine later still arrives as an UndertextError.
        _ => exception(py, "UndertextError", &msg, &[]),
    }
}
