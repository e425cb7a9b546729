//! Blobs: content-addressed bytes the harness stores itself (attachments, tool inputs),
//! read back whole or by byte range, each through an owner's grant: `owner` reads a blob it
//! stored (or archived, or was given with an append), and a blob it holds no grant on is
//! `UNDERTEXT_NOT_FOUND`, exactly as a blob never stored.

use undertext::{BlobId, Store};

use crate::archives::{BlobIdC, blob_id};
use crate::args::{self, Str};
use crate::buf::Buf;
use crate::guard::call;
use crate::handles::StoreHandle;
use crate::status::{FfiError, FfiResult, Status};

/// The largest blob `undertext_put_blob` accepts, in bytes (2^30 - 32; a literal so that
/// the header can show it; a unit test holds it equal to the engine's limit).
pub const UNDERTEXT_MAX_BLOB_LEN: u64 = 1_073_741_792;

/// Checks `start..end` against the length of blob `id`: reversed is
/// `UNDERTEXT_INVALID_ARGUMENT`, past the end `UNDERTEXT_OUT_OF_RANGE` giving the length.
fn check_range(store: &Store, owner: &str, id: &BlobId, start: u64, end: u64) -> FfiResult<()> {
    if start > end {
        return Err(FfiError::invalid(format!("byte range {start}..{end} is reversed")));
    }
    let len = store.blob_len(owner, id)?;
    if end > len {
        return Err(FfiError::out_of_range(format!(
            "byte range {start}..{end} is past the end: blob {id} holds {len} bytes"
        )));
    }
    Ok(())
}

/// Stores `len` bytes at `data` (any bytes, not only UTF-8) for `owner` and returns their
/// content address in `*out`; the blob is granted to `owner` (its own grant, which
/// `undertext_gc` keeps). The same bytes are stored once and always get the same id; in
/// `GROUP` and `IMMEDIATE` durability the blob is durable when this returns. Large blobs
/// are stored in content-defined chunks, so an edited copy stores only its new chunks.
/// More than `UNDERTEXT_MAX_BLOB_LEN` bytes is `UNDERTEXT_INVALID_ARGUMENT`.
///
/// # Safety
/// `owner` is a valid string argument; `data` points to `len` readable bytes (NULL only
/// when `len` is 0); `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_put_blob(
    store: StoreHandle,
    owner: Str,
    data: *const u8,
    len: usize,
    out: *mut BlobIdC,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (owner, data, out) = unsafe {
            (args::text(owner, "owner")?, args::array(data, len, "data")?, args::output(out, "out")?)
        };
        let (s, _) = store.object()?;
        let id = s.put_blob(owner, data)?;
        out.set(BlobIdC { bytes: *id.as_bytes() });
        Ok(())
    })
}

/// The whole blob `id` of `owner` in `*out` (its bytes, verified against the id; no
/// terminator). A blob `owner` holds no grant on (never stored, or stored only by other
/// owners) is `UNDERTEXT_NOT_FOUND`; damaged bytes are `UNDERTEXT_CORRUPT` naming segment and
/// offset. An empty blob is `{NULL, 0}`.
///
/// # Safety
/// `owner` is a valid string argument; `id` is NULL or valid; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_get_blob(
    store: StoreHandle,
    owner: Str,
    id: *const BlobIdC,
    out: *mut Buf,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (owner, id, out) =
            unsafe { (args::text(owner, "owner")?, blob_id(id, "id")?, args::output(out, "out")?) };
        let (s, _) = store.object()?;
        let blob = s.get_blob(owner, &id)?;
        out.set(Buf::new(blob.to_vec()));
        Ok(())
    })
}

/// Bytes `start .. end` of blob `id` of `owner` in `*out`. Of a chunked blob only the
/// chunks the range overlaps are read. `start > end` is `UNDERTEXT_INVALID_ARGUMENT`; `end`
/// past the blob's length is `UNDERTEXT_OUT_OF_RANGE` (the message gives the length); an
/// empty range is `{NULL, 0}`; a blob `owner` holds no grant on is `UNDERTEXT_NOT_FOUND`.
///
/// # Safety
/// `owner` is a valid string argument; `id` is NULL or valid; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_get_blob_range(
    store: StoreHandle,
    owner: Str,
    id: *const BlobIdC,
    start: u64,
    end: u64,
    out: *mut Buf,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (owner, id, out) =
            unsafe { (args::text(owner, "owner")?, blob_id(id, "id")?, args::output(out, "out")?) };
        let (s, _) = store.object()?;
        check_range(&s, owner, &id, start, end)?;
        out.set(Buf::new(s.get_blob_range(owner, &id, start..end)?));
        Ok(())
    })
}

/// The length of blob `id` of `owner` in bytes, in `*out_len` (a chunked blob's chunks are
/// not read). A blob `owner` holds no grant on is `UNDERTEXT_NOT_FOUND`.
///
/// # Safety
/// `owner` is a valid string argument; `id` is NULL or valid; `out_len` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_blob_len(
    store: StoreHandle,
    owner: Str,
    id: *const BlobIdC,
    out_len: *mut u64,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (owner, id, out) =
            unsafe { (args::text(owner, "owner")?, blob_id(id, "id")?, args::output(out_len, "out_len")?) };
        let (s, _) = store.object()?;
        out.set(s.blob_len(owner, &id)?);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_max_blob_len_of_the_header_is_the_engines() {
        assert_eq!(super::UNDERTEXT_MAX_BLOB_LEN, undertext::MAX_BLOB_LEN as u64);
    }
}
