//! No build work: present so that the `[build-dependencies]` of Cargo.toml take part in the
//! build (they unify syn's features with the C library's header generator).

fn main() {}
