//! Claims of issue 37.2: an imported message keeps the time its transcript gives it, for
//! every format that records one (Claude Code and Codex lines, OpenHands SDK events, an
//! OpenHands completion log's `timestamp`, OpenAI/mini-swe-agent/tau-bench messages with a
//! `timestamp`), so a chat's creation and last activity are its conversation's and the
//! newest-first listing orders imported chats by when they happened, not by when they were
//! imported; a format without times keeps the import's time.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::path::{Path, PathBuf};

use serde_json::Value;
use undertext::import::{self, Format, Session};
use undertext::{Durability, Options, Page, Store};

fn store(dir: &Path) -> Store {
    Store::open(dir, Options::default().durability(Durability::None)).unwrap()
}

fn sessions(path: &Path) -> Vec<Session> {
    import::parse_file(path, Format::Auto).unwrap().sessions
}

/// The RFC 3339 `timestamp`s of the user/assistant lines of a Claude Code file, as Unix ms
/// (read here with Python's definition: days since 1970 by the proleptic Gregorian calendar).
fn claude_code_times(path: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if matches!(v["type"].as_str(), Some("user" | "assistant"))
            && let Some(t) = v["timestamp"].as_str()
        {
            out.push(iso_ms(t));
        }
    }
    out
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` as Unix ms, counted day by day (independent of the importer's
/// arithmetic).
fn iso_ms(t: &str) -> u64 {
    let n = |a: usize, b: usize| t[a..b].parse::<u64>().unwrap();
    let (y, mo, d) = (n(0, 4), n(5, 7), n(8, 10));
    let leap = |y: u64| (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
    let mut days: u64 = (1970..y).map(|y| if leap(y) { 366 } else { 365 }).sum();
    let month = [31, if leap(y) { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    days += month[..(mo - 1) as usize].iter().sum::<u64>() + d - 1;
    let ms = if t.len() > 20 { n(20, 23) } else { 0 };
    ((days * 24 + n(11, 13)) * 60 + n(14, 16)) * 60_000 + n(17, 19) * 1000 + ms
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

#[test]
fn imported_claude_code_messages_keep_their_transcript_times_and_chats_list_by_them() {
    let dir = undertext_tests::transcripts::transcripts_dir().join("claude_code/spotter");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl") && !p.ends_with("short.jsonl"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "the corpus ships several main sessions");
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    // Imported in reverse name order: the listing must not follow the import order.
    let mut all = Vec::new();
    for f in files.iter().rev() {
        let parsed = sessions(f);
        let r = import::import_sessions(&s, "o", &parsed, |_| {}).unwrap();
        assert_eq!(r.sessions_new, 1);
        all.push((f.clone(), parsed));
    }
    let before = now_ms();
    for (f, parsed) in &all {
        let times = claude_code_times(f);
        let (first, last) = (*times.iter().min().unwrap(), *times.iter().max().unwrap());
        let (id, _) = import::imported_chat(&s, "o", &parsed[0].key).unwrap().unwrap();
        let chat = s.chat("o", id).unwrap();
        let snap = chat.snapshot();
        let stamps: Vec<u64> = snap.iter().map(|m| m.unwrap().at_ms).collect();
        assert_eq!(stamps.len() as u64, snap.len());
        for t in &stamps {
            assert!(times.contains(t), "{}: message time {t} is a line's timestamp", f.display());
        }
        let summary = s.chats("o", Page { limit: 1000, after: None }).unwrap().chats;
        let row = summary.iter().find(|c| c.id == id).unwrap();
        let earliest = *stamps.iter().min().unwrap();
        assert_eq!(row.created_ms, earliest, "{}: created when its first message was", f.display());
        assert!(row.created_ms >= first);
        assert_eq!(row.last_activity_ms, *stamps.iter().max().unwrap(), "{}", f.display());
        assert!(row.last_activity_ms <= last && row.last_activity_ms < before, "not the import's time");
    }
    // Newest first by the conversations' own times.
    let listed = s.chats("o", Page { limit: 1000, after: None }).unwrap().chats;
    let acts: Vec<u64> = listed.iter().map(|c| c.last_activity_ms).collect();
    assert!(acts.windows(2).all(|w| w[0] >= w[1]), "newest activity first: {acts:?}");
    let mains: Vec<u64> = all
        .iter()
        .map(|(_, p)| import::imported_chat(&s, "o", &p[0].key).unwrap().unwrap().0)
        .map(|id| listed.iter().position(|c| c.id == id).unwrap() as u64)
        .collect();
    let mut by_time: Vec<(u64, u64)> = all
        .iter()
        .zip(&mains)
        .map(|((f, _), pos)| (*claude_code_times(f).iter().max().unwrap(), *pos))
        .collect();
    by_time.sort_by_key(|x| std::cmp::Reverse(x.0));
    let positions: Vec<u64> = by_time.iter().map(|x| x.1).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "listed in the order of the transcripts' times");
    // Reopened from the log and the index: the same times.
    drop(listed);
    s.close().unwrap();
    let s = store(tmp.path());
    let again = s.chats("o", Page { limit: 1000, after: None }).unwrap().chats;
    assert_eq!(again.iter().map(|c| c.last_activity_ms).collect::<Vec<_>>(), acts);
}

#[test]
fn every_format_with_times_dates_its_messages_by_them_and_one_without_keeps_the_import_time() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Codex: each line's `timestamp`.
    let codex = dir.join("rollout.jsonl");
    std::fs::write(
        &codex,
        [
            r#"{"timestamp":"2025-03-01T10:00:00.000Z","type":"session_meta","payload":{"id":"c-1"}}"#,
            r#"{"timestamp":"2025-03-01T10:00:01.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"list files"}]}}"#,
            r#"{"timestamp":"2025-03-01T10:00:05.000Z","type":"response_item","payload":{"type":"function_call","name":"sh","arguments":"{}","call_id":"k1"}}"#,
            r#"{"timestamp":"2025-03-01T10:00:09.000Z","type":"response_item","payload":{"type":"function_call_output","call_id":"k1","output":"a\nb"}}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    // OpenAI messages with `timestamp` numbers (seconds) and mini-swe-agent 2's `extra.timestamp`.
    let openai = dir.join("chat.json");
    std::fs::write(
        &openai,
        r#"{"messages":[{"role":"user","content":"hi","timestamp":1700000000},{"role":"assistant","content":"hello","timestamp":1700000003.5}]}"#,
    )
    .unwrap();
    let mini = dir.join("run.traj.json");
    std::fs::write(
        &mini,
        r#"{"info":{},"trajectory_format":"mini-swe-agent-1.1","messages":[{"role":"user","content":"task","extra":{"timestamp":1710000000.0}},{"role":"assistant","content":"ok","tool_calls":[{"id":"t1","function":{"name":"bash","arguments":"{}"}}],"extra":{"timestamp":1710000002.0}},{"role":"tool","tool_call_id":"t1","content":"done","extra":{"timestamp":1710000004.0}}]}"#,
    )
    .unwrap();
    let cases: Vec<(PathBuf, Vec<u64>)> = vec![
        (codex, vec![1_740_823_201_000, 1_740_823_205_000, 1_740_823_209_000]),
        (openai, vec![1_700_000_000_000, 1_700_000_003_500]),
        (mini, vec![1_710_000_000_000, 1_710_000_002_000, 1_710_000_004_000]),
    ];
    let s = store(&dir.join("store"));
    let check = |path: &Path, want: Option<&[u64]>| {
        let parsed = sessions(path);
        let before = now_ms();
        import::import_sessions(&s, "o", &parsed, |_| {}).unwrap();
        let after = now_ms();
        for sess in &parsed {
            let (id, _) = import::imported_chat(&s, "o", &sess.key).unwrap().unwrap();
            let snap = s.chat("o", id).unwrap().snapshot();
            let got: Vec<u64> = snap.iter().map(|m| m.unwrap().at_ms).collect();
            match want {
                Some(w) => assert_eq!(got, w, "{}", path.display()),
                None => assert!(
                    got.iter().all(|t| (before..=after).contains(t)),
                    "{}: no time in the format: the import's ({got:?})",
                    path.display()
                ),
            }
        }
    };
    for (p, want) in &cases {
        check(p, Some(want));
    }
    // OpenHands SDK events: each event's `timestamp` (ISO without a zone: UTC).
    let sdk = data.join("openhands_sdk/8d0f2c7e5a1b4e39b6a2f0c4d1e9a7b3");
    let parsed = sessions(&sdk);
    assert_eq!(parsed[0].at_ms.len(), parsed[0].messages.len());
    assert!(parsed[0].at_ms.iter().all(|t| (1_761_955_200_000..1_762_041_600_000).contains(t)), "2025-11-01");
    check(&sdk, Some(&parsed[0].at_ms.clone()));
    // An OpenHands completion log: its `timestamp` (1733000000.25) dates its messages.
    let eval = data
        .join("openhands_eval/llm_completions/acme__widgets-3/claude-3-5-sonnet-20241022-1733000000.25.json");
    let n = sessions(&eval)[0].messages.len();
    check(&eval, Some(&vec![1_733_000_000_250; n]));
    // SWE-agent records no message times: the import's.
    let swe = undertext_tests::transcripts::transcripts_dir()
        .join("swe_agent/trajectories/function_calling_simple.traj");
    assert!(sessions(&swe)[0].at_ms.is_empty());
    check(&swe, None);
}
