//! `plot CHAT -o FILE.svg`: the chart of [`super::chart`] (the same code path as `serve`'s
//! chart page) written to a file.

use serde_json::json;

use super::args::PlotArgs;
use super::chart::{self, Prices};
use super::out::{self, num};
use super::{Cli, CliError, CliResult};

/// `plot`.
pub fn run(cli: &Cli, a: &PlotArgs) -> CliResult {
    let prices = Prices::parse(&a.price)?;
    let store = out::open_existing(cli)?;
    let chat = out::chat(cli, &store, &a.chat)?;
    let analysis = chart::analyze(&store, &cli.owner, chat.id(), a.window, None, prices);
    store.close()?;
    let analysis = analysis?;
    if analysis.steps.is_empty() {
        return Err(CliError(format!("{}: no model steps (assistant messages) to plot", chat.id())));
    }
    let svg = chart::svg(&analysis)?;
    std::fs::write(&a.output, svg).map_err(|e| CliError(format!("{}: {e}", a.output.display())))?;
    let b = &analysis.budget;
    let total = analysis.steps.last().map_or(0.0, |s| s.cost);
    if a.json {
        return out::print_json(&json!({
            "chat": chat.id().to_string(), "output": a.output.display().to_string(), "window": a.window,
            "target_limit": b.target_limit(), "soft_limit": b.soft_limit(), "hard_limit": b.hard_limit(),
            "cost_source": analysis.source.describe(), "cost_usd": total,
            "steps": analysis.steps.iter().map(|p| json!({
                "seq": p.seq, "sent": p.sent, "everything": p.everything, "swapped": p.swapped,
                "input": p.input, "cached": p.cached, "output": p.output, "cumulative_cost_usd": p.cost,
            })).collect::<Vec<_>>(),
        }));
    }
    let sent: u64 = analysis.steps.iter().map(|s| s.sent).sum();
    let everything: u64 = analysis.steps.iter().map(|s| s.everything).sum();
    println!(
        "{}: {} steps plotted to {} (sent {} tokens in all, resending everything {}; ${total:.2}, {})",
        chat.id(),
        analysis.steps.len(),
        a.output.display(),
        num(sent),
        num(everything),
        analysis.source.describe()
    );
    Ok(())
}
