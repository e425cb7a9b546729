//! Writing parsed sessions into a store: one chat per session, idempotently and exactly.
//!
//! A session already in the store is compared with its chat message by message: when the
//! stored messages are an exact prefix of the transcript, the rest is appended; otherwise the
//! chat is truncated to the longest common prefix and the rest appended as a new revision
//! (the old content stays readable through [`Chat::snapshot_at`](crate::Chat::snapshot_at)).
//! So after any sequence of imports the chat holds exactly the last transcript imported.
//!
//! Memory does not grow with a session's length beyond the session itself: messages are
//! written [`CHUNK`] to a transaction, compared with the stored chat a chunk at a time, and
//! the chat's written entries leave memory once indexed (`history/entries.rs`).

use std::collections::HashMap;

use super::{Condensation, Problem, Session};
use crate::api::Chat;
use crate::api::Store;
use crate::base::blob::BlobId;
use crate::base::error::{Error, Result};
use crate::chat::history::{ChatId, ChatMeta, Message, MetaField, NewMessage, Page, Part, ToolContent};
use crate::rules::compaction::{Plan, Squish};

/// Metadata key holding a chat's session key ([`Session::key`]).
pub const KEY: &str = "import.key";
/// Metadata key holding the session key of the chat's parent (a side chain's main session).
pub const PARENT: &str = "import.parent";
/// Metadata key holding the parent's chat id, once the parent is in the store.
pub const PARENT_CHAT: &str = "import.parent_chat";
/// Metadata key holding the session's format name.
pub const FORMAT: &str = "import.format";
/// Metadata key holding the file the session was first imported from.
pub const SOURCE: &str = "import.source";

/// Metadata key holding a session's condensations (OpenHands `Condensation` events) as a
/// JSON list of `{"from", "to", "forgotten", "summary", "applied"}`: the messages `from..to`
/// it forgot (seqs), how many events it named, its summary, and whether it is also a
/// compaction record of the chat (see [`import_sessions`]).
pub const CONDENSATIONS: &str = "import.condensations";

/// Metadata key present while a chat holds only part of its session: a session longer than
/// [`CHUNK`] messages is written in several transactions, and the chat is marked from its
/// first until the transaction after its last. A crash in between leaves the chat marked,
/// holding a prefix of the session; the next import of it appends the rest and clears the mark.
pub const INCOMPLETE: &str = "import.incomplete";

/// Messages written per transaction: a session (or the part of it a chat lacks) of up to this
/// many is written in one, whole or not at all after a crash; a longer one in several (see
/// [`INCOMPLETE`]).
pub const CHUNK: usize = 4096;

/// What [`import_sessions`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Sessions that became new chats.
    pub sessions_new: u64,
    /// Sessions already in the store, unchanged (nothing added).
    pub sessions_unchanged: u64,
    /// Sessions already in the store that had grown: their new messages were appended (a
    /// chat an interrupted import left short counts here when the next import completes it).
    pub sessions_extended: u64,
    /// Sessions already in the store whose stored messages were not a prefix of the
    /// transcript (a message completed or changed since, or another transcript with the same
    /// session key): the chat was truncated to the longest common prefix and the rest
    /// appended, as a new revision.
    pub sessions_rewritten: u64,
    /// Messages dropped by those truncations (readable at the older revision).
    pub messages_replaced: u64,
    /// Messages appended.
    pub messages: u64,
    /// Tool results among them.
    pub tool_results: u64,
    /// Tool results archived on append (longer than the store's `archive_threshold`).
    pub archived: u64,
    /// Side chains linked to their parent chat in this call.
    pub linked: u64,
    /// Condensations recorded as compaction records of their chat in this call.
    pub compactions: u64,
    /// Condensations the compaction linter refused (kept in the chat's
    /// [`CONDENSATIONS`] metadata only), each with the reason.
    pub compactions_refused: Vec<String>,
    /// Sessions of this call whose key an earlier session of the same call (from another
    /// file) had too: two transcripts claiming one session id. The later one is what the
    /// chat holds (the earlier stays readable at an older revision); each is reported here.
    pub key_conflicts: Vec<Problem>,
    /// The import was stopped before its last session ([`import_sessions_until`]): the
    /// sessions counted above are whole in the store; the others were not begun.
    pub interrupted: bool,
}

/// True when a stored tool result holds the same text as a transcript's.
fn same_content(stored: &ToolContent, new: &ToolContent) -> bool {
    match (stored, new) {
        (ToolContent::Text(a), ToolContent::Text(b)) => a == b,
        (ToolContent::Archived { archive, .. }, ToolContent::Text(t))
        | (ToolContent::Text(t), ToolContent::Archived { archive, .. }) => {
            archive.bytes == t.len() as u64 && archive.id == BlobId::of(t.as_bytes())
        }
        (ToolContent::Archived { archive: a, .. }, ToolContent::Archived { archive: b, .. }) => a.id == b.id,
    }
}

/// True when a stored message is the transcript's message (an archived result counts as
/// its full text).
fn same_message(stored: &Message, new: &NewMessage) -> bool {
    stored.role == new.role
        && stored.feedback == new.feedback
        && stored.parts.len() == new.parts.len()
        && stored.parts.iter().zip(&new.parts).all(|(a, b)| match (a, b) {
            (
                Part::ToolResult { call_id: ca, content: xa, is_error: ea },
                Part::ToolResult { call_id: cb, content: xb, is_error: eb },
            ) => ca == cb && ea == eb && same_content(xa, xb),
            _ => a == b,
        })
}

/// The chat of `owner` that session `key` was imported into, and its messages stored (an
/// index lookup, [`Store::find_chats`]; the first created if several hold the key).
pub fn imported_chat(store: &Store, owner: &str, key: &str) -> Result<Option<(ChatId, u64)>> {
    Ok(store
        .find_chats(owner, MetaField::Extra(KEY), key)?
        .into_iter()
        .min_by_key(|c| c.id)
        .map(|c| (c.id, c.len)))
}

/// The imported chats of `owner`: session key to (chat, messages stored). A scan of the
/// owner's chats: to find one session's chat, [`imported_chat`].
pub fn imported_chats(store: &Store, owner: &str) -> Result<HashMap<String, (ChatId, u64)>> {
    let mut out = HashMap::new();
    let mut page = Page { limit: 1000, after: None };
    loop {
        let p = store.chats(owner, page.clone())?;
        for c in &p.chats {
            if let Some(k) = c.meta.extra.get(KEY) {
                out.insert(k.clone(), (c.id, c.len));
            }
        }
        match p.next {
            Some(n) => page.after = Some(n),
            None => return Ok(out),
        }
    }
}

/// Writes `sessions` into chats of `owner`. A session whose key is already a chat's [`KEY`]
/// is compared with that chat: when the stored messages are an exact prefix of the session,
/// only the rest is appended (nothing when the transcript is unchanged, so importing the same
/// transcript twice adds nothing); otherwise the chat is truncated to the longest common
/// prefix and the rest appended, a new revision ([`ImportReport::sessions_rewritten`]).
///
/// A new session's chat is created with all its messages in one transaction, and a grown
/// session's new messages are appended in one, when they are at most [`CHUNK`]: after a crash
/// such a session is in the store whole (as of this import or the one before) or not at all,
/// never a chat with part of what this import added. More are written [`CHUNK`] to a
/// transaction, so that memory stays bounded, and the chat is marked [`INCOMPLETE`] until the
/// last is written: after a crash it holds a prefix of the session, marked, and the next
/// import of the session completes it. Each message is dated by [`Session::at_ms`] (the transcript's own times; the
/// import's time where the format records none), and the chat's creation by its first
/// message, so a chat's last activity is its conversation's, whenever it was imported.
///
/// A session's [`Condensation`]s are kept in the chat's [`CONDENSATIONS`] metadata, and each
/// one whose forgotten messages are one range is also recorded with
/// [`Chat::compact`](crate::Chat::compact) as a squish of that range into its summary when
/// the compaction linter accepts it (it refuses, for instance, anything in the last two user
/// turns, and an OpenHands conversation is usually one user turn). A side chain's chat records
/// its parent's key ([`PARENT`]) and, once the parent is in the store, its chat id
/// ([`PARENT_CHAT`]); side chains are written after the other sessions, so a parent imported
/// in the same call is named from the start. `progress` is called after each session.
pub fn import_sessions(
    store: &Store,
    owner: &str,
    sessions: &[Session],
    progress: impl FnMut(&Session),
) -> Result<ImportReport> {
    import_sessions_until(store, owner, sessions, progress, || false)
}

/// [`import_sessions`], asking `stop` before each session: when it answers `true` the import
/// ends there (every session written so far is whole, none is begun) with
/// [`ImportReport::interrupted`] set. The CLI's Ctrl-C.
pub fn import_sessions_until(
    store: &Store,
    owner: &str,
    sessions: &[Session],
    mut progress: impl FnMut(&Session),
    stop: impl Fn() -> bool,
) -> Result<ImportReport> {
    // The chats of the sessions seen so far (each looked up once, by its key).
    let mut known: HashMap<String, Option<(ChatId, u64)>> = HashMap::new();
    let lookup =
        |known: &mut HashMap<String, Option<(ChatId, u64)>>, key: &str| -> Result<Option<(ChatId, u64)>> {
            if let Some(v) = known.get(key) {
                return Ok(*v);
            }
            let v = imported_chat(store, owner, key)?;
            known.insert(key.to_string(), v);
            Ok(v)
        };
    let threshold = store.options().archive_threshold;
    let mut r = ImportReport::default();
    let mut read_from: HashMap<&str, &std::path::Path> = HashMap::new();
    // Main sessions first, then side chains (each group in input order).
    let order = sessions
        .iter()
        .filter(|s| s.parent_key.is_none())
        .chain(sessions.iter().filter(|s| s.parent_key.is_some()));
    for s in order {
        if stop() {
            r.interrupted = true;
            break;
        }
        if let Some(earlier) = read_from.insert(&s.key, &s.source)
            && earlier != s.source
        {
            r.key_conflicts.push(s.read_twice(earlier));
        }
        let times = (s.at_ms.len() == s.messages.len() && !s.at_ms.is_empty()).then_some(s.at_ms.as_slice());
        let count = |r: &mut ImportReport, msgs: &[NewMessage]| {
            for p in msgs.iter().flat_map(|m| &m.parts) {
                if let Part::ToolResult { content, .. } = p {
                    r.tool_results += 1;
                    if matches!(content, ToolContent::Text(t) if t.len() > threshold) {
                        r.archived += 1;
                    }
                }
            }
            r.messages += msgs.len() as u64;
        };
        let Some((id, _)) = lookup(&mut known, &s.key)? else {
            let parent = match &s.parent_key {
                Some(p) => lookup(&mut known, p)?.map(|(id, _)| id),
                None => None,
            };
            r.linked += u64::from(parent.is_some());
            let mut meta = chat_meta(s, parent);
            let first = s.messages.len().min(CHUNK);
            if first < s.messages.len() {
                meta.extra.insert(INCOMPLETE.into(), "true".into());
            }
            let id = store.create_chat_with(
                owner,
                meta,
                s.messages[..first].to_vec(),
                times.map(|t| &t[..first]),
            )?;
            known.insert(s.key.clone(), Some((id, s.messages.len() as u64)));
            r.sessions_new += 1;
            count(&mut r, &s.messages);
            let chat = store.chat(owner, id)?;
            append_chunks(&chat, &s.messages[first..], times.map(|t| &t[first..]))?;
            record_condensations(&chat, &s.condensations, u64::MAX, &mut r)?;
            progress(s);
            continue;
        };
        let chat = store.chat(owner, id)?;
        let snap = chat.snapshot();
        let stored = usize::try_from(snap.len()).unwrap_or(usize::MAX);
        let common = common_prefix(&snap, &s.messages)?;
        let mut kept = u64::MAX;
        if common < stored {
            kept = common as u64;
            chat.truncate(common as u64, snap.revision())?;
            r.sessions_rewritten += 1;
            r.messages_replaced += (stored - common) as u64;
        } else if common == s.messages.len() {
            r.sessions_unchanged += 1;
        } else {
            // Grown, or a chat an interrupted import of an older build left short (even empty).
            r.sessions_extended += 1;
        }
        let rest = &s.messages[common..];
        if rest.len() > CHUNK {
            let mut meta = chat.meta();
            if meta.extra.insert(INCOMPLETE.into(), "true".into()).is_none() {
                chat.set_meta_at(meta, chat.last_activity_ms())?;
            }
        }
        append_chunks(&chat, rest, times.map(|t| &t[common..]))?;
        count(&mut r, rest);
        known.insert(s.key.clone(), Some((id, s.messages.len() as u64)));
        record_condensations(&chat, &s.condensations, kept, &mut r)?;
        progress(s);
    }
    // Link side chains to parents present now (imported by an earlier call, or a parent
    // that came after its side chain).
    for s in sessions.iter().filter(|s| s.parent_key.is_some()) {
        let Some(parent) = s.parent_key.as_ref() else { continue };
        let Some(Some((id, _))) = known.get(&s.key).copied() else { continue };
        let Some((parent_id, _)) = lookup(&mut known, parent)? else { continue };
        let chat = store.chat(owner, id)?;
        let mut meta = chat.meta();
        if meta.extra.get(PARENT_CHAT) != Some(&parent_id.to_string()) {
            meta.extra.insert(PARENT_CHAT.into(), parent_id.to_string());
            // Bookkeeping, not activity: the chat's last activity stays its conversation's.
            chat.set_meta_at(meta, chat.last_activity_ms())?;
            r.linked += 1;
        }
    }
    Ok(r)
}

/// The number of messages of `snap` (hidden ones included) that are the first messages of
/// `messages`, read [`CHUNK`] at a time.
fn common_prefix(snap: &crate::chat::history::Snapshot, messages: &[NewMessage]) -> Result<usize> {
    let n = snap.len().min(messages.len() as u64);
    let mut common = 0usize;
    let mut from = 0u64;
    while from < n {
        let to = (from + CHUNK as u64).min(n);
        let stored = snap.range_with_hidden(from..to)?;
        let new = &messages[common..];
        let same = stored.iter().zip(new).take_while(|(a, b)| same_message(a, b)).count();
        common += same;
        if same < stored.len() {
            break;
        }
        from = to;
    }
    Ok(common)
}

/// Appends `messages` to `chat`, [`CHUNK`] to a transaction (each stamped with its time
/// from `times`, when given), then clears the chat's [`INCOMPLETE`] mark if it has one.
fn append_chunks(chat: &Chat, messages: &[NewMessage], times: Option<&[u64]>) -> Result<()> {
    for (i, part) in messages.chunks(CHUNK).enumerate() {
        match times {
            Some(t) => chat.append_batch_at(part.to_vec(), &t[i * CHUNK..i * CHUNK + part.len()])?,
            None => chat.append_batch(part.to_vec())?,
        };
    }
    let mut meta = chat.meta();
    if meta.extra.remove(INCOMPLETE).is_some() {
        // Bookkeeping, not activity: the chat's last activity stays its conversation's.
        chat.set_meta_at(meta, chat.last_activity_ms())?;
    }
    Ok(())
}

/// Keeps `conds` in the chat's [`CONDENSATIONS`] metadata and records each one not recorded
/// yet as a compaction (a squish of its range into its summary) when the linter accepts it.
/// `kept` is how many messages this import left as they were (all when it only appended): a
/// compaction recorded before over messages since rewritten no longer applies, so it is
/// recorded again.
fn record_condensations(chat: &Chat, conds: &[Condensation], kept: u64, r: &mut ImportReport) -> Result<()> {
    use serde_json::{Value, json};
    if conds.is_empty() {
        return Ok(());
    }
    let mut meta = chat.meta();
    let before: Vec<Value> = meta
        .extra
        .get(CONDENSATIONS)
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default();
    let mut list = Vec::with_capacity(conds.len());
    for (i, c) in conds.iter().enumerate() {
        let entry = json!({
            "from": c.from, "to": c.to, "forgotten": c.forgotten_events, "summary": c.summary,
        });
        let same = c.to <= kept
            && before.get(i).is_some_and(|b| {
                ["from", "to", "forgotten", "summary"].iter().all(|k| b.get(k) == entry.get(k))
            });
        let applied = if same {
            before.get(i).and_then(|b| b.get("applied")).and_then(Value::as_bool).unwrap_or(false)
        } else if !c.contiguous || c.from >= c.to || c.to > chat.len() {
            r.compactions_refused.push(format!(
                "condensation {i} of {}: its forgotten messages are not one range of the chat \
                 (expected contiguous seqs, found {}..{}{})",
                chat.id(),
                c.from,
                c.to,
                if c.contiguous { "" } else { " with gaps" }
            ));
            false
        } else {
            let plan = Plan {
                trims: Vec::new(),
                squishes: vec![Squish { from: c.from, to: c.to, rewrite: c.summary.clone() }],
            };
            match chat.compact(&plan, chat.revision()) {
                Ok(_) => {
                    r.compactions += 1;
                    true
                }
                Err(Error::Lint { problems }) => {
                    let why: Vec<String> = problems.iter().map(ToString::to_string).collect();
                    r.compactions_refused.push(format!(
                        "condensation {i} of {}: kept in metadata `{CONDENSATIONS}` only, the compaction \
                         linter refused it: {}",
                        chat.id(),
                        why.join("; ")
                    ));
                    false
                }
                Err(e) => return Err(e),
            }
        };
        let mut entry = entry;
        entry["applied"] = Value::Bool(applied);
        list.push(entry);
    }
    let text = Value::Array(list).to_string();
    if meta.extra.get(CONDENSATIONS) != Some(&text) {
        meta.extra.insert(CONDENSATIONS.into(), text);
        chat.set_meta(meta)?;
    }
    Ok(())
}

/// Writes one session whose messages arrive in pieces (a transcript read a line at a time,
/// see `stream.rs`), with the outcome [`import_sessions`] gives it whole: a new chat, or the
/// stored chat compared piece by piece and extended, or cut at the first message that
/// differs (or at the session's end) and the rest appended as a new revision. Every piece is
/// one transaction; the chat is marked [`INCOMPLETE`] from its first write until
/// [`SessionWriter::finish`] when the session takes more than one.
pub(super) struct SessionWriter<'a> {
    store: &'a Store,
    owner: &'a str,
    /// The session's key, title, model, format, source and parent (its messages are not used).
    session: &'a Session,
    /// Messages in the whole session.
    total: u64,
    chat: Option<(Chat, crate::chat::history::Snapshot)>,
    /// Messages of the session seen so far.
    pos: u64,
    /// Whether the stored chat was cut (no more comparing).
    diverged: bool,
    marked: bool,
    created: bool,
    threshold: usize,
    /// What the writes did.
    pub report: ImportReport,
}

impl<'a> SessionWriter<'a> {
    /// A writer of `session` (`total` messages) into its chat of `owner`, found by its key.
    pub(super) fn begin(
        store: &'a Store,
        owner: &'a str,
        session: &'a Session,
        total: u64,
    ) -> Result<SessionWriter<'a>> {
        let chat = match imported_chat(store, owner, &session.key)? {
            Some((id, _)) => {
                let chat = store.chat(owner, id)?;
                let snap = chat.snapshot();
                Some((chat, snap))
            }
            None => None,
        };
        let threshold = store.options().archive_threshold;
        Ok(SessionWriter {
            store,
            owner,
            session,
            total,
            chat,
            pos: 0,
            diverged: false,
            marked: false,
            created: false,
            threshold,
            report: ImportReport::default(),
        })
    }

    fn count(&mut self, msgs: &[NewMessage]) {
        for p in msgs.iter().flat_map(|m| &m.parts) {
            if let Part::ToolResult { content, .. } = p {
                self.report.tool_results += 1;
                if matches!(content, ToolContent::Text(t) if t.len() > self.threshold) {
                    self.report.archived += 1;
                }
            }
        }
        self.report.messages += msgs.len() as u64;
    }

    /// Marks the stored chat [`INCOMPLETE`] before its first change when more writes follow
    /// (`more`).
    fn mark(&mut self, chat: &Chat, more: bool) -> Result<()> {
        if self.marked || !more {
            return Ok(());
        }
        let mut meta = chat.meta();
        if meta.extra.insert(INCOMPLETE.into(), "true".into()).is_none() {
            chat.set_meta_at(meta, chat.last_activity_ms())?;
        }
        self.marked = true;
        Ok(())
    }

    /// Creates the session's chat holding `msgs` (the session's first messages).
    fn create(&mut self, msgs: Vec<NewMessage>, times: Option<&[u64]>) -> Result<()> {
        let n = msgs.len() as u64;
        let s = self.session;
        let parent = match &s.parent_key {
            Some(p) => imported_chat(self.store, self.owner, p)?.map(|(id, _)| id),
            None => None,
        };
        self.report.linked += u64::from(parent.is_some());
        let mut meta = chat_meta(s, parent);
        if n < self.total {
            meta.extra.insert(INCOMPLETE.into(), "true".into());
            self.marked = true;
        }
        self.count(&msgs);
        let id = self.store.create_chat_with(self.owner, meta, msgs, times)?;
        let chat = self.store.chat(self.owner, id)?;
        let snap = chat.snapshot();
        self.chat = Some((chat, snap));
        self.created = true;
        self.pos = n;
        Ok(())
    }

    /// Writes the session's next messages, each with its time when `times` is given.
    pub(super) fn write(&mut self, msgs: Vec<NewMessage>, times: Option<&[u64]>) -> Result<()> {
        let n = msgs.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let Some((chat, snap)) = self.chat.take() else { return self.create(msgs, times) };
        let stored = snap.len();
        let mut same = 0usize;
        if !self.diverged && self.pos < stored {
            let end = (self.pos + n).min(stored);
            let old = snap.range_with_hidden(self.pos..end)?;
            same = old.iter().zip(&msgs).take_while(|(a, b)| same_message(a, b)).count();
            if same < old.len() {
                let at = self.pos + same as u64;
                self.mark(&chat, at < self.total)?;
                chat.truncate(at, snap.revision())?;
                self.diverged = true;
                self.report.messages_replaced += stored - at;
            }
        }
        if same < msgs.len() {
            let start = self.pos + same as u64;
            self.mark(&chat, start + ((msgs.len() - same) as u64) < self.total)?;
            let rest: Vec<NewMessage> = msgs.into_iter().skip(same).collect();
            self.count(&rest);
            match times {
                Some(t) => chat.append_batch_at(rest, &t[same..])?,
                None => chat.append_batch(rest)?,
            };
        }
        self.pos += n;
        self.chat = Some((chat, snap));
        Ok(())
    }

    /// Ends the session: a stored chat longer than it is cut to it; the [`INCOMPLETE`] mark
    /// is cleared; the session counted as new, unchanged, grown or rewritten.
    pub(super) fn finish(mut self) -> Result<ImportReport> {
        if self.chat.is_none() {
            // A session without messages is a chat too, as `import_sessions` makes it.
            self.create(Vec::new(), None)?;
        }
        let Some((chat, snap)) = self.chat.take() else { return Ok(self.report) };
        let stored = snap.len();
        if self.created {
            self.report.sessions_new = 1;
        } else if !self.diverged && self.pos < stored {
            chat.truncate(self.pos, snap.revision())?;
            self.report.messages_replaced += stored - self.pos;
            self.report.sessions_rewritten = 1;
        } else if self.diverged {
            self.report.sessions_rewritten = 1;
        } else if self.pos == stored {
            self.report.sessions_unchanged = 1;
        } else {
            self.report.sessions_extended = 1;
        }
        let mut meta = chat.meta();
        if meta.extra.remove(INCOMPLETE).is_some() {
            chat.set_meta_at(meta, chat.last_activity_ms())?;
        }
        Ok(self.report)
    }
}

/// The metadata of a session's new chat: its title and model, its import key, format and
/// source, and its parent's key and (when imported already) chat.
fn chat_meta(s: &Session, parent_chat: Option<ChatId>) -> ChatMeta {
    let mut meta = ChatMeta { title: s.title.clone(), model: s.model.clone(), ..ChatMeta::default() };
    meta.extra.insert(KEY.into(), s.key.clone());
    meta.extra.insert(FORMAT.into(), s.format.name().into());
    meta.extra.insert(SOURCE.into(), s.source.display().to_string());
    if let Some(p) = &s.parent_key {
        meta.extra.insert(PARENT.into(), p.clone());
        if let Some(id) = parent_chat {
            meta.extra.insert(PARENT_CHAT.into(), id.to_string());
        }
    }
    meta
}
