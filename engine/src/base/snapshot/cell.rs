//! [`SnapshotCell`]: publish an immutable value, load it without locks.
//!
//! Two slots and two reader counters. A reader loads the active slot index, announces
//! itself on that slot's counter, checks the index did not move, clones the `Arc`, and
//! leaves. A writer fills the *inactive* slot — after waiting for readers still cloning an
//! old value out of it, a window of a few nanoseconds — then flips the index. Readers never
//! wait for writers (they retry only if a flip lands inside their own few instructions);
//! an old value is freed when the last `Arc` to it drops, never while a reader holds it.
//!
//! Every step of the reader/writer handshake on `active` and the counters is a
//! read-modify-write: RMWs on one location are totally ordered, so the "announce, then
//! re-check" pattern holds under acquire/release alone (loom models SeqCst as AcqRel, and
//! the proof must not lean on it).
//!
//! The protocol is model-checked with loom: `cargo test -p undertext --features loom
//! --release --lib snapshot::cell` (bounded by `LOOM_MAX_PREEMPTIONS`, default 3 in the test).

use super::sync::{Arc, AtomicUsize, Ordering, UnsafeCell, spin};

/// A published `Arc<T>` that any number of threads can load while one writer replaces it.
#[derive(Debug)]
pub struct SnapshotCell<T> {
    active: AtomicUsize,
    readers: [AtomicUsize; 2],
    slots: [UnsafeCell<Arc<T>>; 2],
    writer: AtomicUsize,
}

// SAFETY: the slots are only written by the single writer (guarded by `writer`) while no
// reader is inside the slot (checked through `readers`), and only read by readers who
// announced themselves on that slot's counter; `T` itself is shared through `Arc`.
unsafe impl<T: Send + Sync> Sync for SnapshotCell<T> {}
// SAFETY: moving the cell moves the `Arc`s it owns, which is sound for `T: Send + Sync`.
unsafe impl<T: Send + Sync> Send for SnapshotCell<T> {}

impl<T> SnapshotCell<T> {
    /// A cell holding `value`.
    pub fn new(value: Arc<T>) -> Self {
        SnapshotCell {
            active: AtomicUsize::new(0),
            readers: [AtomicUsize::new(0), AtomicUsize::new(0)],
            slots: [UnsafeCell::new(value.clone()), UnsafeCell::new(value)],
            writer: AtomicUsize::new(0),
        }
    }

    /// The current value.
    pub fn load(&self) -> Arc<T> {
        loop {
            let s = self.active.load(Ordering::Acquire);
            self.readers[s].fetch_add(1, Ordering::AcqRel);
            // Re-read `active` with a read-modify-write: RMWs on one location are totally
            // ordered, which gives the store-then-load ordering this check needs without
            // relying on SeqCst loads (see the module comment).
            if self.active.fetch_add(0, Ordering::AcqRel) == s {
                // SAFETY: we are counted on slot `s` and `s` was still active after we were
                // counted, so the writer either sees our count and waits before writing slot
                // `s`, or finished writing it before flipping `active` to `s`.
                let v = self.slots[s].with(|p| unsafe { (*p).clone() });
                self.readers[s].fetch_sub(1, Ordering::AcqRel);
                return v;
            }
            self.readers[s].fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Replaces the value. Concurrent publishers are serialized; the previous value is
    /// dropped once no reader holds it.
    pub fn publish(&self, value: Arc<T>) {
        while self.writer.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire).is_err() {
            spin();
        }
        let target = 1 - self.active.load(Ordering::Acquire);
        // An RMW read, for the same reason as in `load`.
        while self.readers[target].fetch_add(0, Ordering::AcqRel) != 0 {
            spin();
        }
        // SAFETY: `target` is inactive and no reader is counted on it; a reader who counts
        // itself on `target` from now on finds `active != target` and backs off without
        // touching the slot, until the flip below, which happens after this write.
        let old = self.slots[target].with_mut(|p| unsafe { std::mem::replace(&mut *p, value) });
        self.active.swap(target, Ordering::AcqRel);
        self.writer.store(0, Ordering::Release);
        drop(old);
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    #[test]
    fn readers_see_every_value_in_order_and_never_a_torn_one() {
        let cell = Arc::new(SnapshotCell::new(Arc::new((0u64, 0u64))));
        std::thread::scope(|s| {
            for _ in 0..3 {
                let cell = &cell;
                s.spawn(move || {
                    let mut last = 0;
                    for _ in 0..200_000 {
                        let v = cell.load();
                        assert_eq!(v.0 * 2, v.1, "torn value");
                        assert!(v.0 >= last, "went back from {last} to {}", v.0);
                        last = v.0;
                    }
                });
            }
            for i in 1..=50_000u64 {
                cell.publish(Arc::new((i, i * 2)));
            }
        });
        assert_eq!(cell.load().0, 50_000);
    }

    #[test]
    fn old_values_are_freed_once_no_reader_holds_them() {
        let first = Arc::new(1);
        let cell = SnapshotCell::new(first.clone());
        let held = cell.load();
        cell.publish(Arc::new(2));
        cell.publish(Arc::new(3));
        assert_eq!(Arc::strong_count(&first), 2, "the test's clone and the reader's");
        drop(held);
        assert_eq!(Arc::strong_count(&first), 1);
        assert_eq!(*cell.load(), 3);
    }
}

#[cfg(all(test, feature = "loom"))]
mod loom_tests {
    use super::*;

    /// A writer publishes twice while two readers load: every load sees a complete value,
    /// values never go backwards for one reader, and every value is freed exactly once.
    #[test]
    fn publication_is_safe_under_every_interleaving() {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(3);
        }
        builder.check(|| {
            let cell = Arc::new(SnapshotCell::new(Arc::new(0usize)));
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    let cell = cell.clone();
                    loom::thread::spawn(move || {
                        let a = *cell.load();
                        let b = *cell.load();
                        assert!(b >= a);
                    })
                })
                .collect();
            cell.publish(Arc::new(1));
            cell.publish(Arc::new(2));
            for r in readers {
                r.join().unwrap();
            }
            assert_eq!(*cell.load(), 2);
        });
    }
}
