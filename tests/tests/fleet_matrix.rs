//! The API's claims, written once and run against every backend this run can reach: the
//! embedded store always, and fleet mode (PostgreSQL) when the tests are built with the
//! feature `fleet` and `UNDERTEXT_FLEET_URL` names a server (`scripts/test-fleet` starts one
//! on 127.0.0.1 and sets it). With `UNDERTEXT_FLEET_REQUIRED=1` a missing URL fails the run
//! instead of testing the embedded store alone.
//!
//! Fleet-only claims follow: two handles on one PostgreSQL (two processes, as far as the
//! engine can tell: each has its own replica) see each other's commits, race a publication
//! with exactly one winner, store shared content once, and keep owners apart.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]
#![allow(clippy::single_range_in_vec_init, reason = "a list of hidden ranges may hold one range")]

use undertext::Budget;
use undertext::Conflict;
use undertext::{BlobId, ChatMeta, Durability, Error, NewMessage, Options, Page, Part, Role, Store, Unit};
use undertext::{CheckpointOptions, Extractive};

/// A store of one backend; the embedded one's directory lives as long as it.
struct Backend {
    name: &'static str,
    store: Store,
    _dir: Option<tempfile::TempDir>,
}

fn opts() -> Options {
    Options::default().durability(Durability::None)
}

/// The fleet URL, if this run has one.
fn fleet_url() -> Option<String> {
    let url = std::env::var("UNDERTEXT_FLEET_URL").ok().filter(|u| !u.is_empty());
    if url.is_none() && std::env::var("UNDERTEXT_FLEET_REQUIRED").is_ok_and(|v| v == "1") {
        panic!(
            "UNDERTEXT_FLEET_REQUIRED=1 but UNDERTEXT_FLEET_URL is not set: start the servers with scripts/test-fleet"
        );
    }
    if cfg!(not(feature = "fleet")) {
        return None;
    }
    url
}

/// Every backend this run can reach, each freshly opened.
fn backends() -> Vec<Backend> {
    let dir = tempfile::tempdir().unwrap();
    let mut out =
        vec![Backend { name: "embedded", store: Store::open(dir.path(), opts()).unwrap(), _dir: Some(dir) }];
    if let Some(url) = fleet_url() {
        out.push(Backend { name: "fleet", store: Store::open(&url, opts()).unwrap(), _dir: None });
        if let Some(s3) = s3_url(&url) {
            out.push(Backend { name: "fleet+s3", store: Store::open(&s3, opts()).unwrap(), _dir: None });
        }
        if let Some(tls) = s3_tls_url(&url) {
            out.push(Backend {
                name: "fleet+s3+https",
                store: Store::open(&tls, opts()).unwrap(),
                _dir: None,
            });
        }
    } else {
        eprintln!(
            "fleet backend skipped: UNDERTEXT_FLEET_URL is not set (or built without the feature `fleet`)"
        );
    }
    out
}

/// The fleet URL with blobs in S3 (`UNDERTEXT_FLEET_S3`: the URL parameters naming s3s-fs,
/// set by scripts/fleet-servers), if this run has one.
fn s3_url(url: &str) -> Option<String> {
    let params = std::env::var("UNDERTEXT_FLEET_S3").ok().filter(|p| !p.is_empty())?;
    Some(format!("{url}{}{params}", if url.contains('?') { '&' } else { '?' }))
}

/// The fleet URL with blobs in S3 behind an `https://` endpoint (`UNDERTEXT_FLEET_S3_TLS`: the
/// same s3s-fs behind scripts/tls-proxy, with `s3_ca=` naming the test authority).
fn s3_tls_url(url: &str) -> Option<String> {
    let params = std::env::var("UNDERTEXT_FLEET_S3_TLS").ok().filter(|p| !p.is_empty())?;
    Some(format!("{url}{}{params}", if url.contains('?') { '&' } else { '?' }))
}

/// Two opens of the fleet URL with blobs in S3, and the bucket's directory on disk (s3s-fs
/// keeps an object as a file named by its key).
fn two_s3_stores() -> Option<(Store, Store, std::path::PathBuf)> {
    let url = s3_url(&fleet_url()?)?;
    let dir = std::path::PathBuf::from(std::env::var("UNDERTEXT_FLEET_S3_DIR").ok()?);
    Some((Store::open(&url, opts()).unwrap(), Store::open(&url, opts()).unwrap(), dir))
}

/// An owner name no other test (or earlier run on the same server) uses.
fn owner(tag: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{tag}-{}-{nanos}", std::process::id())
}

fn words(i: usize) -> String {
    format!("step {i}: the agent read a file and noted what it found in section {i} of the report")
}

#[test]
fn seqs_are_dense_turns_count_user_messages_and_a_chat_reads_back() {
    for b in backends() {
        let o = owner("dense");
        let chat = b.store.chat(&o, b.store.create_chat(&o, ChatMeta::default()).unwrap()).unwrap();
        assert_eq!(chat.append(NewMessage::system("sys")).unwrap(), 0, "{}", b.name);
        assert_eq!(chat.append(NewMessage::user("q1")).unwrap(), 1, "{}", b.name);
        let r = chat.append_batch(vec![NewMessage::assistant("a1"), NewMessage::user("q2")]).unwrap();
        assert_eq!(r, 2..4, "{}", b.name);
        let turns: Vec<u64> = chat.messages().unwrap().iter().map(|m| m.turn).collect();
        assert_eq!(turns, vec![0, 1, 1, 2], "{}", b.name);
        assert_eq!(chat.get(3).unwrap().parts, vec![Part::Text("q2".into())], "{}", b.name);
        assert_eq!(chat.revision(), 0, "{}: appends never change the revision", b.name);
    }
}

#[test]
fn edits_and_truncation_bump_the_revision_refuse_a_stale_one_and_keep_old_revisions_readable() {
    for b in backends() {
        let o = owner("edit");
        let chat = b.store.chat(&o, b.store.create_chat(&o, ChatMeta::default()).unwrap()).unwrap();
        for i in 0..5 {
            chat.append(NewMessage::assistant(format!("m{i}"))).unwrap();
        }
        assert_eq!(chat.edit(2, NewMessage::assistant("m2 edited"), 0).unwrap(), 1, "{}", b.name);
        match chat.edit(2, NewMessage::assistant("x"), 0) {
            Err(Error::StaleRevision { expected: 0, found: 1 }) => {}
            other => panic!("{}: expected StaleRevision, got {other:?}", b.name),
        }
        assert_eq!(chat.truncate(3, 1).unwrap(), 2, "{}", b.name);
        assert_eq!(chat.len(), 3, "{}", b.name);
        assert_eq!(chat.append(NewMessage::assistant("after")).unwrap(), 3, "{}", b.name);
        let old = chat.snapshot_at(0).unwrap();
        assert_eq!(old.len(), 5, "{}", b.name);
        assert_eq!(old.get(2).unwrap().parts, vec![Part::Text("m2".into())], "{}", b.name);
        assert_eq!(chat.get(2).unwrap().parts, vec![Part::Text("m2 edited".into())], "{}", b.name);
    }
}

#[test]
fn hidden_messages_leave_reads_bump_the_revision_and_stay_hidden_in_another_open() {
    for b in backends() {
        let o = owner("hide");
        let id = b.store.create_chat(&o, ChatMeta::default()).unwrap();
        let chat = b.store.chat(&o, id).unwrap();
        for i in 0..5 {
            chat.append(NewMessage::assistant(format!("m{i}"))).unwrap();
        }
        assert_eq!(chat.hide(&[1..3], 0).unwrap(), 1, "{}", b.name);
        assert!(matches!(chat.hide(&[4..5], 0), Err(Error::StaleRevision { .. })), "{}", b.name);
        let live: Vec<Part> = chat.messages().unwrap().into_iter().map(|m| m.parts[0].clone()).collect();
        let want: Vec<Part> = ["m0", "m3", "m4"].iter().map(|t| Part::Text((*t).into())).collect();
        assert_eq!(live, want, "{}", b.name);
        // The bytes stay: a hidden message is still read by its seq.
        assert_eq!(chat.get(1).unwrap().parts, vec![Part::Text("m1".into())], "{}", b.name);
        // Another handle (in fleet mode: pulled from the catalog) sees the same.
        let again = b.store.chat(&o, id).unwrap();
        let snap = again.snapshot();
        assert!(snap.is_hidden(1) && snap.is_hidden(2) && !snap.is_hidden(3), "{}", b.name);
        assert_eq!(snap.live_len(), 3, "{}", b.name);
    }
    // A process that never saw the hide (a fresh open of the same server) reads it.
    if let Some(url) = fleet_url() {
        let o = owner("hide-fresh");
        let a = Store::open(&url, opts()).unwrap();
        let id = a.create_chat(&o, ChatMeta::default()).unwrap();
        let chat = a.chat(&o, id).unwrap();
        chat.append_batch(vec![NewMessage::assistant("keep"), NewMessage::assistant("drop")]).unwrap();
        chat.hide(&[1..2], 0).unwrap();
        let b = Store::open(&url, opts()).unwrap();
        let seen = b.chat(&o, id).unwrap().messages().unwrap();
        assert_eq!(seen.len(), 1, "fleet: a fresh process sees the hide");
        assert_eq!(seen[0].parts, vec![Part::Text("keep".into())]);
    }
}

#[test]
fn blobs_are_stored_once_read_verified_and_only_by_an_owner_holding_a_grant() {
    for b in backends() {
        let (alice, bob) = (owner("alice"), owner("bob"));
        let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let id = b.store.put_blob(&alice, b"a tool result").unwrap();
        assert_eq!(b.store.put_blob(&alice, b"a tool result").unwrap(), id, "{}", b.name);
        assert_eq!(&*b.store.get_blob(&alice, &id).unwrap(), b"a tool result", "{}", b.name);
        let big_id = b.store.put_blob(&alice, &big).unwrap();
        assert_eq!(
            b.store.get_blob_range(&alice, &big_id, 100_000..100_010).unwrap(),
            &big[100_000..100_010]
        );
        assert_eq!(b.store.blob_len(&alice, &big_id).unwrap(), 300_000, "{}", b.name);
        for e in [
            b.store.get_blob(&bob, &id).unwrap_err(),
            b.store.get_blob(&bob, &BlobId::of(b"never")).unwrap_err(),
        ] {
            assert!(matches!(e, Error::NotFound { .. }), "{}: {e}", b.name);
        }
        assert!(!b.store.contains_blob(&bob, &id).unwrap(), "{}", b.name);
        let chat = b.store.create_chat(&alice, ChatMeta::default()).unwrap();
        assert!(matches!(b.store.chat(&bob, chat), Err(Error::NotFound { .. })), "{}", b.name);
    }
}

#[test]
fn a_long_tool_result_is_archived_behind_a_preview_and_read_back_exactly() {
    for b in backends() {
        let o = owner("archive");
        let chat = b.store.chat(&o, b.store.create_chat(&o, ChatMeta::default()).unwrap()).unwrap();
        let text: String = (0..3000).map(|i| format!("line {i}: value {}\n", i * 31)).collect();
        chat.append(NewMessage::user("read it")).unwrap();
        let seq = chat.append(NewMessage::tool_result("c1", text.clone())).unwrap();
        let m = chat.get(seq).unwrap();
        let Part::ToolResult { content: undertext::ToolContent::Archived { archive, preview }, .. } =
            &m.parts[0]
        else {
            panic!("{}: expected an archived result, got {:?}", b.name, m.parts[0]);
        };
        assert!(preview.len() < text.len(), "{}", b.name);
        let got = b.store.read_context(&o, &archive.id, 100..200, Unit::Chars).unwrap();
        assert_eq!(got, text.chars().skip(100).take(100).collect::<String>(), "{}", b.name);
    }
}

#[test]
fn publication_is_guarded_by_revision_and_reach_and_the_view_starts_at_the_reach() {
    for b in backends() {
        let o = owner("publish");
        let c = b.store.chat(&o, b.store.create_chat(&o, ChatMeta::default()).unwrap()).unwrap();
        c.append(NewMessage::user("start")).unwrap();
        for i in 0..20 {
            c.append(NewMessage::assistant(words(i))).unwrap();
        }
        c.append(NewMessage::user("two")).unwrap();
        c.append(NewMessage::user("three")).unwrap();
        let s = Extractive::default();
        let copts = CheckpointOptions { segment_tokens: 5, fan_in: 4, ..CheckpointOptions::default() };
        let stale = c.build_checkpoint(&s, &copts).unwrap();
        c.edit(3, NewMessage::assistant("edited"), c.revision()).unwrap();
        match c.publish_checkpoint(&stale) {
            Err(Error::Conflict(Conflict::Edited { base, now })) => {
                assert_eq!((base, now), (0, 1), "{}", b.name)
            }
            other => panic!("{}: expected Edited, got {other:?}", b.name),
        }
        let cp = c.build_checkpoint(&s, &copts).unwrap();
        c.append(NewMessage::assistant("more")).unwrap();
        c.publish_checkpoint(&cp).unwrap();
        assert_eq!(c.published_checkpoint(), Some((1, cp.reach)), "{}", b.name);
        match c.publish_checkpoint(&cp) {
            Err(Error::Conflict(Conflict::NotNewer { published_reach })) => {
                assert_eq!(published_reach, cp.reach, "{}", b.name)
            }
            other => panic!("{}: expected NotNewer, got {other:?}", b.name),
        }
        let v = c.view(&Budget::new(1_000_000, 0)).unwrap();
        // The task stays in front; then the summary of 0..reach.
        let summary = v.messages().iter().find(|m| m.seqs.end > m.seqs.start + 1).unwrap();
        assert_eq!(summary.seqs, 0..cp.reach, "{}", b.name);
        assert_eq!(v.messages().last().unwrap().seqs.end, c.len(), "{}", b.name);
    }
}

#[test]
fn a_deleted_chat_is_not_found_and_listing_shows_an_owners_chats_newest_first() {
    for b in backends() {
        let o = owner("list");
        let ids: Vec<_> = (0..3)
            .map(|i| {
                let id = b
                    .store
                    .create_chat(&o, ChatMeta { title: format!("t{i}"), ..Default::default() })
                    .unwrap();
                b.store.chat(&o, id).unwrap().append(NewMessage::user(format!("hello {i}"))).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(3));
                id
            })
            .collect();
        b.store.delete_chat(&o, ids[1]).unwrap();
        assert!(matches!(b.store.chat(&o, ids[1]), Err(Error::NotFound { .. })), "{}", b.name);
        let page = b.store.chats(&o, Page { limit: 10, after: None }).unwrap();
        let listed: Vec<_> = page.chats.iter().map(|c| c.id).collect();
        assert_eq!(listed, vec![ids[2], ids[0]], "{}", b.name);
        assert_eq!(page.chats[0].meta.title, "t2", "{}", b.name);
        assert_eq!(page.chats[0].len, 1, "{}", b.name);
    }
}

#[test]
fn steps_and_attempts_come_back_in_order() {
    for b in backends() {
        let o = owner("steps");
        let c = b.store.chat(&o, b.store.create_chat(&o, ChatMeta::default()).unwrap()).unwrap();
        c.append(NewMessage::user("do it")).unwrap();
        c.record_step(1, "s1", 0, undertext::StepStatus::Interrupted, vec![NewMessage::assistant("half")])
            .unwrap();
        c.record_step(1, "s2", 0, undertext::StepStatus::Complete, vec![NewMessage::assistant("whole")])
            .unwrap();
        let a = c.attempts(1).unwrap();
        let streams: Vec<_> = a.iter().map(|x| x.stream_id.as_str()).collect();
        assert_eq!(streams, vec!["s1", "s2"], "{}", b.name);
        assert_eq!(a[1].steps[0].messages[0].parts, vec![Part::Text("whole".into())], "{}", b.name);
    }
}

#[test]
fn an_append_retried_with_its_idempotency_key_is_one_message_at_one_seq() {
    for Backend { name, store, _dir } in backends() {
        let o = owner("idem");
        let chat = store.chat(&o, store.create_chat(&o, ChatMeta::default()).unwrap()).unwrap();
        chat.append(NewMessage::user("run the tests")).unwrap();
        let done = NewMessage::assistant("all 40 pass");
        let seq = chat.append_idempotent(done.clone(), "call-1").unwrap();
        assert_eq!(seq, 1, "{name}");
        assert_eq!(
            chat.append_idempotent(done.clone(), "call-1").unwrap(),
            seq,
            "{name}: the same key again"
        );
        let two = || vec![NewMessage::user("and lint"), NewMessage::assistant("clean")];
        let seqs = chat.append_batch_idempotent(two(), "call-2").unwrap();
        assert_eq!(seqs, 2..4, "{name}");
        assert_eq!(chat.append_batch_idempotent(two(), "call-2").unwrap(), seqs, "{name}");
        // A key belongs to its chat: another chat may use it.
        let other = store.chat(&o, store.create_chat(&o, ChatMeta::default()).unwrap()).unwrap();
        assert_eq!(other.append_idempotent(done.clone(), "call-1").unwrap(), 0, "{name}");
        // A used key with another number of messages, and an empty key, write nothing.
        let wrong = chat.append_batch_idempotent(vec![NewMessage::user("x")], "call-2");
        assert!(
            matches!(&wrong, Err(Error::InvalidArgument(m)) if m.contains("2 message(s)")),
            "{name}: {wrong:?}"
        );
        let empty = chat.append_idempotent(NewMessage::user("x"), "");
        assert!(matches!(empty, Err(Error::InvalidArgument(_))), "{name}: {empty:?}");
        assert_eq!(chat.len(), 4, "{name}");
        assert_eq!(chat.get(1).unwrap().parts, vec![Part::Text("all 40 pass".into())], "{name}");
        // A later open finds the keys (embedded: the store closed and opened again, its index
        // replayed from the log; fleet: a new handle).
        let id = chat.id();
        let (store, chat) = match &_dir {
            Some(dir) => {
                drop((chat, other, store));
                let store = Store::open(dir.path(), opts()).unwrap();
                let chat = store.chat(&o, id).unwrap();
                (store, chat)
            }
            None => (store.clone(), store.chat(&o, id).unwrap()),
        };
        assert_eq!(chat.append_idempotent(done, "call-1").unwrap(), 1, "{name}: after an open");
        assert_eq!(chat.append_batch_idempotent(two(), "call-2").unwrap(), 2..4, "{name}: after an open");
        assert_eq!(chat.append_idempotent(NewMessage::user("new"), "call-3").unwrap(), 4, "{name}");
        assert_eq!(chat.len(), 5, "{name}");
        drop(store);
    }
}

/// Two fleet stores on the same server, as two processes would have.
fn two_fleet_stores() -> Option<(Store, Store)> {
    let url = fleet_url()?;
    Some((Store::open(&url, opts()).unwrap(), Store::open(&url, opts()).unwrap()))
}

#[test]
fn fleet_a_second_process_sees_commits_at_its_next_read_and_appends_stay_dense() {
    let Some((a, b)) = two_fleet_stores() else { return };
    let o = owner("shared");
    let id = a.create_chat(&o, ChatMeta { title: "shared".into(), ..Default::default() }).unwrap();
    let ca = a.chat(&o, id).unwrap();
    ca.append(NewMessage::user("from a")).unwrap();
    let cb = b.chat(&o, id).unwrap();
    assert_eq!(cb.len(), 1);
    assert_eq!(cb.meta().title, "shared");
    // Interleaved appends through both handles: each builds on the other's.
    for i in 0..10 {
        let (w, r) = if i % 2 == 0 { (&cb, &ca) } else { (&ca, &cb) };
        assert_eq!(w.append(NewMessage::assistant(format!("m{i}"))).unwrap(), 1 + i as u64);
        let _ = r;
    }
    let again = a.chat(&o, id).unwrap();
    let texts: Vec<_> = again.messages().unwrap().iter().map(|m| m.parts.clone()).collect();
    assert_eq!(texts.len(), 11);
    assert_eq!(texts[10], vec![Part::Text("m9".into())]);
    // An edit through one makes the other's stale expectation fail.
    cb.edit(0, NewMessage::user("from a, edited"), 0).unwrap();
    match ca.edit(1, NewMessage::assistant("x"), 0) {
        Err(Error::StaleRevision { expected: 0, found: 1 }) => {}
        other => panic!("expected StaleRevision, got {other:?}"),
    }
    assert_eq!(a.chat(&o, id).unwrap().get(0).unwrap().parts, vec![Part::Text("from a, edited".into())]);
    // A deletion through one is NotFound through the other.
    b.delete_chat(&o, id).unwrap();
    assert!(matches!(a.chat(&o, id), Err(Error::NotFound { .. })));
}

#[test]
fn fleet_an_append_key_is_seen_by_every_process_and_racing_retries_write_once() {
    let Some((a, b)) = two_fleet_stores() else { return };
    let o = owner("idem");
    let id = a.create_chat(&o, ChatMeta::default()).unwrap();
    let (ca, cb) = (a.chat(&o, id).unwrap(), b.chat(&o, id).unwrap());
    let seq = ca.append_idempotent(NewMessage::user("once"), "turn-1").unwrap();
    // The other process retries the same append: its handle had not seen it.
    assert_eq!(cb.append_idempotent(NewMessage::user("once"), "turn-1").unwrap(), seq);
    // Both retry the next one at the same time, many times over: one message.
    std::thread::scope(|s| {
        for c in [&ca, &cb, &ca, &cb] {
            s.spawn(move || {
                for _ in 0..5 {
                    assert_eq!(
                        c.append_idempotent(NewMessage::assistant("twice?"), "turn-2").unwrap(),
                        seq + 1
                    );
                }
            });
        }
    });
    let fresh = a.chat(&o, id).unwrap();
    assert_eq!(fresh.len(), seq + 2);
    assert_eq!(b.chat(&o, id).unwrap().len(), seq + 2);
}

#[test]
fn fleet_a_publication_race_between_two_processes_has_exactly_one_winner() {
    let Some((a, b)) = two_fleet_stores() else { return };
    let o = owner("race");
    let id = a.create_chat(&o, ChatMeta::default()).unwrap();
    let ca = a.chat(&o, id).unwrap();
    ca.append(NewMessage::user("start")).unwrap();
    for i in 0..12 {
        ca.append(NewMessage::assistant(words(i))).unwrap();
    }
    ca.append(NewMessage::user("two")).unwrap();
    ca.append(NewMessage::user("three")).unwrap();
    let cb = b.chat(&o, id).unwrap();
    let copts = CheckpointOptions { segment_tokens: 5, fan_in: 4, ..CheckpointOptions::default() };
    let cpa = ca.build_checkpoint(&Extractive::default(), &copts).unwrap();
    let cpb = cb.build_checkpoint(&Extractive::default(), &copts).unwrap();
    assert_eq!(cpa.reach, cpb.reach);
    let (ra, rb) = std::thread::scope(|s| {
        let ta = s.spawn(|| ca.publish_checkpoint(&cpa));
        let tb = s.spawn(|| cb.publish_checkpoint(&cpb));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    let wins = [&ra, &rb].iter().filter(|r| r.is_ok()).count();
    assert_eq!(wins, 1, "exactly one publication lands: {ra:?} {rb:?}");
    for r in [ra, rb] {
        if let Err(e) = r {
            assert!(matches!(e, Error::Conflict(Conflict::NotNewer { .. })), "the loser gets NotNewer: {e}");
        }
    }
    assert_eq!(b.chat(&o, id).unwrap().published_checkpoint(), Some((0, cpa.reach)));
    assert_eq!(a.chat(&o, id).unwrap().published_checkpoint(), Some((0, cpa.reach)));
}

#[test]
fn fleet_owners_are_walls_across_processes_and_shared_content_is_read_by_its_grantees() {
    let Some((a, b)) = two_fleet_stores() else { return };
    let (alice, bob) = (owner("alice"), owner("bob"));
    let id = a.put_blob(&alice, b"alice's secret notes").unwrap();
    assert_eq!(
        &*b.get_blob(&alice, &id).unwrap(),
        b"alice's secret notes",
        "another process reads alice's blob for alice"
    );
    assert!(matches!(b.get_blob(&bob, &id), Err(Error::NotFound { .. })), "bob holds no grant");
    // Bob stores the same bytes: he can read them now, and alice's grant is unchanged.
    assert_eq!(b.put_blob(&bob, b"alice's secret notes").unwrap(), id);
    assert_eq!(&*a.get_blob(&bob, &id).unwrap(), b"alice's secret notes");
    let chat = a.create_chat(&alice, ChatMeta::default()).unwrap();
    assert!(matches!(b.chat(&bob, chat), Err(Error::NotFound { .. })));
    assert!(b.chats(&bob, Page { limit: 10, after: None }).unwrap().chats.is_empty());
    // An attachment in alice's chat is readable by alice in the other process.
    let att = b"{\"state\": 1}";
    let (ids, _) = a
        .chat(&alice, chat)
        .unwrap()
        .append_with_blobs(
            &[att.as_slice()],
            vec![NewMessage {
                role: Role::User,
                parts: vec![Part::Attachment { mime: "application/json".into(), blob: BlobId::of(att) }],
                feedback: false,
            }],
        )
        .unwrap();
    assert_eq!(&*b.get_blob(&alice, &ids[0]).unwrap(), att);
    assert!(matches!(b.get_blob(&bob, &ids[0]), Err(Error::NotFound { .. })));
}

#[cfg(feature = "fleet")]
#[test]
fn fleet_an_unreachable_postgres_is_a_backend_error_naming_the_url_without_its_password() {
    // Port 1 on the loopback: nothing listens there.
    let e = Store::open("postgres://app:hunter2@127.0.0.1:1/agents", opts()).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::Backend { .. }), "{text}");
    assert!(text.contains("postgres://app:***@127.0.0.1:1/agents") && text.contains("connect"), "{text}");
    assert!(!text.contains("hunter2"), "the password is not shown: {text}");
    let e = Store::open("postgres://127.0.0.1:1/agents?blobs=ftp://x", opts()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
}

#[cfg(not(feature = "fleet"))]
#[test]
fn without_the_fleet_feature_a_postgres_url_is_refused_saying_which_feature_is_missing() {
    let e = Store::open("postgres://127.0.0.1:1/agents", opts()).unwrap_err();
    assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("feature `fleet`")), "{e}");
}

#[test]
fn directory_only_operations_refuse_a_fleet_url_instead_of_taking_it_for_a_directory() {
    let url = "postgres://app:hunter2@127.0.0.1:1/agents";
    let errors = [Store::open_read_only(url).unwrap_err(), Store::rebuild_index_at(url, opts()).unwrap_err()];
    for e in errors {
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("fleet URL postgres://app:***@")),
            "{e}"
        );
    }
    assert!(!std::path::Path::new("postgres:").exists(), "no directory was made from the URL");
}

#[test]
fn gc_of_a_fleet_url_collects_the_catalog_or_says_which_feature_is_missing() {
    let e = Store::gc("postgres://app:hunter2@127.0.0.1:1/agents", opts()).unwrap_err();
    let text = e.to_string();
    if cfg!(feature = "fleet") {
        // It went to the server (none listens on port 1), not to a directory.
        assert!(matches!(&e, Error::Backend { .. }) && text.contains("postgres://app:***@"), "{text}");
    } else {
        assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("feature `fleet`")), "{text}");
    }
    assert!(!text.contains("hunter2"), "{text}");
    assert!(!std::path::Path::new("postgres:").exists(), "no directory was made from the URL");
}

#[test]
fn fleet_s3_the_same_content_from_two_processes_is_one_object_uploaded_once() {
    let Some((a, b, bucket)) = two_s3_stores() else { return };
    let (alice, bob) = (owner("s3-alice"), owner("s3-bob"));
    let content = format!("a shared tool result {}", owner("content")).into_bytes();
    let id = a.put_blob(&alice, &content).unwrap();
    let object = bucket.join("t").join(id.to_string());
    let meta = std::fs::metadata(&object).unwrap_or_else(|e| panic!("object {}: {e}", object.display()));
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(b.put_blob(&bob, &content).unwrap(), id);
    let listed: Vec<_> = std::fs::read_dir(bucket.join("t"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name() == std::ffi::OsStr::new(&id.to_string()))
        .collect();
    assert_eq!(listed.len(), 1, "one object for the content");
    let again = std::fs::metadata(&object).unwrap();
    assert_eq!(
        again.modified().unwrap(),
        meta.modified().unwrap(),
        "the second process found it (HEAD) and did not PUT"
    );
    assert_eq!(&*b.get_blob(&alice, &id).unwrap(), content.as_slice(), "read from S3 by another process");
    assert_eq!(&*a.get_blob(&bob, &id).unwrap(), content.as_slice());
}

#[test]
fn fleet_s3_a_corrupted_object_is_refused_on_read_naming_the_blob_and_its_key() {
    let Some((a, b, bucket)) = two_s3_stores() else { return };
    let alice = owner("s3-corrupt");
    let content = format!("a result that will be damaged in the bucket {}", owner("c")).into_bytes();
    let id = a.put_blob(&alice, &content).unwrap();
    let object = bucket.join("t").join(id.to_string());
    let mut bytes = std::fs::read(&object).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    std::fs::write(&object, &bytes).unwrap();
    // The other process has no local copy: it reads the object and checks it.
    let e = b.get_blob(&alice, &id).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::Backend { .. }), "{text}");
    assert!(text.contains(&id.to_string()) && text.contains("content hash"), "{text}");
    assert!(text.contains(&format!("object t/{id}")), "{text}");
    // The writer's replica (the cache) still serves its verified copy.
    assert_eq!(&*a.get_blob(&alice, &id).unwrap(), content.as_slice());
}

#[test]
fn fleet_s3_a_database_opened_with_another_bucket_or_prefix_is_refused_naming_where_its_blobs_are() {
    let Some((a, _, dir)) = two_s3_stores() else { return };
    let alice = owner("s3-where");
    let content = format!("kept where the database says {}", owner("where")).into_bytes();
    let id = a.put_blob(&alice, &content).unwrap();
    let url = s3_url(&fleet_url().unwrap()).unwrap();
    for (from, to) in [("s3://undertext/t/", "s3://undertext/elsewhere/"), ("s3://undertext/", "s3://other/")]
    {
        let moved = url.replace(from, to);
        assert_ne!(moved, url);
        let e = Store::open(&moved, opts()).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, Error::InvalidArgument(_)), "{text}");
        assert!(
            text.contains("s3://undertext/t/") && text.contains(&to[..to.len() - 1]),
            "the error names where the blobs are and what the URL named: {text}"
        );
    }
    assert!(!dir.join("elsewhere").exists(), "a refused open wrote nothing");
    assert_eq!(&*a.get_blob(&alice, &id).unwrap(), content.as_slice());
}

#[test]
fn fleet_s3_over_https_stores_and_reads_through_tls_and_refuses_an_untrusted_certificate() {
    let Some(url) = fleet_url() else { return };
    let Some(tls) = s3_tls_url(&url) else {
        eprintln!("skipped: UNDERTEXT_FLEET_S3_TLS is not set (scripts/fleet-servers sets it)");
        return;
    };
    let dir = std::path::PathBuf::from(std::env::var("UNDERTEXT_FLEET_S3_DIR").unwrap());
    let alice = owner("s3-tls");
    let content = format!("a tool result sent over TLS {}", owner("tls")).into_bytes();
    let a = Store::open(&tls, opts()).unwrap();
    let id = a.put_blob(&alice, &content).unwrap();
    // The object went through the proxy into the same bucket and prefix (the database keeps
    // its S3 blobs in one place, whatever the endpoint).
    assert!(dir.join("t").join(id.to_string()).exists(), "object t/{id} in the bucket");
    let b = Store::open(&tls, opts()).unwrap();
    assert_eq!(&*b.get_blob(&alice, &id).unwrap(), content.as_slice(), "read back over TLS by another open");

    // Without the test authority the server's certificate is not trusted: a clear error, and
    // nothing is sent to the server (no object appears).
    let untrusted: String = tls.split('&').filter(|p| !p.starts_with("s3_ca=")).collect::<Vec<_>>().join("&");
    let other = format!("never stored: untrusted TLS {}", owner("untrusted")).into_bytes();
    let c = Store::open(&untrusted, opts()).unwrap();
    let e = c.put_blob(&alice, &other).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::Backend { .. }), "{text}");
    assert!(text.contains("certificate"), "the error names the certificate problem: {text}");
    assert!(!text.contains("tries"), "a certificate that does not verify is not tried again: {text}");
    let never = undertext::BlobId::of(&other);
    assert!(!dir.join("t").join(never.to_string()).exists(), "nothing uploaded without trust");

    // A CA bundle that is not there is refused when the store opens, naming the file.
    let missing = format!("{untrusted}&s3_ca=/nonexistent/ca.pem");
    let e = Store::open(&missing, opts()).unwrap_err().to_string();
    assert!(e.contains("/nonexistent/ca.pem"), "{e}");
}
