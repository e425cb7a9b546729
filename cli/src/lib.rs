//! The `undertext` command line. Every command is a thin layer over the engine's public API:
//! parse arguments, open the store, call the library, print. Errors are one line on stderr
//! (`error: ...`) and a non-zero exit code; bad input never panics.

mod args;
mod chart;
mod demo;
mod ingest;
#[cfg(feature = "mcp")]
mod mcp;
mod out;
mod plot;
mod read;
pub mod replay;
#[cfg(feature = "serve")]
mod serve;
mod store_cmds;

use std::process::ExitCode;

use clap::Parser;

pub use args::{Cli, Command};

/// A command's failure: the one line to print.
#[derive(Debug)]
pub struct CliError(pub String);

impl From<undertext::Error> for CliError {
    fn from(e: undertext::Error) -> Self {
        let msg = e.to_string();
        CliError(msg.strip_prefix("invalid argument: ").map_or_else(|| msg.clone(), str::to_string))
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            // The reader went away (`| head`): not an error of ours, nothing more to say.
            std::process::exit(BROKEN_PIPE.into());
        }
        CliError(e.to_string())
    }
}

/// What a command returns.
pub type CliResult<T = ()> = Result<T, CliError>;

/// Exit code of a failed command.
const FAILURE: u8 = 1;
/// Exit code of a command line clap could not parse.
const USAGE: u8 = 2;
/// Exit code when stdout's reader went away (as a shell reports SIGPIPE).
const BROKEN_PIPE: u8 = 141;

/// Runs the command line and returns the process's exit code.
pub fn main() -> ExitCode {
    // `println!` to a closed pipe (`undertext show … | head`) ends the process quietly, as
    // other command-line tools do, instead of printing a panic.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info.payload().downcast_ref::<String>().map(String::as_str).unwrap_or_default();
        if msg.contains("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(BROKEN_PIPE.into());
        }
        default_hook(info);
    }));
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                let _ = e.print();
                return ExitCode::from(USAGE);
            }
            // One line: clap's message without its blank lines and usage block.
            let text = e.render().to_string();
            let line: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| {
                    !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information")
                })
                .collect();
            eprintln!("{} (try --help)", line.join(" "));
            return ExitCode::from(USAGE);
        }
    };
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(FAILURE)
        }
    }
}

fn run(cli: &Cli) -> CliResult {
    match &cli.command {
        Command::Demo(a) => demo::run(cli, a),
        Command::Import(a) => ingest::import(cli, a),
        Command::Replay(a) => ingest::replay(cli, a),
        Command::Chats(a) => read::chats(cli, a),
        Command::Show(a) => read::show(cli, a),
        Command::View(a) => read::view(cli, a),
        Command::Archive(a) => read::archive(cli, a),
        Command::Read(a) => read::read(cli, a),
        Command::Search(a) => read::search(cli, a),
        Command::Plot(a) => plot::run(cli, a),
        #[cfg(feature = "serve")]
        Command::Serve(a) => serve::run(cli, a),
        #[cfg(feature = "mcp")]
        Command::Mcp(a) => mcp::run(cli, a),
        Command::Stats(a) => store_cmds::stats(cli, a),
        Command::Check(a) => store_cmds::check(cli, a),
        Command::Gc(a) => store_cmds::gc(cli, a),
        Command::Delete(a) => store_cmds::delete(cli, a),
        #[cfg(feature = "fleet")]
        Command::Fleet(f) => store_cmds::fleet(cli, f),
    }
}
