//! Child process of the tool-loop crash test: a 100-step agent loop on one chat. Steps
//! 0..40 run on stream `a`; step 40 of `a` is cut off (recorded `Interrupted`), and a retry
//! on stream `b` goes on from step 40. After each step is durable it prints
//! `ack <stream> <step>`. The parent kills it with SIGKILL after step 60.
//!
//! Usage: `tool_loop STORE_DIR`

use std::io::Write;

use undertext::{ChatMeta, NewMessage, Options, Part, Role, StepStatus, Store};

fn step_messages(stream: &str, step: u32) -> Vec<NewMessage> {
    let call = NewMessage {
        role: Role::Assistant,
        parts: vec![Part::ToolCall {
            id: format!("{stream}-{step}"),
            name: "read_file".into(),
            args: format!("{{\"path\":\"src/file{step}.rs\"}}"),
        }],
        feedback: false,
    };
    // Every third result is large enough to be stored as a blob of its own.
    let size = if step.is_multiple_of(3) { 3000 } else { 200 };
    let body: String = format!("// file {step} read by {stream}\n").repeat(size / 30 + 1);
    vec![call, NewMessage::tool_result(format!("{stream}-{step}"), body)]
}

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: tool_loop STORE_DIR");
        std::process::exit(2);
    };
    let run = || -> undertext::Result<()> {
        let store = Store::open(&dir, Options::default())?;
        let id = store.create_chat("agent", ChatMeta { title: "tool loop".into(), ..Default::default() })?;
        let chat = store.chat("agent", id)?;
        chat.append(NewMessage::user("refactor the parser"))?;
        let mut out = std::io::stdout();
        let _ = writeln!(out, "chat {id}");
        for step in 0..40u32 {
            chat.record_step(1, "a", step, StepStatus::Complete, step_messages("a", step))?;
            let _ = writeln!(out, "ack a {step}");
            let _ = out.flush();
        }
        chat.record_step(1, "a", 40, StepStatus::Interrupted, vec![NewMessage::assistant("I will now rea")])?;
        let _ = writeln!(out, "ack-interrupted a 40");
        for step in 40..100u32 {
            chat.record_step(1, "b", step, StepStatus::Complete, step_messages("b", step))?;
            let _ = writeln!(out, "ack b {step}");
            let _ = out.flush();
        }
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("tool loop failed: {e}");
        std::process::exit(1);
    }
}
