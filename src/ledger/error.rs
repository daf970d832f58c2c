//! The ledger layer's one error type (HTTP-agnostic; `http::error` maps it to status codes).

use crate::accountant::certificate::Certificate;
use crate::accountant::AccountantError;
use crate::store::StoreError;
use serde::Serialize;
use serde_json::Value;

/// Errors of the ledger layer (HTTP-agnostic; `http::error` maps them to status codes).
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("dataset {0:?} does not exist")]
    NotFound(String),
    #[error("dataset {0:?} already exists")]
    AlreadyExists(String),
    #[error("the charge would exceed the dataset's budget")]
    BudgetExceeded(Box<Rejection>),
    #[error("idempotency key {0:?} was already used for a different request")]
    IdempotencyKeyReused(String),
    #[error(transparent)]
    Accountant(#[from] AccountantError),
    #[error("the store is unavailable")]
    Unavailable(#[source] StoreError),
    #[error("the ledger is busy: too many concurrent writers, retry")]
    Busy,
    /// Too much numerical work is running or waiting; retry after this many seconds.
    #[error("the accountant is at capacity; retry in {0} s")]
    Overloaded(u64),
    #[error("internal error: {0}")]
    Internal(String),
    #[error("dataset {0:?} has a corrupt stored state: {1}")]
    Corrupt(String, String),
    #[error("charge {0:?} does not exist on this dataset")]
    ChargeNotFound(String),
    #[error("run {0:?} does not exist on this dataset")]
    RunNotFound(String),
    #[error("charge {charge:?} is {status}, not reserved")]
    NotReserved { charge: String, status: String },
    #[error("charge {0:?}: a unit whose outputs were released cannot be refunded; commit it")]
    OutputsReleased(String),
    #[error("charge {0:?}: its job has started reading the data; it can only be committed")]
    UnitStarted(String),
    /// A replayed request whose unit was released since: its budget was refunded.
    #[error("charge {charge:?} was released (refunded); run nothing on it")]
    UnitReleased { charge: String, view: Box<Value> },
    /// Someone other than the unit's (or run's) owner acting on it without an admin's reason.
    #[error("{0}")]
    NotOwner(String),
    #[error("run {0:?} has no chunk left to admit")]
    RunComplete(String),
    /// A run declared without `allow_partial` whose chunks do not all fit what is left now.
    #[error("only {} of the run's {} chunks fit what is left", .0.chunks_that_fit, .0.chunks)]
    RunDoesNotFit(Box<RunFit>),
    #[error("run {run:?}: the request names chunk {asked}, the next one is {next:?}")]
    ChunkMismatch {
        run: String,
        asked: u64,
        next: Option<u64>,
    },
    #[error("charge {charge:?} cannot be released: {reason}")]
    ReleaseRefused { charge: String, reason: String },
    #[error("missing, unknown, revoked or expired bearer token")]
    Unauthenticated,
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// A value that is well-formed JSON but not acceptable (the field, the reason).
    #[error("{0}: {1}")]
    Invalid(String, String),
    /// A quota or budget change that would break the quotas' invariants.
    #[error("{0}")]
    QuotaConflict(String),
    /// A block past its dataset's retention horizon: it may be read, not charged.
    #[error("{0}")]
    ReadOnly(String),
    /// A budget above the cap fixed at the dataset's creation.
    #[error("{0}")]
    CapExceeded(String),
    /// The dataset's stored state disagrees with its last audited state: it was changed behind
    /// the service's back (or restored alone); nothing is admitted on it until an operator
    /// resolves it.
    #[error("dataset {0:?}: {1}")]
    StateCorrupt(String, String),
    /// Too many new ledgers (blocks) for one principal this minute; retry after the seconds.
    #[error("{1}")]
    TooManyNewLedgers(u64, String),
}

pub(crate) fn internal(e: impl std::fmt::Display) -> LedgerError {
    LedgerError::Internal(e.to_string())
}

impl From<StoreError> for LedgerError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Corrupt(m) => LedgerError::Internal(m),
            StoreError::InvalidValue(m) => LedgerError::Invalid(
                "request".into(),
                format!("holds a value the database cannot store ({m})"),
            ),
            other => LedgerError::Unavailable(other),
        }
    }
}

/// How much of a declared run fits what is left for its declarer now (the 409 `run_does_not_fit`
/// details): its chunks taken one after another through the gate (the dataset's filter and the
/// declarer's quota share, each chunk's δᵢ chosen as when it is taken), up to the first refused.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RunFit {
    pub chunks: u64,
    pub steps: u64,
    /// Chunks admitted one after another before the first refusal.
    pub chunks_that_fit: u64,
    /// Steps in those chunks.
    pub steps_that_fit: u64,
    /// What refuses the first chunk that does not fit: `"mu"` or `"delta"`, of the dataset's
    /// budget or of the holder's quota (`"mu of alice's quota"`).
    pub refused_by: String,
    /// μ and δ left for a unit of the declarer now, before the run.
    pub remaining_mu: f64,
    pub remaining_delta: f64,
}

/// Why a charge was rejected: the figures of the 409 `budget_exceeded` body (declared once here,
/// used by the body and by the spec).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Rejection {
    /// μ of the filter with the unit, √(Σμᵢ² + μ_unit²).
    pub mu_after: Option<f64>,
    /// δ of the filter with the unit, Σδᵢ + δ_unit.
    pub delta_after: f64,
    pub mu_budget: f64,
    pub delta_budget: f64,
    pub mu_spent: f64,
    pub delta_spent: f64,
    pub remaining_mu: f64,
    pub remaining_delta: f64,
    /// The unit's certificate (μᵢ, δᵢ) the gate tried.
    #[schema(value_type = super::budget::CertificateView)]
    pub unit: Certificate,
    /// The quota that refused the unit (a principal, or `*` for the unallocated share); absent
    /// when the dataset's budget refused it.
    pub quota: Option<String>,
    /// On a charge of several ledgers (`POST /v1/charges`): the ledger that refused the unit (a
    /// dataset, or a block `dataset@block`); nothing was written to any of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dataset_id: Option<String>,
    /// Why, in words (also the body's `message`).
    pub reason: String,
}
