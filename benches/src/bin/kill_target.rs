//! Child process of the `reopen` bench: opens a store with default options and writes 2 KB
//! blobs from 4 threads in `Group` durability until it is killed. Prints `ready` once open.
//!
//! Usage: `kill_target STORE_DIR SEED`

use std::io::Write;

use undertext::{Options, Store};
use undertext_benches::random_bytes;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(dir), Some(seed)) = (args.get(1), args.get(2).and_then(|s| s.parse::<u64>().ok())) else {
        eprintln!("usage: kill_target STORE_DIR SEED");
        std::process::exit(2);
    };
    let store = match Store::open(dir, Options::default()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("open failed: {e}");
            std::process::exit(1);
        }
    };
    println!("ready");
    let _ = std::io::stdout().flush();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let store = &store;
            s.spawn(move || {
                for i in 0u64.. {
                    let blob = random_bytes(2048, seed ^ (t << 40) ^ i);
                    if let Err(e) = store.put_blob("o", &blob) {
                        eprintln!("put failed: {e}");
                        std::process::exit(1);
                    }
                }
            });
        }
    });
}
