//! Fuzz-target bodies for Undertext's decoders, shared between the cargo-fuzz targets in
//! `fuzz_targets/` and the corpus replay in `tests/tests/fuzz_corpus.rs` (which includes
//! each file below with `#[path]`, so both run exactly the same checks). The files may use
//! only `std` and `undertext` (and `serde_json`, which `import` needs to state what a JSON
//! transcript holds): the tests crate compiles them too.

pub mod approval;
pub mod compaction_lint;
pub mod import;
pub mod op_sequence;
pub mod read_context;
pub mod segment_decode;
