//! Archives: storing large outputs, reading any range back exactly, previews and pins.

use undertext::{ArchiveRef, BlobId, Store, Unit};

use crate::args::{self, Str};
use crate::buf::Buf;
use crate::guard::call;
use crate::handles::{ChatHandle, StoreHandle};
use crate::status::{FfiError, FfiResult, Status, UNDERTEXT_BUFFER_TOO_SMALL};

/// Unit: Unicode scalar values (Python `str` indexes).
pub const UNDERTEXT_UNIT_CHARS: u32 = 0;
/// Unit: UTF-16 code units (JavaScript string indexes).
pub const UNDERTEXT_UNIT_UTF16: u32 = 1;
/// Unit: UTF-8 bytes.
pub const UNDERTEXT_UNIT_BYTES: u32 = 2;
/// Unit: lines (line `i` starts after the `i`-th `\n`).
pub const UNDERTEXT_UNIT_LINES: u32 = 3;

/// Characters of a blob or archive id in hex.
pub const UNDERTEXT_BLOB_ID_HEX_LEN: usize = 64;

/// A content address (BLAKE3, 32 bytes); printed as 64 hex digits.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlobIdC {
    /// The hash.
    pub bytes: [u8; 32],
}

/// An archive: its id and its length in every unit.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ArchiveInfo {
    /// The archive's content address.
    pub id: BlobIdC,
    /// Length in UTF-8 bytes.
    pub bytes: u64,
    /// Length in Unicode scalar values.
    pub chars: u64,
    /// Length in UTF-16 code units.
    pub utf16_units: u64,
    /// Number of lines.
    pub lines: u64,
}

impl From<&ArchiveRef> for ArchiveInfo {
    fn from(r: &ArchiveRef) -> Self {
        ArchiveInfo {
            id: BlobIdC { bytes: *r.id.as_bytes() },
            bytes: r.bytes,
            chars: r.chars,
            utf16_units: r.utf16_units,
            lines: r.lines,
        }
    }
}

pub(crate) fn unit(code: u32) -> FfiResult<Unit> {
    Ok(match code {
        UNDERTEXT_UNIT_CHARS => Unit::Chars,
        UNDERTEXT_UNIT_UTF16 => Unit::Utf16,
        UNDERTEXT_UNIT_BYTES => Unit::Bytes,
        UNDERTEXT_UNIT_LINES => Unit::Lines,
        u => {
            return Err(FfiError::invalid(format!(
                "unit: expected UNDERTEXT_UNIT_CHARS (0), _UTF16 (1), _BYTES (2) or _LINES (3), found {u}"
            )));
        }
    })
}

/// Reads an id argument.
///
/// # Safety
/// `id` is NULL or points to a valid `undertext_blob_id_t`.
pub(crate) unsafe fn blob_id(id: *const BlobIdC, what: &str) -> FfiResult<BlobId> {
    // SAFETY: forwarded contract.
    Ok(BlobId(unsafe { args::input(id, what) }?.bytes))
}

/// Checks `start..end` against the archive's length in `unit`: a bound past the end is
/// `UNDERTEXT_OUT_OF_RANGE` giving the length. `owner` must be able to read the archive.
fn check_range(store: &Store, owner: &str, id: &BlobId, start: u64, end: u64, unit: Unit) -> FfiResult<()> {
    if start > end {
        return Err(FfiError::invalid(format!("range {start}..{end} is reversed")));
    }
    let r = store.archive_ref(owner, id)?;
    let len = match unit {
        Unit::Chars => r.chars,
        Unit::Utf16 => r.utf16_units,
        Unit::Bytes => r.bytes,
        Unit::Lines => r.lines,
    };
    if end > len {
        return Err(FfiError::out_of_range(format!(
            "range {start}..{end} is past the end: archive {id} holds {len} {}",
            unit.as_str()
        )));
    }
    Ok(())
}

/// Parses 64 hex digits into an id.
///
/// # Safety
/// `hex` is a valid string argument; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_blob_id_parse(hex: Str, out: *mut BlobIdC) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (hex, out) = unsafe { (args::text(hex, "hex")?, args::output(out, "out")?) };
        let id: BlobId = hex.parse()?;
        out.set(BlobIdC { bytes: *id.as_bytes() });
        Ok(())
    })
}

/// Writes the id as 64 lowercase hex digits into `out` (`cap` bytes, at least
/// `UNDERTEXT_BLOB_ID_HEX_LEN`; no terminator is written).
///
/// # Safety
/// `id` is NULL or valid; `out` is NULL or points to `cap` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_blob_id_hex(id: *const BlobIdC, out: *mut u8, cap: usize) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let id = unsafe { blob_id(id, "id") }?;
        if out.is_null() {
            return Err(FfiError::new(
                crate::status::UNDERTEXT_NULL_POINTER,
                "out: expected a pointer, found NULL",
            ));
        }
        if cap < UNDERTEXT_BLOB_ID_HEX_LEN {
            return Err(FfiError::new(
                UNDERTEXT_BUFFER_TOO_SMALL,
                format!("out: expected at least {UNDERTEXT_BLOB_ID_HEX_LEN} bytes, found {cap}"),
            ));
        }
        let hex = id.to_string();
        // SAFETY: `out` is non-NULL and the caller guarantees `cap` >= 64 writable bytes
        // (checked); the source is our own string, so the regions do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(hex.as_ptr(), out, UNDERTEXT_BLOB_ID_HEX_LEN) };
        Ok(())
    })
}

/// Archives `text` for `owner`: the id is its content address (the same text is stored
/// once, whoever archives it).
///
/// # Safety
/// `owner` and `text` are valid string arguments; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_archive(
    store: StoreHandle,
    owner: Str,
    text: Str,
    out: *mut ArchiveInfo,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (owner, text, out) =
            unsafe { (args::text(owner, "owner")?, args::text(text, "text")?, args::output(out, "out")?) };
        let (s, _) = store.object()?;
        out.set((&s.archive(owner, text)?).into());
        Ok(())
    })
}

/// The sizes of archive `id`, if `owner` may read it (`UNDERTEXT_NOT_FOUND` otherwise).
///
/// # Safety
/// `owner` is a valid string argument; `id` is NULL or valid; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_archive_info(
    store: StoreHandle,
    owner: Str,
    id: *const BlobIdC,
    out: *mut ArchiveInfo,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (owner, id, out) =
            unsafe { (args::text(owner, "owner")?, blob_id(id, "id")?, args::output(out, "out")?) };
        let (s, _) = store.object()?;
        out.set((&s.archive_ref(owner, &id)?).into());
        Ok(())
    })
}

/// Range `start .. end` of archive `id`, counted in `unit` (`UNDERTEXT_UNIT_*`), exactly,
/// as UTF-8 in `*out`. A bound past the end is `UNDERTEXT_OUT_OF_RANGE` (the message gives
/// the length); a bound that splits a character is `UNDERTEXT_INVALID_ARGUMENT` saying
/// where; another owner's archive is `UNDERTEXT_NOT_FOUND`.
///
/// # Safety
/// `owner` is a valid string argument; `id` is NULL or valid; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_read_context(
    store: StoreHandle,
    owner: Str,
    id: *const BlobIdC,
    start: u64,
    end: u64,
    unit: u32,
    out: *mut Buf,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (owner, id, out) =
            unsafe { (args::text(owner, "owner")?, blob_id(id, "id")?, args::output(out, "out")?) };
        let unit = self::unit(unit)?;
        let (s, _) = store.object()?;
        check_range(&s, owner, &id, start, end, unit)?;
        out.set(Buf::text(s.read_context(owner, &id, start..end, unit)?));
        Ok(())
    })
}

/// A preview of archive `id` in about `max_chars` characters (head, tail and, with a
/// `query`, the lines containing it), with a marker saying what is left out and how to
/// read it. `query` with a NULL pointer means none.
///
/// # Safety
/// `owner` and `query` are valid string arguments; `id` is NULL or valid; `out` is NULL
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_preview(
    store: StoreHandle,
    owner: Str,
    id: *const BlobIdC,
    max_chars: u64,
    query: Str,
    out: *mut Buf,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (owner, id, query, out) = unsafe {
            (
                args::text(owner, "owner")?,
                blob_id(id, "id")?,
                args::opt_text(query, "query")?,
                args::output(out, "out")?,
            )
        };
        let max = usize::try_from(max_chars)
            .map_err(|_| FfiError::invalid(format!("max_chars: {max_chars} does not fit in size_t")))?;
        let (s, _) = store.object()?;
        out.set(Buf::text(s.preview(owner, &id, max, query)?));
        Ok(())
    })
}

fn pin(chat: ChatHandle, id: BlobId, start: u64, end: u64, unit: u32, on: bool) -> FfiResult<()> {
    let unit = self::unit(unit)?;
    let (c, parent) = chat.object()?;
    if on {
        let (store, _) = StoreHandle { id: crate::handles::store_of(chat.id, parent) }.object()?;
        check_range(&store, c.owner(), &id, start, end, unit)?;
        c.pin(&id, start..end, unit)?;
    } else {
        c.unpin(&id, start..end, unit)?;
    }
    Ok(())
}

/// Pins range `start .. end` (in `unit`) of archive `id` into the chat's model view: the
/// budget guard will not shrink it. The chat's owner must be able to read the archive.
///
/// # Safety
/// `id` is NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_pin(
    chat: ChatHandle,
    id: *const BlobIdC,
    start: u64,
    end: u64,
    unit: u32,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let id = unsafe { blob_id(id, "id") }?;
        pin(chat, id, start, end, unit, true)
    })
}

/// Removes a pin made with `undertext_chat_pin` (same archive, range and unit);
/// `UNDERTEXT_NOT_FOUND` if there is none.
///
/// # Safety
/// `id` is NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_unpin(
    chat: ChatHandle,
    id: *const BlobIdC,
    start: u64,
    end: u64,
    unit: u32,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let id = unsafe { blob_id(id, "id") }?;
        pin(chat, id, start, end, unit, false)
    })
}

/// The chat's pins as JSON in `*out`: `[{"archive": hex, "unit": "chars"|..., "start",
/// "end"}]`.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_pins(chat: ChatHandle, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (c, _) = chat.object()?;
        let snap = c.snapshot();
        let pins: Vec<serde_json::Value> = snap
            .pins()
            .iter()
            .map(|p| {
                serde_json::json!({"archive": p.archive.to_string(), "unit": p.unit.as_str(),
                    "start": p.range.start, "end": p.range.end})
            })
            .collect();
        out.set(Buf::text(serde_json::Value::Array(pins).to_string()));
        Ok(())
    })
}
