//! Wire types: the JSON the API exchanges, with their OpenAPI schemas.
//!
//! Request bodies are parsed field by field by `ledger::input` (so errors name the JSON path); the
//! request types here document them. Response types mirror the ledger's views and the accountant's
//! report; `tests` check that the mirrors serialise exactly like the originals, so the spec cannot
//! drift from what the service sends.

use crate::accountant::report::Report;
use crate::ledger::CertificateView as Certificate;
use crate::ledger::{ChargeView, DatasetView, EntryView, Preview};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// A budget for the adaptive μ-GDP filter: the units' certificates (μᵢ, δᵢ) must satisfy
/// Σμᵢ² ≤ μ² and Σδᵢ ≤ δ.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Budget)]
pub struct BudgetWire {
    /// μ_B: the whole interaction is μ_B-GDP (up to the δ part).
    #[schema(example = 1.0)]
    pub mu: f64,
    /// δ_B: the total of the units' δᵢ (default 1e-10, at most 1e-3).
    #[schema(example = 1e-10)]
    pub delta: Option<f64>,
}

/// `POST /v1/datasets`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"id": "census-2030", "budget": {"mu": 1.0}, "neighboring_relation": "add_or_remove_one", "description": "training data"}))]
pub struct CreateDatasetRequest {
    /// 1-128 characters from A-Z, a-z, 0-9, '.', '_' and '-'.
    #[schema(example = "census-2030")]
    pub id: String,
    pub budget: BudgetWire,
    /// `add_or_remove_one` (default) or `replace_one`.
    #[schema(example = "add_or_remove_one")]
    pub neighboring_relation: Option<String>,
    pub description: Option<String>,
    /// Grid step of the numerical accountant (default 1e-4).
    #[schema(example = 1e-4)]
    pub grid_step: Option<f64>,
}

/// `PATCH /v1/datasets/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"budget": {"mu": 2.0}}))]
pub struct UpdateDatasetRequest {
    pub budget: BudgetWire,
}

/// A budget as stored (δ resolved).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BudgetView {
    pub mu: f64,
    pub delta: f64,
}

/// A dataset and what it has spent.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Dataset {
    pub id: String,
    pub description: String,
    pub neighboring_relation: String,
    pub budget: BudgetView,
    /// μ spent under the adaptive filter, √Σμᵢ² (rounded up).
    pub mu_spent: f64,
    /// δ spent under the filter, Σδᵢ.
    pub delta_spent: f64,
    /// √(μ_budget² − Σμᵢ²): the largest μ a further unit can have.
    pub remaining_mu: f64,
    /// δ_budget − Σδᵢ.
    pub remaining_delta: f64,
    /// Units counted by the filter (charges and chunks; reserved ones count, released ones not).
    pub units: i64,
    /// Units reserved, not yet committed or released.
    pub reserved_units: i64,
    /// μ of the exact composition of every charge: valid only if the whole sequence had been fixed
    /// in advance; shown for comparison, never used to admit.
    pub exact_composition_mu: Option<f64>,
    pub charges: i64,
    /// Number of ledger entries (charges and budget changes).
    pub version: i64,
    pub grid_step: f64,
    pub created_at: String,
    pub updated_at: String,
}

/// A page of datasets.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DatasetPage {
    pub items: Vec<Dataset>,
    /// Pass as `cursor` for the next page; null on the last one.
    pub next_cursor: Option<String>,
}

/// `POST /v1/datasets/{id}/charges` and `/preview`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"event": {"type": "self_composed", "count": 1000, "event": {"type": "poisson_sampled", "sampling_rate": 0.01, "event": {"type": "gaussian", "noise_multiplier": 1.1}}}, "label": "dp-sgd epoch 1"}))]
#[schema(as = ChargeRequest)]
pub struct ChargeRequestWire {
    /// The mechanism run: an event of the model (`{"type": ...}`: gaussian, laplace,
    /// discrete_laplace, discrete_gaussian, randomized_response, epsilon_delta, gdp,
    /// poisson_sampled, sampled_without_replacement, self_composed, composed) or a Google
    /// dp_accounting DpEvent serialised with `to_named_tuple()` (`{"class_name": ...}`).
    #[schema(value_type = Object)]
    pub event: Value,
    pub label: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// The unit's δᵢ (in [0, 1e-3]). Default: 0 for Gaussian-type units and for units whose μ at
    /// δ = 0 is within 0.1 % of that at the default; otherwise the budget's δ / 1000.
    pub delta: Option<f64>,
    /// Reserve the unit: the filter counts it now; commit it (`/charges/{id}/commit`) or, while
    /// none of its outputs was released, release it for a refund (`/charges/{id}/release`).
    /// Default false (charged outright).
    pub reserve: Option<bool>,
}

/// `POST /v1/datasets/{id}/runs`: declare a run (e.g. DP-SGD) charged chunk by chunk.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"event": {"type": "poisson_sampled", "sampling_rate": 0.004, "event": {"type": "gaussian", "noise_multiplier": 1.1}}, "steps": 10000, "chunk_steps": 1000, "label": "resnet fine-tune"}))]
#[schema(as = RunRequest)]
pub struct RunRequestWire {
    /// One step (an event, as in a charge).
    #[schema(value_type = Object)]
    pub event: Value,
    /// Steps of the whole run (1 to 10^8).
    pub steps: u64,
    /// Steps per chunk (default: `steps`, one unit); at most 10,000 chunks.
    pub chunk_steps: Option<u64>,
    /// Each chunk's δᵢ (default: the charge rule).
    pub delta: Option<f64>,
    pub label: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
}

/// `POST /v1/datasets/{id}/runs/{run_id}/chunks`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ChunkRequestWire {
    /// Reserve the chunk instead of charging it outright (default false).
    pub reserve: Option<bool>,
    /// The chunk meant (its index); refused with 409 `chunk_mismatch` unless it is the run's next
    /// chunk, so a retry without an Idempotency-Key never admits a second chunk.
    pub chunk: Option<u64>,
}

/// `POST /v1/datasets/{id}/charges/{charge_id}/release`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"outputs_released": false, "reason": "job cancelled before training"}))]
pub struct ReleaseRequestWire {
    /// `false` states that no output of the unit, nor anything computed from it, was seen by
    /// anyone or any process — including the code deciding to release it — so the decision does
    /// not depend on it (e.g. the job was cancelled before the mechanism ran). A refund needs
    /// `false` (recorded in the ledger); with `true` the release is refused: commit the unit.
    pub outputs_released: bool,
    pub reason: Option<String>,
}

/// The body of a commit or release.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Settled {
    /// The charge with its new status.
    pub charge: Charge,
    /// Release: the certificate the filter forgot.
    pub refund: Option<Certificate>,
    /// The filter's spending after the entry.
    pub mu_spent: f64,
    pub delta_spent: f64,
}

/// An admitted charge.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Charge {
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
    pub unit: Option<Certificate>,
    /// μ spent under the filter after this charge.
    pub mu_after: Option<f64>,
    /// `committed`, `reserved` (counted; commit or release it) or `released` (refunded).
    pub status: String,
    /// The run this charge is a chunk of, and the chunk's index.
    pub run_id: Option<String>,
    pub chunk: Option<i64>,
    pub created_at: String,
}

/// 201 body of a charge.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ChargeCreated {
    pub charge: Charge,
    pub report: ReportWire,
}

/// A ledger entry: a charge or a budget change.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Entry {
    pub seq: i64,
    /// `charge`, `budget`, `run` (a declaration), `commit` or `release`.
    pub kind: String,
    pub charge: Option<Charge>,
    pub budget: Option<BudgetView>,
    /// Commit and release: the charge settled.
    pub settles: Option<String>,
    /// Run declarations: the run.
    pub run_id: Option<String>,
    /// Release: the caller's statement, `{outputs_released: false, reason}`.
    #[schema(value_type = Option<Object>)]
    pub statement: Option<Value>,
    pub created_at: String,
}

/// A page of ledger entries.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EntryPage {
    pub items: Vec<Entry>,
    /// Pass as `after` for the next page; null on the last one.
    pub next_cursor: Option<i64>,
}

/// What a charge would do (nothing written).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Preview)]
pub struct PreviewWire {
    pub admitted: bool,
    /// The unit's certificate the gate would use.
    pub unit: Certificate,
    /// μ and δ of the filter with the unit.
    pub mu_after: Option<f64>,
    pub delta_after: f64,
    pub mu_budget: f64,
    pub delta_budget: f64,
    pub reason: Option<String>,
    /// The filter's guarantee with the unit (as it stands, when rejected).
    pub report: ReportWire,
}

/// μ-GDP summary.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Mu)]
pub struct MuWire {
    /// Upper bound on the tight μ (sound); null when no finite μ holds within the δ slack.
    pub upper: Option<f64>,
    pub lower: Option<f64>,
    pub delta_slack: f64,
    /// Regret Δ of the fit (0 for Gaussian ledgers).
    pub regret: Option<f64>,
    /// Why μ is null.
    pub reason: Option<String>,
}

/// ε at one δ (null epsilon = +∞).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = EpsilonPoint)]
pub struct EpsilonPointWire {
    pub delta: f64,
    pub epsilon: Option<f64>,
    pub epsilon_lower: Option<f64>,
}

/// δ at one ε.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = DeltaPoint)]
pub struct DeltaPointWire {
    pub epsilon: f64,
    pub delta: f64,
    pub delta_lower: f64,
}

/// The trade-off curve at one α.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = TradeoffPoint)]
pub struct TradeoffPointWire {
    pub alpha: f64,
    /// Lower bound on f(α) (sound).
    pub beta: f64,
    pub beta_upper: f64,
    /// Upper bound on an attack's TPR at FPR α.
    pub tpr: f64,
    /// The certified fit (1 − s)·G_μ(α/(1 − s)) at the reported μ and δ slack s.
    pub gdp_beta: Option<f64>,
}

/// The Tier-II table of Gomez et al. ("(ε,δ) considered harmful").
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Tier2)]
pub struct Tier2Wire {
    pub alpha_star: f64,
    pub rows: Vec<TradeoffPointWire>,
}

/// CLT approximation (never enforced).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Clt)]
pub struct CltWire {
    pub approximate: bool,
    pub mu: f64,
    pub gamma: f64,
    pub berry_esseen_applies: bool,
}

/// Accountant identification.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = AccountantInfo)]
pub struct AccountantWire {
    pub name: String,
    pub version: String,
    pub event_model_version: u32,
}

/// The privacy report.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Report)]
pub struct ReportWire {
    /// `analytic` or `pld`.
    pub method: String,
    pub neighboring_relation: String,
    pub mu: MuWire,
    pub epsilon: Vec<EpsilonPointWire>,
    pub delta: Vec<DeltaPointWire>,
    /// Upper bound on the largest membership-inference advantage (= δ(0) = η-TV).
    pub advantage: f64,
    pub advantage_lower: f64,
    pub tradeoff: Vec<TradeoffPointWire>,
    pub tier2: Tier2Wire,
    /// Probability of unbounded privacy loss (never dropped).
    pub infinity_mass: f64,
    pub clt: Option<CltWire>,
    pub invocations: u64,
    pub accountant: AccountantWire,
}

/// The report of a dataset: every figure is that of the adaptive filter's guarantee
/// G_{μ_B} ⊗ f_{0,δ_B} (the budget's), valid for the whole interaction however the charges are
/// chosen; `mu_spent`/`delta_spent` are budget use (not a guarantee: they depend on the outputs);
/// the exact composition of the charges is shown beside it, labelled.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = DatasetReport)]
pub struct DatasetReportWire {
    #[serde(flatten)]
    pub report: ReportWire,
    pub mu_spent: f64,
    pub delta_spent: f64,
    pub units: i64,
    pub exact_composition: Option<ExactCompositionWire>,
}

/// The exact composition of every charge: valid only under the stated condition.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = ExactComposition)]
pub struct ExactCompositionWire {
    pub valid_only_if: String,
    pub report: ReportWire,
}

/// The trade-off curve of a dataset.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Tradeoff)]
pub struct TradeoffWire {
    pub mu: MuWire,
    pub alpha_star: f64,
    pub points: Vec<TradeoffPointWire>,
}

/// `POST /v1/accountant/compose`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"events": [{"type": "gdp", "mu": 0.5}, {"type": "self_composed", "count": 2000, "event": {"type": "poisson_sampled", "sampling_rate": 0.32768, "event": {"type": "gaussian", "noise_multiplier": 9.4}}}], "deltas": [1e-5]}))]
pub struct ComposeRequest {
    #[schema(value_type = Vec<Object>)]
    pub events: Vec<Value>,
    pub neighboring_relation: Option<String>,
    pub deltas: Option<Vec<f64>>,
    pub epsilons: Option<Vec<f64>>,
    pub alphas: Option<Vec<f64>>,
    pub delta_slack: Option<f64>,
    pub grid_step: Option<f64>,
}

/// `POST /v1/datasets/{id}/calibrate`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"event": {"type": "self_composed", "count": 1000, "event": {"type": "poisson_sampled", "sampling_rate": 0.01, "event": {"type": "gaussian", "noise_multiplier": 1.0}}}, "free_parameter": "noise_multiplier"}))]
pub struct DatasetCalibrateRequest {
    /// The event to calibrate; its value of the free parameter is the search's starting point.
    #[schema(value_type = Object)]
    pub event: Value,
    /// `noise_multiplier` (of the first gaussian/laplace event, depth first: the smallest that
    /// fits) or `count` (of the first self_composed event: the largest that fits).
    #[schema(example = "noise_multiplier")]
    pub free_parameter: String,
}

/// `POST /v1/accountant/calibrate`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"event": {"type": "self_composed", "count": 2000, "event": {"type": "poisson_sampled", "sampling_rate": 0.01, "event": {"type": "gaussian", "noise_multiplier": 1.0}}}, "free_parameter": "noise_multiplier", "mu": 1.0}))]
#[schema(as = CalibrateRequest)]
pub struct CalibrateRequestWire {
    #[schema(value_type = Object)]
    pub event: Value,
    #[schema(example = "noise_multiplier")]
    pub free_parameter: String,
    /// The μ target.
    #[schema(example = 1.0)]
    pub mu: f64,
    pub neighboring_relation: Option<String>,
    pub delta_slack: Option<f64>,
    pub grid_step: Option<f64>,
}

/// The result of a calibration.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Calibration)]
pub struct CalibrationWire {
    pub free_parameter: String,
    /// The smallest noise multiplier, or the largest count (0 when not even one step fits).
    pub value: f64,
    /// μ (upper bound) of the calibrated unit.
    pub mu: f64,
    /// The μ the unit may have (what remains of the filter, or the stateless target).
    pub mu_target: f64,
    /// The δ the unit is certified at.
    pub delta: f64,
    /// The event with the calibrated value filled in.
    #[schema(value_type = Option<Object>)]
    pub event: Option<Value>,
    pub evaluations: u32,
}

impl From<&crate::ledger::Calibrated> for CalibrationWire {
    fn from(c: &crate::ledger::Calibrated) -> Self {
        mirror(c)
    }
}

fn mirror<A: Serialize, B: for<'de> Deserialize<'de>>(a: &A) -> B {
    serde_json::from_value(serde_json::to_value(a).expect("serialisable"))
        .expect("wire types mirror the views")
}

impl From<&Report> for ReportWire {
    fn from(r: &Report) -> Self {
        mirror(r)
    }
}

impl From<&crate::ledger::DatasetReport> for DatasetReportWire {
    fn from(r: &crate::ledger::DatasetReport) -> Self {
        mirror(r)
    }
}

impl From<&DatasetView> for Dataset {
    fn from(d: &DatasetView) -> Self {
        mirror(d)
    }
}

impl From<&ChargeView> for Charge {
    fn from(c: &ChargeView) -> Self {
        mirror(c)
    }
}

impl From<&EntryView> for Entry {
    fn from(e: &EntryView) -> Self {
        mirror(e)
    }
}

impl From<&Preview> for PreviewWire {
    fn from(p: &Preview) -> Self {
        mirror(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accountant::account::{account, AccountRequest};
    use serde_json::json;

    #[test]
    fn report_mirror_serialises_exactly_like_the_report() {
        for events in [
            json!([{"type": "gdp", "mu": 1.0}]),
            json!([{"type": "laplace", "noise_multiplier": 1.0}]),
        ] {
            let r =
                account(&AccountRequest::from_json(&json!({"events": events})).unwrap()).unwrap();
            let w = ReportWire::from(&r);
            assert_eq!(
                serde_json::to_value(&w).unwrap(),
                serde_json::to_value(&r).unwrap()
            );
        }
    }
}
