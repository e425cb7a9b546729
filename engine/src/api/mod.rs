//! Floor 7, the public API: [`Store`] and [`Chat`], each one `impl` block of short
//! delegates to the layer that owns the work — `store` (the kernel: blobs, sync, check, gc,
//! read-only opens), `archive`, `history`, `checkpoint`, `worker` and `view`. The lower
//! layers take the parts they need (the kernel's `Core`, the archive cache, a chat's state,
//! the worker slot), never a `Store`.

mod chat;
mod store;

pub use chat::Chat;
pub use store::Store;
