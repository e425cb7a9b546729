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

// The floors (docs/DESIGN.md, "Workspace layout"), bottom to top, each a folder; private:
// every public type is named once, at the root, below.
mod api;
mod base;
mod chat;
mod disk;
mod formats;
mod kernel;
mod model;
mod rules;

// Public modules that are a concept of their own.
pub use chat::recall;
pub use formats::import;
/// Fleet mode: the same API on PostgreSQL (feature `fleet`; docs/FLEET.md).
#[cfg(feature = "fleet")]
pub use kernel::fleet;
pub use rules::{approval, compaction, json};

// For fuzz targets, loom models, benches and the command line's simulator: not a stable API.
/// The lock-free snapshot cells, public for their loom models and benches only.
#[doc(hidden)]
pub use base::snapshot;
#[doc(hidden)]
pub use disk::log;

pub use api::{Chat, Store};
pub use base::blob::{Blob, BlobId, Compression, Verify};
pub use base::error::{Conflict, DisplayPath, Error, LintProblem, Result};
/// Fault injection for tests: see the module documentation. Only with the cargo feature
/// `fault-injection`; a normal build has no fault hooks at all.
#[cfg(feature = "fault-injection")]
pub use base::io::fault;
pub use chat::archive::ArchiveText;
pub use chat::checkpoint::{
    BuildStats, Checkpoint, CheckpointOptions, Extractive, FnSummarizer, SegmentInfo, Summarizer,
};
pub use chat::history::{OwnerStats, Snapshot};
pub use chat::search::{HitField, SearchHit, SearchScope};
pub use chat::worker::{HardLinePolicy, Measured, Outlook, Worker, WorkerOptions};
pub use disk::index::IndexAtOpen;
pub use kernel::options::{DEFAULT_MARKER, Durability, Options};
pub use kernel::store::{CheckProblem, CheckReport, GcReport, MAX_BLOB_LEN, Refreshed, StoreStats};
#[cfg(feature = "tiktoken")]
pub use model::estimate::Tiktoken;
pub use model::estimate::{Estimator, Heuristic};
pub use model::message::{
    ArchiveRef, Attempt, ChatId, ChatMeta, ChatPage, ChatSummary, IndexLine, MAX_OWNER_LEN, Message,
    MessageHeader, MetaField, NewMessage, Page, PageCursor, Part, Pin, Role, Step, StepStatus, StepTag,
    ToolContent, Unit,
};
pub use rules::budget::{Budget, Decision, Omitted, View, ViewMessage};

/// What the command line's replay simulator (`undertext_cli::replay::series`), the benches and
/// the fuzz targets use of the engine's insides: token estimates, previews, checkpoint
/// segments, the protected tail, the view's handle line, the worker's start
/// line, content-defined chunking and the record kinds. Not a stable API.
#[doc(hidden)]
pub mod internals {
    pub use crate::base::blob::chunk::{MAX_AVG, MIN_AVG, cut_points};
    pub use crate::chat::archive::{derived_of, preview_inline, preview_of};
    pub use crate::chat::checkpoint::segments;
    pub use crate::chat::view::handles::line_text;
    pub use crate::chat::worker::{due, start_line};
    pub use crate::disk::record::Kind;
    pub use crate::model::estimate::{RESULT_OVERHEAD, message_tokens, part_tokens};
    pub use crate::rules::budget::tail::{cut_at_or_before, protected_from};
}

/// The README's example is compiled and run as a doctest, so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The examples of docs/EXAMPLES.md, compiled and run like the README's.
#[cfg(doctest)]
#[doc = include_str!("../../docs/EXAMPLES.md")]
pub struct ExamplesDoctests;
