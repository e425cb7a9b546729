//! Synchronization primitives of the snapshot module: `std` normally, `loom` with the
//! feature `loom` so the publication protocol can be model-checked.

#[cfg(feature = "loom")]
pub(crate) use loom::cell::UnsafeCell;
#[cfg(feature = "loom")]
pub(crate) use loom::sync::Arc;
#[cfg(feature = "loom")]
pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(feature = "loom")]
pub(crate) fn spin() {
    loom::thread::yield_now();
}

#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::Arc;
#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(feature = "loom"))]
pub(crate) fn spin() {
    std::hint::spin_loop();
}

/// `std`'s `UnsafeCell` with loom's closure-based API.
#[cfg(not(feature = "loom"))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(feature = "loom"))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(v: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(v))
    }

    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
