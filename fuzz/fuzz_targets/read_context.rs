//! Arbitrary bytes as a text and ranges: `ArchiveText::read` against naive slicing in every
//! unit. The checks live in `src/read_context.rs`, which
//! `cargo test -p undertext-tests --test fuzz_corpus` replays on the checked-in corpus.
#![no_main]

use libfuzzer_sys::fuzz_target;
use undertext_fuzz::read_context::check;

fuzz_target!(|data: &[u8]| check(data));
