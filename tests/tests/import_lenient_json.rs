//! Claims of every JSON importer on JSON as real harnesses write it (issue 34, points 3, 5,
//! 13): a lone UTF-16 surrogate escape (Node cuts a string inside a surrogate pair and writes
//! `"\ud83d"`) is read as U+FFFD, the line or document is kept and the import report says so;
//! a UTF-8 byte order mark at the start of a file is not content (the first message is kept);
//! a document this reader refuses (a 100,001-digit number) is named with file, line and
//! column. Checked on a real transcript of each format.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::path::{Path, PathBuf};

use undertext::import::{self, Format, Parsed};
use undertext::{Part, ToolContent};
use undertext_tests::transcripts;

/// One real file per JSON format.
fn samples() -> Vec<PathBuf> {
    let d = transcripts::transcripts_dir();
    vec![
        d.join("claude_code/spotter/tool_heavy.jsonl"),
        d.join("mini_swe_agent/deepseek_reasoner_dev/marshmallow-code__marshmallow-1343.traj.json"),
        d.join("tau_bench/gpt-4o-airline.json"),
    ]
}

fn texts(p: &Parsed) -> Vec<String> {
    p.sessions
        .iter()
        .flat_map(|s| &s.messages)
        .flat_map(|m| &m.parts)
        .filter_map(|part| match part {
            Part::Text(t) | Part::ToolResult { content: ToolContent::Text(t), .. } => Some(t.clone()),
            _ => None,
        })
        .collect()
}

fn count(p: &Parsed) -> usize {
    p.sessions.iter().map(|s| s.messages.len()).sum()
}

fn parse(name: &Path, bytes: &[u8]) -> undertext::Result<Parsed> {
    import::parse_bytes(name, bytes, Format::Auto)
}

#[test]
fn a_lone_surrogate_escape_is_read_as_a_replacement_character_and_reported() {
    for path in samples() {
        let bytes = std::fs::read(&path).unwrap();
        let clean = parse(&path, &bytes).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        // Cut one message text of the file inside a surrogate pair: a lone high surrogate at
        // the start of the first text or content string.
        let at = ["\"text\":\"", "\"content\": \"", "\"content\":\""]
            .iter()
            .filter_map(|p| text.find(p).map(|i| i + p.len()))
            .min()
            .expect("a text or content string");
        let damaged = format!("{}\\ud83d{}", &text[..at], &text[at..]);
        let read = parse(&path, damaged.as_bytes()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(count(&read), count(&clean), "{}: messages lost", path.display());
        assert!(
            texts(&read).iter().any(|t| t.contains('\u{fffd}'))
                || read.sessions.iter().any(|s| s.title.contains('\u{fffd}')),
            "{}: the replacement character is not in what was read",
            path.display()
        );
        assert!(
            read.problems.iter().any(|p| p.reason.contains("surrogate")),
            "{}: the import report does not say a surrogate was replaced: {:?}",
            path.display(),
            read.problems
        );
        // A valid pair is still one character, and a lone low surrogate is replaced too.
        let pair = format!("{}\\ud83d\\ude00{}", &text[..at], &text[at..]);
        let read = parse(&path, pair.as_bytes()).unwrap();
        assert!(
            texts(&read).iter().any(|t| t.contains('😀'))
                || read.sessions.iter().any(|s| s.title.contains('😀'))
        );
        assert!(!read.problems.iter().any(|p| p.reason.contains("surrogate")));
        let low = format!("{}\\\\ude00\\ude00{}", &text[..at], &text[at..]);
        let read = parse(&path, low.as_bytes()).unwrap();
        assert_eq!(count(&read), count(&clean), "{}", path.display());
    }
}

#[test]
fn a_byte_order_mark_at_the_start_is_not_content() {
    for path in samples() {
        let bytes = std::fs::read(&path).unwrap();
        let clean = parse(&path, &bytes).unwrap();
        let mut bom = "\u{feff}".as_bytes().to_vec();
        bom.extend_from_slice(&bytes);
        let read = parse(&path, &bom).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(count(&read), count(&clean), "{}: a message was dropped", path.display());
        assert_eq!(texts(&read), texts(&clean), "{}", path.display());
        assert_eq!(read.problems.len(), clean.problems.len(), "{}: {:?}", path.display(), read.problems);
    }
}

#[test]
fn a_number_this_reader_refuses_is_named_with_file_line_and_column() {
    let huge = "9".repeat(100_001);
    let doc = format!(
        "{{\"messages\": [{{\"role\": \"user\", \"content\": \"hi\"}}],\n \"info\": {{\"cost\": {huge}}}}}"
    );
    let e = parse(Path::new("big.traj.json"), doc.as_bytes()).unwrap_err().to_string();
    assert!(e.contains("big.traj.json:2:"), "{e}");
    assert!(e.contains("number"), "{e}");
    assert!(!e.contains("not a transcript"), "{e}");
}
