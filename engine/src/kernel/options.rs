//! Options for [`Store::open`](crate::Store::open).

use std::time::Duration;

use crate::base::blob::{Compression, Verify};

pub use crate::disk::log::Durability;

/// The default marker. Placeholders: `{id}`, `{total_chars}`, `{total_lines}`, `{shown}`,
/// `{omitted}`.
pub const DEFAULT_MARKER: &str = "[preview, incomplete: archive {id} holds {total_chars} chars in {total_lines} lines; \
shown: chars {shown}; {omitted} chars left out; read more with read_context(\"{id}\", start..end)]";

/// Settings of an open store. `Options::default()` is the right choice for most harnesses.
///
/// ```
/// use undertext::{Options, Durability};
/// let opts = Options::default().durability(Durability::Immediate);
/// assert_eq!(opts.segment_size, 64 << 20);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// Durability of every commit. Default [`Durability::Group`].
    pub durability: Durability,
    /// Compression of blob bodies. Default `Compression::Zstd(1)` (see `engine/FORMAT.md`).
    pub compression: Compression,
    /// The largest segment. Segments grow: the first is sealed once it holds 1 MiB, each
    /// next one holds twice the one before, up to this size (a single larger batch gets a
    /// segment of its own). Default 64 MiB; at least 4 KiB.
    pub segment_size: u64,
    /// Create segments at full size, filled with zeros, so that a commit's `fdatasync`
    /// flushes data only (it is about 1.8× faster than after an append, which must also
    /// commit the file's new size). Because segments grow from 1 MiB, the zeros ahead of the
    /// data are at most about as many bytes as the data (1 MiB for a new store), plus the
    /// next segment, prepared in the background once the first is sealed. Default `true`.
    pub preallocate: bool,
    /// What reads check by default. Default [`Verify::Hash`].
    pub verify: Verify,
    /// How often the background indexer moves new log records into the index (without fsync).
    /// Default 20 ms.
    pub index_flush_interval: Duration,
    /// How often the background search indexer catches up the chats that moved, once the
    /// store has served its first [`Store::search`](crate::Store::search); `None`: no
    /// background indexing (each search catches up the chats it covers itself). A read-only
    /// store never indexes in the background. Default 1 s.
    pub search_index_interval: Option<Duration>,
    /// How often the index is made durable (one `fsync` of the index, off the write path).
    /// Reopen after a crash replays at most this much of the log. Default 1 s. A bulk writer
    /// also makes it durable every 8,192 records, so that redb can reuse the pages its
    /// commits replace (the index file of a long import stays near its live size).
    pub index_durable_interval: Duration,
    /// The index is also made durable once this many log bytes were written since the last
    /// durable index commit. Default 64 MiB.
    pub index_durable_bytes: u64,
    /// Create the store if the directory does not hold one. Default `true`.
    pub create_if_missing: bool,
    /// Chats kept in memory; idle chats beyond this leave memory and are reloaded from the
    /// index when opened again. Default 128.
    pub chat_cache_capacity: usize,
    /// When index entries waiting in memory exceed this, the writer that pushed them over
    /// moves them into redb itself before returning (back-pressure). Default 16 MiB.
    pub index_backlog_bytes: usize,
    /// Sealed segments kept memory-mapped at once (least recently used are unmapped), which
    /// bounds the file pages counted in the process's resident memory. Default 4.
    pub max_mapped_segments: usize,
    /// Tool results longer than this many bytes are archived when appended; the message
    /// keeps a preview and the archive reference. Default 8 KiB.
    pub archive_threshold: usize,
    /// Size of the preview that replaces an archived tool result, in characters. Default 2,000;
    /// at least 128 (a text that short is sent whole, and the index lists only longer ones).
    pub preview_chars: usize,
    /// The marker a preview carries (placeholders `{id}`, `{total_chars}`, `{total_lines}`,
    /// `{shown}`, `{omitted}`). Default [`DEFAULT_MARKER`].
    pub preview_marker: String,
    /// Token estimator for views and compaction. Default [`Heuristic`](crate::model::estimate::Heuristic).
    pub estimator: std::sync::Arc<dyn crate::model::estimate::Estimator>,
    /// Size of the previews the budget guard puts in place of older tool results, in
    /// characters. Default 400; at least 128, as [`Options::preview_chars`].
    pub guard_preview_chars: usize,
    /// A squish may cover at most this many tokens, unless it is one call with its results.
    /// Default 20,000.
    pub squish_max_tokens: u64,
    /// Memory redb may use to cache index pages. Default 32 MiB.
    pub index_cache_bytes: usize,
    /// Whether opening the store verifies every page of the index against redb's checksums
    /// (`Database::check_integrity`), so that no read believes a damaged page (a flipped bit
    /// in a chat's length or a message's location) and a damaged index is reported at open.
    /// Default `true`. It costs time linear in the index (about 1 ms per MB: 61-92 ms for
    /// the 71 MB index of 100,000 chats; benches/README.md, open), paid only when the index's
    /// seal does not hold: an index this store verified, then closed cleanly, and that nothing
    /// has written since is trusted unread (engine/FORMAT.md, "The index's seal";
    /// [`StoreStats::index_at_open`](crate::StoreStats::index_at_open) says which). With
    /// `false` an open is linear in nothing but the log's unindexed tail, and index damage is
    /// found by [`Store::check`](crate::Store::check) instead (redb still verifies a file it repairs
    /// after a crash); a read of a damaged page may then return an `Error::Index` or wrong
    /// header fields (role, turn, time) until the index is rebuilt. Message content is
    /// checked against its record either way.
    pub verify_index_on_open: bool,
    /// Message bodies whose parts total at most this many bytes are stored inside the
    /// message record, read in place; larger ones become blobs of their own (compressed,
    /// deduplicated). Default 8 KiB, the archiving threshold: a 2 KB message read from its
    /// own record costs a fraction of a blob lookup, decompression and hash check
    /// (benches/README.md, cold load).
    pub inline_body_max: usize,
    /// Blobs larger than this are split by content-defined chunking (FastCDC) into chunk
    /// blobs plus a manifest, so a value that shares most of its bytes with stored values
    /// costs only its new chunks. The blob's id stays the BLAKE3 of its whole content.
    /// Default 64 KiB; `usize::MAX` turns chunking off.
    pub chunk_threshold: usize,
    /// Average chunk size of content-defined chunking; chunks are between a quarter and
    /// four times this. Default 16 KiB; between 256 bytes and 4 MiB.
    pub chunk_avg: u32,
    /// Bytes of decompressed chunks of chunked blobs kept in memory, so that reading the
    /// next version of a growing value reads only its new chunks from the log (0: none).
    /// Default 16 MiB.
    pub chunk_cache_bytes: usize,
    /// Fleet mode's `gc` (`Store::gc` on a `postgres://` URL) deletes an unreferenced blob
    /// only when it was stored (or last re-referenced) longer ago than this, so a blob
    /// uploaded for a write that has not committed yet is never collected. Default 1 hour;
    /// the embedded `gc` ignores it (it runs with the store closed).
    pub gc_grace: Duration,
    /// Keep what is derived from an unchanged message between views and checkpoint jobs:
    /// its token estimate, the guard's previews of its tool results with their token counts,
    /// and its scan for pending approvals (each kept with the message's history entry; an
    /// edit makes a new entry). Default on; off makes every view and job derive them again, which gives the
    /// same views and checkpoints more slowly (the reference the tests compare with).
    pub keep_derived: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Group,
            compression: Compression::default(),
            segment_size: 64 << 20,
            preallocate: true,
            verify: Verify::Hash,
            index_flush_interval: Duration::from_millis(20),
            search_index_interval: Some(Duration::from_secs(1)),
            index_durable_interval: Duration::from_secs(1),
            index_durable_bytes: 64 << 20,
            create_if_missing: true,
            chat_cache_capacity: 128,
            index_cache_bytes: 32 << 20,
            verify_index_on_open: true,
            max_mapped_segments: 4,
            archive_threshold: 8 << 10,
            estimator: std::sync::Arc::new(crate::model::estimate::Heuristic),
            guard_preview_chars: 400,
            squish_max_tokens: 20_000,
            preview_chars: 2000,
            preview_marker: DEFAULT_MARKER.to_string(),
            index_backlog_bytes: 16 << 20,
            inline_body_max: 8 << 10,
            chunk_threshold: 64 << 10,
            chunk_avg: 16 << 10,
            chunk_cache_bytes: 16 << 20,
            gc_grace: Duration::from_secs(3600),
            keep_derived: true,
        }
    }
}

/// Builder methods: each sets one field and returns the options, so settings read as one
/// expression (`Options` is `#[non_exhaustive]`: new settings may be added in any release).
///
/// ```
/// use std::time::Duration;
/// use undertext::{Durability, Options};
/// let opts = Options::default().durability(Durability::Immediate).index_durable_interval(Duration::from_millis(250));
/// assert_eq!(opts.durability, Durability::Immediate);
/// assert_eq!(opts.segment_size, 64 << 20); // the rest keep their defaults
/// ```
impl Options {
    /// `InvalidArgument` for a preview size under 128 characters: the index lists only texts
    /// longer than that for `read_context` by address, so a shorter preview could name a text
    /// it cannot find.
    pub(crate) fn check_previews(&self) -> crate::Result<()> {
        let min = crate::disk::record::LISTED_MIN_CHARS;
        for (name, v) in
            [("preview_chars", self.preview_chars), ("guard_preview_chars", self.guard_preview_chars)]
        {
            if v < min {
                return Err(crate::Error::InvalidArgument(format!(
                    "{name}: expected at least {min} characters (a text that short is sent whole), found {v}"
                )));
            }
        }
        Ok(())
    }

    /// Sets [`Options::durability`].
    pub fn durability(mut self, value: Durability) -> Options {
        self.durability = value;
        self
    }

    /// Sets [`Options::gc_grace`].
    pub fn gc_grace(mut self, value: Duration) -> Options {
        self.gc_grace = value;
        self
    }

    /// Sets [`Options::compression`].
    pub fn compression(mut self, value: Compression) -> Options {
        self.compression = value;
        self
    }

    /// Sets [`Options::segment_size`].
    pub fn segment_size(mut self, value: u64) -> Options {
        self.segment_size = value;
        self
    }

    /// Sets [`Options::preallocate`].
    pub fn preallocate(mut self, value: bool) -> Options {
        self.preallocate = value;
        self
    }

    /// Sets [`Options::verify`].
    pub fn verify(mut self, value: Verify) -> Options {
        self.verify = value;
        self
    }

    /// Sets [`Options::search_index_interval`].
    pub fn search_index_interval(mut self, value: Option<Duration>) -> Options {
        self.search_index_interval = value;
        self
    }

    /// Sets [`Options::index_flush_interval`].
    pub fn index_flush_interval(mut self, value: Duration) -> Options {
        self.index_flush_interval = value;
        self
    }

    /// Sets [`Options::index_durable_interval`].
    pub fn index_durable_interval(mut self, value: Duration) -> Options {
        self.index_durable_interval = value;
        self
    }

    /// Sets [`Options::index_durable_bytes`].
    pub fn index_durable_bytes(mut self, value: u64) -> Options {
        self.index_durable_bytes = value;
        self
    }

    /// Sets [`Options::create_if_missing`].
    pub fn create_if_missing(mut self, value: bool) -> Options {
        self.create_if_missing = value;
        self
    }

    /// Sets [`Options::chat_cache_capacity`].
    pub fn chat_cache_capacity(mut self, value: usize) -> Options {
        self.chat_cache_capacity = value;
        self
    }

    /// Sets [`Options::index_backlog_bytes`].
    pub fn index_backlog_bytes(mut self, value: usize) -> Options {
        self.index_backlog_bytes = value;
        self
    }

    /// Sets [`Options::max_mapped_segments`].
    pub fn max_mapped_segments(mut self, value: usize) -> Options {
        self.max_mapped_segments = value;
        self
    }

    /// Sets [`Options::archive_threshold`].
    pub fn archive_threshold(mut self, value: usize) -> Options {
        self.archive_threshold = value;
        self
    }

    /// Sets [`Options::preview_chars`].
    pub fn preview_chars(mut self, value: usize) -> Options {
        self.preview_chars = value;
        self
    }

    /// Sets [`Options::preview_marker`].
    pub fn preview_marker(mut self, value: impl Into<String>) -> Options {
        self.preview_marker = value.into();
        self
    }

    /// Sets [`Options::estimator`].
    pub fn estimator(mut self, value: std::sync::Arc<dyn crate::model::estimate::Estimator>) -> Options {
        self.estimator = value;
        self
    }

    /// Sets [`Options::guard_preview_chars`].
    pub fn guard_preview_chars(mut self, value: usize) -> Options {
        self.guard_preview_chars = value;
        self
    }

    /// Sets [`Options::squish_max_tokens`].
    pub fn squish_max_tokens(mut self, value: u64) -> Options {
        self.squish_max_tokens = value;
        self
    }

    /// Sets [`Options::index_cache_bytes`].
    pub fn index_cache_bytes(mut self, value: usize) -> Options {
        self.index_cache_bytes = value;
        self
    }

    /// Sets [`Options::verify_index_on_open`].
    ///
    /// ```
    /// let opts = undertext::Options::default().verify_index_on_open(false);
    /// assert!(!opts.verify_index_on_open);
    /// ```
    pub fn verify_index_on_open(mut self, value: bool) -> Options {
        self.verify_index_on_open = value;
        self
    }

    /// Sets [`Options::inline_body_max`].
    pub fn inline_body_max(mut self, value: usize) -> Options {
        self.inline_body_max = value;
        self
    }

    /// Sets [`Options::chunk_threshold`].
    pub fn chunk_threshold(mut self, value: usize) -> Options {
        self.chunk_threshold = value;
        self
    }

    /// Sets [`Options::chunk_avg`].
    pub fn chunk_avg(mut self, value: u32) -> Options {
        self.chunk_avg = value;
        self
    }

    /// Sets [`Options::chunk_cache_bytes`].
    pub fn chunk_cache_bytes(mut self, value: usize) -> Options {
        self.chunk_cache_bytes = value;
        self
    }

    /// Sets [`Options::keep_derived`].
    pub fn keep_derived(mut self, value: bool) -> Options {
        self.keep_derived = value;
        self
    }
}
