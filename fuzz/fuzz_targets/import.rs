//! See `src/import.rs` for the input layout and the checks, which
//! `cargo test -p undertext-tests --test fuzz_corpus_import` replays on the checked-in corpus.
#![no_main]

use libfuzzer_sys::fuzz_target;
use undertext_fuzz::import::check;

fuzz_target!(|data: &[u8]| check(data));
