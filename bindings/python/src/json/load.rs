//! JSON text to the Python value `json.loads` gives, decoded in native code.
//!
//! The adapters keep each item (an Agents SDK item, a Claude Code transcript entry) as one
//! message whose text is the item's JSON; reading them back is `json.loads` of each text.
//! [`Loader::loads`] (and `_native.json_loads`, [`json_loads`]) decodes the engine's `&str`
//! straight into Python objects, without first making a Python `str` of the whole text. It
//! decodes itself only what it can decode exactly as `json.loads` does: objects, arrays,
//! strings (every escape, surrogate pairs), `true`, `false`, `null`, integers within `i64` and
//! floats (Rust's `f64` parsing rounds correctly, as Python's `float` does). Anything else — invalid JSON, `NaN` or `Infinity`, an integer
//! outside `i64`, a lone surrogate escape, a raw control character in a string, nesting
//! deeper than [`MAX_DEPTH`] — goes to Python's `json.loads`, which gives the value or raises
//! its `JSONDecodeError`: a text refused here costs time, never a different answer.

use std::collections::HashMap;

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use super::{MAX_DEPTH, Stop};

/// Object keys up to this many bytes share one `str` per call (as `json.loads` memoizes
/// keys: items repeat their field names).
const KEY_CACHE_LEN: usize = 32;

/// Decodes JSON texts into Python values, sharing a key cache across the texts of one call.
pub(crate) struct Loader<'py> {
    py: Python<'py>,
    keys: HashMap<Box<str>, Bound<'py, PyString>>,
    json_loads: Option<Bound<'py, PyAny>>,
}

impl<'py> Loader<'py> {
    /// A loader for the texts of one call.
    pub(crate) fn new(py: Python<'py>) -> Loader<'py> {
        Loader { py, keys: HashMap::new(), json_loads: None }
    }

    /// The value `json.loads(text)` gives, or its error.
    pub(crate) fn loads(&mut self, text: &str) -> PyResult<Bound<'py, PyAny>> {
        let mut p = Parser { s: text, b: text.as_bytes(), i: 0 };
        match self.document(&mut p) {
            Ok(v) => Ok(v),
            Err(Stop::Py(e)) => Err(e),
            Err(Stop::Refused) => {
                let f = match &self.json_loads {
                    Some(f) => f.clone(),
                    None => {
                        let f = self.py.import("json")?.getattr("loads")?;
                        self.json_loads = Some(f.clone());
                        f
                    }
                };
                f.call1((text,))
            }
        }
    }

    fn document(&mut self, p: &mut Parser<'_>) -> Result<Bound<'py, PyAny>, Stop> {
        p.ws();
        let v = self.value(p, 0)?;
        p.ws();
        if p.i != p.b.len() {
            return Err(Stop::Refused);
        }
        Ok(v)
    }

    fn value(&mut self, p: &mut Parser<'_>, depth: usize) -> Result<Bound<'py, PyAny>, Stop> {
        if depth > MAX_DEPTH {
            return Err(Stop::Refused);
        }
        let py = self.py;
        match p.peek() {
            Some(b'{') => {
                p.i += 1;
                let d = PyDict::new(py);
                p.ws();
                if p.eat(b'}') {
                    return Ok(d.into_any());
                }
                loop {
                    p.ws();
                    if !p.eat(b'"') {
                        return Err(Stop::Refused);
                    }
                    let key = self.key(p)?;
                    p.ws();
                    if !p.eat(b':') {
                        return Err(Stop::Refused);
                    }
                    p.ws();
                    let v = self.value(p, depth + 1)?;
                    d.set_item(key, v)?;
                    p.ws();
                    if p.eat(b',') {
                        continue;
                    }
                    if p.eat(b'}') {
                        return Ok(d.into_any());
                    }
                    return Err(Stop::Refused);
                }
            }
            Some(b'[') => {
                p.i += 1;
                let l = PyList::empty(py);
                p.ws();
                if p.eat(b']') {
                    return Ok(l.into_any());
                }
                loop {
                    p.ws();
                    l.append(self.value(p, depth + 1)?)?;
                    p.ws();
                    if p.eat(b',') {
                        continue;
                    }
                    if p.eat(b']') {
                        return Ok(l.into_any());
                    }
                    return Err(Stop::Refused);
                }
            }
            Some(b'"') => {
                p.i += 1;
                let s = p.string()?;
                Ok(PyString::new(py, &s).into_any())
            }
            Some(b't') if p.literal(b"true") => Ok(true.into_bound_py_any(py)?),
            Some(b'f') if p.literal(b"false") => Ok(false.into_bound_py_any(py)?),
            Some(b'n') if p.literal(b"null") => Ok(py.None().into_bound(py)),
            Some(b'-' | b'0'..=b'9') => self.number(p),
            _ => Err(Stop::Refused),
        }
    }

    /// An object key (after its opening quote), one `str` per distinct short key.
    fn key(&mut self, p: &mut Parser<'_>) -> Result<Bound<'py, PyString>, Stop> {
        let s = p.string()?;
        if s.len() > KEY_CACHE_LEN {
            return Ok(PyString::new(self.py, &s));
        }
        if let Some(k) = self.keys.get(&*s) {
            return Ok(k.clone());
        }
        let k = PyString::new(self.py, &s);
        self.keys.insert(s.into(), k.clone());
        Ok(k)
    }

    fn number(&mut self, p: &mut Parser<'_>) -> Result<Bound<'py, PyAny>, Stop> {
        let start = p.i;
        p.eat(b'-');
        match p.peek() {
            Some(b'0') => p.i += 1,
            Some(b'1'..=b'9') => p.digits(),
            _ => return Err(Stop::Refused),
        }
        let mut float = false;
        if p.peek() == Some(b'.') && p.b.get(p.i + 1).is_some_and(u8::is_ascii_digit) {
            p.i += 1;
            p.digits();
            float = true;
        }
        if matches!(p.peek(), Some(b'e' | b'E')) {
            let save = p.i;
            p.i += 1;
            if matches!(p.peek(), Some(b'+' | b'-')) {
                p.i += 1;
            }
            if p.peek().is_some_and(|c| c.is_ascii_digit()) {
                p.digits();
                float = true;
            } else {
                p.i = save;
            }
        }
        let text = std::str::from_utf8(&p.b[start..p.i]).map_err(|_| Stop::Refused)?;
        if float {
            let f: f64 = text.parse().map_err(|_| Stop::Refused)?;
            Ok(f.into_bound_py_any(self.py)?)
        } else {
            let n: i64 = text.parse().map_err(|_| Stop::Refused)?;
            Ok(n.into_bound_py_any(self.py)?)
        }
    }
}

/// A cursor over one text.
struct Parser<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn literal(&mut self, word: &[u8]) -> bool {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            true
        } else {
            false
        }
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
    }

    /// The index of the first byte at or after `self.i` that ends a plain run of a string:
    /// a quote, a backslash or a control character (eight bytes at a time while none is in
    /// them), or the length.
    fn plain_run_end(&self) -> usize {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGHS: u64 = 0x8080_8080_8080_8080;
        let b = self.b;
        let mut i = self.i;
        while let Some(chunk) = b.get(i..i + 8) {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            let w = u64::from_le_bytes(w);
            let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
            // A byte below 0x20, or equal to '"' or '\\'.
            let hit = (w.wrapping_sub(ONES * 0x20) & !w & HIGHS)
                | zero(w ^ (ONES * b'"' as u64))
                | zero(w ^ (ONES * b'\\' as u64));
            if hit != 0 {
                break;
            }
            i += 8;
        }
        while let Some(&c) = b.get(i) {
            if c == b'"' || c == b'\\' || c < 0x20 {
                break;
            }
            i += 1;
        }
        i
    }

    /// A string's contents after its opening quote, up to and past its closing quote. Raw
    /// control characters (which `json.loads` refuses) and lone surrogate escapes (which it
    /// keeps, and a Rust string cannot hold) are refused.
    fn string(&mut self) -> Result<std::borrow::Cow<'a, str>, Stop> {
        let start = self.i;
        self.i = self.plain_run_end();
        // The run stops at ASCII bytes only, so it is whole UTF-8: slicing checks nothing more.
        let first = self.s.get(start..self.i).ok_or(Stop::Refused)?;
        match self.b.get(self.i) {
            Some(b'"') => {
                self.i += 1;
                return Ok(std::borrow::Cow::Borrowed(first));
            }
            Some(b'\\') => {}
            _ => return Err(Stop::Refused), // a raw control character, or no closing quote
        }
        let mut out = String::with_capacity(first.len() + 64);
        out.push_str(first);
        loop {
            // At a backslash: one escape, then the next plain run.
            self.i += 1;
            let Some(&e) = self.b.get(self.i) else { return Err(Stop::Refused) };
            self.i += 1;
            let ch = match e {
                b'"' => '"',
                b'\\' => '\\',
                b'/' => '/',
                b'b' => '\u{8}',
                b'f' => '\u{c}',
                b'n' => '\n',
                b'r' => '\r',
                b't' => '\t',
                b'u' => {
                    let hi = self.hex4()?;
                    let code = if (0xD800..0xDC00).contains(&hi) {
                        if !self.b[self.i..].starts_with(b"\\u") {
                            return Err(Stop::Refused);
                        }
                        self.i += 2;
                        let lo = self.hex4()?;
                        if !(0xDC00..0xE000).contains(&lo) {
                            return Err(Stop::Refused);
                        }
                        0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                    } else {
                        hi
                    };
                    char::from_u32(code).ok_or(Stop::Refused)?
                }
                _ => return Err(Stop::Refused),
            };
            out.push(ch);
            let run = self.i;
            self.i = self.plain_run_end();
            out.push_str(self.s.get(run..self.i).ok_or(Stop::Refused)?);
            match self.b.get(self.i) {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(std::borrow::Cow::Owned(out));
                }
                Some(b'\\') => {}
                _ => return Err(Stop::Refused),
            }
        }
    }

    /// Four hex digits of a `\u` escape.
    fn hex4(&mut self) -> Result<u32, Stop> {
        let h = self.b.get(self.i..self.i + 4).ok_or(Stop::Refused)?;
        let mut v = 0u32;
        for &c in h {
            let d = (c as char).to_digit(16).ok_or(Stop::Refused)?;
            v = v << 4 | d;
        }
        self.i += 4;
        Ok(v)
    }
}

/// `[json.loads(t) for t in texts]`, decoded in native code (see the module's documentation):
/// what an adapter decodes the JSON texts it kept with.
#[pyfunction]
pub(crate) fn json_loads<'py>(py: Python<'py>, texts: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    let mut loader = Loader::new(py);
    for t in texts.iter() {
        let s = t.cast::<PyString>().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "json_loads: expected a list of str, found {}",
                t.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ))
        })?;
        // A str with a lone surrogate has no UTF-8 form: json.loads decides.
        match s.to_cow() {
            Ok(text) => out.append(loader.loads(&text)?)?,
            Err(_) => out.append(py.import("json")?.getattr("loads")?.call1((s,))?)?,
        }
    }
    Ok(out)
}
