//! The PostgreSQL catalog and blob store of fleet mode, and the replica protocol (see
//! `store/remote.rs`).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::conn::{Conn, ConnectError, Param, Slot, Slots};

use super::notify::Notices;
use super::s3::S3;
use super::schema;
use super::tls::{self, MakeRustls, SslMode};
use super::url::{FleetUrl, show_time};
use crate::base::blob::chunk::Manifest;
use crate::base::blob::{BlobId, codec_flag_none, decompress};
use crate::base::error::{Conflict, Error, Result};
use crate::disk::record::{
    self, ArchiveRec, ChatRec, CheckpointRec, CompactionRec, GrantRec, HideRec, Kind, MetaRec, MsgRec,
    PinRec, RevRec,
};
use crate::kernel::store::core::{Committed, Core, RecordOut, Txn};
use crate::kernel::store::gc::{self, Holds};
use crate::kernel::store::remote::{ChatHead, Notified, Remote, WriteLock};
use crate::model::message::MetaField;

/// The `ut_settings` row naming the bucket and prefix that hold the database's S3 blobs.
const S3_BLOBS: &str = "s3_blobs";

/// A stream of batches (see `store/remote.rs`): a chat's (owner ""), an owner's own (chat 0),
/// or the global one (chat 0, owner "").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Stream {
    chat: u64,
    owner: String,
}

impl Stream {
    fn chat(id: u64) -> Stream {
        Stream { chat: id, owner: String::new() }
    }
}

/// Which chats of an owner [`Fleet::catch_up_listed`] brings up to date.
#[derive(Debug, Clone, Copy)]
enum Listed<'a> {
    /// Every chat of the owner.
    All,
    /// Those of these ids that are the owner's.
    Only(&'a [u64]),
    /// Those the catalog says are titled this, and those of these ids (the replica's own
    /// chats of that title) that are the owner's.
    Titled(&'a str, &'a [u64]),
    /// Those the catalog says have this extra field (key, value), those whose extra fields
    /// it does not know (written before schema version 5), and those of these ids (the
    /// replica's own chats with that field) that are the owner's.
    Extra(&'a str, &'a str, &'a [u64]),
    /// Those the catalog says grant one of these blobs, and those whose grants it does not
    /// know (written before schema version 5).
    Granting(&'a [BlobId]),
}

/// How far the local replica holds a stream.
#[derive(Debug, Default)]
struct Local {
    /// Versions appended to the local log (1..=applied).
    applied: u64,
    /// The last version pulled from the remote (not committed by this process).
    pulled: u64,
    /// The last version pulled that held more than appended messages (see
    /// [`ChatHead::changed`]).
    changed: u64,
}

/// A PostgreSQL catalog and blob store, shared by every process that opens the same URL.
pub(crate) struct Fleet {
    shown: String,
    /// The URL's settings, for the listening connection (notify.rs: the `postgres` crate's
    /// client).
    config: postgres::Config,
    /// The same settings, for the pool's connections (conn.rs: `tokio-postgres`'s client).
    pg: tokio_postgres::Config,
    /// TLS (`sslmode=`, `sslrootcert=`).
    tls: MakeRustls,
    /// The URL's bounds and timeouts (for messages, and `pooler=transaction`).
    limits: Limits,
    /// `BEGIN` and the timeouts as `SET LOCAL`s: what opens every transaction.
    begin: Arc<str>,
    /// Connections open (idle, held or in use), against `limits.pool_size`.
    slots: Arc<Slots>,
    idle: Mutex<Vec<Conn>>,
    streams: Mutex<HashMap<Stream, Arc<Mutex<Local>>>>,
    /// Chats locked by a write in progress: the connection holding the row lock, in a
    /// transaction, and the row as the lock read it (it cannot change until the commit).
    held: Mutex<HashMap<u64, (Conn, ChatRow, std::time::Instant)>>,
    /// The local replica's directory, made for this open and removed when it closes.
    replica: PathBuf,
    /// Blobs in S3-compatible storage (`?blobs=s3://…`); `ut_blobs` then keeps a row without
    /// payload for each.
    pub(super) s3: Option<S3>,
    /// The schema version the database was at when this store opened (schema.rs).
    pub(super) schema: std::sync::atomic::AtomicU32,
    /// Change notification (notify.rs): listened to when `listen` says so.
    pub(super) notices: Arc<Notices>,
    /// `notify=on` and a direct connection (a transaction pooler cannot carry a LISTEN).
    listen: bool,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("url", &self.shown)
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.replica) {
            tracing::warn!(error = %e, dir = %self.replica.display(), "removing a fleet replica failed");
        }
    }
}

impl Fleet {
    /// The local replica's directory (empty when connected).
    pub(crate) fn replica_dir(&self) -> &Path {
        &self.replica
    }

    /// Blob `id` as the remote stores it (its `ut_blobs` row, and in S3 mode its object), not
    /// verified yet; `None` when the remote does not list it.
    pub(super) fn stored(&self, id: &BlobId) -> Result<Option<StoredBlob>> {
        Ok(self.stored_many(std::slice::from_ref(id))?.pop().map(|(_, b)| b))
    }

    /// Those of blobs `ids` the remote lists, as [`Fleet::stored`] gives each, read in one
    /// statement (their objects, in S3 mode, one request each); in no particular order.
    pub(super) fn stored_many(&self, ids: &[BlobId]) -> Result<Vec<(BlobId, StoredBlob)>> {
        let keys: Vec<&[u8]> = ids.iter().map(|id| id.as_bytes().as_slice()).collect();
        let mut c = self.client()?;
        let rows = c
            .query("SELECT id, kind, codec, raw_len, payload FROM ut_blobs WHERE id = ANY($1)", &[&keys])
            .map_err(|e| self.err("read blobs", &e))?;
        self.put(c);
        let asked: HashMap<&[u8], &BlobId> = ids.iter().map(|id| (id.as_bytes().as_slice(), id)).collect();
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let key: Vec<u8> = self.col(row, 0)?;
            let Some(&id) = asked.get(key.as_slice()) else {
                return Err(self.bad(format!("a blob row whose id ({} bytes) was not asked for", key.len())));
            };
            out.push((*id, self.stored_row(id, row)?));
        }
        Ok(out)
    }

    /// Blob `id`'s `ut_blobs` row (`kind, codec, raw_len, payload` from column 1), its payload
    /// read from S3 when the row's is empty.
    fn stored_row(&self, id: &BlobId, row: &postgres::Row) -> Result<StoredBlob> {
        let (mut k, mut codec, mut raw_len): (i16, i16, i32) =
            (self.col(row, 1)?, self.col(row, 2)?, self.col(row, 3)?);
        let mut payload: Vec<u8> = self.col(row, 4)?;
        let mut from = String::new();
        if payload.is_empty() {
            // The payload is in object storage.
            let Some(s3) = &self.s3 else {
                return Err(self.bad(format!(
                    "blob {id}: stored in S3-compatible storage; open the store with ?blobs=s3://bucket/prefix"
                )));
            };
            let key = s3.key(&id.to_string());
            let Some(object) = s3.get(&key)? else {
                return Err(self.bad(format!(
                    "blob {id}: listed in ut_blobs but missing from {} (key {key})",
                    s3.shown
                )));
            };
            if object.len() < 6 {
                return Err(self.bad(format!(
                    "blob {id}: object {key} in {} is {} bytes, too short",
                    s3.shown,
                    object.len()
                )));
            }
            (k, codec) = (i16::from(object[0]), i16::from(object[1]));
            raw_len = i32::from_le_bytes([object[2], object[3], object[4], object[5]]);
            payload = object[6..].to_vec();
            from = format!(" (object {key} in {})", s3.shown);
        }
        let (Ok(kind), Ok(codec), Ok(raw_len)) =
            (u8::try_from(k), u8::try_from(codec), u32::try_from(raw_len))
        else {
            return Err(self.bad(format!(
                "blob {id}{from}: stored with kind {k}, codec {codec}, length {raw_len}: out of range"
            )));
        };
        Ok(StoredBlob { kind, codec, raw_len, payload, from })
    }

    /// The local record of blob `id` as the remote stored it, once verified against its id
    /// (a blob's content hash; a manifest decodes, its id checked when reassembled); `None`
    /// for a record kind this build does not know.
    fn verified(&self, id: &BlobId, stored: StoredBlob) -> Result<Option<RecordOut>> {
        let StoredBlob { kind: k, codec, raw_len, payload, from } = stored;
        let wrong = |why: String| self.bad(format!("blob {id}{from}: {why}"));
        if payload.len() < 32 || payload[..32] != id.0 {
            return Err(wrong("the stored record does not carry this id".into()));
        }
        let kind = Kind::of(k);
        match kind {
            Some(Kind::Blob) => {
                let body = &payload[32..];
                let content = if codec == codec_flag_none() {
                    std::borrow::Cow::Borrowed(body)
                } else {
                    std::borrow::Cow::Owned(decompress(codec, body, raw_len as usize).map_err(&wrong)?)
                };
                let found = BlobId::of(&content);
                if found != *id {
                    return Err(wrong(format!("content hash: expected {id}, found {found}")));
                }
            }
            Some(Kind::Manifest) => {
                Manifest::decode(&payload).map_err(&wrong)?;
            }
            _ => {
                return Err(wrong(format!("stored as record kind {k}, expected a blob or manifest")));
            }
        }
        let Some(kind) = kind else { return Ok(None) };
        Ok(Some(RecordOut { kind, codec, raw_len, payload, blob: Some(*id), chat: None, listing: None }))
    }

    /// Connects to `url`, creating or migrating the schema as `schema=` says (schema.rs), and
    /// makes an empty directory for the local replica.
    pub(crate) fn connect(url: &FleetUrl) -> Result<Fleet> {
        let fleet = Fleet::unchecked(url)?;
        let mut c = fleet.client()?;
        // The schema's DDL takes table locks even when every object exists (an index's
        // table, the ALTER's), which writers' transactions would wait on, and it on theirs:
        // it runs only when the database is older than this build (schema.rs).
        let version = schema::at_open(&fleet, &mut c, url.schema_mode)?;
        fleet.schema.store(version, std::sync::atomic::Ordering::Relaxed);
        if let Some(s3) = &fleet.s3 {
            fleet.claim_s3_location(&mut c, s3)?;
        }
        fleet.put(c);
        Ok(fleet)
    }

    /// The chats of `owner` titled `title`, from the catalog (schema version 3): `None` when
    /// the catalog cannot say (an older schema, or a chat of the owner written before
    /// version 3, whose title it does not hold).
    fn find_titled(&self, owner: &str, title: &str) -> Result<Option<Vec<u64>>> {
        if self.schema.load(std::sync::atomic::Ordering::Relaxed) < 3 {
            return Ok(None);
        }
        let mut c = self.client()?;
        let rows = c
            .query(
                "SELECT id, title IS NULL FROM ut_chats WHERE owner = $1 AND (title = $2 OR title IS NULL) ORDER BY id",
                &[&owner, &title],
            )
            .map_err(|e| self.err("find chats by title", &e))?;
        self.put(c);
        let mut ids = Vec::with_capacity(rows.len());
        for r in &rows {
            if self.col::<bool>(r, 1)? {
                return Ok(None);
            }
            ids.push(self.num(r, 0)?);
        }
        Ok(Some(ids))
    }

    /// Connects to `url` without looking at the schema (the operator's `init` and `migrate`).
    pub(super) fn unchecked(url: &FleetUrl) -> Result<Fleet> {
        let mut config: tokio_postgres::Config = url.postgres.parse().map_err(|e: postgres::Error| {
            Error::InvalidArgument(format!("fleet URL {}: {}", url.shown, describe(&e)))
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        config.ssl_mode(url.ssl_mode.postgres());
        let tls = tls::connector(url.ssl_mode, url.ssl_root.as_deref())
            .map_err(|why| Error::InvalidArgument(format!("fleet URL {}: {why}", url.shown)))?;
        let limits = Limits::of(url);
        let ms = |d: Duration| d.as_millis();
        let settings = [
            ("lock_timeout", ms(limits.lock)),
            ("statement_timeout", ms(limits.statement)),
            ("idle_in_transaction_session_timeout", ms(limits.idle_in_transaction)),
        ];
        // The timeouts hold for every statement of a direct connection (startup options; a
        // transaction pooler refuses them), and, `SET LOCAL`, for every transaction either way.
        if !limits.pooled {
            let mine: Vec<String> = settings.iter().map(|(k, v)| format!("-c {k}={v}")).collect();
            let options = match config.get_options() {
                Some(theirs) if !theirs.is_empty() => format!("{theirs} {}", mine.join(" ")),
                _ => mine.join(" "),
            };
            config.options(&options);
        }
        let mut begin = String::from("BEGIN");
        for (k, v) in settings {
            begin.push_str(&format!("; SET LOCAL {k} = {v}"));
        }
        if !url.notify {
            // Read by the schema's notification trigger (schema.rs, version 2).
            begin.push_str("; SET LOCAL undertext.notify = off");
        }
        let s3 = url.s3.as_ref().map(S3::new).transpose()?;
        let replica = make_replica_dir(url)?;
        let fleet = Fleet {
            replica,
            s3,
            shown: url.shown.clone(),
            config: postgres::Config::from(config.clone()),
            pg: config,
            tls,
            limits,
            begin: begin.into(),
            slots: Arc::new(Slots::default()),
            idle: Mutex::new(Vec::new()),
            streams: Mutex::new(HashMap::new()),
            held: Mutex::new(HashMap::new()),
            schema: std::sync::atomic::AtomicU32::new(0),
            notices: Arc::new(Notices::default()),
            listen: url.notify && !url.transaction_pooler,
        };
        Ok(fleet)
    }

    /// Makes sure the database's S3 blobs are where this open looks for them. A row of
    /// `ut_blobs` with an empty payload says "in object storage" without saying where, so
    /// one database keeps its objects under one bucket and prefix: the first open with
    /// `blobs=s3://` records them in `ut_settings`, and an open naming another bucket or
    /// prefix is refused (it would read rows whose objects it cannot find, and skip uploads
    /// its own location lacks). The endpoint is not part of it: the same bucket behind
    /// another address (a proxy, TLS) is the same place.
    fn claim_s3_location(&self, c: &mut Conn, s3: &S3) -> Result<()> {
        let ours = s3.location();
        let what = "record where the database keeps its S3 blobs";
        // Two statements: the second's snapshot sees a row another open committed meanwhile.
        c.execute(
            "INSERT INTO ut_settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            &[&S3_BLOBS, &ours],
        )
        .map_err(|e| self.err(what, &e))?;
        let row = c
            .query_opt("SELECT value FROM ut_settings WHERE name = $1", &[&S3_BLOBS])
            .map_err(|e| self.err(what, &e))?
            .ok_or_else(|| {
                self.bad(format!("{what}: expected the row {S3_BLOBS:?} of ut_settings, found none"))
            })?;
        let theirs: String = self.col(&row, 0)?;
        if theirs != ours {
            return Err(Error::InvalidArgument(format!(
                "fleet URL {}: this database keeps its S3 blobs in {theirs}, the URL names {ours}: \
                 open it with blobs={theirs} (another endpoint for the same bucket is fine)",
                self.shown
            )));
        }
        Ok(())
    }

    /// `e`, which happened doing `what`, as the store's error. A timeout of the URL's names
    /// the wait and the setting: see [`Fleet::err_waiting`].
    pub(super) fn err(&self, what: &str, e: &postgres::Error) -> Error {
        self.err_waiting(what, "a lock or the statement", e)
    }

    /// `e`, which happened doing `what` while it may have waited for `wait` (such as "chat
    /// 7's row lock"): when one of the URL's timeouts ended it, the message says how long it
    /// waited for what, and which setting to raise.
    pub(super) fn err_waiting(&self, what: &str, wait: &str, e: &postgres::Error) -> Error {
        let l = &self.limits;
        let reason = match e.code().map(|c| c.code()) {
            // lock_not_available: "canceling statement due to lock timeout".
            Some("55P03") if l.lock > Duration::ZERO => format!(
                "{what}: waited {} for {wait} (lock_timeout={}): another transaction holds it \
                 (pg_locks and pg_stat_activity name it); nothing was written; {}",
                show_time(l.lock),
                show_time(l.lock),
                describe(e)
            ),
            // query_canceled: by statement_timeout (or by an operator's pg_cancel_backend).
            Some("57014") if l.statement > Duration::ZERO => format!(
                "{what}: waited {} for {wait} (statement_timeout={}), unless an operator canceled it; \
                 nothing was written; {}",
                show_time(l.statement),
                show_time(l.statement),
                describe(e)
            ),
            // The server ended this connection: it sat in a transaction longer than allowed.
            Some("25P03") => format!(
                "{what}: the server ended the connection after it sat idle in a transaction for {} \
                 (idle_in_transaction_session_timeout={}); nothing was written; {}",
                show_time(l.idle_in_transaction),
                show_time(l.idle_in_transaction),
                describe(e)
            ),
            _ => format!("{what}: {}", describe(e)),
        };
        Error::Backend { url: self.shown.clone(), reason }
    }

    /// Column `i` of `row` (a type mismatch is an error, never a panic).
    pub(super) fn col<'a, T: postgres::types::FromSql<'a>>(
        &self,
        row: &'a postgres::Row,
        i: usize,
    ) -> Result<T> {
        row.try_get(i).map_err(|e| self.err("read a column", &e))
    }

    /// A non-negative bigint column as u64.
    pub(super) fn num(&self, row: &postgres::Row, i: usize) -> Result<u64> {
        let v: i64 = self.col(row, i)?;
        u64::try_from(v)
            .map_err(|_| self.bad(format!("expected a non-negative number in column {i}, found {v}")))
    }

    fn chat_row(&self, r: &postgres::Row) -> Result<ChatRow> {
        Ok(ChatRow {
            version: self.num(r, 0)?,
            revision: self.num(r, 1)?,
            next_seq: self.num(r, 2)?,
            published_reach: self.col(r, 3)?,
            deleted: self.col(r, 4)?,
        })
    }

    /// The row of a statement that returns one (an aggregate, an update of a row known to
    /// exist), run doing `what`.
    fn one(
        &self,
        what: &str,
        r: std::result::Result<Option<postgres::Row>, postgres::Error>,
    ) -> Result<postgres::Row> {
        r.map_err(|e| self.err(what, &e))?
            .ok_or_else(|| self.bad(format!("{what}: expected a row, found none")))
    }

    pub(super) fn bad(&self, reason: String) -> Error {
        Error::Backend { url: self.shown.clone(), reason }
    }

    /// The blobs manifest `id` (its record's `payload`) names, for the walks that keep a
    /// write's references whole.
    fn manifest_refs(&self, id: &BlobId, payload: &[u8]) -> Result<Vec<BlobId>> {
        let m = Manifest::decode(payload).map_err(|why| self.bad(format!("manifest {id}: {why}")))?;
        Ok(m.refs().collect())
    }

    /// A connection: an idle one, else a new one while fewer than `pool_size` are open,
    /// else one given back within `pool_timeout` (then an error that names the wait).
    pub(super) fn client(&self) -> Result<Conn> {
        let deadline = std::time::Instant::now() + self.limits.pool_timeout;
        loop {
            loop {
                // The guard is a temporary: a closed connection is dropped (freeing its
                // slot) with no lock held.
                let popped = self.idle.lock().pop();
                match popped {
                    Some(c) if !c.is_closed() => return Ok(c),
                    Some(closed) => drop(closed),
                    None => break,
                }
            }
            let mut open = self.slots.open.lock();
            if *open < self.limits.pool_size {
                *open += 1;
                drop(open);
                return self.connect_new(Slot(self.slots.clone()));
            }
            // `put` pushes before it takes `open` to signal: checked under `open`, a
            // connection given back is either seen here or signalled after the wait began.
            if !self.idle.lock().is_empty() {
                continue;
            }
            // A write holding its chat's lock (and connection) that needs a second one (to
            // upload blobs, committed apart) gets it beyond the bound: waiting, every writer
            // could hold one and wait for another. `put` closes it when the write is done.
            if self.in_write() {
                *open += 1;
                drop(open);
                return self.connect_new(Slot(self.slots.clone()));
            }
            if self.slots.freed.wait_until(&mut open, deadline).timed_out() {
                return Err(self.bad(format!(
                    "waited {} for one of this store's {} (pool_timeout={}, pool_size={}): every one \
                     is in use; raise pool_size in the URL, or look for calls that hold one",
                    show_time(self.limits.pool_timeout),
                    match self.limits.pool_size {
                        1 => "1 connection".to_string(),
                        n => format!("{n} connections"),
                    },
                    show_time(self.limits.pool_timeout),
                    self.limits.pool_size
                )));
            }
        }
    }

    /// Opens a connection in `slot`.
    fn connect_new(&self, slot: Slot) -> Result<Conn> {
        match Conn::connect(&self.pg, self.tls.clone(), self.limits.pooled, self.begin.clone(), slot) {
            Ok(c) => Ok(c),
            Err(ConnectError::Runtime(e)) => {
                Err(self.bad(format!("connect: expected a runtime for the connection, found an error: {e}")))
            }
            Err(ConnectError::Postgres(e)) => {
                let mut err = self.err("connect", &e);
                if let Error::Backend { reason, .. } = &mut err
                    && reason.contains("unsupported startup parameter")
                    && !self.limits.pooled
                {
                    // PgBouncer refuses the startup options that carry the timeouts.
                    reason.push_str(
                        " (through a transaction pooler such as PgBouncer? add pooler=transaction to the URL)",
                    );
                }
                if let Error::Backend { reason, .. } = &mut err
                    && (reason.contains("TLS") || reason.contains("certificate"))
                {
                    let roots = self.tls.root.as_ref().map_or("system".into(), |p| p.display().to_string());
                    let host = self.pg.get_hosts().iter().find_map(|h| match h {
                        tokio_postgres::config::Host::Tcp(name) => Some(name.clone()),
                        _ => None,
                    });
                    let expected = match (self.tls.mode, host) {
                        (SslMode::VerifyFull, Some(host)) => {
                            format!("a certificate for {host} from an authority of sslrootcert={roots}")
                        }
                        (SslMode::VerifyCa | SslMode::VerifyFull, _) => {
                            format!("a certificate from an authority of sslrootcert={roots}")
                        }
                        (SslMode::Require, _) if self.tls.root.is_some() => {
                            format!("a certificate from an authority of sslrootcert={roots}")
                        }
                        _ => "a TLS session (the certificate unchecked)".to_string(),
                    };
                    reason.push_str(&format!(" (sslmode={}: expected {expected})", self.tls.mode.name()));
                }
                Err(err)
            }
        }
    }

    /// Marks this thread as holding (`true`) or no longer holding a chat's lock of this
    /// store (between `lock_chat` and the commit or release).
    fn writing(&self, on: bool) {
        let me = Arc::as_ptr(&self.slots) as usize;
        WRITES.with(|w| {
            let mut w = w.borrow_mut();
            if on {
                w.push(me);
            } else if let Some(i) = w.iter().position(|p| *p == me) {
                w.swap_remove(i);
            }
        });
    }

    /// True when this thread holds a chat's lock of this store.
    fn in_write(&self) -> bool {
        let me = Arc::as_ptr(&self.slots) as usize;
        WRITES.with(|w| w.borrow().contains(&me))
    }

    /// Gives a connection back for reuse (a closed one is dropped, freeing its slot, and so
    /// is one opened beyond `pool_size` for a write).
    pub(super) fn put(&self, c: Conn) {
        if c.is_closed() || *self.slots.open.lock() > self.limits.pool_size {
            return;
        }
        self.idle.lock().push(c);
        let _open = self.slots.open.lock();
        self.slots.freed.notify_one();
    }

    fn local(&self, s: &Stream) -> Arc<Mutex<Local>> {
        self.streams.lock().entry(s.clone()).or_default().clone()
    }

    /// Appends to the local log every batch of stream `s` after the replica's version (held
    /// by the caller in `local`), in version order; a version that does not follow is damage.
    fn pull(&self, c: &mut Conn, core: &Core, s: &Stream, local: &mut Local) -> Result<()> {
        let rows = c
            .query(
                // A batch left without records (gc dropped those of a deleted chat) still
                // counts: the versions stay dense.
                PULL_BATCHES,
                &[&(s.chat as i64), &s.owner, &(local.applied as i64)],
            )
            .map_err(|e| self.err("read new batches", &e))?;
        self.apply(core, s, local, rows.iter().map(|r| self.pulled(r, 0)))
    }

    /// Columns `first`, `first + 1` and `first + 2` of `row`: a batch's version, a record's
    /// kind and payload.
    fn pulled(&self, row: &postgres::Row, first: usize) -> Result<Pulled> {
        Ok((self.num(row, first)?, self.col(row, first + 1)?, self.col(row, first + 2)?))
    }

    /// Appends to the local log the batches of stream `s` that `rows` carry (a batch's
    /// version, then a record's kind and payload, both `None` for a batch without records; in
    /// version order, each batch's records in order), skipping versions the replica (`local`)
    /// already holds; a version that does not follow is damage.
    fn apply(
        &self,
        core: &Core,
        s: &Stream,
        local: &mut Local,
        rows: impl IntoIterator<Item = Result<Pulled>>,
    ) -> Result<()> {
        let mut txn = Txn::default();
        let mut at = local.applied;
        let mut changed = local.changed;
        for row in rows {
            let (version, kind, payload) = row?;
            if version <= local.applied {
                continue;
            }
            if version != at {
                if !txn.records.is_empty() {
                    core.append_local(std::mem::take(&mut txn))?;
                }
                if at > local.applied {
                    (local.applied, local.pulled, local.changed) = (at, at, changed);
                }
                if version != at + 1 {
                    return Err(self.bad(format!(
                        "stream (chat {}, owner {:?}): expected batch version {}, found {version}",
                        s.chat,
                        s.owner,
                        at + 1
                    )));
                }
                at = version;
            }
            let (Some(k), Some(payload)) = (kind, payload) else {
                continue;
            };
            let k = u8::try_from(k).ok().and_then(Kind::of).ok_or_else(|| {
                self.bad(format!("record kind {k} unknown to this build (written by a newer one?)"))
            })?;
            if !appends_only(k) {
                changed = version;
            }
            txn.push(RecordOut::history(k, payload));
        }
        if !txn.records.is_empty() {
            core.append_local(txn)?;
        }
        if at > local.applied {
            (local.applied, local.pulled, local.changed) = (at, at, changed);
        }
        Ok(())
    }

    /// Brings stream `s` up to `version` (pulling on `c`); returns the replica's (applied,
    /// pulled, changed) versions of it.
    fn catch_up(&self, c: &mut Conn, core: &Core, s: &Stream, version: u64) -> Result<(u64, u64, u64)> {
        let local = self.local(s);
        let mut l = local.lock();
        if l.applied < version {
            self.pull(c, core, s, &mut l)?;
        }
        Ok((l.applied, l.pulled, l.changed))
    }

    /// Brings the replica up to `owner`'s own stream (the grants made outside a chat, e.g. by
    /// `Store::put_blobs`); returns the connection it used.
    fn catch_up_own_stream(&self, core: &Core, owner: &str) -> Result<Conn> {
        let mut c = self.client()?;
        let own = match c
            .query_opt("SELECT version FROM ut_owners WHERE owner = $1", &[&owner])
            .map_err(|e| self.err("read the owner", &e))?
        {
            Some(r) => self.num(&r, 0)?,
            None => 0,
        };
        self.catch_up(&mut c, core, &Stream { chat: 0, owner: owner.to_string() }, own)?;
        Ok(c)
    }

    /// Brings the replica up to the chats of `owner` that `which` names with the batches it
    /// lacks, in one statement on `c` (one round trip, one snapshot) whatever the number of
    /// chats: the versions this replica holds go with it. Returns the chats (id, head),
    /// deleted ones included; `None` only for [`Listed::Titled`] when the catalog does not
    /// know the title of a chat of the owner (nothing is pulled then).
    fn catch_up_listed(
        &self,
        mut c: Conn,
        core: &Core,
        owner: &str,
        which: Listed<'_>,
    ) -> Result<Option<Vec<(u64, ChatHead)>>> {
        let known: Vec<(u64, Arc<Mutex<Local>>)> = self
            .streams
            .lock()
            .iter()
            .filter(|(s, _)| s.owner.is_empty() && s.chat != 0)
            .map(|(s, l)| (s.chat, l.clone()))
            .collect();
        let (mut ids, mut applied): (Vec<i64>, Vec<i64>) = (Vec::new(), Vec::new());
        for (chat, l) in &known {
            let v = l.lock().applied;
            if v > 0 {
                ids.push(*chat as i64);
                applied.push(v as i64);
            }
        }
        let rows = match which {
            Listed::All | Listed::Only(_) => {
                let only: Option<Vec<i64>> = match which {
                    Listed::Only(o) => Some(o.iter().map(|&i| i as i64).collect()),
                    _ => None,
                };
                c.query(OWNER_CATCH_UP, &[&owner, &ids, &applied, &only])
                    .map_err(|e| self.err("read the owner's chats", &e))?
            }
            Listed::Titled(title, also) => {
                let also: Vec<i64> = also.iter().map(|&i| i as i64).collect();
                let rows = c
                    .query(TITLED_CATCH_UP, &[&owner, &ids, &applied, &title, &also])
                    .map_err(|e| self.err("find chats by title", &e))?;
                for r in &rows {
                    if self.col::<bool>(r, 6)? {
                        self.put(c);
                        return Ok(None);
                    }
                }
                rows
            }
            Listed::Granting(blobs) => {
                let blobs: Vec<&[u8]> = blobs.iter().map(|b| b.0.as_slice()).collect();
                c.query(GRANTING_CATCH_UP, &[&owner, &ids, &applied, &blobs])
                    .map_err(|e| self.err("find the chats granting a blob", &e))?
            }
            Listed::Extra(key, value, also) => {
                let also: Vec<i64> = also.iter().map(|&i| i as i64).collect();
                c.query(EXTRA_CATCH_UP, &[&owner, &ids, &applied, &key, &value, &also])
                    .map_err(|e| self.err("find chats by an extra field", &e))?
            }
        };
        self.put(c);
        let mut out: Vec<(u64, ChatHead)> = Vec::new();
        let mut i = 0;
        while i < rows.len() {
            let id = self.num(&rows[i], 0)?;
            let mut j = i + 1;
            while j < rows.len() && self.num(&rows[j], 0)? == id {
                j += 1;
            }
            let (version, deleted) = (self.num(&rows[i], 1)?, self.col(&rows[i], 2)?);
            let s = Stream::chat(id);
            let local = self.local(&s);
            let mut l = local.lock();
            // Rows of a chat without new batches carry NULL batch columns.
            let batches: Vec<&postgres::Row> =
                rows[i..j].iter().filter(|r| matches!(r.try_get::<_, Option<i64>>(3), Ok(Some(_)))).collect();
            if l.applied < version && !batches.is_empty() {
                self.apply(core, &s, &mut l, batches.into_iter().map(|r| self.pulled(r, 3)))?;
            }
            out.push((
                id,
                ChatHead { version, deleted, pulled: l.pulled, applied: l.applied, changed: l.changed },
            ));
            i = j;
        }
        Ok(Some(out))
    }

    /// Uploads blob records (content-addressed: a blob already stored is left as it is)
    /// before the catalog transaction that references them, each step committed on its own:
    /// first their `ut_blobs` rows ([`Fleet::store_rows`]), then, in S3 mode, a HEAD per blob
    /// and a PUT when the object is missing (the row holds an empty payload). The row comes
    /// first so that a collection never deletes an object that a write found and is about to
    /// reference.
    fn upload(&self, blobs: &[&RecordOut]) -> Result<()> {
        if blobs.iter().all(|r| r.blob.is_none()) {
            return Ok(());
        }
        let mut c = self.client()?;
        let blobs = self.store_rows(&mut c, blobs, &[])?;
        self.put(c);
        if let Some(s3) = &self.s3 {
            for (id, r) in blobs {
                let key = s3.key(&id.to_string());
                if !s3.exists(&key)? {
                    let mut object = Vec::with_capacity(6 + r.payload.len());
                    object.push(r.kind.byte());
                    object.push(r.codec);
                    object.extend_from_slice(&r.raw_len.to_le_bytes());
                    object.extend_from_slice(&r.payload);
                    s3.put(&key, &object)?;
                }
            }
        }
        Ok(())
    }

    /// One statement on `c` that inserts each blob record's `ut_blobs` row (with its payload,
    /// or an empty one in S3 mode) or, when it is there, marks it fresh (`stored_at` now, no
    /// longer doomed), waiting for a collection that is deleting it to finish (see `gc.rs`),
    /// and keeps the blobs of `kept` (see [`BlobRows`]). Returns the blobs carried, sorted by
    /// id, each once. (A chat's batch with blobs in PostgreSQL upserts the same rows in its
    /// own statement instead: [`Fleet::write_batch`].)
    fn store_rows<'r>(
        &self,
        c: &mut Conn,
        blobs: &[&'r RecordOut],
        kept: &'r [RecordOut],
    ) -> Result<Vec<(BlobId, &'r RecordOut)>> {
        let rows = BlobRows::new(blobs, kept);
        if rows.all.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, kinds, codecs, lens, payloads) = rows.params(self.s3.is_some());
        let gone = c
            .query(
                "WITH bl AS ( \
                     INSERT INTO ut_blobs (id, kind, codec, raw_len, payload) \
                     SELECT * FROM unnest($1::bytea[], $2::smallint[], $3::smallint[], $4::integer[], $5::bytea[]) \
                     ON CONFLICT (id) DO UPDATE SET stored_at = now(), doomed = false \
                     RETURNING id, kind \
                 ) SELECT id FROM bl WHERE kind < 0",
                &[&ids, &kinds, &codecs, &lens, &payloads],
            )
            .map_err(|e| self.err("store blobs", &e))?;
        let gone = gone.iter().map(|r| self.blob_id(r, 0)).collect::<Result<Vec<_>>>()?;
        self.fill_gone(c, &rows, &gone)?;
        Ok(rows.all.iter().filter(|(_, _, carried)| *carried).map(|(id, r, _)| (*id, *r)).collect())
    }

    /// Fills, in the transaction that inserted them, the placeholder rows of kept blobs whose
    /// rows were gone (`gone`, collected meanwhile), from the replica's copies.
    fn fill_gone(&self, c: &mut Conn, rows: &BlobRows<'_>, gone: &[BlobId]) -> Result<()> {
        if gone.is_empty() {
            return Ok(());
        }
        let mut fill: Vec<(&BlobId, &RecordOut)> = Vec::with_capacity(gone.len());
        for id in gone {
            match rows.all.binary_search_by_key(id, |(id, _, _)| *id) {
                Ok(i) if !rows.all[i].2 => fill.push((id, rows.all[i].1)),
                _ => return Err(self.bad(format!("blob {id}: a placeholder row this write did not ask for"))),
            }
        }
        let ids: Vec<&[u8]> = fill.iter().map(|(id, _)| id.as_bytes().as_slice()).collect();
        let kinds: Vec<i16> = fill.iter().map(|(_, r)| i16::from(r.kind)).collect();
        let codecs: Vec<i16> = fill.iter().map(|(_, r)| i16::from(r.codec)).collect();
        let lens: Vec<i32> = fill.iter().map(|(_, r)| r.raw_len as i32).collect();
        let payloads: Vec<&[u8]> = fill.iter().map(|(_, r)| r.payload.as_slice()).collect();
        c.execute(
            "UPDATE ut_blobs b SET kind = x.kind, codec = x.codec, raw_len = x.raw_len, payload = x.payload \
             FROM unnest($1::bytea[], $2::smallint[], $3::smallint[], $4::integer[], $5::bytea[]) \
                 AS x (id, kind, codec, raw_len, payload) \
             WHERE b.id = x.id",
            &[&ids, &kinds, &codecs, &lens, &payloads],
        )
        .map_err(|e| self.err("store collected blobs again", &e))
    }

    /// The blobs that `txn`'s records reference without carrying them (content this process
    /// already held, so not uploaded again), before a chat's catalog transaction: with a
    /// manifest, its chunks; each read from the local replica. `None` when the replica lacks
    /// one of them (then [`Fleet::keep_referenced`] keeps them, committed apart).
    fn kept_locally(&self, core: &Core, txn: &Txn) -> Result<Option<Vec<RecordOut>>> {
        let mut want = self.referenced(txn)?;
        let mut seen: HashSet<BlobId> = txn.records.iter().filter_map(|r| r.blob).collect();
        let mut out = Vec::new();
        while let Some(id) = want.pop() {
            if !seen.insert(id) {
                continue;
            }
            let Some(r) = local_record(core, &id)? else { return Ok(None) };
            if r.kind == Kind::Manifest {
                want.extend(self.manifest_refs(&id, &r.payload)?);
            }
            out.push(r);
        }
        Ok(Some(out))
    }

    /// The blobs `txn`'s records reference without carrying them (see
    /// [`Fleet::keep_referenced`]).
    fn referenced(&self, txn: &Txn) -> Result<Vec<BlobId>> {
        let carried: HashSet<BlobId> = txn.records.iter().filter_map(|r| r.blob).collect();
        let mut want: Vec<BlobId> = Vec::new();
        for r in txn.records.iter().filter(|r| r.blob.is_none()) {
            let bad =
                |why: String| Error::InvalidArgument(format!("fleet commit: record kind {}: {why}", r.kind));
            if let Some(Holds::Grant(ids) | Holds::Refs(ids)) =
                gc::holds(r.kind, &r.payload, &bad, &mut |_| Ok(None))?
            {
                want.extend(ids.into_iter().filter(|id| !carried.contains(id)));
            }
        }
        Ok(want)
    }

    /// Keeps the blobs that `txn`'s records reference without carrying them (content this
    /// process already held, so did not upload again) when they cannot be kept in the
    /// catalog transaction ([`Fleet::store_rows`]: blobs in S3, or content the replica lacks):
    /// marks their rows fresh, so that a concurrent collection spares them, and uploads again,
    /// from the local replica, any that a collection has deleted or is deleting. A manifest's
    /// chunks are kept with it. A message body's own references (attachments, archives) are
    /// held by their grants. Committed before the catalog transaction, in statements of their
    /// own: in the catalog transaction, these row locks would be taken after those of the
    /// blobs it carries, out of id order, and two writers could deadlock.
    fn keep_referenced(&self, core: &Core, txn: &Txn) -> Result<()> {
        let mut want = self.referenced(txn)?;
        while !want.is_empty() {
            want.sort();
            want.dedup();
            let ids: Vec<&[u8]> = want.iter().map(|id| id.as_bytes().as_slice()).collect();
            let mut c = self.client()?;
            let rows = c
                .query(
                    "UPDATE ut_blobs SET stored_at = now() WHERE id = ANY($1) AND NOT doomed RETURNING id, kind",
                    &[&ids],
                )
                .map_err(|e| self.err("keep referenced blobs", &e))?;
            self.put(c);
            let mut kept = HashSet::new();
            let mut next = Vec::new();
            for row in rows {
                let id = self.blob_id(&row, 0)?;
                kept.insert(id);
                if self.col::<i16>(&row, 1)? == i16::from(Kind::Manifest) {
                    let m = match local_record(core, &id)? {
                        Some(r) => r.payload,
                        None => self.stored(&id)?.map(|s| s.payload).unwrap_or_default(),
                    };
                    next.extend(self.manifest_refs(&id, &m)?);
                }
            }
            let mut again = Vec::new();
            for id in want.iter().filter(|id| !kept.contains(id)) {
                let Some(r) = local_record(core, id)? else {
                    return Err(self.bad(format!(
                        "blob {id}: referenced by this write but collected by gc, and this process holds no copy \
                         of it: put it again; nothing was written"
                    )));
                };
                if r.kind == Kind::Manifest {
                    next.extend(self.manifest_refs(id, &r.payload)?);
                }
                again.push(r);
            }
            self.upload(&again.iter().collect::<Vec<_>>())?;
            want = next;
        }
        Ok(())
    }

    /// A bytea column holding a blob id.
    pub(super) fn blob_id(&self, row: &postgres::Row, i: usize) -> Result<BlobId> {
        let b: &[u8] = self.col(row, i)?;
        <[u8; 32]>::try_from(b).map(BlobId).map_err(|_| {
            self.bad(format!("expected a 32-byte blob id in column {i}, found {} bytes", b.len()))
        })
    }

    /// The stream a transaction's records belong to: the chat they name; else the owner of
    /// its grants (the owner's own grants); else the global stream.
    fn stream_of(&self, txn: &Txn) -> Result<Stream> {
        let chats = crate::disk::index::batch_chats(
            txn.records.iter().filter(|r| r.blob.is_none()).map(|r| (r.kind, r.payload.as_slice())),
        );
        match chats.as_slice() {
            [one] => return Ok(Stream::chat(*one)),
            [] => {}
            many => {
                return Err(Error::InvalidArgument(format!(
                    "fleet mode: one transaction names chats {many:?}; expected at most one"
                )));
            }
        }
        for r in txn.records.iter().filter(|r| r.blob.is_none()) {
            let owner = match r.kind {
                Kind::Grant => record::decode::<GrantRec>(&r.payload, "grant").map(|g| g.owner),
                Kind::Archive => record::decode::<ArchiveRec>(&r.payload, "archive").map(|a| a.owner),
                _ => continue,
            };
            return owner.map(|owner| Stream { chat: 0, owner }).map_err(Error::InvalidArgument);
        }
        Ok(Stream { chat: 0, owner: String::new() })
    }

    /// The catalog part of a commit, on `c` (in a transaction holding the stream's row
    /// lock): checks the chat's records against its row (dense seqs, the next revision, the
    /// publication guard), then inserts the batch at `version` and its records and updates
    /// the stream's row, all in one statement (one round trip).
    ///
    /// `commit` (a chat's stream): the `COMMIT` goes in the same round trip, right behind the
    /// statement (pipelined); [`Written::Committed`] when the transaction committed. A
    /// statement that fails aborts the transaction, whose `COMMIT` then rolls back; a batch
    /// refused by the row's check (a publication's guard) leaves nothing of the batch to
    /// commit (only the rows of the blobs it carried, which gc collects unreferenced); and
    /// the statement refuses to go on when a blob the write keeps was collected meanwhile (a
    /// placeholder row is never committed): then nothing is written, the row lock is gone
    /// ([`Written::KeptGone`]: [`Fleet::commit_chat`] locks again and writes without the
    /// pipeline).
    #[allow(clippy::too_many_arguments)]
    fn write_batch(
        &self,
        c: &mut Conn,
        s: &Stream,
        version: u64,
        txn: &Txn,
        row: Option<&ChatRow>,
        blobs: Option<&BlobRows<'_>>,
        commit: bool,
    ) -> Result<Written> {
        let mut idx: Vec<i32> = Vec::new();
        let mut kinds: Vec<i16> = Vec::new();
        let mut chats: Vec<Option<i64>> = Vec::new();
        let mut seqs: Vec<Option<i64>> = Vec::new();
        let mut payloads: Vec<&[u8]> = Vec::new();
        let mut next = row.map(|r| r.after());
        for r in txn.records.iter().filter(|r| r.blob.is_none()) {
            let mut seq = None;
            if let Some(n) = next.as_mut() {
                seq = n.apply(r).map_err(|why| self.bad(format!("chat {}: {why}", s.chat)))?;
            }
            idx.push(idx.len() as i32);
            kinds.push(i16::from(r.kind));
            chats.push((s.chat != 0).then_some(s.chat as i64));
            seqs.push(seq.map(|q| q as i64));
            payloads.push(&r.payload);
        }
        let (Some(before), Some(after)) = (row, next) else {
            // An owner's own stream, or the global one.
            let done = self.one(
                "write the batch",
                c.query_opt(
                    WRITE_OWNER_BATCH,
                    &[&s.owner, &(version as i64), &idx, &kinds, &chats, &seqs, &payloads],
                ),
            )?;
            let (owners, records): (i64, i64) = (self.col(&done, 0)?, self.col(&done, 1)?);
            if owners != 1 || records != idx.len() as i64 {
                return Err(self.bad(format!(
                    "owner {:?}: expected its row and {} records written, found {owners} and {records}",
                    s.owner,
                    idx.len()
                )));
            }
            return Ok(Written::Open);
        };
        // Guarded publication is part of the chat row's update: a checkpoint record's batch
        // is written only if the row is still at the checkpoint's base revision and below
        // its reach.
        let (reach, base) = match after.publish {
            Some(reach) => (reach as i64, after.publish_base as i64),
            None => (-1, 0),
        };
        let (chat_id, version_i, revision_i, next_seq_i) =
            (s.chat as i64, version as i64, after.revision as i64, after.next_seq as i64);
        let mut params: Vec<&dyn Param> = vec![
            &chat_id,
            &version_i,
            &revision_i,
            &next_seq_i,
            &after.deleted,
            &reach,
            &base,
            &idx,
            &kinds,
            &chats,
            &seqs,
            &payloads,
        ];
        // Schema version 3: the title the batch's last metadata record gives; version 4: the
        // chat's activity (schema.rs).
        let schema = self.schema.load(std::sync::atomic::Ordering::Relaxed);
        let titled = schema >= 3;
        let last_ms = after.last_ms as i64;
        let meta: Option<MetaRec> = match txn.records.iter().rev().find(|r| r.kind == Kind::Meta) {
            Some(r) if titled => Some(
                record::decode::<MetaRec>(&r.payload, "metadata")
                    .map_err(|why| self.bad(format!("chat {}: {why}", s.chat)))?,
            ),
            _ => None,
        };
        // Version 5: the extra fields as a JSON object (the column is written with the title).
        let extra: Option<String> = match &meta {
            Some(m) if schema >= 5 => Some(
                serde_json::to_string(
                    &m.extra
                        .iter()
                        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                        .collect::<serde_json::Map<String, serde_json::Value>>(),
                )
                .map_err(|e| self.bad(format!("chat {}: its extra fields as JSON: {e}", s.chat)))?,
            ),
            _ => None,
        };
        let title: Option<String> = meta.map(|m| m.title);
        let has_title = title.is_some();
        // Version 5: the grants the batch's records make (grant and archive records), noted
        // in `ut_grants` so that a read without a local grant finds the chat to pull.
        let (mut grant_owners, mut grant_ids): (Vec<String>, Vec<Vec<u8>>) = (Vec::new(), Vec::new());
        if schema >= 5 {
            for r in txn.records.iter().filter(|r| r.blob.is_none()) {
                let bad = |why: String| self.bad(format!("chat {}: {why}", s.chat));
                match r.kind {
                    Kind::Grant => {
                        let g = record::decode::<GrantRec>(&r.payload, "grant").map_err(bad)?;
                        grant_owners.push(g.owner);
                        grant_ids.push(g.id.to_vec());
                    }
                    Kind::Archive => {
                        let a = record::decode::<ArchiveRec>(&r.payload, "archive").map_err(bad)?;
                        grant_owners.extend([a.owner.clone(), a.owner]);
                        grant_ids.extend([a.id.to_vec(), a.index.to_vec()]);
                    }
                    _ => {}
                }
            }
        }
        if titled {
            params.push(&has_title);
            params.push(&title);
        }
        let variant = match schema {
            0..=2 => 0,
            3 => 1,
            4 => {
                params.push(&last_ms);
                2
            }
            _ => {
                params.push(&last_ms);
                params.push(&extra);
                params.push(&grant_owners);
                params.push(&grant_ids);
                3
            }
        };
        // With blobs in PostgreSQL, the rows of the blobs the batch carries and keeps are
        // upserted by the same statement (`BlobRows`).
        let blobs = blobs.filter(|b| !b.all.is_empty());
        let blob_params = blobs.map(|b| b.params(self.s3.is_some()));
        let statement = match &blob_params {
            Some((ids, kinds, codecs, lens, payloads)) => {
                params.extend([ids as &dyn Param, kinds, codecs, lens, payloads]);
                let with_blobs: &'static [String; 4] =
                    if commit { &WRITE_CHAT_BATCH_BLOBS_KEPT } else { &WRITE_CHAT_BATCH_BLOBS };
                with_blobs[variant].as_str()
            }
            None => {
                [WRITE_CHAT_BATCH, WRITE_CHAT_BATCH_TITLED, WRITE_CHAT_BATCH_ACTIVE, WRITE_CHAT_BATCH_EXTRA]
                    [variant]
            }
        };
        let done = if commit {
            let (batch, committed) = c.pipeline(statement, &params, "COMMIT");
            let batch = match batch {
                Ok(rows) => rows,
                // The statement failed on the server: the transaction was aborted, and its
                // COMMIT answered ROLLBACK. Nothing was written.
                Err(e) if e.as_db_error().is_some() => {
                    if e.as_db_error().is_some_and(|db| db.message().contains(KEPT_GONE)) {
                        return Ok(Written::KeptGone);
                    }
                    return Err(self.err("write the batch", &e));
                }
                // The connection failed with the COMMIT sent: whether the server committed is
                // unknown (an idempotency key tells on a retry).
                Err(e) => return Err(self.err("write the batch and commit (sent together)", &e)),
            };
            committed.map_err(|e| self.err("commit", &e))?;
            match batch.into_iter().next() {
                Some(row) => row,
                None => {
                    return Err(self.bad(format!(
                        "chat {}: expected one row from the batch's statement, found none; its COMMIT \
                         committed nothing of the batch",
                        s.chat
                    )));
                }
            }
        } else {
            self.one("write the batch", c.query_opt(statement, &params))?
        };
        let (updated, records): (i64, i64) = (self.col(&done, 0)?, self.col(&done, 1)?);
        if updated == 1 && records == idx.len() as i64 {
            if commit {
                return Ok(Written::Committed);
            }
            if let Some(b) = blobs {
                let gone = self
                    .col::<Vec<&[u8]>>(&done, 2)?
                    .into_iter()
                    .map(|id| {
                        <[u8; 32]>::try_from(id).map(BlobId).map_err(|_| {
                            self.bad(format!("expected 32-byte blob ids, found {} bytes", id.len()))
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                self.fill_gone(c, b, &gone)?;
            }
            return Ok(Written::Open);
        }
        let (base, reach) = (base as u64, reach);
        Err(match after.publish {
            Some(_) if before.revision != base => {
                Error::Conflict(Conflict::Edited { base, now: before.revision })
            }
            Some(_) if before.published_reach >= reach => {
                Error::Conflict(Conflict::NotNewer { published_reach: before.published_reach.max(0) as u64 })
            }
            _ if commit && updated == 1 => self.bad(format!(
                "chat {}: expected its row at version {} and {} records written, found {updated} row(s) \
                 and {records} record(s), committed (the COMMIT went with the batch): check the chat",
                s.chat,
                before.version,
                idx.len()
            )),
            _ => self.bad(format!(
                "chat {}: expected its row at version {} and {} records written, found {updated} row(s) \
                 and {records} record(s); nothing was written",
                s.chat,
                before.version,
                idx.len()
            )),
        })
    }

    /// Commits `txn` for chat stream `s` on `c`, which is in a transaction holding the chat's
    /// row lock (`row`), then appends it locally.
    fn commit_chat(
        &self,
        core: &Core,
        c: &mut Conn,
        s: &Stream,
        row: &ChatRow,
        txn: Txn,
        kept: Option<&[RecordOut]>,
    ) -> Result<Committed> {
        let local = self.local(s);
        let mut l = local.lock();
        if l.applied != row.version {
            return Err(self.bad(format!(
                "chat {} changed in another process since this write was prepared (version {} here, {} \
                 committed); nothing was written: retry",
                s.chat, l.applied, row.version
            )));
        }
        let version = row.version + 1;
        let t = std::time::Instant::now();
        // `kept`: blobs in PostgreSQL; the batch's statement upserts its blobs' rows.
        let records: Vec<&RecordOut> = txn.records.iter().collect();
        let blobs = kept.map(|k| BlobRows::new(&records, k));
        // The batch and its COMMIT in one round trip; the batch's statement checks the row's
        // version (and the publication guard) itself, under the lock this transaction holds.
        match self.write_batch(c, s, version, &txn, Some(row), blobs.as_ref(), true)? {
            Written::Committed => phases::add(phases::WRITE, t.elapsed()),
            Written::Open => {
                phases::add(phases::WRITE, t.elapsed());
                let t = std::time::Instant::now();
                c.batch_execute("COMMIT").map_err(|e| self.err("commit", &e))?;
                phases::add(phases::COMMIT, t.elapsed());
            }
            Written::KeptGone => {
                // A blob this write keeps was collected since: the transaction rolled back
                // (the row lock with it). Locked again at the same version, the batch goes
                // without the pipeline, its placeholder rows filled from the replica before
                // the COMMIT; a chat another process wrote meanwhile refuses the write (its
                // records were built on the version before).
                match self.begin_locked(c, s.chat, row.version)? {
                    Some((again, _)) if again.version == row.version => {}
                    Some((again, _)) => {
                        return Err(self.bad(format!(
                            "chat {} changed in another process while this write stored a blob again \
                             (version {} here, {} committed); nothing was written: retry",
                            s.chat, row.version, again.version
                        )));
                    }
                    None => return Err(Error::NotFound { what: format!("chat {}", s.chat) }),
                }
                self.write_batch(c, s, version, &txn, Some(row), blobs.as_ref(), false)?;
                phases::add(phases::WRITE, t.elapsed());
                let t = std::time::Instant::now();
                c.batch_execute("COMMIT").map_err(|e| self.err("commit", &e))?;
                phases::add(phases::COMMIT, t.elapsed());
            }
        }
        drop(blobs);
        let t = std::time::Instant::now();
        let committed = core.append_local(txn)?;
        phases::add(phases::LOCAL, t.elapsed());
        l.applied = version;
        Ok(committed)
    }

    /// Begins a transaction and locks chat `chat`'s row, and reads the chat's batches after
    /// version `after`, in one round trip (`BEGIN`, then both statements, pipelined; prepared
    /// on a direct connection). `None`: no such chat (the transaction is left open: the
    /// caller rolls back).
    fn begin_locked(&self, c: &mut Conn, chat: u64, after: u64) -> Result<Option<(ChatRow, Vec<Pulled>)>> {
        // The batches after `after` are read by a statement after the lock's: under READ
        // COMMITTED it sees every commit before the lock was granted, and none can follow
        // until this transaction ends.
        let (id, after) = (chat as i64, after as i64);
        let found = c.begin_with(&[(LOCK_CHAT, &[&id]), (PULL_BATCHES, &[&id, &"", &after])]);
        let found = match found {
            Ok(found) => found,
            Err((2, e)) => return Err(self.err("read new batches", &e)),
            Err((_, e)) => {
                return Err(self.err_waiting("lock the chat", &format!("chat {chat}'s row lock"), &e));
            }
        };
        let (Some(lock), Some(batches)) = (found.first(), found.get(1)) else {
            return Err(
                self.bad(format!("chat {chat}: expected the answers of 2 statements, found {}", found.len()))
            );
        };
        let Some(r) = lock.first() else { return Ok(None) };
        let row = self.chat_row(r)?;
        let pulled = batches.iter().map(|b| self.pulled(b, 0)).collect::<Result<Vec<_>>>()?;
        Ok(Some((row, pulled)))
    }
}

/// The kind of a kept blob's row inserted in a catalog transaction before its payload is
/// filled in the same transaction (see [`BlobRows`]); never committed.
const PLACEHOLDER: i16 = -1;

/// The `ut_blobs` rows one statement upserts, in id order, each once (so two writers, or a
/// writer and a sweep, never lock them in different orders): the blobs a write carries (their
/// payloads, or empty ones in S3 mode), and `kept`: with blobs in PostgreSQL, in a chat's
/// catalog transaction only, the blobs the write references without carrying them, read from
/// the local replica ([`Fleet::kept_locally`]). A kept blob's row is marked fresh and not
/// doomed without its payload being sent; one that is gone (collected) is inserted as a
/// placeholder ([`PLACEHOLDER`]), which the statement returns and [`Fleet::fill_gone`] fills
/// from the replica before the commit (its row lock is already held).
struct BlobRows<'r> {
    /// (id, record, carried: else kept)
    all: Vec<(BlobId, &'r RecordOut, bool)>,
}

impl<'r> BlobRows<'r> {
    fn new(blobs: &[&'r RecordOut], kept: &'r [RecordOut]) -> BlobRows<'r> {
        let mut all: Vec<(BlobId, &RecordOut, bool)> =
            blobs.iter().filter_map(|r| r.blob.map(|id| (id, *r, true))).collect();
        all.extend(kept.iter().filter_map(|r| r.blob.map(|id| (id, r, false))));
        // Sorted, each once (an upsert may not touch a row twice); a carried blob sorts
        // before a kept one of the same id, and wins.
        all.sort_by_key(|(id, _, carried)| (*id, !*carried));
        all.dedup_by_key(|(id, _, _)| *id);
        BlobRows { all }
    }

    /// The statement's arrays: ids, kinds (a kept blob's [`PLACEHOLDER`]), codecs, lengths,
    /// payloads (empty for kept blobs, and in S3 mode).
    #[allow(clippy::type_complexity)]
    fn params(&self, s3: bool) -> (Vec<&[u8]>, Vec<i16>, Vec<i16>, Vec<i32>, Vec<&[u8]>) {
        let ids = self.all.iter().map(|(id, _, _)| id.as_bytes().as_slice()).collect();
        let kinds = self
            .all
            .iter()
            .map(|(_, r, carried)| if *carried { i16::from(r.kind) } else { PLACEHOLDER })
            .collect();
        let codecs = self.all.iter().map(|(_, r, _)| i16::from(r.codec)).collect();
        let lens = self.all.iter().map(|(_, r, _)| r.raw_len as i32).collect();
        let payloads = self
            .all
            .iter()
            .map(|(_, r, carried)| if s3 || !*carried { &[][..] } else { r.payload.as_slice() })
            .collect();
        (ids, kinds, codecs, lens, payloads)
    }
}

/// [`WRITE_CHAT_BATCH`], [`WRITE_CHAT_BATCH_TITLED`], [`WRITE_CHAT_BATCH_ACTIVE`] and
/// [`WRITE_CHAT_BATCH_EXTRA`] with the
/// batch's blob rows upserted in the same statement ([`BlobRows`], its arrays the 5 parameters
/// after the variant's own), returning a third column: the ids of placeholder rows to fill.
static WRITE_CHAT_BATCH_BLOBS: std::sync::LazyLock<[String; 4]> =
    std::sync::LazyLock::new(|| with_blob_rows(false));

/// [`WRITE_CHAT_BATCH_BLOBS`] for a batch whose `COMMIT` follows in the same round trip: the
/// statement fails (the transaction aborts; nothing is written) when it inserted a placeholder
/// row (a kept blob collected meanwhile), which must never be committed.
static WRITE_CHAT_BATCH_BLOBS_KEPT: std::sync::LazyLock<[String; 4]> =
    std::sync::LazyLock::new(|| with_blob_rows(true));

/// What the error of [`WRITE_CHAT_BATCH_BLOBS_KEPT`] says (a text cast to an integer: no
/// function needs creating for it).
const KEPT_GONE: &str = "undertext: a kept blob was collected";

/// The four chat batch statements with the blob rows' upsert (see [`WRITE_CHAT_BATCH_BLOBS`]);
/// `refuse_placeholders`: see [`WRITE_CHAT_BATCH_BLOBS_KEPT`].
fn with_blob_rows(refuse_placeholders: bool) -> [String; 4] {
    [(WRITE_CHAT_BATCH, 12), (WRITE_CHAT_BATCH_TITLED, 14), (WRITE_CHAT_BATCH_ACTIVE, 15), (WRITE_CHAT_BATCH_EXTRA, 18)]
        .map(|(sql, n)| {
        let body = sql.strip_prefix("WITH ").unwrap_or(sql);
        // Evaluated at run time only when a placeholder was inserted (not a constant: the
        // planner cannot fold it).
        let refuse = if refuse_placeholders {
            format!(
                ", CASE WHEN EXISTS (SELECT 1 FROM bl WHERE kind < 0) \
                     THEN ('{KEPT_GONE}: ' || (SELECT count(*) FROM bl WHERE kind < 0))::integer END"
            )
        } else {
            String::new()
        };
        format!(
            "WITH bl AS ( \
                 INSERT INTO ut_blobs (id, kind, codec, raw_len, payload) \
                 SELECT * FROM unnest(${}::bytea[], ${}::smallint[], ${}::smallint[], ${}::integer[], ${}::bytea[]) \
                 ON CONFLICT (id) DO UPDATE SET stored_at = now(), doomed = false \
                 RETURNING id, kind \
             ), {body}, ARRAY(SELECT id FROM bl WHERE kind < 0){refuse}",
            n + 1,
            n + 2,
            n + 3,
            n + 4,
            n + 5
        )
    })
}

/// How [`Fleet::write_batch`] left the transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    /// Written, the transaction still open (the caller commits).
    Open,
    /// Written and committed (the `COMMIT` went with the statement).
    Committed,
    /// Nothing written and the transaction gone (rolled back): a blob the write keeps was
    /// collected meanwhile (see [`WRITE_CHAT_BATCH_BLOBS_KEPT`]).
    KeptGone,
}

/// Where this process's fleet writes of chats spend their time, summed over every store
/// (`fleet::write_phases`, for benches): per phase, nanoseconds and times.
pub(super) mod phases {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    /// `BEGIN` and `SELECT … FOR UPDATE` of the chat's row: one round trip, and the wait for
    /// the row lock while another writer holds it.
    pub(crate) const LOCK: usize = 0;
    /// Reading and applying the batches other processes committed (under the lock).
    pub(crate) const PULL: usize = 1;
    /// From the lock (and the pull) to the commit's start: the engine builds the records.
    pub(crate) const BUILD: usize = 2;
    /// Uploading new blobs and keeping referenced ones (before the catalog statement).
    pub(crate) const BLOBS: usize = 3;
    /// The batch's statement (batch, records and the chat row in one round trip), and the
    /// `COMMIT` sent with it (the server's WAL flush), unless a kept blob was collected.
    pub(crate) const WRITE: usize = 4;
    /// A `COMMIT` of its own (a kept blob was collected): one round trip and the WAL flush.
    pub(crate) const COMMIT: usize = 5;
    /// Appending the committed batch to the local replica.
    pub(crate) const LOCAL: usize = 6;
    /// From the lock and the pull done to the commit done: most of the time no other writer
    /// of the chat can make progress (the rest: the lock's answer on its way, and the pull).
    pub(crate) const HELD: usize = 7;
    pub(crate) const NAMES: [&str; 8] =
        ["lock", "pull", "build", "blobs", "write", "commit", "local", "held"];

    static NS: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];
    static TIMES: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];

    pub(crate) fn add(phase: usize, d: Duration) {
        NS[phase].fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
        TIMES[phase].fetch_add(1, Ordering::Relaxed);
    }

    /// (name, nanoseconds, times) per phase.
    pub(crate) fn read() -> Vec<(&'static str, u64, u64)> {
        (0..NAMES.len())
            .map(|i| (NAMES[i], NS[i].load(Ordering::Relaxed), TIMES[i].load(Ordering::Relaxed)))
            .collect()
    }
}

/// A blob record as the remote stores it (see [`Fleet::stored`]).
pub(super) struct StoredBlob {
    pub(super) kind: u8,
    pub(super) codec: u8,
    pub(super) raw_len: u32,
    /// The record's payload: the id, then the (compressed) body.
    pub(super) payload: Vec<u8>,
    /// Where it was read, for messages: empty, or ` (object KEY in BUCKET)`.
    pub(super) from: String,
}

/// Blob `id`'s record in the local replica, if the replica holds it.
fn local_record(core: &Core, id: &BlobId) -> Result<Option<RecordOut>> {
    let Some(loc) = core.index.blob(id)? else { return Ok(None) };
    let r = core.read(loc, crate::base::blob::Verify::Checksum)?;
    let kind = Kind::of(r.kind).filter(|k| k.is_blob()).ok_or_else(|| {
        Error::corrupt(loc.segment, loc.offset, format!("blob {id} is a record of kind {}", r.kind))
    })?;
    Ok(Some(RecordOut {
        kind,
        codec: r.codec,
        raw_len: r.raw_len,
        payload: r.payload.to_vec(),
        blob: Some(*id),
        chat: None,
        listing: None,
    }))
}

/// A pulled record: its batch's version, then its kind and payload (`None` for a batch without
/// records).
type Pulled = (u64, Option<i16>, Option<Vec<u8>>);

/// Whether a pulled record of kind `k` leaves a chat's state as it was but for appended
/// messages (a state loaded before it can be extended with them instead of loaded again):
/// messages at the current revision (an edit's come with a revision record), the steps and
/// idempotency keys of appends, and grants (the owner's, not the chat's state).
fn appends_only(k: Kind) -> bool {
    matches!(
        k,
        Kind::Message | Kind::MessageCompact | Kind::Step | Kind::AppendKey | Kind::Archive | Kind::Grant
    )
}

/// The catalog row of a chat, as locked by a write.
#[derive(Debug, Clone, Copy)]
struct ChatRow {
    version: u64,
    revision: u64,
    next_seq: u64,
    published_reach: i64,
    deleted: bool,
}

impl ChatRow {
    fn after(&self) -> After {
        After {
            revision: self.revision,
            next_seq: self.next_seq,
            deleted: self.deleted,
            publish: None,
            publish_base: 0,
            last_ms: 0,
        }
    }
}

/// A chat row as a batch leaves it.
#[derive(Debug, Clone, Copy)]
struct After {
    revision: u64,
    next_seq: u64,
    deleted: bool,
    publish: Option<u64>,
    publish_base: u64,
    /// The latest time the batch's records carry (the chat's activity, as the local index
    /// counts it: `index/history.rs`).
    last_ms: u64,
}

impl After {
    /// Applies record `r` of the batch; returns the seq of a message record. A message at
    /// the current revision must be the next seq (appends are dense); a revision record must
    /// be the next revision.
    fn apply(&mut self, r: &RecordOut) -> std::result::Result<Option<u64>, String> {
        let at = match r.kind {
            Kind::Chat => record::decode::<ChatRec>(&r.payload, "chat")?.created_ms,
            Kind::Meta => record::decode::<MetaRec>(&r.payload, "metadata")?.at_ms,
            Kind::Hide => record::decode::<HideRec>(&r.payload, "hide")?.at_ms,
            Kind::Pin => record::decode::<PinRec>(&r.payload, "pin")?.at_ms,
            Kind::Compaction => record::decode::<CompactionRec>(&r.payload, "compaction")?.at_ms,
            _ => 0,
        };
        self.last_ms = self.last_ms.max(at);
        match r.kind {
            Kind::Message | Kind::MessageCompact => {
                let m: MsgRec = record::message(r.kind, &r.payload)?;
                self.last_ms = self.last_ms.max(m.at_ms);
                if m.revision == self.revision && m.seq >= self.next_seq {
                    if m.seq != self.next_seq {
                        return Err(format!("expected message seq {}, found {}", self.next_seq, m.seq));
                    }
                    self.next_seq += 1;
                } else if m.revision != self.revision || m.seq >= self.next_seq {
                    return Err(format!(
                        "message {} at revision {}: the chat is at revision {} with {} messages",
                        m.seq, m.revision, self.revision, self.next_seq
                    ));
                }
                Ok(Some(m.seq))
            }
            Kind::Revision => {
                let v: RevRec = record::decode(&r.payload, "revision")?;
                if v.revision != self.revision + 1 {
                    return Err(format!("expected revision {}, found {}", self.revision + 1, v.revision));
                }
                self.revision = v.revision;
                self.next_seq = v.len_after;
                self.last_ms = self.last_ms.max(v.at_ms);
                Ok(None)
            }
            Kind::Checkpoint => {
                let cp: CheckpointRec = record::decode(&r.payload, "checkpoint")?;
                self.publish = Some(cp.reach);
                self.publish_base = cp.base_revision;
                self.last_ms = self.last_ms.max(cp.at_ms);
                Ok(None)
            }
            Kind::Delete => {
                self.deleted = true;
                Ok(None)
            }
            _ => Ok(None),
        }
    }
}

/// A statement bringing the replica up to chats of owner $1 with the batches committed after
/// the version it holds of each ($2: chat ids, $3: their versions held; a chat not listed is
/// held at 0): (id, version, deleted, batch version, record kind, payload, then `$more`), the
/// batch columns NULL for a chat without new batches (and the record columns for a batch
/// without records); the chats `$which` (a condition on `c`) selects, their batches only where
/// `$batches` (` AND …`, or nothing) holds. By chat, version, record.
macro_rules! owner_catch_up {
    ($more:literal, $batches:literal, $which:literal) => {
        concat!(
            "SELECT c.id, c.version, c.deleted, b.version, r.kind, r.payload",
            $more,
            " FROM ut_chats c \
             LEFT JOIN unnest($2::bigint[], $3::bigint[]) AS k (id, applied) ON k.id = c.id \
             LEFT JOIN ut_batches b ON b.chat = c.id AND b.owner = '' AND b.version > coalesce(k.applied, 0) \
                 AND b.version <= c.version",
            $batches,
            " LEFT JOIN ut_records r ON r.batch = b.id WHERE c.owner = $1::text AND ",
            $which,
            " ORDER BY c.id, b.version, r.idx"
        )
    };
}

/// The chats of owner $1 titled $4, those of them in $5 (the replica's own chats of that title:
/// another process may have changed it) and those whose title the catalog does not know (NULL,
/// written before schema version 3), with the batches committed after the version this replica
/// holds of each ($2, $3 as in [`OWNER_CATCH_UP`]; none for a chat of unknown title): (id,
/// version, deleted, batch version, record kind, payload, title unknown). By chat, version,
/// record. One statement: `find_chats` by title on a fresh replica is one round trip.
const TITLED_CATCH_UP: &str = owner_catch_up!(
    ", c.title IS NULL",
    " AND c.title IS NOT NULL",
    "(c.title = $4::text OR c.title IS NULL OR c.id = ANY ($5::bigint[]))"
);

/// The chats of owner $1 whose extra field $4 is $5, those whose extra fields the catalog does
/// not know (NULL, written before schema version 5) and those of them in $6 (the replica's own
/// chats with that field: another process may have changed it), with the batches committed
/// after the version this replica holds of each ($2, $3 as in [`OWNER_CATCH_UP`]); the columns
/// of [`OWNER_CATCH_UP`]. One statement: `find_chats` by an extra field on a fresh replica is one
/// round trip, and pulls only these chats.
const EXTRA_CATCH_UP: &str = owner_catch_up!(
    "",
    "",
    "(c.extra ->> $4::text = $5::text OR c.extra IS NULL OR c.id = ANY ($6::bigint[]))"
);

/// The chats of owner $1 that grant one of blobs $4 as `ut_grants` notes, and those whose
/// grants it does not know (`grants_known` false: written before schema version 5), with the
/// batches committed after the version this replica holds of each ($2, $3 as in
/// [`OWNER_CATCH_UP`]); the columns of [`OWNER_CATCH_UP`].
const GRANTING_CATCH_UP: &str = owner_catch_up!(
    "",
    "",
    "(NOT c.grants_known \
     OR c.id IN (SELECT g.chat FROM ut_grants g WHERE g.owner = $1::text AND g.blob = ANY ($4::bytea[])))"
);

/// Every chat of owner $1 (id, version, deleted), or those of them in $4 (NULL: every one),
/// with the batches committed after the version this replica holds of it ($2: chat ids, $3:
/// their versions held; a chat not listed is held at 0): (batch version, record kind, payload), NULL for a chat without new
/// batches (and the record columns NULL for a batch without records). By chat, version,
/// record.
const OWNER_CATCH_UP: &str = owner_catch_up!("", "", "($4::bigint[] IS NULL OR c.id = ANY ($4::bigint[]))");

/// One page of owner $1's chats not deleted, newest activity first (then by id), after the
/// cursor ($2, $3: last activity and id; $2 NULL: from the start), at most $4: (id,
/// last_ms). A chat whose activity the catalog does not know (NULL, written before schema
/// version 4) sorts first, so the first row says whether the page can be trusted.
const CHATS_PAGE: &str = "\
SELECT id, last_ms FROM ut_chats \
WHERE owner = $1::text AND NOT deleted AND version > 0 \
    AND (last_ms IS NULL OR $2::bigint IS NULL OR last_ms < $2::bigint OR (last_ms = $2::bigint AND id > $3::bigint)) \
ORDER BY last_ms DESC NULLS FIRST, id \
LIMIT $4::bigint";

/// Locks chat $1's row for a write (in a transaction) and returns it ([`ChatRow`]'s columns).
const LOCK_CHAT: &str =
    "SELECT version, revision, next_seq, published_reach, deleted FROM ut_chats WHERE id = $1 FOR UPDATE";

/// The batches of stream ($1 chat, $2 owner) after version $3, with their records: (batch
/// version, record kind, payload), the record columns NULL for a batch without records (gc
/// dropped those of a deleted chat: the versions stay dense). By version, record.
const PULL_BATCHES: &str = "SELECT b.version, r.kind, r.payload FROM ut_batches b LEFT JOIN ut_records r ON r.batch = b.id \
     WHERE b.chat = $1 AND b.owner = $2 AND b.version > $3 ORDER BY b.version, r.idx";

/// The statement of a chat stream's batch, with `$title` (a `SET` item and its comma, or
/// nothing) among what the chat row's update sets, and `$more` (nothing, or a comma and more
/// statements of the `WITH`, which may read the updated row from `u`: its id and owner).
macro_rules! write_chat_batch {
    ($title:literal) => {
        write_chat_batch!($title, "")
    };
    ($title:literal, $more:literal) => {
        concat!(
            "WITH u AS ( \
    UPDATE ut_chats SET version = $2::bigint, revision = $3::bigint, next_seq = $4::bigint, \
        deleted = $5::boolean, ",
            $title,
            "published_reach = CASE WHEN $6::bigint >= 0 THEN $6::bigint ELSE published_reach END \
    WHERE id = $1::bigint AND version = $2::bigint - 1 \
        AND ($6::bigint < 0 OR (revision = $7::bigint AND published_reach < $6::bigint)) \
    RETURNING id, owner \
), b AS ( \
    INSERT INTO ut_batches (chat, owner, version) SELECT id, '', $2::bigint FROM u RETURNING id \
), r AS ( \
    INSERT INTO ut_records (batch, idx, kind, chat, seq, payload) \
    SELECT b.id, x.* FROM b, \
        unnest($8::integer[], $9::smallint[], $10::bigint[], $11::bigint[], $12::bytea[]) AS x \
    RETURNING 1 \
)",
            $more,
            " SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM r)"
        )
    };
}

/// A chat stream's batch in one statement: the chat row moves to version $2 (from $2 - 1)
/// with its new revision, message count and deletion, and, when $6 >= 0, publishes reach $6
/// only if the row is at revision $7 below reach $6 (guarded publication); the batch and its
/// records are inserted only if the row was updated. Returns (rows updated, records inserted).
const WRITE_CHAT_BATCH: &str = write_chat_batch!("");

/// [`WRITE_CHAT_BATCH`] on a schema of version 3: when $13, the chat's title becomes $14
/// (the batch carries a metadata record).
const WRITE_CHAT_BATCH_TITLED: &str =
    write_chat_batch!("title = CASE WHEN $13::boolean THEN $14::text ELSE title END, ");

/// [`WRITE_CHAT_BATCH_TITLED`] on a schema of version 4 or later: the chat's last activity
/// moves to $15 when that is later (a row created by this batch, at version 0, starts there;
/// a row written before version 4 keeps NULL: its activity is unknown).
const WRITE_CHAT_BATCH_ACTIVE: &str = write_chat_batch!(
    "title = CASE WHEN $13::boolean THEN $14::text ELSE title END, \
     last_ms = CASE WHEN version = 0 OR last_ms IS NOT NULL THEN greatest(coalesce(last_ms, 0), $15::bigint) END, "
);

/// [`WRITE_CHAT_BATCH_ACTIVE`] on a schema of version 5 or later: with the title (when $13),
/// the chat's extra fields become $16 (a JSON object); the grants the batch's records make
/// ($17 owners, $18 blob ids) are noted in `ut_grants`; the row created by this batch (at
/// version 0) has its grants known from the start.
const WRITE_CHAT_BATCH_EXTRA: &str = write_chat_batch!(
    "title = CASE WHEN $13::boolean THEN $14::text ELSE title END, \
     extra = CASE WHEN $13::boolean THEN $16::text::jsonb ELSE extra END, \
     grants_known = (version = 0 OR grants_known), \
     last_ms = CASE WHEN version = 0 OR last_ms IS NOT NULL THEN greatest(coalesce(last_ms, 0), $15::bigint) END, ",
    ", g AS ( \
    INSERT INTO ut_grants (owner, blob, chat) \
    SELECT x.owner, x.blob, u.id FROM u, unnest($17::text[], $18::bytea[]) AS x (owner, blob) \
    ON CONFLICT DO NOTHING \
)"
);

/// An owner's own (or the global) stream's batch in one statement: the owner row $1 moves
/// to version $2, and the batch and its records are inserted. Returns (rows updated, records
/// inserted).
const WRITE_OWNER_BATCH: &str = "\
WITH o AS ( \
    UPDATE ut_owners SET version = $2::bigint WHERE owner = $1::text RETURNING owner \
), b AS ( \
    INSERT INTO ut_batches (chat, owner, version) SELECT 0, owner, $2::bigint FROM o RETURNING id \
), r AS ( \
    INSERT INTO ut_records (batch, idx, kind, chat, seq, payload) \
    SELECT b.id, x.* FROM b, \
        unnest($3::integer[], $4::smallint[], $5::bigint[], $6::bigint[], $7::bytea[]) AS x \
    RETURNING 1 \
) \
SELECT (SELECT count(*) FROM o), (SELECT count(*) FROM r)";

impl Remote for Fleet {
    fn commit(&self, core: &Core, txn: Txn) -> Result<Committed> {
        let s = self.stream_of(&txn)?;
        let blob_only = txn.records.iter().all(|r| r.blob.is_some());
        // A batch is never visible before the blobs it carries. With blobs in PostgreSQL, a
        // chat's batch writes their rows in its own transaction (one commit; the rows locked
        // in id order, as every writer and gc lock them); with blobs in S3, and for the other
        // streams, the rows (and objects) are committed first.
        let inside = self.s3.is_none() && s.chat != 0 && !blob_only;
        let t = std::time::Instant::now();
        if !inside {
            self.upload(&txn.records.iter().collect::<Vec<_>>())?;
        }
        // With blobs in PostgreSQL, what a chat's batch references without carrying it is
        // marked fresh in its own transaction, with the rows it carries (one statement, one
        // commit); otherwise (S3, other streams, or content the replica lacks) committed
        // before it.
        let kept = match inside {
            true => self.kept_locally(core, &txn)?,
            false => None,
        };
        if kept.is_none() {
            self.keep_referenced(core, &txn)?;
        }
        let kept = kept.unwrap_or_default();
        phases::add(phases::BLOBS, t.elapsed());
        if blob_only {
            return core.append_local(txn);
        }
        if s.chat != 0 {
            let held = self.held.lock().remove(&s.chat);
            if held.is_some() {
                self.writing(false);
            }
            let entered = std::time::Instant::now();
            let mut locked_at = None;
            let (mut c, row) = match held {
                // Locked by this write (`lock_chat`): the row as the lock read it.
                Some((c, row, at)) => {
                    locked_at = Some(at);
                    phases::add(phases::BUILD, entered - at);
                    (c, Some(row))
                }
                None => {
                    // Not locked by a write: a new chat, or a write path that does not lock.
                    let mut c = self.client()?;
                    c.begin("").map_err(|e| self.err("begin", &e))?;
                    if let Some(r) = txn.records.iter().find(|r| r.kind == Kind::Chat) {
                        let rec: ChatRec =
                            record::decode(&r.payload, "chat").map_err(Error::InvalidArgument)?;
                        if let Err(e) = c.execute(
                            "WITH o AS (INSERT INTO ut_owners (owner) VALUES ($2) ON CONFLICT DO NOTHING) \
                             INSERT INTO ut_chats (id, owner) VALUES ($1, $2)",
                            &[&(rec.chat as i64), &rec.owner],
                        ) {
                            let _ = c.batch_execute("ROLLBACK");
                            return Err(self.err("create the chat", &e));
                        }
                    }
                    (c, None)
                }
            };
            let result = match row {
                Some(row) => Ok(Some(row)),
                None => c
                    .query_opt(LOCK_CHAT, &[&(s.chat as i64)])
                    .map_err(|e| {
                        self.err_waiting("lock the chat", &format!("chat {}'s row lock", s.chat), &e)
                    })
                    .and_then(|r| r.map(|r| self.chat_row(&r)).transpose()),
            }
            .and_then(|row| match row {
                Some(row) => self.commit_chat(core, &mut c, &s, &row, txn, inside.then_some(kept.as_slice())),
                None => Err(Error::NotFound { what: format!("chat {}", s.chat) }),
            });
            if result.is_err() {
                let _ = c.batch_execute("ROLLBACK");
            } else if let Some(at) = locked_at {
                phases::add(phases::HELD, at.elapsed());
            }
            self.put(c);
            return result;
        }
        // An owner's own stream, or the global one.
        let mut c = self.client()?;
        let result = (|| {
            c.begin("").map_err(|e| self.err("begin", &e))?;
            c.execute("INSERT INTO ut_owners (owner) VALUES ($1) ON CONFLICT DO NOTHING", &[&s.owner])
                .map_err(|e| self.err("add the owner", &e))?;
            let row = self.one(
                "lock the owner",
                c.query_opt("SELECT version FROM ut_owners WHERE owner = $1 FOR UPDATE", &[&s.owner]),
            )?;
            let version = self.num(&row, 0)?;
            let local = self.local(&s);
            let mut l = local.lock();
            if l.applied < version {
                self.pull(&mut c, core, &s, &mut l)?;
            }
            self.write_batch(&mut c, &s, version + 1, &txn, None, None, false)?;
            c.batch_execute("COMMIT").map_err(|e| self.err("commit", &e))?;
            let committed = core.append_local(txn)?;
            l.applied = version + 1;
            Ok(committed)
        })();
        if result.is_err() {
            let _ = c.batch_execute("ROLLBACK");
        }
        self.put(c);
        result
    }

    fn lock_chat(&self, core: &Core, chat: u64) -> Result<Option<(WriteLock, ChatHead)>> {
        let Some(remote) = core.remote().cloned() else {
            return Err(self.bad("lock_chat on a store without a remote".into()));
        };
        let mut c = self.client()?;
        let result = (|| {
            let s = Stream::chat(chat);
            let local = self.local(&s);
            let after = local.lock().applied;
            let t = std::time::Instant::now();
            let Some((row, batches)) = self.begin_locked(&mut c, chat, after)? else { return Ok(None) };
            phases::add(phases::LOCK, t.elapsed());
            let t = std::time::Instant::now();
            {
                // What the lock's round trip brought (versions another thread of this process
                // applied meanwhile are skipped).
                let mut l = local.lock();
                if l.applied < row.version && !batches.is_empty() {
                    self.apply(core, &s, &mut l, batches.into_iter().map(Ok))?;
                }
            }
            let (applied, pulled, changed) = self.catch_up(&mut c, core, &s, row.version)?;
            phases::add(phases::PULL, t.elapsed());
            Ok(Some((row, ChatHead { version: row.version, deleted: row.deleted, pulled, applied, changed })))
        })();
        match result {
            Ok(Some((row, head))) => {
                self.held.lock().insert(chat, (c, row, std::time::Instant::now()));
                self.writing(true);
                Ok(Some((WriteLock::new(remote, chat), head)))
            }
            other => {
                let _ = c.batch_execute("ROLLBACK");
                self.put(c);
                other.map(|_| None)
            }
        }
    }

    fn catch_up_chat(&self, core: &Core, chat: u64, owner: &str) -> Result<Option<ChatHead>> {
        let mut c = self.client()?;
        // Another owner's chat is absent: nothing of it is pulled into this replica.
        let row = c
            .query_opt(
                "SELECT version, revision, next_seq, published_reach, deleted FROM ut_chats \
                 WHERE id = $1 AND owner = $2",
                &[&(chat as i64), &owner],
            )
            .map_err(|e| self.err("read the chat", &e))?;
        let Some(row) = row else {
            self.put(c);
            return Ok(None);
        };
        let row = self.chat_row(&row)?;
        let (applied, pulled, changed) = self.catch_up(&mut c, core, &Stream::chat(chat), row.version)?;
        self.put(c);
        Ok(Some(ChatHead { version: row.version, deleted: row.deleted, pulled, applied, changed }))
    }

    fn catch_up_owner(&self, core: &Core, owner: &str) -> Result<Vec<(u64, ChatHead)>> {
        let c = self.catch_up_own_stream(core, owner)?;
        Ok(self.catch_up_listed(c, core, owner, Listed::All)?.unwrap_or_default())
    }

    fn catch_up_granting(&self, core: &Core, owner: &str, blobs: &[BlobId]) -> Result<()> {
        if self.schema.load(std::sync::atomic::Ordering::Relaxed) < 5 {
            return self.catch_up_owner(core, owner).map(drop);
        }
        let c = self.catch_up_own_stream(core, owner)?;
        self.catch_up_listed(c, core, owner, Listed::Granting(blobs)).map(drop)
    }

    fn catch_up_chats(&self, core: &Core, owner: &str, chats: &[u64]) -> Result<Vec<(u64, ChatHead)>> {
        if chats.is_empty() {
            return Ok(Vec::new());
        }
        let c = self.client()?;
        Ok(self.catch_up_listed(c, core, owner, Listed::Only(chats))?.unwrap_or_default())
    }

    fn catch_up_found(
        &self,
        core: &Core,
        owner: &str,
        field: MetaField<'_>,
        value: &str,
        also: &[u64],
    ) -> Result<Option<Vec<(u64, ChatHead)>>> {
        let (needs, which) = match field {
            MetaField::Title => (3, Listed::Titled(value, also)),
            MetaField::Extra(key) => (5, Listed::Extra(key, value, also)),
        };
        if self.schema.load(std::sync::atomic::Ordering::Relaxed) < needs {
            return Ok(None);
        }
        let c = self.client()?;
        self.catch_up_listed(c, core, owner, which)
    }

    fn page(&self, owner: &str, after: Option<(u64, u64)>, limit: usize) -> Result<Option<Vec<u64>>> {
        if self.schema.load(std::sync::atomic::Ordering::Relaxed) < 4 {
            return Ok(None);
        }
        let mut c = self.client()?;
        let (last, id) = match after {
            Some((last, id)) => (Some(last as i64), id as i64),
            None => (None, 0),
        };
        let rows = c
            .query(CHATS_PAGE, &[&owner, &last, &id, &(limit as i64)])
            .map_err(|e| self.err("list the owner's chats", &e))?;
        self.put(c);
        let mut ids = Vec::with_capacity(rows.len());
        for r in &rows {
            if self.col::<Option<i64>>(r, 1)?.is_none() {
                return Ok(None);
            }
            ids.push(self.num(r, 0)?);
        }
        Ok(Some(ids))
    }

    fn fetch_blob(&self, core: &Core, id: &BlobId) -> Result<bool> {
        Ok(self.fetch_blobs(core, std::slice::from_ref(id))? == 1)
    }

    fn fetch_blobs(&self, core: &Core, ids: &[BlobId]) -> Result<usize> {
        let mut txn = Txn::default();
        let mut n = 0;
        for (id, stored) in self.stored_many(ids)? {
            if let Some(record) = self.verified(&id, stored)? {
                txn.push(record);
                n += 1;
            }
        }
        if n > 0 {
            core.append_local(txn)?;
        }
        Ok(n)
    }

    fn allocate_chat(&self) -> Result<u64> {
        let mut c = self.client()?;
        let row = self.one("allocate a chat id", c.query_opt("SELECT nextval('ut_chat_ids')", &[]))?;
        self.put(c);
        self.num(&row, 0)
    }

    fn titled(&self, owner: &str, title: &str) -> Result<Option<Vec<u64>>> {
        self.find_titled(owner, title)
    }

    fn replica_versions(&self, chat: u64) -> (u64, u64) {
        let local = self.streams.lock().get(&Stream::chat(chat)).cloned();
        local.map_or((0, 0), |l| {
            let l = l.lock();
            (l.applied, l.pulled)
        })
    }

    fn notified(&self, chat: u64) -> Option<Notified> {
        if !self.listen || self.schema.load(std::sync::atomic::Ordering::Relaxed) < 2 {
            return None;
        }
        self.notices.start(&self.config, &self.tls);
        self.notices.get(chat)
    }

    fn release(&self, chat: u64) {
        let held = self.held.lock().remove(&chat);
        if held.is_some() {
            self.writing(false);
        }
        if let Some((mut c, _, _)) = held {
            let _ = c.batch_execute("ROLLBACK");
            self.put(c);
        }
    }
}

/// A new, empty directory for a replica: `undertext-fleet-PID-N-NANOS` under the URL's
/// `cache=` directory or the system's temporary directory.
fn make_replica_dir(url: &FleetUrl) -> Result<PathBuf> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let parent = url.cache.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&parent).map_err(|e| Error::io("create_dir", &parent, e))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    remove_dead_replicas(&parent);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = parent.join(format!("undertext-fleet-{}-{n}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| Error::io("create_dir", &dir, e))?;
    Ok(dir)
}

/// Removes the replicas that processes no longer running left in `parent` (a process killed
/// before it could remove its own). A replica is a cache: nothing in it is lost.
fn remove_dead_replicas(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("undertext-fleet-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// A PostgreSQL error with its server message and cause, on one line.
fn describe(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {} ({})", db.severity(), db.message(), db.code().code());
    }
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(x) = src {
        s.push_str(": ");
        s.push_str(&x.to_string());
        src = x.source();
    }
    s
}

thread_local! {
    /// The stores (their `Slots`' addresses) of which this thread holds a chat's lock.
    static WRITES: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The URL's bounds and timeouts.
#[derive(Debug, Clone, Copy)]
struct Limits {
    pooled: bool,
    pool_size: usize,
    pool_timeout: Duration,
    lock: Duration,
    statement: Duration,
    idle_in_transaction: Duration,
}

impl Limits {
    fn of(u: &FleetUrl) -> Limits {
        Limits {
            pooled: u.transaction_pooler,
            pool_size: u.pool_size,
            pool_timeout: u.pool_timeout,
            lock: u.lock_timeout,
            statement: u.statement_timeout,
            idle_in_transaction: u.idle_in_transaction_timeout,
        }
    }
}
