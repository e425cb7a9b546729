//! The chats held in memory, and eviction: a chat leaves memory when nothing holds it, the
//! index has all its records, and it is among the least recently used.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::load::{self, load_writer};
use super::state::ChatState;
use crate::base::error::{Error, Result};
use crate::kernel::store::core::Core;
use crate::kernel::store::read_only::ChatChange;
use crate::model::message::ChatId;

/// Chats in memory, by id.
#[derive(Debug)]
pub(crate) struct ChatCache {
    core: Arc<Core>,
    map: Mutex<HashMap<u64, Arc<ChatState>>>,
    next_chat: AtomicU64,
    clock: AtomicU64,
}

/// The error for a chat that is absent or belongs to another owner: the same in both cases.
pub(crate) fn not_found(id: ChatId) -> Error {
    Error::NotFound { what: format!("chat {id}") }
}

impl ChatCache {
    pub(crate) fn new(core: Arc<Core>, next_chat: u64) -> Self {
        ChatCache {
            core,
            map: Mutex::new(HashMap::new()),
            next_chat: AtomicU64::new(next_chat),
            clock: AtomicU64::new(0),
        }
    }

    /// The kernel the chats read and write through.
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// A fresh chat id (in fleet mode, from the remote: unique across processes).
    pub(crate) fn allocate(&self) -> Result<ChatId> {
        if let Some(remote) = self.core.remote() {
            return Ok(ChatId(remote.allocate_chat()?));
        }
        Ok(ChatId(self.next_chat.fetch_add(1, Ordering::Relaxed)))
    }

    /// Puts a new chat in memory.
    pub(crate) fn insert(&self, state: Arc<ChatState>) {
        self.touch(&state);
        let mut map = self.map.lock();
        map.insert(state.id.0, state);
        self.evict(&mut map);
    }

    fn touch(&self, s: &ChatState) {
        s.last_used.store(self.clock.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
    }

    /// The chat `id` of `owner`, from memory or loaded from the index. A chat of another
    /// owner is the same `NotFound` as an absent one.
    /// In fleet mode the chat is first brought up to what other processes committed.
    /// With `refresh` false, a chat the replica already holds (brought up by an earlier
    /// catch-up: a `find_chats`, a listing, an open or a write) is opened as it holds it,
    /// without asking the remote (see `Store::chat_without_refresh`).
    pub(crate) fn get(&self, owner: &str, id: ChatId, refresh: bool) -> Result<Arc<ChatState>> {
        let remote = self.core.remote();
        let mut map = self.map.lock();
        if let Some(s) = map.get(&id.0) {
            if &*s.owner != owner || s.deleted.load(Ordering::Acquire) {
                return Err(not_found(id));
            }
            self.touch(s);
            let s = s.clone();
            drop(map);
            // Without `refresh`, a state behind what the replica pulled since (another
            // catch-up applied batches it does not hold) still asks.
            let behind =
                remote.is_some_and(|r| r.replica_versions(id.0).1 > s.fleet_seen.load(Ordering::Acquire));
            if refresh || behind {
                s.sync()?;
            }
            return Ok(s);
        }
        let mut seen = 0;
        if let Some(remote) = remote {
            let (held, _) = remote.replica_versions(id.0);
            if !refresh && held > 0 {
                // The replica holds the chat up to `held` (its index row, the owner checked
                // below, says whether it is live there).
                self.core.ensure_flushed(self.core.log.written())?;
                seen = held;
            } else {
                match remote.catch_up_chat(&self.core, id.0, owner)? {
                    Some(head) if !head.deleted => {
                        self.core.ensure_flushed(self.core.log.written())?;
                        seen = head.applied;
                    }
                    _ => return Err(not_found(id)),
                }
            }
        }
        let Some((row, w)) = load_writer(&self.core, id)? else {
            return Err(not_found(id));
        };
        if row.owner != owner {
            return Err(not_found(id));
        }
        let state = Arc::new(ChatState::new(self.core.clone(), id, row.owner.into(), row.created_ms, w));
        state.fleet_seen.store(seen, Ordering::Release);
        self.touch(&state);
        map.insert(id.0, state.clone());
        self.evict(&mut map);
        Ok(state)
    }

    /// Brings the chats in memory up to a read-only store's refresh (`changes`: how its
    /// new batches changed each chat they name; the others did not change) and sets the
    /// next chat id. A chat only appended to is extended with the new messages' entries
    /// from the index, in a new state sharing the old one's entries (no reload of the whole
    /// chat); any other change, or an extension the index does not bear out, forgets the
    /// chat (it loads again at its next open). Handles already given out keep what they hold.
    pub(crate) fn refreshed(&self, changes: &[(u64, ChatChange)], next_chat: u64) {
        let mut map = self.map.lock();
        for (id, change) in changes {
            let Some(old) = map.get(id).cloned() else { continue };
            let fresh = match change {
                ChatChange::Appended { revision, seqs } if !old.deleted.load(Ordering::Acquire) => {
                    let w = old.w.lock();
                    // An index read that fails here is met again, and reported, by the load.
                    match load::extended(&self.core, old.id, &w, *revision, seqs.clone()) {
                        Ok(Some(w)) => Some(ChatState::new(
                            self.core.clone(),
                            old.id,
                            old.owner.clone(),
                            old.created_ms,
                            w,
                        )),
                        Ok(None) | Err(_) => None,
                    }
                }
                _ => None,
            };
            match fresh {
                Some(state) => {
                    let state = Arc::new(state);
                    self.touch(&state);
                    map.insert(*id, state);
                }
                None => {
                    map.remove(id);
                }
            }
        }
        self.next_chat.store(next_chat, Ordering::Relaxed);
    }

    /// Chats in memory that belong to `owner`.
    pub(crate) fn cached_of(&self, owner: &str) -> Vec<Arc<ChatState>> {
        self.map
            .lock()
            .values()
            .filter(|s| &*s.owner == owner && !s.deleted.load(Ordering::Acquire))
            .cloned()
            .collect()
    }

    /// Number of chats in memory.
    pub(crate) fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// Drops least recently used chats above capacity, among those nobody holds and whose
    /// records are all in redb (so reloading them from the index loses nothing).
    fn evict(&self, map: &mut HashMap<u64, Arc<ChatState>>) {
        let cap = self.core.opts.chat_cache_capacity.max(1);
        if map.len() <= cap {
            return;
        }
        let flushed = self.core.index.flushed();
        let mut idle: Vec<(u64, u64)> = map
            .iter()
            .filter(|(_, s)| Arc::strong_count(s) == 1 && s.last_end().is_some_and(|e| e <= flushed))
            .map(|(k, s)| (s.last_used.load(Ordering::Relaxed), *k))
            .collect();
        idle.sort_unstable();
        let excess = map.len() - cap * 9 / 10;
        for (_, k) in idle.into_iter().take(excess) {
            map.remove(&k);
        }
    }
}
