//! Claims of the replay's cost with prompt caching (`undertext_cli::replay` with its `cost`):
//! every model call is priced for the views, resending everything (where it fits the window)
//! and the naive policy; a session that never reaches the soft line costs exactly what
//! resending everything costs; a session that outgrows the window is priced on the calls where
//! resending fits, and the naive policy breaks the cache once per crossing of the hard line.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::time::Duration;

use undertext::HardLinePolicy;
use undertext::import::Session;
use undertext::{ChatMeta, Durability, NewMessage, Options, Part, Role, Store, ToolContent};
use undertext_cli::replay::cost::Price;
use undertext_cli::replay::{ReplayOptions, ReplayRow, replay_session, session_of_chat, start_worker};

fn store(dir: &std::path::Path) -> Store {
    Store::open(dir, Options::default().durability(Durability::None).preallocate(false)).unwrap()
}

/// A single-task tool loop of `steps` model calls, each tool result about `chars` characters
/// (under the archive threshold, so nothing is archived on append).
fn session(steps: u64, chars: usize) -> Session {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let chat = s.chat("o", s.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    chat.append(NewMessage::system("You are a careful agent.")).unwrap();
    chat.append(NewMessage::user("Find the failing test and fix it.")).unwrap();
    for k in 0..steps {
        let id = format!("c{k}");
        chat.append(NewMessage {
            role: Role::Assistant,
            parts: vec![Part::ToolCall {
                id: id.clone(),
                name: "sh".into(),
                args: format!("{{\"cmd\": \"step {k}\"}}"),
            }],
            feedback: false,
        })
        .unwrap();
        let mut text = String::new();
        let mut line = 0;
        while text.len() < chars {
            text.push_str(&format!("step {k} line {line}: value {}\n", k * 31 + line));
            line += 1;
        }
        chat.append(NewMessage {
            role: Role::Tool,
            parts: vec![Part::ToolResult { call_id: id, content: ToolContent::Text(text), is_error: false }],
            feedback: false,
        })
        .unwrap();
    }
    chat.append(NewMessage::assistant("Done.")).unwrap();
    let session = session_of_chat(&s, "o", chat.id()).unwrap();
    s.close().unwrap();
    session
}

/// Replays `session` the way a harness runs: the worker gets the model call's time to finish
/// the job a view asked for, and a view at the hard line waits for it (the engine's default),
/// so what is priced never depends on how fast this machine's threads are scheduled.
fn replay(session: &Session, window: u64) -> ReplayRow {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let opts = ReplayOptions {
        window,
        latency: Duration::from_secs(60),
        at_hard_line: HardLinePolicy::Wait(Duration::from_secs(60)),
        ..ReplayOptions::default()
    };
    let worker = start_worker(&s, &opts).unwrap();
    let row = replay_session(&s, "replay", session, &opts).unwrap();
    worker.stop();
    s.close().unwrap();
    row
}

#[test]
fn a_session_under_the_soft_line_costs_exactly_what_resending_everything_costs() {
    let s = session(20, 1_500);
    let row = replay(&s, 200_000);
    assert_eq!(row.previews + row.checkpoints + row.archived, 0, "{row:?}");
    assert_eq!(row.views.calls, row.steps);
    assert_eq!(row.resend_over, 0);
    assert_eq!(row.views, row.resend, "the views are the session itself, append-only");
    assert_eq!(row.views, row.naive, "the naive policy never reaches its hard line");
    assert_eq!(row.views.breaks, 0);
    assert_eq!(row.views.tokens(), row.guarded_tokens);
    // Every token is written once and then read from the cache at every later call.
    assert!(row.views.cached > 5 * row.views.uncached, "{:?}", row.views);
    let p = Price::default();
    assert!((row.views.cost(&p) - row.resend.cost(&p)).abs() < 1e-12);
}

#[test]
fn a_session_that_outgrows_the_window_is_priced_where_resending_fits_and_the_naive_policy_breaks_per_crossing()
 {
    let s = session(120, 3_000);
    let window = 16_000;
    let row = replay(&s, window);
    assert_eq!(row.refused, 0, "{row:?}");
    assert!(row.checkpoints > 0, "the loop crosses the hard line: {row:?}");
    assert_eq!(row.views.calls, row.steps);
    assert_eq!(row.naive.calls, row.steps);
    assert!(row.resend_over > 0, "resending everything outgrows the window: {row:?}");
    assert_eq!(row.resend.calls + row.resend_over, row.steps);
    assert_eq!(row.views_fit.calls, row.resend.calls, "the views priced on the same calls");
    assert_eq!(row.resend.breaks, 0, "resending only appends");
    assert!(row.naive.breaks > 0, "{:?}", row.naive);
    assert_eq!(row.naive_over, 0);
    // The naive policy's requests stay at or under its hard line.
    let hard = ReplayOptions { window, ..ReplayOptions::default() }.budget().hard_limit();
    assert!(row.naive.tokens() <= row.steps * hard);
    // Each swap of a checkpoint changes the front of the view: a break.
    assert!(row.views.breaks >= row.checkpoints, "{:?}", row.views);
    assert_eq!(row.views.tokens(), row.guarded_tokens);
    // The points carry the same figures, call by call.
    let cached: u64 = row.points.iter().map(|p| p.cached).sum();
    let broke = row.points.iter().filter(|p| p.broke).count() as u64;
    assert_eq!((cached, broke), (row.views.cached, row.views.breaks));
}
