//! Immutable per-chat snapshots and their lock-free publication.
//!
//! * [`SnapshotCell`] — publish an `Arc` and load it without locks (loom-checked).
//! * [`AppendVec`] — the message list shared by successive snapshots of one revision.

mod append_vec;
mod cell;
mod sync;

pub use append_vec::AppendVec;
pub(crate) use append_vec::PAGE;
pub use cell::SnapshotCell;
/// The `Arc` the cell holds: `std`'s, or loom's with the feature `loom`.
pub(crate) use sync::Arc as SnapArc;
