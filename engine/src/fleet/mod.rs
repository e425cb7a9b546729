//! Fleet mode (feature `fleet`): the same API on PostgreSQL, for harness processes on several
//! machines that share chats.
//!
//! PostgreSQL holds the truth: the catalog (owners, chats, batches of records with the same
//! encoded payloads as the log's) and, content-addressed, the blobs. Each open store keeps a
//! local replica (a private log and index in a scratch directory) that the engine reads as in
//! embedded mode; the seam is [`Remote`](crate::store::remote::Remote) behind the kernel's
//! `Core`. See `store/remote.rs` for the stream protocol and engine/FORMAT.md ("Fleet mode")
//! for the schema.

mod pg;
mod url;

pub(crate) use pg::Fleet;
pub use url::FleetUrl;

/// True when `path` names a fleet backend (`postgres://` or `postgresql://`) rather than a
/// directory.
pub fn is_fleet_url(path: &std::path::Path) -> bool {
    path.to_str().is_some_and(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
}
