//! Messages and parts between Python dicts and engine types; units and ids from strings.
//!
//! A part is a dict with a `"type"` (`text`, `tool_call`, `tool_result`, `approval_request`,
//! `approval_response`, `attachment`, `summary`); a message is `{"role", "content"}` or
//! `{"role", "parts"}`. What comes out has the same shape as what goes in.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use undertext::{ArchiveRef, BlobId, NewMessage, Part, Role, ToolContent, Unit};

use crate::errors::invalid;
use crate::types::PyArchiveRef;

/// A role from its lowercase name.
pub(crate) fn role_of(py: Python<'_>, s: &str) -> PyResult<Role> {
    Ok(match s {
        "system" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        other => {
            return Err(invalid(
                py,
                format!("role: expected \"system\", \"user\", \"assistant\" or \"tool\", found {other:?}"),
            ));
        }
    })
}

/// A unit of `read_context` from its name (the engine's one parser: `Unit::from_str`).
pub(crate) fn unit_of(py: Python<'_>, s: &str) -> PyResult<Unit> {
    s.parse::<Unit>().map_err(|e| match e {
        undertext::Error::InvalidArgument(why) => invalid(py, why),
        other => invalid(py, other.to_string()),
    })
}

/// A blob or archive id: 64 hex digits, or an `ArchiveRef`.
pub(crate) fn blob_id(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<BlobId> {
    if let Ok(r) = obj.cast::<PyArchiveRef>() {
        return Ok(r.get().r.id);
    }
    let s: String = obj.extract().map_err(|_| {
        invalid(py, format!("id: expected a str of 64 hex digits or an ArchiveRef, found {}", type_name(obj)))
    })?;
    parse_blob_id(py, &s)
}

/// A blob id from its hex text.
pub(crate) fn parse_blob_id(py: Python<'_>, s: &str) -> PyResult<BlobId> {
    s.parse::<BlobId>().map_err(|e| crate::errors::to_py(py, e))
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "an object".into())
}

fn req<'py>(py: Python<'py>, d: &Bound<'py, PyDict>, key: &str, what: &str) -> PyResult<Bound<'py, PyAny>> {
    d.get_item(key)?.ok_or_else(|| invalid(py, format!("{what}: expected key {key:?}, found none")))
}

fn req_str(py: Python<'_>, d: &Bound<'_, PyDict>, key: &str, what: &str) -> PyResult<String> {
    let v = req(py, d, key, what)?;
    v.extract::<String>()
        .map_err(|_| invalid(py, format!("{what}: expected {key:?} to be a str, found {}", type_name(&v))))
}

fn opt_str(py: Python<'_>, d: &Bound<'_, PyDict>, key: &str, what: &str) -> PyResult<Option<String>> {
    match d.get_item(key)? {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => v.extract::<String>().map(Some).map_err(|_| {
            invalid(py, format!("{what}: expected {key:?} to be a str or None, found {}", type_name(&v)))
        }),
    }
}

fn opt_bool(py: Python<'_>, d: &Bound<'_, PyDict>, key: &str, what: &str) -> PyResult<bool> {
    match d.get_item(key)? {
        None => Ok(false),
        Some(v) => v.extract::<bool>().map_err(|_| {
            invalid(py, format!("{what}: expected {key:?} to be a bool, found {}", type_name(&v)))
        }),
    }
}

/// JSON text of `v`: a str is taken as JSON text already, anything else is `json.dumps`ed.
fn json_text(py: Python<'_>, v: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = v.cast::<PyString>() {
        return s.extract::<String>();
    }
    py.import("json")?.call_method1("dumps", (v,))?.extract()
}

/// A part from its dict.
pub(crate) fn part_in(py: Python<'_>, obj: &Bound<'_, PyAny>, at: usize) -> PyResult<Part> {
    let what = format!("part {at}");
    let d = obj.cast::<PyDict>().map_err(|_| {
        invalid(py, format!("{what}: expected a dict with a \"type\", found {}", type_name(obj)))
    })?;
    let kind = req_str(py, d, "type", &what)?;
    Ok(match kind.as_str() {
        "text" => Part::Text(req_str(py, d, "text", &what)?),
        "summary" => Part::Summary(req_str(py, d, "text", &what)?),
        "tool_call" => Part::ToolCall {
            id: req_str(py, d, "id", &what)?,
            name: req_str(py, d, "name", &what)?,
            args: json_text(py, &req(py, d, "args", &what)?)?,
        },
        "tool_result" => {
            let text = req_str(py, d, "content", &what)?;
            let content = match d.get_item("archive")? {
                Some(a) if !a.is_none() => {
                    let id = match a.cast::<PyDict>() {
                        Ok(ad) => blob_id(py, &req(py, ad, "id", &what)?)?,
                        Err(_) => blob_id(py, &a)?,
                    };
                    // The sizes are taken from the store on append, never from the caller.
                    let archive = ArchiveRef { id, bytes: 0, chars: 0, utf16_units: 0, lines: 0 };
                    ToolContent::Archived { archive, preview: text }
                }
                _ => ToolContent::Text(text),
            };
            Part::ToolResult {
                call_id: req_str(py, d, "call_id", &what)?,
                content,
                is_error: opt_bool(py, d, "is_error", &what)?,
            }
        }
        "approval_request" => Part::ApprovalRequest {
            id: req_str(py, d, "id", &what)?,
            call_id: opt_str(py, d, "call_id", &what)?,
            prompt: req_str(py, d, "prompt", &what)?,
        },
        "approval_response" => Part::ApprovalResponse {
            id: req_str(py, d, "id", &what)?,
            approved: {
                let v = req(py, d, "approved", &what)?;
                v.extract::<bool>().map_err(|_| {
                    invalid(
                        py,
                        format!("{what}: expected \"approved\" to be a bool, found {}", type_name(&v)),
                    )
                })?
            },
            reason: opt_str(py, d, "reason", &what)?,
        },
        "attachment" => Part::Attachment {
            mime: req_str(py, d, "mime", &what)?,
            blob: blob_id(py, &req(py, d, "blob", &what)?)?,
        },
        other => {
            return Err(invalid(
                py,
                format!(
                    "{what}: expected type text, tool_call, tool_result, approval_request, \
                     approval_response, attachment or summary, found {other:?}"
                ),
            ));
        }
    })
}

/// A message from its dict: `{"role", "content": str}` or `{"role", "parts": [...]}`.
pub(crate) fn message_in(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<NewMessage> {
    let d = obj.cast::<PyDict>().map_err(|_| {
        invalid(
            py,
            format!(
                "message: expected a dict with \"role\" and \"content\" or \"parts\", found {}",
                type_name(obj)
            ),
        )
    })?;
    let role = role_of(py, &req_str(py, d, "role", "message")?)?;
    if let Some(parts) = d.get_item("parts")? {
        let list = parts.cast::<PyList>().map_err(|_| {
            invalid(py, format!("message: expected \"parts\" to be a list, found {}", type_name(&parts)))
        })?;
        let parts = list.iter().enumerate().map(|(i, p)| part_in(py, &p, i)).collect::<PyResult<Vec<_>>>()?;
        return Ok(NewMessage { role, parts });
    }
    match d.get_item("content")? {
        Some(c) => {
            let text = c.extract::<String>().map_err(|_| {
                invalid(py, format!("message: expected \"content\" to be a str, found {}", type_name(&c)))
            })?;
            Ok(NewMessage::text(role, text))
        }
        None => Err(invalid(py, "message: expected key \"content\" or \"parts\", found neither")),
    }
}

/// Messages from a sequence of dicts.
pub(crate) fn messages_in(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Vec<NewMessage>> {
    let mut out = Vec::new();
    for (i, m) in obj.try_iter()?.enumerate() {
        let m = m?;
        out.push(message_in(py, &m).map_err(|e| {
            invalid(
                py,
                format!("message {i}: {}", e.value(py).str().map(|s| s.to_string()).unwrap_or_default()),
            )
        })?);
    }
    Ok(out)
}

/// The dict of an archive reference.
pub(crate) fn archive_dict<'py>(py: Python<'py>, a: &ArchiveRef) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("id", a.id.to_string())?;
    d.set_item("bytes", a.bytes)?;
    d.set_item("chars", a.chars)?;
    d.set_item("utf16_units", a.utf16_units)?;
    d.set_item("lines", a.lines)?;
    Ok(d)
}

/// The dict of a part.
pub(crate) fn part_out<'py>(py: Python<'py>, p: &Part) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    match p {
        Part::Text(t) => {
            d.set_item("type", "text")?;
            d.set_item("text", t)?;
        }
        Part::Summary(t) => {
            d.set_item("type", "summary")?;
            d.set_item("text", t)?;
        }
        Part::ToolCall { id, name, args } => {
            d.set_item("type", "tool_call")?;
            d.set_item("id", id)?;
            d.set_item("name", name)?;
            d.set_item("args", args)?;
        }
        Part::ToolResult { call_id, content, is_error } => {
            d.set_item("type", "tool_result")?;
            d.set_item("call_id", call_id)?;
            match content {
                ToolContent::Text(t) => d.set_item("content", t)?,
                ToolContent::Archived { archive, preview } => {
                    d.set_item("content", preview)?;
                    d.set_item("archive", archive_dict(py, archive)?)?;
                }
            }
            d.set_item("is_error", *is_error)?;
        }
        Part::ApprovalRequest { id, call_id, prompt } => {
            d.set_item("type", "approval_request")?;
            d.set_item("id", id)?;
            d.set_item("call_id", call_id.as_deref())?;
            d.set_item("prompt", prompt)?;
        }
        Part::ApprovalResponse { id, approved, reason } => {
            d.set_item("type", "approval_response")?;
            d.set_item("id", id)?;
            d.set_item("approved", *approved)?;
            d.set_item("reason", reason.as_deref())?;
        }
        Part::Attachment { mime, blob } => {
            d.set_item("type", "attachment")?;
            d.set_item("mime", mime)?;
            d.set_item("blob", blob.to_string())?;
        }
    }
    Ok(d)
}

/// The list of dicts of `parts`.
pub(crate) fn parts_out<'py>(py: Python<'py>, parts: &[Part]) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for p in parts {
        list.append(part_out(py, p)?)?;
    }
    Ok(list)
}
