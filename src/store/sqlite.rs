//! The embedded store: one SQLite file, created with its schema on first start.
//!
//! Durability: WAL journal with `synchronous = FULL`, so a transaction that returned from COMMIT is
//! on disk and survives a crash of the process (or of the machine). Writers serialise on SQLite's
//! write lock; `busy_timeout` makes concurrent writers wait instead of failing.

use super::sql;
use super::sqlite_writer::{self as w, exec, Writer};
use super::{
    migration_sql, AuditDraft, AuditQuery, AuditRecord, Conversion, DatasetRow, DatasetUpdate,
    EntryRow, GrantRow, LedgerAppend, NewBlock, QuotaRow, SharedBody, Store, StoreError, TokenRow,
    UnitRow, LATEST, MIGRATIONS,
};
use async_trait::async_trait;
use rusqlite::{params, Connection};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::Row;
use std::str::FromStr;
use std::time::Duration;

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS datasets (
        id TEXT PRIMARY KEY,
        description TEXT NOT NULL,
        neighboring_relation TEXT NOT NULL,
        budget_mu REAL NOT NULL,
        budget_delta REAL NOT NULL,
        grid_step REAL NOT NULL,
        version INTEGER NOT NULL,
        charges INTEGER NOT NULL,
        mu_spent REAL NOT NULL,
        mu_spent_lower REAL NOT NULL,
        state BLOB NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS entries (
        dataset_id TEXT NOT NULL REFERENCES datasets(id),
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        charge_id TEXT,
        event TEXT,
        label TEXT,
        metadata TEXT,
        idempotency_key TEXT,
        request_hash TEXT,
        mu_after REAL,
        budget_mu REAL,
        budget_delta REAL,
        response TEXT,
        created_at TEXT NOT NULL,
        PRIMARY KEY (dataset_id, seq)
    )",
    "CREATE UNIQUE INDEX IF NOT EXISTS entries_idempotency
        ON entries (dataset_id, idempotency_key) WHERE idempotency_key IS NOT NULL",
];

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

/// One append inside the writer's transaction (the dataset's compare-and-swap, the settled
/// entry, quotas, the audit record, the entry). Nothing is written when it fails (the writer
/// rolls back to the write's savepoint).
fn append_in(
    c: &Connection,
    id: &str,
    expected_version: i64,
    entry: &EntryRow,
    update: &DatasetUpdate,
) -> Result<i64, StoreError> {
    let u = update;
    let changed = exec(
        c,
        sql::APPEND_UPDATE,
        params![
            u.budget_mu,
            u.budget_delta,
            u.mu_max,
            u.delta_max,
            u.charges,
            u.mu_spent,
            u.mu_spent,
            u.mu_sq_spent,
            u.delta_spent,
            u.units,
            u.reserved,
            u.updated_at,
            id,
            expected_version
        ],
    )?;
    if changed == 0 {
        let exists = c
            .prepare_cached(sql::DATASET_EXISTS)
            .and_then(|mut s| s.exists(params![id]))
            .map_err(w::unavailable)?;
        return Err(if exists {
            StoreError::VersionConflict
        } else {
            StoreError::NotFound
        });
    }
    if let Some(st) = &u.settle {
        if exec(c, sql::SETTLE, params![st.to, id, st.charge_id, st.from])? != 1 {
            return Err(StoreError::VersionConflict);
        }
    }
    for q in &u.quotas {
        upsert_quota(c, q)?;
    }
    if let Some(a) = u.sealed_audit(id, expected_version) {
        w::insert_audit(c, &a)?;
    }
    let seq = expected_version + 1;
    let e = entry;
    if let Some(b) = &e.shared {
        exec(c, sql::SHARED_BODY_INSERT, params![b.digest, b.body])?;
    }
    let inserted = c.prepare_cached(sql::ENTRY_INSERT).and_then(|mut s| {
        s.execute(params![
            id,
            seq,
            e.kind,
            e.charge_id,
            e.event,
            e.label,
            e.metadata,
            e.idempotency_key,
            e.request_hash,
            e.mu_after,
            e.unit_mu,
            e.unit_delta,
            e.budget_mu,
            e.budget_delta,
            e.response,
            e.ref_id,
            e.run_id,
            e.chunk,
            e.status,
            e.principal,
            e.quota,
            e.created_at
        ])
    });
    match inserted {
        Ok(_) => Ok(seq),
        Err(e) if w::is_unique_violation(&e) => Err(StoreError::DuplicateKey),
        Err(e) => Err(w::unavailable(e)),
    }
}

/// A dataset row by `stmt` ([`sql::DATASET_INSERT`] or its if-absent form); rows inserted.
fn insert_dataset(
    c: &Connection,
    stmt: &str,
    r: &DatasetRow,
    state: &[u8],
) -> Result<usize, rusqlite::Error> {
    c.prepare_cached(stmt).and_then(|mut s| {
        s.execute(params![
            r.id,
            r.description,
            r.neighboring_relation,
            r.budget_mu,
            r.budget_delta,
            r.grid_step,
            r.version,
            r.charges,
            r.mu_spent,
            r.mu_spent,
            r.mu_sq_spent,
            r.delta_spent,
            r.units,
            r.exact_mu,
            r.reserved,
            r.create_hash,
            state,
            r.mu_max,
            r.delta_max,
            r.cap_mu,
            r.cap_delta,
            r.statement_unknown,
            r.states_from,
            r.created_at,
            r.updated_at
        ])
    })
}

/// [`Store::append_many`] inside the writer's transaction: one savepoint for all the items, so
/// the first failure rolls every one of them back.
fn append_many_in(
    c: &Connection,
    items: &[LedgerAppend],
    shared: Option<&SharedBody>,
) -> Result<(), StoreError> {
    if let Some(b) = shared {
        exec(c, sql::SHARED_BODY_INSERT, params![b.digest, b.body])?;
    }
    // One writer: the order is the one PostgreSQL takes its locks in only to keep both the same.
    for op in super::lock_order(items) {
        let it = match op {
            Ok(i) => &items[i],
            Err((id, version)) => {
                hold(c, &id, version)?;
                continue;
            }
        };
        if let Some((row, state)) = &it.create {
            insert_dataset(c, sql::DATASET_INSERT_IF_ABSENT, row, state).map_err(w::unavailable)?;
        }
        append_in(c, &it.id, it.expected_version, &it.entry, &it.update)?;
        if let Some(n) = it.blocks {
            let (lo, hi) = super::block_id_range(&it.id);
            let count: i64 = c
                .query_row(sql::BLOCK_COUNT, params![lo, hi], |r| r.get(0))
                .map_err(w::unavailable)?;
            if count != n {
                return Err(StoreError::VersionConflict);
            }
        }
    }
    Ok(())
}

fn upsert_quota(c: &Connection, q: &QuotaRow) -> Result<(), StoreError> {
    exec(
        c,
        sql::QUOTA_UPSERT,
        params![
            q.dataset_id,
            q.principal,
            q.mu,
            q.delta,
            q.mu_sq_spent,
            q.delta_spent,
            q.units,
            q.updated_at
        ],
    )
    .map(|_| ())
}

/// Inserts a new ledger's row: [`StoreError::AlreadyExists`] if its id is taken.
fn insert_new(c: &Connection, row: &DatasetRow, state: &[u8]) -> Result<(), StoreError> {
    match insert_dataset(c, sql::DATASET_INSERT, row, state) {
        Ok(_) => Ok(()),
        Err(e) if w::is_unique_violation(&e) => Err(StoreError::AlreadyExists),
        Err(e) => Err(w::unavailable(e)),
    }
}

/// [`super::LedgerAppend::hold`]: the row is still at `version`.
fn hold(c: &Connection, id: &str, version: i64) -> Result<(), StoreError> {
    if exec(c, sql::DATASET_HOLD, params![id, version])? == 0 {
        return Err(StoreError::VersionConflict);
    }
    Ok(())
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
        for stmt in SCHEMA {
            sqlx::query(stmt)
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
                for stmt in *stmts {
                    sqlx::query(&migration_sql(
                        stmt,
                        "REAL",
                        "INTEGER",
                        "INTEGER PRIMARY KEY AUTOINCREMENT",
                        "BLOB",
                        "BINARY",
                        |column, key| format!("json_extract({column}, '$.{key}')"),
                    ))
                    .execute(&mut *conn)
                    .await?;
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

super::row_decoders!(SqliteRow);

#[async_trait]
impl Store for SqliteStore {
    async fn create_dataset(
        &self,
        row: &DatasetRow,
        state: &[u8],
        partitioning: Option<&str>,
        audit: Option<&AuditDraft>,
    ) -> Result<(), StoreError> {
        let (r, state) = (row.clone(), state.to_vec());
        let audit = super::sealed_create_audit(row, audit, &[]);
        let partitioning = partitioning.map(str::to_owned);
        self.writer
            .write(move |c| {
                insert_new(c, &r, &state)?;
                if let Some(p) = &partitioning {
                    exec(c, sql::PARTITIONING_SET, params![p, r.id])?;
                }
                match &audit {
                    Some(a) => w::insert_audit(c, a),
                    None => Ok(()),
                }
            })
            .await
    }

    async fn create_block(&self, b: &NewBlock<'_>) -> Result<(), StoreError> {
        let (r, state, quotas) = (b.row.clone(), b.state.to_vec(), b.quotas.to_vec());
        let (parent, version) = (b.parent.0.to_owned(), b.parent.1);
        let audit = b.audit.cloned();
        let record = super::sealed_create_audit(b.row, b.record, b.quotas);
        self.writer
            .write(move |c| {
                hold(c, &parent, version)?;
                insert_new(c, &r, &state)?;
                for q in &quotas {
                    upsert_quota(c, q)?;
                }
                for a in audit.iter().chain(record.iter()) {
                    w::insert_audit(c, a)?;
                }
                Ok(())
            })
            .await
    }

    async fn get_dataset(&self, id: &str) -> Result<Option<DatasetRow>, StoreError> {
        let row = sqlx::query(sql::DATASET_GET)
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(row.as_ref().map(dataset_from_row))
    }

    async fn get_snapshot(&self, id: &str) -> Result<Option<(i64, Vec<u8>)>, StoreError> {
        let Some(row) = sqlx::query(sql::SNAPSHOT_GET)
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
        let parts: Vec<Vec<u8>> = sqlx::query_scalar(sql::SNAPSHOT_PARTS)
            .bind(id)
            .bind(&token)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        super::snapshot_of(seq, parts, row.get("snapshot_parts"))
    }

    async fn get_certificates(&self, key: &str) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar(sql::CERTIFICATES_GET)
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)
    }

    async fn put_certificates(&self, key: &str, value: &str) -> Result<(), StoreError> {
        let (key, value) = (key.to_owned(), value.to_owned());
        self.writer
            .write(move |c| {
                exec(c, sql::CERTIFICATES_PUT, params![key, value])?;
                Ok(())
            })
            .await
    }

    async fn put_snapshot_part(
        &self,
        id: &str,
        token: &str,
        seq: i64,
        part: i64,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let (id, token, bytes) = (id.to_owned(), token.to_owned(), bytes.to_vec());
        self.writer
            .write(move |c| {
                exec(
                    c,
                    sql::SNAPSHOT_PART_INSERT,
                    params![id, token, seq, part, bytes],
                )?;
                Ok(())
            })
            .await
    }

    async fn set_snapshot(
        &self,
        id: &str,
        token: &str,
        seq: i64,
        parts: i64,
        exact_mu: Option<f64>,
    ) -> Result<bool, StoreError> {
        let (id, token) = (id.to_owned(), token.to_owned());
        self.writer
            .write(move |c| {
                let empty: &[u8] = &[];
                let set = params![seq, token, parts, empty, exact_mu, id, seq];
                Ok(exec(c, sql::SNAPSHOT_SET, set)? == 1)
            })
            .await
    }

    async fn drop_snapshot_parts(
        &self,
        id: &str,
        seq: i64,
        token: Option<&str>,
    ) -> Result<(), StoreError> {
        let (id, token) = (id.to_owned(), token.map(str::to_owned));
        self.writer
            .write(move |c| {
                match &token {
                    None => exec(c, sql::SNAPSHOT_DROP_BEFORE, params![id, seq])?,
                    Some(t) => exec(c, sql::SNAPSHOT_DROP_TOKEN, params![id, t])?,
                };
                Ok(())
            })
            .await
    }

    async fn list_datasets(
        &self,
        after: Option<&str>,
        limit: i64,
        grantee: Option<&str>,
    ) -> Result<Vec<DatasetRow>, StoreError> {
        let rows = sqlx::query(sql::DATASET_LIST)
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
        sqlx::query_scalar(sql::SHARED_BODY_GET)
            .bind(digest)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)
    }

    async fn find_entry_by_key(&self, id: &str, key: &str) -> Result<Option<EntryRow>, StoreError> {
        let row = sqlx::query(sql::ENTRY_BY_KEY)
            .bind(id)
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(row.as_ref().map(entry_from_row))
    }

    async fn has_legacy_keys(&self, id: &str) -> Result<bool, StoreError> {
        let row = sqlx::query(sql::LEGACY_KEY_ANY)
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(row.is_some())
    }

    async fn find_charge(&self, id: &str, charge_id: &str) -> Result<Option<EntryRow>, StoreError> {
        let row = sqlx::query(sql::ENTRY_BY_CHARGE)
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
        let rows = sqlx::query(sql::RUN_LIST)
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
        let rows = sqlx::query(sql::UNIT_LIST)
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
        let rows = sqlx::query(sql::ENTRY_LIST)
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
        let (id, entry, update) = (id.to_owned(), entry.clone(), update.clone());
        self.writer
            .write(move |c| append_in(c, &id, expected_version, &entry, &update))
            .await
    }

    async fn append_many(
        &self,
        items: &[LedgerAppend],
        shared: Option<&SharedBody>,
    ) -> Result<(), StoreError> {
        let (items, shared) = (items.to_vec(), shared.cloned());
        self.writer
            .write(move |c| append_many_in(c, &items, shared.as_ref()))
            .await
    }

    async fn partitioning(&self, id: &str) -> Result<Option<Option<String>>, StoreError> {
        sqlx::query_scalar::<_, Option<String>>(sql::PARTITIONING_GET)
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
        let rows = sqlx::query(sql::BLOCK_LIST)
            .bind(&lo)
            .bind(&hi)
            .bind(after.unwrap_or(""))
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(dataset_from_row).collect())
    }

    fn append_queued(
        &self,
        id: &str,
        expected_version: i64,
        entry: &EntryRow,
        update: &DatasetUpdate,
    ) -> Option<super::PendingAppend> {
        let (id, entry, update) = (id.to_owned(), entry.clone(), update.clone());
        let pending = self
            .writer
            .queue(move |c| append_in(c, &id, expected_version, &entry, &update))?;
        Some(Box::pin(pending))
    }

    async fn convert(
        &self,
        id: &str,
        expected_version: i64,
        conversion: &Conversion,
    ) -> Result<(), StoreError> {
        let (id, v) = (id.to_owned(), conversion.clone());
        self.writer
            .write(move |c| {
                let changed = exec(
                    c,
                    sql::CONVERT_DATASET,
                    params![
                        v.mu_spent,
                        v.mu_spent,
                        v.mu_sq_spent,
                        v.delta_spent,
                        v.units,
                        id,
                        expected_version
                    ],
                )?;
                if changed == 0 {
                    return Err(StoreError::VersionConflict);
                }
                for (seq, mu, delta) in &v.certificates {
                    exec(c, sql::CONVERT_ENTRY, params![mu, delta, id, seq])?;
                }
                Ok(())
            })
            .await
    }

    async fn create_token(
        &self,
        t: &TokenRow,
        only_if_none: bool,
        audit: &AuditDraft,
    ) -> Result<bool, StoreError> {
        let (t, audit) = (t.clone(), audit.clone());
        self.writer
            .write(move |c| {
                let q = if only_if_none {
                    sql::TOKEN_INSERT_FIRST
                } else {
                    sql::TOKEN_INSERT
                };
                let p = params![
                    t.id,
                    t.name,
                    t.hash,
                    t.role,
                    t.created_at,
                    t.expires_at,
                    t.revoked_at
                ];
                if exec(c, q, p)? != 1 {
                    return Ok(false);
                }
                w::insert_audit(c, &audit)?;
                Ok(true)
            })
            .await
    }

    async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRow>, StoreError> {
        let row = sqlx::query(sql::TOKEN_BY_HASH)
            .bind(hash)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(row.as_ref().map(token_from_row))
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        let rows = sqlx::query(sql::TOKEN_LIST)
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
        let (id, at, audit) = (id.to_owned(), at.to_owned(), audit.clone());
        self.writer
            .write(move |c| {
                if exec(c, sql::TOKEN_REVOKE, params![at, id])? != 1 {
                    return Ok(false);
                }
                w::insert_audit(c, &audit)?;
                Ok(true)
            })
            .await
    }

    async fn grant(&self, dataset_id: &str, principal: &str) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar(sql::GRANT_GET)
            .bind(dataset_id)
            .bind(principal)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)
    }

    async fn list_grants(&self, dataset_id: &str) -> Result<Vec<GrantRow>, StoreError> {
        let rows = sqlx::query(sql::GRANT_LIST)
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
        let (d, p, role) = (
            dataset_id.to_owned(),
            principal.to_owned(),
            role.map(str::to_owned),
        );
        let (at, audit) = (at.to_owned(), audit.clone());
        self.writer
            .write(move |c| {
                let changed = match &role {
                    Some(role) => exec(c, sql::GRANT_UPSERT, params![d, p, role, at])?,
                    None => exec(c, sql::GRANT_DELETE, params![d, p])?,
                };
                if changed == 0 {
                    return Ok(false);
                }
                w::insert_audit(c, &audit)?;
                Ok(true)
            })
            .await
    }

    async fn list_quotas(&self, dataset_id: &str) -> Result<Vec<QuotaRow>, StoreError> {
        let rows = sqlx::query(sql::QUOTA_LIST)
            .bind(dataset_id)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(quota_from_row).collect())
    }

    async fn audit(&self, draft: &AuditDraft) -> Result<(), StoreError> {
        let draft = draft.clone();
        self.writer.write(move |c| w::insert_audit(c, &draft)).await
    }

    async fn list_audit(&self, q: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError> {
        let rows = sqlx::query(sql::AUDIT_QUERY)
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
        let rows = sqlx::query(sql::AUDIT_CHAIN)
            .bind(chain)
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(audit_from_row).collect())
    }

    async fn datasets_without_chain(&self) -> Result<Vec<String>, StoreError> {
        sqlx::query_scalar(sql::DATASETS_WITHOUT_CHAIN)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)
    }

    async fn last_state_audit(&self, chain: &str) -> Result<Option<AuditRecord>, StoreError> {
        let row = sqlx::query(sql::AUDIT_LAST_STATE)
            .bind(chain)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(row.as_ref().map(audit_from_row))
    }

    async fn audit_heads(&self) -> Result<Vec<(String, i64, String)>, StoreError> {
        let rows = sqlx::query(sql::AUDIT_HEADS)
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
