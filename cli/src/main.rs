//! The `undertext` command line: a thin layer over the engine's public API (see `cli/src/lib.rs`
//! and docs/CLI.md).

fn main() -> std::process::ExitCode {
    undertext_cli::main()
}
