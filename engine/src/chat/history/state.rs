//! The in-memory state of one chat: its writer and its published snapshot.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;

use super::hidden::Hidden;
use crate::base::blob::Verify;
use crate::base::error::{Error, Result};
use crate::base::snapshot::{SnapArc, SnapshotCell};
use crate::disk::log::{Location, Position};
use crate::disk::record::{self, BodyRec, CheckpointRec, CompactionRec, MsgRec, PartRec, PartsRec};
use crate::kernel::store::core::Core;
use crate::kernel::store::remote::{ChatHead, WriteLock};
use crate::model::message::{ChatId, ChatMeta, Message, Pin, Role, StepTag};

/// What a snapshot knows about one message without reading its body.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub seq: u64,
    pub revision: u64,
    pub role: Role,
    pub turn: u64,
    /// Whether this message opened its user turn.
    pub starts_turn: bool,
    pub at_ms: u64,
    /// The step tag; read from the record on first use when the entry came from the index.
    pub step: std::sync::OnceLock<Option<Arc<StepTag>>>,
    /// Where the message record is in the log.
    pub loc: Location,
    /// Whether the message may hold an archived tool result (see
    /// [`MsgHead::may_archive`](crate::disk::record::MsgHead::may_archive)).
    pub may_archive: bool,
    /// The message's token estimate, computed on first use by the store's estimator.
    pub tokens: std::sync::OnceLock<u64>,
    /// The guard's previews of the message's tool results, made on first use (see
    /// [`PreviewMemo`](crate::rules::budget::view::PreviewMemo)).
    pub previews: crate::rules::budget::view::PreviewMemo,
    /// The first part whose tool result holds a pending approval by the default patterns
    /// (its index and the rule's name), scanned on first use (see
    /// [`crate::rules::approval::pending_in_part`]).
    pub pending_json: std::sync::OnceLock<Option<(usize, String)>>,
}

/// An entry's `tokens` seeded with the estimate its message's index row keeps
/// ([`MsgHead::tokens`](crate::disk::record::MsgHead::tokens)) when `core` estimates with the
/// default estimator (whose estimate that is, [`Heuristic::ID`]); else empty, made on first use.
///
/// [`Heuristic::ID`]: crate::model::estimate::Heuristic::ID
pub(crate) fn kept_tokens(core: &Core, kept: Option<u64>) -> std::sync::OnceLock<u64> {
    let ours = core.opts.estimator.id() == crate::model::estimate::Heuristic::ID;
    kept.filter(|_| ours).map(std::sync::OnceLock::from).unwrap_or_default()
}

/// A message's token estimate through its history `entry` (the entry of this very message
/// version, if it has one): with `keep` ([`Options::keep_derived`]), kept in the entry once
/// `estimate` computed it; without, computed by `estimate` on every call. An `estimate` that
/// fails (a read of the message) is this call's error and is not kept: a transient failure
/// must not count as 0 tokens forever.
///
/// [`Options::keep_derived`]: crate::Options::keep_derived
pub(crate) fn tokens_kept<E>(
    entry: Option<&Entry>,
    keep: bool,
    estimate: impl FnOnce() -> std::result::Result<u64, E>,
) -> std::result::Result<u64, E> {
    let Some(entry) = entry.filter(|_| keep) else { return estimate() };
    if let Some(t) = entry.tokens.get() {
        return Ok(*t);
    }
    let t = estimate()?;
    Ok(*entry.tokens.get_or_init(|| t))
}

/// What a chat is at one revision: what its writer keeps and its snapshots show. The
/// writer ([`Writer`]) and each snapshot ([`SnapInner`]) hold one, and read its fields as
/// their own.
#[derive(Debug, Clone)]
pub(crate) struct ChatVersion {
    pub revision: u64,
    pub len: u64,
    pub entries: Arc<super::entries::Entries>,
    pub meta: Arc<ChatMeta>,
    pub meta_version: u64,
    pub last_ms: u64,
    pub pins: Arc<Vec<Pin>>,
    pub compactions: Arc<Vec<CompactionRec>>,
    pub calibration: Arc<HashMap<String, f64>>,
    pub checkpoint: Option<Arc<Published>>,
    /// The hidden messages (soft deletion).
    pub hidden: Arc<Hidden>,
}

/// An immutable state of a chat (behind [`Snapshot`](super::Snapshot)).
#[derive(Debug)]
pub(crate) struct SnapInner {
    pub chat: ChatId,
    pub owner: Arc<str>,
    pub created_ms: u64,
    pub version: ChatVersion,
    pub core: Arc<Core>,
}

impl std::ops::Deref for SnapInner {
    type Target = ChatVersion;

    fn deref(&self) -> &ChatVersion {
        &self.version
    }
}

impl SnapInner {
    /// The entry of `seq` at this snapshot's revision, loaded from the index if it is not in
    /// memory yet (see `entries.rs`); `None` past the chat's messages.
    pub(crate) fn entry(&self, seq: u64) -> Result<Option<&Entry>> {
        if seq >= self.len {
            return Ok(None);
        }
        self.entries.get(&self.core, seq)
    }

    /// [`SnapInner::entry`], an index read that fails taken as no entry: for callers that
    /// compute again what an entry would have cached (an estimate, a preview), or that read
    /// the message next (which reports the failure).
    pub(crate) fn entry_or_none(&self, seq: u64) -> Option<&Entry> {
        self.entry(seq).ok().flatten()
    }
}

/// A published checkpoint held in memory: its record and summary text.
#[derive(Debug)]
pub(crate) struct Published {
    pub rec: CheckpointRec,
    pub summary: Arc<str>,
}

/// The mutable side of a chat, under its lock: the version the next snapshot publishes,
/// and what only writes need.
#[derive(Debug)]
pub(crate) struct Writer {
    pub version: ChatVersion,
    /// The user turn of the last message.
    pub last_turn: u64,
    /// End of the last batch written for this chat.
    pub last_end: Position,
}

impl std::ops::Deref for Writer {
    type Target = ChatVersion;

    fn deref(&self) -> &ChatVersion {
        &self.version
    }
}

impl std::ops::DerefMut for Writer {
    fn deref_mut(&mut self) -> &mut ChatVersion {
        &mut self.version
    }
}

/// What a chat's views keep between calls, in memory only (all of it derived: a chat that
/// leaves memory loses it, and its next view builds it again).
#[derive(Debug)]
pub(crate) struct ViewCaches {
    /// Recent views: (step, raw estimate, model), for `report_usage`.
    pub recent: Mutex<VecDeque<(u64, u64, String)>>,
    /// The step number the next view gets.
    pub counter: AtomicU64,
    /// The last view built, for the next one (see `view_memo`).
    pub memo: Mutex<Option<super::view_memo::ViewMemo>>,
    /// What earlier views cut (kept by later ones: see `view_memo::CutMemo`).
    pub cut: Mutex<super::view_memo::CutMemo>,
    /// The request the previous view served (see `view_memo::LastRequest`).
    pub last_request: Mutex<super::view_memo::LastRequest>,
    /// The handles line of the published checkpoint, made once per checkpoint: (reach, base
    /// revision, text) (see `view::handles`).
    pub handles: Mutex<Option<(u64, u64, Arc<str>)>>,
    /// What the last view left out by summarizing, for the next view of the same shape:
    /// (revision, the view's seq ranges) → (the summarized ranges, their raw tokens).
    #[expect(clippy::type_complexity, reason = "a key and a value, named in the comment")]
    pub summarized: Mutex<Option<(u64, Vec<std::ops::Range<u64>>, (Vec<std::ops::Range<u64>>, u64))>>,
    /// Whether the published checkpoint still stands for its messages: (revision, reach, base
    /// revision) → no message below its reach changed since its base (see `view::build`).
    #[expect(clippy::type_complexity, reason = "a key and a value, named in the comment")]
    pub checkpoint_holds: Mutex<Option<((u64, u64, u64), bool)>>,
}

impl Default for ViewCaches {
    fn default() -> ViewCaches {
        ViewCaches {
            recent: Mutex::new(VecDeque::new()),
            counter: AtomicU64::new(1),
            memo: Mutex::new(None),
            cut: Mutex::new(Default::default()),
            last_request: Mutex::new(Default::default()),
            handles: Mutex::new(None),
            summarized: Mutex::new(None),
            checkpoint_holds: Mutex::new(None),
        }
    }
}

/// A chat held in memory: writes go through `w`, reads load `cell`.
#[derive(Debug)]
pub(crate) struct ChatState {
    pub id: ChatId,
    pub owner: Arc<str>,
    pub created_ms: u64,
    pub cell: SnapshotCell<SnapInner>,
    pub w: Mutex<Writer>,
    /// LRU clock value of the last use.
    pub last_used: AtomicU64,
    /// Set (under `w`) once the chat is deleted: writes and opens fail with `NotFound`.
    pub deleted: std::sync::atomic::AtomicBool,
    /// What the chat's views keep between calls.
    pub view: ViewCaches,
    /// Revision + 1 for which a worker job was last requested (0: none).
    pub requested: AtomicU64,
    /// Fleet mode: the replica's version of the chat (batches applied) the writer state
    /// follows: batches pulled after it are read into the state (only the new messages when
    /// they were appends, else the state loads again).
    pub fleet_seen: AtomicU64,
    /// Fleet mode: the change-notification epoch in which a view last brought the state up
    /// to date (0: none; see [`ChatState::follow_notified`]).
    pub fleet_epoch: AtomicU64,
    pub core: Arc<Core>,
}

impl ChatState {
    pub(crate) fn new(core: Arc<Core>, id: ChatId, owner: Arc<str>, created_ms: u64, w: Writer) -> ChatState {
        let snap = snap_of(&core, id, &owner, created_ms, &w);
        ChatState {
            id,
            owner,
            created_ms,
            cell: SnapshotCell::new(SnapArc::new(snap)),
            w: Mutex::new(w),
            last_used: AtomicU64::new(0),
            view: ViewCaches::default(),
            deleted: std::sync::atomic::AtomicBool::new(false),
            requested: AtomicU64::new(0),
            fleet_seen: AtomicU64::new(0),
            fleet_epoch: AtomicU64::new(0),
            core,
        }
    }

    /// `NotFound` once the chat is deleted. Write paths call it holding `w`, which the
    /// deletion holds while it sets the flag.
    pub(crate) fn live(&self) -> Result<()> {
        if self.deleted.load(std::sync::atomic::Ordering::Acquire) {
            return Err(super::cache::not_found(self.id));
        }
        Ok(())
    }

    /// Takes the writer lock for a write: `NotFound` once the chat is deleted. In fleet mode
    /// the chat is also locked in the remote (until the returned lock drops) and the state
    /// is brought up to every batch another process committed, so the write builds on the
    /// chat's last committed state (dense seqs, the current revision).
    pub(crate) fn lock_write(&self) -> Result<(parking_lot::MutexGuard<'_, Writer>, Option<WriteLock>)> {
        let mut w = self.w.lock();
        self.live()?;
        let Some(remote) = self.core.remote() else { return Ok((w, None)) };
        let Some((lock, head)) = remote.lock_chat(&self.core, self.id.0)? else {
            return Err(super::cache::not_found(self.id));
        };
        self.follow(&mut w, head)?;
        Ok((w, Some(lock)))
    }

    /// Fleet mode: brings the state up to what the remote committed (see
    /// [`ChatState::follow`]), without a write lock. Used when a chat is opened.
    pub(crate) fn sync(&self) -> Result<()> {
        let Some(remote) = self.core.remote() else { return Ok(()) };
        let mut w = self.w.lock();
        match remote.catch_up_chat(&self.core, self.id.0, &self.owner)? {
            Some(head) => self.follow(&mut w, head),
            None => Err(super::cache::not_found(self.id)),
        }
    }

    /// Fleet mode: brings the state up to what the replica holds of the chat, `head` being
    /// what a catch-up just said of it (no query).
    pub(crate) fn follow_head(&self, head: ChatHead) -> Result<()> {
        let mut w = self.w.lock();
        self.follow(&mut w, head)
    }

    /// Fleet mode, before a held chat's view: brings the state up to the commits of other
    /// processes that change notification told of (one query, then what they added), and
    /// asks nothing of the remote when none was told since the state was last brought up to
    /// date in this notification epoch (nor when the store does not listen: then the view
    /// shows the state as it was, and `Store::chat` or a write brings it up to date). A chat
    /// another process deleted, or a remote that cannot be reached now, leaves the state as
    /// it was: the view serves it, as before any notification.
    pub(crate) fn follow_notified(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        let Some(remote) = self.core.remote() else { return Ok(()) };
        let Some(n) = remote.notified(self.id.0) else { return Ok(()) };
        let (applied, pulled) = remote.replica_versions(self.id.0);
        if n.epoch == self.fleet_epoch.load(Ordering::Acquire)
            && n.version <= applied
            && pulled <= self.fleet_seen.load(Ordering::Acquire)
        {
            return Ok(());
        }
        match self.sync() {
            Ok(()) | Err(Error::NotFound { .. }) => {}
            Err(e @ Error::Backend { .. }) => {
                tracing::debug!(chat = self.id.0, error = %e, "fleet: a view could not follow a notified write");
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        // The epoch read before the query: a reconnection since makes the next view ask again.
        self.fleet_epoch.store(n.epoch, Ordering::Release);
        Ok(())
    }

    /// Brings the writer state up to the batches the local replica holds beyond it (`head`,
    /// from the remote): when they only appended messages, the new messages' entries are read
    /// from the index and the state keeps the rest (its entries, their cached estimates and
    /// the view memo: a view after another process's append costs the appended messages);
    /// otherwise the state loads again from the replica. Marks the chat deleted when it is.
    fn follow(&self, w: &mut Writer, head: ChatHead) -> Result<()> {
        use std::sync::atomic::Ordering;
        if head.deleted {
            self.deleted.store(true, Ordering::Release);
            *self.view.memo.lock() = None;
            return Err(super::cache::not_found(self.id));
        }
        let seen = self.fleet_seen.load(Ordering::Acquire);
        if head.pulled <= seen {
            return Ok(());
        }
        self.core.ensure_flushed(self.core.log.written())?;
        if head.changed <= seen
            && let Some(extended) = super::load::appended(&self.core, self.id, w)?
        {
            *w = extended;
            self.fleet_seen.store(head.applied, Ordering::Release);
            self.publish(w);
            return Ok(());
        }
        let Some((_, fresh)) = super::load::load_writer(&self.core, self.id)? else {
            return Err(super::cache::not_found(self.id));
        };
        *w = Writer { last_end: w.last_end.max(fresh.last_end), ..fresh };
        self.fleet_seen.store(head.applied, Ordering::Release);
        *self.view.memo.lock() = None;
        self.publish(w);
        Ok(())
    }

    /// Publishes the writer's state as the new snapshot.
    pub(crate) fn publish(&self, w: &Writer) {
        self.cell.publish(SnapArc::new(snap_of(&self.core, self.id, &self.owner, self.created_ms, w)));
    }

    /// The end of this chat's last write (for eviction: evictable once redb has it).
    pub(crate) fn last_end(&self) -> Option<Position> {
        self.w.try_lock().map(|w| w.last_end)
    }
}

fn snap_of(core: &Arc<Core>, chat: ChatId, owner: &Arc<str>, created_ms: u64, w: &Writer) -> SnapInner {
    SnapInner { chat, owner: owner.clone(), created_ms, version: w.version.clone(), core: core.clone() }
}

/// Reads a message (header and body) from the log, or takes it as a read-only refresh
/// decoded it from the same verified bytes (see `store/listed.rs`).
pub(crate) fn read_message(core: &Core, chat: ChatId, loc: Location) -> Result<Message> {
    if loc == super::load::LOST {
        return Err(Error::NotFound { what: format!("a message of {chat}: missing or damaged in the log") });
    }
    let corrupt = |why: String| Error::corrupt(loc.segment, loc.offset, why);
    let rec: MsgRec = match core.listed.take(loc) {
        Some(rec) => rec,
        None => {
            let raw = core.read(loc, Verify::Checksum)?;
            record::message_kind(raw.kind).and_then(|k| record::message(k, &raw.payload)).map_err(corrupt)?
        }
    };
    if rec.chat != chat.0 {
        return Err(corrupt(format!("message record of chat {}, expected {chat}", ChatId(rec.chat))));
    }
    let parts = match rec.body {
        BodyRec::Inline(p) => p,
        BodyRec::Blob(id) => {
            let blob = core.get_blob(&crate::base::blob::BlobId(id), Verify::Hash)?;
            let pr: PartsRec = record::decode(&blob, "message body").map_err(corrupt)?;
            pr.parts
        }
    };
    Ok(Message {
        seq: rec.seq,
        revision: rec.revision,
        role: record::role_of(rec.role).map_err(corrupt)?,
        turn: rec.turn,
        parts: parts.into_iter().map(PartRec::into_part).collect(),
        step: rec.step.map(|s| s.to_tag()),
        at_ms: rec.at_ms,
        feedback: record::is_feedback(rec.role),
    })
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
