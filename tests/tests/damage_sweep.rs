//! Damage to any file of a store holding every real transcript (many 1 MiB segments): each
//! segment, the index (`index.redb`) and `LOCK` deleted, truncated (to 0, to its header, by
//! half, by one byte), bits flipped at many offsets, a 4 KiB page zeroed. Every operation runs
//! in a child process (`damage_probe`), whose exit must be a normal exit with status 0, not a
//! signal: no panic, no abort, from any byte of any file.
//!
//! `any_damage_to_any_file_...` (the whole sweep): for each damage,
//!
//! * through `Store::open_read_only` (the salvage path, which reads the log alone): the store
//!   opens; no chat reads differently from the undamaged store (it reads exactly, or fails, or
//!   — a chat whose records the damage cut — reads as its first messages exactly); every chat
//!   with no record in a damaged segment reads exactly (all of them when the damage is to the
//!   index or `LOCK`), or — a chat after the damaged segment — fails for a blob it shares
//!   with one stored there (content is stored once); the damage is reported in
//!   `open_warnings` whenever a chat is not whole, except damage to the end of the last
//!   segment (deleted, cut, its last batch damaged), which the log alone cannot tell from a
//!   log that ends sooner — the ordinary open refuses it, as the index records more log;
//! * through `Store::open`: open refuses (saying what is wrong), or every chat reads exactly,
//!   fails, or reads as its first messages; when a chat is not whole, the open warned of it
//!   or `check` reports it.
//!
//! The suite takes 5 of the segments, 2 random flips per file (12 in the index sweep);
//! `UNDERTEXT_DAMAGE_FILES=all` and `UNDERTEXT_DAMAGE_FLIPS=N` (the campaign,
//! `scripts/crash-campaign`) take every segment and N flips (6N in the index sweep).
//!
//! `any_damage_to_the_index_...`: the index is derived from the log, so for each damage to it
//! what is read is never wrong: a chat either reads exactly as in the undamaged store or
//! fails, and a failure from the index is `Error::Index`, whose message says to rebuild;
//! `check` reports the damage whenever a read failed; the rebuild `undertext check --rebuild`
//! does (from a fresh file) restores every chat exactly, and `check` is then clean.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use undertext::import::{self, Format};
use undertext::{Durability, Options, Page, Store};
use undertext_tests::{Rng, seed, transcripts};

const OWNER: &str = "o";

/// The store every test damages copies of: every transcript imported, closed.
struct Fixture {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    /// What the undamaged store reads (the same through both opens).
    want: Seen,
    /// The segments each chat has records in, as `chat ID` -> (first, last).
    spans: BTreeMap<String, (u64, u64)>,
    /// The last segment's number.
    last: u64,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("pristine");
        let (spans, last) = build_store(&dir);
        let want = read(&dir, "read", "pristine");
        assert!(want.errors.is_empty(), "the undamaged store reads: {:?}", want.errors);
        let chats = want.listed.unwrap();
        assert!(chats > 50 && want.digests.len() > chats, "{chats} chats, {} digests", want.digests.len());
        assert_eq!(check(&dir, "pristine"), "check ok");
        let ro = read(&dir, "ro-read", "pristine, read-only");
        assert_eq!(ro.digests, want.digests, "the read-only open reads the undamaged store exactly");
        assert_eq!(spans.len(), chats, "every chat has its segments");
        eprintln!("fixture: {chats} chats in {last} segments");
        Fixture { _tmp: tmp, dir, want, spans, last }
    })
}

/// A store with every transcript imported over 1 MiB segments, closed; returns the segments
/// each chat has records in (from the segments before and after each session's import, for
/// every chat the import changed) and the last segment's number.
fn build_store(dir: &Path) -> (BTreeMap<String, (u64, u64)>, u64) {
    let files = import::transcript_files(&[transcripts::transcripts_dir()]).unwrap();
    let sessions: Vec<_> =
        files.iter().flat_map(|f| import::parse_file(f, Format::Auto).unwrap().sessions).collect();
    let opts = Options::default().durability(Durability::None).segment_size(1 << 20);
    let store = Store::open(dir, opts).unwrap();
    let listing = |store: &Store| -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut after = None;
        loop {
            let p = store.chats(OWNER, Page { limit: 1000, after }).unwrap();
            out.extend(p.chats.iter().map(|c| (format!("chat {}", c.id), format!("{c:?}"))));
            match p.next {
                Some(next) => after = Some(next),
                None => return out,
            }
        }
    };
    let mut spans: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut seen = BTreeMap::new();
    let mut created = 0;
    for s in &sessions {
        let first = store.stats().unwrap().segments;
        let r = import::import_sessions(&store, OWNER, std::slice::from_ref(s), |_| {}).unwrap();
        created += r.sessions_new;
        let last = store.stats().unwrap().segments;
        let now = listing(&store);
        for (id, state) in &now {
            if seen.get(id) != Some(state) {
                let span = spans.entry(id.clone()).or_insert((first, last));
                span.1 = last;
            }
        }
        seen = now;
    }
    assert!(created > 50, "the transcripts make many chats");
    let last = store.stats().unwrap().segments;
    store.close().unwrap();
    (spans, last)
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
    let out = Command::new(env!("CARGO_BIN_EXE_damage_probe")).arg(dir).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.signal().is_none(),
        "{label}: `damage_probe {args:?}` was killed by signal {:?} (an abort?); stderr:\n{stderr}",
        out.status.signal()
    );
    assert_eq!(out.status.code(), Some(0), "{label}: `damage_probe {args:?}` failed; stderr:\n{stderr}");
    // A panic inside redb is caught at the index boundary (the default hook still prints
    // it); one anywhere else would have ended the child with status 101 above.
    for line in stderr.lines().filter(|l| l.contains("panicked at")) {
        assert!(line.contains("/redb-"), "{label}: `damage_probe {args:?}` panicked outside redb: {line}");
    }
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect()
}

/// What a read run saw: the digests of each chat (metadata, then each message) and view read,
/// whether anything failed, and how many warnings the open gave.
#[derive(Debug, Default, PartialEq)]
struct Seen {
    listed: Option<usize>,
    digests: BTreeMap<String, String>,
    errors: Vec<String>,
    warned: usize,
}

/// A read run of the probe: `mode` is `read` (`Store::open`) or `ro-read` (read-only).
fn read(dir: &Path, mode: &str, label: &str) -> Seen {
    let mut seen = Seen::default();
    for line in probe(dir, &[mode, OWNER], label) {
        let mut w = line.splitn(3, ' ');
        let (a, b, c) = (w.next().unwrap_or(""), w.next().unwrap_or(""), w.next().unwrap_or(""));
        match (a, b) {
            ("open" | "close", "ok") => {}
            ("listed", n) => seen.listed = Some(n.parse().unwrap()),
            ("warned", n) => seen.warned = n.parse().unwrap(),
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

/// One damage to a file.
#[derive(Debug, Clone)]
enum Damage {
    Delete,
    TruncateTo(u64),
    Flip(u64, u8),
    ZeroPage(u64),
}

fn apply(p: &Path, d: &Damage) {
    if let Damage::Delete = d {
        std::fs::remove_file(p).unwrap();
        return;
    }
    let mut bytes = std::fs::read(p).unwrap();
    match *d {
        Damage::Delete => unreachable!("handled above"),
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
    let f = fixture();
    let (pristine, want) = (&f.dir, &f.want);
    let chats = want.listed.unwrap();

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
    for _ in 0..flips() * 6 {
        cases.push(Damage::Flip(rng.range(0, len), rng.range(0, 8) as u8));
    }

    let (mut detected, mut exact) = (0, 0);
    for (n, d) in cases.iter().enumerate() {
        let label = format!("case {n} {d:?} (seed {seed})");
        let dir = tmp.path().join(format!("case{n}"));
        copy_dir(pristine, &dir);
        apply(&dir.join("index.redb"), d);

        let seen = read(&dir, "read", &label);
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
        assert_eq!(read(&dir, "read", &label), *want, "{label}: after the rebuild");
        assert_eq!(check(&dir, &label), "check ok", "{label}: after the rebuild");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    eprintln!("{} damages: {detected} detected, {exact} read back exactly", cases.len());
}

/// How a chat read in a damaged store compares with the undamaged store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    Exact,
    /// Its metadata and first messages exactly, the rest missing.
    Prefix,
    Failed,
    /// Not listed.
    Missing,
}

/// Compares each chat of `seen` with `want`; panics on a chat or view that reads differently
/// (neither exactly nor as a prefix of its messages).
fn compare(want: &Seen, seen: &Seen, label: &str) -> BTreeMap<String, Read> {
    let failed: BTreeSet<&str> = seen
        .errors
        .iter()
        .filter_map(|e| e.strip_prefix("chat "))
        .filter_map(|e| e.split(' ').next())
        .collect();
    let mut out = BTreeMap::new();
    for (k, w) in want.digests.iter().filter(|(k, _)| k.starts_with("chat ")) {
        let r = match seen.digests.get(k) {
            Some(v) if v == w => Read::Exact,
            Some(v) => {
                let (wm, wl) = w.split_once(' ').unwrap();
                let (vm, vl) = v.split_once(' ').unwrap_or((v, ""));
                let prefix =
                    vm == wm && (vl.is_empty() || (wl.starts_with(vl) && wl[vl.len()..].starts_with(',')));
                assert!(
                    prefix,
                    "{label}: {k} reads differently from the undamaged store:\n  {v}\nnot a prefix of\n  {w}"
                );
                Read::Prefix
            }
            None if failed.contains(&k["chat ".len()..]) => Read::Failed,
            None => Read::Missing,
        };
        out.insert(k.clone(), r);
    }
    for (k, v) in seen.digests.iter().filter(|(k, _)| k.starts_with("view ")) {
        let chat = format!("chat {}", &k["view ".len()..]);
        // (Views are built for every 16th chat listed: a chat missing shifts which.)
        if let (Some(Read::Exact), Some(w)) = (out.get(&chat), want.digests.get(k)) {
            assert_eq!(w, v, "{label}: {k} of a chat that reads exactly differs");
        }
    }
    for k in seen.digests.keys().filter(|k| k.starts_with("chat ")) {
        assert!(want.digests.contains_key(k), "{label}: {k} is not in the undamaged store");
    }
    out
}

/// Random bit flips per file (`UNDERTEXT_DAMAGE_FLIPS`, 2 in the suite); the index sweep takes
/// six times as many.
fn flips() -> usize {
    std::env::var("UNDERTEXT_DAMAGE_FLIPS").ok().and_then(|v| v.parse().ok()).unwrap_or(2)
}

/// The files the sweep damages: every segment (`all`) or the first two, a middle one and the
/// last two; then the index and `LOCK`.
fn targets(dir: &Path, last: u64, all: bool) -> Vec<PathBuf> {
    let segs: BTreeSet<u64> =
        if all { (1..=last).collect() } else { [1, 2, last / 2, last - 1, last].into() };
    let mut out: Vec<PathBuf> = segs.iter().map(|n| dir.join(format!("log/{n:08}.seg"))).collect();
    out.push(dir.join("index.redb"));
    out.push(dir.join("LOCK"));
    out
}

/// The damages done to a file of `len` bytes whose header is `header` bytes long.
fn damages(len: u64, header: u64, flips: usize, rng: &mut Rng) -> Vec<Damage> {
    let mut out = vec![Damage::Delete, Damage::TruncateTo(0)];
    if header > 0 && header < len {
        out.push(Damage::TruncateTo(header));
    }
    out.push(Damage::TruncateTo(len / 2));
    if len > 0 {
        out.push(Damage::TruncateTo(len - 1));
        out.push(Damage::ZeroPage(len / 2 / 4096 * 4096));
        if header > 0 {
            let at = rng.range(0, header.min(len));
            out.push(Damage::Flip(at, rng.range(0, 8) as u8));
        }
        for _ in 0..flips {
            out.push(Damage::Flip(rng.range(0, len), rng.range(0, 8) as u8));
        }
    }
    out
}

/// The whole sweep (see the top of the file): any damage to any file of the store, read
/// through the read-only salvage path and through an ordinary open.
#[test]
fn any_damage_to_any_file_never_panics_never_reads_wrong_bytes_is_reported_and_leaves_the_rest_readable_read_only()
 {
    let seed = seed(1616);
    let mut rng = Rng::new(seed);
    let f = fixture();
    let all = std::env::var("UNDERTEXT_DAMAGE_FILES").is_ok_and(|v| v == "all");
    let flips = flips();
    let tmp = tempfile::tempdir().unwrap();
    let chats = f.want.listed.unwrap();
    let started = std::time::Instant::now();
    // Figures: cases; read-only: chats read exactly, as a prefix, failed, missing; cases where
    // the ordinary open refused, opened whole, opened with something not whole (warned or
    // reported by check).
    let (mut cases, mut ro_counts, mut refused, mut whole, mut reported) = (0, [0usize; 4], 0, 0, 0);
    // Chats with no record in a damaged segment that failed for a blob stored there.
    let mut shared = 0u64;
    // Damages to the last segment whose loss the read-only open did not report.
    let mut ro_silent = 0u64;
    for target in targets(&f.dir, f.last, all) {
        let name = target.strip_prefix(&f.dir).unwrap().display().to_string();
        let segment: Option<u64> =
            name.strip_prefix("log/").and_then(|n| n.strip_suffix(".seg")).map(|n| n.parse().unwrap());
        let header = match (segment, name.as_str()) {
            (Some(_), _) => 32,
            (None, "index.redb") => 4096,
            _ => 0,
        };
        let len = std::fs::metadata(&target).unwrap().len();
        for d in damages(len, header, flips, &mut rng) {
            cases += 1;
            let label = format!("{name} {d:?} (seed {seed})");
            let dir = tmp.path().join("case");
            copy_dir(&f.dir, &dir);
            apply(&dir.join(&name), &d);

            // The salvage path first: it writes nothing, so the ordinary open after it sees
            // the same damage.
            let ro = read(&dir, "ro-read", &format!("{label}, read-only"));
            assert!(ro.listed.is_some(), "{label}: the read-only open failed: {:?}", ro.errors.first());
            let got = compare(&f.want, &ro, &format!("{label}, read-only"));
            for (k, r) in &got {
                ro_counts[*r as usize] += 1;
                let (a, b) = f.spans.get(k).copied().unwrap_or((0, u64::MAX));
                let why = || {
                    ro.errors.iter().find(|e| e.contains(&k["chat ".len()..])).cloned().unwrap_or_default()
                };
                match segment {
                    // Only the log is read: the index and `LOCK` do not matter.
                    None => assert_eq!(*r, Read::Exact, "{label}: {k} reads {r:?} read-only; {}", why()),
                    // A chat wholly before the damaged segment needs nothing in or after it.
                    Some(n) if b < n => {
                        assert_eq!(
                            *r,
                            Read::Exact,
                            "{label}: {k} (segments {a}-{b}) reads {r:?} read-only; {}",
                            why()
                        )
                    }
                    // A chat wholly after it reads whole, or fails for a blob it shares with
                    // what was stored there (content is stored once).
                    Some(n) if a > n => {
                        let e = why();
                        assert!(
                            *r == Read::Exact || (*r == Read::Failed && e.contains("not found: blob")),
                            "{label}: {k} (segments {a}-{b}) reads {r:?} read-only; {e}"
                        );
                        shared += u64::from(*r == Read::Failed);
                    }
                    Some(_) => {}
                }
            }
            // Read-only reads the log alone: the last segment deleted or cut, or its last batch
            // damaged, is a log that ends sooner (or a batch still being written), which it
            // cannot tell apart. Anything else not whole is reported.
            if got.values().any(|r| *r != Read::Exact) && segment != Some(f.last) {
                assert!(ro.warned > 0, "{label}: read-only, chats are not whole but open warned of nothing");
            }
            ro_silent += u64::from(ro.warned == 0 && got.values().any(|r| *r != Read::Exact));

            // The ordinary open.
            let rw = read(&dir, "read", &label);
            if rw.listed.is_none() {
                assert_ne!(
                    name, "LOCK",
                    "{label}: damage to LOCK keeps the store from opening: {:?}",
                    rw.errors
                );
                refused += 1;
                let why = rw.errors.first().cloned().unwrap_or_default();
                assert!(why.starts_with("open error"), "{label}: {why}");
            } else {
                let got = compare(&f.want, &rw, &label);
                let not_whole = got.values().any(|r| *r != Read::Exact) || rw.listed != Some(chats);
                assert!(
                    name != "LOCK" || !not_whole,
                    "{label}: damage to LOCK lost chats: {:?}",
                    rw.errors.first()
                );
                if not_whole {
                    let report = check(&dir, &label);
                    assert!(
                        rw.warned > 0 || report != "check ok",
                        "{label}: chats are not whole ({:?}) but the open warned of nothing and check is clean",
                        rw.errors.first()
                    );
                    reported += 1;
                } else {
                    whole += 1;
                }
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
    let [exact, prefix, failed, missing] = ro_counts;
    eprintln!(
        "damage sweep: {cases} damages to {} files; read-only: {exact} chat reads exact, {prefix} a prefix, \
         {failed} failed ({shared} of them chats after a damaged segment that share a blob stored in it), \
         {missing} missing; {ro_silent} damages to the last segment read-only did not report; open: {refused} refused, {whole} whole, {reported} not whole and reported; {} s",
        targets(&f.dir, f.last, all).len(),
        started.elapsed().as_secs()
    );
}

/// An index that passes redb's own checks but is not the log's (a row removed, as a stale or
/// foreign copy would be): reads do not see the damage, `check` must.
#[test]
fn check_reports_an_index_whose_pages_verify_but_whose_entries_differ_from_the_log_and_rebuild_repairs_it() {
    use redb::{ReadableDatabase, TableDefinition};
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options::default().durability(Durability::None);
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
