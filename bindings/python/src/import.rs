//! Importing a transcript held in memory (no file): the engine's importers, called on bytes.

use pyo3::prelude::*;

use crate::convert::Text;
use pyo3::types::PyDict;
use undertext::import;

use crate::errors::{invalid, run};
use crate::store::PyStore;

/// Imports one transcript given as bytes into chats of `owner`, as
/// `Store.import_transcripts` does for files: the engine's parser for `format` (`"auto"`
/// detects it), then one chat per session, idempotent (importing the same or a grown
/// transcript again appends only what is new). `name` stands for the file in titles,
/// problems and `extra["import.source"]`. `key`, when given, replaces the session's key
/// (`extra["import.key"]`; the transcript must hold one session), and `parent_key` its
/// parent's (a side chain's main session). Returns the import report with `chats`: each
/// session's key and chat id.
#[pyfunction]
#[pyo3(
    signature = (store, owner, name, data, *, format = Text::from("auto"), key = None, parent_key = None),
    text_signature = "(store, owner, name, data, *, format='auto', key=None, parent_key=None)"
)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn import_transcript_bytes<'py>(
    py: Python<'py>,
    store: PyRef<'_, PyStore>,
    owner: Text,
    name: Text,
    data: &[u8],
    format: Text,
    key: Option<Text>,
    parent_key: Option<Text>,
) -> PyResult<Bound<'py, PyDict>> {
    let store = store.get(py)?;
    let format: import::Format = format.parse().map_err(|e| crate::errors::to_py(py, e))?;
    let data = data.to_vec();
    let mut parsed = run(py, move || import::parse_bytes(name.as_ref(), &data, format))?;
    if let Some(k) = key {
        if parsed.sessions.len() != 1 {
            return Err(invalid(
                py,
                format!(
                    "key: expected a transcript of one session, found {} sessions",
                    parsed.sessions.len()
                ),
            ));
        }
        parsed.sessions[0].key = k.0;
        parsed.sessions[0].parent_key = parent_key.map(String::from);
    }
    let sessions = parsed.sessions;
    let (report, chats) = run(py, move || {
        let report = import::import_sessions(&store, &owner, &sessions, |_| {})?;
        let mut chats: Vec<(String, String)> = Vec::new();
        for s in &sessions {
            if let Some((id, _len)) = import::imported_chat(&store, &owner, &s.key)? {
                chats.push((s.key.clone(), id.to_string()));
            }
        }
        Ok((report, chats))
    })?;
    let d = PyDict::new(py);
    d.set_item("format", parsed.format.name())?;
    d.set_item("sessions_new", report.sessions_new)?;
    d.set_item("sessions_unchanged", report.sessions_unchanged)?;
    d.set_item("sessions_extended", report.sessions_extended)?;
    d.set_item("sessions_rewritten", report.sessions_rewritten)?;
    d.set_item("messages", report.messages)?;
    d.set_item("tool_results", report.tool_results)?;
    d.set_item("archived", report.archived)?;
    d.set_item("problems", parsed.problems.iter().map(|p| p.to_string()).collect::<Vec<_>>())?;
    let c = PyDict::new(py);
    for (k, id) in chats {
        c.set_item(k, id)?;
    }
    d.set_item("chats", c)?;
    Ok(d)
}
