//! A cached view of a held chat: fleet mode against embedded (issue 20, "cached views within
//! 2× of embedded"; benches/README.md, "Fleet mode: cached views").
//!
//! ```text
//! UNDERTEXT_FLEET_URL=postgres://… cargo run --release -p undertext-benches --features fleet --bin fleet_view
//! ```
//!
//! For each store (a directory, then the URL) it builds a 600-message chat (300 pairs of a
//! user message and a tool result of about 2 KB, as `benches/python/fleet_savers.py`), then
//! times `Chat::view` on a `Chat` kept across calls (no catalog round trip, docs/FLEET.md "Seeing
//! other processes' writes"), and `Store::chat` + view (in fleet mode one round trip: what a
//! caller pays to see other processes' writes). Each figure is the median over samples of
//! many calls, per call. Without `UNDERTEXT_FLEET_URL` it says it skipped and exits 0.
//!
//! Then a second process's view after a foreign append (issue 35): two stores on the URL
//! stand for two processes (each open has its own replica, connections and listener). The
//! writer builds a chat of N messages (user and assistant pairs of about 300 characters;
//! N = 500, 5,000, 20,000, or the sizes given after the URL); the reader opens it and takes
//! a view (a budget the whole chat fits). Then, 21 times, the writer appends one message and
//! the reader takes a view that must end with it, timed: `Store::chat` + view (one query: how
//! a reader that polls sees it), and, in separate rounds, the held `Chat`'s view once change
//! notification has told the reader's store of the append (`undertext::fleet::notified`;
//! the wait for the notification is not timed). Medians.

use std::time::{Duration, Instant};

use undertext::Budget;
use undertext::{ChatMeta, Durability, NewMessage, Options, Store};
use undertext_benches::Result;

/// A tool result of about 2 KB, different for each step.
fn result_text(i: usize) -> String {
    (0..40).map(|l| format!("line {l:02} of step {i:03}: value {} ok\n", i * 31 + l)).collect()
}

/// Median per-call time of `f` over `samples` samples of `calls` calls each.
fn per_call(samples: usize, calls: usize, mut f: impl FnMut() -> Result<()>) -> Result<Duration> {
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        for _ in 0..calls {
            f()?;
        }
        times.push(t.elapsed() / calls as u32);
    }
    times.sort_unstable();
    Ok(times[times.len() / 2])
}

struct Row {
    name: &'static str,
    first: Duration,
    held: Duration,
    resolved: Duration,
}

fn measure(name: &'static str, target: &str) -> Result<Row> {
    let store = Store::open(target, Options::default().durability(Durability::None))?;
    let owner = format!("bench-view-{}", std::process::id());
    let id = store.create_chat(&owner, ChatMeta { title: "view".into(), ..Default::default() })?;
    let chat = store.chat(&owner, id)?;
    for i in 0..300 {
        chat.append_batch(vec![
            NewMessage::user(format!("step {i}: read the next file")),
            NewMessage::tool_result(format!("c{i}"), result_text(i)),
        ])?;
    }
    let budget = Budget::new(200_000, 8_000);
    let t = Instant::now();
    let v = chat.view(&budget)?;
    let first = t.elapsed();
    if v.messages().len() != 600 {
        return Err(format!(
            "expected the whole chat (600 messages) in the view, found {}",
            v.messages().len()
        )
        .into());
    }
    let held = per_call(51, 2_000, || {
        std::hint::black_box(chat.view(&budget)?);
        Ok(())
    })?;
    let resolved = per_call(21, 50, || {
        std::hint::black_box(store.chat(&owner, id)?.view(&budget)?);
        Ok(())
    })?;
    drop(chat);
    store.delete_chat(&owner, id)?;
    store.close()?;
    Ok(Row { name, first, held, resolved })
}

/// A message of about 300 characters, different for each `i`.
fn filler(i: usize) -> String {
    format!("message {i}: ")
        + &format!("the build step {i} reads a file and reports value {} ok; ", i * 7).repeat(5)
}

struct Foreign {
    len: usize,
    build: Duration,
    polled: Duration,
    notified: Option<Duration>,
}

/// Whether `view` ends with message `seq`.
fn ends_with(view: &undertext::View, seq: u64) -> bool {
    view.messages().last().is_some_and(|m| m.seqs.end == seq + 1)
}

fn foreign(url: &str, len: usize) -> Result<Foreign> {
    let opts = Options::default().durability(Durability::None);
    let (writer, reader) = (Store::open(url, opts.clone())?, Store::open(url, opts)?);
    let owner = format!("bench-foreign-{}-{len}", std::process::id());
    let id = writer.create_chat(&owner, ChatMeta { title: "foreign".into(), ..Default::default() })?;
    let w = writer.chat(&owner, id)?;
    let t = Instant::now();
    for start in (0..len).step_by(500) {
        let batch = (start..(start + 500).min(len))
            .map(|i| if i % 2 == 0 { NewMessage::user(filler(i)) } else { NewMessage::assistant(filler(i)) })
            .collect();
        w.append_batch(batch)?;
    }
    let build = t.elapsed();
    let budget = Budget::new(100_000_000, 0);
    let held = reader.chat(&owner, id)?;
    held.view(&budget)?;
    let mut next = len;
    let mut polled = Vec::new();
    for _ in 0..21 {
        let seq = w.append(NewMessage::assistant(filler(next)))?;
        next += 1;
        let t = Instant::now();
        let v = reader.chat(&owner, id)?.view(&budget)?;
        polled.push(t.elapsed());
        if !ends_with(&v, seq) {
            return Err(format!("{len}: the polled view does not end with the foreign append {seq}").into());
        }
    }
    polled.sort_unstable();
    // Held: the view once notification told of the append. Whether this build's held views
    // follow notifications at all: the first view after a notified append says.
    let mut notified = Vec::new();
    let listening = (0..2000).any(|_| {
        std::thread::sleep(Duration::from_millis(1));
        undertext::fleet::notified(&reader, id).is_some()
    });
    if listening {
        for _ in 0..21 {
            let before = undertext::fleet::notified(&reader, id).map_or(0, |n| n.1);
            let seq = w.append(NewMessage::assistant(filler(next)))?;
            next += 1;
            let told = (0..5000).any(|_| {
                std::thread::sleep(Duration::from_micros(200));
                undertext::fleet::notified(&reader, id).is_some_and(|n| n.1 > before)
            });
            if !told {
                return Err(format!("{len}: no notification of the append {seq} within a second").into());
            }
            let t = Instant::now();
            let v = held.view(&budget)?;
            let took = t.elapsed();
            if !ends_with(&v, seq) {
                // A build whose held views do not follow notifications.
                notified.clear();
                break;
            }
            notified.push(took);
        }
        notified.sort_unstable();
    }
    drop((held, w));
    writer.delete_chat(&owner, id)?;
    Ok(Foreign {
        len,
        build,
        polled: polled[polled.len() / 2],
        notified: (!notified.is_empty()).then(|| notified[notified.len() / 2]),
    })
}

fn main() -> Result<()> {
    let Some(url) = std::env::args().nth(1).or_else(|| std::env::var("UNDERTEXT_FLEET_URL").ok()) else {
        println!("fleet_view: skipped (give a postgres:// URL or set UNDERTEXT_FLEET_URL)");
        return Ok(());
    };
    let sizes: Vec<usize> =
        std::env::args().skip(2).map(|a| a.parse()).collect::<std::result::Result<_, _>>()?;
    let sizes = if sizes.is_empty() { vec![500, 5_000, 20_000] } else { sizes };
    let dir = tempfile::tempdir()?;
    let embedded = dir.path().join("store");
    let rows = [measure("embedded", &embedded.to_string_lossy())?, measure("fleet", &url)?];
    println!("| store | first view ms | held `Chat` view µs | `Store::chat` + view µs |");
    println!("|---|--:|--:|--:|");
    for r in &rows {
        println!(
            "| {} | {:.2} | {:.3} | {:.1} |",
            r.name,
            r.first.as_secs_f64() * 1e3,
            r.held.as_secs_f64() * 1e6,
            r.resolved.as_secs_f64() * 1e6
        );
    }
    let ratio = rows[1].held.as_secs_f64() / rows[0].held.as_secs_f64();
    println!("held view, fleet / embedded: {ratio:.2}x");
    println!();
    println!(
        "| messages | built in s | `Store::chat` + view after a foreign append ms | held view after its notification ms |"
    );
    println!("|--:|--:|--:|--:|");
    for len in sizes {
        let f = foreign(&url, len)?;
        println!(
            "| {} | {:.1} | {:.3} | {} |",
            f.len,
            f.build.as_secs_f64(),
            f.polled.as_secs_f64() * 1e3,
            f.notified
                .map_or("stale (not followed)".to_string(), |d| format!("{:.3}", d.as_secs_f64() * 1e3))
        );
    }
    Ok(())
}
