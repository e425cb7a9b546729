//! JSON in native code, each giving exactly what Python's `json` module gives: texts to values
//! ([`load`], `json.loads`), values to compact texts ([`dump`], `json.dumps`), and the patch
//! of one JSON dict into another that the LangGraph saver stores ([`patch`]). Each handles
//! itself only what it can handle exactly as the `json` module does and hands anything else
//! ([`Stop::Refused`]) to it: a refusal costs time, never a different answer.

pub(crate) mod dump;
pub(crate) mod load;
pub(crate) mod patch;

use pyo3::PyErr;

/// Nesting deeper than this goes to the `json` module (which names a cycle as one).
const MAX_DEPTH: usize = 200;

/// Why a native pass over a JSON text or value stopped.
enum Stop {
    /// Not handled here: the `json` module decides.
    Refused,
    /// Python raised while reading or building a value (`MemoryError`).
    Py(PyErr),
}

impl From<PyErr> for Stop {
    fn from(e: PyErr) -> Stop {
        Stop::Py(e)
    }
}
