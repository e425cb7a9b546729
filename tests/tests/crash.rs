//! Claim: a write acknowledged in `Group` durability survives SIGKILL at any moment,
//! byte for byte, and the store reopens after every kill.
//!
//! The suite runs 50 kills; `UNDERTEXT_CRASH_KILLS=1000` runs the campaign.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use undertext::{BlobId, IndexAtOpen, Options, Store};
use undertext_tests::child::spawn_until_ready;
use undertext_tests::{Rng, content, seed};

/// The two tests take turns: each reopens its store between spawns of children, and a child
/// forked by the other test holds a copy of the lock file's descriptor until its `exec`, so
/// a store just closed here could look locked (by this process) to a child of this test.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn acknowledged_group_commits_survive_sigkill() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let kills: u64 = std::env::var("UNDERTEXT_CRASH_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let seed = seed(0xC4A5_8001);
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    // stream/index -> id, for every write any child acknowledged.
    let mut acked: HashMap<(u64, u64, u64), BlobId> = HashMap::new();
    let mut total_checked = 0u64;
    // The index file as the last clean close left it (sealed), and how reopens trusted it.
    let index = dir.path().join("index.redb");
    let mut closed_index: Option<Vec<u8>> = None;
    let (mut verified, mut sealed) = (0u64, 0u64);
    for kill in 0..kills {
        let child_seed = seed.wrapping_add(kill);
        let threads = rng.range(1, 5);
        let child = spawn_until_ready(
            Command::new(env!("CARGO_BIN_EXE_crash_writer"))
                .arg(dir.path())
                .arg(child_seed.to_string())
                .arg(threads.to_string())
                .stderr(Stdio::inherit()),
            Duration::from_secs(30),
            &format!("kill {kill}, seed {child_seed}"),
        );
        std::thread::sleep(Duration::from_millis(rng.range(5, 120)));
        let (status, lines) = child.kill();
        assert!(!status.success(), "child should have been killed, exited with {status}");
        let mut this_round = 0;
        for line in &lines {
            let parts: Vec<&str> = line.split(' ').collect();
            // A line cut by the kill is not an acknowledgement the child completed.
            let [_, t, i, id] = parts[..] else { continue };
            let (Ok(t), Ok(i), Ok(id)) = (t.parse(), i.parse(), id.parse::<BlobId>()) else {
                continue;
            };
            acked.insert((child_seed, t, i), id);
            this_round += 1;
        }
        let killed_index = std::fs::read(&index).ok();
        let store = Store::open(dir.path(), Options::default())
            .unwrap_or_else(|e| panic!("reopen after kill {kill} failed: {e}"));
        // A killed process seals nothing: an index it wrote is verified at the reopen.
        let at_open = store.stats().unwrap().index_at_open;
        if killed_index != closed_index {
            assert_eq!(at_open, IndexAtOpen::Verified, "kill {kill}: the killed child wrote the index");
        }
        match at_open {
            IndexAtOpen::Verified => verified += 1,
            IndexAtOpen::Sealed => sealed += 1,
            other => panic!("kill {kill}: the index opened {other:?}"),
        }
        for (&(s, t, i), id) in &acked {
            let want = content(s, t, i);
            let got = store
                .get_blob("o", id)
                .unwrap_or_else(|e| panic!("kill {kill}: acknowledged write ({s},{t},{i}) {id} lost: {e}"));
            assert!(*got == *want, "kill {kill}: ({s},{t},{i}) differs");
            if i % 4 == 3 {
                let second = store.get_blob("o", &BlobId::of(&content(s, t + 1000, i))).unwrap();
                assert_eq!(*second, *content(s, t + 1000, i));
            }
            total_checked += 1;
        }
        if kill % 10 == 9 || kill + 1 == kills {
            let report = store.check().unwrap();
            assert!(report.is_ok(), "kill {kill}: check found {:?}", report.problems);
        }
        drop(store);
        closed_index = std::fs::read(&index).ok();
        eprintln!("kill {kill}: {this_round} acknowledged this round, {} in all", acked.len());
    }
    eprintln!(
        "kills: {kills}, reopens: {kills} (index verified {verified}, sealed {sealed}), acknowledged writes checked: {total_checked}, losses: 0"
    );
    assert!(
        verified * 2 >= kills,
        "most children write the index before the kill: {verified} of {kills} verified"
    );
    assert!(acked.len() as u64 >= kills, "children acknowledged too few writes to prove anything");
}

/// Claim: every call of the mixed workload (chats, appends, edits, steps, blobs, archives,
/// checkpoint publications, views that publish, with the background worker building
/// checkpoints) acknowledged in `Group` durability survives SIGKILL at any moment; a call cut
/// off is there whole or not at all; the store reopens after every kill.
///
/// The suite runs 50 kills; `UNDERTEXT_MIXED_KILLS=1000` (scripts/crash-campaign) runs the
/// campaign.
#[test]
fn acknowledged_calls_of_a_mixed_workload_survive_sigkill() {
    use undertext_tests::mixed::{Event, Model, sweep_options, verify};
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());

    let kills: u64 = std::env::var("UNDERTEXT_MIXED_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let seed = seed(0x3_1CED_0001);
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::default();
    let (mut killed, mut finished, mut checked, mut in_doubt_before) = (0u64, 0u64, 0u64, 0u64);
    for kill in 0..kills {
        let base = kill * 100_000;
        let child = spawn_until_ready(
            Command::new(env!("CARGO_BIN_EXE_mixed_writer"))
                .arg(dir.path())
                .arg(seed.to_string())
                .arg(base.to_string())
                .arg("100000") // more calls than any child makes before its kill
                .stderr(Stdio::null()),
            Duration::from_secs(60),
            &format!("kill {kill}, seed {seed}"),
        );
        std::thread::sleep(Duration::from_millis(rng.range(5, 250)));
        let (status, lines) = child.kill(); // SIGKILL (or nothing, if the child already finished)
        if status.success() {
            finished += 1
        } else {
            killed += 1
        }
        // A line cut by the kill does not decode: a cut `begin` means the call never started
        // (the line is flushed before the call), a cut `ack` leaves the call in doubt.
        for line in &lines {
            if let Some(e) = Event::decode(line) {
                model.apply(e);
            }
        }
        model.finish();
        let doubt = model.effects.iter().filter(|(_, d)| *d).count() as u64;
        let full = kill % 10 == 9 || kill + 1 == kills;
        let store = Store::open(dir.path(), sweep_options())
            .unwrap_or_else(|e| panic!("reopen after kill {kill} failed: {e}"));
        let n = verify(&store, seed, &model, if full { 0 } else { base })
            .unwrap_or_else(|e| panic!("kill {kill} (seed {seed}): {e}"));
        checked += n;
        if full {
            let report = store.check().unwrap();
            assert!(report.is_ok(), "kill {kill}: check found {:?}", report.problems);
        }
        drop(store);
        eprintln!(
            "kill {kill}: {} calls acknowledged in all, {} in doubt this round, {n} items checked",
            model.acked,
            doubt - in_doubt_before
        );
        in_doubt_before = doubt;
    }
    eprintln!(
        "mixed crash campaign: kills: {killed} (and {finished} children that finished first), reopens: {kills}, \
         acknowledged calls: {}, items checked after reopens: {checked}, losses: 0",
        model.acked
    );
    assert!(killed * 10 >= kills * 9, "too few children were killed mid-run: {killed} of {kills}");
    assert!(
        model.acked >= kills * 5,
        "children acknowledged too few calls to prove anything: {}",
        model.acked
    );
}
