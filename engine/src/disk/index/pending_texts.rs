//! The inline texts of message records still in the memtable, so that a lookup of a text
//! written moments ago finds it without flushing the index (a flush is a redb commit).
//!
//! A message record's texts are listed once, when the record is made ([`texts_of`]): the
//! memtable files them by content address here, and the flush writes the same list into the
//! `inline_texts` table. Texts of a body stored as a blob are not listed in memory (reading
//! the blob is left to a lookup that needs it); the chats created and deleted by pending
//! records are kept too, so that a lookup applies the owner rule as redb would.

use std::collections::HashMap;

use super::history::MsgKey;
use super::{InlineText, PendingRecord};
use crate::disk::log::Location;
use crate::disk::record::{self, ChatRec, DeleteRec, Kind, MessageTexts, MsgRec};

/// What a message record once decoded gives the index: its (chat, seq, revision), the
/// header fields its `messages` row keeps, and where its inline texts are.
#[derive(Debug, Clone)]
pub(crate) struct Listing {
    pub key: MsgKey,
    pub head: record::MsgHead,
    pub texts: MessageTexts,
}

/// A message record's [`Listing`], from one decode of it; `None` for another kind, or a
/// message that does not decode (the history index reports that one when it applies it).
pub(crate) fn texts_of(k: Kind, payload: &[u8]) -> Option<Listing> {
    listing_and_record(k, payload, false).map(|(l, _)| l)
}

/// [`texts_of`], and the record as that one decode gave it (a compact record's; `None` for
/// an rkyv record, which is validated in place, not decoded). With `defer`, a compact
/// record's texts are not hashed ([`MessageTexts::Deferred`]: see `index/aside_texts.rs`).
pub(crate) fn listing_and_record(k: Kind, payload: &[u8], defer: bool) -> Option<(Listing, Option<MsgRec>)> {
    if !k.is_message() {
        return None;
    }
    let ((key, head), texts, rec) = record::message_key_texts(k, payload, defer).ok()?;
    Some((Listing { key, head, texts }, rec))
}

/// The inline texts of one generation of pending records.
#[derive(Debug, Default)]
pub(crate) struct PendingTexts {
    /// Content address -> the pending message versions holding it inline, in log order.
    by_id: HashMap<[u8; 32], Vec<InlineText>>,
    /// Pending message versions whose parts are in a body blob: (version, record, body).
    bodies: Vec<(MsgKey, Location, [u8; 32])>,
    /// Chats created by pending records, with their owners.
    owners: HashMap<u64, String>,
    /// Chats deleted by pending records.
    deleted: Vec<u64>,
}

/// What the pending records say about one text: see [`PendingTexts::find`].
#[derive(Debug, Default)]
pub(crate) struct PendingPlaces {
    /// Message versions holding the text inline, older generation first.
    pub places: Vec<InlineText>,
    /// Message versions whose parts are in a body blob, which may hold it: (version,
    /// record, body blob).
    pub bodies: Vec<(MsgKey, Location, [u8; 32])>,
    /// Chats created by pending records, with their owners.
    pub owners: HashMap<u64, String>,
    /// Chats deleted by pending records: nothing of theirs is found.
    pub deleted: Vec<u64>,
}

impl PendingTexts {
    /// Files a pending record (called under the memtable's lock: nothing here hashes).
    pub(crate) fn add(&mut self, r: &PendingRecord) {
        match r.kind {
            Kind::Message | Kind::MessageCompact => match &r.texts {
                Some(Listing { key: (chat, seq, revision), texts: MessageTexts::Listed(texts), .. }) => {
                    for &(part, id) in texts {
                        let at = InlineText { chat: *chat, seq: *seq, revision: *revision, part, loc: r.loc };
                        self.by_id.entry(id).or_default().push(at);
                    }
                }
                Some(Listing { key, texts: MessageTexts::InBlob(body), .. }) => {
                    self.bodies.push((*key, r.loc, *body))
                }
                // Only a read-only refresh defers texts, and it applies straight to redb.
                Some(Listing { texts: MessageTexts::Deferred, .. }) | None => {}
            },
            Kind::Chat => {
                if let Ok(c) = record::decode::<ChatRec>(&r.payload, "chat") {
                    self.owners.insert(c.chat, c.owner);
                }
            }
            Kind::Delete => {
                if let Ok(d) = record::decode::<DeleteRec>(&r.payload, "delete") {
                    self.deleted.push(d.chat);
                }
            }
            _ => {}
        }
    }

    /// Appends a newer generation's entries to this one.
    pub(crate) fn append(&mut self, newer: PendingTexts) {
        for (id, mut at) in newer.by_id {
            self.by_id.entry(id).or_default().append(&mut at);
        }
        self.bodies.extend(newer.bodies);
        self.owners.extend(newer.owners);
        self.deleted.extend(newer.deleted);
    }

    /// Adds what this generation says about text `id` to `out`.
    pub(crate) fn find(&self, id: &[u8; 32], out: &mut PendingPlaces) {
        if let Some(at) = self.by_id.get(id) {
            out.places.extend_from_slice(at);
        }
        out.bodies.extend_from_slice(&self.bodies);
        out.owners.extend(self.owners.iter().map(|(c, o)| (*c, o.clone())));
        out.deleted.extend_from_slice(&self.deleted);
    }
}
