//! Claims of `undertext serve`, through the built binary over real HTTP (a plain TCP client,
//! no browser): every route answers with its content type and the data the CLI's JSON (the
//! library's API) gives for the same store; bad input is a 4xx page and the server keeps
//! answering; requests naming a non-local Host are refused; the store's files are the same
//! bytes after the server ran as before.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::{import, json, store_files as files, transcripts};
use serde_json::Value;
use undertext::{Durability, NewMessage, Options, StepStatus, Store};

/// A running `undertext serve` on a free port; killed when dropped.
struct Server {
    child: Child,
    port: u16,
    /// What it wrote to stderr so far.
    told: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM (the server closes the store and exits), SIGKILL if it has not in 10 s.
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(store: &Path, extra: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_undertext"))
        .arg("--store")
        .arg(store)
        .args(["serve", "--port", "0"])
        .args(extra)
        .env_remove("UNDERTEXT_SERVE_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    // What it wrote to stderr before its address (the token notice), then the rest drained.
    let mut err = child.stderr.take().unwrap();
    let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = told.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
            std::io::stderr().write_all(&buf[..n]).unwrap();
        }
    });
    Server { child, port, told }
}

struct Reply {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

impl Server {
    /// `GET path` with `Host: host` (None: no Host header, HTTP/1.0).
    fn get_as(&self, path: &str, host: Option<&str>) -> Reply {
        let req = match host {
            Some(h) => format!("GET {path} HTTP/1.1\r\nHost: {h}\r\nConnection: close\r\n\r\n"),
            None => format!("GET {path} HTTP/1.0\r\n\r\n"),
        };
        self.send(&req)
    }

    /// `GET path` with `Host: localhost:PORT` and the header lines `extra`.
    fn get_with(&self, path: &str, extra: &[String]) -> Reply {
        let mut req =
            format!("GET {path} HTTP/1.1\r\nHost: localhost:{}\r\nConnection: close\r\n", self.port);
        for h in extra {
            req.push_str(h);
            req.push_str("\r\n");
        }
        req.push_str("\r\n");
        self.send(&req)
    }

    fn send(&self, req: &str) -> Reply {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).unwrap();
        let text = String::from_utf8(raw).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no header end: {text:?}"));
        let mut lines = head.lines();
        let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Reply { status, headers, body: body.to_string() }
    }

    /// What it wrote to stderr, once that holds `needle` (at most 10 s).
    fn told(&self, needle: &str) -> String {
        for _ in 0..100 {
            let told = String::from_utf8_lossy(&self.told.lock().unwrap()).into_owned();
            if told.contains(needle) {
                return told;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the server never said {needle:?}")
    }

    fn get(&self, path: &str) -> Reply {
        self.get_as(path, Some(&format!("localhost:{}", self.port)))
    }

    /// A 200 HTML page.
    fn page(&self, path: &str) -> String {
        let r = self.get(path);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        assert_eq!(r.headers["content-type"], "text/html; charset=utf-8", "{path}");
        assert!(r.body.starts_with("<!doctype html>"), "{path}");
        r.body
    }
}

/// The page's HTML escaping, to find API strings in it.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// A store with two shared transcripts imported (a Claude Code session with archived tool
/// results, a SWE-agent trajectory), a chat edited to a second revision with recorded
/// attempts, and a chat of another owner. Returns (dir guard, store path, edited chat, other
/// owner's chat).
fn store() -> (tempfile::TempDir, PathBuf, String, String) {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    import(
        &store,
        &[
            transcripts().join("claude_code/spotter/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"),
            transcripts().join("swe_agent/trajectories/function_calling_simple.traj"),
        ],
    );
    let s = Store::open(&store, Options::default().durability(Durability::Group)).unwrap();
    let id = s
        .create_chat(
            "local",
            undertext::ChatMeta { title: "Retried <turn> & edits".into(), ..Default::default() },
        )
        .unwrap();
    let chat = s.chat("local", id).unwrap();
    chat.append(NewMessage::system("You are terse.")).unwrap();
    chat.append(NewMessage::user("Count to three.")).unwrap();
    let turn = chat.messages().unwrap()[1].turn;
    chat.record_step(turn, "first", 0, StepStatus::Interrupted, vec![NewMessage::assistant("One, two")])
        .unwrap();
    chat.truncate(2, chat.revision()).unwrap();
    chat.record_step(
        turn,
        "second",
        0,
        StepStatus::Complete,
        vec![NewMessage::assistant("One, two, three.")],
    )
    .unwrap();
    let other = s
        .create_chat("someone-else", undertext::ChatMeta { title: "private".into(), ..Default::default() })
        .unwrap();
    s.close().unwrap();
    (tmp, store, id.to_string(), other.to_string())
}

#[test]
fn every_route_serves_its_content_type_and_the_apis_data() {
    let (_tmp, store, edited, _) = store();
    let chats = json(&store, &["chats", "--json"]);
    let chats = chats["chats"].as_array().unwrap().clone();
    let big = chats.iter().max_by_key(|c| c["messages"].as_u64().unwrap()).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let shown = json(&store, &["show", &big, &edited, "--json"]);
    let small = chats.iter().find(|c| c["extra"]["import.format"] == "swe-agent").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    // A view that fits writes nothing, so `view` may read the store before the server runs.
    let view = json(&store, &["view", &small, "--window", "200000", "--reserve", "4096", "--json"]);
    assert_eq!(view["decision"]["kind"], "fits");
    let svg_path = store.parent().unwrap().join("plot.svg");
    let plot = json(&store, &["plot", &big, "-o", svg_path.to_str().unwrap(), "--window", "20000", "--json"]);
    // An archived tool result and its first 100 characters, through `read`.
    let archived = shown["chats"][0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["parts"].as_array().unwrap().iter())
        .find(|p| p.get("archive").is_some())
        .expect("an archived tool result")
        .clone();
    let aid = archived["archive"]["id"].as_str().unwrap().to_string();
    let read = json(&store, &["read", &aid, "--range", "10..110", "--json"]);

    let server = serve(&store, &[]);

    // Chats: every chat of the owner, id and title, newest activity first as `chats`.
    let page = server.page("/");
    let mut at = 0;
    for c in &chats {
        let id = c["id"].as_str().unwrap();
        let pos = page.find(&format!("<tr data-chat=\"{id}\">")).unwrap_or_else(|| panic!("{id} listed"));
        assert!(pos > at, "{id} in the order of `chats`");
        at = pos;
        assert!(page.contains(&esc(c["title"].as_str().unwrap())), "title of {id}");
    }
    assert!(!page.contains("private"), "another owner's chat is not listed");

    // A chat: every message with its seq, role and text parts, as `show`.
    let page = server.page(&format!("/chat/{big}"));
    let msgs = shown["chats"][0]["messages"].as_array().unwrap();
    assert_eq!(page.matches("<article class=\"msg ").count(), msgs.len());
    for m in msgs {
        let seq = m["seq"].as_u64().unwrap();
        assert!(
            page.contains(&format!("<article class=\"msg {}\" id=\"m{seq}\"", m["role"].as_str().unwrap())),
            "message {seq} with its role"
        );
        for p in m["parts"].as_array().unwrap() {
            if let Some(t) = p.get("text").and_then(Value::as_str).filter(|t| t.len() < 1500) {
                assert!(page.contains(&esc(t)), "text of message {seq}");
            }
            if let Some(name) = p.get("name").and_then(Value::as_str) {
                assert!(page.contains(&format!("<code>{}</code>", esc(name))), "tool call of message {seq}");
            }
        }
    }
    assert!(
        page.contains(&format!("action=\"/archive/{aid}\"")),
        "the archived result has its range control"
    );

    // The edited chat: revisions and attempts.
    let e = &shown["chats"][1];
    let page = server.page(&format!("/chat/{edited}"));
    assert!(page.contains("One, two, three."));
    assert!(!page.contains("One, two</pre>"), "the truncated answer is not in the current revision");
    let rev = e["revision"].as_u64().unwrap();
    assert!(rev >= 1);
    let old = server.page(&format!("/chat/{edited}?rev={}", rev - 1));
    assert!(
        old.contains("One, two</pre>") && !old.contains("One, two, three."),
        "the chat at an earlier revision"
    );
    let turn = e["messages"][1]["turn"].as_u64().unwrap();
    let page = server.page(&format!("/chat/{edited}/attempts?turn={turn}"));
    assert!(page.contains("<code>first</code>") && page.contains("<code>second</code>"));
    assert!(page.contains("interrupted") && page.contains("complete"));

    // The model view: decision, estimate and tokens per message as `view --json` (a chat
    // that fits, where the replay and the store's chat are the same history).
    let page = server.page(&format!("/chat/{small}/view?window=200000&reserve=4096"));
    assert!(page.contains("id=\"decision\">fits</b>"));
    let estimate = view["estimate"].as_u64().unwrap();
    assert!(page.contains(&format!("<span id=\"estimate\">{}</span>", common_num(estimate))));
    let tokens = |v: &Value| -> Vec<u64> {
        v["messages"].as_array().unwrap().iter().map(|m| m["tokens"].as_u64().unwrap()).collect()
    };
    assert_eq!(page_tokens(&page), tokens(&view), "tokens per message of the view");
    assert!(page.contains("class=\"tag tail\""), "the protected tail is marked");
    // A long chat at a small window: the guard previewed results and swapped checkpoints in;
    // the summary is marked.
    let page = server.page(&format!("/chat/{big}/view?window=20000&reserve=2000"));
    assert!(page.contains("class=\"tag summary\">checkpoint summary</span>"), "the summary is marked");
    assert!(page.contains("<div class=\"summary\"><b>checkpoint summary</b>"));
    assert!(!page_tokens(&page).is_empty());

    // The chart: the steps and the total cost of `plot --json`, the SVG of the same code.
    let page = server.page(&format!("/chat/{big}/chart?window=20000"));
    let steps = plot["steps"].as_array().unwrap().len();
    assert!(page.contains(&format!("<span id=\"steps\">{steps}</span>")));
    assert!(page.contains(&format!("<span id=\"cost\">${:.2}</span>", plot["cost_usd"].as_f64().unwrap())));
    assert!(page.contains(&esc(plot["cost_source"].as_str().unwrap())));
    assert!(page.contains("<svg"));
    let svg = server.get(&format!("/chat/{big}/chart.svg?window=20000"));
    assert_eq!(svg.status, 200);
    assert_eq!(svg.headers["content-type"], "image/svg+xml");
    // `plot` and `serve` draw with the same code: the same axes, legend and totals (the
    // replay's worker runs beside it, so where a swap lands may differ between two runs).
    let plotted = std::fs::read_to_string(&svg_path).unwrap();
    let texts = |s: &str| -> Vec<String> {
        s.split("<text").skip(1).map(|t| t.split('>').nth(1).unwrap_or("").trim().to_string()).collect()
    };
    let (served, drawn) = (texts(&svg.body), texts(&plotted));
    for t in [format!("{steps} model steps"), format!("total ${:.2}", plot["cost_usd"].as_f64().unwrap())] {
        assert!(served.iter().any(|s| s.starts_with(&t)), "{t} served");
        assert!(drawn.iter().any(|s| s.starts_with(&t)), "{t} plotted");
    }
    assert!(served.len() > 20 && drawn.len() > 20, "axis ticks are labelled");
    for label in ["hard line", "soft line", "target", "model step", "cumulative cost"] {
        assert!(svg.body.contains(label), "{label} in the chart");
    }

    // Checkpoints: the replay's summary tree.
    let page = server.page(&format!("/chat/{big}/checkpoints?window=20000"));
    assert!(page.contains("summary tree"));
    assert!(page.contains("checkpoint summary") || page.contains("never came near"), "{page}");

    // An archive range: exactly the text of `read`.
    let page = server.page(&format!("/archive/{aid}?start=10&end=110&unit=char"));
    let text = read["text"].as_str().unwrap();
    assert!(page.contains(&format!("<pre class=\"out\" id=\"range\">{}</pre>", esc(text))));

    let css = server.get("/style.css");
    assert_eq!(css.status, 200);
    assert_eq!(css.headers["content-type"], "text/css; charset=utf-8");
    assert!(server.get("/").headers.contains_key("server-timing"));
}

/// The `data-tokens` of the view's rows, in order.
fn page_tokens(page: &str) -> Vec<u64> {
    page.split("data-tokens=\"").skip(1).map(|s| s.split('"').next().unwrap().parse().unwrap()).collect()
}

fn common_num(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[test]
fn search_finds_chats_by_title_and_metadata() {
    let (_tmp, store, edited, _) = store();
    let server = serve(&store, &[]);
    let page = server.page("/?q=retried");
    assert!(page.contains(&format!("data-chat=\"{edited}\"")));
    assert_eq!(page.matches("<tr data-chat=").count(), 1, "only the matching chat");
    let page = server.page("/?q=swe-agent");
    assert!(page.matches("<tr data-chat=").count() >= 1, "found by its import.format metadata");
    assert!(!page.contains(&format!("data-chat=\"{edited}\"")));
    let page = server.page("/?q=no+such+thing+anywhere");
    assert_eq!(page.matches("<tr data-chat=").count(), 0);
}

/// A store where owner "local" has a chat with "zebra quartz" at seq 2 and a hidden
/// "zebra quartz" at seq 3, and owner "someone-else" a chat holding the same words.
/// Returns (dir guard, store path, local chat, other owner's chat).
fn search_store() -> (tempfile::TempDir, PathBuf, String, String) {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let s = Store::open(&store, Options::default()).unwrap();
    let mine = s
        .create_chat("local", undertext::ChatMeta { title: "Zoo <notes>".into(), ..Default::default() })
        .unwrap();
    let chat = s.chat("local", mine).unwrap();
    chat.append(NewMessage::user("What lives at the zoo?")).unwrap();
    chat.append(NewMessage::assistant("Lions and penguins.")).unwrap();
    chat.append(NewMessage::user("I saw a zebra near the quartz rock <b>today</b>.")).unwrap();
    chat.append(NewMessage::user("secret zebra quartz draft")).unwrap();
    chat.hide(std::slice::from_ref(&(3..4)), chat.revision()).unwrap();
    let theirs = s.create_chat("someone-else", Default::default()).unwrap();
    s.chat("someone-else", theirs).unwrap().append(NewMessage::user("zebra quartz of someone else")).unwrap();
    s.close().unwrap();
    (tmp, store, mine.to_string(), theirs.to_string())
}

#[test]
fn message_search_links_each_hit_to_its_message_and_never_answers_another_owners_chat() {
    let (_tmp, store, mine, theirs) = search_store();
    let server = serve(&store, &[]);
    // The search box is on the chat list and on the chat page (scoped to that chat).
    assert!(server.page("/").contains("action=\"/search\""));
    let chat_page = server.page(&format!("/chat/{mine}"));
    assert!(chat_page.contains(&format!("name=\"chat\" value=\"{mine}\"")), "the chat page's box is scoped");
    assert!(chat_page.contains("id=\"m2\""), "the anchor the hit jumps to");

    let page = server.page("/search?q=zebra+quartz");
    assert_eq!(page.matches("<tr class=\"hit\"").count(), 1, "{page}");
    assert!(page.contains(&format!("data-chat=\"{mine}\" data-seq=\"2\"")), "{page}");
    assert!(page.contains(&format!("href=\"/chat/{mine}#m2\"")), "the hit links to its message");
    assert!(
        page.contains("zebra near the quartz rock &lt;b&gt;today&lt;/b&gt;"),
        "the escaped snippet: {page}"
    );
    assert!(!page.contains("<b>today</b>"));
    assert!(page.contains("Zoo &lt;notes&gt;"), "the chat's title, escaped");
    assert!(!page.contains(&theirs), "another owner's chat is never answered");
    assert!(!page.contains("data-seq=\"3\""), "a hidden message only when asked");

    let page = server.page("/search?q=zebra+quartz&hidden=1");
    assert!(page.contains("data-seq=\"3\"") && page.contains("data-seq=\"2\""), "{page}");
    assert!(!page.contains(&theirs));

    let page = server.page(&format!("/search?q=lions&chat={mine}"));
    assert!(page.contains(&format!("href=\"/chat/{mine}#m1\"")), "{page}");
    // Another owner's chat as the scope is the same 404 as an absent chat.
    let r = server.get(&format!("/search?q=zebra&chat={theirs}"));
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(!r.body.contains("someone else"));
}

#[test]
fn a_bad_or_empty_message_search_gets_a_clear_page_and_the_query_is_escaped() {
    let (_tmp, store, mine, _) = search_store();
    let server = serve(&store, &[]);
    let page = server.page("/search?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E+zebra");
    assert!(!page.contains("<script>"), "{page}");
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt; zebra"),
        "the query is shown escaped: {page}"
    );
    let page = server.page("/search?q=");
    assert!(page.contains("Type the words to find"), "{page}");
    let page = server.page("/search");
    assert!(page.contains("Type the words to find"), "{page}");
    let page = server.page("/search?q=%21%3F%26");
    assert!(page.contains("has no words to search for"), "{page}");
    let page = server.page("/search?q=nowhereword");
    assert!(page.contains("No message holds nowhereword."), "{page}");
    for (path, want) in [
        ("/search?q=zebra&limit=0".to_string(), 400),
        ("/search?q=zebra&limit=x".to_string(), 400),
        ("/search?q=zebra&chat=not-a-chat".to_string(), 404),
        ("/search?q=zebra&chat=chat-00000000000fffff".to_string(), 404),
    ] {
        let r = server.get(&path);
        assert_eq!(r.status, want, "{path}: {}", r.body);
        assert!(r.body.contains(&format!("<h1>{want} ")), "{path}: an error page");
    }
    server.page(&format!("/search?q=zebra&chat={mine}"));
}

#[test]
fn a_view_over_its_budget_shows_what_it_left_out_and_a_view_that_fits_shows_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let d = json(&store, &["demo", "--steps", "30", "--step-ms", "5", "--window", "16000", "--json"]);
    let id = d["chat"].as_str().unwrap().to_string();
    let small = {
        let s = Store::open(&store, Options::default()).unwrap();
        let small = s.create_chat("local", Default::default()).unwrap();
        let chat = s.chat("local", small).unwrap();
        chat.append(NewMessage::user("Hello.")).unwrap();
        chat.append(NewMessage::assistant("Hi.")).unwrap();
        drop(chat);
        s.close().unwrap();
        small
    };
    let server = serve(&store, &[]);
    let page = server.page(&format!("/chat/{id}/view?window=16000"));
    let section = page
        .split("<section class=\"left-out\"")
        .nth(1)
        .expect("a Left out section")
        .split("</section>")
        .next()
        .unwrap();
    assert!(section.contains("<h2>Left out</h2>"));
    let range = section.split("data-range=\"").nth(1).expect("an omitted range").split('"').next().unwrap();
    let (start, end) = range.split_once("..").unwrap();
    // The range named is the one the view's summary stands for (its row's seqs also count
    // the messages kept verbatim beside it: the system message, the task).
    let (start, end): (u64, u64) = (start.parse().unwrap(), end.parse().unwrap());
    assert!(start < end, "{range}");
    let summaries: Vec<(u64, u64)> = page
        .split("<tr id=\"v")
        .skip(1)
        .map(|r| r.split("</tr>").next().unwrap())
        .filter(|r| r.contains("checkpoint summary"))
        .filter_map(|r| {
            let seqs = r.split("<td>").nth(1)?.split('<').next()?;
            let (a, b) = seqs.split_once("..")?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect();
    assert!(summaries.iter().any(|&(a, b)| a <= start && b == end), "{range} in {summaries:?}");
    assert!(section.contains(&format!("read_messages start={start} end={end}")), "{section}");
    assert!(section.contains(&format!("href=\"/chat/{id}#m{start}\"")), "{section}");
    let tokens: u64 = section
        .split("id=\"left-out-tokens\">")
        .nth(1)
        .unwrap()
        .split('<')
        .next()
        .unwrap()
        .replace(',', "")
        .parse()
        .unwrap();
    assert!(tokens > 0, "{section}");
    // Under a window that holds it all, no range is left out, only the results archived when
    // they were appended (sent as previews), each named by an archive the store can read.
    let page = server.page(&format!("/chat/{id}/view?window=100000000"));
    let section =
        page.split("<section class=\"left-out\"").nth(1).unwrap().split("</section>").next().unwrap();
    assert!(!section.contains("data-range="), "{section}");
    let archives: Vec<&str> =
        section.split("href=\"/archive/").skip(1).map(|r| r.split('"').next().unwrap()).collect();
    assert!(!archives.is_empty(), "{section}");
    for a in archives {
        server.page(&format!("/archive/{a}"));
    }
    // A chat sent whole leaves nothing out.
    let page = server.page(&format!("/chat/{small}/view"));
    assert!(page.contains("Nothing: the view sends every message whole."), "{page}");
}

#[test]
fn bad_input_gets_a_4xx_page_and_the_server_keeps_answering() {
    let (_tmp, store, edited, foreign) = store();
    let shown = json(&store, &["show", &edited, "--json"]);
    let rev = shown["chats"][0]["revision"].as_u64().unwrap();
    let big = json(&store, &["chats", "--json"])["chats"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["extra"]["import.format"] == "claude-code")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let aid = json(&store, &["show", &big, "--json"])["chats"][0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["parts"].as_array().unwrap().clone())
        .find_map(|p| p["archive"]["id"].as_str().map(str::to_string))
        .unwrap();
    let server = serve(&store, &[]);
    let cases: Vec<(String, u16)> = vec![
        ("/chat/chat-00000000000fffff".into(), 404),
        ("/chat/not-a-chat".into(), 404),
        (format!("/chat/{foreign}"), 404),
        (format!("/chat/{foreign}/view"), 404),
        (format!("/chat/{foreign}/chart.svg"), 404),
        (format!("/chat/{edited}?rev={}", rev + 1), 400),
        (format!("/chat/{edited}?rev=99999999999999999999999"), 400),
        (format!("/chat/{edited}?rev=-1"), 400),
        (format!("/chat/{edited}/view?window=0"), 400),
        (format!("/chat/{edited}/view?window=abc"), 400),
        (format!("/chat/{edited}/view?window=32000&reserve=999999999"), 400),
        (format!("/chat/{edited}/chart?window=18446744073709551615"), 400),
        (format!("/chat/{edited}/attempts?turn=x"), 400),
        (format!("/chat/{edited}?from=99999"), 400),
        (format!("/archive/{aid}?start=5&end=1"), 400),
        (format!("/archive/{aid}?start=0&end=18446744073709551615"), 400),
        (format!("/archive/{aid}?start=99999999999"), 400),
        (format!("/archive/{aid}?unit=furlong"), 400),
        ("/archive/0000000000000000000000000000000000000000000000000000000000000000".into(), 404),
        ("/archive/zz".into(), 404),
        ("/../../etc/passwd".into(), 404),
        ("/chat/..%2f..%2fetc%2fpasswd".into(), 404),
        ("/chat/%2e%2e/view".into(), 404),
        ("/style.css/../../etc/passwd".into(), 404),
        ("/chat/chat-1/nope".into(), 404),
        (format!("/{}", "a".repeat(5000)), 404),
        ("/nope".into(), 404),
    ];
    for (path, want) in &cases {
        let r = server.get(path);
        assert_eq!(r.status, *want, "{path}: {}", r.body);
        assert_eq!(r.headers["content-type"], "text/html; charset=utf-8", "{path}");
        assert!(r.body.contains(&format!("<h1>{want} ")), "{path}: an error page");
    }
    server.page("/");
    server.page(&format!("/chat/{edited}"));
}

#[test]
fn requests_naming_a_non_local_host_are_refused() {
    let (_tmp, store, _, _) = store();
    let server = serve(&store, &[]);
    for host in ["evil.example", "evil.example:80", "localhost.evil.example", "127.0.0.1.nip.io", "10.0.0.8"]
    {
        let r = server.get_as("/", Some(host));
        assert_eq!(r.status, 403, "Host {host}");
        assert!(!r.body.contains("data-chat"), "Host {host}: no data");
    }
    assert_eq!(server.get_as("/", None).status, 403, "no Host header");
    for host in ["localhost", "127.0.0.1", "[::1]"] {
        assert_eq!(server.get_as("/", Some(&format!("{host}:{}", server.port))).status, 200, "Host {host}");
    }
}

#[test]
fn serving_every_page_leaves_the_store_files_unchanged() {
    let (_tmp, store, edited, _) = store();
    let big = json(&store, &["chats", "--json"])["chats"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|c| c["messages"].as_u64().unwrap())
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    // The index file's size changes on any normal open and close (as its bytes do, below).
    let records = || {
        let mut v = json(&store, &["stats", "--json"]);
        v.as_object_mut().unwrap().remove("index_bytes");
        v
    };
    let stats = records();
    let before = files(&store);
    assert!(before.keys().any(|p| p.starts_with("log/")), "the log is compared");
    {
        let server = serve(&store, &[]);
        for p in [
            "/",
            "/?q=a",
            "/search?q=the+file",
            &format!("/chat/{big}"),
            &format!("/chat/{big}/view?window=8000&reserve=1000"),
        ] {
            server.page(p);
        }
        for p in [format!("/chat/{big}/chart?window=8000"), format!("/chat/{big}/checkpoints?window=8000")] {
            server.page(&p);
        }
        server.page(&format!("/chat/{edited}?rev=1"));
    }
    let after = files(&store);
    assert_eq!(before.keys().collect::<Vec<_>>(), after.keys().collect::<Vec<_>>(), "same files");
    for (p, b) in &before {
        // The lock file and the index file change on any normal open and close (`chats`
        // changes them too): the server opens the store normally until read-only opens exist.
        // The log, which holds every record, must be the same bytes once the server has
        // stopped (on SIGTERM it closes the store, which cuts the preallocated segment back).
        if p == "LOCK" || p == "index.redb" {
            continue;
        }
        assert!(after[p] == *b, "{p} changed");
    }
    assert_eq!(records(), stats, "the same records");
}

#[test]
fn a_long_chat_is_paged_and_every_message_is_on_exactly_one_page() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let s = Store::open(&store, Options::default().create_if_missing(true)).unwrap();
    let id =
        s.create_chat("local", undertext::ChatMeta { title: "long".into(), ..Default::default() }).unwrap();
    let chat = s.chat("local", id).unwrap();
    let msgs: Vec<NewMessage> = (0..2_500)
        .map(|i| {
            if i % 2 == 0 {
                NewMessage::user(format!("question {i}"))
            } else {
                NewMessage::assistant(format!("answer {i}"))
            }
        })
        .collect();
    chat.append_batch(msgs).unwrap();
    drop(chat);
    s.close().unwrap();
    let server = serve(&store, &[]);
    let first = server.page(&format!("/chat/{id}"));
    assert_eq!(first.matches("<article class=\"msg ").count(), 2_000);
    assert!(first.contains("messages 0..2000 of 2,500"));
    let later = format!("/chat/{id}?rev=0&amp;from=2000");
    assert!(first.contains(&format!("href=\"{later}\">later</a>")));
    let second = server.page(&later.replace("&amp;", "&"));
    assert_eq!(second.matches("<article class=\"msg ").count(), 500);
    assert!(
        second.contains("id=\"m2000\"")
            && second.contains("id=\"m2499\"")
            && !second.contains("id=\"m1999\"")
    );
    assert!(second.contains(">earlier</a>") && !second.contains(">later</a>"));
}

#[test]
fn the_checkpoint_a_harness_published_is_on_the_checkpoints_page_with_its_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let d = json(&store, &["demo", "--steps", "30", "--step-ms", "5", "--window", "16000", "--json"]);
    assert!(d["swaps"].as_u64().unwrap() >= 1, "{d}");
    let id: undertext::ChatId = d["chat"].as_str().unwrap().parse().unwrap();
    let (published, summary) = {
        let s = Store::open(&store, Options::default()).unwrap();
        let chat = s.chat("local", id).unwrap();
        let published = chat.published_checkpoint().expect("the demo published a checkpoint");
        // Under the soft line of a huge window: a view that previews nothing, writes nothing.
        let v = chat.view(&undertext::Budget::new(100_000_000, 0)).unwrap();
        let summary = v
            .messages()
            .iter()
            .flat_map(|m| m.parts.iter())
            .find_map(|p| match p {
                undertext::Part::Summary(t) => Some(t.clone()),
                _ => None,
            })
            .expect("the view carries the summary");
        drop(chat);
        s.close().unwrap();
        (published, summary)
    };
    let server = serve(&store, &[]);
    let page = server.page(&format!("/chat/{id}/checkpoints?window=16000"));
    let (base, reach) = published;
    assert!(
        page.contains(&format!("Published checkpoint: covers seqs 0..{reach}, built at revision {base}.")),
        "{page}"
    );
    let head: String = summary.chars().take(300).collect();
    assert!(page.contains(&esc(&head)), "the published summary");
    assert!(page.contains("<div class=\"summary\"><b>checkpoint summary</b>"));
}

/// The number in `<span id="steps">N</span>` of a chart page.
fn chart_steps(page: &str) -> u64 {
    let at = page.find("<span id=\"steps\">").expect("a steps count") + "<span id=\"steps\">".len();
    page[at..].split('<').next().unwrap().parse().unwrap()
}

#[test]
fn beside_a_live_writer_the_chart_grows_with_its_appends_and_a_gc_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), Options::default()).unwrap();
    let id = writer.create_chat("local", Default::default()).unwrap();
    let doomed = writer.create_chat("local", Default::default()).unwrap();
    let chat = writer.chat("local", id).unwrap();
    let step = |i: u64| {
        chat.append(NewMessage::user(format!("task {i}: {}", "x".repeat(200)))).unwrap();
        chat.append(NewMessage::assistant(format!("answer {i}: {}", "y".repeat(300)))).unwrap();
    };
    for i in 0..5 {
        step(i);
    }
    let server = serve(dir.path(), &[]);
    let path = format!("/chat/{id}/chart");
    assert_eq!(chart_steps(&server.page(&path)), 5);
    // Appends do not change the chat's revision: the kept replay must still see them.
    for i in 5..12 {
        step(i);
    }
    assert_eq!(chart_steps(&server.page(&path)), 12, "the chart after 7 more steps");
    // The same chart again: from the cache, the same series.
    let again = server.page(&path);
    assert_eq!(chart_steps(&again), 12);
    // The writer's gc replaces the log: the server opens the store again and goes on.
    writer.delete_chat("local", doomed).unwrap();
    drop(chat);
    writer.close().unwrap();
    Store::gc(dir.path(), Options::default()).unwrap();
    let writer = Store::open(dir.path(), Options::default()).unwrap();
    writer.chat("local", id).unwrap().append(NewMessage::assistant("after the gc")).unwrap();
    assert_eq!(chart_steps(&server.page(&path)), 13, "the chart after a gc and one more step");
    assert_eq!(server.get(&format!("/chat/{doomed}")).status, 404, "the collected chat is gone");
    writer.close().unwrap();
}

/// A store of one owner whose chat `every` holds every `Part` variant: text, a tool call, a
/// tool result inline and one archived, an approval request and its response, an attachment
/// with its blob, a summary (a published checkpoint), a hidden message and a feedback user
/// message; beside it an empty chat and another owner's chat. Returns (dir guard, store,
/// every, empty, foreign, archive id, hidden text).
fn every_part_store() -> (tempfile::TempDir, PathBuf, String, String, String, String, &'static str) {
    use undertext::{Part, Role, ToolContent};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let s = Store::open(&dir, Options::default().create_if_missing(true)).unwrap();
    let id = s
        .create_chat("local", undertext::ChatMeta { title: "Every part".into(), ..Default::default() })
        .unwrap();
    let empty = s
        .create_chat("local", undertext::ChatMeta { title: "Nothing yet".into(), ..Default::default() })
        .unwrap();
    let foreign = s
        .create_chat("someone-else", undertext::ChatMeta { title: "private".into(), ..Default::default() })
        .unwrap();
    let chat = s.chat("local", id).unwrap();
    let msg = |role, parts| NewMessage { role, parts, feedback: false };
    chat.append(NewMessage::system("You are terse.")).unwrap();
    chat.append(NewMessage::user("Read the okapi config and look at the picture.")).unwrap();
    chat.append(msg(
        Role::Assistant,
        vec![Part::ToolCall {
            id: "c1".into(),
            name: "read_file".into(),
            args: "{\"path\":\"okapi.toml\"}".into(),
        }],
    ))
    .unwrap();
    chat.append(NewMessage::tool_result("c1", "colour = \"striped\"")).unwrap();
    chat.append(msg(
        Role::Assistant,
        vec![Part::ToolCall { id: "c2".into(), name: "run".into(), args: "{\"cmd\":\"make\"}".into() }],
    ))
    .unwrap();
    let mut log = String::new();
    for i in 0..800 {
        log.push_str(&format!("build row {i} fine\n"));
    }
    let archive = s.archive("local", &log).unwrap();
    chat.append(msg(
        Role::Tool,
        vec![Part::ToolResult {
            call_id: "c2".into(),
            content: ToolContent::Archived { archive, preview: "build row 0 fine …".into() },
            is_error: false,
        }],
    ))
    .unwrap();
    chat.append(msg(
        Role::Assistant,
        vec![Part::ApprovalRequest {
            id: "ap1".into(),
            call_id: Some("c3".into()),
            prompt: "Delete okapi.toml?".into(),
        }],
    ))
    .unwrap();
    chat.append(msg(
        Role::User,
        vec![Part::ApprovalResponse { id: "ap1".into(), approved: false, reason: Some("keep it".into()) }],
    ))
    .unwrap();
    let png = b"\x89PNG\r\n\x1a\n not really a picture".as_slice();
    chat.append_with_blobs(
        &[png],
        vec![msg(
            Role::User,
            vec![
                Part::Text("Here is the picture.".into()),
                Part::Attachment { mime: "image/png".into(), blob: undertext::BlobId::of(png) },
            ],
        )],
    )
    .unwrap();
    chat.append(NewMessage::assistant("A striped okapi.")).unwrap();
    chat.append(NewMessage::feedback("format error: answer in one word")).unwrap();
    chat.append(NewMessage::assistant("Okapi.")).unwrap();
    let hidden = "an aside the harness hid";
    let seq = chat.append(NewMessage::user(hidden)).unwrap();
    chat.hide(&[std::ops::Range { start: seq, end: seq + 1 }], chat.revision()).unwrap();
    for i in 0..3 {
        chat.append(NewMessage::user(format!("question {i}"))).unwrap();
        chat.append(NewMessage::assistant(format!("answer {i}"))).unwrap();
    }
    let opts = undertext::CheckpointOptions::default();
    let cp = chat.build_checkpoint(&undertext::Extractive::default(), &opts).unwrap();
    chat.publish_checkpoint(&cp).unwrap();
    drop(chat);
    s.close().unwrap();
    (tmp, dir, id.to_string(), empty.to_string(), foreign.to_string(), archive.id.to_string(), hidden)
}

/// The paths of `serve`'s router, read from its source.
fn router_paths() -> Vec<String> {
    let src = include_str!("../src/serve.rs");
    src.split(".route(\"").skip(1).map(|r| r.split('"').next().unwrap().to_string()).collect()
}

#[test]
fn a_sweep_of_every_route_over_chats_with_every_part_type_never_answers_5xx() {
    let (_tmp, store, every, empty, foreign, aid, hidden) = every_part_store();
    let server = serve(&store, &[]);
    // Every route of the router, its path with a chat or archive in it, the query variants it
    // takes, and its query parameters.
    let routes: Vec<(&str, Vec<&str>, Vec<&str>)> = vec![
        ("/", vec!["", "?q=every", "?q=nothing-matches"], vec!["q"]),
        (
            "/search",
            vec!["", "?q=okapi", "?q=okapi&chat={c}&limit=1&hidden=1", "?q=%21%21"],
            vec!["q", "chat", "limit", "hidden"],
        ),
        ("/style.css", vec![""], vec![]),
        ("/favicon.ico", vec![""], vec![]),
        ("/chat/{id}", vec!["", "?rev=0", "?rev=1", "?from=0", "?from=3"], vec!["rev", "from"]),
        ("/chat/{id}/attempts", vec!["", "?turn=0", "?turn=2"], vec!["turn"]),
        (
            "/chat/{id}/view",
            vec!["", "?window=1000", "?window=5000", "?window=8000&reserve=0", "?window=200000"],
            vec!["window", "reserve"],
        ),
        ("/chat/{id}/checkpoints", vec!["", "?window=1000", "?window=16000"], vec!["window"]),
        ("/chat/{id}/chart", vec!["", "?window=1000"], vec!["window"]),
        ("/chat/{id}/chart.svg", vec!["", "?window=1000"], vec!["window"]),
        (
            "/archive/{id}",
            vec!["", "?start=0&end=10&unit=line", "?start=5&end=9&unit=byte"],
            vec!["start", "end", "unit"],
        ),
    ];
    let listed: Vec<&str> = routes.iter().map(|r| r.0).collect();
    for p in router_paths() {
        assert!(listed.contains(&p.as_str()), "the sweep covers the route {p}");
    }
    let bad_values =
        ["abc", "-1", "1.5", "0", "4000", "99999999999999999999999", "18446744073709551615", "%ff"];
    let mut requests = 0;
    for (route, variants, params) in &routes {
        let ids: Vec<&str> = if route.contains("/chat/") {
            vec![&every, &empty, &foreign]
        } else if route.starts_with("/archive/") {
            vec![&aid]
        } else {
            vec![""]
        };
        for id in ids {
            let path = route.replace("{id}", id);
            for v in variants {
                let url = format!("{path}{}", v.replace("{c}", &every));
                let r = server.get(&url);
                requests += 1;
                assert!(r.status < 500, "{url}: {} {}", r.status, r.body);
            }
            for key in params {
                for bad in bad_values {
                    let url = format!("{path}?{key}={bad}");
                    let r = server.get(&url);
                    requests += 1;
                    assert!(r.status < 500, "{url}: {} {}", r.status, r.body);
                    if r.status == 400 {
                        assert!(r.body.contains("expected"), "{url}: says what was expected: {}", r.body);
                    }
                }
            }
        }
    }
    assert!(requests > 300, "{requests} requests");

    // The pages name what they should.
    let page = server.page(&format!("/chat/{every}"));
    for want in [
        "You are terse.",
        "<b>tool call</b> <code>read_file</code>",
        "colour = &quot;striped&quot;",
        "chars inline",
        &format!("archived <a href=\"/archive/{aid}\">"),
        "<b>approval request</b>",
        "Delete okapi.toml?",
        "<b>approval denied</b>",
        "keep it",
        "attachment image/png",
        "format error: answer in one word",
    ] {
        assert!(page.contains(want), "the chat page shows {want:?}");
    }
    assert!(!page.contains(hidden), "a hidden message is not on the chat page");
    for path in [format!("/chat/{every}/view"), format!("/chat/{every}/view?window=1000&reserve=200")] {
        let page = server.page(&path);
        assert!(page.contains("attachment image/png"), "{path}: the attachment is in the model view");
        assert!(page.contains("id=\"decision\""), "{path}");
    }
    let page = server.page(&format!("/chat/{every}/checkpoints"));
    assert!(page.contains("Published checkpoint: covers seqs 0.."), "{page}");
    assert!(page.contains("<div class=\"summary\"><b>checkpoint summary</b>"));
    let page = server.page(&format!("/search?q=okapi&chat={every}"));
    assert!(page.contains(&format!("data-chat=\"{every}\"")), "{page}");
    let page = server.page(&format!("/archive/{aid}?start=0&end=2&unit=line"));
    assert!(page.contains("build row 1 fine"), "{page}");
}

#[test]
fn a_window_below_the_reserve_is_a_400_naming_the_limit_and_every_bad_parameter_names_what_it_expected() {
    let (_tmp, store, every, _, _, aid, _) = every_part_store();
    let server = serve(&store, &[]);
    let r = server.get(&format!("/chat/{every}/view?window=4000"));
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body.contains("window 4000: expected more than the reserve for the answer, 4,096 tokens"),
        "{}",
        r.body
    );
    for (path, key) in [
        (format!("/chat/{every}/view?window=abc"), "window"),
        (format!("/chat/{every}/view?window=2000&reserve=1500"), "reserve"),
        (format!("/chat/{every}/checkpoints?window=-5"), "window"),
        (format!("/chat/{every}/chart.svg?window=99999999999999999999999"), "window"),
        (format!("/chat/{every}?rev=abc"), "rev"),
        (format!("/chat/{every}?from=1.5"), "from"),
        (format!("/chat/{every}/attempts?turn=18446744073709551615"), "turn"),
        ("/search?q=okapi&limit=0".to_string(), "limit"),
        ("/search?q=okapi&hidden=maybe".to_string(), "hidden"),
        (format!("/archive/{aid}?unit=furlong"), "unit"),
        (format!("/archive/{aid}?end=abc"), "end"),
    ] {
        let r = server.get(&path);
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        assert!(r.body.contains(&format!("{key}: expected ")), "{path}: names {key}: {}", r.body);
    }
}

#[test]
fn a_bind_beyond_loopback_needs_the_token_from_query_cookie_or_bearer_header_whatever_the_host() {
    let (_tmp, store, _, _) = store();
    let server = serve(&store, &["--bind", "0.0.0.0"]);
    let told = server.told("?token=");
    assert!(told.contains("reachable beyond this machine"), "{told}");
    assert!(told.contains("every chat of owner \"local\" (read-only)"), "{told}");
    let token = told.split("?token=").nth(1).unwrap().split_whitespace().next().unwrap().to_string();
    assert_eq!(token.len(), 64, "a generated token: {token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
    assert!(told.contains(&format!("Authorization: Bearer {token}")), "{told}");

    // Without the token: 401, whatever the Host says, on every path.
    for host in [format!("localhost:{}", server.port), "127.0.0.1".into(), "evil.example".into()] {
        for path in ["/", "/chat/chat-0000000000000001", "/style.css", "/nope"] {
            let r = server.get_as(path, Some(&host));
            assert_eq!(r.status, 401, "{path} Host {host}: {}", r.body);
            assert!(!r.body.contains("data-chat"), "{path}: no data");
            assert!(r.headers["www-authenticate"].starts_with("Bearer"), "{path}");
        }
    }
    // A wrong token, by any way: 401.
    let wrong = "0".repeat(64);
    let cookie = format!("undertext_token_{}", server.port);
    for r in [
        server.get(&format!("/?token={wrong}")),
        server.get(&format!("/?token={}", &token[..63])),
        server.get_with("/", &[format!("Authorization: Bearer {wrong}")]),
        server.get_with("/", &[format!("Cookie: {cookie}={wrong}")]),
        server.get_with("/", &[format!("Cookie: undertext_token_1={token}")]),
        server.get_with("/", &[format!("Authorization: Basic {token}")]),
    ] {
        assert_eq!(r.status, 401, "{}", r.body);
        assert!(!r.body.contains("data-chat"));
    }
    // The query once: a redirect to the same page without it, and the cookie.
    let r = server.get(&format!("/chat/chat-0000000000000001?rev=0&token={token}&from=0"));
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(r.headers["location"], "/chat/chat-0000000000000001?rev=0&from=0");
    let set = &r.headers["set-cookie"];
    assert!(set.starts_with(&format!("{cookie}={token};")), "{set}");
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"), "{set}");
    let r = server.get(&format!("/?token={token}"));
    assert_eq!((r.status, r.headers["location"].as_str()), (303, "/"));
    // Then the cookie, among others.
    let r = server.get_with("/", &[format!("Cookie: theme=dark; {cookie}={token}")]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("data-chat"));
    // Or the bearer header, with any Host (the token stands in for the Host check).
    for host in [format!("localhost:{}", server.port), "192.0.2.7:7878".into()] {
        let req = format!(
            "GET / HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        );
        let r = server.send(&req);
        assert_eq!(r.status, 200, "Host {host}: {}", r.body);
        assert!(r.body.contains("data-chat"));
    }
}

#[test]
fn a_loopback_bind_needs_no_token_unless_one_is_given_and_help_says_what_is_exposed() {
    let (_tmp, store, _, _) = store();
    let open = serve(&store, &[]);
    assert_eq!(open.get("/").status, 200, "loopback, no token: as before");
    let token = "a-token-of-the-harness_1234";
    let shut = serve(&store, &["--token", token]);
    let told = shut.told("every request needs the token");
    assert!(!told.contains(token), "a given token is not printed: {told}");
    assert_eq!(shut.get("/").status, 401);
    assert_eq!(shut.get_with("/", &[format!("Authorization: Bearer {token}")]).status, 200);
    assert_eq!(shut.get_with("/", &["Authorization: Bearer a-token-of-the-harness_1235".into()]).status, 401);
    // A token too short or unfit for a URL is refused before serving.
    let out = Command::new(env!("CARGO_BIN_EXE_undertext"))
        .arg("--store")
        .arg(&store)
        .args(["serve", "--port", "0", "--token", "short"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--token: expected 16 to 256 characters"));
    let help = Command::new(env!("CARGO_BIN_EXE_undertext")).args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    for want in ["every chat of the owner", "read-only", "--token", "needs a token", "Authorization: Bearer"]
    {
        assert!(help.contains(want), "--help says {want:?}: {help}");
    }
}

#[test]
fn the_chat_tabs_keep_the_window_the_reader_chose() {
    let (_tmp, store, id, _) = store();
    let server = serve(&store, &[]);
    for tab in ["view", "checkpoints", "chart"] {
        let page = server.page(&format!("/chat/{id}/{tab}?window=64000"));
        for other in ["view", "checkpoints", "chart"] {
            let link = format!("href=\"/chat/{id}/{other}?window=64000\"");
            assert!(page.contains(&link), "{tab}: no {link}");
        }
        assert!(!page.contains("would write"), "{tab}: the page says a view writes");
    }
    // Without a window (or with one that is not a number) the tabs use the default.
    let page = server.page(&format!("/chat/{id}/view"));
    assert!(page.contains(&format!("href=\"/chat/{id}/chart\"")));
}
