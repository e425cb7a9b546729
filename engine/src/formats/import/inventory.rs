//! What a store holds for an owner: chats, messages, tool results and archives, in total
//! and per imported format (read from the chats themselves, not from an import report).

use std::collections::{BTreeMap, BTreeSet};

use super::write::FORMAT;
use crate::api::Store;
use crate::base::blob::BlobId;
use crate::base::error::Result;
use crate::chat::history::{Page, Part, ToolContent};

/// Counts per format (chats without an import format count under `""`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FormatCounts {
    /// Chats.
    pub sessions: u64,
    /// Messages.
    pub messages: u64,
    /// Tool results.
    pub tool_results: u64,
    /// UTF-8 bytes of the tool results' full text (archived ones at their archive's size).
    pub tool_result_bytes: u64,
}

/// The result of [`inventory`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    /// Chats.
    pub chats: u64,
    /// Messages.
    pub messages: u64,
    /// Tool results.
    pub tool_results: u64,
    /// Tool results held as a preview and an archive.
    pub archived_results: u64,
    /// Distinct archives they reference.
    pub archives: u64,
    /// Bytes of the archived results, counted once per result.
    pub archived_bytes: u64,
    /// Bytes of the distinct archives (what deduplication leaves).
    pub archive_unique_bytes: u64,
    /// Counts per import format.
    pub per_format: BTreeMap<String, FormatCounts>,
}

/// Reads every chat of `owner` and counts what it holds.
pub fn inventory(store: &Store, owner: &str) -> Result<Inventory> {
    let mut inv = Inventory::default();
    let mut unique: BTreeSet<BlobId> = BTreeSet::new();
    let mut page = Page { limit: 1000, after: None };
    loop {
        let p = store.chats(owner, page.clone())?;
        for c in &p.chats {
            let format = c.meta.extra.get(FORMAT).cloned().unwrap_or_default();
            let chat = store.chat(owner, c.id)?;
            let snap = chat.snapshot();
            let f = inv.per_format.entry(format).or_default();
            f.sessions += 1;
            f.messages += snap.len();
            inv.chats += 1;
            inv.messages += snap.len();
            for m in snap.iter() {
                for part in m?.parts {
                    let Part::ToolResult { content, .. } = part else { continue };
                    inv.tool_results += 1;
                    f.tool_results += 1;
                    match content {
                        ToolContent::Text(t) => f.tool_result_bytes += t.len() as u64,
                        ToolContent::Archived { archive, .. } => {
                            f.tool_result_bytes += archive.bytes;
                            inv.archived_results += 1;
                            inv.archived_bytes += archive.bytes;
                            if unique.insert(archive.id) {
                                inv.archive_unique_bytes += archive.bytes;
                            }
                        }
                    }
                }
            }
        }
        match p.next {
            Some(n) => page.after = Some(n),
            None => break,
        }
    }
    inv.archives = unique.len() as u64;
    Ok(inv)
}
