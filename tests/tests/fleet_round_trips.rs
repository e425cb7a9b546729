//! What a fleet write costs on the wire, counted by a proxy between the store and PostgreSQL
//! that reads the protocol's framing: round trips (each `Sync` or simple `Query` the client
//! sends ends a request; one it sends before the answer to the one before is pipelined with
//! it: the same round trip) and transactions (each `ReadyForQuery` the server sends
//! with status idle ends one). Load-independent: the counts are the same on any machine.
//!
//! The same proxy loses the answer to a `COMMIT` on request (the server commits; the client
//! sees its connection end): what a retry with an idempotency key does then.

#![cfg(feature = "fleet")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use undertext::{NewMessage, Store};
use undertext_tests::fleet::{fleet_url, opts, owner};

/// What crossed the proxy so far.
#[derive(Default)]
struct Wire {
    /// Requests the client sent after every answer to its earlier ones came back: it waited.
    /// (A request pipelined behind another, sent before the answer to that one, is not a
    /// round trip of its own.)
    round_trips: AtomicU64,
    transactions: AtomicU64,
    /// Armed: the next simple-query `COMMIT` goes to the server, and its answer is dropped
    /// and the client's connection closed once the server is ready again (committed).
    lose_next_commit: AtomicBool,
}

/// One client connection through the proxy: its requests and the server's answers, in
/// order (a pipelined request is sent before the answers to the ones before it).
#[derive(Default)]
struct Link {
    /// Requests sent (each `Sync` or simple `Query`).
    sent: AtomicU64,
    /// Requests answered (each `ReadyForQuery`).
    answered: AtomicU64,
    /// The number of the request (1-based) that is the `COMMIT` whose answer is lost; 0: none.
    losing: AtomicU64,
}

impl Wire {
    /// (round trips, transactions) so far.
    fn counts(&self) -> (u64, u64) {
        (self.round_trips.load(Ordering::SeqCst), self.transactions.load(Ordering::SeqCst))
    }
}

/// Reads one typed message (tag, then a length that counts itself); `None` at the end.
fn message(from: &mut TcpStream) -> Option<Vec<u8>> {
    let mut head = [0u8; 5];
    from.read_exact(&mut head).ok()?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let mut m = head.to_vec();
    m.resize(1 + len, 0);
    from.read_exact(&mut m[5..]).ok()?;
    Some(m)
}

/// Forwards client -> server: the startup message (untyped), then typed messages. Each `S`
/// (Sync) and `Q` (simple query) ends a request; it is a round trip of its own unless it was
/// pipelined: read in the same chunk as an earlier request, or while an earlier one was not
/// yet answered (the answer not forwarded yet: the client cannot have waited for it). Neither
/// can hold for a request the client sent after its answers came back, so the count is exact
/// for a client that waits and at most one too high for a pipeline split across reads.
fn client_to_server(mut from: TcpStream, mut to: TcpStream, wire: Arc<Wire>, link: Arc<Link>) {
    let mut len = [0u8; 4];
    if from.read_exact(&mut len).is_err() {
        return;
    }
    let mut startup = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
    if from.read_exact(&mut startup).is_err()
        || to.write_all(&len).and_then(|_| to.write_all(&startup)).is_err()
    {
        return;
    }
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        let n = match from.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let (mut at, mut earlier_in_chunk) = (0, false);
        while buf.len() - at >= 5 {
            let len = u32::from_be_bytes([buf[at + 1], buf[at + 2], buf[at + 3], buf[at + 4]]) as usize;
            if buf.len() - at < 1 + len {
                break;
            }
            let m = &buf[at..at + 1 + len];
            if m[0] == b'S' || m[0] == b'Q' {
                let before = link.sent.fetch_add(1, Ordering::SeqCst);
                let waiting = link.answered.load(Ordering::SeqCst) < before;
                if !earlier_in_chunk && !waiting {
                    wire.round_trips.fetch_add(1, Ordering::SeqCst);
                }
                earlier_in_chunk = true;
                if m[0] == b'Q'
                    && &m[5..] == b"COMMIT\0"
                    && wire.lose_next_commit.swap(false, Ordering::SeqCst)
                {
                    // Set before the request goes on: its answer cannot come earlier.
                    link.losing.store(before + 1, Ordering::SeqCst);
                }
            }
            if to.write_all(m).is_err() {
                return;
            }
            at += 1 + len;
        }
        buf.drain(..at);
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

/// Forwards server -> client, counting each `Z` (ReadyForQuery) with status `I` (idle: no
/// transaction open).
fn server_to_client(mut from: TcpStream, mut to: TcpStream, wire: Arc<Wire>, link: Arc<Link>) {
    // The first ReadyForQuery ends the startup: it answers no request.
    let mut started = false;
    while let Some(m) = message(&mut from) {
        if m[0] == b'Z' && m.get(5) == Some(&b'I') {
            wire.transactions.fetch_add(1, Ordering::SeqCst);
        }
        let losing = link.losing.load(Ordering::SeqCst);
        if started && losing != 0 && link.answered.load(Ordering::SeqCst) + 1 == losing {
            // The commit's answer (the answers before it went through): dropped; at its
            // ReadyForQuery (the server committed) the client's connection ends.
            if m[0] == b'Z' {
                let _ = to.shutdown(std::net::Shutdown::Both);
                let _ = from.shutdown(std::net::Shutdown::Both);
                return;
            }
            continue;
        }
        if m[0] == b'Z' {
            if started {
                link.answered.fetch_add(1, Ordering::SeqCst);
            }
            started = true;
        }
        if to.write_all(&m).is_err() {
            return;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

/// A proxy to the server of `url`; returns the URL through it (TLS off: the proxy reads the
/// plain protocol) and its counts.
fn proxied(url: &str) -> (String, Arc<Wire>) {
    let (user, rest) = url.split_once('@').expect("a fleet URL with user@host");
    let (hostport, path) = rest.split_once('/').expect("a fleet URL with a database");
    let upstream = hostport.to_socket_addrs().unwrap().next().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let wire = Arc::new(Wire::default());
    let w = wire.clone();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(server) = TcpStream::connect(upstream) else { return };
            let (c2, s2, w1, w2) =
                (client.try_clone().unwrap(), server.try_clone().unwrap(), w.clone(), w.clone());
            let link = Arc::new(Link::default());
            let (l1, l2) = (link.clone(), link);
            std::thread::spawn(move || client_to_server(client, server, w1, l1));
            std::thread::spawn(move || server_to_client(s2, c2, w2, l2));
        }
    });
    let sep = if path.contains('?') { '&' } else { '?' };
    (format!("{user}@127.0.0.1:{port}/{path}{sep}sslmode=disable"), wire)
}

const N: u64 = 10;

/// What a test here starts from: the URL through a new proxy, its counts, a store on it, a
/// new owner `tag`-… and a chat of it; `None` without a server.
struct Wired {
    url: String,
    wire: Arc<Wire>,
    store: Store,
    owner: String,
    id: undertext::ChatId,
}

fn wired(tag: &str) -> Option<Wired> {
    let (url, wire) = proxied(&fleet_url()?);
    let store = Store::open(&url, opts()).unwrap();
    let owner = owner(tag);
    let id = store.create_chat(&owner, Default::default()).unwrap();
    Some(Wired { url, wire, store, owner, id })
}

#[test]
fn an_append_on_a_held_chat_is_two_round_trips_and_one_transaction() {
    let Some(Wired { wire, store, owner: o, id, .. }) = wired("wire") else { return };
    let chat = store.chat(&o, id).unwrap();
    // The first appends prepare the statements on the connection.
    for i in 0..3 {
        chat.append(NewMessage::user(format!("warm {i}"))).unwrap();
    }
    let (r0, t0) = wire.counts();
    for i in 0..N {
        chat.append(NewMessage::assistant(format!("message {i}"))).unwrap();
    }
    let (r1, t1) = wire.counts();
    // BEGIN with the row lock; the batch, its records and the chat row, with the COMMIT
    // behind it (pipelined: one round trip).
    assert_eq!((r1 - r0, t1 - t0), (2 * N, N), "round trips and transactions for {N} appends");
    assert_eq!(chat.len(), 3 + N);
}

#[test]
fn opening_the_chat_then_appending_is_three_round_trips() {
    let Some(Wired { wire, store, owner: o, id, .. }) = wired("wire") else { return };
    for i in 0..3 {
        store.chat(&o, id).unwrap().append(NewMessage::user(format!("warm {i}"))).unwrap();
    }
    let (r0, t0) = wire.counts();
    for i in 0..N {
        store.chat(&o, id).unwrap().append(NewMessage::assistant(format!("message {i}"))).unwrap();
    }
    let (r1, t1) = wire.counts();
    // The chat's row read at `Store::chat` (its own read-only transaction), then the append.
    assert_eq!((r1 - r0, t1 - t0), (3 * N, 2 * N), "round trips and transactions for {N} opens + appends");
}

#[test]
fn an_append_carrying_a_new_blob_commits_once() {
    let Some(Wired { url, wire, store, owner: o, id }) = wired("wire") else { return };
    let chat = store.chat(&o, id).unwrap();
    let fresh = |i: u64| format!("attachment {i} of {o} ").repeat(50).into_bytes();
    for i in 0..3 {
        chat.append_with_blobs(&[&fresh(i)], vec![NewMessage::user(format!("warm {i}"))]).unwrap();
    }
    let (r0, t0) = wire.counts();
    let mut stored = Vec::new();
    for i in 10..10 + N {
        let (ids, _) =
            chat.append_with_blobs(&[&fresh(i)], vec![NewMessage::user(format!("see {i}"))]).unwrap();
        stored.push((ids[0], fresh(i)));
    }
    let (r1, t1) = wire.counts();
    // The blob's row is written in the batch's own statement (blobs in PostgreSQL, the URL's
    // default): lock, then blob rows with the batch and the COMMIT; one commit.
    assert_eq!((r1 - r0, t1 - t0), (2 * N, N), "round trips and transactions for {N} appends with a blob");
    let other = Store::open(&url, opts()).unwrap();
    for (id, bytes) in stored {
        assert_eq!(&other.get_blob(&o, &id).unwrap()[..], &bytes[..], "blob {id} read from another store");
    }
}

#[test]
fn an_append_referencing_a_blob_already_stored_commits_once() {
    let Some(Wired { url, wire, store, owner: o, id }) = wired("wire") else { return };
    let chat = store.chat(&o, id).unwrap();
    // A body over 8 KiB is a blob: the first append carries it, the next ones reference it
    // (deduplicated) and keep its row fresh for a concurrent gc.
    let long = format!("the same long tool result of {o} ").repeat(400);
    for _ in 0..4 {
        chat.append(NewMessage::user(long.clone())).unwrap();
    }
    let (r0, t0) = wire.counts();
    for _ in 0..N {
        chat.append(NewMessage::user(long.clone())).unwrap();
    }
    let (r1, t1) = wire.counts();
    // Lock; the kept blob's row marked fresh with the batch, and the COMMIT: one commit
    // (before, the mark was a transaction of its own, the blob rows and the COMMIT round
    // trips of their own).
    assert_eq!(
        (r1 - r0, t1 - t0),
        (2 * N, N),
        "round trips and transactions for {N} appends referencing a blob"
    );
    let other = Store::open(&url, opts()).unwrap();
    let again = other.chat(&o, id).unwrap();
    assert_eq!(again.len(), 4 + N);
}

#[test]
fn a_commit_whose_answer_was_lost_is_found_by_a_retry_with_the_same_idempotency_key() {
    let Some(Wired { url, wire, store, owner: o, id }) = wired("lost") else { return };
    let chat = store.chat(&o, id).unwrap();
    chat.append(NewMessage::user("deploy it")).unwrap();
    let reply = || NewMessage::assistant("deployed to 3 hosts");
    wire.lose_next_commit.store(true, Ordering::SeqCst);
    let lost = chat.append_idempotent(reply(), "step-7");
    assert!(
        matches!(&lost, Err(undertext::Error::Backend { reason, .. }) if reason.contains("commit")),
        "{lost:?}"
    );
    // The harness cannot tell: it retries with the same key, and gets the seq the commit took.
    assert_eq!(chat.append_idempotent(reply(), "step-7").unwrap(), 1);
    assert_eq!(chat.len(), 2);
    let fresh = Store::open(&url, opts()).unwrap();
    assert_eq!(fresh.chat(&o, id).unwrap().len(), 2, "one message, read by another process");
    // Without a key the same retry stores the message twice (what the soak saw).
    wire.lose_next_commit.store(true, Ordering::SeqCst);
    assert!(chat.append(reply()).is_err());
    assert_eq!(chat.append(reply()).unwrap(), 3);
    assert_eq!(fresh.chat(&o, id).unwrap().len(), 4);
}

#[test]
fn an_append_keeping_a_blob_collected_meanwhile_stores_it_again_and_commits_once() {
    let Some(Wired { url, wire, store, owner: o, id }) = wired("gone") else { return };
    let chat = store.chat(&o, id).unwrap();
    // A body over 8 KiB is a blob: the first append carries it, the next one references it
    // (deduplicated) and keeps its row.
    let long = format!("the long tool result of {o} that gc collects ").repeat(401);
    let mut pg = postgres::Client::connect(&fleet_url().unwrap(), postgres::NoTls).unwrap();
    let rows = |pg: &mut postgres::Client| -> std::collections::BTreeSet<Vec<u8>> {
        pg.query("SELECT id FROM ut_blobs WHERE raw_len >= $1", &[&(long.len() as i32)])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    // The first appends with a body of its own each prepare the statements on the connection.
    for i in 0..2 {
        chat.append(NewMessage::user(format!("warm-up {i} of {o} ").repeat(500))).unwrap();
    }
    let before = rows(&mut pg);
    chat.append(NewMessage::user(long.clone())).unwrap();
    // The body's blob: the row this append added (tests running beside it store other sizes).
    let added: Vec<Vec<u8>> = rows(&mut pg).difference(&before).cloned().collect();
    assert_eq!(added.len(), 1, "the body's blob row, found {}", added.len());
    let blob = added[0].clone();
    // What a collection does to a blob it found unreferenced (here: one this process still
    // holds, and writes again): its row deleted.
    let gone = pg.execute("DELETE FROM ut_blobs WHERE id = $1", &[&blob]).unwrap();
    assert_eq!(gone, 1);
    let (r0, t0) = wire.counts();
    // The pipelined batch finds the kept blob's row gone and refuses to commit a placeholder;
    // the write locks again and goes without the pipeline, the row filled from the replica.
    chat.append(NewMessage::user(long.clone())).unwrap();
    let (r1, t1) = wire.counts();
    let row = pg.query_one("SELECT kind, length(payload) FROM ut_blobs WHERE id = $1", &[&blob]).unwrap();
    let (kind, len): (i16, i32) = (row.get(0), row.get(1));
    assert!(kind >= 0 && len > 0, "the blob's row stored again, not a placeholder: kind {kind}, {len} bytes");
    let other = Store::open(&url, opts()).unwrap();
    let again = other.chat(&o, id).unwrap();
    assert_eq!(again.len(), 4);
    let read = again.messages().unwrap();
    assert!(
        matches!(&read[3].parts[..], [undertext::Part::Text(t)] if *t == long),
        "the body, read by another store"
    );
    // Lock; batch + COMMIT (refused, rolled back); lock again; batch (unnamed: the statement
    // without the pipeline's first use here); the row filled; COMMIT.
    assert_eq!((r1 - r0, t1 - t0), (6, 2), "round trips and transactions of the write that stored it again");
}

/// A fresh process's first read of a chat it finds by title (the LangGraph saver's cold
/// `get_tuple`): the catalog's lookup and the chat's batches in one statement, then the chat
/// opened as that lookup found it without asking again, its messages read from the replica.
#[test]
fn a_fresh_store_finds_a_chat_by_title_and_reads_it_in_one_round_trip() {
    let Some(Wired { url, store, owner: o, .. }) = wired("cold") else { return };
    let titled = |t: String| undertext::ChatMeta { title: t, ..Default::default() };
    let mut ids = Vec::new();
    for i in 0..12 {
        let id = store.create_chat(&o, titled(format!("thread-{i}"))).unwrap();
        let chat = store.chat(&o, id).unwrap();
        for j in 0..3 {
            chat.append(NewMessage::user(format!("step {j} of thread {i}"))).unwrap();
        }
        ids.push(id);
    }
    // A second process, through its own proxy; a first statement warms its connection (the
    // open's own queries).
    let (cold_url, wire) = proxied(&fleet_url().unwrap());
    let cold = Store::open(&cold_url, opts()).unwrap();
    let (r0, t0) = wire.counts();
    let found = cold.find_chats(&o, undertext::MetaField::Title, "thread-7").unwrap();
    let (r1, t1) = wire.counts();
    assert_eq!(found.iter().map(|c| c.id).collect::<Vec<_>>(), vec![ids[7]]);
    assert_eq!(found[0].len, 3);
    assert_eq!((r1 - r0, t1 - t0), (1, 1), "find_chats by title on a fresh store: one statement");
    let chat = cold.chat_without_refresh(&o, ids[7]).unwrap();
    let texts: Vec<String> = chat
        .messages()
        .unwrap()
        .iter()
        .map(|m| match &m.parts[..] {
            [undertext::Part::Text(t)] => t.to_string(),
            other => panic!("a text message, found {other:?}"),
        })
        .collect();
    assert_eq!(texts, ["step 0 of thread 7", "step 1 of thread 7", "step 2 of thread 7"]);
    assert_eq!(wire.counts(), (r1, t1), "the chat opened as find_chats found it: no round trip");
    // Another process writes between the lookup and the next open: `Store::chat` sees it
    // (one round trip), and a write through the unrefreshed handle builds on it.
    store.chat(&o, ids[7]).unwrap().append(NewMessage::assistant("written meanwhile")).unwrap();
    let again = cold.chat_without_refresh(&o, ids[7]).unwrap();
    assert_eq!(again.len(), 3, "without a refresh: the chat as find_chats found it");
    assert_eq!(wire.counts(), (r1, t1));
    assert_eq!(cold.chat(&o, ids[7]).unwrap().len(), 4, "Store::chat sees the write");
    assert_eq!(wire.counts().0, r1 + 2, "Store::chat: the chat's row, then its new batch");
    let stale = cold.chat_without_refresh(&o, ids[6]);
    assert!(stale.is_ok(), "a chat of the owner this store never pulled is asked for: {stale:?}");
    assert_eq!(
        chat.append(NewMessage::user("and then")).unwrap(),
        4,
        "a write builds on the chat's last state"
    );
    let other = Store::open(&url, opts()).unwrap();
    assert_eq!(other.chat(&o, ids[7]).unwrap().len(), 5);
    // Another owner's chat is NotFound whether asked for or not.
    let foreign = cold.chat_without_refresh("someone-else", ids[7]);
    assert!(matches!(foreign, Err(undertext::Error::NotFound { .. })), "{foreign:?}");
}

#[test]
fn a_fresh_store_reads_the_blobs_it_lacks_in_one_round_trip() {
    let Some(Wired { store, owner: o, id, .. }) = wired("blobs") else { return };
    let chat = store.chat(&o, id).unwrap();
    let body = |i: u64| format!("tool output {i} of {o} ").repeat(40).into_bytes();
    let mut ids = Vec::new();
    for i in 0..N {
        let (got, _) =
            chat.append_with_blobs(&[&body(i)], vec![NewMessage::user(format!("see {i}"))]).unwrap();
        ids.push(got[0]);
    }
    // A second process, through its own proxy, opens the chat (its records, which grant the
    // blobs to the owner, come with it); then reads every blob.
    let (cold_url, wire) = proxied(&fleet_url().unwrap());
    let cold = Store::open(&cold_url, opts()).unwrap();
    assert_eq!(cold.chat(&o, id).unwrap().len(), N);
    let (r0, _) = wire.counts();
    let blobs = cold.get_blobs(&o, &ids).unwrap();
    let (r1, _) = wire.counts();
    for (i, b) in blobs.iter().enumerate() {
        assert_eq!(&b[..], &body(i as u64)[..], "blob {i} as written");
    }
    assert_eq!(r1 - r0, 1, "{N} blobs the replica lacked: one statement, not one each");
    // Now held: no round trip.
    assert_eq!(cold.get_blobs(&o, &ids).unwrap().len(), ids.len());
    assert_eq!(wire.counts().0, r1, "blobs the replica holds: no round trip");
    // Another owner reads none of them, whether the replica holds them or not.
    let foreign = cold.get_blobs("someone-else", &ids);
    assert!(matches!(foreign, Err(undertext::Error::NotFound { .. })), "{foreign:?}");
}

/// How many chats of `owner` `store`'s local replica holds.
fn held(store: &Store, owner: &str) -> u64 {
    store.owners().unwrap().into_iter().find(|(o, _)| o == owner).map_or(0, |(_, n)| n)
}

#[test]
fn a_fresh_store_finds_chats_by_an_extra_field_in_one_round_trip_and_pulls_only_those() {
    let Some(Wired { store, owner: o, .. }) = wired("extra") else { return };
    let team = |t: u64| undertext::ChatMeta {
        title: "same title".into(),
        extra: [("team".to_string(), format!("team-{t}")), ("other".to_string(), "x".to_string())].into(),
        ..Default::default()
    };
    let mut ids = Vec::new();
    for i in 0..12 {
        let id = store.create_chat(&o, team(i % 3)).unwrap();
        store.chat(&o, id).unwrap().append(NewMessage::user(format!("task {i}"))).unwrap();
        ids.push(id);
    }
    let of_team = |s: &Store, t: &str| {
        let mut found: Vec<_> =
            s.find_chats(&o, undertext::MetaField::Extra("team"), t).unwrap().iter().map(|c| c.id).collect();
        found.sort();
        found
    };
    let (cold_url, wire) = proxied(&fleet_url().unwrap());
    let cold = Store::open(&cold_url, opts()).unwrap();
    let (r0, t0) = wire.counts();
    assert_eq!(of_team(&cold, "team-1"), vec![ids[1], ids[4], ids[7], ids[10]]);
    let (r1, t1) = wire.counts();
    assert_eq!((r1 - r0, t1 - t0), (1, 1), "find_chats by an extra field on a fresh store: one statement");
    assert_eq!(held(&cold, &o), 4, "only the chats found were pulled, not the owner's 12");
    assert!(of_team(&cold, "team-9").is_empty());
    assert!(of_team(&cold, "x").is_empty(), "a value under another key is not this field's");
    // Another process moves one chat into the team and one out of it: the catalog names the
    // first, the replica's own copy names the second (pulled again, no longer a match).
    store.chat(&o, ids[0]).unwrap().set_meta(team(1)).unwrap();
    store.chat(&o, ids[4]).unwrap().set_meta(team(2)).unwrap();
    let (r2, _) = wire.counts();
    assert_eq!(of_team(&cold, "team-1"), vec![ids[0], ids[1], ids[7], ids[10]]);
    assert_eq!(wire.counts().0 - r2, 1, "one statement again");
    assert_eq!(
        of_team(&Store::open(&cold_url, opts()).unwrap(), "team-2"),
        vec![ids[2], ids[4], ids[5], ids[8], ids[11]]
    );
    // Another owner finds none of them.
    assert!(
        cold.find_chats("someone-else", undertext::MetaField::Extra("team"), "team-1").unwrap().is_empty()
    );
}

#[test]
fn a_blob_read_without_a_local_grant_pulls_only_the_chats_that_grant_it() {
    let Some(Wired { store, owner: o, .. }) = wired("granting") else { return };
    let body = |i: u64| format!("tool output {i} of {o} ").repeat(30).into_bytes();
    let mut chats = Vec::new();
    let mut blobs = Vec::new();
    for i in 0..8 {
        let id = store.create_chat(&o, Default::default()).unwrap();
        let chat = store.chat(&o, id).unwrap();
        let (got, _) =
            chat.append_with_blobs(&[&body(i)], vec![NewMessage::user(format!("see {i}"))]).unwrap();
        chats.push(id);
        blobs.push(got[0]);
    }
    // One blob the owner holds by its own grant (no chat), one of a chat deleted since.
    let own = store.put_blobs(&o, &[b"the owner's own blob".as_slice()]).unwrap()[0];
    store.delete_chat(&o, chats[7]).unwrap();
    let (cold_url, wire) = proxied(&fleet_url().unwrap());
    let cold = Store::open(&cold_url, opts()).unwrap();
    let r0 = wire.counts().0;
    assert_eq!(&cold.get_blobs(&o, &[blobs[3]]).unwrap()[0][..], &body(3)[..]);
    let one = wire.counts().0 - r0;
    assert_eq!(held(&cold, &o), 1, "the chat that grants the blob was pulled, not the owner's 8");
    // Blobs of three chats in one read: the chats found together, in as many round trips as one.
    let (many_url, many_wire) = proxied(&fleet_url().unwrap());
    let many = Store::open(&many_url, opts()).unwrap();
    let r1 = many_wire.counts().0;
    let got = many.get_blobs(&o, &[blobs[0], blobs[1], blobs[2]]).unwrap();
    assert_eq!(many_wire.counts().0 - r1, one, "three chats' blobs: the round trips of one blob's read");
    assert_eq!((&got[2][..], held(&many, &o)), (&body(2)[..], 3));
    assert_eq!(&cold.get_blobs(&o, &[own]).unwrap()[0][..], b"the owner's own blob");
    assert_eq!(held(&cold, &o), 1, "an owner's own grant pulls no chat");
    let gone = cold.get_blobs(&o, &[blobs[7]]);
    assert!(
        matches!(gone, Err(undertext::Error::NotFound { .. })),
        "a deleted chat's grant is gone: {gone:?}"
    );
    // Another owner reads none of them; a blob of a chat granted to the owner since is found.
    let foreign = cold.get_blobs("someone-else", &[blobs[3]]);
    assert!(matches!(foreign, Err(undertext::Error::NotFound { .. })), "{foreign:?}");
    assert_eq!(&cold.get_blobs(&o, &[blobs[5]]).unwrap()[0][..], &body(5)[..]);
}
