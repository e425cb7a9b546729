//! The `undertext` command line: a thin layer over the engine's public API (see
//! `engine/src/cli` and the README's CLI section).

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
