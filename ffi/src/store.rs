//! Opening and closing a store.

use undertext::{Durability, Options, Store};

use crate::args::{self, Str};
use crate::guard::call;
use crate::handles::{self, Object, StoreHandle};
use crate::status::{FfiError, FfiResult, Status};

/// Durability: `fdatasync` before every commit returns.
pub const UNDERTEXT_DURABILITY_IMMEDIATE: u32 = 0;
/// Durability: group commit, one `fdatasync` shared by the writers waiting (the default).
pub const UNDERTEXT_DURABILITY_GROUP: u32 = 1;
/// Durability: no `fdatasync` on the write path (tests, bulk import).
pub const UNDERTEXT_DURABILITY_NONE: u32 = 2;

/// Options of `undertext_store_open`. Fill with `undertext_options_default`, then change
/// what you need.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct StoreOptions {
    /// One of `UNDERTEXT_DURABILITY_*`.
    pub durability: u32,
    /// Nonzero: create the store if the directory holds none.
    pub create_if_missing: u8,
    /// Nonzero: create log segments at full size (faster `fdatasync`).
    pub preallocate: u8,
    /// A log segment is sealed at this many bytes (at least 4096).
    pub segment_size: u64,
    /// Tool results longer than this many bytes are archived on append.
    pub archive_threshold: u64,
    /// Characters of the preview that replaces an archived tool result (at least 128).
    pub preview_chars: u64,
    /// Characters of the previews the budget guard puts in place of older tool results (at
    /// least 128).
    pub guard_preview_chars: u64,
}

fn defaults() -> StoreOptions {
    let o = Options::default();
    StoreOptions {
        durability: UNDERTEXT_DURABILITY_GROUP,
        create_if_missing: o.create_if_missing as u8,
        preallocate: o.preallocate as u8,
        segment_size: o.segment_size,
        archive_threshold: o.archive_threshold as u64,
        preview_chars: o.preview_chars as u64,
        guard_preview_chars: o.guard_preview_chars as u64,
    }
}

fn usize_of(v: u64, what: &str) -> FfiResult<usize> {
    usize::try_from(v).map_err(|_| FfiError::invalid(format!("{what}: {v} does not fit in size_t")))
}

pub(crate) fn to_options(c: &StoreOptions) -> FfiResult<Options> {
    let durability = match c.durability {
        UNDERTEXT_DURABILITY_IMMEDIATE => Durability::Immediate,
        UNDERTEXT_DURABILITY_GROUP => Durability::Group,
        UNDERTEXT_DURABILITY_NONE => Durability::None,
        d => {
            return Err(FfiError::invalid(format!(
                "options.durability: expected UNDERTEXT_DURABILITY_IMMEDIATE (0), _GROUP (1) or _NONE (2), found {d}"
            )));
        }
    };
    Ok(Options::default()
        .durability(durability)
        .create_if_missing(c.create_if_missing != 0)
        .preallocate(c.preallocate != 0)
        .segment_size(c.segment_size)
        .archive_threshold(usize_of(c.archive_threshold, "options.archive_threshold")?)
        .preview_chars(usize_of(c.preview_chars, "options.preview_chars")?)
        .guard_preview_chars(usize_of(c.guard_preview_chars, "options.guard_preview_chars")?))
}

/// Fills `*out` with the default options (group commit, create if missing, 64 MiB
/// segments, 8 KiB archiving threshold, 2,000-character previews).
///
/// # Safety
/// `out` is NULL or points to writable memory for an `undertext_options_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_options_default(out: *mut StoreOptions) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        unsafe { args::output(out, "out") }?.set(defaults());
        Ok(())
    })
}

/// Opens (or creates) the store in directory `path` with `options` (NULL: defaults) and
/// returns its handle in `*out`. One process holds a store at a time: a second opener gets
/// `UNDERTEXT_LOCKED` with the holder's pid in the message. The store belongs to the calling
/// process: in a `fork()` child its handles give `UNDERTEXT_FORKED` (open a store in the child
/// after the fork).
///
/// # Safety
/// `path` is a valid string argument; `options` is NULL or points to an
/// `undertext_options_t`; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_store_open(
    path: Str,
    options: *const StoreOptions,
    out: *mut StoreHandle,
) -> Status {
    // SAFETY: forwarded contract of this function.
    unsafe { open_with(path, options, out, |p, o| Store::open(p, o)) }
}

/// Opens the store in directory `path` read-only (`options`: NULL for defaults; only its
/// cache sizes matter) and returns its handle in `*out`: beside a live writer in another
/// process, or to salvage a damaged store. Takes no lock and writes no byte; the index is
/// built in memory from the log. It sees what was written before this call;
/// `undertext_store_refresh` brings it up to date. Every write through it fails with
/// `UNDERTEXT_READ_ONLY`.
///
/// # Safety
/// `path` is a valid string argument; `options` is NULL or points to an
/// `undertext_options_t`; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_store_open_read_only(
    path: Str,
    options: *const StoreOptions,
    out: *mut StoreHandle,
) -> Status {
    // SAFETY: forwarded contract of this function.
    unsafe { open_with(path, options, out, |p, o| Store::open_read_only_with(p, o)) }
}

/// The open functions' shared body: arguments checked, options converted, `open` called,
/// the store's handle written to `*out`.
///
/// # Safety
/// As `undertext_store_open`.
unsafe fn open_with(
    path: Str,
    options: *const StoreOptions,
    out: *mut StoreHandle,
    open: impl FnOnce(&str, Options) -> undertext::Result<Store>,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (path, out) = unsafe { (args::path(path, "path", "a directory")?, args::output(out, "out")?) };
        let opts = if options.is_null() {
            Options::default()
        } else {
            // SAFETY: non-NULL; the caller guarantees a valid struct.
            to_options(unsafe { args::input(options, "options") }?)?
        };
        let store = open(path, opts)?;
        let id = handles::insert(Object::Store(store), None)?;
        out.set(StoreHandle { id });
        Ok(())
    })
}

/// Brings a read-only store up to date with what its writer appended since the open or the
/// last refresh; `*batches` receives how many batches that was. `UNDERTEXT_READ_ONLY` when a
/// `gc` replaced the log (close and open it again); `UNDERTEXT_INVALID_ARGUMENT` on a store
/// opened for writing.
///
/// # Safety
/// `batches` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_store_refresh(store: StoreHandle, batches: *mut u64) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(batches, "batches") }?;
        let (s, _) = store.object()?;
        out.set(s.refresh()?.batches);
        Ok(())
    })
}

/// Closes the store: frees every handle made from it (chats, snapshots, views,
/// checkpoints; workers are stopped, which waits for their current job), makes the index
/// durable and releases the directory lock (once calls running on other threads with the
/// store's objects have returned). The handle and its children are stale afterwards. In a
/// `fork()` child of the process that opened the store it frees the handles, writes nothing
/// and returns `UNDERTEXT_FORKED`.
#[unsafe(no_mangle)]
pub extern "C" fn undertext_store_close(store: StoreHandle) -> Status {
    call(|| {
        let (s, _) = store.object()?;
        handles::remove(store.id, StoreHandle::KIND)?;
        s.close()?;
        Ok(())
    })
}
