//! `undertext_chat_append_with_blobs`: blobs and the messages attaching them written in one
//! transaction (one log sync), with the bytes passed as `undertext_bytes_t` slices; and
//! `undertext_blob_id_of`, the id a message names before its blob is stored.

use undertext::BlobId;

use crate::archives::BlobIdC;
use crate::args;
use crate::guard::call;
use crate::handles::ChatHandle;
use crate::messages::{MessageIn, messages_in};
use crate::status::{FfiError, FfiResult, Status, UNDERTEXT_INTERNAL, UNDERTEXT_NULL_POINTER};

/// Bytes passed to the library: `len` bytes at `ptr` (any bytes, not only UTF-8). `ptr`
/// may be NULL only when `len` is 0.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BytesIn {
    /// The first byte (NULL only when `len` is 0).
    pub ptr: *const u8,
    /// Length in bytes.
    pub len: usize,
}

/// Reads the `n` byte slices at `blobs`.
///
/// # Safety
/// `blobs` is NULL (only when `n` is 0) or points to `n` valid `BytesIn`, each pointing to
/// `len` readable bytes that stay valid for `'a`.
unsafe fn blobs_in<'a>(blobs: *const BytesIn, n: usize, what: &str) -> FfiResult<Vec<&'a [u8]>> {
    // SAFETY: forwarded contract of this function (NULL and alignment checked by `array`).
    let slices = unsafe { args::array(blobs, n, what) }?;
    slices
        .iter()
        .enumerate()
        // SAFETY: each slice points to `len` readable bytes (forwarded contract).
        .map(|(i, b)| unsafe { args::array(b.ptr, b.len, &format!("{what}[{i}]")) })
        .collect()
}

/// The caller's array of ids, checked up front and written only on success.
struct IdsOut {
    p: *mut BlobIdC,
    n: usize,
}

impl IdsOut {
    /// Checks `p` as room for `n` ids (NULL allowed only when `n` is 0). Nothing is read
    /// through it: the caller's memory may be uninitialized.
    fn new(p: *mut BlobIdC, n: usize, what: &str) -> FfiResult<IdsOut> {
        if n > 0 && p.is_null() {
            return Err(FfiError::new(
                UNDERTEXT_NULL_POINTER,
                format!("{what}: expected room for {n} blob ids, found NULL"),
            ));
        }
        if n > 0 && !p.is_aligned() {
            return Err(FfiError::new(
                UNDERTEXT_NULL_POINTER,
                format!(
                    "{what}: expected a pointer aligned to {} bytes, found address {:#x}",
                    align_of::<BlobIdC>(),
                    p as usize
                ),
            ));
        }
        if n.checked_mul(size_of::<BlobIdC>()).is_none_or(|b| b > isize::MAX as usize) {
            return Err(FfiError::invalid(format!("{what}: {n} ids are more than fit in memory")));
        }
        Ok(IdsOut { p, n })
    }

    /// Writes `ids` (as many as were announced).
    fn set(self, ids: &[BlobId]) -> FfiResult<()> {
        if ids.len() != self.n {
            return Err(FfiError::new(
                UNDERTEXT_INTERNAL,
                format!("expected {} blob ids from the engine, found {}", self.n, ids.len()),
            ));
        }
        for (i, id) in ids.iter().enumerate() {
            // SAFETY: `i < n`; `p` is non-NULL and aligned (checked by `new`) and writable
            // for `n` ids, unaliased (the contract of `undertext_chat_append_with_blobs`);
            // `write` neither reads nor drops what was there.
            unsafe { self.p.add(i).write(BlobIdC { bytes: *id.as_bytes() }) }
        }
        Ok(())
    }
}

/// The content address `undertext_put_blob` would give the `len` bytes at `data`, in
/// `*out`, without storing anything: what a message attaching a blob of the same
/// `undertext_chat_append_with_blobs` call names (hex via `undertext_blob_id_hex`).
///
/// # Safety
/// `data` points to `len` readable bytes (NULL only when `len` is 0); `out` is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_blob_id_of(data: *const u8, len: usize, out: *mut BlobIdC) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (data, out) = unsafe { (args::array(data, len, "data")?, args::output(out, "out")?) };
        out.set(BlobIdC { bytes: *BlobId::of(data).as_bytes() });
        Ok(())
    })
}

/// Stores the `n_blobs` byte slices at `blobs` and appends the `n` messages at `messages`
/// in ONE transaction: one log sync makes both durable (`GROUP`, `IMMEDIATE`), and after a
/// crash all of it is there or none. A message may attach (`UNDERTEXT_PART_ATTACHMENT`) a
/// blob of this call or one stored before; an attachment naming any other blob is
/// `UNDERTEXT_NOT_FOUND` and nothing is written. The blobs' ids, in order, are written to
/// `out_ids[0 .. n_blobs]`; the messages' seqs are `*out_start .. *out_end`. The same bytes
/// are stored once; a blob over `UNDERTEXT_MAX_BLOB_LEN` is `UNDERTEXT_INVALID_ARGUMENT`.
///
/// # Safety
/// `blobs` points to `n_blobs` valid byte slices and `messages` to `n` valid messages (each
/// NULL only when its count is 0); `out_ids` is NULL (allowed only when `n_blobs` is 0) or
/// writable for `n_blobs` ids; `out_start` and `out_end` are NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_append_with_blobs(
    chat: ChatHandle,
    blobs: *const BytesIn,
    n_blobs: usize,
    messages: *const MessageIn,
    n: usize,
    out_ids: *mut BlobIdC,
    out_start: *mut u64,
    out_end: *mut u64,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (bs, ms, ids_slot, start, end) = unsafe {
            (
                blobs_in(blobs, n_blobs, "blobs")?,
                messages_in(messages, n, "messages")?,
                IdsOut::new(out_ids, n_blobs, "out_ids")?,
                args::output(out_start, "out_start")?,
                args::output(out_end, "out_end")?,
            )
        };
        let (c, _) = chat.object()?;
        let (ids, r) = c.append_with_blobs(&bs, ms)?;
        ids_slot.set(&ids)?;
        start.set(r.start);
        end.set(r.end);
        Ok(())
    })
}
