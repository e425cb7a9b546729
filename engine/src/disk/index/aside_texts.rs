//! The inline texts of a read-only store's messages: listed in memory when a lookup first
//! needs one, not in redb's inline-text tables at each refresh.
//!
//! A store written to lists each message's inline texts when the message is made (their
//! BLAKE3, two rows each in redb), so that [`Index::inline_text`] finds a text by its content
//! address. A read-only store replays the writer's messages at every
//! [`Store::refresh`](crate::Store::refresh); hashing their texts and inserting two redb rows
//! each was a fifth of a reader's work per message (issue 20), for lookups most readers never
//! make. Its refresh instead notes each message version holding texts to list
//! ([`MessageTexts::Deferred`](crate::disk::record::MessageTexts::Deferred)), and the first lookup
//! after it reads those records again and lists their texts here, by content address
//! ([`Index::list_deferred_texts`]); [`Index::inline_text`] looks here after redb.
//!
//! A message version's row in redb never goes but with its chat, whose deletion removes its
//! chat row: a listed text of a deleted chat is never found (the lookup asks whose the chat
//! is), as in redb.

use std::collections::HashMap;

use super::history::MsgKey;
use super::{BatchEntries, Index, InlineText};
use crate::base::error::Result;
use crate::disk::log::Location;
use crate::disk::record::MessageTexts;

/// Deferred and listed inline texts (see the module's documentation).
#[derive(Debug, Default)]
pub(crate) struct AsideTexts {
    /// Message versions whose texts are not listed yet, in log order.
    unlisted: Vec<(MsgKey, Location)>,
    /// Content address -> the message versions holding it inline, in log order.
    by_id: HashMap<[u8; 32], Vec<InlineText>>,
}

impl Index {
    /// Notes the message versions of `entries` (applied to redb) whose texts were deferred.
    pub(crate) fn defer_texts(&self, entries: &[BatchEntries]) {
        let deferred = entries.iter().flat_map(|b| &b.records).filter_map(|r| match &r.texts {
            Some(l) if l.texts == MessageTexts::Deferred => Some((l.key, r.loc)),
            _ => None,
        });
        self.aside.lock().unlisted.extend(deferred);
    }

    /// Lists the texts of every message version whose texts were deferred: `texts` reads the
    /// record at a location and lists its texts (part, content address). A record that
    /// cannot be read is reported and stays unlisted. Returns how many were listed.
    pub(crate) fn list_deferred_texts(
        &self,
        texts: &dyn Fn(Location) -> Result<Vec<(u32, [u8; 32])>>,
    ) -> usize {
        // Held while listing: a lookup waits for the texts it may need instead of missing them.
        let mut aside = self.aside.lock();
        if aside.unlisted.is_empty() {
            return 0;
        }
        let mut left = Vec::new();
        let mut done = 0;
        for ((chat, seq, revision), loc) in std::mem::take(&mut aside.unlisted) {
            match texts(loc) {
                Ok(listed) => {
                    for (part, id) in listed {
                        let at = InlineText { chat, seq, revision, part, loc };
                        aside.by_id.entry(id).or_default().push(at);
                    }
                    done += 1;
                }
                Err(e) => {
                    tracing::warn!(error = %e, chat, seq, "a message's texts cannot be listed; read_context will not find them");
                    left.push(((chat, seq, revision), loc));
                }
            }
        }
        aside.unlisted = left;
        done
    }

    /// True when texts wait to be listed ([`Index::list_deferred_texts`]).
    pub(crate) fn has_deferred_texts(&self) -> bool {
        !self.aside.lock().unlisted.is_empty()
    }

    /// The message versions listed here holding text `id`, in log order.
    pub(super) fn aside_places(&self, id: &[u8; 32]) -> Vec<InlineText> {
        self.aside.lock().by_id.get(id).cloned().unwrap_or_default()
    }
}
