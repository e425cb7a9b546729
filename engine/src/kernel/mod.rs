//! Floor 4, an open store: its [`options`], the [`store`] kernel (the log writer, the
//! indexer, the lock, transactions, blobs, gc, check, the read-only follower) and, with the
//! `fleet` feature, the same kernel on PostgreSQL ([`fleet`]).
#[cfg(feature = "fleet")]
pub mod fleet;
pub mod options;
pub mod store;
