//! Reproducer for an open finding: after a damaged frame, `next_valid_batch` fully decodes
//! (checksums the body of) every candidate batch header it probes, so resyncing is
//! quadratic in the segment length, although `verify_segment` documents its work as linear.
//! `walk_batches` (recovery's `valid_after`) does the same scan.
//!
//! The bytes: a segment header, garbage at 32, then from 64 on a batch header every 32
//! bytes whose header checksum holds but whose body (running to the end) does not.
//!
//!     cd fuzz && cargo run --release --example resync_timing
//!
//! Exits non-zero while 4x the bytes take more than 8x the time (linear work: ~4x).

use std::time::{Duration, Instant};

use undertext::log::format::{BATCH_MAGIC, SEGMENT_HEADER_LEN, encode_segment_header};
use undertext::log::scan::{verify_segment, walk_batches};
use undertext_fuzz::segment_decode::crc32c;

fn worst_case(len: usize) -> Vec<u8> {
    let mut d = vec![0u8; len];
    d[..SEGMENT_HEADER_LEN].copy_from_slice(&encode_segment_header(1));
    let mut off = 64;
    while off + 32 <= len {
        let body = (len - off - 32) & !7;
        d[off..off + 4].copy_from_slice(&BATCH_MAGIC.to_le_bytes());
        d[off + 4..off + 8].copy_from_slice(&(body as u32).to_le_bytes());
        d[off + 24..off + 28].copy_from_slice(&0xDEAD_BEEFu32.to_le_bytes());
        let c = crc32c(0, &d[off..off + 28]);
        d[off + 28..off + 32].copy_from_slice(&c.to_le_bytes());
        off += 32;
    }
    d
}

fn best_of_3(f: impl Fn()) -> Duration {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn main() {
    let mut prev: Option<Duration> = None;
    let mut worst_ratio = 0.0f64;
    for kib in [64usize, 256, 1024] {
        let d = worst_case(kib << 10);
        let verify = best_of_3(|| {
            assert!(!verify_segment(&d, 1, |_| None).problems.is_empty());
        });
        let walk = best_of_3(|| {
            let _ = walk_batches::<()>(&d, SEGMENT_HEADER_LEN, |_| Ok(()));
        });
        let ratio = prev.map(|p| verify.as_secs_f64() / p.as_secs_f64());
        println!(
            "{kib:>5} KiB: verify_segment {verify:?}, walk_batches {walk:?}{}",
            ratio.map_or(String::new(), |r| format!(
                " ({r:.1}x the previous size's time)"
            ))
        );
        worst_ratio = worst_ratio.max(ratio.unwrap_or(0.0));
        prev = Some(verify);
    }
    if worst_ratio > 8.0 {
        println!("quadratic: 4x the bytes took up to {worst_ratio:.1}x the time");
        std::process::exit(1);
    }
    println!("linear enough: 4x the bytes took at most {worst_ratio:.1}x the time");
}
