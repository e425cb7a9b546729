//! Claims: the importers take any bytes without panicking — every prefix of real transcripts
//! (as a crash mid-write leaves them), seeded byte flips, and every format forced on every
//! file — and return either sessions with the bad lines reported by number, or one error that
//! names the file. A JSONL file cut inside a line loses exactly that line.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::path::Path;

use undertext::import::{self, Format};
use undertext_tests::Rng;
use undertext_tests::transcripts::transcripts_dir;

fn samples() -> Vec<(String, Vec<u8>)> {
    let dir = transcripts_dir();
    let mut out: Vec<(String, Vec<u8>)> = [
        "claude_code/spotter/tool_heavy.jsonl",
        "swe_agent/trajectories/function_calling_simple.traj",
        "mini_swe_agent/deepseek_reasoner_dev/pvlib__pvlib-python-1606.traj.json",
    ]
    .iter()
    .map(|f| (f.to_string(), std::fs::read(dir.join(f)).unwrap()))
    .collect();
    // The hand-made fixtures of the formats no sample of ships (mini-swe-agent text
    // trajectories, an OpenHands completion log).
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    for f in [
        "mini_swe_agent_text/acme__sums-17.traj.json",
        "openhands_eval/llm_completions/acme__widgets-3/claude-3-5-sonnet-20241022-1733000000.25.json",
    ] {
        out.push((f.to_string(), std::fs::read(fixtures.join(f)).unwrap()));
    }
    // The first 40 KB of tau-bench: a list cut short.
    let tau = std::fs::read(dir.join("tau_bench/gpt-4o-airline.json")).unwrap();
    out.push(("tau_bench/gpt-4o-airline.json".into(), tau[..40_000].to_vec()));
    out
}

/// Parses with every format; an error must name the file.
fn parse_every_way(name: &str, bytes: &[u8]) {
    for f in Format::ALL {
        match import::parse_bytes(Path::new(name), bytes, f) {
            Ok(p) => {
                for pr in &p.problems {
                    assert!(pr.to_string().starts_with(name), "{pr}");
                }
            }
            Err(e) => assert!(e.to_string().contains(name), "{f}: {e}"),
        }
    }
}

#[test]
fn every_prefix_and_seeded_byte_flips_of_real_transcripts_parse_or_fail_cleanly() {
    let mut rng = Rng::new(0x1a9);
    for (name, bytes) in samples() {
        let step = (bytes.len() / 150).max(1);
        for cut in (0..bytes.len()).step_by(step) {
            parse_every_way(&name, &bytes[..cut]);
        }
        for _ in 0..150 {
            let mut b = bytes.clone();
            for _ in 0..3 {
                let at = rng.range(0, b.len() as u64) as usize;
                b[at] = rng.range(0, 256) as u8;
            }
            parse_every_way(&name, &b);
        }
    }
}

#[test]
fn a_jsonl_cut_inside_a_line_loses_that_line_only() {
    let (name, bytes) = samples().remove(0);
    let text = String::from_utf8(bytes).unwrap();
    let whole = import::parse_bytes(Path::new(&name), text.as_bytes(), Format::Auto).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // Cut every line after the first in its middle; the lines before it parse as before.
    for n in 1..lines.len() {
        let start: usize = lines[..n].iter().map(|l| l.len() + 1).sum();
        let cut = &text[..start + lines[n].len() / 2];
        let p = import::parse_bytes(Path::new(&name), cut.as_bytes(), Format::Auto).unwrap();
        assert_eq!(p.problems.len(), 1, "cut in line {}", n + 1);
        assert_eq!(p.problems[0].line, n as u64 + 1);
        let got = p.sessions[0].messages.len();
        assert!(got <= whole.sessions[0].messages.len());
        let full: usize = import::parse_bytes(Path::new(&name), &text.as_bytes()[..start], Format::Auto)
            .unwrap()
            .sessions[0]
            .messages
            .len();
        assert_eq!(got, full, "the lines before the cut are all there");
    }
}
