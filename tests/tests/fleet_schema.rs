//! Fleet mode's schema for operators (issue 35): versions recorded in `ut_schema`,
//! `undertext fleet init|migrate|status` (the real command line, `fleet_cli`), an open that
//! never runs DDL (`schema=manual`), a role granted only DML rights working on a schema an
//! operator created, and a database made before versions were recorded, adopted and
//! migrated; an owner's chats paged in SQL (schema version 4); chats found by an extra field in SQL
//! (version 5). Each test makes a database of its own on the server of `UNDERTEXT_FLEET_URL`
//! (scripts/test-fleet starts it); skipped without it.

#![cfg(feature = "fleet")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step fails the test")]

use std::process::Command;

use undertext::fleet::{SCHEMA_VERSION, SchemaStatus};
use undertext::{ChatMeta, NewMessage, Page, Store};
use undertext_tests::fleet::{as_role, fleet_url, fresh_database, opts, owner, psql, with_params};

const CLI: &str = env!("CARGO_BIN_EXE_fleet_cli");

/// Runs `undertext --store URL fleet ARGS…`; (success, stdout, stderr).
fn cli(url: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(CLI).args(["--store", url, "fleet"]).args(args).output().unwrap();
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

/// A login role with no rights beyond PUBLIC's (PostgreSQL 15: no CREATE on schema public).
fn new_role(url: &str, tag: &str) -> String {
    let role = owner(tag).replace('-', "_").to_lowercase();
    psql(url, &format!("CREATE ROLE {role} LOGIN"));
    role
}

/// What an application role needs on an existing schema: DML on its tables and sequences.
fn grant_dml(db_url: &str, role: &str) {
    psql(
        db_url,
        &format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}; \
             GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}"
        ),
    );
}

fn status(url: &str) -> SchemaStatus {
    undertext::fleet::schema_status(url).unwrap()
}

/// Writes a chat of `o` with one message through `url`; returns its id.
fn write_one(url: &str, o: &str, text: &str) -> undertext::ChatId {
    let store = Store::open(url, opts()).unwrap_or_else(|e| panic!("open {url}: {e}"));
    let id = store.create_chat(o, ChatMeta { title: "t".into(), ..Default::default() }).unwrap();
    store.chat(o, id).unwrap().append(NewMessage::user(text)).unwrap();
    id
}

#[test]
fn init_by_the_owner_then_a_role_with_only_dml_rights_works_on_it() {
    let Some(url) = fleet_url() else { return };
    let db = fresh_database(&url, "ut-schema-dml");
    let role = new_role(&url, "ut-dml");
    let app = as_role(&db, &role);
    // The role may not create tables: proven on the server itself.
    let denied = Command::new("psql").args([&app, "-tAc", "CREATE TABLE ut_probe (i int)"]).output().unwrap();
    assert!(!denied.status.success(), "the DML role created a table");
    assert!(String::from_utf8_lossy(&denied.stderr).contains("permission denied"));

    // On an empty database its open cannot create the schema: the error says who can.
    let err = Store::open(&app, opts()).unwrap_err().to_string();
    assert!(err.contains("42501") && err.contains("fleet init"), "{err}");
    assert_eq!(status(&db).database, 0, "nothing was created");

    // The operator creates it with the command line.
    let (ok, out, e) = cli(&db, &["init"]);
    assert!(ok, "fleet init: {e}");
    assert!(out.contains(&format!("init: created the schema at version {SCHEMA_VERSION}")), "{out}");
    let (ok, out, _) = cli(&db, &["status", "--json"]);
    assert!(ok);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (j["database"].as_u64(), j["build"].as_u64()),
        (Some(SCHEMA_VERSION.into()), Some(SCHEMA_VERSION.into()))
    );
    assert_eq!((j["usable"].as_bool(), j["recorded"].as_bool()), (Some(true), Some(true)), "{out}");
    let (ok, out, _) = cli(&db, &["init"]);
    assert!(ok && out.contains("init: nothing to do"), "{out}");
    assert_eq!(
        psql(&db, "SELECT string_agg(version::text, ',' ORDER BY version) FROM ut_schema").trim(),
        "1,2,3,4,5"
    );

    // With DML rights only, the application role works: writes, reads from another
    // process's store, owner walls, and gc.
    grant_dml(&db, &role);
    let o = owner("dml");
    let id = write_one(&app, &o, "written by a role without DDL rights");
    let other = Store::open(with_params(&app, "schema=manual"), opts()).unwrap();
    let chat = other.chat(&o, id).unwrap();
    assert_eq!(chat.messages().unwrap().len(), 1);
    chat.append(NewMessage::assistant("and answered")).unwrap();
    assert_eq!(other.chats(&o, Page { limit: 100, after: None }).unwrap().chats.len(), 1);
    assert!(other.chat("someone-else", id).is_err(), "owner walls hold");
    other.delete_chat(&o, id).unwrap();
    drop(other);
    let report = Store::gc(&app, opts()).unwrap();
    assert_eq!(report.deleted_chats, 1);
    // The role's opens ran no DDL: the schema's objects are still the owner's.
    assert_eq!(
        psql(
            &db,
            &format!("SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tableowner = '{role}'")
        )
        .trim(),
        "0"
    );
}

#[test]
fn schema_manual_creates_nothing_and_names_init() {
    let Some(url) = fleet_url() else { return };
    let db = fresh_database(&url, "ut-schema-manual");
    let err = Store::open(with_params(&db, "schema=manual"), opts()).unwrap_err().to_string();
    assert!(err.contains("no Undertext schema") && err.contains("fleet init"), "{err}");
    assert_eq!(psql(&db, "SELECT to_regclass('ut_chats') IS NULL").trim(), "t");
    let (ok, out, _) = cli(&db, &["status"]);
    assert!(ok && out.contains("database version 0") && out.contains("fleet init"), "{out}");
    // The default (schema=auto) creates it at open, as before.
    write_one(&db, &owner("auto"), "created at open");
    assert_eq!(status(&db).database, SCHEMA_VERSION);
}

#[test]
fn a_database_made_before_versions_opens_and_is_adopted_by_migrate() {
    let Some(url) = fleet_url() else { return };
    let db = fresh_database(&url, "ut-schema-legacy");
    // Version 1 as fleet mode created it before ut_schema existed.
    assert_eq!(undertext::fleet::migrate_to(&db, 1).unwrap(), (0, 1));
    psql(&db, "DROP TABLE ut_schema");
    let s = status(&db);
    assert_eq!((s.database, s.recorded), (1, false));
    let o = owner("legacy");
    // schema=manual opens it as it is (no notification below version 2) and writes.
    let manual = with_params(&db, "schema=manual");
    let before = write_one(&manual, &o, "written at version 1");
    let store = Store::open(&manual, opts()).unwrap();
    assert_eq!(undertext::fleet::notified(&store, before), None, "no listener below version 2");
    drop(store);
    assert_eq!(status(&db), s, "schema=manual ran no DDL");
    // A role with DML rights only (schema=auto, the default) opens it as it is too.
    let role = new_role(&url, "ut-dml-legacy");
    grant_dml(&db, &role);
    write_one(&as_role(&db, &role), &o, "written by the DML role at version 1");
    assert_eq!(status(&db), s);

    let (ok, out, e) = cli(&db, &["status"]);
    assert!(ok && out.contains("database version 1 (created before versions were recorded)"), "{out}{e}");
    let (ok, out, e) = cli(&db, &["migrate"]);
    assert!(ok, "fleet migrate: {e}");
    assert!(
        out.contains(&format!("migrate: migrated the schema from version 1 to {SCHEMA_VERSION}")),
        "{out}"
    );
    assert_eq!(
        psql(&db, "SELECT string_agg(version || ':' || note, ',' ORDER BY version) FROM ut_schema").trim(),
        "1:the catalog (created before ut_schema: adopted),2:change notification (trigger ut_chats_notify, channel ut_chats),\
         3:chat titles in the catalog (ut_chats.title),4:chat activity in the catalog (ut_chats.last_ms),\
         5:chat extra metadata and blob grants in the catalog (ut_chats.extra, ut_grants)"
    );
    let (ok, out, _) = cli(&db, &["migrate"]);
    assert!(ok && out.contains("migrate: nothing to do"), "{out}");
    // What was written before reads back after.
    let store = Store::open(&db, opts()).unwrap();
    assert_eq!(store.chat(&o, before).unwrap().messages().unwrap().len(), 1);
    assert_eq!(store.chats(&o, Page { limit: 100, after: None }).unwrap().chats.len(), 2);
}

#[test]
fn a_newer_schema_opens_while_it_says_this_build_may_use_it() {
    let Some(url) = fleet_url() else { return };
    let db = fresh_database(&url, "ut-schema-newer");
    undertext::fleet::init(&db).unwrap();
    let next = SCHEMA_VERSION + 1;
    // An additive migration of a newer build: this one still opens the database.
    psql(&db, &format!("INSERT INTO ut_schema (version, compatible_from, note) VALUES ({next}, 1, 'newer')"));
    write_one(&db, &owner("newer"), "beside a newer build");
    // One that needs newer builds: refused, naming both versions.
    psql(
        &db,
        &format!(
            "INSERT INTO ut_schema (version, compatible_from, note) VALUES ({}, {next}, 'incompatible')",
            next + 1
        ),
    );
    let err = Store::open(&db, opts()).unwrap_err().to_string();
    assert!(
        err.contains(&format!("schema is version {}", next + 1)) && err.contains("upgrade undertext"),
        "{err}"
    );
    let (ok, out, _) = cli(&db, &["status"]);
    assert!(ok && out.contains("upgrade undertext"), "{out}");
}

#[test]
fn opens_racing_on_an_empty_database_create_the_schema_once() {
    let Some(url) = fleet_url() else { return };
    let db = fresh_database(&url, "ut-schema-race");
    let opened: Vec<Result<Store, undertext::Error>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8).map(|_| s.spawn(|| Store::open(&db, opts()))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in opened {
        r.unwrap();
    }
    assert_eq!(
        psql(&db, "SELECT string_agg(version::text, ',' ORDER BY version) FROM ut_schema").trim(),
        "1,2,3,4,5"
    );
}

#[test]
fn version_3_finds_chats_by_title_in_the_catalog_and_says_when_it_cannot() {
    let Some(url) = fleet_url() else { return };
    let db = fresh_database(&url, "ut-schema-titles");
    let store = Store::open(&db, opts()).unwrap();
    let o = owner("titles");
    let titled = |t: &str| store.create_chat(&o, ChatMeta { title: t.into(), ..Default::default() }).unwrap();
    let (a1, b, a2) = (titled("alpha"), titled("beta"), titled("alpha"));
    let find = |s: &Store, t: &str| undertext::fleet::titled(s, &o, t).unwrap();
    assert_eq!(find(&store, "alpha"), Some(vec![a1, a2]));
    assert_eq!(find(&store, "beta"), Some(vec![b]));
    assert_eq!(find(&store, "gamma"), Some(vec![]));
    // A title changed by a metadata write (from another store) moves in the catalog; an
    // append without metadata leaves it.
    let other = Store::open(&db, opts()).unwrap();
    let chat = other.chat(&o, b).unwrap();
    chat.set_meta(ChatMeta { title: "alpha".into(), ..Default::default() }).unwrap();
    chat.append(NewMessage::user("no metadata here")).unwrap();
    assert_eq!(find(&store, "alpha"), Some(vec![a1, b, a2]));
    assert_eq!(find(&store, "beta"), Some(vec![]));
    // What the catalog says is what find_chats says (from a fresh store: one that holds the
    // chat in memory answers from that state, not brought up to date by find_chats).
    let fresh = Store::open(&db, opts()).unwrap();
    let mut local: Vec<_> =
        fresh.find_chats(&o, undertext::MetaField::Title, "alpha").unwrap().iter().map(|c| c.id).collect();
    local.sort();
    assert_eq!(local, vec![a1, b, a2]);

    // A chat written before version 3 has no title in the catalog: it cannot say.
    let old = fresh_database(&url, "ut-schema-titles-old");
    undertext::fleet::migrate_to(&old, 2).unwrap();
    write_one(&with_params(&old, "schema=manual"), &o, "at version 2");
    let at2 = Store::open(with_params(&old, "schema=manual"), opts()).unwrap();
    assert_eq!(undertext::fleet::titled(&at2, &o, "t").unwrap(), None, "a version 2 catalog");
    drop(at2);
    let (ok, _, e) = cli(&old, &["migrate"]);
    assert!(ok, "{e}");
    let at3 = Store::open(&old, opts()).unwrap();
    assert_eq!(undertext::fleet::titled(&at3, &o, "t").unwrap(), None, "a chat made before version 3");
}

/// The summaries (id, last activity, length, revision) of every page of `owner`'s chats in
/// `store`, `limit` at a time.
fn every_page(store: &Store, owner: &str, limit: usize) -> Vec<(undertext::ChatId, u64, u64, u64)> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let page = store.chats(owner, Page { limit, after }).unwrap();
        out.extend(page.chats.iter().map(|c| (c.id, c.last_activity_ms, c.len, c.revision)));
        match page.next {
            Some(next) => after = Some(next),
            None => return out,
        }
    }
}

/// How many chats of `owner` `store`'s local replica holds.
fn held(store: &Store, owner: &str) -> u64 {
    store.owners().unwrap().into_iter().find(|(o, _)| o == owner).map_or(0, |(_, n)| n)
}

#[test]
fn an_owners_chats_are_paged_in_sql_and_a_page_pulls_only_its_chats() {
    let Some(url) = fleet_url() else { return };
    let db = fresh_database(&url, "ut-chats-page");
    let o = owner("page");
    let writer = Store::open(&db, opts()).unwrap();
    let ids: Vec<undertext::ChatId> = (0..30)
        .map(|i| {
            let id = writer.create_chat(&o, ChatMeta { title: "t".into(), ..Default::default() }).unwrap();
            writer.chat(&o, id).unwrap().append(NewMessage::user(format!("task {i}"))).unwrap();
            id
        })
        .collect();
    // Activity moves on: an older chat appended to, one edited, one renamed; one deleted.
    writer.chat(&o, ids[3]).unwrap().append(NewMessage::assistant("later")).unwrap();
    let edited = writer.chat(&o, ids[5]).unwrap();
    edited.edit(0, NewMessage::user("edited"), edited.revision()).unwrap();
    writer
        .chat(&o, ids[9])
        .unwrap()
        .set_meta(ChatMeta { title: "t".into(), model: "m".into(), ..Default::default() })
        .unwrap();
    writer.delete_chat(&o, ids[7]).unwrap();
    // What another path says: every chat titled "t", pulled and summarized from the replica.
    let all = Store::open(&db, opts()).unwrap();
    let expected: Vec<_> = all
        .find_chats(&o, undertext::MetaField::Title, "t")
        .unwrap()
        .iter()
        .map(|c| (c.id, c.last_activity_ms, c.len, c.revision))
        .collect();
    assert_eq!(expected.len(), 29);

    let fresh = Store::open(&db, opts()).unwrap();
    let first = fresh.chats(&o, Page { limit: 7, after: None }).unwrap();
    assert_eq!(first.chats.len(), 7);
    // The page's chats (and the one after it, which says that another page follows) are all
    // the fresh store pulled of the owner's 29.
    assert!(held(&fresh, &o) <= 8, "a page of 7 pulled {} chats of the owner", held(&fresh, &o));
    assert_eq!(every_page(&fresh, &o, 7), expected, "pages of 7 from a fresh store");
    assert_eq!(every_page(&writer, &o, 5), expected, "pages of 5 from the store that wrote them");

    // A chat written before version 4 has no activity in the catalog: the listing pulls the
    // owner's chats and pages them locally, as before.
    let old = fresh_database(&url, "ut-chats-page-old");
    undertext::fleet::migrate_to(&old, 3).unwrap();
    let before = write_one(&with_params(&old, "schema=manual"), &o, "at version 3");
    let (ok, _, e) = cli(&old, &["migrate"]);
    assert!(ok, "{e}");
    let after = write_one(&old, &o, "at version 4");
    let listed: Vec<_> =
        every_page(&Store::open(&old, opts()).unwrap(), &o, 1).into_iter().map(|c| c.0).collect();
    assert_eq!(listed, vec![after, before]);
}

#[test]
fn version_5_finds_chats_by_an_extra_field_and_pulls_those_it_cannot_tell() {
    let Some(url) = fleet_url() else { return };
    let o = owner("extra");
    let with = |v: &str| ChatMeta {
        title: "t".into(),
        extra: [("repo".to_string(), v.to_string())].into(),
        ..Default::default()
    };
    let find = |s: &Store| {
        let mut ids: Vec<_> = s
            .find_chats(&o, undertext::MetaField::Extra("repo"), "a")
            .unwrap()
            .iter()
            .map(|c| c.id)
            .collect();
        ids.sort();
        ids
    };
    // A chat written at version 4 (its extra fields not in the catalog), then the database
    // migrated: a lookup pulls it with the ones the catalog names, and finds it by its value.
    let db = fresh_database(&url, "ut-schema-extra");
    undertext::fleet::migrate_to(&db, 4).unwrap();
    let old = {
        let at4 = Store::open(with_params(&db, "schema=manual"), opts()).unwrap();
        let old_a = at4.create_chat(&o, with("a")).unwrap();
        at4.create_chat(&o, with("b")).unwrap();
        old_a
    };
    let (ok, _, e) = cli(&db, &["migrate"]);
    assert!(ok, "{e}");
    assert_eq!(psql(&db, "SELECT count(*) FROM ut_chats WHERE extra IS NULL").trim(), "2");
    let store = Store::open(&db, opts()).unwrap();
    let new_a = store.create_chat(&o, with("a")).unwrap();
    let new_b: Vec<_> = (0..5).map(|_| store.create_chat(&o, with("b")).unwrap()).collect();
    assert_eq!(
        psql(&db, &format!("SELECT extra ->> 'repo' FROM ut_chats WHERE id = {}", new_b[0].0)).trim(),
        "b",
        "a chat created at version 5 has its extra fields in the catalog"
    );
    let fresh = Store::open(&db, opts()).unwrap();
    assert_eq!(find(&fresh), vec![old, new_a]);
    assert_eq!(
        held(&fresh, &o),
        3,
        "the chat found, and the two the catalog cannot tell; not the five others"
    );
    // A metadata write of an old chat puts its fields in the catalog.
    store.chat(&o, old).unwrap().set_meta(with("c")).unwrap();
    assert_eq!(find(&Store::open(&db, opts()).unwrap()), vec![new_a]);
    assert_eq!(psql(&db, "SELECT count(*) FROM ut_chats WHERE extra IS NULL").trim(), "1");
}

#[test]
fn version_5_pulls_the_chats_that_grant_a_blob_and_those_written_before_it() {
    let Some(url) = fleet_url() else { return };
    let o = owner("grants");
    let db = fresh_database(&url, "ut-schema-grants");
    undertext::fleet::migrate_to(&db, 4).unwrap();
    let with_blob = |url: &str, text: &str| {
        let store = Store::open(url, opts()).unwrap();
        let id = store.create_chat(&o, ChatMeta::default()).unwrap();
        let (ids, _) = store
            .chat(&o, id)
            .unwrap()
            .append_with_blobs(&[text.repeat(20).as_bytes()], vec![NewMessage::user("see the blob")])
            .unwrap();
        ids[0]
    };
    let old = with_blob(&with_params(&db, "schema=manual"), "written at version 4 ");
    let (ok, _, e) = cli(&db, &["migrate"]);
    assert!(ok, "{e}");
    let new: Vec<_> = (0..5).map(|i| with_blob(&db, &format!("written at version 5, {i} "))).collect();
    assert_eq!(psql(&db, "SELECT count(*) FROM ut_grants").trim(), "5", "one note per grant since version 5");
    let fresh = Store::open(&db, opts()).unwrap();
    assert_eq!(
        fresh.get_blobs(&o, &[new[2]]).unwrap()[0][..],
        "written at version 5, 2 ".repeat(20).as_bytes()[..]
    );
    assert_eq!(held(&fresh, &o), 2, "the chat granting it and the one whose grants the catalog cannot tell");
    assert_eq!(
        fresh.get_blobs(&o, &[old]).unwrap()[0][..],
        "written at version 4 ".repeat(20).as_bytes()[..]
    );
    // gc drops a deleted chat's notes with its records.
    let store = Store::open(&db, opts()).unwrap();
    let chat = store.chats(&o, Page { limit: 100, after: None }).unwrap().chats[0].id;
    let notes = |chat: undertext::ChatId| {
        psql(&db, &format!("SELECT count(*) FROM ut_grants WHERE chat = {}", chat.0))
    };
    assert_eq!(notes(chat).trim(), "1", "the newest chat's grant is noted");
    store.delete_chat(&o, chat).unwrap();
    Store::gc(&db, opts()).unwrap();
    assert_eq!(notes(chat).trim(), "0");
}
