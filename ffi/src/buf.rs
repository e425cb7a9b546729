//! Buffers handed to C (`undertext_buf_t`): `{ptr, len}`, freed with `undertext_buf_free`.
//!
//! Every buffer handed out is recorded; freeing one that is not recorded (never handed out,
//! or already freed through another copy of the struct) is an error, never a double free.

use std::collections::HashMap;
use std::sync::LazyLock;

use parking_lot::Mutex;

use crate::args;
use crate::guard::call;
use crate::status::{FfiError, FfiResult, Status, UNDERTEXT_BAD_BUFFER};

/// Bytes handed to C: `len` bytes at `ptr` (UTF-8 text or JSON unless documented
/// otherwise; no terminator). An empty buffer is `{NULL, 0}`. Free with
/// `undertext_buf_free`, which also resets the struct to `{NULL, 0}`.
#[repr(C)]
#[derive(Debug)]
pub struct Buf {
    /// The first byte, or NULL for an empty buffer.
    pub ptr: *mut u8,
    /// Length in bytes.
    pub len: usize,
}

/// Live buffers: address -> length.
static LIVE: LazyLock<Mutex<HashMap<usize, usize>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

impl Buf {
    /// Hands `bytes` to C.
    pub(crate) fn new(bytes: Vec<u8>) -> Buf {
        if bytes.is_empty() {
            return Buf { ptr: std::ptr::null_mut(), len: 0 };
        }
        let len = bytes.len();
        let ptr = Box::into_raw(bytes.into_boxed_slice()).cast::<u8>();
        LIVE.lock().insert(ptr as usize, len);
        Buf { ptr, len }
    }

    /// Hands a string to C.
    pub(crate) fn text(s: String) -> Buf {
        Buf::new(s.into_bytes())
    }
}

/// Frees `buf` if it is live; an unknown pointer or a length that does not match is an error.
fn free(buf: &mut Buf) -> FfiResult<()> {
    if buf.ptr.is_null() {
        if buf.len != 0 {
            return Err(FfiError::new(
                UNDERTEXT_BAD_BUFFER,
                format!("buffer {{NULL, {}}}: a NULL buffer must have length 0", buf.len),
            ));
        }
        return Ok(());
    }
    let addr = buf.ptr as usize;
    let mut live = LIVE.lock();
    match live.get(&addr) {
        Some(&len) if len == buf.len => {
            live.remove(&addr);
        }
        Some(&len) => {
            return Err(FfiError::new(
                UNDERTEXT_BAD_BUFFER,
                format!("buffer at {addr:#x}: expected length {len}, found {}", buf.len),
            ));
        }
        None => {
            return Err(FfiError::new(
                UNDERTEXT_BAD_BUFFER,
                format!("buffer at {addr:#x}: not handed out by undertext, or already freed"),
            ));
        }
    }
    drop(live);
    let slice = std::ptr::slice_from_raw_parts_mut(buf.ptr, buf.len);
    // SAFETY: `addr` was produced by `Box::into_raw` of a boxed slice of exactly `len`
    // bytes in `Buf::new` and was still recorded as live (removed just now, under the lock,
    // so no other thread can free it too).
    drop(unsafe { Box::from_raw(slice) });
    buf.ptr = std::ptr::null_mut();
    buf.len = 0;
    Ok(())
}

/// Frees a buffer returned by the library and resets `*buf` to `{NULL, 0}`. Freeing
/// `{NULL, 0}` does nothing; freeing a buffer twice (through a copy of the struct) or one
/// the library did not hand out returns `UNDERTEXT_BAD_BUFFER` and touches no memory.
/// Any thread may free any buffer.
///
/// # Safety
/// `buf` is NULL or points to a writable `undertext_buf_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_buf_free(buf: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract: `buf` is NULL or a valid, writable struct.
        free(unsafe { args::in_out(buf, "buf") }?)
    })
}
