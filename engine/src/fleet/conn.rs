//! A pooled PostgreSQL connection and the statements it has prepared.
//!
//! The `postgres` crate prepares a statement given as text at every call (a Parse/Describe
//! round trip before the Bind/Execute one). The fleet's statements are a fixed set of
//! `&'static str`s, so each connection prepares each of them once and runs it afterwards in
//! one round trip. A prepared statement belongs to the connection that prepared it, so the
//! cache lives and dies with the connection.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};

use postgres::types::ToSql;
use postgres::{Client, Row, Statement};

/// A connection with its prepared statements (it derefs to the `postgres::Client`, for
/// statements run once, such as the schema's and gc's).
///
/// ```ignore
/// let mut c = fleet.client()?;
/// let row = c.query_opt_cached("SELECT version FROM ut_owners WHERE owner = $1", &[&owner])?;
/// ```
pub(super) struct Conn {
    client: Client,
    prepared: HashMap<&'static str, Statement>,
}

impl Conn {
    /// Wraps a new connection (nothing prepared yet).
    pub(super) fn new(client: Client) -> Conn {
        Conn { client, prepared: HashMap::new() }
    }

    /// The statement `sql`, prepared on this connection at its first use.
    fn statement(&mut self, sql: &'static str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.prepared.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql)?;
        self.prepared.insert(sql, s.clone());
        Ok(s)
    }

    /// Runs `sql` (prepared once per connection) and returns its rows.
    pub(super) fn query_cached(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        let s = self.statement(sql)?;
        self.client.query(&s, params)
    }

    /// Runs `sql` (prepared once per connection) and returns its row, if any (more than one
    /// is an error).
    pub(super) fn query_opt_cached(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, postgres::Error> {
        let s = self.statement(sql)?;
        self.client.query_opt(&s, params)
    }

    /// Runs `sql` (prepared once per connection) and returns its one row.
    pub(super) fn query_one_cached(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, postgres::Error> {
        let s = self.statement(sql)?;
        self.client.query_one(&s, params)
    }

    /// Runs `sql` (prepared once per connection) and returns the rows it changed.
    pub(super) fn execute_cached(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        let s = self.statement(sql)?;
        self.client.execute(&s, params)
    }
}

impl Deref for Conn {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}
