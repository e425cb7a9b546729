//! The engine chat handles a `Store` keeps for its Python `Chat`s, so that a call on a
//! `Chat` reads through a handle it already holds instead of resolving the chat again.
//!
//! Resolving (`undertext::Store::chat`) is what lets a fleet store see other processes'
//! writes: it asks PostgreSQL whether the chat moved (one round trip). A held handle makes no
//! round trip, so reads of a held chat show its state as of the last resolution, this
//! process's own writes included (docs/FLEET.md, "Seeing other processes' writes"); `Store.chat` and
//! `Chat.refresh` resolve again. The handles live in the Python `Store`, not in each `Chat`,
//! so closing the store drops them all (an engine handle keeps its store open).

use std::collections::HashMap;
use std::sync::Mutex;

use undertext::{Chat, ChatId, Store};

/// Engine chat handles by chat id, at most `capacity` of them: past it they are all dropped
/// (and resolved again on their next use). A held chat is never evicted from the engine's
/// chat cache, so the store holds at most half of that cache's capacity.
///
/// ```ignore
/// let held = Held::for_store(&store);
/// held.hold(store.chat("alice", id)?);
/// assert!(held.get("alice", id).is_some() && held.get("bob", id).is_none());
/// ```
#[derive(Debug)]
pub(crate) struct Held {
    chats: Mutex<HashMap<u64, Chat>>,
    capacity: usize,
}

impl Held {
    /// Room for half of `store`'s chat cache (at least one chat).
    pub(crate) fn for_store(store: &Store) -> Held {
        Held { chats: Mutex::new(HashMap::new()), capacity: (store.options().chat_cache_capacity / 2).max(1) }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Chat>> {
        match self.chats.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The held handle of chat `id` when it belongs to `owner`.
    pub(crate) fn get(&self, owner: &str, id: ChatId) -> Option<Chat> {
        self.map().get(&id.0).filter(|c| c.owner() == owner).cloned()
    }

    /// Holds `chat` (replacing any handle of the same chat).
    pub(crate) fn hold(&self, chat: Chat) {
        let mut map = self.map();
        if map.len() >= self.capacity && !map.contains_key(&chat.id().0) {
            map.clear();
        }
        map.insert(chat.id().0, chat);
    }

    /// Drops the handle of chat `id` (deleted: its next use resolves it, and gets `NotFound`).
    pub(crate) fn forget(&self, id: ChatId) {
        self.map().remove(&id.0);
    }

    /// Drops every handle (the store closes, or a read-only refresh replaced chats' states).
    pub(crate) fn clear(&self) {
        self.map().clear();
    }
}
