//! Importing a long JSONL transcript in memory that does not grow with it (issue 34: one
//! Claude Code session of 1,000,000 tiny messages peaked at 2.5 GB).
//!
//! [`import_streaming`] reads the file a line at a time, twice: the first pass finds what the
//! session's chat is known by (its key, title, model, first time) and counts its messages,
//! dropping each as it is read; the second hands them to the writer [`CHUNK`](super::CHUNK)
//! at a time
//! (`write::SessionWriter`), which compares them with the stored chat and writes a
//! transaction per chunk. Neither the file nor the session is ever whole in memory, so the
//! peak is the same for 10,000 messages as for 1,000,000. The outcome is the one
//! [`import_sessions`](super::import_sessions) gives the same session parsed whole.
//!
//! Only Claude Code and Codex JSONL stream (their sessions grow without bound, a line per
//! event); the other formats are one JSON document, parsed whole.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use super::write::{ImportReport, SessionWriter};
use super::{Format, MAX_INPUT_BYTES, Problem, Session};
use crate::api::Store;
use crate::base::error::{Error, Result};
use crate::chat::history::NewMessage;

/// Files at least this long (8 MiB) of Claude Code or Codex JSONL are imported a line at a
/// time ([`import_streaming`]); shorter ones are parsed whole.
pub const STREAM_MIN_BYTES: u64 = 8 << 20;

/// Where a parser hands the messages it has read, with each one's time from its line.
pub(super) type Drain<'a> = dyn FnMut(Vec<NewMessage>, Vec<Option<u64>>) -> Result<()> + 'a;

/// A parser's way to its [`Drain`], if it has one: messages are handed over a chunk
/// ([`CHUNK`](super::CHUNK)) at a time, and the first error the drain returns is kept (a
/// parser's line callback cannot return it) until the parser asks.
pub(super) struct Chunks<'d, 'a> {
    drain: Option<&'d mut Drain<'a>>,
    failed: Option<Error>,
}

impl<'d, 'a> Chunks<'d, 'a> {
    pub(super) fn new(drain: Option<&'d mut Drain<'a>>) -> Self {
        Chunks { drain, failed: None }
    }

    /// Hands `msgs` and their `times` to the drain once they hold a chunk (none without a
    /// drain, or after it failed).
    pub(super) fn offer(&mut self, msgs: &mut Vec<NewMessage>, times: &mut Vec<Option<u64>>) {
        if let Some(d) = self.drain.as_deref_mut()
            && msgs.len() >= super::CHUNK
            && self.failed.is_none()
            && let Err(e) = d(std::mem::take(msgs), std::mem::take(times))
        {
            self.failed = Some(e);
        }
    }

    /// The error a hand-over met, if any.
    pub(super) fn failed(&mut self) -> Result<()> {
        self.failed.take().map_or(Ok(()), Err)
    }

    /// Hands the rest over at the end (whatever its length).
    pub(super) fn finish(self, msgs: &mut Vec<NewMessage>, times: &mut Vec<Option<u64>>) -> Result<()> {
        match self.drain {
            Some(d) => d(std::mem::take(msgs), std::mem::take(times)),
            None => Ok(()),
        }
    }
}

/// What [`import_streaming`] read and wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Streamed {
    /// The format the file was read as.
    pub format: Format,
    /// The session: key, title, model, source and counts of the whole session; its
    /// `messages` and `at_ms` are empty (they were written as read). `None` when the file
    /// holds no line of it.
    pub session: Option<Session>,
    /// Messages in the session.
    pub messages: u64,
    /// Bytes read from the file (one pass).
    pub bytes: u64,
    /// Lines that were skipped.
    pub problems: Vec<Problem>,
    /// What was written.
    pub report: ImportReport,
}

/// The format `path` is imported a line at a time in ([`import_streaming`]), if it is: a
/// regular file of at least [`STREAM_MIN_BYTES`] that is Claude Code or Codex JSONL (`format`,
/// or detected from its first 64 KiB with [`Format::Auto`]). `None` for anything else,
/// which is parsed whole ([`parse_file`](super::parse_file)).
pub fn streams(path: &Path, format: Format) -> Result<Option<Format>> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io("stat", path, e))?;
    if !meta.is_file() || meta.len() < STREAM_MIN_BYTES || meta.len() > MAX_INPUT_BYTES {
        return Ok(None);
    }
    match format {
        Format::ClaudeCode | Format::Codex => return Ok(Some(format)),
        Format::Auto => {}
        _ => return Ok(None),
    }
    let mut head = Vec::with_capacity(64 << 10);
    let file = std::fs::File::open(path).map_err(|e| Error::io("open", path, e))?;
    file.take(64 << 10).read_to_end(&mut head).map_err(|e| Error::io("read", path, e))?;
    // Whole lines only (the last may be cut by the 64 KiB).
    let Some(end) = head.iter().rposition(|&b| b == b'\n') else { return Ok(None) };
    Ok(match super::detect(path, &head[..end]) {
        Ok(f @ (Format::ClaudeCode | Format::Codex)) => Some(f),
        _ => None,
    })
}

/// The lines of a file, read one at a time, checked as [`parse_bytes`](super::parse_bytes)
/// checks a whole file: no NUL byte, UTF-8, a byte order mark at the start skipped, at most
/// [`MAX_INPUT_BYTES`] in all.
struct Lines<R> {
    r: R,
    path: std::path::PathBuf,
    buf: Vec<u8>,
    /// Bytes read so far.
    at: u64,
    hasher: blake3::Hasher,
}

impl<R: BufRead> Iterator for Lines<R> {
    type Item = Result<String>;

    fn next(&mut self) -> Option<Result<String>> {
        self.buf.clear();
        let n = match self.r.read_until(b'\n', &mut self.buf) {
            Ok(0) => return None,
            Ok(n) => n,
            Err(e) => return Some(Err(Error::io("read", &self.path, e))),
        };
        self.hasher.update(&self.buf);
        let start = self.at;
        self.at += n as u64;
        if self.at > MAX_INPUT_BYTES {
            return Some(Err(Error::InvalidArgument(format!(
                "{}: expected a file of at most {MAX_INPUT_BYTES} bytes, found more (it grew while read)",
                self.path.display()
            ))));
        }
        if self.buf.contains(&0) {
            return Some(Err(Error::InvalidArgument(format!(
                "{}: binary file (NUL bytes), expected a JSON or JSONL transcript",
                self.path.display()
            ))));
        }
        let mut line = &self.buf[..];
        line = line.strip_suffix(b"\n").unwrap_or(line);
        line = line.strip_suffix(b"\r").unwrap_or(line);
        if start == 0 {
            line = line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line);
        }
        Some(match std::str::from_utf8(line) {
            Ok(s) => Ok(s.to_string()),
            Err(e) => Err(Error::InvalidArgument(format!(
                "{}: not UTF-8 text at byte {}, expected a JSON or JSONL transcript",
                self.path.display(),
                start + e.valid_up_to() as u64
            ))),
        })
    }
}

fn lines(path: &Path) -> Result<Lines<BufReader<std::fs::File>>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io("open", path, e))?;
    let meta = file.metadata().map_err(|e| Error::io("stat", path, e))?;
    if !meta.is_file() {
        return Err(Error::InvalidArgument(format!("{}: expected a regular file", path.display())));
    }
    Ok(Lines {
        r: BufReader::with_capacity(1 << 16, file),
        path: path.to_path_buf(),
        buf: Vec::new(),
        at: 0,
        hasher: blake3::Hasher::new(),
    })
}

/// The parser of `format` over `lines`, draining its messages into `drain`.
fn parse(
    path: &Path,
    format: Format,
    lines: impl Iterator<Item = Result<String>>,
    file_key: &str,
    drain: &mut Drain<'_>,
) -> Result<super::Parsed> {
    match format {
        Format::ClaudeCode => super::claude_code::parse_lines(path, lines, file_key, Some(drain)),
        Format::Codex => super::codex::parse_lines(path, lines, file_key, Some(drain)),
        other => Err(Error::InvalidArgument(format!(
            "{}: {other} is one JSON document, read whole: expected claude-code or codex to read a line at a time",
            path.display()
        ))),
    }
}

/// Imports the JSONL transcript `path` (Claude Code or Codex: see [`streams`]) into a chat
/// of `owner`, reading it a line at a time: the same chat, report and problems as
/// [`parse_file`](super::parse_file) then [`import_sessions`](super::import_sessions) give
/// (the session parsed whole), in memory that does not grow with the session. A session
/// longer than [`CHUNK`](super::CHUNK) messages is written a chunk to a transaction, marked
/// [`INCOMPLETE`](super::INCOMPLETE) until the last (see
/// [`import_sessions`](super::import_sessions)). A file that changes between the two passes
/// is an error (the chat stays marked; importing again completes it).
pub fn import_streaming(store: &Store, owner: &str, path: &Path, format: Format) -> Result<Streamed> {
    // The key of a session without an id is the content hash of its file.
    let mut hash = lines(path)?;
    for l in hash.by_ref() {
        l?;
    }
    let bytes = hash.at;
    let hex = hash.hasher.finalize().to_hex();
    let file_key = &hex.as_str()[..32];

    // First pass: the session's key and counts, and its first time.
    let (mut total, mut results, mut result_bytes, mut calls) = (0u64, 0u64, 0u64, 0u64);
    let mut first_time = None;
    let mut count = |msgs: Vec<NewMessage>, times: Vec<Option<u64>>| -> Result<()> {
        total += msgs.len() as u64;
        let (n, b, c) = super::counts(&msgs);
        (results, result_bytes, calls) = (results + n, result_bytes + b, calls + c);
        first_time = first_time.or_else(|| times.iter().flatten().next().copied());
        Ok(())
    };
    let parsed = parse(path, format, lines(path)?, file_key, &mut count)?;
    let Some(mut session) = parsed.sessions.into_iter().next() else {
        let report = ImportReport::default();
        return Ok(Streamed { format, session: None, messages: 0, bytes, problems: parsed.problems, report });
    };
    (session.tool_results, session.tool_result_bytes, session.tool_calls) = (results, result_bytes, calls);

    // Second pass: the messages, a chunk at a time, dated as `Session::set_times` dates them.
    let mut writer = SessionWriter::begin(store, owner, &session, total)?;
    let (mut seen, mut last) = (0u64, first_time);
    let mut write = |msgs: Vec<NewMessage>, times: Vec<Option<u64>>| -> Result<()> {
        seen += msgs.len() as u64;
        let at: Option<Vec<u64>> = first_time.map(|_| {
            times
                .iter()
                .map(|t| {
                    last = t.or(last);
                    last.unwrap_or(0)
                })
                .collect()
        });
        // A parser drains at most a line's messages past `CHUNK`: one transaction each time.
        writer.write(msgs, at.as_deref())
    };
    let again = parse(path, format, lines(path)?, file_key, &mut write)?;
    let same = again.sessions.first().is_some_and(|s| s.key == session.key);
    if !same || seen != total {
        return Err(Error::InvalidArgument(format!(
            "{}: the file changed while it was imported (expected {total} messages of session {}, found {seen}): \
             import it again",
            path.display(),
            session.key
        )));
    }
    let report = writer.finish()?;
    Ok(Streamed { format, session: Some(session), messages: total, bytes, problems: parsed.problems, report })
}
