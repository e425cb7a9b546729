//! Whole-file work on the index: a rebuild from the log in a fresh file, the comparison of
//! the index with one built from the log (`check`), clearing it, and compaction at close.

use std::path::Path;
use std::sync::Arc;

use redb::{Database, ReadableDatabase, TableDefinition};

use super::backend::Journal;
use super::flush::{apply_batches, write_meta};
use super::lookup::list_body_texts_in;
use super::open::open_verified;
use super::{Applied, BLOBS, BatchEntries, Index, META, guard, history, redb_err};
use crate::base::blob::Blob;
use crate::base::error::{Error, Result};
use crate::base::io;

impl Index {
    /// Replaces the index with one built from `batches` (every batch of the log, in order)
    /// in a fresh file: the current file is not read, so a damaged one is no obstacle. The
    /// new file is written beside it (`index.redb.rebuild`) and renamed over it once durable,
    /// so a crash leaves the old index or the new one. The caller holds off flushes and
    /// appends.
    pub(crate) fn rebuild_from(&self, batches: &[BatchEntries], applied: Applied) -> Result<()> {
        let tmp = self.path.with_extension("redb.rebuild");
        remove_if_present(&tmp)?;
        let db = build_at(&tmp, self.cache_bytes, batches, applied, &self.journal)?;
        io::rename(&tmp, &self.path).map_err(|e| Error::io("rename", &tmp, e))?;
        if let Some(dir) = self.path.parent() {
            io::sync_dir(dir).map_err(|e| Error::io("fsync", dir, e))?;
        }
        let old = std::mem::replace(&mut *self.db.write(), db);
        // The replaced database may be the damaged one: closing it must not take the process down.
        if let Err(e) = guard("closing the replaced index", || {
            drop(old);
            Ok(())
        }) {
            tracing::warn!(error = %e, "closing the replaced index failed; the rebuilt one is in place");
        }
        *self.flushed.lock() = applied.position;
        self.sealer.trust();
        self.grants_changed();
        Ok(())
    }

    /// Compares this index with one built from `batches` (every batch of the log up to the
    /// position this index has applied) in a scratch file beside it, table by table and
    /// entry by entry. Returns one line per difference (at most 20 per table). The caller
    /// has flushed the memtable and holds off flushes and appends.
    ///
    /// The texts of body blobs (`body` reads one) are listed in both first (see
    /// [`Index::list_body_texts`]): an index lists them when a lookup needs them, so two
    /// indexes of one log agree only once both have.
    pub(crate) fn diff_with_log(
        &self,
        batches: &[BatchEntries],
        applied: Applied,
        body: &dyn Fn(&[u8; 32]) -> Result<Blob>,
    ) -> Result<Vec<String>> {
        let tmp = self.path.with_extension("redb.check");
        remove_if_present(&tmp)?;
        let fresh = build_at(&tmp, self.cache_bytes, batches, applied, &Arc::new(Journal::default()));
        let out = fresh.and_then(|fresh| {
            list_body_texts_in(|| self.db.read(), body)?;
            list_body_texts_in(|| &fresh, body)?;
            let (ours, theirs) = (self.read()?.0, fresh.begin_read().map_err(redb_err)?);
            guard("comparing the index with the log", || diff_tables(&ours, &theirs))
        });
        remove_if_present(&tmp)?;
        out
    }

    /// Deletes every table (before a rebuild).
    pub(crate) fn clear(&self) -> Result<()> {
        let db = self.db.read();
        let tx = db.begin_write().map_err(redb_err)?;
        tx.delete_table(BLOBS).map_err(redb_err)?;
        tx.delete_table(META).map_err(redb_err)?;
        history::delete_tables(&tx)?;
        tx.commit().map_err(redb_err)?;
        self.grants_changed();
        Ok(())
    }

    /// Gives the index file's free pages back to the file system when they are at least a
    /// quarter of the file and at least [`COMPACT_MIN_FREE`] bytes, for an index file of at
    /// most [`COMPACT_MAX_FILE`]. redb keeps the pages its
    /// frequent non-durable commits free until a later durable commit can reuse them, so an
    /// index that grew quickly can be mostly free pages (measured: 1.08 MB, 0.31 MB after
    /// compaction, for the 1,000-put LangGraph bench of benches/README.md). Runs at close;
    /// skipped (`Ok(false)`) while a read transaction is alive. The index stays valid if this
    /// fails midway: redb compacts with its own crash-safe commits, and a damaged index is
    /// rebuilt from the log on open.
    pub(crate) fn compact_if_fragmented(&self) -> Result<bool> {
        crate::disk::log::same_process(&self.opener)?;
        guard("compacting the index", || self.compact_if_fragmented_unguarded())
    }

    fn compact_if_fragmented_unguarded(&self) -> Result<bool> {
        let _g = self.flush_lock.lock();
        if !self.changed.load(std::sync::atomic::Ordering::Relaxed) {
            // Nothing committed since open: the free pages are what the last close left.
            return Ok(false);
        }
        let file_len = std::fs::metadata(&self.path).map_err(|e| Error::io("stat", &self.path, e))?.len();
        if file_len > COMPACT_MAX_FILE {
            return Ok(false);
        }
        let free = {
            let tx = self.db.read().begin_write().map_err(redb_err)?;
            let free = tx.stats().map_err(redb_err)?.fragmented_bytes();
            tx.abort().map_err(redb_err)?;
            free
        };
        if free < COMPACT_MIN_FREE || free.saturating_mul(4) < file_len {
            return Ok(false);
        }
        match self.db.write().compact() {
            Ok(_) => Ok(true),
            Err(redb::CompactionError::TransactionInProgress) => Ok(false),
            Err(e) => Err(redb_err(e)),
        }
    }
}

/// Free index pages below this are not worth a compaction at close.
const COMPACT_MIN_FREE: u64 = 256 << 10;

/// An index file above this is not examined at close: counting its free pages walks every
/// page of every table, which would make closing a large store slow. (A large index has
/// proportionally little slack: redb reuses freed pages after each durable commit.)
const COMPACT_MAX_FILE: u64 = 64 << 20;

fn remove_if_present(p: &Path) -> Result<()> {
    match std::fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove", p, e)),
    }
}

/// A new index file at `path` holding `batches`, committed durably; its writes are noted in
/// `journal` (a failed one keeps the file from being sealed).
fn build_at(
    path: &Path,
    cache_bytes: usize,
    batches: &[BatchEntries],
    applied: Applied,
    journal: &Arc<Journal>,
) -> Result<Database> {
    let (db, _) = open_verified(path, cache_bytes, journal, true)?;
    let mut tx = db.begin_write().map_err(redb_err)?;
    tx.set_quick_repair(true);
    apply_batches(&tx, batches)?;
    write_meta(&tx, applied)?;
    tx.commit().map_err(redb_err)?;
    Ok(db)
}

/// Every difference between two indexes, table by table.
fn diff_tables(ours: &redb::ReadTransaction, theirs: &redb::ReadTransaction) -> Result<Vec<String>> {
    let mut out = Vec::new();
    diff_table(ours, theirs, BLOBS, &mut out)?;
    diff_table(ours, theirs, META, &mut out)?;
    history::diff_tables(ours, theirs, &mut out)?;
    Ok(out)
}

/// The differences in one table: entries only one side has, and entries whose values
/// differ. Both tables are walked together in key order (no copy of either is held).
pub(crate) fn diff_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    ours: &redb::ReadTransaction,
    theirs: &redb::ReadTransaction,
    def: TableDefinition<'_, K, V>,
    out: &mut Vec<String>,
) -> Result<()> {
    use redb::{ReadableTable, TableHandle};
    use std::cmp::Ordering;
    let name = def.name().to_string();
    let open = |tx: &redb::ReadTransaction| super::query::table(tx, def);
    let (ta, tb) = (open(ours)?, open(theirs)?);
    let mut ia = match &ta {
        Some(t) => Some(t.iter().map_err(redb_err)?),
        None => None,
    };
    let mut ib = match &tb {
        Some(t) => Some(t.iter().map_err(redb_err)?),
        None => None,
    };
    type Row = (Vec<u8>, Vec<u8>);
    fn next<K: redb::Key + 'static, V: redb::Value + 'static>(
        it: &mut Option<redb::Range<'_, K, V>>,
    ) -> Result<Option<Row>> {
        let Some(it) = it else { return Ok(None) };
        match it.next() {
            None => Ok(None),
            Some(item) => {
                let (k, v) = item.map_err(redb_err)?;
                Ok(Some((
                    K::as_bytes(&k.value()).as_ref().to_vec(),
                    V::as_bytes(&v.value()).as_ref().to_vec(),
                )))
            }
        }
    }
    let mut found = 0u64;
    let mut say = |line: String| {
        found += 1;
        if found <= 20 {
            out.push(format!("table {name}: {line}"));
        }
    };
    let (mut a, mut b) = (next(&mut ia)?, next(&mut ib)?);
    loop {
        let order = match (&a, &b) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((ka, _)), Some((kb, _))) => K::compare(ka, kb),
        };
        match order {
            Ordering::Less => {
                if let Some((k, _)) = &a {
                    say(format!("entry {} is in the index but not in the log", hex(k)));
                }
                a = next(&mut ia)?;
            }
            Ordering::Greater => {
                if let Some((k, _)) = &b {
                    say(format!("entry {} is in the log but not in the index", hex(k)));
                }
                b = next(&mut ib)?;
            }
            Ordering::Equal => {
                if let (Some((k, v)), Some((_, w))) = (&a, &b)
                    && v != w
                {
                    say(format!("entry {}: the index holds {}, the log gives {}", hex(k), hex(v), hex(w)));
                }
                a = next(&mut ia)?;
                b = next(&mut ib)?;
            }
        }
    }
    if found > 20 {
        out.push(format!("table {name}: {} more differences", found - 20));
    }
    Ok(())
}

fn hex(b: &[u8]) -> String {
    const MAX: usize = 48;
    let mut s: String = b.iter().take(MAX).map(|x| format!("{x:02x}")).collect();
    if b.len() > MAX {
        s.push_str(&format!("… ({} bytes)", b.len()));
    }
    s
}
