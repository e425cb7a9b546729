//! The chart of `plot` and `serve` (one code path): the series of a chat replayed through the
//! guard and the worker ([`Charting`], [`analyze`]: computed without a store by
//! `crate::replay::series`, equal to the replay on a scratch store that [`Replay`] runs
//! for the model view and checkpoints pages), then drawn with `plotters`' SVG backend ([`svg`]): context
//! tokens per model step against resending everything, the window's target, soft and hard
//! lines, checkpoint swaps marked, and on the right axis the cumulative input cost of
//! Undertext's views under the prompt-cache model (`crate::replay::cost`: the longest
//! common prefix of whole messages with the previous view is billed at the cached price),
//! beside the same model's cost of resending everything and of the naive policy, and — when
//! the transcript reported one — the harness's own bill for its original run, labelled as
//! such (it is not what Undertext's views cost). Text is drawn
//! as SVG `<text>` elements (no font files are read), the legend sits in its own column
//! right of the plot, so no label is drawn over the data or over another label.

use std::path::Path;

use crate::replay::cost::{Price, Tally};
use crate::replay::series::Series;
use crate::replay::{
    BaselineCall, Baselines, ReplayOptions, StepPoint, ViewPricer, full_tokens, start_worker,
};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;
use undertext::Budget;
use undertext::Checkpoint;
use undertext::Worker;
use undertext::{
    Chat, ChatId, ChatMeta, Durability, Message, NewMessage, Options, Part, Role, Snapshot, Store,
    ToolContent, Unit,
};

use super::out::num;
use super::{CliError, CliResult};

/// Prices in US dollars per million tokens
/// (`--price input=3,cached=0.3,cache_write=3.75,output=15`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prices {
    /// Input tokens with no cache.
    pub input: f64,
    /// Input tokens read from the provider's prompt cache.
    pub cached: f64,
    /// Uncached input tokens, written to the cache (Anthropic: 1.25× input); default: input.
    pub cache_write: f64,
    /// Output tokens (the harness's own bill only: the cost lines of the cache model are
    /// input cost, the same output for every policy).
    pub output: f64,
}

impl Default for Prices {
    fn default() -> Self {
        Prices { input: 3.0, cached: 0.3, cache_write: 3.0, output: 15.0 }
    }
}

impl Prices {
    /// Parses `input=3,cached=0.3,cache_write=3.75,output=15` (any subset; the rest keep
    /// their defaults, cache_write follows input unless given).
    pub fn parse(s: &str) -> CliResult<Prices> {
        let d = Prices::default();
        let base = Price { input: d.input, cached: d.cached, cache_write: d.cache_write };
        let (p, extra) = Price::parse_with(s, base, &["output"]).map_err(|e| {
            CliError(
                e.to_string()
                    .replace("invalid argument: ", "")
                    .replace("cache_write=N (", "cache_write=N,output=N ("),
            )
        })?;
        let output = extra.iter().rev().find(|(k, _)| *k == "output").map_or(d.output, |(_, v)| *v);
        Ok(Prices { input: p.input, cached: p.cached, cache_write: p.cache_write, output })
    }

    /// The cache model's prices (input side).
    pub fn price(&self) -> Price {
        Price { input: self.input, cached: self.cached, cache_write: self.cache_write }
    }

    /// The cost of a step's tokens as a harness reported them (uncached input, cached input,
    /// output).
    pub fn cost(&self, input: u64, cached: u64, output: u64) -> f64 {
        (input as f64 * self.cache_write + cached as f64 * self.cached + output as f64 * self.output) / 1e6
    }
}

/// One model step of the chart.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Step {
    /// The seq of the assistant message.
    pub seq: u64,
    /// Estimated tokens of the context the guard sent.
    pub sent: u64,
    /// Estimated tokens of every earlier message in full.
    pub everything: u64,
    /// A checkpoint was swapped in at this step.
    pub swapped: bool,
    /// Tokens of the view billed as input (not an exact prefix of the previous view).
    pub input: u64,
    /// Tokens of the view read from the provider's cache.
    pub cached: u64,
    /// The view broke the cache (its prefix is shorter than the previous view).
    pub broke: bool,
    /// Estimated output tokens (the assistant message).
    pub output: u64,
    /// Cumulative input cost of Undertext's views with prompt caching, US dollars.
    pub cost: f64,
    /// Cumulative input cost of resending everything with prompt caching, while it fits the
    /// usable input (`None` from the first step where it does not).
    pub resend_cost: Option<f64>,
    /// Cumulative input cost of the naive policy with prompt caching.
    pub naive_cost: f64,
    /// Cumulative cost the harness reported for its own original run (input, cache reads,
    /// output), when the transcript reports usage per model step.
    pub harness_cost: Option<f64>,
}

/// Whether the harness's own reported bill is drawn beside the cache model's costs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CostSource {
    /// The harness's reported usage (Claude Code's `message.usage`), one per model step, is
    /// drawn as its own line.
    Reported,
    /// Not drawn, and why.
    Estimated(String),
}

impl CostSource {
    /// One line for the chart and the page.
    pub fn describe(&self) -> String {
        let model = "cost: Undertext's views, input priced with prompt caching (longest common prefix of whole \
                     messages with the previous view, estimated tokens)";
        match self {
            CostSource::Reported => {
                format!("{model}; the harness's own reported bill for its original run drawn apart")
            }
            CostSource::Estimated(why) => format!("{model}; no harness bill drawn ({why})"),
        }
    }
}

/// A chat replayed for the chart and the checkpoints page.
#[derive(Debug, Clone)]
pub struct Analysis {
    /// `chat-… — title`.
    pub title: String,
    /// The budget whose lines are drawn.
    pub budget: Budget,
    /// The steps.
    pub steps: Vec<Step>,
    /// Whether the harness's own bill is drawn.
    pub source: CostSource,
    /// Undertext's views under the prompt-cache model, every step.
    pub views: Tally,
    /// The views on the steps where resending everything fits the usable input.
    pub views_fit: Tally,
    /// Resending everything, where it fits the usable input.
    pub resend: Tally,
    /// Steps where resending everything would not fit the usable input.
    pub resend_over: u64,
    /// The naive policy (`crate::replay::cost::Naive`).
    pub naive: Tally,
    /// The prices used.
    pub prices: Prices,
    /// The last checkpoint the replay's worker prepared (the summary tree), if any; `None`
    /// too for the chart's series alone ([`Charting`]).
    pub checkpoint: Option<Checkpoint>,
    /// Checkpoints swapped in during the replay.
    pub swaps: u64,
    /// The model view of the replayed chat after its last message (what the next model
    /// call would be sent under the guard, a published checkpoint's summary included), from
    /// a [`Replay`]; `None` for the chart's series alone ([`Charting`]).
    pub view: Option<undertext::View>,
}

/// The chart of chat `id` of `owner` (read from `store`, which is not written): its series
/// ([`Charting`] once, from the start), priced.
pub fn analyze(
    store: &Store,
    owner: &str,
    id: ChatId,
    window: u64,
    reserve: Option<u64>,
    prices: Prices,
) -> CliResult<Analysis> {
    let defaults = ReplayOptions::default();
    let mut charting = Charting::new(window, reserve.unwrap_or(defaults.reserve_output));
    let chat = store.chat(owner, id)?;
    let snap = chat.snapshot();
    charting.advance(store, owner, &snap)?;
    Ok(charting.analysis(id, snap.meta(), prices))
}

/// The chart's series of a chat: the points of a [`Replay`] (the view's estimate before each
/// model step, the swaps, resending everything), computed without a store by
/// [`Series`], which keeps what it derives from each message: the first chart of a
/// 1,000-step chat costs milliseconds where the replay on a scratch store costs seconds.
///
/// Kept between requests by `serve` like a [`Replay`]: [`Charting::advance`] takes only the
/// messages appended since.
#[derive(Debug)]
pub struct Charting {
    series: Series,
    /// The source's revision and the seqs taken (hidden messages are not pushed, so the
    /// series may hold fewer).
    revision: Option<u64>,
    consumed: u64,
    outputs: Vec<u64>,
    baselines: Baselines,
    base_calls: Vec<BaselineCall>,
}

impl Charting {
    /// An empty series at `window` and `reserve`.
    pub fn new(window: u64, reserve: u64) -> Charting {
        let opts = ReplayOptions { window, reserve_output: reserve, ..ReplayOptions::default() };
        let baselines = Baselines::new(&opts.budget());
        Charting {
            series: Series::new(&opts),
            revision: None,
            consumed: 0,
            outputs: Vec::new(),
            baselines,
            base_calls: Vec::new(),
        }
    }

    /// True when `snap` only extends what was taken (same revision, as many messages or
    /// more): [`Charting::advance`] can take the rest.
    pub fn extends_to(&self, snap: &Snapshot) -> bool {
        self.revision.is_none_or(|r| r == snap.revision()) && snap.len() >= self.consumed
    }

    /// Takes the messages of `snap` (a snapshot of a chat of `owner` in `store`) not taken
    /// yet; an archived result's text is read from `store` once per distinct archive. Fails
    /// when `snap` is not an extension (see [`Charting::extends_to`]).
    pub fn advance(&mut self, store: &Store, owner: &str, snap: &Snapshot) -> CliResult {
        if !self.extends_to(snap) {
            return Err(CliError(format!(
                "the chart's series covers {} messages at revision {:?}; the chat is at {} messages, revision {}",
                self.consumed,
                self.revision,
                snap.len(),
                snap.revision()
            )));
        }
        self.revision = Some(snap.revision());
        let mut read = |a: &undertext::ArchiveRef| store.read_context(owner, &a.id, 0..a.bytes, Unit::Bytes);
        for m in snap.range(self.consumed..snap.len())? {
            let assistant = m.role == Role::Assistant;
            if assistant {
                self.base_calls.push(self.baselines.call());
            }
            let (role, parts, feedback) = (m.role, m.parts, m.feedback);
            let id_parts = parts.clone();
            let tokens = self.series.push_stored(NewMessage { role, parts, feedback }, &mut read)?;
            // Named by the stored parts (an archived result by its content address).
            self.baselines.push(role, &id_parts, tokens);
            if assistant {
                self.outputs.push(tokens);
            }
        }
        self.consumed = snap.len();
        Ok(())
    }

    /// Model steps taken so far.
    pub fn steps(&self) -> usize {
        self.series.points().len()
    }

    /// The chart's figures: the series priced by `prices` (see [`Replay::analysis`]).
    pub fn analysis(&self, id: ChatId, meta: &ChatMeta, prices: Prices) -> Analysis {
        let mut a = priced(self.series.points(), &self.outputs, &self.base_calls, meta, prices);
        a.title = format!("{id} — {}", meta.title);
        a.budget = self.series.options().budget();
        a
    }
}

/// A chat replayed through the guard and the checkpoint worker, one model call at a time,
/// on a scratch store in the temporary directory (removed on drop): the chart's series.
///
/// Kept between requests by `serve`: when the chat has grown by appends since (same
/// revision, more messages), [`Replay::advance`] replays only the new messages on top, so a
/// chart beside a running agent costs its new steps, not the whole chat again. An edit or a
/// truncation (a new revision) needs a new replay.
///
/// Per model step (assistant message) the view is built just before the message is
/// appended, under the budget: its estimate is what the call would send. The worker's job
/// that view asked for is waited for before the message is appended (as if the model call
/// took as long as the job), so the series is the same at every replay of the same chat. Tool results
/// archived in the chat are replayed at their full text (read back through
/// `read_context`), as the harness produced them.
pub struct Replay {
    opts: ReplayOptions,
    dir: std::path::PathBuf,
    worker: Option<Worker>,
    scratch: Store,
    chat: Chat,
    /// The source's revision and how many of its messages were replayed.
    revision: Option<u64>,
    consumed: u64,
    everything: u64,
    points: Vec<StepPoint>,
    outputs: Vec<u64>,
    pricer: ViewPricer,
    baselines: Baselines,
    base_calls: Vec<BaselineCall>,
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay")
            .field("dir", &self.dir)
            .field("revision", &self.revision)
            .field("consumed", &self.consumed)
            .field("steps", &self.points.len())
            .finish_non_exhaustive()
    }
}

impl Replay {
    /// An empty replay at `window` and `reserve`: the scratch store and its worker started.
    pub fn new(window: u64, reserve: u64) -> CliResult<Replay> {
        let opts = ReplayOptions { window, reserve_output: reserve, ..ReplayOptions::default() };
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let n = REPLAYS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("undertext-chart-{}-{nanos}-{n}", std::process::id()));
        let made = (|| -> CliResult<(Store, Worker, Chat)> {
            let scratch =
                Store::open(&dir, Options::default().durability(Durability::None).preallocate(false))?;
            let worker = start_worker(&scratch, &opts)?;
            let chat =
                scratch.chat(SCRATCH_OWNER, scratch.create_chat(SCRATCH_OWNER, ChatMeta::default())?)?;
            Ok((scratch, worker, chat))
        })();
        match made {
            Ok((scratch, worker, chat)) => Ok(Replay {
                dir,
                worker: Some(worker),
                scratch,
                chat,
                revision: None,
                consumed: 0,
                everything: 0,
                points: Vec::new(),
                outputs: Vec::new(),
                pricer: ViewPricer::new(),
                baselines: Baselines::new(&opts.budget()),
                base_calls: Vec::new(),
                opts,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// True when `snap` only extends what was replayed (same revision, as many messages or
    /// more): [`Replay::advance`] can replay the rest on top.
    pub fn extends_to(&self, snap: &Snapshot) -> bool {
        self.revision.is_none_or(|r| r == snap.revision()) && snap.len() >= self.consumed
    }

    /// Replays the messages of `snap` (a snapshot of a chat of `owner` in `store`) not
    /// replayed yet. Fails when `snap` is not an extension (see [`Replay::extends_to`]).
    pub fn advance(&mut self, store: &Store, owner: &str, snap: &Snapshot) -> CliResult {
        if !self.extends_to(snap) {
            return Err(CliError(format!(
                "the chart's replay covers {} messages at revision {:?}; the chat is at {} messages, revision {}",
                self.consumed,
                self.revision,
                snap.len(),
                snap.revision()
            )));
        }
        self.revision = Some(snap.revision());
        let budget = self.opts.budget();
        for m in snap.range(self.consumed..snap.len())? {
            let m = full_message(store, owner, m, &self.scratch)?;
            let tokens = full_tokens(&self.scratch, &m);
            if m.role == Role::Assistant {
                let v = self.chat.view(&budget)?;
                // The worker gets the model call's time to finish the job this view asked
                // for, before the answer is appended: it builds from the chat as the view saw
                // it, so the series does not depend on how fast this machine is.
                self.scratch.wait_worker_idle(WORKER_WAIT);
                let call = self.pricer.call(&v);
                self.points.push(StepPoint {
                    seq: self.chat.len(),
                    sent: v.estimate(),
                    everything: self.everything,
                    swapped: v.swap().is_some(),
                    cached: call.cached,
                    broke: call.broke,
                });
                self.outputs.push(tokens);
                self.base_calls.push(self.baselines.call());
            }
            self.everything += tokens;
            self.baselines.push(m.role, &m.parts, tokens);
            self.chat.append(m)?;
        }
        // Hidden messages are not in the range: the seqs taken are the chat's length.
        self.consumed = snap.len();
        Ok(())
    }

    /// Model steps replayed so far.
    pub fn steps(&self) -> usize {
        self.points.len()
    }

    /// The chart's figures of what was replayed: the series priced by `prices` (from the
    /// usage the transcript reported when it can be read, else from estimates), the last
    /// checkpoint the worker prepared, and the model view after the last message.
    pub fn analysis(&self, id: ChatId, meta: &ChatMeta, prices: Prices) -> CliResult<Analysis> {
        let checkpoint = self.chat.prepared().map(|c| (*c).clone());
        let view = self.chat.view(&self.opts.budget())?;
        let mut a = priced(&self.points, &self.outputs, &self.base_calls, meta, prices);
        a.title = format!("{id} — {}", meta.title);
        a.budget = self.opts.budget();
        a.checkpoint = checkpoint;
        a.view = Some(view);
        Ok(a)
    }
}

/// The steps of `points` priced by `prices` under the prompt-cache model (each point's cached
/// tokens against the rest), with the baselines' calls (`base`, one per point) and, when the
/// transcript reported usage per model step (see `meta`), the harness's own bill; `outputs`:
/// the tokens of each step's assistant message. The title and budget are left for the caller.
fn priced(
    points: &[StepPoint],
    outputs: &[u64],
    base: &[BaselineCall],
    meta: &ChatMeta,
    prices: Prices,
) -> Analysis {
    let reported = reported_usage(&meta.extra, points.len());
    let price = prices.price();
    let mut steps = Vec::with_capacity(points.len());
    let (mut views, mut views_fit, mut resend, mut naive) =
        (Tally::default(), Tally::default(), Tally::default(), Tally::default());
    let mut resend_over = 0;
    let mut harness = 0.0;
    for (i, p) in points.iter().enumerate() {
        let call = crate::replay::cost::Call {
            prefix_messages: 0,
            cached: p.cached.min(p.sent),
            uncached: p.sent - p.cached.min(p.sent),
            broke: p.broke,
        };
        views.add(&call);
        let b = base.get(i);
        match b.and_then(|b| b.resend) {
            Some(r) => {
                views_fit.add(&call);
                resend.add(&r);
            }
            None => resend_over += 1,
        }
        if let Some(b) = b {
            naive.add(&b.naive);
        }
        let harness_cost = reported.as_ref().ok().map(|u| {
            let (input, cached, output) = u[i];
            harness += prices.cost(input, cached, output);
            harness
        });
        steps.push(Step {
            seq: p.seq,
            sent: p.sent,
            everything: p.everything,
            swapped: p.swapped,
            input: call.uncached,
            cached: call.cached,
            broke: p.broke,
            output: outputs.get(i).copied().unwrap_or(0),
            cost: views.cost(&price),
            resend_cost: (resend_over == 0).then(|| resend.cost(&price)),
            naive_cost: naive.cost(&price),
            harness_cost,
        });
    }
    let source = match reported {
        Ok(_) => CostSource::Reported,
        Err(why) => CostSource::Estimated(why),
    };
    Analysis {
        title: String::new(),
        budget: Budget::new(1, 0),
        swaps: steps.iter().filter(|p| p.swapped).count() as u64,
        steps,
        source,
        prices,
        views,
        views_fit,
        resend,
        resend_over,
        naive,
        checkpoint: None,
        view: None,
    }
}

impl Drop for Replay {
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            w.stop();
        }
        let _ = self.scratch.clone().close();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The longest a replay waits for its worker's job at a model step (a job takes
/// milliseconds; the bound only keeps a stuck worker from stalling the chart).
const WORKER_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Replays made by this process (names their scratch directories apart).
static REPLAYS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A stored message as the harness produced it: archived tool results read back whole, the
/// blobs of its attachments copied into `scratch` (for its owner [`SCRATCH_OWNER`]: appending
/// an attachment needs its blob), and harness feedback kept as feedback (it starts no turn).
fn full_message(store: &Store, owner: &str, m: Message, scratch: &Store) -> CliResult<NewMessage> {
    let mut parts = Vec::with_capacity(m.parts.len());
    for p in m.parts {
        parts.push(match p {
            Part::ToolResult { call_id, content: ToolContent::Archived { archive, .. }, is_error } => {
                let text = store.read_context(owner, &archive.id, 0..archive.bytes, Unit::Bytes)?;
                Part::ToolResult { call_id, content: ToolContent::Text(text), is_error }
            }
            Part::Attachment { mime, blob } => {
                if !scratch.contains_blob(SCRATCH_OWNER, &blob)? {
                    let bytes = store.get_blob(owner, &blob)?;
                    scratch.put_blob(SCRATCH_OWNER, &bytes)?;
                }
                Part::Attachment { mime, blob }
            }
            other => other,
        });
    }
    Ok(NewMessage { role: m.role, parts, feedback: m.feedback })
}

/// The owner of a replay's chat in its scratch store.
const SCRATCH_OWNER: &str = "chart";

/// The usage a Claude Code transcript reported, one (uncached input, cached input, output)
/// per model response (`message.id`, in order), read from the chat's source file when it is
/// still there and holds exactly one per model step; otherwise why not.
fn reported_usage(
    extra: &std::collections::BTreeMap<String, String>,
    steps: usize,
) -> Result<Vec<(u64, u64, u64)>, String> {
    let format = extra.get(undertext::import::FORMAT).map_or("", String::as_str);
    if format != "claude-code" {
        return Err("the transcript format reports no usage the import keeps".into());
    }
    let Some(source) = extra.get(undertext::import::SOURCE) else {
        return Err("no source transcript recorded".into());
    };
    let side_chain = extra.contains_key(undertext::import::PARENT_CHAT);
    let text = std::fs::read_to_string(Path::new(source))
        .map_err(|e| format!("the source transcript {source} cannot be read: {e}"))?;
    let mut order: Vec<String> = Vec::new();
    let mut usage: std::collections::HashMap<String, (u64, u64, u64)> = std::collections::HashMap::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
        if v.get("type").and_then(Value::as_str) != Some("assistant")
            || v.get("isSidechain").and_then(Value::as_bool).unwrap_or(false) != side_chain
        {
            continue;
        }
        let (Some(id), Some(u)) =
            (v.pointer("/message/id").and_then(Value::as_str), v.pointer("/message/usage"))
        else {
            continue;
        };
        let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
        let entry = (
            n("input_tokens") + n("cache_creation_input_tokens"),
            n("cache_read_input_tokens"),
            n("output_tokens"),
        );
        if usage.insert(id.to_string(), entry).is_none() {
            order.push(id.to_string());
        }
    }
    if order.len() != steps || steps == 0 {
        return Err(format!(
            "the source transcript reports usage for {} responses, the chat has {steps} model steps",
            order.len()
        ));
    }
    Ok(order.iter().filter_map(|id| usage.get(id).copied()).collect())
}

const WIDTH: u32 = 1100;
const HEIGHT: u32 = 560;
const LEGEND: u32 = 270;

fn draw_err<E: std::fmt::Debug>(e: E) -> CliError {
    CliError(format!("drawing the chart: {e:?}"))
}

/// The chart as an SVG document.
pub fn svg(a: &Analysis) -> CliResult<String> {
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let (plot, legend) = root.split_horizontally(WIDTH - LEGEND);
        draw_plot(&plot, a)?;
        draw_legend(&legend, a)?;
        root.present().map_err(draw_err)?;
    }
    Ok(buf)
}

const SENT: RGBColor = RGBColor(31, 119, 180);
const EVERYTHING: RGBColor = RGBColor(150, 150, 150);
const COST: RGBColor = RGBColor(148, 103, 189);
const RESEND_COST: RGBColor = RGBColor(120, 120, 120);
const NAIVE_COST: RGBColor = RGBColor(23, 190, 207);
const HARNESS_COST: RGBColor = RGBColor(140, 86, 75);
const TARGET: RGBColor = RGBColor(44, 160, 44);
const SOFT: RGBColor = RGBColor(230, 140, 0);
const HARD: RGBColor = RGBColor(214, 39, 40);

fn lines(b: &Budget) -> [(&'static str, u64, RGBColor); 3] {
    [
        ("hard line", b.hard_limit(), HARD),
        ("soft line", b.soft_limit(), SOFT),
        ("target", b.target_limit(), TARGET),
    ]
}

fn draw_plot(area: &DrawingArea<SVGBackend<'_>, Shift>, a: &Analysis) -> CliResult {
    let n = a.steps.len().max(1) as u64;
    let ymax = a.steps.iter().map(|s| s.everything.max(s.sent)).max().unwrap_or(0).max(a.budget.window).max(1)
        as f64
        * 1.05;
    let cost_max = a
        .steps
        .iter()
        .map(|s| {
            s.cost.max(s.naive_cost).max(s.resend_cost.unwrap_or(0.0)).max(s.harness_cost.unwrap_or(0.0))
        })
        .fold(0.0, f64::max)
        .max(0.01)
        * 1.05;
    let title = if a.title.chars().count() > 90 {
        format!("{}…", a.title.chars().take(89).collect::<String>())
    } else {
        a.title.clone()
    };
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(86)
        .right_y_label_area_size(86)
        .build_cartesian_2d(0.5f64..(n as f64 + 0.5), 0f64..ymax)
        .map_err(draw_err)?
        .set_secondary_coord(0.5f64..(n as f64 + 0.5), 0f64..cost_max);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.08))
        .x_desc("model step")
        .y_desc("tokens in the context (estimated)")
        .x_labels(10)
        .y_labels(8)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| num(*v as u64))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(draw_err)?;
    chart
        .configure_secondary_axes()
        .y_desc("cumulative input cost, cache model (USD)")
        .y_labels(8)
        .y_label_formatter(&|v| format!("${v:.2}"))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(draw_err)?;
    let x = |i: usize| (i + 1) as f64;
    for (_, v, color) in lines(&a.budget) {
        chart
            .draw_series(DashedLineSeries::new(
                [(0.5, v as f64), (n as f64 + 0.5, v as f64)],
                8,
                5,
                color.stroke_width(1),
            ))
            .map_err(draw_err)?;
    }
    chart
        .draw_series(DashedLineSeries::new(
            a.steps.iter().enumerate().map(|(i, s)| (x(i), s.everything as f64)),
            3,
            3,
            EVERYTHING.stroke_width(1),
        ))
        .map_err(draw_err)?;
    chart
        .draw_secondary_series(DashedLineSeries::new(
            a.steps.iter().enumerate().filter_map(|(i, s)| Some((x(i), s.resend_cost?))),
            6,
            4,
            RESEND_COST.stroke_width(1),
        ))
        .map_err(draw_err)?;
    chart
        .draw_secondary_series(DashedLineSeries::new(
            a.steps.iter().enumerate().map(|(i, s)| (x(i), s.naive_cost)),
            6,
            4,
            NAIVE_COST.stroke_width(1),
        ))
        .map_err(draw_err)?;
    if a.steps.iter().any(|s| s.harness_cost.is_some()) {
        chart
            .draw_secondary_series(DashedLineSeries::new(
                a.steps.iter().enumerate().filter_map(|(i, s)| Some((x(i), s.harness_cost?))),
                2,
                3,
                HARNESS_COST.stroke_width(2),
            ))
            .map_err(draw_err)?;
    }
    chart
        .draw_secondary_series(LineSeries::new(
            a.steps.iter().enumerate().map(|(i, s)| (x(i), s.cost)),
            COST.stroke_width(2),
        ))
        .map_err(draw_err)?;
    chart
        .draw_series(LineSeries::new(
            a.steps.iter().enumerate().map(|(i, s)| (x(i), s.sent as f64)),
            SENT.stroke_width(2),
        ))
        .map_err(draw_err)?;
    chart
        .draw_series(
            a.steps
                .iter()
                .enumerate()
                .filter(|(_, s)| s.swapped)
                .map(|(i, s)| TriangleMarker::new((x(i), s.sent as f64), 6, HARD.filled())),
        )
        .map_err(draw_err)?;
    Ok(())
}

fn draw_legend(area: &DrawingArea<SVGBackend<'_>, Shift>, a: &Analysis) -> CliResult {
    let text = |s: &str, size: i32, color: &RGBColor| {
        Text::new(s.to_string(), (0, 0), ("sans-serif", size).into_font().color(color))
    };
    let mut y = 50;
    let row = |area: &DrawingArea<SVGBackend<'_>, Shift>,
               y: i32,
               label: &str,
               sample: &dyn Fn(i32) -> CliResult| {
        sample(y)?;
        area.draw(&(EmptyElement::at((34, y - 6)) + text(label, 15, &BLACK))).map_err(draw_err)
    };
    let line = |color: RGBColor, width: u32, dashed: bool| {
        move |y: i32| -> CliResult {
            let style = color.stroke_width(width);
            if dashed {
                for k in 0..3 {
                    area.draw(&PathElement::new([(k * 9, y), (k * 9 + 5, y)], style)).map_err(draw_err)?;
                }
                Ok(())
            } else {
                area.draw(&PathElement::new([(0, y), (26, y)], style)).map_err(draw_err)
            }
        }
    };
    area.draw(&(EmptyElement::at((0, 28)) + text("legend", 16, &BLACK))).map_err(draw_err)?;
    row(area, y, "context sent (guard + checkpoints)", &line(SENT, 2, false))?;
    y += 22;
    row(area, y, "resending everything", &line(EVERYTHING, 1, true))?;
    y += 22;
    row(area, y, "checkpoint swapped in", &|y| {
        area.draw(&TriangleMarker::new((13, y), 6, HARD.filled())).map_err(draw_err)
    })?;
    y += 22;
    for (name, v, color) in lines(&a.budget) {
        row(area, y, &format!("{name} {}", num(v)), &line(color, 1, true))?;
        y += 22;
    }
    row(area, y, "cumulative cost: Undertext's views", &line(COST, 2, false))?;
    y += 22;
    row(area, y, "cost resending everything", &line(RESEND_COST, 1, true))?;
    y += 22;
    row(area, y, "cost of the naive policy", &line(NAIVE_COST, 1, true))?;
    y += 22;
    if a.steps.iter().any(|s| s.harness_cost.is_some()) {
        row(area, y, "the harness's own bill (its run)", &line(HARNESS_COST, 2, true))?;
        y += 22;
    }
    y += 8;
    let total = a.steps.last().map_or(0.0, |s| s.cost);
    let p = a.prices.price();
    let resend = if a.resend_over == 0 {
        format!("resend all ${:.2}, {} breaks", a.resend.cost(&p), a.resend.breaks)
    } else {
        format!("resend all ${:.2} ({} steps fit)", a.resend.cost(&p), a.resend.calls)
    };
    let notes = [
        format!("window {} tokens", num(a.budget.window)),
        format!("{} model steps, {} swaps", a.steps.len(), a.swaps),
        format!("total ${total:.2}, {} prefix breaks", a.views.breaks),
        resend,
        format!("naive ${:.2}, {} breaks", a.naive.cost(&p), a.naive.breaks),
        format!("$/Mtok in {} cached {} write {}", a.prices.input, a.prices.cached, a.prices.cache_write),
    ];
    for s in notes {
        area.draw(&(EmptyElement::at((0, y)) + text(&s, 15, &BLACK))).map_err(draw_err)?;
        y += 18;
    }
    let mut words = a.source.describe();
    // Wrapped at about 34 characters a line, the legend column's width.
    while !words.is_empty() {
        let cut = if words.chars().count() <= 34 {
            words.len()
        } else {
            let head: String = words.chars().take(34).collect();
            head.rfind(' ').filter(|&i| i > 0).unwrap_or(head.len())
        };
        let (line, rest) = words.split_at(cut);
        area.draw(&(EmptyElement::at((0, y)) + text(line.trim(), 14, &RGBColor(90, 90, 90))))
            .map_err(draw_err)?;
        y += 15;
        words = rest.trim_start().to_string();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code: a failed step fails the test")]

    use super::{Charting, Prices, Replay};
    use undertext::{ChatMeta, Durability, NewMessage, Options, Store};

    /// A chart kept between requests (as `serve` keeps it) over a chat with hidden messages:
    /// after more appends, advancing it takes each new message once and no hidden one, so it
    /// holds the same points as a chart built from scratch. Hidden messages are not in a
    /// snapshot's range, so a chart that counted the messages it pushed (not the seqs it took)
    /// would take the last ones again on the next advance.
    #[test]
    fn a_kept_chart_over_hidden_messages_takes_each_appended_message_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
        let chat = store.chat("o", store.create_chat("o", ChatMeta::default()).unwrap()).unwrap();
        // Steps of different sizes, so that a message taken twice changes the figures.
        let step = |i: usize| {
            chat.append(NewMessage::user(format!("task {i}: {}", "x".repeat(100 + 37 * i)))).unwrap();
            chat.append(NewMessage::assistant(format!("answer {i}: {}", "y".repeat(200 + 53 * i)))).unwrap();
        };
        for i in 0..8 {
            step(i);
        }
        // Steps 1 and 4 hidden (seqs 2..4 and 8..10): a new revision, 6 steps left.
        chat.hide(&[2..4, 8..10], chat.revision()).unwrap();
        let (window, reserve) = (8_000, 1_024);
        let mut kept = Charting::new(window, reserve);
        let mut kept_replay = Replay::new(window, reserve).unwrap();
        let snap = chat.snapshot();
        kept.advance(&store, "o", &snap).unwrap();
        kept_replay.advance(&store, "o", &snap).unwrap();
        assert_eq!((kept.steps(), kept_replay.steps()), (6, 6));
        for i in 8..12 {
            step(i);
        }
        let snap = chat.snapshot();
        assert!(kept.extends_to(&snap) && kept_replay.extends_to(&snap), "appends keep the revision");
        kept.advance(&store, "o", &snap).unwrap();
        kept_replay.advance(&store, "o", &snap).unwrap();

        let mut fresh = Charting::new(window, reserve);
        fresh.advance(&store, "o", &snap).unwrap();
        let mut fresh_replay = Replay::new(window, reserve).unwrap();
        fresh_replay.advance(&store, "o", &snap).unwrap();
        assert_eq!(fresh.steps(), 10, "12 steps, 2 hidden");
        assert_eq!(kept.steps(), fresh.steps(), "the kept series' steps");
        assert_eq!(kept.series.points(), fresh.series.points(), "the kept series' points");
        assert_eq!(kept.outputs, fresh.outputs, "the kept series' outputs");
        assert_eq!(kept_replay.steps(), 10, "the kept replay's steps");
        assert_eq!(kept_replay.points, fresh_replay.points, "the kept replay's points");
        assert_eq!(kept_replay.outputs, fresh_replay.outputs, "the kept replay's outputs");
        assert_eq!(kept_replay.everything, fresh_replay.everything, "the kept replay's resent total");
        // The series and the replay agree (as tests/chart_series.rs shows without hidden messages).
        assert_eq!(kept.series.points(), kept_replay.points.as_slice(), "series and replay agree");
    }

    #[test]
    fn prices_take_any_subset_and_refuse_anything_else() {
        let p = Prices::parse("output=75, input=15").unwrap_or_default();
        assert_eq!((p.input, p.cached, p.cache_write, p.output), (15.0, 0.3, 15.0, 75.0));
        let p = Prices::parse("cache_write=3.75").unwrap_or_default();
        assert_eq!((p.input, p.cached, p.cache_write, p.output), (3.0, 0.3, 3.75, 15.0));
        assert_eq!(Prices::parse("").ok(), Some(Prices::default()));
        for bad in ["input", "input=x", "input=-1", "input=inf", "tokens=3", "input=3;output=4"] {
            assert!(Prices::parse(bad).is_err(), "{bad}");
        }
        assert!((Prices::default().cost(1_000_000, 1_000_000, 1_000_000) - 18.3).abs() < 1e-9);
    }
}
