//! A Python value to the compact JSON text `json.dumps(value, separators=(",", ":"))`
//! gives, encoded in native code.
//!
//! The LangGraph saver writes each checkpoint and each task's writes as one record of
//! compact JSON, and checks a checkpoint stored as a patch by comparing JSON texts: five
//! small texts a superstep, ~100 µs of `json.dumps` (its encoder set-up is most of it); the
//! other adapters write each item or entry as one JSON text (`_json_text`). [`dumps`]
//! (and `_native.json_dumps`) writes the same text itself for what it can write exactly as
//! `json.dumps` does: `dict` with `str` keys, `list`, `tuple`, `str` (escaped to ASCII, as
//! `ensure_ascii=True` does, or not), `int` within `i64`, finite `float` (its `repr`), `True`,
//! `False`, `None`, each of exactly that type. Anything else — a subclass (an enum over
//! `str`), another key type, `NaN`, a big `int`, a `str` with a lone surrogate, nesting deeper
//! than [`MAX_DEPTH`] (a cycle) — sends the whole value to `json.dumps`, which gives the text
//! or raises its error: a value refused here costs time, never a different answer.

use std::fmt::Write as _;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use super::{MAX_DEPTH, Stop};

/// The compact JSON text of `value`, as `json.dumps(value, separators=(",", ":"),
/// ensure_ascii=ensure_ascii, allow_nan=allow_nan)` writes it (the same text, or the same
/// error).
///
/// ```python
/// from undertext._native import json_dumps
/// assert json_dumps({"k": "c", "ch": [1, 2.5, None, "é"]}) == '{"k":"c","ch":[1,2.5,null,"\\u00e9"]}'
/// assert json_dumps(["é\n"], ensure_ascii=False) == '["é\\n"]'
/// ```
#[pyfunction]
#[pyo3(name = "json_dumps", signature = (value, *, ensure_ascii=true, allow_nan=true))]
pub(crate) fn dumps<'py>(
    value: &Bound<'py, PyAny>,
    ensure_ascii: bool,
    allow_nan: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let py = value.py();
    let mut w = Writer { out: String::with_capacity(256), ascii: ensure_ascii };
    match w.value(value, 0) {
        Ok(()) => Ok(PyString::new(py, &w.out).into_any()),
        Err(Stop::Py(e)) => Err(e),
        Err(Stop::Refused) => {
            // (Its text may hold a lone surrogate, which has no UTF-8 form: handed on as is.)
            let kwargs = PyDict::new(py);
            kwargs.set_item("separators", (",", ":"))?;
            kwargs.set_item("ensure_ascii", ensure_ascii)?;
            kwargs.set_item("allow_nan", allow_nan)?;
            py.import("json")?.getattr("dumps")?.call((value,), Some(&kwargs))
        }
    }
}

/// `value`'s compact JSON text (ASCII) when this module writes it itself, else `None` (a
/// value `json.dumps` would have to decide, or an error reading it).
pub(crate) fn native_text(value: &Bound<'_, PyAny>) -> Option<String> {
    let mut w = Writer { out: String::with_capacity(256), ascii: true };
    w.value(value, 0).ok().map(|()| w.out)
}

/// Whether `json.loads(json.dumps(value))` gives back `value` with the same types: `str`,
/// `int`, `bool`, `None`, finite `float`, and `list`s and `str`-keyed `dict`s of those, each
/// of exactly that type (no tuple, no subclass). Nesting deeper than [`MAX_DEPTH`] answers
/// `False` (the saver then stores the value through its serializer, always right).
///
/// ```python
/// from undertext._native import _json_exact
/// assert _json_exact({"a": [1, 2.5, None, True, "x"]})
/// assert not _json_exact({"a": (1, 2)}) and not _json_exact({1: "a"}) and not _json_exact(float("nan"))
/// ```
#[pyfunction]
#[pyo3(name = "_json_exact")]
pub(crate) fn exact(value: &Bound<'_, PyAny>) -> bool {
    is_exact(value, 0)
}

fn is_exact(v: &Bound<'_, PyAny>, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    if v.is_none()
        || v.is_exact_instance_of::<PyString>()
        || v.is_exact_instance_of::<PyBool>()
        || v.is_exact_instance_of::<PyInt>()
    {
        true
    } else if let Ok(f) = v.cast_exact::<PyFloat>() {
        f.value().is_finite()
    } else if let Ok(l) = v.cast_exact::<PyList>() {
        l.iter().all(|x| is_exact(&x, depth + 1))
    } else if let Ok(d) = v.cast_exact::<PyDict>() {
        d.iter().all(|(k, x)| k.is_exact_instance_of::<PyString>() && is_exact(&x, depth + 1))
    } else {
        false
    }
}

/// The text being written, and whether non-ASCII characters are escaped.
struct Writer {
    out: String,
    ascii: bool,
}

impl Writer {
    fn value(&mut self, v: &Bound<'_, PyAny>, depth: usize) -> Result<(), Stop> {
        if depth > MAX_DEPTH {
            return Err(Stop::Refused);
        }
        if v.is_none() {
            self.out.push_str("null");
        } else if let Ok(s) = v.cast_exact::<PyString>() {
            self.str(&s.to_cow().map_err(|_| Stop::Refused)?);
        } else if let Ok(b) = v.cast_exact::<PyBool>() {
            self.out.push_str(if b.is_true() { "true" } else { "false" });
        } else if let Ok(i) = v.cast_exact::<PyInt>() {
            let n: i64 = i.extract().map_err(|_| Stop::Refused)?;
            let _ = write!(self.out, "{n}");
        } else if let Ok(f) = v.cast_exact::<PyFloat>() {
            if !f.value().is_finite() {
                return Err(Stop::Refused);
            }
            self.out.push_str(&f.repr()?.to_cow()?);
        } else if let Ok(d) = v.cast_exact::<PyDict>() {
            self.out.push('{');
            for (n, (k, x)) in d.iter().enumerate() {
                if n > 0 {
                    self.out.push(',');
                }
                let k = k.cast_exact::<PyString>().map_err(|_| Stop::Refused)?;
                self.str(&k.to_cow().map_err(|_| Stop::Refused)?);
                self.out.push(':');
                self.value(&x, depth + 1)?;
            }
            self.out.push('}');
        } else if let Ok(l) = v.cast_exact::<PyList>() {
            self.items(l.iter(), depth)?;
        } else if let Ok(t) = v.cast_exact::<PyTuple>() {
            self.items(t.iter(), depth)?;
        } else {
            return Err(Stop::Refused);
        }
        Ok(())
    }

    fn items<'py>(
        &mut self,
        items: impl Iterator<Item = Bound<'py, PyAny>>,
        depth: usize,
    ) -> Result<(), Stop> {
        self.out.push('[');
        for (n, x) in items.enumerate() {
            if n > 0 {
                self.out.push(',');
            }
            self.value(&x, depth + 1)?;
        }
        self.out.push(']');
        Ok(())
    }

    /// A JSON string as `json.dumps` writes it: `"` and `\` escaped, `\n \r \t \b \f` by
    /// name, every other character below `' '` as `\u00XX`; with `ensure_ascii`, every
    /// character above `'~'` too (lowercase hex; a pair of surrogates above U+FFFF), else
    /// those as they are.
    fn str(&mut self, s: &str) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let out = &mut self.out;
        out.push('"');
        let mut units = [0u16; 2];
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                ' '..='~' => out.push(c),
                _ if !self.ascii && c > '~' => out.push(c),
                _ => {
                    for u in c.encode_utf16(&mut units) {
                        out.push_str("\\u");
                        for shift in [12, 8, 4, 0] {
                            out.push(char::from(HEX[usize::from((*u >> shift) & 0xf)]));
                        }
                    }
                }
            }
        }
        out.push('"');
    }
}
