//! The shared store: PostgreSQL (or any Postgres-compatible engine), for several replicas.
//!
//! Schema migrations are applied on start under an advisory lock (replicas may start together).
//! The append's compare-and-swap is an `UPDATE … WHERE version = $expected`: a concurrent appender
//! blocks on the row lock, then re-evaluates the condition against the committed row and updates
//! nothing, which the store reports as [`StoreError::VersionConflict`]. Durability is PostgreSQL's
//! (a COMMIT returns after the WAL is flushed with the default `synchronous_commit = on`). Connection
//! failures surface as [`StoreError::Unavailable`] quickly (short acquire timeout); the pool
//! reconnects by itself when the database is back.

use super::sql;
use super::{
    audit_hash, migration_sql, AuditDraft, AuditQuery, AuditRecord, Conversion, DatasetRow,
    DatasetUpdate, EntryRow, GrantRow, LedgerAppend, NewBlock, QuotaRow, SharedBody, Store,
    StoreError, TokenRow, UnitRow, AUDIT_GENESIS, LATEST, MIGRATIONS,
};
use async_trait::async_trait;
use sqlx::postgres::{PgPool, PgPoolOptions, PgRow};
use sqlx::Row;
use std::time::Duration;

/// Advisory-lock key serialising schema migrations across replicas.
const MIGRATION_LOCK: i64 = 0x7072_6976_6c65_6467;

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS datasets (
        id TEXT PRIMARY KEY,
        description TEXT NOT NULL,
        neighboring_relation TEXT NOT NULL,
        budget_mu DOUBLE PRECISION NOT NULL,
        budget_delta DOUBLE PRECISION NOT NULL,
        grid_step DOUBLE PRECISION NOT NULL,
        version BIGINT NOT NULL,
        charges BIGINT NOT NULL,
        mu_spent DOUBLE PRECISION NOT NULL,
        mu_spent_lower DOUBLE PRECISION NOT NULL,
        state BYTEA NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS entries (
        dataset_id TEXT NOT NULL REFERENCES datasets(id),
        seq BIGINT NOT NULL,
        kind TEXT NOT NULL,
        charge_id TEXT,
        event TEXT,
        label TEXT,
        metadata TEXT,
        idempotency_key TEXT,
        request_hash TEXT,
        mu_after DOUBLE PRECISION,
        budget_mu DOUBLE PRECISION,
        budget_delta DOUBLE PRECISION,
        response TEXT,
        created_at TEXT NOT NULL,
        PRIMARY KEY (dataset_id, seq)
    )",
    "CREATE UNIQUE INDEX IF NOT EXISTS entries_idempotency
        ON entries (dataset_id, idempotency_key) WHERE idempotency_key IS NOT NULL",
];

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
            .acquire_timeout(Duration::from_secs(3))
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
        for stmt in SCHEMA {
            if let Err(e) = sqlx::query(stmt).execute(&mut *conn).await {
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
        for stmt in *stmts {
            sqlx::query(&migration_sql(
                stmt,
                "DOUBLE PRECISION",
                "BIGINT",
                "BIGSERIAL PRIMARY KEY",
                "BYTEA",
                "\"C\"",
                |column, key| {
                    let path = key.split('.').collect::<Vec<_>>().join(",");
                    format!("(({column})::jsonb#>>'{{{path}}}')::DOUBLE PRECISION")
                },
            ))
            .execute(&mut *tx)
            .await
            .map_err(|e| {
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

/// A dataset row by `stmt` ([`sql::DATASET_INSERT`] or its if-absent form).
async fn insert_dataset(
    conn: &mut sqlx::PgConnection,
    stmt: &str,
    row: &DatasetRow,
    state: &[u8],
) -> Result<u64, sqlx::Error> {
    let res = sqlx::query(&sql::numbered(stmt))
        .bind(&row.id)
        .bind(&row.description)
        .bind(&row.neighboring_relation)
        .bind(row.budget_mu)
        .bind(row.budget_delta)
        .bind(row.grid_step)
        .bind(row.version)
        .bind(row.charges)
        .bind(row.mu_spent)
        .bind(row.mu_spent)
        .bind(row.mu_sq_spent)
        .bind(row.delta_spent)
        .bind(row.units)
        .bind(row.exact_mu)
        .bind(row.reserved)
        .bind(&row.create_hash)
        .bind(state)
        .bind(row.mu_max)
        .bind(row.delta_max)
        .bind(row.cap_mu)
        .bind(row.cap_delta)
        .bind(&row.statement_unknown)
        .bind(row.states_from)
        .bind(&row.created_at)
        .bind(&row.updated_at)
        .execute(&mut *conn)
        .await?;
    Ok(res.rows_affected())
}

/// One append inside the caller's transaction (see [`Store::append`]).
async fn append_in(
    tx: &mut sqlx::PgConnection,
    id: &str,
    expected_version: i64,
    entry: &EntryRow,
    update: &DatasetUpdate,
) -> Result<i64, StoreError> {
    let res = sqlx::query(&sql::numbered(sql::APPEND_UPDATE))
        .bind(update.budget_mu)
        .bind(update.budget_delta)
        .bind(update.mu_max)
        .bind(update.delta_max)
        .bind(update.charges)
        .bind(update.mu_spent)
        .bind(update.mu_spent)
        .bind(update.mu_sq_spent)
        .bind(update.delta_spent)
        .bind(update.units)
        .bind(update.reserved)
        .bind(&update.updated_at)
        .bind(id)
        .bind(expected_version)
        .execute(&mut *tx)
        .await
        .map_err(unavailable)?;
    if res.rows_affected() == 0 {
        let exists = sqlx::query(&sql::numbered(sql::DATASET_EXISTS))
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(unavailable)?;
        return Err(if exists.is_some() {
            StoreError::VersionConflict
        } else {
            StoreError::NotFound
        });
    }
    if let Some(st) = &update.settle {
        let res = sqlx::query(&sql::numbered(sql::SETTLE))
            .bind(&st.to)
            .bind(id)
            .bind(&st.charge_id)
            .bind(&st.from)
            .execute(&mut *tx)
            .await
            .map_err(unavailable)?;
        if res.rows_affected() != 1 {
            return Err(StoreError::VersionConflict);
        }
    }
    for q in &update.quotas {
        upsert_quota(&mut *tx, q).await.map_err(unavailable)?;
    }
    if let Some(a) = update.sealed_audit(id, expected_version) {
        insert_audit(&mut *tx, &a).await.map_err(unavailable)?;
    }
    let seq = expected_version + 1;
    if let Some(b) = &entry.shared {
        sqlx::query(&sql::numbered(sql::SHARED_BODY_INSERT))
            .bind(&b.digest)
            .bind(&b.body)
            .execute(&mut *tx)
            .await
            .map_err(unavailable)?;
    }
    let ins = sqlx::query(&sql::numbered(sql::ENTRY_INSERT))
        .bind(id)
        .bind(seq)
        .bind(&entry.kind)
        .bind(&entry.charge_id)
        .bind(&entry.event)
        .bind(&entry.label)
        .bind(&entry.metadata)
        .bind(&entry.idempotency_key)
        .bind(&entry.request_hash)
        .bind(entry.mu_after)
        .bind(entry.unit_mu)
        .bind(entry.unit_delta)
        .bind(entry.budget_mu)
        .bind(entry.budget_delta)
        .bind(&entry.response)
        .bind(&entry.ref_id)
        .bind(&entry.run_id)
        .bind(entry.chunk)
        .bind(&entry.status)
        .bind(&entry.principal)
        .bind(&entry.quota)
        .bind(&entry.created_at)
        .execute(&mut *tx)
        .await;
    match ins {
        Ok(_) => {}
        Err(e) if is_unique_violation(&e) => return Err(StoreError::DuplicateKey),
        Err(e) => return Err(unavailable(e)),
    }
    Ok(seq)
}

/// Appends `d` to its chain inside the caller's transaction (see [`super::audit_hash`]).
async fn insert_audit(conn: &mut sqlx::PgConnection, d: &AuditDraft) -> Result<(), sqlx::Error> {
    sqlx::query(&sql::numbered(sql::AUDIT_HEAD_INIT))
        .bind(&d.chain)
        .bind(AUDIT_GENESIS)
        .execute(&mut *conn)
        .await?;
    let head = sqlx::query(&sql::numbered(sql::AUDIT_HEAD_NEXT))
        .bind(&d.chain)
        .fetch_one(&mut *conn)
        .await?;
    let (seq, prev): (i64, String) = (head.get("seq"), head.get("hash"));
    let hash = audit_hash(&prev, seq, d);
    sqlx::query(&sql::numbered(sql::AUDIT_INSERT))
        .bind(&d.chain)
        .bind(seq)
        .bind(&d.at)
        .bind(&d.principal)
        .bind(&d.credential)
        .bind(&d.action)
        .bind(&d.dataset_id)
        .bind(&d.target)
        .bind(&d.request_id)
        .bind(&d.client)
        .bind(&d.before)
        .bind(&d.after)
        .bind(&prev)
        .bind(&hash)
        .execute(&mut *conn)
        .await?;
    sqlx::query(&sql::numbered(sql::AUDIT_HEAD_SET))
        .bind(&hash)
        .bind(&d.chain)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Inserts a new ledger's row: [`StoreError::AlreadyExists`] if its id is taken.
async fn insert_new(
    tx: &mut sqlx::PgConnection,
    row: &DatasetRow,
    state: &[u8],
) -> Result<(), StoreError> {
    match insert_dataset(tx, sql::DATASET_INSERT, row, state).await {
        Ok(_) => Ok(()),
        Err(e) if is_unique_violation(&e) => Err(StoreError::AlreadyExists),
        Err(e) => Err(unavailable(e)),
    }
}

/// [`super::LedgerAppend::hold`]: the row stays at `version` (and is locked) until the commit.
async fn hold(tx: &mut sqlx::PgConnection, id: &str, version: i64) -> Result<(), StoreError> {
    let res = sqlx::query(&sql::numbered(sql::DATASET_HOLD))
        .bind(id)
        .bind(version)
        .execute(&mut *tx)
        .await
        .map_err(unavailable)?;
    if res.rows_affected() == 0 {
        return Err(StoreError::VersionConflict);
    }
    Ok(())
}

async fn upsert_quota(conn: &mut sqlx::PgConnection, q: &QuotaRow) -> Result<(), sqlx::Error> {
    sqlx::query(&sql::numbered(sql::QUOTA_UPSERT))
        .bind(&q.dataset_id)
        .bind(&q.principal)
        .bind(q.mu)
        .bind(q.delta)
        .bind(q.mu_sq_spent)
        .bind(q.delta_spent)
        .bind(q.units)
        .bind(&q.updated_at)
        .execute(&mut *conn)
        .await
        .map(|_| ())
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

super::row_decoders!(PgRow);

#[async_trait]
impl Store for PostgresStore {
    async fn create_dataset(
        &self,
        row: &DatasetRow,
        state: &[u8],
        partitioning: Option<&str>,
        audit: Option<&AuditDraft>,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        insert_new(&mut tx, row, state).await?;
        if let Some(p) = partitioning {
            sqlx::query(&sql::numbered(sql::PARTITIONING_SET))
                .bind(p)
                .bind(&row.id)
                .execute(&mut *tx)
                .await
                .map_err(unavailable)?;
        }
        if let Some(a) = super::sealed_create_audit(row, audit, &[]) {
            insert_audit(&mut tx, &a).await.map_err(unavailable)?;
        }
        tx.commit().await.map_err(unavailable)
    }

    async fn create_block(&self, b: &NewBlock<'_>) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        // The parent's row first: its id precedes the block's, as in `append_many`.
        hold(&mut tx, b.parent.0, b.parent.1).await?;
        insert_new(&mut tx, b.row, b.state).await?;
        for q in b.quotas {
            upsert_quota(&mut tx, q).await.map_err(unavailable)?;
        }
        // The dataset's chain, then the block's (its head's id follows).
        if let Some(a) = b.audit {
            insert_audit(&mut tx, a).await.map_err(unavailable)?;
        }
        if let Some(a) = super::sealed_create_audit(b.row, b.record, b.quotas) {
            insert_audit(&mut tx, &a).await.map_err(unavailable)?;
        }
        tx.commit().await.map_err(unavailable)
    }

    async fn get_dataset(&self, id: &str) -> Result<Option<DatasetRow>, StoreError> {
        let row = sqlx::query(&sql::numbered(sql::DATASET_GET))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(row.as_ref().map(dataset_from_row))
    }

    async fn get_snapshot(&self, id: &str) -> Result<Option<(i64, Vec<u8>)>, StoreError> {
        let Some(row) = sqlx::query(&sql::numbered(sql::SNAPSHOT_GET))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?
        else {
            return Ok(None);
        };
        let seq: i64 = row.get("state_seq");
        let Some(token) = row.get::<Option<String>, _>("snapshot") else {
            return Ok(Some((seq, row.get("state"))));
        };
        let parts: Vec<Vec<u8>> = sqlx::query_scalar(&sql::numbered(sql::SNAPSHOT_PARTS))
            .bind(id)
            .bind(&token)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        super::snapshot_of(seq, parts, row.get("snapshot_parts"))
    }

    async fn get_certificates(&self, key: &str) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar(&sql::numbered(sql::CERTIFICATES_GET))
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)
    }

    async fn put_certificates(&self, key: &str, value: &str) -> Result<(), StoreError> {
        sqlx::query(&sql::numbered(sql::CERTIFICATES_PUT))
            .bind(key)
            .bind(value)
            .execute(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn put_snapshot_part(
        &self,
        id: &str,
        token: &str,
        seq: i64,
        part: i64,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        sqlx::query(&sql::numbered(sql::SNAPSHOT_PART_INSERT))
            .bind(id)
            .bind(token)
            .bind(seq)
            .bind(part)
            .bind(bytes)
            .execute(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn set_snapshot(
        &self,
        id: &str,
        token: &str,
        seq: i64,
        parts: i64,
        exact_mu: Option<f64>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(&sql::numbered(sql::SNAPSHOT_SET))
            .bind(seq)
            .bind(token)
            .bind(parts)
            .bind(&[] as &[u8])
            .bind(exact_mu)
            .bind(id)
            .bind(seq)
            .execute(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(done.rows_affected() == 1)
    }

    async fn drop_snapshot_parts(
        &self,
        id: &str,
        seq: i64,
        token: Option<&str>,
    ) -> Result<(), StoreError> {
        let stmt = sql::numbered(match token {
            None => sql::SNAPSHOT_DROP_BEFORE,
            Some(_) => sql::SNAPSHOT_DROP_TOKEN,
        });
        let q = sqlx::query(&stmt).bind(id);
        let q = match token {
            None => q.bind(seq),
            Some(t) => q.bind(t),
        };
        q.execute(&self.pool).await.map_err(unavailable)?;
        Ok(())
    }

    async fn list_datasets(
        &self,
        after: Option<&str>,
        limit: i64,
        grantee: Option<&str>,
    ) -> Result<Vec<DatasetRow>, StoreError> {
        let rows = sqlx::query(&sql::numbered(sql::DATASET_LIST))
            .bind(after.unwrap_or(""))
            .bind(grantee)
            .bind(grantee)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(dataset_from_row).collect())
    }

    async fn shared_body(&self, digest: &str) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar(&sql::numbered(sql::SHARED_BODY_GET))
            .bind(digest)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)
    }

    async fn find_entry_by_key(&self, id: &str, key: &str) -> Result<Option<EntryRow>, StoreError> {
        let row = sqlx::query(&sql::numbered(sql::ENTRY_BY_KEY))
            .bind(id)
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(row.as_ref().map(entry_from_row))
    }

    async fn has_legacy_keys(&self, id: &str) -> Result<bool, StoreError> {
        let row = sqlx::query(&sql::numbered(sql::LEGACY_KEY_ANY))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(row.is_some())
    }

    async fn find_charge(&self, id: &str, charge_id: &str) -> Result<Option<EntryRow>, StoreError> {
        let row = sqlx::query(&sql::numbered(sql::ENTRY_BY_CHARGE))
            .bind(id)
            .bind(charge_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(row.as_ref().map(entry_from_row))
    }

    async fn list_run(
        &self,
        id: &str,
        run_id: &str,
        after: i64,
    ) -> Result<Vec<EntryRow>, StoreError> {
        let rows = sqlx::query(&sql::numbered(sql::RUN_LIST))
            .bind(id)
            .bind(run_id)
            .bind(after)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(entry_from_row).collect())
    }

    async fn list_units(
        &self,
        id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<UnitRow>, StoreError> {
        let rows = sqlx::query(&sql::numbered(sql::UNIT_LIST))
            .bind(id)
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(unit_from_row).collect())
    }

    async fn list_entries(
        &self,
        id: &str,
        kind: Option<&str>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<EntryRow>, StoreError> {
        let rows = sqlx::query(&sql::numbered(sql::ENTRY_LIST))
            .bind(id)
            .bind(after)
            .bind(kind)
            .bind(kind)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(entry_from_row).collect())
    }

    async fn append(
        &self,
        id: &str,
        expected_version: i64,
        entry: &EntryRow,
        update: &DatasetUpdate,
    ) -> Result<i64, StoreError> {
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        let seq = append_in(&mut tx, id, expected_version, entry, update).await?;
        tx.commit().await.map_err(unavailable)?;
        Ok(seq)
    }

    async fn append_many(
        &self,
        items: &[LedgerAppend],
        shared: Option<&SharedBody>,
    ) -> Result<(), StoreError> {
        debug_assert!(items.windows(2).all(|w| w[0].id < w[1].id));
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        // The shared body's digest is the response's, unique to this charge: nobody else
        // inserts it, so taking its index entry first cannot make anyone wait.
        if let Some(b) = shared {
            sqlx::query(&sql::numbered(sql::SHARED_BODY_INSERT))
                .bind(&b.digest)
                .bind(&b.body)
                .execute(&mut *tx)
                .await
                .map_err(unavailable)?;
        }
        // In increasing id order: every row lock (and a new block's index entry), the rows
        // items hold among them, is taken in the one global order, so two multi-ledger appends
        // never wait on each other in a cycle.
        for op in super::lock_order(items) {
            let it = match op {
                Ok(i) => &items[i],
                Err((id, version)) => {
                    hold(&mut tx, &id, version).await?;
                    continue;
                }
            };
            if let Some((row, state)) = &it.create {
                insert_dataset(&mut tx, sql::DATASET_INSERT_IF_ABSENT, row, state)
                    .await
                    .map_err(unavailable)?;
            }
            append_in(&mut tx, &it.id, it.expected_version, &it.entry, &it.update).await?;
            if let Some(n) = it.blocks {
                let (lo, hi) = super::block_id_range(&it.id);
                let count: i64 = sqlx::query_scalar(&sql::block_count_sql(true))
                    .bind(&lo)
                    .bind(&hi)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(unavailable)?;
                if count != n {
                    return Err(StoreError::VersionConflict);
                }
            }
        }
        tx.commit().await.map_err(unavailable)
    }

    async fn partitioning(&self, id: &str) -> Result<Option<Option<String>>, StoreError> {
        sqlx::query_scalar::<_, Option<String>>(&sql::numbered(sql::PARTITIONING_GET))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)
    }

    async fn list_blocks(
        &self,
        parent: &str,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<DatasetRow>, StoreError> {
        let (lo, hi) = super::block_id_range(parent);
        let rows = sqlx::query(&sql::block_list_sql(true))
            .bind(&lo)
            .bind(&hi)
            .bind(after.unwrap_or(""))
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(dataset_from_row).collect())
    }

    async fn convert(
        &self,
        id: &str,
        expected_version: i64,
        c: &Conversion,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        let res = sqlx::query(&sql::numbered(sql::CONVERT_DATASET))
            .bind(c.mu_spent)
            .bind(c.mu_spent)
            .bind(c.mu_sq_spent)
            .bind(c.delta_spent)
            .bind(c.units)
            .bind(id)
            .bind(expected_version)
            .execute(&mut *tx)
            .await
            .map_err(unavailable)?;
        if res.rows_affected() == 0 {
            return Err(StoreError::VersionConflict);
        }
        for (seq, mu, delta) in &c.certificates {
            sqlx::query(&sql::numbered(sql::CONVERT_ENTRY))
                .bind(mu)
                .bind(delta)
                .bind(id)
                .bind(seq)
                .execute(&mut *tx)
                .await
                .map_err(unavailable)?;
        }
        tx.commit().await.map_err(unavailable)
    }

    async fn create_token(
        &self,
        t: &TokenRow,
        only_if_none: bool,
        audit: &AuditDraft,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        if only_if_none {
            // Replicas starting together: one of them creates the first token.
            sqlx::query("LOCK TABLE tokens IN EXCLUSIVE MODE")
                .execute(&mut *tx)
                .await
                .map_err(unavailable)?;
            let any = sqlx::query("SELECT 1 FROM tokens LIMIT 1")
                .fetch_optional(&mut *tx)
                .await
                .map_err(unavailable)?;
            if any.is_some() {
                return Ok(false);
            }
        }
        sqlx::query(&sql::numbered(sql::TOKEN_INSERT))
            .bind(&t.id)
            .bind(&t.name)
            .bind(&t.hash)
            .bind(&t.role)
            .bind(&t.created_at)
            .bind(&t.expires_at)
            .bind(&t.revoked_at)
            .execute(&mut *tx)
            .await
            .map_err(unavailable)?;
        insert_audit(&mut tx, audit).await.map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
        Ok(true)
    }

    async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRow>, StoreError> {
        let row = sqlx::query(&sql::numbered(sql::TOKEN_BY_HASH))
            .bind(hash)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(row.as_ref().map(token_from_row))
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        let rows = sqlx::query(&sql::numbered(sql::TOKEN_LIST))
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(token_from_row).collect())
    }

    async fn revoke_token(
        &self,
        id: &str,
        at: &str,
        audit: &AuditDraft,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        let res = sqlx::query(&sql::numbered(sql::TOKEN_REVOKE))
            .bind(at)
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(unavailable)?;
        if res.rows_affected() != 1 {
            return Ok(false);
        }
        insert_audit(&mut tx, audit).await.map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
        Ok(true)
    }

    async fn grant(&self, dataset_id: &str, principal: &str) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar(&sql::numbered(sql::GRANT_GET))
            .bind(dataset_id)
            .bind(principal)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)
    }

    async fn list_grants(&self, dataset_id: &str) -> Result<Vec<GrantRow>, StoreError> {
        let rows = sqlx::query(&sql::numbered(sql::GRANT_LIST))
            .bind(dataset_id)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(rows
            .iter()
            .map(|r| GrantRow {
                dataset_id: r.get("dataset_id"),
                principal: r.get("principal"),
                role: r.get("role"),
                created_at: r.get("created_at"),
            })
            .collect())
    }

    async fn set_grant(
        &self,
        dataset_id: &str,
        principal: &str,
        role: Option<&str>,
        at: &str,
        audit: &AuditDraft,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        let res = match role {
            Some(role) => {
                sqlx::query(&sql::numbered(sql::GRANT_UPSERT))
                    .bind(dataset_id)
                    .bind(principal)
                    .bind(role)
                    .bind(at)
                    .execute(&mut *tx)
                    .await
            }
            None => {
                sqlx::query(&sql::numbered(sql::GRANT_DELETE))
                    .bind(dataset_id)
                    .bind(principal)
                    .execute(&mut *tx)
                    .await
            }
        }
        .map_err(unavailable)?;
        if res.rows_affected() == 0 {
            return Ok(false);
        }
        insert_audit(&mut tx, audit).await.map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
        Ok(true)
    }

    async fn list_quotas(&self, dataset_id: &str) -> Result<Vec<QuotaRow>, StoreError> {
        let rows = sqlx::query(&sql::numbered(sql::QUOTA_LIST))
            .bind(dataset_id)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(quota_from_row).collect())
    }

    async fn audit(&self, draft: &AuditDraft) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        insert_audit(&mut tx, draft).await.map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)
    }

    async fn list_audit(&self, q: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError> {
        let rows = sqlx::query(&sql::numbered(sql::AUDIT_QUERY))
            .bind(q.after)
            .bind(&q.dataset_id)
            .bind(&q.dataset_id)
            .bind(&q.principal)
            .bind(&q.principal)
            .bind(&q.since)
            .bind(&q.since)
            .bind(&q.until)
            .bind(&q.until)
            .bind(q.limit)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(audit_from_row).collect())
    }

    async fn audit_chain(
        &self,
        chain: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let rows = sqlx::query(&sql::numbered(sql::AUDIT_CHAIN))
            .bind(chain)
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(audit_from_row).collect())
    }

    async fn datasets_without_chain(&self) -> Result<Vec<String>, StoreError> {
        sqlx::query_scalar(&sql::numbered(sql::DATASETS_WITHOUT_CHAIN))
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)
    }

    async fn last_state_audit(&self, chain: &str) -> Result<Option<AuditRecord>, StoreError> {
        let row = sqlx::query(&sql::numbered(sql::AUDIT_LAST_STATE))
            .bind(chain)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(row.as_ref().map(audit_from_row))
    }

    async fn audit_heads(&self) -> Result<Vec<(String, i64, String)>, StoreError> {
        let rows = sqlx::query(&sql::numbered(sql::AUDIT_HEADS))
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(rows
            .iter()
            .map(|r| (r.get("chain"), r.get("seq"), r.get("hash")))
            .collect())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(unavailable)
    }
}
