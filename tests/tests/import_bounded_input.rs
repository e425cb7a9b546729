//! Claims of issue 16, items 8 and 9 (bounded, hang-free input), through the library:
//! * a file is read only when it is a regular file no larger than the documented limit
//!   (`import::MAX_INPUT_BYTES`, the largest blob a record holds), checked before reading:
//!   `/dev/zero` and a FIFO are refused at once with what was expected and found, and a file
//!   over the limit is refused from its size, without being read;
//! * a folder walk visits each folder and file once (device, inode): `x -> .` terminates,
//!   `a/up -> ..` imports each file once, two links pointing at each other and a FIFO named
//!   `*.jsonl` are skipped with a problem line, and the walk never blocks.
//!
//! Each case runs on a thread with a deadline, so a hang fails the test instead of stalling
//! the suite.

#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use undertext::import::{self, Format, MAX_INPUT_BYTES};

/// Runs `f` on a thread and fails when it takes longer than 20 seconds.
fn within_deadline<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what}: still running after 20 s (a hang)"))
}

fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().unwrap().success();
    assert!(ok, "mkfifo {}", path.display());
}

const LINE: &str =
    "{\"type\":\"user\",\"sessionId\":\"s1\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n";

#[test]
fn dev_zero_is_refused_before_reading_saying_a_regular_file_was_expected() {
    let e =
        within_deadline("read /dev/zero", || import::read_bounded(Path::new("/dev/zero"), MAX_INPUT_BYTES));
    let e = e.unwrap_err().to_string();
    assert!(e.contains("/dev/zero: expected a regular file, found a character device"), "{e}");
    let e = within_deadline("parse /dev/zero", || import::parse_file(Path::new("/dev/zero"), Format::Auto));
    assert!(e.unwrap_err().to_string().contains("expected a regular file"));
}

#[test]
fn a_fifo_named_jsonl_does_not_block_it_is_refused_and_skipped_by_the_walk() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    std::fs::write(dir.join("a.jsonl"), LINE).unwrap();
    mkfifo(&dir.join("pipe.jsonl"));
    let (read, walk) = within_deadline("fifo", move || {
        (
            import::read_bounded(&dir.join("pipe.jsonl"), MAX_INPUT_BYTES),
            import::walk(std::slice::from_ref(&dir)).unwrap(),
        )
    });
    let e = read.unwrap_err().to_string();
    assert!(e.contains("pipe.jsonl: expected a regular file, found a FIFO"), "{e}");
    assert_eq!(walk.files, [tmp.path().join("a.jsonl")]);
    let [p] = &walk.problems[..] else { panic!("{:?}", walk.problems) };
    assert!(
        p.to_string().contains("pipe.jsonl: expected a regular file, found a FIFO (named pipe) (skipped)"),
        "{p}"
    );
}

#[test]
fn a_file_over_the_limit_is_refused_from_its_size_without_being_read() {
    let tmp = tempfile::tempdir().unwrap();
    let big = tmp.path().join("big.jsonl");
    // Sparse: the size says MAX_INPUT_BYTES + 1 while no block is written; reading it whole
    // would take a gigabyte of memory and seconds.
    std::fs::File::create(&big).unwrap().set_len(MAX_INPUT_BYTES + 1).unwrap();
    let started = std::time::Instant::now();
    let e = import::parse_file(&big, Format::Auto).unwrap_err().to_string();
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}: it was read", started.elapsed());
    assert!(
        e.contains(&format!(
            "expected a file of at most {MAX_INPUT_BYTES} bytes, found {} bytes (not read)",
            MAX_INPUT_BYTES + 1
        )),
        "{e}"
    );
    assert_eq!(MAX_INPUT_BYTES, undertext::MAX_BLOB_LEN as u64, "the documented limit");
    // Any limit is honoured the same way, at its exact edge.
    std::fs::write(&big, "[1,2]").unwrap();
    assert_eq!(import::read_bounded(&big, 5).unwrap(), b"[1,2]");
    assert!(import::read_bounded(&big, 4).unwrap_err().to_string().contains("at most 4 bytes, found 5"));
}

fn tree() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::write(root.join("top.jsonl"), LINE).unwrap();
    std::fs::write(root.join("a/one.jsonl"), LINE.replace("s1", "s2")).unwrap();
    std::fs::write(root.join("a/b/two.jsonl"), LINE.replace("s1", "s3")).unwrap();
    (tmp, root)
}

#[test]
fn a_link_to_its_own_folder_terminates_and_every_file_is_found_once() {
    let (_tmp, root) = tree();
    symlink(".", root.join("x")).unwrap();
    symlink(".", root.join("a/b/self")).unwrap();
    let r = root.clone();
    let w = within_deadline("walk with x -> .", move || import::walk(&[r]).unwrap());
    assert_eq!(w.files, [root.join("a/b/two.jsonl"), root.join("a/one.jsonl"), root.join("top.jsonl")]);
    assert_eq!(w.problems.len(), 2, "{:?}", w.problems);
    assert!(w.problems.iter().all(|p| p.reason.contains("a link to a folder already walked")));
}

#[test]
fn a_link_up_to_the_parent_imports_each_file_once() {
    let (tmp, root) = tree();
    symlink("..", root.join("a/up")).unwrap();
    symlink("../..", root.join("a/b/upup")).unwrap();
    let r = root.clone();
    let w = within_deadline("walk with a/up -> ..", move || import::walk(&[r]).unwrap());
    assert_eq!(w.files.len(), 3, "{:?}", w.files);
    // The same folder given twice, or through a link, is walked once too.
    std::fs::create_dir_all(tmp.path().join("links")).unwrap();
    symlink(&root, tmp.path().join("links/again")).unwrap();
    let paths = vec![root.clone(), root.join("a"), tmp.path().join("links")];
    let w = within_deadline("walk the same tree three ways", move || import::walk(&paths).unwrap());
    assert_eq!(w.files.len(), 3, "{:?}", w.files);
    let mut sessions = Vec::new();
    for f in &w.files {
        sessions.extend(import::parse_file(f, Format::Auto).unwrap().sessions);
    }
    let keys: std::collections::BTreeSet<&str> = sessions.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys.len(), 3);
}

#[test]
fn two_links_pointing_at_each_other_and_a_dangling_link_are_problems_not_an_abort() {
    let (_tmp, root) = tree();
    symlink("loop-b.jsonl", root.join("loop-a.jsonl")).unwrap();
    symlink("loop-a.jsonl", root.join("loop-b.jsonl")).unwrap();
    symlink("nowhere", root.join("gone.jsonl")).unwrap();
    let r = root.clone();
    let w = within_deadline("walk with a link loop", move || import::walk(&[r]).unwrap());
    assert_eq!(w.files.len(), 3, "the other files are still found");
    let mut named: Vec<String> =
        w.problems.iter().map(|p| p.file.file_name().unwrap().to_string_lossy().into_owned()).collect();
    named.sort();
    assert_eq!(named, ["gone.jsonl", "loop-a.jsonl", "loop-b.jsonl"]);
    for p in &w.problems {
        assert!(
            p.reason.contains("expected a file or folder, found a symbolic link that cannot be followed"),
            "{p}"
        );
    }
}
