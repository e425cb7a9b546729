//! The fleet URL: `postgres://user[:password]@host[:port]/db[?params]`, with Undertext's own
//! parameters taken out before the rest goes to PostgreSQL:
//!
//! * `blobs=postgres` (default): blobs in the `ut_blobs` table;
//! * `blobs=s3://bucket/prefix`: blobs in S3-compatible object storage, with `s3_endpoint=`
//!   (`http://` or `https://`), `s3_region=`, `s3_key=`, `s3_secret=`, `s3_ca=` (each else from
//!   `AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//!   `AWS_CA_BUNDLE`); `s3_retries=N` (default 5: tries of a request in all),
//!   `s3_backoff=T` (default 50 ms) and `s3_backoff_max=T` (default 2 s): the waits between
//!   tries (see `s3.rs`);
//! * `cache=DIR`: where the local replica of each open store is made (default: the system's
//!   temporary directory); it is removed when the store closes;
//! * `sslmode=disable|prefer|require|verify-ca|verify-full` (default `prefer`) and
//!   `sslrootcert=FILE|system`: TLS to PostgreSQL, as libpq reads them (see `tls.rs`);
//! * `pooler=transaction`: the URL names a transaction pooler (PgBouncer's
//!   `pool_mode = transaction`): no named statements, no session settings (see `conn.rs`);
//!   `pooler=none` (default): a direct connection, or a session pooler;
//! * `pool_size=N` (default 4): at most N connections open per store; `pool_timeout=T`
//!   (default 60 s): how long a call waits for one of them before it fails;
//! * `lock_timeout=T` (default 60 s), `statement_timeout=T` (default 120 s),
//!   `idle_in_transaction_session_timeout=T` (default 30 s): the server's settings of that
//!   name for the store's connections; `0` turns one off.
//!
//! * `schema=auto` (default): an open creates the schema, or migrates an older one, when it
//!   may; `schema=manual`: never (the operator runs `undertext fleet init|migrate`; see
//!   `schema.rs`);
//! * `notify=on` (default): this store's commits notify listeners (channel `ut_chats`, see
//!   `notify.rs`) and, on a direct connection, it listens; `notify=off`: neither.
//!
//! A time `T` is a whole number with a unit, `ms`, `s` or `min`; without one, milliseconds
//! (PostgreSQL's unit for these settings).

use std::path::PathBuf;
use std::time::Duration;

use super::s3::S3Url;
use super::schema::SchemaMode;
use super::tls::SslMode;
use crate::base::error::{Error, Result, hide_password};

/// A parsed fleet URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetUrl {
    /// What goes to PostgreSQL (the URL without Undertext's parameters).
    pub postgres: String,
    /// The URL as shown in messages: the password replaced by `***`.
    pub shown: String,
    /// Where the local replicas are made.
    pub cache: Option<PathBuf>,
    /// Where blobs go when not in PostgreSQL (`blobs=s3://…`).
    pub s3: Option<S3Url>,
    /// `sslmode=`.
    pub ssl_mode: SslMode,
    /// `sslrootcert=FILE` (`None`: Mozilla's roots, as `sslrootcert=system`).
    pub ssl_root: Option<PathBuf>,
    /// `pooler=transaction`: through a transaction pooler.
    pub transaction_pooler: bool,
    /// `pool_size=`: connections open per store, at most.
    pub pool_size: usize,
    /// `pool_timeout=`: how long a call waits for a connection when all are in use.
    pub pool_timeout: Duration,
    /// `lock_timeout=` (zero: off).
    pub lock_timeout: Duration,
    /// `statement_timeout=` (zero: off).
    pub statement_timeout: Duration,
    /// `idle_in_transaction_session_timeout=` (zero: off).
    pub idle_in_transaction_timeout: Duration,
    /// `schema=`: whether an open may create or migrate the schema.
    pub schema_mode: SchemaMode,
    /// `notify=`: commits notify listeners, and the store listens.
    pub notify: bool,
}

/// `pool_size` when the URL does not say.
pub const DEFAULT_POOL_SIZE: usize = 4;

/// Parses a time of the URL: a whole number with `ms`, `s` or `min`, else milliseconds.
fn parse_time(v: &str) -> Option<Duration> {
    let digits = v.len() - v.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let (n, unit) = v.split_at(digits);
    let n: u64 = n.parse().ok()?;
    match unit.trim() {
        "" | "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "min" => n.checked_mul(60).map(Duration::from_secs),
        _ => None,
    }
}

/// A time as messages show it: `5 s`, `250 ms`, `off` for zero.
pub fn show_time(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "off".into()
    } else if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

impl FleetUrl {
    /// Parses `url`.
    ///
    /// ```
    /// use undertext::fleet::FleetUrl;
    /// let u = FleetUrl::parse("postgres://app:secret@db.local:5432/agents?cache=/var/cache/ut&sslmode=disable")?;
    /// assert_eq!(u.postgres, "postgres://app:secret@db.local:5432/agents");
    /// assert_eq!(u.shown, "postgres://app:***@db.local:5432/agents");
    /// assert_eq!(u.cache.as_deref(), Some(std::path::Path::new("/var/cache/ut")));
    /// assert_eq!(u.ssl_mode, undertext::fleet::SslMode::Disable);
    /// let t = FleetUrl::parse("postgres://h/db?sslmode=verify-full&sslrootcert=/etc/ca.pem&pooler=transaction&pool_size=2&lock_timeout=5s&statement_timeout=1min&application_name=x")?;
    /// assert_eq!(t.postgres, "postgres://h/db?application_name=x");
    /// assert_eq!(t.ssl_root.as_deref(), Some(std::path::Path::new("/etc/ca.pem")));
    /// assert!(t.transaction_pooler);
    /// assert_eq!((t.pool_size, t.lock_timeout.as_secs(), t.statement_timeout.as_secs()), (2, 5, 60));
    /// assert!(FleetUrl::parse("postgres://h/db?sslmode=verify").is_err());
    /// assert!(FleetUrl::parse("postgres://h/db?lock_timeout=5 hours").is_err());
    /// assert!(FleetUrl::parse("postgres://h/db?pool_size=0").is_err());
    /// let m = FleetUrl::parse("postgres://h/db?schema=manual&notify=off")?;
    /// assert_eq!((m.schema_mode, m.notify), (undertext::fleet::SchemaMode::Manual, false));
    /// assert!(FleetUrl::parse("postgres://h/db?schema=never").is_err());
    /// assert!(FleetUrl::parse("postgres://h/db?blobs=ftp://x").is_err());
    /// let s = FleetUrl::parse("postgres://h/db?blobs=s3://bkt/ut/&s3_endpoint=http://127.0.0.1:9000&s3_secret=x")?;
    /// assert_eq!(s.postgres, "postgres://h/db");
    /// let s3 = s.s3.unwrap();
    /// assert_eq!((s3.bucket.as_str(), s3.prefix.as_str()), ("bkt", "ut/"));
    /// assert_eq!(s3.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
    /// assert_eq!((s3.retry.tries, s3.retry.backoff.as_millis()), (5, 50));
    /// let r = FleetUrl::parse("postgres://h/db?blobs=s3://b&s3_retries=2&s3_backoff=10ms&s3_backoff_max=1s")?;
    /// assert_eq!(r.s3.unwrap().retry, undertext::fleet::S3Retry { tries: 2, backoff: std::time::Duration::from_millis(10), backoff_max: std::time::Duration::from_secs(1) });
    /// assert!(FleetUrl::parse("postgres://h/db?blobs=s3://b&s3_retries=0").is_err());
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn parse(url: &str) -> Result<FleetUrl> {
        let bad = |why: String| Error::InvalidArgument(format!("fleet URL {}: {why}", hide_password(url)));
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(bad("expected it to start with postgres:// or postgresql://".into()));
        }
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, q),
            None => (url, ""),
        };
        let mut kept = Vec::new();
        let mut cache = None;
        let mut s3: Option<S3Url> = None;
        let (mut endpoint, mut region, mut key, mut secret, mut ca) = (None, None, None, None, None);
        let mut retry = super::s3::S3Retry::default();
        let (mut ssl_mode, mut ssl_root, mut transaction_pooler) = (SslMode::default(), None, false);
        let (mut pool_size, mut pool_timeout) = (DEFAULT_POOL_SIZE, Duration::from_secs(60));
        let mut lock_timeout = Duration::from_secs(60);
        let mut statement_timeout = Duration::from_secs(120);
        let mut idle_in_transaction_timeout = Duration::from_secs(30);
        let (mut schema_mode, mut notify) = (SchemaMode::Auto, true);
        let time = |k: &str, v: &str| {
            parse_time(v).ok_or_else(|| {
                bad(format!(
                    "{k}={v}: expected a whole number with ms, s or min (without one, milliseconds); 0 turns it off"
                ))
            })
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "blobs" => {
                    if v == "postgres" || v == "postgresql" {
                        s3 = None;
                    } else if let Some(u) = S3Url::parse(v) {
                        s3 = Some(u);
                    } else {
                        return Err(bad(format!(
                            "blobs={v}: expected blobs=postgres or blobs=s3://bucket/prefix"
                        )));
                    }
                }
                "s3_endpoint" => endpoint = Some(v.to_string()),
                "s3_region" => region = Some(v.to_string()),
                "s3_key" => key = Some(v.to_string()),
                "s3_secret" => secret = Some(v.to_string()),
                "s3_ca" => ca = Some(PathBuf::from(v)),
                "s3_retries" => {
                    retry.tries = v.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        bad(format!("s3_retries={v}: expected the tries of a request in all, 1 or more"))
                    })?;
                }
                "s3_backoff" => retry.backoff = time(k, v)?,
                "s3_backoff_max" => retry.backoff_max = time(k, v)?,
                "sslmode" => {
                    ssl_mode = SslMode::parse(v).ok_or_else(|| {
                        bad(format!(
                            "sslmode={v}: expected disable, prefer, require, verify-ca or verify-full"
                        ))
                    })?;
                }
                "sslrootcert" => {
                    if v.is_empty() {
                        return Err(bad(
                            "sslrootcert=: expected a PEM file of root certificates, or system".into()
                        ));
                    }
                    ssl_root = (v != "system").then(|| PathBuf::from(v));
                }
                "pooler" => {
                    transaction_pooler = match v {
                        "transaction" => true,
                        "none" | "session" => false,
                        _ => {
                            return Err(bad(format!(
                                "pooler={v}: expected transaction (PgBouncer's pool_mode = transaction), \
                                 session or none"
                            )));
                        }
                    };
                }
                "pool_size" => {
                    pool_size = v.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        bad(format!("pool_size={v}: expected a number of connections, 1 or more"))
                    })?;
                }
                "pool_timeout" => pool_timeout = time(k, v)?,
                "lock_timeout" => lock_timeout = time(k, v)?,
                "statement_timeout" => statement_timeout = time(k, v)?,
                "idle_in_transaction_session_timeout" => idle_in_transaction_timeout = time(k, v)?,
                "schema" => {
                    schema_mode = match v {
                        "auto" => SchemaMode::Auto,
                        "manual" => SchemaMode::Manual,
                        _ => return Err(bad(format!("schema={v}: expected auto or manual"))),
                    };
                }
                "notify" => {
                    notify = match v {
                        "on" => true,
                        "off" => false,
                        _ => return Err(bad(format!("notify={v}: expected on or off"))),
                    };
                }
                "cache" => {
                    if v.is_empty() {
                        return Err(bad("cache=: expected a directory".into()));
                    }
                    cache = Some(PathBuf::from(v));
                }
                _ => kept.push(pair),
            }
        }
        if let Some(u) = &mut s3 {
            (u.endpoint, u.region, u.access_key, u.secret_key, u.ca_file, u.retry) =
                (endpoint, region, key, secret, ca, retry);
        }
        let postgres = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
        Ok(FleetUrl {
            shown: hide_password(&postgres),
            postgres,
            cache,
            s3,
            ssl_mode,
            ssl_root,
            transaction_pooler,
            pool_size,
            pool_timeout,
            lock_timeout,
            statement_timeout,
            idle_in_transaction_timeout,
            schema_mode,
            notify,
        })
    }
}
