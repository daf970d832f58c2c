//! The application layer: datasets, their μ-GDP budgets, and the gate that admits or rejects charges.
//!
//! A charge is admitted iff the ledger composed with it has a μ upper bound (with the budget's δ
//! slack) within the budget: μ_after ≤ μ_budget·(1 + [`GATE_TOLERANCE`]). Check and append are one
//! step: per dataset, charges are serialised by an in-process lock, and the store's append is a
//! compare-and-swap on the ledger version, so concurrent charges (from this process or another
//! replica on the same database) never both pass against the same ledger state.
//!
//! Composition runs on tokio's blocking pool, never on the async workers.

pub mod input;

use crate::accountant::composition::Composition;
use crate::accountant::report::{self, AccountRequest, Report, ReportOptions};
use crate::accountant::{AccountantError, Event, NeighboringRelation};
use crate::store::{DatasetRow, DatasetUpdate, EntryRow, Store, StoreError};
use input::{Budget, ChargeRequest, NewDataset};
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Relative tolerance of the budget comparison: admit iff μ_after ≤ μ_budget·(1 + 1e-9). It absorbs
/// the floating-point rounding of charges that fit a budget exactly (the analytic engine rounds μ up
/// by ≤ 1e-15 relative) and is far below any privacy-relevant difference (cf. Tumult's 1e-9 slack).
pub const GATE_TOLERANCE: f64 = 1e-9;

/// Most datasets whose composed state is kept in memory.
const STATE_CACHE_ENTRIES: usize = 256;

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
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<StoreError> for LedgerError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Corrupt(m) => LedgerError::Internal(m),
            other => LedgerError::Unavailable(other),
        }
    }
}

/// Why a charge was rejected.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rejection {
    /// μ of the ledger with the charge (null when no finite μ holds within the δ slack).
    pub mu_after: Option<f64>,
    pub mu_budget: f64,
    pub mu_spent: f64,
    pub remaining_mu: f64,
    pub reason: String,
}

/// A dataset as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DatasetView {
    pub id: String,
    pub description: String,
    pub neighboring_relation: NeighboringRelation,
    pub budget: Budget,
    /// Upper bound on μ spent so far (sound), and its lower bracket end.
    pub mu_spent: f64,
    pub mu_spent_lower: f64,
    /// √(μ_budget² − μ_spent²): the largest μ a further Gaussian-type charge can have (μ adds in
    /// quadrature; for other mechanisms ask /preview).
    pub remaining_mu: f64,
    pub charges: i64,
    pub version: i64,
    pub grid_step: f64,
    pub created_at: String,
    pub updated_at: String,
}

/// A charge as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChargeView {
    pub id: String,
    pub seq: i64,
    pub event: Value,
    pub label: Option<String>,
    pub metadata: Option<Value>,
    pub idempotency_key: Option<String>,
    pub mu_after: Option<f64>,
    pub created_at: String,
}

/// A ledger entry: a charge or a budget change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EntryView {
    pub seq: i64,
    pub kind: String,
    pub charge: Option<ChargeView>,
    pub budget: Option<Budget>,
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

/// What a charge would do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Preview {
    pub admitted: bool,
    pub mu_after: Option<f64>,
    pub mu_budget: f64,
    pub reason: Option<String>,
    pub report: Report,
}

/// The datasets and their gate.
pub struct Ledgers {
    store: Arc<dyn Store>,
    /// One lock per dataset: charges on a dataset are gated one at a time in this process.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Composed states by dataset, tagged with the ledger version they belong to.
    cache: Mutex<HashMap<String, (i64, Arc<Composition>)>>,
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn remaining(budget: f64, spent: f64) -> f64 {
    if spent >= budget {
        0.0
    } else {
        // Rounded down: a Gaussian charge of exactly this μ must fit.
        ((budget - spent) * (budget + spent)).sqrt() * (1.0 - 4.0 * f64::EPSILON)
    }
}

fn relation_of(row: &DatasetRow) -> NeighboringRelation {
    NeighboringRelation::parse(&row.neighboring_relation).unwrap_or_default()
}

fn view(row: &DatasetRow) -> DatasetView {
    DatasetView {
        id: row.id.clone(),
        description: row.description.clone(),
        neighboring_relation: relation_of(row),
        budget: Budget {
            mu: row.budget_mu,
            delta: row.budget_delta,
        },
        mu_spent: row.mu_spent,
        mu_spent_lower: row.mu_spent_lower,
        remaining_mu: remaining(row.budget_mu, row.mu_spent),
        charges: row.charges,
        version: row.version,
        grid_step: row.grid_step,
        created_at: row.created_at.clone(),
        updated_at: row.updated_at.clone(),
    }
}

fn charge_view(e: &EntryRow) -> ChargeView {
    let parse = |s: &Option<String>| s.as_deref().and_then(|t| serde_json::from_str(t).ok());
    ChargeView {
        id: e.charge_id.clone().unwrap_or_default(),
        seq: e.seq,
        event: parse(&e.event).unwrap_or(Value::Null),
        label: e.label.clone(),
        metadata: parse(&e.metadata),
        idempotency_key: e.idempotency_key.clone(),
        mu_after: e.mu_after,
        created_at: e.created_at.clone(),
    }
}

/// Runs accountant work on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, LedgerError> + Send + 'static,
) -> Result<T, LedgerError> {
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || span.in_scope(f))
        .await
        .map_err(|e| LedgerError::Internal(format!("accountant task failed: {e}")))?
}

/// The outcome of a calibration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calibrated {
    pub free_parameter: String,
    /// The smallest noise multiplier, or the largest count (0 when not even one step fits).
    pub value: f64,
    /// μ (upper bound) of the ledger with the calibrated event.
    pub mu: f64,
    pub mu_target: f64,
    /// The event with the calibrated value filled in (absent when the count is 0).
    pub event: Option<Value>,
    pub evaluations: u32,
}

fn calibrated(
    base: &Composition,
    req: &input::CalibrateRequest,
    target: f64,
    slack: f64,
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
        event,
        evaluations: c.evaluations,
    })
}

/// The composed ledger with a new event and what the gate needs from it.
struct Gated {
    state: Composition,
    report: Report,
    mu_after: Option<f64>,
    mu_lower: Option<f64>,
    reason: Option<String>,
}

fn gate_compute(
    base: Arc<Composition>,
    event: Event,
    budget: Budget,
    opts: ReportOptions,
) -> Result<Gated, LedgerError> {
    let t = Instant::now();
    let mut state = (*base).clone();
    state.push(
        &event,
        &crate::accountant::json::JsonPath::root().field("event"),
    )?;
    let g = state.guarantee()?;
    let opts = ReportOptions {
        delta_slack: budget.delta,
        ..opts
    };
    let report = Report::build(g.as_ref(), state.relation(), state.invocations(), &opts);
    metrics::histogram!("privacy_ledger_accountant_seconds").record(t.elapsed().as_secs_f64());
    Ok(Gated {
        mu_after: report.mu.upper,
        mu_lower: report.mu.lower,
        reason: report.mu.reason.clone(),
        state,
        report,
    })
}

impl Ledgers {
    /// The service over a store.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Ledgers {
            store,
            locks: Mutex::new(HashMap::new()),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the store answers.
    pub async fn ready(&self) -> Result<(), LedgerError> {
        self.store.ping().await.map_err(LedgerError::from)
    }

    fn lock_for(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.locks.lock().expect("lock map");
        m.entry(id.to_owned()).or_default().clone()
    }

    async fn row(&self, id: &str) -> Result<DatasetRow, LedgerError> {
        self.store
            .get_dataset(id)
            .await?
            .ok_or_else(|| LedgerError::NotFound(id.to_owned()))
    }

    /// The composed state at `row.version` (from the cache when it is current).
    async fn state(&self, row: &DatasetRow) -> Result<Arc<Composition>, LedgerError> {
        if let Some((v, c)) = self.cache.lock().expect("cache").get(&row.id) {
            if *v == row.version {
                return Ok(c.clone());
            }
        }
        let (version, bytes) = self
            .store
            .get_state(&row.id)
            .await?
            .ok_or_else(|| LedgerError::NotFound(row.id.clone()))?;
        let c = Arc::new(
            Composition::from_bytes(&bytes)
                .map_err(|e| LedgerError::Internal(format!("stored state unreadable: {e}")))?,
        );
        self.remember(&row.id, version, c.clone());
        Ok(c)
    }

    /// Caches a composed state; the cache holds at most [`STATE_CACHE_ENTRIES`] datasets (it is
    /// emptied when full: states are reloaded from the store on demand).
    fn remember(&self, id: &str, version: i64, state: Arc<Composition>) {
        let mut cache = self.cache.lock().expect("cache");
        if cache.len() >= STATE_CACHE_ENTRIES && !cache.contains_key(id) {
            cache.clear();
        }
        cache.insert(id.to_owned(), (version, state));
    }

    fn bump_cached_version(&self, id: &str, from: i64) {
        let mut cache = self.cache.lock().expect("cache");
        if let Some((v, c)) = cache.get(id).cloned() {
            if v == from {
                cache.insert(id.to_owned(), (v + 1, c));
            }
        }
    }

    /// Creates a dataset with an empty ledger.
    pub async fn create_dataset(&self, d: NewDataset) -> Result<DatasetView, LedgerError> {
        let ts = now();
        let row = DatasetRow {
            id: d.id.clone(),
            description: d.description,
            neighboring_relation: d.neighboring_relation.as_str().to_owned(),
            budget_mu: d.budget.mu,
            budget_delta: d.budget.delta,
            grid_step: d.grid_step,
            version: 0,
            charges: 0,
            mu_spent: 0.0,
            mu_spent_lower: 0.0,
            created_at: ts.clone(),
            updated_at: ts,
        };
        let state = Composition::new(d.neighboring_relation, d.grid_step).to_bytes();
        match self.store.create_dataset(&row, &state).await {
            Ok(()) => Ok(view(&row)),
            Err(StoreError::AlreadyExists) => Err(LedgerError::AlreadyExists(d.id)),
            Err(e) => Err(e.into()),
        }
    }

    /// One dataset.
    pub async fn get_dataset(&self, id: &str) -> Result<DatasetView, LedgerError> {
        Ok(view(&self.row(id).await?))
    }

    /// Datasets by id after `after`; returns the page and the cursor of the next one.
    pub async fn list_datasets(
        &self,
        after: Option<&str>,
        limit: i64,
    ) -> Result<(Vec<DatasetView>, Option<String>), LedgerError> {
        let rows = self.store.list_datasets(after, limit + 1).await?;
        let more = rows.len() as i64 > limit;
        let items: Vec<DatasetView> = rows.iter().take(limit as usize).map(view).collect();
        let next = if more {
            items.last().map(|d| d.id.clone())
        } else {
            None
        };
        Ok((items, next))
    }

    /// Changes the budget (recorded as a ledger entry).
    pub async fn update_budget(
        &self,
        id: &str,
        budget: Budget,
    ) -> Result<DatasetView, LedgerError> {
        let lock = self.lock_for(id);
        let _guard = lock.lock().await;
        for _ in 0..MAX_ATTEMPTS {
            let row = self.row(id).await?;
            let ts = now();
            let entry = EntryRow {
                seq: 0,
                kind: "budget".into(),
                charge_id: None,
                event: None,
                label: None,
                metadata: None,
                idempotency_key: None,
                request_hash: None,
                mu_after: None,
                budget_mu: Some(budget.mu),
                budget_delta: Some(budget.delta),
                response: None,
                created_at: ts.clone(),
            };
            let update = DatasetUpdate {
                budget_mu: budget.mu,
                budget_delta: budget.delta,
                charges: row.charges,
                mu_spent: row.mu_spent,
                mu_spent_lower: row.mu_spent_lower,
                updated_at: ts,
            };
            match self
                .store
                .append(id, row.version, &entry, &update, None)
                .await
            {
                Ok(_) => {
                    // The state did not change, only its version: keep the cache current.
                    self.bump_cached_version(id, row.version);
                    return self.get_dataset(id).await;
                }
                Err(StoreError::VersionConflict) => continue,
                Err(StoreError::NotFound) => return Err(LedgerError::NotFound(id.to_owned())),
                Err(e) => return Err(e.into()),
            }
        }
        Err(LedgerError::Busy)
    }

    /// The earlier outcome for an idempotency key, or an error if the key was used for another body.
    async fn replay(
        &self,
        id: &str,
        req: &ChargeRequest,
    ) -> Result<Option<ChargeOutcome>, LedgerError> {
        let Some(key) = &req.idempotency_key else {
            return Ok(None);
        };
        let Some(e) = self.store.find_entry_by_key(id, key).await? else {
            return Ok(None);
        };
        if e.request_hash.as_deref() != Some(req.request_hash.as_str()) {
            return Err(LedgerError::IdempotencyKeyReused(key.clone()));
        }
        let body = e
            .response
            .as_deref()
            .and_then(|r| serde_json::from_str(r).ok())
            .ok_or_else(|| LedgerError::Internal("stored outcome unreadable".into()))?;
        Ok(Some(ChargeOutcome {
            created: false,
            body,
        }))
    }

    /// Gates and, if admitted, appends a charge. See the module docs.
    #[tracing::instrument(skip(self, req), fields(dataset_id = %id))]
    pub async fn charge(&self, id: &str, req: ChargeRequest) -> Result<ChargeOutcome, LedgerError> {
        let started = Instant::now();
        let lock = self.lock_for(id);
        let _guard = lock.lock().await;
        let result = self.charge_locked(id, &req).await;
        metrics::histogram!("privacy_ledger_gate_seconds").record(started.elapsed().as_secs_f64());
        let outcome = match &result {
            Ok(o) if o.created => "admitted",
            Ok(_) => "replayed",
            Err(LedgerError::BudgetExceeded(_)) => "rejected",
            Err(_) => "error",
        };
        metrics::counter!("privacy_ledger_charges_total", "dataset" => id.to_owned(), "outcome" => outcome)
            .increment(1);
        result
    }

    async fn charge_locked(
        &self,
        id: &str,
        req: &ChargeRequest,
    ) -> Result<ChargeOutcome, LedgerError> {
        for _ in 0..MAX_ATTEMPTS {
            if let Some(o) = self.replay(id, req).await? {
                return Ok(o);
            }
            let row = self.row(id).await?;
            let base = self.state(&row).await?;
            let budget = Budget {
                mu: row.budget_mu,
                delta: row.budget_delta,
            };
            let event = req.event.clone();
            let g = blocking(move || gate_compute(base, event, budget, ReportOptions::default()))
                .await?;
            let admitted = matches!(g.mu_after, Some(m) if m <= budget.mu * (1.0 + GATE_TOLERANCE));
            if !admitted {
                return Err(LedgerError::BudgetExceeded(Box::new(Rejection {
                    mu_after: g.mu_after,
                    mu_budget: budget.mu,
                    mu_spent: row.mu_spent,
                    remaining_mu: remaining(budget.mu, row.mu_spent),
                    reason: g.reason.unwrap_or_else(|| {
                        format!(
                            "mu after this charge ({}) exceeds the budget ({})",
                            g.mu_after.unwrap_or(f64::INFINITY),
                            budget.mu
                        )
                    }),
                })));
            }
            let ts = now();
            let charge = ChargeView {
                id: uuid::Uuid::new_v4().to_string(),
                seq: row.version + 1,
                event: req.event.to_json(),
                label: req.label.clone(),
                metadata: req.metadata.clone(),
                idempotency_key: req.idempotency_key.clone(),
                mu_after: g.mu_after,
                created_at: ts.clone(),
            };
            let body = serde_json::json!({"charge": charge, "report": g.report});
            let entry = EntryRow {
                seq: charge.seq,
                kind: "charge".into(),
                charge_id: Some(charge.id.clone()),
                event: Some(charge.event.to_string()),
                label: charge.label.clone(),
                metadata: charge.metadata.as_ref().map(Value::to_string),
                idempotency_key: req.idempotency_key.clone(),
                request_hash: Some(req.request_hash.clone()),
                mu_after: g.mu_after,
                budget_mu: None,
                budget_delta: None,
                response: Some(body.to_string()),
                created_at: ts.clone(),
            };
            let update = DatasetUpdate {
                budget_mu: budget.mu,
                budget_delta: budget.delta,
                charges: row.charges + 1,
                mu_spent: g.mu_after.unwrap_or(row.mu_spent),
                mu_spent_lower: g.mu_lower.unwrap_or(row.mu_spent_lower),
                updated_at: ts,
            };
            let state = Arc::new(g.state);
            let bytes = state.to_bytes();
            match self
                .store
                .append(id, row.version, &entry, &update, Some(&bytes))
                .await
            {
                Ok(_) => {
                    self.remember(id, row.version + 1, state);
                    return Ok(ChargeOutcome {
                        created: true,
                        body,
                    });
                }
                // Another writer (replica) appended first, or took our key: start over.
                Err(StoreError::VersionConflict) | Err(StoreError::DuplicateKey) => continue,
                Err(StoreError::NotFound) => return Err(LedgerError::NotFound(id.to_owned())),
                Err(e) => return Err(e.into()),
            }
        }
        Err(LedgerError::Busy)
    }

    /// What a charge would do, with nothing written.
    pub async fn preview(&self, id: &str, req: ChargeRequest) -> Result<Preview, LedgerError> {
        let row = self.row(id).await?;
        let base = self.state(&row).await?;
        let budget = Budget {
            mu: row.budget_mu,
            delta: row.budget_delta,
        };
        let g = blocking(move || gate_compute(base, req.event, budget, ReportOptions::default()))
            .await?;
        let admitted = matches!(g.mu_after, Some(m) if m <= budget.mu * (1.0 + GATE_TOLERANCE));
        Ok(Preview {
            admitted,
            mu_after: g.mu_after,
            mu_budget: budget.mu,
            reason: g.reason,
            report: g.report,
        })
    }

    /// Ledger entries (charges and budget changes) with seq > `after`, in order.
    pub async fn list_entries(
        &self,
        id: &str,
        after: i64,
        limit: i64,
    ) -> Result<(Vec<EntryView>, Option<i64>), LedgerError> {
        self.row(id).await?;
        let rows = self.store.list_entries(id, None, after, limit + 1).await?;
        let more = rows.len() as i64 > limit;
        let items: Vec<EntryView> = rows
            .iter()
            .take(limit as usize)
            .map(|e| EntryView {
                seq: e.seq,
                kind: e.kind.clone(),
                charge: (e.kind == "charge").then(|| charge_view(e)),
                budget: match (e.budget_mu, e.budget_delta) {
                    (Some(mu), Some(delta)) => Some(Budget { mu, delta }),
                    _ => None,
                },
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

    /// The report of a dataset's ledger.
    pub async fn report(&self, id: &str, opts: ReportOptions) -> Result<Report, LedgerError> {
        let row = self.row(id).await?;
        let state = self.state(&row).await?;
        let opts = ReportOptions {
            delta_slack: row.budget_delta,
            ..opts
        };
        blocking(move || {
            let g = state.guarantee()?;
            Ok(Report::build(
                g.as_ref(),
                state.relation(),
                state.invocations(),
                &opts,
            ))
        })
        .await
    }

    /// Calibrates one free parameter of an event against the dataset's budget (what still fits).
    pub async fn calibrate(
        &self,
        id: &str,
        req: input::CalibrateRequest,
    ) -> Result<Calibrated, LedgerError> {
        let row = self.row(id).await?;
        let base = self.state(&row).await?;
        let (mu, slack) = (row.budget_mu, row.budget_delta);
        blocking(move || calibrated(&base, &req, mu, slack)).await
    }

    /// Calibrates one free parameter of an event against a μ target, on an empty ledger.
    pub async fn calibrate_stateless(
        &self,
        req: input::CalibrateRequest,
    ) -> Result<Calibrated, LedgerError> {
        blocking(move || {
            let base = Composition::new(req.neighboring_relation, req.grid_step);
            let mu = req.mu.unwrap_or(0.0);
            calibrated(&base, &req, mu, req.delta_slack)
        })
        .await
    }

    /// The stateless report of a list of events.
    pub async fn compose(&self, req: AccountRequest) -> Result<Report, LedgerError> {
        blocking(move || report::account(&req).map_err(LedgerError::from)).await
    }
}
