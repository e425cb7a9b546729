//! What one reader's refresh rounds cost, in a form `callgrind` counts exactly
//! (`scripts/ro-refresh-cost`; benches/README.md, "Read-only readers beside a live writer"):
//! one process holds a writer (`SEGMENT_SIZE`-byte segments, as the soak's) and a read-only
//! open of the same store. For `ROUNDS` rounds the writer appends `PER_ROUND` soak messages
//! round-robin to `CHATS` chats (one append in 16 a batch of three), then the reader does
//! what a soak reader does in one round ([`reader_round`], the only function counted):
//! `refresh()`, then per chat `Store::chat`, a `range` of the new messages each checked byte
//! for byte, and 4 older messages read again (`get`) and checked. The work is the same on
//! every run, so the count of instructions does not depend on the machine's load.
//!
//! Prints `done rounds=… messages=… checked=…`.
//!
//! Usage: `ro_refresh_cost STORE_DIR [ROUNDS] [PER_ROUND] [CHATS] [SEGMENT_SIZE]`

use undertext::{Chat, ChatId, ChatMeta, Options, Store};
use undertext_tests::Rng;
use undertext_tests::ro_soak::{OWNER, check_message, soak_message};

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("ro_refresh_cost: {what}: {e}");
    std::process::exit(1)
}

/// One round of a soak reader over `chats` (id, messages checked so far): returns how many
/// messages it checked.
#[inline(never)]
fn reader_round(ro: &Store, chats: &mut [(u64, u64)], rng: &mut Rng) -> u64 {
    let r = ro.refresh().unwrap_or_else(|e| fail("refresh", e));
    if !r.warnings.is_empty() {
        fail("refresh", format!("warnings: {:?}", r.warnings));
    }
    let mut checked = 0;
    for (id, done) in chats.iter_mut() {
        let chat = ro.chat(OWNER, ChatId(*id)).unwrap_or_else(|e| fail("chat", e));
        let len = chat.len();
        let msgs = chat.range(*done..len).unwrap_or_else(|e| fail("range", e));
        for (k, m) in msgs.iter().enumerate() {
            check_message(*id, *done + k as u64, m).unwrap_or_else(|e| fail("check", e));
        }
        for _ in 0..4.min(*done) {
            let s = rng.range(0, *done);
            let m = chat.get(s).unwrap_or_else(|e| fail("get", e));
            check_message(*id, s, &m).unwrap_or_else(|e| fail("check", e));
        }
        checked += msgs.len() as u64;
        *done = len;
    }
    checked
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: u64| -> u64 {
        args.get(i).map_or(default, |a| a.parse().unwrap_or_else(|e| fail(&format!("argument {a:?}"), e)))
    };
    let Some(dir) = args.get(1) else {
        eprintln!("usage: ro_refresh_cost STORE_DIR [ROUNDS] [PER_ROUND] [CHATS] [SEGMENT_SIZE]");
        std::process::exit(2);
    };
    let (rounds, per_round, n_chats) = (arg(2, 40), arg(3, 200), arg(4, 8).max(1));
    let opts = Options::default().segment_size(arg(5, 65536));
    let writer = Store::open(dir, opts).unwrap_or_else(|e| fail("open", e));
    let handles: Vec<Chat> = (0..n_chats)
        .map(|_| {
            let id =
                writer.create_chat(OWNER, ChatMeta::default()).unwrap_or_else(|e| fail("create_chat", e));
            writer.chat(OWNER, id).unwrap_or_else(|e| fail("chat", e))
        })
        .collect();
    let ro = Store::open_read_only(dir).unwrap_or_else(|e| fail("open_read_only", e));
    let mut chats: Vec<(u64, u64)> = handles.iter().map(|c| (c.id().0, 0)).collect();
    let mut rng = Rng::new(1);
    let (mut appends, mut messages, mut checked) = (0u64, 0u64, 0u64);
    for _ in 0..rounds {
        let target = messages + per_round;
        while messages < target {
            let c = &handles[(appends % n_chats) as usize];
            let n = if appends % 16 == 15 { 3 } else { 1 };
            let from = c.len();
            let batch = (from..from + n).map(|s| soak_message(c.id().0, s)).collect();
            c.append_batch(batch).unwrap_or_else(|e| fail("append", e));
            appends += 1;
            messages += n;
        }
        checked += reader_round(&ro, &mut chats, &mut rng);
    }
    if checked != messages {
        fail("check", format!("{messages} messages written, {checked} checked"));
    }
    println!("done rounds={rounds} messages={messages} checked={checked}");
}
