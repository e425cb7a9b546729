//! The catalog's schema: its numbered versions, what an open does about them, and the
//! operator's `init` and `migrate` (`undertext --store URL fleet init|migrate|status`).
//!
//! A database records the versions applied to it in `ut_schema` (one row per version, with
//! who applied it and when). Version 1 is the schema as fleet mode first created it (a
//! database made before `ut_schema` existed holds it without a row: it counts as version 1,
//! and the next migration records it as adopted). Each later version is one migration, run in
//! one transaction under an advisory lock, so processes opening together never race and a
//! failed migration leaves the database as it was.
//!
//! An open with `schema=auto` (the default) brings an older database up to this build's
//! version; `schema=manual` never runs DDL. Either way a database at
//! [`MIN_USABLE`]..[`SCHEMA_VERSION`] opens: what a missing migration adds is then off (below
//! version 2, change notification), so a role granted only `SELECT`, `INSERT`, `UPDATE`,
//! `DELETE` and sequence `USAGE` works on a schema an operator created. A database newer
//! than this build opens while its newest migration says builds of this version may still use
//! it (`ut_schema.compatible_from`: additive migrations keep older builds working, so a fleet
//! is upgraded one process at a time); else the open is refused, naming both versions.

use super::conn::Conn;
use super::pg::Fleet;
use crate::base::error::{Error, Result};

/// The schema version this build creates and migrates to.
pub const SCHEMA_VERSION: u32 = 5;

/// The oldest schema version this build opens (below it, `init` or `migrate` first).
pub const MIN_USABLE: u32 = 1;

/// The advisory lock key migrations run under.
pub(super) const SCHEMA_LOCK: i64 = 0x5554_5854_5343_4831;

/// Version 1: the catalog (engine/FORMAT.md, "Fleet mode", says what each column means).
/// Every statement is idempotent: a database created before `ut_schema` existed runs it
/// harmlessly when it is adopted.
const V1: &str = "
CREATE TABLE IF NOT EXISTS ut_owners (
    owner text PRIMARY KEY,
    version bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS ut_chats (
    id bigint PRIMARY KEY,
    owner text NOT NULL,
    revision bigint NOT NULL DEFAULT 0,
    next_seq bigint NOT NULL DEFAULT 0,
    published_reach bigint NOT NULL DEFAULT -1,
    version bigint NOT NULL DEFAULT 0,
    deleted boolean NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS ut_chats_owner ON ut_chats (owner);
CREATE SEQUENCE IF NOT EXISTS ut_chat_ids START 1;
CREATE TABLE IF NOT EXISTS ut_batches (
    id bigserial PRIMARY KEY,
    chat bigint NOT NULL,
    owner text NOT NULL,
    version bigint NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (chat, owner, version)
);
CREATE TABLE IF NOT EXISTS ut_records (
    batch bigint NOT NULL REFERENCES ut_batches (id),
    idx integer NOT NULL,
    kind smallint NOT NULL,
    chat bigint,
    seq bigint,
    payload bytea NOT NULL,
    PRIMARY KEY (batch, idx)
);
CREATE TABLE IF NOT EXISTS ut_blobs (
    id bytea PRIMARY KEY,
    kind smallint NOT NULL,
    codec smallint NOT NULL,
    raw_len integer NOT NULL,
    payload bytea NOT NULL,
    stored_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE ut_blobs ADD COLUMN IF NOT EXISTS doomed boolean NOT NULL DEFAULT false;
CREATE TABLE IF NOT EXISTS ut_settings (
    name text PRIMARY KEY,
    value text NOT NULL
);
";

/// Version 2: change notification. Every change of a chat's row (a committed batch, a new
/// chat) notifies channel `ut_chats` with `ID VERSION live|deleted`, delivered to listeners
/// when the transaction commits (see `notify.rs`). A transaction that set
/// `undertext.notify = off` (the URL's `notify=off`) sends none: a notifying commit takes
/// PostgreSQL's notification queue lock, which serializes the commits of every notifying
/// transaction of the cluster.
const V2: &str = "
CREATE OR REPLACE FUNCTION ut_chats_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('undertext.notify', true), '') <> 'off' THEN
        PERFORM pg_notify('ut_chats', NEW.id || ' ' || NEW.version || ' '
            || CASE WHEN NEW.deleted THEN 'deleted' ELSE 'live' END);
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS ut_chats_notify ON ut_chats;
CREATE TRIGGER ut_chats_notify AFTER INSERT OR UPDATE OF version ON ut_chats
    FOR EACH ROW EXECUTE FUNCTION ut_chats_notify();
";

/// Version 3: each chat's title in the catalog (`ut_chats.title`, indexed with the owner),
/// written by the batch that carries a metadata record, so that a chat is found by title
/// without pulling the owner's chats (NULL: a chat written before version 3, title unknown).
/// Builds before it would change titles without writing the column: `compatible_from` 3.
const V3: &str = "
ALTER TABLE ut_chats ADD COLUMN IF NOT EXISTS title text;
CREATE INDEX IF NOT EXISTS ut_chats_owner_title ON ut_chats (owner, title);
";

/// Version 4: each chat's last activity in the catalog (`ut_chats.last_ms`, the latest time
/// its records carry, as the local index counts it), indexed with the owner for the chats not
/// deleted, so that `Store::chats` pages an owner's chats in SQL and pulls only the page's
/// (NULL: a chat written before version 4, activity unknown: the owner's listing then pulls
/// every chat of the owner, as before). Builds before it would write without moving the
/// column: `compatible_from` 4.
const V4: &str = "
ALTER TABLE ut_chats ADD COLUMN IF NOT EXISTS last_ms bigint;
CREATE INDEX IF NOT EXISTS ut_chats_owner_activity ON ut_chats (owner, last_ms DESC, id) WHERE NOT deleted;
";

/// Version 5: what a lookup needs to pull only the chats it names.
/// - Each chat's `extra` metadata (`ut_chats.extra`, a JSON object of strings), written by the
///   batch that carries a metadata record as the title is, so that `Store::find_chats` by an
///   extra field pulls only the chats that have it (NULL: a chat whose last metadata record
///   was written before version 5, its fields unknown: such chats are pulled with the ones
///   found). No index of its own: the lookup reads the owner's catalog rows (`ut_chats_owner`)
///   on the server, and an index on the column would cost every write of a chat its upkeep.
/// - Which chat grants which blob (`ut_grants`: the grant and archive records of a chat's
///   batches), so that a blob read without a local grant pulls only the chats that grant it
///   (and those written before version 5, `ut_chats.grants_known` false). A row is a hint,
///   never an authority: the grant is read from the chat's records once pulled.
///
/// Builds before it would write metadata and grants without these: `compatible_from` 5.
const V5: &str = "
ALTER TABLE ut_chats ADD COLUMN IF NOT EXISTS extra jsonb;
ALTER TABLE ut_chats ADD COLUMN IF NOT EXISTS grants_known boolean NOT NULL DEFAULT false;
CREATE TABLE IF NOT EXISTS ut_grants (
    owner text NOT NULL,
    blob bytea NOT NULL,
    chat bigint NOT NULL,
    PRIMARY KEY (owner, blob, chat)
);
";

/// The versions after 0: (version, what it adds, its SQL, the oldest build version that may
/// still use a database at it).
const MIGRATIONS: &[(u32, &str, &str, u32)] = &[
    (1, "the catalog", V1, 1),
    (2, "change notification (trigger ut_chats_notify, channel ut_chats)", V2, 1),
    (3, "chat titles in the catalog (ut_chats.title)", V3, 3),
    (4, "chat activity in the catalog (ut_chats.last_ms)", V4, 4),
    (5, "chat extra metadata and blob grants in the catalog (ut_chats.extra, ut_grants)", V5, 5),
];

/// The version table, created with the first migration a database records.
const VERSIONS: &str = "
CREATE TABLE IF NOT EXISTS ut_schema (
    version integer PRIMARY KEY,
    compatible_from integer NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    applied_by text NOT NULL DEFAULT current_user,
    note text NOT NULL
);
";

/// What an open does about an older schema (`schema=` in the URL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchemaMode {
    /// Create or migrate at open (the default); a role without the rights to opens a usable
    /// older schema as it is.
    #[default]
    Auto,
    /// Never run DDL at open: the schema is the operator's (`undertext fleet init|migrate`).
    Manual,
}

/// A database's schema as `ut_schema` records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaStatus {
    /// The newest version applied (0: no Undertext schema; 1 without a `ut_schema` row: a
    /// database created before versions were recorded).
    pub database: u32,
    /// The oldest build version that may use it (see the module's documentation).
    pub compatible_from: u32,
    /// True when `ut_schema` holds the version (false for 0 and for an unrecorded 1).
    pub recorded: bool,
    /// This build's version ([`SCHEMA_VERSION`]).
    pub build: u32,
}

impl SchemaStatus {
    /// True when this build can use the database as it is.
    pub fn usable(&self) -> bool {
        self.database >= MIN_USABLE && self.compatible_from <= self.build
    }
}

/// Reads the schema's status on `c` (two statements when `ut_schema` exists, else one).
pub(super) fn status(fleet: &Fleet, c: &mut Conn) -> Result<SchemaStatus> {
    let what = "read the schema's version";
    // pg_class read with the statement's snapshot, not `to_regclass`: that one looks names up
    // without a lock, through caches not refreshed inside a transaction, so a migration that
    // waited for another's advisory lock would not see the tables it committed meanwhile.
    let msgs = c
        .simple_query(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relname = 'ut_schema' AND n.nspname = ANY (current_schemas(false))), \
             EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relname = 'ut_settings' AND n.nspname = ANY (current_schemas(false)))",
        )
        .map_err(|e| fleet.err(what, &e))?;
    let flags = msgs
        .iter()
        .find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) => Some((r.get(0) == Some("t"), r.get(1) == Some("t"))),
            _ => None,
        })
        .ok_or_else(|| fleet.bad(format!("{what}: expected a row, found none")))?;
    let (versioned, legacy) = flags;
    let mut s = SchemaStatus { database: 0, compatible_from: 0, recorded: false, build: SCHEMA_VERSION };
    if legacy {
        (s.database, s.compatible_from) = (1, 1);
    }
    if versioned {
        let msgs = c
            .simple_query("SELECT version, compatible_from FROM ut_schema ORDER BY version DESC LIMIT 1")
            .map_err(|e| fleet.err(what, &e))?;
        for m in msgs {
            if let postgres::SimpleQueryMessage::Row(r) = m {
                let num = |i: usize| -> Result<u32> {
                    let t = r.get(i).unwrap_or("");
                    t.parse().map_err(|_| {
                        fleet.bad(format!("{what}: expected a number in ut_schema, found {t:?}"))
                    })
                };
                (s.database, s.compatible_from, s.recorded) = (num(0)?, num(1)?, true);
            }
        }
    }
    Ok(s)
}

/// Brings the database on `c` up to version `to` in one transaction under the schema's
/// advisory lock (a process that took it first may have done part or all of the work: the
/// version is read again under it). Returns the versions before and after.
pub(super) fn migrate(fleet: &Fleet, c: &mut Conn, to: u32) -> Result<(u32, u32)> {
    if to > SCHEMA_VERSION {
        return Err(Error::InvalidArgument(format!(
            "fleet schema: version {to} is unknown to this build (it knows up to {SCHEMA_VERSION})"
        )));
    }
    c.begin(&format!("SELECT pg_advisory_xact_lock({SCHEMA_LOCK})"))
        .map_err(|e| fleet.err("lock the schema", &e))?;
    let result = (|| {
        let before = status(fleet, c)?;
        if before.database >= to && before.recorded {
            // Another process did it meanwhile: the transaction ends (and its lock goes).
            c.batch_execute("ROLLBACK").map_err(|e| fleet.err("end the schema's transaction", &e))?;
            return Ok((before.database, before.database));
        }
        let mut sql = String::from(VERSIONS);
        if !before.recorded && before.database == 1 {
            // Created before versions were recorded: adopted as version 1.
            sql.push_str(V1);
            sql.push_str(
                "INSERT INTO ut_schema (version, compatible_from, note) \
                 VALUES (1, 1, 'the catalog (created before ut_schema: adopted)') ON CONFLICT DO NOTHING;\n",
            );
        }
        for (v, note, body, compatible) in MIGRATIONS.iter().filter(|m| m.0 > before.database && m.0 <= to) {
            sql.push_str(body);
            sql.push_str(&format!(
                "INSERT INTO ut_schema (version, compatible_from, note) VALUES ({v}, {compatible}, '{note}');\n"
            ));
        }
        c.batch_execute(&sql).map_err(|e| fleet.err(&format!("migrate the schema to version {to}"), &e))?;
        c.batch_execute("COMMIT").map_err(|e| fleet.err("commit the schema", &e))?;
        Ok((before.database, to.max(before.database)))
    })();
    if result.is_err() {
        let _ = c.batch_execute("ROLLBACK");
    }
    result
}

/// What an open does on `c`: reads the schema's version, migrates it when `mode` is `Auto`
/// and it is older than this build's, and returns the version the store runs at. A usable
/// older schema that this role may not migrate is opened as it is (with a warning); a
/// missing or unusable one is an error naming the command that fixes it.
pub(super) fn at_open(fleet: &Fleet, c: &mut Conn, mode: SchemaMode) -> Result<u32> {
    let s = status(fleet, c)?;
    if s.database >= SCHEMA_VERSION {
        if s.compatible_from > SCHEMA_VERSION {
            return Err(fleet.bad(format!(
                "the database's schema is version {} and needs builds of version {} or newer; this build's is \
                 {SCHEMA_VERSION}: upgrade undertext",
                s.database, s.compatible_from
            )));
        }
        return Ok(s.database);
    }
    if mode == SchemaMode::Auto {
        match migrate(fleet, c, SCHEMA_VERSION) {
            Ok((_, to)) => return Ok(to),
            Err(Error::Backend { reason, .. }) if reason.contains("(42501)") && s.usable() => {
                tracing::warn!(
                    database = s.database,
                    build = SCHEMA_VERSION,
                    "fleet: the schema is older than this build's and this role may not migrate it; \
                     opened as it is (run `undertext --store URL fleet migrate` as its owner)"
                );
                return Ok(s.database);
            }
            Err(Error::Backend { reason, .. }) if reason.contains("(42501)") => {
                return Err(fleet.bad(format!(
                    "{reason}; this role may not create Undertext's schema: run `undertext --store URL fleet init` \
                     as a role that may (the database's owner), then open with this one"
                )));
            }
            Err(e) => return Err(e),
        }
    }
    if s.usable() {
        return Ok(s.database);
    }
    Err(fleet.bad(format!(
        "the database holds no Undertext schema (schema=manual: nothing is created at open): run \
         `undertext --store URL fleet init` (version {SCHEMA_VERSION}) first"
    )))
}
