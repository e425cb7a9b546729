//! See `src/compaction_lint.rs` for the input layout and the checks, which
//! `cargo test -p undertext-tests --test fuzz_corpus_reliability` replays on the checked-in corpus.
#![no_main]

use libfuzzer_sys::fuzz_target;
use undertext_fuzz::compaction_lint::check;

fuzz_target!(|data: &[u8]| check(data));
