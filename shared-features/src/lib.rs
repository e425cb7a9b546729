//! No code: see `Cargo.toml`. This crate only makes the C library's and the Python
//! extension's builds turn on the dependency features the CLI's build does, so the three
//! share one compile of those dependencies.
