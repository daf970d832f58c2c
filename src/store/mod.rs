//! Persistence: the ledger's storage contract and its implementations.
//!
//! The ledger is append-only: a dataset row (budget, running summary, the composed state and a
//! `version` = number of entries) and its entries (charges and budget changes). [`Store::append`]
//! is the one write that matters: in a single transaction it bumps the version *only if* it still
//! equals the version the caller gated on (compare-and-swap), inserts the entry (unique on
//! `(dataset_id, idempotency_key)`), and stores the new composed state. A charge is acknowledged only
//! after that transaction commits.

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
    pub mu_spent: f64,
    pub mu_spent_lower: f64,
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
    pub budget_mu: Option<f64>,
    pub budget_delta: Option<f64>,
    /// The stored outcome (for idempotent replays of charges).
    pub response: Option<String>,
    pub created_at: String,
}

/// The dataset fields an append updates.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetUpdate {
    pub budget_mu: f64,
    pub budget_delta: f64,
    pub charges: i64,
    pub mu_spent: f64,
    pub mu_spent_lower: f64,
    pub updated_at: String,
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
    /// Whether the database answers.
    async fn ping(&self) -> Result<(), StoreError>;
}
