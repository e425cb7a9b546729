//! A pooled PostgreSQL connection, the statements it has prepared, and the bound on how many
//! connections a store opens.
//!
//! The `postgres` crate prepares a statement given as text at every call (a Parse/Describe
//! round trip before the Bind/Execute one). The fleet's statements are a fixed set of
//! `&'static str`s, so on a direct connection each is run unnamed at its first use (one round
//! trip: a fresh process's first read pays no preparation), prepared once at its second, and
//! run afterwards in one round trip. A prepared statement belongs to the server connection that
//! prepared it, so the cache lives and dies with the connection.
//!
//! Through a transaction pooler (`pooler=transaction`: PgBouncer's `pool_mode = transaction`
//! and the like) consecutive transactions of one connection may run on different server
//! connections, each shared with other clients, so no named statement may outlive its
//! transaction. There every statement is sent unnamed (Parse, Bind, Describe, Execute, Sync
//! in one message train: one round trip, planned every time), with its parameters' types
//! given by [`Param`].
//!
//! Every connection counts against the store's `pool_size` from the moment it is asked for
//! until it is dropped (a [`Slot`]), wherever it is: idle, held by a write, or in use.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use postgres::types::{ToSql, Type};
use postgres::{Client, Row, SimpleQueryMessage, Statement};

/// A statement parameter whose PostgreSQL type is known from its Rust type (an unnamed
/// statement sends the types with the statement).
pub(super) trait Param: ToSql + Sync {
    /// The value, for the `postgres` crate.
    fn sql(&self) -> &(dyn ToSql + Sync);
    /// Its PostgreSQL type.
    fn pg_type(&self) -> Type;
}

macro_rules! params {
    ($($t:ty => $ty:expr),* $(,)?) => {
        $(impl Param for $t {
            fn sql(&self) -> &(dyn ToSql + Sync) {
                self
            }
            fn pg_type(&self) -> Type {
                $ty
            }
        })*
    };
}

params!(
    bool => Type::BOOL,
    i16 => Type::INT2,
    i32 => Type::INT4,
    i64 => Type::INT8,
    f64 => Type::FLOAT8,
    String => Type::TEXT,
    &str => Type::TEXT,
    Option<String> => Type::TEXT,
    Option<i64> => Type::INT8,
    &[u8] => Type::BYTEA,
    &[i16] => Type::INT2_ARRAY,
    Vec<i16> => Type::INT2_ARRAY,
    Vec<i32> => Type::INT4_ARRAY,
    Vec<i64> => Type::INT8_ARRAY,
    Option<Vec<i64>> => Type::INT8_ARRAY,
    Vec<Option<i64>> => Type::INT8_ARRAY,
    Vec<&[u8]> => Type::BYTEA_ARRAY,
    Vec<Vec<u8>> => Type::BYTEA_ARRAY,
);

/// How many connections a store has open, against its bound.
#[derive(Debug, Default)]
pub(super) struct Slots {
    pub(super) open: Mutex<usize>,
    /// Signalled when a connection is dropped or given back idle.
    pub(super) freed: Condvar,
}

/// One of the store's `pool_size` connections, taken before connecting and given back when
/// the connection (or the failed attempt) is dropped.
#[derive(Debug)]
pub(super) struct Slot(pub(super) Arc<Slots>);

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.0.open.lock();
        *open = open.saturating_sub(1);
        self.0.freed.notify_all();
    }
}

/// A connection with its prepared statements (none through a transaction pooler).
///
/// ```ignore
/// let mut c = fleet.client()?;
/// let row = c.query_opt("SELECT version FROM ut_owners WHERE owner = $1", &[&owner])?;
/// ```
pub(super) struct Conn {
    client: Client,
    /// `None`: through a transaction pooler, every statement unnamed. Otherwise each
    /// statement run before: `None` after its first use (run unnamed), then prepared.
    prepared: Option<HashMap<&'static str, Option<Statement>>>,
    /// What opens a transaction: `BEGIN` and the URL's timeouts, `SET LOCAL` (a pooler does
    /// not carry session settings from one transaction to the next).
    begin: Arc<str>,
    _slot: Slot,
}

impl Conn {
    /// Wraps a new connection (nothing prepared yet). `pooled`: through a transaction pooler.
    pub(super) fn new(client: Client, pooled: bool, begin: Arc<str>, slot: Slot) -> Conn {
        Conn { client, prepared: (!pooled).then(HashMap::new), begin, _slot: slot }
    }

    /// True when the server (or the network) closed the connection.
    pub(super) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Runs `sql` and returns its rows: prepared once per connection, or unnamed through a
    /// transaction pooler.
    pub(super) fn query(
        &mut self,
        sql: &'static str,
        params: &[&dyn Param],
    ) -> Result<Vec<Row>, postgres::Error> {
        let Some(prepared) = &mut self.prepared else {
            let typed: Vec<(&(dyn ToSql + Sync), Type)> =
                params.iter().map(|p| (p.sql(), p.pg_type())).collect();
            return self.client.query_typed(sql, &typed);
        };
        let s = match prepared.get(sql) {
            Some(Some(s)) => s.clone(),
            Some(None) => {
                let s = self.client.prepare(sql)?;
                prepared.insert(sql, Some(s.clone()));
                s
            }
            None => {
                // The first use runs unnamed (one round trip, as through a pooler); the
                // second prepares it (a round trip more, once). A statement a connection runs
                // once (a fresh process's first read) does not pay for preparing it.
                prepared.insert(sql, None);
                let typed: Vec<(&(dyn ToSql + Sync), Type)> =
                    params.iter().map(|p| (p.sql(), p.pg_type())).collect();
                return self.client.query_typed(sql, &typed);
            }
        };
        let plain: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.sql()).collect();
        self.client.query(&s, &plain)
    }

    /// Runs `sql` and returns its row, if any; `None` also when it returned several (the
    /// callers' statements return at most one: a key's row).
    pub(super) fn query_opt(
        &mut self,
        sql: &'static str,
        params: &[&dyn Param],
    ) -> Result<Option<Row>, postgres::Error> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// Runs `sql` for its effect.
    pub(super) fn execute(
        &mut self,
        sql: &'static str,
        params: &[&dyn Param],
    ) -> Result<(), postgres::Error> {
        self.query(sql, params).map(drop)
    }

    /// Runs `sql` (statements separated by `;`, no parameters) in the simple protocol and
    /// returns its messages.
    pub(super) fn simple_query(&mut self, sql: &str) -> Result<Vec<SimpleQueryMessage>, postgres::Error> {
        self.client.simple_query(sql)
    }

    /// Runs `sql` (statements separated by `;`, no parameters) in the simple protocol.
    pub(super) fn batch_execute(&mut self, sql: &str) -> Result<(), postgres::Error> {
        self.client.batch_execute(sql)
    }

    /// Begins a transaction with the URL's timeouts, then runs `then` (more statements, or
    /// empty) in the same round trip; returns the messages of all of it.
    pub(super) fn begin(&mut self, then: &str) -> Result<Vec<SimpleQueryMessage>, postgres::Error> {
        if then.is_empty() {
            self.client.simple_query(&self.begin)
        } else {
            self.client.simple_query(&format!("{}; {then}", self.begin))
        }
    }
}
