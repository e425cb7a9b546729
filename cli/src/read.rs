//! `chats`, `show`, `view`, `archive`, `read`, `search`.

use std::io::Write;

use serde_json::{Value, json};
use undertext::{BlobId, Durability, Page, Unit};
use undertext::{Budget, Decision};
use undertext::{CheckpointOptions, Extractive};

use super::args::{ArchiveArgs, ChatsArgs, ReadArgs, SearchArgs, ShowArgs, ViewArgs};
use super::out::{self, num};
use super::{Cli, CliError, CliResult};

/// `chats`: the owner's chats, newest activity first.
pub fn chats(cli: &Cli, a: &ChatsArgs) -> CliResult {
    let store = out::open_for_reading(cli)?;
    let mut page = Page { limit: a.limit.clamp(1, 1000), after: None };
    let mut all = Vec::new();
    while all.len() < a.limit {
        let p = store.chats(&cli.owner, page.clone())?;
        all.extend(p.chats);
        match p.next {
            Some(n) => page.after = Some(n),
            None => break,
        }
    }
    all.truncate(a.limit);
    if a.json {
        let rows: Vec<Value> = all
            .iter()
            .map(|c| {
                json!({
                    "id": c.id.to_string(), "title": c.meta.title, "model": c.meta.model, "messages": c.len,
                    "revision": c.revision, "created_ms": c.created_ms, "last_activity_ms": c.last_activity_ms,
                    "extra": c.meta.extra,
                })
            })
            .collect();
        return out::print_json(&json!({"owner": cli.owner, "chats": rows}));
    }
    // One line per chat, whatever the titles: the title is cut to the terminal's width
    // (`COLUMNS`, else 120), so a long one never wraps under the next chat's id.
    let width = std::env::var("COLUMNS").ok().and_then(|c| c.parse::<usize>().ok()).unwrap_or(120).max(80);
    println!("{:<21} {:>8}  {:<16}  {:<16}  title", "chat", "messages", "last activity", "format");
    let lead = 21 + 1 + 8 + 2 + 16 + 2 + 16 + 2;
    for c in &all {
        let format = c.meta.extra.get(undertext::import::FORMAT).map_or("", String::as_str);
        let parent = c
            .meta
            .extra
            .get(undertext::import::PARENT_CHAT)
            .and_then(|p| p.parse::<undertext::ChatId>().ok())
            .map(|p| format!("[side chain of {:#x}] ", p.0));
        let title =
            format!("{}{}", parent.unwrap_or_default(), c.meta.title.lines().next().unwrap_or_default());
        let room = width.saturating_sub(lead).max(10);
        let title = if title.chars().count() > room {
            format!("{}…", title.chars().take(room - 1).collect::<String>())
        } else {
            title
        };
        println!(
            "{:<21} {:>8}  {:<16}  {:<16}  {}",
            c.id.to_string(),
            num(c.len),
            out::utc_minute(c.last_activity_ms),
            format,
            title
        );
    }
    println!("{} chats of owner {:?} in {}", all.len(), cli.owner, cli.store.display());
    if all.is_empty() {
        // The owner trap: a store written as another owner lists nothing here.
        let owners = store.owners()?;
        if !owners.is_empty() {
            let list: Vec<String> = owners.iter().map(|(o, n)| format!("{o:?} ({n})")).collect();
            eprintln!("note: chats are held by owner {} here: pass --owner NAME", list.join(", "));
        }
    }
    Ok(())
}

/// `show CHAT…`: every message with its seq.
pub fn show(cli: &Cli, a: &ShowArgs) -> CliResult {
    let store = out::open_for_reading(cli)?;
    let mut chats = Vec::new();
    for c in &a.chats {
        chats.push(out::chat(cli, &store, c)?);
    }
    if a.json {
        let mut list = Vec::new();
        for chat in &chats {
            let snap = chat.snapshot();
            let mut msgs = Vec::new();
            for m in snap.iter() {
                msgs.push(undertext::json::message_json(&m?));
            }
            let meta = snap.meta();
            list.push(json!({
                "id": chat.id().to_string(), "title": meta.title, "model": meta.model, "extra": meta.extra,
                "revision": snap.revision(), "messages": msgs,
            }));
        }
        return out::print_json(&json!({"chats": list}));
    }
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    for chat in &chats {
        let snap = chat.snapshot();
        writeln!(
            w,
            "{} — {} ({} messages, revision {})",
            chat.id(),
            snap.meta().title,
            snap.len(),
            snap.revision()
        )?;
        for m in snap.iter() {
            let m = m?;
            for (i, p) in m.parts.iter().enumerate() {
                let head =
                    if i == 0 { format!("{:>5} {:<9}", m.seq, m.role.as_str()) } else { " ".repeat(15) };
                writeln!(w, "{head} {}", out::part_text(p, if a.full { 0 } else { 400 }))?;
            }
        }
    }
    Ok(())
}

/// `view CHAT --window N`: what the next model call would see.
pub fn view(cli: &Cli, a: &ViewArgs) -> CliResult {
    let store = out::open_for_reading(cli)?;
    let chat = out::chat(cli, &store, &a.chat)?;
    let budget = Budget::new(a.window, a.reserve);
    let mut v = chat.view(&budget)?;
    // Why a view stays refused, for the error at the end.
    let mut why = "the protected minimum (system messages, the task, the last step) and what cannot be \
                   summarized yet (the protected tail, a pending approval) are over the hard line"
        .to_string();
    if matches!(v.decision(), Decision::Refused { .. }) {
        if a.no_prepare {
            why = "no checkpoint was prepared (--no-prepare): run `view` without it, or let a harness's worker \
                   publish one"
                .into();
        } else if store.is_read_only() {
            why =
                "the store is open read-only, so no checkpoint could be prepared: run `view` when no other \
                   process holds the store"
                    .into();
        } else {
            // What a harness's worker would have done before this call.
            // The protected tail bounded by this budget, as the worker bounds it.
            let opts = CheckpointOptions {
                protect_max_tokens: Some(budget.protect_limit()),
                ..CheckpointOptions::default()
            };
            let cp = chat.build_checkpoint(&Extractive::default(), &opts)?;
            if cp.reach > chat.published_checkpoint().map_or(0, |(_, reach)| reach) {
                chat.publish_checkpoint(&cp)?;
                eprintln!(
                    "note: prepared and published a checkpoint of messages 0..{} (the built-in extractive summarizer), \
                     as a harness's worker would have; --no-prepare leaves the store as it is",
                    cp.reach
                );
                v = chat.view(&budget)?;
            }
        }
    }
    let refused = match v.decision() {
        Decision::Refused { over_by, .. } => Some(*over_by),
        _ => None,
    };
    let decision = match v.decision() {
        Decision::Fits => json!({"kind": "fits"}),
        Decision::Compacted { previewed, tokens_saved } => {
            json!({"kind": "compacted", "previewed": previewed, "tokens_saved": tokens_saved})
        }
        Decision::Refused { estimate, limit, over_by } => {
            json!({"kind": "refused", "estimate": estimate, "limit": limit, "over_by": over_by})
        }
    };
    if a.json {
        let msgs: Vec<Value> = v.messages().iter().map(undertext::json::view_message_json).collect();
        out::print_json(&json!({
            "chat": chat.id().to_string(), "window": a.window, "reserve": a.reserve,
            "soft_limit": budget.soft_limit(), "target_limit": budget.target_limit(), "hard_limit": budget.hard_limit(),
            "estimate": v.estimate(), "raw_estimate": v.raw_estimate(), "decision": decision, "messages": msgs,
        }))?;
        return refused_error(refused, &why);
    }
    match a.format.as_str() {
        "openai" => println!("{}", v.to_openai_json()),
        "anthropic" => println!("{}", v.to_anthropic_json()),
        "text" => {
            println!(
                "{}: {} of {} usable tokens (soft {}, hard {}); {}",
                chat.id(),
                num(v.estimate()),
                num(budget.usable()),
                num(budget.soft_limit()),
                num(budget.hard_limit()),
                match v.decision() {
                    Decision::Fits => "fits".to_string(),
                    Decision::Compacted { previewed, .. } if previewed.is_empty() => {
                        "past the soft line, and everything older is protected (the protected tail, pins)"
                            .to_string()
                    }
                    Decision::Compacted { previewed, tokens_saved } => {
                        format!(
                            "{} older tool results shown as previews ({} tokens saved)",
                            previewed.len(),
                            num(*tokens_saved)
                        )
                    }
                    Decision::Refused { over_by, .. } =>
                        format!("REFUSED: over the hard line by {} tokens", num(*over_by)),
                }
            );
            for m in v.messages() {
                let seqs = if m.seqs.end == m.seqs.start + 1 {
                    m.seqs.start.to_string()
                } else {
                    format!("{}..{}", m.seqs.start, m.seqs.end)
                };
                for (i, p) in m.parts.iter().enumerate() {
                    let head = if i == 0 {
                        format!("{seqs:>9} {:<9} {:>6}t", m.role.as_str(), m.tokens)
                    } else {
                        " ".repeat(25)
                    };
                    println!("{head} {}", out::part_text(p, 200));
                }
            }
        }
        other => {
            return Err(CliError(format!("--format: expected text, openai or anthropic, found {other:?}")));
        }
    }
    refused_error(refused, &why)
}

/// The error a refused view exits with (status 1), after the view is printed.
fn refused_error(over_by: Option<u64>, why: &str) -> CliResult {
    match over_by {
        Some(over) => {
            Err(CliError(format!("the view is refused: over the hard line by {} tokens; {why}", num(over))))
        }
        None => Ok(()),
    }
}

/// `archive FILE`: stores the file's text as an archive of the owner.
pub fn archive(cli: &Cli, a: &ArchiveArgs) -> CliResult {
    // Type and size checked before reading: a FIFO or `/dev/zero` is refused, not read.
    let bytes = undertext::import::read_bounded(&a.file, undertext::import::MAX_INPUT_BYTES)?;
    let text = String::from_utf8(bytes).map_err(|e| {
        CliError(format!(
            "{}: expected UTF-8 text, found invalid UTF-8 at byte {}",
            a.file.display(),
            e.utf8_error().valid_up_to()
        ))
    })?;
    let store = out::open(cli, true, Durability::Group)?;
    let r = store.archive(&cli.owner, &text)?;
    if a.json {
        return out::print_json(&undertext::json::archive_ref_json(&r));
    }
    println!("archive {}", r.id);
    println!("bytes {}  chars {}  utf16_units {}  lines {}", r.bytes, r.chars, r.utf16_units, r.lines);
    println!("read it back: undertext read {} --range 0..{} --unit char", r.id, r.chars);
    Ok(())
}

fn unit(s: &str) -> CliResult<Unit> {
    s.parse::<Unit>().map_err(|e| match e {
        undertext::Error::InvalidArgument(why) => CliError(format!("--{why}")),
        other => CliError(other.to_string()),
    })
}

/// Parses `A..B`, `A..`, `..B` or `..` against a length.
fn range(s: &str, len: u64) -> CliResult<std::ops::Range<u64>> {
    let bad = || {
        CliError(format!(
            "--range: expected A..B (end exclusive), A.. or ..B with whole numbers, found {s:?}"
        ))
    };
    let (a, b) = s.split_once("..").ok_or_else(bad)?;
    let a = if a.is_empty() { 0 } else { a.trim().parse().map_err(|_| bad())? };
    let b = if b.is_empty() { len } else { b.trim().parse().map_err(|_| bad())? };
    Ok(a..b)
}

/// `read ARCHIVE --range A..B --unit U`: exactly that text on stdout, nothing else.
pub fn read(cli: &Cli, a: &ReadArgs) -> CliResult {
    let id: BlobId = a.archive.parse().map_err(|e| {
        CliError(format!("{e} (archive ids are 64 hex digits, printed by `archive` and `show`)"))
    })?;
    let unit = unit(&a.unit)?;
    let store = out::open_for_reading(cli)?;
    let r = store.archive_ref(&cli.owner, &id)?;
    let len = match unit {
        Unit::Chars => r.chars,
        Unit::Utf16 => r.utf16_units,
        Unit::Bytes => r.bytes,
        Unit::Lines => r.lines,
    };
    let range = range(&a.range, len)?;
    let text = store.read_context(&cli.owner, &id, range.clone(), unit)?;
    if a.json {
        return out::print_json(&json!({
            "archive": id.to_string(), "unit": unit.as_str(), "start": range.start, "end": range.end, "text": text,
        }));
    }
    let mut o = std::io::stdout().lock();
    o.write_all(text.as_bytes())?;
    o.flush()?;
    Ok(())
}

/// `search QUERY [--chat ID] [--limit N] [--hidden] [--json]`.
pub fn search(cli: &Cli, a: &SearchArgs) -> CliResult {
    let store = out::open_for_reading(cli)?;
    let mut scope = match &a.chat {
        Some(c) => undertext::SearchScope::chat(out::chat(cli, &store, c)?.id()),
        None => undertext::SearchScope::all(),
    };
    scope.include_hidden = a.hidden;
    let hits = store.search(&cli.owner, &a.query, scope, a.limit)?;
    if a.json {
        return out::print_json(&undertext::SearchHit::list_json(&hits));
    }
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    for h in &hits {
        let place = match &h.archive {
            Some(id) => format!("archive {id} {}..{} {}", h.start, h.end, h.unit.as_str()),
            None => {
                format!("part {} {} {}..{} {}", h.part, h.field.as_str(), h.start, h.end, h.unit.as_str())
            }
        };
        writeln!(w, "{} seq {:<5} {place}  (score {:.2})", h.chat, h.seq, h.score)?;
        writeln!(w, "    {}", h.snippet)?;
    }
    writeln!(w, "{} hits for {:?} (owner {:?})", hits.len(), a.query, cli.owner)?;
    Ok(())
}
