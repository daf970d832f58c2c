//! The embedded store: one SQLite file, created with its schema on first start.
//!
//! Durability: WAL journal with `synchronous = FULL`, so a transaction that returned from COMMIT is
//! on disk and survives a crash of the process (or of the machine). Writers serialise on SQLite's
//! write lock; `busy_timeout` makes concurrent writers wait instead of failing.

use super::sql;
use super::{
    audit_hash, migration_sql, AuditDraft, AuditQuery, AuditRecord, Conversion, DatasetRow,
    DatasetUpdate, EntryRow, GrantRow, QuotaRow, Store, StoreError, TokenRow, AUDIT_GENESIS,
    MIGRATIONS,
};
use async_trait::async_trait;
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
    pool: SqlitePool,
    /// Appends go to the group-commit writer ([`writer`]).
    writer: tokio::sync::mpsc::Sender<AppendJob>,
}

fn unavailable(e: sqlx::Error) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// One append inside an open transaction (the dataset's compare-and-swap, the settled entry,
/// quotas, the audit record, the entry); the caller commits. Nothing is written when it fails
/// (the caller rolls back to its savepoint).
///
/// (Boxed with an explicit `Send` bound: the spawned writer needs it, and the compiler cannot
/// prove it through sqlx's executor lifetimes otherwise.)
fn append_in<'a>(
    tx: &'a mut sqlx::SqliteConnection,
    id: &'a str,
    expected_version: i64,
    entry: &'a EntryRow,
    update: &'a DatasetUpdate,
    state: Option<&'a [u8]>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<i64, StoreError>> + Send + 'a>> {
    Box::pin(async move {
        let res = sqlx::query(
            "UPDATE datasets SET version = version + 1, budget_mu = ?, budget_delta = ?, \
             charges = ?, mu_spent = ?, mu_spent_lower = ?, mu_sq_spent = ?, delta_spent = ?, \
             units = ?, exact_mu = ?, reserved = ?, state = COALESCE(?, state), updated_at = ? \
             WHERE id = ? AND version = ?",
        )
        .bind(update.budget_mu)
        .bind(update.budget_delta)
        .bind(update.charges)
        .bind(update.mu_spent)
        .bind(update.mu_spent)
        .bind(update.mu_sq_spent)
        .bind(update.delta_spent)
        .bind(update.units)
        .bind(update.exact_mu)
        .bind(update.reserved)
        .bind(state)
        .bind(&update.updated_at)
        .bind(id)
        .bind(expected_version)
        .execute(&mut *tx)
        .await
        .map_err(unavailable)?;
        if res.rows_affected() == 0 {
            let exists = sqlx::query("SELECT 1 FROM datasets WHERE id = ?")
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
        if let Some((charge_id, status)) = &update.settle {
            let res = sqlx::query(
                "UPDATE entries SET status = ? WHERE dataset_id = ? AND charge_id = ? \
                 AND kind = 'charge' AND status = 'reserved'",
            )
            .bind(status)
            .bind(id)
            .bind(charge_id)
            .execute(&mut *tx)
            .await
            .map_err(unavailable)?;
            if res.rows_affected() != 1 {
                return Err(StoreError::VersionConflict);
            }
        }
        for q in &update.quotas {
            upsert_quota(tx, q).await.map_err(unavailable)?;
        }
        if let Some(a) = &update.audit {
            insert_audit(tx, a).await.map_err(unavailable)?;
        }
        let seq = expected_version + 1;
        let ins = sqlx::query(
            "INSERT INTO entries (dataset_id, seq, kind, charge_id, event, label, metadata, \
             idempotency_key, request_hash, mu_after, unit_mu, unit_delta, budget_mu, budget_delta, \
             response, ref_id, run_id, chunk, status, principal, quota, created_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
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
    })
}

/// An append waiting for the writer.
struct AppendJob {
    id: String,
    expected_version: i64,
    entry: EntryRow,
    update: DatasetUpdate,
    state: Option<Vec<u8>>,
    reply: tokio::sync::oneshot::Sender<Result<i64, StoreError>>,
}

/// Most appends committed together.
const MAX_GROUP: usize = 128;

/// Group commit: the one task that commits appends. It takes every append waiting (up to
/// [`MAX_GROUP`]), runs each in a savepoint of one transaction (a failed one — a version conflict,
/// a duplicate key — is rolled back alone), commits once (one fsync with `synchronous = FULL`),
/// and only then answers each caller: nothing is acknowledged before it is durable, and when the
/// commit fails every caller of the group gets the failure (none was acknowledged). Concurrent
/// charges on different datasets thus share one durable commit; SQLite has one writer anyway.
async fn writer(pool: SqlitePool, mut jobs: tokio::sync::mpsc::Receiver<AppendJob>) {
    while let Some(first) = jobs.recv().await {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match jobs.try_recv() {
                Ok(j) => group.push(j),
                Err(_) => break,
            }
        }
        metrics::histogram!("privacy_ledger_group_commit_size").record(group.len() as f64);
        let outcomes = commit_group(&pool, &group).await;
        for (job, outcome) in group.into_iter().zip(outcomes) {
            let _ = job.reply.send(outcome);
        }
    }
}

/// Runs a group in one transaction; each job's outcome.
async fn commit_group(pool: &SqlitePool, group: &[AppendJob]) -> Vec<Result<i64, StoreError>> {
    let mut conn = match pool.acquire().await {
        Ok(c) => c,
        Err(e) => return vec![Err(unavailable(e)); group.len()],
    };
    match run_group(&mut conn, group).await {
        Ok(outcomes) => outcomes,
        Err(e) => {
            // Leave no transaction open on a pooled connection.
            let _ = exec(&mut conn, "ROLLBACK").await;
            vec![Err(e); group.len()]
        }
    }
}

/// BEGIN, each job in a savepoint, COMMIT: the jobs' outcomes, or the failure of the whole.
async fn run_group(
    conn: &mut sqlx::SqliteConnection,
    group: &[AppendJob],
) -> Result<Vec<Result<i64, StoreError>>, StoreError> {
    exec(conn, "BEGIN IMMEDIATE").await?;
    let mut outcomes = Vec::with_capacity(group.len());
    for j in group {
        exec(conn, "SAVEPOINT job").await?;
        let r = append_in(
            conn,
            &j.id,
            j.expected_version,
            &j.entry,
            &j.update,
            j.state.as_deref(),
        )
        .await;
        if r.is_err() {
            exec(conn, "ROLLBACK TO job").await?;
        }
        exec(conn, "RELEASE job").await?;
        outcomes.push(r);
    }
    exec(conn, "COMMIT").await?;
    Ok(outcomes)
}

/// Runs one statement without results (boxed, `Send`: see [`append_in`]).
fn exec<'a>(
    conn: &'a mut sqlx::SqliteConnection,
    sql: &'static str,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), StoreError>> + Send + 'a>> {
    Box::pin(async move {
        sqlx::query(sql)
            .execute(conn)
            .await
            .map(|_| ())
            .map_err(unavailable)
    })
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `url` (`sqlite://path` or `sqlite::memory:`) and
    /// applies the schema.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let opts = SqliteConnectOptions::from_str(url)
            .map_err(unavailable)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let memory = url.contains(":memory:");
        let pool = SqlitePoolOptions::new()
            // An in-memory database exists per connection: keep exactly one.
            .max_connections(if memory { 1 } else { 8 })
            .min_connections(if memory { 1 } else { 0 })
            .idle_timeout(if memory {
                None
            } else {
                Some(Duration::from_secs(600))
            })
            .max_lifetime(if memory {
                None
            } else {
                Some(Duration::from_secs(3600))
            })
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
        migrate(&pool).await?;
        let (writer_tx, jobs) = tokio::sync::mpsc::channel(4 * MAX_GROUP);
        tokio::spawn(writer(pool.clone(), jobs));
        Ok(SqliteStore {
            pool,
            writer: writer_tx,
        })
    }
}

/// Applies [`MIGRATIONS`] beyond the recorded schema version, each in one transaction (`BEGIN
/// IMMEDIATE`: another process opening the same file waits, then sees the new version).
async fn migrate(pool: &SqlitePool) -> Result<(), StoreError> {
    for (version, stmts) in MIGRATIONS {
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

pub(crate) fn dataset_from_row(r: &SqliteRow) -> DatasetRow {
    DatasetRow {
        id: r.get("id"),
        description: r.get("description"),
        neighboring_relation: r.get("neighboring_relation"),
        budget_mu: r.get("budget_mu"),
        budget_delta: r.get("budget_delta"),
        grid_step: r.get("grid_step"),
        version: r.get("version"),
        charges: r.get("charges"),
        mu_spent: r.get("mu_spent"),
        mu_sq_spent: r.get("mu_sq_spent"),
        delta_spent: r.get("delta_spent"),
        units: r.get("units"),
        exact_mu: r.get("exact_mu"),
        reserved: r.get("reserved"),
        create_hash: r.get("create_hash"),
        created_at: r.get("created_at"),
        updated_at: r.get("updated_at"),
    }
}

fn entry_from_row(r: &SqliteRow) -> EntryRow {
    EntryRow {
        seq: r.get("seq"),
        kind: r.get("kind"),
        charge_id: r.get("charge_id"),
        event: r.get("event"),
        label: r.get("label"),
        metadata: r.get("metadata"),
        idempotency_key: r.get("idempotency_key"),
        request_hash: r.get("request_hash"),
        mu_after: r.get("mu_after"),
        unit_mu: r.get("unit_mu"),
        unit_delta: r.get("unit_delta"),
        budget_mu: r.get("budget_mu"),
        budget_delta: r.get("budget_delta"),
        response: r.get("response"),
        ref_id: r.get("ref_id"),
        run_id: r.get("run_id"),
        chunk: r.get("chunk"),
        status: r.get("status"),
        principal: r.get("principal"),
        quota: r.get("quota"),
        created_at: r.get("created_at"),
    }
}

fn quota_from_row(r: &SqliteRow) -> QuotaRow {
    QuotaRow {
        dataset_id: r.get("dataset_id"),
        principal: r.get("principal"),
        mu: r.get("mu"),
        delta: r.get("delta"),
        mu_sq_spent: r.get("mu_sq_spent"),
        delta_spent: r.get("delta_spent"),
        units: r.get("units"),
        updated_at: r.get("updated_at"),
    }
}

fn audit_from_row(r: &SqliteRow) -> AuditRecord {
    AuditRecord {
        id: r.get("id"),
        seq: r.get("seq"),
        draft: AuditDraft {
            chain: r.get("chain"),
            at: r.get("at"),
            principal: r.get("principal"),
            credential: r.get("credential"),
            action: r.get("action"),
            dataset_id: r.get("dataset_id"),
            target: r.get("target"),
            request_id: r.get("request_id"),
            client: r.get("client"),
            before: r.get("before_value"),
            after: r.get("after_value"),
        },
        prev_hash: r.get("prev_hash"),
        hash: r.get("hash"),
    }
}

/// Appends `d` to its chain inside the caller's transaction (see [`super::audit_hash`]).
async fn insert_audit(
    conn: &mut sqlx::SqliteConnection,
    d: &AuditDraft,
) -> Result<(), sqlx::Error> {
    sqlx::query(sql::AUDIT_HEAD_INIT)
        .bind(&d.chain)
        .bind(AUDIT_GENESIS)
        .execute(&mut *conn)
        .await?;
    let head = sqlx::query(sql::AUDIT_HEAD_NEXT)
        .bind(&d.chain)
        .fetch_one(&mut *conn)
        .await?;
    let (seq, prev): (i64, String) = (head.get("seq"), head.get("hash"));
    let hash = audit_hash(&prev, seq, d);
    sqlx::query(sql::AUDIT_INSERT)
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
    sqlx::query(sql::AUDIT_HEAD_SET)
        .bind(&hash)
        .bind(&d.chain)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

async fn upsert_quota(conn: &mut sqlx::SqliteConnection, q: &QuotaRow) -> Result<(), sqlx::Error> {
    sqlx::query(sql::QUOTA_UPSERT)
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

const DATASET_COLUMNS: &str = "id, description, neighboring_relation, budget_mu, budget_delta, \
    grid_step, version, charges, mu_spent, mu_sq_spent, delta_spent, units, exact_mu, reserved, \
    create_hash, created_at, updated_at";
const ENTRY_COLUMNS: &str = "seq, kind, charge_id, event, label, metadata, idempotency_key, \
    request_hash, mu_after, unit_mu, unit_delta, budget_mu, budget_delta, response, ref_id, run_id, \
    chunk, status, principal, quota, created_at";

const TOKEN_COLUMNS: &str = "id, name, hash, role, created_at, expires_at, revoked_at";

fn token_from_row(r: &SqliteRow) -> TokenRow {
    TokenRow {
        id: r.get("id"),
        name: r.get("name"),
        hash: r.get("hash"),
        role: r.get("role"),
        created_at: r.get("created_at"),
        expires_at: r.get("expires_at"),
        revoked_at: r.get("revoked_at"),
    }
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

#[async_trait]
impl Store for SqliteStore {
    async fn create_dataset(
        &self,
        row: &DatasetRow,
        state: &[u8],
        audit: Option<&AuditDraft>,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        let res = sqlx::query(
            "INSERT INTO datasets (id, description, neighboring_relation, budget_mu, budget_delta, \
             grid_step, version, charges, mu_spent, mu_spent_lower, mu_sq_spent, delta_spent, units, \
             exact_mu, reserved, create_hash, state, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
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
        .bind(&row.created_at)
        .bind(&row.updated_at)
        .execute(&mut *tx)
        .await;
        match res {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => return Err(StoreError::AlreadyExists),
            Err(e) => return Err(unavailable(e)),
        }
        if let Some(a) = audit {
            insert_audit(&mut tx, a).await.map_err(unavailable)?;
        }
        tx.commit().await.map_err(unavailable)
    }

    async fn get_dataset(&self, id: &str) -> Result<Option<DatasetRow>, StoreError> {
        let q = format!("SELECT {DATASET_COLUMNS} FROM datasets WHERE id = ?");
        let row = sqlx::query(&q)
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(row.as_ref().map(dataset_from_row))
    }

    async fn get_state(&self, id: &str) -> Result<Option<(i64, Vec<u8>)>, StoreError> {
        let row = sqlx::query("SELECT version, state FROM datasets WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(row.map(|r| (r.get("version"), r.get("state"))))
    }

    async fn list_datasets(
        &self,
        after: Option<&str>,
        limit: i64,
        grantee: Option<&str>,
    ) -> Result<Vec<DatasetRow>, StoreError> {
        let q = format!(
            "SELECT {DATASET_COLUMNS} FROM datasets WHERE id > ? AND (? IS NULL OR id IN \
             (SELECT dataset_id FROM grants WHERE principal = ?)) ORDER BY id LIMIT ?"
        );
        let rows = sqlx::query(&q)
            .bind(after.unwrap_or(""))
            .bind(grantee)
            .bind(grantee)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(dataset_from_row).collect())
    }

    async fn find_entry_by_key(&self, id: &str, key: &str) -> Result<Option<EntryRow>, StoreError> {
        let q = format!(
            "SELECT {ENTRY_COLUMNS} FROM entries WHERE dataset_id = ? AND idempotency_key = ?"
        );
        let row = sqlx::query(&q)
            .bind(id)
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(row.as_ref().map(entry_from_row))
    }

    async fn find_charge(&self, id: &str, charge_id: &str) -> Result<Option<EntryRow>, StoreError> {
        let q = format!(
            "SELECT {ENTRY_COLUMNS} FROM entries WHERE dataset_id = ? AND charge_id = ? \
             AND kind = 'charge'"
        );
        let row = sqlx::query(&q)
            .bind(id)
            .bind(charge_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(row.as_ref().map(entry_from_row))
    }

    async fn list_run(&self, id: &str, run_id: &str) -> Result<Vec<EntryRow>, StoreError> {
        let q = format!(
            "SELECT {ENTRY_COLUMNS} FROM entries WHERE dataset_id = ? AND run_id = ? ORDER BY seq"
        );
        let rows = sqlx::query(&q)
            .bind(id)
            .bind(run_id)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(entry_from_row).collect())
    }

    async fn list_entries(
        &self,
        id: &str,
        kind: Option<&str>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<EntryRow>, StoreError> {
        let q = format!(
            "SELECT {ENTRY_COLUMNS} FROM entries WHERE dataset_id = ? AND seq > ? \
             AND (? IS NULL OR kind = ?) ORDER BY seq LIMIT ?"
        );
        let rows = sqlx::query(&q)
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
        state: Option<&[u8]>,
    ) -> Result<i64, StoreError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = AppendJob {
            id: id.to_owned(),
            expected_version,
            entry: entry.clone(),
            update: update.clone(),
            state: state.map(<[u8]>::to_vec),
            reply,
        };
        self.writer
            .send(job)
            .await
            .map_err(|_| StoreError::Unavailable("the SQLite writer has stopped".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("the SQLite writer has stopped".into()))?
    }

    async fn convert(
        &self,
        id: &str,
        expected_version: i64,
        c: &Conversion,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        let res = sqlx::query(
            "UPDATE datasets SET mu_spent = ?, mu_spent_lower = ?, mu_sq_spent = ?, delta_spent = ?, \
             units = ? WHERE id = ? AND version = ? AND mu_sq_spent IS NULL",
        )
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
            sqlx::query(
                "UPDATE entries SET unit_mu = ?, unit_delta = ? WHERE dataset_id = ? AND seq = ?",
            )
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
        let q = if only_if_none {
            "INSERT INTO tokens (id, name, hash, role, created_at, expires_at, revoked_at) \
             SELECT ?, ?, ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM tokens)"
        } else {
            "INSERT INTO tokens (id, name, hash, role, created_at, expires_at, revoked_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?)"
        };
        let res = sqlx::query(q)
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
        if res.rows_affected() != 1 {
            return Ok(false);
        }
        insert_audit(&mut tx, audit).await.map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
        Ok(true)
    }

    async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRow>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM tokens WHERE hash = ?"
        ))
        .bind(hash)
        .fetch_optional(&self.pool)
        .await
        .map_err(unavailable)?;
        Ok(row.as_ref().map(token_from_row))
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY created_at, id"
        ))
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
        let res =
            sqlx::query("UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL")
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
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        let res = match role {
            Some(role) => {
                sqlx::query(sql::GRANT_UPSERT)
                    .bind(dataset_id)
                    .bind(principal)
                    .bind(role)
                    .bind(at)
                    .execute(&mut *tx)
                    .await
            }
            None => {
                sqlx::query(sql::GRANT_DELETE)
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
        let rows = sqlx::query(sql::QUOTA_LIST)
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
