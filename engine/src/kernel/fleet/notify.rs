//! Change notification: which chats other processes changed, learned without a query per
//! read (LISTEN/NOTIFY).
//!
//! From schema version 2 (schema.rs) every change of a chat's row notifies channel
//! `ut_chats` with `ID VERSION live|deleted` when its transaction commits. A store listens on
//! a connection of its own, outside `pool_size` (a transaction pooler cannot carry a LISTEN:
//! with `pooler=transaction`, with `notify=off`, or on an older schema it does not listen),
//! started by the first question asked of it, and keeps the highest version notified per
//! chat. A thread reads the connection; when the connection is lost it reconnects (waits
//! from 250 ms up to 5 s between tries) and starts a new *epoch*: what was notified before
//! is forgotten, and a reader that brought a chat up to date in an earlier epoch must do so
//! once more (a commit between the loss and the new LISTEN is never notified).
//!
//! Notification adds freshness; it does not replace the places that query (`Store::chat`,
//! a write): a notification reaches the listener a moment after the commit, so a process
//! told of a write by another channel still sees it at `Store::chat`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use postgres::fallible_iterator::FallibleIterator;

use super::tls::MakeRustls;
use crate::kernel::store::remote::Notified;

/// The channel the schema's trigger notifies.
pub(super) const CHANNEL: &str = "ut_chats";

#[derive(Debug, Default)]
struct State {
    /// Listening now (`LISTEN` done on a live connection).
    live: bool,
    epoch: u64,
    chats: HashMap<u64, (u64, bool)>,
}

/// The listener of one store.
#[derive(Debug, Default)]
pub(super) struct Notices {
    state: Mutex<State>,
    started: AtomicBool,
    stop: Arc<AtomicBool>,
}

impl Notices {
    /// What is known of chat `chat`: `None` while not listening (a reader must query).
    pub(super) fn get(&self, chat: u64) -> Option<Notified> {
        let s = self.state.lock();
        if !s.live {
            return None;
        }
        let (version, deleted) = s.chats.get(&chat).copied().unwrap_or((0, false));
        Some(Notified { epoch: s.epoch, version, deleted })
    }

    /// Starts listening (once; later calls do nothing): a thread that connects with `config`
    /// and `tls`, runs `LISTEN`, and records what arrives until the store closes.
    pub(super) fn start(self: &Arc<Self>, config: &postgres::Config, tls: &MakeRustls) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let (me, config, tls) = (Arc::downgrade(self), config.clone(), tls.clone());
        let stop = self.stop.clone();
        let spawned = std::thread::Builder::new()
            .name("undertext-fleet-listen".into())
            .spawn(move || listen(&me, &stop, &config, &tls));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "fleet: starting the notification listener failed; reads poll");
        }
    }
}

impl Drop for Notices {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// The listener thread: (re)connects, listens, records, until `stop` or its store is gone.
fn listen(me: &std::sync::Weak<Notices>, stop: &AtomicBool, config: &postgres::Config, tls: &MakeRustls) {
    let mut wait = Duration::from_millis(250);
    while !stop.load(Ordering::Acquire) {
        let mut client = match config.connect(tls.clone()) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "fleet: the notification listener cannot connect; retrying");
                std::thread::sleep(wait);
                wait = (wait * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        if let Err(e) = client.batch_execute(&format!("LISTEN {CHANNEL}")) {
            tracing::debug!(error = %e, "fleet: LISTEN failed; retrying");
            std::thread::sleep(wait);
            continue;
        }
        wait = Duration::from_millis(250);
        {
            let Some(n) = me.upgrade() else { return };
            let mut s = n.state.lock();
            s.epoch += 1;
            s.chats.clear();
            s.live = true;
        }
        // Each notification is recorded as it arrives (a reader asks right after a commit);
        // a quarter of a second without one, the loop looks at `stop` and the connection.
        while !stop.load(Ordering::Acquire) && !client.is_closed() {
            let mut notes = client.notifications();
            let mut it = notes.timeout_iter(Duration::from_millis(250));
            let lost = loop {
                match it.next() {
                    Ok(Some(note)) => {
                        let Some(n) = me.upgrade() else { return };
                        if let Some((chat, version, deleted)) = parse(note.payload()) {
                            let mut s = n.state.lock();
                            let e = s.chats.entry(chat).or_insert((0, false));
                            if version > e.0 {
                                *e = (version, deleted);
                            }
                        }
                    }
                    Ok(None) => break false,
                    Err(e) => {
                        tracing::debug!(error = %e, "fleet: the notification listener lost its connection");
                        break true;
                    }
                }
            };
            if lost {
                break;
            }
        }
        if let Some(n) = me.upgrade() {
            n.state.lock().live = false;
        }
    }
}

/// `ID VERSION live|deleted`.
fn parse(payload: &str) -> Option<(u64, u64, bool)> {
    let mut f = payload.split(' ');
    let chat = f.next()?.parse().ok()?;
    let version = f.next()?.parse().ok()?;
    let deleted = f.next()? == "deleted";
    Some((chat, version, deleted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse() {
        assert_eq!(parse("7 3 live"), Some((7, 3, false)));
        assert_eq!(parse("7 4 deleted"), Some((7, 4, true)));
        assert_eq!(parse("7"), None);
        assert_eq!(parse("x 1 live"), None);
    }

    #[test]
    fn not_listening_answers_none() {
        let n = Notices::default();
        assert_eq!(n.get(1), None);
        {
            let mut s = n.state.lock();
            s.live = true;
            s.epoch = 1;
            s.chats.insert(1, (3, false));
            s.chats.insert(2, (5, false));
        }
        assert_eq!(n.get(1), Some(Notified { epoch: 1, version: 3, deleted: false }));
        assert_eq!(n.get(9), Some(Notified { epoch: 1, version: 0, deleted: false }));
    }
}
