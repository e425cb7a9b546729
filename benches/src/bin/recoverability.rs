//! Recoverability from the view (issue 33): facts from the early tool results of real
//! sessions that are absent from the final view at a 32k window, and whether a model can
//! follow a route from that view to each.
//!
//! ```text
//! cargo run --release -p undertext-benches --bin recoverability -- /work/shared/data/transcripts
//! ```
//!
//! Every session of the transcripts is replayed into a chat as a harness would (a view before
//! each assistant message, the background worker given time between views), then the final
//! view is taken. Facts: from each tool result of the first half of the session, its first
//! line of 20 to 200 characters that holds a digit or a `/` (a number, a path, an error
//! line). A fact absent from the final view's text is reachable when the view names a
//! handle that returns it: the archive of a preview (`read_context`), or the chat and a seq
//! range that `read_messages` reads back; or when `search_history` with three of the fact's
//! own words (its three longest) returns the message in its top 5 hits over the chat.
//! Prints the counts per format; `RECOVERABILITY_MISSES=1` prints each fact with no route.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a bench binary: a failed step fails the run")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use undertext::Budget;
use undertext::Extractive;
use undertext::WorkerOptions;
use undertext::import::{self, Format};
use undertext::{ChatMeta, Durability, Options, Part, Role, SearchScope, Store, ToolContent, Unit};

fn fact_of(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .find(|l| (20..=200).contains(&l.len()) && l.chars().any(|c| c.is_ascii_digit() || c == '/'))
        .map(str::to_string)
}

/// Message `seq` as a model reads it with `read_messages`: page after page, as each answer's
/// last line says (`offset=`).
fn read_messages_whole(store: &Store, chat: &str, seq: u64) -> String {
    let mut out = String::new();
    let mut offset = 0u64;
    for _ in 0..64 {
        let args = format!(r#"{{"chat": "{chat}", "start": {seq}, "end": {}, "offset": {offset}}}"#, seq + 1);
        let page = store.history_tool_call("o", "read_messages", &args).unwrap();
        out.push_str(&page);
        let next = page.rfind("offset=").and_then(|i| {
            page[i + 7..].chars().take_while(char::is_ascii_digit).collect::<String>().parse::<u64>().ok()
        });
        match next {
            Some(o) if o > offset => offset = o,
            _ => break,
        }
    }
    out
}

/// Three of the fact's own words, as a model would pick them: its three longest words of
/// letters and digits (at least 3 characters), in the fact's order.
fn query_words(fact: &str) -> Vec<String> {
    let words: Vec<&str> =
        fact.split(|c: char| !c.is_alphanumeric() && c != '_').filter(|w| w.chars().count() >= 3).collect();
    let mut by_len: Vec<usize> = (0..words.len()).collect();
    by_len.sort_by_key(|&i| std::cmp::Reverse(words[i].chars().count()));
    let mut pick: Vec<usize> = by_len.into_iter().take(3).collect();
    pick.sort_unstable();
    pick.into_iter().map(|i| words[i].to_string()).collect()
}

fn main() {
    let root = std::env::args().nth(1).unwrap_or_else(|| "../shared/data/transcripts".into());
    let files = import::transcript_files(&[root.into()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
    let _worker = store.start_worker(Arc::new(Extractive::default()), WorkerOptions::default()).unwrap();
    let budget = Budget::new(32_000, 4_096);
    // format -> (facts absent from the final view, reachable, by archive, by read_messages,
    // by search)
    let mut tally: BTreeMap<String, [u64; 5]> = BTreeMap::new();
    for f in files {
        let Ok(parsed) = import::parse_file(&f, Format::Auto) else { continue };
        for s in parsed.sessions {
            let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
            let mut view = None;
            for m in &s.messages {
                if m.role == Role::Assistant {
                    view = chat.view(&budget).ok();
                    store.wait_worker_idle(Duration::from_secs(30));
                }
                chat.append(m.clone()).unwrap();
            }
            let Some(_) = view else { continue };
            let Ok(v) = chat.view(&budget) else { continue };
            let text = v.to_openai_json();
            let seen: String = v
                .messages()
                .iter()
                .flat_map(|m| &m.parts)
                .map(|p| match p {
                    Part::Text(t) | Part::Summary(t) => t.clone(),
                    Part::ToolResult { content: ToolContent::Text(t), .. } => t.clone(),
                    Part::ToolResult { content: ToolContent::Archived { preview, .. }, .. } => {
                        preview.clone()
                    }
                    _ => String::new(),
                })
                .collect();
            let msgs = chat.messages().unwrap();
            let half = msgs.len() / 2;
            let t = tally.entry(s.format.to_string()).or_default();
            for m in &msgs[..half] {
                for p in &m.parts {
                    let Part::ToolResult { content, .. } = p else { continue };
                    let whole = match content {
                        ToolContent::Text(t) => t.clone(),
                        ToolContent::Archived { archive, .. } => {
                            store.read_context("o", &archive.id, 0..archive.chars, Unit::Chars).unwrap()
                        }
                    };
                    let Some(fact) = fact_of(&whole) else { continue };
                    if seen.contains(&fact) {
                        continue;
                    }
                    t[0] += 1;
                    // By the archive a preview names.
                    let by_archive = v.omitted().results.iter().any(|(seq, id)| {
                        *seq == m.seq
                            && text.contains(&id.to_string())
                            && store
                                .read_context("o", id, 0..whole.chars().count() as u64, Unit::Chars)
                                .is_ok_and(|back| back.contains(&fact))
                    });
                    // By the chat and a seq range the view names.
                    let by_messages = text.contains(&chat.id().to_string())
                        && v.omitted().ranges.iter().any(|r| r.contains(&m.seq))
                        && read_messages_whole(&store, &chat.id().to_string(), m.seq).contains(&fact);
                    // By `search_history` with three of the fact's own words: the message in
                    // the top 5 hits of its chat.
                    let words = query_words(&fact);
                    let by_search = !words.is_empty()
                        && store
                            .search("o", &words.join(" "), SearchScope::chat(chat.id()), 5)
                            .is_ok_and(|hits| hits.iter().any(|h| h.seq == m.seq));
                    if by_archive || by_messages || by_search {
                        t[1] += 1;
                    } else if std::env::var_os("RECOVERABILITY_MISSES").is_some() {
                        let in_view = v.messages().iter().any(|vm| vm.seqs.contains(&m.seq));
                        let previewed = v.omitted().results.iter().any(|(seq, _)| *seq == m.seq);
                        let ranged = v.omitted().ranges.iter().any(|r| r.contains(&m.seq));
                        eprintln!(
                            "miss: {} seq {} (in view {in_view}, previewed {previewed}, under a summary {ranged}; \
                             words {words:?}): {fact:?}",
                            s.key, m.seq
                        );
                    }
                    t[2] += u64::from(by_archive);
                    t[3] += u64::from(by_messages);
                    t[4] += u64::from(by_search);
                }
            }
        }
    }
    println!(
        "| format | facts absent from the final view | reachable | by a preview's archive | by read_messages | by search_history (3 words, top 5) |"
    );
    println!("|---|--:|--:|--:|--:|--:|");
    let mut all = [0u64; 5];
    for (f, t) in &tally {
        println!(
            "| {f} | {} | {} ({:.1} %) | {} | {} | {} |",
            t[0],
            t[1],
            100.0 * t[1] as f64 / t[0].max(1) as f64,
            t[2],
            t[3],
            t[4]
        );
        for i in 0..5 {
            all[i] += t[i];
        }
    }
    println!(
        "| **all** | {} | {} ({:.1} %) | {} | {} | {} |",
        all[0],
        all[1],
        100.0 * all[1] as f64 / all[0].max(1) as f64,
        all[2],
        all[3],
        all[4]
    );
}
