//! Claims: every tool result of the real agent transcripts in `shared/data/transcripts`
//! (Claude Code, mini-swe-agent, tau-bench, SWE-agent; see `undertext_tests::transcripts`)
//! archives with sizes equal to naive counts and reads back byte-exact, whole in every unit
//! and in random pieces compared against naive slicing; ranges that split a character are
//! errors. The extraction itself agrees with `MANIFEST.txt`, file by file.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::collections::BTreeMap;
use std::time::Instant;

use undertext::{Durability, Options, Store, Unit};
use undertext_tests::transcripts::{self, Format};
use undertext_tests::{Rng, seed};

const UNITS: [Unit; 4] = [Unit::Chars, Unit::Utf16, Unit::Bytes, Unit::Lines];

/// Random sub-ranges read per result and unit.
const PIECES: usize = 8;

/// A text's positions in every unit, computed naively: the byte offset where each
/// position starts (`None` where a UTF-16 position splits a surrogate pair or a byte
/// position splits a UTF-8 sequence).
struct Naive<'a> {
    text: &'a str,
    /// Byte offset of each char, then the length.
    chars: Vec<usize>,
    /// The UTF-16 code units.
    utf16: Vec<u16>,
    /// Byte offset of each line (`split_inclusive('\n')`), then the length.
    lines: Vec<usize>,
}

impl<'a> Naive<'a> {
    fn new(text: &'a str) -> Self {
        let mut chars: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        chars.push(text.len());
        let mut lines = vec![0];
        let mut at = 0;
        for l in text.split_inclusive('\n') {
            at += l.len();
            lines.push(at);
        }
        Naive { text, chars, utf16: text.encode_utf16().collect(), lines }
    }

    fn len(&self, unit: Unit) -> u64 {
        (match unit {
            Unit::Chars => self.chars.len() - 1,
            Unit::Utf16 => self.utf16.len(),
            Unit::Bytes => self.text.len(),
            Unit::Lines => self.lines.len() - 1,
        }) as u64
    }

    /// Whether position `p` (at most the length) is on a character boundary in `unit`.
    fn on_boundary(&self, p: u64, unit: Unit) -> bool {
        let p = p as usize;
        match unit {
            Unit::Chars | Unit::Lines => true,
            Unit::Bytes => self.text.is_char_boundary(p),
            Unit::Utf16 => !self.utf16.get(p).is_some_and(|u| (0xDC00..0xE000).contains(u)),
        }
    }

    /// The naive slice `a..b` in `unit` (a valid range on boundaries).
    fn slice(&self, a: u64, b: u64, unit: Unit) -> String {
        let (a, b) = (a as usize, b as usize);
        match unit {
            Unit::Chars => self.text.chars().skip(a).take(b - a).collect(),
            Unit::Utf16 => String::from_utf16(&self.utf16[a..b]).unwrap(),
            Unit::Bytes => self.text[a..b].to_string(),
            Unit::Lines => self.text.split_inclusive('\n').skip(a).take(b - a).collect(),
        }
    }
}

/// A position in `0..=len`, biased towards the ends.
fn position(rng: &mut Rng, naive: &Naive<'_>, unit: Unit) -> u64 {
    let len = naive.len(unit);
    match rng.range(0, 8) {
        0 => 0,
        1 => len,
        2 => len.saturating_sub(rng.range(0, 4)),
        _ => rng.range(0, len + 1),
    }
}

#[test]
fn every_real_tool_result_reads_back_exactly_in_every_unit() {
    let started = Instant::now();
    let results = transcripts::extract(&transcripts::transcripts_dir());
    let total_bytes: usize = results.iter().map(|r| r.text.len()).sum();
    let mut per_format: BTreeMap<Format, (usize, usize)> = BTreeMap::new();
    for r in &results {
        let e = per_format.entry(r.format).or_default();
        e.0 += 1;
        e.1 += r.text.len();
    }
    eprintln!("{} tool results, {total_bytes} bytes", results.len());
    for (f, (n, b)) in &per_format {
        eprintln!("  {:<26} {n:>5} results {b:>9} bytes", f.manifest_name());
    }
    assert_eq!(per_format.len(), 4, "every format must contribute results");

    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
    let mut rng = Rng::new(seed(0x7265_616c));
    let (mut pieces, mut splits, mut multibyte, mut astral) = (0u64, 0u64, 0u64, 0u64);
    for (i, r) in results.iter().enumerate() {
        let text = r.text.as_str();
        let at = || format!("result {i} of {} ({} bytes)", r.path.display(), text.len());
        let naive = Naive::new(text);
        let a = store.archive("real", text).unwrap_or_else(|e| panic!("{}: {e}", at()));
        assert_eq!(a.bytes, naive.len(Unit::Bytes), "{}", at());
        assert_eq!(a.chars, naive.len(Unit::Chars), "{}", at());
        assert_eq!(a.utf16_units, naive.len(Unit::Utf16), "{}", at());
        assert_eq!(a.lines, naive.len(Unit::Lines), "{}", at());
        for unit in UNITS {
            let len = naive.len(unit);
            let whole = store.read_context("real", &a.id, 0..len, unit).unwrap();
            assert!(whole == text, "{}: whole text in {unit:?} differs", at());
            let e = store.read_context("real", &a.id, 0..len + 1, unit).unwrap_err().to_string();
            assert!(e.contains(&format!("holds {len} {}", unit.as_str())), "{}: {e}", at());
            for _ in 0..PIECES {
                let (x, y) = (position(&mut rng, &naive, unit), position(&mut rng, &naive, unit));
                let (x, y) = (x.min(y), x.max(y));
                let got = store.read_context("real", &a.id, x..y, unit);
                if naive.on_boundary(x, unit) && naive.on_boundary(y, unit) {
                    let got = got.unwrap_or_else(|e| panic!("{}: {unit:?} {x}..{y}: {e}", at()));
                    assert!(got == naive.slice(x, y, unit), "{}: {unit:?} {x}..{y} differs", at());
                    pieces += 1;
                } else {
                    assert!(got.is_err(), "{}: {unit:?} {x}..{y} splits a character but reads", at());
                    splits += 1;
                }
            }
        }
        // Every byte inside the first multibyte character, and both halves of the first
        // surrogate pair, if any.
        if let Some((b, c)) = text.char_indices().find(|(_, c)| c.len_utf8() > 1) {
            multibyte += 1;
            let (b, n) = (b as u64, c.len_utf8() as u64);
            assert_eq!(store.read_context("real", &a.id, b..b + n, Unit::Bytes).unwrap(), c.to_string());
            for k in 1..n {
                assert!(store.read_context("real", &a.id, b + k..b + n, Unit::Bytes).is_err(), "{}", at());
                assert!(store.read_context("real", &a.id, b..b + k, Unit::Bytes).is_err(), "{}", at());
            }
        }
        if let Some((b, c)) = text.char_indices().find(|(_, c)| c.len_utf16() == 2) {
            astral += 1;
            let u = text[..b].encode_utf16().count() as u64;
            assert_eq!(store.read_context("real", &a.id, u..u + 2, Unit::Utf16).unwrap(), c.to_string());
            assert!(store.read_context("real", &a.id, u + 1..u + 2, Unit::Utf16).is_err(), "{}", at());
            assert!(store.read_context("real", &a.id, u..u + 1, Unit::Utf16).is_err(), "{}", at());
        }
    }
    eprintln!(
        "read {pieces} pieces, refused {splits} random ranges that split a character; \
         {multibyte} results with multibyte and {astral} with astral chars; {:.1} s; {:?}",
        started.elapsed().as_secs_f64(),
        store.stats().unwrap()
    );
}

/// The extraction agrees with `MANIFEST.txt`: per file, the results it counts and their
/// bytes (less the `"\n"` joining text blocks); the results it does not count are only
/// Claude Code `progress` results (see the `transcripts` module documentation).
#[test]
fn extraction_agrees_with_the_manifest() {
    let dir = transcripts::transcripts_dir();
    let results = transcripts::extract(&dir);
    let rows = transcripts::manifest(&dir);
    assert_eq!(rows.len(), 60 - 2, "MANIFEST.txt lists every transcript file");
    let mut by_file: BTreeMap<std::path::PathBuf, (Format, u64, u64, u64)> = BTreeMap::new();
    for r in &results {
        let rel = r.path.strip_prefix(&dir).unwrap().to_path_buf();
        let e = by_file.entry(rel).or_insert((r.format, 0, 0, 0));
        if r.in_manifest {
            e.1 += 1;
            e.2 += (r.text.len() - r.text_blocks.saturating_sub(1)) as u64;
        } else {
            assert_eq!(r.format, Format::ClaudeCode, "{}", r.path.display());
            e.3 += 1;
        }
    }
    let mut totals: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for row in &rows {
        let (format, n, bytes, extra) =
            by_file.get(&row.file).copied().unwrap_or((Format::ClaudeCode, 0, 0, 0));
        if n > 0 {
            assert_eq!(format.manifest_name(), row.format, "{}", row.file.display());
        }
        assert_eq!((n, bytes), (row.tool_results, row.tool_result_bytes), "{}", row.file.display());
        let t = totals.entry(row.format.as_str()).or_default();
        t.0 += row.tool_results;
        t.1 += extra;
    }
    assert!(by_file.keys().all(|f| rows.iter().any(|r| &r.file == f)), "a file missing from MANIFEST.txt");
    for (format, (counted, extra)) in &totals {
        eprintln!("{format:<26} manifest {counted:>5}, extracted {:>5}", counted + extra);
    }
    let extra: u64 = totals.values().map(|t| t.1).sum();
    assert_eq!(extra, 9, "progress-only Claude Code results (subagent afb92ff of subagent.jsonl)");
    assert_eq!(results.len(), 3182 + 9);
    assert_eq!(results.iter().filter(|r| r.text_blocks > 1).count(), 7, "results joined from text blocks");
}
