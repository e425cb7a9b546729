//! A PostgreSQL restart in the middle of a fleet run (4 worker processes appending, editing
//! and publishing): the workers get clear errors naming the backend while it is down, then go
//! on, and nothing acknowledged is lost. A file of its own, so that it never restarts the
//! server under another test. Needs `UNDERTEXT_FLEET_URL` and `UNDERTEXT_FLEET_DIR` (the
//! server's directory for `scripts/fleet-servers restart`): `scripts/test-fleet` sets both.

#![cfg(feature = "fleet")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::process::Command;

use undertext::Store;
use undertext_tests::child::Ready;
use undertext_tests::fleet::{Acked, chats, fleet_url, opts, owner, worker};
use undertext_tests::seed;

const BIN: &str = env!("CARGO_BIN_EXE_fleet_worker");

#[test]
fn a_postgres_restart_mid_run_gives_clear_errors_then_the_workers_go_on() {
    let Some(url) = fleet_url() else { return };
    let Ok(dir) = std::env::var("UNDERTEXT_FLEET_DIR") else {
        eprintln!("skipped: UNDERTEXT_FLEET_DIR (the server's directory, for a restart) is not set");
        return;
    };
    let seed = seed(22);
    let store = Store::open(&url, opts()).unwrap();
    let o = owner("restart");
    let ids = chats(&store, &o, 8);
    drop(store);
    let workers: Vec<Ready> = (0..4).map(|w| worker(BIN, &url, &o, seed * 10 + w, 1_000_000, &ids)).collect();
    let mut acked = Acked::default();
    for w in &workers {
        for _ in 0..10 {
            acked.take(&w.next_line().unwrap());
        }
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/fleet-servers");
    let status =
        Command::new(script).args(["restart", &dir]).stdout(std::process::Stdio::null()).status().unwrap();
    assert!(status.success(), "restarting PostgreSQL");
    // After the restart every worker acknowledges operations again.
    for w in &workers {
        let mut after = 0;
        while after < 10 {
            let line = w.next_line().expect("the worker goes on");
            if !line.starts_with("err ") {
                after += 1;
            }
            acked.take(&line);
        }
    }
    for w in workers {
        let (_, rest) = w.kill();
        for line in rest {
            acked.take(&line);
        }
    }
    for e in &acked.errors {
        assert!(e.contains("fleet backend postgres://"), "a clear error naming the backend: {e}");
    }
    eprintln!("{} errors during the restart, e.g. {:?}", acked.errors.len(), acked.errors.first());
    acked.check(&url, &o, &ids, false);
}
