//! [`Chat`]: a handle on one chat of one owner.

use std::ops::Range;
use std::sync::Arc;

use super::Store;
use crate::base::blob::BlobId;
use crate::base::error::LintProblem;
use crate::base::error::Result;
use crate::chat::archive::Unit;
use crate::chat::checkpoint::{self, Checkpoint, CheckpointOptions, Summarizer};
use crate::chat::history::{ChatRef, ChatState, Snapshot};
use crate::chat::view::ChatView;
use crate::model::message::{Attempt, ChatId, ChatMeta, Message, NewMessage, StepStatus};
use crate::rules::approval::{ApprovalPatterns, Pending};
use crate::rules::budget::{Budget, IndexLine, View};
use crate::rules::compaction::Plan;

/// A handle on one chat of one owner. Cheap to clone; all handles share the chat.
#[derive(Debug, Clone)]
pub struct Chat {
    /// Before `store` (fields drop in order): the last handle of a closed store lets go of
    /// the chat first, so that the store's close finds nothing else holding its core and
    /// seals the index (engine/FORMAT.md, "The index's seal").
    pub(super) state: Arc<ChatState>,
    pub(super) store: Store,
}

impl Chat {
    /// The chat as `history` and `checkpoint` take it.
    fn chat(&self) -> ChatRef<'_> {
        ChatRef { state: &self.state, archives: &self.store.inner.archives }
    }

    /// The chat as `view` takes it.
    fn view_of(&self) -> ChatView<'_> {
        ChatView { chat: self.chat(), worker: &self.store.inner.worker }
    }

    /// The chat's id.
    pub fn id(&self) -> ChatId {
        self.state.id
    }

    /// Its owner.
    pub fn owner(&self) -> &str {
        &self.state.owner
    }

    /// The current snapshot (a few atomic operations, no lock).
    pub fn snapshot(&self) -> Snapshot {
        self.chat().snapshot()
    }

    /// Current revision: starts at 0, +1 per edit, truncation or hide; appends do not change it.
    pub fn revision(&self) -> u64 {
        self.chat().revision()
    }

    /// Number of messages (the next `seq`).
    pub fn len(&self) -> u64 {
        self.chat().len()
    }

    /// True when the chat has no message.
    pub fn is_empty(&self) -> bool {
        self.chat().is_empty()
    }

    /// Current metadata.
    pub fn meta(&self) -> ChatMeta {
        self.chat().meta()
    }

    /// Replaces the metadata; returns the new version (versions start at 1).
    pub fn set_meta(&self, meta: ChatMeta) -> Result<u64> {
        self.store.same_process()?;
        self.chat().set_meta(meta)
    }

    /// The metadata as of `version`.
    pub fn meta_at(&self, version: u64) -> Result<ChatMeta> {
        self.store.same_process()?;
        self.chat().meta_at(version)
    }

    /// Appends one message; returns its `seq`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// # let chat = store.chat("a", store.create_chat("a", Default::default())?)?;
    /// use undertext::NewMessage;
    /// assert_eq!(chat.append(NewMessage::system("be brief"))?, 0);
    /// assert_eq!(chat.append(NewMessage::user("hi"))?, 1);
    /// assert_eq!(chat.get(1)?.turn, 1);
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn append(&self, message: NewMessage) -> Result<u64> {
        self.store.same_process()?;
        self.chat().append(message)
    }

    /// Appends one message unless an append with the same idempotency `key` (1 to 256 bytes,
    /// any the harness chooses: a request id, a hash of its turn) was made to this chat
    /// before: then nothing is written and that append's seq is returned. A harness that does
    /// not know whether an append went through (an error after the commit was sent, a crash
    /// before the answer) calls again with the same key and gets one message, at one seq.
    ///
    /// The key is kept in the log with the append (a record beside its messages: engine/FORMAT.md,
    /// "Append keys") for as long as the chat exists; in fleet mode it is shared by every
    /// process, and a retry after a commit whose answer was lost finds it. A key given again
    /// with another number of messages is [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// (the messages themselves are not compared).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// # let chat = store.chat("a", store.create_chat("a", Default::default())?)?;
    /// use undertext::NewMessage;
    /// assert_eq!(chat.append_idempotent(NewMessage::user("hi"), "req-1")?, 0);
    /// // The answer was lost: the same call again.
    /// assert_eq!(chat.append_idempotent(NewMessage::user("hi"), "req-1")?, 0);
    /// assert_eq!(chat.append_idempotent(NewMessage::user("next"), "req-2")?, 1);
    /// assert_eq!(chat.len(), 2);
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn append_idempotent(&self, message: NewMessage, key: &str) -> Result<u64> {
        self.append_batch_idempotent(vec![message], key).map(|r| r.start)
    }

    /// [`Chat::append_batch`] with an idempotency key, as [`Chat::append_idempotent`]: the
    /// same key again returns the seqs of the first append and writes nothing.
    pub fn append_batch_idempotent(&self, messages: Vec<NewMessage>, key: &str) -> Result<Range<u64>> {
        self.store.same_process()?;
        self.chat().append_batch_idempotent(messages, key)
    }

    /// [`Chat::append_batch`] and [`Chat::set_meta`] in one transaction, made durable by one
    /// log sync: after a crash both happened or neither (a harness that keeps a summary of
    /// the transcript in the metadata writes both at the cost of one). The new metadata
    /// version is [`Snapshot::meta_version`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use undertext::{ChatMeta, NewMessage, Store};
    /// let store = Store::open(dir.path(), Default::default())?;
    /// let chat = store.chat("alice", store.create_chat("alice", ChatMeta::default())?)?;
    /// let meta = ChatMeta { title: "2 entries".into(), ..chat.meta() };
    /// let seqs = chat.append_batch_with_meta(vec![NewMessage::user("a"), NewMessage::user("b")], meta)?;
    /// assert_eq!(seqs, 0..2);
    /// assert_eq!((chat.meta().title.as_str(), chat.snapshot().meta_version()), ("2 entries", 2));
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn append_batch_with_meta(&self, messages: Vec<NewMessage>, meta: ChatMeta) -> Result<Range<u64>> {
        self.store.same_process()?;
        self.chat().append_batch_with_meta(messages, meta)
    }

    /// Appends messages atomically: after a crash all of them are there or none.
    pub fn append_batch(&self, messages: Vec<NewMessage>) -> Result<Range<u64>> {
        self.store.same_process()?;
        self.chat().append_batch(messages)
    }

    /// Appends messages atomically, each dated `at_ms` (one per message, Unix ms) instead of
    /// now: the importers keep a transcript's own times (see `history::append`).
    pub(crate) fn append_batch_at(&self, messages: Vec<NewMessage>, at_ms: &[u64]) -> Result<Range<u64>> {
        self.store.same_process()?;
        self.chat().append_batch_at(messages, at_ms)
    }

    /// When the chat was last active (Unix ms), as [`Store::chats`] orders it.
    pub(crate) fn last_activity_ms(&self) -> u64 {
        self.state.cell.load().last_ms
    }

    /// Replaces the metadata with a record dated `at_ms` (the importers' bookkeeping, which
    /// leaves the chat's last activity where its messages put it).
    pub(crate) fn set_meta_at(&self, meta: ChatMeta, at_ms: u64) -> Result<u64> {
        self.store.same_process()?;
        self.chat().set_meta_at(meta, Some(at_ms))
    }

    /// Stores `blobs` and appends `messages` in one transaction — one commit, one
    /// `fdatasync` — so that after a crash all of them are there or none. The messages can
    /// reference the blobs by id in [`Part::Attachment`] parts (which also tells `gc` the
    /// chat uses them). Returns the blobs' ids, in order, and the messages' seqs.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = undertext::Store::open(dir.path(), Default::default())?;
    /// # let chat = store.chat("a", store.create_chat("a", Default::default())?)?;
    /// use undertext::{BlobId, NewMessage, Part, Role};
    /// let state = b"{\"messages\": [1, 2, 3]}";
    /// let note = NewMessage {
    ///     role: Role::Assistant,
    ///     parts: vec![Part::Attachment { mime: "application/json".into(), blob: BlobId::of(state) }],
    ///     feedback: false,
    /// };
    /// let (ids, seqs) = chat.append_with_blobs(&[state.as_slice()], vec![note])?;
    /// assert_eq!((ids[0], seqs), (BlobId::of(state), 0..1));
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn append_with_blobs(
        &self,
        blobs: &[&[u8]],
        messages: Vec<NewMessage>,
    ) -> Result<(Vec<BlobId>, Range<u64>)> {
        self.store.same_process()?;
        self.chat().append_with_blobs(blobs, messages)
    }

    /// Message `seq` (current revision).
    pub fn get(&self, seq: u64) -> Result<Message> {
        self.store.same_process()?;
        self.chat().get(seq)
    }

    /// The messages in `range` that are not hidden (current revision).
    pub fn range(&self, range: Range<u64>) -> Result<Vec<Message>> {
        self.store.same_process()?;
        self.chat().range(range)
    }

    /// Every message that is not hidden (current revision); hidden ones too with
    /// [`Snapshot::messages_with_hidden`].
    pub fn messages(&self) -> Result<Vec<Message>> {
        self.store.same_process()?;
        self.chat().messages()
    }

    /// Replaces message `seq`, if the chat is still at `expected_revision`; returns the new
    /// revision. The old version stays readable through [`Chat::snapshot_at`]. An edit may
    /// not turn a turn-starting user message into another kind or back (it would renumber
    /// every later turn): truncate and append instead.
    pub fn edit(&self, seq: u64, message: NewMessage, expected_revision: u64) -> Result<u64> {
        self.store.same_process()?;
        self.chat().edit(seq, message, expected_revision)
    }

    /// Drops messages from `from_seq` on, if the chat is still at `expected_revision`;
    /// returns the new revision. The dropped messages stay readable at older revisions.
    pub fn truncate(&self, from_seq: u64, expected_revision: u64) -> Result<u64> {
        self.store.same_process()?;
        self.chat().truncate(from_seq, expected_revision)
    }

    /// Hides the messages of `ranges` (soft deletion), if the chat is still at
    /// `expected_revision`; returns the new revision. Like an edit, a hide is a new
    /// revision: a checkpoint built before it is refused at publication, and a published
    /// checkpoint or compaction record that covers a hidden message no longer applies to
    /// the view (as after a truncation below its reach). Hidden messages leave the model
    /// view, checkpoints and the default reads; their records stay in the log
    /// ([`Snapshot::get`] and [`Snapshot::messages_with_hidden`] read them, and archives they
    /// name stay readable by their owners). A tool call and its results are hidden together
    /// or not at all: hiding one without the other is an [`Error::InvalidArgument`] naming
    /// both. A truncation below a hidden message forgets it (a message appended at its seq
    /// later is visible).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use undertext::{ChatMeta, NewMessage, Store};
    /// let store = Store::open(dir.path(), Default::default())?;
    /// let chat = store.chat("alice", store.create_chat("alice", ChatMeta::default())?)?;
    /// chat.append_batch(vec![NewMessage::user("a"), NewMessage::user("b"), NewMessage::user("c")])?;
    /// let rev = chat.hide(&[0..1, 2..3], chat.revision())?;
    /// assert_eq!(rev, 1);
    /// assert_eq!(chat.messages()?.len(), 1);
    /// assert!(chat.hide(&[1..2], 0).is_err()); // stale revision
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn hide(&self, ranges: &[Range<u64>], expected_revision: u64) -> Result<u64> {
        self.store.same_process()?;
        self.chat().hide(ranges, expected_revision)
    }

    /// Erases the messages of `ranges`, if the chat is still at `expected_revision`; returns
    /// the new revision. Use it where a deletion must be honoured (a user's request, a
    /// framework's "delete"/"clear"); [`Chat::hide`] is the soft deletion that keeps the
    /// records. An erasure is a hide (the same checks: revision, ranges, tool call and
    /// result together), and more:
    ///
    /// * at once, no read returns an erased message at any revision: [`Snapshot::get`] is
    ///   [`Error::NotFound`] ("it was erased"), [`Chat::snapshot_at`] an older revision
    ///   leaves it out like a hidden one, [`Snapshot::messages_with_hidden`] gives its place
    ///   only (seq, role, turn, time; no parts), an
    ///   edit of it is refused, search never answers it;
    /// * the next [`Store::gc`](crate::Store::gc) drops its bytes from the log: every version
    ///   of those seqs written up to the erasure (its text, tool calls and results, archived
    ///   results and attachments only it referenced, its body blob), the checkpoints and
    ///   summaries built over it, compactions and pins that name it, and the search index
    ///   (rebuilt). What stays is its place: seq, role, turn, time and step tag, so the
    ///   chat's numbering and turns do not change. A blob another live message, another
    ///   chat or another owner's own grant still holds stays (it is theirs too).
    ///
    /// A message appended later at an erased seq (after a truncation) is not erased.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use undertext::{ChatMeta, NewMessage, Options, Store};
    /// let store = Store::open(dir.path(), Options::default())?;
    /// let id = store.create_chat("alice", ChatMeta::default())?;
    /// let chat = store.chat("alice", id)?;
    /// chat.append_batch(vec![NewMessage::user("my password is hunter2"), NewMessage::user("hi")])?;
    /// chat.erase(&[0..1], chat.revision())?;
    /// assert!(chat.snapshot().get(0).is_err());
    /// drop((chat, store));
    /// Store::gc(dir.path(), Options::default())?; // the bytes leave the log files
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn erase(&self, ranges: &[Range<u64>], expected_revision: u64) -> Result<u64> {
        self.store.same_process()?;
        self.chat().erase(ranges, expected_revision)
    }

    /// [`Chat::hide`] and [`Chat::append_batch`] in one transaction: after a crash either
    /// both happened or neither (a history's suffix replaced atomically). The appended
    /// messages carry the new revision; returns it and their seqs.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use undertext::{ChatMeta, NewMessage, Part, Store};
    /// let store = Store::open(dir.path(), Default::default())?;
    /// let chat = store.chat("alice", store.create_chat("alice", ChatMeta::default())?)?;
    /// chat.append_batch(vec![NewMessage::user("a"), NewMessage::assistant("long b")])?;
    /// let (rev, seqs) = chat.hide_and_append(&[1..2], vec![NewMessage::assistant("short b")], 0)?;
    /// assert_eq!((rev, seqs), (1, 2..3));
    /// let live: Vec<_> = chat.messages()?.into_iter().map(|m| (m.seq, m.parts)).collect();
    /// assert_eq!(live[1], (2, vec![Part::Text("short b".into())]));
    /// # Ok::<(), undertext::Error>(())
    /// ```
    pub fn hide_and_append(
        &self,
        ranges: &[Range<u64>],
        messages: Vec<NewMessage>,
        expected_revision: u64,
    ) -> Result<(u64, Range<u64>)> {
        self.store.same_process()?;
        self.chat().hide_and_append(ranges, messages, expected_revision)
    }

    /// The chat as it was when `revision` ended (or now, for the current revision).
    pub fn snapshot_at(&self, revision: u64) -> Result<Snapshot> {
        self.store.same_process()?;
        self.chat().snapshot_at(revision)
    }

    /// Records a completed (or interrupted) model step of the current user turn: its
    /// messages are appended, tagged (turn, stream, step), in one transaction, durable
    /// before this returns. A retry is a new `stream_id` for the same turn.
    pub fn record_step(
        &self,
        turn: u64,
        stream_id: &str,
        step: u32,
        status: StepStatus,
        messages: Vec<NewMessage>,
    ) -> Result<Range<u64>> {
        self.store.same_process()?;
        self.chat().record_step(turn, stream_id, step, status, messages)
    }

    /// Every recorded attempt at user turn `turn`, in the order their streams first
    /// appeared, each with its steps in the order they were recorded.
    pub fn attempts(&self, turn: u64) -> Result<Vec<Attempt>> {
        self.store.same_process()?;
        self.chat().attempts(turn)
    }

    /// Pins `range` (in `unit`) of archive `archive` into the model view: the budget guard
    /// will not shrink it again. The owner must be able to read the archive, and the range
    /// must be valid in it.
    pub fn pin(&self, archive: &BlobId, range: Range<u64>, unit: Unit) -> Result<()> {
        self.store.same_process()?;
        self.chat().pin(archive, range, unit)
    }

    /// Removes a pin made with [`Chat::pin`] (the same archive, range and unit).
    pub fn unpin(&self, archive: &BlobId, range: Range<u64>, unit: Unit) -> Result<()> {
        self.store.same_process()?;
        self.chat().unpin(archive, range, unit)
    }

    /// Builds a checkpoint of the settled history (before the protected tail and
    /// before the first pending approval) with `summarizer`. Summaries already made for an
    /// unchanged segment or merge are reused. Summaries are stored (marked as summaries) as
    /// they are made; the checkpoint itself is not published.
    pub fn build_checkpoint(
        &self,
        summarizer: &dyn Summarizer,
        opts: &CheckpointOptions,
    ) -> Result<Checkpoint> {
        self.store.same_process()?;
        checkpoint::build(&self.chat(), summarizer, opts)
    }

    /// Publishes `cp` in one transaction, if the chat was not edited since `cp.base_revision`
    /// ([`Conflict::Edited`]) and `cp` reaches beyond the published checkpoint
    /// ([`Conflict::NotNewer`]). Appends since the base are fine: they ride on top raw.
    pub fn publish_checkpoint(&self, cp: &Checkpoint) -> Result<()> {
        self.store.same_process()?;
        checkpoint::publish(&self.chat(), cp, true)
    }

    /// The published checkpoint's (base revision, reach), if any.
    pub fn published_checkpoint(&self) -> Option<(u64, u64)> {
        checkpoint::published(&self.chat())
    }

    /// The checkpoint the worker prepared for this chat, if any (it may be stale: compare its
    /// `base_revision` with [`Chat::revision`]).
    pub fn prepared(&self) -> Option<Arc<Checkpoint>> {
        self.store.inner.worker.prepared(&self.state)
    }

    /// The model view under `budget`: every message (compaction records applied), pinned
    /// pages, and, over the soft line, older tool results turned into previews oldest first
    /// until the estimate is at or below the target — never a pinned page, never inside
    /// the protected tail ([`crate::rules::budget::tail`]: the last two user turns, at most
    /// [`Budget::protect_max_tokens`]). If that leaves the view over the hard line, results of
    /// the tail before its last step are previewed too, just until the hard line. Still over
    /// it: [`Decision::Refused`]. With a published checkpoint the view is the leading system
    /// messages, the task (user messages of the last two turns, verbatim), the summary, and
    /// the messages from its reach.
    ///
    /// A view of the chat as it stands writes nothing (it may publish a prepared checkpoint
    /// when a worker runs: the swap). A preview of an inline tool result (or of the task's
    /// text) names the text by its content address as an archive id, which reads it back
    /// whole through [`Store::read_context`](crate::Store::read_context) for the chat's
    /// owner, without an archive written (see FORMAT.md, "Inline texts"); views work on a
    /// read-only store too.
    pub fn view(&self, budget: &Budget) -> Result<View> {
        self.store.same_process()?;
        self.view_of().view(budget)
    }

    /// Forgets the remembered view, so the next [`Chat::view`] builds from scratch. For
    /// tests that compare the incremental view with a rebuilt one; never needed for
    /// correctness.
    #[doc(hidden)]
    pub fn clear_view_memo(&self) {
        self.view_of().clear_view_memo()
    }

    /// The estimated input tokens of the chat as it stands (calibrated, tool schemas of
    /// `budget` included), without building a view: each message's estimate is cached, so
    /// after the first call this costs a sum over the messages. Compaction records, pins and
    /// previews are not applied; use [`Chat::view`] for what will be sent.
    pub fn estimate(&self, budget: &Budget) -> Result<u64> {
        self.store.same_process()?;
        self.view_of().estimate(budget)
    }

    /// Reports the real input tokens of the call made with view `step`. When they are above
    /// the estimate, the correction factor for this chat and its model rises to match at
    /// once; when below, it eases down. The factor is persisted and applies to later views.
    /// Returns the new factor.
    pub fn report_usage(&self, step: u64, actual_input_tokens: u64) -> Result<f64> {
        self.store.same_process()?;
        self.view_of().report_usage(step, actual_input_tokens)
    }

    /// The least any view of this chat must send under `budget` (calibrated, tool schemas
    /// included): the leading system messages, the task (the turn-opening user messages of
    /// the last two user turns) and the last step. A view refused while this alone is over
    /// the hard line cannot be served by any compaction: the harness must start afresh or
    /// use a larger window.
    pub fn protected_minimum(&self, budget: &Budget) -> Result<u64> {
        self.store.same_process()?;
        self.view_of().protected_minimum(budget)
    }

    /// Every message with its seq, role, token estimate and a 60-character preview, for a
    /// model to choose what to compact.
    /// A message an earlier compaction still trims or squishes is marked as such at the start
    /// of its preview ([`tool::TRIMMED_MARK`](crate::rules::compaction::tool::TRIMMED_MARK),
    /// [`tool::SQUISHED_MARK`](crate::rules::compaction::tool::SQUISHED_MARK)).
    pub fn index(&self) -> Result<Vec<IndexLine>> {
        self.store.same_process()?;
        let snap = self.snapshot();
        let mut index = self.view_of().index()?;
        let (trims, squishes) = crate::chat::history::compactions_in_effect(&snap);
        crate::rules::compaction::tool::mark_compacted(&mut index, &trims, &squishes);
        Ok(index)
    }

    /// Checks a plan without applying it: every problem, each naming its rule. The
    /// protected tail is the last two user turns whole (see [`Chat::compaction_tool_call`]
    /// for the bound a budget sets).
    pub fn lint(&self, plan: &Plan) -> Result<Vec<LintProblem>> {
        self.store.same_process()?;
        self.view_of().lint(plan)
    }

    /// The model-driven compaction tool (see [`crate::rules::compaction::tool`]): takes the
    /// arguments of the model's call (JSON text: `{"trims": [seq, ...], "squishes": [{"from",
    /// "to", "rewrite"}]}`), checks them against the chat at `expected_revision` with the
    /// protected tail of `budget`, and records the plan when the linter finds nothing. Returns
    /// the text of the tool result for the model: what was applied, or every problem so the
    /// model can retry. Nothing of the exchange is appended to the chat: the harness sends
    /// the call and its result only to the compacting model call, so afterwards no trace of
    /// it is visible.
    ///
    /// A trim of a tool result an earlier compaction already trimmed changes nothing and
    /// saves 0 tokens: it is left out of the plan and the result says so (a plan of only
    /// such trims writes nothing and is reported as a no-op, not as applied).
    pub fn compaction_tool_call(
        &self,
        args_json: &str,
        expected_revision: u64,
        budget: &Budget,
    ) -> Result<String> {
        self.store.same_process()?;
        use crate::rules::compaction::tool;
        let Ok(plan) = tool::parse_args(args_json) else {
            return self.view_of().compaction_tool_call(args_json, expected_revision, budget);
        };
        let snap = self.snapshot();
        let (trimmed, _) = crate::chat::history::compactions_in_effect(&snap);
        let (again, trims): (Vec<u64>, Vec<u64>) = plan.trims.iter().partition(|t| trimmed.contains(t));
        if again.is_empty() || snap.revision() != expected_revision {
            return self.view_of().compaction_tool_call(args_json, expected_revision, budget);
        }
        if trims.is_empty() && plan.squishes.is_empty() {
            return Ok(tool::already_trimmed_text(&again));
        }
        let rest = tool::plan_json(&Plan { trims, squishes: plan.squishes });
        let applied = self.view_of().compaction_tool_call(&rest, expected_revision, budget)?;
        Ok(format!("{applied}\n{}", tool::already_trimmed_text(&again)))
    }

    /// Records a compaction plan, applied when views are built (originals untouched), if
    /// the chat is still at `expected_revision` and the linter finds nothing; otherwise
    /// nothing is written and [`Error::Lint`] lists every problem at once. Trimmed tool
    /// results are archived so their pointer can be followed. Returns how many changes the
    /// plan holds.
    pub fn compact(&self, plan: &Plan, expected_revision: u64) -> Result<usize> {
        self.store.same_process()?;
        self.view_of().compact(plan, expected_revision)
    }

    /// The first message of the current revision holding a pending approval (archived tool
    /// results are scanned whole), with the default patterns or `patterns`.
    pub fn first_pending_approval(
        &self,
        patterns: Option<&ApprovalPatterns>,
    ) -> Result<Option<(u64, Pending)>> {
        self.store.same_process()?;
        self.view_of().first_pending_approval(patterns)
    }
}
