//! A chat with nothing settled yet (the task and one step of 30 parallel calls: the last
//! step is always protected) past the hard line: the worker reports no failure (there is
//! nothing to prepare), the synchronous policy lets the guard decide instead of failing the
//! view, and the waiting policy stops waiting once the chat's job has ended.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::sync::Arc;
use std::time::Duration;

use undertext::Extractive;
use undertext::{Budget, Decision};
use undertext::{ChatMeta, Durability, NewMessage, Options, Part, Role, Store};
use undertext::{HardLinePolicy, WorkerOptions};

fn one_huge_step(store: &Store) -> undertext::Chat {
    let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
    chat.append(NewMessage::user("fix the build")).unwrap();
    let calls =
        (0..30).map(|k| Part::ToolCall { id: format!("c{k}"), name: "run".into(), args: "{}".into() });
    chat.append(NewMessage { role: Role::Assistant, parts: calls.collect(), feedback: false }).unwrap();
    for k in 0..30 {
        chat.append(NewMessage::tool_result(format!("c{k}"), format!("output {k} ").repeat(300))).unwrap();
    }
    chat
}

#[test]
fn past_the_hard_line_with_nothing_settled_the_view_is_refused_not_failed() {
    for policy in [HardLinePolicy::Synchronous, HardLinePolicy::Wait(Duration::from_secs(600))] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
        let worker = store
            .start_worker(
                Arc::new(Extractive::default()),
                WorkerOptions { at_hard_line: policy, ..WorkerOptions::default() },
            )
            .unwrap();
        let chat = one_huge_step(&store);
        let total = chat.estimate(&Budget::new(1 << 40, 0)).unwrap();
        // A window the chat overflows (the guard can preview nothing: it is all the last step).
        let v = chat.view(&Budget::new(total / 2, 0)).unwrap();
        assert!(matches!(v.decision(), Decision::Refused { .. }), "{policy:?}: {:?}", v.decision());
        assert!(
            worker.errors().is_empty(),
            "{policy:?}: nothing settled reported as failures: {:?}",
            worker.errors()
        );
    }
}
