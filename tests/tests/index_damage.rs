//! Damage to the index (`index.redb`) of a store holding every real transcript: truncated (to
//! 0, to half, by one byte), bits flipped at many offsets, a 4 KiB page zeroed. The index is
//! derived from the log, so for each damage:
//!
//! * opening, listing, reading every chat (and the whole text of every archived result),
//!   building views and closing never panic or abort: they run in a child process
//!   (`index_probe`), whose exit must be a normal exit with status 0, not a signal;
//! * what is read is never wrong: a chat either reads exactly as in the undamaged store or
//!   fails, and a failure from the index is `Error::Index`, whose message says to rebuild;
//! * `check` reports the damage whenever a read failed;
//! * the rebuild `undertext check --rebuild` does (from a fresh file) restores every chat
//!   exactly, and `check` is then clean.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;

use undertext::import::{self, Format};
use undertext::{Durability, Options, Store};
use undertext_tests::{Rng, seed, transcripts};

const OWNER: &str = "o";

/// A store with every transcript imported, closed.
fn build_store(dir: &Path) {
    let files = import::transcript_files(&[transcripts::transcripts_dir()]).unwrap();
    let sessions: Vec<_> =
        files.iter().flat_map(|f| import::parse_file(f, Format::Auto).unwrap().sessions).collect();
    let store = Store::open(dir, Options { durability: Durability::None, ..Options::default() }).unwrap();
    let r = import::import_sessions(&store, OWNER, &sessions, |_| {}).unwrap();
    assert!(r.sessions_new > 50, "the transcripts make many chats");
    store.close().unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// What one run of the probe printed; panics (failing the test) if it did not exit normally.
fn probe(dir: &Path, args: &[&str], label: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_index_probe")).arg(dir).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.signal().is_none(),
        "{label}: `index_probe {args:?}` was killed by signal {:?} (an abort?); stderr:\n{stderr}",
        out.status.signal()
    );
    assert_eq!(out.status.code(), Some(0), "{label}: `index_probe {args:?}` failed; stderr:\n{stderr}");
    // A panic inside redb is caught at the index boundary (the default hook still prints
    // it); one anywhere else would have ended the child with status 101 above.
    for line in stderr.lines().filter(|l| l.contains("panicked at")) {
        assert!(line.contains("/redb-"), "{label}: `index_probe {args:?}` panicked outside redb: {line}");
    }
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect()
}

/// What a read run saw: the digest of each chat and view read, and whether anything failed.
#[derive(Debug, Default, PartialEq)]
struct Seen {
    listed: Option<usize>,
    digests: BTreeMap<String, String>,
    errors: Vec<String>,
}

fn read(dir: &Path, label: &str) -> Seen {
    let mut seen = Seen::default();
    for line in probe(dir, &["read", OWNER], label) {
        let mut w = line.splitn(3, ' ');
        let (a, b, c) = (w.next().unwrap_or(""), w.next().unwrap_or(""), w.next().unwrap_or(""));
        match (a, b) {
            ("open" | "close", "ok") => {}
            ("listed", n) => seen.listed = Some(n.parse().unwrap()),
            (_, "error") => seen.errors.push(line.clone()),
            ("chat" | "view", id) if c.starts_with("error") => seen.errors.push(format!("{a} {id} {c}")),
            ("chat" | "view", id) => {
                seen.digests.insert(format!("{a} {id}"), c.to_string());
            }
            _ => panic!("{label}: unexpected probe line {line:?}"),
        }
    }
    seen
}

fn check(dir: &Path, label: &str) -> String {
    let lines = probe(dir, &["check"], label);
    lines.iter().find(|l| l.starts_with("check ") || l.starts_with("open error")).cloned().unwrap_or_default()
}

/// Applies one damage to the index file at `p`.
#[derive(Debug, Clone)]
enum Damage {
    TruncateTo(u64),
    Flip(u64, u8),
    ZeroPage(u64),
}

fn apply(p: &Path, d: &Damage) {
    let mut bytes = std::fs::read(p).unwrap();
    match *d {
        Damage::TruncateTo(n) => bytes.truncate(n as usize),
        Damage::Flip(at, bit) => bytes[at as usize] ^= 1 << bit,
        Damage::ZeroPage(at) => {
            let end = (at as usize + 4096).min(bytes.len());
            bytes[at as usize..end].fill(0);
        }
    }
    std::fs::write(p, bytes).unwrap();
}

#[test]
fn any_damage_to_the_index_gives_errors_that_advise_a_rebuild_never_wrong_bytes_and_a_rebuild_restores_every_chat()
 {
    let seed = seed(16);
    let mut rng = Rng::new(seed);
    let tmp = tempfile::tempdir().unwrap();
    let pristine = tmp.path().join("pristine");
    build_store(&pristine);
    let want = read(&pristine, "pristine");
    assert!(want.errors.is_empty(), "the undamaged store reads: {:?}", want.errors);
    let chats = want.listed.unwrap();
    assert!(chats > 50 && want.digests.len() > chats, "{chats} chats, {} digests", want.digests.len());
    assert_eq!(check(&pristine, "pristine"), "check ok");

    let len = std::fs::metadata(pristine.join("index.redb")).unwrap().len();
    eprintln!("index.redb: {len} bytes, {chats} chats");
    let mut cases = vec![Damage::TruncateTo(0), Damage::TruncateTo(len / 2), Damage::TruncateTo(len - 1)];
    for page in [0, 1, len / 4096 / 2, len / 4096 - 1] {
        cases.push(Damage::ZeroPage(page * 4096));
    }
    // The file's header: redb's magic, its commit slots.
    for at in [0, 9, 40, 64, 100, 200, 300, 500, 1000, 4000] {
        cases.push(Damage::Flip(at, (at % 8) as u8));
    }
    for _ in 0..40 {
        cases.push(Damage::Flip(rng.range(0, len), rng.range(0, 8) as u8));
    }

    let (mut detected, mut exact) = (0, 0);
    for (n, d) in cases.iter().enumerate() {
        let label = format!("case {n} {d:?} (seed {seed})");
        let dir = tmp.path().join(format!("case{n}"));
        copy_dir(&pristine, &dir);
        apply(&dir.join("index.redb"), d);

        let seen = read(&dir, &label);
        for (k, v) in &seen.digests {
            assert_eq!(want.digests.get(k), Some(v), "{label}: {k} read back wrong");
        }
        for e in &seen.errors {
            if e.contains(" index ") {
                assert!(
                    e.contains("check --rebuild"),
                    "{label}: an index error that does not advise a rebuild: {e}"
                );
            }
        }
        let complete = seen.errors.is_empty() && seen.listed == Some(chats) && seen.digests == want.digests;
        let report = check(&dir, &label);
        let first = seen.errors.first().map_or("", |e| &e[..e.len().min(100)]);
        eprintln!("{label}: {} errors, check: {report:?}; {first}", seen.errors.len());
        if complete {
            exact += 1;
        } else {
            detected += 1;
            assert_ne!(
                report,
                "check ok",
                "{label}: reads failed ({:?}) but check is clean",
                seen.errors.first()
            );
            assert!(
                report.starts_with("open error index") || report.starts_with("check index-problems"),
                "{label}: check reported {report:?}"
            );
        }

        let rebuilt = probe(&dir, &["rebuild"], &label);
        assert_eq!(rebuilt, ["rebuild ok"], "{label}");
        assert_eq!(read(&dir, &label), want, "{label}: after the rebuild");
        assert_eq!(check(&dir, &label), "check ok", "{label}: after the rebuild");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    eprintln!("{} damages: {detected} detected, {exact} read back exactly", cases.len());
}

/// An index that passes redb's own checks but is not the log's (a row removed, as a stale or
/// foreign copy would be): reads do not see the damage, `check` must.
#[test]
fn check_reports_an_index_whose_pages_verify_but_whose_entries_differ_from_the_log_and_rebuild_repairs_it() {
    use redb::{ReadableDatabase, TableDefinition};
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options { durability: Durability::None, ..Options::default() };
    let store = Store::open(tmp.path(), opts.clone()).unwrap();
    let ids: Vec<_> = (0..3).map(|_| store.create_chat("a", Default::default()).unwrap()).collect();
    for id in &ids {
        store.chat("a", *id).unwrap().append(undertext::NewMessage::user("hello")).unwrap();
    }
    assert!(store.check().unwrap().is_ok());
    store.close().unwrap();

    const CHATS: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("chats");
    {
        let db = redb::Database::open(tmp.path().join("index.redb")).unwrap();
        assert!(db.begin_read().unwrap().open_table(CHATS).unwrap().get(ids[1].0).unwrap().is_some());
        let tx = db.begin_write().unwrap();
        tx.open_table(CHATS).unwrap().remove(ids[1].0).unwrap();
        tx.commit().unwrap();
    }

    let store = Store::open(tmp.path(), opts.clone()).unwrap();
    let r = store.check().unwrap();
    assert!(!r.is_ok() && r.problems.is_empty(), "{r:?}");
    assert!(
        r.index_problems
            .iter()
            .any(|p| p.contains("table chats") && p.contains("in the log but not in the index"))
    );
    store.rebuild_index().unwrap();
    assert!(store.check().unwrap().is_ok());
    assert_eq!(store.chat("a", ids[1]).unwrap().messages().unwrap().len(), 1);
}
