//! Chats: create, open with an owner, close, list, metadata.

use std::collections::BTreeMap;

use undertext::{ChatId, ChatMeta, ChatPage, MetaField, Page, PageCursor};

use crate::args::{self, Str};
use crate::buf::Buf;
use crate::guard::call;
use crate::handles::{self, ChatHandle, Object, StoreHandle};
use crate::status::{FfiError, FfiResult, Status};

/// Chat metadata passed in. Every string may be empty; `extra_json` is empty or a JSON
/// object whose values are strings (`{"repo": "undertext"}`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ChatMetaIn {
    /// Title or slug.
    pub title: Str,
    /// The model the chat talks to (usage calibration is kept per model).
    pub model: Str,
    /// An unsent draft.
    pub draft: Str,
    /// Free key-value pairs as a JSON object of strings, or empty.
    pub extra_json: Str,
}

/// Facts about a chat handle's chat now.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ChatInfo {
    /// The chat's id.
    pub id: u64,
    /// Number of messages (the next seq).
    pub len: u64,
    /// Revision: +1 per edit, truncation or hide; appends do not change it.
    pub revision: u64,
}

/// Where a page of `undertext_chat_list` ended; pass it back to get the next page.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PageCursorIn {
    /// Last activity of the last chat shown (ms since the Unix epoch).
    pub last_activity_ms: u64,
    /// Its id.
    pub id: u64,
}

/// Reads a metadata struct (NULL: all empty).
///
/// # Safety
/// `meta` is NULL or points to a valid `undertext_chat_meta_t` whose strings are valid.
pub(crate) unsafe fn meta_in(meta: *const ChatMetaIn) -> FfiResult<ChatMeta> {
    if meta.is_null() {
        return Ok(ChatMeta::default());
    }
    // SAFETY: forwarded contract of this function, for the struct and each of its strings.
    let (title, model, draft, extra) = unsafe {
        let m = args::input(meta, "meta")?;
        (
            args::text(m.title, "meta.title")?,
            args::text(m.model, "meta.model")?,
            args::text(m.draft, "meta.draft")?,
            args::text(m.extra_json, "meta.extra_json")?,
        )
    };
    let extra: BTreeMap<String, String> = if extra.is_empty() {
        BTreeMap::new()
    } else {
        serde_json::from_str(extra).map_err(|e| {
            FfiError::invalid(format!("meta.extra_json: expected a JSON object of strings ({e})"))
        })?
    };
    Ok(ChatMeta { title: title.into(), model: model.into(), draft: draft.into(), extra })
}

/// Creates a chat for `owner` with `meta` (NULL: empty) and returns its id in `*out_id`.
///
/// # Safety
/// `owner` is a valid string argument; `meta` is NULL or valid; `out_id` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_create(
    store: StoreHandle,
    owner: Str,
    meta: *const ChatMetaIn,
    out_id: *mut u64,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (owner, meta, out) =
            unsafe { (args::text(owner, "owner")?, meta_in(meta)?, args::output(out_id, "out_id")?) };
        let (s, _) = store.object()?;
        out.set(s.create_chat(owner, meta)?.0);
        Ok(())
    })
}

/// Opens chat `id` of `owner` and returns a handle in `*out`. A chat of another owner
/// is `UNDERTEXT_NOT_FOUND`, exactly as an absent one.
///
/// # Safety
/// `owner` is a valid string argument; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_open(
    store: StoreHandle,
    owner: Str,
    id: u64,
    out: *mut ChatHandle,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (owner, out) = unsafe { (args::text(owner, "owner")?, args::output(out, "out")?) };
        let (s, _) = store.object()?;
        let chat = s.chat(owner, ChatId(id))?;
        out.set(ChatHandle { id: handles::insert(Object::Chat(chat), Some(store.id))? });
        Ok(())
    })
}

/// Frees a chat handle (the chat itself stays in the store).
#[unsafe(no_mangle)]
pub extern "C" fn undertext_chat_close(chat: ChatHandle) -> Status {
    call(|| {
        handles::remove(chat.id, ChatHandle::KIND)?;
        Ok(())
    })
}

/// One page of `owner`'s chats, newest activity first, as JSON in `*out`:
/// `{"chats": [{"id", "meta": {"title", "model", "draft", "extra"}, "len", "revision",
/// "created_ms", "last_activity_ms"}], "next": {"last_activity_ms", "id"} | null}`.
/// `limit` is 1 to 1000; `after` is NULL for the first page, else the previous `next`.
///
/// # Safety
/// `owner` is a valid string argument; `after` is NULL or valid; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_list(
    store: StoreHandle,
    owner: Str,
    limit: u32,
    after: *const PageCursorIn,
    out: *mut Buf,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (owner, out) = unsafe { (args::text(owner, "owner")?, args::output(out, "out")?) };
        let after = if after.is_null() {
            None
        } else {
            // SAFETY: non-NULL; the caller guarantees a valid struct.
            let a = unsafe { args::input(after, "after") }?;
            Some(PageCursor { last_activity_ms: a.last_activity_ms, id: ChatId(a.id) })
        };
        let (s, _) = store.object()?;
        let page = s.chats(owner, Page { limit: limit as usize, after })?;
        out.set(Buf::text(crate::json::chat_page(&page).to_string()));
        Ok(())
    })
}

/// The chats of `owner` whose metadata value is exactly `value`, newest activity first, as
/// JSON in `*out` of the shape of `undertext_chat_list` (`"next"` always null). `key` names
/// the field: an absent string (NULL `ptr`) the title, else the `extra` entry under `key`.
/// An index lookup (`Store::find_chats`): it costs what it finds, not the owner's chats;
/// deleted chats and other owners' chats are never returned.
///
/// # Safety
/// `owner`, `key` and `value` are valid string arguments (`key` may be absent); `out` is
/// NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_find(
    store: StoreHandle,
    owner: Str,
    key: Str,
    value: Str,
    out: *mut Buf,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (owner, key, value, out) = unsafe {
            (
                args::text(owner, "owner")?,
                args::opt_text(key, "key")?,
                args::text(value, "value")?,
                args::output(out, "out")?,
            )
        };
        let field = key.map_or(MetaField::Title, MetaField::Extra);
        let (s, _) = store.object()?;
        let chats = s.find_chats(owner, field, value)?;
        out.set(Buf::text(crate::json::chat_page(&ChatPage { chats, next: None }).to_string()));
        Ok(())
    })
}

/// The chat's id, length and revision now.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_info(chat: ChatHandle, out: *mut ChatInfo) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (c, _) = chat.object()?;
        let snap = c.snapshot();
        out.set(ChatInfo { id: c.id().0, len: snap.len(), revision: snap.revision() });
        Ok(())
    })
}

/// The chat's current metadata as JSON in `*out`:
/// `{"title", "model", "draft", "extra": {...}, "version"}`.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_meta(chat: ChatHandle, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (c, _) = chat.object()?;
        let snap = c.snapshot();
        let mut v = crate::json::meta(snap.meta());
        v["version"] = snap.meta_version().into();
        out.set(Buf::text(v.to_string()));
        Ok(())
    })
}

/// Replaces the chat's metadata; the new version (from 1) in `*out_version`.
///
/// # Safety
/// `meta` is NULL or valid; `out_version` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_set_meta(
    chat: ChatHandle,
    meta: *const ChatMetaIn,
    out_version: *mut u64,
) -> Status {
    call(|| {
        // SAFETY: forwarded contract of this function, for each argument.
        let (meta, out) = unsafe { (meta_in(meta)?, args::output(out_version, "out_version")?) };
        let (c, _) = chat.object()?;
        out.set(c.set_meta(meta)?);
        Ok(())
    })
}

/// Deletes chat `chat_id` of `owner`: it can no longer be opened or listed, and every
/// write through a handle already open on it (append, edit, metadata, pin, ...) is
/// `UNDERTEXT_NOT_FOUND`; snapshots already taken still read. A chat of another owner is
/// `UNDERTEXT_NOT_FOUND`, exactly as an absent or already deleted one. Its id is never
/// reused; its records and the blobs only it used stay on disk until `undertext_gc`.
///
/// # Safety
/// `owner` is a valid string argument.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_delete(store: StoreHandle, owner: Str, chat_id: u64) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let owner = unsafe { args::text(owner, "owner") }?;
        let (s, _) = store.object()?;
        s.delete_chat(owner, ChatId(chat_id))?;
        Ok(())
    })
}

/// The chat's metadata as of metadata version `version` (1 is the metadata the chat was
/// created with; each `undertext_chat_set_meta` adds one), as JSON in `*out` (the shape of
/// `undertext_chat_meta`). A version past the current one, or 0, is
/// `UNDERTEXT_OUT_OF_RANGE` giving the current version.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn undertext_chat_meta_at(chat: ChatHandle, version: u64, out: *mut Buf) -> Status {
    call(|| {
        // SAFETY: forwarded contract.
        let out = unsafe { args::output(out, "out") }?;
        let (c, _) = chat.object()?;
        let current = c.snapshot().meta_version();
        if version == 0 || version > current {
            return Err(FfiError::out_of_range(format!(
                "metadata version {version}: expected 1 to {current} (the chat's current version)"
            )));
        }
        let mut v = crate::json::meta(&c.meta_at(version)?);
        v["version"] = version.into();
        out.set(Buf::text(v.to_string()));
        Ok(())
    })
}
