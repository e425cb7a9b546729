//! `put_blob` and `get_blob`: content-addressed, deduplicated, verified.

use super::Store;
use crate::blob::{Blob, BlobId, Verify, compress, decompress};
use crate::error::{Error, Result};
use crate::log::format::{self, BatchBuf, RecordSpec, kind};
use crate::log::{Location, Position};

/// Largest blob stored as one record (1 GiB minus the id).
pub const MAX_BLOB_LEN: usize = format::MAX_RECORD_LEN - 32;

impl Store {
    /// Stores `content` and returns its [`BlobId`]. Content already present is not written
    /// again. In `Group` and `Immediate` durability the blob is durable when this returns.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// let a = store.put_blob(b"same bytes")?;
    /// let b = store.put_blob(b"same bytes")?;
    /// assert_eq!(a, b);
    /// assert_eq!(a, undertext::BlobId::of(b"same bytes"));
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn put_blob(&self, content: &[u8]) -> Result<BlobId> {
        if content.len() > MAX_BLOB_LEN {
            return Err(Error::InvalidArgument(format!(
                "blob of {} bytes: at most {MAX_BLOB_LEN} bytes fit one record",
                content.len()
            )));
        }
        let id = BlobId::of(content);
        let inner = &self.inner;
        if let Some(loc) = inner.index.blob(&id)? {
            // Present, but perhaps written by a commit still waiting for its fsync.
            inner.log.wait_durable(record_end(loc))?;
            return Ok(id);
        }
        self.commit_blobs(&[(id, content)])?;
        Ok(id)
    }

    /// Stores several blobs in one transaction: after a crash either all of them are
    /// present or none of the ones that were new. Returns their ids in order.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// let ids = store.put_blobs(&[b"call".as_slice(), b"result".as_slice()])?;
    /// assert_eq!(&*store.get_blob(&ids[1])?, b"result");
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn put_blobs(&self, contents: &[&[u8]]) -> Result<Vec<BlobId>> {
        let mut ids = Vec::with_capacity(contents.len());
        let mut new: Vec<(BlobId, &[u8])> = Vec::new();
        let mut wait = None;
        for c in contents {
            if c.len() > MAX_BLOB_LEN {
                return Err(Error::InvalidArgument(format!(
                    "blob of {} bytes: at most {MAX_BLOB_LEN} bytes fit one record",
                    c.len()
                )));
            }
            let id = BlobId::of(c);
            ids.push(id);
            if new.iter().any(|(n, _)| *n == id) {
                continue;
            }
            match self.inner.index.blob(&id)? {
                Some(loc) => wait = wait.max(Some(record_end(loc))),
                None => new.push((id, c)),
            }
        }
        if let Some(end) = wait {
            self.inner.log.wait_durable(end)?;
        }
        if !new.is_empty() {
            self.commit_blobs(&new)?;
        }
        Ok(ids)
    }

    /// Writes blob records as one batch and waits for durability.
    fn commit_blobs(&self, blobs: &[(BlobId, &[u8])]) -> Result<()> {
        let inner = &self.inner;
        let mut batch = BatchBuf::new();
        let mut placed = Vec::with_capacity(blobs.len());
        for (id, content) in blobs {
            let (codec, stored) = compress(inner.opts.compression, content);
            let body = stored.as_deref().unwrap_or(content);
            let parts: [&[u8]; 2] = [id.as_bytes(), body];
            let spec = RecordSpec {
                kind: kind::BLOB,
                codec,
                raw_len: content.len() as u32,
                parts: &parts,
            };
            let rel = batch.push(spec).map_err(Error::InvalidArgument)?;
            placed.push((*id, rel, (32 + body.len()) as u32));
        }
        let frame = batch.finish();
        let bytes = frame.len() as u64;
        let end = inner.log.append(frame, |start, end, next_txid| {
            let entries: Vec<_> = placed
                .iter()
                .map(|&(id, rel, len)| {
                    (
                        id,
                        Location {
                            segment: start.segment,
                            offset: start.offset + rel,
                            len,
                        },
                    )
                })
                .collect();
            inner
                .index
                .mem
                .write()
                .note_batch(&entries, end, next_txid, bytes);
        })?;
        inner.log.wait_durable(end)
    }

    /// Returns the blob `id`, verified against its hash (see [`Store::get_blob_with`]).
    ///
    /// A blob that was never stored is [`Error::NotFound`]; stored bytes that fail their
    /// checksum or hash are [`Error::Corrupt`] naming segment and offset.
    pub fn get_blob(&self, id: &BlobId) -> Result<Blob> {
        self.get_blob_with(id, self.inner.opts.verify)
    }

    /// Returns the blob `id`, checking as much as `verify` asks. Uncompressed blobs in
    /// sealed segments are returned without a copy.
    pub fn get_blob_with(&self, id: &BlobId, verify: Verify) -> Result<Blob> {
        let inner = &self.inner;
        let loc = inner.index.blob(id)?.ok_or_else(|| Error::NotFound {
            what: format!("blob {id}"),
        })?;
        let rec = inner.reader.read(&inner.log, loc, verify)?;
        let corrupt = |why: String| Error::corrupt(loc.segment, loc.offset, why);
        if rec.kind != kind::BLOB || rec.payload.len() < 32 {
            return Err(corrupt(format!(
                "expected a blob record, found kind {} of {} bytes",
                rec.kind,
                rec.payload.len()
            )));
        }
        if verify != Verify::None && rec.payload[..32] != id.0 {
            return Err(corrupt(format!(
                "record holds blob {}, index says {id}",
                hex(&rec.payload[..32])
            )));
        }
        let body = rec.payload.skip(32);
        let data = if rec.codec == crate::blob::codec_flag_none() {
            body
        } else {
            Blob::owned(decompress(rec.codec, &body, rec.raw_len as usize).map_err(corrupt)?)
        };
        if verify == Verify::Hash && BlobId::of(&data) != *id {
            return Err(corrupt(format!(
                "content hash: expected {id}, found {}",
                BlobId::of(&data)
            )));
        }
        Ok(data)
    }

    /// True when a blob with this id is stored.
    pub fn contains_blob(&self, id: &BlobId) -> Result<bool> {
        Ok(self.inner.index.blob(id)?.is_some())
    }
}

/// The end of a record: durable once the log is synced at least this far.
fn record_end(loc: Location) -> Position {
    Position::new(
        loc.segment,
        loc.offset + (format::RECORD_HEADER_LEN as u64) + loc.len as u64,
    )
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
