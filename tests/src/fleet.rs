//! Helpers of the fleet tests (tests/tests/fleet_*.rs): the server's URL, worker processes
//! (`fleet_worker`) and the check of what they acknowledged against a fresh store.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers: a failed step fails the test")]

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::time::Duration;

use undertext::Budget;
use undertext::{ChatId, ChatMeta, Durability, NewMessage, Options, Part, Store};

use crate::child::{Ready, spawn_until_ready};

/// The server's URL (`UNDERTEXT_FLEET_URL`), or `None` with a note (a failure when
/// `UNDERTEXT_FLEET_REQUIRED=1`).
pub fn fleet_url() -> Option<String> {
    let url = std::env::var("UNDERTEXT_FLEET_URL").ok().filter(|u| !u.is_empty());
    if url.is_none() {
        assert!(
            !std::env::var("UNDERTEXT_FLEET_REQUIRED").is_ok_and(|v| v == "1"),
            "UNDERTEXT_FLEET_REQUIRED=1 but UNDERTEXT_FLEET_URL is not set"
        );
        eprintln!("skipped: UNDERTEXT_FLEET_URL is not set (scripts/test-fleet sets it)");
    }
    url
}

/// Options of the fleet tests' stores.
pub fn opts() -> Options {
    Options::default().durability(Durability::None)
}

/// An owner name no other test or run uses.
pub fn owner(tag: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{tag}-{}-{nanos}", std::process::id())
}

/// Creates `n` chats of `owner`, each starting with a user turn.
pub fn chats(store: &Store, owner: &str, n: usize) -> Vec<ChatId> {
    (0..n)
        .map(|i| {
            let id = store
                .create_chat(owner, ChatMeta { title: format!("chat {i}"), ..Default::default() })
                .unwrap();
            store.chat(owner, id).unwrap().append(NewMessage::user(format!("task {i}"))).unwrap();
            id
        })
        .collect()
}

/// Starts the `fleet_worker` binary `bin` (see its documentation; tests pass
/// `env!("CARGO_BIN_EXE_fleet_worker")`) and waits for its `ready`.
pub fn worker(bin: &str, url: &str, owner: &str, seed: u64, steps: u64, chats: &[ChatId]) -> Ready {
    worker_after(bin, url, owner, seed, steps, chats, None)
}

/// [`worker`], which with `go` waits after its `ready` until the file `go` exists (so that
/// many workers, started one after another, run at once).
pub fn worker_after(
    bin: &str,
    url: &str,
    owner: &str,
    seed: u64,
    steps: u64,
    chats: &[ChatId],
    go: Option<&std::path::Path>,
) -> Ready {
    let list = chats.iter().map(|c| c.0.to_string()).collect::<Vec<_>>().join(",");
    let mut cmd = Command::new(bin);
    cmd.args([url, owner, &seed.to_string(), &steps.to_string(), &list]);
    if let Some(go) = go {
        cmd.env("UNDERTEXT_FLEET_GO", go);
    }
    spawn_until_ready(&mut cmd, Duration::from_secs(60), &format!("fleet_worker seed {seed}"))
}

/// What the workers acknowledged, per chat: the text each seq must hold.
#[derive(Debug, Default)]
pub struct Acked {
    /// (chat, seq) → (revision that wrote it: 0 for an append, else the edit's; text).
    pub texts: BTreeMap<(u64, u64), (u64, String)>,
    pub published: Vec<(u64, u64, u64)>,
    pub blobs: Vec<String>,
    pub errors: Vec<String>,
}

impl Acked {
    /// Takes one line a worker printed.
    pub fn take(&mut self, line: &str) {
        let mut it = line.splitn(2, ' ');
        let (Some(what), rest) = (it.next(), it.next().unwrap_or("")) else { return };
        match what {
            "ack" => {
                let mut f = rest.splitn(3, ' ');
                let (chat, seq, text) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
                let key = (chat.parse().unwrap(), seq.parse().unwrap());
                // Two acknowledged appends at one seq would be a lost write.
                if let Some((rev, old)) = self.texts.get(&key)
                    && *rev == 0
                {
                    panic!("two appends acknowledged at chat {} seq {}: {old:?} and {text:?}", key.0, key.1);
                }
                self.texts.entry(key).or_insert((0, text.to_string()));
            }
            "edit" => {
                let f: Vec<&str> = rest.split(' ').collect();
                let key = (f[0].parse().unwrap(), f[1].parse().unwrap());
                let rev: u64 = f[f.len() - 1].parse().unwrap();
                let text = f[2..f.len() - 1].join(" ");
                let e = self.texts.entry(key).or_insert((0, String::new()));
                if rev > e.0 {
                    *e = (rev, text);
                }
            }
            "pub" => {
                let f: Vec<u64> = rest.split(' ').map(|x| x.parse().unwrap()).collect();
                self.published.push((f[0], f[1], f[2]));
            }
            "blob" => self.blobs.push(rest.to_string()),
            "err" => self.errors.push(rest.to_string()),
            _ => {}
        }
    }

    /// Checks a fresh store's view of every chat: seqs dense, every acknowledged text at its
    /// seq (the latest acknowledged edit, else the append), every published checkpoint whole.
    /// Not `strict` (workers were killed, or calls failed): an edit that committed without
    /// its acknowledgement (the worker died, or the answer was lost) may have replaced an
    /// acknowledged text at a later revision.
    pub fn check(&self, url: &str, owner: &str, chats: &[ChatId], strict: bool) {
        let store = Store::open(url, opts()).unwrap();
        let mut by_chat: HashMap<u64, Vec<(u64, &str)>> = HashMap::new();
        for ((chat, seq), (_, text)) in &self.texts {
            by_chat.entry(*chat).or_default().push((*seq, text));
        }
        for id in chats {
            let chat = store.chat(owner, *id).unwrap();
            let msgs = chat.messages().unwrap();
            for (i, m) in msgs.iter().enumerate() {
                assert_eq!(m.seq, i as u64, "chat {id}: seqs are dense");
            }
            for (seq, text) in by_chat.get(&id.0).map(Vec::as_slice).unwrap_or(&[]) {
                let m = msgs.get(*seq as usize).unwrap_or_else(|| {
                    panic!("chat {id}: acknowledged seq {seq} missing (chat has {})", msgs.len())
                });
                let (acked_rev, _) = self.texts[&(id.0, *seq)];
                let superseded = !strict
                    && m.revision > acked_rev
                    && matches!(&m.parts[..], [Part::Text(t)] if t.ends_with(" edited"));
                if !superseded {
                    assert_eq!(m.parts, vec![Part::Text(text.to_string())], "chat {id} seq {seq}");
                }
            }
            // A published checkpoint is whole (its summary readable, the view starting with
            // it — after the task — while the chat is at its base revision), and no acknowledged publication is
            // lost: the published reach never goes back.
            let published = chat.published_checkpoint();
            for (_, _, reach) in self.published.iter().filter(|p| p.0 == id.0) {
                let now = published.map_or(0, |p| p.1);
                assert!(
                    now >= *reach,
                    "chat {id}: an acknowledged publication reaching {reach} is lost (now {now})"
                );
            }
            if let Some((base, reach)) = published {
                assert!(reach <= chat.len(), "chat {id}: reach {reach} past length {}", chat.len());
                let v = chat.view(&Budget::new(10_000_000, 0)).unwrap();
                if chat.revision() == base {
                    // The task (the first user message) may stay in front, verbatim; then
                    // the summary.
                    let first =
                        v.messages().iter().position(|m| matches!(&m.parts[..], [Part::Summary(_), ..]));
                    assert!(
                        first.is_some_and(|i| i == 0 || (i == 1 && v.messages()[0].seqs == (0..1))),
                        "chat {id}: the view starts with the summary, after the task at most: {:?}",
                        v.messages().iter().take(3).map(|m| &m.seqs).collect::<Vec<_>>()
                    );
                }
            }
        }
        for id in &self.blobs {
            let id: undertext::BlobId = id.parse().unwrap();
            assert!(store.get_blob(owner, &id).is_ok(), "shared blob {id} readable");
        }
    }
}

/// One value from PostgreSQL, through `psql` (installed with the server).
pub fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql").args([url, "-tAc", sql]).output().unwrap();
    assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A new, empty database on the server of `url` (named after `tag`, this process and the
/// time), and `url` pointing at it (its parameters kept).
pub fn fresh_database(url: &str, tag: &str) -> String {
    let name = owner(tag).replace('-', "_").to_lowercase();
    psql(url, &format!("CREATE DATABASE {name}"));
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let root = base.rsplit_once('/').unwrap().0;
    match query {
        Some(q) => format!("{root}/{name}?{q}"),
        None => format!("{root}/{name}"),
    }
}

/// `url` with user `role` in place of its own (the test server trusts every local role).
pub fn as_role(url: &str, role: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (_, host) = rest.split_once('@').unwrap();
    format!("{scheme}://{role}@{host}")
}

/// `url` with more parameters.
pub fn with_params(url: &str, params: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{params}")
}
