//! Arbitrary bytes decoded as a log segment. The checks live in `src/segment_decode.rs`,
//! which `cargo test -p undertext-tests --test fuzz_corpus` replays on the checked-in corpus.
//!
//! `UNDERTEXT_FUZZ_TOLERATE=name[,name]` lets open findings (`KNOWN_OPEN` in that file)
//! pass, so that a run can look for other failures past them.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use undertext_fuzz::segment_decode::{KNOWN_OPEN, check_tolerating};

static TOLERATE: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let names = std::env::var("UNDERTEXT_FUZZ_TOLERATE").unwrap_or_default();
    let names: Vec<&'static str> = names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| match KNOWN_OPEN.iter().find(|k| **k == n) {
            Some(k) => *k,
            None => panic!("UNDERTEXT_FUZZ_TOLERATE: {n:?} is not one of {KNOWN_OPEN:?}"),
        })
        .collect();
    if !names.is_empty() {
        eprintln!("segment_decode: tolerating open findings {names:?}");
    }
    names
});

fuzz_target!(|data: &[u8]| check_tolerating(data, &TOLERATE));
