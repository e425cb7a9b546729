//! The S3 client when the network or the server fails, against s3s-fs (`scripts/fleet-servers`):
//!
//! * a request whose connections are closed before an answer is retried (a proxy in the test
//!   closes the first ones), and one that never gets an answer fails with an error naming the
//!   endpoint, the request, what was received and the tries;
//! * requests keep their connection (the proxy counts the connections opened);
//! * `gc` with s3s-fs stopped, before it starts and in the middle of its sweep, fails
//!   clearly and loses nothing; once s3s-fs is back, `gc` completes.
//!
//! A file of its own: its tests stop the S3 server that every fleet test with blobs in S3
//! uses (cargo runs test binaries one after another), and take turns here. Needs
//! `UNDERTEXT_FLEET_URL`, `UNDERTEXT_FLEET_S3`, `UNDERTEXT_FLEET_S3_DIR` and
//! `UNDERTEXT_FLEET_DIR` (to stop and start s3s-fs): `scripts/test-fleet` sets them.

#![cfg(feature = "fleet")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use undertext::{ChatMeta, Error, NewMessage, Part, Store};
use undertext_tests::fleet::{fleet_url, opts, owner};

/// One test at a time: they stop the S3 server.
static TURN: Mutex<()> = Mutex::new(());

/// The servers of this run: the fleet URL, the S3 parameters, the bucket's directory and the
/// servers' directory; `None` (with a note) when the run has no S3 server.
struct Servers {
    url: String,
    s3: String,
    bucket: PathBuf,
    dir: PathBuf,
}

impl Servers {
    fn get() -> Option<Servers> {
        let url = fleet_url()?;
        let var = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
        let (Some(s3), Some(bucket), Some(dir)) =
            (var("UNDERTEXT_FLEET_S3"), var("UNDERTEXT_FLEET_S3_DIR"), var("UNDERTEXT_FLEET_DIR"))
        else {
            // A run without S3 (scripts/test-fleet with UNDERTEXT_FLEET_S3=0) skips these, as
            // fleet_gc.rs skips its S3 half.
            eprintln!(
                "skipped: no S3 server (UNDERTEXT_FLEET_S3, _S3_DIR and UNDERTEXT_FLEET_DIR: scripts/test-fleet)"
            );
            return None;
        };
        Some(Servers { url, s3, bucket: PathBuf::from(bucket), dir: PathBuf::from(dir) })
    }

    /// s3s-fs's `host:port`, from `s3_endpoint=http://…` of the S3 parameters.
    fn endpoint(&self) -> String {
        let at = self.s3.split('&').find_map(|p| p.strip_prefix("s3_endpoint=http://"));
        at.expect("UNDERTEXT_FLEET_S3 names an http:// endpoint").to_string()
    }

    /// The fleet URL with blobs in S3 at `endpoint` (`host:port`), and `extra` parameters.
    fn url_at(&self, endpoint: &str, extra: &str) -> String {
        let params: Vec<String> = self
            .s3
            .split('&')
            .map(|p| {
                if p.starts_with("s3_endpoint=") {
                    format!("s3_endpoint=http://{endpoint}")
                } else {
                    p.into()
                }
            })
            .collect();
        let sep = if self.url.contains('?') { '&' } else { '?' };
        format!("{}{sep}{}{extra}", self.url, params.join("&"))
    }

    /// `scripts/fleet-servers s3-stop` or `s3-start` on this run's servers.
    fn s3(&self, what: &str) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/fleet-servers");
        let status = std::process::Command::new(script).arg(what).arg(&self.dir).status().unwrap();
        assert!(status.success(), "fleet-servers {what}: {status}");
    }

    /// The object of blob `id` on disk (s3s-fs keeps an object as a file named by its key).
    fn object(&self, id: &[u8]) -> PathBuf {
        self.bucket.join("t").join(id.iter().map(|b| format!("{b:02x}")).collect::<String>())
    }
}

/// A TCP proxy to s3s-fs that counts connections, closes the first `drop_first` at once,
/// and, when `stop_at_delete` is set, stops s3s-fs when it sees that many `DELETE` requests
/// (the last one is not forwarded).
#[derive(Default)]
struct Proxy {
    connections: AtomicUsize,
    drop_first: AtomicUsize,
    deletes: AtomicUsize,
    stop_at_delete: AtomicUsize,
    /// s3s-fs was stopped (the script has returned).
    stopped: AtomicBool,
    stopping: AtomicBool,
}

impl Proxy {
    /// Starts one in front of `upstream`; returns its `host:port`.
    fn start(self: &Arc<Proxy>, upstream: String, servers: Arc<Servers>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = listener.local_addr().unwrap().to_string();
        let me = self.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let n = me.connections.fetch_add(1, Ordering::SeqCst);
                if n < me.drop_first.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (me, servers) = (me.clone(), servers.clone());
                std::thread::spawn(move || me.requests(client, server, &servers));
                std::thread::spawn(move || copy(s2, c2));
            }
        });
        at
    }

    /// Forwards what the client sends, counting `DELETE` requests.
    fn requests(&self, mut from: TcpStream, mut to: TcpStream, servers: &Servers) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let seen = buf[..n].windows(7).filter(|w| w == b"DELETE ").count();
            if seen > 0 {
                let total = self.deletes.fetch_add(seen, Ordering::SeqCst) + seen;
                let at = self.stop_at_delete.load(Ordering::SeqCst);
                if at > 0 && total >= at && !self.stopping.swap(true, Ordering::SeqCst) {
                    servers.s3("s3-stop");
                    self.stopped.store(true, Ordering::SeqCst);
                    break;
                }
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    }
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Both);
}

/// A long text no other run holds (stored as a body blob, not inline).
fn long_text(tag: &str) -> String {
    let mark = owner(tag);
    (0..600).map(|i| format!("{mark} line {i} of a long build log\n")).collect()
}

fn text_of(store: &Store, owner: &str, chat: undertext::ChatId, seq: u64) -> String {
    match &store.chat(owner, chat).unwrap().get(seq).unwrap().parts[0] {
        Part::Text(t) => t.clone(),
        other => panic!("expected a text part, found {other:?}"),
    }
}

#[test]
fn s3_requests_are_retried_past_closed_connections_keep_their_connection_and_fail_clearly() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(servers) = Servers::get() else { return };
    let servers = Arc::new(servers);
    let proxy = Arc::new(Proxy::default());
    let at = proxy.start(servers.endpoint(), servers.clone());
    let url = servers.url_at(&at, "&s3_retries=5&s3_backoff=10ms");
    let store = Store::open(&url, opts()).unwrap();
    let o = owner("retry");
    // The first three connections are closed before an answer: the fourth try gets through.
    proxy.drop_first.store(3, Ordering::SeqCst);
    let content = format!("a tool result of {o} ").repeat(40).into_bytes();
    let id = store.put_blob(&o, &content).unwrap();
    assert!(servers.object(id.as_bytes()).exists(), "the object was uploaded");
    assert_eq!(proxy.connections.load(Ordering::SeqCst), 4, "3 closed, then one that answered");

    // Keep-alive: 20 uploads (a HEAD and a PUT each) and 20 reads from another open, each
    // open's requests on one connection.
    let before = proxy.connections.load(Ordering::SeqCst);
    let blobs: Vec<Vec<u8>> = (0..20).map(|i| format!("blob {i} of {o} ").repeat(40).into_bytes()).collect();
    let ids: Vec<_> = blobs.iter().map(|b| store.put_blob(&o, b).unwrap()).collect();
    let reader = Store::open(&url, opts()).unwrap();
    for (id, b) in ids.iter().zip(&blobs) {
        assert_eq!(&reader.get_blob(&o, id).unwrap()[..], &b[..]);
    }
    let opened = proxy.connections.load(Ordering::SeqCst) - before;
    assert!(opened <= 2, "80 requests from 2 opens took {opened} connections");

    // Never an answer: the last failure, with what was received and the tries.
    proxy.drop_first.store(usize::MAX, Ordering::SeqCst);
    let fresh = Store::open(&url, opts()).unwrap();
    let started = std::time::Instant::now();
    let err = fresh.put_blob(&o, format!("never stored {o}").as_bytes()).unwrap_err();
    let Error::Backend { url: shown, reason } = &err else {
        panic!("expected Error::Backend, found {err:?}")
    };
    assert!(shown.contains(&format!("at http://{at}")), "the endpoint: {shown}");
    says(
        reason,
        &[
            "HEAD t/",
            "the connection closed before a response (0 bytes received)",
            "after 5 tries",
            "s3_retries=5",
        ],
    );
    // Waits of 10, 40, 160 and 640 ms (less up to a quarter each).
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    drop((store, reader, fresh));
}

#[test]
fn gc_with_s3_down_fails_clearly_loses_nothing_and_completes_once_s3_is_back() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(servers) = Servers::get() else { return };
    let servers = Arc::new(servers);
    let url = servers.url_at(&servers.endpoint(), "");
    let mut pg = postgres::Client::connect(&servers.url, postgres::NoTls).unwrap();
    let writer = Store::open(&url, opts()).unwrap();
    let o = owner("outage");
    let earlier = ids(&mut pg);
    // Kept: a chat's long messages and a granted blob. Collected: the bodies of a deleted
    // chat's three long messages.
    let live = writer.create_chat(&o, ChatMeta::default()).unwrap();
    let kept: Vec<String> = (0..2).map(|i| long_text(&format!("kept{i}"))).collect();
    for t in &kept {
        writer.chat(&o, live).unwrap().append(NewMessage::user(t.clone())).unwrap();
    }
    let granted = format!("a granted result of {o} ").repeat(40).into_bytes();
    let granted_id = writer.put_blob(&o, &granted).unwrap();
    let gone = writer.create_chat(&o, ChatMeta::default()).unwrap();
    let before: Vec<Vec<u8>> = ids(&mut pg);
    for i in 0..3 {
        writer.chat(&o, gone).unwrap().append(NewMessage::user(long_text(&format!("gone{i}")))).unwrap();
    }
    let doomed: Vec<Vec<u8>> = ids(&mut pg).into_iter().filter(|id| !before.contains(id)).collect();
    assert_eq!(doomed.len(), 3, "three body blobs");
    writer.delete_chat(&o, gone).unwrap();
    // Everything of this test was stored two hours ago, as far as the catalog can tell.
    let ours: Vec<Vec<u8>> = ids(&mut pg).into_iter().filter(|id| !earlier.contains(id)).collect();
    pg.execute("UPDATE ut_blobs SET stored_at = now() - interval '2 hours' WHERE id = ANY($1)", &[&ours])
        .unwrap();
    let objects_before: Vec<bool> = doomed.iter().map(|id| servers.object(id).exists()).collect();
    assert_eq!(objects_before, vec![true; 3]);
    let quick = "&s3_retries=3&s3_backoff=10ms";

    // 1. S3 down before gc: it fails reading what records reference, and deletes nothing.
    servers.s3("s3-stop");
    let err = Store::gc(servers.url_at(&servers.endpoint(), quick), opts()).unwrap_err();
    servers.s3("s3-start");
    eprintln!("S3 down before gc: {err}");
    let Error::Backend { reason, .. } = &err else { panic!("expected Error::Backend, found {err:?}") };
    let endpoint = format!("s3://undertext/t/ at http://{}", servers.endpoint());
    says(
        reason,
        &[&endpoint, "gc, marking what records reference", "GET t/", "after 3 tries", "no blob was deleted"],
    );
    assert_eq!(ids(&mut pg).iter().filter(|id| doomed.contains(id)).count(), 3, "every row stays");
    assert!(doomed.iter().all(|id| servers.object(id).exists()), "every object stays");

    // 2. S3 stopped in the middle of the sweep: the first object deleted, then s3s-fs stops
    //    (the proxy stops it when the second DELETE comes).
    let proxy = Arc::new(Proxy::default());
    let at = proxy.start(servers.endpoint(), servers.clone());
    proxy.stop_at_delete.store(2, Ordering::SeqCst);
    let err = Store::gc(servers.url_at(&at, quick), opts()).unwrap_err();
    eprintln!("S3 down mid-sweep: {err}");
    // The client may give up before the stop's script has returned.
    let waited = std::time::Instant::now();
    while proxy.stopping.load(Ordering::SeqCst)
        && !proxy.stopped.load(Ordering::SeqCst)
        && waited.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    servers.s3("s3-start");
    assert!(proxy.stopped.load(Ordering::SeqCst), "s3s-fs was stopped mid-sweep: {err}");
    let Error::Backend { reason, .. } = &err else { panic!("expected Error::Backend, found {err:?}") };
    says(reason, &["gc, deleting unreferenced blobs", "DELETE t/", "run gc again"]);
    // One DELETE went through before S3 stopped (the sweep goes by id, other runs' old blobs
    // included: it may have been another's). Each group of the sweep commits apart: a doomed
    // blob either went whole (row and object, in a group that committed) or keeps its row
    // (the failed group rolled back; the row stays doomed).
    let rows = ids(&mut pg);
    let left = doomed.iter().filter(|id| servers.object(id).exists()).count();
    assert!(left >= 2, "at most one object went before S3 stopped: {left} of 3 left");
    assert!(proxy.deletes.load(Ordering::SeqCst) >= 2);
    assert!(
        doomed.iter().all(|id| rows.contains(id) || !servers.object(id).exists()),
        "no object without its row"
    );
    assert!(doomed.iter().filter(|id| rows.contains(id)).count() >= 2, "the failed group's rows stay");

    // Nothing referenced was lost: a fresh process reads it all back, verified.
    let reader = Store::open(&url, opts()).unwrap();
    for (i, t) in kept.iter().enumerate() {
        assert_eq!(&text_of(&reader, &o, live, i as u64), t);
    }
    assert_eq!(&reader.get_blob(&o, &granted_id).unwrap()[..], &granted[..]);

    // 3. S3 back: gc completes, and the three doomed blobs go (rows and objects).
    let report = Store::gc(servers.url_at(&servers.endpoint(), quick), opts()).unwrap();
    assert!(report.blobs_removed >= 3, "{report:?}");
    let rows = ids(&mut pg);
    assert!(doomed.iter().all(|id| !rows.contains(id) && !servers.object(id).exists()), "{report:?}");
    let reader = Store::open(&url, opts()).unwrap();
    for (i, t) in kept.iter().enumerate() {
        assert_eq!(&text_of(&reader, &o, live, i as u64), t);
    }
    assert_eq!(&reader.get_blob(&o, &granted_id).unwrap()[..], &granted[..]);
    assert!(matches!(reader.chat(&o, gone), Err(Error::NotFound { .. })));
}

/// Fails unless `text` says every one of `parts`.
fn says(text: &str, parts: &[&str]) {
    for p in parts {
        assert!(text.contains(p), "expected {p:?} in: {text}");
    }
}

/// The ids of every blob row.
fn ids(pg: &mut postgres::Client) -> Vec<Vec<u8>> {
    pg.query("SELECT id FROM ut_blobs", &[]).unwrap().iter().map(|r| r.get::<_, Vec<u8>>(0)).collect()
}
