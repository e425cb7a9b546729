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
//!
//! A connection is `tokio-postgres`'s client on a runtime of its own (one thread: the caller's,
//! as the `postgres` crate runs it), so that two requests can go out before the first answer
//! is read ([`Conn::pipeline`]: a write's batch and its `COMMIT` in one round trip).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use std::future::Future;
use std::pin::pin;
use std::task::Poll;

use postgres::types::{ToSql, Type};
use postgres::{Row, SimpleQueryMessage, Statement};
use tokio_postgres::Client;

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
    Vec<String> => Type::TEXT_ARRAY,
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
    // Dropped in this order: the client and its statements (the connection then says
    // goodbye to the server at its next turn), then the driver (which gives it that turn).
    client: Client,
    /// `None`: through a transaction pooler, every statement unnamed. Otherwise each
    /// statement run before: `None` after its first use (run unnamed), then prepared.
    prepared: Option<HashMap<&'static str, Option<Statement>>>,
    driver: Driver,
    /// What opens a transaction: `BEGIN` and the URL's timeouts, `SET LOCAL` (a pooler does
    /// not carry session settings from one transaction to the next).
    begin: Arc<str>,
    _slot: Slot,
}

/// What drives a connection (its socket) whenever a request of its client is waited on: a
/// runtime on one thread, the caller's; the connection's task, spawned on it, runs only then.
struct Driver {
    rt: tokio::runtime::Runtime,
    /// The connection's task: it ends when the connection does.
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Driver {
    /// Lets the connection's task end (its client dropped first, it sends the server a
    /// `Terminate`, as the `postgres` crate's client does), waiting at most a second for it.
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            // The timer is made inside the runtime (it needs its clock).
            let _ = self
                .rt
                .block_on(async { tokio::time::timeout(std::time::Duration::from_secs(1), task).await });
        }
    }
}

impl Conn {
    /// Opens a connection with `config` and `tls` (nothing prepared yet). `pooled`: through a
    /// transaction pooler.
    pub(super) fn connect<T>(
        config: &tokio_postgres::Config,
        tls: T,
        pooled: bool,
        begin: Arc<str>,
        slot: Slot,
    ) -> Result<Conn, ConnectError>
    where
        T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket> + 'static + Send,
        T::TlsConnect: Send,
        T::Stream: Send,
        <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send,
    {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ConnectError::Runtime)?;
        let (client, connection) = rt.block_on(config.connect(tls)).map_err(ConnectError::Postgres)?;
        let task = rt.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "fleet: a PostgreSQL connection ended");
            }
        });
        Ok(Conn {
            client,
            prepared: (!pooled).then(HashMap::new),
            driver: Driver { rt, task: Some(task) },
            begin,
            _slot: slot,
        })
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
        match self.statement(sql)? {
            Some(s) => {
                let plain: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.sql()).collect();
                self.driver.rt.block_on(self.client.query(&s, &plain))
            }
            None => {
                let typed: Vec<(&(dyn ToSql + Sync), Type)> =
                    params.iter().map(|p| (p.sql(), p.pg_type())).collect();
                self.driver.rt.block_on(self.client.query_typed(sql, &typed))
            }
        }
    }

    /// How `sql` runs now: `Some`, prepared on this connection; `None`, unnamed. The first
    /// use runs unnamed (one round trip, as through a pooler); the second prepares it (a
    /// round trip more, once). A statement a connection runs once (a fresh process's first
    /// read) does not pay for preparing it.
    fn statement(&mut self, sql: &'static str) -> Result<Option<Statement>, postgres::Error> {
        let Some(prepared) = &mut self.prepared else { return Ok(None) };
        match prepared.get(sql) {
            Some(Some(s)) => Ok(Some(s.clone())),
            Some(None) => {
                let s = self.driver.rt.block_on(self.client.prepare(sql))?;
                prepared.insert(sql, Some(s.clone()));
                Ok(Some(s))
            }
            None => {
                prepared.insert(sql, None);
                Ok(None)
            }
        }
    }

    /// Runs `sql` and then `then` (statements in the simple protocol, no parameters) in one
    /// round trip: both requests are sent before either answer is read, `sql`'s first (the
    /// server runs them in that order). Returns both results; when `sql` fails, the server
    /// skips the rest of its request and runs `then` after it (a `COMMIT` in a transaction
    /// that failed answers `ROLLBACK`). A connection lost on the way fails both. A statement
    /// that fails before it is sent (its parameters not encoded) sends no `then` (its result
    /// is then empty).
    pub(super) fn pipeline(
        &mut self,
        sql: &'static str,
        params: &[&dyn Param],
        then: &str,
    ) -> (Result<Vec<Row>, postgres::Error>, Result<Vec<SimpleQueryMessage>, postgres::Error>) {
        let s = match self.statement(sql) {
            Ok(s) => s,
            Err(e) => return (Err(e), Ok(Vec::new())),
        };
        let plain: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.sql()).collect();
        let typed: Vec<(&(dyn ToSql + Sync), Type)> = params.iter().map(|p| (p.sql(), p.pg_type())).collect();
        let client = &self.client;
        self.driver.rt.block_on(async {
            let mut first = pin!(async {
                match &s {
                    Some(s) => client.query(s, &plain).await,
                    None => client.query_typed(sql, &typed).await,
                }
            });
            let mut second = pin!(client.simple_query(then));
            let (mut a, mut b) = (None, None);
            let mut then_sent = false;
            // Polled in order, `first` before `second` at every turn: each sends its request
            // at its first poll (the parameters' and columns' types are built in: no lookup
            // comes before it), so the statement goes out before `then`. A statement that
            // fails before it is sent (its parameters not encoded) sends no `then`.
            std::future::poll_fn(|cx| {
                if a.is_none()
                    && let Poll::Ready(r) = first.as_mut().poll(cx)
                {
                    a = Some(r);
                }
                if !then_sent && matches!(a, Some(Err(_))) {
                    return Poll::Ready((a.take().unwrap_or_else(|| Ok(Vec::new())), Ok(Vec::new())));
                }
                then_sent = true;
                if b.is_none()
                    && let Poll::Ready(r) = second.as_mut().poll(cx)
                {
                    b = Some(r);
                }
                match (a.take(), b.take()) {
                    (Some(x), Some(y)) => Poll::Ready((x, y)),
                    (x, y) => {
                        (a, b) = (x, y);
                        Poll::Pending
                    }
                }
            })
            .await
        })
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

    /// Begins a transaction with the URL's timeouts and runs `statements` in it, in order,
    /// all in one round trip (every request sent before the first answer is read); returns
    /// each statement's rows. The first error fails the call (after it, the server refuses
    /// the rest: the transaction is aborted, and left open: the caller rolls back); `Err`
    /// carries the index of the request that failed (0: the `BEGIN`, then the statements).
    pub(super) fn begin_with(
        &mut self,
        statements: &[(&'static str, &[&dyn Param])],
    ) -> Result<Vec<Vec<Row>>, (usize, postgres::Error)> {
        let mut how = Vec::with_capacity(statements.len());
        for (i, (sql, _)) in statements.iter().enumerate() {
            how.push(self.statement(sql).map_err(|e| (i + 1, e))?);
        }
        let plain: Vec<Vec<&(dyn ToSql + Sync)>> =
            statements.iter().map(|(_, ps)| ps.iter().map(|p| p.sql()).collect()).collect();
        let typed: Vec<Vec<(&(dyn ToSql + Sync), Type)>> =
            statements.iter().map(|(_, ps)| ps.iter().map(|p| (p.sql(), p.pg_type())).collect()).collect();
        let client = &self.client;
        let begin = &*self.begin;
        self.driver.rt.block_on(async {
            let mut began = pin!(client.batch_execute(begin));
            let mut runs: Vec<Run<'_>> = Vec::with_capacity(statements.len());
            for (i, (sql, _)) in statements.iter().enumerate() {
                let (s, plain, typed) = (&how[i], &plain[i], &typed[i]);
                runs.push(Box::pin(async move {
                    match s {
                        Some(s) => client.query(s, plain).await,
                        None => client.query_typed(sql, typed).await,
                    }
                }));
            }
            let mut began_done: Option<Result<(), postgres::Error>> = None;
            let mut done: Vec<Option<Result<Vec<Row>, postgres::Error>>> =
                runs.iter().map(|_| None).collect();
            // Polled in order at every turn (each sends its request at its first poll: see
            // `pipeline`), so the requests go out in order.
            std::future::poll_fn(|cx| {
                if began_done.is_none()
                    && let Poll::Ready(r) = began.as_mut().poll(cx)
                {
                    began_done = Some(r);
                }
                for (run, out) in runs.iter_mut().zip(done.iter_mut()) {
                    if out.is_none()
                        && let Poll::Ready(r) = run.as_mut().poll(cx)
                    {
                        *out = Some(r);
                    }
                }
                if began_done.is_some() && done.iter().all(Option::is_some) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
            if let Some(Err(e)) = began_done {
                return Err((0, e));
            }
            let mut rows = Vec::with_capacity(done.len());
            for (i, r) in done.into_iter().enumerate() {
                match r {
                    Some(Ok(r)) => rows.push(r),
                    Some(Err(e)) => return Err((i + 1, e)),
                    None => rows.push(Vec::new()),
                }
            }
            Ok(rows)
        })
    }

    /// Runs `sql` (statements separated by `;`, no parameters) in the simple protocol and
    /// returns its messages.
    pub(super) fn simple_query(&mut self, sql: &str) -> Result<Vec<SimpleQueryMessage>, postgres::Error> {
        self.driver.rt.block_on(self.client.simple_query(sql))
    }

    /// Runs `sql` (statements separated by `;`, no parameters) in the simple protocol.
    pub(super) fn batch_execute(&mut self, sql: &str) -> Result<(), postgres::Error> {
        self.driver.rt.block_on(self.client.batch_execute(sql))
    }

    /// Begins a transaction with the URL's timeouts, then runs `then` (more statements, or
    /// empty) in the same round trip; returns the messages of all of it.
    pub(super) fn begin(&mut self, then: &str) -> Result<Vec<SimpleQueryMessage>, postgres::Error> {
        if then.is_empty() {
            self.driver.rt.block_on(self.client.simple_query(&self.begin))
        } else {
            self.driver.rt.block_on(self.client.simple_query(&format!("{}; {then}", self.begin)))
        }
    }
}

/// A statement's request in flight ([`Conn::begin_with`]).
type Run<'a> = std::pin::Pin<Box<dyn Future<Output = Result<Vec<Row>, postgres::Error>> + 'a>>;

/// Why [`Conn::connect`] failed.
#[derive(Debug)]
pub(super) enum ConnectError {
    /// The connection's runtime could not be made (threads, file descriptors).
    Runtime(std::io::Error),
    /// PostgreSQL (or the network, or TLS) refused.
    Postgres(postgres::Error),
}
