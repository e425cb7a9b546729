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

// The floors (docs/DESIGN.md), private: every public type is named once, at the root, below.
mod api;
mod archive;
mod blob;
mod budget;
mod checkpoint;
mod error;
mod estimate;
mod history;
mod index;
mod io;
mod model;
mod options;
mod record;
mod search;
mod store;
mod view;
mod worker;

// Public modules that are a concept of their own.
pub mod approval;
pub mod compaction;
/// Fleet mode: the same API on PostgreSQL (feature `fleet`; docs/FLEET.md).
#[cfg(feature = "fleet")]
pub mod fleet;
pub mod import;
pub mod json;
pub mod recall;

// For fuzz targets, loom models, benches and the command line's simulator: not a stable API.
#[doc(hidden)]
pub mod log;
/// The lock-free snapshot cells, public for their loom models and benches only.
#[doc(hidden)]
pub mod snapshot;

pub use api::{Chat, Store};
pub use archive::ArchiveText;
pub use blob::{Blob, BlobId, Compression, Verify};
pub use budget::{Budget, Decision, Omitted, View, ViewMessage};
pub use checkpoint::{
    BuildStats, Checkpoint, CheckpointOptions, Extractive, FnSummarizer, SegmentInfo, Summarizer,
};
pub use error::{Conflict, DisplayPath, Error, LintProblem, Result};
#[cfg(feature = "tiktoken")]
pub use estimate::Tiktoken;
pub use estimate::{Estimator, Heuristic};
pub use history::{OwnerStats, Snapshot};
/// Fault injection for tests: see the module documentation. Only with the cargo feature
/// `fault-injection`; a normal build has no fault hooks at all.
#[cfg(feature = "fault-injection")]
pub use io::fault;
pub use model::{
    ArchiveRef, Attempt, ChatId, ChatMeta, ChatPage, ChatSummary, IndexLine, MAX_OWNER_LEN, Message,
    MessageHeader, MetaField, NewMessage, Page, PageCursor, Part, Pin, Role, Step, StepStatus, StepTag,
    ToolContent, Unit,
};
pub use options::{DEFAULT_MARKER, Durability, Options};
pub use search::{HitField, SearchHit, SearchScope};
pub use store::{CheckProblem, CheckReport, GcReport, MAX_BLOB_LEN, Refreshed, StoreStats};
pub use worker::{HardLinePolicy, Measured, Outlook, Worker, WorkerOptions};

/// What the command line's replay simulator (`undertext_cli::replay::series`), the benches and
/// the fuzz targets use of the engine's insides: token estimates, previews, checkpoint
/// segments, the protected tail, the view's handle line, the worker's start
/// line, content-defined chunking and the record kinds. Not a stable API.
#[doc(hidden)]
pub mod internals {
    pub use crate::archive::{derived_of, preview_inline, preview_of};
    pub use crate::blob::chunk::{MAX_AVG, MIN_AVG, cut_points};
    pub use crate::budget::tail::{cut_at_or_before, protected_from};
    pub use crate::checkpoint::segments;
    pub use crate::estimate::{RESULT_OVERHEAD, message_tokens, part_tokens};
    pub use crate::record::Kind;
    pub use crate::view::handles::line_text;
    pub use crate::worker::{due, start_line};
}

/// The README's example is compiled and run as a doctest, so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The examples of docs/EXAMPLES.md, compiled and run like the README's.
#[cfg(doctest)]
#[doc = include_str!("../../docs/EXAMPLES.md")]
pub struct ExamplesDoctests;
