//! The budget, the model view and checkpoints: `undertext.Budget`, `undertext.View`,
//! `undertext.Checkpoint`.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use undertext::Checkpoint;
use undertext::{Budget, Decision, View};

use crate::convert::{Text, parts_out};
use crate::errors::{exception, invalid};

/// The token budget of one model call. Fractions are of the usable input,
/// `window - reserve_output`: over `soft` older tool results become previews until the
/// estimate is at or under `target`; still over `hard`, the call is refused.
#[pyclass(name = "Budget", module = "undertext", frozen)]
#[derive(Debug)]
pub struct PyBudget {
    pub(crate) budget: Budget,
}

#[pymethods]
impl PyBudget {
    #[new]
    #[pyo3(
        signature = (
            window, reserve_output=0, *, soft=0.7, target=0.5, hard=0.9, tool_schemas=Vec::new(),
            protect_max_tokens=None, instructions_max_tokens=None, nudge=None
        ),
        text_signature = "(window, reserve_output=0, *, soft=0.7, target=0.5, hard=0.9, tool_schemas=(), \
                          protect_max_tokens=None, instructions_max_tokens=None, nudge=None)"
    )]
    #[expect(clippy::too_many_arguments, reason = "one keyword argument per budget field, as in Python")]
    fn new(
        py: Python<'_>,
        window: u64,
        reserve_output: u64,
        soft: f64,
        target: f64,
        hard: f64,
        tool_schemas: Vec<Text>,
        protect_max_tokens: Option<u64>,
        instructions_max_tokens: Option<u64>,
        nudge: Option<f64>,
    ) -> PyResult<PyBudget> {
        let ok = window > reserve_output
            && 0.0 < target
            && target <= soft
            && soft <= hard
            && hard <= 1.0
            && nudge.is_none_or(|n| 0.0 < n && n <= 1.0);
        if !ok {
            return Err(invalid(
                py,
                format!(
                    "budget: expected window > reserve_output, 0 < target <= soft <= hard <= 1 and 0 < nudge <= 1, \
                     found window {window}, reserve_output {reserve_output}, target {target}, soft {soft}, \
                     hard {hard}, nudge {nudge:?}"
                ),
            ));
        }
        Ok(PyBudget {
            budget: Budget {
                window,
                reserve_output,
                soft,
                target,
                hard,
                tool_schemas: tool_schemas.into_iter().map(String::from).collect(),
                protect_max_tokens,
                instructions_max_tokens,
                nudge,
                min_cut_tokens: None,
            },
        })
    }

    /// The context window, in tokens.
    #[getter]
    fn window(&self) -> u64 {
        self.budget.window
    }
    /// Tokens kept free for the answer.
    #[getter]
    fn reserve_output(&self) -> u64 {
        self.budget.reserve_output
    }
    /// The soft fraction.
    #[getter]
    fn soft(&self) -> f64 {
        self.budget.soft
    }
    /// The target fraction.
    #[getter]
    fn target(&self) -> f64 {
        self.budget.target
    }
    /// The hard fraction.
    #[getter]
    fn hard(&self) -> f64 {
        self.budget.hard
    }
    /// JSON text of the tool schemas sent with the call.
    #[getter]
    fn tool_schemas(&self) -> Vec<String> {
        self.budget.tool_schemas.clone()
    }
    /// Usable input tokens: `window - reserve_output`.
    #[getter]
    fn usable(&self) -> u64 {
        self.budget.usable()
    }
    /// Tokens at the soft line.
    #[getter]
    fn soft_limit(&self) -> u64 {
        self.budget.soft_limit()
    }
    /// Tokens at the target line.
    #[getter]
    fn target_limit(&self) -> u64 {
        self.budget.target_limit()
    }
    /// Tokens at the hard line.
    #[getter]
    fn hard_limit(&self) -> u64 {
        self.budget.hard_limit()
    }
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyTuple>,))> {
        let b = &slf.get().budget;
        let state = (
            b.window,
            b.reserve_output,
            b.soft,
            b.target,
            b.hard,
            b.tool_schemas.clone(),
            b.protect_max_tokens,
            b.instructions_max_tokens,
            b.nudge,
            b.min_cut_tokens,
        )
            .into_pyobject(slf.py())?;
        Ok((slf.get_type().getattr("_from_state")?, (state,)))
    }

    /// Builds a budget back from `__reduce__`'s state (pickle, `copy`), checked as `Budget(...)` is.
    #[staticmethod]
    #[expect(clippy::type_complexity, reason = "the state tuple, field by field")]
    fn _from_state(
        py: Python<'_>,
        state: (u64, u64, f64, f64, f64, Vec<Text>, Option<u64>, Option<u64>, Option<f64>, Option<u64>),
    ) -> PyResult<PyBudget> {
        let (window, reserve_output, soft, target, hard, tool_schemas, protect, instructions, nudge, min_cut) =
            state;
        let mut b = PyBudget::new(
            py,
            window,
            reserve_output,
            soft,
            target,
            hard,
            tool_schemas,
            protect,
            instructions,
            nudge,
        )?;
        b.budget.min_cut_tokens = min_cut;
        Ok(b)
    }

    fn __repr__(&self) -> String {
        let b = &self.budget;
        format!(
            "Budget(window={}, reserve_output={}, soft={}, target={}, hard={})",
            b.window, b.reserve_output, b.soft, b.target, b.hard
        )
    }
}

/// The model view of a chat under a budget: what the next model call should see.
#[pyclass(name = "View", module = "undertext", frozen)]
#[derive(Debug)]
pub struct PyView {
    view: View,
}

impl PyView {
    pub(crate) fn new(view: View) -> PyView {
        PyView { view }
    }
}

/// `Refused` for a refused view (carrying it), else None.
pub(crate) fn refused(py: Python<'_>, v: &PyView) -> Option<PyErr> {
    let Decision::Refused { estimate, limit, over_by } = *v.view.decision() else { return None };
    let view = match Py::new(py, PyView { view: v.view.clone() }) {
        Ok(p) => p.into_any(),
        Err(e) => return Some(e),
    };
    let int = |n: u64| n.into_pyobject(py).map(|b| b.into_any().unbind()).unwrap_or_else(|e| match e {});
    let msg = format!(
        "view refused: the estimate {estimate} tokens is over the hard line {limit} by {over_by} after compaction"
    );
    Some(exception(
        py,
        "Refused",
        &msg,
        &[("estimate", int(estimate)), ("limit", int(limit)), ("over_by", int(over_by)), ("view", view)],
    ))
}

fn json_loads<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (text,))
}

#[pymethods]
impl PyView {
    /// `"fits"`, `"compacted"` or `"refused"`.
    #[getter]
    fn decision(&self) -> &'static str {
        match self.view.decision() {
            Decision::Fits => "fits",
            Decision::Compacted { .. } => "compacted",
            Decision::Refused { .. } => "refused",
        }
    }
    /// Seqs of the tool results this view sends as the guard's previews, whatever the
    /// decision (a refused view carries them too).
    #[getter]
    fn previewed(&self) -> Vec<u64> {
        self.view.previewed().to_vec()
    }
    /// How many leading messages are exactly those of the previous view served for the chat:
    /// the prefix a provider's prompt cache keeps.
    #[getter]
    fn stable_prefix_messages(&self) -> usize {
        self.view.stable_prefix_messages()
    }
    /// Estimated tokens of the stable prefix (what the provider reads from its cache).
    #[getter]
    fn stable_prefix_tokens(&self) -> u64 {
        self.view.stable_prefix_tokens()
    }
    /// Estimated tokens the provider must read in full (the estimate minus the stable prefix).
    #[getter]
    fn reread_tokens(&self) -> u64 {
        self.view.reread_tokens()
    }
    /// What the view leaves out: `{"ranges": [(start, end), ...], "results": [(seq,
    /// archive_id), ...], "tokens": n, "note": "..."}` (the note is a line for the model).
    #[getter]
    fn omitted<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let o = self.view.omitted();
        let d = pyo3::types::PyDict::new(py);
        let ranges: Vec<(u64, u64)> = o.ranges.iter().map(|r| (r.start, r.end)).collect();
        let results: Vec<(u64, String)> = o.results.iter().map(|(s, id)| (*s, id.to_string())).collect();
        d.set_item("ranges", ranges)?;
        d.set_item("results", results)?;
        d.set_item("tokens", o.tokens)?;
        d.set_item("note", o.note())?;
        Ok(d)
    }
    /// Tokens the previews saved (0 unless compacted).
    #[getter]
    fn tokens_saved(&self) -> u64 {
        match self.view.decision() {
            Decision::Compacted { tokens_saved, .. } => *tokens_saved,
            _ => 0,
        }
    }
    /// Estimated input tokens, calibration applied.
    #[getter]
    fn estimate(&self) -> u64 {
        self.view.estimate()
    }
    /// The estimate before calibration.
    #[getter]
    fn raw_estimate(&self) -> u64 {
        self.view.raw_estimate()
    }
    /// The calibration factor applied.
    #[getter]
    fn calibration(&self) -> f64 {
        self.view.calibration()
    }
    /// The id to give `Chat.report_usage`.
    #[getter]
    fn step(&self) -> u64 {
        self.view.step()
    }
    /// The chat revision the view was built from.
    #[getter]
    fn revision(&self) -> u64 {
        self.view.revision()
    }
    /// Seconds the swap to the worker's prepared checkpoint took, when this view made one.
    /// Over the budget's nudge line: the harness message asking the model to compact.
    #[getter]
    fn nudge(&self) -> Option<String> {
        self.view.nudge().map(str::to_string)
    }

    #[getter]
    fn swap_seconds(&self) -> Option<f64> {
        self.view.swap().map(|d| d.as_secs_f64())
    }
    /// The view's messages as dicts: `seqs` (a `(start, end)` pair of the original
    /// messages), `role`, `parts` and `tokens`.
    #[getter]
    fn messages<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for m in self.view.messages() {
            let d = PyDict::new(py);
            d.set_item("seqs", (m.seqs.start, m.seqs.end))?;
            d.set_item("role", m.role.as_str())?;
            d.set_item("parts", parts_out(py, &m.parts)?)?;
            d.set_item("tokens", m.tokens)?;
            list.append(d)?;
        }
        Ok(list)
    }
    /// The view in the OpenAI chat format: a list of message dicts.
    fn openai<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_loads(py, &self.view.to_openai_json())
    }
    /// The view in the Anthropic messages format: `{"system": str, "messages": [...]}`.
    fn anthropic<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_loads(py, &self.view.to_anthropic_json())
    }
    fn __len__(&self) -> usize {
        self.view.messages().len()
    }
    fn __repr__(&self) -> String {
        format!(
            "View(decision={:?}, messages={}, estimate={})",
            self.decision(),
            self.view.messages().len(),
            self.view.estimate()
        )
    }
}

/// A checkpoint: a summary of messages `0..reach` built on `base_revision`, not yet
/// published (see `Chat.publish_checkpoint`).
#[pyclass(name = "Checkpoint", module = "undertext", frozen)]
#[derive(Debug)]
pub struct PyCheckpoint {
    pub(crate) cp: Arc<Checkpoint>,
}

impl PyCheckpoint {
    pub(crate) fn new(cp: Checkpoint) -> PyCheckpoint {
        PyCheckpoint { cp: Arc::new(cp) }
    }
    pub(crate) fn from_arc(cp: Arc<Checkpoint>) -> PyCheckpoint {
        PyCheckpoint { cp }
    }
}

#[pymethods]
impl PyCheckpoint {
    /// The revision it was built from.
    #[getter]
    fn base_revision(&self) -> u64 {
        self.cp.base_revision
    }
    /// The first seq it does not cover.
    #[getter]
    fn reach(&self) -> u64 {
        self.cp.reach
    }
    /// The summary of messages `0..reach`.
    #[getter]
    fn summary(&self) -> &str {
        &self.cp.summary
    }
    /// The id of the root of the summary tree.
    #[getter]
    fn root(&self) -> String {
        self.cp.root.to_string()
    }
    /// The summarizer's id.
    #[getter]
    fn summarizer(&self) -> &str {
        &self.cp.summarizer
    }
    /// The segments: `(start, end, id)` each.
    #[getter]
    fn segments(&self) -> Vec<(u64, u64, String)> {
        self.cp.segments.iter().map(|s| (s.range.start, s.range.end, s.id.to_string())).collect()
    }
    /// What the build did: `summarized`, `merged`, `cached`, `depth`.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.cp.stats;
        let d = PyDict::new(py);
        d.set_item("summarized", s.summarized)?;
        d.set_item("merged", s.merged)?;
        d.set_item("cached", s.cached)?;
        d.set_item("depth", s.depth)?;
        Ok(d)
    }
    fn __repr__(&self) -> String {
        format!(
            "Checkpoint(base_revision={}, reach={}, segments={})",
            self.cp.base_revision,
            self.cp.reach,
            self.cp.segments.len()
        )
    }
}
