//! Child process of the fleet tests (tests/tests/fleet_processes.rs): opens the fleet store
//! at URL, prints `ready`, then runs STEPS random operations on the given chats of OWNER,
//! printing one line per acknowledged (committed) operation:
//!
//! * `ack CHAT SEQ TEXT` — an appended message;
//! * `edit CHAT SEQ TEXT REVISION` — an edit that landed, making REVISION;
//! * `pub CHAT BASE REACH` — a checkpoint published;
//! * `blob ID` — a shared blob stored (the same contents in every worker);
//! * `err MESSAGE` — an operation failed (the worker goes on after a pause);
//!
//! and `done` at the end. Usage: fleet_worker URL OWNER SEED STEPS CHAT[,CHAT...] [appends|held]
//! (`appends`: every operation is a one-message append, for a throughput measurement, each on
//! a chat resolved with `Store::chat`; `held`: the same appends on `Chat` handles opened once
//! and kept, as a harness holding its chats does). `fleet_worker URL OWNER new N` creates N
//! chats of OWNER and prints `chats ID,ID,...`. With `UNDERTEXT_FLEET_GO=PATH` in its
//! environment it waits after `ready` until PATH exists, so that many workers run at once.

use std::io::Write;
use std::time::Duration;

use undertext::{ChatId, ChatMeta, Durability, Error, NewMessage, Options, Store};
use undertext::{CheckpointOptions, Extractive};
use undertext_tests::Rng;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 5 && args[3] == "new" {
        create_chats(&args[1], &args[2], &args[4]);
        return;
    }
    let parsed = (|| {
        let url = args.get(1)?.clone();
        let owner = args.get(2)?.clone();
        let seed = args.get(3)?.parse::<u64>().ok()?;
        let steps = args.get(4)?.parse::<u64>().ok()?;
        let chats =
            args.get(5)?.split(',').map(|c| c.parse::<u64>().ok().map(ChatId)).collect::<Option<Vec<_>>>()?;
        let mode = args.get(6).map(String::as_str);
        let appends_only = matches!(mode, Some("appends" | "held"));
        Some((url, owner, seed, steps, chats, appends_only, mode == Some("held")))
    })();
    let Some((url, owner, seed, steps, chats, appends_only, held)) = parsed else {
        eprintln!("usage: fleet_worker URL OWNER SEED STEPS CHAT[,CHAT...]");
        std::process::exit(2);
    };
    let out = std::io::stdout();
    let say = |line: String| {
        let mut o = out.lock();
        if writeln!(o, "{line}").and_then(|_| o.flush()).is_err() {
            std::process::exit(3);
        }
    };
    let store = match Store::open(&url, Options::default().durability(Durability::None)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("open failed: {e}");
            std::process::exit(1);
        }
    };
    say("ready".into());
    if let Some(go) = std::env::var_os("UNDERTEXT_FLEET_GO") {
        while !std::path::Path::new(&go).exists() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let mut handles = std::collections::HashMap::new();
    if held {
        for id in &chats {
            match store.chat(&owner, *id) {
                Ok(c) => handles.insert(*id, c),
                Err(e) => {
                    eprintln!("chat {}: {e}", id.0);
                    std::process::exit(1);
                }
            };
        }
    }
    let mut rng = Rng::new(seed);
    let copts = CheckpointOptions { segment_tokens: 20, fan_in: 4, ..CheckpointOptions::default() };
    for i in 0..steps {
        let chat_id = chats[rng.range(0, chats.len() as u64) as usize];
        let r: Result<Vec<String>, Error> = (|| {
            let chat = match handles.get(&chat_id) {
                Some(c) => c.clone(),
                None => store.chat(&owner, chat_id)?,
            };
            let roll = if appends_only { 0 } else { rng.range(0, 100) };
            if roll < 70 {
                let text = format!("w{seed}-{i} reads section {i} and finds value {}", rng.next_u64() % 1000);
                let seq = chat.append(NewMessage::assistant(text.clone()))?;
                Ok(vec![format!("ack {} {seq} {text}", chat_id.0)])
            } else if roll < 80 {
                let (a, b) = (format!("w{seed}-{i}a user turn"), format!("w{seed}-{i}b answer"));
                let r =
                    chat.append_batch(vec![NewMessage::user(a.clone()), NewMessage::assistant(b.clone())])?;
                Ok(vec![
                    format!("ack {} {} {a}", chat_id.0, r.start),
                    format!("ack {} {} {b}", chat_id.0, r.start + 1),
                ])
            } else if roll < 88 && !chat.is_empty() {
                let seq = rng.range(0, chat.len());
                // Edits keep whether a message starts a user turn: only assistant ones are edited.
                if chat.get(seq)?.role != undertext::Role::Assistant {
                    return Ok(Vec::new());
                }
                let text = format!("w{seed}-{i} edited");
                match chat.edit(seq, NewMessage::assistant(text.clone()), chat.revision()) {
                    Ok(rev) => Ok(vec![format!("edit {} {seq} {text} {rev}", chat_id.0)]),
                    Err(Error::StaleRevision { .. }) => Ok(Vec::new()),
                    Err(e) => Err(e),
                }
            } else if roll < 95 {
                let cp = match chat.build_checkpoint(&Extractive::default(), &copts) {
                    Ok(cp) => cp,
                    Err(Error::InvalidArgument(_)) => return Ok(Vec::new()),
                    Err(e) => return Err(e),
                };
                match chat.publish_checkpoint(&cp) {
                    Ok(()) => Ok(vec![format!("pub {} {} {}", chat_id.0, cp.base_revision, cp.reach)]),
                    Err(Error::Conflict(_)) => Ok(Vec::new()),
                    Err(e) => Err(e),
                }
            } else {
                let k = rng.range(0, 4);
                let id = store.put_blob(&owner, format!("shared content {k} ").repeat(200).as_bytes())?;
                Ok(vec![format!("blob {id}")])
            }
        })();
        match r {
            Ok(lines) => lines.into_iter().for_each(&say),
            Err(e) => {
                say(format!("err {e}"));
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    say("done".into());
}

/// Creates `n` chats of `owner` at `url` and prints their ids (`chats ID,ID,...`).
fn create_chats(url: &str, owner: &str, n: &str) {
    let made = (|| -> Result<Vec<String>, String> {
        let n: u64 = n.parse().map_err(|_| format!("expected a number of chats, found {n:?}"))?;
        let store = Store::open(url, Options::default()).map_err(|e| e.to_string())?;
        (0..n)
            .map(|_| {
                store
                    .create_chat(owner, ChatMeta::default())
                    .map(|c| c.0.to_string())
                    .map_err(|e| e.to_string())
            })
            .collect()
    })();
    match made {
        Ok(ids) => println!("chats {}", ids.join(",")),
        Err(e) => {
            eprintln!("creating chats failed: {e}");
            std::process::exit(1);
        }
    }
}
