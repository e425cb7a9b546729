//! A store that cannot be written here (issue 34, point 11): on a read-only file system, or
//! (as a user other than root) a directory without write permission, the read commands
//! (`chats`, `show`, `view`, `search`, `stats`, `check`) fall back to the read-only open,
//! saying so once on stderr, and print what they print with `--read-only`; a write command
//! fails with an error that names `--read-only`.
//!
//! How the store is made unwritable: as root, a read-only bind mount of the store directory
//! (`mount --bind` then `remount,bind,ro`; root ignores permissions, so `chmod` would not do);
//! as another user, `chmod -R a-w`. Where neither is possible the test says so and passes
//! without checking (the sandbox this was written in runs as root and can mount).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{import, json, run, transcripts};

/// The store directory `src`, unwritable at the returned path; undone on drop.
struct Unwritable {
    at: PathBuf,
    mounted: bool,
}

impl Unwritable {
    fn make(src: &Path, mount_point: &Path) -> Option<Unwritable> {
        // SAFETY: getuid has no preconditions.
        let root = unsafe { libc::getuid() } == 0;
        if !root {
            let ok = Command::new("chmod").arg("-R").arg("a-w").arg(src).status().is_ok_and(|s| s.success());
            return ok.then(|| Unwritable { at: src.to_path_buf(), mounted: false });
        }
        std::fs::create_dir_all(mount_point).unwrap();
        let bind = Command::new("mount").arg("--bind").arg(src).arg(mount_point).status();
        if !bind.is_ok_and(|s| s.success()) {
            return None;
        }
        let ro = Command::new("mount").args(["-o", "remount,bind,ro"]).arg(mount_point).status();
        let u = Unwritable { at: mount_point.to_path_buf(), mounted: true };
        ro.is_ok_and(|s| s.success()).then_some(u)
    }
}

impl Drop for Unwritable {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.at).status();
        } else {
            let _ = Command::new("chmod").arg("-R").arg("u+w").arg(&self.at).status();
        }
    }
}

#[test]
fn read_commands_on_an_unwritable_store_read_it_read_only_and_writes_name_read_only() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("s");
    import(&src, &[transcripts().join("mini_swe_agent")]);
    let chats = json(&src, &["--read-only", "chats", "--json"]);
    let id = chats["chats"][0]["id"].as_str().unwrap().to_string();
    let shown = json(&src, &["--read-only", "show", "--json", &id]);
    let Some(ro) = Unwritable::make(&src, &tmp.path().join("ro")) else {
        eprintln!("skipped: neither a read-only bind mount nor chmod could make the store unwritable here");
        return;
    };
    let store = ro.at.clone();
    // Not writable, really: the engine's own open for writing fails.
    assert!(std::fs::write(store.join("probe"), b"x").is_err(), "the store is still writable");

    assert_eq!(json(&store, &["chats", "--json"]), chats);
    assert_eq!(json(&store, &["show", "--json", &id]), shown);
    for args in [
        vec!["chats"],
        vec!["show", &id],
        vec!["view", &id],
        vec!["search", "the"],
        vec!["stats"],
        vec!["check"],
    ] {
        let out = run(&store, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?} on an unwritable store failed: {err}");
        assert_eq!(
            err.matches("reading it read-only").count(),
            1,
            "{args:?}: expected one note on stderr about the read-only fallback, found: {err}"
        );
        assert!(!err.contains("LOCK"), "{args:?}: {err}");
    }
    // A write command cannot fall back: its error names --read-only.
    let del = run(&store, &["delete", &id]);
    assert!(!del.status.success(), "a delete on an unwritable store succeeded");
    let err = String::from_utf8_lossy(&del.stderr);
    assert!(err.contains("--read-only"), "the error of a write does not name --read-only: {err}");
    // The library's open names the read-only open.
    let Err(e) = undertext::Store::open(&store, undertext::Options::default()) else {
        panic!("an unwritable store opened for writing")
    };
    assert!(e.is_unwritable(), "{e:?}");
    assert!(e.to_string().contains("Store::open_read_only"), "{e}");
}
