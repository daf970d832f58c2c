//! The application layer: datasets, their μ-GDP budgets, and the gate that admits or rejects charges.
//!
//! Every charge is a *unit* whose parameters are fixed when it is admitted; it gets a certificate
//! (μᵢ, δᵢ) and the gate is the adaptive μ-GDP filter of [`filter`]: admit iff Σμᵢ² ≤ μ_B² and
//! Σδᵢ ≤ δ_B. The exact composition of all charges is still kept, and shown, but only as what the
//! ledger would be worth had the whole sequence been fixed in advance; it never admits anything.
//! Check and append are one step: per dataset, charges are serialised by an in-process lock, and the
//! store's append is a compare-and-swap on the ledger version, so concurrent charges (from this
//! process or another replica on the same database) never both pass against the same ledger state.
//!
//! Composition runs on tokio's blocking pool, never on the async workers.

pub mod admission;
pub mod audit;
pub mod auth;
mod certificates;
mod compositions;
pub mod dashboard;
pub mod filter;
pub mod input;
pub mod keys;
pub mod multi;
pub mod oidc;
pub mod partition;
pub mod quotas;
pub mod schema;
mod units;
mod write;
pub use units::{RunPlan, RunView};

/// Empties this process's memo of certificates (what a restart does), for tests.
#[doc(hidden)]
pub fn forget_certificates() {
    certificates::forget_all();
}

use crate::accountant::account::{self, AccountRequest};
use crate::accountant::cache::ByteCache;
use crate::accountant::certificate::{certify, Certificate, UnitDelta};
use crate::accountant::composition::Composition;
use crate::accountant::guarantee::Guarantee;
use crate::accountant::params::{DeltaSlack, GridStep, ReportOptions};
use crate::accountant::report::Report;
use crate::accountant::work::{self, Work};
use crate::accountant::{AccountantError, Event, NeighboringRelation};
use crate::store::{
    Conversion, DatasetRow, DatasetUpdate, EntryRow, SharedBody, Store, StoreError,
};
use auth::{Action, Actor};
pub use filter::GATE_TOLERANCE;
use filter::{Exceeded, FilterState, Gate, Verdict};
pub use filter::{Statement, Validity};
use input::{Budget, BudgetPatch, ChargeRequest, NewDataset};
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use utoipa::ToSchema;

/// A unit that needs a δ (its privacy loss is unbounded, or bounded only up to the engine's
/// truncation) gets δ_B / 1000 unless the charge names one: a dataset can take a thousand such units
/// before its δ is spent, and each one's μ barely depends on δ at that scale (for the README's
/// DP-SGD chunk, μ moves by <1 % between δ_B/100 and δ_B/10000). Units whose fit at δ = 0 is within
/// 0.1 % spend no δ at all (see [`crate::accountant::certificate`]).
pub const DEFAULT_UNITS_PER_DELTA: f64 = 1000.0;

/// Bytes of composed states kept in memory (least recently used first out): 128 MiB.
pub const STATE_CACHE_BYTES: usize = 128 << 20;

/// Bytes of kept gate inputs (dataset rows and quotas, a few hundred bytes each): 16 MiB.
pub const GATE_CACHE_BYTES: usize = 16 << 20;

/// A dataset's row and quotas at one version: what the gate reads.
#[derive(Debug)]
struct GateInputs {
    row: DatasetRow,
    quotas: Vec<crate::store::QuotaRow>,
    /// The ledger holds idempotency keys stored before keys were scoped ([`keys`]): a keyed
    /// request is then checked for a replay in the store first (the unique index, which the
    /// kept inputs rely on, does not see a scoped key's legacy twin).
    legacy_keys: bool,
}

impl GateInputs {
    /// Approximate heap and inline size, for the cache's bound.
    fn bytes(&self) -> usize {
        let r = &self.row;
        let strings = r.id.len()
            + r.description.len()
            + r.neighboring_relation.len()
            + r.create_hash.as_ref().map_or(0, String::len)
            + r.created_at.len()
            + r.updated_at.len();
        let quotas: usize = self
            .quotas
            .iter()
            .map(|q| {
                std::mem::size_of::<crate::store::QuotaRow>()
                    + q.dataset_id.len()
                    + q.principal.len()
                    + q.updated_at.len()
            })
            .sum();
        std::mem::size_of::<Self>() + strings + quotas
    }
}

/// Waits a random 0 to 2^min(n,6) − 1 ms before the (n+1)-th attempt after losing a
/// compare-and-swap to another replica (none before the first), so replicas contending for one
/// dataset spread out instead of colliding again.
async fn back_off(n: u32) {
    if n == 0 {
        return;
    }
    let ms = (uuid::Uuid::new_v4().as_u128() as u64) % (1u64 << n.min(6));
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
}

/// The end of one attempt to admit a unit.
enum Attempt {
    Done(ChargeOutcome),
    /// Start over from the store's current row.
    Retry,
    /// The append is queued ([`Store::append_queued`]): the outcome once it is durable (the
    /// dataset's lock may be released before: the next charge's append queues behind this one).
    Queued(crate::store::PendingAppend, ChargeOutcome),
}

/// How an attempt to admit a unit may go.
#[derive(Debug, Clone, Copy)]
struct Mode {
    /// The gate's inputs are kept ones ([`GateInputs`]): a refusal on them is decided again on
    /// the store's row.
    from_cache: bool,
    /// The append may be queued and the dataset's lock released before it is durable.
    queue: bool,
}

/// How often a charge is retried when another writer appended first.
const MAX_ATTEMPTS: usize = 16;

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

/// A unit's certificate on the wire (the schema of [`Certificate`], which serialises the same way;
/// the accountant's types carry no schema).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[schema(as = Certificate)]
pub struct CertificateView {
    /// μ of the Gaussian part (an upper bound).
    pub mu: f64,
    /// δᵢ: the probability of the unit's "reveal" part; its trade-off curve is at least
    /// G_μ ⊗ f_{0,δ} in both neighbour orders.
    pub delta: f64,
}

/// Why a charge was rejected.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
    pub unit: Certificate,
    /// The quota that refused the unit (a principal, or `*` for the unallocated share); absent
    /// when the dataset's budget refused it.
    pub quota: Option<String>,
    /// On a charge of several ledgers: the ledger (a dataset, or a block `dataset@block`) that
    /// refused the unit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dataset_id: Option<String>,
    pub reason: String,
}

/// A dataset and what it has spent.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[schema(as = Dataset)]
pub struct DatasetView {
    pub id: String,
    pub description: String,
    /// `add_or_remove_one` or `replace_one`.
    #[schema(value_type = String)]
    pub neighboring_relation: NeighboringRelation,
    pub budget: Budget,
    /// What the ledger states about the whole interaction on it (at the budget's high-water mark,
    /// which lowering the budget never lowers), and when it holds.
    pub statement: Statement,
    /// μ spent under the adaptive filter, √Σμᵢ² over the admitted units (rounded up).
    pub mu_spent: f64,
    /// δ spent under the filter, Σδᵢ (rounded up).
    pub delta_spent: f64,
    /// √(μ_budget² − Σμᵢ²): the largest μ a further unit can have.
    pub remaining_mu: f64,
    /// δ_budget − Σδᵢ.
    pub remaining_delta: f64,
    /// Units counted by the filter (each charge or chunk is one unit; reserved ones count, released
    /// ones do not).
    pub units: i64,
    /// Units reserved and not yet committed or released (included in the spending above).
    pub reserved_units: i64,
    /// μ of the exact composition of every committed charge (upper bound, at the budget's δ):
    /// valid only if the whole sequence had been fixed in advance; shown for comparison, never
    /// used to admit. Computed off the write path: it describes `exact_composition_version`
    /// (one dataset: the current version; a list: the last stored snapshot's).
    pub exact_composition_mu: Option<f64>,
    /// The ledger version `exact_composition_mu` describes.
    pub exact_composition_version: i64,
    pub charges: i64,
    pub version: i64,
    pub grid_step: f64,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
    /// A partitioned dataset's partitioning (`{"type": "time", "width", "time_zone",
    /// "retention_blocks"}` or `{"type": "named"}`): its `budget` is then every block's, and its
    /// charges go to its blocks (`POST /v1/charges`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub partitioning: Option<Value>,
}

/// An admitted charge (a unit).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[schema(as = Charge)]
pub struct ChargeView {
    pub id: String,
    /// Position in the dataset's ledger.
    pub seq: i64,
    #[schema(value_type = Object)]
    pub event: Value,
    pub label: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    pub idempotency_key: Option<String>,
    /// The unit's certificate (μᵢ, δᵢ).
    #[schema(value_type = Option<CertificateView>)]
    pub unit: Option<Certificate>,
    /// μ spent under the filter after this charge.
    pub mu_after: Option<f64>,
    /// `committed`, `reserved` (counted by the filter; start, commit or release it), `started`
    /// (its job reads the data: counted, commit it) or `released` (refunded: the caller stated
    /// no output of it was released). A replay answers the unit's status now.
    #[schema(value_type = schema::ChargeStatus)]
    pub status: String,
    /// The run this charge is a chunk of, and its index.
    pub run_id: Option<String>,
    pub chunk: Option<i64>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

/// A ledger entry: a charge, a budget change, a run's declaration, a commit or a release.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[schema(as = Entry)]
pub struct EntryView {
    pub seq: i64,
    #[schema(value_type = schema::EntryKind)]
    pub kind: String,
    pub charge: Option<ChargeView>,
    pub budget: Option<Budget>,
    /// Commit and release entries: the charge they settle.
    pub settles: Option<String>,
    /// Run declarations: the run.
    pub run_id: Option<String>,
    /// Release entries: what the caller stated (`outputs_released`, `reason`); release, commit and
    /// start entries by an admin for another principal: `for` (the owner) and `reason`.
    #[schema(value_type = Option<Object>)]
    pub statement: Option<Value>,
    /// Who made the entry (absent on entries older than principals).
    pub principal: Option<String>,
    /// Charges: the share of the budget that paid (a principal's quota, or `*`); quota entries:
    /// the quota's holder (the entry's `budget` is the quota).
    pub quota: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

/// The outcome of a charge.
#[derive(Debug, Clone, PartialEq)]
pub struct ChargeOutcome {
    /// False when this is the replay of an earlier request with the same idempotency key.
    pub created: bool,
    /// `{charge, report}` exactly as first returned.
    pub body: Value,
}

/// What a charge would do (nothing written).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Preview {
    pub admitted: bool,
    /// The unit's certificate (μᵢ, δᵢ) the gate would use.
    #[schema(value_type = CertificateView)]
    pub unit: Certificate,
    /// μ and δ of the filter with the unit.
    pub mu_after: Option<f64>,
    pub delta_after: f64,
    pub mu_budget: f64,
    pub delta_budget: f64,
    pub reason: Option<String>,
    /// The report of the filter's guarantee with the unit (or as it stands, when rejected).
    #[schema(value_type = schema::ReportWire)]
    pub report: Report,
}

/// The report of a dataset: the filter's guarantee, and the exact composition beside it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct DatasetReport {
    /// Every figure of the report is that of the ledger's statement G_{μ_max} ⊗ f_{0,δ_max}, at the
    /// budget's high-water mark (see `statement` for when it holds). What was spent is budget use,
    /// below; it is not itself a guarantee (it depends on the outputs).
    #[serde(flatten)]
    #[schema(value_type = schema::ReportWire)]
    pub report: Report,
    /// What the figures state and when it holds.
    pub statement: Statement,
    pub mu_spent: f64,
    pub delta_spent: f64,
    pub units: i64,
    pub exact_composition: Option<ExactComposition>,
}

/// The trade-off curve of a dataset's guarantee.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[schema(as = Tradeoff)]
pub struct TradeoffView {
    #[schema(value_type = schema::MuWire)]
    pub mu: crate::accountant::guarantee::MuReport,
    pub alpha_star: f64,
    #[schema(value_type = Vec<schema::TradeoffPointWire>)]
    pub points: Vec<crate::accountant::report::TradeoffPoint>,
}

/// The exact composition of every charge, labelled.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ExactComposition {
    /// Always the same warning: what this composition is valid for.
    pub valid_only_if: &'static str,
    /// The ledger version it describes (every charge committed at or before it).
    pub version: i64,
    #[schema(value_type = schema::ReportWire)]
    pub report: Report,
}

const EXACT_ONLY_IF: &str = "the whole sequence of charges had been fixed before any output was \
    seen; callers that chose charges after seeing results are covered only by the filter's figures";

/// A unit to gate: a charge, or a run's chunk.
struct UnitRequest {
    event: Event,
    /// The event as recorded.
    event_json: Value,
    delta: Option<f64>,
    label: Option<String>,
    metadata: Option<Value>,
    idempotency_key: Option<keys::IdemKey>,
    request_hash: String,
    reserve: bool,
    /// The run and the chunk's index.
    run: Option<(String, i64)>,
    /// An admin taking another principal's chunk: (the run's owner, the admin's reason).
    on_behalf: Option<(String, String)>,
}

/// The dataset fields of an append that changes neither the budget nor the counts: the filter
/// state `f` and the row's other figures.
fn unchanged(row: &DatasetRow, f: &FilterState, updated_at: String) -> DatasetUpdate {
    DatasetUpdate {
        budget_mu: row.budget_mu,
        budget_delta: row.budget_delta,
        mu_max: row.mu_max,
        delta_max: row.delta_max,
        charges: row.charges,
        mu_spent: f.mu(),
        mu_sq_spent: f.mu_sq(),
        delta_spent: f.delta(),
        units: f.units(),
        reserved: row.reserved.unwrap_or(0),
        settle: None,
        quotas: Vec::new(),
        audit: None,
        updated_at,
    }
}

/// The row of a new, empty ledger (a dataset, or a block on its first charge) with `budget`, grid
/// step `h` and an optional `cap`.
fn empty_row(
    id: String,
    description: String,
    relation: &str,
    (budget, h, cap): (Budget, GridStep, Option<Budget>),
    create_hash: Option<String>,
) -> DatasetRow {
    let ts = now();
    DatasetRow {
        id,
        description,
        neighboring_relation: relation.to_owned(),
        budget_mu: budget.mu(),
        budget_delta: budget.delta(),
        grid_step: h.get(),
        version: 0,
        charges: 0,
        mu_spent: 0.0,
        mu_sq_spent: Some(0.0),
        delta_spent: Some(0.0),
        units: Some(0),
        exact_mu: Some(0.0),
        reserved: Some(0),
        create_hash,
        mu_max: budget.mu(),
        delta_max: budget.delta(),
        cap_mu: cap.map(|c| c.mu()),
        cap_delta: cap.map(|c| c.delta()),
        statement_unknown: None,
        // Its creation (or first charge) is audited with its state.
        states_from: Some(0),
        state_seq: 0,
        created_at: ts.clone(),
        updated_at: ts,
    }
}

/// Records the gate's latency and outcome.
fn record_gate(id: &str, started: Instant, result: &Result<ChargeOutcome, LedgerError>) {
    metrics::histogram!("privacy_ledger_gate_seconds").record(started.elapsed().as_secs_f64());
    metrics::counter!("privacy_ledger_charges_total", "dataset" => id.to_owned(), "outcome" => outcome_of(result))
        .increment(1);
}

/// A charge's outcome as the metrics label it.
fn outcome_of(result: &Result<ChargeOutcome, LedgerError>) -> &'static str {
    match result {
        Ok(o) if o.created => "admitted",
        Ok(_) => "replayed",
        Err(LedgerError::BudgetExceeded(_)) => "rejected",
        Err(_) => "error",
    }
}

/// How long a writer waits for a dataset's lock before checking that the store answers.
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(50);
/// Longest a writer waits for a dataset's lock (then 503 `busy`).
const MAX_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The datasets and their gate.
pub struct Ledgers {
    store: Arc<dyn Store>,
    /// One lock per dataset: charges on a dataset are gated one at a time in this process.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Exact compositions (reports), kept and caught up off the write path.
    compositions: Arc<compositions::Compositions>,
    /// Bytes of compositions kept.
    composition_bytes: usize,
    /// What the gate reads of each dataset (row and quotas) as of this process's last write.
    gates: Mutex<ByteCache<String, Arc<GateInputs>>>,
    /// Filter reports with the default options.
    reports: FilterReports,
    /// JWTs from an identity provider, when configured.
    oidc: Option<Arc<oidc::Oidc>>,
    /// How much numerical work runs at once.
    admission: Arc<admission::Admission>,
    /// Datasets' partitionings (fixed at creation, and datasets are never deleted).
    partitionings: Mutex<ByteCache<String, Option<partition::Partitioning>>>,
    /// Runs' progress, by dataset and run.
    runs: Mutex<ByteCache<String, Arc<units::RunProgress>>>,
    /// Block ledgers each principal created this minute.
    created: partition::CreationLimit,
    /// Datasets known to hold no idempotency key stored before scoping (every key written since
    /// is scoped, so the answer never changes back): their gate inputs skip that query.
    no_legacy_keys: Mutex<std::collections::HashSet<String>>,
}

/// Bytes of kept partitionings: 1 MiB.
const PARTITIONING_CACHE_BYTES: usize = 1 << 20;

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The stored relation, checked (a corrupt one stops the dataset: read as the default it would
/// account every charge under the wrong neighbours).
fn relation_of(row: &DatasetRow) -> Result<NeighboringRelation, LedgerError> {
    NeighboringRelation::parse(&row.neighboring_relation).ok_or_else(|| {
        LedgerError::Corrupt(
            row.id.clone(),
            format!("neighbouring relation {:?}", row.neighboring_relation),
        )
    })
}

/// The stored budget, checked.
fn budget_of(row: &DatasetRow) -> Result<Budget, LedgerError> {
    Budget::new(row.budget_mu, row.budget_delta)
        .map_err(|e| LedgerError::Corrupt(row.id.clone(), format!("budget: {e}")))
}

/// The budget's high-water mark (μ_max, δ_max): what every report states ([`Statement`]). Never
/// below the budget in force, whoever wrote it (a row whose budget passed the stored mark, e.g. by
/// an older release, states the budget).
fn stated_budget(row: &DatasetRow) -> Result<Budget, LedgerError> {
    Budget::new(
        row.mu_max.max(row.budget_mu),
        row.delta_max.max(row.budget_delta),
    )
    .map_err(|e| LedgerError::Corrupt(row.id.clone(), format!("high-water mark: {e}")))
}

/// The cap fixed at creation, if any.
fn cap_of(row: &DatasetRow) -> Result<Option<Budget>, LedgerError> {
    match (row.cap_mu, row.cap_delta) {
        (Some(mu), Some(delta)) => Budget::new(mu, delta)
            .map(Some)
            .map_err(|e| LedgerError::Corrupt(row.id.clone(), format!("cap: {e}"))),
        _ => Ok(None),
    }
}

/// What the ledger states after spending `f` ([`Statement`]).
fn statement_of(row: &DatasetRow, f: &FilterState) -> Result<Statement, LedgerError> {
    Ok(Statement::of(
        &stated_budget(row)?,
        cap_of(row)?,
        f,
        row.statement_unknown.as_deref(),
    ))
}

/// The stored grid step, checked.
fn grid_step_of(row: &DatasetRow) -> Result<GridStep, LedgerError> {
    GridStep::new(row.grid_step)
        .map_err(|e| LedgerError::Corrupt(row.id.clone(), format!("grid step {e}")))
}

/// What a unit's certificates depend on besides the unit: the relation and the grid step.
fn engine_of(row: &DatasetRow) -> Result<(NeighboringRelation, GridStep), LedgerError> {
    Ok((relation_of(row)?, grid_step_of(row)?))
}

/// The filter state of a converted row, checked (a corrupt one stops the dataset).
fn filter_of(row: &DatasetRow) -> Result<FilterState, LedgerError> {
    match (row.mu_sq_spent, row.delta_spent, row.units) {
        (Some(m), Some(d), Some(u)) => {
            FilterState::from_stored(m, d, u).map_err(|e| LedgerError::Corrupt(row.id.clone(), e))
        }
        _ => Err(LedgerError::Corrupt(
            row.id.clone(),
            "the filter state is missing (not converted from schema version 1)".into(),
        )),
    }
}

fn view(row: &DatasetRow, f: &FilterState) -> Result<DatasetView, LedgerError> {
    let budget = budget_of(row)?;
    Ok(DatasetView {
        id: row.id.clone(),
        description: row.description.clone(),
        neighboring_relation: relation_of(row)?,
        budget,
        statement: statement_of(row, f)?,
        mu_spent: f.mu(),
        delta_spent: f.delta(),
        remaining_mu: budget.remaining_mu(f),
        remaining_delta: budget.remaining_delta(f),
        units: f.units(),
        reserved_units: row.reserved.unwrap_or(0),
        exact_composition_mu: row.exact_mu,
        exact_composition_version: row.state_seq,
        charges: row.charges,
        version: row.version,
        grid_step: grid_step_of(row)?.get(),
        created_at: row.created_at.clone(),
        updated_at: row.updated_at.clone(),
        partitioning: None,
    })
}

fn charge_view(e: &EntryRow) -> ChargeView {
    let parse = |s: &Option<String>| s.as_deref().and_then(|t| serde_json::from_str(t).ok());
    ChargeView {
        id: e.charge_id.clone().unwrap_or_default(),
        seq: e.seq,
        event: parse(&e.event).unwrap_or(Value::Null),
        label: e.label.clone(),
        metadata: parse(&e.metadata),
        idempotency_key: e
            .idempotency_key
            .as_deref()
            .map(|k| keys::shown(k).to_owned()),
        unit: match (e.unit_mu, e.unit_delta) {
            (Some(m), Some(d)) => Certificate::new(m, d),
            _ => None,
        },
        mu_after: e.mu_after,
        status: e.status.clone().unwrap_or_else(|| "committed".into()),
        run_id: e.run_id.clone(),
        chunk: e.chunk,
        created_at: e.created_at.clone(),
    }
}

/// Longest one accountant computation may run (a little below the default request timeout, so
/// the client gets the reason rather than a bare timeout).
pub const COMPUTE_LIMIT: std::time::Duration = std::time::Duration::from_secs(50);

/// Runs accountant work on the blocking pool under a [`Work`] limit: it stops at its next check
/// once [`COMPUTE_LIMIT`] passes, or once this future is dropped (the request was abandoned: client
/// gone, request timed out) — the cancel guard below fires on drop — or at shutdown.
///
/// Heavy work first passes `admission` ([`admission::Admission::enter`]); its permit moves into the
/// computation and is released when the computation ends, not when the request does.
async fn blocking<T: Send + 'static>(
    admission: &admission::Admission,
    cost: admission::Cost,
    f: impl FnOnce() -> Result<T, LedgerError> + Send + 'static,
) -> Result<T, LedgerError> {
    let permit = admission.enter(cost).await?;
    struct CancelOnDrop(Arc<Work>);
    impl Drop for CancelOnDrop {
        fn drop(&mut self) {
            self.0.cancel();
        }
    }
    let w = Work::new(COMPUTE_LIMIT);
    let _guard = CancelOnDrop(w.clone());
    let span = tracing::Span::current();
    let run = move || {
        let _permit = permit;
        let r = span.in_scope(|| work::run(w, f));
        if let Err(LedgerError::Accountant(AccountantError::Stopped(why))) = &r {
            let why = match why {
                work::Stopped::Cancelled => "abandoned",
                work::Stopped::Deadline(_) => "deadline",
                work::Stopped::Shutdown => "shutdown",
            };
            metrics::counter!("privacy_ledger_computations_stopped_total", "why" => why)
                .increment(1);
        }
        r
    };
    if cost == admission::Cost::Light {
        return tokio::task::spawn_blocking(run)
            .await
            .map_err(|e| LedgerError::Internal(format!("accountant task failed: {e}")))?;
    }
    // Heavy work gets a thread of its own at a lower priority (nice 10; a thread cannot raise
    // its priority again, so pooled threads are not used): under load the scheduler prefers the
    // threads answering cheap requests, and heavy work still has every idle cycle.
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("accountant-heavy".into())
        .spawn(move || {
            // Nice 10 under the normal policy (the crate maps 0..99 onto nice 19..-20).
            let _ = thread_priority::set_current_thread_priority(
                thread_priority::ThreadPriority::Crossplatform(
                    22u8.try_into().expect("a valid priority"),
                ),
            );
            let _ = tx.send(run());
        })
        .map_err(|e| LedgerError::Internal(format!("cannot start an accountant thread: {e}")))?;
    rx.await
        .map_err(|_| LedgerError::Internal("the accountant thread failed".into()))?
}

/// Whether `event` has a closed form (exact μ-GDP) under `relation`.
fn analytic(event: &Event, relation: NeighboringRelation) -> bool {
    crate::accountant::analytic::gdp_terms(
        event,
        relation,
        &crate::accountant::json::JsonPath::root(),
        1,
        &mut Vec::new(),
    )
    .is_ok()
}

/// The result of a calibration.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[schema(as = Calibration)]
pub struct Calibrated {
    #[schema(value_type = schema::FreeParameter)]
    pub free_parameter: String,
    /// The smallest noise multiplier, or the largest count (0 when not even one step fits).
    pub value: f64,
    /// μ (upper bound) of the calibrated unit.
    pub mu: f64,
    /// The μ the unit may have (the filter's remaining μ, or the stateless target).
    pub mu_target: f64,
    /// The δ the unit is certified at.
    pub delta: f64,
    /// The event with the calibrated value filled in (absent when the count is 0).
    #[schema(value_type = Option<Object>)]
    pub event: Option<Value>,
    pub evaluations: u32,
}

/// One point of a unit's certificate curve.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct CurvePointView {
    /// δᵢ.
    pub delta: f64,
    /// The certified μᵢ at δᵢ (rounded up): (μᵢ, δᵢ) is a certificate the gate accepts. Null when
    /// no finite μ holds at this δ (see `reason`).
    pub mu: Option<f64>,
    /// A lower bound on the tight μ at δᵢ: no accountant can certify less. For units with `zcdp`
    /// or `rdp` boxes it is one mechanism meeting their statements (a Gaussian witness), not the
    /// worst case over them, and can be far below `mu`.
    pub mu_lower: Option<f64>,
    /// Why `mu` is null.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The point of the curve that spends the smallest share of a budget.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct BalancedPoint {
    pub delta: f64,
    pub mu: f64,
    /// (μᵢ/μ_B)² + δᵢ/δ_B: the shares of the filter's two sums (Σμᵢ² ≤ μ_B², Σδᵢ ≤ δ_B) that the
    /// unit would use, added.
    pub budget_fraction: f64,
}

/// A unit's certificate curve μᵢ(δᵢ) (`POST /v1/accountant/certificate`).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct UnitCurve {
    /// In increasing δ; μ never increases along it.
    pub points: Vec<CurvePointView>,
    /// With a budget in the request: the point with the smallest `budget_fraction` (null when no
    /// point has a finite μ, or every point's δ exceeds a zero δ_B).
    pub balanced: Option<BalancedPoint>,
}

/// The balanced point of `points` for `budget` (see [`BalancedPoint`]).
fn balanced(points: &[CurvePointView], budget: Budget) -> Option<BalancedPoint> {
    points
        .iter()
        .filter_map(|p| {
            let mu = p.mu?;
            let d_share = if p.delta == 0.0 {
                0.0
            } else if budget.delta() > 0.0 {
                p.delta / budget.delta()
            } else {
                return None;
            };
            let f = (mu / budget.mu()).powi(2) + d_share;
            f.is_finite().then_some(BalancedPoint {
                delta: p.delta,
                mu,
                budget_fraction: f,
            })
        })
        .min_by(|a, b| a.budget_fraction.total_cmp(&b.budget_fraction))
}

fn calibrated(
    base: &Composition,
    req: &input::CalibrateRequest,
    target: f64,
    slack: crate::accountant::params::DeltaSlack,
) -> Result<Calibrated, LedgerError> {
    use crate::accountant::calibrate::{calibrate, with_free_parameter};
    let path = crate::accountant::json::JsonPath::root().field("event");
    // Calibrate against what the gate admits, so the calibrated event is admitted.
    let admissible = target * (1.0 + GATE_TOLERANCE);
    let c = calibrate(
        base,
        &req.event,
        req.free_parameter,
        admissible,
        slack,
        &path,
    )?;
    let event = if c.value > 0.0 {
        Some(with_free_parameter(&req.event, req.free_parameter, c.value, &path)?.to_json())
    } else {
        None
    };
    Ok(Calibrated {
        free_parameter: req.free_parameter.as_str().to_owned(),
        value: c.value,
        mu: c.mu,
        mu_target: target,
        delta: slack.get(),
        event,
        evaluations: c.evaluations,
    })
}

/// A unit's certificates, computed once per (relation, grid step, δ rule) for the ledgers that
/// share them (the blocks of a range, the datasets of a join, a calibration's gates).
#[derive(Default)]
struct Certified(Vec<(CertifiedKey, Arc<[Certificate]>)>);

/// What a unit's certificates depend on besides its event: (relation, grid step's bits, δ rule).
type CertifiedKey = (NeighboringRelation, u64, UnitDelta);

impl Certified {
    /// [`certify`]'s candidates for `event` under `relation`, `h` and `rule`.
    fn get(
        &mut self,
        event: &Event,
        relation: NeighboringRelation,
        h: GridStep,
        rule: UnitDelta,
        path: &crate::accountant::json::JsonPath,
    ) -> Result<&[Certificate], AccountantError> {
        let key = (relation, h.get().to_bits(), rule);
        let i = match self.0.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.0.push((
                    key,
                    certificates::certificates(event, relation, h, rule, path)?,
                ));
                self.0.len() - 1
            }
        };
        Ok(&self.0[i].1)
    }
}

/// The gate as a calibration's judge: a candidate fits iff [`Gate::admits_first`] admits one of
/// its certificates (the default δ rule) on every ledger's filter — the dataset's, or on a
/// partitioned dataset each block of the range (the tightest block decides).
struct GateJudge {
    relation: NeighboringRelation,
    h: GridStep,
    /// Each ledger's gate, with the block's name (`None`: the dataset itself). Not empty.
    gates: Vec<(Option<String>, Gate)>,
}

impl GateJudge {
    /// The first refusal (in ledger order), else the admitted unit with the largest μ.
    fn verdict(
        &self,
        event: &Event,
        path: &crate::accountant::json::JsonPath,
    ) -> Result<(Verdict, Certificate), AccountantError> {
        // One certification per δ rule (blocks whose budgets differ may have different rules).
        let mut certified = Certified::default();
        let mut best: Option<(Verdict, Certificate)> = None;
        for (_, gate) in &self.gates {
            let rule = unit_delta(&gate.budget, None);
            let candidates = certified.get(event, self.relation, self.h, rule, path)?;
            let (verdict, unit) = gate.admits_first(candidates);
            if !verdict.admitted() {
                return Ok((verdict, unit));
            }
            if best.as_ref().is_none_or(|(_, u)| unit.mu() > u.mu()) {
                best = Some((verdict, unit));
            }
        }
        Ok(best.expect("a judge has at least one gate"))
    }

    /// The least remaining μ over the ledgers.
    fn remaining_mu(&self) -> f64 {
        self.gates
            .iter()
            .map(|(_, g)| g.remaining_mu())
            .fold(f64::INFINITY, f64::min)
    }
}

impl crate::accountant::calibrate::Judge for GateJudge {
    fn judge(
        &mut self,
        event: &Event,
        path: &crate::accountant::json::JsonPath,
    ) -> Result<Option<f64>, AccountantError> {
        Ok(match self.verdict(event, path)? {
            (Verdict::Admitted(..), unit) => Some(unit.mu()),
            (Verdict::Rejected(..), _) => None,
        })
    }

    fn reachable(&mut self) -> Result<(), AccountantError> {
        for (block, gate) in &self.gates {
            if gate.remaining_mu() > 0.0 {
                continue;
            }
            let whose = match block {
                Some(b) => format!("block {b:?}'s"),
                None => "the dataset's".to_owned(),
            };
            let reason = match &gate.share {
                Some(s) if s.budget.remaining_mu(&s.state) <= 0.0 => format!(
                    "nothing fits: the quota {:?} (mu {}) is spent (mu spent {})",
                    s.holder,
                    s.budget.mu(),
                    s.state.mu()
                ),
                _ => format!(
                    "nothing fits: {whose} mu budget {} is spent (mu spent {})",
                    gate.budget.mu(),
                    gate.state.mu()
                ),
            };
            return Err(AccountantError::Unsupported {
                path: String::new(),
                reason,
            });
        }
        Ok(())
    }

    fn spent(&mut self) -> Result<f64, AccountantError> {
        Ok(self
            .gates
            .iter()
            .map(|(_, g)| g.state.mu())
            .fold(0.0, f64::max))
    }
}

/// The δ rule of a unit: the charge's own, else the budget's default (see
/// [`DEFAULT_UNITS_PER_DELTA`]).
fn unit_delta(budget: &Budget, own: Option<f64>) -> UnitDelta {
    match own {
        Some(d) => UnitDelta::Fixed(d),
        None => UnitDelta::Auto(budget.delta() / DEFAULT_UNITS_PER_DELTA),
    }
}

/// What the gate decided about a unit, with what the answer needs.
struct Gated {
    unit: Certificate,
    verdict: Verdict,
    /// Every certificate of the unit.
    candidates: Arc<[Certificate]>,
}

/// The gate's decision on `event`: its certificates (memoised, [`certificates::certificates`])
/// against the filter's sums. Nothing else: no composition, whatever the ledger holds.
fn gate_compute(
    (relation, h): (NeighboringRelation, GridStep),
    event: Event,
    gate: &Gate,
    own_delta: Option<f64>,
) -> Result<Gated, LedgerError> {
    let t = Instant::now();
    let path = crate::accountant::json::JsonPath::root().field("event");
    let rule = unit_delta(&gate.budget, own_delta);
    let candidates = certificates::certificates(&event, relation, h, rule, &path)?;
    let (verdict, unit) = gate.admits_first(&candidates);
    metrics::histogram!("privacy_ledger_accountant_seconds").record(t.elapsed().as_secs_f64());
    Ok(Gated {
        unit,
        verdict,
        candidates,
    })
}

/// The cost class of gating `event`: light when its certificates are closed-form or memoised.
fn gate_cost(
    event: &Event,
    (relation, h): (NeighboringRelation, GridStep),
    budget: &Budget,
    own_delta: Option<f64>,
) -> admission::Cost {
    admission::Cost::light_if(
        analytic(event, relation)
            || certificates::known(event, relation, h, unit_delta(budget, own_delta)),
    )
}

/// The exact composition with one more event, and its μ at the budget's δ (display only).
fn exact_with(
    base: &Composition,
    event: &Event,
    delta: f64,
) -> Result<(Composition, Option<f64>), LedgerError> {
    let path = crate::accountant::json::JsonPath::root().field("event");
    let mut state = base.clone();
    state.push(event, &path)?;
    let mu = state.guarantee()?.mu_upper(delta);
    Ok((state, mu))
}

/// The report of the filter's guarantee (the budget's: see [`Budget::guarantee`]); δ slack: that
/// guarantee's δ.
fn filter_report(
    f: &FilterState,
    budget: &Budget,
    relation: NeighboringRelation,
    opts: &ReportOptions,
) -> Report {
    let opts = ReportOptions {
        delta_slack: DeltaSlack::probability(budget.guarantee(f).infinity_mass())
            .expect("a filter guarantee's delta is below 1"),
        ..opts.clone()
    };
    Report::build(
        &budget.guarantee(f),
        relation,
        f.units().max(0) as u64,
        &opts,
    )
}

/// The key of a stored response's report that names its shared body.
const SHARED: &str = "$shared";

/// A response as stored for replays, and the part of it stored once for many entries: the
/// report without its count of invocations (the same for every charge within the budget) goes
/// to a [`SharedBody`] and the response keeps `{"$shared": digest, "invocations": n}` in its
/// place (a few dozen bytes instead of kilobytes per charge). [`Ledgers::replay`] puts it back:
/// the replayed body equals `body`.
fn stored_response(body: &Value) -> (String, Option<SharedBody>) {
    let Some(Value::Object(report)) = body.get("report") else {
        return (body.to_string(), None);
    };
    let mut rest = report.clone();
    let Some(invocations) = rest.remove("invocations") else {
        return (body.to_string(), None);
    };
    let shared = SharedBody::new(Value::Object(rest).to_string());
    let mut stored = body.clone();
    stored["report"] = serde_json::json!({SHARED: shared.digest, "invocations": invocations});
    (stored.to_string(), Some(shared))
}

/// Bytes of kept filter reports: 4 MiB (a report is ≈ 10 KB in memory).
pub const REPORT_CACHE_BYTES: usize = 4 << 20;

/// Filter reports with the default options, kept by guarantee and relation.
///
/// A filter's guarantee is the budget's (G_{μ_B} ⊗ f_{0,δ_B}) until spending passes it, so every
/// charge on a dataset reports the same figures; only the count of invocations differs. A report is
/// a pure function of (μ, δ, relation, options, invocations) ([`Report::build`]), so the kept
/// report with its count replaced is exactly the one that would be built: this is a memo, not an
/// approximation. Other options are built each time.
#[derive(Clone)]
struct FilterReports(Arc<Mutex<ByteCache<ReportKey, Arc<Report>>>>);

/// A filter guarantee's parameters ([`crate::accountant::certificate::FilterGuarantee::key`]) and
/// the neighbouring relation.
type ReportKey = (u64, u64, NeighboringRelation);

impl FilterReports {
    fn new() -> Self {
        FilterReports(Arc::new(Mutex::new(ByteCache::new(REPORT_CACHE_BYTES))))
    }

    /// [`filter_report`], kept when `opts` are the defaults.
    fn get(
        &self,
        f: &FilterState,
        budget: &Budget,
        relation: NeighboringRelation,
        opts: &ReportOptions,
    ) -> Report {
        if *opts != *DEFAULT_REPORT_OPTIONS {
            return filter_report(f, budget, relation, opts);
        }
        let (mu, delta) = budget.guarantee(f).key();
        let key = (mu, delta, relation);
        let kept = self.0.lock().expect("filter reports").get(&key);
        let mut report = match kept {
            Some(r) => (*r).clone(),
            None => {
                let r = filter_report(f, budget, relation, opts);
                let bytes = report_bytes(&r);
                self.0
                    .lock()
                    .expect("filter reports")
                    .insert(key, Arc::new(r.clone()), bytes);
                r
            }
        };
        report.invocations = f.units().max(0) as u64;
        report
    }
}

/// The default report options, built once.
static DEFAULT_REPORT_OPTIONS: std::sync::LazyLock<ReportOptions> =
    std::sync::LazyLock::new(ReportOptions::default);

/// A report's size in memory, roughly (its lists dominate).
fn report_bytes(r: &Report) -> usize {
    std::mem::size_of::<Report>()
        + 64 * (r.epsilon.len() + r.delta.len() + r.tradeoff.len() + r.tier2.rows.len())
}

/// Why the gate refused `unit`: the dataset's budget (`quota = None`) or the caller's share. The
/// figures are the dataset's either way; the reason names the share's.
fn rejection(gate: &Gate, unit: Certificate, quota: Option<String>, why: Exceeded) -> Rejection {
    let (budget, f) = (&gate.budget, &gate.state);
    let (mu_sq, delta_after) = f.sums_with(&unit);
    let mu_after = Some(filter::sqrt_up(mu_sq)).filter(|m| m.is_finite());
    let share = gate.share.as_ref().filter(|_| quota.is_some());
    let reason = match (why, share) {
        (Exceeded::Mu, Some(s)) => format!(
            "the unit's mu ({:.6}) does not fit the remaining mu ({:.6}) of the quota {:?} \
             (mu {}, spent {:.6})",
            unit.mu(),
            s.budget.remaining_mu(&s.state),
            s.holder,
            s.budget.mu(),
            s.state.mu()
        ),
        (Exceeded::Delta, Some(s)) => format!(
            "the unit's delta ({:e}) does not fit the remaining delta ({:e}) of the quota {:?} \
             (delta {:e})",
            unit.delta(),
            s.budget.remaining_delta(&s.state),
            s.holder,
            s.budget.delta()
        ),
        (why, None) => dataset_reason(budget, f, &unit, mu_after, why),
    };
    Rejection {
        mu_after,
        delta_after,
        mu_budget: budget.mu(),
        delta_budget: budget.delta(),
        mu_spent: f.mu(),
        delta_spent: f.delta(),
        remaining_mu: budget.remaining_mu(f),
        remaining_delta: budget.remaining_delta(f),
        unit,
        quota,
        dataset_id: None,
        reason,
    }
}

fn dataset_reason(
    budget: &Budget,
    f: &FilterState,
    unit: &Certificate,
    mu_after: Option<f64>,
    why: Exceeded,
) -> String {
    match why {
        Exceeded::Mu => format!(
            "the unit's mu ({:.6}) does not fit the remaining mu ({:.6}): sqrt(sum of mu_i^2) would \
             be {} > budget {}",
            unit.mu(),
            budget.remaining_mu(f),
            mu_after.map_or("inf".into(), |m| format!("{m:.6}")),
            budget.mu()
        ),
        Exceeded::Delta => format!(
            "the unit's delta ({:e}) does not fit the remaining delta ({:e}) of the budget {:e}",
            unit.delta(),
            budget.remaining_delta(f),
            budget.delta()
        ),
    }
}

impl Ledgers {
    /// The service over a store.
    pub fn new(store: Arc<dyn Store>) -> Self {
        let admission = Arc::new(admission::Admission::new(
            admission::AdmissionConfig::default(),
        ));
        Ledgers {
            compositions: compositions::Compositions::new(
                store.clone(),
                admission.clone(),
                STATE_CACHE_BYTES,
            ),
            composition_bytes: STATE_CACHE_BYTES,
            store,
            locks: Mutex::new(HashMap::new()),
            gates: Mutex::new(ByteCache::new(GATE_CACHE_BYTES)),
            reports: FilterReports::new(),
            oidc: None,
            admission,
            partitionings: Mutex::new(ByteCache::new(PARTITIONING_CACHE_BYTES)),
            runs: Mutex::new(ByteCache::new(units::RUN_CACHE_BYTES)),
            created: partition::CreationLimit::default(),
            no_legacy_keys: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// Refuses a single-ledger spend (a charge, a run) on a partitioned dataset or on a block:
    /// those are charged through [`Ledgers::charge_many`], which names the blocks, checks
    /// retention and creates blocks on first use. [`Ledgers::partitioning_of`] keeps the answer,
    /// so the common case reads the store once per dataset.
    async fn single_ledger(&self, id: &str) -> Result<(), LedgerError> {
        let refuse = |what: &str| {
            Err(LedgerError::Invalid(
                "path.id".into(),
                format!(
                    "{what}: charge it with POST /v1/charges, naming the blocks the query reads \
                     ({{\"datasets\": [{{\"id\": ..., \"blocks\" or \"time_range\": ...}}]}})"
                ),
            ))
        };
        if let Some((parent, _)) = partition::split_block_id(id) {
            return refuse(&format!(
                "{id:?} is a block of the partitioned dataset {parent:?}"
            ));
        }
        let partitioned = self.partitioning_of(id).await?.is_some();
        if partitioned {
            return refuse(&format!("dataset {id:?} is partitioned"));
        }
        Ok(())
    }

    /// Limits heavy accountant work as `config` says (default: see [`admission::AdmissionConfig`]).
    pub fn with_admission(mut self, config: admission::AdmissionConfig) -> Self {
        self.admission = Arc::new(admission::Admission::new(config));
        let bytes = self.composition_bytes;
        self.with_state_cache_bytes(bytes)
    }

    /// Keeps at most `bytes` of exact compositions (default [`STATE_CACHE_BYTES`]; tests use 0
    /// to make every report start from the stored snapshot).
    #[doc(hidden)]
    pub fn with_state_cache_bytes(mut self, bytes: usize) -> Self {
        self.composition_bytes = bytes;
        self.compositions =
            compositions::Compositions::new(self.store.clone(), self.admission.clone(), bytes);
        self
    }

    /// Also accepts JWTs from an identity provider as bearer tokens.
    pub fn with_oidc(mut self, oidc: Arc<oidc::Oidc>) -> Self {
        self.oidc = Some(oidc);
        self
    }

    /// Whether the store answers.
    pub async fn ready(&self) -> Result<(), LedgerError> {
        self.store.ping().await.map_err(LedgerError::from)
    }

    fn lock_for(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.locks.lock().expect("lock map");
        m.entry(id.to_owned()).or_default().clone()
    }

    /// The dataset's write lock. A writer that cannot take it at once checks that the store
    /// answers before queueing: during an outage the holder is itself waiting for the store, and
    /// queueing would turn each request's pool timeout into a sum of them (503s arriving after
    /// 3 s, 6 s, 9 s…). So a request fails within one store timeout, and never waits longer than
    /// [`MAX_LOCK_WAIT`] ([`LedgerError::Busy`], 503 with Retry-After).
    async fn lock(&self, id: &str) -> Result<tokio::sync::OwnedMutexGuard<()>, LedgerError> {
        let lock = self.lock_for(id);
        if let Ok(g) = lock.clone().try_lock_owned() {
            return Ok(g);
        }
        let mut waiting = std::pin::pin!(lock.lock_owned());
        tokio::select! {
            g = &mut waiting => return Ok(g),
            _ = tokio::time::sleep(LOCK_PATIENCE) => {}
        }
        self.store.ping().await?;
        tokio::time::timeout(MAX_LOCK_WAIT, waiting)
            .await
            .map_err(|_| LedgerError::Busy)
    }

    /// A dataset row, converted to the filter if it was written by schema version 1.
    async fn row(&self, id: &str) -> Result<DatasetRow, LedgerError> {
        let row = self
            .store
            .get_dataset(id)
            .await?
            .ok_or_else(|| LedgerError::NotFound(id.to_owned()))?;
        if row.mu_sq_spent.is_some() {
            return Ok(row);
        }
        self.convert(row).await
    }

    /// Converts a version-1 ledger: every charge becomes a unit with its certificate (the δ rule of
    /// new charges, at the dataset's budget), summed without gating — they happened. A ledger whose
    /// old charges exceed the budget under the filter is then exhausted, which is the truth.
    async fn convert(&self, row: DatasetRow) -> Result<DatasetRow, LedgerError> {
        let _guard = self.lock(&row.id).await?;
        let entries = self
            .store
            .list_entries(&row.id, Some("charge"), 0, i64::MAX)
            .await?;
        let (relation, h, budget) = (relation_of(&row)?, grid_step_of(&row)?, budget_of(&row)?);
        let id = row.id.clone();
        let conversion = blocking(&self.admission, admission::Cost::Heavy, move || {
            let (mut mu_sq, mut delta) = (0.0_f64, 0.0_f64);
            let mut certificates = Vec::with_capacity(entries.len());
            for e in &entries {
                let path = crate::accountant::json::JsonPath::root().field("event");
                let ev = e
                    .event
                    .as_deref()
                    .and_then(|t| serde_json::from_str::<Value>(t).ok())
                    .ok_or_else(|| {
                        LedgerError::Corrupt(
                            id.clone(),
                            format!("charge {}: event unreadable", e.seq),
                        )
                    })?;
                let ev = input::parse_event(&ev, &path).map_err(|x| {
                    LedgerError::Corrupt(id.clone(), format!("charge {}: {x}", e.seq))
                })?;
                let c =
                    certify(&ev, relation, h, unit_delta(&budget, None), &path).map_err(|x| {
                        LedgerError::Corrupt(id.clone(), format!("charge {}: {x}", e.seq))
                    })?[0];
                mu_sq = crate::accountant::rounding::add_up(
                    mu_sq,
                    crate::accountant::rounding::mul_up(c.mu(), c.mu()),
                );
                delta = crate::accountant::rounding::add_up(delta, c.delta());
                certificates.push((e.seq, c.mu(), c.delta()));
            }
            let f = FilterState::from_stored(
                mu_sq,
                delta.min(1.0 - f64::EPSILON),
                certificates.len() as i64,
            )
            .map_err(|x| LedgerError::Corrupt(id.clone(), x))?;
            Ok(Conversion {
                mu_spent: f.mu(),
                mu_sq_spent: f.mu_sq(),
                delta_spent: f.delta(),
                units: f.units(),
                certificates,
            })
        })
        .await?;
        match self.store.convert(&row.id, row.version, &conversion).await {
            // Someone else converted it (or appended) meanwhile: read what is there now.
            Ok(()) | Err(StoreError::VersionConflict) => {}
            Err(e) => return Err(e.into()),
        }
        tracing::info!(dataset_id = %row.id, units = conversion.units, "converted a version-1 ledger to the adaptive filter");
        let row = self
            .store
            .get_dataset(&row.id)
            .await?
            .ok_or_else(|| LedgerError::NotFound(row.id.clone()))?;
        if row.mu_sq_spent.is_none() {
            return Err(LedgerError::Busy);
        }
        Ok(row)
    }

    /// Appends `entry` at `version + 1` (the store's compare-and-swap) with `update`, and keeps
    /// the cache current. `Ok(false)` when another writer (a replica) appended first or took the
    /// idempotency key: the caller re-reads and tries again.
    async fn append(
        &self,
        id: &str,
        version: i64,
        entry: &EntryRow,
        update: &DatasetUpdate,
    ) -> Result<bool, LedgerError> {
        let result = self.store.append(id, version, entry, update).await;
        self.keep(id, version, update, &result);
        match result {
            Ok(_) => Ok(true),
            Err(StoreError::VersionConflict) | Err(StoreError::DuplicateKey) => Ok(false),
            Err(StoreError::NotFound) => Err(LedgerError::NotFound(id.to_owned())),
            Err(e) => Err(e.into()),
        }
    }

    /// The caches after an append at `version + 1` with `update` that ended in `result` (or is
    /// queued and assumed to succeed: [`Ledgers::forget`] undoes that if not).
    fn keep(
        &self,
        id: &str,
        version: i64,
        update: &DatasetUpdate,
        result: &Result<i64, StoreError>,
    ) {
        // Kept gate inputs stay only if they described the version appended on: then they move
        // to the next version exactly as the store's row did. Anything else drops them.
        {
            let mut gates = self.gates.lock().expect("gate inputs");
            let key = id.to_owned();
            match (&result, gates.get(&key)) {
                (Ok(_), Some(g)) if g.row.version == version => {
                    let (row, quotas) = update.applied(&g.row, &g.quotas);
                    let next = Arc::new(GateInputs {
                        row,
                        quotas,
                        legacy_keys: g.legacy_keys,
                    });
                    let size = next.bytes();
                    gates.insert(key, next, size);
                }
                _ => gates.remove(&key),
            }
        }
    }

    /// Certificates of a unit this process does not hold, read from the store into the memo
    /// (this build certified it before: another replica of it, or this process before a
    /// restart), so the gate does not certify it again. `Some(key)` when the store has none
    /// either: where to keep them once certified ([`Ledgers::persist_certificates`]). The table is
    /// as trusted as the rest of the database; `audit verify` certifies every unit afresh.
    async fn recall_certificates(
        &self,
        event: &Event,
        (relation, h): (NeighboringRelation, GridStep),
        rule: UnitDelta,
        asked: &mut std::collections::HashSet<String>,
    ) -> Option<String> {
        if analytic(event, relation) || certificates::known(event, relation, h, rule) {
            return None;
        }
        let key = certificates::stored_key(event, relation, h, rule)?;
        // Once per unit in a request (a charge on 365 blocks asks once).
        if !asked.insert(key.clone()) {
            return None;
        }
        match self.store.get_certificates(&key).await {
            Ok(Some(v)) if certificates::recall(event, relation, h, rule, &v) => {
                metrics::counter!("privacy_ledger_certificates_recalled_total").increment(1);
                self.verify_recalled(event.clone(), (relation, h), rule, key, v);
                None
            }
            _ => Some(key),
        }
    }

    /// Certifies a recalled unit again in the background (numerical work at low priority) and
    /// compares: a stored row that differs from what this build computes was edited outside the
    /// service. Then the memo and the row get the computed certificates, and the mismatch is
    /// logged and counted (`privacy_ledger_certificates_mismatch_total`); units admitted on the
    /// edited row in the meantime are named in the log. When the check cannot run (the engine is
    /// busy) the unit leaves the memo, so its next charge certifies it before the gate.
    fn verify_recalled(
        &self,
        event: Event,
        (relation, h): (NeighboringRelation, GridStep),
        rule: UnitDelta,
        key: String,
        stored: String,
    ) {
        let (store, admission) = (self.store.clone(), self.admission.clone());
        tokio::spawn(async move {
            let ev = event.clone();
            let fresh = blocking(&admission, admission::Cost::Heavy, move || {
                let path = crate::accountant::json::JsonPath::root().field("event");
                Ok(certify(&ev, relation, h, rule, &path)?)
            })
            .await;
            let fresh = match fresh {
                Ok(c) => c,
                Err(e) => {
                    tracing::info!(error = %e, "a recalled certificate was not checked: dropped");
                    certificates::forget(&event, relation, h, rule);
                    return;
                }
            };
            let recalled: Option<Vec<Certificate>> = serde_json::from_str(&stored).ok();
            if recalled.as_ref() == Some(&fresh) {
                return;
            }
            metrics::counter!("privacy_ledger_certificates_mismatch_total").increment(1);
            tracing::error!(
                stored = %stored, computed = ?fresh, event = %event.to_json(),
                "a stored certificate differs from this build's: the certificates table was \
                 edited outside the service; units of this event admitted since the recall \
                 carry the stored figure (audit their datasets)"
            );
            let value = serde_json::to_string(&fresh).unwrap_or_default();
            certificates::recall(&event, relation, h, rule, &value);
            let _ = store.put_certificates(&key, &value).await;
        });
    }

    /// Keeps a unit's certificates in the store, in the background (a failure only costs a
    /// certification after the next restart).
    fn persist_certificates(&self, key: String, candidates: &[Certificate]) {
        let Ok(value) = serde_json::to_string(candidates) else {
            return;
        };
        let store = self.store.clone();
        tokio::spawn(async move {
            if let Err(e) = store.put_certificates(&key, &value).await {
                tracing::debug!(error = %e, "certificates not kept");
            }
        });
    }

    /// After an append at `version` that added a unit (`analytic`: a closed-form one) to dataset
    /// `id`: its exact composition is caught up in the background — soon after every numerical
    /// unit, so a report finds it current, and every [`compositions::SNAPSHOT_UNITS`] versions
    /// on closed-form ledgers (a report composes their tail in microseconds per unit), so the
    /// stored snapshot keeps up.
    fn composed_later(&self, id: &str, version: i64, analytic: bool) {
        if !analytic || version % compositions::SNAPSHOT_UNITS == 0 {
            self.compositions.nudge(id);
        }
    }

    /// Drops what is kept of dataset `id` (a queued append failed: what was kept assumed it).
    fn forget(&self, id: &str) {
        self.gates
            .lock()
            .expect("gate inputs")
            .remove(&id.to_owned());
    }

    /// Creates a dataset with an empty ledger. A retry of the same creation (same body) returns the
    /// dataset with `created = false`; another body for an existing id is
    /// [`LedgerError::AlreadyExists`].
    pub async fn create_dataset(
        &self,
        actor: &Actor,
        d: NewDataset,
    ) -> Result<(DatasetView, bool), LedgerError> {
        actor.principal.may(Action::Administer)?;
        let f = FilterState::empty();
        let row = empty_row(
            d.id.clone(),
            d.description,
            d.neighboring_relation.as_str(),
            (d.budget, d.grid_step, d.cap),
            Some(d.request_hash.clone()),
        );
        let state = Composition::new(d.neighboring_relation, d.grid_step).to_bytes();
        let partitioning = d
            .partitioning
            .as_ref()
            .map(partition::Partitioning::to_json);
        let created = DatasetView {
            partitioning: partitioning.clone(),
            ..view(&row, &f)?
        };
        let audit = audit::draft(actor, "dataset.created", Some(&d.id), Some(&d.id))
            .after(&created)
            .done();
        let stored = partitioning.as_ref().map(Value::to_string);
        match self
            .store
            .create_dataset(&row, &state, stored.as_deref(), Some(&audit))
            .await
        {
            Ok(()) => Ok((created, true)),
            Err(StoreError::AlreadyExists) => {
                let existing = self.row(&d.id).await?;
                if existing.create_hash.as_deref() == Some(d.request_hash.as_str()) {
                    Ok((
                        DatasetView {
                            partitioning,
                            ..view(&existing, &filter_of(&existing)?)?
                        },
                        false,
                    ))
                } else {
                    Err(LedgerError::AlreadyExists(d.id))
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// One dataset.
    pub async fn get_dataset(&self, actor: &Actor, id: &str) -> Result<DatasetView, LedgerError> {
        self.authorize(actor, id, Action::Read).await?;
        let row = self.row(id).await?;
        let partitioning = match partition::split_block_id(id) {
            Some(_) => None,
            None => self.partitioning_of(id).await?.map(|p| p.to_json()),
        };
        let mut v = view(&row, &filter_of(&row)?)?;
        // The composition now (kept current in the background); when it cannot be had now
        // (the engine is busy, the computation ran out of time), the stored snapshot's, with its
        // version: a display figure never fails the dataset's view.
        match self.compositions.mu_at(&row, row.budget_delta).await {
            Ok((c, mu)) => (v.exact_composition_mu, v.exact_composition_version) = (mu, c.version),
            Err(e @ LedgerError::NotFound(_)) => return Err(e),
            Err(e) => {
                tracing::info!(dataset_id = %id, error = %e, "exact composition not current");
            }
        }
        Ok(DatasetView { partitioning, ..v })
    }

    /// Datasets by id after `after` that `actor` may see (all of them with a global role, else
    /// those it holds a grant on); returns the page and the cursor of the next one.
    pub async fn list_datasets(
        &self,
        actor: &Actor,
        after: Option<&str>,
        limit: i64,
    ) -> Result<(Vec<DatasetView>, Option<String>), LedgerError> {
        let p = &actor.principal;
        let grantee = (!p.sees_all()).then_some(p.name.as_str());
        let rows = self.store.list_datasets(after, limit + 1, grantee).await?;
        let more = rows.len() as i64 > limit;
        let mut items = Vec::with_capacity(rows.len());
        for r in rows.into_iter().take(limit as usize) {
            let r = if r.mu_sq_spent.is_some() {
                r
            } else {
                self.convert(r).await?
            };
            items.push(view(&r, &filter_of(&r)?)?);
        }
        let next = if more {
            items.last().map(|d: &DatasetView| d.id.clone())
        } else {
            None
        };
        Ok((items, next))
    }

    /// Changes the budget (recorded as a ledger entry; idempotent with a key).
    pub async fn update_budget(
        &self,
        actor: &Actor,
        id: &str,
        patch: BudgetPatch,
    ) -> Result<Value, LedgerError> {
        self.authorize(actor, id, Action::Administer).await?;
        self.row(id).await?;
        let budget = patch.budget;
        let key = keys::IdemKey::of(
            &actor.principal,
            keys::Operation::Budget,
            id,
            patch.idempotency_key.as_ref(),
        );
        let (budget, key, patch) = (&budget, &key, &patch);
        let plan = move |row: DatasetRow| -> write::PlanFuture<'_, Value> {
            Box::pin(async move {
                let f = filter_of(&row)?;
                let quotas = self.store.list_quotas(id).await?;
                quotas::budget_holds_quotas(&row, &quotas, budget)?;
                if let Some(cap) = cap_of(&row)? {
                    if budget.mu() > cap.mu() || budget.delta() > cap.delta() {
                        return Err(LedgerError::CapExceeded(format!(
                            "the budget (mu {}, delta {:e}) may not pass the cap fixed when the \
                         dataset was created (mu {}, delta {:e}): the ledger's statement at the \
                         cap rests on it",
                            budget.mu(),
                            budget.delta(),
                            cap.mu(),
                            cap.delta()
                        )));
                    }
                }
                let ts = now();
                let mut after = row.clone();
                (after.budget_mu, after.budget_delta) = (budget.mu(), budget.delta());
                // The high-water mark never moves down: lowering restricts what may be spent from
                // now on, not what was possible before.
                (after.mu_max, after.delta_max) = (
                    row.mu_max.max(budget.mu()),
                    row.delta_max.max(budget.delta()),
                );
                after.version += 1;
                after.updated_at = ts.clone();
                let body = serde_json::to_value(view(&after, &f)?)
                    .map_err(|e| LedgerError::Internal(e.to_string()))?;
                let entry = EntryRow {
                    budget_mu: Some(budget.mu()),
                    budget_delta: Some(budget.delta()),
                    idempotency_key: key.as_ref().map(|k| k.stored().to_owned()),
                    request_hash: Some(patch.request_hash.clone()),
                    response: Some(body.to_string()),
                    principal: Some(actor.principal.name.clone()),
                    ..EntryRow::new("budget", ts.clone())
                };
                let update = DatasetUpdate {
                    budget_mu: budget.mu(),
                    budget_delta: budget.delta(),
                    mu_max: after.mu_max,
                    delta_max: after.delta_max,
                    audit: Some(
                        audit::draft(actor, "budget.changed", Some(id), Some(id))
                            .before(&budget_of(&row)?)
                            .after(&budget)
                            .done(),
                    ),
                    ..unchanged(&row, &f, ts)
                };
                Ok(write::Plan::Append {
                    entry: Box::new(entry),
                    update: Box::new(update),
                    answer: body,
                })
            })
        };
        Ok(
            match self
                .write(id, key.as_ref(), &patch.request_hash, plan)
                .await?
            {
                write::Written::Planned(body, _) | write::Written::Replayed(body) => body,
            },
        )
    }

    /// The stored outcome of an earlier request with this idempotency key (in its scope: the same
    /// principal, operation and target, [`keys`]), or an error if the key was used for another
    /// request (another body). A unit's outcome answers the unit's status now ([`Ledgers::now_of`]).
    async fn replay(
        &self,
        id: &str,
        key: Option<&keys::IdemKey>,
        request_hash: &str,
    ) -> Result<Option<Value>, LedgerError> {
        let Some(key) = key else {
            return Ok(None);
        };
        let e = match self.store.find_entry_by_key(id, key.stored()).await? {
            Some(e) => e,
            None => {
                // An entry written before keys were scoped: this client's only if it recorded
                // this principal, or none and the caller is a global admin (and its key is not
                // itself a scoped one).
                match self.store.find_entry_by_key(id, key.legacy()).await? {
                    Some(e)
                        if key.may_replay_legacy(e.principal.as_deref())
                            && e.idempotency_key.as_deref().is_some_and(keys::is_legacy) =>
                    {
                        e
                    }
                    _ => return Ok(None),
                }
            }
        };
        if e.request_hash.as_deref() != Some(request_hash) {
            return Err(LedgerError::IdempotencyKeyReused(key.raw().to_owned()));
        }
        let body = self.stored_body(&e).await?;
        self.now_of(id, body).await.map(Some)
    }

    /// A replayed outcome with its unit's status as it is now: a unit reserved (or started) by the
    /// original request may since have been started, committed or released. A released unit's
    /// outcome is an error ([`LedgerError::UnitReleased`]): a retried job must not run on budget
    /// that was refunded (and may have been spent again).
    async fn now_of(&self, id: &str, mut body: Value) -> Result<Value, LedgerError> {
        let open = |s: &str| matches!(s, "reserved" | "started");
        let Some(charge_id) = body
            .get("charge")
            .filter(|c| c.get("status").and_then(Value::as_str).is_some_and(open))
            .and_then(|c| c.get("id"))
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return Ok(body);
        };
        let charge = self
            .store
            .find_charge(id, &charge_id)
            .await?
            .ok_or_else(|| LedgerError::Corrupt(id.to_owned(), format!("charge {charge_id}")))?;
        let status = charge.status.unwrap_or_else(|| "committed".into());
        body["charge"]["status"] = Value::String(status.clone());
        if status == "released" {
            return Err(LedgerError::UnitReleased {
                charge: charge_id,
                view: Box::new(body["charge"].clone()),
            });
        }
        Ok(body)
    }

    /// An entry's stored response, with its shared parts put back.
    async fn stored_body(&self, e: &EntryRow) -> Result<Value, LedgerError> {
        let unreadable = || LedgerError::Internal("stored outcome unreadable".into());
        let mut body: Value = e
            .response
            .as_deref()
            .and_then(|r| serde_json::from_str(r).ok())
            .ok_or_else(unreadable)?;
        // A response kept whole for every ledger of a multi-ledger charge ([`multi`]).
        if let Some(digest) = body.get(multi::SHARED_BODY).and_then(Value::as_str) {
            let text = self
                .store
                .shared_body(digest)
                .await?
                .ok_or_else(unreadable)?;
            return serde_json::from_str(&text).map_err(|_| unreadable());
        }
        // A report stored once for many charges ([`stored_response`]): put back in place.
        let shared = body.get("report").and_then(|r| {
            Some((
                r.get(SHARED)?.as_str()?.to_owned(),
                r.get("invocations")?.clone(),
            ))
        });
        if let Some((digest, invocations)) = shared {
            let text = self
                .store
                .shared_body(&digest)
                .await?
                .ok_or_else(unreadable)?;
            let mut report: Value = serde_json::from_str(&text).map_err(|_| unreadable())?;
            report
                .as_object_mut()
                .ok_or_else(unreadable)?
                .insert("invocations".into(), invocations);
            body["report"] = report;
        }
        Ok(body)
    }

    /// Gates and, if admitted, appends a charge. See the module docs.
    #[tracing::instrument(skip(self, actor, req), fields(dataset_id = %id))]
    pub async fn charge(
        &self,
        actor: &Actor,
        id: &str,
        req: ChargeRequest,
    ) -> Result<ChargeOutcome, LedgerError> {
        self.authorize(actor, id, Action::Spend).await?;
        self.single_ledger(id).await?;
        let key = keys::IdemKey::of(
            &actor.principal,
            keys::Operation::Charge,
            id,
            req.idempotency_key.as_ref(),
        );
        let unit = UnitRequest {
            event_json: req.event.to_json(),
            event: req.event,
            delta: req.delta,
            label: req.label,
            metadata: req.metadata,
            idempotency_key: key,
            request_hash: req.request_hash,
            reserve: req.reserve,
            run: None,
            on_behalf: None,
        };
        self.admit(actor, id, unit).await
    }

    /// The gate of a unit charged by `holder` on `row`: the dataset's filter and, when the
    /// dataset has quotas, the holder's share (with its stored row).
    fn gate_for(
        row: &DatasetRow,
        quotas: &[crate::store::QuotaRow],
        holder: &str,
    ) -> Result<(Gate, Option<crate::store::QuotaRow>), LedgerError> {
        let share = quotas::share_for(row, quotas, holder)?;
        let (share, quota_row) = match share {
            Some((s, q)) => (Some(s), Some(q)),
            None => (None, None),
        };
        Ok((
            Gate {
                budget: budget_of(row)?,
                state: filter_of(row)?,
                share,
            },
            quota_row,
        ))
    }

    /// The gate of a unit charged by `holder` on `row`, with the dataset's quotas read now.
    async fn gate_now(
        &self,
        row: &DatasetRow,
        holder: &str,
    ) -> Result<(Gate, Option<crate::store::QuotaRow>), LedgerError> {
        Self::gate_for(row, &self.store.list_quotas(&row.id).await?, holder)
    }

    /// Refuses to write on a ledger whose stored state is not the one its audit log last stated
    /// ([`crate::store::LedgerState`], written in the same transaction as every change): a reset
    /// `mu_sq_spent`, a rolled-back row or an edited budget would otherwise let the gate admit
    /// past the budget. Ledgers whose last change predates audited states are not checked.
    async fn check_state(&self, row: &DatasetRow) -> Result<(), LedgerError> {
        use crate::store::LedgerState;
        let Some(rec) = self.store.last_state_audit(&row.id).await? else {
            // None stated: fine for a ledger not written since states were audited; one that was
            // must have its records (a deleted chain hides nothing).
            if row.states_from.is_some_and(|v| row.version >= v) {
                return Err(LedgerError::StateCorrupt(
                    row.id.clone(),
                    format!(
                        "it is at version {} but its audit log states none of its states since \
                         version {} (its audit chain was deleted outside the service)",
                        row.version,
                        row.states_from.unwrap_or(0)
                    ),
                ));
            }
            return Ok(());
        };
        let (Some(stated), Some(stored)) =
            (LedgerState::of_audit(&rec.draft), LedgerState::of_row(row))
        else {
            return Ok(());
        };
        // The row is read first: a newer audited state is another writer's append since (a
        // replica), which the append's compare-and-swap will see; the same version must match in
        // every field, and an older one means the row moved without an audited change.
        if stated.version > stored.version {
            return Ok(());
        }
        if stated != stored {
            return Err(LedgerError::StateCorrupt(
                row.id.clone(),
                format!(
                    "its stored state {stored:?} is not the state its audit log last recorded \
                     (record {} of its chain: {stated:?}); it was changed outside the service, \
                     so nothing is admitted on it until an operator restores it \
                     (`privacy-ledger audit verify` lists the differences)",
                    rec.seq
                ),
            ));
        }
        Ok(())
    }

    /// What the gate of dataset `id` reads (its row and quotas), as the store has it now; kept
    /// for the next charge ([`Ledgers::append`] keeps it current).
    async fn gate_inputs(&self, id: &str) -> Result<Arc<GateInputs>, LedgerError> {
        let row = self.row(id).await?;
        self.check_state(&row).await?;
        let quotas = self.store.list_quotas(id).await?;
        let known_clean = self
            .no_legacy_keys
            .lock()
            .expect("legacy keys")
            .contains(id);
        let legacy_keys = !known_clean && self.store.has_legacy_keys(id).await?;
        if !legacy_keys && !known_clean {
            let mut clean = self.no_legacy_keys.lock().expect("legacy keys");
            // Bounded: forgetting only costs a query.
            if clean.len() >= 1 << 20 {
                clean.clear();
            }
            clean.insert(id.to_owned());
        }
        let inputs = Arc::new(GateInputs {
            row,
            quotas,
            legacy_keys,
        });
        let bytes = inputs.bytes();
        self.gates
            .lock()
            .expect("gate inputs")
            .insert(id.to_owned(), inputs.clone(), bytes);
        Ok(inputs)
    }

    /// Gates a unit and, if admitted, appends it (with metrics).
    ///
    /// The first attempt gates on the row and quotas kept from this process's last write to the
    /// dataset ([`GateInputs`]), without reading the store: the append's compare-and-swap on the
    /// version makes that exact — it succeeds only if the ledger is still at the version those
    /// inputs describe — and the idempotency key's unique index refuses a replayed key. Any
    /// other outcome (a conflict, a duplicate key, or a rejection, which must not rest on inputs
    /// that may be stale) starts over from the store, replay check first.
    ///
    /// Where the store queues appends in order ([`Store::append_queued`], SQLite), the dataset's
    /// lock is released once the append is queued, with the kept inputs already moved past it:
    /// the next charge gates on them and queues behind it, so successive charges of one dataset
    /// share a commit. Still exact: each append's compare-and-swap expects the version its
    /// predecessor writes, so if one fails every one queued after it on that dataset fails too
    /// and starts over (the kept inputs are dropped). Nothing is answered before it is durable.
    async fn admit(
        &self,
        actor: &Actor,
        id: &str,
        unit: UnitRequest,
    ) -> Result<ChargeOutcome, LedgerError> {
        let started = Instant::now();
        let cached = self.gates.lock().expect("gate inputs").get(&id.to_owned());
        if cached.is_none() {
            // Converts a version-1 ledger first (under the same lock, so not inside it).
            self.row(id).await?;
        }
        let result = async {
            let mut from_cache = true;
            let mut conflicts = 0;
            for _ in 0..MAX_ATTEMPTS {
                if !from_cache {
                    back_off(conflicts).await;
                    conflicts += 1;
                }
                let guard = self.lock(id).await?;
                // Taken under the lock: a read before may have been superseded.
                let cached = from_cache
                    .then(|| self.gates.lock().expect("gate inputs").get(&id.to_owned()))
                    .flatten()
                    .filter(|g| !(g.legacy_keys && unit.idempotency_key.is_some()));
                let (inputs, kept) = match cached {
                    Some(inputs) => (inputs, true),
                    None => {
                        let key = unit.idempotency_key.as_ref();
                        if let Some(body) = self.replay(id, key, &unit.request_hash).await? {
                            return Ok(ChargeOutcome {
                                created: false,
                                body,
                            });
                        }
                        (self.gate_inputs(id).await?, false)
                    }
                };
                let (row, quotas) = (inputs.row.clone(), &inputs.quotas);
                match self
                    .admit_once(
                        actor,
                        id,
                        &unit,
                        row,
                        quotas,
                        Mode {
                            from_cache: kept,
                            queue: true,
                        },
                    )
                    .await?
                {
                    Attempt::Done(o) => return Ok(o),
                    Attempt::Retry => from_cache = false,
                    // The next charge of this dataset may gate (on the kept inputs, which
                    // already include this one) and queue while this one commits.
                    Attempt::Queued(pending, outcome) => {
                        drop(guard);
                        match pending.await {
                            Ok(_) => return Ok(outcome),
                            Err(StoreError::VersionConflict | StoreError::DuplicateKey) => {
                                self.forget(id);
                                from_cache = false;
                            }
                            Err(StoreError::NotFound) => {
                                return Err(LedgerError::NotFound(id.to_owned()))
                            }
                            Err(e) => {
                                self.forget(id);
                                return Err(e.into());
                            }
                        }
                    }
                }
            }
            Err(LedgerError::Busy)
        }
        .await;
        record_gate(id, started, &result);
        result
    }

    /// One attempt to gate and append a unit on `row` with `quotas` (the dataset's lock held);
    /// [`Attempt::Retry`] when another writer appended first or took the idempotency key, or
    /// when inputs taken `from_cache` reject the unit (the caller re-reads and tries again).
    async fn admit_once(
        &self,
        actor: &Actor,
        id: &str,
        unit: &UnitRequest,
        row: DatasetRow,
        quotas: &[crate::store::QuotaRow],
        mode: Mode,
    ) -> Result<Attempt, LedgerError> {
        let Mode { from_cache, queue } = mode;
        {
            let (gate, quota_row) = Self::gate_for(&row, quotas, &actor.principal.name)?;
            let engine = engine_of(&row)?;
            let (event, own) = (unit.event.clone(), unit.delta);
            let rule = unit_delta(&gate.budget, own);
            let unknown = self
                .recall_certificates(&event, engine, rule, &mut Default::default())
                .await;
            let g2 = gate.clone();
            let cost = gate_cost(&event, engine, &gate.budget, own);
            let g = blocking(&self.admission, cost, move || {
                gate_compute(engine, event, &g2, own)
            })
            .await?;
            if let Some(key) = unknown {
                self.persist_certificates(key, &g.candidates);
            }
            let target = unit.run.as_ref().map(|(r, c)| format!("run {r} chunk {c}"));
            let (after, share_after) = match g.verdict {
                Verdict::Admitted(after, share_after) => (after, share_after),
                // Kept inputs may be stale (a replica spent, or raised the budget): a refusal
                // is decided on the store's row only.
                Verdict::Rejected(..) if from_cache => return Ok(Attempt::Retry),
                Verdict::Rejected(by, why) => {
                    let r = rejection(&gate, g.unit, by, why);
                    let audit = audit::draft(actor, "unit.rejected", Some(id), target.as_deref())
                        .before(&serde_json::json!({
                            "mu_spent": gate.state.mu(), "delta_spent": gate.state.delta()
                        }))
                        .after(&serde_json::json!({
                            "event": unit.event_json, "unit": r.unit, "quota": r.quota,
                            "reason": r.reason
                        }))
                        .done();
                    self.store.audit(&audit).await?;
                    return Err(LedgerError::BudgetExceeded(Box::new(r)));
                }
            };
            let relation = relation_of(&row)?;
            // The filter's report is closed-form (μ-GDP of the statement and of what was spent),
            // and the same for every charge within the budget: kept. It states the budget's
            // high-water mark, not the (possibly lowered) budget.
            let reports = self.reports.clone();
            let stated = stated_budget(&row)?;
            let report = blocking(&self.admission, admission::Cost::Light, move || {
                Ok(reports.get(&after, &stated, relation, &DEFAULT_REPORT_OPTIONS))
            })
            .await?;
            let ts = now();
            let status = if unit.reserve {
                "reserved"
            } else {
                "committed"
            };
            let charge = ChargeView {
                // Time-ordered (UUIDv7: 48-bit milliseconds, then 74 random bits): a dataset's
                // new charge ids sort after its earlier ones, so the (dataset_id, charge_id)
                // index grows at its end instead of dirtying a random page per charge.
                id: uuid::Uuid::now_v7().to_string(),
                seq: row.version + 1,
                event: unit.event_json.clone(),
                label: unit.label.clone(),
                metadata: unit.metadata.clone(),
                idempotency_key: unit.idempotency_key.as_ref().map(|k| k.raw().to_owned()),
                unit: Some(g.unit),
                mu_after: Some(after.mu()),
                status: status.into(),
                run_id: unit.run.as_ref().map(|r| r.0.clone()),
                chunk: unit.run.as_ref().map(|r| r.1),
                created_at: ts.clone(),
            };
            let body = serde_json::json!({"charge": charge, "report": report});
            let (response, shared) = stored_response(&body);
            let entry = EntryRow {
                seq: charge.seq,
                charge_id: Some(charge.id.clone()),
                event: Some(charge.event.to_string()),
                label: charge.label.clone(),
                metadata: charge.metadata.as_ref().map(Value::to_string),
                idempotency_key: unit.idempotency_key.as_ref().map(|k| k.stored().to_owned()),
                request_hash: Some(unit.request_hash.clone()),
                mu_after: Some(after.mu()),
                unit_mu: Some(g.unit.mu()),
                unit_delta: Some(g.unit.delta()),
                response: Some(response),
                shared,
                run_id: charge.run_id.clone(),
                chunk: charge.chunk,
                status: Some(status.into()),
                principal: Some(actor.principal.name.clone()),
                quota: gate.share.as_ref().map(|s| s.holder.clone()),
                ..EntryRow::new("charge", ts.clone())
            };
            let reserved = row.reserved.unwrap_or(0) + i64::from(unit.reserve);
            let action = if unit.reserve {
                "unit.reserved"
            } else {
                "unit.admitted"
            };
            let audit = audit::draft(actor, action, Some(id), Some(&charge.id))
                .before(&serde_json::json!({
                    "mu_spent": gate.state.mu(), "delta_spent": gate.state.delta(),
                    "quota": gate.share.as_ref().map(|s| serde_json::json!({
                        "holder": s.holder, "mu_spent": s.state.mu(), "delta_spent": s.state.delta()
                    }))
                }))
                .after(&serde_json::json!({
                    "charge": charge, "mu_spent": after.mu(), "delta_spent": after.delta(),
                    "quota": share_after.map(|q| serde_json::json!({
                        "mu_spent": q.mu(), "delta_spent": q.delta()
                    })),
                    "for": unit.on_behalf.as_ref().map(|(owner, reason)| serde_json::json!({
                        "owner": owner, "reason": reason
                    }))
                }))
                .done();
            let update = DatasetUpdate {
                charges: row.charges + 1,
                reserved,
                quotas: match (quota_row, share_after) {
                    (Some(q), Some(s)) => vec![quotas::charged(&q, &s, &ts)],
                    _ => Vec::new(),
                },
                audit: Some(audit),
                ..unchanged(&row, &after, ts.clone())
            };
            // A reserved unit joins the exact composition only when committed.
            let composed = (!unit.reserve).then(|| analytic(&unit.event, engine.0));
            if queue {
                let queued = self.store.append_queued(id, row.version, &entry, &update);
                if let Some(pending) = queued {
                    self.keep(id, row.version, &update, &Ok(row.version + 1));
                    if let Some(a) = composed {
                        self.composed_later(id, row.version + 1, a);
                    }
                    let outcome = ChargeOutcome {
                        created: true,
                        body,
                    };
                    return Ok(Attempt::Queued(pending, outcome));
                }
            }
            let appended = self.append(id, row.version, &entry, &update).await?;
            if let (true, Some(a)) = (appended, composed) {
                self.composed_later(id, row.version + 1, a);
            }
            Ok(if appended {
                Attempt::Done(ChargeOutcome {
                    created: true,
                    body,
                })
            } else {
                Attempt::Retry
            })
        }
    }

    /// What a charge would do, with nothing written.
    pub async fn preview(
        &self,
        actor: &Actor,
        id: &str,
        req: ChargeRequest,
    ) -> Result<Preview, LedgerError> {
        self.authorize(actor, id, Action::Spend).await?;
        self.single_ledger(id).await?;
        let row = self.row(id).await?;
        let (gate, _) = self.gate_now(&row, &actor.principal.name).await?;
        let (budget, filter) = (gate.budget, gate.state);
        let stated = stated_budget(&row)?;
        let engine = engine_of(&row)?;
        let relation = engine.0;
        let cost = gate_cost(&req.event, engine, &budget, req.delta);
        let reports = self.reports.clone();
        blocking(&self.admission, cost, move || {
            let g = gate_compute(engine, req.event, &gate, req.delta)?;
            let opts = &*DEFAULT_REPORT_OPTIONS;
            Ok(match g.verdict {
                Verdict::Admitted(after, _) => Preview {
                    admitted: true,
                    unit: g.unit,
                    mu_after: Some(after.mu()),
                    delta_after: after.delta(),
                    mu_budget: budget.mu(),
                    delta_budget: budget.delta(),
                    reason: None,
                    report: reports.get(&after, &stated, relation, opts),
                },
                Verdict::Rejected(by, why) => {
                    let r = rejection(&gate, g.unit, by, why);
                    Preview {
                        admitted: false,
                        unit: g.unit,
                        mu_after: r.mu_after,
                        delta_after: r.delta_after,
                        mu_budget: budget.mu(),
                        delta_budget: budget.delta(),
                        reason: Some(r.reason),
                        report: reports.get(&filter, &stated, relation, opts),
                    }
                }
            })
        })
        .await
    }

    /// Ledger entries (charges and budget changes) with seq > `after`, in order.
    pub async fn list_entries(
        &self,
        actor: &Actor,
        id: &str,
        after: i64,
        limit: i64,
    ) -> Result<(Vec<EntryView>, Option<i64>), LedgerError> {
        self.authorize(actor, id, Action::Read).await?;
        self.row(id).await?;
        // Another principal's idempotency keys and metadata are its own (a key names a request
        // of its; metadata may say anything): shown to admins and auditors of the dataset only.
        let sees_all = self.sees_others(actor, id).await;
        let rows = self.store.list_entries(id, None, after, limit + 1).await?;
        let more = rows.len() as i64 > limit;
        let items: Vec<EntryView> = rows
            .iter()
            .take(limit as usize)
            .map(|e| EntryView {
                seq: e.seq,
                kind: e.kind.clone(),
                charge: (e.kind == "charge").then(|| {
                    let mut c = charge_view(e);
                    if !sees_all && e.principal.as_deref() != Some(actor.principal.name.as_str()) {
                        (c.idempotency_key, c.metadata) = (None, None);
                    }
                    c
                }),
                budget: match (e.budget_mu, e.budget_delta) {
                    (Some(mu), Some(delta)) => Budget::new(mu, delta).ok(),
                    _ => None,
                },
                settles: e.ref_id.clone(),
                run_id: (e.kind == "run").then(|| e.run_id.clone()).flatten(),
                statement: matches!(e.kind.as_str(), "release" | "commit" | "start")
                    .then(|| {
                        e.metadata
                            .as_deref()
                            .and_then(|m| serde_json::from_str(m).ok())
                    })
                    .flatten(),
                principal: e.principal.clone(),
                quota: e.quota.clone(),
                created_at: e.created_at.clone(),
            })
            .collect();
        let next = if more {
            items.last().map(|e| e.seq)
        } else {
            None
        };
        Ok((items, next))
    }

    /// The report of a dataset: the filter's guarantee, with the exact composition beside it.
    pub async fn report(
        &self,
        actor: &Actor,
        id: &str,
        opts: ReportOptions,
    ) -> Result<DatasetReport, LedgerError> {
        self.authorize(actor, id, Action::Read).await?;
        let row = self.row(id).await?;
        let filter = filter_of(&row)?;
        let composed = self.compositions.at_least(&row).await?;
        let budget = budget_of(&row)?;
        let stated = stated_budget(&row)?;
        let statement = statement_of(&row, &filter)?;
        let relation = relation_of(&row)?;
        let state = composed.state.clone().ok();
        let cost = admission::Cost::light_if(state.as_ref().is_none_or(|s| s.is_analytic()));
        let reports = self.reports.clone();
        blocking(&self.admission, cost, move || {
            let report = reports.get(&filter, &stated, relation, &opts);
            let exact_opts = ReportOptions {
                delta_slack: budget.delta_slack(),
                ..opts
            };
            let exact = match &state {
                Some(state) => match state.guarantee() {
                    Ok(g) => Some(ExactComposition {
                        valid_only_if: EXACT_ONLY_IF,
                        version: composed.version,
                        report: Report::build(
                            g.as_ref(),
                            relation,
                            state.invocations(),
                            &exact_opts,
                        ),
                    }),
                    Err(e @ AccountantError::Stopped(_)) => return Err(e.into()),
                    Err(_) => None,
                },
                None => None,
            };
            Ok(DatasetReport {
                report,
                statement,
                mu_spent: filter.mu(),
                delta_spent: filter.delta(),
                units: filter.units(),
                exact_composition: exact,
            })
        })
        .await
    }

    /// The trade-off curve of the dataset's guarantee at `alphas`.
    pub async fn tradeoff(
        &self,
        actor: &Actor,
        id: &str,
        alphas: Vec<crate::accountant::params::Alpha>,
    ) -> Result<TradeoffView, LedgerError> {
        let opts = ReportOptions {
            alphas,
            deltas: vec![],
            epsilons: vec![],
            ..ReportOptions::default()
        };
        let r = self.report(actor, id, opts).await?.report;
        Ok(TradeoffView {
            mu: r.mu,
            alpha_star: r.tier2.alpha_star,
            points: r.tradeoff,
        })
    }

    /// Calibrates one free parameter of a unit against the gate itself: the smallest noise
    /// multiplier, or the largest count, whose unit the gate admits now (its certificates by the
    /// default δ rule, [`Budget::admits_first`] on the dataset's filter). A charge of the
    /// calibrated event is admitted, and one a step beyond is not (up to the search's precision).
    pub async fn calibrate(
        &self,
        actor: &Actor,
        id: &str,
        req: input::CalibrateRequest,
    ) -> Result<Calibrated, LedgerError> {
        use crate::accountant::calibrate::{calibrate_by, with_free_parameter};
        self.authorize(actor, id, Action::Spend).await?;
        let row = self.row(id).await?;
        let gates = self
            .calibration_gates(actor, &row, req.blocks.as_ref())
            .await?;
        let (relation, h) = (relation_of(&row)?, grid_step_of(&row)?);
        let cost = admission::Cost::light_if(analytic(&req.event, relation));
        blocking(&self.admission, cost, move || {
            let path = crate::accountant::json::JsonPath::root().field("event");
            let mut judge = GateJudge { relation, h, gates };
            let c = calibrate_by(&req.event, req.free_parameter, &mut judge, &path)?;
            let (event, unit) = if c.value > 0.0 {
                let e = with_free_parameter(&req.event, req.free_parameter, c.value, &path)?;
                // The gate's verdict on the answer, once more: the unit it would charge.
                let (verdict, unit) = judge.verdict(&e, &path)?;
                if !verdict.admitted() {
                    return Err(LedgerError::Internal(
                        "calibrated a unit the gate rejects".into(),
                    ));
                }
                (Some(e.to_json()), Some(unit))
            } else {
                (None, None)
            };
            Ok(Calibrated {
                free_parameter: req.free_parameter.as_str().to_owned(),
                value: c.value,
                mu: unit.map_or(c.mu, |u| u.mu()),
                mu_target: judge.remaining_mu(),
                delta: unit.map_or(0.0, |u| u.delta()),
                event,
                evaluations: c.evaluations,
            })
        })
        .await
    }

    /// Calibrates one free parameter of an event against a μ target, on an empty ledger.
    pub async fn calibrate_stateless(
        &self,
        req: input::CalibrateRequest,
    ) -> Result<Calibrated, LedgerError> {
        let cost = admission::Cost::light_if(analytic(&req.event, req.neighboring_relation));
        blocking(&self.admission, cost, move || {
            let base = Composition::new(req.neighboring_relation, req.grid_step);
            let mu = req.mu.unwrap_or(0.0);
            calibrated(&base, &req, mu, req.delta_slack)
        })
        .await
    }

    /// A unit's certificate curve μᵢ(δᵢ), stateless.
    pub async fn certificate_curve(
        &self,
        req: input::CertificateRequest,
    ) -> Result<UnitCurve, LedgerError> {
        use crate::accountant::certificate::{curve, default_curve_deltas};
        let cost = admission::Cost::light_if(analytic(&req.event, req.neighboring_relation));
        blocking(&self.admission, cost, move || {
            let deltas = req.deltas.clone().unwrap_or_else(default_curve_deltas);
            let path = crate::accountant::json::JsonPath::root().field("event");
            let points: Vec<CurvePointView> = curve(
                &req.event,
                req.neighboring_relation,
                req.grid_step,
                &deltas,
                &path,
            )?
            .into_iter()
            .map(|p| CurvePointView {
                delta: p.delta,
                mu: p.mu,
                mu_lower: p.mu_lower,
                reason: p.reason,
            })
            .collect();
            let balanced = req.budget.and_then(|b| balanced(&points, b));
            Ok(UnitCurve { points, balanced })
        })
        .await
    }

    /// The stateless report of a list of events.    /// The stateless report of a list of events.
    pub async fn compose(&self, req: AccountRequest) -> Result<Report, LedgerError> {
        let cost = admission::Cost::light_if(
            req.events
                .iter()
                .all(|e| analytic(e, req.neighboring_relation)),
        );
        blocking(&self.admission, cost, move || {
            account::account(&req).map_err(LedgerError::from)
        })
        .await
    }
}
