//! The child of `tests/tests/damage_sweep.rs`: runs the operations of a damaged store in a
//! process of its own, so that an abort (a failed allocation) or a panic shows as the
//! child's exit status instead of taking the test down.
//!
//! `damage_probe STORE read OWNER`: opens the store, reads every chat of `OWNER` (messages and
//! the whole text of every archived result), builds a view of a few, closes; prints one line
//! per step: `open ok`, `open error index|other MESSAGE`, `chat ID META MSGS` (digests of the
//! chat's metadata and of each message, comma-separated), `chat ID error index|other MESSAGE`,
//! `view ID DIGEST|error ...`, `list error ...`, `warned N` (the open's warnings), `close
//! ok|error ...`.
//!
//! `damage_probe STORE ro-read OWNER`: the same through `Store::open_read_only`.
//!
//! `damage_probe STORE check`: `check ok`, `check index-problems N`, `check log-problems N`,
//! `check error ...`, or `open error ...`.
//!
//! `damage_probe STORE rebuild`: what `undertext check --rebuild` does: on an open store
//! `Store::rebuild_index`, else (the index keeps it from opening) `Store::rebuild_index_at`.
//! Prints `rebuild ok` or `rebuild error ...`.

#![allow(clippy::print_stdout, reason = "the child reports on stdout")]

use undertext::Budget;
use undertext::{Durability, Error, Options, Page, Part, Store, ToolContent, Unit};

fn opts() -> Options {
    Options::default().create_if_missing(false).durability(Durability::None)
}

fn kind(e: &Error) -> &'static str {
    if matches!(e, Error::Index { .. }) { "index" } else { "other" }
}

fn say(what: &str, e: &Error) {
    println!("{what} error {} {}", kind(e), e.to_string().replace('\n', " "));
}

fn digest(s: &str) -> String {
    undertext::BlobId::of(s.as_bytes()).to_string()[..16].to_string()
}

fn read(store: &Store, owner: &str) {
    let mut ids = Vec::new();
    let mut page = Page { limit: 1000, after: None };
    loop {
        match store.chats(owner, page.clone()) {
            Ok(p) => {
                ids.extend(p.chats.iter().map(|c| c.id));
                match p.next {
                    Some(next) => page.after = Some(next),
                    None => break,
                }
            }
            Err(e) => {
                say("list", &e);
                break;
            }
        }
    }
    println!("listed {}", ids.len());
    for (i, id) in ids.iter().enumerate() {
        let one = || -> Result<String, Error> {
            let chat = store.chat(owner, *id)?;
            let meta = digest(&format!("{:?}", chat.meta()));
            let mut msgs = Vec::new();
            for m in chat.messages()? {
                let mut text = format!("{m:?}\n");
                for p in &m.parts {
                    if let Part::ToolResult { content: ToolContent::Archived { archive, .. }, .. } = p {
                        let whole = store.read_context(owner, &archive.id, 0..archive.chars, Unit::Chars)?;
                        text.push_str(&whole);
                    }
                }
                msgs.push(digest(&text));
            }
            Ok(format!("{meta} {}", msgs.join(",")))
        };
        match one() {
            Ok(d) => println!("chat {id} {d}"),
            Err(e) => say(&format!("chat {id}"), &e),
        }
        if i % 16 == 0 {
            let view = || -> Result<String, Error> {
                let v = store.chat(owner, *id)?.view(&Budget::new(200_000, 8_000))?;
                Ok(digest(&format!("{:?}", v.messages())))
            };
            match view() {
                Ok(d) => println!("view {id} {d}"),
                Err(e) => say(&format!("view {id}"), &e),
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(dir), Some(mode)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: damage_probe STORE read OWNER | ro-read OWNER | check | rebuild");
        std::process::exit(2);
    };
    match mode.as_str() {
        "rebuild" => {
            let r = match Store::open(dir, opts()) {
                Ok(s) => s.rebuild_index().and_then(|()| s.close()),
                Err(Error::Index { .. }) => Store::rebuild_index_at(dir, opts()),
                Err(e) => Err(e),
            };
            match r {
                Ok(()) => println!("rebuild ok"),
                Err(e) => say("rebuild", &e),
            }
            return;
        }
        "read" | "ro-read" | "check" => {}
        other => {
            eprintln!("unknown mode {other}");
            std::process::exit(2);
        }
    }
    let opened =
        if mode == "ro-read" { Store::open_read_only_with(dir, opts()) } else { Store::open(dir, opts()) };
    let store = match opened {
        Ok(s) => s,
        Err(e) => {
            say("open", &e);
            return;
        }
    };
    println!("open ok");
    println!("warned {}", store.open_warnings().len());
    for w in store.open_warnings().iter().take(5) {
        eprintln!("  open warning: {w}");
    }
    if mode == "check" {
        match store.check() {
            Ok(r) if r.is_ok() => println!("check ok"),
            Ok(r) if !r.problems.is_empty() => println!("check log-problems {}", r.problems.len()),
            Ok(r) => {
                println!("check index-problems {}", r.index_problems.len());
                for p in r.index_problems.iter().take(3) {
                    eprintln!("  {p}");
                }
            }
            Err(e) => say("check", &e),
        }
    } else {
        read(&store, args.get(3).map_or("o", String::as_str));
    }
    match store.close() {
        Ok(()) => println!("close ok"),
        Err(e) => say("close", &e),
    }
}
