//! Fleet mode as teams run PostgreSQL (issue 35): TLS with `sslmode=` against a server with
//! `ssl=on` and a throw-away authority's certificate; PgBouncer (Debian's package) in
//! transaction pooling mode with several processes appending; the per-process connection
//! bound (`pool_size=`); and the timeouts, with a lock holder on a raw connection and a
//! writer whose timeout fires. `scripts/fleet-servers` starts the servers and names them in
//! `UNDERTEXT_FLEET_URL`, `UNDERTEXT_FLEET_TLS_CA`, `UNDERTEXT_FLEET_TLS_OTHER_CA` and
//! `UNDERTEXT_FLEET_PGBOUNCER_URL`. Skipped (with a note) unless `UNDERTEXT_FLEET_URL` is set
//! and the crate is built with the feature `fleet`: `scripts/test-fleet` does both.

#![cfg(feature = "fleet")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::time::Duration;

use undertext::{ChatMeta, NewMessage, Store};
use undertext_tests::child::Ready;
use undertext_tests::fleet::{Acked, chats, fleet_url, fresh_database, opts, owner, psql, worker_after};

const BIN: &str = env!("CARGO_BIN_EXE_fleet_worker");

/// `UNDERTEXT_FLEET_<name>`, required when the server is (scripts/fleet-servers sets it).
fn env(name: &str) -> String {
    std::env::var(format!("UNDERTEXT_FLEET_{name}"))
        .unwrap_or_else(|_| panic!("UNDERTEXT_FLEET_{name} is not set (scripts/fleet-servers sets it)"))
}

/// `url` with more parameters.
fn with(url: &str, params: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{params}")
}

/// An application name no other test or run uses, to find a store's connections in
/// `pg_stat_activity`.
fn app(tag: &str) -> String {
    owner(tag).replace('-', "_")
}

/// (TLS connections, plain connections) of the application named `app`, as the server
/// counts them.
fn connections(url: &str, app: &str) -> (u64, u64) {
    let out = psql(
        url,
        &format!(
            "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) \
             FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = '{app}'"
        ),
    );
    let (tls, plain) = out.trim().split_once('|').unwrap();
    (tls.parse().unwrap(), plain.parse().unwrap())
}

/// Opens `url`, writes a chat and reads it back (the store works end to end).
fn round_trip(url: &str, tag: &str) -> Store {
    let store = Store::open(url, opts()).unwrap_or_else(|e| panic!("{tag}: open {url}: {e}"));
    let o = owner(tag);
    let id = store.create_chat(&o, ChatMeta::default()).unwrap();
    let chat = store.chat(&o, id).unwrap();
    assert_eq!(chat.append(NewMessage::user("over TLS?")).unwrap(), 0);
    assert_eq!(chat.messages().unwrap().len(), 1);
    store
}

/// The URL with host name `host` in place of 127.0.0.1 (the same server).
fn named(url: &str, host: &str) -> String {
    assert!(url.contains("@127.0.0.1:"), "expected the server at 127.0.0.1, found {url}");
    url.replace("@127.0.0.1:", &format!("@{host}:"))
}

#[test]
fn verify_full_with_the_servers_authority_connects_encrypted() {
    let Some(url) = fleet_url() else { return };
    let a = app("tls_full");
    let u = with(
        &named(&url, "localhost"),
        &format!("sslmode=verify-full&sslrootcert={}&application_name={a}", env("TLS_CA")),
    );
    let store = round_trip(&u, "tls-full");
    let (tls, plain) = connections(&url, &a);
    assert!(
        tls >= 1 && plain == 0,
        "expected the store's connections encrypted, found {tls} TLS and {plain} plain"
    );
    drop(store);
}

#[test]
fn verify_full_refuses_a_host_name_the_certificate_does_not_name() {
    let Some(url) = fleet_url() else { return };
    // The same server (hostaddr), under a name its certificate (localhost, 127.0.0.1) lacks.
    let u = with(
        &named(&url, "db.undertext.invalid"),
        &format!("hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={}", env("TLS_CA")),
    );
    let err = Store::open(&u, opts()).expect_err("a certificate for another name is refused").to_string();
    assert!(
        err.contains("not valid for name")
            && err.contains("db.undertext.invalid")
            && err.contains("sslmode=verify-full"),
        "expected a refusal naming the host and the mode, found: {err}"
    );
}

#[test]
fn verify_ca_accepts_the_authority_whatever_the_host_name() {
    let Some(url) = fleet_url() else { return };
    let a = app("tls_ca");
    let u = with(
        &named(&url, "db.undertext.invalid"),
        &format!("hostaddr=127.0.0.1&sslmode=verify-ca&sslrootcert={}&application_name={a}", env("TLS_CA")),
    );
    let store = round_trip(&u, "tls-ca");
    let (tls, plain) = connections(&url, &a);
    assert!(
        tls >= 1 && plain == 0,
        "expected the store's connections encrypted, found {tls} TLS and {plain} plain"
    );
    drop(store);
}

#[test]
fn verify_full_and_verify_ca_refuse_a_certificate_of_another_authority() {
    let Some(url) = fleet_url() else { return };
    for mode in ["verify-full", "verify-ca"] {
        let u =
            with(&named(&url, "localhost"), &format!("sslmode={mode}&sslrootcert={}", env("TLS_OTHER_CA")));
        let err = Store::open(&u, opts()).expect_err("an unknown authority is refused").to_string();
        assert!(
            err.contains("UnknownIssuer") && err.contains(&format!("sslmode={mode}")),
            "{mode}: expected a refusal naming the unknown issuer and the mode, found: {err}"
        );
    }
}

#[test]
fn require_encrypts_without_a_root_and_disable_does_not() {
    let Some(url) = fleet_url() else { return };
    let a = app("tls_require");
    let store = round_trip(&with(&url, &format!("sslmode=require&application_name={a}")), "tls-require");
    let (tls, plain) = connections(&url, &a);
    assert!(
        tls >= 1 && plain == 0,
        "require: expected TLS connections only, found {tls} TLS and {plain} plain"
    );
    drop(store);
    let a = app("tls_disable");
    let store = round_trip(&with(&url, &format!("sslmode=disable&application_name={a}")), "tls-disable");
    let (tls, plain) = connections(&url, &a);
    assert!(
        tls == 0 && plain >= 1,
        "disable: expected plain connections only, found {tls} TLS and {plain} plain"
    );
    drop(store);
}

/// A number from `UNDERTEXT_FLEET_<name>`, else `default`.
fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(format!("UNDERTEXT_FLEET_{name}"))
        .map(|v| {
            v.parse().unwrap_or_else(|_| panic!("UNDERTEXT_FLEET_{name}: expected a number, found {v:?}"))
        })
        .unwrap_or(default)
}

/// Processes that all write through PgBouncer at once: `UNDERTEXT_FLEET_BOUNCER_PROCESSES`
/// (10 unless set; `scripts/fleet-bouncer` runs 100), each `UNDERTEXT_FLEET_BOUNCER_STEPS`
/// random operations (appends, edits, publications, shared blobs) on chats shared by twos.
#[test]
fn processes_through_pgbouncer_transaction_pooling_get_no_error_within_its_server_connections() {
    let Some(url) = fleet_url() else { return };
    let n = env_or("BOUNCER_PROCESSES", 10);
    let steps = env_or("BOUNCER_STEPS", 30);
    let pool = env_or("PGBOUNCER_POOL", 0);
    assert!(pool > 0, "UNDERTEXT_FLEET_PGBOUNCER_POOL is not set (scripts/fleet-servers sets it)");
    // A database of its own (its schema made directly), so that every server connection to
    // it is one PgBouncer opened.
    let direct = fresh_database(&url, "bouncer");
    let db = direct.rsplit('/').next().unwrap().split('?').next().unwrap().to_string();
    drop(Store::open(&direct, opts()).unwrap());
    let bouncer = env("PGBOUNCER_URL").replace("/postgres?", &format!("/{db}?"));
    let store = Store::open(&bouncer, opts()).unwrap();
    let o = owner("bouncer");
    let ids = chats(&store, &o, (n as usize / 2).max(3));
    drop(store);
    // The server's connections to the database, counted by the server itself.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (url, db, stop) = (url.clone(), db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            let (mut most, mut samples) = (0i64, 0u64);
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                let row =
                    c.query_one("SELECT count(*) FROM pg_stat_activity WHERE datname = $1", &[&db]).unwrap();
                most = most.max(row.get(0));
                samples += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            (most, samples)
        })
    };
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let workers: Vec<Ready> =
        (0..n).map(|w| worker_after(BIN, &bouncer, &o, 3500 + w, steps, &ids, Some(&go))).collect();
    std::fs::write(&go, b"").unwrap();
    let mut acked = Acked::default();
    for w in workers {
        while let Some(line) = w.next_line() {
            acked.take(&line);
        }
        assert!(w.wait().success());
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    let (most, samples) = sampler.join().unwrap();
    eprintln!(
        "{n} processes through PgBouncer: {} messages acknowledged, {} errors; at most {most} server \
         connections in {samples} samples (default_pool_size = {pool})",
        acked.texts.len(),
        acked.errors.len()
    );
    assert!(
        acked.errors.is_empty(),
        "expected no failed operation through PgBouncer, found {} of them: {:?}",
        acked.errors.len(),
        acked.errors.iter().take(5).collect::<Vec<_>>()
    );
    assert!(
        acked.texts.len() as u64 >= n * steps / 2,
        "expected at least {} acknowledged messages, found {}",
        n * steps / 2,
        acked.texts.len()
    );
    assert!(
        (1..=pool as i64).contains(&most),
        "expected PgBouncer to open between 1 and {pool} server connections, the server counted {most}"
    );
    acked.check(&bouncer, &o, &ids, true);
}

#[test]
fn pgbouncer_without_pooler_transaction_is_refused_with_a_hint() {
    let Some(_) = fleet_url() else { return };
    let url = env("PGBOUNCER_URL").replace("pooler=transaction", "pooler=none");
    let err = Store::open(&url, opts()).expect_err("PgBouncer refuses the startup options").to_string();
    assert!(
        err.contains("unsupported startup parameter") && err.contains("add pooler=transaction"),
        "expected PgBouncer's refusal and the URL option that fixes it, found: {err}"
    );
}

#[test]
fn pool_size_bounds_the_connections_a_store_opens() {
    let Some(url) = fleet_url() else { return };
    let a = app("pool");
    let store = std::sync::Arc::new(
        Store::open(with(&url, &format!("pool_size=2&application_name={a}")), opts()).unwrap(),
    );
    let o = owner("pool");
    let ids = chats(&store, &o, 8);
    // Eight threads writing eight chats at once share two connections.
    let threads: Vec<_> = ids
        .iter()
        .map(|id| {
            let (store, o, id) = (store.clone(), o.clone(), *id);
            std::thread::spawn(move || {
                let chat = store.chat(&o, id).unwrap();
                for i in 0..10 {
                    chat.append(NewMessage::user(format!("m{i}"))).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let (tls, plain) = connections(&url, &a);
    assert!(tls + plain <= 2, "expected at most pool_size=2 connections open, found {}", tls + plain);
    for id in &ids {
        assert_eq!(
            store.chat(&o, *id).unwrap().messages().unwrap().len(),
            11,
            "chat {id}: every append stored"
        );
    }
}

/// A raw connection holding chat `id`'s row lock (`SELECT … FOR UPDATE` in an open
/// transaction), as a writer that hung mid-write would; and its backend's pid.
fn hold_row_lock(url: &str, id: u64) -> (postgres::Client, i32) {
    let mut holder = postgres::Client::connect(url, postgres::NoTls).unwrap();
    holder.batch_execute(&format!("BEGIN; SELECT 1 FROM ut_chats WHERE id = {id} FOR UPDATE")).unwrap();
    let pid: i32 = holder.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    (holder, pid)
}

#[test]
fn a_writer_behind_a_held_row_lock_fails_naming_the_wait_and_lock_timeout() {
    let Some(url) = fleet_url() else { return };
    let store = Store::open(with(&url, "lock_timeout=1s"), opts()).unwrap();
    let o = owner("lockwait");
    let id = chats(&store, &o, 1)[0];
    let chat = store.chat(&o, id).unwrap();
    let (holder, _) = hold_row_lock(&url, id.0);
    let err =
        chat.append(NewMessage::user("behind the lock")).expect_err("the lock wait times out").to_string();
    assert!(
        err.contains(&format!("waited 1 s for chat {}'s row lock (lock_timeout=1 s)", id.0)),
        "expected the error to name the wait and the setting, found: {err}"
    );
    // The holder goes (its connection closed): the next write goes through, and the timed
    // out one left nothing.
    drop(holder);
    assert_eq!(chat.append(NewMessage::user("after")).unwrap(), 1);
    assert_eq!(chat.messages().unwrap().len(), 2);
}

#[test]
fn a_writer_behind_a_held_row_lock_fails_naming_statement_timeout_when_lock_timeout_is_off() {
    let Some(url) = fleet_url() else { return };
    let store = Store::open(with(&url, "lock_timeout=0&statement_timeout=1s"), opts()).unwrap();
    let o = owner("stmtwait");
    let id = chats(&store, &o, 1)[0];
    let chat = store.chat(&o, id).unwrap();
    let (holder, _) = hold_row_lock(&url, id.0);
    let err =
        chat.append(NewMessage::user("behind the lock")).expect_err("the statement times out").to_string();
    assert!(
        err.contains(&format!("waited 1 s for chat {}'s row lock (statement_timeout=1 s)", id.0)),
        "expected the error to name the wait and the setting, found: {err}"
    );
    drop(holder);
    assert_eq!(chat.append(NewMessage::user("after")).unwrap(), 1);
}

#[test]
fn a_lock_holder_killed_mid_transaction_lets_the_waiting_writer_through() {
    let Some(url) = fleet_url() else { return };
    let store = Store::open(&url, opts()).unwrap();
    let o = owner("killed");
    let id = chats(&store, &o, 1)[0];
    let (_holder, pid) = hold_row_lock(&url, id.0);
    let writer = {
        let chat = store.chat(&o, id).unwrap();
        std::thread::spawn(move || chat.append(NewMessage::user("waited")))
    };
    // Once the writer waits on the holder's lock, the holder's backend is killed.
    let mut waiting = false;
    for _ in 0..600 {
        let n = psql(
            &url,
            &format!(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND {pid} = ANY(pg_blocking_pids(pid))"
            ),
        );
        if n.trim() != "0" {
            waiting = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(waiting, "expected the writer to wait on the holder's row lock");
    assert_eq!(psql(&url, &format!("SELECT pg_terminate_backend({pid})")).trim(), "t");
    assert_eq!(writer.join().unwrap().unwrap(), 1, "the writer's append lands after the holder is gone");
    assert_eq!(store.chat(&o, id).unwrap().messages().unwrap().len(), 2);
}

#[test]
fn timeouts_apply_through_pgbouncer_transaction_pooling() {
    let Some(url) = fleet_url() else { return };
    let store = Store::open(with(&env("PGBOUNCER_URL"), "lock_timeout=1s"), opts()).unwrap();
    let o = owner("bouncerwait");
    let id = chats(&store, &o, 1)[0];
    let chat = store.chat(&o, id).unwrap();
    let (holder, _) = hold_row_lock(&url, id.0);
    let err =
        chat.append(NewMessage::user("behind the lock")).expect_err("the lock wait times out").to_string();
    assert!(
        err.contains(&format!("waited 1 s for chat {}'s row lock (lock_timeout=1 s)", id.0)),
        "expected the error to name the wait and the setting, found: {err}"
    );
    drop(holder);
    assert_eq!(chat.append(NewMessage::user("after")).unwrap(), 1);
}

#[test]
fn a_write_that_uploads_blobs_to_s3_needs_no_second_pooled_connection_to_finish() {
    let Some(url) = fleet_url() else { return };
    let Ok(s3) = std::env::var("UNDERTEXT_FLEET_S3") else {
        eprintln!("skipped: UNDERTEXT_FLEET_S3 is not set (no S3 server)");
        return;
    };
    // One connection: the write holds it from its chat's lock to its commit, and uploads
    // its blob (committed apart) meanwhile; with no way past the bound it would wait for
    // itself until pool_timeout.
    let a = app("pool_one");
    let store =
        Store::open(with(&url, &format!("{s3}&pool_size=1&pool_timeout=30s&application_name={a}")), opts())
            .unwrap();
    let o = owner("pool-one");
    let id = chats(&store, &o, 1)[0];
    let chat = store.chat(&o, id).unwrap();
    let body = format!("state of {a}").into_bytes();
    let (ids, seqs) =
        chat.append_with_blobs(&[body.as_slice()], vec![NewMessage::user("with a blob")]).unwrap();
    assert_eq!(seqs, 1..2);
    assert_eq!(&*store.get_blob(&o, &ids[0]).unwrap(), body.as_slice());
    let (tls, plain) = connections(&url, &a);
    assert!(
        tls + plain <= 1,
        "expected the connection opened beyond pool_size=1 closed, found {} open",
        tls + plain
    );
}
