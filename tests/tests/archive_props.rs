//! Claims: `read_context` is exact in every unit. On seeded random texts made of tricky
//! pieces (ZWJ emoji, skin tones, flags, combining marks, CJK, RTL scripts, NUL, lone CR,
//! CRLF, 4-byte scalars, U+FFFF, U+0080, long ASCII runs crossing several 4 KiB index
//! strides), every range read through the store equals naive slicing, or is an error exactly
//! when naive slicing would split a character or go past the end (the error giving the
//! length). Archive ids are content addresses: stable across owners and repeats, a preview
//! archives back to its original, and a second owner's archive of the same text costs no
//! second copy. Owners are walls: another owner's id looks exactly like one never archived.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use undertext::{BlobId, Durability, Error, Options, Store, Unit};
use undertext_tests::{Rng, seed};

const UNITS: [Unit; 4] = [Unit::Chars, Unit::Utf16, Unit::Bytes, Unit::Lines];
const TEXTS: usize = 500;
const RANGES: usize = 20;

/// Pieces that trip up offset arithmetic.
const PIECES: &[&str] = &[
    "👩\u{200D}👩\u{200D}👧\u{200D}👦", // ZWJ family
    "🧑🏽\u{200D}💻",                     // skin tone + ZWJ
    "👋🏿",
    "🇫🇷🇯🇵", // flags: regional indicator pairs
    "e\u{301}\u{302}",
    "a\u{20DD}",
    "中文字符",
    "日本語のテキスト",
    "한국어",
    "مرحبا بالعالم",
    "שלום עולם",
    "\u{200F}\u{202E}",
    "\0",
    "\r",
    "\r\n",
    "\n",
    "\n\n",
    "\u{10FFFF}",
    "\u{1F600}",
    "\u{10000}",
    "\u{FFFF}",
    "\u{FFFD}",
    "\u{FEFF}",
    "\u{80}",
    "\u{7FF}",
    "\u{800}",
    "é",
    " ",
    "\t",
    "x",
    "line of ascii text\n",
];

fn store(dir: &std::path::Path) -> Store {
    Store::open(dir, Options::default().durability(Durability::None)).unwrap()
}

/// A random text of about `target` bytes: tricky pieces and ASCII runs up to 6 KB.
fn text(rng: &mut Rng, target: usize) -> String {
    let mut s = String::new();
    while s.len() < target {
        match rng.range(0, 10) {
            0 => {
                let n = rng.range(1, 6000) as usize;
                let c = (b'a' + rng.range(0, 26) as u8) as char;
                s.extend(std::iter::repeat_n(c, n.min(target + 1 - s.len())));
            }
            1 => {
                for _ in 0..rng.range(1, 200) {
                    s.push((b' ' + rng.range(0, 95) as u8) as char);
                }
            }
            _ => s.push_str(PIECES[rng.range(0, PIECES.len() as u64) as usize]),
        }
    }
    s
}

/// About 0 to 40 KB, most texts small or medium.
fn target_len(rng: &mut Rng) -> usize {
    (match rng.range(0, 10) {
        0 => rng.range(0, 3),
        1..=3 => rng.range(1, 300),
        4..=6 => rng.range(300, 9000),
        _ => rng.range(9000, 40_000),
    }) as usize
}

/// Why naive slicing fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    Reversed,
    PastEnd,
    Splits,
}

/// A text sliced the slow, obvious way.
struct Naive<'a> {
    text: &'a str,
    chars: Vec<char>,
    utf16: Vec<u16>,
    lines: Vec<&'a str>,
}

impl<'a> Naive<'a> {
    fn new(text: &'a str) -> Self {
        Naive {
            text,
            chars: text.chars().collect(),
            utf16: text.encode_utf16().collect(),
            lines: text.split_inclusive('\n').collect(),
        }
    }

    fn len(&self, unit: Unit) -> u64 {
        (match unit {
            Unit::Chars => self.chars.len(),
            Unit::Utf16 => self.utf16.len(),
            Unit::Bytes => self.text.len(),
            Unit::Lines => self.lines.len(),
        }) as u64
    }

    /// Whether position `p` is unusable, in the order the engine checks bounds.
    fn bad(&self, p: u64, unit: Unit) -> Option<Why> {
        if p > self.len(unit) {
            return Some(Why::PastEnd);
        }
        let p = p as usize;
        let splits = match unit {
            Unit::Chars | Unit::Lines => false,
            Unit::Bytes => !self.text.is_char_boundary(p),
            Unit::Utf16 => self.utf16.get(p).is_some_and(|u| (0xDC00..0xE000).contains(u)),
        };
        splits.then_some(Why::Splits)
    }

    fn slice(&self, a: u64, b: u64, unit: Unit) -> Result<String, Why> {
        if a > b {
            return Err(Why::Reversed);
        }
        if let Some(w) = self.bad(a, unit).or_else(|| self.bad(b, unit)) {
            return Err(w);
        }
        let (a, b) = (a as usize, b as usize);
        Ok(match unit {
            Unit::Chars => self.chars[a..b].iter().collect(),
            Unit::Utf16 => String::from_utf16(&self.utf16[a..b]).expect("bounds do not split a pair"),
            Unit::Bytes => self.text[a..b].to_string(),
            Unit::Lines => self.lines[a..b].concat(),
        })
    }

    /// Positions in `unit` just before each 4-byte scalar (up to 50 of them).
    fn astral_positions(&self, unit: Unit) -> Vec<u64> {
        let (mut chars, mut utf16) = (0u64, 0u64);
        let mut out = Vec::new();
        for (i, c) in self.text.char_indices() {
            if c.len_utf8() == 4 {
                out.push(match unit {
                    Unit::Chars => chars,
                    Unit::Utf16 => utf16,
                    Unit::Bytes => i as u64,
                    Unit::Lines => self.text[..i].matches('\n').count() as u64,
                });
                if out.len() == 50 {
                    break;
                }
            }
            chars += 1;
            utf16 += c.len_utf16() as u64;
        }
        out
    }
}

/// A range in `unit`: from the start, to the end, whole, inside, on both sides of a 4-byte
/// scalar, past the end, reversed, or empty at the end.
fn range(rng: &mut Rng, naive: &Naive<'_>, astral: &[u64], unit: Unit) -> (u64, u64) {
    let len = naive.len(unit);
    let any = |rng: &mut Rng| rng.range(0, len + 1);
    match rng.range(0, 10) {
        0 => (0, any(rng)),
        1 => (any(rng), len),
        2 => (0, len),
        3 | 4 => {
            let (a, b) = (any(rng), any(rng));
            (a.min(b), a.max(b))
        }
        5 | 6 if !astral.is_empty() => {
            let p = astral[rng.range(0, astral.len() as u64) as usize];
            let a = p + rng.range(0, 5);
            let a = a.saturating_sub(rng.range(0, 2));
            (a, a + rng.range(0, 6))
        }
        7 => {
            let a = any(rng);
            (a, len + rng.range(1, 4))
        }
        8 => {
            let (a, b) = (any(rng), any(rng));
            if a == b { (len, len + 1) } else { (a.max(b), a.min(b)) }
        }
        _ => (len, len),
    }
}

/// Checks one read against naive slicing; returns the outcome for the statistics.
fn check(
    store: &Store,
    owner: &str,
    id: &BlobId,
    naive: &Naive<'_>,
    a: u64,
    b: u64,
    unit: Unit,
) -> Option<Why> {
    let got = store.read_context(owner, id, a..b, unit);
    let len = naive.len(unit);
    match (naive.slice(a, b, unit), got) {
        (Ok(want), Ok(got)) => {
            assert!(got == want, "{unit:?} {a}..{b} of a {len}-{} text: {got:?} != {want:?}", unit.as_str());
            None
        }
        (Err(why), Err(e)) => {
            let e = e.to_string();
            let expected = match why {
                Why::Reversed => "reversed".to_string(),
                Why::PastEnd => format!("holds {len} {}", unit.as_str()),
                Why::Splits => "splits".to_string(),
            };
            assert!(e.contains(&expected), "{unit:?} {a}..{b} ({why:?}): {e:?} lacks {expected:?}");
            Some(why)
        }
        (Ok(want), Err(e)) => {
            panic!("{unit:?} {a}..{b} of a {len}-{} text: {e} (want {want:?})", unit.as_str())
        }
        (Err(why), Ok(got)) => {
            panic!("{unit:?} {a}..{b} of a {len}-{} text ({why:?}): read {got:?}", unit.as_str())
        }
    }
}

#[test]
fn read_context_equals_naive_slicing_in_every_unit() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let mut rng = Rng::new(seed(0x5052_4f50));
    let mut texts = Vec::new();
    let (mut ok, mut reversed, mut past, mut splits, mut bytes) = (0u64, 0u64, 0u64, 0u64, 0usize);
    for _ in 0..TEXTS {
        let t = {
            let n = target_len(&mut rng);
            text(&mut rng, n)
        };
        bytes += t.len();
        let naive = Naive::new(&t);
        let a = s.archive("props", &t).unwrap();
        assert_eq!(
            (a.bytes, a.chars, a.utf16_units, a.lines),
            (naive.len(Unit::Bytes), naive.len(Unit::Chars), naive.len(Unit::Utf16), naive.len(Unit::Lines))
        );
        for unit in UNITS {
            let astral = naive.astral_positions(unit);
            for _ in 0..RANGES {
                let (x, y) = range(&mut rng, &naive, &astral, unit);
                match check(&s, "props", &a.id, &naive, x, y, unit) {
                    None => ok += 1,
                    Some(Why::Reversed) => reversed += 1,
                    Some(Why::PastEnd) => past += 1,
                    Some(Why::Splits) => splits += 1,
                }
            }
        }
        texts.push((a.id, t));
    }
    eprintln!(
        "{TEXTS} texts, {bytes} bytes: {ok} reads equal, errors: {splits} split, {past} past the end, \
         {reversed} reversed"
    );
    assert!(splits > 200 && past > 200 && reversed > 100, "the ranges must reach every error");

    // After a reopen (archives loaded from the log, not the cache), whole texts read back.
    s.close().unwrap();
    let s = store(dir.path());
    for (id, t) in &texts {
        let naive = Naive::new(t);
        for unit in UNITS {
            assert!(s.read_context("props", id, 0..naive.len(unit), unit).unwrap() == *t, "{unit:?}");
        }
    }
}

/// A random-ish text of about `n` bytes: CJK scalars (3 bytes each, hard to compress),
/// a newline now and then.
fn cjk(rng: &mut Rng, n: usize) -> String {
    let mut s = String::with_capacity(n + 4);
    while s.len() < n {
        let v = rng.next_u64();
        s.push(if v.is_multiple_of(64) {
            '\n'
        } else {
            char::from_u32(0x4E00 + (v >> 8) as u32 % 0x5000).unwrap()
        });
    }
    s
}

#[test]
fn ids_are_content_addresses_across_owners_repeats_and_previews() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let mut rng = Rng::new(seed(0x1D5));
    for i in 0..40 {
        let t = if i == 0 {
            String::new()
        } else {
            let n = target_len(&mut rng);
            text(&mut rng, n)
        };
        let a = s.archive("alice", &t).unwrap();
        assert_eq!(a.id, BlobId::of(t.as_bytes()));
        assert_eq!(s.archive("alice", &t).unwrap(), a);
        assert_eq!(s.archive("bob", &t).unwrap(), a);
        assert_eq!(s.archive_ref("bob", &a.id).unwrap(), a);
        for query in [None, Some("\n"), Some("中")] {
            let p = s.preview("alice", &a.id, 500, query).unwrap();
            if a.chars > 500 {
                assert!(p != t && p.contains(&a.id.to_string()), "a preview names its archive");
            } else {
                assert_eq!(p, t, "a text that fits is its own preview");
            }
            assert_eq!(s.archive("alice", &p).unwrap(), a, "preview of {} chars, query {query:?}", a.chars);
            let q = s.preview("bob", &a.id, 500, query).unwrap();
            assert_eq!(q, p);
            assert_eq!(s.archive("bob", &q).unwrap(), a);
        }
    }

    // A second owner's archive of 1 MB that is already stored adds no second copy.
    let big = cjk(&mut rng, 1 << 20);
    let before = s.stats().unwrap().log_bytes;
    let a = s.archive("alice", &big).unwrap();
    let after_alice = s.stats().unwrap().log_bytes;
    let b = s.archive("bob", &big).unwrap();
    let after_bob = s.stats().unwrap().log_bytes;
    eprintln!(
        "1 MB text ({} bytes): alice's archive grew the log by {} bytes, bob's by {}",
        big.len(),
        after_alice - before,
        after_bob - after_alice
    );
    assert_eq!(a, b);
    assert!(after_alice - before > big.len() as u64 / 3, "the first archive must store the text");
    assert!(after_bob - after_alice < 4096, "the second owner's archive stored a copy");
    for owner in ["alice", "bob"] {
        for unit in UNITS {
            let len = match unit {
                Unit::Chars => a.chars,
                Unit::Utf16 => a.utf16_units,
                Unit::Bytes => a.bytes,
                Unit::Lines => a.lines,
            };
            assert!(s.read_context(owner, &a.id, 0..len, unit).unwrap() == big);
        }
    }
}

#[test]
fn another_owners_archive_is_indistinguishable_from_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let mut rng = Rng::new(seed(0x0A11CE));
    let t = text(&mut rng, 20_000);
    let a = s.archive("alice", &t).unwrap();
    let never = BlobId::of(b"never archived");
    let plain = s.put_blob("o", b"a blob, not an archive").unwrap();
    let shape = |e: Error, id: &BlobId| {
        assert!(matches!(e, Error::NotFound { .. }), "{e:?}");
        e.to_string().replace(&id.to_string(), "<id>")
    };
    let want = shape(s.read_context("bob", &never, 0..1, Unit::Chars).unwrap_err(), &never);
    assert_eq!(shape(s.read_context("bob", &a.id, 0..1, Unit::Chars).unwrap_err(), &a.id), want);
    assert_eq!(shape(s.read_context("bob", &a.id, 0..0, Unit::Lines).unwrap_err(), &a.id), want);
    assert_eq!(shape(s.read_context("alice", &plain, 0..1, Unit::Bytes).unwrap_err(), &plain), want);
    assert_eq!(shape(s.preview("bob", &a.id, 100, None).unwrap_err(), &a.id), want);
    assert_eq!(shape(s.preview("bob", &never, 100, None).unwrap_err(), &never), want);
    assert_eq!(shape(s.archive_ref("bob", &a.id).unwrap_err(), &a.id), want);
    assert_eq!(shape(s.archive_ref("bob", &never).unwrap_err(), &never), want);

    // Bob pasting alice's preview (which names her archive) archives the preview text
    // itself and gains nothing.
    let p = s.preview("alice", &a.id, 300, None).unwrap();
    let b = s.archive("bob", &p).unwrap();
    assert_ne!(b.id, a.id);
    assert_eq!(b.id, BlobId::of(p.as_bytes()));
    assert_eq!(s.read_context("bob", &b.id, 0..b.bytes, Unit::Bytes).unwrap(), p);
    assert_eq!(shape(s.read_context("bob", &a.id, 0..1, Unit::Chars).unwrap_err(), &a.id), want);
    assert!(s.read_context("alice", &a.id, 0..a.bytes, Unit::Bytes).unwrap() == t);
}

/// A text that merely contains a preview (a log that quotes one, a preview with a line
/// added) is a different text: archiving it must store it, not return the quoted archive.
/// (Found by this test: `Store::archive` used to take any marker in the text as proof.)
#[test]
fn a_text_quoting_a_preview_archives_as_itself() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let mut rng = Rng::new(seed(0x9007E));
    let t = text(&mut rng, 20_000);
    let a = s.archive("alice", &t).unwrap();
    let p = s.preview("alice", &a.id, 300, None).unwrap();
    for quoting in [format!("$ cat previous-output.txt\n{p}"), format!("{p}exit code 1\n")] {
        let q = s.archive("alice", &quoting).unwrap();
        let back = s.read_context("alice", &q.id, 0..q.bytes, Unit::Bytes).unwrap();
        assert!(
            back == quoting,
            "archiving a text that quotes a preview returned {} ({} bytes)",
            q.id,
            q.bytes
        );
        assert_eq!(q.id, BlobId::of(quoting.as_bytes()));
    }
}
