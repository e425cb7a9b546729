//! Claims of `undertext demo`, `plot` and `replay`, through the built binary: the demo runs
//! to its end on a temporary store and its summary agrees with what `stats` and `show` then
//! read from that store; its read-back is exact; `plot` writes an SVG that parses as XML and
//! counts every model step; `replay` gives its table, and every archived byte reads back.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

mod common;

use std::path::Path;

use common::{json, run};
use serde_json::Value;

/// Parses the whole SVG document (an XML error fails) and returns its `<text>` contents.
fn svg_texts(svg: &str) -> Vec<String> {
    let mut reader = quick_xml::Reader::from_str(svg);
    let mut texts = Vec::new();
    let mut in_text = false;
    loop {
        match reader.read_event().unwrap() {
            quick_xml::events::Event::Start(e) => in_text = e.name().as_ref() == b"text",
            quick_xml::events::Event::Text(t) if in_text => {
                texts.push(String::from_utf8_lossy(t.as_ref()).trim().to_string());
            }
            quick_xml::events::Event::End(_) => in_text = false,
            quick_xml::events::Event::Eof => break,
            _ => {}
        }
    }
    texts
}

#[test]
fn the_demo_runs_to_its_end_and_its_summary_agrees_with_stats_show_and_plot() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let steps = 30;
    let o = run(
        &store,
        &["demo", "--steps", &steps.to_string(), "--step-ms", "5", "--window", "16000", "--json"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let live = String::from_utf8_lossy(&o.stderr);
    assert!(live.contains("step   30"), "the live output shows every step: {live}");
    let d: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(d["steps"], steps);
    assert!(d["tokens_sent"].as_u64().unwrap() < d["tokens_resend_everything"].as_u64().unwrap());
    assert!(d["peak_tokens"].as_u64().unwrap() <= 16_000);
    assert!(d["archived_results"].as_u64().unwrap() > 0, "the scripted agent reads files over 8 KiB");
    assert_eq!(d["recovered"]["exact"], true, "{}", d["recovered"]);
    assert!(d["swaps"].as_u64().unwrap() >= 1, "a 16,000-token window is crossed in 30 steps: {d}");
    assert_eq!(d["worker_errors"].as_array().unwrap().len(), 0, "{d}");
    // Cost with prompt caching: every call priced for the views and the naive policy;
    // resending everything only appends (no break) and is priced where it fits the window.
    let c = &d["cost_with_caching"];
    assert_eq!(c["views"]["calls"], steps, "{c}");
    assert_eq!(c["naive"]["calls"], steps, "{c}");
    assert_eq!(c["resend"]["breaks"], 0, "{c}");
    assert_eq!(
        c["resend"]["calls"].as_u64().unwrap() + c["resend_over_window"].as_u64().unwrap(),
        steps as u64,
        "{c}"
    );
    assert_eq!(c["views"]["tokens"], d["tokens_sent"], "the views' tokens are the tokens sent: {c}");
    assert!(c["views"]["breaks"].as_u64().unwrap() >= 1, "a swap breaks the prefix: {c}");

    let s = json(&store, &["stats", "--json"]);
    assert_eq!(s["chats"], 1);
    assert_eq!(s["messages"], d["messages"]);
    assert_eq!(s["archives"], d["archives"]);
    assert_eq!(s["archived_results"], d["store_archived_results"]);
    assert_eq!(s["archived_bytes"], d["archived_bytes"]);
    assert_eq!(s["dedup_ratio"], d["dedup_ratio"]);
    assert_eq!(s["log_bytes"], d["log_bytes"], "the demo synced before reporting: nothing written since");

    // The recovered line reads back the same through `read`.
    let r = &d["recovered"];
    let line = r["line"].as_u64().unwrap();
    let range = format!("{line}..{}", line + 1);
    let o = run(&store, &["read", r["archive"].as_str().unwrap(), "--range", &range, "--unit", "line"]);
    assert_eq!(String::from_utf8(o.stdout).unwrap(), r["text"].as_str().unwrap());

    let chat = d["chat"].as_str().unwrap();
    let shown = json(&store, &["show", chat, "--json"]);
    let assistant =
        shown["chats"][0]["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "assistant").count();
    assert_eq!(assistant, steps, "one model step, one assistant message");

    // The view of the demo chat starts from the published checkpoint and renders as provider JSON.
    let v = json(&store, &["view", chat, "--window", "16000", "--reserve", "2000", "--json"]);
    let msgs = v["messages"].as_array().unwrap();
    let summary = msgs.iter().position(|m| m["parts"][0]["type"] == "summary");
    let summary = summary.expect("a checkpoint stands for the settled past");
    // The demo's main run is one task and tool calls: the task stays, verbatim, before the summary.
    let task = msgs.iter().position(|m| {
        m["role"] == "user"
            && m["parts"][0]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("Review the Undertext repository"))
    });
    assert!(task.is_some_and(|t| t < summary), "the task is kept verbatim over the checkpoint: {v}");
    assert_eq!(d["refused"], 0, "the single-task loop is never refused: {d}");
    for format in ["openai", "anthropic"] {
        let o = run(&store, &["view", chat, "--window", "16000", "--reserve", "2000", "--format", format]);
        let rendered: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(rendered.is_array() || rendered["messages"].is_array(), "{format}");
    }

    let svg = tmp.path().join("demo.svg");
    let p = json(&store, &["plot", chat, "-o", svg.to_str().unwrap(), "--window", "16000", "--json"]);
    assert_eq!(p["steps"].as_array().unwrap().len(), steps);
    let texts = svg_texts(&std::fs::read_to_string(&svg).unwrap());
    assert!(texts.iter().any(|t| t.starts_with(&format!("{steps} model steps"))), "{texts:?}");
    // The cost line says whose cost it is: Undertext's views under the cache model; the
    // baselines are drawn and named beside it.
    for label in ["cumulative cost: Undertext", "cost resending everything", "cost of the naive policy"] {
        assert!(texts.iter().any(|t| t.starts_with(label)), "{label}: {texts:?}");
    }
    assert!(p["cost_source"].as_str().unwrap().starts_with("cost: Undertext's views"), "{p}");
    let last = &p["steps"][steps - 1];
    assert_eq!(last["cumulative_cost_usd"], p["cost_usd"]);
    assert_eq!(p["cost"]["views"]["calls"], steps, "{p}");
    assert!(p["cost"]["naive"]["cost_usd"].as_f64().unwrap() > 0.0, "{p}");
    assert!(run(&store, &["check"]).status.success());
}

#[test]
fn replay_gives_its_table_and_reads_every_archived_byte_back() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/transcripts");
    let files = [
        "claude_code/spotter/subagent.jsonl",
        "mini_swe_agent/deepseek_reasoner_dev/pvlib__pvlib-python-1707.traj.json",
        "swe_agent/trajectories/ctf/forensics/flash.traj",
    ];
    let paths: Vec<String> = files.iter().map(|f| dir.join(f).display().to_string()).collect();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("unused");
    let mut args = vec!["replay", "--window", "16000"];
    args.extend(paths.iter().map(String::as_str));
    let o = run(&store, &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8(o.stdout).unwrap();
    assert!(table.lines().next().unwrap().contains("resend all"), "{table}");
    assert!(table.contains("totals per format"), "{table}");
    assert_eq!(
        table.lines().filter(|l| l.contains(" ok ")).count(),
        3 + 3,
        "3 sessions and 3 totals: {table}"
    );
    args.push("--json");
    let v = json(&store, &args);
    let rows = v["sessions"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for r in rows {
        assert_eq!(r["recovery_mismatches"], 0, "{r}");
        assert_eq!(r["refused"], 0, "{r}");
        assert!(r["unservable"].is_u64(), "{r}");
        assert!(r["guarded_tokens"].as_u64().unwrap() <= r["naive_tokens"].as_u64().unwrap(), "{r}");
        // The cost model: the views and the naive policy priced at every call, resending
        // everything where it fits; resending only appends.
        let c = &r["cost"];
        assert_eq!(c["views"]["calls"], r["steps"], "{r}");
        assert_eq!(c["views"]["tokens"], r["guarded_tokens"], "{r}");
        assert_eq!(c["naive"]["calls"], r["steps"], "{r}");
        assert_eq!(c["resend"]["breaks"], 0, "{r}");
        assert_eq!(
            c["resend"]["calls"].as_u64().unwrap() + c["resend_over_window"].as_u64().unwrap(),
            r["steps"].as_u64().unwrap(),
            "{r}"
        );
        assert!(r["waits"]["hard_line_views"].is_u64(), "{r}");
    }
    let all = &v["all"];
    assert_eq!(all["sessions"], 3);
    let steps: u64 = rows.iter().map(|r| r["steps"].as_u64().unwrap()).sum();
    assert_eq!(all["cost"]["views"]["calls"], steps);
    assert!(all["cost"]["cost_views_over_naive"].as_f64().unwrap() > 0.0, "{all}");
    assert_eq!(v["price"]["cache_write"], 1.0, "cache writes default to the input price");
    let table = String::from_utf8(run(&store, &args[..args.len() - 1]).stdout).unwrap();
    assert!(table.contains("input cost with prompt caching"), "{table}");
    assert!(table.lines().any(|l| l.starts_with("all (3 sessions)")), "{table}");
    assert!(rows.iter().map(|r| r["archived"].as_u64().unwrap()).sum::<u64>() > 0);
    assert!(!store.exists(), "replay uses a scratch store, not --store");
}
