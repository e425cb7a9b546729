//! How a build makes its summarizer calls: one at a time on the calling thread (a build a
//! caller asked for: `Chat::build_checkpoint`, or a view at the hard line under the
//! synchronous policy), or — for the worker's jobs — independent calls (the segments not in
//! the cache, then the merges of one level of the tree) several at once on scoped threads,
//! each taking one of the worker's [`Slots`] for the duration of the call.
//!
//! Deadlocks: a pool thread waits for nothing but a slot, and a slot is held only for one
//! summarizer call, by a pool thread. A caller's thread never takes a slot and never waits
//! for a pool thread: a summarizer that needs something the caller holds (Python's GIL, a C
//! harness's lock) is called on the caller's thread when the caller builds.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::base::error::{Error, Result};

/// A counting semaphore: at most `n` summarizer calls of the worker at once.
#[derive(Debug)]
pub(crate) struct Slots {
    free: Mutex<usize>,
    cv: Condvar,
}

impl Slots {
    /// `n` slots (at least one).
    pub(crate) fn new(n: usize) -> Slots {
        Slots { free: Mutex::new(n.max(1)), cv: Condvar::new() }
    }

    /// Takes a slot, waiting for one; given back when the guard drops.
    fn take(&self) -> SlotGuard<'_> {
        let mut f = self.free.lock();
        while *f == 0 {
            self.cv.wait(&mut f);
        }
        *f -= 1;
        SlotGuard(self)
    }
}

struct SlotGuard<'a>(&'a Slots);

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        *self.0.free.lock() += 1;
        self.0.cv.notify_one();
    }
}

/// How a build makes its summarizer calls.
pub(crate) struct Calls<'a> {
    /// Calls made at once (1: in order, on the calling thread).
    pub parallel: usize,
    /// Taken around each call; `None` (a caller's build): no bound, no wait.
    pub slots: Option<&'a Slots>,
    /// Told the time of each successful call (the worker's measure of its summarizer).
    pub timed: Option<&'a (dyn Fn(Duration) + Sync)>,
}

impl Calls<'static> {
    /// One call at a time on the calling thread, no slot, nothing measured.
    pub(crate) const SERIAL: Calls<'static> = Calls { parallel: 1, slots: None, timed: None };
}

impl Calls<'_> {
    /// Summarizer calls in sequence for `n` independent calls made this way.
    pub(crate) fn rounds(&self, n: usize) -> usize {
        n.div_ceil(self.parallel.max(1))
    }

    fn call<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let _slot = self.slots.map(Slots::take);
        let t = Instant::now();
        let r = f();
        if let (Ok(_), Some(timed)) = (&r, self.timed) {
            timed(t.elapsed());
        }
        r
    }

    /// `f` of each item, in order, up to [`parallel`](Self::parallel) calls at once. On an
    /// error no new call starts; the calls running end, and the first error is returned.
    pub(crate) fn map<I, T, F>(&self, items: &[I], f: F) -> Result<Vec<T>>
    where
        I: Sync,
        T: Send,
        F: Fn(&I) -> Result<T> + Sync,
    {
        let n = items.len();
        let k = self.parallel.min(n).max(1);
        if k == 1 {
            return items.iter().map(|i| self.call(|| f(i))).collect();
        }
        let next = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        let out: Vec<Mutex<Option<Result<T>>>> = (0..n).map(|_| Mutex::new(None)).collect();
        let work = || {
            while !failed.load(Ordering::Acquire) {
                let i = next.fetch_add(1, Ordering::AcqRel);
                let Some(item) = items.get(i) else { return };
                let r = self.call(|| f(item));
                if r.is_err() {
                    failed.store(true, Ordering::Release);
                }
                *out[i].lock() = Some(r);
            }
        };
        std::thread::scope(|s| {
            for j in 1..k {
                // A thread that cannot be spawned leaves its share to the others.
                let _ = std::thread::Builder::new()
                    .name(format!("undertext-summarize-{j}"))
                    .spawn_scoped(s, work);
            }
            work();
        });
        let mut results: Vec<Option<Result<T>>> = out.into_iter().map(Mutex::into_inner).collect();
        if let Some(i) = results.iter().position(|r| matches!(r, Some(Err(_)))) {
            return match results.swap_remove(i) {
                Some(Err(e)) => Err(e),
                _ => Err(Error::InvalidArgument("summarizer pool: lost an error".into())),
            };
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(Error::InvalidArgument("summarizer pool: a call was not made".into()))
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_run_at_once_up_to_the_bound_and_results_keep_their_order() {
        let slots = Slots::new(2);
        let (now, max) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let calls = Calls { parallel: 3, slots: Some(&slots), timed: None };
        let items: Vec<u64> = (0..9).collect();
        let out = calls
            .map(&items, |i| {
                let in_flight = now.fetch_add(1, Ordering::AcqRel) + 1;
                max.fetch_max(in_flight, Ordering::AcqRel);
                std::thread::sleep(Duration::from_millis(5));
                now.fetch_sub(1, Ordering::AcqRel);
                Ok(i * 10)
            })
            .unwrap();
        assert_eq!(out, items.iter().map(|i| i * 10).collect::<Vec<_>>());
        assert!(max.load(Ordering::Acquire) <= 2, "three threads, two slots");
        assert_eq!(calls.rounds(9), 3);
        assert_eq!(Calls::SERIAL.rounds(9), 9);
    }

    #[test]
    fn the_first_error_is_returned_and_no_new_call_starts_after_it() {
        let made = AtomicUsize::new(0);
        let calls = Calls { parallel: 2, slots: None, timed: None };
        let items: Vec<u64> = (0..50).collect();
        let r = calls.map(&items, |i| {
            made.fetch_add(1, Ordering::AcqRel);
            if *i == 3 { Err(Error::InvalidArgument("boom".into())) } else { Ok(*i) }
        });
        assert!(matches!(r, Err(Error::InvalidArgument(m)) if m == "boom"));
        assert!(made.load(Ordering::Acquire) < 50);
    }
}
