//! Messages and parts between Python dicts and engine types; units and ids from strings.
//!
//! A part is a dict with a `"type"` (`text`, `tool_call`, `tool_result`, `approval_request`,
//! `approval_response`, `attachment`, `summary`) in the engine's one JSON shape of parts,
//! `undertext::json`: a part's dict is built from the fields `json::part_fields` hands out
//! (keys in its order), and read by `json::part_from` through [`DictPart`], which gives the
//! engine's decoder each field it asks for. What stays Python's is how a field is read:
//! Python's error messages (`expected key "text", found none`, where a lone surrogate is),
//! and the input conveniences: a tool call's `args` may be any JSON-able object
//! (`json.dumps`ed), an archive or a blob may be an `ArchiveRef`, an archive may be its id
//! alone (the sizes are the store's), and a tool result's text may come as `"content"`, its
//! older key (never written). A message is `{"role", "content"}` or `{"role", "parts"}`
//! (`"content"` where the engine's JSON says `"text"`; `"parts"` wins when both are there).
//! What comes out has the same shape as what goes in. Search hits go through the engine's
//! JSON values ([`json_out`], [`flat_json_in`]).

use std::cell::RefCell;

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use undertext::json::{self, Field};
use undertext::{ArchiveRef, BlobId, NewMessage, Part, Role, Unit, Verify};

use crate::errors::invalid;
use crate::types::PyArchiveRef;

/// A role from its lowercase name (the engine's parser, Python's message).
pub(crate) fn role_of(py: Python<'_>, s: &str) -> PyResult<Role> {
    s.parse::<Role>().map_err(|_| {
        invalid(py, format!("role: expected \"system\", \"user\", \"assistant\" or \"tool\", found {s:?}"))
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
    if let Ok(s) = obj.cast::<PyString>() {
        let s = s.to_cow().map_err(|_| not_utf8(py, s, "", "the id"))?;
        return parse_blob_id(py, &s);
    }
    let s: String = obj.extract().map_err(|_| {
        invalid(py, format!("id: expected a str of 64 hex digits or an ArchiveRef, found {}", type_name(obj)))
    })?;
    parse_blob_id(py, &s)
}

/// What a blob read checks, from its `verify` argument: `"hash"` (the default: the record's
/// checksum and the content's BLAKE3 against its id) or `"checksum"` (the record's CRC-32C
/// and the id it carries).
pub(crate) fn verify_of(py: Python<'_>, v: Option<&str>) -> PyResult<Verify> {
    match v {
        None | Some("hash") => Ok(Verify::Hash),
        Some("checksum") => Ok(Verify::Checksum),
        Some(other) => {
            Err(invalid(py, format!("verify: expected \"hash\" or \"checksum\", found {other:?}")))
        }
    }
}

/// A blob id from its hex text.
pub(crate) fn parse_blob_id(py: Python<'_>, s: &str) -> PyResult<BlobId> {
    s.parse::<BlobId>().map_err(|e| crate::errors::to_py(py, e))
}

/// An archive id: 64 hex digits, or an `ArchiveRef`. A malformed one is named an archive id
/// (an archive is stored as a blob, and the engine's parser names a blob id).
pub(crate) fn archive_id(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<BlobId> {
    if let Ok(r) = obj.cast::<PyArchiveRef>() {
        return Ok(r.get().r.id);
    }
    if let Ok(s) = obj.cast::<PyString>() {
        let s = s.to_cow().map_err(|_| not_utf8(py, s, "", "the archive id"))?;
        return parse_archive_id(py, &s);
    }
    Err(invalid(
        py,
        format!("archive id: expected a str of 64 hex digits or an ArchiveRef, found {}", type_name(obj)),
    ))
}

/// An archive id from its hex text.
pub(crate) fn parse_archive_id(py: Python<'_>, s: &str) -> PyResult<BlobId> {
    s.parse::<BlobId>().map_err(|e| {
        let e = match e {
            undertext::Error::InvalidArgument(why) => undertext::Error::InvalidArgument(
                why.strip_prefix("blob id").map_or_else(|| why.clone(), |rest| format!("archive id{rest}")),
            ),
            other => other,
        };
        crate::errors::to_py(py, e)
    })
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "an object".into())
}

/// A str argument as UTF-8 text. Python's str can hold lone surrogates, which UTF-8 cannot:
/// such a str is refused with `InvalidArgument` saying where the surrogate is (PyO3 notes
/// which argument it was), never taken as another type.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Text(pub(crate) String);

impl From<&str> for Text {
    fn from(s: &str) -> Text {
        Text(s.to_owned())
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for Text {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        match obj.cast::<PyString>() {
            Ok(s) => s.to_cow().map(|t| Text(t.into_owned())).map_err(|_| not_utf8(py, &s, "", "the str")),
            Err(_) => Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "expected a str, found {}",
                type_name(&obj.to_owned())
            ))),
        }
    }
}

impl std::ops::Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

/// A map of texts as strings.
pub(crate) fn strings(
    m: std::collections::BTreeMap<Text, Text>,
) -> std::collections::BTreeMap<String, String> {
    m.into_iter().map(|(k, v)| (k.0, v.0)).collect()
}

impl From<Text> for String {
    fn from(t: Text) -> String {
        t.0
    }
}

/// The error for a str that is not valid UTF-8: where its first lone surrogate is, counted in
/// the str's characters as Python indexes it. `ctx` says where (`"message: "`, or empty),
/// `name` what the str is.
pub(crate) fn not_utf8(py: Python<'_>, s: &Bound<'_, PyString>, ctx: &str, name: &str) -> PyErr {
    let found = s
        .call_method1("encode", ("utf-32-le", "surrogatepass"))
        .and_then(|b| b.extract::<Vec<u8>>())
        .ok()
        .and_then(|b| {
            b.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .enumerate()
                .find(|(_, c)| (0xD800..=0xDFFF).contains(c))
        });
    let found = match found {
        Some((at, c)) => format!("a lone surrogate (U+{c:04X}) at index {at}"),
        None => "a str that is not".into(),
    };
    invalid(
        py,
        format!(
            "{ctx}expected {name} to be text that is valid UTF-8, found {found}; a surrogate cannot be stored \
             (decode the text properly, or replace it: s.encode(\"utf-8\", \"replace\").decode())"
        ),
    )
}

/// `v` as UTF-8 text; `ctx` and `name` as in [`not_utf8`].
pub(crate) fn utf8(py: Python<'_>, v: &Bound<'_, PyAny>, ctx: &str, name: &str) -> PyResult<String> {
    let s = v
        .cast::<PyString>()
        .map_err(|_| invalid(py, format!("{ctx}expected {name} to be a str, found {}", type_name(v))))?;
    s.to_cow().map(std::borrow::Cow::into_owned).map_err(|_| not_utf8(py, s, ctx, name))
}

fn req<'py>(py: Python<'py>, d: &Bound<'py, PyDict>, key: &str, what: &str) -> PyResult<Bound<'py, PyAny>> {
    d.get_item(key)?.ok_or_else(|| missing(py, key, what))
}

fn missing(py: Python<'_>, key: &str, what: &str) -> PyErr {
    invalid(py, format!("{what}: expected key {key:?}, found none"))
}

fn req_str(py: Python<'_>, d: &Bound<'_, PyDict>, key: &str, what: &str) -> PyResult<String> {
    let v = req(py, d, key, what)?;
    utf8(py, &v, &format!("{what}: "), &format!("{key:?}"))
}

fn opt_str(py: Python<'_>, d: &Bound<'_, PyDict>, key: &str, what: &str) -> PyResult<Option<String>> {
    match d.get_item(key)? {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) if v.is_instance_of::<PyString>() => {
            utf8(py, &v, &format!("{what}: "), &format!("{key:?}")).map(Some)
        }
        Some(v) => {
            Err(invalid(py, format!("{what}: expected {key:?} to be a str or None, found {}", type_name(&v))))
        }
    }
}

/// `d[key]` as a bool, False when absent.
fn opt_bool(py: Python<'_>, d: &Bound<'_, PyDict>, key: &str, what: &str) -> PyResult<bool> {
    match d.get_item(key)? {
        None => Ok(false),
        Some(v) => bool_of(py, &v, key, what),
    }
}

fn bool_of(py: Python<'_>, v: &Bound<'_, PyAny>, key: &str, what: &str) -> PyResult<bool> {
    v.extract::<bool>()
        .map_err(|_| invalid(py, format!("{what}: expected {key:?} to be a bool, found {}", type_name(v))))
}

/// JSON text of `v`: a str is taken as JSON text already, anything else is `json.dumps`ed.
fn json_text(py: Python<'_>, v: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = v.cast::<PyString>() {
        return s.to_cow().map(std::borrow::Cow::into_owned).map_err(|_| not_utf8(py, s, "", "JSON text"));
    }
    py.import("json")?.call_method1("dumps", (v,))?.extract()
}

/// A tool result's text: `"text"`, the engine's canonical key (what `part_out` writes), or
/// `"content"`, the key Python used before (still read, never written); not both.
fn tool_result_text(py: Python<'_>, d: &Bound<'_, PyDict>, what: &str) -> PyResult<String> {
    match (d.contains("text")?, d.contains("content")?) {
        (true, true) => Err(invalid(
            py,
            format!(
                "{what}: expected the tool result's text in \"text\" (or the older \"content\"), found both"
            ),
        )),
        (false, true) => req_str(py, d, "content", what),
        _ => req_str(py, d, "text", what),
    }
}

/// A part from its dict: `json::part_from` reads it through [`DictPart`].
pub(crate) fn part_in(py: Python<'_>, obj: &Bound<'_, PyAny>, at: usize) -> PyResult<Part> {
    let what = format!("part {at}");
    let d = obj.cast::<PyDict>().map_err(|_| {
        invalid(py, format!("{what}: expected a dict with a \"type\", found {}", type_name(obj)))
    })?;
    let ty = req_str(py, d, "type", &what)?;
    json::part_from(&ty, &mut DictPart { py, d, what: &what, tool_result: ty == "tool_result" })
}

/// A part's dict as the engine's decoder reads it (`json::part_from`): each field it asks for,
/// with Python's messages and input conveniences (the module doc lists them).
struct DictPart<'a, 'py> {
    py: Python<'py>,
    d: &'a Bound<'py, PyDict>,
    /// `part {at}`: where, in errors.
    what: &'a str,
    /// A tool result: its `"text"` may come as `"content"`.
    tool_result: bool,
}

impl json::PartSource for DictPart<'_, '_> {
    type Error = PyErr;

    fn string(&mut self, key: &'static str) -> PyResult<String> {
        if self.tool_result && key == "text" {
            return tool_result_text(self.py, self.d, self.what);
        }
        req_str(self.py, self.d, key, self.what)
    }

    fn opt_string(&mut self, key: &'static str) -> PyResult<Option<String>> {
        opt_str(self.py, self.d, key, self.what)
    }

    fn boolean(&mut self, key: &'static str, default: Option<bool>) -> PyResult<bool> {
        match (self.d.get_item(key)?, default) {
            (Some(v), _) => bool_of(self.py, &v, key, self.what),
            (None, Some(default)) => Ok(default),
            (None, None) => Err(missing(self.py, key, self.what)),
        }
    }

    /// JSON text as it is, or any other object `json.dumps`ed.
    fn args(&mut self, key: &'static str) -> PyResult<String> {
        json_text(self.py, &req(self.py, self.d, key, self.what)?)
    }

    /// 64 hex digits, or an `ArchiveRef`.
    fn blob(&mut self, key: &'static str) -> PyResult<BlobId> {
        blob_id(self.py, &req(self.py, self.d, key, self.what)?)
    }

    /// An archive's dict (only its `"id"` is read), id or `ArchiveRef`; absent or None: none.
    fn archive(&mut self, key: &'static str) -> PyResult<Option<ArchiveRef>> {
        let Some(a) = self.d.get_item(key)? else { return Ok(None) };
        if a.is_none() {
            return Ok(None);
        }
        let id = match a.cast::<PyDict>() {
            Ok(ad) => archive_id(self.py, &req(self.py, ad, "id", self.what)?)?,
            Err(_) => archive_id(self.py, &a)?,
        };
        // The sizes are taken from the store on append, never from the caller.
        Ok(Some(ArchiveRef { id, bytes: 0, chars: 0, utf16_units: 0, lines: 0 }))
    }

    fn unknown_type(&mut self, ty: &str) -> PyErr {
        invalid(
            self.py,
            format!(
                "{}: expected type text, tool_call, tool_result, approval_request, \
                 approval_response, attachment or summary, found {ty:?}",
                self.what
            ),
        )
    }
}

/// A message from its dict: `{"role", "content": str}` or `{"role", "parts": [...]}`, with
/// `"feedback": True` for harness feedback.
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
    // `"feedback": True`: harness feedback, a user message that starts no turn.
    let feedback = opt_bool(py, d, "feedback", "message")?;
    if let Some(parts) = d.get_item("parts")? {
        let list = parts.cast::<PyList>().map_err(|_| {
            invalid(py, format!("message: expected \"parts\" to be a list, found {}", type_name(&parts)))
        })?;
        let parts = list.iter().enumerate().map(|(i, p)| part_in(py, &p, i)).collect::<PyResult<Vec<_>>>()?;
        return Ok(NewMessage { role, parts, feedback });
    }
    match d.get_item("content")? {
        Some(c) => {
            let text = utf8(py, &c, "message: ", "\"content\"")?;
            Ok(NewMessage::text(role, text).with_feedback(feedback))
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

/// Ranges of seqs from a sequence of `(start, end)` pairs or `range`s of step 1 (`hide`).
pub(crate) fn seq_ranges(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Vec<std::ops::Range<u64>>> {
    let bad = |i: usize, found: String| {
        invalid(
            py,
            format!("ranges[{i}]: expected a (start, end) pair of seqs or a range of step 1, found {found}"),
        )
    };
    let mut out = Vec::new();
    for (i, r) in obj.try_iter()?.enumerate() {
        let r = r?;
        if let Ok(range) = r.cast::<pyo3::types::PyRange>() {
            let (start, stop, step): (i64, i64, i64) = (
                range.getattr("start")?.extract()?,
                range.getattr("stop")?.extract()?,
                range.getattr("step")?.extract()?,
            );
            if step != 1 || start < 0 || stop < 0 {
                return Err(bad(i, format!("range({start}, {stop}, {step})")));
            }
            out.push(start as u64..stop as u64);
            continue;
        }
        match r.extract::<(u64, u64)>() {
            Ok((start, end)) => out.push(start..end),
            Err(_) => return Err(bad(i, r.repr().map(|s| s.to_string()).unwrap_or_else(|_| type_name(&r)))),
        }
    }
    Ok(out)
}

/// A field of `json::part_fields` or `json::archive_ref_fields` as a Python value.
fn field_out<'py>(py: Python<'py>, f: Field<'_>) -> PyResult<Bound<'py, PyAny>> {
    match f {
        Field::Str(s) => s.into_bound_py_any(py),
        Field::OptStr(s) => s.into_bound_py_any(py),
        Field::Bool(b) => b.into_bound_py_any(py),
        Field::Count(n) => n.into_bound_py_any(py),
        Field::Blob(id) => id.to_string().into_bound_py_any(py),
        Field::Archive(a) => Ok(archive_dict(py, a)?.into_any()),
    }
}

/// The dict of an archive reference: `json::archive_ref_fields`.
fn archive_dict<'py>(py: Python<'py>, a: &ArchiveRef) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    json::archive_ref_fields(a, |key, f| d.set_item(known_str(py, key), field_out(py, f)?))?;
    Ok(d)
}

/// The dict of a part: `json::part_fields`, keys in their order. The keys and the `"type"`
/// value are interned strings, shared by every dict (a part dict holds only its own text).
pub(crate) fn part_out<'py>(py: Python<'py>, p: &Part) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    json::part_fields(p, |key, f| match (key, f) {
        ("type", Field::Str(t)) => d.set_item(known_str(py, "type"), known_str(py, t)),
        (key, f) => d.set_item(known_str(py, key), field_out(py, f)?),
    })?;
    Ok(d)
}

/// `s` as a Python string: one interned object for each dict key, part type and role the
/// bindings write (so a million dicts share their keys instead of holding a copy each), a
/// new string for any other text.
///
/// ```text
/// known_str(py, "text").is(&known_str(py, "text"))  // true: the same object
/// ```
pub(crate) fn known_str<'py>(py: Python<'py>, s: &str) -> Bound<'py, PyString> {
    macro_rules! interned {
        ($($k:literal)*) => {
            match s {
                $($k => pyo3::intern!(py, $k).clone(),)*
                _ => PyString::new(py, s),
            }
        };
    }
    interned!(
        "type" "text" "summary" "tool_call" "id" "name" "args" "tool_result" "call_id" "archive"
        "is_error" "approval_request" "prompt" "approval_response" "approved" "reason"
        "attachment" "mime" "blob" "bytes" "chars" "utf16_units" "lines" "seq" "revision" "role"
        "turn" "parts" "step" "at_ms" "feedback" "system" "user" "assistant" "tool"
    )
}

/// A message field whose consecutive values mostly repeat: the turn (every message of one
/// turn holds it), the time (every message of one batch).
#[derive(Clone, Copy)]
pub(crate) enum Repeats {
    Turn,
    AtMs,
}

/// A field's last value and the Python int made for it.
type LastInt = Option<(u64, Py<PyAny>)>;

thread_local! {
    /// Each [`Repeats`] field's last value and its Python int, so that a run of dicts
    /// holding one value holds one object (a new int is 32 bytes: at 100,000 messages a
    /// turn and a time each would be 3 MiB).
    static LAST_INT: RefCell<[LastInt; 2]> = const { RefCell::new([None, None]) };
}

/// `v` as a Python int: the object made for the same `field`'s last value when `v` equals it
/// (ints are immutable, so sharing one is never seen), else a new one, remembered.
///
/// ```text
/// repeated_int(py, Repeats::Turn, 300)?.is(&repeated_int(py, Repeats::Turn, 300)?)  // true
/// ```
pub(crate) fn repeated_int<'py>(py: Python<'py>, field: Repeats, v: u64) -> PyResult<Bound<'py, PyAny>> {
    LAST_INT.with(|last| {
        let mut last = last.borrow_mut();
        let slot = &mut last[field as usize];
        if let Some((k, obj)) = slot.as_ref()
            && *k == v
        {
            return Ok(obj.bind(py).clone());
        }
        let obj = v.into_bound_py_any(py)?;
        *slot = Some((v, obj.clone().unbind()));
        Ok(obj)
    })
}

/// The list of dicts of `parts`.
pub(crate) fn parts_out<'py>(py: Python<'py>, parts: &[Part]) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for p in parts {
        list.append(part_out(py, p)?)?;
    }
    Ok(list)
}

/// A JSON value as the Python object `json.loads` would give (dicts, lists, str, int, float,
/// bool, None): how the engine's one JSON shape of a record (a search hit) reaches Python.
pub(crate) fn json_out<'py>(py: Python<'py>, v: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    use pyo3::IntoPyObjectExt;
    use serde_json::Value;
    match v {
        Value::Null => Ok(py.None().into_bound(py)),
        Value::Bool(b) => b.into_bound_py_any(py),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_bound_py_any(py),
            (None, Some(i)) => i.into_bound_py_any(py),
            _ => n.as_f64().unwrap_or(f64::NAN).into_bound_py_any(py),
        },
        Value::String(s) => s.into_bound_py_any(py),
        Value::Array(a) => {
            let l = PyList::empty(py);
            for x in a {
                l.append(json_out(py, x)?)?;
            }
            Ok(l.into_any())
        }
        Value::Object(o) => {
            let d = PyDict::new(py);
            for (k, x) in o {
                d.set_item(k, json_out(py, x)?)?;
            }
            Ok(d.into_any())
        }
    }
}

/// A dict of str keys and None, bool, int, float or str values (one level: a record such as
/// a search hit) as a JSON object; anything else is `InvalidArgument` naming `what` and the key.
pub(crate) fn flat_json_in(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    what: &str,
) -> PyResult<serde_json::Value> {
    use pyo3::types::{PyBool, PyFloat, PyInt};
    use serde_json::Value;
    let d = obj
        .cast::<PyDict>()
        .map_err(|_| invalid(py, format!("{what}: expected a dict, found {}", type_name(obj))))?;
    let mut out = serde_json::Map::new();
    for (k, v) in d.iter() {
        let key = utf8(py, &k, &format!("{what}: "), "a key")?;
        let value = if v.is_none() {
            Value::Null
        } else if v.is_instance_of::<PyBool>() {
            Value::Bool(v.extract()?)
        } else if v.is_instance_of::<PyInt>() {
            match v.extract::<u64>() {
                Ok(u) => Value::from(u),
                Err(_) => return Err(invalid(py, format!("{what}.{key}: expected a non-negative integer"))),
            }
        } else if v.is_instance_of::<PyFloat>() {
            Value::from(v.extract::<f64>()?)
        } else if v.is_instance_of::<PyString>() {
            Value::String(utf8(py, &v, &format!("{what}.{key}: "), "the str")?)
        } else {
            return Err(invalid(
                py,
                format!("{what}.{key}: expected None, a bool, a number or a str, found {}", type_name(&v)),
            ));
        };
        out.insert(key, value);
    }
    Ok(Value::Object(out))
}
