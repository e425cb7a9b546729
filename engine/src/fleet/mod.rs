//! Fleet mode (feature `fleet`): the same API on PostgreSQL, for harness processes on several
//! machines that share chats.
//!
//! PostgreSQL holds the truth: the catalog (owners, chats, batches of records with the same
//! encoded payloads as the log's) and, content-addressed, the blobs. Each open store keeps a
//! local replica (a private log and index in a scratch directory) that the engine reads as in
//! embedded mode; the seam is [`Remote`](crate::store::remote::Remote) behind the kernel's
//! `Core`. See `store/remote.rs` for the stream protocol and engine/FORMAT.md ("Fleet mode")
//! for the schema.

mod conn;
mod gc;
mod pg;
mod s3;
mod tls;
mod url;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::options::{Durability, Options};
use crate::store::Kernel;
use crate::store::remote::Remote;

pub(crate) use pg::Fleet;
pub use s3::{S3Retry, S3Url};
pub use tls::SslMode;
pub use url::FleetUrl;

/// True when `path` names a fleet backend (`postgres://` or `postgresql://`) rather than a
/// directory.
pub fn is_fleet_url(path: &std::path::Path) -> bool {
    path.to_str().is_some_and(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
}

/// Connects to the PostgreSQL catalog at `url` and opens a local replica of it (durability
/// is PostgreSQL's commit, so the replica syncs nothing); see `Store::open`. Returns the
/// replica's kernel and its next chat id.
pub(crate) fn open(url: &str, opts: Options) -> Result<(Kernel, u64)> {
    connect(&FleetUrl::parse(url)?, opts).map(|(_, kernel, next_chat)| (kernel, next_chat))
}

/// Collects the fleet store at `url` while other processes use it: the records of deleted
/// chats, and the blobs nothing references that are older than `opts.gc_grace`; see
/// `Store::gc` and `fleet/gc.rs`.
pub(crate) fn gc(url: &str, opts: Options) -> Result<crate::store::GcReport> {
    let grace = opts.gc_grace;
    let mut u = FleetUrl::parse(url)?;
    // gc reads whole tables: on a large catalog one statement may take longer than a write's
    // default bound. A URL that names statement_timeout= keeps it.
    let named =
        url.split_once('?').is_some_and(|(_, q)| q.split('&').any(|p| p.starts_with("statement_timeout=")));
    if !named {
        u.statement_timeout = std::time::Duration::ZERO;
    }
    let (fleet, kernel, _) = connect(&u, opts)?;
    gc::collect(&fleet, &kernel.core, grace)
}

fn connect(u: &FleetUrl, opts: Options) -> Result<(Arc<Fleet>, Kernel, u64)> {
    let fleet = Arc::new(Fleet::connect(u)?);
    let local = Options { durability: Durability::None, create_if_missing: true, preallocate: false, ..opts };
    let (kernel, next_chat) = Kernel::open(fleet.replica_dir(), local)?;
    let remote: Arc<dyn Remote> = fleet.clone();
    kernel
        .core
        .remote
        .set(remote)
        .map_err(|_| Error::InvalidArgument("fleet: the replica already has a remote".into()))?;
    Ok((fleet, kernel, next_chat))
}
