//! The patch that turns one JSON dict into another, kept only when it gives back the same
//! text: the LangGraph saver stores a checkpoint's fields and metadata as patches of its
//! parent's (`_records._delta`, FORMAT.md in `undertext/langgraph`).
//!
//! [`patch_exact`] (`_native._json_patch`) is `_records._patch_exact_py` in native code, the
//! same answer: the patch `_patch(a, b)` computes, or `None` when `_apply(a, patch)` written
//! as compact JSON is not `b`'s text (key order, `1` against `1.0` against `true`, which `==`
//! takes as equal) or either is not JSON this module writes itself (see [`super::dump`];
//! the saver then stores the fields whole, always right). A patch is a dict of up to three
//! members, each only when not empty: `s` the keys set (new or changed, in `b`'s order), `x`
//! the keys removed (in `a`'s order), `n` the patches of keys whose values are dicts on both
//! sides.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::dump;

/// The patch turning dict `a` into dict `b`, or `None` when applying it to `a` does not give
/// `b`'s compact JSON text exactly.
///
/// ```python
/// from undertext._native import _json_patch
/// assert _json_patch({"a": 1, "b": {"c": 2, "d": 3}}, {"a": 1, "b": {"c": 4, "d": 3}, "e": 5}) == {
///     "s": {"e": 5}, "n": {"b": {"s": {"c": 4}}}}
/// assert _json_patch({"a": 1}, {"a": 1.0}) is None  # equal, not the same text
/// ```
#[pyfunction]
#[pyo3(name = "_json_patch")]
pub(crate) fn patch_exact<'py>(
    a: &Bound<'py, PyDict>,
    b: &Bound<'py, PyDict>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let p = patch(a, b)?;
    let applied = apply(a, &p)?;
    match (dump::native_text(applied.as_any()), dump::native_text(b.as_any())) {
        (Some(x), Some(y)) if x == y => Ok(Some(p)),
        _ => Ok(None),
    }
}

/// What turns `a` into `b` (`_records._patch`): unchanged keys (`==`) left out, dicts on both
/// sides patched member by member.
fn patch<'py>(a: &Bound<'py, PyDict>, b: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyDict>> {
    let py = a.py();
    let s = PyDict::new(py);
    let n = PyDict::new(py);
    for (k, v) in b.iter() {
        if let Some(old) = a.get_item(&k)? {
            if old.eq(&v)? {
                continue;
            }
            if let (Ok(old), Ok(new)) = (old.cast_exact::<PyDict>(), v.cast_exact::<PyDict>()) {
                n.set_item(&k, patch(old, new)?)?;
                continue;
            }
        }
        s.set_item(&k, &v)?;
    }
    let out = PyDict::new(py);
    if !s.is_empty() {
        out.set_item("s", s)?;
    }
    let x = PyList::empty(py);
    for k in a.keys() {
        if !b.contains(&k)? {
            x.append(k)?;
        }
    }
    if !x.is_empty() {
        out.set_item("x", x)?;
    }
    if !n.is_empty() {
        out.set_item("n", n)?;
    }
    Ok(out)
}

/// `a` patched by `p` (`_records._apply`): the kept keys in `a`'s order, patched dicts in
/// place, the set keys updated or appended in the patch's order.
fn apply<'py>(a: &Bound<'py, PyDict>, p: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyDict>> {
    let py = a.py();
    let out = PyDict::new(py);
    let removed = p.get_item("x")?;
    for (k, v) in a.iter() {
        if let Some(x) = &removed
            && x.contains(&k)?
        {
            continue;
        }
        out.set_item(k, v)?;
    }
    if let Some(n) = p.get_item("n")? {
        for (k, sub) in n.cast_into::<PyDict>()?.iter() {
            let cur =
                out.get_item(&k)?.ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(k.clone().unbind()))?;
            out.set_item(&k, apply(cur.cast::<PyDict>()?, sub.cast::<PyDict>()?)?)?;
        }
    }
    if let Some(s) = p.get_item("s")? {
        out.update(s.cast::<pyo3::types::PyMapping>()?)?;
    }
    Ok(out)
}
