//! Floor 8, other harnesses' formats: the transcript [`import`]ers, written through the
//! public API like any caller's.
pub mod import;
