//! The embedded store: one SQLite file, created with its schema on first start.
//!
//! Durability: WAL journal with `synchronous = FULL`, so a transaction that returned from COMMIT is
//! on disk and survives a crash of the process (or of the machine). Writers serialise on SQLite's
//! write lock; `busy_timeout` makes concurrent writers wait instead of failing.
//!
//! This file keeps only what SQLite does differently: its file and pool options, its names for
//! the schema's types (`DIALECT`), migrations under `BEGIN IMMEDIATE`, and its writes, each a
//! savepoint in the group-commit writer's transaction (`sqlite_writer`) on the writer's
//! rusqlite connection (`Tx` for it, `Engine`). Every statement ([`super::sql`]) and every
//! algorithm, the [`super::Store`] implementation itself, is shared with PostgreSQL
//! (`super::shared`).

use super::shared::{Engine, Job, Tx, Work};
use super::sql::{self, Arg};
use super::sqlite_writer::{self as w, Writer};
use super::{migration_sql, Dialect, PendingAppend, StoreError, LATEST, MIGRATIONS, SCHEMA};
use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use rusqlite::{params_from_iter, Connection};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::Sqlite;
use std::future::{ready, Future};
use std::pin::pin;
use std::str::FromStr;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// SQLite's names for the schema's types ([`migration_sql`]).
const DIALECT: Dialect = Dialect {
    engine: "sqlite",
    float: "REAL",
    int: "INTEGER",
    serial: "INTEGER PRIMARY KEY AUTOINCREMENT",
    blob: "BLOB",
    bytes: "BINARY",
    json: |column, key| format!("json_extract({column}, '$.{key}')"),
};

/// The SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// Reads.
    pool: SqlitePool,
    /// Every write goes to the group-commit writer ([`super::sqlite_writer`]).
    writer: Writer,
}

fn unavailable(e: sqlx::Error) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

impl SqliteStore {
    /// Opens (creating if needed) the database file at `url` (`sqlite://path`) and applies the
    /// schema (migrating an older file to [`LATEST`]).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let opts = SqliteConnectOptions::from_str(url)
            .map_err(unavailable)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        if url.contains(":memory:") || url.contains("mode=memory") {
            // The writer's connection and the readers' would each see a database of their own.
            return Err(StoreError::Unavailable(
                "an in-memory SQLite database is not supported: give a file (sqlite://FILE)".into(),
            ));
        }
        let file = opts.get_filename().to_owned();
        let pool = Self::schema_pool(opts, LATEST).await?;
        let writer = Writer::start(&file)?;
        Ok(SqliteStore { pool, writer })
    }

    /// Creates the schema at `version` (or migrates an older file up to it) and closes: for
    /// upgrade tests, which write a ledger as an earlier release left it and then [`connect`].
    ///
    /// [`connect`]: SqliteStore::connect
    #[doc(hidden)]
    pub async fn schema_at(url: &str, version: i64) -> Result<(), StoreError> {
        let opts = SqliteConnectOptions::from_str(url)
            .map_err(unavailable)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full);
        Self::schema_pool(opts, version).await?.close().await;
        Ok(())
    }

    /// The readers' pool, with the schema at `version`.
    async fn schema_pool(
        opts: SqliteConnectOptions,
        version: i64,
    ) -> Result<SqlitePool, StoreError> {
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .idle_timeout(Some(Duration::from_secs(600)))
            .max_lifetime(Some(Duration::from_secs(3600)))
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(opts)
            .await
            .map_err(unavailable)?;
        for stmt in SCHEMA.iter().filter_map(|s| migration_sql(s, &DIALECT)) {
            sqlx::query(&stmt)
                .execute(&pool)
                .await
                .map_err(unavailable)?;
        }
        migrate(&pool, version).await?;
        Ok(pool)
    }
}

/// Applies [`MIGRATIONS`] beyond the recorded schema version, each in one transaction (`BEGIN
/// IMMEDIATE`: another process opening the same file waits, then sees the new version).
async fn migrate(pool: &SqlitePool, upto: i64) -> Result<(), StoreError> {
    let current: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM schema_version")
        .fetch_one(pool)
        .await
        .map_err(unavailable)?;
    super::refuse_newer(current, upto)?;
    for (version, stmts) in MIGRATIONS.iter().filter(|(v, _)| *v <= upto) {
        let mut conn = pool.acquire().await.map_err(unavailable)?;
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
        let run = async {
            let current: Option<i64> =
                sqlx::query_scalar("SELECT MAX(version) FROM schema_version")
                    .fetch_one(&mut *conn)
                    .await?;
            if current.unwrap_or(1) < *version {
                for stmt in stmts.iter().filter_map(|s| migration_sql(s, &DIALECT)) {
                    sqlx::query(&stmt).execute(&mut *conn).await?;
                }
                sqlx::query("DELETE FROM schema_version")
                    .execute(&mut *conn)
                    .await?;
                sqlx::query("INSERT INTO schema_version (version) VALUES (?)")
                    .bind(version)
                    .execute(&mut *conn)
                    .await?;
            }
            Ok::<(), sqlx::Error>(())
        }
        .await;
        let end = if run.is_ok() { "COMMIT" } else { "ROLLBACK" };
        sqlx::query(end)
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
        run.map_err(|e| {
            StoreError::Unavailable(format!("schema migration to version {version}: {e}"))
        })?;
    }
    Ok(())
}

/// A value as rusqlite binds it: what `params!` made of the Rust type it holds.
impl rusqlite::ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match *self {
            Arg::Text(Some(v)) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
            Arg::Int(Some(v)) => ToSqlOutput::Owned(Value::Integer(v)),
            Arg::Real(Some(v)) => ToSqlOutput::Owned(Value::Real(v)),
            Arg::Bytes(v) => ToSqlOutput::Borrowed(ValueRef::Blob(v)),
            Arg::Text(None) | Arg::Int(None) | Arg::Real(None) => ToSqlOutput::Owned(Value::Null),
        })
    }
}

/// The statements of [`super::shared`] on the writer's connection, inside its transaction: run
/// when called (cached prepared statements), so every future here is ready at once.
impl Tx for Connection {
    fn exec(
        &mut self,
        q: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        ready(w::exec(self, q, params_from_iter(args)).map(|n| n as u64))
    }

    fn insert(
        &mut self,
        q: &'static str,
        args: &[Arg<'_>],
        taken: StoreError,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        ready(
            match cached(self, q, |s| s.execute(params_from_iter(args))) {
                Ok(_) => Ok(()),
                Err(e) if w::is_unique_violation(&e) => Err(taken),
                Err(e) => Err(w::unavailable(e)),
            },
        )
    }

    fn exists(
        &mut self,
        q: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let found = cached(self, q, |s| s.exists(params_from_iter(args)));
        ready(found.map_err(w::unavailable))
    }

    fn int(
        &mut self,
        q: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<i64, StoreError>> + Send {
        let row = cached(self, q, |s| {
            s.query_row(params_from_iter(args), |r| r.get(0))
        });
        ready(row.map_err(w::unavailable))
    }

    fn int_text(
        &mut self,
        q: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<(i64, String), StoreError>> + Send {
        let row = cached(self, q, |s| {
            s.query_row(params_from_iter(args), |r| Ok((r.get(0)?, r.get(1)?)))
        });
        ready(row.map_err(w::unavailable))
    }

    /// One writer: the insert itself checks that there is no token.
    fn first_token(
        &mut self,
    ) -> impl Future<Output = Result<Option<&'static str>, StoreError>> + Send {
        ready(Ok(Some(sql::TOKEN_INSERT_FIRST)))
    }
}

/// `run` on the cached prepared statement `q`.
fn cached<T>(
    c: &Connection,
    q: &str,
    run: impl FnOnce(&mut rusqlite::CachedStatement<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    c.prepare_cached(q).and_then(|mut s| run(&mut s))
}

/// A write's statements run to their end on the writer's thread: its [`Tx`] never waits, so
/// the work is done at its first poll.
fn now<T>(work: Work<'_, T>) -> Result<T, StoreError> {
    match pin!(work).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(done) => done,
        Poll::Pending => Err(StoreError::Unavailable("a SQLite write waited".into())),
    }
}

/// Reads on the pool; every write in a savepoint of the group-commit writer's transaction.
impl Engine for SqliteStore {
    type Db = Sqlite;
    type Conn = Connection;

    fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    fn write<T: Send + 'static>(
        &self,
        work: impl Job<Connection, T>,
    ) -> impl Future<Output = Result<T, StoreError>> + Send {
        self.writer.write(move |c| now(work(c)))
    }

    fn queue<W: Job<Connection, i64>>(&self, work: impl FnOnce() -> W) -> Option<PendingAppend> {
        let work = work();
        let pending = self.writer.queue(move |c| now(work(c)))?;
        Some(Box::pin(pending))
    }
}
