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

fn main() -> Result<()> {
    let Some(url) = std::env::args().nth(1).or_else(|| std::env::var("UNDERTEXT_FLEET_URL").ok()) else {
        println!("fleet_view: skipped (give a postgres:// URL or set UNDERTEXT_FLEET_URL)");
        return Ok(());
    };
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
    Ok(())
}
