//! Persistence: the ledger's storage contract and its implementations.
//!
//! The ledger is append-only: a dataset row (budget, running summary, the composed state and a
//! `version` = number of entries) and its entries (charges and budget changes). [`Store::append`]
//! is the one write that matters: in a single transaction it bumps the version *only if* it still
//! equals the version the caller gated on (compare-and-swap), inserts the entry (unique on
//! `(dataset_id, idempotency_key)`), and stores the new composed state. A charge is acknowledged only
//! after that transaction commits.
//!
//! # Schema versions
//! Both stores keep `schema_version` and apply [`MIGRATIONS`] in order on start (a fresh database
//! gets the version-1 tables, then every migration, so it ends identical to a migrated one).
//! Version 2 adds the adaptive filter's state: `datasets.mu_sq_spent`, `delta_spent`, `units`,
//! `exact_mu` and `entries.unit_mu`, `unit_delta` (NULL on rows written by version 1 until the ledger
//! converts them; `mu_spent_lower` is no longer read).
//! Version 3 adds reservations and runs: `entries.ref_id` (the charge a commit or release settles),
//! `run_id`, `chunk` (a run's declaration and its chunks), `status` (of a charge: `reserved`,
//! `committed`, `released`; NULL = committed, as every charge before version 3 was), and
//! `datasets.reserved` (open reservations) and `create_hash` (so a retried creation is recognised).
//! Version 4 adds `tokens`: bearer tokens stored only as their SHA-256, with a role, an optional
//! expiry and a revocation time.

/// Schema migrations after version 1, as (version, statements); the SQL is portable between
/// SQLite and PostgreSQL (`REAL` is `float4` in PostgreSQL, so `DOUBLE PRECISION` is spelt out
/// per store by [`migration_sql`]).
pub const MIGRATIONS: &[(i64, &[&str])] = &[
    (
        2,
        &[
            "ALTER TABLE datasets ADD COLUMN mu_sq_spent {F}",
            "ALTER TABLE datasets ADD COLUMN delta_spent {F}",
            "ALTER TABLE datasets ADD COLUMN units {I}",
            "ALTER TABLE datasets ADD COLUMN exact_mu {F}",
            "ALTER TABLE entries ADD COLUMN unit_mu {F}",
            "ALTER TABLE entries ADD COLUMN unit_delta {F}",
        ],
    ),
    (
        3,
        &[
            "ALTER TABLE entries ADD COLUMN ref_id TEXT",
            "ALTER TABLE entries ADD COLUMN run_id TEXT",
            "ALTER TABLE entries ADD COLUMN chunk {I}",
            "ALTER TABLE entries ADD COLUMN status TEXT",
            "ALTER TABLE datasets ADD COLUMN reserved {I}",
            "ALTER TABLE datasets ADD COLUMN create_hash TEXT",
            "CREATE INDEX IF NOT EXISTS entries_charge ON entries (dataset_id, charge_id)",
            "CREATE INDEX IF NOT EXISTS entries_run ON entries (dataset_id, run_id)",
        ],
    ),
    (
        4,
        &["CREATE TABLE IF NOT EXISTS tokens (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            hash TEXT NOT NULL UNIQUE,
            role TEXT NOT NULL,
            created_at TEXT NOT NULL,
            expires_at TEXT,
            revoked_at TEXT
        )"],
    ),
];

/// A migration statement with the store's float and integer type names.
pub fn migration_sql(stmt: &str, float: &str, int: &str) -> String {
    stmt.replace("{F}", float).replace("{I}", int)
}

pub mod postgres;
pub mod sqlite;

use async_trait::async_trait;

/// A dataset row.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetRow {
    pub id: String,
    pub description: String,
    pub neighboring_relation: String,
    pub budget_mu: f64,
    pub budget_delta: f64,
    pub grid_step: f64,
    /// Number of ledger entries (charges and budget changes): the compare-and-swap token.
    pub version: i64,
    pub charges: i64,
    /// μ spent under the filter, √Σμᵢ² (rounded up).
    pub mu_spent: f64,
    /// Filter state: Σμᵢ², Σδᵢ and the unit count; `None` for a ledger written before the filter
    /// (schema version 1), which the ledger converts on first use.
    pub mu_sq_spent: Option<f64>,
    pub delta_spent: Option<f64>,
    pub units: Option<i64>,
    /// μ (upper) of the exact composition of all charges, for display only.
    pub exact_mu: Option<f64>,
    /// Open reservations (`None` on rows written before schema version 3: none).
    pub reserved: Option<i64>,
    /// SHA-256 of the creating request, so a retried creation is recognised.
    pub create_hash: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// A ledger entry as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct EntryRow {
    pub seq: i64,
    pub kind: String,
    pub charge_id: Option<String>,
    pub event: Option<String>,
    pub label: Option<String>,
    pub metadata: Option<String>,
    pub idempotency_key: Option<String>,
    pub request_hash: Option<String>,
    pub mu_after: Option<f64>,
    /// The unit's certificate (μᵢ, δᵢ) (charges only; `None` for charges not yet converted).
    pub unit_mu: Option<f64>,
    pub unit_delta: Option<f64>,
    pub budget_mu: Option<f64>,
    pub budget_delta: Option<f64>,
    /// The stored outcome (for idempotent replays).
    pub response: Option<String>,
    /// Commit and release entries: the charge they settle.
    pub ref_id: Option<String>,
    /// A run's declaration and its chunks: the run.
    pub run_id: Option<String>,
    /// A run's chunk: its index (from 0).
    pub chunk: Option<i64>,
    /// Charges: `reserved`, `committed` or `released` (`None`: committed, as before version 3).
    pub status: Option<String>,
    pub created_at: String,
}

impl EntryRow {
    /// An entry of `kind` with nothing else set.
    pub fn new(kind: &str, created_at: String) -> Self {
        EntryRow {
            seq: 0,
            kind: kind.to_owned(),
            charge_id: None,
            event: None,
            label: None,
            metadata: None,
            idempotency_key: None,
            request_hash: None,
            mu_after: None,
            unit_mu: None,
            unit_delta: None,
            budget_mu: None,
            budget_delta: None,
            response: None,
            ref_id: None,
            run_id: None,
            chunk: None,
            status: None,
            created_at,
        }
    }
}

/// A bearer token as stored (never the secret: only its SHA-256).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRow {
    pub id: String,
    pub name: String,
    /// Hex SHA-256 of the secret.
    pub hash: String,
    pub role: String,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// The dataset fields an append updates.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetUpdate {
    pub budget_mu: f64,
    pub budget_delta: f64,
    pub charges: i64,
    pub mu_spent: f64,
    pub mu_sq_spent: f64,
    pub delta_spent: f64,
    pub units: i64,
    pub exact_mu: Option<f64>,
    /// Open reservations after the entry.
    pub reserved: i64,
    /// A commit or release: the reserved charge (by id) whose status becomes the given one, in the
    /// same transaction (the append fails with [`StoreError::VersionConflict`] if that charge is
    /// not reserved).
    pub settle: Option<(String, String)>,
    pub updated_at: String,
}

/// The filter state written when a version-1 ledger is converted.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversion {
    pub mu_spent: f64,
    pub mu_sq_spent: f64,
    pub delta_spent: f64,
    pub units: i64,
    /// (seq, μᵢ, δᵢ) of every charge.
    pub certificates: Vec<(i64, f64, f64)>,
}

/// Storage failures, HTTP-agnostic.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// A dataset with this id already exists.
    #[error("the dataset already exists")]
    AlreadyExists,
    /// The dataset does not exist.
    #[error("the dataset does not exist")]
    NotFound,
    /// The dataset's version moved since the caller read it (another writer appended first).
    #[error("the ledger changed concurrently")]
    VersionConflict,
    /// The idempotency key was used already for this dataset.
    #[error("the idempotency key was already used")]
    DuplicateKey,
    /// The database cannot be reached or refused the operation; retryable.
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
    /// Stored data could not be read back.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
}

/// The storage contract (object-safe so the service holds an `Arc<dyn Store>`).
#[async_trait]
pub trait Store: Send + Sync {
    /// Creates a dataset with its initial (empty) state.
    async fn create_dataset(&self, row: &DatasetRow, state: &[u8]) -> Result<(), StoreError>;
    /// One dataset.
    async fn get_dataset(&self, id: &str) -> Result<Option<DatasetRow>, StoreError>;
    /// The stored composed state and the version it belongs to.
    async fn get_state(&self, id: &str) -> Result<Option<(i64, Vec<u8>)>, StoreError>;
    /// Datasets ordered by id, strictly after `after`.
    async fn list_datasets(
        &self,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<DatasetRow>, StoreError>;
    /// The entry that used an idempotency key, if any.
    async fn find_entry_by_key(&self, id: &str, key: &str) -> Result<Option<EntryRow>, StoreError>;
    /// The charge with this id, if any.
    async fn find_charge(&self, id: &str, charge_id: &str) -> Result<Option<EntryRow>, StoreError>;
    /// A run's entries (its declaration and its chunks), in order.
    async fn list_run(&self, id: &str, run_id: &str) -> Result<Vec<EntryRow>, StoreError>;
    /// Entries of a kind (or all) with seq > `after`, in order.
    async fn list_entries(
        &self,
        id: &str,
        kind: Option<&str>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<EntryRow>, StoreError>;
    /// Atomically: if the dataset's version is `expected_version`, append `entry` as seq
    /// `expected_version + 1`, apply `update`, store `state` (if given; budget changes keep the
    /// state), and bump the version. Returns the seq.
    async fn append(
        &self,
        id: &str,
        expected_version: i64,
        entry: &EntryRow,
        update: &DatasetUpdate,
        state: Option<&[u8]>,
    ) -> Result<i64, StoreError>;
    /// Writes the filter state of a version-1 ledger, once: only if the dataset is still at
    /// `expected_version` and has no filter state yet (else [`StoreError::VersionConflict`]).
    async fn convert(
        &self,
        id: &str,
        expected_version: i64,
        conversion: &Conversion,
    ) -> Result<(), StoreError>;
    /// Stores a token; with `only_if_none`, only when no token exists yet (the first start's
    /// admin token, created once even when replicas start together). Returns whether it was stored.
    async fn create_token(&self, token: &TokenRow, only_if_none: bool) -> Result<bool, StoreError>;
    /// The token with this hash, if any.
    async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRow>, StoreError>;
    /// Every token, oldest first.
    async fn list_tokens(&self) -> Result<Vec<TokenRow>, StoreError>;
    /// Marks a token revoked at `at` (once); whether a live token was revoked.
    async fn revoke_token(&self, id: &str, at: &str) -> Result<bool, StoreError>;
    /// Whether the database answers.
    async fn ping(&self) -> Result<(), StoreError>;
}
