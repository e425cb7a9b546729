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
    let price = analysis.prices.price();
    let tally = |t: &crate::replay::cost::Tally| {
        json!({"calls": t.calls, "tokens": t.tokens(), "cached": t.cached, "uncached": t.uncached,
               "breaks": t.breaks, "cost_usd": t.cost(&price)})
    };
    let ratio = |x: f64, y: f64| (y > 0.0).then(|| x / y);
    let cost = json!({
        "views": tally(&analysis.views), "views_where_resend_fits": tally(&analysis.views_fit),
        "resend": tally(&analysis.resend), "resend_over_window": analysis.resend_over,
        "naive": tally(&analysis.naive),
        "cost_views_over_resend": ratio(analysis.views_fit.cost(&price), analysis.resend.cost(&price)),
        "cost_views_over_naive": ratio(analysis.views.cost(&price), analysis.naive.cost(&price)),
        "breaks_views_over_naive": ratio(analysis.views.breaks as f64, analysis.naive.breaks as f64),
        "harness_reported_usd": analysis.steps.last().and_then(|s| s.harness_cost),
    });
    if a.json {
        return out::print_json(&json!({
            "chat": chat.id().to_string(), "output": a.output.display().to_string(), "window": a.window,
            "target_limit": b.target_limit(), "soft_limit": b.soft_limit(), "hard_limit": b.hard_limit(),
            "cost_source": analysis.source.describe(), "cost_usd": total, "cost": cost,
            "steps": analysis.steps.iter().map(|p| json!({
                "seq": p.seq, "sent": p.sent, "everything": p.everything, "swapped": p.swapped,
                "input": p.input, "cached": p.cached, "broke": p.broke, "output": p.output,
                "cumulative_cost_usd": p.cost, "cumulative_resend_usd": p.resend_cost,
                "cumulative_naive_usd": p.naive_cost, "cumulative_harness_reported_usd": p.harness_cost,
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
    let fits = if analysis.resend_over == 0 {
        String::new()
    } else {
        format!(
            ", on the {} steps where it fits the window, where the views cost ${:.2}",
            analysis.resend.calls,
            analysis.views_fit.cost(&price)
        )
    };
    println!(
        "input cost with prompt caching: Undertext's views ${total:.2} ({} prefix breaks); resending everything \
         ${:.2} ({} breaks{fits}); naive policy ${:.2} ({} breaks)",
        num(analysis.views.breaks),
        analysis.resend.cost(&price),
        num(analysis.resend.breaks),
        analysis.naive.cost(&price),
        num(analysis.naive.breaks),
    );
    Ok(())
}
