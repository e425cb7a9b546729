//! The sparse offset index of an archive: every ~4 KiB of text, the offset of a character
//! boundary in bytes, Unicode scalar values, UTF-16 code units and lines. Converting a
//! position in any unit to a byte offset is a binary search plus a scan of at most one
//! stride: O(log n + stride), independent of where in the text the position is.

use std::borrow::Cow;
use std::ops::Range;

use crate::base::error::{Error, Result};

pub use crate::model::message::Unit;

/// Bytes of text between checkpoints.
pub(crate) const STRIDE: usize = 4096;

/// One checkpoint: the same character boundary counted in every unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Mark {
    pub bytes: u64,
    pub chars: u64,
    pub utf16: u64,
    /// `\n`s before this point.
    pub newlines: u64,
}

impl Mark {
    fn get(&self, unit: Unit) -> u64 {
        match unit {
            Unit::Chars => self.chars,
            Unit::Utf16 => self.utf16,
            Unit::Bytes => self.bytes,
            Unit::Lines => self.newlines,
        }
    }
}

/// Totals and checkpoints of one text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OffsetIndex {
    pub marks: Vec<Mark>,
    /// The end of the text, counted in every unit.
    pub end: Mark,
}

impl OffsetIndex {
    /// Builds the index of `text` in one pass.
    /// Runs of ASCII (most tool output) are counted a run at a time, up to the next mark: a
    /// mark falls on the first character boundary at or after each stride.
    pub(crate) fn build(text: &str) -> OffsetIndex {
        let bytes = text.as_bytes();
        let mut marks = vec![Mark::default()];
        let mut m = Mark::default();
        let mut next = STRIDE;
        let mut i = 0;
        while i < bytes.len() {
            if i >= next {
                marks.push(Mark { bytes: i as u64, ..m });
                next = i + STRIDE;
            }
            let run = &bytes[i..next.min(bytes.len())];
            let ascii = run.iter().position(|b| !b.is_ascii()).unwrap_or(run.len());
            if ascii > 0 {
                m.chars += ascii as u64;
                m.utf16 += ascii as u64;
                m.newlines += run[..ascii].iter().filter(|&&b| b == b'\n').count() as u64;
                i += ascii;
                continue;
            }
            let c = text[i..].chars().next().unwrap_or('\u{FFFD}');
            m.chars += 1;
            m.utf16 += c.len_utf16() as u64;
            i += c.len_utf8();
        }
        m.bytes = text.len() as u64;
        OffsetIndex { marks, end: m }
    }

    /// Number of lines: `\n`s, plus one for a last line without one.
    pub(crate) fn lines(&self, text_ends_with_newline: bool) -> u64 {
        if self.end.bytes == 0 { 0 } else { self.end.newlines + (!text_ends_with_newline) as u64 }
    }

    /// Total length of the text in `unit`.
    pub(crate) fn total(&self, unit: Unit, text: &str) -> u64 {
        match unit {
            Unit::Lines => self.lines(text.ends_with('\n')),
            u => self.end.get(u),
        }
    }

    /// Serializes as little-endian u64s: count, then each mark, then the end mark.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + 32 * (self.marks.len() + 1));
        out.extend_from_slice(&(self.marks.len() as u64).to_le_bytes());
        for m in self.marks.iter().chain(std::iter::once(&self.end)) {
            for v in [m.bytes, m.chars, m.utf16, m.newlines] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// Reads what [`OffsetIndex::encode`] wrote.
    pub(crate) fn decode(b: &[u8]) -> std::result::Result<OffsetIndex, String> {
        let u = |i: usize| -> Option<u64> {
            let s = b.get(i * 8..i * 8 + 8)?;
            let mut a = [0u8; 8];
            a.copy_from_slice(s);
            Some(u64::from_le_bytes(a))
        };
        let n = u(0).ok_or("offset index is empty")? as usize;
        if b.len() != 8 + 32 * (n + 1) {
            return Err(format!(
                "offset index: {n} marks need {} bytes, found {}",
                8 + 32 * (n + 1),
                b.len()
            ));
        }
        let mark = |k: usize| -> Option<Mark> {
            let base = 1 + 4 * k;
            Some(Mark { bytes: u(base)?, chars: u(base + 1)?, utf16: u(base + 2)?, newlines: u(base + 3)? })
        };
        let marks = (0..n).map(mark).collect::<Option<Vec<_>>>().ok_or("offset index truncated")?;
        let end = mark(n).ok_or("offset index truncated")?;
        Ok(OffsetIndex { marks, end })
    }

    /// The bytes [`OffsetIndex::byte_of_in`] reads to find position `pos` in `unit` (empty
    /// when it reads none), so that a caller can fetch them ahead.
    pub(crate) fn window(&self, pos: u64, unit: Unit, ends_with_newline: bool) -> Range<u64> {
        let len = self.end.bytes;
        let stretch = |k: usize| self.marks[k].bytes..self.marks.get(k + 1).map_or(len, |n| n.bytes);
        match unit {
            Unit::Bytes if pos < len => pos.saturating_sub(3)..pos + 1,
            Unit::Bytes => 0..0,
            Unit::Lines if pos == 0 || pos >= self.lines(ends_with_newline) => 0..0,
            Unit::Lines => stretch(self.marks.partition_point(|m| m.newlines < pos).saturating_sub(1)),
            u if pos > self.end.get(u) => 0..0,
            u => stretch(self.marks.partition_point(|m| m.get(u) <= pos).saturating_sub(1)),
        }
    }

    /// The byte offset of position `pos` in `unit`. Errors say where a position splits a
    /// character and what the length is when it is past the end.
    pub(crate) fn byte_of(&self, text: &str, pos: u64, unit: Unit) -> Result<usize> {
        let bytes = text.as_bytes();
        self.byte_of_in(pos, unit, text.ends_with('\n'), &mut |r| Ok(Cow::Borrowed(&bytes[r])), None)
    }

    /// [`OffsetIndex::byte_of`] for a text that is not in memory: `window` returns the
    /// bytes of a range of it. Only the bytes between two marks (one stride) around `pos`
    /// are asked for, so a chunked archive reads one or two chunks per bound. With `dense`
    /// (sub-marks of this index, kept in memory), a stride already visited is entered at
    /// the sub-mark before `pos` and at most [`SUB`] bytes are scanned.
    pub(crate) fn byte_of_in<'a>(
        &self,
        pos: u64,
        unit: Unit,
        ends_with_newline: bool,
        window: &mut dyn FnMut(Range<usize>) -> Result<Cow<'a, [u8]>>,
        dense: Option<&Dense>,
    ) -> Result<usize> {
        let total = match unit {
            Unit::Lines => self.lines(ends_with_newline),
            u => self.end.get(u),
        };
        if pos > total {
            return Err(Error::InvalidArgument(format!(
                "position {pos} is past the end: the archive holds {total} {}",
                unit.as_str()
            )));
        }
        let len = self.end.bytes as usize;
        // The stretch between the mark at or before the target and the next one.
        let stretch = |k: usize| -> (Mark, usize) {
            let m = self.marks[k];
            (m, self.marks.get(k + 1).map_or(len, |n| n.bytes as usize))
        };
        match unit {
            Unit::Bytes => {
                let p = pos as usize;
                if p == len {
                    return Ok(p);
                }
                let from = p.saturating_sub(3);
                let w = window(from..p + 1)?;
                if w[p - from] & 0xC0 == 0x80 {
                    let start = (0..p - from).rev().find(|&i| w[i] & 0xC0 != 0x80).map_or(0, |i| from + i);
                    return Err(Error::InvalidArgument(format!(
                        "byte offset {pos} splits a UTF-8 sequence: the character starts at byte {start}"
                    )));
                }
                Ok(p)
            }
            Unit::Lines => {
                if pos == 0 {
                    return Ok(0);
                }
                if pos == total {
                    return Ok(len);
                }
                // The start of line `pos` is just after the `pos`-th newline: start from the
                // last mark with fewer newlines than that; the next mark has at least `pos`.
                let k = match dense {
                    Some(d) if d.cols[2].len() == self.marks.len() => d.stride_of(pos, unit),
                    _ => self.marks.partition_point(|m| m.newlines < pos).saturating_sub(1),
                };
                let (mut m, mut end) = stretch(k);
                if let Some(d) = dense {
                    (m, end) = d.enter(self, k, end, pos, Unit::Lines, window)?;
                }
                let w = window(m.bytes as usize..end)?;
                let mut seen = m.newlines;
                // Whole blocks first, while the target lies beyond them.
                let mut from = 0;
                while let Some(block) = w.get(from..from + BLOCK) {
                    let n = newlines_in_block(block);
                    if seen + n >= pos {
                        break;
                    }
                    seen += n;
                    from += BLOCK;
                }
                for (i, b) in w.iter().enumerate().skip(from) {
                    if *b == b'\n' {
                        seen += 1;
                        if seen == pos {
                            return Ok(m.bytes as usize + i + 1);
                        }
                    }
                }
                Ok(end)
            }
            Unit::Chars | Unit::Utf16 => {
                let k = match dense {
                    Some(d) if d.cols[0].len() == self.marks.len() => d.stride_of(pos, unit),
                    _ => self.marks.partition_point(|m| m.get(unit) <= pos).saturating_sub(1),
                };
                let (mut m, mut end) = stretch(k);
                if let Some(d) = dense {
                    (m, end) = d.enter(self, k, end, pos, unit, window)?;
                }
                scan_units(&window(m.bytes as usize..end)?, m, end, pos, unit)
            }
        }
    }

    /// The byte offsets of both bounds of `range` in `unit`: what two calls of
    /// [`OffsetIndex::byte_of_in`] give, errors included, with less work when the range is
    /// counted in chars or UTF-16 units and `dense` is at hand. The start's stride is found
    /// from an interpolated guess checked against its neighbours, the end's by counting the
    /// strides after the start's (a context read spans a few strides); both entries (stride,
    /// sub-mark) are found before either window is scanned, so that the two scans' first
    /// loads do not wait on each other. A guess that misses falls back to a binary search.
    pub(crate) fn range_in<'a>(
        &self,
        range: Range<u64>,
        unit: Unit,
        ends_with_newline: bool,
        window: &mut dyn FnMut(Range<usize>) -> Result<Cow<'a, [u8]>>,
        dense: Option<&Dense>,
    ) -> Result<(usize, usize)> {
        let col = match unit {
            Unit::Chars => 0,
            Unit::Utf16 => 1,
            Unit::Bytes | Unit::Lines => usize::MAX,
        };
        let fast = dense
            .filter(|d| col < 2 && d.cols[col].len() == self.marks.len() && range.end <= self.end.get(unit));
        let Some(d) = fast else {
            // Other units, and a bound past the end (whose error follows the start's own).
            let a = self.byte_of_in(range.start, unit, ends_with_newline, window, dense)?;
            let b = self.byte_of_in(range.end, unit, ends_with_newline, window, dense)?;
            return Ok((a, b));
        };
        let len = self.end.bytes as usize;
        let stop = |k: usize| self.marks.get(k + 1).map_or(len, |n| n.bytes as usize);
        let k0 = d.stride_near(col, range.start);
        let k1 = d.stride_after(col, range.end, k0);
        let (m0, e0) = d.enter(self, k0, stop(k0), range.start, unit, window)?;
        let (m1, e1) = d.enter(self, k1, stop(k1), range.end, unit, window)?;
        let (w0, w1) = (window(m0.bytes as usize..e0)?, window(m1.bytes as usize..e1)?);
        // The end's first bytes asked for now (a load whose value is not waited for), so that
        // the end's scan does not start with a second miss after the start's.
        std::hint::black_box(w1.first().copied());
        let a = scan_units(&w0, m0, e0, range.start, unit)?;
        let b = scan_units(&w1, m1, e1, range.end, unit)?;
        Ok((a, b))
    }
}

/// The byte offset of position `pos` (chars or UTF-16 units), found in `bytes`: the text from
/// mark (or sub-mark) `m` up to byte `end`, where the next mark or the text's end lies unless
/// the target lies before it. Continuation bytes at the start belong to a character counted
/// before `m`.
fn scan_units(bytes: &[u8], m: Mark, end: usize, pos: u64, unit: Unit) -> Result<usize> {
    let base = m.bytes as usize;
    // Skip whole 8-byte words while the target lies beyond them: a word's units are its
    // non-continuation bytes (plus one per 4-byte lead for UTF-16).
    let mut at = m.get(unit);
    let mut b = 0;
    // Whole blocks first (counted a vector at a time), then words, then bytes.
    while let Some(block) = bytes.get(b..b + BLOCK) {
        let n = units_in_block(block, unit);
        if at + n >= pos {
            break;
        }
        at += n;
        b += BLOCK;
    }
    while b + 8 <= bytes.len() {
        let mut a = [0u8; 8];
        a.copy_from_slice(&bytes[b..b + 8]);
        let w = u64::from_le_bytes(a);
        let n = units_in_word(w, unit);
        if unit == Unit::Chars && at + n > pos {
            // The target's lead byte is in this word: found without a byte loop.
            return Ok(base + b + nth_lead(w, pos - at));
        }
        if at + n >= pos && unit != Unit::Chars {
            break;
        }
        at += n;
        b += 8;
    }
    // Then byte by byte. Continuation bytes at the start belong to a character whose lead
    // byte was counted in the words skipped.
    while b < bytes.len() {
        let byte = bytes[b];
        if byte & 0xC0 == 0x80 {
            b += 1;
            continue;
        }
        if at == pos {
            return Ok(base + b);
        }
        let w = if unit == Unit::Utf16 && byte >= 0xF0 { 2 } else { 1 };
        if at + w > pos {
            return Err(Error::InvalidArgument(format!(
                "UTF-16 offset {pos} splits a surrogate pair: the character spans {at}..{}",
                at + w
            )));
        }
        at += w;
        b += 1;
    }
    // The target is the next mark itself (or the end of the text).
    Ok(end)
}

/// Bytes between sub-marks.
pub(crate) const SUB: usize = 256;

/// Sub-marks of an offset index, kept in memory only (never stored): for each stride
/// visited, the counts at every [`SUB`] bytes of it, computed the first time a position in
/// it is looked up. They cut the scan of a stride from up to 4 KiB to at most `SUB` bytes.
/// Sub-marks need not fall on character boundaries: a scan from one skips the continuation
/// bytes it starts with (their character was counted before it).
#[derive(Debug, Clone, Default)]
pub(crate) struct Dense {
    /// Per stride, the counts (chars, UTF-16 units, newlines) from its mark to each sub-mark,
    /// inline so that a lookup touches one or two cache lines; `u16::MAX` past its end.
    strides: Vec<std::sync::OnceLock<[[u16; 3]; SUBS]>>,
    /// The marks' chars, UTF-16 units and newlines, one column each: a binary search for a
    /// stride touches a third of the memory a search of the marks does.
    cols: [Vec<u64>; 3],
    /// Strides per char and per UTF-16 unit over the whole text: the first guess of
    /// [`Dense::stride_near`].
    scale: [f64; 2],
}

/// Sub-marks per stride: a stride is at most `STRIDE + 3` bytes.
const SUBS: usize = STRIDE.div_ceil(SUB) + 1;

impl Dense {
    /// Room for the sub-marks of `index`.
    pub(crate) fn for_index(index: &OffsetIndex) -> Dense {
        Dense {
            strides: (0..index.marks.len()).map(|_| std::sync::OnceLock::new()).collect(),
            cols: [
                index.marks.iter().map(|m| m.chars).collect(),
                index.marks.iter().map(|m| m.utf16).collect(),
                index.marks.iter().map(|m| m.newlines).collect(),
            ],
            scale: [index.end.chars, index.end.utf16].map(|t| index.marks.len() as f64 / (t as f64 + 1.0)),
        }
    }

    /// [`Dense::stride_of`] for chars (`col` 0) or UTF-16 units (1): the stride a uniform
    /// text would put `pos` in, moved by at most a few strides after a look at its
    /// neighbours (one or two cache lines of the column), or a binary search when the text
    /// is too uneven for the guess.
    fn stride_near(&self, col: usize, pos: u64) -> usize {
        let c = &self.cols[col];
        // A float guess (truncated, saturating): never past the end for `pos` ≤ the total.
        let guess = (pos as f64 * self.scale[col]) as usize;
        let from = guess.saturating_sub(NEAR / 2).min(c.len().saturating_sub(1));
        near(c, from, pos).unwrap_or_else(|| c.partition_point(|&x| x <= pos).saturating_sub(1))
    }

    /// The stride of `pos` (chars or UTF-16 units, as for [`Dense::stride_near`]) at or after
    /// stride `from`, which starts at or before `pos`: counted among the next few strides, or
    /// searched for among the rest.
    fn stride_after(&self, col: usize, pos: u64, from: usize) -> usize {
        let c = &self.cols[col];
        near(c, from, pos).unwrap_or_else(|| {
            let rest = c.get(from..).unwrap_or_default();
            from + rest.partition_point(|&x| x <= pos).saturating_sub(1)
        })
    }

    /// [`OffsetIndex::stride_of`], searching a column.
    fn stride_of(&self, pos: u64, unit: Unit) -> usize {
        match unit {
            Unit::Chars => self.cols[0].partition_point(|&c| c <= pos),
            Unit::Utf16 => self.cols[1].partition_point(|&c| c <= pos),
            Unit::Lines => self.cols[2].partition_point(|&c| c < pos),
            Unit::Bytes => 1,
        }
        .saturating_sub(1)
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.strides.len() * (std::mem::size_of::<std::sync::OnceLock<[[u16; 3]; SUBS]>>() + 24)
    }

    /// The last sub-mark of stride `k` (which ends at byte `end`) where a scan for `pos` in
    /// `unit` may start: the last one that counts fewer than `pos` (or the stride's mark), and
    /// the byte where the scan may stop. The next sub-mark counts at least `pos`, so the target
    /// starts before it or (a sub-mark may fall inside a character) within the 3 bytes after
    /// it: the scan window is at most `SUB + 4` bytes, not the rest of the stride, which
    /// matters when the stride spans two chunks of a chunked archive.
    fn enter<'a>(
        &self,
        index: &OffsetIndex,
        k: usize,
        end: usize,
        pos: u64,
        unit: Unit,
        window: &mut dyn FnMut(Range<usize>) -> Result<Cow<'a, [u8]>>,
    ) -> Result<(Mark, usize)> {
        let m = index.marks[k];
        let Some(cell) = self.strides.get(k) else { return Ok((m, end)) };
        if cell.get().is_none() {
            if end.saturating_sub(m.bytes as usize) > SUBS * SUB {
                return Ok((m, end));
            }
            let w = window(m.bytes as usize..end)?;
            let mut subs = [[u16::MAX; 3]; SUBS];
            // The stride's mark itself, also when the stride is empty (an empty text).
            subs[0] = [0; 3];
            let mut at = [0u64; 3];
            for (j, block) in w.chunks(SUB).enumerate() {
                subs[j] = at.map(|v| v as u16);
                at[0] += units_in(block, Unit::Chars);
                at[1] += units_in(block, Unit::Utf16);
                at[2] += newlines_in(block);
            }
            let _ = cell.set(subs);
        }
        // Borrowed, not copied: a stride's sub-marks are about 100 bytes.
        let Some(subs) = cell.get() else { return Ok((m, end)) };
        let (col, base) = match unit {
            Unit::Chars => (0, m.chars),
            Unit::Utf16 => (1, m.utf16),
            Unit::Lines => (2, m.newlines),
            Unit::Bytes => return Ok((m, end)),
        };
        let want = pos.saturating_sub(base);
        let j = subs.partition_point(|s| u64::from(s[col]) < want).saturating_sub(1);
        let s = subs[j];
        let stop = match subs.get(j + 1) {
            Some(next) if next[col] != u16::MAX => end.min(m.bytes as usize + (j + 1) * SUB + 4),
            _ => end,
        };
        let at = Mark {
            bytes: m.bytes + (j * SUB) as u64,
            chars: m.chars + u64::from(s[0]),
            utf16: m.utf16 + u64::from(s[1]),
            newlines: m.newlines + u64::from(s[2]),
        };
        Ok((at, stop))
    }
}

/// Strides a guess is checked against: a cache line of a column.
const NEAR: usize = 8;

/// The last index of sorted column `c` whose value is at most `pos`, when it is one of the
/// [`NEAR`] from `from` and the next is known to exceed `pos` (all of them counted, no branch
/// per stride); `None` when it lies elsewhere.
fn near(c: &[u64], from: usize, pos: u64) -> Option<usize> {
    let w = c.get(from..c.len().min(from + NEAR))?;
    if *w.first()? > pos || c.get(from + NEAR).is_some_and(|&next| next <= pos) {
        return None;
    }
    Some(from + w[1..].iter().map(|&x| usize::from(x <= pos)).sum::<usize>())
}

/// Units of `unit` (chars or UTF-16) whose first byte lies in `bytes`.
fn units_in(bytes: &[u8], unit: Unit) -> u64 {
    bytes.chunks(BLOCK).map(|b| units_in_block(b, unit)).sum()
}

/// `\n`s in `bytes`.
fn newlines_in(bytes: &[u8]) -> u64 {
    bytes.chunks(BLOCK).map(newlines_in_block).sum()
}

/// Bytes of text counted at a time while skipping towards a position.
const BLOCK: usize = 64;

/// Units of `unit` (chars or UTF-16) whose first byte lies in `block` (at most 255 bytes).
/// Written as plain loops over bytes with byte counters, which the compiler vectorizes.
fn units_in_block(block: &[u8], unit: Unit) -> u64 {
    if unit == Unit::Chars {
        // Leads only: the loop below counts 4-byte leads beside them.
        let mut leads = 0u8;
        for &x in block {
            leads += u8::from((x as i8) >= -64);
        }
        return u64::from(leads);
    }
    let mut leads = 0u8;
    let mut four = 0u8;
    for &x in block {
        // Every byte but a continuation byte (10xxxxxx) starts a character.
        leads += u8::from((x as i8) >= -64);
        // A 4-byte lead (11110xxx) is a surrogate pair in UTF-16.
        four += u8::from(x >= 0xF0);
    }
    u64::from(leads) + if unit == Unit::Utf16 { u64::from(four) } else { 0 }
}

/// `\n`s in `block` (at most 255 bytes).
fn newlines_in_block(block: &[u8]) -> u64 {
    let mut n = 0u8;
    for &x in block {
        n += u8::from(x == b'\n');
    }
    u64::from(n)
}

/// The index (0..8) of the byte of `w` that starts its `r`-th character (counting from 0;
/// `r` is less than the characters starting in `w`).
fn nth_lead(w: u64, r: u64) -> usize {
    const HI: u64 = 0x8080_8080_8080_8080;
    const ONES: u64 = 0x0101_0101_0101_0101;
    // 1 in each byte that is not a continuation byte (10xxxxxx), then in byte i the leads of
    // bytes 0..=i (at most 8: the multiply's byte sums never carry).
    let upto = ((!(w & !(w << 1)) & HI) >> 7).wrapping_mul(ONES);
    // The bytes with at most `r` leads up to them are those before the `r`-th lead: each byte
    // of `0x80 + r - upto` keeps bit 7 exactly then (values 0x78..=0x87, no borrow).
    bytes_set(((0x80 + r) * ONES - upto) & HI) as usize
}

/// Units of `unit` (chars or UTF-16) whose first byte lies in the 8 bytes of `w`.
fn units_in_word(w: u64, unit: Unit) -> u64 {
    const HI: u64 = 0x8080_8080_8080_8080;
    // Continuation bytes are 10xxxxxx: bit 7 set, bit 6 clear.
    let cont = (w & !(w << 1)) & HI;
    let leads = 8 - bytes_set(cont);
    if unit == Unit::Chars {
        return leads;
    }
    // 4-byte leads are 11110xxx: bits 7..4 set; each is a surrogate pair in UTF-16.
    let four = w & (w << 1) & (w << 2) & (w << 3) & HI;
    leads + bytes_set(four)
}

/// How many bytes of `m` have bit 7 set, the only bits `m` may have: the eight 0/1 values
/// summed into the top byte by one multiply (the baseline x86-64 target has no `popcnt`
/// instruction, and `count_ones` is a dozen instructions without it).
fn bytes_set(m: u64) -> u64 {
    ((m >> 7).wrapping_mul(0x0101_0101_0101_0101)) >> 56
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(text: &str, a: u64, b: u64, unit: Unit) -> Option<String> {
        match unit {
            Unit::Chars => {
                let v: Vec<char> = text.chars().collect();
                (b as usize <= v.len()).then(|| v[a as usize..b as usize].iter().collect())
            }
            Unit::Bytes => text.get(a as usize..b as usize).map(str::to_string),
            Unit::Utf16 => {
                let v: Vec<u16> = text.encode_utf16().collect();
                v.get(a as usize..b as usize).and_then(|s| String::from_utf16(s).ok())
            }
            Unit::Lines => {
                let lines: Vec<&str> = text.split_inclusive('\n').collect();
                lines.get(a as usize..b as usize).map(|l| l.concat())
            }
        }
    }

    fn slice(idx: &OffsetIndex, text: &str, a: u64, b: u64, unit: Unit) -> Option<String> {
        let x = idx.byte_of(text, a, unit).ok()?;
        let y = idx.byte_of(text, b, unit).ok()?;
        Some(text[x..y].to_string())
    }

    #[test]
    fn the_index_counts_every_character_boundary_like_a_walk_over_the_characters() {
        let walk = |text: &str| {
            let mut marks = vec![Mark::default()];
            let mut m = Mark::default();
            let mut next = STRIDE;
            for (i, c) in text.char_indices() {
                if i >= next {
                    marks.push(Mark { bytes: i as u64, ..m });
                    next = i + STRIDE;
                }
                m.chars += 1;
                m.utf16 += c.len_utf16() as u64;
                m.newlines += u64::from(c == '\n');
            }
            m.bytes = text.len() as u64;
            OffsetIndex { marks, end: m }
        };
        let mut texts = vec![String::new(), "a".into(), "\n".repeat(STRIDE * 2 + 1), "é".repeat(STRIDE)];
        // Multi-byte characters straddling every stride boundary, and runs of ASCII between.
        for k in 0..8 {
            let mut t = "x".repeat(STRIDE - k);
            t.push_str(&"日本\n🦀ab".repeat(900));
            t.push_str(&"line\n".repeat(k * 300));
            texts.push(t);
        }
        for t in &texts {
            assert_eq!(OffsetIndex::build(t), walk(t), "text of {} bytes", t.len());
        }
    }

    #[test]
    fn every_unit_matches_naive_slicing_on_tricky_text() {
        let piece = "a\u{0}é\r\n👩‍👩‍👧 e\u{301} 中文 עברית 𐍈\n\r\u{10FFFF}\u{FFFF}\u{80}x";
        let text = piece.repeat(700); // several strides
        let idx = OffsetIndex::build(&text);
        assert!(idx.marks.len() > 3);
        let mut x = 7u64;
        for unit in [Unit::Chars, Unit::Utf16, Unit::Bytes, Unit::Lines] {
            let total = idx.total(unit, &text);
            for _ in 0..400 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let a = x % (total + 1);
                let b = a + (x >> 20) % (total - a + 1);
                let want = naive(&text, a, b, unit);
                assert_eq!(slice(&idx, &text, a, b, unit), want, "{unit:?} {a}..{b}");
            }
        }
    }

    #[test]
    fn sub_marks_find_the_same_offsets_and_the_same_errors_as_a_scan_of_the_stride_at_every_position() {
        let piece = "a\u{0}é\r\n👩‍👩‍👧 e\u{301} 中文 עברית 𐍈\n\r\u{10FFFF}\u{FFFF}\u{80}x";
        let text = piece.repeat(300);
        let idx = OffsetIndex::build(&text);
        let dense = Dense::for_index(&idx);
        let bytes = text.as_bytes();
        let nl = text.ends_with('\n');
        // Round 0 fills the sub-marks of each stride on its first visit; round 1 finds them
        // filled. Every position is tried (those at a sub-mark's count are where a scan window
        // cut at the next sub-mark could miss its target), and past the end.
        for round in 0..2 {
            for unit in [Unit::Chars, Unit::Utf16, Unit::Bytes, Unit::Lines] {
                let total = idx.total(unit, &text);
                let mut widest = 0;
                for p in 0..=total + 1 {
                    let mut w = |r: Range<usize>| {
                        widest = widest.max(r.len());
                        Ok(Cow::Borrowed(&bytes[r]))
                    };
                    let with = idx.byte_of_in(p, unit, nl, &mut w, Some(&dense)).map_err(|e| e.to_string());
                    let without = idx.byte_of(&text, p, unit).map_err(|e| e.to_string());
                    assert_eq!(with, without, "round {round}, {unit:?} {p}");
                }
                if round == 1 && unit != Unit::Bytes {
                    // With sub-marks filled, a lookup reads at most one sub-stride (and the 3
                    // bytes a character may run past its end), never the rest of the stride.
                    assert!(widest <= SUB + 4, "{unit:?}: a lookup read {widest} bytes");
                }
            }
        }
    }

    #[test]
    fn both_bounds_found_together_are_what_two_plain_lookups_find_at_every_boundary() {
        // Uniform text, where the interpolated guess lands near (every start), and a long
        // ASCII run then a long run of 4-byte characters, where the guess misses by more than
        // it looks around and the binary search takes over (every 7th start, and every mark).
        let piece = "a\u{0}é\r\n👩‍👩‍👧 e\u{301} 中文 עברית 𐍈\n\r\u{10FFFF}\u{FFFF}\u{80}x";
        let uneven = format!("{}{}{}", "ascii ".repeat(8000), "🦀".repeat(12_000), piece.repeat(40));
        for (text, step) in [(piece.repeat(250), 1), (uneven, 7), (String::new(), 1), ("é".into(), 1)] {
            let idx = OffsetIndex::build(&text);
            let bytes = text.as_bytes();
            let nl = text.ends_with('\n');
            let dense = Dense::for_index(&idx);
            for round in 0..2 {
                for unit in [Unit::Chars, Unit::Utf16] {
                    let total = idx.total(unit, &text);
                    let at_marks =
                        idx.marks.iter().flat_map(|m| [m.get(unit).saturating_sub(1), m.get(unit)]);
                    let mut starts: Vec<u64> = (0..=total).step_by(step).chain(at_marks).collect();
                    starts.sort_unstable();
                    starts.dedup();
                    for p in starts {
                        // Ends: the start itself, its neighbour, a context read's length, the
                        // text's end and past it, and every mark of the next strides (a range
                        // ending exactly at a mark) with the positions either side of it.
                        let k = idx.marks.partition_point(|m| m.get(unit) <= p);
                        let marks = idx.marks.iter().skip(k).take(9).map(|m| m.get(unit));
                        let mut ends = vec![p, p + 1, p + 4000, total, total + 1];
                        ends.extend(marks.flat_map(|m| [m.saturating_sub(1), m, m + 1]));
                        for q in ends.into_iter().filter(|&q| q >= p) {
                            let mut w = |r: Range<usize>| Ok(Cow::Borrowed(&bytes[r]));
                            let together = idx.range_in(p..q, unit, nl, &mut w, Some(&dense));
                            let plain = idx
                                .byte_of(&text, p, unit)
                                .and_then(|a| Ok((a, idx.byte_of(&text, q, unit)?)));
                            assert_eq!(
                                together.map_err(|e| e.to_string()),
                                plain.map_err(|e| e.to_string()),
                                "round {round}, {unit:?} {p}..{q} of a text of {} bytes",
                                text.len()
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_nth_lead_of_a_word_is_the_byte_a_walk_finds_for_every_lead_pattern() {
        // Every pattern of lead and continuation bytes in a word.
        for pattern in 0u32..256 {
            let w =
                (0..8).fold(0u64, |w, i| w | (if pattern >> i & 1 == 1 { 0x41 } else { 0x80 }) << (8 * i));
            let leads: Vec<usize> = (0..8).filter(|i| pattern >> i & 1 == 1).collect();
            for (r, &at) in leads.iter().enumerate() {
                assert_eq!(nth_lead(w, r as u64), at, "pattern {pattern:08b}, lead {r}");
            }
        }
    }

    #[test]
    fn every_char_position_is_the_byte_a_walk_over_the_characters_gives() {
        // Every alignment of multibyte characters within the 8-byte words a lookup skips.
        let piece = "a\u{0}é\r\n👩‍👩‍👧 e\u{301} 中文 עברית 𐍈\n\r\u{10FFFF}\u{FFFF}\u{80}x";
        let text = piece.repeat(300);
        let idx = OffsetIndex::build(&text);
        let dense = Dense::for_index(&idx);
        let bytes = text.as_bytes();
        let walk: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
        for round in 0..2 {
            for (p, &want) in walk.iter().enumerate() {
                let mut w = |r: Range<usize>| Ok(Cow::Borrowed(&bytes[r]));
                let got = idx.byte_of_in(p as u64, Unit::Chars, false, &mut w, Some(&dense)).unwrap();
                assert_eq!(got, want, "round {round}, char {p}");
                assert_eq!(
                    idx.byte_of(&text, p as u64, Unit::Chars).unwrap(),
                    want,
                    "char {p} without sub-marks"
                );
            }
        }
    }

    #[test]
    fn encode_decode_round_trips_and_overhead_is_under_one_percent() {
        let text = "x".repeat(10 << 20);
        let idx = OffsetIndex::build(&text);
        let enc = idx.encode();
        assert_eq!(OffsetIndex::decode(&enc).unwrap(), idx);
        assert!((enc.len() as f64) < text.len() as f64 * 0.01, "{} bytes", enc.len());
        assert!(OffsetIndex::decode(&enc[..enc.len() - 1]).is_err());
    }

    #[test]
    fn errors_say_where_and_how_long() {
        let text = "a😀b";
        let idx = OffsetIndex::build(text);
        let e = idx.byte_of(text, 2, Unit::Utf16).unwrap_err().to_string();
        assert!(e.contains("splits a surrogate pair") && e.contains("1..3"), "{e}");
        let e = idx.byte_of(text, 2, Unit::Bytes).unwrap_err().to_string();
        assert!(e.contains("starts at byte 1"), "{e}");
        let e = idx.byte_of(text, 4, Unit::Chars).unwrap_err().to_string();
        assert!(e.contains("holds 3 chars"), "{e}");
    }
}
