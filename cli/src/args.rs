//! The command line's grammar (clap).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Undertext: embedded storage for LLM agent conversation state.
#[derive(Debug, Parser)]
#[command(name = "undertext", version, about, long_about = None)]
pub struct Cli {
    /// The store directory (the embedded default store), or, in a build with the feature
    /// `fleet`, a PostgreSQL URL (`postgres://user@host/db`: docs/FLEET.md).
    #[arg(long, global = true, default_value = "./undertext-data", value_name = "DIR")]
    pub store: PathBuf,
    /// The owner (tenant) whose chats and archives the command sees.
    #[arg(long, global = true, default_value = "local", value_name = "NAME")]
    pub owner: String,
    /// Open the store read-only: no lock taken, not a byte written, beside a running writer
    /// or on a damaged store (what verifies is shown, what does not is reported). Read
    /// commands fall back to it on their own when another process holds the store.
    #[arg(long, global = true)]
    pub read_only: bool,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The main job: a long agent session on the store, shown live (budget, previews,
    /// background checkpoints, the swap at the hard line, read-back), then a summary.
    Demo(DemoArgs),
    /// Import transcripts (files or folders): one chat per session; importing again adds nothing.
    Import(ImportArgs),
    /// Replay transcripts through the budget guard and the worker on a scratch store.
    Replay(ReplayArgs),
    /// List the owner's chats.
    Chats(ChatsArgs),
    /// A chat's messages with their seq.
    Show(ShowArgs),
    /// The model view of a chat within a window.
    View(ViewArgs),
    /// Store a file's text as an archive and print its reference.
    Archive(ArchiveArgs),
    /// Print a range of an archive, exactly, and nothing else.
    Read(ReadArgs),
    /// Full-text search over the owner's history (messages, tool calls, tool results and
    /// archives): hits with the chat, seq, archive and the range that reads the match back.
    Search(SearchArgs),
    /// Store sizes and what the owner's chats hold.
    Stats(JsonArg),
    /// Context size and cost per model step of a chat, as an SVG chart.
    Plot(PlotArgs),
    /// A read-only web page of the store: chats, the model view, checkpoints, the chart.
    ///
    /// It exposes every chat of the owner (--owner), read-only: messages, tool results and
    /// archives, attachments' metadata, the model view. On loopback (the default) it answers
    /// only requests naming this machine (Host). Binding any other address (--bind 0.0.0.0)
    /// needs a token: --token (or UNDERTEXT_SERVE_TOKEN), else one is generated and printed
    /// once to stderr with the URL to open; every request must carry it (?token= once, then
    /// a cookie, or "Authorization: Bearer TOKEN"), or gets a 401.
    #[cfg(feature = "serve")]
    Serve(ServeArgs),
    /// A Model Context Protocol server on stdio over the store, read-only beside a live
    /// writer: tools list_chats, search_history, read_context, read_messages.
    #[cfg(feature = "mcp")]
    Mcp(McpArgs),
    /// Verify every checksum of the log (and optionally rebuild the index from it).
    Check(CheckArgs),
    /// Reclaim the space of deleted chats (offline: rewrites the log; on a fleet URL, online:
    /// drops deleted chats' records and deletes unreferenced blobs older than `--grace`).
    Gc(GcArgs),
    /// Delete chats of the owner (their space comes back with `gc`).
    Delete(DeleteArgs),
    /// Fleet mode's schema on the PostgreSQL URL of --store: `status`, `init`, `migrate`
    /// (docs/FLEET.md, "Operating it").
    #[cfg(feature = "fleet")]
    #[command(subcommand)]
    Fleet(FleetCommand),
}

/// `fleet …`.
#[cfg(feature = "fleet")]
#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// The database's schema version, this build's, and whether this build can use it.
    Status(JsonArg),
    /// Create Undertext's schema in a database that holds none (as the role of the URL, which
    /// then owns it); a database that holds one is left as it is.
    Init(JsonArg),
    /// Bring the schema up to this build's version (creating it when missing), in one
    /// transaction, beside running processes.
    Migrate(JsonArg),
}

/// `delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The chats, one or more.
    #[arg(required = true)]
    pub chats: Vec<String>,
}

/// `--json`.
#[derive(Debug, Args)]
pub struct JsonArg {
    /// Print JSON (shape documented in the README).
    #[arg(long)]
    pub json: bool,
}

/// `gc`.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Print JSON (shape documented in the README).
    #[arg(long)]
    pub json: bool,
    /// Fleet mode: delete an unreferenced blob only when stored longer ago than this many
    /// seconds (uploads of writes in flight are younger). Default 3600.
    #[arg(long, value_name = "SECS")]
    pub grace: Option<u64>,
}

/// `demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Model steps to run.
    #[arg(long, default_value_t = 160)]
    pub steps: u64,
    /// The model's context window, in tokens.
    #[arg(long, default_value_t = 32_000)]
    pub window: u64,
    /// Replay this transcript's first session instead of the scripted agent.
    #[arg(long, value_name = "FILE")]
    pub transcript: Option<PathBuf>,
    /// Simulated model latency per step, in milliseconds (the worker works meanwhile).
    #[arg(long, default_value_t = 60, value_name = "MS")]
    pub step_ms: u64,
    /// `loop`: one task, then every step a tool call (the long autonomous loop, the main
    /// case); `chat`: a new user task every 4 steps.
    #[arg(long, default_value = "loop", value_parser = ["loop", "chat"])]
    pub scenario: String,
    /// Print the summary as JSON (after the live output, which goes to stderr then).
    #[arg(long)]
    pub json: bool,
}

/// `import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Transcript files or folders.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// auto, claude-code, codex, openai, swe-agent, mini-swe-agent, tau-bench, openhands or
    /// openhands-sdk.
    #[arg(long, default_value = "auto")]
    pub format: String,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Transcript files or folders.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// The model's context window, in tokens.
    #[arg(long, default_value_t = 32_000)]
    pub window: u64,
    /// auto, claude-code, codex, openai, swe-agent, mini-swe-agent, tau-bench, openhands or
    /// openhands-sdk.
    #[arg(long, default_value = "auto")]
    pub format: String,
    /// A model call's time: before each call the worker gets up to this many milliseconds
    /// to finish a pending job (nothing is slept when none is pending). 0: the worst case.
    #[arg(long, default_value_t = 0)]
    pub latency_ms: u64,
    /// Time every summarizer call of the worker takes, in milliseconds (slept before the
    /// extractive summarizer): a model summarizer's latency, for the stalls at the hard line.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub summarizer_ms: u64,
    /// Summarizer calls the worker makes at once (segments of a job summarized side by
    /// side); at least 1. Default: the worker's.
    #[arg(long, default_value_t = undertext::WorkerOptions::default().threads, value_name = "N", value_parser = at_least_one)]
    pub summarizer_threads: usize,
    /// At the hard line with no checkpoint prepared, a view waits up to this many
    /// milliseconds for the worker's job (the library's default policy waits 30 s); 0: the
    /// guard alone decides, and a view still over the hard line is refused.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub hard_line_wait_ms: u64,
    /// Prices per million input tokens for the cost with prompt caching:
    /// `input=N,cached=N,cache_write=N` (any subset; cache_write defaults to input).
    #[arg(long, default_value = "input=1,cached=0.1", value_name = "PRICES")]
    pub price: String,
    /// Print the rows as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `chats`.
#[derive(Debug, Args)]
pub struct ChatsArgs {
    /// At most this many chats (newest activity first); at least 1.
    #[arg(long, default_value_t = 1000, value_parser = at_least_one)]
    pub limit: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The chats (`chat-<16 hex digits>`), one or more.
    #[arg(required = true)]
    pub chats: Vec<String>,
    /// Print every part whole (default: texts cut to 400 characters).
    #[arg(long)]
    pub full: bool,
    /// Print JSON (always whole): `{"chats": [...]}`.
    #[arg(long)]
    pub json: bool,
}

/// `view`.
#[derive(Debug, Args)]
pub struct ViewArgs {
    /// The chat.
    pub chat: String,
    /// The model's context window, in tokens.
    #[arg(long, default_value_t = 200_000)]
    pub window: u64,
    /// Tokens kept free for the answer.
    #[arg(long, default_value_t = 4_096)]
    pub reserve: u64,
    /// text, openai or anthropic.
    #[arg(long, default_value = "text")]
    pub format: String,
    /// Print JSON: the decision, the estimate and the messages.
    #[arg(long)]
    pub json: bool,
    /// Do not prepare a checkpoint when the view would be refused. By default `view` does
    /// what a harness's worker would have done: it builds a checkpoint of the settled
    /// history with the built-in extractive summarizer and publishes it (a write to the
    /// store), then builds the view again. A view still refused exits with status 1.
    #[arg(long)]
    pub no_prepare: bool,
}

/// `archive`.
#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// A UTF-8 text file.
    pub file: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `read`.
#[derive(Debug, Args)]
pub struct ReadArgs {
    /// The archive id (64 hex digits).
    pub archive: String,
    /// `A..B` (end exclusive), `A..` or `..B`.
    #[arg(long, default_value = "..", value_parser = range_syntax)]
    pub range: String,
    /// char, utf16, byte or line.
    #[arg(long, default_value = "char", value_parser = unit_name)]
    pub unit: String,
    /// Print JSON: `{"archive", "unit", "start", "end", "text"}`.
    #[arg(long)]
    pub json: bool,
}

/// `plot`.
#[derive(Debug, Args)]
pub struct SearchArgs {
    /// The words to find (every word must be in a hit; when no text holds them all, texts
    /// holding any are ranked).
    pub query: String,
    /// Search one chat only (`chat-<16 hex>`).
    #[arg(long, value_name = "ID")]
    pub chat: Option<String>,
    /// At most this many hits.
    #[arg(long, default_value_t = 10, value_parser = at_least_one)]
    pub limit: usize,
    /// Also search hidden messages.
    #[arg(long)]
    pub hidden: bool,
    /// Print `{"hits":[{"chat","seq","archive","unit","start","end","snippet",...}]}`.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PlotArgs {
    /// The chat.
    pub chat: String,
    /// The SVG file to write.
    #[arg(short = 'o', long = "output", value_name = "FILE.svg")]
    pub output: PathBuf,
    /// The window whose soft and hard lines are drawn, in tokens.
    #[arg(long, default_value_t = 32_000)]
    pub window: u64,
    /// Prices in US dollars per million tokens, for the cumulative cost.
    #[arg(
        long,
        default_value = "input=3,cached=0.3,output=15",
        value_name = "input=N,cached=N,cache_write=N,output=N"
    )]
    pub price: String,
    /// Print the series as JSON too.
    #[arg(long)]
    pub json: bool,
}

/// `serve`.
#[cfg(feature = "serve")]
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The port (0: any free port; the address is printed).
    #[arg(long, default_value_t = 7878)]
    pub port: u16,
    /// The address to bind: loopback by default (requests must name a local host). Any other
    /// address (0.0.0.0, a LAN address) exposes every chat of the owner, read-only, to whoever
    /// reaches the port with the token (--token, else one generated and printed to stderr).
    #[arg(long, default_value = "127.0.0.1", value_name = "IP")]
    pub bind: std::net::IpAddr,
    /// The token every request must carry (?token= once, then a cookie, or "Authorization:
    /// Bearer TOKEN"): 16 to 256 of A-Z a-z 0-9 . _ ~ -. Without it, loopback binds need none
    /// and other binds get a random one. Also read from UNDERTEXT_SERVE_TOKEN (not shown by ps).
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Prices in US dollars per million tokens, for the chart's cumulative cost.
    #[arg(
        long,
        default_value = "input=3,cached=0.3,output=15",
        value_name = "input=N,cached=N,cache_write=N,output=N"
    )]
    pub price: String,
}

/// `check`.
#[cfg(feature = "mcp")]
#[derive(Debug, Args)]
pub struct McpArgs {}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Rebuild the index from the log after checking.
    #[arg(long)]
    pub rebuild: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `--limit`: a whole number of at least 1 (0 would list nothing; a usage error, exit 2).
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("expected a whole number of at least 1, found {s:?}")),
    }
}

/// `--range`: `A..B`, `A..`, `..B` or `..` with whole numbers. Only the syntax is checked
/// here (a bad one is a usage error, exit 2); the bounds against the archive's length are
/// checked by the command.
fn range_syntax(s: &str) -> Result<String, String> {
    let bad = || format!("expected A..B (end exclusive), A.. or ..B with whole numbers, found {s:?}");
    let (a, b) = s.split_once("..").ok_or_else(bad)?;
    for part in [a, b] {
        let part = part.trim();
        if !part.is_empty() && part.parse::<u64>().is_err() {
            return Err(bad());
        }
    }
    Ok(s.to_string())
}

/// `--unit`: char, utf16, byte or line (or their plurals).
fn unit_name(s: &str) -> Result<String, String> {
    match s {
        "char" | "chars" | "utf16" | "byte" | "bytes" | "line" | "lines" => Ok(s.to_string()),
        other => Err(format!("expected char, utf16, byte or line, found {other:?}")),
    }
}
