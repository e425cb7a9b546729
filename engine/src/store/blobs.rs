//! `put_blob` and `get_blob`: content-addressed, deduplicated, verified.

use std::ops::Range;

use super::Store;
use super::core::Txn;
use crate::blob::{Blob, BlobId, Verify};
use crate::error::Result;

pub use super::core::MAX_BLOB_LEN;

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
        Ok(self.put_blobs(&[content])?[0])
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
        let core = &self.inner.core;
        let mut txn = Txn::default();
        let mut ids = Vec::with_capacity(contents.len());
        let mut wait = None;
        for c in contents {
            let (id, existing) = txn.blob(core, c)?;
            ids.push(id);
            wait = wait.max(existing);
        }
        let committed = core.append(txn)?;
        core.wait_durable(wait.map_or(committed.end, |w| w.max(committed.end)))?;
        Ok(ids)
    }

    /// Returns the blob `id`, verified against its hash (see [`Store::get_blob_with`]).
    ///
    /// A blob that was never stored is [`Error::NotFound`](crate::Error::NotFound); stored
    /// bytes that fail their checksum or hash are [`Error::Corrupt`](crate::Error::Corrupt)
    /// naming segment and offset.
    pub fn get_blob(&self, id: &BlobId) -> Result<Blob> {
        self.get_blob_with(id, self.inner.core.opts.verify)
    }

    /// Returns the blob `id`, checking as much as `verify` asks. Uncompressed blobs in
    /// sealed segments are returned without a copy.
    pub fn get_blob_with(&self, id: &BlobId, verify: Verify) -> Result<Blob> {
        self.inner.core.get_blob(id, verify)
    }

    /// Bytes `range` of blob `id`: for a chunked blob (see [`Options::chunk_threshold`]),
    /// only the chunks the range overlaps are read. A range past the end is an error
    /// giving the length.
    ///
    /// [`Options::chunk_threshold`]: crate::Options::chunk_threshold
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    /// let id = store.put_blob(&big)?;
    /// assert_eq!(store.get_blob_range(&id, 100_000..100_010)?, &big[100_000..100_010]);
    /// assert_eq!(store.blob_len(&id)?, 300_000);
    /// assert!(store.get_blob_range(&id, 0..300_001).is_err());
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn get_blob_range(&self, id: &BlobId, range: Range<u64>) -> Result<Vec<u8>> {
        self.inner.core.get_blob_range(id, range, self.inner.core.opts.verify)
    }

    /// Length of blob `id` in bytes (a chunked blob's chunks are not read).
    pub fn blob_len(&self, id: &BlobId) -> Result<u64> {
        self.inner.core.blob_len(id)
    }

    /// True when a blob with this id is stored.
    pub fn contains_blob(&self, id: &BlobId) -> Result<bool> {
        Ok(self.inner.core.index.blob(id)?.is_some())
    }
}
