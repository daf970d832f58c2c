//! The shared store: PostgreSQL (or any Postgres-compatible engine), for several replicas.
//!
//! Schema migrations are applied on start under an advisory lock (replicas may start together).
//! The append's compare-and-swap is an `UPDATE … WHERE version = $expected`: a concurrent appender
//! blocks on the row lock, then re-evaluates the condition against the committed row and updates
//! nothing, which the store reports as [`StoreError::VersionConflict`]. Durability is PostgreSQL's
//! (a COMMIT returns after the WAL is flushed with the default `synchronous_commit = on`). Connection
//! failures surface as [`StoreError::Unavailable`] quickly (short acquire timeout); the pool
//! reconnects by itself when the database is back.
//!
//! This file keeps only what PostgreSQL does differently: its pool, its names for the schema's
//! types (`DIALECT`), migrations under the advisory lock, `$n` placeholders and the collation
//! `"C"` ([`sql::postgres`]), its error codes, the first token's table lock, and a transaction per
//! write (`Engine`, `Tx`). Every statement ([`super::sql`]) and every algorithm, the
//! [`super::Store`] implementation itself, is shared with SQLite (`super::shared`).

use super::shared::{timed, Engine, Job, Reads, Tx};
use super::sql::{self, Arg};
use super::{migration_sql, Dialect, StoreError, LATEST, MIGRATIONS, SCHEMA};
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions, Postgres};
use sqlx::{Executor, Row};
use std::borrow::Cow;
use std::time::Duration;

/// Longest a connection, a statement or a transaction may take (then the store counts as
/// unavailable: 503 `store_unavailable`, and a write whose commit may have landed is found by
/// retrying with its Idempotency-Key). Every write is a handful of statements on a few rows, so
/// a healthy server answers in milliseconds; a hung one holds no request past this.
pub const STORE_TIMEOUT: Duration = Duration::from_secs(3);

/// Most audit records placed by one read ([`sql::AUDIT_PLACE`]): a reader after a long quiet
/// spell places the backlog over several reads instead of one long transaction (the rest wait,
/// unseen and unskipped, for the next).
const AUDIT_PLACE_BATCH: i64 = 10_000;

/// Advisory-lock key serialising schema migrations across replicas.
const MIGRATION_LOCK: i64 = 0x7072_6976_6c65_6467;

/// PostgreSQL's names for the schema's types ([`migration_sql`]); `REAL` would be `float4`.
const DIALECT: Dialect = Dialect {
    engine: "postgres",
    float: "DOUBLE PRECISION",
    int: "BIGINT",
    serial: "BIGSERIAL PRIMARY KEY",
    blob: "BYTEA",
    bytes: "\"C\"",
    json: |column, key| {
        let path = key.split('.').collect::<Vec<_>>().join(",");
        format!("(({column})::jsonb#>>'{{{path}}}')::DOUBLE PRECISION")
    },
};

/// The PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
}

fn unavailable(e: sqlx::Error) -> StoreError {
    // 22021 character_not_in_repertoire (NUL in text), 22P05 untranslatable_character: the value,
    // not the database, is at fault.
    let code = e
        .as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.into_owned());
    match code.as_deref() {
        Some("22021") | Some("22P05") => StoreError::InvalidValue(e.to_string()),
        // 40P01 deadlock_detected, 40001 serialization_failure: the transaction was rolled back
        // as a whole; the caller starts over from the store, as after a lost compare-and-swap.
        // (The lock order of `append_many` leaves no cycle; this is a backstop.)
        Some("40P01") | Some("40001") => StoreError::VersionConflict,
        _ => StoreError::Unavailable(e.to_string()),
    }
}

impl PostgresStore {
    /// Connects to `url` (`postgres://…`) and applies the schema (migrating an older one to
    /// [`LATEST`]).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_at(url, LATEST).await
    }

    /// Creates the schema at `version` (or migrates an older one up to it) and closes: for
    /// upgrade tests, which write a ledger as an earlier release left it and then [`connect`].
    ///
    /// [`connect`]: PostgresStore::connect
    #[doc(hidden)]
    pub async fn schema_at(url: &str, version: i64) -> Result<(), StoreError> {
        Self::connect_at(url, version).await?.pool.close().await;
        Ok(())
    }

    async fn connect_at(url: &str, version: i64) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(STORE_TIMEOUT)
            .connect(url)
            .await
            .map_err(unavailable)?;
        let mut conn = pool.acquire().await.map_err(unavailable)?;
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
        let mut result = Ok(());
        for stmt in SCHEMA.iter().filter_map(|s| migration_sql(s, &DIALECT)) {
            if let Err(e) = sqlx::query(&stmt).execute(&mut *conn).await {
                result = Err(unavailable(e));
                break;
            }
        }
        if result.is_ok() {
            result = migrate(&mut conn, version).await;
        }
        let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut *conn)
            .await;
        result?;
        drop(conn);
        Ok(PostgresStore { pool })
    }
}

/// Applies [`MIGRATIONS`] beyond the recorded schema version, each in one transaction (the caller
/// holds the migration advisory lock, so replicas starting together migrate once).
async fn migrate(conn: &mut sqlx::PgConnection, upto: i64) -> Result<(), StoreError> {
    use sqlx::Connection;
    let current: Option<i32> = sqlx::query_scalar("SELECT MAX(version) FROM schema_version")
        .fetch_one(&mut *conn)
        .await
        .map_err(unavailable)?;
    super::refuse_newer(current.map(i64::from), upto)?;
    for (version, stmts) in MIGRATIONS.iter().filter(|(v, _)| *v <= upto) {
        let mut tx = conn.begin().await.map_err(unavailable)?;
        let current: Option<i32> = sqlx::query_scalar("SELECT MAX(version) FROM schema_version")
            .fetch_one(&mut *tx)
            .await
            .map_err(unavailable)?;
        if i64::from(current.unwrap_or(1)) >= *version {
            continue;
        }
        for stmt in stmts.iter().filter_map(|s| migration_sql(s, &DIALECT)) {
            sqlx::query(&stmt).execute(&mut *tx).await.map_err(|e| {
                StoreError::Unavailable(format!("schema migration to version {version}: {e}"))
            })?;
        }
        sqlx::query("DELETE FROM schema_version")
            .execute(&mut *tx)
            .await
            .map_err(unavailable)?;
        sqlx::query("INSERT INTO schema_version (version) VALUES ($1)")
            .bind(*version as i32)
            .execute(&mut *tx)
            .await
            .map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
    }
    Ok(())
}

/// A statement's text and its values as PostgreSQL runs them.
fn spell(q: &'static str) -> Cow<'static, str> {
    Cow::Owned(sql::postgres(q))
}

/// The statements of [`super::shared`] inside a PostgreSQL transaction (row locks are held until
/// it ends).
impl Tx for PgConnection {
    async fn exec(&mut self, q: &'static str, args: &[Arg<'_>]) -> Result<u64, StoreError> {
        let q = spell(q);
        let done = self.execute(Postgres::bound(&q, args));
        done.await.map(|r| r.rows_affected()).map_err(unavailable)
    }

    async fn insert(
        &mut self,
        q: &'static str,
        args: &[Arg<'_>],
        taken: StoreError,
    ) -> Result<(), StoreError> {
        let q = spell(q);
        match self.execute(Postgres::bound(&q, args)).await {
            Ok(_) => Ok(()),
            Err(e) if is_unique_violation(&e) => Err(taken),
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn exists(&mut self, q: &'static str, args: &[Arg<'_>]) -> Result<bool, StoreError> {
        let q = spell(q);
        let row = self.fetch_optional(Postgres::bound(&q, args));
        row.await.map(|r| r.is_some()).map_err(unavailable)
    }

    async fn int(&mut self, q: &'static str, args: &[Arg<'_>]) -> Result<i64, StoreError> {
        let q = spell(q);
        let row = self.fetch_one(Postgres::bound(&q, args));
        row.await.and_then(|r| r.try_get(0)).map_err(unavailable)
    }

    async fn int_text(
        &mut self,
        q: &'static str,
        args: &[Arg<'_>],
    ) -> Result<(i64, String), StoreError> {
        let q = spell(q);
        let row = self.fetch_one(Postgres::bound(&q, args));
        row.await
            .and_then(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .map_err(unavailable)
    }

    /// Replicas starting together: the table is locked, so one of them creates the first token.
    async fn first_token(&mut self) -> Result<Option<&'static str>, StoreError> {
        self.execute("LOCK TABLE tokens IN EXCLUSIVE MODE")
            .await
            .map_err(unavailable)?;
        let any = self.fetch_optional("SELECT 1 FROM tokens LIMIT 1");
        Ok(match any.await.map_err(unavailable)? {
            Some(_) => None,
            None => Some(sql::TOKEN_INSERT),
        })
    }
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

/// Every write in a transaction of its own; a single statement in its own implicit one.
impl Engine for PostgresStore {
    type Db = Postgres;
    type Conn = PgConnection;

    fn pool(&self) -> &PgPool {
        &self.pool
    }

    fn spell(q: &'static str) -> Cow<'static, str> {
        spell(q)
    }

    fn error(e: sqlx::Error) -> StoreError {
        unavailable(e)
    }

    const TIMEOUT: Option<Duration> = Some(STORE_TIMEOUT);

    async fn write<T: Send + 'static>(
        &self,
        work: impl Job<PgConnection, T>,
    ) -> Result<T, StoreError> {
        timed::<Self, _>(async {
            let mut tx = self.pool.begin().await.map_err(unavailable)?;
            let done = work(&mut tx).await?;
            tx.commit().await.map_err(unavailable)?;
            Ok(done)
        })
        .await
    }

    async fn place_audit(&self) -> Result<(), StoreError> {
        timed::<Self, _>(async {
            let mut tx = self.pool.begin().await.map_err(unavailable)?;
            tx.execute(sql::AUDIT_PLACE_LOCK)
                .await
                .map_err(unavailable)?;
            let q = spell(sql::AUDIT_PLACE);
            let placed = tx.execute(Postgres::bound(&q, sql::args!(AUDIT_PLACE_BATCH)));
            placed.await.map_err(unavailable)?;
            tx.commit().await.map_err(unavailable)
        })
        .await
    }

    async fn write_one<T: Send + 'static>(
        &self,
        work: impl Job<PgConnection, T>,
    ) -> Result<T, StoreError> {
        timed::<Self, _>(async {
            let mut conn = self.pool.acquire().await.map_err(unavailable)?;
            work(&mut conn).await
        })
        .await
    }
}
