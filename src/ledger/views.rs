//! What the ledger answers: datasets, charges, entries, reports and rejections as the API shows
//! them (the spec's schemas come from these types).

use super::budget::{Budget, CertificateView};
use super::error::LedgerError;
use super::filter::Limit;
use super::filter::{FilterState, Statement};
use super::rows::{budget_of, grid_step_of, relation_of, statement_of};
use super::{keys, schema};
use crate::accountant::certificate::Certificate;
use crate::accountant::report::Report;
use crate::accountant::NeighboringRelation;
use crate::store::{DatasetRow, EntryRow};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

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
    /// How the budget was given, when as an (ε, δ) target: the target and the μ_B, δ_B it was
    /// converted to (the largest μ_B whose statement, with the gate's tolerance, is (ε, δ)-DP).
    /// Absent for a budget given in μ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_target: Option<super::budget::BudgetTarget>,
    /// Whom the guarantee protects: what neighbouring datasets differ by (`record` unless given
    /// at creation: `user`, `user-day`…). Every figure is per this unit.
    pub privacy_unit: String,
    /// How many of them the dataset has, when stated at creation (a run's sampler may not draw
    /// from more).
    pub size: Option<u64>,
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
    /// The share of the budget used, in the filter's own terms: the larger of Σμᵢ²/μ_B² and
    /// Σδᵢ/δ_B (rounded up), so that the used and the remaining shares add up
    /// (`mu_spent² + remaining_mu² = budget.mu²`). Spending within the gate's tolerance of the
    /// budget is exactly 1, never above; above 1 only when the budget was lowered below what had
    /// been spent.
    pub used_fraction: f64,
    /// Nothing more that spends μ can be charged: `used_fraction` ≥ 1, or no μ is left.
    pub exhausted: bool,
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
    /// How many units like this one fit as things stand (this one included): the largest k with
    /// Σμᵢ² + k·μ² ≤ μ_B² and Σδᵢ + k·δ ≤ δ_B, and within the caller's share; rounded down. Null
    /// when the unit spends nothing. A display count: every charge is still gated.
    pub units_like_this: Option<u64>,
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
    /// Whom the figures protect: each is per this unit (`record`, `user`, …; the dataset's).
    pub privacy_unit: String,
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

pub(super) const EXACT_ONLY_IF: &str =
    "the whole sequence of charges had been fixed before any output was \
    seen; callers that chose charges after seeing results are covered only by the filter's figures";

/// A dataset's population as stored (an unreadable one is a corrupt row, never taken as
/// "nothing given": its size bounds runs' samplers).
pub(super) fn population_of(
    row: &DatasetRow,
) -> Result<super::population::Population, LedgerError> {
    super::population::Population::of_stored(row.population.as_deref())
        .ok_or_else(|| LedgerError::Corrupt(row.id.clone(), "its population".into()))
}

pub(super) fn view(row: &DatasetRow, f: &FilterState) -> Result<DatasetView, LedgerError> {
    let budget = budget_of(row)?;
    let population = population_of(row)?;
    Ok(DatasetView {
        id: row.id.clone(),
        description: row.description.clone(),
        neighboring_relation: relation_of(row)?,
        budget,
        budget_target: target_of(row, &budget),
        privacy_unit: population.unit().to_owned(),
        size: population.size,
        statement: statement_of(row, f)?,
        mu_spent: f.mu(),
        delta_spent: f.delta(),
        remaining_mu: budget.remaining_mu(f),
        remaining_delta: budget.remaining_delta(f),
        used_fraction: budget.used(f),
        exhausted: budget.exhausted(f),
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

/// The row's budget target, when it is still the budget's (a target is written with its budget,
/// so one that does not match is never shown).
pub(super) fn target_of(row: &DatasetRow, budget: &Budget) -> Option<super::budget::BudgetTarget> {
    let t: super::budget::BudgetTarget =
        serde_json::from_str(row.budget_target.as_deref()?).ok()?;
    (t.mu == budget.mu() && t.delta_slack == budget.delta()).then_some(t)
}

pub(super) fn charge_view(e: &EntryRow) -> ChargeView {
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

/// What is left after a charge: of the ledger's budget, and of the share that paid.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Remaining {
    /// √(μ_B² − Σμᵢ²) and δ_B − Σδᵢ after the charge (rounded down).
    pub mu: f64,
    pub delta: f64,
    /// The share of the budget used after the charge (as a dataset's `used_fraction`).
    pub used_fraction: f64,
    pub exhausted: bool,
    /// The quota (or unallocated share, `*`) the charge was paid from, when the dataset has
    /// quotas: what is left of it.
    pub share: Option<ShareRemaining>,
}

/// What is left of a share after a charge.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ShareRemaining {
    pub holder: String,
    pub mu: f64,
    pub delta: f64,
    pub used_fraction: f64,
    pub exhausted: bool,
}

impl Remaining {
    /// What `gate` leaves after admitting a unit: the dataset's state `after`, the share's
    /// `share_after`.
    pub fn after(
        gate: &super::filter::Gate,
        after: &FilterState,
        share_after: Option<&FilterState>,
    ) -> Self {
        let b = &gate.budget;
        Remaining {
            mu: b.remaining_mu(after),
            delta: b.remaining_delta(after),
            used_fraction: b.used(after),
            exhausted: b.exhausted(after),
            share: gate
                .share
                .as_ref()
                .zip(share_after)
                .map(|(s, a)| ShareRemaining {
                    holder: s.holder.clone(),
                    mu: s.budget.remaining_mu(a),
                    delta: s.budget.remaining_delta(a),
                    used_fraction: s.budget.used(a),
                    exhausted: s.budget.exhausted(a),
                }),
        }
    }
}

/// 201 body of a charge or a run's chunk (and of its replay, 200): the unit as recorded, what is
/// left after it, and the guarantee of the dataset's budget (its statement, not what was spent).
/// The ledger builds it; the spec describes it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChargeCreated {
    pub charge: ChargeView,
    /// What is left of the budget (and of the share that paid) after the charge.
    pub remaining: Remaining,
    /// The guarantee of the dataset's budget: the ledger's statement G_μ ⊗ f_{0,δ} at the budget's
    /// high-water mark, which holds for the whole interaction. Not what was spent (that is
    /// `charge.mu_after` and `remaining`).
    #[schema(value_type = schema::ReportWire)]
    pub report: Report,
}

/// 200 body of a start, commit or release.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Settled {
    /// The charge with its new status.
    pub charge: ChargeView,
    /// Release: the certificate the filter forgot.
    pub refund: Option<CertificateView>,
    /// The filter's spending after the entry.
    pub mu_spent: f64,
    pub delta_spent: f64,
}
