//! The record kinds of the log: the one place that names them (`engine/FORMAT.md`, "Record
//! kinds"). Everything that interprets records matches a [`Kind`], exhaustively where a new
//! kind needs a decision (the indexer, `gc`'s reference walk, `check`, fleet mode's catalog).

/// A record kind this build knows. The log stores it as the record header's kind byte.
///
/// Bytes below [`Kind::FIRST_OPTIONAL`] are *required*: a reader that does not know one refuses
/// the segment. Bytes from 128 up are *optional* and skipped by readers that do not know them
/// (this build knows one: [`Kind::AppendKey`]).
///
/// ```
/// use undertext::internals::Kind;
/// assert_eq!(Kind::of(17), Some(Kind::MessageCompact));
/// assert_eq!(Kind::MessageCompact.byte(), 17);
/// assert_eq!(Kind::of(99), None);
/// assert!(Kind::is_optional(200) && !Kind::is_optional(99));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Kind {
    /// A content-addressed blob: 32-byte BLAKE3 id, then the (possibly compressed) body.
    Blob = 1,
    /// A chat is created (`ChatRec`).
    Chat = 2,
    /// A chat's metadata (`MetaRec`).
    Meta = 3,
    /// A message version, rkyv `MsgRec` (read; written before the compact encoding).
    Message = 4,
    /// A revision: a truncation or an edit's bookkeeping (`RevRec`).
    Revision = 5,
    /// A step of a turn (`StepRec`).
    Step = 6,
    /// An archive grant with its sizes and offset index (`ArchiveRec`).
    Archive = 7,
    /// A pin or unpin of a range of a blob (`PinRec`).
    Pin = 8,
    /// A usage calibration of a chat and model (`UsageRec`).
    Usage = 9,
    /// A compaction plan applied to a chat (`CompactionRec`).
    Compaction = 10,
    /// A cached segment or merge summary (`SummaryRec`), in the global stream.
    Summary = 11,
    /// A published checkpoint (`CheckpointRec`).
    Checkpoint = 12,
    /// A chunked blob's manifest (see `blob::chunk::Manifest`).
    Manifest = 13,
    /// A chat is deleted (`DeleteRec`).
    Delete = 14,
    /// A blob grant to an owner (`GrantRec`).
    Grant = 15,
    /// Messages hidden from a revision on (`HideRec`).
    Hide = 16,
    /// A message version in the compact encoding (`record::compact`), written since issue 19.
    MessageCompact = 17,
    /// Erasure: a `HideRec` payload whose ranges `gc` erases; always in the batch of a
    /// [`Kind::Hide`] record of the same ranges (FORMAT.md, "Erased messages").
    Erase = 18,
    /// An append made with an idempotency key: the chat, the key and the seqs it took
    /// (`record::append_key`). Optional: an older build skips it.
    AppendKey = 128,
}

impl Kind {
    /// Every kind, in byte order.
    pub const ALL: [Kind; 19] = [
        Kind::Blob,
        Kind::Chat,
        Kind::Meta,
        Kind::Message,
        Kind::Revision,
        Kind::Step,
        Kind::Archive,
        Kind::Pin,
        Kind::Usage,
        Kind::Compaction,
        Kind::Summary,
        Kind::Checkpoint,
        Kind::Manifest,
        Kind::Delete,
        Kind::Grant,
        Kind::Hide,
        Kind::MessageCompact,
        Kind::Erase,
        Kind::AppendKey,
    ];

    /// The first optional kind byte.
    pub const FIRST_OPTIONAL: u8 = 128;

    /// The kind of a record header's byte, or `None` for a byte this build does not know.
    pub fn of(byte: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.byte() == byte)
    }

    /// The byte the log stores for this kind.
    pub fn byte(self) -> u8 {
        self as u8
    }

    /// Whether a kind byte is optional (a reader that does not know it skips the record).
    pub fn is_optional(byte: u8) -> bool {
        byte >= Kind::FIRST_OPTIONAL
    }

    /// Whether this kind is stored with the blobs (blob and manifest records), not history.
    pub fn is_blob(self) -> bool {
        matches!(self, Kind::Blob | Kind::Manifest)
    }

    /// Whether this kind is a message version (either encoding).
    pub fn is_message(self) -> bool {
        matches!(self, Kind::Message | Kind::MessageCompact)
    }
}

/// A record header's kind byte against a kind: `r.kind == Kind::Blob`.
impl PartialEq<Kind> for u8 {
    fn eq(&self, k: &Kind) -> bool {
        *self == k.byte()
    }
}

/// A kind as the `smallint` of fleet mode's `ut_records.kind` and `ut_blobs.kind`.
impl From<Kind> for i16 {
    fn from(k: Kind) -> i16 {
        i16::from(k.byte())
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.byte())
    }
}

#[cfg(test)]
mod tests {
    use super::Kind;

    #[test]
    fn every_kind_reads_back_from_its_byte_and_no_other_byte_is_known() {
        for k in Kind::ALL {
            assert_eq!(Kind::of(k.byte()), Some(k));
        }
        let known = (0..=255u8).filter(|&b| Kind::of(b).is_some()).count();
        assert_eq!(known, Kind::ALL.len());
        assert_eq!(Kind::of(0), None);
        let optional: Vec<Kind> = Kind::ALL.into_iter().filter(|k| Kind::is_optional(k.byte())).collect();
        assert_eq!(optional, [Kind::AppendKey]);
    }
}
