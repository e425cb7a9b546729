//! Immutable per-chat snapshots and their lock-free publication.
//!
//! * [`SnapshotCell`] — publish an `Arc` and load it without locks (loom-checked).
//! * [`AppendVec`] — the message list shared by successive snapshots of one revision.

mod append_vec;
mod cell;
mod sync;

pub use append_vec::AppendVec;
pub use cell::SnapshotCell;
