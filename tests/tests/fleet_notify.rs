//! Change notification (issue 35): a store learns that another process committed to a chat
//! without a query (LISTEN/NOTIFY on channel `ut_chats`, schema version 2), in commit order;
//! a writer with `notify=off` sends none; a listener whose connection the server ends comes
//! back in a new epoch; through a transaction pooler the store does not listen (reads poll).
//! Against the server of `UNDERTEXT_FLEET_URL` (scripts/test-fleet starts it); skipped
//! without it. Waits are bounded only to fail instead of hanging: nothing here is timed.

#![cfg(feature = "fleet")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::time::{Duration, Instant};

use undertext::fleet::notified;
use undertext::{ChatId, ChatMeta, NewMessage, Store};
use undertext_tests::fleet::{fleet_url, opts, owner, psql, with_params};

/// Polls `f` until it returns `Some` (a minute at most: then the test fails).
fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Starts `store`'s listener and waits until it listens; returns its epoch.
fn listening(store: &Store, chat: ChatId) -> u64 {
    until("the listener to listen", || notified(store, chat)).0
}

fn new_chat(store: &Store, o: &str) -> ChatId {
    store.create_chat(o, ChatMeta { title: "n".into(), ..Default::default() }).unwrap()
}

#[test]
fn a_foreign_append_is_notified_in_commit_order_and_notify_off_sends_none() {
    let Some(url) = fleet_url() else { return };
    let o = owner("notify");
    let reader = Store::open(&url, opts()).unwrap();
    let writer = Store::open(&url, opts()).unwrap();
    let quiet_writer = Store::open(with_params(&url, "notify=off"), opts()).unwrap();
    let chat = new_chat(&writer, &o);
    let quiet = new_chat(&writer, &o);
    let epoch = listening(&reader, chat);
    // Nothing committed since the listener started: nothing known of the chat yet.
    assert_eq!(notified(&reader, chat), Some((epoch, 0)));

    // Creation was version 1 (before the listener); each append is one more.
    let w = writer.chat(&o, chat).unwrap();
    w.append(NewMessage::user("first")).unwrap();
    assert_eq!(until("version 2", || notified(&reader, chat).filter(|n| n.1 >= 2)), (epoch, 2));
    w.append_batch(vec![NewMessage::assistant("a"), NewMessage::assistant("b")]).unwrap();
    assert_eq!(until("version 3", || notified(&reader, chat).filter(|n| n.1 >= 3)), (epoch, 3));

    // A writer with notify=off commits without notifying; a notifying commit after it is
    // delivered, and notifications arrive in commit order, so by then the quiet one would
    // have been seen.
    quiet_writer.chat(&o, quiet).unwrap().append(NewMessage::user("unannounced")).unwrap();
    w.append(NewMessage::user("fence")).unwrap();
    until("the fence", || notified(&reader, chat).filter(|n| n.1 >= 4));
    assert_eq!(notified(&reader, quiet), Some((epoch, 0)), "notify=off sent a notification");
    // The reader still sees the quiet write where it queries.
    assert_eq!(reader.chat(&o, quiet).unwrap().messages().unwrap().len(), 1);
    assert_eq!(reader.chat(&o, chat).unwrap().messages().unwrap().len(), 4);
}

#[test]
fn a_listener_the_server_disconnects_comes_back_in_a_new_epoch() {
    let Some(url) = fleet_url() else { return };
    let o = owner("notify-epoch");
    let app = o.replace('-', "_");
    let reader = Store::open(with_params(&url, &format!("application_name={app}")), opts()).unwrap();
    let writer = Store::open(&url, opts()).unwrap();
    let chat = new_chat(&writer, &o);
    let epoch = listening(&reader, chat);
    let ended = psql(
        &url,
        &format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = '{app}' AND query LIKE 'LISTEN%'"
        ),
    );
    assert_eq!(ended.trim(), "1", "the listener's connection");
    let again = until("a new epoch", || notified(&reader, chat).filter(|n| n.0 > epoch)).0;
    writer.chat(&o, chat).unwrap().append(NewMessage::user("after the reconnect")).unwrap();
    assert_eq!(until("version 2", || notified(&reader, chat).filter(|n| n.1 >= 2)), (again, 2));
}

#[test]
fn through_a_transaction_pooler_the_store_does_not_listen() {
    let Some(url) = fleet_url() else { return };
    let Ok(pooled) = std::env::var("UNDERTEXT_FLEET_PGBOUNCER_URL") else {
        eprintln!("skipped: UNDERTEXT_FLEET_PGBOUNCER_URL is not set");
        return;
    };
    let o = owner("notify-pooled");
    let store = Store::open(&pooled, opts()).unwrap();
    let chat = new_chat(&store, &o);
    assert_eq!(notified(&store, chat), None);
    // Its commits still notify direct listeners.
    let reader = Store::open(&url, opts()).unwrap();
    let epoch = listening(&reader, chat);
    store.chat(&o, chat).unwrap().append(NewMessage::user("through PgBouncer")).unwrap();
    assert_eq!(until("version 2", || notified(&reader, chat).filter(|n| n.1 >= 2)), (epoch, 2));
    assert_eq!(notified(&store, chat), None);
}

/// What a reader of chat `id` shows: every message (seq, revision, parts), the length, the
/// revision, the title, the published checkpoint, and the view under `budget` as requests
/// carry it.
fn shown(chat: &undertext::Chat, budget: &undertext::Budget) -> (String, String) {
    let view = chat.view(budget).unwrap();
    let state = format!(
        "len {} revision {} title {:?} published {:?} messages {:?}",
        chat.len(),
        chat.revision(),
        chat.meta().title,
        chat.published_checkpoint(),
        chat.messages().unwrap().iter().map(|m| (m.seq, m.revision, &m.parts)).collect::<Vec<_>>()
    );
    (state, view.to_openai_json())
}

/// One foreign write of the test below: what it is, and the write.
type Step<'a> = (&'a str, Box<dyn Fn() + 'a>);

#[test]
fn a_held_chat_following_notifications_shows_what_a_fresh_open_shows_after_foreign_appends_edits_and_truncations()
 {
    let Some(url) = fleet_url() else { return };
    let o = owner("follow");
    let writer = Store::open(&url, opts()).unwrap();
    let reader = Store::open(&url, opts()).unwrap();
    let id = new_chat(&writer, &o);
    let w = writer.chat(&o, id).unwrap();
    for i in 0..40 {
        w.append(NewMessage::user(format!("task {i}"))).unwrap();
        w.append(NewMessage::assistant(format!("answer {i}: value {}", i * 7))).unwrap();
    }
    // A window the whole chat fits in (the memo extends), and one it does not (cut views).
    let budgets = [undertext::Budget::new(1_000_000, 0), undertext::Budget::new(600, 100)];
    let held = reader.chat(&o, id).unwrap();
    for b in &budgets {
        held.view(b).unwrap();
    }
    listening(&reader, id);
    let copts = undertext::CheckpointOptions {
        segment_tokens: 20,
        fan_in: 4,
        ..undertext::CheckpointOptions::default()
    };
    // Each step is one foreign write; after it the held chat's view, once the reader's store
    // was told of it, is what a store opened afresh shows.
    let steps: Vec<Step<'_>> = vec![
        (
            "an append",
            Box::new(|| {
                w.append(NewMessage::assistant("one more")).unwrap();
            }),
        ),
        (
            "a batch",
            Box::new(|| {
                w.append_batch(vec![NewMessage::user("next task"), NewMessage::assistant("done")]).unwrap();
            }),
        ),
        (
            "an edit",
            Box::new(|| {
                w.edit(5, NewMessage::assistant("edited"), w.revision()).unwrap();
            }),
        ),
        (
            "appends after the edit",
            Box::new(|| {
                w.append(NewMessage::assistant("after the edit")).unwrap();
            }),
        ),
        (
            "a truncation",
            Box::new(|| {
                w.truncate(70, w.revision()).unwrap();
            }),
        ),
        (
            "an append after it",
            Box::new(|| {
                w.append(NewMessage::user("after the cut")).unwrap();
            }),
        ),
        (
            "a hide",
            Box::new(|| {
                w.hide(std::slice::from_ref(&(10..12)), w.revision()).unwrap();
            }),
        ),
        (
            "a new title",
            Box::new(|| {
                w.set_meta(ChatMeta { title: "renamed".into(), ..Default::default() }).unwrap();
            }),
        ),
        (
            "a published checkpoint",
            Box::new(|| {
                let cp = w.build_checkpoint(&undertext::Extractive::default(), &copts).unwrap();
                w.publish_checkpoint(&cp).unwrap();
            }),
        ),
        (
            "appends after it",
            Box::new(|| {
                w.append(NewMessage::assistant("after the checkpoint")).unwrap();
            }),
        ),
    ];
    for (what, step) in steps {
        step();
        let version: u64 =
            psql(&url, &format!("SELECT version FROM ut_chats WHERE id = {}", id.0)).trim().parse().unwrap();
        until(&format!("the notification of {what}"), || notified(&reader, id).filter(|n| n.1 >= version));
        let fresh_store = Store::open(&url, opts()).unwrap();
        let fresh = fresh_store.chat(&o, id).unwrap();
        for b in &budgets {
            // The held view first: it is what brings the held chat up to date.
            let held_view = held.view(b).unwrap().to_openai_json();
            let (state, view) = shown(&fresh, b);
            assert_eq!(held_view, view, "after {what}: the held chat's view differs from a fresh open's");
            assert_eq!(shown(&held, b).0, state, "after {what}: the held chat differs from a fresh open's");
        }
    }
}
