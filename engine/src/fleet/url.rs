//! The fleet URL: `postgres://user[:password]@host[:port]/db[?params]`, with Undertext's own
//! parameters taken out before the rest goes to PostgreSQL:
//!
//! * `blobs=postgres` (default): blobs in the `ut_blobs` table;
//! * `cache=DIR`: where the local replica of each open store is made (default: the system's
//!   temporary directory); it is removed when the store closes.

use std::path::PathBuf;

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
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "blobs" => {
                    if v != "postgres" && v != "postgresql" {
                        return Err(bad(format!(
                            "blobs={v}: expected blobs=postgres (S3-compatible storage is not built in yet)"
                        )));
                    }
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
        let postgres = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
        Ok(FleetUrl { shown: hide_password(&postgres), postgres, cache })
    }
}
