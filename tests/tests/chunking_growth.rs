//! The growing-thread workload of the chunking issue, on the engine alone: 1,000 steps, each
//! appending a ~1 KB message to a list and storing the whole list (as a LangGraph
//! checkpointer does). Prints the log growth per average chunk size against the distinct
//! message text. Ignored in the suite (about 1 minute); run with `--ignored --nocapture`.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext::{Durability, Options, Store};
use undertext_tests::Rng;

fn message(rng: &mut Rng, i: usize) -> String {
    const WORDS: &[&str] =
        &["the", "agent", "reads", "file", "src/main.rs", "and", "finds", "error", "line", "42"];
    let mut s = format!("{{\"type\":\"ai\",\"id\":\"msg-{i}\",\"content\":\"");
    while s.len() < 1000 {
        s.push_str(WORDS[rng.range(0, WORDS.len() as u64) as usize]);
        s.push(' ');
        if rng.range(0, 8) == 0 {
            s.push_str(&rng.next_u64().to_string());
            s.push(' ');
        }
    }
    s.push_str("\"}");
    s
}

#[test]
#[ignore = "measurement: about a minute; run with --ignored --nocapture"]
fn growing_list_costs_per_chunk_size() {
    for avg in [4u32 << 10, 8 << 10, 16 << 10, 32 << 10] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options::default().durability(Durability::None).chunk_avg(avg);
        let store = Store::open(dir.path(), opts).unwrap();
        let mut rng = Rng::new(7);
        let mut items: Vec<String> = Vec::new();
        let mut distinct = 0;
        let start = store.stats().unwrap().log_bytes;
        for i in 0..1000 {
            let m = message(&mut rng, i);
            distinct += m.len();
            items.push(m);
            let value = format!("[{}]", items.join(","));
            store.put_blob("o", value.as_bytes()).unwrap();
        }
        let grown = store.stats().unwrap().log_bytes - start;
        println!(
            "chunk_avg {:>5}: log grew {:>10} B for {distinct} B of distinct text = {:.2}x",
            avg,
            grown,
            grown as f64 / distinct as f64
        );
    }
}
