//! Small helpers shared by the parsers: reading JSON fields and building messages.

use serde_json::Value;

use crate::chat::history::{NewMessage, Part, Role, ToolContent};

/// The string at `key`, if it is one.
pub(super) fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The text of a content value, as `MANIFEST.txt` counts it: a string; a list of blocks,
/// `text` blocks by their text and others as JSON, joined without a separator; absent or
/// null is the empty text; any other value is its JSON.
pub(super) fn text_of(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(|b| match (str_of(b, "type"), str_of(b, "text")) {
                (Some("text"), Some(t)) => t.to_string(),
                _ => b.to_string(),
            })
            .collect(),
        Some(other) => other.to_string(),
    }
}

/// Tool-call arguments as JSON text: a string that parses as JSON is kept; any other string
/// is wrapped as a JSON string; absent is `{}`; other values are serialized.
pub(super) fn args_json(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) if serde_json::from_str::<Value>(s).is_ok() => s.clone(),
        Some(Value::String(s)) => Value::String(s.clone()).to_string(),
        None | Some(Value::Null) => "{}".to_string(),
        Some(other) => other.to_string(),
    }
}

/// The time of a transcript entry (Unix ms): its `timestamp` (or `extra.timestamp`, as
/// mini-swe-agent 2 writes it), an RFC 3339 / ISO 8601 string (`2026-02-11T20:36:45.693Z`;
/// without an offset it is read as UTC) or a number of seconds since the epoch (milliseconds
/// when it is over 10^11). `None` when absent or unreadable.
pub(super) fn time_of(v: &Value) -> Option<u64> {
    let t = v.get("timestamp").or_else(|| v.pointer("/extra/timestamp"))?;
    match t {
        Value::String(s) => parse_time(s),
        Value::Number(n) => {
            let x = n.as_f64()?;
            if !x.is_finite() || x <= 0.0 {
                None
            } else if x > 1e11 {
                Some(x as u64)
            } else {
                Some((x * 1000.0) as u64)
            }
        }
        _ => None,
    }
}

/// An RFC 3339 / ISO 8601 date-time as Unix ms: `YYYY-MM-DD[T ]hh:mm:ss[.fff][Z|±hh:mm]`.
pub(super) fn parse_time(s: &str) -> Option<u64> {
    let b = s.trim().as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let d = b.get(r)?;
        if d.is_empty() || !d.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(d).ok()?.parse().ok()
    };
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if b[13] != b':'
        || b[16] != b':'
        || !(1..=12).contains(&mo)
        || !(1..=31).contains(&d)
        || h > 23
        || mi > 59
        || sec > 60
    {
        return None;
    }
    let mut i = 19;
    let mut ms = 0i64;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let frac = b.get(start..i)?;
        if frac.is_empty() {
            return None;
        }
        for k in 0..3 {
            ms = ms * 10 + frac.get(k).map_or(0, |c| i64::from(c - b'0'));
        }
    }
    let offset_min = match b.get(i) {
        None | Some(b'Z' | b'z') => 0,
        Some(&c @ (b'+' | b'-')) => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            let m = oh * 60 + om;
            if c == b'+' { m } else { -m }
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let t = ((days * 24 + h) * 60 + mi - offset_min) * 60 + sec;
    u64::try_from(t * 1000 + ms).ok().filter(|&t| t > 0)
}

/// A chat title from a task's text: its first meaningful line, 80 characters at most. The
/// text of a `<issue_description>`, `<pr_description>` or `<task>` block when there is one;
/// else the first line that is not a wrapper tag (`<uploaded_files>`), not inside
/// `<uploaded_files>`, with the harness's lead sentence ("I've uploaded a python code
/// repository ...") left out. `None` when nothing is left.
pub(super) fn task_title(text: &str) -> Option<String> {
    let cut = |l: &str| -> Option<String> {
        let l = l.trim();
        (!l.is_empty()).then(|| l.chars().take(80).collect())
    };
    for tag in ["issue_description", "pr_description", "task"] {
        let open = format!("<{tag}>");
        if let Some(i) = text.find(&open) {
            let body = &text[i + open.len()..];
            let body = body.find(&format!("</{tag}>")).map_or(body, |j| &body[..j]);
            if let Some(t) = body.lines().find_map(cut) {
                return Some(t);
            }
        }
    }
    let mut inside = false;
    for line in text.lines() {
        let l = line.trim();
        if l == "<uploaded_files>" {
            inside = true;
            continue;
        }
        if l == "</uploaded_files>" {
            inside = false;
            continue;
        }
        let is_tag = l.starts_with('<') && l.ends_with('>') && !l[1..].contains('<');
        if inside || l.is_empty() || is_tag {
            continue;
        }
        let l = if l.starts_with("I've uploaded a ") || l.starts_with("I have uploaded a ") {
            match l.find(". ").map(|i| l[i + 2..].trim()) {
                Some(rest) if !rest.is_empty() => rest,
                _ => continue,
            }
        } else {
            l
        };
        return cut(l);
    }
    None
}

/// A tool result part.
pub(super) fn result(call_id: &str, text: String, is_error: bool) -> Part {
    Part::ToolResult { call_id: call_id.to_string(), content: ToolContent::Text(text), is_error }
}

/// A message, or none when it has no parts.
/// Marks as harness feedback ([`NewMessage::feedback`](crate::NewMessage#structfield.feedback))
/// every user message that would start a turn after the first assistant message: in an
/// autonomous loop (mini-swe-agent, SWE-agent) the human writes only the task, before the model
/// first answers; every later user message is the harness's own (a format error such as "Please
/// always provide EXACTLY ONE action", a timeout notice, an observation), and starts no turn.
/// The task and anything else before the first assistant message stay unmarked.
pub(super) fn mark_feedback_after_first_assistant(msgs: &mut [NewMessage]) {
    let Some(first) = msgs.iter().position(|m| m.role == Role::Assistant) else { return };
    for m in &mut msgs[first..] {
        if m.starts_turn() {
            m.feedback = true;
        }
    }
}

pub(super) fn message(role: Role, parts: Vec<Part>) -> Option<NewMessage> {
    (!parts.is_empty()).then_some(NewMessage { role, parts, feedback: false })
}

/// What a JSON value looks like, for error messages.
pub(super) fn shape(v: &Value) -> String {
    match v {
        Value::Object(o) => {
            let keys: Vec<&str> = o.keys().take(6).map(String::as_str).collect();
            format!("an object with keys {keys:?}")
        }
        Value::Array(a) => format!("a list of {} items", a.len()),
        Value::String(_) => "a string".into(),
        Value::Number(_) => "a number".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Null => "null".into(),
    }
}

/// Parses JSON as transcripts are really written. Node (Claude Code, Codex) writes a string
/// cut inside a surrogate pair as a lone `\ud83d` escape, which strict JSON readers refuse:
/// each lone surrogate escape is read as U+FFFD instead, and their number returned (for the
/// import report). Everything else is strict JSON (`serde_json`).
///
/// ```ignore
/// let (v, replaced) = parse(r#"{"text": "cut \ud83d"}"#).unwrap();
/// assert_eq!((v["text"].as_str(), replaced), (Some("cut \u{fffd}"), 1));
/// ```
pub(super) fn parse(text: &str) -> Result<(Value, usize), serde_json::Error> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => Ok((v, 0)),
        Err(e) => {
            let (fixed, replaced) = lone_surrogates_replaced(text);
            if replaced == 0 {
                return Err(e);
            }
            serde_json::from_str::<Value>(&fixed).map(|v| (v, replaced)).map_err(|_| e)
        }
    }
}

/// `text` with every `\uXXXX` escape of a surrogate that is not half of a high-low pair
/// replaced by `\ufffd`, and how many were. Escapes are found as a JSON reader finds them
/// (a `\\` is an escaped backslash, not the start of an escape).
fn lone_surrogates_replaced(text: &str) -> (String, usize) {
    let b = text.as_bytes();
    let hex_at = |i: usize| -> Option<u16> {
        let h = b.get(i..i + 4)?;
        u16::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()
    };
    let unit_at = |i: usize| -> Option<u16> {
        (b.get(i) == Some(&b'\\') && b.get(i + 1) == Some(&b'u')).then(|| hex_at(i + 2)).flatten()
    };
    let mut out = String::with_capacity(text.len());
    let (mut i, mut last, mut replaced) = (0, 0, 0);
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        match unit_at(i) {
            Some(hi @ 0xD800..=0xDBFF) if matches!(unit_at(i + 6), Some(0xDC00..=0xDFFF)) => {
                let _ = hi;
                i += 12;
            }
            Some(0xD800..=0xDFFF) => {
                out.push_str(&text[last..i]);
                out.push_str("\\ufffd");
                replaced += 1;
                i += 6;
                last = i;
            }
            _ => i += 2,
        }
    }
    out.push_str(&text[last..]);
    (out, replaced)
}

/// A problem saying that `n` lone surrogate escapes were read as U+FFFD (see [`parse`]).
pub(super) fn surrogates_problem(path: &std::path::Path, line: u64, n: usize) -> super::Problem {
    super::Problem {
        file: path.to_path_buf(),
        line,
        reason: format!(
            "{n} lone UTF-16 surrogate escape(s) (a string cut inside a surrogate pair) read as U+FFFD; the rest kept"
        ),
    }
}

/// Parses the non-empty lines of a JSONL text (a text in memory, or a file read a line at a
/// time: see `stream.rs`) into objects, handing each to `each` (its 1-based line number and
/// the object) as it is read, so that no more than one line's JSON is in memory at a time; a
/// line that is not a JSON object becomes a problem and is skipped, and a line that cannot be
/// read ends it with that error. Lone surrogate escapes are read as U+FFFD and reported (see
/// [`parse`]). Returns the shape of the first object (for "expected … found" errors), `None`
/// when no line is one.
pub(super) fn jsonl_lines<S: AsRef<str>>(
    path: &std::path::Path,
    lines: impl Iterator<Item = crate::base::error::Result<S>>,
    problems: &mut Vec<super::Problem>,
    mut each: impl FnMut(u64, &Value),
) -> crate::base::error::Result<Option<String>> {
    let mut first = None;
    for (n, line) in lines.enumerate() {
        let line = line?;
        let line = line.as_ref();
        if line.trim().is_empty() {
            continue;
        }
        let line_no = n as u64 + 1;
        let parsed = parse(line).map(|(v, replaced)| {
            if replaced > 0 {
                problems.push(surrogates_problem(path, line_no, replaced));
            }
            v
        });
        match parsed {
            Ok(v) if v.is_object() => {
                if first.is_none() {
                    first = Some(shape(&v));
                }
                each(line_no, &v);
            }
            Ok(v) => problems.push(super::Problem {
                file: path.to_path_buf(),
                line: line_no,
                reason: format!("expected a JSON object, found {} (line skipped)", shape(&v)),
            }),
            Err(e) => problems.push(super::Problem {
                file: path.to_path_buf(),
                line: line_no,
                reason: format!("expected a JSON object, found invalid JSON: {e} (line skipped)"),
            }),
        }
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn parse_time_reads_rfc3339_with_offsets_fractions_and_no_zone() {
        assert_eq!(parse_time("1970-01-01T00:00:01Z"), Some(1000));
        assert_eq!(parse_time("2026-02-11T20:36:45.693Z"), Some(1_770_842_205_693));
        assert_eq!(parse_time("2026-02-11T21:36:45.693+01:00"), Some(1_770_842_205_693));
        assert_eq!(parse_time("2026-02-11T20:36:45.693123"), Some(1_770_842_205_693));
        assert_eq!(parse_time("2026-02-11 20:36:45"), Some(1_770_842_205_000));
        assert_eq!(parse_time("2026-13-11T20:36:45Z"), None);
        assert_eq!(parse_time("yesterday"), None);
        assert_eq!(parse_time("2026-02-11T20:36:45Q"), None);
    }

    #[test]
    fn task_title_skips_wrapper_tags_and_the_harness_lead_sentence() {
        use super::task_title;
        let oh = "<uploaded_files>\n/workspace/acme__widgets__0.1\n</uploaded_files>\nI've uploaded a python code \
                  repository. Widget.resize() ignores the height argument. Fix it.";
        assert_eq!(task_title(oh).as_deref(), Some("Widget.resize() ignores the height argument. Fix it."));
        let issue = "<uploaded_files>\n/w\n</uploaded_files>\nI've uploaded a python code repository in the \
                     directory w. Consider the following issue description:\n\n<issue_description>\n\nQuery.count() is \
                     wrong\n</issue_description>";
        assert_eq!(task_title(issue).as_deref(), Some("Query.count() is wrong"));
        assert_eq!(task_title("\n  Fix the build\nmore").as_deref(), Some("Fix the build"));
        assert_eq!(task_title("<uploaded_files>\n/w\n</uploaded_files>"), None);
    }
}
