//! Arbitrary bytes as a text and a list of ranges: `ArchiveText::read` (the logic behind
//! `Store::read_context`) must agree with naive slicing in every unit, and `len` with naive
//! counts.
//!
//! Input layout ([`encode`] builds one): byte 0 repeats the text (1 to 32 times, at most
//! [`MAX_TEXT`] bytes, so that short inputs reach past several 4 KiB index strides); byte 1
//! is the number of ranges (`% 33`); then 5 bytes per range, `[ctrl, start u16 LE, end u16
//! LE]`; the rest is the text. Text bytes are decoded as lossy UTF-8, except bytes
//! `0xF5..=0xFF` (never valid in UTF-8), which stand for tricky [`PIECES`]: 4-byte scalars,
//! CRLF, a ZWJ sequence, a combining mark, CJK, lone CR, U+FFFF, U+0080, a flag. `ctrl` bits
//! 0–1 are the unit, bits 2–3 and 4–5 how start and end are drawn (see [`bound`]).
//!
//! On each input, for every unit:
//! * `len` equals the naive count (`chars()`, `encode_utf16()`, bytes, `split_inclusive('\n')`
//!   items), `as_str` is the text, `index_bytes` fits the sparse index's size bounds;
//! * every decoded range; the whole range; empty, past-the-end and reversed ranges at the
//!   end; for a text of at most [`EXHAUSTIVE`] units every position, read empty, from the
//!   start and to the end; for a longer one the first and last few positions and a few on
//!   both sides of each 4 KiB stride boundary (where the sparse index has its marks), read
//!   empty and up to the next: `read` returns exactly the naive slice (the same bytes of the
//!   same text), or an `InvalidArgument` error exactly when naive slicing fails — reversed
//!   ("reversed"), a bound past the end (the message gives the length: "holds N unit"), or a
//!   bound that splits a UTF-8 sequence or a surrogate pair ("splits");
//! * for the decoded ranges the content also equals slicing the naive way (a `Vec<char>`,
//!   `String::from_utf16` of the UTF-16 units, `str::get`, joined `split_inclusive` items).
//!
//! Shared verbatim by the cargo-fuzz target `read_context` and the test
//! `read_context_corpus_replays` in `tests/tests/fuzz_corpus.rs`, which includes this file
//! with `#[path]`. Use only `std` and `undertext` here.

use std::ops::Range;

use undertext::ArchiveText;
use undertext::{Error, Unit};

/// Largest text built from an input (after repetition).
pub const MAX_TEXT: usize = 32 << 10;

/// Texts up to this long (in a unit) have every position checked in that unit.
pub const EXHAUSTIVE: u64 = 128;

/// Every unit, in the order of their codes in `ctrl`.
pub const UNITS: [Unit; 4] = [Unit::Chars, Unit::Utf16, Unit::Bytes, Unit::Lines];

/// What bytes `0xF5..=0xFF` of the text stand for.
pub const PIECES: [&str; 11] = [
    "\u{1F600}",
    "\u{10FFFF}",
    "\r\n",
    "\u{1F469}\u{200D}\u{1F467}",
    "e\u{301}",
    "\u{4E2D}",
    "\n",
    "\u{FFFF}",
    "\r",
    "\u{80}",
    "\u{1F1EB}\u{1F1F7}",
];

/// Builds an input from its parts (for seeds): `repeat` (byte 0), ranges as (ctrl, start,
/// end), and the raw text bytes.
pub fn encode(repeat: u8, ranges: &[(u8, u16, u16)], text: &[u8]) -> Vec<u8> {
    let mut out = vec![repeat, ranges.len() as u8];
    for &(ctrl, s, e) in ranges {
        out.push(ctrl);
        out.extend_from_slice(&s.to_le_bytes());
        out.extend_from_slice(&e.to_le_bytes());
    }
    out.extend_from_slice(text);
    out
}

/// The text an input's text bytes stand for (before repetition).
pub fn decode_text(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for chunk in bytes.split_inclusive(|b| *b >= 0xF5) {
        match chunk.split_last() {
            Some((&last, head)) if last >= 0xF5 => {
                s.push_str(&String::from_utf8_lossy(head));
                s.push_str(PIECES[usize::from(last - 0xF5)]);
            }
            _ => s.push_str(&String::from_utf8_lossy(chunk)),
        }
    }
    s
}

/// A bound drawn from `v` by `mode` for a text of `len` units: 0 anywhere inside, 1 counted
/// from the end, 2 at or just past the end, 3 the raw value (a start) or at most 15 after
/// `start` (an end).
pub fn bound(mode: u8, v: u16, len: u64, start: Option<u64>) -> u64 {
    let v = u64::from(v);
    match mode & 3 {
        0 => v % (len + 1),
        1 => len - v % (len + 1),
        2 => len + v % 3,
        _ => match start {
            None => v,
            Some(s) => s + v % 16,
        },
    }
}

/// The naive positions of a text in one unit: for each position, the byte offset of the
/// character boundary at or before it, and whether the position is itself a boundary.
struct Table {
    at: Vec<(usize, bool)>,
}

impl Table {
    fn new(text: &str, unit: Unit) -> Table {
        let mut at = Vec::new();
        match unit {
            Unit::Chars => at.extend(text.char_indices().map(|(i, _)| (i, true))),
            Unit::Utf16 => {
                for (i, c) in text.char_indices() {
                    at.push((i, true));
                    if c.len_utf16() == 2 {
                        at.push((i, false)); // between the two halves of the pair
                    }
                }
            }
            Unit::Bytes => {
                let mut last = 0;
                for p in 0..text.len() {
                    let ok = text.is_char_boundary(p);
                    if ok {
                        last = p;
                    }
                    at.push((last, ok));
                }
            }
            Unit::Lines => {
                let mut b = 0;
                for line in text.split_inclusive('\n') {
                    at.push((b, true));
                    b += line.len();
                }
            }
        }
        at.push((text.len(), true));
        Table { at }
    }

    /// The length in the unit.
    fn len(&self) -> u64 {
        self.at.len() as u64 - 1
    }

    fn bad(&self, p: u64) -> Option<Why> {
        match self.at.get(p as usize) {
            None => Some(Why::PastEnd),
            Some((_, false)) => Some(Why::Splits),
            Some((_, true)) => None,
        }
    }

    /// The byte range of `a..b`, or why naive slicing fails (checked in the order the
    /// engine checks: reversed, then the start, then the end).
    fn slice(&self, a: u64, b: u64) -> Result<Range<usize>, Why> {
        if a > b {
            return Err(Why::Reversed);
        }
        if let Some(w) = self.bad(a).or_else(|| self.bad(b)) {
            return Err(w);
        }
        Ok(self.at[a as usize].0..self.at[b as usize].0)
    }

    /// Positions whose byte offset is within a few characters of `byte`.
    fn around(&self, byte: usize) -> Range<u64> {
        let i = self.at.partition_point(|(b, _)| *b < byte) as u64;
        i.saturating_sub(4)..(i + 4).min(self.len() + 2)
    }
}

/// Why naive slicing fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    Reversed,
    PastEnd,
    Splits,
}

/// The text as naive sequences, for slicing the slow, obvious way.
struct Naive<'a> {
    chars: Vec<char>,
    utf16: Vec<u16>,
    bytes: &'a str,
    lines: Vec<&'a str>,
}

impl<'a> Naive<'a> {
    fn new(text: &'a str) -> Naive<'a> {
        Naive {
            chars: text.chars().collect(),
            utf16: text.encode_utf16().collect(),
            bytes: text,
            lines: text.split_inclusive('\n').collect(),
        }
    }

    /// The content of `a..b` in `unit`; `None` when it cannot be sliced.
    fn content(&self, a: u64, b: u64, unit: Unit) -> Option<String> {
        let (a, b) = (usize::try_from(a).ok()?, usize::try_from(b).ok()?);
        match unit {
            Unit::Chars => self.chars.get(a..b).map(|c| c.iter().collect()),
            Unit::Utf16 => {
                let low = |p: usize| self.utf16.get(p).is_some_and(|x| (0xDC00..0xE000).contains(x));
                if low(a) || low(b) {
                    return None; // a bound between the two halves of a surrogate pair
                }
                String::from_utf16(self.utf16.get(a..b)?).ok()
            }
            Unit::Bytes => self.bytes.get(a..b).map(str::to_string),
            Unit::Lines => self.lines.get(a..b).map(|l| l.concat()),
        }
    }
}

/// One read checked against the table: same bytes of the same text, or the right error.
fn check_read(t: &ArchiveText, table: &Table, a: u64, b: u64, unit: Unit) -> Option<Range<usize>> {
    let got = t.read(a..b, unit);
    let len = table.len();
    let base = t.as_str().as_ptr() as usize;
    match (table.slice(a, b), got) {
        (Ok(want), Ok(got)) => {
            let at = (got.as_ptr() as usize).wrapping_sub(base);
            assert_eq!(
                at..at + got.len(),
                want,
                "{unit:?} {a}..{b} of {len}: wrong bytes {got:?} (want {:?})",
                &t.as_str()[want.clone()]
            );
            Some(want)
        }
        (Err(why), Err(e)) => {
            let msg = e.to_string();
            assert!(matches!(e, Error::InvalidArgument(_)), "{unit:?} {a}..{b}: {e:?}");
            let expected = match why {
                Why::Reversed => "reversed".to_string(),
                Why::PastEnd => format!("holds {len} {}", unit.as_str()),
                Why::Splits => "splits".to_string(),
            };
            assert!(
                msg.contains(&expected),
                "{unit:?} {a}..{b} of {len} ({why:?}): {msg:?} lacks {expected:?}"
            );
            None
        }
        (Ok(want), Err(e)) => panic!("{unit:?} {a}..{b} of {len}: {e} (want bytes {want:?})"),
        (Err(why), Ok(got)) => panic!("{unit:?} {a}..{b} of {len} ({why:?}): read {got:?}"),
    }
}

/// Runs every check on one input.
pub fn check(data: &[u8]) {
    let byte = |i: usize| data.get(i).copied().unwrap_or(0);
    let n_ranges = usize::from(byte(1) % 33);
    let header = (2 + 5 * n_ranges).min(data.len());
    let body = decode_text(&data[header..]);
    let reps = (1 + usize::from(byte(0) % 32)).min(MAX_TEXT / body.len().max(1)).max(1);
    let mut text = body.repeat(reps);
    if text.len() > MAX_TEXT {
        let mut cut = MAX_TEXT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    let t = ArchiveText::new(text.clone());
    assert_eq!(t.as_str(), text);
    assert_eq!(t.is_empty(), text.is_empty());
    // The index: a count, one mark per started 4 KiB stride (at least one), the end mark.
    let ib = t.index_bytes();
    assert!(ib >= 8 + 32 * 2 && (ib - 8).is_multiple_of(32), "index of {ib} bytes");
    assert!(ib <= 8 + 32 * (text.len() / 4096 + 2), "index of {ib} bytes for {} bytes", text.len());

    let tables: Vec<Table> = UNITS.iter().map(|&u| Table::new(&text, u)).collect();
    for (&unit, table) in UNITS.iter().zip(&tables) {
        let len = table.len();
        assert_eq!(t.len(unit), len, "{unit:?} length");
        let naive_len = match unit {
            Unit::Chars => text.chars().count(),
            Unit::Utf16 => text.encode_utf16().count(),
            Unit::Bytes => text.len(),
            Unit::Lines => text.split_inclusive('\n').count(),
        } as u64;
        assert_eq!(len, naive_len, "{unit:?} table");
        assert_eq!(check_read(&t, table, 0, len, unit), Some(0..text.len()));
        for (a, b) in [(len, len), (len, len + 1), (0, len + 1), (len + 1, len + 1), (len + 1, len), (1, 0)] {
            check_read(&t, table, a, b, unit);
        }
        check_read(&t, table, u64::MAX, u64::MAX, unit);
        // Every position of a short text, from the start, to the end and empty. Of a longer
        // one, the first and last few and a few on both sides of each stride boundary: each
        // empty and up to the next.
        let short = len <= EXHAUSTIVE;
        let mut positions: Vec<u64> = if short {
            (0..=len + 1).collect()
        } else {
            let mut v: Vec<u64> = (0..8).chain(len - 8..=len + 1).collect();
            for k in 1..=text.len() / 4096 {
                v.extend(table.around(k * 4096));
            }
            v
        };
        positions.sort_unstable();
        positions.dedup();
        for (i, &p) in positions.iter().enumerate() {
            check_read(&t, table, p, p, unit);
            if let Some(&q) = positions.get(i + 1) {
                check_read(&t, table, p, q, unit);
            }
            if short {
                check_read(&t, table, 0, p, unit);
                check_read(&t, table, p, len, unit);
            }
        }
    }

    let naive = Naive::new(&text);
    for i in 0..n_ranges {
        let at = 2 + 5 * i;
        let ctrl = byte(at);
        let v = |k: usize| u16::from_le_bytes([byte(at + k), byte(at + k + 1)]);
        let unit = UNITS[usize::from(ctrl & 3)];
        let table = &tables[usize::from(ctrl & 3)];
        let a = bound(ctrl >> 2, v(1), table.len(), None);
        let b = bound(ctrl >> 4, v(3), table.len(), Some(a));
        let got = check_read(&t, table, a, b, unit);
        let want = naive.content(a, b, unit);
        assert_eq!(got.map(|r| text[r].to_string()), want, "{unit:?} {a}..{b}: naive content");
    }
}
