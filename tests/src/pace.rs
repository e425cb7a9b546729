//! A summarizer paced by the agent loop, not by the clock: tests that a loop's views are
//! never refused while a slow summarizer works beside it must not depend on how much CPU a
//! shared machine gives the worker during a model step.
//!
//! A model call takes seconds and a summarizer call about as long, so what matters is how
//! many summarizer calls fit in one model step. [`Pace`] makes that count exact: every call
//! of a [`Pace::summarizer`] waits for a ticket, and [`Pace::model_step`] hands out the tickets
//! of one step and returns once the worker has used them and waits for more, or has nothing
//! left to do. Tickets a step did not use are lost, as a model step's time is.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use undertext::Store;
use undertext::{Extractive, FnSummarizer, Summarizer};

/// The tickets of the current model step (see the module's documentation).
#[derive(Debug, Default)]
pub struct Pace {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Calls the worker may still make in this step.
    tickets: u32,
    /// Calls waiting for a ticket (several with a worker of more than one thread).
    waiting: u32,
    /// Open: every call goes through (the test is over, or failed).
    open: bool,
    /// Calls made.
    calls: u64,
}

/// Opens the gate when dropped, so a worker waiting for a ticket never keeps a failing test
/// from ending. Declare it after the store and the worker: it is dropped before them.
#[derive(Debug)]
pub struct Opener(Arc<Pace>);

impl Pace {
    /// A closed gate: no call goes through before the first [`Pace::model_step`].
    ///
    /// ```
    /// let pace = undertext_tests::pace::Pace::new();
    /// assert_eq!(pace.calls(), 0);
    /// ```
    pub fn new() -> Arc<Pace> {
        Arc::new(Pace::default())
    }

    /// The extractive summarizer, each call (summarize or merge) taking one ticket.
    pub fn summarizer(self: &Arc<Self>) -> Arc<dyn Summarizer> {
        self.pacing(Arc::new(Extractive::default()))
    }

    /// `inner`, each call (summarize or merge) taking one ticket first.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use undertext::Extractive;
    /// let pace = undertext_tests::pace::Pace::new();
    /// let s = pace.pacing(Arc::new(Extractive::default()));
    /// assert_eq!(s.id(), "paced");
    /// ```
    pub fn pacing(self: &Arc<Self>, inner: Arc<dyn Summarizer>) -> Arc<dyn Summarizer> {
        let (a, b) = (self.clone(), self.clone());
        let merger = inner.clone();
        Arc::new(FnSummarizer::new(
            "paced",
            move |m| {
                a.ticket();
                inner.summarize(m)
            },
            move |s| {
                b.ticket();
                merger.merge(s)
            },
        ))
    }

    /// The guard that opens the gate when dropped.
    pub fn opener(self: &Arc<Self>) -> Opener {
        Opener(self.clone())
    }

    /// Summarizer calls made so far.
    pub fn calls(&self) -> u64 {
        self.lock().calls
    }

    /// One model step: lets the worker make `calls` summarizer calls, and returns when it has
    /// made them and waits for another, or when it is idle.
    pub fn model_step(&self, store: &Store, calls: u32) {
        {
            let mut s = self.lock();
            s.tickets = calls;
            self.changed.notify_all();
        }
        loop {
            {
                let s = self.lock();
                if s.tickets == 0 && s.waiting > 0 {
                    break;
                }
            }
            if store.wait_worker_idle(Duration::from_millis(2)) {
                break;
            }
        }
        self.lock().tickets = 0;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn ticket(&self) {
        let mut s = self.lock();
        s.waiting += 1;
        while s.tickets == 0 && !s.open {
            s = self.changed.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        s.tickets = s.tickets.saturating_sub(1);
        s.waiting -= 1;
        s.calls += 1;
    }
}

impl Drop for Opener {
    fn drop(&mut self) {
        self.0.lock().open = true;
        self.0.changed.notify_all();
    }
}
