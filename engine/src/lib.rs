//! Undertext: embedded, crash-safe storage for the conversation state of LLM agent harnesses.
//!
//! Everything is kept as content-addressed blobs in an append-only, checksummed log
//! ([`log`]); a redb index derived from the log finds them again. See `docs/DESIGN.md` for the
//! picture and `engine/FORMAT.md` for the bytes on disk.
//!
//! The modules stand in floors, each importing only from the floors below it (docs/DESIGN.md,
//! "Workspace layout"; `scripts/check-layers` enforces it): the kernel (`store`) under
//! archives, history, checkpoints, the worker and the model view; on top, [`Store`] and
//! [`Chat`], whose methods delegate to the layer that does the work.
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap();
//! use undertext::{Store, Options, Durability};
//! let store = Store::open(dir.path(), Options::default().durability(Durability::Group))?;
//! let id = store.put_blob("o", "a tool result".as_bytes())?;
//! assert_eq!(&*store.get_blob("o", &id)?, b"a tool result");
//! # Ok::<(), undertext::Error>(())
//! ```

mod api;
pub mod approval;
pub mod archive;
pub mod blob;
pub mod budget;
pub mod checkpoint;
pub mod compaction;
pub mod error;
pub mod estimate;
/// Fleet mode: the same API on PostgreSQL (feature `fleet`; docs/FLEET.md).
#[cfg(feature = "fleet")]
pub mod fleet;
pub mod history;
pub mod import;
mod index;
mod io;
pub mod json;
pub mod log;
pub mod model;
pub mod options;
pub mod recall;
pub(crate) mod record;
pub mod search;
/// The lock-free snapshot cells, public for their loom models and benches only.
#[doc(hidden)]
pub mod snapshot;
mod store;
mod view;
pub mod worker;

pub use api::{Chat, Store};
pub use archive::Unit;
pub use blob::{Blob, BlobId, Compression, Verify};
pub use error::{Error, Result};
pub use history::{
    ArchiveRef, Attempt, ChatId, ChatMeta, ChatPage, ChatSummary, Message, MessageHeader, MetaField,
    NewMessage, OwnerStats, Page, PageCursor, Part, Pin, Role, Snapshot, Step, StepStatus, StepTag,
    ToolContent,
};
/// Fault injection for tests: see the module documentation. Only with the cargo feature
/// `fault-injection`; a normal build has no fault hooks at all.
#[cfg(feature = "fault-injection")]
pub use io::fault;
pub use options::{Durability, Options};
/// The log's record kinds, for the fuzz targets and corpus tests that craft segments.
#[doc(hidden)]
pub use record::Kind as RecordKind;
pub use search::{HitField, SearchHit, SearchScope};
pub use store::{CheckProblem, CheckReport, GcReport, MAX_BLOB_LEN, Refreshed, StoreStats};

/// What the command line's replay simulator (`undertext_cli::replay::series`) computes exactly
/// as the engine does: token estimates, previews, checkpoint segments, the protected tail,
/// pending approvals and the view's handle line. Not a stable API.
#[doc(hidden)]
pub mod sim {
    pub use crate::approval::first_pending_by;
    pub use crate::archive::{derived_of, preview_inline, preview_of};
    pub use crate::budget::tail::{cut_at_or_before, protected_from};
    pub use crate::checkpoint::segments;
    pub use crate::estimate::{RESULT_OVERHEAD, message_tokens, part_tokens};
    pub use crate::view::handles::line_text;
}

/// The README's example is compiled and run as a doctest, so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The examples of docs/EXAMPLES.md, compiled and run like the README's.
#[cfg(doctest)]
#[doc = include_str!("../../docs/EXAMPLES.md")]
pub struct ExamplesDoctests;
