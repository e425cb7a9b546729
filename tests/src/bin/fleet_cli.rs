//! The `undertext` command line as the CLI crate builds it, with fleet mode (the fleet
//! tests run `undertext --store URL fleet init|migrate|status` through it: a test crate cannot
//! name another package's binary).

fn main() -> std::process::ExitCode {
    undertext_cli::main()
}
