//! Claims of `undertext import`, `show`, `read`, `stats` and `check` on every file of
//! `shared/data/transcripts`, through the built binary: the per-format counts of sessions and
//! tool results equal `MANIFEST.txt`; importing again adds nothing; `check` is clean; and
//! every tool result's text comes back byte for byte through `read` (archived) or `show`
//! (inline), compared with the transcript parsed by the library.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use common::{json, run};
use serde_json::Value;
use undertext::import::{self, Format};
use undertext::{Part, ToolContent};

fn transcripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/transcripts")
}

/// Sessions, tool results and their bytes per MANIFEST format, from MANIFEST.txt.
fn manifest() -> BTreeMap<String, (u64, u64, u64)> {
    let text = std::fs::read_to_string(transcripts().join("MANIFEST.txt")).unwrap();
    let mut out: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let c: Vec<&str> = line.split(" | ").collect();
        let e = out.entry(c[1].to_string()).or_default();
        e.0 += c[3].parse::<u64>().unwrap();
        e.1 += c[5].parse::<u64>().unwrap();
        e.2 += c[6].parse::<u64>().unwrap();
    }
    out
}

fn manifest_name(cli_name: &str) -> String {
    match cli_name {
        "claude-code" => "claude_code_jsonl",
        "mini-swe-agent" => "mini_swe_agent_traj_json",
        "swe-agent" => "swe_agent_traj",
        "tau-bench" => "tau_bench_json",
        other => panic!("unexpected format {other}"),
    }
    .to_string()
}

fn counts(per_format: &Value) -> BTreeMap<String, (u64, u64, u64)> {
    per_format
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let n = |f: &str| v[f].as_u64().unwrap();
            (manifest_name(k), (n("sessions"), n("tool_results"), n("tool_result_bytes")))
        })
        .collect()
}

#[test]
fn importing_every_transcript_matches_the_manifest_adds_nothing_again_checks_clean_and_reads_back_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let dir = transcripts();
    let dir_s = dir.to_str().unwrap();

    let first = json(&store, &["import", dir_s, "--json"]);
    assert_eq!(counts(&first["per_format"]), manifest(), "what the files hold");
    assert_eq!(first["problems"].as_array().unwrap().len(), 0);
    assert_eq!(first["sessions_new"], first["sessions"]);
    let stats = json(&store, &["stats", "--json"]);
    assert_eq!(counts(&stats["per_format"]), manifest(), "what the store holds");

    let again = json(&store, &["import", dir_s, "--json"]);
    assert_eq!((again["sessions_new"].as_u64(), again["messages"].as_u64()), (Some(0), Some(0)));
    assert_eq!(json(&store, &["stats", "--json"])["messages"], stats["messages"]);

    let check = json(&store, &["check", "--json"]);
    assert_eq!(check["ok"], Value::Bool(true), "{check}");
    let o = run(&store, &["check"]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("clean"));

    // The transcripts as the library parses them, by session key.
    let mut texts: HashMap<String, Vec<String>> = HashMap::new();
    for f in import::transcript_files(std::slice::from_ref(&dir)).unwrap() {
        for s in import::parse_file(&f, Format::Auto).unwrap().sessions {
            let results = s
                .messages
                .iter()
                .flat_map(|m| &m.parts)
                .filter_map(|p| match p {
                    Part::ToolResult { content: ToolContent::Text(t), .. } => Some(t.clone()),
                    _ => None,
                })
                .collect();
            texts.insert(s.key, results);
        }
    }
    let chats = json(&store, &["chats", "--json"]);
    let ids: Vec<&str> =
        chats["chats"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    let mut args = vec!["show", "--json"];
    args.extend(&ids);
    let shown = json(&store, &args);
    let (mut inline, mut archived) = (0, 0);
    let lib = undertext::Store::open_read_only(&store).unwrap();
    for c in shown["chats"].as_array().unwrap() {
        let key = c["extra"]["import.key"].as_str().unwrap();
        let want = &texts[key];
        // The CLI prints the engine's one encoding: the same JSON the library gives each part.
        let id: undertext::ChatId = c["id"].as_str().unwrap().parse().unwrap();
        let stored = lib.chat("local", id).unwrap().messages().unwrap();
        let shown_parts: Vec<&Value> =
            c["messages"].as_array().unwrap().iter().flat_map(|m| m["parts"].as_array().unwrap()).collect();
        let stored_parts: Vec<&undertext::Part> = stored.iter().flat_map(|m| &m.parts).collect();
        assert_eq!(shown_parts.len(), stored_parts.len(), "{key}");
        for (shown, part) in shown_parts.iter().zip(&stored_parts) {
            assert_eq!(**shown, undertext::json::part_json(part), "{key}");
            assert_eq!(undertext::json::part_from_json(shown).unwrap(), **part, "{key}");
        }
        let results: Vec<&Value> = shown_parts.into_iter().filter(|p| p["type"] == "tool_result").collect();
        assert_eq!(results.len(), want.len(), "{key}");
        for (p, text) in results.iter().zip(want) {
            if let Some(a) = p.get("archive") {
                let range = format!("0..{}", a["bytes"]);
                let o =
                    run(&store, &["read", a["id"].as_str().unwrap(), "--range", &range, "--unit", "byte"]);
                assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
                assert_eq!(o.stdout, text.as_bytes(), "{key}: archive {}", a["id"]);
                assert!(
                    !p["text"].as_str().unwrap().is_empty(),
                    "{key}: an archived result shows its preview"
                );
                archived += 1;
            } else {
                assert_eq!(p["text"].as_str().unwrap(), text, "{key}");
                inline += 1;
            }
        }
    }
    let total: u64 = manifest().values().map(|c| c.1).sum();
    assert_eq!(inline + archived, total);
    assert!(archived > 50, "results over 8 KiB are archived: {archived}");
}
