//! OpenHands, two shapes.
//!
//! * **Evaluation completion logs** (`llm_completions/.../*.json`): one JSON object per LLM
//!   call, `{messages, fncall_messages, fncall_response, response, cost, timestamp}`; one
//!   session per file, the last call of a run. With `fncall_messages` (a model without
//!   native function calling: `messages` then holds the same conversation with the calls
//!   encoded as text, and is ignored), the conversation is `fncall_messages` (OpenAI chat
//!   format: assistant `tool_calls: [{id, function: {name, arguments}}]` answered by
//!   `{role: "tool", tool_call_id, name, content}`) and the answer
//!   `fncall_response.choices[0].message`; without it, `messages` and
//!   `response.choices[0].message`. Content is a string or a list of `{type: "text", text}`
//!   blocks (joined without a separator, other blocks as JSON).
//! * **SDK conversation folders**: `events/event-NNNNN-<id>.json`, one event per file (in
//!   number order), and `base_state.json` (the conversation `id`, the agent's model). One
//!   session per folder, keyed by the conversation id. `SystemPromptEvent` is a system
//!   message; `MessageEvent` a message of its `llm_message.role`; `ActionEvent`s of one LLM
//!   response (`llm_response_id`) one assistant message: their `thought` text and a tool
//!   call each (`tool_call_id`, `tool_name`, `tool_call.arguments`); `ObservationEvent`
//!   (`observation.content`), `AgentErrorEvent` (`error`, an error result) and
//!   `UserRejectObservation` (`rejection_reason`, an error result) the result of the call
//!   named by their `tool_call_id`, placed right after that response's assistant message. A
//!   `Condensation` event is not a message: it becomes a [`Condensation`] (the messages of
//!   its `forgotten_event_ids`, its `summary`). Other events (state updates, pauses,
//!   condensation requests) are not messages.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::input::{MAX_INPUT_BYTES, read_bounded};
use super::json::{args_json, message, result, shape, str_of, text_of, time_of};
use super::{Condensation, Format, Parsed, Problem, Session, openai};
use crate::base::error::{Error, Result};
use crate::chat::history::{NewMessage, Part, Role};

/// The first line of the first user message, as a title.
fn title_of(msgs: &[NewMessage]) -> Option<String> {
    msgs.iter().find(|m| m.role == Role::User).and_then(|m| match m.parts.first() {
        Some(Part::Text(t)) => super::json::task_title(t),
        _ => None,
    })
}

pub(super) fn completion_log(path: &Path, v: &Value, file_key: &str) -> Result<Vec<Session>> {
    let (list, answer) = match v.get("fncall_messages").filter(|m| !m.is_null()) {
        Some(m) => (m, v.pointer("/fncall_response/choices/0/message")),
        None => (v.get("messages").unwrap_or(&Value::Null), v.pointer("/response/choices/0/message")),
    };
    let Some(list) = list.as_array().filter(|l| l.iter().all(|m| m.get("role").is_some())) else {
        return Err(Error::InvalidArgument(format!(
            "{}: not an OpenHands completion log: expected an object with `fncall_messages` or `messages` \
             (a list of {{role, content}}), found {}",
            path.display(),
            shape(v)
        )));
    };
    let mut all: Vec<Value> = list.clone();
    if let Some(a) = answer.filter(|a| a.is_object()) {
        let mut a = a.clone();
        if a.get("role").is_none() {
            a["role"] = Value::String("assistant".into());
        }
        all.push(a);
    }
    let (msgs, mut times) = openai::messages_timed(&all);
    let mut s = Session::new(Format::OpenHands, path, format!("openhands:{file_key}"), msgs);
    // The log's own `timestamp` is when its last call was made: the time of its messages
    // that carry none (it has no earlier one).
    if let Some(at) = time_of(v) {
        times.iter_mut().filter(|t| t.is_none()).for_each(|t| *t = Some(at));
    }
    s.set_times(&times);
    if let Some(t) = title_of(&s.messages) {
        s.title = t;
    }
    s.model = v
        .pointer("/fncall_response/model")
        .or_else(|| v.pointer("/response/model"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    Ok(vec![s])
}

/// Whether `v` looks like one event file of an SDK conversation.
pub(super) fn is_sdk_event(v: &Value) -> bool {
    v.get("kind").is_some_and(Value::is_string) && v.get("id").is_some() && v.get("source").is_some()
}

/// The number in an event file's name `event-NNNNN-<id>.json`.
fn event_number(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("event-")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Whether `dir` is an SDK conversation folder: an `events/` folder holding `event-*.json`
/// files, or `base_state.json` beside an `events/` folder.
pub(super) fn is_conversation_folder(dir: &Path) -> bool {
    let events = dir.join("events");
    if !events.is_dir() {
        return false;
    }
    if dir.join("base_state.json").is_file() {
        return true;
    }
    std::fs::read_dir(&events).is_ok_and(|rd| {
        rd.flatten().any(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("event-") && n.ends_with(".json")
        })
    })
}

/// An assistant message being built from the actions of one LLM response.
struct Open {
    response: String,
    parts: Vec<Part>,
    events: Vec<String>,
    held: Vec<(String, Part, Option<u64>)>,
    /// The first action's `timestamp`.
    at: Option<u64>,
}

#[derive(Default)]
struct Builder {
    out: Vec<NewMessage>,
    /// Each message's time (its event's `timestamp`).
    times: Vec<Option<u64>>,
    open: Option<Open>,
    seq_of: HashMap<String, u64>,
    /// The `timestamp` of the event being read.
    now: Option<u64>,
}

impl Builder {
    fn flush(&mut self) {
        let Some(o) = self.open.take() else { return };
        if let Some(m) = message(Role::Assistant, o.parts) {
            let seq = self.out.len() as u64;
            for e in o.events {
                self.seq_of.insert(e, seq);
            }
            self.out.push(m);
            self.times.push(o.at);
        }
        for (e, part, at) in o.held {
            self.seq_of.insert(e, self.out.len() as u64);
            self.out.push(NewMessage { role: Role::Tool, parts: vec![part], feedback: false });
            self.times.push(at);
        }
    }

    fn push(&mut self, event: &str, m: NewMessage) {
        self.flush();
        self.seq_of.insert(event.to_string(), self.out.len() as u64);
        self.out.push(m);
        self.times.push(self.now);
    }

    fn action(&mut self, event: &str, response: &str, parts: Vec<Part>) {
        match &mut self.open {
            Some(o) if o.response == response && !response.is_empty() => {
                o.parts.extend(parts);
                o.events.push(event.to_string());
            }
            _ => {
                self.flush();
                self.open = Some(Open {
                    response: response.to_string(),
                    parts,
                    events: vec![event.to_string()],
                    held: Vec::new(),
                    at: self.now,
                });
            }
        }
    }

    fn result(&mut self, event: &str, part: Part) {
        match &mut self.open {
            Some(o) => o.held.push((event.to_string(), part, self.now)),
            None => self.push(event, NewMessage { role: Role::Tool, parts: vec![part], feedback: false }),
        }
    }
}

/// The events of a conversation folder, in number order, and the problems met reading them.
fn read_events(dir: &Path, problems: &mut Vec<Problem>) -> Result<Vec<(PathBuf, Value)>> {
    let events = dir.join("events");
    let rd = std::fs::read_dir(&events).map_err(|e| Error::io("read_dir", &events, e))?;
    let mut files: Vec<(u64, String, PathBuf)> = Vec::new();
    for e in rd {
        let e = e.map_err(|e| Error::io("read_dir", &events, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".json") {
            continue;
        }
        match event_number(&name) {
            Some(n) => files.push((n, name, e.path())),
            None => problems.push(Problem {
                file: e.path(),
                line: 0,
                reason: "expected an event file named event-NNNNN-<id>.json, found another name (skipped)"
                    .into(),
            }),
        }
    }
    files.sort();
    let mut budget = MAX_INPUT_BYTES;
    let mut out = Vec::with_capacity(files.len());
    for (_, _, path) in files {
        let bytes = match read_bounded(&path, budget) {
            Ok(b) => b,
            Err(e) => {
                let msg = e.to_string();
                let lead = format!("invalid argument: {}: ", path.display());
                let msg = msg.strip_prefix(&lead).unwrap_or(&msg).to_string();
                problems.push(Problem { file: path, line: 0, reason: format!("{msg} (event skipped)") });
                continue;
            }
        };
        budget = budget.saturating_sub(bytes.len() as u64);
        let parsed = match std::str::from_utf8(&bytes) {
            Ok(t) => super::json::parse(t.strip_prefix('\u{feff}').unwrap_or(t))
                .map(|(v, replaced)| {
                    if replaced > 0 {
                        problems.push(super::json::surrogates_problem(&path, 0, replaced));
                    }
                    v
                })
                .map_err(|e| e.to_string()),
            Err(e) => Err(format!("not UTF-8 at byte {}", e.valid_up_to())),
        };
        match parsed {
            Ok(v) if v.is_object() => out.push((path, v)),
            Ok(v) => problems.push(Problem {
                file: path,
                line: 0,
                reason: format!("expected an event (a JSON object), found {} (event skipped)", shape(&v)),
            }),
            Err(e) => problems.push(Problem {
                file: path,
                line: 0,
                reason: format!("expected an event (a JSON object), found invalid JSON: {e} (event skipped)"),
            }),
        }
    }
    Ok(out)
}

pub(super) fn conversation_folder(dir: &Path) -> Result<Parsed> {
    if !dir.join("events").is_dir() {
        return Err(Error::InvalidArgument(format!(
            "{}: not an OpenHands SDK conversation: expected a folder holding `events/` (and `base_state.json`), \
             found none",
            dir.display()
        )));
    }
    let mut problems = Vec::new();
    let base = dir.join("base_state.json");
    let state: Value = if base.is_file() {
        let bytes = read_bounded(&base, MAX_INPUT_BYTES)?;
        serde_json::from_slice(&bytes).map_err(|e| {
            Error::InvalidArgument(format!(
                "{}: expected the conversation's state as a JSON object, found invalid JSON ({e})",
                base.display()
            ))
        })?
    } else {
        Value::Null
    };
    let events = read_events(dir, &mut problems)?;
    let mut b = Builder::default();
    let mut condensations: Vec<(&Value, usize)> = Vec::new();
    for (_, ev) in &events {
        let id = ev
            .get("id")
            .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string))
            .unwrap_or_default();
        b.now = time_of(ev);
        match str_of(ev, "kind") {
            Some("SystemPromptEvent") => {
                let text = text_of(ev.get("system_prompt").map(|p| p.get("text").unwrap_or(p)));
                b.push(&id, NewMessage::system(text));
            }
            Some("MessageEvent") => {
                let m = ev.get("llm_message").unwrap_or(&Value::Null);
                let role = match str_of(m, "role").or_else(|| str_of(ev, "source")) {
                    Some("assistant" | "agent") => Role::Assistant,
                    Some("system") => Role::System,
                    _ => Role::User,
                };
                let text = text_of(m.get("content"));
                if let Some(msg) = message(role, vec![Part::Text(text)]) {
                    b.push(&id, msg);
                }
            }
            Some("ActionEvent") => {
                let mut parts = Vec::new();
                let thought = text_of(ev.get("thought"));
                if !thought.is_empty() {
                    parts.push(Part::Text(thought));
                }
                let call_id = str_of(ev, "tool_call_id")
                    .or_else(|| ev.pointer("/tool_call/id").and_then(Value::as_str))
                    .unwrap_or_default();
                let name = str_of(ev, "tool_name")
                    .or_else(|| ev.pointer("/tool_call/name").and_then(Value::as_str))
                    .unwrap_or_default();
                let args = ev.pointer("/tool_call/arguments").or_else(|| ev.get("action"));
                parts.push(Part::ToolCall {
                    id: call_id.to_string(),
                    name: name.to_string(),
                    args: args_json(args),
                });
                b.action(&id, str_of(ev, "llm_response_id").unwrap_or_default(), parts);
            }
            Some(kind @ ("ObservationEvent" | "AgentErrorEvent" | "UserRejectObservation")) => {
                let call_id = str_of(ev, "tool_call_id").unwrap_or_default();
                let (text, is_error) = match kind {
                    "ObservationEvent" => {
                        let o = ev.get("observation").unwrap_or(&Value::Null);
                        let text = match o.get("content") {
                            Some(c) => text_of(Some(c)),
                            None => text_of(o.get("output")),
                        };
                        (text, o.get("is_error").and_then(Value::as_bool).unwrap_or(false))
                    }
                    "AgentErrorEvent" => (text_of(ev.get("error")), true),
                    _ => (text_of(ev.get("rejection_reason")), true),
                };
                b.result(&id, result(call_id, text, is_error));
            }
            Some("Condensation") => condensations.push((ev, b.out.len())),
            _ => {} // state updates, pauses, condensation requests, token counts
        }
    }
    b.flush();
    let conds = condensations
        .iter()
        .map(|(ev, _)| {
            let ids: Vec<String> = ev
                .get("forgotten_event_ids")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string)).collect())
                .unwrap_or_default();
            let seqs: BTreeSet<u64> = ids.iter().filter_map(|i| b.seq_of.get(i).copied()).collect();
            let (from, to) = match (seqs.first(), seqs.last()) {
                (Some(&a), Some(&z)) => (a, z + 1),
                _ => (0, 0),
            };
            Condensation {
                from,
                to,
                contiguous: seqs.len() as u64 == to - from,
                forgotten_events: ids.len() as u64,
                summary: text_of(ev.get("summary")),
            }
        })
        .collect();
    let conv_id = str_of(&state, "id")
        .map(str::to_string)
        .or_else(|| events.first().and_then(|(_, e)| str_of(e, "id").map(|i| format!("first-event-{i}"))));
    let key = match conv_id {
        Some(i) => format!("openhands-sdk:{i}"),
        None => {
            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            format!("openhands-sdk:empty-{name}")
        }
    };
    let mut s = Session::new(Format::OpenHandsSdk, dir, key, b.out);
    s.set_times(&b.times);
    s.condensations = conds;
    if let Some(t) = title_of(&s.messages) {
        s.title = t;
    }
    s.model = state.pointer("/agent/llm/model").and_then(Value::as_str).unwrap_or_default().to_string();
    Ok(Parsed { format: Format::OpenHandsSdk, sessions: vec![s], problems })
}
