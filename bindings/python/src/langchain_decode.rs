//! LangChain messages decoded from LangGraph's msgpack in native code: the native half of
//! `undertext.langgraph._langchain_decode` (read its docstring first).
//!
//! `_decode_lc_messages(datas, table, usage_known, fail)` decodes each msgpack document of
//! `datas` into the Python value `ormsgpack.unpackb(data, ext_hook=_langchain_decode._ext_hook,
//! option=OPT_NON_STR_KEYS)` gives, building each listed LangChain message (extension 5)
//! the way `_langchain_decode._ext_hook` does, with the same checks, and puts `fail` in place of
//! a document it does not build itself: any other extension, a class not in `table`, a
//! field set or value the checks refuse, a map key that is not a str, a key twice in a map,
//! bad msgpack, trailing bytes. The caller decodes those with the Python path, which
//! decides as before (`NotPlain`, then the serializer), so a refusal here costs time, never
//! a different answer. What it saves: a Python call, a nested `unpackb` and the checks in
//! Python per message (2.6 ms of a cold 601-message read; issue 19).
//!
//! `_fresh_items(items, pydantic_deepcopy, fallback)` copies decoded values, such messages
//! included, the way `undertext.langgraph._caches._fresh` does: the saver's caches hand out
//! copies of the items they keep.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PySet, PyString, PyType};

/// LangGraph's extension code for a pydantic v2 model (`EXT_PYDANTIC_V2` in jsonplus.py).
const EXT_PYDANTIC_V2: i8 = 5;

/// Nesting deeper than this is left to the Python path (ormsgpack has its own limit).
const MAX_DEPTH: usize = 256;

/// Map keys up to this many bytes share one str object per call (each message repeats its
/// field names).
const KEY_CACHE_LEN: usize = 32;

/// Which of `_langchain_decode._EXTRA`'s checks a class gets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Human,
    System,
    Ai,
    Tool,
}

impl Kind {
    fn of(s: &str) -> Option<Kind> {
        Some(match s {
            "human" => Kind::Human,
            "system" => Kind::System,
            "ai" => Kind::Ai,
            "tool" => Kind::Tool,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Human => "human",
            Kind::System => "system",
            Kind::Ai => "ai",
            Kind::Tool => "tool",
        }
    }
}

/// One listed class: `(module, class name)`, the class, its fields in order, its kind.
struct Class<'py> {
    module: String,
    name: String,
    cls: Bound<'py, PyType>,
    new: Bound<'py, PyAny>,
    fields: Vec<Bound<'py, PyString>>,
    kind: Kind,
}

/// Not built here: the caller takes the Python path for this document.
struct Refused;

type Got<T> = Result<T, Refused>;

impl From<std::convert::Infallible> for Refused {
    fn from(never: std::convert::Infallible) -> Refused {
        match never {}
    }
}

impl From<PyErr> for Refused {
    fn from(_: PyErr) -> Refused {
        Refused
    }
}

struct Ctx<'py> {
    py: Python<'py>,
    classes: Vec<Class<'py>>,
    usage_known: bool,
    setattr: Bound<'py, PyAny>,
    keys: HashMap<Vec<u8>, Bound<'py, PyString>>,
    s: Strs<'py>,
}

/// The str objects the checks compare with, made once per call.
struct Strs<'py> {
    content: Bound<'py, PyString>,
    additional_kwargs: Bound<'py, PyString>,
    response_metadata: Bound<'py, PyString>,
    type_: Bound<'py, PyString>,
    name: Bound<'py, PyString>,
    id: Bound<'py, PyString>,
    tool_calls: Bound<'py, PyString>,
    invalid_tool_calls: Bound<'py, PyString>,
    usage_metadata: Bound<'py, PyString>,
    tool_call_id: Bound<'py, PyString>,
    status: Bound<'py, PyString>,
    args: Bound<'py, PyString>,
    dict_: Bound<'py, PyString>,
    fields_set: Bound<'py, PyString>,
    extra: Bound<'py, PyString>,
    private: Bound<'py, PyString>,
}

impl<'py> Strs<'py> {
    fn new(py: Python<'py>) -> Strs<'py> {
        let s = |t: &str| PyString::intern(py, t);
        Strs {
            content: s("content"),
            additional_kwargs: s("additional_kwargs"),
            response_metadata: s("response_metadata"),
            type_: s("type"),
            name: s("name"),
            id: s("id"),
            tool_calls: s("tool_calls"),
            invalid_tool_calls: s("invalid_tool_calls"),
            usage_metadata: s("usage_metadata"),
            tool_call_id: s("tool_call_id"),
            status: s("status"),
            args: s("args"),
            dict_: s("__dict__"),
            fields_set: s("__pydantic_fields_set__"),
            extra: s("__pydantic_extra__"),
            private: s("__pydantic_private__"),
        }
    }
}

/// A row of the table `_langchain_decode` passes: module, class name, class, fields, kind.
type TableRow<'py> = (String, String, Bound<'py, PyType>, Vec<Bound<'py, PyString>>, String);

/// The decoded documents of `datas`, `fail` for each one not built here (see the module
/// docstring). `table`: `[(module, class name, class, fields, kind), ...]`, the classes
/// `_langchain_decode` checked in this process; `usage_known`: its `_usage_known`.
#[pyfunction]
#[pyo3(name = "_decode_lc_messages")]
pub(crate) fn decode_lc_messages<'py>(
    py: Python<'py>,
    datas: Vec<Bound<'py, PyBytes>>,
    table: Vec<TableRow<'py>>,
    usage_known: bool,
    fail: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    let mut classes = Vec::with_capacity(table.len());
    for (module, name, cls, fields, kind) in table {
        let Some(kind) = Kind::of(&kind) else { continue };
        let new = cls.getattr("__new__")?;
        classes.push(Class { module, name, cls, new, fields, kind });
    }
    let setattr = py.import("builtins")?.getattr("object")?.getattr("__setattr__")?;
    let mut ctx = Ctx { py, classes, usage_known, setattr, keys: HashMap::new(), s: Strs::new(py) };
    // No cyclic collection during the call: everything it allocates is a fresh tree, and
    // the collections its allocations would start (with LangGraph's heap behind them) took
    // more time than the decoding (perf: gc_collect_main and its visits ~30 % of a loop).
    // Nothing else runs while this holds the GIL, so the switch is seen by no other code.
    let _paused = GcPause::new(py)?;
    let out = PyList::empty(py);
    for data in &datas {
        let buf = data.as_bytes();
        let mut d = Dec { buf, pos: 0 };
        let got = d.value(&mut ctx, 0).and_then(|v| if d.pos == buf.len() { Ok(v) } else { Err(Refused) });
        match got {
            Ok(v) => out.append(v)?,
            Err(Refused) => out.append(&fail)?,
        }
    }
    Ok(out)
}

/// The cyclic garbage collector switched off until dropped, if it was on.
struct GcPause<'py> {
    gc: Option<Bound<'py, PyAny>>,
}

impl<'py> GcPause<'py> {
    fn new(py: Python<'py>) -> PyResult<GcPause<'py>> {
        let gc = py.import("gc")?.into_any();
        if gc.call_method0("isenabled")?.is_truthy()? {
            gc.call_method0("disable")?;
            return Ok(GcPause { gc: Some(gc) });
        }
        Ok(GcPause { gc: None })
    }
}

impl Drop for GcPause<'_> {
    fn drop(&mut self) {
        if let Some(gc) = &self.gc
            && let Err(e) = gc.call_method0("enable")
        {
            e.write_unraisable(gc.py(), None);
        }
    }
}

struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize) -> Got<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or(Refused)?;
        let s = self.buf.get(self.pos..end).ok_or(Refused)?;
        self.pos = end;
        Ok(s)
    }

    fn u8(&mut self) -> Got<u8> {
        Ok(self.take(1)?[0])
    }

    fn be<const N: usize>(&mut self) -> Got<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn len16(&mut self) -> Got<usize> {
        Ok(u16::from_be_bytes(self.be()?) as usize)
    }

    fn len32(&mut self) -> Got<usize> {
        Ok(u32::from_be_bytes(self.be()?) as usize)
    }

    fn str_at(&mut self, n: usize) -> Got<&'a str> {
        std::str::from_utf8(self.take(n)?).map_err(|_| Refused)
    }

    /// The length of a str at the cursor (its header read), or None when it is not a str.
    fn str_len(&mut self, b: u8) -> Got<Option<usize>> {
        Ok(match b {
            0xa0..=0xbf => Some((b & 0x1f) as usize),
            0xd9 => Some(self.u8()? as usize),
            0xda => Some(self.len16()?),
            0xdb => Some(self.len32()?),
            _ => None,
        })
    }

    fn value<'py>(&mut self, ctx: &mut Ctx<'py>, depth: usize) -> Got<Bound<'py, PyAny>> {
        if depth > MAX_DEPTH {
            return Err(Refused);
        }
        let py = ctx.py;
        let b = self.u8()?;
        if let Some(n) = self.str_len(b)? {
            return Ok(PyString::new(py, self.str_at(n)?).into_any());
        }
        Ok(match b {
            0x00..=0x7f => (b as i64).into_pyobject(py)?.into_any(),
            0xe0..=0xff => ((b as i8) as i64).into_pyobject(py)?.into_any(),
            0x80..=0x8f => self.map(ctx, (b & 0x0f) as usize, depth)?,
            0xde => {
                let n = self.len16()?;
                self.map(ctx, n, depth)?
            }
            0xdf => {
                let n = self.len32()?;
                self.map(ctx, n, depth)?
            }
            0x90..=0x9f => self.array(ctx, (b & 0x0f) as usize, depth)?,
            0xdc => {
                let n = self.len16()?;
                self.array(ctx, n, depth)?
            }
            0xdd => {
                let n = self.len32()?;
                self.array(ctx, n, depth)?
            }
            0xc0 => py.None().into_bound(py),
            0xc2 => PyBool::new(py, false).to_owned().into_any(),
            0xc3 => PyBool::new(py, true).to_owned().into_any(),
            0xc4 => {
                let n = self.u8()? as usize;
                PyBytes::new(py, self.take(n)?).into_any()
            }
            0xc5 => {
                let n = self.len16()?;
                PyBytes::new(py, self.take(n)?).into_any()
            }
            0xc6 => {
                let n = self.len32()?;
                PyBytes::new(py, self.take(n)?).into_any()
            }
            0xca => PyFloat::new(py, f32::from_be_bytes(self.be()?) as f64).into_any(),
            0xcb => PyFloat::new(py, f64::from_be_bytes(self.be()?)).into_any(),
            0xcc => (self.u8()? as u64).into_pyobject(py)?.into_any(),
            0xcd => (u16::from_be_bytes(self.be()?) as u64).into_pyobject(py)?.into_any(),
            0xce => (u32::from_be_bytes(self.be()?) as u64).into_pyobject(py)?.into_any(),
            0xcf => u64::from_be_bytes(self.be()?).into_pyobject(py)?.into_any(),
            0xd0 => (i8::from_be_bytes(self.be()?) as i64).into_pyobject(py)?.into_any(),
            0xd1 => (i16::from_be_bytes(self.be()?) as i64).into_pyobject(py)?.into_any(),
            0xd2 => (i32::from_be_bytes(self.be()?) as i64).into_pyobject(py)?.into_any(),
            0xd3 => i64::from_be_bytes(self.be()?).into_pyobject(py)?.into_any(),
            0xc7 => {
                let n = self.u8()? as usize;
                self.ext(ctx, n, depth)?
            }
            0xc8 => {
                let n = self.len16()?;
                self.ext(ctx, n, depth)?
            }
            0xc9 => {
                let n = self.len32()?;
                self.ext(ctx, n, depth)?
            }
            0xd4 => self.ext(ctx, 1, depth)?,
            0xd5 => self.ext(ctx, 2, depth)?,
            0xd6 => self.ext(ctx, 4, depth)?,
            0xd7 => self.ext(ctx, 8, depth)?,
            0xd8 => self.ext(ctx, 16, depth)?,
            _ => return Err(Refused), // 0xc1: never used
        })
    }

    fn array<'py>(&mut self, ctx: &mut Ctx<'py>, n: usize, depth: usize) -> Got<Bound<'py, PyAny>> {
        let list = PyList::empty(ctx.py);
        for _ in 0..n {
            list.append(self.value(ctx, depth + 1)?)?;
        }
        Ok(list.into_any())
    }

    /// A map whose keys are all str, each once (anything else: the Python path).
    fn map<'py>(&mut self, ctx: &mut Ctx<'py>, n: usize, depth: usize) -> Got<Bound<'py, PyAny>> {
        let dict = PyDict::new(ctx.py);
        for i in 0..n {
            let b = self.u8()?;
            let len = self.str_len(b)?.ok_or(Refused)?;
            let raw = self.take(len)?;
            let key = if len <= KEY_CACHE_LEN {
                match ctx.keys.get(raw) {
                    Some(k) => k.clone(),
                    None => {
                        let k = PyString::new(ctx.py, std::str::from_utf8(raw).map_err(|_| Refused)?);
                        ctx.keys.insert(raw.to_vec(), k.clone());
                        k
                    }
                }
            } else {
                PyString::new(ctx.py, std::str::from_utf8(raw).map_err(|_| Refused)?)
            };
            let v = self.value(ctx, depth + 1)?;
            dict.set_item(key, v)?;
            if dict.len() != i + 1 {
                return Err(Refused); // a key twice
            }
        }
        Ok(dict.into_any())
    }

    /// Extension 5 holding `[module, class, fields, method]` of a listed class with fields
    /// the checks accept: the message, as `_langchain_decode._ext_hook` builds it.
    fn ext<'py>(&mut self, ctx: &mut Ctx<'py>, n: usize, depth: usize) -> Got<Bound<'py, PyAny>> {
        let code = i8::from_be_bytes(self.be()?);
        let payload = self.take(n)?;
        if code != EXT_PYDANTIC_V2 {
            return Err(Refused);
        }
        let mut d = Dec { buf: payload, pos: 0 };
        let b = d.u8()?;
        let len = match b {
            0x90..=0x9f => (b & 0x0f) as usize,
            0xdc => d.len16()?,
            0xdd => d.len32()?,
            _ => return Err(Refused),
        };
        if len != 4 {
            return Err(Refused);
        }
        let b = d.u8()?;
        let n = d.str_len(b)?.ok_or(Refused)?;
        let module = d.str_at(n)?;
        let b = d.u8()?;
        let n = d.str_len(b)?.ok_or(Refused)?;
        let name = d.str_at(n)?;
        let fields = d.value(ctx, depth + 1)?;
        let _method = d.value(ctx, depth + 1)?;
        if d.pos != payload.len() {
            return Err(Refused);
        }
        let at = ctx.classes.iter().position(|c| c.module == module && c.name == name).ok_or(Refused)?;
        let fields = fields.cast_exact::<PyDict>().map_err(|_| Refused)?.clone();
        let class = &ctx.classes[at];
        if fields.len() != class.fields.len() {
            return Err(Refused);
        }
        for ((k, _), want) in fields.iter().zip(&class.fields) {
            if !k.eq(want)? {
                return Err(Refused);
            }
        }
        if !common(ctx, &fields, class.kind)? {
            return Err(Refused);
        }
        let ok = match class.kind {
            Kind::Human | Kind::System => true,
            Kind::Ai => ai(ctx, &fields)?,
            Kind::Tool => tool(ctx, &fields)?,
        };
        if !ok {
            return Err(Refused);
        }
        let class = &ctx.classes[at];
        let py = ctx.py;
        let obj = class.new.call1((&class.cls,))?;
        let keys = PySet::new(py, fields.keys().iter())?;
        let set = &ctx.setattr;
        set.call1((&obj, &ctx.s.dict_, &fields))?;
        set.call1((&obj, &ctx.s.fields_set, keys))?;
        set.call1((&obj, &ctx.s.extra, PyDict::new(py)))?;
        set.call1((&obj, &ctx.s.private, py.None()))?;
        Ok(obj)
    }
}

fn item<'py>(d: &Bound<'py, PyDict>, k: &Bound<'py, PyString>) -> Got<Bound<'py, PyAny>> {
    d.get_item(k)?.ok_or(Refused)
}

fn is_str(v: &Bound<'_, PyAny>) -> bool {
    v.is_exact_instance_of::<PyString>()
}

fn opt_str(v: &Bound<'_, PyAny>) -> bool {
    v.is_none() || is_str(v)
}

fn is_dict(v: &Bound<'_, PyAny>) -> bool {
    v.is_exact_instance_of::<PyDict>()
}

fn is_int(v: &Bound<'_, PyAny>) -> bool {
    v.is_exact_instance_of::<PyInt>()
}

fn str_is(v: &Bound<'_, PyAny>, s: &str) -> Got<bool> {
    Ok(is_str(v) && v.eq(s)?)
}

/// `_langchain_decode._common`.
fn common(ctx: &Ctx<'_>, d: &Bound<'_, PyDict>, kind: Kind) -> Got<bool> {
    let s = &ctx.s;
    let c = item(d, &s.content)?;
    let content_ok = is_str(&c)
        || match c.cast_exact::<PyList>() {
            Ok(list) => list.iter().all(|b| is_str(&b) || is_dict(&b)),
            Err(_) => false,
        };
    Ok(content_ok
        && is_dict(&item(d, &s.additional_kwargs)?)
        && is_dict(&item(d, &s.response_metadata)?)
        && str_is(&item(d, &s.type_)?, kind.name())?
        && opt_str(&item(d, &s.name)?)
        && opt_str(&item(d, &s.id)?))
}

/// `_langchain_decode._tool_call`.
fn tool_call(ctx: &Ctx<'_>, tc: &Bound<'_, PyAny>) -> Got<bool> {
    let Ok(tc) = tc.cast_exact::<PyDict>() else { return Ok(false) };
    let s = &ctx.s;
    if tc.len() != 4 {
        return Ok(false);
    }
    for ((k, _), want) in tc.iter().zip([&s.name, &s.args, &s.id, &s.type_]) {
        if !k.eq(want)? {
            return Ok(false);
        }
    }
    let args = item(tc, &s.args)?;
    let Ok(args) = args.cast_exact::<PyDict>() else { return Ok(false) };
    Ok(is_str(&item(tc, &s.name)?)
        && args.iter().all(|(k, _)| is_str(&k))
        && opt_str(&item(tc, &s.id)?)
        && str_is(&item(tc, &s.type_)?, "tool_call")?)
}

/// `_langchain_decode._ai`.
fn ai(ctx: &Ctx<'_>, d: &Bound<'_, PyDict>) -> Got<bool> {
    let s = &ctx.s;
    let calls = item(d, &s.tool_calls)?;
    let Ok(calls) = calls.cast_exact::<PyList>() else { return Ok(false) };
    let invalid = item(d, &s.invalid_tool_calls)?;
    match invalid.cast_exact::<PyList>() {
        Ok(l) if l.is_empty() => {}
        _ => return Ok(false),
    }
    let u = item(d, &s.usage_metadata)?;
    if !(u.is_none() || (ctx.usage_known && usage(&u)?)) {
        return Ok(false);
    }
    if calls.is_empty() {
        let kw = item(d, &s.additional_kwargs)?;
        let kw = kw.cast_exact::<PyDict>().map_err(|_| Refused)?;
        return Ok(match kw.get_item(&s.tool_calls)? {
            Some(v) => !v.is_truthy()?,
            None => true,
        });
    }
    for tc in calls.iter() {
        if !tool_call(ctx, &tc)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `_langchain_decode._tool`.
fn tool(ctx: &Ctx<'_>, d: &Bound<'_, PyDict>) -> Got<bool> {
    let s = &ctx.s;
    let status = item(d, &s.status)?;
    Ok(is_str(&item(d, &s.tool_call_id)?) && (str_is(&status, "success")? || str_is(&status, "error")?))
}

const USAGE: [&str; 5] =
    ["input_tokens", "output_tokens", "total_tokens", "input_token_details", "output_token_details"];
const INPUT_DETAILS: [&str; 3] = ["audio", "cache_creation", "cache_read"];
const OUTPUT_DETAILS: [&str; 2] = ["audio", "reasoning"];

/// `_langchain_decode._usage`: the three counts first, in order, then either details dict (in
/// order), no other key, every count an int.
fn usage(u: &Bound<'_, PyAny>) -> Got<bool> {
    let Ok(u) = u.cast_exact::<PyDict>() else { return Ok(false) };
    let items: Vec<_> = u.iter().collect();
    if items.len() < 3 {
        return Ok(false);
    }
    for (i, (k, v)) in items[..3].iter().enumerate() {
        if !str_is(k, USAGE[i])? || !is_int(v) {
            return Ok(false);
        }
    }
    let rest = &items[3..];
    let mut names = Vec::with_capacity(rest.len());
    for (k, _) in rest {
        if !is_str(k) {
            return Ok(false);
        }
        names.push(k.extract::<String>()?);
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    if !matches!(
        names.as_slice(),
        [] | ["input_token_details"]
            | ["output_token_details"]
            | ["input_token_details", "output_token_details"]
    ) {
        return Ok(false);
    }
    for ((_, v), name) in rest.iter().zip(&names) {
        let order: &[&str] = if *name == "input_token_details" { &INPUT_DETAILS } else { &OUTPUT_DETAILS };
        if !ordered_ints(v, order)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `_langchain_decode._ordered_ints`: a dict whose keys come in `order`'s order (any subset),
/// each value an int (not a bool).
fn ordered_ints(d: &Bound<'_, PyAny>, order: &[&str]) -> Got<bool> {
    let Ok(d) = d.cast_exact::<PyDict>() else { return Ok(false) };
    let mut at = 0;
    for (k, v) in d.iter() {
        if !is_int(&v) || !is_str(&k) {
            return Ok(false);
        }
        let k: String = k.extract()?;
        match order[at..].iter().position(|o| *o == k) {
            Some(i) => at += i + 1,
            None => return Ok(false),
        }
    }
    Ok(true)
}

/// `langgraph._caches._fresh` of each of `items`, in native code: a deep copy as decoding the bytes
/// again would give it. Exact dicts and lists are copied (an empty one made new), str, int,
/// float, bool, None and bytes shared, a pydantic model whose `__deepcopy__` is
/// `pydantic_deepcopy` (LangChain's messages) made anew with copies of its `__dict__`,
/// `__pydantic_extra__` and `__pydantic_fields_set__`; anything else (a model with private
/// attributes, another type) goes to `fallback`, the Python `_fresh`.
#[pyfunction]
#[pyo3(name = "_fresh_items")]
pub(crate) fn fresh_items<'py>(
    py: Python<'py>,
    items: Vec<Bound<'py, PyAny>>,
    pydantic_deepcopy: Bound<'py, PyAny>,
    fallback: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    let paused = GcPause::new(py)?;
    let mut f = Fresh {
        py,
        paused,
        deepcopy: pydantic_deepcopy,
        fallback,
        setattr: py.import("builtins")?.getattr("object")?.getattr("__setattr__")?,
        models: HashMap::new(),
        s: Strs::new(py),
    };
    let out = PyList::empty(py);
    for x in &items {
        out.append(f.copy(x)?)?;
    }
    Ok(out)
}

struct Fresh<'py> {
    py: Python<'py>,
    /// The collector's pause, lifted around `fallback`: Python code may let other threads run.
    paused: GcPause<'py>,
    deepcopy: Bound<'py, PyAny>,
    fallback: Bound<'py, PyAny>,
    setattr: Bound<'py, PyAny>,
    /// Per type (by its address, alive for the call: the objects hold their types): whether
    /// its `__deepcopy__` is pydantic's, and its `__new__`.
    models: HashMap<usize, Option<Bound<'py, PyAny>>>,
    s: Strs<'py>,
}

impl<'py> Fresh<'py> {
    /// `fallback(x)` with the collector as the caller had it: the Python `_fresh` may run
    /// any `__deepcopy__`, and other threads may run meanwhile.
    fn fall_back(&self, x: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let Some(gc) = &self.paused.gc else { return self.fallback.call1((x,)) };
        gc.call_method0("enable")?;
        let got = self.fallback.call1((x,));
        gc.call_method0("disable")?;
        got
    }

    fn scalar(x: &Bound<'py, PyAny>) -> bool {
        x.is_none()
            || x.is_exact_instance_of::<PyString>()
            || x.is_exact_instance_of::<PyInt>()
            || x.is_exact_instance_of::<PyFloat>()
            || x.is_exact_instance_of::<PyBool>()
            || x.is_exact_instance_of::<PyBytes>()
    }

    fn copy(&mut self, x: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if Self::scalar(x) {
            return Ok(x.clone());
        }
        if let Ok(d) = x.cast_exact::<PyDict>() {
            return Ok(self.dict(d)?.into_any());
        }
        if let Ok(l) = x.cast_exact::<PyList>() {
            let out = PyList::empty(self.py);
            for v in l.iter() {
                out.append(if Self::scalar(&v) { v } else { self.copy(&v)? })?;
            }
            return Ok(out.into_any());
        }
        let t = x.get_type();
        let key = t.as_ptr() as usize;
        let new = match self.models.get(&key) {
            Some(n) => n.clone(),
            None => {
                let is_model = match t.getattr("__deepcopy__") {
                    Ok(d) => d.is(&self.deepcopy),
                    Err(_) => false,
                };
                let n = if is_model { Some(t.getattr("__new__")?) } else { None };
                self.models.insert(key, n.clone());
                n
            }
        };
        let Some(new) = new else { return self.fall_back(x) };
        // (A missing `__pydantic_private__` reads as None, as `getattr(x, name, None)`.)
        if let Ok(private) = x.getattr(&self.s.private)
            && !private.is_none()
        {
            return self.fall_back(x);
        }
        let fields = x.getattr(&self.s.dict_)?;
        let Ok(fields) = fields.cast_exact::<PyDict>() else { return self.fall_back(x) };
        let extra = x.getattr(&self.s.extra)?;
        let extra = if extra.is_none() {
            extra
        } else {
            match extra.cast_exact::<PyDict>() {
                Ok(e) => self.dict(e)?.into_any(),
                Err(_) => return self.fall_back(x),
            }
        };
        let fields_set = self.py.get_type::<PySet>().call1((x.getattr(&self.s.fields_set)?,))?;
        let m = new.call1((&t,))?;
        let fields = self.dict(fields)?;
        let set = &self.setattr;
        set.call1((&m, &self.s.dict_, fields))?;
        set.call1((&m, &self.s.extra, extra))?;
        set.call1((&m, &self.s.fields_set, fields_set))?;
        set.call1((&m, &self.s.private, self.py.None()))?;
        Ok(m)
    }

    /// `langgraph._caches._fresh_dict`: `d.copy()` (its table copied whole, as `dict.copy` does),
    /// then each value that is not a scalar replaced by its copy.
    fn dict(&mut self, d: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyDict>> {
        let out = d.copy()?;
        for (k, v) in d.iter() {
            if Self::scalar(&v) {
                continue;
            } else if let Ok(e) = v.cast_exact::<PyDict>()
                && e.is_empty()
            {
                out.set_item(k, PyDict::new(self.py))?;
            } else if let Ok(e) = v.cast_exact::<PyList>()
                && e.is_empty()
            {
                out.set_item(k, PyList::empty(self.py))?;
            } else {
                let c = self.copy(&v)?;
                out.set_item(k, c)?;
            }
        }
        Ok(out)
    }
}
