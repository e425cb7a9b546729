//! The mixed workload of the reliability tests (fault sweep, power-cut sweep, crash
//! campaign): chats created, messages appended and edited, steps recorded, blobs and
//! archives stored, checkpoints built and published, syncs — every call deterministic from a
//! seed, and a model of what each acknowledged call must leave behind.
//!
//! The runner reports each write call as events: [`Event::Begin`] with the effect the call
//! would have, then [`Event::Ack`] (it returned `Ok`: the effect must survive) or
//! [`Event::Fail`] (it returned an error). A failure is *clean* when the error says nothing
//! was written (`Poisoned`, `Conflict`, `InvalidArgument`, `NotFound`, `StaleRevision`);
//! any other failure, and a call cut off by a kill, is *in doubt*: after reopen its effect is
//! there whole or not at all. [`Model`] folds the events; [`verify`] compares a store with it.

use std::collections::HashMap;
use std::fmt::Write as _;

use undertext::{BlobId, ChatId, ChatMeta, Error, NewMessage, Page, Part, Role, StepStatus, Store, Unit};
use undertext::{CheckpointOptions, FnSummarizer};

use crate::{Rng, content};

/// The owner of every chat and archive of the workload.
pub const OWNER: &str = "agent";

/// One call of the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `create_chat`.
    CreateChat,
    /// `append_batch` of 1 to 3 messages to chat `chat` (an index into the created chats).
    Append {
        /// Chat index.
        chat: usize,
        /// Number of messages.
        n: usize,
    },
    /// `edit` of the message `pick % len` of the chat.
    Edit {
        /// Chat index.
        chat: usize,
        /// Which message.
        pick: u64,
    },
    /// `record_step` of a tool call and its result.
    Step {
        /// Chat index.
        chat: usize,
    },
    /// `put_blob`.
    Blob,
    /// `put_blobs` of two blobs (one transaction).
    TwoBlobs,
    /// `archive` of a text.
    Archive,
    /// `build_checkpoint` then `publish_checkpoint`.
    Checkpoint {
        /// Chat index.
        chat: usize,
    },
    /// `Chat::view` with a small budget: past the worker's soft line it asks a running
    /// worker for a checkpoint; past the hard line it publishes the prepared one.
    View {
        /// Chat index.
        chat: usize,
    },
    /// `Store::sync`.
    Sync,
}

/// What an acknowledged call leaves behind. Message contents are regenerated from the
/// seed and the action number, so an effect is a few integers (it crosses a pipe as one
/// line in the crash campaign).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// A chat was created (known once acknowledged).
    Create {
        /// Its id.
        chat: u64,
        /// Action number.
        action: u64,
    },
    /// Messages `msg(seed, action, 0..n)` appended to `chat`.
    Append {
        /// Chat id.
        chat: u64,
        /// Action number.
        action: u64,
        /// Count.
        n: u64,
    },
    /// Message `seq` of `chat` replaced by `msg(seed, action, 0)` with role `role`.
    Edit {
        /// Chat id.
        chat: u64,
        /// Position.
        seq: u64,
        /// Action number.
        action: u64,
        /// Role code (0 system, 1 user, 2 assistant, 3 tool).
        role: u8,
    },
    /// The step messages of `action` appended to `chat`.
    Step {
        /// Chat id.
        chat: u64,
        /// Action number.
        action: u64,
    },
    /// Blob `content(seed, 77, action)` (and `content(seed, 78, action)` if `two`) stored.
    Blob {
        /// Action number.
        action: u64,
        /// Two blobs in one transaction.
        two: bool,
    },
    /// Archive text of `action` stored.
    Archive {
        /// Action number.
        action: u64,
    },
    /// A view of `chat` that may publish a prepared checkpoint (what it publishes is known
    /// only once it returns, as a [`Effect::Publish`]).
    MayPublish {
        /// Chat id.
        chat: u64,
    },
    /// A checkpoint (base revision, reach) published on `chat`.
    Publish {
        /// Chat id.
        chat: u64,
        /// Base revision.
        base: u64,
        /// Reach.
        reach: u64,
    },
}

/// One thing the runner reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Call `action` starts; its effect if it succeeds (`None` for a chat creation, whose
    /// id is known only after).
    Begin(u64, Option<Effect>),
    /// Call `action` returned `Ok`; a creation reports its chat here.
    Ack(u64, Option<Effect>),
    /// Call `action` failed; `in_doubt` unless the error says nothing was written.
    Fail(u64, bool),
}

impl Effect {
    /// The effect as one line of text (for the crash campaign's pipe).
    pub fn encode(&self) -> String {
        match *self {
            Effect::Create { chat, action } => format!("create {chat} {action}"),
            Effect::Append { chat, action, n } => format!("append {chat} {action} {n}"),
            Effect::Edit { chat, seq, action, role } => format!("edit {chat} {seq} {action} {role}"),
            Effect::Step { chat, action } => format!("step {chat} {action}"),
            Effect::Blob { action, two } => format!("blob {action} {}", u8::from(two)),
            Effect::Archive { action } => format!("archive {action}"),
            Effect::Publish { chat, base, reach } => format!("publish {chat} {base} {reach}"),
            Effect::MayPublish { chat } => format!("maypublish {chat}"),
        }
    }

    /// Parses [`Effect::encode`]'s output.
    pub fn decode(s: &str) -> Option<Effect> {
        let w: Vec<&str> = s.split(' ').collect();
        let n = |i: usize| w.get(i).and_then(|x| x.parse::<u64>().ok());
        Some(match *w.first()? {
            "create" => Effect::Create { chat: n(1)?, action: n(2)? },
            "append" => Effect::Append { chat: n(1)?, action: n(2)?, n: n(3)? },
            "edit" => Effect::Edit { chat: n(1)?, seq: n(2)?, action: n(3)?, role: n(4)? as u8 },
            "step" => Effect::Step { chat: n(1)?, action: n(2)? },
            "blob" => Effect::Blob { action: n(1)?, two: n(2)? == 1 },
            "archive" => Effect::Archive { action: n(1)? },
            "publish" => Effect::Publish { chat: n(1)?, base: n(2)?, reach: n(3)? },
            "maypublish" => Effect::MayPublish { chat: n(1)? },
            _ => return None,
        })
    }
}

impl Event {
    /// The event as one line of text.
    pub fn encode(&self) -> String {
        let e = |x: &Option<Effect>| x.map_or("-".to_string(), |x| x.encode());
        match self {
            Event::Begin(i, x) => format!("begin {i} {}", e(x)),
            Event::Ack(i, x) => format!("ack {i} {}", e(x)),
            Event::Fail(i, d) => format!("fail {i} {}", u8::from(*d)),
        }
    }

    /// Parses [`Event::encode`]'s output (`None` for a line cut short).
    pub fn decode(line: &str) -> Option<Event> {
        let mut it = line.splitn(3, ' ');
        let (kind, i, rest) = (it.next()?, it.next()?.parse().ok()?, it.next()?);
        let effect = || if rest == "-" { Some(None) } else { Effect::decode(rest).map(Some) };
        match kind {
            "begin" => Some(Event::Begin(i, effect()?)),
            "ack" => Some(Event::Ack(i, effect()?)),
            "fail" => Some(Event::Fail(i, rest == "1")),
            _ => None,
        }
    }
}

/// The workload's calls for `seed`: three chats, then `len` calls of every kind.
pub fn actions(seed: u64, len: usize) -> Vec<Action> {
    let mut rng = Rng::new(seed ^ 0x5EED_0FA1);
    let mut out = vec![Action::CreateChat, Action::CreateChat, Action::CreateChat];
    for _ in 0..len {
        let chat = rng.range(0, 3) as usize;
        out.push(match rng.range(0, 100) {
            0..30 => Action::Append { chat, n: rng.range(1, 4) as usize },
            30..50 => Action::Step { chat },
            50..62 => Action::Blob,
            62..67 => Action::TwoBlobs,
            67..77 => Action::Edit { chat, pick: rng.next_u64() },
            77..85 => Action::Archive,
            85..90 => Action::Checkpoint { chat },
            90..94 => Action::View { chat },
            94..97 => Action::CreateChat,
            _ => Action::Sync,
        });
    }
    out
}

fn text(rng: &mut Rng, len: usize) -> String {
    const WORDS: [&str; 10] =
        ["the ", "parser ", "fails ", "on ", "line ", "42 ", "because ", "tokens ", "é ", "\n"];
    let mut s = String::with_capacity(len + 8);
    while s.len() < len {
        s.push_str(WORDS[rng.range(0, 10) as usize]);
    }
    s
}

/// Message `k` of action `action`: the first of an append starts a user turn every other
/// time; some messages are large enough to be stored as a blob of their own.
pub fn msg(seed: u64, action: u64, k: u64) -> NewMessage {
    let mut rng = Rng::new(seed ^ action.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ k.wrapping_mul(0xc2b2_ae35));
    let len = if rng.range(0, 12) == 0 { rng.range(9000, 12000) } else { rng.range(20, 600) } as usize;
    let body = format!("{action}/{k}: {}", text(&mut rng, len));
    if k == 0 && action.is_multiple_of(2) { NewMessage::user(body) } else { NewMessage::assistant(body) }
}

/// The two messages of a step: a tool call and its result.
pub fn step_msgs(seed: u64, action: u64) -> Vec<NewMessage> {
    let mut rng = Rng::new(seed ^ action.wrapping_mul(0x94d0_49bb_1331_11eb));
    let id = format!("call-{action}");
    let call = NewMessage {
        role: Role::Assistant,
        parts: vec![Part::ToolCall {
            id: id.clone(),
            name: "read_file".into(),
            args: format!("{{\"path\":\"src/f{action}.rs\"}}"),
        }],
        feedback: false,
    };
    let n = rng.range(30, 3000) as usize;
    vec![call, NewMessage::tool_result(id, text(&mut rng, n))]
}

/// The archive text of an action (a few KB to 40 KB, several lines).
pub fn archive_text(seed: u64, action: u64) -> String {
    let mut rng = Rng::new(seed ^ action.wrapping_mul(0xff51_afd7_ed55_8ccd));
    let n = rng.range(2000, 40_000) as usize;
    format!("archive {action}\n{}", text(&mut rng, n))
}

fn role_code(r: Role) -> u8 {
    match r {
        Role::System => 0,
        Role::User => 1,
        Role::Assistant => 2,
        Role::Tool => 3,
    }
}

fn role_of(c: u8) -> Role {
    match c {
        0 => Role::System,
        1 => Role::User,
        3 => Role::Tool,
        _ => Role::Assistant,
    }
}

/// Whether an error says the call wrote nothing.
pub fn is_clean_refusal(e: &Error) -> bool {
    matches!(
        e,
        Error::Poisoned(_)
            | Error::Conflict(_)
            | Error::InvalidArgument(_)
            | Error::NotFound { .. }
            | Error::StaleRevision { .. }
    )
}

/// What the runner saw.
#[derive(Debug, Clone, Default)]
pub struct RunStats {
    /// Calls that returned `Ok`.
    pub acked: u64,
    /// Calls that failed.
    pub failed: u64,
    /// Calls that failed with an error that leaves them in doubt.
    pub in_doubt: u64,
    /// Calls that failed with `Error::Poisoned`.
    pub poisoned: u64,
    /// Calls acknowledged after the first failure (the store kept working).
    pub acked_after_failure: u64,
    /// The errors, by call (the first 20).
    pub errors: Vec<(u64, String)>,
}

/// Runs `actions` on `store`, reporting every write call to `report`; call `k` of the list
/// is action number `base + k` (so that several runs on one store make distinct content).
/// Stops early when `stop` says so (checked between calls).
pub fn run(
    store: &Store,
    seed: u64,
    base: u64,
    actions: &[Action],
    mut report: impl FnMut(Event),
    stop: impl Fn() -> bool,
) -> RunStats {
    let mut stats = RunStats::default();
    let mut chats: Vec<ChatId> = Vec::new();
    let summarizer = FnSummarizer::new(
        "first-words",
        |m: &[undertext::Message]| {
            let mut s = String::new();
            for x in m {
                if let Some(Part::Text(t)) = x.parts.first() {
                    let _ = write!(s, "{} ", t.chars().take(12).collect::<String>());
                }
            }
            Ok(s)
        },
        |t: &[String]| Ok(t.join(" / ")),
    );
    let cp_opts = CheckpointOptions { segment_tokens: 400, fan_in: 2, ..CheckpointOptions::default() };
    for (i, a) in actions.iter().enumerate() {
        if stop() {
            break;
        }
        let i = base + i as u64;
        let chat_of = |c: usize| chats.get(c % chats.len().max(1)).copied();
        let outcome =
            |r: Result<Option<Effect>, Error>, stats: &mut RunStats, report: &mut dyn FnMut(Event)| match r {
                Ok(x) => {
                    stats.acked += 1;
                    if stats.failed > 0 {
                        stats.acked_after_failure += 1;
                    }
                    report(Event::Ack(i, x));
                    true
                }
                Err(e) => {
                    stats.failed += 1;
                    if stats.errors.len() < 20 {
                        stats.errors.push((i, e.to_string()));
                    }
                    if matches!(e, Error::Poisoned(_)) {
                        stats.poisoned += 1;
                    }
                    let doubt = !is_clean_refusal(&e);
                    stats.in_doubt += u64::from(doubt);
                    report(Event::Fail(i, doubt));
                    false
                }
            };
        match *a {
            Action::CreateChat => {
                report(Event::Begin(i, None));
                let r =
                    store.create_chat(OWNER, ChatMeta { title: format!("chat {i}"), ..Default::default() });
                let id = r.as_ref().ok().copied();
                if outcome(
                    r.map(|id| Some(Effect::Create { chat: id.0, action: i })),
                    &mut stats,
                    &mut report,
                ) && let Some(id) = id
                {
                    chats.push(id);
                }
            }
            Action::Append { chat, n } => {
                let Some(id) = chat_of(chat) else { continue };
                let Ok(c) = store.chat(OWNER, id) else { continue };
                let msgs: Vec<NewMessage> = (0..n as u64).map(|k| msg(seed, i, k)).collect();
                report(Event::Begin(i, Some(Effect::Append { chat: id.0, action: i, n: n as u64 })));
                outcome(c.append_batch(msgs).map(|_| None), &mut stats, &mut report);
            }
            Action::Step { chat } => {
                let Some(id) = chat_of(chat) else { continue };
                let Ok(c) = store.chat(OWNER, id) else { continue };
                let snap = c.snapshot();
                let turn =
                    if snap.is_empty() { 0 } else { snap.header(snap.len() - 1).map_or(0, |h| h.turn) };
                report(Event::Begin(i, Some(Effect::Step { chat: id.0, action: i })));
                let r = c.record_step(turn, "s", i as u32, StepStatus::Complete, step_msgs(seed, i));
                outcome(r.map(|_| None), &mut stats, &mut report);
            }
            Action::Edit { chat, pick } => {
                let Some(id) = chat_of(chat) else { continue };
                let Ok(c) = store.chat(OWNER, id) else { continue };
                let snap = c.snapshot();
                if snap.is_empty() {
                    continue;
                }
                let seq = pick % snap.len();
                let Ok(old) = snap.get(seq) else { continue };
                let mut m = msg(seed, i, 0);
                m.role = old.role;
                let role = role_code(old.role);
                report(Event::Begin(i, Some(Effect::Edit { chat: id.0, seq, action: i, role })));
                outcome(c.edit(seq, m, snap.revision()).map(|_| None), &mut stats, &mut report);
            }
            Action::Blob | Action::TwoBlobs => {
                let two = *a == Action::TwoBlobs;
                report(Event::Begin(i, Some(Effect::Blob { action: i, two })));
                let r = if two {
                    store.put_blobs("o", &[&content(seed, 77, i), &content(seed, 78, i)]).map(|_| None)
                } else {
                    store.put_blob("o", &content(seed, 77, i)).map(|_| None)
                };
                outcome(r, &mut stats, &mut report);
            }
            Action::Archive => {
                report(Event::Begin(i, Some(Effect::Archive { action: i })));
                let r = store.archive(OWNER, &archive_text(seed, i)).map(|_| None);
                outcome(r, &mut stats, &mut report);
            }
            Action::Checkpoint { chat } => {
                let Some(id) = chat_of(chat) else { continue };
                let Ok(c) = store.chat(OWNER, id) else { continue };
                // The build stores cached summaries only (not part of what is checked).
                let Ok(cp) = c.build_checkpoint(&summarizer, &cp_opts) else { continue };
                let effect = Effect::Publish { chat: id.0, base: cp.base_revision, reach: cp.reach };
                report(Event::Begin(i, Some(effect)));
                outcome(c.publish_checkpoint(&cp).map(|_| None), &mut stats, &mut report);
            }
            Action::View { chat } => {
                let Some(id) = chat_of(chat) else { continue };
                let Ok(c) = store.chat(OWNER, id) else { continue };
                let before = c.published_checkpoint();
                report(Event::Begin(i, Some(Effect::MayPublish { chat: id.0 })));
                let r = c.view(&undertext::Budget::new(6000, 1000)).map(|_| {
                    let after = c.published_checkpoint();
                    match after {
                        Some((base, reach)) if after != before => {
                            Some(Effect::Publish { chat: id.0, base, reach })
                        }
                        _ => None,
                    }
                });
                outcome(r, &mut stats, &mut report);
            }
            Action::Sync => {
                let _ = store.sync();
            }
        }
    }
    stats
}

/// The expected state, folded from a run's events.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// Every effect with whether it is in doubt, in call order.
    pub effects: Vec<(Effect, bool)>,
    /// Chat creations in doubt (their ids are unknown).
    pub creates_in_doubt: u64,
    begun: HashMap<u64, Option<Effect>>,
    /// Acknowledged calls.
    pub acked: u64,
}

impl Model {
    /// Folds one event.
    pub fn apply(&mut self, e: Event) {
        match e {
            Event::Begin(i, x) => {
                self.begun.insert(i, x);
            }
            Event::Ack(i, x) => {
                let begun = self.begun.remove(&i).flatten();
                let x = x.or(begun);
                if let Some(x) = x {
                    self.effects.push((x, false));
                }
                self.acked += 1;
            }
            Event::Fail(i, in_doubt) => {
                let x = self.begun.remove(&i).flatten();
                if in_doubt {
                    match x {
                        Some(x) => self.effects.push((x, true)),
                        None => self.creates_in_doubt += 1,
                    }
                }
            }
        }
    }

    /// Calls begun and never finished (cut off by a kill) become in doubt.
    pub fn finish(&mut self) {
        let mut open: Vec<(u64, Option<Effect>)> = self.begun.drain().collect();
        open.sort_by_key(|(i, _)| *i);
        for (_, x) in open {
            match x {
                Some(x) => self.effects.push((x, true)),
                None => self.creates_in_doubt += 1,
            }
        }
    }
}

/// A message's call number and kind, for failure messages.
fn short(parts: &[Part]) -> String {
    match parts.first() {
        Some(Part::Text(t)) => format!("text {}", t.split(':').next().unwrap_or("")),
        Some(Part::ToolCall { id, .. }) => format!("call {id}"),
        Some(Part::ToolResult { call_id, .. }) => format!("result {call_id}"),
        other => format!("{other:.30?}"),
    }
}

type ChatState = (Vec<(Role, Vec<Part>)>, Option<(u64, u64)>);

/// The state chat `chat` must be in, given what the store shows (`seen`): the acknowledged
/// effects in order, with each in-doubt effect applied exactly when its content is what the
/// store shows at that point. Every message carries its call number, so the choice is
/// unique; a torn transaction (part of an append) or a lost acknowledged call matches no
/// choice and is reported by the comparison that follows.
fn chat_expected(seed: u64, effects: &[(Effect, bool)], chat: u64, seen: &ChatState) -> ChatState {
    let mut msgs: Vec<(Role, Vec<Part>)> = Vec::new();
    let mut published = None;
    for (e, doubt) in effects {
        match *e {
            Effect::Append { chat: c, action, n } if c == chat => {
                let new: Vec<(Role, Vec<Part>)> =
                    (0..n).map(|k| msg(seed, action, k)).map(|m| (m.role, m.parts)).collect();
                if !doubt || seen.0.get(msgs.len()) == new.first() {
                    msgs.extend(new);
                }
            }
            Effect::Step { chat: c, action } if c == chat => {
                let new: Vec<(Role, Vec<Part>)> =
                    step_msgs(seed, action).into_iter().map(|m| (m.role, m.parts)).collect();
                if !doubt || seen.0.get(msgs.len()) == new.first() {
                    msgs.extend(new);
                }
            }
            Effect::Edit { chat: c, seq, action, role } if c == chat => {
                let new = (role_of(role), msg(seed, action, 0).parts);
                if let Some(slot) = msgs.get_mut(seq as usize)
                    && (!doubt || seen.0.get(seq as usize) == Some(&new))
                {
                    *slot = new;
                }
            }
            Effect::Publish { chat: c, base, reach }
                if c == chat && (!doubt || seen.1 == Some((base, reach))) =>
            {
                published = Some((base, reach));
            }
            // A view cut off (or failed) after it may have published: what it published is
            // unknown, so what the store shows is taken.
            Effect::MayPublish { chat: c } if c == chat && *doubt => published = seen.1,
            _ => {}
        }
    }
    (msgs, published)
}

/// Why [`verify`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// The store answered, and its answer is not an allowed state.
    Differs(String),
    /// A read returned an error (a store that refuses, not one that lies).
    Refused(String),
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::Differs(s) => write!(f, "state differs: {s}"),
            Mismatch::Refused(s) => write!(f, "read refused: {s}"),
        }
    }
}

/// Options of the sweeps: small segments (so the workload seals and preallocates several),
/// a small index backlog (so writers flush the index themselves), and no timed background
/// indexing (so the file operations of two runs come in the same order).
pub fn sweep_options() -> undertext::Options {
    undertext::Options::default()
        .segment_size(32 << 10)
        .index_flush_interval(std::time::Duration::from_secs(3600))
        .index_durable_interval(std::time::Duration::from_secs(3600))
        .index_backlog_bytes(48 << 10)
}

/// Compares `store` with `model`: every acknowledged blob, archive, chat, message, edit and
/// publication is there, exactly; in-doubt calls are there whole or not at all; nothing
/// else. Blobs, archives and chats of actions numbered below `since` are skipped (a crash
/// campaign checks the latest run each time and everything now and then); the number of
/// chats is always checked. Returns the number of items checked.
pub fn verify(store: &Store, seed: u64, model: &Model, since: u64) -> Result<u64, Mismatch> {
    use Mismatch::{Differs, Refused};
    let mut checked = 0u64;
    let mut by_chat: HashMap<u64, Vec<(Effect, bool)>> = HashMap::new();
    let mut known = Vec::new();
    for &(e, d) in &model.effects {
        match e {
            Effect::Blob { action, two } if !d && action >= since => {
                let mut want = vec![content(seed, 77, action)];
                if two {
                    want.push(content(seed, 78, action));
                }
                for w in want {
                    let got = store
                        .get_blob("o", &BlobId::of(&w))
                        .map_err(|e| Refused(format!("blob of call {action}: {e}")))?;
                    if *got != *w {
                        return Err(Differs(format!("blob of call {action} differs")));
                    }
                    checked += 1;
                }
            }
            Effect::Archive { action } if !d && action >= since => {
                let t = archive_text(seed, action);
                let id = BlobId::of(t.as_bytes());
                let n = t.chars().count() as u64;
                let got = store
                    .read_context(OWNER, &id, 0..n, Unit::Chars)
                    .map_err(|e| Refused(format!("archive of call {action}: {e}")))?;
                if got != t {
                    return Err(Differs(format!("archive of call {action} differs")));
                }
                checked += 1;
            }
            Effect::Create { chat, action } => known.push((chat, action)),
            Effect::Append { chat, .. }
            | Effect::Edit { chat, .. }
            | Effect::Step { chat, .. }
            | Effect::Publish { chat, .. }
            | Effect::MayPublish { chat } => by_chat.entry(chat).or_default().push((e, d)),
            _ => {}
        }
    }
    let mut n = 0u64;
    let mut after = None;
    loop {
        let page = store
            .chats(OWNER, Page { limit: 1000, after })
            .map_err(|e| Refused(format!("listing chats: {e}")))?;
        n += page.chats.len() as u64;
        match page.next {
            Some(c) => after = Some(c),
            None => break,
        }
    }
    if n < known.len() as u64 || n > known.len() as u64 + model.creates_in_doubt {
        return Err(Differs(format!(
            "{n} chats listed; expected {} acknowledged (+ up to {} in doubt)",
            known.len(),
            model.creates_in_doubt
        )));
    }
    for (id, action) in known {
        if action < since {
            continue;
        }
        let c = store.chat(OWNER, ChatId(id)).map_err(|e| Refused(format!("chat {id}: {e}")))?;
        let got: Vec<(Role, Vec<Part>)> = c
            .messages()
            .map_err(|e| Refused(format!("messages of chat {id}: {e}")))?
            .into_iter()
            .map(|m| (m.role, m.parts))
            .collect();
        let state = (got, c.published_checkpoint());
        let want = chat_expected(seed, by_chat.get(&id).map_or(&[][..], |v| &v[..]), id, &state);
        if want != state {
            let first = want.0.iter().zip(&state.0).position(|(a, b)| a != b);
            let at = first.unwrap_or(want.0.len().min(state.0.len()));
            let show = |v: &[(Role, Vec<Part>)]| -> Vec<String> {
                v.iter().skip(at.saturating_sub(3)).take(8).map(|(_, p)| short(p)).collect()
            };
            return Err(Differs(format!(
                "chat {id}: {} messages (published {:?}), expected {} (published {:?}); first difference at {first:?}: \
                 found {:?}, expected {:?}",
                state.0.len(),
                state.1,
                want.0.len(),
                want.1,
                show(&state.0),
                show(&want.0)
            )));
        }
        checked += state.0.len() as u64 + 1;
    }
    Ok(checked)
}
