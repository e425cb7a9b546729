//! Python bindings of Undertext (PyO3, abi3 for CPython >= 3.9): the extension module
//! `undertext._native`, re-exported by the `undertext` package (`python/undertext`).
//!
//! The bindings hold no logic of their own: each method maps to one engine call, made with
//! the GIL released and with panics caught ([`errors::run`]).

mod chat;
mod convert;
mod errors;
mod held;
mod import;
mod json;
mod langchain_decode;
mod snapshot;
mod store;
mod types;
mod view;
mod worker;

use pyo3::prelude::*;
use pyo3::types::PyList;

/// The native half of the `undertext` package; import `undertext` instead.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<store::PyStore>()?;
    m.add_class::<store::PyChatIter>()?;
    m.add_class::<chat::PyChat>()?;
    m.add_class::<snapshot::PySnapshot>()?;
    m.add_class::<snapshot::PyMessageIter>()?;
    m.add_class::<types::PyMessage>()?;
    m.add_class::<types::PyChatMeta>()?;
    m.add_class::<types::PyChatInfo>()?;
    m.add_class::<types::PyArchiveRef>()?;
    m.add_class::<types::PyPin>()?;
    m.add_class::<types::PyAttempt>()?;
    m.add_class::<types::PyStep>()?;
    m.add_class::<types::PyIndexLine>()?;
    m.add_class::<view::PyBudget>()?;
    m.add_class::<view::PyView>()?;
    m.add_class::<view::PyCheckpoint>()?;
    m.add_class::<worker::PyExtractive>()?;
    m.add_class::<worker::PyWorker>()?;
    m.add_function(wrap_pyfunction!(blob_id, m)?)?;
    m.add_function(wrap_pyfunction!(same_prefix, m)?)?;
    m.add_function(wrap_pyfunction!(compaction_tool_schema, m)?)?;
    m.add_function(wrap_pyfunction!(langchain_decode::decode_lc_messages, m)?)?;
    m.add_function(wrap_pyfunction!(langchain_decode::fresh_items, m)?)?;
    m.add_function(wrap_pyfunction!(import::import_transcript_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(json::load::json_loads, m)?)?;
    m.add_function(wrap_pyfunction!(json::dump::dumps, m)?)?;
    m.add_function(wrap_pyfunction!(json::dump::exact, m)?)?;
    m.add_function(wrap_pyfunction!(json::patch::patch_exact, m)?)?;
    m.add_function(wrap_pyfunction!(panic_in_engine_call, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// The content address (64 hex digits) `Store.put_blob(owner, data)` would return.
#[pyfunction]
fn blob_id(data: &[u8]) -> String {
    undertext::BlobId::of(data).to_string()
}

/// How many items lists `a` and `b` share at their front as the very same objects (`is`),
/// ending before the first whose `id()` is in `stop`: what the LangGraph saver keeps of the
/// list it put for a step's parent (an object the step wrote may have changed in place), found
/// in one pass without a Python call per item (a step of a 600-message thread compared 600
/// items, and built a set of their ids to look for the step's few written objects).
///
/// ```python
/// a, b, c = object(), object(), object()
/// assert _same_prefix([a, b, c], [a, b, object()]) == 2
/// assert _same_prefix([a, b, c], [a, b, c], {id(b)}) == 1
/// ```
#[pyfunction]
#[pyo3(name = "_same_prefix", signature = (a, b, stop=None))]
fn same_prefix(
    a: &Bound<'_, PyList>,
    b: &Bound<'_, PyList>,
    stop: Option<&Bound<'_, PyAny>>,
) -> PyResult<usize> {
    // Sorted, searched by halves: a step writes few objects, and hashing each of the list's
    // items cost more than the pass itself (600 items: 8.3 us against 1.9 without `stop`).
    let mut ids = Vec::new();
    if let Some(stop) = stop {
        for id in stop.try_iter()? {
            ids.push(id?.extract::<usize>()?);
        }
    }
    ids.sort_unstable();
    let n = a.len().min(b.len());
    for i in 0..n {
        let at =
            isize::try_from(i).map_err(|_| pyo3::exceptions::PyOverflowError::new_err("list too long"))?;
        // SAFETY: `a` and `b` are lists (their types are checked by the binding) held by this
        // call under the GIL, and `i` is below both lengths, read just above with no Python
        // code run since, so `PyList_GetItem` returns a valid borrowed pointer (never null)
        // that is only compared, never dereferenced or kept. Borrowed pointers spare the
        // reference-count calls a `Bound` per item costs under the stable ABI (600 items:
        // 9.2 us through `PyList::iter`, measured).
        let (x, y) =
            unsafe { (pyo3::ffi::PyList_GetItem(a.as_ptr(), at), pyo3::ffi::PyList_GetItem(b.as_ptr(), at)) };
        // `id(x)` is the object's address in CPython, the pointer itself.
        if x != y || (!ids.is_empty() && ids.binary_search(&(x as usize)).is_ok()) {
            return Ok(i);
        }
    }
    Ok(n)
}

/// The compaction tool's schema as JSON text, in OpenAI's chat-completions shape
/// (`api="openai"`) or Anthropic's messages shape (`api="anthropic"`).
#[pyfunction]
#[pyo3(signature = (api="openai"))]
fn compaction_tool_schema(py: Python<'_>, api: &str) -> PyResult<String> {
    match api {
        "openai" => Ok(undertext::compaction::tool::schema_openai()),
        "anthropic" => Ok(undertext::compaction::tool::schema_anthropic()),
        other => {
            Err(errors::invalid(py, format!("api: expected \"openai\" or \"anthropic\", found {other:?}")))
        }
    }
}

/// Panics inside [`errors::run`], as a bug in an engine call would: the test suite uses it
/// to prove that a panic arrives as `undertext.InternalError`, never as a crash or a
/// `PanicException`.
#[pyfunction]
#[pyo3(name = "_panic_in_engine_call")]
fn panic_in_engine_call(py: Python<'_>, message: String) -> PyResult<()> {
    errors::run(py, move || -> undertext::Result<()> { panic!("{message}") })
}
