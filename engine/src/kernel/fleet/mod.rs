//! Fleet mode (feature `fleet`): the same API on PostgreSQL, for harness processes on several
//! machines that share chats.
//!
//! PostgreSQL holds the truth: the catalog (owners, chats, batches of records with the same
//! encoded payloads as the log's) and, content-addressed, the blobs. Each open store keeps a
//! local replica (a private log and index in a scratch directory) that the engine reads as in
//! embedded mode; the seam is [`Remote`](crate::kernel::store::remote::Remote) behind the kernel's
//! `Core`. See `store/remote.rs` for the stream protocol and engine/FORMAT.md ("Fleet mode")
//! for the schema.

mod conn;
mod gc;
mod notify;
mod pg;
mod s3;
mod schema;
mod tls;
mod url;

use std::sync::Arc;

use crate::base::error::{Error, Result};
use crate::kernel::options::{Durability, Options};
use crate::kernel::store::Kernel;
use crate::kernel::store::remote::Remote;

pub(crate) use pg::Fleet;
pub use s3::{S3Retry, S3Url};
pub use schema::{MIN_USABLE, SCHEMA_VERSION, SchemaMode, SchemaStatus};
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
pub(crate) fn gc(url: &str, opts: Options) -> Result<crate::kernel::store::GcReport> {
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

/// The schema of the fleet database at `url` (no DDL): its version and this build's; see
/// `fleet/schema.rs`. CLI: `undertext --store URL fleet status`.
pub fn schema_status(url: &str) -> Result<SchemaStatus> {
    let fleet = Fleet::unchecked(&FleetUrl::parse(url)?)?;
    let mut c = fleet.client()?;
    let s = schema::status(&fleet, &mut c)?;
    fleet.put(c);
    Ok(s)
}

/// Creates Undertext's schema (this build's version) in the database at `url` when it holds
/// none, as the role the URL names (which then owns the tables: grant the application's role
/// its rights, docs/FLEET.md). A database that holds one is left as it is. Returns the
/// versions before and after. CLI: `undertext --store URL fleet init`.
pub fn init(url: &str) -> Result<(u32, u32)> {
    let fleet = Fleet::unchecked(&FleetUrl::parse(url)?)?;
    let mut c = fleet.client()?;
    let s = schema::status(&fleet, &mut c)?;
    let out = if s.database == 0 {
        schema::migrate(&fleet, &mut c, SCHEMA_VERSION)?
    } else {
        (s.database, s.database)
    };
    fleet.put(c);
    Ok(out)
}

/// Brings the schema of the database at `url` up to this build's version (creating it when
/// missing), in one transaction; returns the versions before and after. Processes using the
/// database may run meanwhile (a migration's DDL waits for their transactions, and they for
/// it). CLI: `undertext --store URL fleet migrate`.
pub fn migrate(url: &str) -> Result<(u32, u32)> {
    let fleet = Fleet::unchecked(&FleetUrl::parse(url)?)?;
    let mut c = fleet.client()?;
    let out = schema::migrate(&fleet, &mut c, SCHEMA_VERSION)?;
    fleet.put(c);
    Ok(out)
}

/// What change notification says of chat `chat` of `store` (`None`: the store does not
/// listen; see `fleet/notify.rs`): (epoch, highest version notified). The first call starts
/// the store's listener. For tests and benches; the engine reads it through its remote.
#[doc(hidden)]
pub fn notified(store: &crate::Store, chat: crate::ChatId) -> Option<(u64, u64)> {
    store.core().remote()?.notified(chat.0).map(|n| (n.epoch, n.version))
}

/// Where this process's fleet writes of chats spent their time so far, over every store:
/// (phase, nanoseconds, times), phases `lock` (the row lock's round trip and wait), `pull`
/// (other processes' batches), `build` (the engine between lock and commit), `blobs`,
/// `write` (the batch's statement), `commit`, `local` (the replica's append) and `held`
/// (lock and pull done to commit done). For benches (benches/README.md, fleet contention).
#[doc(hidden)]
pub fn write_phases() -> Vec<(&'static str, u64, u64)> {
    pg::phases::read()
}

/// The chats of `owner` titled `title` in the fleet store `store`, answered by the catalog
/// (schema version 3) without pulling the owner's chats; `None` when it cannot say (an older
/// schema, chats written before version 3) or `store` is not a fleet store. For tests and
/// benches, and what `Store::find_chats` by title should ask first (docs/FLEET.md).
#[doc(hidden)]
pub fn titled(store: &crate::Store, owner: &str, title: &str) -> Result<Option<Vec<crate::ChatId>>> {
    let Some(remote) = store.core().remote() else { return Ok(None) };
    Ok(remote.titled(owner, title)?.map(|ids| ids.into_iter().map(crate::ChatId).collect()))
}

/// Migrates the database at `url` to version `to` only (tests make older databases with it).
#[doc(hidden)]
pub fn migrate_to(url: &str, to: u32) -> Result<(u32, u32)> {
    let fleet = Fleet::unchecked(&FleetUrl::parse(url)?)?;
    let mut c = fleet.client()?;
    let out = schema::migrate(&fleet, &mut c, to)?;
    fleet.put(c);
    Ok(out)
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
