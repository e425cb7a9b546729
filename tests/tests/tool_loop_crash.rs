//! Claim: every step a harness recorded survives SIGKILL, with its attempt, its tag
//! (turn, stream, step) and its status; restoring them reruns nothing and never turns an
//! interrupted step into a complete one.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use undertext::{ChatId, Options, Part, StepStatus, Store};

#[test]
fn a_100_step_tool_loop_with_a_retry_killed_after_step_60_keeps_every_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut child =
        Command::new(env!("CARGO_BIN_EXE_tool_loop")).arg(dir.path()).stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut chat: Option<ChatId> = None;
    let mut acked: Vec<(String, u32)> = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let parts: Vec<&str> = line.split(' ').collect();
        match parts[..] {
            ["chat", id] => chat = Some(id.parse().unwrap()),
            ["ack", stream, step] => {
                acked.push((stream.to_string(), step.parse().unwrap()));
                if acked.len() == 61 {
                    break; // steps 0..=60 are acknowledged: kill now, mid-loop
                }
            }
            _ => {}
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(acked.len(), 61, "the child stopped early");
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let chat = store.chat("agent", chat.unwrap()).unwrap();
    let attempts = chat.attempts(1).unwrap();
    assert_eq!(attempts.iter().map(|a| a.stream_id.as_str()).collect::<Vec<_>>(), vec!["a", "b"]);
    let a = &attempts[0];
    assert_eq!(a.steps.len(), 41);
    for (i, s) in a.steps.iter().enumerate() {
        assert_eq!(s.step, i as u32, "stream a in order");
        let want = if i == 40 { StepStatus::Interrupted } else { StepStatus::Complete };
        assert_eq!(s.status, want, "stream a step {i}");
        for m in &s.messages {
            let tag = m.step.as_ref().unwrap();
            assert_eq!((tag.turn, tag.stream_id.as_str(), tag.step), (1, "a", i as u32));
        }
    }
    let b = &attempts[1];
    let acked_b: Vec<u32> = acked.iter().filter(|(s, _)| s == "b").map(|(_, n)| *n).collect();
    assert!(b.steps.len() >= acked_b.len(), "acknowledged steps of b lost");
    // The child runs ahead of the acknowledgements the parent has read (a loaded machine
    // lets it finish several more steps before the kill lands): those extra steps may be
    // there too, each whole and in order (checked below), never more than the loop makes.
    assert!(b.steps.len() <= 60, "stream b has steps 40..100 at most");
    for (i, s) in b.steps.iter().enumerate() {
        assert_eq!(s.step, 40 + i as u32, "stream b in order");
        assert_eq!(s.status, StepStatus::Complete);
        assert_eq!(s.messages.len(), 2, "a step is whole or absent");
        match &s.messages[1].parts[0] {
            Part::ToolResult { call_id, .. } => assert_eq!(call_id, &format!("b-{}", s.step)),
            p => panic!("{p:?}"),
        }
    }
    // The chat's messages are the user message and every recorded step's messages, in order.
    let total: usize = attempts.iter().flat_map(|a| &a.steps).map(|s| s.messages.len()).sum();
    assert_eq!(chat.len(), 1 + total as u64);
}
