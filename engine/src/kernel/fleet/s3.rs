//! S3-compatible blob storage for fleet mode (`?blobs=s3://bucket/prefix`): a small synchronous
//! client, path-style requests over HTTP/1.1 (`std::net::TcpStream`), plain or TLS (`https://`
//! endpoints: rustls with its `ring` provider, Mozilla's roots from `webpki-roots` plus a PEM
//! bundle named by `s3_ca=` or `AWS_CA_BUNDLE`), signed with AWS Signature Version 4 (`hmac` +
//! `sha2`, already in the tree through the PostgreSQL client).
//! Only `HEAD`, `PUT`, `GET` and `DELETE` of one object (and a listing, for `gc`) are needed:
//! a blob's key is the prefix followed by the BLAKE3 hex of its content, so a put is idempotent
//! and needs no conditional write.
//!
//! **Connections and retries.** A client keeps up to [`IDLE_MAX`] connections open between
//! requests (HTTP/1.1 keep-alive; one idle longer than [`IDLE_FOR`] is closed rather than
//! reused), so a run of uploads or reads pays one TCP (and TLS) handshake, not one per
//! request. Every request this client makes is idempotent (a content-addressed key's body
//! never changes; deleting a missing object succeeds), so a request that fails on the way —
//! no connection, a connection closed or reset before a whole response, a response that does
//! not parse, or HTTP 408, 429, 500, 502, 503 or 504 — is sent again, at most `s3_retries`
//! times in all (default 5), after waits growing fourfold from `s3_backoff` (default 50 ms)
//! up to `s3_backoff_max` (default 2 s), each shortened by up to a quarter at random so that
//! processes that failed together do not retry together. A kept connection that the server
//! closed while it was idle (nothing received) is replaced at once, without counting a try.
//! The last failure is an [`Error::Backend`] that names the endpoint, the request, what was
//! received and how many tries were made. A certificate that does not verify is not retried.
//!
//! An object's bytes (engine/FORMAT.md, "Fleet mode"): `kind` (u8), `codec` (u8), `raw_len`
//! (u32, little-endian), then the blob record's payload (the 32-byte id, then the body, stored
//! as the codec says) — the columns of a `ut_blobs` row, in one object.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::base::error::{Error, Result};

/// Where blobs go when they are not in PostgreSQL, as the fleet URL names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Url {
    /// The bucket.
    pub bucket: String,
    /// The key prefix (may be empty; kept as written, e.g. `blobs/`).
    pub prefix: String,
    /// `http://host[:port]` or `https://host[:port]` (`s3_endpoint=`, else
    /// `AWS_ENDPOINT_URL`).
    pub endpoint: Option<String>,
    /// `s3_region=`, else `AWS_REGION`, else `us-east-1`.
    pub region: Option<String>,
    /// `s3_key=`, else `AWS_ACCESS_KEY_ID`.
    pub access_key: Option<String>,
    /// `s3_secret=`, else `AWS_SECRET_ACCESS_KEY`.
    pub secret_key: Option<String>,
    /// A PEM file of certificate authorities trusted besides Mozilla's for an `https://`
    /// endpoint (`s3_ca=`, else `AWS_CA_BUNDLE`).
    pub ca_file: Option<PathBuf>,
    /// How a failed request is tried again (`s3_retries=`, `s3_backoff=`, `s3_backoff_max=`).
    pub retry: S3Retry,
}

/// How the S3 client tries a failed request again (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct S3Retry {
    /// Tries in all, the first included (`s3_retries=`, default 5; 1: no retry).
    pub tries: u32,
    /// The wait before the second try (`s3_backoff=`, default 50 ms); each next wait is four
    /// times the last.
    pub backoff: Duration,
    /// The longest wait (`s3_backoff_max=`, default 2 s).
    pub backoff_max: Duration,
}

impl Default for S3Retry {
    fn default() -> S3Retry {
        S3Retry { tries: 5, backoff: Duration::from_millis(50), backoff_max: Duration::from_secs(2) }
    }
}

impl S3Url {
    /// Parses the value of `blobs=`: `s3://bucket[/prefix]`.
    pub(crate) fn parse(v: &str) -> Option<S3Url> {
        let rest = v.strip_prefix("s3://")?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return None;
        }
        Some(S3Url {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            endpoint: None,
            region: None,
            access_key: None,
            secret_key: None,
            ca_file: None,
            retry: S3Retry::default(),
        })
    }
}

/// How requests reach the endpoint.
#[derive(Clone)]
enum Transport {
    Http,
    /// TLS to the endpoint's host name (its certificate is checked against it).
    Https(Arc<rustls::ClientConfig>, rustls::pki_types::ServerName<'static>),
}

/// A connected (configured) bucket.
pub(crate) struct S3 {
    /// `host[:port]`, as sent in the `Host` header.
    host: String,
    bucket: String,
    prefix: String,
    region: String,
    access_key: String,
    secret_key: String,
    transport: Transport,
    retry: S3Retry,
    /// Connections kept for the next requests (at most [`IDLE_MAX`]).
    idle: Mutex<Vec<Link>>,
    /// `s3://bucket/prefix at http://host`, for messages.
    pub(crate) shown: String,
}

impl std::fmt::Debug for S3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3").field("at", &self.shown).finish_non_exhaustive()
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl S3 {
    /// Resolves the URL's settings with the environment's (`AWS_*`).
    pub(crate) fn new(u: &S3Url) -> Result<S3> {
        let bad = |why: &str| Error::InvalidArgument(format!("blobs=s3://{}/{}: {why}", u.bucket, u.prefix));
        let endpoint =
            u.endpoint.clone().or_else(|| env("AWS_ENDPOINT_URL_S3")).or_else(|| env("AWS_ENDPOINT_URL"));
        let Some(endpoint) = endpoint else {
            return Err(bad("expected an endpoint: s3_endpoint=http://host:port or AWS_ENDPOINT_URL"));
        };
        let (host, tls) = if let Some(h) = endpoint.strip_prefix("http://") {
            (h, false)
        } else if let Some(h) = endpoint.strip_prefix("https://") {
            (h, true)
        } else {
            return Err(bad(&format!(
                "endpoint {endpoint}: expected http://host[:port] or https://host[:port]"
            )));
        };
        let host = host.trim_end_matches('/').to_string();
        if host.is_empty() || host.contains('/') {
            return Err(bad(&format!(
                "endpoint {endpoint}: expected {}://host[:port] without a path",
                if tls { "https" } else { "http" }
            )));
        }
        let transport = if tls {
            let ca = u.ca_file.clone().or_else(|| env("AWS_CA_BUNDLE").map(PathBuf::from));
            let config = tls_config(ca.as_deref()).map_err(|why| bad(&why))?;
            let name = host_name(&host);
            let name = rustls::pki_types::ServerName::try_from(name.to_string()).map_err(|e| {
                bad(&format!("endpoint {endpoint}: {name:?} is not a host name for TLS: {e}"))
            })?;
            Transport::Https(config, name)
        } else {
            Transport::Http
        };
        let access_key = u.access_key.clone().or_else(|| env("AWS_ACCESS_KEY_ID"));
        let secret_key = u.secret_key.clone().or_else(|| env("AWS_SECRET_ACCESS_KEY"));
        let (Some(access_key), Some(secret_key)) = (access_key, secret_key) else {
            return Err(bad(
                "expected credentials: s3_key= and s3_secret=, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
            ));
        };
        let region = u.region.clone().or_else(|| env("AWS_REGION")).unwrap_or_else(|| "us-east-1".into());
        Ok(S3 {
            shown: format!("s3://{}/{} at {endpoint}", u.bucket, u.prefix),
            host,
            bucket: u.bucket.clone(),
            prefix: u.prefix.clone(),
            region,
            access_key,
            secret_key,
            transport,
            retry: u.retry,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// `s3://bucket/prefix`: where the objects are, whatever the endpoint.
    pub(crate) fn location(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }

    /// The key of the blob whose id is `hex`.
    pub(crate) fn key(&self, hex: &str) -> String {
        format!("{}{hex}", self.prefix)
    }

    fn fail(&self, what: &str, key: &str, why: String) -> Error {
        Error::Backend { url: self.shown.clone(), reason: format!("{what} {key}: {why}") }
    }

    /// A final answer's status that the caller does not expect, with the start of its body
    /// (S3's XML error names the cause).
    fn status(&self, what: &str, key: &str, status: u16, body: &[u8]) -> Error {
        self.fail(what, key, format!("HTTP status {status}: {}", excerpt(body)))
    }

    /// True when the object exists.
    pub(crate) fn exists(&self, key: &str) -> Result<bool> {
        match self.call("HEAD", key, &[], &[])? {
            (200, _) => Ok(true),
            (404, _) => Ok(false),
            (s, body) => Err(self.status("HEAD", key, s, &body)),
        }
    }

    /// Stores `body` at `key`.
    pub(crate) fn put(&self, key: &str, body: &[u8]) -> Result<()> {
        match self.call("PUT", key, &[], body)? {
            (200, _) => Ok(()),
            (s, answer) => Err(self.status("PUT", key, s, &answer)),
        }
    }

    /// Deletes the object at `key` (deleting a missing object succeeds, as S3 answers).
    pub(crate) fn delete(&self, key: &str) -> Result<()> {
        match self.call("DELETE", key, &[], &[])? {
            (200 | 204 | 404, _) => Ok(()),
            (s, answer) => Err(self.status("DELETE", key, s, &answer)),
        }
    }

    /// The object at `key`, or `None` when there is none.
    pub(crate) fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        match self.call("GET", key, &[], &[])? {
            (200, body) => Ok(Some(body)),
            (404, _) => Ok(None),
            (s, body) => Err(self.status("GET", key, s, &body)),
        }
    }

    /// Every object under the prefix, as (key, last modified in seconds since the epoch),
    /// given to `each` a page of up to 1,000 at a time (ListObjectsV2), so that a bucket of
    /// any size is listed in bounded memory.
    pub(crate) fn list(&self, mut each: impl FnMut(Vec<(String, u64)>) -> Result<()>) -> Result<()> {
        let mut token: Option<String> = None;
        loop {
            let mut query = vec![("list-type", "2"), ("prefix", self.prefix.as_str())];
            if let Some(t) = &token {
                query.push(("continuation-token", t.as_str()));
            }
            let body = match self.call_with("LIST", "GET", "", &query, &[])? {
                (200, body) => body,
                (s, body) => return Err(self.status("LIST", &self.prefix, s, &body)),
            };
            let page = ListPage::parse(&body).map_err(|why| self.fail("LIST", &self.prefix, why))?;
            each(page.objects)?;
            match page.next {
                Some(t) if page.truncated => token = Some(t),
                _ => return Ok(()),
            }
        }
    }

    /// The prefix blob keys start with.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// One request on object `key`, retried as the module says; the final status and body.
    fn call(&self, method: &str, key: &str, query: &[(&str, &str)], body: &[u8]) -> Result<(u16, Vec<u8>)> {
        self.call_with(method, method, key, query, body)
    }

    /// One request (a bucket request when `key` is empty), named `what` in messages, sent
    /// until it gets an answer that is not worth retrying or its tries are spent (then an
    /// error naming the last failure and the tries).
    fn call_with(
        &self,
        what: &str,
        method: &str,
        key: &str,
        query: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(u16, Vec<u8>)> {
        let started = Instant::now();
        let tries = self.retry.tries.max(1);
        let mut wait = self.retry.backoff;
        let mut attempt = 1;
        loop {
            let why = match self.once(method, key, query, body) {
                Ok((status, answer)) if !retried_status(status) => return Ok((status, answer)),
                Ok((status, answer)) => Failure::retry(format!("HTTP status {status}: {}", excerpt(&answer))),
                Err(f) => f,
            };
            if !why.retry || attempt >= tries {
                let spent = if attempt > 1 {
                    let took = started.elapsed();
                    let took = if took < Duration::from_secs(10) {
                        format!("{} ms", took.as_millis())
                    } else {
                        format!("{:.1} s", took.as_secs_f64())
                    };
                    format!(" (after {attempt} tries in {took}; s3_retries={tries})")
                } else if why.retry {
                    format!(" (s3_retries={tries})")
                } else {
                    String::new()
                };
                return Err(self.fail(
                    what,
                    if key.is_empty() { &self.prefix } else { key },
                    why.why + &spent,
                ));
            }
            tracing::debug!(endpoint = %self.shown, what, key, attempt, error = %why.why, "S3 request retried");
            std::thread::sleep(jittered(wait));
            wait = (wait * 4).min(self.retry.backoff_max.max(self.retry.backoff));
            attempt += 1;
        }
    }

    /// One try of a request: on a kept connection when one is idle (one the server closed
    /// meanwhile, with nothing received, is replaced by a new one at once), else on a new
    /// one; the connection is kept afterwards when the response allows it.
    fn once(
        &self,
        method: &str,
        key: &str,
        query: &[(&str, &str)],
        body: &[u8],
    ) -> std::result::Result<(u16, Vec<u8>), Failure> {
        let head = self.signed_head(method, key, query, body);
        loop {
            let (mut link, kept) = match self.take_idle() {
                Some(l) => (l, true),
                None => (self.connect()?, false),
            };
            match exchange(&mut *link.stream, head.as_bytes(), body, method == "HEAD") {
                Ok(r) => {
                    if r.keep {
                        self.give_back(link);
                    }
                    return Ok((r.status, r.body));
                }
                Err(f) if kept && f.nothing_received => continue,
                Err(f) => return Err(f),
            }
        }
    }

    /// An idle kept connection, if one was used recently enough.
    fn take_idle(&self) -> Option<Link> {
        let mut idle = self.idle.lock();
        while let Some(l) = idle.pop() {
            if l.since.elapsed() < IDLE_FOR {
                return Some(l);
            }
        }
        None
    }

    /// Keeps `link` for the next request (up to [`IDLE_MAX`]; the rest are closed).
    fn give_back(&self, mut link: Link) {
        link.since = Instant::now();
        let mut idle = self.idle.lock();
        if idle.len() < IDLE_MAX {
            idle.push(link);
        }
    }

    /// A new connection to the endpoint: every address its name resolves to, in order, until
    /// one answers ("localhost" is often ::1 first while a server listens on 127.0.0.1 only);
    /// through TLS for an `https://` endpoint.
    fn connect(&self) -> std::result::Result<Link, Failure> {
        let addrs: Vec<_> = self
            .host
            .to_socket_addrs()
            .map_err(|e| Failure::retry(format!("resolve {}: {e}", self.host)))?
            .collect();
        let mut last = format!("resolve {}: no address", self.host);
        let mut stream = None;
        for addr in &addrs {
            match TcpStream::connect_timeout(addr, Duration::from_secs(10)) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = format!("connect to {addr}: {e}"),
            }
        }
        let Some(s) = stream else { return Err(Failure::retry(last)) };
        let setup = |e: std::io::Error| Failure::retry(format!("set up the connection: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(60))).map_err(setup)?;
        s.set_write_timeout(Some(Duration::from_secs(60))).map_err(setup)?;
        s.set_nodelay(true).map_err(setup)?;
        let stream: Box<dyn ReadWrite + Send> = match &self.transport {
            Transport::Http => Box::new(s),
            Transport::Https(config, name) => {
                let conn = rustls::ClientConnection::new(config.clone(), name.clone())
                    .map_err(|e| Failure::fatal(format!("TLS: {e}")))?;
                Box::new(rustls::StreamOwned::new(conn, s))
            }
        };
        Ok(Link { stream, since: Instant::now() })
    }

    /// The head of a signed request (AWS Signature Version 4) of `method` on `key` (the
    /// bucket when empty) with query parameters `query`.
    fn signed_head(&self, method: &str, key: &str, query: &[(&str, &str)], body: &[u8]) -> String {
        let path = if key.is_empty() {
            format!("/{}", uri_encode(&self.bucket))
        } else {
            format!("/{}/{}", uri_encode(&self.bucket), uri_encode(key))
        };
        // SigV4's canonical query: names sorted, names and values encoded ('/' too).
        let mut q: Vec<(String, String)> =
            query.iter().map(|(k, v)| (query_encode(k), query_encode(v))).collect();
        q.sort();
        let canonical_query = q.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
        let target =
            if canonical_query.is_empty() { path.clone() } else { format!("{path}?{canonical_query}") };
        let (date, stamp) = amz_date(SystemTime::now());
        let payload_hash = hex(&Sha256::digest(body));
        let canonical = format!(
            "{method}\n{path}\n{canonical_query}\nhost:{}\nx-amz-content-sha256:{payload_hash}\nx-amz-date:{stamp}\n\nhost;x-amz-content-sha256;x-amz-date\n{payload_hash}",
            self.host
        );
        let scope = format!("{date}/{}/s3/aws4_request", self.region);
        let to_sign =
            format!("AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}", hex(&Sha256::digest(canonical.as_bytes())));
        let mut k = hmac(format!("AWS4{}", self.secret_key).as_bytes(), date.as_bytes());
        for part in [self.region.as_str(), "s3", "aws4_request"] {
            k = hmac(&k, part.as_bytes());
        }
        let signature = hex(&hmac(&k, to_sign.as_bytes()));
        format!(
            "{method} {target} HTTP/1.1\r\nHost: {host}\r\nx-amz-date: {stamp}\r\nx-amz-content-sha256: {payload_hash}\r\n\
             Authorization: AWS4-HMAC-SHA256 Credential={ak}/{scope}, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={signature}\r\n\
             Content-Length: {len}\r\n\r\n",
            host = self.host,
            ak = self.access_key,
            len = body.len(),
        )
    }
}

/// Connections kept idle per client, at most.
pub(crate) const IDLE_MAX: usize = 4;

/// How long a connection may sit idle and still be reused (servers close idle keep-alive
/// connections after some seconds; AWS after about 20).
pub(crate) const IDLE_FOR: Duration = Duration::from_secs(15);

/// A connection to the endpoint, plain or TLS, and since when it is idle.
struct Link {
    stream: Box<dyn ReadWrite + Send>,
    since: Instant,
}

/// Why one try of a request failed.
#[derive(Debug)]
struct Failure {
    why: String,
    /// Worth another try (the network, the server's state), not a refusal that would repeat.
    retry: bool,
    /// The connection ended before any byte of a response: on a kept connection, the server
    /// closed it while it was idle.
    nothing_received: bool,
}

impl Failure {
    fn retry(why: String) -> Failure {
        Failure { why, retry: true, nothing_received: false }
    }

    fn fatal(why: String) -> Failure {
        Failure { why, retry: false, nothing_received: false }
    }
}

/// Statuses worth another try: a timeout, throttling (S3's `SlowDown` is 503), a server error.
fn retried_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504)
}

/// `d` less up to a quarter of it, at random (the clock's nanoseconds are random enough to
/// keep processes that failed together from retrying together).
fn jittered(d: Duration) -> Duration {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |t| t.subsec_nanos());
    d.saturating_sub(d / 4 * (nanos % 1024) / 1024)
}

/// The start of what a server sent, for a message: printable ASCII as it is, the rest
/// escaped, at most 200 bytes.
fn excerpt(b: &[u8]) -> String {
    let shown: String =
        b.iter().take(200).flat_map(|&c| std::ascii::escape_default(c)).map(char::from).collect();
    if b.len() > 200 { format!("\"{shown}…\" ({} bytes)", b.len()) } else { format!("\"{shown}\"") }
}

/// A response as read from a kept connection.
#[derive(Debug, PartialEq, Eq)]
struct Response {
    status: u16,
    body: Vec<u8>,
    /// The connection may carry the next request (the body was delimited, nothing followed
    /// it, and the server did not say `Connection: close`).
    keep: bool,
}

/// Sends `head` and `body` on `s` and reads one response (a `HEAD` request's has no body).
fn exchange(
    s: &mut (impl Read + Write + ?Sized),
    head: &[u8],
    body: &[u8],
    head_only: bool,
) -> std::result::Result<Response, Failure> {
    let sent = |e: std::io::Error| {
        // A certificate the client does not trust shows at the first write (the handshake).
        let tls = tls_refusal(&e);
        Failure { retry: !tls, nothing_received: !tls, why: format!("send: {e}") }
    };
    s.write_all(head).map_err(sent)?;
    s.write_all(body).map_err(sent)?;
    s.flush().map_err(sent)?;
    read_response(s, head_only)
}

/// True for TLS's own refusal (a certificate that does not verify, a protocol alert), which
/// another try would meet again.
fn tls_refusal(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::InvalidData
        && e.get_ref().is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
}

/// Reads bytes from `s` onto `buf`; 0 at the end of the stream (a TLS session's end without
/// its close_notify included: many servers end so after a whole response, whose own length
/// is checked).
fn fill(s: &mut (impl Read + ?Sized), buf: &mut Vec<u8>) -> std::result::Result<usize, Failure> {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match s.read(&mut chunk) {
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(n);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(0),
            Err(e) => {
                return Err(Failure {
                    why: format!("receive: {e} ({} bytes of a response received)", buf.len()),
                    retry: !tls_refusal(&e),
                    nothing_received: buf.is_empty()
                        && matches!(
                            e.kind(),
                            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                        ),
                });
            }
        }
    }
}

/// Largest response head read.
const MAX_HEAD: usize = 64 * 1024;

/// Reads one HTTP/1.1 response from `s`: its head, then its body as the head delimits it
/// (`Content-Length`, chunked, or to the end of the connection, which is then not kept).
fn read_response(s: &mut (impl Read + ?Sized), head_only: bool) -> std::result::Result<Response, Failure> {
    let mut buf = Vec::new();
    let end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        if buf.len() > MAX_HEAD {
            return Err(Failure::retry(format!(
                "a response head longer than {MAX_HEAD} bytes: {}",
                excerpt(&buf)
            )));
        }
        if fill(s, &mut buf)? == 0 {
            return Err(if buf.is_empty() {
                Failure {
                    why: "the connection closed before a response (0 bytes received)".into(),
                    retry: true,
                    nothing_received: true,
                }
            } else {
                Failure::retry(format!(
                    "a response without a header end: the connection closed after {} bytes: {}",
                    buf.len(),
                    excerpt(&buf)
                ))
            });
        }
    };
    let head = Head::parse(&buf[..end]).map_err(|why| Failure::retry(format!("{why}: {}", excerpt(&buf))))?;
    let mut rest = buf.split_off(end + 4);
    let no_body = head_only || head.status / 100 == 1 || head.status == 204 || head.status == 304;
    let mut keep = !head.close;
    let body = if no_body {
        keep &= rest.is_empty();
        Vec::new()
    } else if head.chunked {
        let (body, used) = loop {
            match dechunk(&rest)
                .map_err(|why| Failure::retry(format!("HTTP status {}: {why}", head.status)))?
            {
                Some(done) => break done,
                None if fill(s, &mut rest)? == 0 => {
                    return Err(Failure::retry(format!(
                        "HTTP status {}: a chunked body cut short after {} bytes",
                        head.status,
                        rest.len()
                    )));
                }
                None => {}
            }
        };
        keep &= used == rest.len();
        body
    } else if let Some(n) = head.length {
        while rest.len() < n {
            if fill(s, &mut rest)? == 0 {
                return Err(Failure::retry(format!(
                    "HTTP status {}: a body cut short: {} of {n} bytes",
                    head.status,
                    rest.len()
                )));
            }
        }
        keep &= rest.len() == n;
        rest.truncate(n);
        rest
    } else {
        while fill(s, &mut rest)? > 0 {}
        keep = false;
        rest
    };
    Ok(Response { status: head.status, body, keep })
}

/// What a response head says that the client needs.
struct Head {
    status: u16,
    chunked: bool,
    length: Option<usize>,
    /// `Connection: close`.
    close: bool,
}

impl Head {
    fn parse(head: &[u8]) -> std::result::Result<Head, String> {
        let head = std::str::from_utf8(head).map_err(|_| "a response head that is not UTF-8".to_string())?;
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or("");
        let status: u16 = status_line
            .strip_prefix("HTTP/1.")
            .and_then(|s| s.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("a response status line {status_line:?}"))?;
        let mut h = Head { status, chunked: false, length: None, close: status_line.starts_with("HTTP/1.0") };
        for l in lines {
            if let Some((name, value)) = l.split_once(':') {
                let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
                if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
                    h.chunked = true;
                } else if name == "content-length" {
                    h.length = Some(value.parse().map_err(|_| format!("a Content-Length {value:?}"))?);
                } else if name == "connection" {
                    h.close = value.eq_ignore_ascii_case("close");
                }
            }
        }
        Ok(h)
    }
}

/// The body of a chunked transfer and the bytes of `b` it took, or `None` when `b` does not
/// hold all of it yet.
fn dechunk(b: &[u8]) -> std::result::Result<Option<(Vec<u8>, usize)>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let Some(eol) = b[at..].windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
        let size_text = std::str::from_utf8(&b[at..at + eol]).map_err(|_| "a chunk size that is not text")?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("a chunk size {size_text:?}"))?;
        at += eol + 2;
        if size == 0 {
            // Trailer lines, if any, then an empty line.
            loop {
                let Some(eol) = b[at..].windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
                at += eol + 2;
                if eol == 0 {
                    return Ok(Some((out, at)));
                }
            }
        }
        if b.len() < at + size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&b[at..at + size]);
        at += size + 2;
    }
}

/// A byte stream both ways: a TCP socket or a TLS session on one.
trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// The host of `host[:port]` (a bracketed IPv6 address without its brackets).
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    host.rsplit_once(':')
        .map_or(host, |(h, port)| if port.chars().all(|c| c.is_ascii_digit()) { h } else { host })
}

/// TLS settings for `https://` endpoints: Mozilla's roots, plus the authorities of the PEM
/// file `ca` when one is named.
fn tls_config(ca: Option<&std::path::Path>) -> std::result::Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    if let Some(path) = ca {
        let shown = path.display();
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("CA bundle {shown}: {e}"))?
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| format!("CA bundle {shown}: {e}"))?;
        if certs.is_empty() {
            return Err(format!("CA bundle {shown}: expected PEM certificates, found none"));
        }
        for c in certs {
            roots.add(c).map_err(|e| format!("CA bundle {shown}: a certificate rustls refuses: {e}"))?;
        }
    }
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
    Ok(Arc::new(config))
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // An HMAC takes a key of any length: new_from_slice cannot fail.
    let Ok(mut m) = <Hmac<Sha256> as KeyInit>::new_from_slice(key) else { return Vec::new() };
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

fn hex(b: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// One page of a ListObjectsV2 answer.
#[derive(Debug, PartialEq, Eq)]
struct ListPage {
    /// (key, last modified, seconds since the epoch).
    objects: Vec<(String, u64)>,
    truncated: bool,
    next: Option<String>,
}

impl ListPage {
    /// Reads the elements the collection needs from the XML of one page.
    fn parse(body: &[u8]) -> std::result::Result<ListPage, String> {
        let xml = std::str::from_utf8(body).map_err(|_| "a listing that is not UTF-8".to_string())?;
        if !xml.contains("<ListBucketResult") {
            return Err(format!(
                "expected a ListBucketResult, found {:?}",
                xml.chars().take(120).collect::<String>()
            ));
        }
        let mut objects = Vec::new();
        for block in xml.split("<Contents>").skip(1) {
            let block = block.split("</Contents>").next().unwrap_or("");
            let key = element(block, "Key").ok_or("an object without a Key")?;
            let modified = element(block, "LastModified").ok_or("an object without a LastModified")?;
            let at =
                parse_time(&modified).ok_or_else(|| format!("LastModified {modified:?}: not a UTC time"))?;
            objects.push((key, at));
        }
        Ok(ListPage {
            objects,
            truncated: element(xml, "IsTruncated").as_deref() == Some("true"),
            next: element(xml, "NextContinuationToken"),
        })
    }
}

/// The text of the first `<name>…</name>` in `xml`, its entities decoded.
fn element(xml: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&format!("</{name}>"))?;
    unescape(&xml[start..end])
}

/// XML's five entities and numeric references; `None` for an unknown one.
fn unescape(t: &str) -> Option<String> {
    let mut out = String::with_capacity(t.len());
    let mut rest = t;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let semi = rest[i..].find(';')? + i;
        let c = match &rest[i + 1..semi] {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            n if n.starts_with("#x") => char::from_u32(u32::from_str_radix(&n[2..], 16).ok()?)?,
            n if n.starts_with('#') => char::from_u32(n[1..].parse().ok()?)?,
            _ => return None,
        };
        out.push(c);
        rest = &rest[semi + 1..];
    }
    out.push_str(rest);
    Some(out)
}

/// `YYYY-MM-DDTHH:MM:SS[.fff]Z` as seconds since the epoch.
fn parse_time(t: &str) -> Option<u64> {
    let t = t.strip_suffix('Z')?;
    let (date, time) = t.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let time = time.split('.').next()?;
    let mut h = time.split(':').map(|x| x.parse::<i64>().ok());
    let (hh, mm, ss) = (h.next()??, h.next()??, h.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm), the inverse of `amz_date`'s.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()
}

/// SigV4's encoding of a query name or value: unreserved characters kept, the rest `%XX`.
fn query_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s.as_bytes() {
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'~') {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

/// SigV4's URI encoding of a path: unreserved characters and `/` kept, the rest `%XX`.
fn uri_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s.as_bytes() {
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

/// (`YYYYMMDD`, `YYYYMMDDTHHMMSSZ`) in UTC.
fn amz_date(t: SystemTime) -> (String, String) {
    let secs = t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let date = format!("{y:04}{m:02}{d:02}");
    let stamp = format!("{date}T{:02}{:02}{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60);
    (date, stamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(amz_date(UNIX_EPOCH).1, "19700101T000000Z");
        assert_eq!(amz_date(UNIX_EPOCH + Duration::from_secs(1_709_251_199)).1, "20240229T235959Z");
    }

    #[test]
    fn signing_key_matches_the_aws_example() {
        // AWS's documented example (Signature Version 4, "deriving the signing key").
        let mut k = hmac(b"AWS4wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", b"20120215");
        for p in ["us-east-1", "iam", "aws4_request"] {
            k = hmac(&k, p.as_bytes());
        }
        assert_eq!(hex(&k), "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d");
    }

    #[test]
    fn times_read_back_what_amz_date_writes() {
        for secs in [0u64, 951_782_400, 1_709_251_199, 1_764_620_969, 4_102_444_800] {
            let stamp = amz_date(UNIX_EPOCH + Duration::from_secs(secs)).1;
            let iso = format!(
                "{}-{}-{}T{}:{}:{}.000Z",
                &stamp[0..4],
                &stamp[4..6],
                &stamp[6..8],
                &stamp[9..11],
                &stamp[11..13],
                &stamp[13..15]
            );
            assert_eq!(parse_time(&iso), Some(secs), "{iso}");
        }
        assert_eq!(parse_time("2026-13-01T00:00:00Z"), None);
        assert_eq!(parse_time("2026-12-01 00:00:00"), None);
    }

    #[test]
    fn a_listing_page_gives_keys_times_and_the_next_token() {
        let xml = b"<?xml version=\"1.0\"?><ListBucketResult xmlns=\"x\"><Name>b</Name><Prefix>t/</Prefix>\
            <IsTruncated>true</IsTruncated><Contents><Key>t/a&amp;b</Key><LastModified>1970-01-01T00:01:00.000Z</LastModified>\
            <Size>3</Size></Contents><Contents><Key>t/c</Key><LastModified>1970-01-02T00:00:00Z</LastModified></Contents>\
            <NextContinuationToken>tok/1=</NextContinuationToken></ListBucketResult>";
        let page = ListPage::parse(xml).unwrap();
        assert_eq!(page.objects, vec![("t/a&b".to_string(), 60), ("t/c".to_string(), 86_400)]);
        assert!(page.truncated);
        assert_eq!(page.next.as_deref(), Some("tok/1="));
        assert!(ListPage::parse(b"<Error><Code>AccessDenied</Code></Error>").is_err());
        assert!(
            ListPage::parse(b"<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>")
                .is_err()
        );
    }

    #[test]
    fn query_values_are_encoded_slashes_included() {
        assert_eq!(query_encode("t/x y=1"), "t%2Fx%20y%3D1");
    }

    /// A stream that gives `data` a few bytes per read, then ends.
    struct Slow<'a>(&'a [u8]);

    impl Read for Slow<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.len().min(buf.len()).min(3);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn read(answer: &[u8], head_only: bool) -> std::result::Result<Response, String> {
        read_response(&mut Slow(answer), head_only).map_err(|f| f.why)
    }

    #[test]
    fn chunked_bodies_are_joined_across_reads_and_keep_the_connection() {
        let r = read(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
            false,
        );
        assert_eq!(r, Ok(Response { status: 200, body: b"abcde".to_vec(), keep: true }));
        let r = read(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nx-t: 1\r\n\r\n",
            false,
        );
        assert_eq!(r.map(|r| r.body), Ok(b"abc".to_vec()));
        let cut = read(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab", false).unwrap_err();
        assert!(cut.contains("chunked body cut short"), "{cut}");
    }

    #[test]
    fn a_body_is_read_by_its_length_and_the_connection_kept_unless_the_server_closes_it() {
        let r = read(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false);
        assert_eq!(r, Ok(Response { status: 200, body: b"hello".to_vec(), keep: true }));
        let r = read(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello", false);
        assert_eq!(r.map(|r| r.keep), Ok(false));
        let r = read(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", false);
        assert_eq!(r, Ok(Response { status: 404, body: Vec::new(), keep: true }));
        // A HEAD answer's length describes a body that is not sent.
        let r = read(b"HTTP/1.1 200 OK\r\nContent-Length: 12345\r\n\r\n", true);
        assert_eq!(r, Ok(Response { status: 200, body: Vec::new(), keep: true }));
        // Without a length, the body runs to the end of the connection.
        let r = read(b"HTTP/1.1 200 OK\r\n\r\nall of it", false);
        assert_eq!(r, Ok(Response { status: 200, body: b"all of it".to_vec(), keep: false }));
    }

    #[test]
    fn a_broken_response_says_what_was_received() {
        let f = read_response(&mut Slow(b""), false).unwrap_err();
        assert!(f.nothing_received && f.retry, "{f:?}");
        assert_eq!(f.why, "the connection closed before a response (0 bytes received)");
        let why = read(b"HTTP/1.1 503 Slow", false).unwrap_err();
        assert!(
            why.contains("without a header end")
                && why.contains("after 17 bytes")
                && why.contains("503 Slow"),
            "{why}"
        );
        let why = read(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", false).unwrap_err();
        assert!(why.contains("cut short: 3 of 10 bytes"), "{why}");
        let why = read(b"SSH-2.0-OpenSSH\r\n\r\n", false).unwrap_err();
        assert!(why.contains("status line") && why.contains("SSH-2.0"), "{why}");
        assert_eq!(excerpt(b"a\x00b"), "\"a\\x00b\"");
    }

    #[test]
    fn waits_are_jittered_down_by_at_most_a_quarter() {
        for _ in 0..100 {
            let d = jittered(Duration::from_millis(800));
            assert!(d >= Duration::from_millis(600) && d <= Duration::from_millis(800), "{d:?}");
        }
    }
}
