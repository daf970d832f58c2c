//! What both stores run, written once: every [`Store`] method, over an [`Engine`].
//!
//! Reads run on the engine's sqlx pool ([`Reads`]) and are decoded by [`Columns`] (the column
//! names and types are the same on both engines). Writes are algorithms over a connection inside
//! the engine's transaction ([`Tx`]): the append's compare-and-swap and everything written with
//! it, the audit chain, a block's creation, a conversion, tokens and grants. The statements are
//! those of [`super::sql`]. An engine supplies only what differs: its pool, how a write is run
//! and committed (PostgreSQL: a transaction of its own; SQLite: a savepoint in the group-commit
//! writer's transaction), how a statement is spelled and run, how its errors map to
//! [`StoreError`], and the first token's guard.

use super::sql::{self, args, Arg};
use super::{
    audit_hash, block_id_range, lock_order, sealed_create_audit, snapshot_of, AuditDraft,
    AuditQuery, AuditRecord, Conversion, DatasetRow, DatasetUpdate, EntryRow, GrantRow,
    LedgerAppend, NewBlock, PendingAppend, QuotaRow, SessionRow, SharedBody, Store, StoreError,
    TokenRow, UnitRow, AUDIT_GENESIS,
};
use async_trait::async_trait;
use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

/// A write's statements, run on the engine's connection inside its transaction.
pub type Work<'t, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 't>>;

/// A future of sqlx's (boxed, `Send`).
pub type Fetch<'e, T> = Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 'e>>;

/// A connection inside a write's transaction: the statements of [`super::sql`] run on it, their
/// errors mapped as the engine maps them.
pub trait Tx: Send {
    /// Runs `q`; the number of rows it changed.
    fn exec(
        &mut self,
        q: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
    /// Runs the insert `q`; a unique or primary-key violation is `taken`.
    fn insert(
        &mut self,
        q: &'static str,
        args: &[Arg<'_>],
        taken: StoreError,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Whether `q` returns a row.
    fn exists(
        &mut self,
        q: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// The integer in the first column of the one row `q` returns.
    fn int(
        &mut self,
        q: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<i64, StoreError>> + Send;
    /// The integer and the text in the first two columns of the one row `q` returns.
    fn int_text(
        &mut self,
        q: &'static str,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<(i64, String), StoreError>> + Send;
    /// The statement that inserts the first token ([`Store::create_token`] with `only_if_none`),
    /// or `None` when a token exists: each engine keeps replicas or writers from both inserting
    /// one its own way.
    fn first_token(
        &mut self,
    ) -> impl Future<Output = Result<Option<&'static str>, StoreError>> + Send;
}

/// A sqlx database whose pool serves the stores' reads (sqlx's `Postgres` and `Sqlite`).
pub trait Reads: sqlx::Database<Row: Columns> {
    /// `q` with `args` bound.
    fn bound<'q>(q: &'q str, args: &[Arg<'q>])
        -> sqlx::query::Query<'q, Self, Self::Arguments<'q>>;
    fn all<'e>(
        pool: &'e sqlx::Pool<Self>,
        q: &'e str,
        args: &[Arg<'e>],
    ) -> Fetch<'e, Vec<Self::Row>>;
    fn optional<'e>(
        pool: &'e sqlx::Pool<Self>,
        q: &'e str,
        args: &[Arg<'e>],
    ) -> Fetch<'e, Option<Self::Row>>;
}

impl<DB> Reads for DB
where
    DB: sqlx::Database<Row: Columns>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> Option<&'q str>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> &'q [u8]: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<i64>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<f64>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    fn bound<'q>(q: &'q str, args: &[Arg<'q>]) -> sqlx::query::Query<'q, DB, DB::Arguments<'q>> {
        args.iter().fold(sqlx::query(q), |q, a| match *a {
            Arg::Text(v) => q.bind(v),
            Arg::Int(v) => q.bind(v),
            Arg::Real(v) => q.bind(v),
            Arg::Bytes(v) => q.bind(v),
        })
    }

    fn all<'e>(pool: &'e sqlx::Pool<DB>, q: &'e str, args: &[Arg<'e>]) -> Fetch<'e, Vec<DB::Row>> {
        sqlx::Executor::fetch_all(pool, Self::bound(q, args))
    }

    fn optional<'e>(
        pool: &'e sqlx::Pool<DB>,
        q: &'e str,
        args: &[Arg<'e>],
    ) -> Fetch<'e, Option<DB::Row>> {
        sqlx::Executor::fetch_optional(pool, Self::bound(q, args))
    }
}

/// A row of either engine as the store's rows (a value that cannot be decoded is
/// [`StoreError::Corrupt`]).
pub trait Columns {
    fn dataset(&self) -> Result<DatasetRow, StoreError>;
    fn entry(&self) -> Result<EntryRow, StoreError>;
    fn unit(&self) -> Result<UnitRow, StoreError>;
    fn quota(&self) -> Result<QuotaRow, StoreError>;
    fn audit(&self) -> Result<AuditRecord, StoreError>;
    fn token(&self) -> Result<TokenRow, StoreError>;
    fn session(&self) -> Result<SessionRow, StoreError>;
    fn grant(&self) -> Result<GrantRow, StoreError>;
    /// A chain's head ([`sql::AUDIT_HEADS`]).
    fn head(&self) -> Result<(String, i64, String), StoreError>;
    fn text(&self, c: &str) -> Result<String, StoreError>;
    fn opt_text(&self, c: &str) -> Result<Option<String>, StoreError>;
    fn int(&self, c: &str) -> Result<i64, StoreError>;
    fn float(&self, c: &str) -> Result<f64, StoreError>;
    fn opt_int(&self, c: &str) -> Result<Option<i64>, StoreError>;
    fn bytes(&self, c: &str) -> Result<Vec<u8>, StoreError>;
}

/// Column `c` of `r`.
fn get<'r, R, T>(r: &'r R, c: &str) -> Result<T, StoreError>
where
    R: sqlx::Row,
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    T: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    r.try_get(c)
        .map_err(|e| StoreError::Corrupt(format!("column {c}: {e}")))
}

impl<R> Columns for R
where
    R: sqlx::Row,
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> f64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Vec<u8>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    fn dataset(&self) -> Result<DatasetRow, StoreError> {
        Ok(DatasetRow {
            id: get(self, "id")?,
            description: get(self, "description")?,
            neighboring_relation: get(self, "neighboring_relation")?,
            budget_mu: get(self, "budget_mu")?,
            budget_delta: get(self, "budget_delta")?,
            grid_step: get(self, "grid_step")?,
            version: get(self, "version")?,
            charges: get(self, "charges")?,
            mu_spent: get(self, "mu_spent")?,
            mu_sq_spent: get(self, "mu_sq_spent")?,
            delta_spent: get(self, "delta_spent")?,
            units: get(self, "units")?,
            exact_mu: get(self, "exact_mu")?,
            reserved: get(self, "reserved")?,
            create_hash: get(self, "create_hash")?,
            mu_max: match get(self, "mu_max")? {
                Some(v) => v,
                None => get(self, "budget_mu")?,
            },
            delta_max: match get(self, "delta_max")? {
                Some(v) => v,
                None => get(self, "budget_delta")?,
            },
            cap_mu: get(self, "cap_mu")?,
            cap_delta: get(self, "cap_delta")?,
            statement_unknown: get(self, "statement_unknown")?,
            states_from: get(self, "states_from")?,
            state_seq: get(self, "state_seq")?,
            budget_target: get(self, "budget_target")?,
            population: get(self, "population")?,
            created_at: get(self, "created_at")?,
            updated_at: get(self, "updated_at")?,
        })
    }

    fn entry(&self) -> Result<EntryRow, StoreError> {
        Ok(EntryRow {
            seq: get(self, "seq")?,
            kind: get(self, "kind")?,
            charge_id: get(self, "charge_id")?,
            event: get(self, "event")?,
            label: get(self, "label")?,
            metadata: get(self, "metadata")?,
            idempotency_key: get(self, "idempotency_key")?,
            request_hash: get(self, "request_hash")?,
            mu_after: get(self, "mu_after")?,
            unit_mu: get(self, "unit_mu")?,
            unit_delta: get(self, "unit_delta")?,
            budget_mu: get(self, "budget_mu")?,
            budget_delta: get(self, "budget_delta")?,
            response: get(self, "response")?,
            ref_id: get(self, "ref_id")?,
            run_id: get(self, "run_id")?,
            chunk: get(self, "chunk")?,
            status: get(self, "status")?,
            principal: get(self, "principal")?,
            quota: get(self, "quota")?,
            shared: None,
            created_at: get(self, "created_at")?,
        })
    }

    fn unit(&self) -> Result<UnitRow, StoreError> {
        Ok(UnitRow {
            seq: get(self, "seq")?,
            charge_id: get(self, "charge_id")?,
            label: get(self, "label")?,
            mu_after: get(self, "mu_after")?,
            unit_mu: get(self, "unit_mu")?,
            unit_delta: get(self, "unit_delta")?,
            run_id: get(self, "run_id")?,
            chunk: get(self, "chunk")?,
            status: get(self, "status")?,
            principal: get(self, "principal")?,
            created_at: get(self, "created_at")?,
        })
    }

    fn quota(&self) -> Result<QuotaRow, StoreError> {
        Ok(QuotaRow {
            dataset_id: get(self, "dataset_id")?,
            principal: get(self, "principal")?,
            mu: get(self, "mu")?,
            delta: get(self, "delta")?,
            mu_sq_spent: get(self, "mu_sq_spent")?,
            delta_spent: get(self, "delta_spent")?,
            units: get(self, "units")?,
            updated_at: get(self, "updated_at")?,
        })
    }

    fn audit(&self) -> Result<AuditRecord, StoreError> {
        Ok(AuditRecord {
            id: get(self, "id")?,
            seq: get(self, "seq")?,
            draft: AuditDraft {
                chain: get(self, "chain")?,
                at: get(self, "at")?,
                principal: get(self, "principal")?,
                credential: get(self, "credential")?,
                action: get(self, "action")?,
                dataset_id: get(self, "dataset_id")?,
                target: get(self, "target")?,
                request_id: get(self, "request_id")?,
                client: get(self, "client")?,
                before: get(self, "before_value")?,
                after: get(self, "after_value")?,
            },
            prev_hash: get(self, "prev_hash")?,
            hash: get(self, "hash")?,
        })
    }

    fn token(&self) -> Result<TokenRow, StoreError> {
        Ok(TokenRow {
            id: get(self, "id")?,
            name: get(self, "name")?,
            hash: get(self, "hash")?,
            role: get(self, "role")?,
            created_at: get(self, "created_at")?,
            expires_at: get(self, "expires_at")?,
            revoked_at: get(self, "revoked_at")?,
        })
    }

    fn session(&self) -> Result<SessionRow, StoreError> {
        Ok(SessionRow {
            hash: get(self, "hash")?,
            token_id: get(self, "token_id")?,
            principal: get(self, "principal")?,
            role: get(self, "role")?,
            created_at: get(self, "created_at")?,
            expires_at: get(self, "expires_at")?,
        })
    }

    fn grant(&self) -> Result<GrantRow, StoreError> {
        Ok(GrantRow {
            dataset_id: get(self, "dataset_id")?,
            principal: get(self, "principal")?,
            role: get(self, "role")?,
            created_at: get(self, "created_at")?,
        })
    }

    fn head(&self) -> Result<(String, i64, String), StoreError> {
        Ok((get(self, "chain")?, get(self, "seq")?, get(self, "hash")?))
    }

    fn text(&self, c: &str) -> Result<String, StoreError> {
        get(self, c)
    }

    fn opt_text(&self, c: &str) -> Result<Option<String>, StoreError> {
        get(self, c)
    }

    fn int(&self, c: &str) -> Result<i64, StoreError> {
        get(self, c)
    }

    fn float(&self, c: &str) -> Result<f64, StoreError> {
        get(self, c)
    }

    fn opt_int(&self, c: &str) -> Result<Option<i64>, StoreError> {
        get(self, c)
    }

    fn bytes(&self, c: &str) -> Result<Vec<u8>, StoreError> {
        get(self, c)
    }
}

/// A write's work as [`Engine::write`] runs it, on the engine's connection `C` ([`work!`] makes
/// one).
pub trait Job<C, T>: for<'t> FnOnce(&'t mut C) -> Work<'t, T> + Send + 'static {}

impl<C, T, W> Job<C, T> for W where W: for<'t> FnOnce(&'t mut C) -> Work<'t, T> + Send + 'static {}

/// What an engine is: its reads' pool, how its writes run, how it spells a statement.
pub trait Engine: Send + Sync + 'static {
    type Db: Reads;
    type Conn: Tx;
    /// Longest any statement or transaction may take before it counts as the store failing
    /// (`None`: no bound of the engine's own).
    const TIMEOUT: Option<std::time::Duration> = None;
    /// The pool reads run on.
    fn pool(&self) -> &sqlx::Pool<Self::Db>;
    /// `q` as this engine runs it (as written, unless the engine spells it otherwise).
    fn spell(q: &'static str) -> Cow<'static, str> {
        Cow::Borrowed(q)
    }
    /// A read's failure (the store is unavailable, unless the engine tells the cause).
    fn error(e: sqlx::Error) -> StoreError {
        StoreError::Unavailable(e.to_string())
    }
    /// Runs `work` in a transaction and commits it; its result once durable. Nothing it wrote
    /// stays when it fails.
    fn write<T: Send + 'static>(
        &self,
        work: impl Job<Self::Conn, T>,
    ) -> impl Future<Output = Result<T, StoreError>> + Send;
    /// [`Engine::write`] for `work` that runs one statement (no transaction of its own is
    /// needed where the engine commits each statement by itself).
    fn write_one<T: Send + 'static>(
        &self,
        work: impl Job<Self::Conn, T>,
    ) -> impl Future<Output = Result<T, StoreError>> + Send {
        self.write(work)
    }
    /// Gives audit records written since the last call their position, where the engine does
    /// not at commit (schema 12: PostgreSQL; SQLite's trigger places each record as it is
    /// written). Readers of [`Store::list_audit`] call it first.
    fn place_audit(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        async { Ok(()) }
    }
    /// [`Store::append_queued`]: the append `work()` gives queued behind every write queued
    /// before it, or `None` when the engine does not queue (`work` is then not called).
    fn queue<W: Job<Self::Conn, i64>>(&self, _work: impl FnOnce() -> W) -> Option<PendingAppend> {
        None
    }
}

/// `f`, failed as [`StoreError::Unavailable`] past the engine's [`Engine::TIMEOUT`]: a store
/// that accepts connections but does not answer (a hung server, a full disk) fails a request
/// as one that refuses them does, instead of holding it until the request timeout.
pub async fn timed<E: Engine, T>(
    f: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match E::TIMEOUT {
        None => f.await,
        Some(d) => tokio::time::timeout(d, f).await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(format!(
                "the store did not answer within {} ms",
                d.as_millis()
            )))
        }),
    }
}

/// The rows `q` returns, decoded by `decode`.
async fn all<E: Engine, T>(
    e: &E,
    q: &'static str,
    args: &[Arg<'_>],
    decode: impl Fn(&<E::Db as sqlx::Database>::Row) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let q = E::spell(q);
    let rows = timed::<E, _>(async { E::Db::all(e.pool(), &q, args).await.map_err(E::error) });
    rows.await?.iter().map(decode).collect()
}

/// The row `q` returns, if any, decoded by `decode`.
async fn optional<E: Engine, T>(
    e: &E,
    q: &'static str,
    args: &[Arg<'_>],
    decode: impl Fn(&<E::Db as sqlx::Database>::Row) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError> {
    let q = E::spell(q);
    let row = timed::<E, _>(async { E::Db::optional(e.pool(), &q, args).await.map_err(E::error) });
    row.await?.as_ref().map(decode).transpose()
}

/// A dataset row's values for [`sql::DATASET_INSERT`] and its if-absent form.
fn dataset_args<'a>(r: &'a DatasetRow, state: &'a [u8]) -> [Arg<'a>; 27] {
    [
        Arg::from(&r.id),
        Arg::from(&r.description),
        Arg::from(&r.neighboring_relation),
        Arg::from(r.budget_mu),
        Arg::from(r.budget_delta),
        Arg::from(r.grid_step),
        Arg::from(r.version),
        Arg::from(r.charges),
        Arg::from(r.mu_spent),
        Arg::from(r.mu_spent),
        Arg::from(r.mu_sq_spent),
        Arg::from(r.delta_spent),
        Arg::from(r.units),
        Arg::from(r.exact_mu),
        Arg::from(r.reserved),
        Arg::from(&r.create_hash),
        Arg::from(state),
        Arg::from(r.mu_max),
        Arg::from(r.delta_max),
        Arg::from(r.cap_mu),
        Arg::from(r.cap_delta),
        Arg::from(&r.statement_unknown),
        Arg::from(r.states_from),
        Arg::from(&r.created_at),
        Arg::from(&r.updated_at),
        Arg::from(&r.budget_target),
        Arg::from(&r.population),
    ]
}

/// The arguments of [`sql::AUDIT_QUERY`] and [`sql::AUDIT_QUERY_NEWEST`]: the position cursor,
/// then `q`'s filters (each twice: `? IS NULL OR …`) and its limit.
fn audit_query_args(q: &AuditQuery, cursor: i64) -> [Arg<'_>; 13] {
    [
        Arg::from(cursor),
        Arg::from(&q.dataset_id),
        Arg::from(&q.dataset_id),
        Arg::from(&q.principal),
        Arg::from(&q.principal),
        Arg::from(&q.since),
        Arg::from(&q.since),
        Arg::from(&q.until),
        Arg::from(&q.until),
        Arg::from(&q.action_prefix),
        Arg::from(&q.action_prefix),
        Arg::from(&q.action_prefix),
        Arg::from(q.limit),
    ]
}

/// Inserts a new ledger's row: [`StoreError::AlreadyExists`] if its id is taken.
async fn insert_new<C: Tx>(c: &mut C, row: &DatasetRow, state: &[u8]) -> Result<(), StoreError> {
    let args = dataset_args(row, state);
    c.insert(sql::DATASET_INSERT, &args, StoreError::AlreadyExists)
        .await
}

/// [`super::LedgerAppend::hold`]: the row stays at `version` (on PostgreSQL, locked until the
/// commit).
async fn hold<C: Tx>(c: &mut C, id: &str, version: i64) -> Result<(), StoreError> {
    if c.exec(sql::DATASET_HOLD, args!(id, version)).await? == 0 {
        return Err(StoreError::VersionConflict);
    }
    Ok(())
}

async fn upsert_quota<C: Tx>(c: &mut C, q: &QuotaRow) -> Result<(), StoreError> {
    let args = args!(
        &q.dataset_id,
        &q.principal,
        q.mu,
        q.delta,
        q.mu_sq_spent,
        q.delta_spent,
        q.units,
        &q.updated_at
    );
    c.exec(sql::QUOTA_UPSERT, args).await.map(drop)
}

/// Appends `d` to its chain inside the caller's transaction (see [`super::audit_hash`]).
async fn insert_audit<C: Tx>(c: &mut C, d: &AuditDraft) -> Result<(), StoreError> {
    c.exec(sql::AUDIT_HEAD_INIT, args!(&d.chain, AUDIT_GENESIS))
        .await?;
    let (seq, prev) = c.int_text(sql::AUDIT_HEAD_NEXT, args!(&d.chain)).await?;
    let hash = audit_hash(&prev, seq, d);
    let args = args!(
        &d.chain,
        seq,
        &d.at,
        &d.principal,
        &d.credential,
        &d.action,
        &d.dataset_id,
        &d.target,
        &d.request_id,
        &d.client,
        &d.before,
        &d.after,
        &prev,
        &hash
    );
    c.exec(sql::AUDIT_INSERT, args).await?;
    let head = if sql::states_ledger(d.after.as_deref()) {
        sql::AUDIT_HEAD_SET_STATE
    } else {
        sql::AUDIT_HEAD_SET
    };
    c.exec(head, args!(&hash, &d.chain)).await?;
    Ok(())
}

/// One append inside the caller's transaction (see [`Store::append`]): the dataset's
/// compare-and-swap, the settled entry, quotas, the audit record, the entry.
async fn append_in<C: Tx>(
    c: &mut C,
    id: &str,
    expected_version: i64,
    e: &EntryRow,
    u: &DatasetUpdate,
) -> Result<i64, StoreError> {
    let swap = args!(
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
        &u.updated_at,
        id,
        expected_version
    );
    if c.exec(sql::APPEND_UPDATE, swap).await? == 0 {
        return Err(if c.exists(sql::DATASET_EXISTS, args!(id)).await? {
            StoreError::VersionConflict
        } else {
            StoreError::NotFound
        });
    }
    if let Some(t) = &u.budget_target {
        c.exec(sql::BUDGET_TARGET_SET, args!(t, id)).await?;
    }
    if let Some(st) = &u.settle {
        let settle = args!(&st.to, id, &st.charge_id, &st.from);
        if c.exec(sql::SETTLE, settle).await? != 1 {
            return Err(StoreError::VersionConflict);
        }
    }
    for q in &u.quotas {
        upsert_quota(c, q).await?;
    }
    if let Some(a) = u.sealed_audit(id, expected_version) {
        insert_audit(c, &a).await?;
    }
    let seq = expected_version + 1;
    if let Some(b) = &e.shared {
        c.exec(sql::SHARED_BODY_INSERT, args!(&b.digest, &b.body))
            .await?;
    }
    let entry = args!(
        id,
        seq,
        &e.kind,
        &e.charge_id,
        &e.event,
        &e.label,
        &e.metadata,
        &e.idempotency_key,
        &e.request_hash,
        e.mu_after,
        e.unit_mu,
        e.unit_delta,
        e.budget_mu,
        e.budget_delta,
        &e.response,
        &e.ref_id,
        &e.run_id,
        e.chunk,
        &e.status,
        &e.principal,
        &e.quota,
        &e.created_at
    );
    c.insert(sql::ENTRY_INSERT, entry, StoreError::DuplicateKey)
        .await?;
    Ok(seq)
}

/// [`Store::append_many`] inside the caller's transaction, which the first failure rolls back
/// as a whole.
async fn append_many_in<C: Tx>(
    c: &mut C,
    items: &[LedgerAppend],
    shared: Option<&SharedBody>,
) -> Result<(), StoreError> {
    debug_assert!(items.windows(2).all(|w| w[0].id < w[1].id));
    // The shared body's digest is the response's, unique to this charge: nobody else inserts
    // it, so taking its index entry first cannot make anyone wait.
    if let Some(b) = shared {
        c.exec(sql::SHARED_BODY_INSERT, args!(&b.digest, &b.body))
            .await?;
    }
    // In increasing id order: on PostgreSQL every row lock (and a new block's index entry), the
    // rows items hold among them, is taken in the one global order, so two multi-ledger appends
    // never wait on each other in a cycle (SQLite's one writer keeps the same order).
    for op in lock_order(items) {
        let it = match op {
            Ok(i) => &items[i],
            Err((id, version)) => {
                hold(c, &id, version).await?;
                continue;
            }
        };
        if let Some((row, state)) = &it.create {
            let args = dataset_args(row, state);
            c.exec(sql::DATASET_INSERT_IF_ABSENT, &args).await?;
        }
        append_in(c, &it.id, it.expected_version, &it.entry, &it.update).await?;
        if let Some(n) = it.blocks {
            let (lo, hi) = block_id_range(&it.id);
            if c.int(sql::BLOCK_COUNT, args!(&lo, &hi)).await? != n {
                return Err(StoreError::VersionConflict);
            }
        }
    }
    Ok(())
}

/// A write's statements as [`Engine::write`] takes them: `work!(c => { … })` runs the block with
/// `c` the engine's connection, the values it uses moved in (SQLite's writer runs it on its own
/// thread).
macro_rules! work {
    ($c:ident => $body:block) => {
        as_work::<E::Conn, _, _>(move |$c| Box::pin(async move $body))
    };
}

/// `w`, its signature fixed for the compiler.
fn as_work<C, T, W>(w: W) -> W
where
    W: for<'t> FnOnce(&'t mut C) -> Work<'t, T>,
{
    w
}

#[async_trait]
impl<E: Engine> Store for E {
    async fn create_dataset(
        &self,
        row: &DatasetRow,
        state: &[u8],
        partitioning: Option<&str>,
        audit: Option<&AuditDraft>,
    ) -> Result<(), StoreError> {
        let (row, state) = (row.clone(), state.to_vec());
        let audit = sealed_create_audit(&row, audit, &[]);
        let partitioning = partitioning.map(str::to_owned);
        self.write(work!(c => {
            insert_new(c, &row, &state).await?;
            if let Some(p) = &partitioning {
                c.exec(sql::PARTITIONING_SET, args!(p, &row.id)).await?;
            }
            if let Some(a) = &audit {
                insert_audit(c, a).await?;
            }
            Ok(())
        }))
        .await
    }

    async fn create_block(&self, b: &NewBlock<'_>) -> Result<(), StoreError> {
        let (row, state, quotas) = (b.row.clone(), b.state.to_vec(), b.quotas.to_vec());
        let (parent, version) = (b.parent.0.to_owned(), b.parent.1);
        let audit = b.audit.cloned();
        let record = sealed_create_audit(b.row, b.record, b.quotas);
        self.write(work!(c => {
            // The parent's row first: its id precedes the block's, as in `append_many`.
            hold(c, &parent, version).await?;
            insert_new(c, &row, &state).await?;
            for q in &quotas {
                upsert_quota(c, q).await?;
            }
            // The dataset's chain, then the block's (its head's id follows).
            for a in audit.iter().chain(record.iter()) {
                insert_audit(c, a).await?;
            }
            Ok(())
        }))
        .await
    }

    async fn partitioning(&self, id: &str) -> Result<Option<Option<String>>, StoreError> {
        optional(self, sql::PARTITIONING_GET, args!(id), |r| {
            r.opt_text("partitioning")
        })
        .await
    }

    async fn list_blocks(
        &self,
        parent: &str,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<DatasetRow>, StoreError> {
        let (lo, hi) = block_id_range(parent);
        let args = args!(&lo, &hi, after.unwrap_or(""), limit);
        all(self, sql::BLOCK_LIST, args, Columns::dataset).await
    }

    async fn get_dataset(&self, id: &str) -> Result<Option<DatasetRow>, StoreError> {
        optional(self, sql::DATASET_GET, args!(id), Columns::dataset).await
    }

    async fn get_snapshot(&self, id: &str) -> Result<Option<(i64, Vec<u8>)>, StoreError> {
        // Its bytes in `state` (no token), or the token and count of its parts.
        let at = |r: &<E::Db as sqlx::Database>::Row| {
            let seq = r.int("state_seq")?;
            Ok(match r.opt_text("snapshot")? {
                None => (seq, Err(r.bytes("state")?)),
                Some(token) => (seq, Ok((token, r.opt_int("snapshot_parts")?))),
            })
        };
        let Some((seq, stored)) = optional(self, sql::SNAPSHOT_GET, args!(id), at).await? else {
            return Ok(None);
        };
        let (token, parts) = match stored {
            Err(state) => return Ok(Some((seq, state))),
            Ok(parts) => parts,
        };
        let args = args!(id, &token);
        let bytes = all(self, sql::SNAPSHOT_PARTS, args, |r| r.bytes("bytes")).await?;
        snapshot_of(seq, bytes, parts)
    }

    async fn get_certificates(&self, key: &str) -> Result<Option<String>, StoreError> {
        optional(self, sql::CERTIFICATES_GET, args!(key), |r| r.text("value")).await
    }

    async fn put_certificates(&self, key: &str, value: &str) -> Result<(), StoreError> {
        let (key, value) = (key.to_owned(), value.to_owned());
        self.write_one(work!(c => {
            c.exec(sql::CERTIFICATES_PUT, args!(&key, &value)).await.map(drop)
        }))
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
        self.write_one(work!(c => {
            let args = args!(&id, &token, seq, part, &bytes);
            c.exec(sql::SNAPSHOT_PART_INSERT, args).await.map(drop)
        }))
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
        self.write_one(work!(c => {
            let empty: &[u8] = &[];
            let args = args!(seq, &token, parts, empty, exact_mu, &id, seq);
            Ok(c.exec(sql::SNAPSHOT_SET, args).await? == 1)
        }))
        .await
    }

    async fn drop_snapshot_parts(
        &self,
        id: &str,
        seq: i64,
        token: Option<&str>,
    ) -> Result<(), StoreError> {
        let (id, token) = (id.to_owned(), token.map(str::to_owned));
        self.write_one(work!(c => {
            match &token {
                None => c.exec(sql::SNAPSHOT_DROP_BEFORE, args!(&id, seq)).await?,
                Some(t) => c.exec(sql::SNAPSHOT_DROP_TOKEN, args!(&id, t)).await?,
            };
            Ok(())
        }))
        .await
    }

    async fn list_datasets(
        &self,
        after: Option<&str>,
        limit: i64,
        grantee: Option<&str>,
    ) -> Result<Vec<DatasetRow>, StoreError> {
        let args = args!(after.unwrap_or(""), grantee, grantee, limit);
        all(self, sql::DATASET_LIST, args, Columns::dataset).await
    }

    async fn find_entry_by_key(&self, id: &str, key: &str) -> Result<Option<EntryRow>, StoreError> {
        optional(self, sql::ENTRY_BY_KEY, args!(id, key), Columns::entry).await
    }

    async fn has_legacy_keys(&self, id: &str) -> Result<bool, StoreError> {
        let any = optional(self, sql::LEGACY_KEY_ANY, args!(id), |_| Ok(())).await?;
        Ok(any.is_some())
    }

    async fn shared_body(&self, digest: &str) -> Result<Option<String>, StoreError> {
        optional(self, sql::SHARED_BODY_GET, args!(digest), |r| {
            r.text("body")
        })
        .await
    }

    async fn find_charge(&self, id: &str, charge_id: &str) -> Result<Option<EntryRow>, StoreError> {
        let args = args!(id, charge_id);
        optional(self, sql::ENTRY_BY_CHARGE, args, Columns::entry).await
    }

    async fn list_run(
        &self,
        id: &str,
        run_id: &str,
        after: i64,
    ) -> Result<Vec<EntryRow>, StoreError> {
        all(
            self,
            sql::RUN_LIST,
            args!(id, run_id, after),
            Columns::entry,
        )
        .await
    }

    async fn list_units(
        &self,
        id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<UnitRow>, StoreError> {
        all(self, sql::UNIT_LIST, args!(id, after, limit), Columns::unit).await
    }

    async fn list_entries(
        &self,
        id: &str,
        kind: Option<&str>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<EntryRow>, StoreError> {
        let args = args!(id, after, kind, kind, limit);
        all(self, sql::ENTRY_LIST, args, Columns::entry).await
    }

    async fn append(
        &self,
        id: &str,
        expected_version: i64,
        entry: &EntryRow,
        update: &DatasetUpdate,
    ) -> Result<i64, StoreError> {
        let (id, entry, update) = (id.to_owned(), entry.clone(), update.clone());
        self.write(work!(c => {
            append_in(c, &id, expected_version, &entry, &update).await
        }))
        .await
    }

    fn append_queued(
        &self,
        id: &str,
        expected_version: i64,
        entry: &EntryRow,
        update: &DatasetUpdate,
    ) -> Option<PendingAppend> {
        self.queue(|| {
            let (id, entry, update) = (id.to_owned(), entry.clone(), update.clone());
            work!(c => { append_in(c, &id, expected_version, &entry, &update).await })
        })
    }

    async fn append_many(
        &self,
        items: &[LedgerAppend],
        shared: Option<&SharedBody>,
    ) -> Result<(), StoreError> {
        let (items, shared) = (items.to_vec(), shared.cloned());
        self.write(work!(c => { append_many_in(c, &items, shared.as_ref()).await }))
            .await
    }

    async fn convert(
        &self,
        id: &str,
        expected_version: i64,
        conversion: &Conversion,
    ) -> Result<(), StoreError> {
        let (id, v) = (id.to_owned(), conversion.clone());
        self.write(work!(c => {
            let args = args!(
                v.mu_spent,
                v.mu_spent,
                v.mu_sq_spent,
                v.delta_spent,
                v.units,
                &id,
                expected_version
            );
            if c.exec(sql::CONVERT_DATASET, args).await? == 0 {
                return Err(StoreError::VersionConflict);
            }
            for (seq, mu, delta) in &v.certificates {
                c.exec(sql::CONVERT_ENTRY, args!(mu, delta, &id, seq)).await?;
            }
            Ok(())
        }))
        .await
    }

    async fn create_token(
        &self,
        t: &TokenRow,
        only_if_none: bool,
        audit: &AuditDraft,
    ) -> Result<bool, StoreError> {
        let (t, audit) = (t.clone(), audit.clone());
        self.write(work!(c => {
            let q = match only_if_none {
                false => sql::TOKEN_INSERT,
                true => match c.first_token().await? {
                    Some(q) => q,
                    None => return Ok(false),
                },
            };
            let args = args!(
                &t.id,
                &t.name,
                &t.hash,
                &t.role,
                &t.created_at,
                &t.expires_at,
                &t.revoked_at
            );
            if c.exec(q, args).await? != 1 {
                return Ok(false);
            }
            insert_audit(c, &audit).await?;
            Ok(true)
        }))
        .await
    }

    async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRow>, StoreError> {
        optional(self, sql::TOKEN_BY_HASH, args!(hash), Columns::token).await
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        all(self, sql::TOKEN_LIST, &[], Columns::token).await
    }

    async fn revoke_token(
        &self,
        id: &str,
        at: &str,
        audit: &AuditDraft,
    ) -> Result<bool, StoreError> {
        let (id, at, audit) = (id.to_owned(), at.to_owned(), audit.clone());
        self.write(work!(c => {
            if c.exec(sql::TOKEN_REVOKE, args!(&at, &id)).await? != 1 {
                return Ok(false);
            }
            c.exec(sql::SESSION_DELETE_TOKEN, args!(&id)).await?;
            insert_audit(c, &audit).await?;
            Ok(true)
        }))
        .await
    }

    async fn open_session(
        &self,
        s: &SessionRow,
        keep: i64,
        audit: &AuditDraft,
    ) -> Result<(), StoreError> {
        let (s, audit) = (s.clone(), audit.clone());
        self.write(work!(c => {
            c.exec(sql::SESSION_PURGE, args!(&s.created_at)).await?;
            let row = args!(&s.hash, &s.token_id, &s.principal, &s.role, &s.created_at, &s.expires_at);
            c.exec(sql::SESSION_INSERT, row).await?;
            c.exec(sql::SESSION_TRIM, args!(&s.token_id, &s.token_id, keep)).await?;
            insert_audit(c, &audit).await?;
            Ok(())
        }))
        .await
    }

    async fn session(
        &self,
        hash: &str,
    ) -> Result<Option<(SessionRow, Option<TokenRow>)>, StoreError> {
        let Some(s) = optional(self, sql::SESSION_GET, args!(hash), Columns::session).await? else {
            return Ok(None);
        };
        let token = optional(self, sql::TOKEN_BY_ID, args!(&s.token_id), Columns::token).await?;
        Ok(Some((s, token)))
    }

    async fn close_session(&self, hash: &str, audit: &AuditDraft) -> Result<bool, StoreError> {
        let (hash, audit) = (hash.to_owned(), audit.clone());
        self.write(work!(c => {
            if c.exec(sql::SESSION_DELETE, args!(&hash)).await? != 1 {
                return Ok(false);
            }
            insert_audit(c, &audit).await?;
            Ok(true)
        }))
        .await
    }

    async fn grant(&self, dataset_id: &str, principal: &str) -> Result<Option<String>, StoreError> {
        let args = args!(dataset_id, principal);
        optional(self, sql::GRANT_GET, args, |r| r.text("role")).await
    }

    async fn has_grants(&self, principal: &str) -> Result<bool, StoreError> {
        let any = optional(self, sql::GRANT_ANY, args!(principal), |r| r.text("role")).await?;
        Ok(any.is_some())
    }

    async fn list_grants(&self, dataset_id: &str) -> Result<Vec<GrantRow>, StoreError> {
        all(self, sql::GRANT_LIST, args!(dataset_id), Columns::grant).await
    }

    async fn set_grant(
        &self,
        dataset_id: &str,
        principal: &str,
        role: Option<&str>,
        at: &str,
        audit: &AuditDraft,
    ) -> Result<bool, StoreError> {
        let (d, p) = (dataset_id.to_owned(), principal.to_owned());
        let (role, at, audit) = (role.map(str::to_owned), at.to_owned(), audit.clone());
        self.write(work!(c => {
            let changed = match &role {
                Some(role) => c.exec(sql::GRANT_UPSERT, args!(&d, &p, role, &at)).await?,
                None => c.exec(sql::GRANT_DELETE, args!(&d, &p)).await?,
            };
            if changed == 0 {
                return Ok(false);
            }
            insert_audit(c, &audit).await?;
            Ok(true)
        }))
        .await
    }

    async fn list_quotas(&self, dataset_id: &str) -> Result<Vec<QuotaRow>, StoreError> {
        all(self, sql::QUOTA_LIST, args!(dataset_id), Columns::quota).await
    }

    async fn list_audit_newest(
        &self,
        q: &AuditQuery,
        before: i64,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        self.place_audit().await?;
        let args = audit_query_args(q, before);
        all(self, sql::AUDIT_QUERY_NEWEST, &args, Columns::audit).await
    }

    async fn alert_rule(&self, dataset_id: &str) -> Result<Option<String>, StoreError> {
        optional(self, sql::ALERT_RULE_GET, args!(dataset_id), |r| {
            r.text("thresholds")
        })
        .await
    }

    async fn set_alert_rule(
        &self,
        dataset_id: &str,
        thresholds: &str,
        at: &str,
        audit: &AuditDraft,
    ) -> Result<(), StoreError> {
        let (id, t, at, audit) = (
            dataset_id.to_owned(),
            thresholds.to_owned(),
            at.to_owned(),
            audit.clone(),
        );
        self.write(work!(c => {
            c.exec(sql::ALERT_RULE_SET, args!(&id, &t, &at)).await?;
            insert_audit(c, &audit).await
        }))
        .await
    }

    async fn claim_crossing(
        &self,
        ledger_id: &str,
        threshold: f64,
        at: &str,
    ) -> Result<bool, StoreError> {
        let (id, at) = (ledger_id.to_owned(), at.to_owned());
        self.write(work!(c => {
            Ok(c.exec(sql::CROSSING_CLAIM, args!(&id, threshold, &at)).await? == 1)
        }))
        .await
    }

    async fn rearm_crossings(&self, ledger_id: &str, used: f64) -> Result<u64, StoreError> {
        let id = ledger_id.to_owned();
        self.write(work!(c => { c.exec(sql::CROSSING_REARM, args!(&id, used)).await }))
            .await
    }

    async fn crossings(&self, ledger_id: &str) -> Result<Vec<f64>, StoreError> {
        all(self, sql::CROSSING_LIST, args!(ledger_id), |r| {
            r.float("threshold")
        })
        .await
    }

    async fn audit(&self, draft: &AuditDraft) -> Result<(), StoreError> {
        let draft = draft.clone();
        self.write(work!(c => { insert_audit(c, &draft).await }))
            .await
    }

    async fn list_audit(&self, q: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError> {
        self.place_audit().await?;
        let args = audit_query_args(q, q.after);
        all(self, sql::AUDIT_QUERY, &args, Columns::audit).await
    }

    async fn audit_chain(
        &self,
        chain: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let args = args!(chain, after, limit);
        all(self, sql::AUDIT_CHAIN, args, Columns::audit).await
    }

    async fn audit_heads(&self) -> Result<Vec<(String, i64, String)>, StoreError> {
        all(self, sql::AUDIT_HEADS, &[], Columns::head).await
    }

    async fn datasets_without_chain(&self) -> Result<Vec<String>, StoreError> {
        all(self, sql::DATASETS_WITHOUT_CHAIN, &[], |r| r.text("id")).await
    }

    async fn last_state_audit(&self, chain: &str) -> Result<Option<AuditRecord>, StoreError> {
        optional(
            self,
            sql::AUDIT_LAST_STATE,
            args!(chain, chain),
            Columns::audit,
        )
        .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        optional(self, "SELECT 1", &[], |_| Ok(())).await.map(drop)
    }
}
