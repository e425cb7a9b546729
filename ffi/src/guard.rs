//! The boundary every exported function goes through: panics are caught and become
//! [`UNDERTEXT_INTERNAL`](crate::status::UNDERTEXT_INTERNAL), errors are recorded as the
//! thread's last error, and the status is returned.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::status::{FfiError, FfiResult, Status, UNDERTEXT_INTERNAL, UNDERTEXT_OK};

thread_local! {
    /// The message of the last failed call on this thread.
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Runs `f`, catching any panic; records the error message of a failure for
/// `undertext_last_error` and returns the status.
pub(crate) fn call(f: impl FnOnce() -> FfiResult<()>) -> Status {
    let result = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic with a non-string payload".to_string());
        Err(FfiError::new(UNDERTEXT_INTERNAL, format!("internal error (caught panic): {what}")))
    });
    match result {
        Ok(()) => UNDERTEXT_OK,
        Err(e) => {
            set_last_error(&e.message);
            e.status
        }
    }
}

/// Records `message` as this thread's last error. A NUL byte in it (from an argument echoed
/// back) is written as `\0`, so a C caller that reads the message as a C string gets all of it.
pub(crate) fn set_last_error(message: &str) {
    // A thread being torn down has no thread-locals left; there is nobody to read it then.
    let _ = LAST_ERROR.try_with(|m| {
        let mut m = m.borrow_mut();
        m.clear();
        for part in message.split('\0').enumerate() {
            if part.0 > 0 {
                m.push_str("\\0");
            }
            m.push_str(part.1);
        }
    });
}

/// Runs `g` with this thread's last error message.
pub(crate) fn with_last_error<T>(g: impl FnOnce(&str) -> T) -> T {
    LAST_ERROR.with(|m| g(&m.borrow()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::*;
    use crate::status::UNDERTEXT_NOT_FOUND;

    #[test]
    fn a_message_never_carries_a_raw_nul() {
        let status = call(|| Err(FfiError::new(UNDERTEXT_NOT_FOUND, "no chat \"a\0b\"")));
        assert_eq!(status, UNDERTEXT_NOT_FOUND);
        with_last_error(|m| assert_eq!(m, "no chat \"a\\0b\""));
    }

    #[test]
    fn a_path_with_a_nul_is_refused_saying_where_the_nul_is() {
        let path = "/tmp/store\0evil";
        let mut out = crate::handles::StoreHandle { id: 0 };
        let s = crate::args::Str { ptr: path.as_ptr(), len: path.len() };
        // SAFETY: `s` points to `path`, alive for the call; `out` is a valid local.
        let status = unsafe { crate::store::undertext_store_open(s, std::ptr::null(), &mut out) };
        assert_eq!(status, crate::status::UNDERTEXT_INVALID_ARGUMENT);
        with_last_error(|m| {
            assert!(!m.contains('\0'), "raw NUL in {m:?}");
            assert!(m.contains("NUL at byte 10"), "{m}");
        });
    }

    #[test]
    fn a_panic_becomes_internal_with_its_message() {
        let status = call(|| panic!("boom at step {}", 7));
        assert_eq!(status, UNDERTEXT_INTERNAL);
        with_last_error(|m| assert_eq!(m, "internal error (caught panic): boom at step 7"));
    }

    #[test]
    fn an_error_is_recorded_for_this_thread_only() {
        let status = call(|| Err(FfiError::new(UNDERTEXT_NOT_FOUND, "not found: chat 9")));
        assert_eq!(status, UNDERTEXT_NOT_FOUND);
        with_last_error(|m| assert_eq!(m, "not found: chat 9"));
        std::thread::spawn(|| with_last_error(|m| assert_eq!(m, ""))).join().unwrap();
        // A later success leaves the message in place.
        assert_eq!(call(|| Ok(())), crate::status::UNDERTEXT_OK);
        with_last_error(|m| assert_eq!(m, "not found: chat 9"));
    }
}
