//! `plot CHAT -o FILE.svg`: the chat replayed through the guard on a scratch store; per model
//! step, the context sent against resending everything, the soft and hard lines of the
//! window, and the cumulative input tokens. A hand-written SVG: one `<circle class="step">`
//! per step.

use std::fmt::Write as _;

use serde_json::json;
use undertext::budget::Budget;
use undertext::import::replay::{ReplayOptions, replay_session, session_of_chat, start_worker};
use undertext::{Durability, Options, Store};

use super::args::PlotArgs;
use super::out::{self, num};
use super::{Cli, CliError, CliResult};

const W: f64 = 960.0;
const H: f64 = 480.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 90.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// `plot`.
pub fn run(cli: &Cli, a: &PlotArgs) -> CliResult {
    let store = out::open_existing(cli)?;
    let chat = out::chat(cli, &store, &a.chat)?;
    let session = session_of_chat(&store, &cli.owner, chat.id())?;
    let title = chat.meta().title;
    store.close()?;
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("undertext-plot-{}-{nanos}", std::process::id()));
    let result = (|| -> CliResult<_> {
        let scratch = Store::open(&dir, Options { durability: Durability::None, ..Options::default() })?;
        let opts = ReplayOptions { window: a.window, ..ReplayOptions::default() };
        let worker = start_worker(&scratch, &opts)?;
        let row = replay_session(&scratch, "plot", &session, &opts)?;
        worker.stop();
        scratch.close()?;
        Ok(row)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    let row = result?;
    if row.points.is_empty() {
        return Err(CliError(format!("{}: no model steps (assistant messages) to plot", chat.id())));
    }
    let budget = Budget::new(a.window, ReplayOptions::default().reserve_output);
    let svg = render(&format!("{} — {}", chat.id(), title), &row.points, &budget);
    std::fs::write(&a.output, svg).map_err(|e| CliError(format!("{}: {e}", a.output.display())))?;
    if a.json {
        return out::print_json(&json!({
            "chat": chat.id().to_string(), "output": a.output.display().to_string(), "window": a.window,
            "soft_limit": budget.soft_limit(), "hard_limit": budget.hard_limit(),
            "steps": row.points.iter().map(|p| json!({"seq": p.seq, "sent": p.sent, "everything": p.everything, "swapped": p.swapped})).collect::<Vec<_>>(),
        }));
    }
    println!(
        "{}: {} steps plotted to {} (sent {} tokens in all, resending everything {})",
        chat.id(),
        row.points.len(),
        a.output.display(),
        num(row.guarded_tokens),
        num(row.naive_tokens)
    );
    Ok(())
}

/// The SVG text.
fn render(title: &str, points: &[undertext::import::replay::StepPoint], b: &Budget) -> String {
    let n = points.len();
    let ymax = points.iter().map(|p| p.everything.max(p.sent)).max().unwrap_or(0).max(b.window) as f64 * 1.05;
    let cum: Vec<u64> = points
        .iter()
        .scan(0u64, |acc, p| {
            *acc += p.sent;
            Some(*acc)
        })
        .collect();
    let cmax = (*cum.last().unwrap_or(&1)).max(1) as f64 * 1.05;
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let x = |i: usize| LEFT + if n <= 1 { pw / 2.0 } else { pw * i as f64 / (n - 1) as f64 };
    let y = |t: f64| TOP + ph - ph * t / ymax;
    let yc = |t: f64| TOP + ph - ph * t / cmax;
    let mut s = String::new();
    let _ = writeln!(s, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<title>{}</title>"#, esc(title));
    let _ = writeln!(s, r#"<rect x="0" y="0" width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{LEFT}" y="22" font-size="14">{}</text>"#, esc(title));
    // Axes.
    let _ = writeln!(
        s,
        r#"<line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#,
        TOP + ph,
        LEFT + pw,
        TOP + ph
    );
    let _ = writeln!(s, r#"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="black"/>"#, TOP + ph);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">model step (1..{n})</text>"#,
        LEFT + pw / 2.0,
        H - 12.0
    );
    let _ = writeln!(
        s,
        r#"<text x="14" y="{}" transform="rotate(-90 14 {})" text-anchor="middle">tokens in the context</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" transform="rotate(90 {} {})" text-anchor="middle" fill="gray">cumulative input tokens: {}</text>"#,
        W - 14.0,
        TOP + ph / 2.0,
        W - 14.0,
        TOP + ph / 2.0,
        num(*cum.last().unwrap_or(&0))
    );
    // Lines of the window.
    for (name, v, color) in [
        ("window", b.window, "black"),
        ("hard", b.hard_limit(), "red"),
        ("soft", b.soft_limit(), "orange"),
        ("target", b.target_limit(), "green"),
    ] {
        let yy = y(v as f64);
        let _ = writeln!(
            s,
            r#"<line class="limit-{name}" x1="{LEFT}" y1="{yy:.1}" x2="{}" y2="{yy:.1}" stroke="{color}" stroke-dasharray="6 4"/>"#,
            LEFT + pw
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{:.1}" fill="{color}">{name} {}</text>"#,
            LEFT + pw + 4.0,
            yy + 4.0,
            num(v)
        );
    }
    let poly = |vals: &mut dyn Iterator<Item = (f64, f64)>| -> String {
        vals.map(|(a, b)| format!("{a:.1},{b:.1}")).collect::<Vec<_>>().join(" ")
    };
    let everything = poly(&mut points.iter().enumerate().map(|(i, p)| (x(i), y(p.everything as f64))));
    let sent = poly(&mut points.iter().enumerate().map(|(i, p)| (x(i), y(p.sent as f64))));
    let cumul = poly(&mut cum.iter().enumerate().map(|(i, c)| (x(i), yc(*c as f64))));
    let _ = writeln!(
        s,
        r#"<polyline class="everything" points="{everything}" fill="none" stroke="gray" stroke-dasharray="2 3"/>"#
    );
    let _ = writeln!(s, r#"<polyline class="cumulative" points="{cumul}" fill="none" stroke="lightgray"/>"#);
    let _ = writeln!(
        s,
        r#"<polyline class="sent" points="{sent}" fill="none" stroke="steelblue" stroke-width="1.5"/>"#
    );
    for (i, p) in points.iter().enumerate() {
        let fill = if p.swapped { "red" } else { "steelblue" };
        let _ = writeln!(
            s,
            r#"<circle class="step" cx="{:.1}" cy="{:.1}" r="2.5" fill="{fill}"><title>step {} (seq {}): {} tokens sent, {} resending everything{}</title></circle>"#,
            x(i),
            y(p.sent as f64),
            i + 1,
            p.seq,
            p.sent,
            p.everything,
            if p.swapped { "; checkpoint swapped in" } else { "" }
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" fill="steelblue">● context sent (guard + checkpoints; red: swap)</text>"#,
        LEFT + 10.0,
        TOP + 14.0
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" fill="gray">┄ resending everything   — cumulative input (right scale)</text>"#,
        LEFT + 10.0,
        TOP + 30.0
    );
    s.push_str("</svg>\n");
    s
}
