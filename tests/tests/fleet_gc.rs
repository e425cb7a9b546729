//! Garbage collection in fleet mode, with blobs in PostgreSQL and with blobs in S3 (s3s-fs):
//! an unreferenced blob older than the grace period is deleted (row and object), a fresh
//! unreferenced one (an upload whose write may still be in flight) is kept, every referenced
//! one is kept and reads back verified from a fresh process, and a process that still holds
//! a collected blob in its replica uploads it again when a write references it. In S3, an
//! object without a row goes once older than the grace period; one not named by a blob id
//! stays.
//!
//! A catalog larger than a page of the collection's reads (500 rows) and than a sweep's
//! group: every page is marked, every group swept.
//!
//! A file of its own: the test tells the blobs each step stored by the rows that appeared,
//! so no other test may write to the server meanwhile (cargo runs test binaries one after
//! another; the tests here take turns). Needs `UNDERTEXT_FLEET_URL` (and `UNDERTEXT_FLEET_S3` for the S3 half):
//! `scripts/test-fleet` sets them.

#![cfg(feature = "fleet")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use undertext::{ChatMeta, Error, NewMessage, Part, Store};
use undertext_tests::Rng;
use undertext_tests::fleet::{fleet_url, opts, owner};

/// The ids of every blob row.
fn rows(pg: &mut postgres::Client) -> BTreeSet<Vec<u8>> {
    pg.query("SELECT id FROM ut_blobs", &[]).unwrap().iter().map(|r| r.get::<_, Vec<u8>>(0)).collect()
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// A long text nothing else in any run contains (stored as a blob body, not inline).
fn long_text(tag: &str) -> String {
    let mark = owner(tag);
    (0..600).map(|i| format!("{mark} line {i} of a long tool transcript\n")).collect()
}

fn texts(store: &Store, owner: &str, chat: undertext::ChatId) -> Vec<String> {
    let c = store.chat(owner, chat).unwrap();
    (0..c.len())
        .map(|s| match &c.get(s).unwrap().parts[0] {
            Part::Text(t) => t.clone(),
            other => panic!("expected a text part, found {other:?}"),
        })
        .collect()
}

/// One backend's run (`url`: blobs in PostgreSQL, or in S3 with `bucket` the bucket's
/// directory on disk).
fn collect_one(name: &str, url: &str, pg: &mut postgres::Client, bucket: Option<PathBuf>) {
    let object = |id: &[u8]| bucket.as_ref().map(|b| b.join("t").join(hex(id)));
    let writer = Store::open(url, opts()).unwrap();
    let o = owner("gc");
    let before = rows(pg);
    // Referenced: a granted blob, a chunked granted blob, a live chat's long message.
    let small = format!("a granted tool result {}", owner("small")).into_bytes();
    // Content no earlier run stored (a run on the same server would find it there).
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let big = Rng::new(nanos as u64).bytes(400_000);
    let small_id = writer.put_blob(&o, &small).unwrap();
    let big_id = writer.put_blob(&o, &big).unwrap();
    let live = writer.create_chat(&o, ChatMeta { title: "live".into(), ..Default::default() }).unwrap();
    let live_text = long_text("live");
    writer.chat(&o, live).unwrap().append(NewMessage::user(live_text.clone())).unwrap();
    let referenced: BTreeSet<Vec<u8>> = rows(pg).difference(&before).cloned().collect();
    assert!(referenced.len() >= 4, "{name}: blobs, chunks and a body stored, found {}", referenced.len());
    // Unreferenced once its chat is deleted: a long message's body.
    let gone_text = long_text("deleted");
    let doomed_chat = writer.create_chat(&o, ChatMeta::default()).unwrap();
    writer.chat(&o, doomed_chat).unwrap().append(NewMessage::user(gone_text.clone())).unwrap();
    writer.delete_chat(&o, doomed_chat).unwrap();
    let stale: BTreeSet<Vec<u8>> =
        rows(pg).difference(&before).filter(|id| !referenced.contains(*id)).cloned().collect();
    assert_eq!(stale.len(), 1, "{name}: one body blob for the deleted chat's message");
    // Everything so far was stored two hours ago, as far as the catalog can tell.
    let aged: Vec<Vec<u8>> = referenced.iter().chain(&stale).cloned().collect();
    pg.execute("UPDATE ut_blobs SET stored_at = stored_at - interval '2 hours' WHERE id = ANY($1)", &[&aged])
        .unwrap();
    // Fresh and unreferenced: what an upload looks like before its write commits.
    let fresh_chat = writer.create_chat(&o, ChatMeta::default()).unwrap();
    writer.chat(&o, fresh_chat).unwrap().append(NewMessage::user(long_text("fresh"))).unwrap();
    writer.delete_chat(&o, fresh_chat).unwrap();
    let fresh: BTreeSet<Vec<u8>> =
        rows(pg).difference(&before).filter(|id| !aged.contains(*id)).cloned().collect();
    assert_eq!(fresh.len(), 1, "{name}: one body blob for the fresh deleted chat");
    for id in aged.iter().chain(&fresh) {
        if let Some(p) = object(id) {
            assert!(p.exists(), "{name}: object {} before gc", p.display());
        }
    }

    // Objects without a row (S3 only): content uploaded whose row is gone, one old and one
    // fresh, and an object whose name is no blob id (someone else's file in the bucket).
    let orphan = |tag: &str, age: Duration| {
        let p = object(undertext::BlobId::of(owner(tag).as_bytes()).as_bytes())?;
        std::fs::write(&p, b"an object no row names").unwrap();
        let f = std::fs::File::options().write(true).open(&p).unwrap();
        f.set_modified(std::time::SystemTime::now() - age).unwrap();
        Some(p)
    };
    let old_orphan = orphan("old-orphan", Duration::from_secs(7200));
    let fresh_orphan = orphan("fresh-orphan", Duration::ZERO);
    let foreign = bucket.as_ref().map(|b| b.join("t").join("notes.txt"));
    if let Some(f) = &foreign {
        std::fs::write(f, b"not a blob").unwrap();
        std::fs::File::options()
            .write(true)
            .open(f)
            .unwrap()
            .set_modified(std::time::SystemTime::now() - Duration::from_secs(7200))
            .unwrap();
    }

    let report = Store::gc(url, opts()).unwrap();
    if let (Some(old), Some(fresh), Some(foreign)) = (&old_orphan, &fresh_orphan, &foreign) {
        assert!(!old.exists(), "{name}: an old object without a row is deleted: {}", old.display());
        assert!(fresh.exists(), "{name}: a fresh object without a row is kept (an upload in flight)");
        assert!(foreign.exists(), "{name}: an object not named by a blob id is never touched");
    }
    assert!(report.deleted_chats >= 2, "{name}: {report:?}");
    assert!(report.blobs_removed >= 1, "{name}: {report:?}");
    assert!(report.records_after < report.records_before, "{name}: {report:?}");
    let after = rows(pg);
    for id in &stale {
        assert!(!after.contains(id), "{name}: the old unreferenced blob {} is deleted", hex(id));
        if let Some(p) = object(id) {
            assert!(!p.exists(), "{name}: its object {} is deleted", p.display());
        }
    }
    for id in referenced.iter().chain(&fresh) {
        assert!(after.contains(id), "{name}: blob {} is kept", hex(id));
        if let Some(p) = object(id) {
            assert!(p.exists(), "{name}: object {} is kept", p.display());
        }
    }
    // A fresh process (nothing cached) reads every referenced blob back, verified.
    let reader = Store::open(url, opts()).unwrap();
    assert_eq!(&*reader.get_blob(&o, &small_id).unwrap(), small.as_slice(), "{name}");
    assert_eq!(&*reader.get_blob(&o, &big_id).unwrap(), big.as_slice(), "{name}");
    assert_eq!(texts(&reader, &o, live), vec![live_text.clone()], "{name}");
    assert!(matches!(reader.chat(&o, doomed_chat), Err(Error::NotFound { .. })), "{name}");

    // The writer's replica still holds the collected body: a write that references the same
    // content again (deduplicated, so not carried) uploads it again before committing.
    let again = writer.create_chat(&o, ChatMeta::default()).unwrap();
    writer.chat(&o, again).unwrap().append(NewMessage::user(gone_text.clone())).unwrap();
    let back = rows(pg);
    for id in &stale {
        assert!(back.contains(id), "{name}: blob {} uploaded again", hex(id));
        if let Some(p) = object(id) {
            assert!(p.exists(), "{name}: object {} uploaded again", p.display());
        }
    }
    let reader = Store::open(url, opts()).unwrap();
    assert_eq!(texts(&reader, &o, again), vec![gone_text], "{name}: read by a fresh process");

    // Without a grace period the fresh unreferenced body goes too; referenced content stays.
    Store::gc(url, opts().gc_grace(Duration::ZERO)).unwrap();
    let after = rows(pg);
    assert!(fresh.iter().all(|id| !after.contains(id)), "{name}: no grace, the fresh unreferenced blob goes");
    if let (Some(fresh), Some(foreign)) = (&fresh_orphan, &foreign) {
        assert!(!fresh.exists(), "{name}: no grace, the fresh object without a row goes");
        assert!(foreign.exists(), "{name}: still never touched");
        std::fs::remove_file(foreign).unwrap();
    }
    let reader = Store::open(url, opts()).unwrap();
    assert_eq!(&*reader.get_blob(&o, &big_id).unwrap(), big.as_slice(), "{name}");
    assert_eq!(texts(&reader, &o, live), vec![live_text], "{name}");
}

/// `url` with blobs in S3 (`UNDERTEXT_FLEET_S3`), when the run has an S3 server.
fn s3_url(url: &str) -> Option<String> {
    let params = std::env::var("UNDERTEXT_FLEET_S3").ok().filter(|p| !p.is_empty())?;
    Some(format!("{url}{}{params}", if url.contains('?') { '&' } else { '?' }))
}

/// One test at a time: each tells its blobs by the rows that appeared.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn fleet_gc_deletes_old_unreferenced_blobs_keeps_fresh_and_referenced_ones_in_postgres_and_s3() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(url) = fleet_url() else { return };
    let mut pg = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    collect_one("fleet", &url, &mut pg, None);
    match s3_url(&url) {
        Some(s3) => {
            let bucket = PathBuf::from(std::env::var("UNDERTEXT_FLEET_S3_DIR").unwrap());
            collect_one("fleet+s3", &s3, &mut pg, Some(bucket));
        }
        None => eprintln!("S3 half skipped: UNDERTEXT_FLEET_S3 is not set"),
    }
}

#[test]
fn fleet_gc_reads_a_catalog_larger_than_its_pages_and_sweeps_it_in_groups() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let Some(url) = fleet_url() else { return };
    let mut pg = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let before = rows(&mut pg);
    let store = Store::open(&url, opts()).unwrap();
    let o = owner("pages");
    // 1,200 records in one batch (three pages of the mark), the last one a long message whose
    // body is a blob: only the mark of the third page keeps it.
    let id = store.create_chat(&o, ChatMeta::default()).unwrap();
    let last = long_text("last page");
    let mut batch: Vec<NewMessage> =
        (0..1199).map(|i| NewMessage::user(format!("{o} message {i}"))).collect();
    batch.push(NewMessage::assistant(last.clone()));
    store.chat(&o, id).unwrap().append_batch(batch).unwrap();
    // 1,100 old rows nothing references (three pages of the sweep's listing, three groups).
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let mut rng = Rng::new(nanos as u64);
    let unreferenced: Vec<Vec<u8>> = (0..1100).map(|_| rng.bytes(32)).collect();
    pg.execute(
        "INSERT INTO ut_blobs (id, kind, codec, raw_len, payload) \
         SELECT i, 1, 0, 0, '\\x00'::bytea FROM unnest($1::bytea[]) AS i",
        &[&unreferenced],
    )
    .unwrap();
    let ours: Vec<Vec<u8>> = rows(&mut pg).difference(&before).cloned().collect();
    pg.execute("UPDATE ut_blobs SET stored_at = now() - interval '2 hours' WHERE id = ANY($1)", &[&ours])
        .unwrap();

    // With the bucket when the run has one: message bodies stored there are read to be marked.
    let gc_url = s3_url(&url).unwrap_or_else(|| url.clone());
    let report = Store::gc(&gc_url, opts()).unwrap();
    assert!(report.blobs_removed >= 1100, "{report:?}");
    let after = rows(&mut pg);
    assert!(unreferenced.iter().all(|id| !after.contains(id)), "every unreferenced row went");
    let kept: Vec<&Vec<u8>> = ours.iter().filter(|id| !unreferenced.contains(id)).collect();
    assert!(!kept.is_empty() && kept.iter().all(|id| after.contains(*id)), "the last page's body blob stays");
    let reader = Store::open(&url, opts()).unwrap();
    let chat = reader.chat(&o, id).unwrap();
    assert_eq!(chat.len(), 1200);
    assert_eq!(chat.get(1199).unwrap().parts, vec![Part::Text(last)]);
}
