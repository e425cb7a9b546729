//! Child process of the read-only tests: opens a store read-only (beside a live writer) and
//! prints `ready`; then, for each line `check <chat> <k>` on stdin, refreshes once and checks
//! chat `<chat>` of owner `o`: it must hold at least messages 0..=k, each exactly
//! `message_text(i)`. Prints `ok <messages seen>` or `bad <what>`.

use std::io::{BufRead, Write};

use undertext::{ChatId, Part, Store};
use undertext_tests::read_only::message_text;

fn check(store: &Store, chat: u64, k: u64) -> Result<usize, String> {
    store.refresh().map_err(|e| format!("refresh: {e}"))?;
    let msgs = store.chat("o", ChatId(chat)).and_then(|c| c.messages()).map_err(|e| format!("read: {e}"))?;
    if (msgs.len() as u64) <= k {
        return Err(format!("{} messages after a refresh, message {k} was acknowledged", msgs.len()));
    }
    for (i, m) in msgs.iter().enumerate() {
        match &m.parts[..] {
            [Part::Text(t)] if *t == message_text(i as u64) => {}
            other => return Err(format!("message {i} reads {other:?}")),
        }
    }
    Ok(msgs.len())
}

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: ro_reader STORE_DIR");
        std::process::exit(2);
    };
    let store = match Store::open_read_only(&dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("open_read_only: {e}");
            std::process::exit(1);
        }
    };
    let mut out = std::io::stdout().lock();
    let mut say = |line: String| {
        if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
            std::process::exit(3);
        }
    };
    say("ready".into());
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let mut w = line.split_whitespace().skip(1).map(|x| x.parse::<u64>());
        let (Some(Ok(chat)), Some(Ok(k))) = (w.next(), w.next()) else {
            say(format!("bad request {line:?}"));
            continue;
        };
        match check(&store, chat, k) {
            Ok(n) => say(format!("ok {n}")),
            Err(why) => say(format!("bad {why}")),
        }
    }
}
