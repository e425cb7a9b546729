//! No build work: it gives the `[build-dependencies]` of Cargo.toml a build script to serve,
//! so that syn is built with the features the C library's header generator gives it.

fn main() {}
