//! What every CLI test file needs: the built `undertext` binary, run on a store.

#![allow(dead_code, reason = "each test file uses the part it needs")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Runs `undertext --store STORE ARGS…` and returns what it printed and how it ended.
pub fn run(store: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_undertext"))
        .arg("--store")
        .arg(store)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running undertext {args:?}: {e}"))
}

/// [`run`] with environment variables set.
pub fn run_env(store: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_undertext"))
        .arg("--store")
        .arg(store)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("running undertext {args:?}: {e}"))
}

/// Runs a `--json` command, which must succeed, and parses what it printed.
pub fn json(store: &Path, args: &[&str]) -> Value {
    let o = run(store, args);
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e})"))
}

/// The shared transcripts (`shared/data/transcripts`).
pub fn transcripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/transcripts")
}

/// Imports `paths` (files or directories of transcripts) into the store with
/// `undertext import … --json`, which must succeed; returns its report.
pub fn import(store: &Path, paths: &[PathBuf]) -> Value {
    let mut args = vec!["import".to_string()];
    args.extend(paths.iter().map(|p| p.display().to_string()));
    args.push("--json".into());
    json(store, &args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Every file under `dir` (path relative to `dir` -> bytes): compare two to show a command
/// wrote nothing.
pub fn store_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.strip_prefix(dir).unwrap().display().to_string(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// A store kept under `tests/fixtures/NAME`, written by an older build, with what that
/// build's `show --json CHATS…` printed beside it (`NAME.show.json`).
pub struct FixtureStore {
    /// The directory's name under `tests/fixtures`.
    pub name: &'static str,
    /// The chats `show --json` printed.
    pub chats: &'static [&'static str],
}

impl FixtureStore {
    fn dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
    }

    /// A copy of the store in `tmp` (an open writes: the lock file, preallocation).
    pub fn copy_to(&self, tmp: &Path) -> PathBuf {
        let to = tmp.join("s");
        std::fs::create_dir_all(to.join("log")).unwrap();
        let from = Self::dir().join(self.name);
        std::fs::copy(from.join("index.redb"), to.join("index.redb")).unwrap();
        for e in std::fs::read_dir(from.join("log")).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, to.join("log").join(p.file_name().unwrap())).unwrap();
        }
        to
    }

    /// What `undertext EXTRA… show --json CHATS…` prints on `store` now.
    pub fn show(&self, store: &Path, extra: &[&str]) -> Vec<u8> {
        let mut args = extra.to_vec();
        args.extend(["show", "--json"]);
        args.extend(self.chats);
        let o = run(store, &args);
        assert!(o.status.success(), "show: {}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    }

    /// What the build that wrote the store printed.
    pub fn expected_show(&self) -> Vec<u8> {
        std::fs::read(Self::dir().join(format!("{}.show.json", self.name))).unwrap()
    }

    /// How many blob records and compact message records (kind 17) of `store`'s log are
    /// written with `codec` (FORMAT.md "Compression").
    pub fn records_of_codec(store: &Path, codec: u8) -> (usize, usize) {
        use undertext::log::format;
        let (mut blobs, mut messages) = (0, 0);
        for e in std::fs::read_dir(store.join("log")).unwrap() {
            let seg = std::fs::read(e.unwrap().path()).unwrap();
            let mut at = format::SEGMENT_HEADER_LEN;
            while let Ok(b) = format::decode_batch(&seg, at) {
                for r in &b.records {
                    // A blob's codec is in its record header; a compact message record's is
                    // the second byte of its payload (after the encoding version).
                    blobs += usize::from(r.kind == 1 && r.codec == codec);
                    messages += usize::from(r.kind == 17 && r.payload.get(1) == Some(&codec));
                }
                at = b.end as usize;
            }
        }
        (blobs, messages)
    }

    /// Asserts that `check` finds the store clean, and that after `check --rebuild` (the
    /// index built again from the log alone) `show --json` still prints what the writing
    /// build printed.
    pub fn assert_checks_and_rebuilds_as_written(&self, store: &Path) {
        let check = run(store, &["check"]);
        assert!(check.status.success(), "check: {}", String::from_utf8_lossy(&check.stdout));
        let rebuilt = run(store, &["check", "--rebuild"]);
        assert!(rebuilt.status.success(), "check --rebuild: {}", String::from_utf8_lossy(&rebuilt.stderr));
        assert!(
            self.show(store, &[]) == self.expected_show(),
            "show --json differs after the index was rebuilt from the log"
        );
    }
}
