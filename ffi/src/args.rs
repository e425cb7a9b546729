//! Reading arguments that come from C: strings with explicit lengths, pointers to inputs
//! and out-parameters. Every check that C could get wrong is made here, once.

use crate::status::{FfiError, FfiResult, UNDERTEXT_INVALID_UTF8, UNDERTEXT_NULL_POINTER};

/// A UTF-8 string passed to the library: `len` bytes at `ptr`, no terminator needed.
/// `ptr` may be NULL only when `len` is 0 (the empty string); where a string is optional,
/// NULL `ptr` means "absent".
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Str {
    /// The first byte (NULL only for an empty or absent string).
    pub ptr: *const u8,
    /// Length in bytes.
    pub len: usize,
}

/// Reads string argument `what`.
///
/// # Safety
/// When `s.ptr` is not NULL it must point to `s.len` readable bytes that stay valid and
/// unchanged for `'a`.
pub(crate) unsafe fn text<'a>(s: Str, what: &str) -> FfiResult<&'a str> {
    let bytes = if s.ptr.is_null() {
        if s.len != 0 {
            return Err(FfiError::new(
                UNDERTEXT_NULL_POINTER,
                format!("{what}: expected a pointer to {} bytes, found NULL", s.len),
            ));
        }
        &[][..]
    } else {
        if s.len > isize::MAX as usize {
            return Err(FfiError::invalid(format!("{what}: length {} is larger than isize::MAX", s.len)));
        }
        // SAFETY: non-NULL, and the caller guarantees `len` readable bytes valid for 'a;
        // u8 has alignment 1 and the length is at most isize::MAX (checked above).
        unsafe { std::slice::from_raw_parts(s.ptr, s.len) }
    };
    std::str::from_utf8(bytes).map_err(|e| {
        FfiError::new(
            UNDERTEXT_INVALID_UTF8,
            format!("{what}: expected UTF-8, found an invalid sequence at byte {}", e.valid_up_to()),
        )
    })
}

/// Reads a directory path argument: not empty, and without a NUL byte (a file system path
/// cannot hold one; the message says where it is rather than carry it).
///
/// # Safety
/// As [`text`].
pub(crate) unsafe fn path<'a>(s: Str, what: &str, expected: &str) -> FfiResult<&'a str> {
    // SAFETY: forwarded contract of this function.
    let p = unsafe { text(s, what) }?;
    if p.is_empty() {
        return Err(FfiError::invalid(format!("{what}: expected {expected}, found an empty string")));
    }
    if let Some(at) = p.bytes().position(|b| b == 0) {
        return Err(FfiError::invalid(format!(
            "{what}: expected {expected} without NUL bytes, found a NUL at byte {at} of {}",
            p.len()
        )));
    }
    Ok(p)
}

/// Reads an optional string argument: NULL `ptr` is `None`.
///
/// # Safety
/// As [`text`].
pub(crate) unsafe fn opt_text<'a>(s: Str, what: &str) -> FfiResult<Option<&'a str>> {
    if s.ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded contract of this function.
    unsafe { text(s, what) }.map(Some)
}

fn null(what: &str) -> FfiError {
    FfiError::new(UNDERTEXT_NULL_POINTER, format!("{what}: expected a pointer, found NULL"))
}

fn misaligned(what: &str, addr: usize, align: usize) -> FfiError {
    FfiError::new(
        UNDERTEXT_NULL_POINTER,
        format!("{what}: expected a pointer aligned to {align} bytes, found address {addr:#x}"),
    )
}

/// Borrows input `what`.
///
/// # Safety
/// When not NULL, `p` must point to a valid, initialized `T` that outlives `'a`.
pub(crate) unsafe fn input<'a, T>(p: *const T, what: &str) -> FfiResult<&'a T> {
    if p.is_null() {
        return Err(null(what));
    }
    if !p.is_aligned() {
        return Err(misaligned(what, p as usize, align_of::<T>()));
    }
    // SAFETY: non-NULL and aligned (checked); the caller guarantees a valid T for 'a.
    Ok(unsafe { &*p })
}

/// Borrows an in-out argument `what` (read, then written).
///
/// # Safety
/// When not NULL, `p` must point to a valid, initialized `T` that outlives `'a` and is not
/// aliased during the call.
pub(crate) unsafe fn in_out<'a, T>(p: *mut T, what: &str) -> FfiResult<&'a mut T> {
    if p.is_null() {
        return Err(null(what));
    }
    if !p.is_aligned() {
        return Err(misaligned(what, p as usize, align_of::<T>()));
    }
    // SAFETY: non-NULL and aligned (checked); the caller guarantees a valid, unaliased T.
    Ok(unsafe { &mut *p })
}

/// Borrows out-parameter `what`.
///
/// # Safety
/// When not NULL, `p` must point to writable memory for a `T` (initialized or not is fine:
/// it is only written) that outlives `'a` and is not aliased during the call.
pub(crate) unsafe fn output<'a, T>(p: *mut T, what: &str) -> FfiResult<Out<'a, T>> {
    if p.is_null() {
        return Err(null(what));
    }
    if !p.is_aligned() {
        return Err(misaligned(what, p as usize, align_of::<T>()));
    }
    Ok(Out { p, _life: std::marker::PhantomData })
}

/// A checked out-parameter: written once, at the end of a successful call.
pub(crate) struct Out<'a, T> {
    p: *mut T,
    _life: std::marker::PhantomData<&'a mut T>,
}

impl<T> Out<'_, T> {
    /// Writes the result (without reading or dropping what was there: C memory).
    pub(crate) fn set(self, value: T) {
        // SAFETY: `p` is non-NULL, aligned and writable for a T (checked by `output`, and
        // guaranteed by its caller); `write` does not drop the old, possibly uninit value.
        unsafe { self.p.write(value) }
    }
}

/// Borrows an array argument of `n` elements; NULL is allowed when `n` is 0.
///
/// # Safety
/// When not NULL, `p` must point to `n` valid, initialized `T`s that outlive `'a`.
pub(crate) unsafe fn array<'a, T>(p: *const T, n: usize, what: &str) -> FfiResult<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(FfiError::new(
            UNDERTEXT_NULL_POINTER,
            format!("{what}: expected a pointer to {n} elements, found NULL"),
        ));
    }
    if !p.is_aligned() {
        return Err(misaligned(what, p as usize, align_of::<T>()));
    }
    if n.checked_mul(size_of::<T>()).is_none_or(|b| b > isize::MAX as usize) {
        return Err(FfiError::invalid(format!("{what}: {n} elements are more than fit in memory")));
    }
    // SAFETY: non-NULL, aligned, size within isize::MAX (checked); the caller guarantees
    // `n` initialized elements valid for 'a.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}
