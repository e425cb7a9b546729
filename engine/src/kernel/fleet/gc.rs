//! Garbage collection in fleet mode (`Store::gc` on a `postgres://` URL): online, while other
//! processes write.
//!
//! 1. The records of deleted chats (all but their creation and deletion) leave `ut_records`,
//!    grants bound to them included (and their notes in `ut_grants`); their batches stay,
//!    empty, so every stream's versions stay dense for the replicas.
//! 2. **Mark**: every record left in the catalog holds what it references (as in embedded
//!    mode: message bodies and their parts, pins, compaction trims, checkpoint and cached
//!    summaries, archive and blob grants), an archive its offset index, a manifest its chunks.
//! 3. **Sweep**: a blob no record holds is deleted only when its row was stored (or last
//!    re-referenced) longer ago than [`Options::gc_grace`], so a blob uploaded for a write
//!    that has not committed yet is never collected. In two steps per group of blobs: the
//!    rows are marked `doomed` (committed), then, in one transaction holding their row locks,
//!    the S3 objects are deleted and the rows with them. Blobs in S3 are collected only when
//!    the URL names the bucket (`?blobs=s3://…`); otherwise they are left as they are.
//! 4. **Objects without a row** (S3 only): listed under the prefix, an object named by a blob
//!    id that has no `ut_blobs` row and was last modified longer ago than the grace period is
//!    deleted, under a held row so that a writer uploading the same content waits and then
//!    uploads it again. Objects whose names are not blob ids are never touched.
//!
//! The catalog is read in pages of [`PAGE`] rows in key order (`ut_records` by `(batch,
//! idx)`, `ut_blobs` by id), each page a statement of its own, so memory holds the ids of
//! referenced blobs and one page, whatever the catalog's size; the bucket's listing is taken
//! a page of 1,000 keys at a time. A step that fails (PostgreSQL or S3 down: S3 requests are
//! retried first, see `s3.rs`) ends the collection with an [`Error::Backend`] naming the step;
//! what it leaves is safe (a sweep's transaction rolls back, doomed rows stay doomed) and the
//! next collection finishes the work.
//!
//! Writers cooperate (`pg.rs`): an upload first inserts the row or marks it fresh and not
//! doomed, waiting on the sweep's row lock; a write that references a blob it did not upload
//! (content its replica held) marks the row fresh and uploads the blob again when it is
//! doomed or gone. So a blob a commit references is never deleted under it: either the
//! writer's mark comes first and the sweep skips the fresh row, or the sweep's deletion comes
//! first and the writer uploads the blob again before its catalog transaction.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::conn::Conn;
use super::pg::Fleet;
use crate::base::blob::BlobId;
use crate::base::blob::chunk::Manifest;
use crate::base::error::{Error, Result};
use crate::disk::record::{self, ArchiveRec, Kind};
use crate::kernel::store::GcReport;
use crate::kernel::store::core::Core;
use crate::kernel::store::gc::{Holds, holds};

/// Blobs per sweep transaction.
const SWEEP_GROUP: usize = 500;

/// Rows read per statement of the mark and of the sweep's listing: the catalog is read in
/// pages in key order (keyset pagination, each page one statement of its own, no transaction
/// or cursor held open between them), so a collection's memory does not grow with the
/// catalog's records, only with the ids of the blobs they reference.
const PAGE: i64 = 500;

/// Collects the catalog of `fleet` (see the module docs); `core` is a replica of it, used to
/// read message bodies. A failure (PostgreSQL or S3 unreachable) stops it with an error
/// saying which step failed; what it did before stays done, and nothing referenced is
/// touched: a later collection takes up what is left.
pub(crate) fn collect(fleet: &Fleet, core: &Core, grace: Duration) -> Result<GcReport> {
    let mut c = fleet.client()?;
    let report = steps(fleet, core, &mut c, grace);
    if report.is_err() {
        // A sweep's transaction left open by the failure goes with its locks.
        let _ = c.batch_execute("ROLLBACK");
    }
    fleet.put(c);
    report
}

fn steps(fleet: &Fleet, core: &Core, c: &mut Conn, grace: Duration) -> Result<GcReport> {
    let mut report = GcReport::default();
    let (records_before, bytes_before) = catalog_size(fleet, c)?;
    (report.records_before, report.log_bytes_before) = (records_before, bytes_before);
    // 1. The records of deleted chats.
    let kept = [i16::from(Kind::Chat), i16::from(Kind::Delete)];
    let dropped = c
        .query(
            "WITH d AS (DELETE FROM ut_records r USING ut_batches b, ut_chats ch \
             WHERE r.batch = b.id AND b.owner = '' AND ch.id = b.chat AND ch.deleted \
             AND r.kind <> ALL($1) RETURNING b.chat) SELECT DISTINCT chat FROM d",
            &[&kept.as_slice()],
        )
        .map_err(|e| fleet.err("drop the records of deleted chats", &e))?;
    report.deleted_chats = dropped.len() as u64;
    drop(dropped);
    // Schema version 5: their grants' notes too (hints only: a deleted chat grants nothing).
    if fleet.schema.load(std::sync::atomic::Ordering::Relaxed) >= 5 {
        c.execute("DELETE FROM ut_grants g USING ut_chats ch WHERE g.chat = ch.id AND ch.deleted", &[])
            .map_err(|e| fleet.err("drop the grant notes of deleted chats", &e))?;
    }
    // 2. Mark.
    let no_blob_deleted = "no blob was deleted; run gc again once it can be read";
    let live =
        mark(fleet, core, c).map_err(|e| within(e, "gc, marking what records reference", no_blob_deleted))?;
    // 3. Sweep.
    let secs = grace.as_secs_f64();
    let mut after: Vec<u8> = Vec::new();
    let mut old = Vec::new();
    loop {
        let rows = c
            .query(
                "SELECT id, stored_at < now() - make_interval(secs => $1), octet_length(payload) = 0 \
                 FROM ut_blobs WHERE id > $2 ORDER BY id LIMIT $3",
                &[&secs, &after.as_slice(), &PAGE],
            )
            .map_err(|e| fleet.err("list blobs", &e))?;
        for row in &rows {
            let id = fleet.blob_id(row, 0)?;
            after = id.0.to_vec();
            // A blob in S3 is left alone by a collection that was not given the bucket.
            let reachable = fleet.s3.is_some() || !fleet.col::<bool>(row, 2)?;
            if !live.contains(&id) && fleet.col::<bool>(row, 1)? && reachable {
                old.push(id);
            }
        }
        let last = (rows.len() as i64) < PAGE;
        while old.len() >= SWEEP_GROUP || (last && !old.is_empty()) {
            let group: Vec<BlobId> = old.drain(..old.len().min(SWEEP_GROUP)).collect();
            report.blobs_removed += sweep(fleet, c, &group, secs).map_err(|e| {
                within(
                    e,
                    "gc, deleting unreferenced blobs",
                    "the blobs of this group stay (marked doomed: a write that references one uploads it \
                     again), nothing referenced was touched; run gc again",
                )
            })?;
        }
        if last {
            break;
        }
    }
    // 4. Objects without a row (an upload whose row a collection without grace removed, or
    //    a catalog restored from an older backup): older than the grace period, they go.
    if let Some(s3) = &fleet.s3 {
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut orphans: Vec<BlobId> = Vec::new();
        let mut removed = 0;
        let orphaned = "nothing referenced was touched; run gc again";
        s3.list(|page| {
            orphans.extend(
                page.into_iter().filter(|(_, at)| now.saturating_sub(*at) >= grace.as_secs()).filter_map(
                    |(key, _)| key.strip_prefix(s3.prefix()).and_then(|hex| hex.parse::<BlobId>().ok()),
                ),
            );
            while orphans.len() >= SWEEP_GROUP {
                let group: Vec<BlobId> = orphans.drain(..SWEEP_GROUP).collect();
                removed += sweep_orphans(fleet, c, &group)?;
            }
            Ok(())
        })
        .and_then(|()| sweep_orphans(fleet, c, &orphans))
        .map(|n| removed += n)
        .map_err(|e| within(e, "gc, deleting objects without a row", orphaned))?;
        report.blobs_removed += removed;
    }
    let (records_after, bytes_after) = catalog_size(fleet, c)?;
    (report.records_after, report.log_bytes_after) = (records_after, bytes_after);
    Ok(report)
}

/// `e` with what the collection was doing and what its failure leaves, when it is a
/// backend's error (PostgreSQL's or S3's).
fn within(e: Error, doing: &str, leaves: &str) -> Error {
    match e {
        Error::Backend { url, reason } => {
            Error::Backend { url, reason: format!("{doing}: {reason}; {leaves}") }
        }
        other => other,
    }
}

/// Every blob a record left in the catalog references (step 2), read in pages of [`PAGE`]
/// records in key order, then the chunks of the referenced manifests.
fn mark(fleet: &Fleet, core: &Core, c: &mut Conn) -> Result<HashSet<BlobId>> {
    let mut live = HashSet::new();
    let mut archive_index: HashMap<BlobId, BlobId> = HashMap::new();
    let mut body = |id: &BlobId| {
        core.get_blob(id, core.opts.verify).map(Some).map_err(|e| {
            fleet.bad(format!(
                "the body of a message, blob {id}, could not be read ({e}); expected every blob a record \
                 references to be stored"
            ))
        })
    };
    // Batch ids start at 1: (0, -1) is before every record.
    let mut after: (i64, i32) = (0, -1);
    loop {
        let rows = c
            .query(
                "SELECT batch, idx, kind, payload FROM ut_records WHERE (batch, idx) > ($1, $2) \
                 ORDER BY batch, idx LIMIT $3",
                &[&after.0, &after.1, &PAGE],
            )
            .map_err(|e| fleet.err("read the catalog's records", &e))?;
        for row in &rows {
            after = (fleet.col(row, 0)?, fleet.col(row, 1)?);
            let k: i16 = fleet.col(row, 2)?;
            let payload: &[u8] = fleet.col(row, 3)?;
            let k = u8::try_from(k).ok().and_then(Kind::of).ok_or_else(|| {
                fleet.bad(format!("record kind {k} unknown to this build (written by a newer one?)"))
            })?;
            let bad = |why: String| fleet.bad(format!("a catalog record of kind {k}: {why}"));
            if k == Kind::Archive {
                let a: ArchiveRec = record::decode(payload, "archive").map_err(bad)?;
                archive_index.insert(BlobId(a.id), BlobId(a.index));
            }
            if let Some(Holds::Grant(ids) | Holds::Refs(ids)) = holds(k, payload, &bad, &mut body)? {
                live.extend(ids);
            }
        }
        if (rows.len() as i64) < PAGE {
            break;
        }
    }
    let indexes: Vec<BlobId> = live.iter().filter_map(|id| archive_index.get(id).copied()).collect();
    live.extend(indexes);
    drop(archive_index);
    mark_chunks(fleet, c, &mut live)?;
    Ok(live)
}

/// Adds to `live` every chunk (and delta base) of the manifests it holds, transitively;
/// only the manifests' ids are listed (in pages), and only the live ones are read.
fn mark_chunks(fleet: &Fleet, c: &mut Conn, live: &mut HashSet<BlobId>) -> Result<()> {
    let mut manifests = HashSet::new();
    let mut after: Vec<u8> = Vec::new();
    loop {
        let rows = c
            .query(
                "SELECT id FROM ut_blobs WHERE kind = $1 AND id > $2 ORDER BY id LIMIT $3",
                &[&i16::from(Kind::Manifest), &after.as_slice(), &PAGE],
            )
            .map_err(|e| fleet.err("list manifests", &e))?;
        for row in &rows {
            let id = fleet.blob_id(row, 0)?;
            after = id.0.to_vec();
            manifests.insert(id);
        }
        if (rows.len() as i64) < PAGE {
            break;
        }
    }
    let mut todo: Vec<BlobId> = live.iter().filter(|id| manifests.contains(*id)).copied().collect();
    while let Some(id) = todo.pop() {
        let Some(m) = fleet.stored(&id)? else { continue };
        let m = Manifest::decode(&m.payload)
            .map_err(|why| fleet.bad(format!("manifest {id}{}: {why}", m.from)))?;
        for r in m.refs() {
            if live.insert(r) && manifests.contains(&r) {
                todo.push(r);
            }
        }
    }
    Ok(())
}

/// Deletes the blobs of `group` that are still unreferenced-and-old when their rows are
/// locked; returns how many went.
fn sweep(fleet: &Fleet, c: &mut Conn, group: &[BlobId], secs: f64) -> Result<u64> {
    let ids: Vec<&[u8]> = group.iter().map(|id| id.as_bytes().as_slice()).collect();
    // Doomed first, committed: a writer that finds the row doomed uploads the blob again
    // instead of trusting an object that may be going.
    c.execute(
        "UPDATE ut_blobs SET doomed = true WHERE id = ANY($1) AND stored_at < now() - make_interval(secs => $2)",
        &[&ids, &secs],
    )
    .map_err(|e| fleet.err("mark blobs doomed", &e))?;
    c.begin("").map_err(|e| fleet.err("begin the sweep", &e))?;
    let rows = c
        .query(
            "SELECT id, octet_length(payload) = 0 FROM ut_blobs WHERE id = ANY($1) AND doomed ORDER BY id FOR UPDATE",
            &[&ids],
        )
        .map_err(|e| fleet.err("lock doomed blobs", &e))?;
    let mut gone: Vec<Vec<u8>> = Vec::with_capacity(rows.len());
    for row in &rows {
        let id = fleet.blob_id(row, 0)?;
        if fleet.col::<bool>(row, 1)?
            && let Some(s3) = &fleet.s3
        {
            s3.delete(&s3.key(&id.to_string()))?;
        }
        gone.push(id.0.to_vec());
    }
    c.execute("DELETE FROM ut_blobs WHERE id = ANY($1)", &[&gone])
        .map_err(|e| fleet.err("delete doomed blobs", &e))?;
    c.batch_execute("COMMIT").map_err(|e| fleet.err("commit the sweep", &e))?;
    // The rows were locked in this transaction: each one listed is deleted.
    Ok(gone.len() as u64)
}

/// Deletes the objects of `group` that have no `ut_blobs` row. In one transaction, a doomed
/// row is inserted for each id that has none (an id with a row, or whose row a writer is
/// inserting, is skipped: its writer owns it), which holds the id against writers: a writer's
/// upsert of the same id waits for this transaction, then inserts its own row and, finding
/// the object gone, uploads it again. Then the objects and the rows go; returns how many.
fn sweep_orphans(fleet: &Fleet, c: &mut Conn, group: &[BlobId]) -> Result<u64> {
    let Some(s3) = &fleet.s3 else { return Ok(0) };
    if group.is_empty() {
        return Ok(0);
    }
    let ids: Vec<&[u8]> = group.iter().map(|id| id.as_bytes().as_slice()).collect();
    c.begin("").map_err(|e| fleet.err("begin the sweep of objects without a row", &e))?;
    let rows = c
        .query(
            "INSERT INTO ut_blobs (id, kind, codec, raw_len, payload, doomed) \
             SELECT i, 0, 0, 0, ''::bytea, true FROM unnest($1::bytea[]) AS i \
             ON CONFLICT (id) DO NOTHING RETURNING id",
            &[&ids],
        )
        .map_err(|e| fleet.err("hold objects without a row", &e))?;
    let mut gone: Vec<Vec<u8>> = Vec::with_capacity(rows.len());
    for row in &rows {
        let id = fleet.blob_id(row, 0)?;
        s3.delete(&s3.key(&id.to_string()))?;
        gone.push(id.0.to_vec());
    }
    c.execute("DELETE FROM ut_blobs WHERE id = ANY($1)", &[&gone])
        .map_err(|e| fleet.err("delete the held rows", &e))?;
    c.batch_execute("COMMIT").map_err(|e| fleet.err("commit the sweep of objects without a row", &e))?;
    Ok(gone.len() as u64)
}

/// Records in the catalog, and the bytes of their payloads and of blob payloads kept in
/// PostgreSQL.
fn catalog_size(fleet: &Fleet, c: &mut Conn) -> Result<(u64, u64)> {
    let row = c
        .query_opt(
            "SELECT (SELECT count(*) FROM ut_records), \
             (SELECT coalesce(sum(octet_length(payload)), 0) FROM ut_records) \
             + (SELECT coalesce(sum(octet_length(payload)), 0) FROM ut_blobs)",
            &[],
        )
        .map_err(|e| fleet.err("measure the catalog", &e))?
        .ok_or_else(|| fleet.bad("measure the catalog: expected a row, found none".into()))?;
    let bytes: i64 = fleet.col(&row, 1)?;
    Ok((fleet.num(&row, 0)?, u64::try_from(bytes).unwrap_or(0)))
}
