//! S3-compatible blob storage for fleet mode (`?blobs=s3://bucket/prefix`): a small synchronous
//! client, path-style requests over HTTP/1.1 (`std::net::TcpStream`), plain or TLS (`https://`
//! endpoints: rustls with its `ring` provider, Mozilla's roots from `webpki-roots` plus a PEM
//! bundle named by `s3_ca=` or `AWS_CA_BUNDLE`), signed with AWS Signature Version 4 (`hmac` +
//! `sha2`, already in the tree through the PostgreSQL client).
//! Only `HEAD`, `PUT` and `GET` of one object are needed: a blob's key is the prefix followed by
//! the BLAKE3 hex of its content, so a put is idempotent and needs no conditional write.
//!
//! An object's bytes (engine/FORMAT.md, "Fleet mode"): `kind` (u8), `codec` (u8), `raw_len`
//! (u32, little-endian), then the blob record's payload (the 32-byte id, then the body, stored
//! as the codec says) — the columns of a `ut_blobs` row, in one object.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

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

    /// True when the object exists.
    pub(crate) fn exists(&self, key: &str) -> Result<bool> {
        let (status, _) = self.request("HEAD", key, &[]).map_err(|e| self.fail("HEAD", key, e))?;
        match status {
            200 => Ok(true),
            404 => Ok(false),
            s => Err(self.fail("HEAD", key, format!("HTTP status {s}"))),
        }
    }

    /// Stores `body` at `key`.
    pub(crate) fn put(&self, key: &str, body: &[u8]) -> Result<()> {
        let (status, answer) = self.request("PUT", key, body).map_err(|e| self.fail("PUT", key, e))?;
        if status == 200 {
            return Ok(());
        }
        Err(self.fail("PUT", key, format!("HTTP status {status}: {}", String::from_utf8_lossy(&answer))))
    }

    /// Deletes the object at `key` (deleting a missing object succeeds, as S3 answers).
    pub(crate) fn delete(&self, key: &str) -> Result<()> {
        let (status, answer) = self.request("DELETE", key, &[]).map_err(|e| self.fail("DELETE", key, e))?;
        match status {
            200 | 204 | 404 => Ok(()),
            s => Err(self.fail(
                "DELETE",
                key,
                format!("HTTP status {s}: {}", String::from_utf8_lossy(&answer)),
            )),
        }
    }

    /// The object at `key`, or `None` when there is none.
    pub(crate) fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let (status, body) = self.request("GET", key, &[]).map_err(|e| self.fail("GET", key, e))?;
        match status {
            200 => Ok(Some(body)),
            404 => Ok(None),
            s => Err(self.fail("GET", key, format!("HTTP status {s}: {}", String::from_utf8_lossy(&body)))),
        }
    }

    /// Every object under the prefix, as (key, last modified in seconds since the epoch),
    /// in pages of up to 1,000 (ListObjectsV2).
    pub(crate) fn list(&self) -> Result<Vec<(String, u64)>> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut query = vec![("list-type", "2"), ("prefix", self.prefix.as_str())];
            if let Some(t) = &token {
                query.push(("continuation-token", t.as_str()));
            }
            let (status, body) =
                self.request_with("GET", "", &query, &[]).map_err(|e| self.fail("LIST", &self.prefix, e))?;
            if status != 200 {
                return Err(self.fail(
                    "LIST",
                    &self.prefix,
                    format!("HTTP status {status}: {}", String::from_utf8_lossy(&body)),
                ));
            }
            let page = ListPage::parse(&body).map_err(|why| self.fail("LIST", &self.prefix, why))?;
            out.extend(page.objects);
            match page.next {
                Some(t) if page.truncated => token = Some(t),
                _ => return Ok(out),
            }
        }
    }

    /// The prefix blob keys start with.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// One signed request; the status and the body.
    fn request(&self, method: &str, key: &str, body: &[u8]) -> std::result::Result<(u16, Vec<u8>), String> {
        self.request_with(method, key, &[], body)
    }

    /// One signed request with query parameters `query` (a bucket request when `key` is
    /// empty); the status and the body.
    fn request_with(
        &self,
        method: &str,
        key: &str,
        query: &[(&str, &str)],
        body: &[u8],
    ) -> std::result::Result<(u16, Vec<u8>), String> {
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
        let head = format!(
            "{method} {target} HTTP/1.1\r\nHost: {host}\r\nx-amz-date: {stamp}\r\nx-amz-content-sha256: {payload_hash}\r\n\
             Authorization: AWS4-HMAC-SHA256 Credential={ak}/{scope}, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={signature}\r\n\
             Content-Length: {len}\r\nConnection: close\r\n\r\n",
            host = self.host,
            ak = self.access_key,
            len = body.len(),
        );
        // Every address the name resolves to, in order, until one answers ("localhost" is
        // often ::1 first while a server listens on 127.0.0.1 only).
        let addrs: Vec<_> =
            self.host.to_socket_addrs().map_err(|e| format!("resolve {}: {e}", self.host))?.collect();
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
        let Some(mut s) = stream else { return Err(last) };
        s.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
        s.set_write_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        match &self.transport {
            Transport::Http => exchange(&mut s, head.as_bytes(), body, &mut answer, false)?,
            Transport::Https(config, name) => {
                let conn = rustls::ClientConnection::new(config.clone(), name.clone())
                    .map_err(|e| format!("TLS: {e}"))?;
                let mut tls = rustls::StreamOwned::new(conn, s);
                // A server that closes without TLS's close_notify after a whole response
                // (many do with `Connection: close`) loses nothing: rustls says
                // `UnexpectedEof`, and the response's own length is checked below.
                exchange(&mut tls, head.as_bytes(), body, &mut answer, true)?;
            }
        }
        parse_response(&answer, method == "HEAD")
    }
}

/// Sends `head` and `body` on `s` and reads the response to the end (the connection closes);
/// with `eof_ends`, an end without a clean close (`UnexpectedEof`) ends it too.
fn exchange(
    s: &mut impl ReadWrite,
    head: &[u8],
    body: &[u8],
    answer: &mut Vec<u8>,
    eof_ends: bool,
) -> std::result::Result<(), String> {
    s.write_all(head).map_err(|e| format!("send: {e}"))?;
    s.write_all(body).map_err(|e| format!("send: {e}"))?;
    s.flush().map_err(|e| format!("send: {e}"))?;
    match s.read_to_end(answer) {
        Ok(_) => Ok(()),
        Err(e) if eof_ends && e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(()),
        Err(e) => Err(format!("receive: {e}")),
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

/// The status and body of an HTTP/1.1 response read to the end (the connection closed).
fn parse_response(answer: &[u8], head_only: bool) -> std::result::Result<(u16, Vec<u8>), String> {
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("a response without a header end ({} bytes)", answer.len()))?;
    let head =
        std::str::from_utf8(&answer[..end]).map_err(|_| "a response header that is not UTF-8".to_string())?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("a response status line {status_line:?}"))?;
    let mut chunked = false;
    let mut length = None;
    for l in lines {
        if let Some((name, value)) = l.split_once(':') {
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
                chunked = true;
            } else if name == "content-length" {
                length = value.parse::<usize>().ok();
            }
        }
    }
    let rest = &answer[end + 4..];
    if head_only {
        return Ok((status, Vec::new()));
    }
    if chunked {
        return Ok((status, dechunk(rest)?));
    }
    match length {
        Some(n) if rest.len() < n => Err(format!("a body cut short: {} of {n} bytes", rest.len())),
        Some(n) => Ok((status, rest[..n].to_vec())),
        None => Ok((status, rest.to_vec())),
    }
}

fn dechunk(mut b: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n").ok_or("a chunk size line without its end")?;
        let size_text = std::str::from_utf8(&b[..eol]).map_err(|_| "a chunk size that is not text")?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("a chunk size {size_text:?}"))?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if b.len() < size + 2 {
            return Err("a chunk cut short".into());
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
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

    #[test]
    fn chunked_bodies_are_joined() {
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
            false,
        );
        assert_eq!(r, Ok((200, b"abcde".to_vec())));
    }
}
