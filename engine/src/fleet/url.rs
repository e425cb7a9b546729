//! The fleet URL: `postgres://user[:password]@host[:port]/db[?params]`, with Undertext's own
//! parameters taken out before the rest goes to PostgreSQL:
//!
//! * `blobs=postgres` (default): blobs in the `ut_blobs` table;
//! * `blobs=s3://bucket/prefix`: blobs in S3-compatible object storage, with `s3_endpoint=`
//!   (`http://` or `https://`), `s3_region=`, `s3_key=`, `s3_secret=`, `s3_ca=` (each else from
//!   `AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//!   `AWS_CA_BUNDLE`);
//! * `cache=DIR`: where the local replica of each open store is made (default: the system's
//!   temporary directory); it is removed when the store closes.

use std::path::PathBuf;

use super::s3::S3Url;
use crate::error::{Error, Result, hide_password};

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
}

impl FleetUrl {
    /// Parses `url`.
    ///
    /// ```
    /// use undertext::fleet::FleetUrl;
    /// let u = FleetUrl::parse("postgres://app:secret@db.local:5432/agents?cache=/var/cache/ut&sslmode=disable")?;
    /// assert_eq!(u.postgres, "postgres://app:secret@db.local:5432/agents?sslmode=disable");
    /// assert_eq!(u.shown, "postgres://app:***@db.local:5432/agents?sslmode=disable");
    /// assert_eq!(u.cache.as_deref(), Some(std::path::Path::new("/var/cache/ut")));
    /// assert!(FleetUrl::parse("postgres://h/db?blobs=ftp://x").is_err());
    /// let s = FleetUrl::parse("postgres://h/db?blobs=s3://bkt/ut/&s3_endpoint=http://127.0.0.1:9000&s3_secret=x")?;
    /// assert_eq!(s.postgres, "postgres://h/db");
    /// let s3 = s.s3.unwrap();
    /// assert_eq!((s3.bucket.as_str(), s3.prefix.as_str()), ("bkt", "ut/"));
    /// assert_eq!(s3.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
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
            (u.endpoint, u.region, u.access_key, u.secret_key, u.ca_file) =
                (endpoint, region, key, secret, ca);
        }
        let postgres = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
        Ok(FleetUrl { shown: hide_password(&postgres), postgres, cache, s3 })
    }
}
