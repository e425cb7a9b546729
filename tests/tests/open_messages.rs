//! Claims (issue 16, "Smaller"): `Locked` says who holds the store — another handle of this
//! process, a process that has not written its pid yet, or another process by pid; a damaged
//! segment header is reported in words (expected and found), not as a Rust debug value; a store
//! path that names a file is refused as not a directory (issue 37).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext::{ChatMeta, Durability, Error, NewMessage, Options, Store};

fn opts() -> Options {
    Options::default().durability(Durability::None)
}

#[test]
fn a_second_handle_in_the_same_process_is_told_so() {
    let dir = tempfile::tempdir().unwrap();
    let _first = Store::open(dir.path(), opts()).unwrap();
    let e = Store::open(dir.path(), opts()).expect_err("a second handle opened");
    assert!(matches!(e, Error::Locked { pid } if pid == std::process::id()), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("already open in this process") && !msg.contains("another process"), "{msg}");
}

#[test]
fn a_holder_that_has_not_written_its_pid_is_not_called_pid_0() {
    let dir = tempfile::tempdir().unwrap();
    Store::open(dir.path(), opts()).unwrap().close().unwrap();
    // Another opener at the moment it holds the lock but has not written its pid: an
    // empty, locked LOCK (held here through a descriptor of our own).
    let lock = std::fs::OpenOptions::new().read(true).write(true).open(dir.path().join("LOCK")).unwrap();
    lock.set_len(0).unwrap();
    lock.lock().unwrap();
    let e = Store::open(dir.path(), opts()).expect_err("opened while locked");
    assert!(matches!(e, Error::Locked { pid: 0 }), "{e:?}");
    let msg = e.to_string();
    assert!(!msg.contains("pid 0") && msg.contains("has not recorded its pid"), "{msg}");
}

#[test]
fn a_damaged_segment_header_is_reported_in_words() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), opts()).unwrap();
        let id = store.create_chat("o", ChatMeta::default()).unwrap();
        store.chat("o", id).unwrap().append(NewMessage::user("hello")).unwrap();
        store.close().unwrap();
    }
    let seg = dir.path().join("log/00000001.seg");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[20] ^= 0x01; // inside the header, covered by its checksum
    std::fs::write(&seg, &bytes).unwrap();
    let e = Store::open(dir.path(), opts()).expect_err("a damaged header was accepted");
    let msg = e.to_string();
    assert!(matches!(e, Error::Corrupt { segment: 1, offset: 0, .. }), "{e:?}");
    assert!(msg.contains("segment header checksum: expected 0x"), "{msg}");
    assert!(!msg.contains("Bad(") && !msg.contains('"'), "a debug format in {msg}");
}

#[test]
fn a_store_path_that_is_a_file_is_refused_as_not_a_directory_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, b"my notes").unwrap();
    for e in [Store::open(&file, opts()).unwrap_err(), Store::open_read_only(&file).unwrap_err()] {
        let msg = e.to_string();
        assert!(
            matches!(&e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotADirectory),
            "{e:?}"
        );
        assert!(msg.contains("expected a directory") && msg.contains("found a file"), "{msg}");
        assert!(!msg.contains("os error"), "the OS's words instead of ours: {msg}");
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"my notes", "the file was changed");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "something was created beside it");
}
