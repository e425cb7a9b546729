//! The checked-in header `include/undertext.h` is what cbindgen generates from the crate
//! now: the suite fails when a change to the ABI did not regenerate it.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::path::Path;

#[test]
fn checked_in_header_matches_the_crate() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen could not parse the crate")
        .write(&mut generated);
    let generated = String::from_utf8(generated).unwrap();
    let path = dir.join("include/undertext.h");
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if current != generated {
        if std::env::var_os("UNDERTEXT_BLESS").is_some() {
            std::fs::write(&path, &generated).unwrap();
            return;
        }
        let line = current
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| current.lines().count().min(generated.lines().count()))
            + 1;
        panic!(
            "ffi/include/undertext.h is stale (first difference at line {line}); regenerate it with \
             UNDERTEXT_BLESS=1 cargo test -p undertext-ffi --test header"
        );
    }
}
