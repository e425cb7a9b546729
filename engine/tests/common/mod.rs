//! What every CLI test file needs: the built `undertext` binary, run on a store.

#![allow(dead_code, reason = "each test file uses the part it needs")]

use std::path::Path;
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

/// Runs a `--json` command, which must succeed, and parses what it printed.
pub fn json(store: &Path, args: &[&str]) -> Value {
    let o = run(store, args);
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e})"))
}
