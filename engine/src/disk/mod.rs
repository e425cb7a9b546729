//! Floor 3, bytes on disk: the append-only [`log`] of checksummed batches, the [`record`]s
//! written into it, and the redb [`index`] derived from it (the only module that names redb).
//! `engine/FORMAT.md` specifies all three.
pub mod index;
pub mod log;
pub mod record;
