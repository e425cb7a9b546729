//! Child process of the lock test: tries to open a store that another process holds and
//! prints `locked <pid> <micros>`, `opened <micros>` or `error <message>`.

use std::time::Instant;

use undertext::{Error, Options, Store};

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: lock_probe STORE_DIR");
        std::process::exit(2);
    };
    let t = Instant::now();
    let r = Store::open(&dir, Options::default());
    let us = t.elapsed().as_micros();
    match r {
        Err(Error::Locked { pid }) => println!("locked {pid} {us}"),
        Ok(_) => println!("opened {us}"),
        Err(e) => println!("error {e}"),
    }
}
