//! Floor 1, what everything stands on: the [`error`] type, the file seam ([`io`]), the
//! lock-free [`snapshot`] cells and content addressing ([`blob`]). Nothing here knows a
//! message, a record or a chat.
pub mod blob;
pub mod error;
pub mod io;
pub mod snapshot;
