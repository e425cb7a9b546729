//! Previews, the one builder of them all (a message's kept preview, the guard's, a task
//! text's under a checkpoint, `Store::preview`): head and tail of an archived text (and,
//! with a query, the lines that match), with a marker that says the text is incomplete,
//! names the archive and the ranges shown, gives the total length and says how to read more.

use super::offsets::OffsetIndex;
use super::ref_of;
use crate::base::blob::BlobId;
#[cfg(test)]
use crate::kernel::options::DEFAULT_MARKER;
use crate::model::message::ArchiveRef;

fn fill(template: &str, id: &str, total_chars: u64, total_lines: u64, shown: &str, omitted: u64) -> String {
    template
        .replace("{id}", id)
        .replace("{total_chars}", &total_chars.to_string())
        .replace("{total_lines}", &total_lines.to_string())
        .replace("{shown}", shown)
        .replace("{omitted}", &omitted.to_string())
}

/// Builds the preview of `text` in at most about `max_chars` characters plus the marker.
/// A text that fits is returned whole, without a marker (it is not incomplete).
pub(crate) fn build(
    text: &str,
    idx: &OffsetIndex,
    id: &str,
    max_chars: usize,
    query: Option<&str>,
    template: &str,
) -> String {
    let total = idx.end.chars;
    let lines = idx.lines(text.ends_with('\n'));
    if total as usize <= max_chars {
        return text.to_string();
    }
    let budget = max_chars as u64;
    let (head_n, mid_n) = match query {
        Some(q) if !q.is_empty() => (budget * 2 / 5, budget / 5),
        _ => (budget * 3 / 5, 0),
    };
    let tail_n = budget - head_n - mid_n;
    let char_byte = |c: u64| idx.byte_of(text, c, super::Unit::Chars).unwrap_or(text.len());
    let head_end = char_byte(head_n);
    let tail_start_char = total - tail_n;
    let tail_start = char_byte(tail_start_char);
    let mut shown = vec![format!("0..{head_n}")];
    let mut middle = String::new();
    let mut mid_chars = 0u64;
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        // Matching lines strictly between head and tail, each with its char range.
        let body = &text[head_end..tail_start];
        let mut char_at = head_n;
        for line in body.split_inclusive('\n') {
            let n = line.chars().count() as u64;
            if line.contains(q) && mid_chars + n <= mid_n {
                middle.push_str(line);
                if !line.ends_with('\n') {
                    middle.push('\n');
                }
                shown.push(format!("{char_at}..{}", char_at + n));
                mid_chars += n;
            }
            char_at += n;
        }
    }
    shown.push(format!("{tail_start_char}..{total}"));
    let omitted = total - head_n - tail_n - mid_chars;
    let marker = fill(template, id, total, lines, &shown.join(", "), omitted);
    let mut out =
        String::with_capacity(head_end + middle.len() + (text.len() - tail_start) + marker.len() + 4);
    out.push_str(&text[..head_end]);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&marker);
    out.push('\n');
    out.push_str(&middle);
    out.push_str(&text[tail_start..]);
    out
}

/// True when `text` is a preview of `original` as [`build`] makes them: a head of the
/// original, the marker line, then (with a query) lines of the original, then a tail of the
/// original. A text that merely quotes a preview (a `cat` of a file holding one, or a
/// preview with more output after it) is not one.
pub(crate) fn is_preview_of(text: &str, original: &str, template: &str) -> bool {
    let Some(prefix) = template.split("{id}").next().filter(|p| !p.is_empty()) else { return false };
    let Some(p) = text.find(prefix) else { return false };
    let marker_end = text[p..].find('\n').map_or(text.len(), |i| p + i + 1);
    let before = &text[..p];
    let head_ok = original.starts_with(before)
        || before
            .strip_suffix('\n')
            .is_some_and(|h| original.starts_with(h) && !original[h.len()..].starts_with('\n'));
    if !head_ok || text.len() >= original.len() + template.len() + 64 {
        return false;
    }
    let after = &text[marker_end..];
    let mut k = 0;
    loop {
        let middle_ok = after[..k].split_inclusive('\n').all(|l| original.contains(l.trim_end_matches('\n')));
        if middle_ok && original.ends_with(&after[k..]) {
            return true;
        }
        match after[k..].find('\n') {
            Some(i) => k += i + 1,
            None => return false,
        }
    }
}

/// If `text` carries a preview marker built from `template`, the archive id it names.
pub(crate) fn marked_id(text: &str, template: &str) -> Option<String> {
    let prefix = template.split("{id}").next()?;
    if prefix.contains('{') || prefix.is_empty() {
        return None;
    }
    let at = text.find(prefix)? + prefix.len();
    let id = text.get(at..at + 64)?;
    id.bytes().all(|b| b.is_ascii_hexdigit()).then(|| id.to_string())
}

/// The guard's preview of an inline text in about `max_chars` characters, and the reference
/// it names (the text's content address, readable through [`inline_text`]): the text's offset
/// index is built once for both.
pub fn preview_inline(text: &str, max_chars: usize, template: &str) -> (ArchiveRef, String) {
    let idx = OffsetIndex::build(text);
    let id = BlobId::of(text.as_bytes());
    let r = ref_of(&id, text, &idx);
    (r, build(text, &idx, &id.to_string(), max_chars, None, template))
}

/// What appending `text` as a tool result over the archive threshold derives, without a
/// store: its reference, its preview in about `preview_chars` characters (what the message
/// keeps) and the guard's preview in about `guard_chars` (what a view sends in its place),
/// from one offset index. The same as `archive_with_preview` and [`preview`] give.
pub fn derived_of(
    text: &str,
    preview_chars: usize,
    guard_chars: usize,
    template: &str,
) -> (ArchiveRef, String, String) {
    let idx = OffsetIndex::build(text);
    let id = BlobId::of(text.as_bytes());
    let name = id.to_string();
    let kept = build(text, &idx, &name, preview_chars, None, template);
    let guard = build(text, &idx, &name, guard_chars, None, template);
    (ref_of(&id, text, &idx), kept, guard)
}

/// Builds a preview without a store (used when a result is archived on append).
pub fn preview_of(text: &str, id: &BlobId, max_chars: usize, template: &str) -> String {
    let idx = OffsetIndex::build(text);
    build(text, &idx, &id.to_string(), max_chars, None, template)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preview_has_head_tail_marker_and_matches() {
        let text: String = (0..2000)
            .map(|i| format!("line {i}{}\n", if i == 1000 { " ERROR disk full" } else { "" }))
            .collect();
        let idx = OffsetIndex::build(&text);
        let id = "ab".repeat(32);
        let p = build(&text, &idx, &id, 1000, Some("ERROR"), DEFAULT_MARKER);
        assert!(p.starts_with("line 0\n"));
        assert!(p.ends_with("line 1999\n"));
        assert!(p.contains("ERROR disk full"), "{p}");
        assert!(p.contains(&format!("archive {id} holds {} chars in 2000 lines", text.chars().count())));
        assert_eq!(marked_id(&p, DEFAULT_MARKER), Some(id.clone()));
        let short = build("tiny", &OffsetIndex::build("tiny"), &id, 1000, None, DEFAULT_MARKER);
        assert_eq!(short, "tiny");
        assert_eq!(marked_id("no marker here", DEFAULT_MARKER), None);
        assert!(is_preview_of(&p, &text, DEFAULT_MARKER));
        assert!(!is_preview_of(&format!("$ cat old.txt\n{p}"), &text, DEFAULT_MARKER));
        assert!(!is_preview_of(&format!("{p}exit code 1\n"), &text, DEFAULT_MARKER));
    }
}
