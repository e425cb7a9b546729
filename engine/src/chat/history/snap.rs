//! [`Snapshot`]: an immutable view of a chat at one moment.

use std::collections::HashMap;
use std::ops::Range;

use super::state::{SnapInner, read_message};
use crate::base::error::{Error, Result};
use crate::model::message::{ChatId, ChatMeta, Message, MessageHeader, Pin};

/// An immutable state of a chat: revision, length, messages and metadata. Taking one costs
/// a few atomic operations and no lock; it stays valid and unchanged while writers go on.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use undertext::{ChatMeta, NewMessage, Store};
/// let store = Store::open(dir.path(), Default::default())?;
/// let chat = store.chat("alice", store.create_chat("alice", ChatMeta::default())?)?;
/// chat.append(NewMessage::user("hi"))?;
/// let snap = chat.snapshot();
/// chat.append(NewMessage::assistant("hello"))?;
/// assert_eq!(snap.len(), 1); // the snapshot does not move
/// assert_eq!(chat.snapshot().len(), 2);
/// # Ok::<(), undertext::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub(crate) inner: crate::base::snapshot::SnapArc<SnapInner>,
}

impl Snapshot {
    /// The chat.
    pub fn chat_id(&self) -> ChatId {
        self.inner.chat
    }

    /// The chat's revision in this snapshot.
    pub fn revision(&self) -> u64 {
        self.inner.revision
    }

    /// Number of messages.
    pub fn len(&self) -> u64 {
        self.inner.len
    }

    /// True when the chat has no message.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The chat's metadata.
    pub fn meta(&self) -> &ChatMeta {
        &self.inner.meta
    }

    /// Version of the metadata (1 at creation, +1 per change).
    pub fn meta_version(&self) -> u64 {
        self.inner.meta_version
    }

    /// How many of the chat's message entries (what a header is read from) this snapshot
    /// holds in memory: written in this process, or loaded from the index a page at a time.
    /// For tests of bounded memory: a chat being written keeps a bounded number of them
    /// however long it grows.
    #[doc(hidden)]
    pub fn resident_entries(&self) -> usize {
        self.inner.entries.resident()
    }

    /// Pages pinned into the model view, in the order they were pinned.
    pub fn pins(&self) -> &[Pin] {
        &self.inner.pins
    }

    /// Everything about message `seq` but its parts, without reading its body.
    pub fn header(&self, seq: u64) -> Result<MessageHeader> {
        let e = self.entry(seq)?;
        Ok(MessageHeader {
            seq: e.seq,
            revision: e.revision,
            role: e.role,
            turn: e.turn,
            starts_turn: e.starts_turn,
            step: match e.step.get() {
                Some(s) => s.as_deref().cloned(),
                // Read, then cached: a failed read is this call's error, not a `None` forever.
                None => {
                    let raw = self.inner.core.read(e.loc, crate::base::blob::Verify::Checksum)?;
                    let step = crate::disk::record::message_kind(raw.kind)
                        .and_then(|k| crate::disk::record::message_fields(k, &raw.payload))
                        .map_err(|why| Error::corrupt(e.loc.segment, e.loc.offset, why))?
                        .step
                        .map(std::sync::Arc::new);
                    e.step.get_or_init(|| step).as_deref().cloned()
                }
            },
            at_ms: e.at_ms,
        })
    }

    fn entry(&self, seq: u64) -> Result<&super::state::Entry> {
        if seq >= self.inner.len {
            return Err(Error::InvalidArgument(format!(
                "message {seq}: the chat has {} messages at revision {}",
                self.inner.len, self.inner.revision
            )));
        }
        self.inner
            .entry(seq)?
            .ok_or_else(|| Error::index_msg(format!("message {seq} missing from the index")))
    }

    /// Message `seq`. An erased message ([`Chat::erase`](crate::Chat::erase)) is
    /// [`Error::NotFound`], at every revision it was written up to its erasure.
    pub fn get(&self, seq: u64) -> Result<Message> {
        let e = self.entry(seq)?;
        if e.loc == super::load::LOST {
            return Err(Error::NotFound {
                what: format!(
                    "message {seq} of {}: missing or damaged in the log (this read-only open reads every \
                     batch that verifies; see its open warnings)",
                    self.inner.chat
                ),
            });
        }
        if self.inner.hidden.erased(seq, e.revision) {
            return Err(Error::NotFound {
                what: format!("message {seq} of {}: it was erased", self.inner.chat),
            });
        }
        read_message(&self.inner.core, self.inner.chat, e.loc)
    }

    /// True when message `seq` (the version this snapshot holds) was erased
    /// ([`Chat::erase`](crate::Chat::erase)): no read returns it, at any revision, and `gc`
    /// drops its bytes. An erased message is hidden too.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use undertext::{ChatMeta, NewMessage, Store};
    /// let store = Store::open(dir.path(), Default::default())?;
    /// let chat = store.chat("alice", store.create_chat("alice", ChatMeta::default())?)?;
    /// chat.append_batch(vec![NewMessage::user("hi"), NewMessage::user("my card is 4111 1111")])?;
    /// chat.erase(&[1..2], chat.revision())?;
    /// let old = chat.snapshot_at(0)?;
    /// assert!(old.is_erased(1) && old.is_hidden(1) && old.get(1).is_err());
    /// assert!(old.messages_with_hidden()?[1].parts.is_empty()); // its place only
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn is_erased(&self, seq: u64) -> bool {
        self.inner.hidden.has_erasures()
            && self.entry(seq).is_ok_and(|e| self.inner.hidden.erased(seq, e.revision))
    }

    /// True when message `seq` is hidden ([`Chat::hide`](crate::Chat::hide)): its record
    /// stays (and [`get`](Self::get) reads it), but views, checkpoints and the default reads
    /// ([`range`](Self::range), [`messages`](Self::messages), [`iter`](Self::iter)) skip it.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use undertext::{ChatMeta, NewMessage, Store};
    /// let store = Store::open(dir.path(), Default::default())?;
    /// let chat = store.chat("alice", store.create_chat("alice", ChatMeta::default())?)?;
    /// chat.append_batch(vec![NewMessage::user("hi"), NewMessage::assistant("oops"), NewMessage::user("go on")])?;
    /// chat.hide(&[1..2], chat.revision())?;
    /// let snap = chat.snapshot();
    /// assert!(snap.is_hidden(1) && !snap.is_hidden(2));
    /// assert_eq!(snap.messages()?.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![0, 2]);
    /// assert_eq!(snap.messages_with_hidden()?.len(), 3);
    /// assert_eq!(snap.hidden(), vec![1..2]);
    /// assert_eq!((snap.len(), snap.live_len()), (3, 2));
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn is_hidden(&self, seq: u64) -> bool {
        self.inner.hidden.contains(seq) || self.is_erased(seq)
    }

    /// The hidden seqs, as sorted disjoint ranges (empty when nothing is hidden).
    pub fn hidden(&self) -> Vec<Range<u64>> {
        self.inner.hidden.merged().to_vec()
    }

    /// Number of messages that are not hidden ([`len`](Self::len) counts them all: it is
    /// the next seq). See [`is_hidden`](Self::is_hidden) for an example.
    pub fn live_len(&self) -> u64 {
        if self.inner.hidden.has_erasures() {
            return (0..self.inner.len).filter(|s| !self.is_hidden(*s)).count() as u64;
        }
        let hidden: u64 = self
            .inner
            .hidden
            .merged()
            .iter()
            .map(|r| r.end.min(self.inner.len).saturating_sub(r.start))
            .sum();
        self.inner.len - hidden.min(self.inner.len)
    }

    fn check_range(&self, range: &Range<u64>) -> Result<()> {
        if range.start > range.end || range.end > self.inner.len {
            return Err(Error::InvalidArgument(format!(
                "range {}..{}: the chat has {} messages at revision {}",
                range.start, range.end, self.inner.len, self.inner.revision
            )));
        }
        Ok(())
    }

    /// The messages of `range.start..range.end` that are not hidden, in order; a range
    /// past the end is an error giving the length.
    pub fn range(&self, range: Range<u64>) -> Result<Vec<Message>> {
        self.check_range(&range)?;
        range.filter(|s| !self.is_hidden(*s)).map(|s| self.get(s)).collect()
    }

    /// Every message of `range.start..range.end`, hidden ones included; an erased one
    /// ([`is_erased`](Self::is_erased)) comes back as its place only: its seq, revision,
    /// role, turn, time and step, without parts.
    pub fn range_with_hidden(&self, range: Range<u64>) -> Result<Vec<Message>> {
        self.check_range(&range)?;
        range.map(|s| if self.is_erased(s) { self.place_of(s) } else { self.get(s) }).collect()
    }

    /// An erased message's place: its header, without parts.
    fn place_of(&self, seq: u64) -> Result<Message> {
        let h = self.header(seq)?;
        Ok(Message {
            seq: h.seq,
            revision: h.revision,
            role: h.role,
            turn: h.turn,
            parts: Vec::new(),
            step: h.step,
            at_ms: h.at_ms,
            feedback: h.role == crate::model::message::Role::User && !h.starts_turn,
        })
    }

    /// Every message that is not hidden, in order.
    pub fn messages(&self) -> Result<Vec<Message>> {
        self.range(0..self.inner.len)
    }

    /// Every message, hidden ones included (an erased one as its place only), in order.
    pub fn messages_with_hidden(&self) -> Result<Vec<Message>> {
        self.range_with_hidden(0..self.inner.len)
    }

    /// An iterator over the messages that are not hidden, reading each as it goes.
    pub fn iter(&self) -> impl Iterator<Item = Result<Message>> + '_ {
        (0..self.inner.len).filter(|s| !self.is_hidden(*s)).map(|s| self.get(s))
    }
}

/// Whether messages `r` of `inner` are all there and none was hidden or changed since
/// revision `rev`.
fn unchanged_since(inner: &SnapInner, r: std::ops::Range<u64>, rev: u64) -> bool {
    r.end <= inner.len
        && !inner.hidden.hidden_since(&r, rev)
        && (r.start..r.end).all(|i| inner.entry_or_none(i).is_some_and(|e| e.revision <= rev))
}

/// The compaction records still in force at the snapshot's revision: those whose messages,
/// all at or after `from`, are unchanged since the record was made (the one rule every view
/// applies). The squishes by their first seq (to their end and the rewrite), the trims by
/// seq (to the archive).
pub(crate) fn compactions_in_force(
    inner: &SnapInner,
    from: u64,
) -> (HashMap<u64, (u64, String)>, HashMap<u64, crate::base::blob::BlobId>) {
    let unchanged = |r: std::ops::Range<u64>, rev: u64| r.start >= from && unchanged_since(inner, r, rev);
    let (mut squish_at, mut trims) = (HashMap::new(), HashMap::new());
    for c in inner.compactions.iter() {
        for (start, end, rw) in &c.squishes {
            if unchanged(*start..*end, c.revision) {
                squish_at.insert(*start, (*end, rw.clone()));
            }
        }
        for (seq, id) in &c.trims {
            if unchanged(*seq..*seq + 1, c.revision) {
                trims.insert(*seq, crate::base::blob::BlobId(*id));
            }
        }
    }
    (squish_at, trims)
}

/// What earlier compactions still do to the view of `snap` ([`compactions_in_force`]): the
/// seqs of trimmed tool results and the squished ranges, each in seq order.
pub(crate) fn compactions_in_effect(snap: &super::Snapshot) -> (Vec<u64>, Vec<std::ops::Range<u64>>) {
    let (squish_at, trims) = compactions_in_force(&snap.inner, 0);
    let mut trims: Vec<u64> = trims.into_keys().collect();
    trims.sort_unstable();
    let mut squishes: Vec<std::ops::Range<u64>> = squish_at.into_iter().map(|(s, (e, _))| s..e).collect();
    squishes.sort_by_key(|r| r.start);
    (trims, squishes)
}
