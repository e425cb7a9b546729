//! What `gc` erases (issue 34): the bytes of erased messages and everything derived from them.
//!
//! An erasure (`Chat::erase`, an `erase` record beside a `hide` of the same ranges) names
//! seqs of a chat at a revision `e`: every version of those seqs written at or before `e` is
//! erased. `gc` then writes, in place of each erased version, a *tombstone*: the same
//! message record (chat, seq, revision, role, turn, time, step tag) with no parts, so the
//! chat's numbering, turns and steps stay as they were and nothing but the content goes.
//! With the content go the records derived from it or naming it:
//!
//! * checkpoints of the chat built at a revision `< e` whose reach passes an erased seq;
//! * the cached summaries of their segments that overlap an erased range, of their root,
//!   and every summary written in the same batch as one of those (a build writes a
//!   segment's summary and the merges above it in one batch);
//! * compactions made at a revision `≤ e` that trim or squish an erased seq;
//! * pins of the chat on a blob an erased version referenced and no kept version of the
//!   chat references;
//! * grants bound to the chat (written with an append) on such a blob.
//!
//! A blob is then dropped like any other when nothing kept holds it: another chat's
//! message, an owner's own grant (`put_blob`, `archive`) or a grant bound to another live
//! chat keeps it (it is theirs too). The checkpoints and summaries of deleted chats are
//! dropped the same way (their segments and root).
//!
//! Everything here is a decision on records already read; `store/gc.rs` walks the log.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use crate::base::blob::BlobId;
use crate::disk::record::{self, CheckpointRec, CompactionRec, HideRec, Kind, MsgRec, PinRec, SummaryRec};

/// A checkpoint as the first pass saw it: (chat, base revision, reach, segments as
/// (from, to, id), root).
type SeenCheckpoint = (u64, u64, u64, Vec<(u64, u64, [u8; 32])>, [u8; 32]);

/// The erasures of a store and what they reach.
#[derive(Debug, Default)]
pub(crate) struct Erasures {
    /// Per chat: each erased range with the revision of its erasure.
    by_chat: HashMap<u64, Vec<(Range<u64>, u64)>>,
    /// Checkpoints seen in the first pass: (chat, base revision, reach, segments, root).
    checkpoints: Vec<SeenCheckpoint>,
    /// Summary keys derived from erased (or deleted) content.
    tainted: HashSet<[u8; 32]>,
    /// Blobs some erased version references.
    erased_refs: HashSet<BlobId>,
    /// (chat, blob): a kept message version of the chat references a blob of `erased_refs`.
    used: HashSet<(u64, BlobId)>,
    /// Before `used` is known: (chat, blobs) of kept versions of chats with erasures.
    candidates: Vec<(u64, Vec<BlobId>)>,
}

/// What `gc` does with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Copied as it is.
    Keep,
    /// Left out.
    Drop,
    /// A message version that is erased: a tombstone takes its place.
    Tombstone,
}

impl Erasures {
    /// True when the store has no erasure at all (gc then does what it did before them).
    pub(crate) fn is_empty(&self) -> bool {
        self.by_chat.is_empty()
    }

    /// First pass: an `erase` or `checkpoint` record.
    pub(crate) fn note(&mut self, k: Kind, payload: &[u8]) -> Result<(), String> {
        match k {
            Kind::Erase => {
                let h: HideRec = record::decode(payload, "erase")?;
                let list = self.by_chat.entry(h.chat).or_default();
                list.extend(h.ranges.iter().map(|&(s, e)| (s..e, h.revision)));
            }
            Kind::Checkpoint => {
                let c: CheckpointRec = record::decode(payload, "checkpoint")?;
                self.checkpoints.push((c.chat, c.base_revision, c.reach, c.segments, c.root));
            }
            _ => {}
        }
        Ok(())
    }

    /// After the first pass: the summary keys derived from what is erased, or from the
    /// chats in `deleted`.
    pub(crate) fn taint(&mut self, deleted: &HashSet<u64>) {
        for (chat, base, reach, segments, root) in std::mem::take(&mut self.checkpoints) {
            // Built at `base`: an erasure at a later revision erased what it read (one at
            // `base` itself came first: the checkpoint skipped the hidden messages).
            let gone = deleted.contains(&chat);
            if !gone && !self.covers(chat, &(0..reach), base + 1) {
                continue;
            }
            self.tainted.insert(root);
            for (from, to, id) in segments {
                if gone || self.covers(chat, &(from..to), base + 1) {
                    self.tainted.insert(id);
                }
            }
        }
    }

    /// True when the version of `seq` written at `revision` is erased.
    pub(crate) fn is_erased(&self, chat: u64, seq: u64, revision: u64) -> bool {
        self.by_chat.get(&chat).is_some_and(|l| l.iter().any(|(r, e)| r.contains(&seq) && revision <= *e))
    }

    /// True when chat `chat` has an erasure at a revision `≥ since` overlapping `seqs`: what
    /// was made at `since` over `seqs` saw an erased version.
    fn covers(&self, chat: u64, seqs: &Range<u64>, since: u64) -> bool {
        self.by_chat
            .get(&chat)
            .is_some_and(|l| l.iter().any(|(r, e)| *e >= since && r.start < seqs.end && seqs.start < r.end))
    }

    /// True when the store has an erasure in `chat`.
    pub(crate) fn touches(&self, chat: u64) -> bool {
        self.by_chat.contains_key(&chat)
    }

    /// Second pass, for each message version of a chat with erasures: the blobs it
    /// references (`refs`).
    pub(crate) fn note_version(&mut self, chat: u64, seq: u64, revision: u64, refs: Vec<BlobId>) {
        if self.is_erased(chat, seq, revision) {
            self.erased_refs.extend(refs);
        } else {
            self.candidates.push((chat, refs));
        }
    }

    /// After the second pass: which kept versions still use an erased version's blobs.
    pub(crate) fn settle(&mut self) {
        for (chat, refs) in std::mem::take(&mut self.candidates) {
            for id in refs {
                if self.erased_refs.contains(&id) {
                    self.used.insert((chat, id));
                }
            }
        }
    }

    /// True when the summaries of a batch holding these `(kind, payload)` records are
    /// derived from erased content (one of them is keyed by a tainted key).
    pub(crate) fn batch_tainted<'a>(&self, mut records: impl Iterator<Item = (Kind, &'a [u8])>) -> bool {
        !self.tainted.is_empty()
            && records.any(|(k, p)| {
                k == Kind::Summary
                    && record::decode::<SummaryRec>(p, "summary").is_ok_and(|s| self.tainted.contains(&s.key))
            })
    }

    /// The fate of history record (`k`, `payload`) of `chat` (not deleted), in a batch whose
    /// summaries are `tainted` or not.
    pub(crate) fn fate(
        &self,
        k: Kind,
        payload: &[u8],
        chat: Option<u64>,
        tainted: bool,
    ) -> Result<Fate, String> {
        if k == Kind::Summary {
            return Ok(if tainted { Fate::Drop } else { Fate::Keep });
        }
        let Some(chat) = chat.filter(|c| self.touches(*c)) else { return Ok(Fate::Keep) };
        let dropped = match k {
            Kind::Message | Kind::MessageCompact => {
                let f = record::message_fields(k, payload)?;
                // A tombstone (an earlier collection's) stays as it is.
                if self.is_erased(chat, f.seq, f.revision) && !is_tombstone(k, payload)? {
                    return Ok(Fate::Tombstone);
                }
                false
            }
            Kind::Checkpoint => {
                let c: CheckpointRec = record::decode(payload, "checkpoint")?;
                self.covers(chat, &(0..c.reach), c.base_revision + 1)
            }
            Kind::Compaction => {
                let c: CompactionRec = record::decode(payload, "compaction")?;
                c.trims.iter().any(|(s, _)| self.covers(chat, &(*s..s + 1), c.revision))
                    || c.squishes.iter().any(|(f, t, _)| self.covers(chat, &(*f..t + 1), c.revision))
            }
            Kind::Pin => {
                let p: PinRec = record::decode(payload, "pin")?;
                self.orphaned(&[chat], &BlobId(p.id))
            }
            Kind::Chat
            | Kind::Meta
            | Kind::Revision
            | Kind::Step
            | Kind::Usage
            | Kind::Summary
            | Kind::Delete
            | Kind::Hide
            | Kind::Erase
            | Kind::Archive
            | Kind::Grant
            | Kind::AppendKey
            | Kind::Blob
            | Kind::Manifest => false,
        };
        Ok(if dropped { Fate::Drop } else { Fate::Keep })
    }

    /// True when a grant on `id` bound to `chats` goes: an erased version referenced `id`,
    /// and each of those chats has erasures and no kept version of it references `id`.
    pub(crate) fn orphaned(&self, chats: &[u64], id: &BlobId) -> bool {
        !chats.is_empty()
            && self.erased_refs.contains(id)
            && chats.iter().all(|c| self.touches(*c) && !self.used.contains(&(*c, *id)))
    }
}

/// True when a message record holds no content (a tombstone, or a message without parts).
fn is_tombstone(k: Kind, payload: &[u8]) -> Result<bool, String> {
    Ok(matches!(record::message(k, payload)?.body, record::BodyRec::Inline(p) if p.is_empty()))
}

/// The tombstone of an erased message version: the same record without its content, in
/// the compact encoding.
pub(crate) fn tombstone(
    k: Kind,
    payload: &[u8],
    compression: crate::base::blob::Compression,
) -> Result<Vec<u8>, String> {
    let m = record::message(k, payload)?;
    let rec = MsgRec { body: record::BodyRec::Inline(Vec::new()), ..m };
    Ok(record::compact::encode(&rec, compression))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn erase(e: &mut Erasures, chat: u64, revision: u64, ranges: Vec<(u64, u64)>) {
        let rec = HideRec { chat, revision, ranges, at_ms: 0 };
        e.note(Kind::Erase, &record::encode(&rec).unwrap()).unwrap();
    }

    #[test]
    fn an_erasure_reaches_versions_up_to_it_and_what_was_made_from_them() {
        let mut e = Erasures::default();
        erase(&mut e, 7, 5, vec![(2, 4)]);
        assert!(e.is_erased(7, 2, 0) && e.is_erased(7, 3, 5));
        assert!(!e.is_erased(7, 3, 6) && !e.is_erased(7, 4, 0) && !e.is_erased(8, 2, 0));
        assert!(e.covers(7, &(0..3), 5), "made at the erasure's revision: it may have seen it");
        assert!(!e.covers(7, &(0..3), 6) && !e.covers(7, &(4..9), 0));
        let (a, b) = (BlobId([1; 32]), BlobId([2; 32]));
        e.note_version(7, 2, 1, vec![a, b]);
        e.note_version(7, 5, 1, vec![b]);
        e.settle();
        assert!(e.orphaned(&[7], &a) && !e.orphaned(&[7], &b), "b is still used by message 5");
        assert!(!e.orphaned(&[], &a), "an owner's own grant stays");
        assert!(!e.orphaned(&[7, 9], &a), "a grant bound to a chat without erasures too");
    }
}
