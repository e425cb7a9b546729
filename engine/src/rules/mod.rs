//! Floor 5, pure decisions over messages: pending [`approval`]s, [`compaction`] plans and
//! their linter, the [`budget`] guard that shapes a model view, and the one [`json`]
//! encoding every front-end speaks. No state and no I/O.
pub mod approval;
pub mod budget;
pub mod compaction;
pub mod json;
