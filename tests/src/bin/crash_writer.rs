//! Child process of the crash test: writes blobs in `Group` durability from several
//! threads and prints `ack <stream> <index> <id>` for each write it was told is durable.
//! The parent kills it with SIGKILL at a random moment.
//!
//! Usage: `crash_writer STORE_DIR SEED THREADS`

use std::io::Write;

use undertext_tests::child::open_or_exit;
use undertext_tests::content;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: crash_writer STORE_DIR SEED THREADS");
        std::process::exit(2);
    }
    let (Ok(seed), Ok(threads)) = (args[2].parse::<u64>(), args[3].parse::<u64>()) else {
        eprintln!("SEED and THREADS must be numbers");
        std::process::exit(2);
    };
    let store = open_or_exit(&args[1], 256 << 10);
    println!("ready");
    let out = std::sync::Mutex::new(std::io::stdout());
    std::thread::scope(|s| {
        for t in 0..threads {
            let (store, out) = (&store, &out);
            s.spawn(move || {
                for i in 0.. {
                    let c = content(seed, t, i);
                    // Every fourth write is a two-blob transaction.
                    let ids = if i % 4 == 3 {
                        let c2 = content(seed, t + 1000, i);
                        store.put_blobs("o", &[&c, &c2])
                    } else {
                        store.put_blob("o", &c).map(|id| vec![id])
                    };
                    match ids {
                        Ok(ids) => {
                            let mut o = out.lock().unwrap_or_else(|p| p.into_inner());
                            let _ = writeln!(o, "ack {t} {i} {}", ids[0]);
                            let _ = o.flush();
                        }
                        Err(e) => {
                            eprintln!("write failed: {e}");
                            std::process::exit(1);
                        }
                    }
                }
            });
        }
    });
}
