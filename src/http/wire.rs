//! Wire types: the JSON the API exchanges, with their OpenAPI schemas.
//!
//! Request bodies are parsed field by field by `ledger::input` (so errors name the JSON path); the
//! request types here document them. Responses are the ledger's views themselves (they carry
//! their schemas); the types here are the pages and the bodies the handlers assemble.

pub use crate::ledger::schema::{DatasetRole, FreeParameter, GlobalRole, NeighboringRelationWire};
use crate::ledger::{DatasetView, EntryView};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// The audit log's format: one JSON page, or JSON lines (a record per line).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuditFormat {
    Json,
    Jsonl,
}

/// A budget for the adaptive μ-GDP filter: the units' certificates (μᵢ, δᵢ) must satisfy
/// Σμᵢ² ≤ μ² and Σδᵢ ≤ δ.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Budget)]
pub struct BudgetWire {
    /// μ_B: the whole interaction is μ_B-GDP (up to the δ part); in (0, 1000].
    #[schema(example = 1.0, exclusive_minimum = 0.0, maximum = 1000.0)]
    pub mu: f64,
    /// δ_B: the total of the units' δᵢ (default 1e-10, at most 1e-3).
    #[schema(example = 1e-10, minimum = 0.0, maximum = 1e-3)]
    pub delta: Option<f64>,
}

/// `POST /v1/datasets`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"id": "census-2030", "budget": {"mu": 1.0}, "neighboring_relation": "add_or_remove_one", "description": "training data"}))]
pub struct CreateDatasetRequest {
    /// 1-128 characters from A-Z, a-z, 0-9, '.', '_' and '-', not starting with '.'.
    #[schema(
        example = "census-2030",
        pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$",
        min_length = 1,
        max_length = 128
    )]
    pub id: String,
    pub budget: BudgetWire,
    /// A cap fixed now and never changed: no budget change may pass it, so the ledger's statement
    /// at the cap holds however the budget is changed. At least `budget`. Without a cap, reports
    /// state the budget's high-water mark "unless the budget is raised".
    pub cap: Option<BudgetWire>,
    /// Default `add_or_remove_one`.
    pub neighboring_relation: Option<NeighboringRelationWire>,
    #[schema(max_length = 4096)]
    pub description: Option<String>,
    /// Grid step of the numerical accountant (default 1e-4), in [1e-6, 0.1].
    #[schema(example = 1e-4, minimum = 1e-6, maximum = 0.1)]
    pub grid_step: Option<f64>,
    /// Split the data into disjoint blocks, each with `budget` of its own (created by the first
    /// charge that reads it); charges then name the blocks they read (`POST /v1/charges`).
    pub partitioning: Option<PartitioningWire>,
    /// Whom the guarantee protects, what neighbouring datasets differ by: `record` (default),
    /// `user`, `user-day`… Fixed at creation; every report names it.
    #[schema(pattern = r"^[a-z][a-z0-9_-]{0,63}$", example = "user")]
    pub privacy_unit: Option<String>,
    /// How many privacy units the dataset has (fixed at creation): a run's sampler may not draw
    /// from more.
    #[schema(minimum = 1, example = 60000)]
    pub size: Option<u64>,
}

/// A dataset's partitioning.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[schema(as = Partitioning)]
pub enum PartitioningWire {
    /// Time blocks of one calendar width in a time zone, named `2026-11-23T14` (hour),
    /// `2026-11-23` (day) or `2026-W48` (ISO week).
    Time {
        width: BlockWidthWire,
        /// An IANA time zone name (default `UTC`); block boundaries are local midnights (hours).
        #[schema(example = "Europe/Paris", max_length = 64)]
        time_zone: Option<String>,
        /// Blocks that ended more than this many widths ago are read-only (no charge may name
        /// them). Default: none.
        #[schema(minimum = 1, maximum = 1_000_000)]
        retention_blocks: Option<u32>,
    },
    /// Blocks named by the caller (e.g. user-id ranges: `users-0-999`).
    Named {},
}

/// The calendar width of a time block.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = BlockWidth)]
pub enum BlockWidthWire {
    Hour,
    Day,
    Week,
}

/// A half-open time range `[from, to)`: every time block it meets.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = TimeRange)]
pub struct TimeRangeWire {
    #[schema(format = DateTime, example = "2026-11-16T00:00:00Z")]
    pub from: String,
    #[schema(format = DateTime, example = "2026-11-23T00:00:00Z")]
    pub to: String,
}

/// A ledger a charge reads: a dataset, and on a partitioned one its blocks (a list, or a time
/// range; exactly one of them).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ChargeTarget)]
pub struct ChargeTargetWire {
    #[schema(
        pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$",
        min_length = 1,
        max_length = 128
    )]
    pub id: String,
    /// Block names (1 to 1000), e.g. `["2026-11-22", "2026-11-23"]`.
    #[schema(min_items = 1, max_items = 1000)]
    pub blocks: Option<Vec<String>>,
    pub time_range: Option<TimeRangeWire>,
    /// This dataset's own event: the mechanism as seen by one record *of this dataset*. A join
    /// whose output a record of this dataset moves differently (e.g. a customer with up to k
    /// joined events, each clipped: sensitivity k) names it here; otherwise the request's
    /// `event` is charged, which is sound only if its noise covers one record of each dataset.
    #[schema(value_type = Option<Object>)]
    pub event: Option<Value>,
}

/// `POST /v1/charges`: one unit charged on several ledgers (datasets, blocks), all or nothing.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"datasets": [{"id": "events", "time_range": {"from": "2026-11-16T00:00:00Z", "to": "2026-11-23T00:00:00Z"}}, {"id": "customers"}], "event": {"type": "gaussian", "noise_multiplier": 8.0}, "label": "weekly join"}))]
#[serde(deny_unknown_fields)]
#[schema(as = MultiChargeRequest)]
pub struct MultiChargeRequestWire {
    /// 1 to 64 datasets, each named once (at most 1000 ledgers in all).
    #[schema(min_items = 1, max_items = 64)]
    pub datasets: Vec<ChargeTargetWire>,
    /// The mechanism run, as in a single charge, as seen by one record of each dataset that does
    /// not name its own `event`. One event for all is sound only when its noise covers one
    /// record of each dataset (its sensitivity bound holds for every dataset's records); a
    /// dataset whose records move the output more (a join with several rows per record) names
    /// its own event.
    #[schema(value_type = Object)]
    pub event: Value,
    #[schema(max_length = 256)]
    pub label: Option<String>,
    /// Any JSON object of at most 16 KiB, kept with the charge on every ledger.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// The unit's δᵢ on every ledger (in [0, 1e-3]); default: each ledger's rule.
    #[schema(minimum = 0.0, maximum = 1e-3)]
    pub delta: Option<f64>,
}

/// `PATCH /v1/datasets/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"budget": {"mu": 2.0}}))]
pub struct UpdateDatasetRequest {
    pub budget: BudgetWire,
}

/// A page of datasets.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DatasetPage {
    pub items: Vec<DatasetView>,
    /// Pass as `cursor` for the next page; null on the last one.
    pub next_cursor: Option<String>,
}

/// `POST /v1/datasets/{id}/charges` and `/preview`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"event": {"type": "self_composed", "count": 1000, "event": {"type": "poisson_sampled", "sampling_rate": 0.01, "event": {"type": "gaussian", "noise_multiplier": 1.1}}}, "label": "dp-sgd epoch 1"}))]
#[serde(deny_unknown_fields)]
#[schema(as = ChargeRequest)]
pub struct ChargeRequestWire {
    /// The mechanism run: an event of the model (`{"type": ...}`: gaussian, laplace,
    /// discrete_laplace, discrete_gaussian, randomized_response, epsilon_delta, gdp,
    /// poisson_sampled, sampled_without_replacement, self_composed, composed) or a Google
    /// dp_accounting DpEvent serialised with `to_named_tuple()` (`{"class_name": ...}`).
    #[schema(value_type = Object)]
    pub event: Value,
    #[schema(max_length = 256)]
    pub label: Option<String>,
    /// Any JSON object of at most 16 KiB, kept with the charge.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// The unit's δᵢ (in [0, 1e-3]). Default: 0 for Gaussian-type units and for units whose μ at
    /// δ = 0 is within 0.1 % of that at δ_B / 10⁴; otherwise the one of δ_B / 10⁴, δ_B / 10³ and
    /// δ_B / 10² (each offered only when it lowers μ by more than 0.1 %) that leaves the most
    /// room in the ledger for further units like it.
    #[schema(minimum = 0.0, maximum = 1e-3)]
    pub delta: Option<f64>,
    /// Reserve the unit: the filter counts it now; commit it (`/charges/{id}/commit`) or, while
    /// none of its outputs was released, release it for a refund (`/charges/{id}/release`).
    /// Default false (charged outright).
    pub reserve: Option<bool>,
}

/// `POST /v1/datasets/{id}/runs`: declare a run (e.g. DP-SGD) charged chunk by chunk.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"event": {"type": "poisson_sampled", "sampling_rate": 0.004, "event": {"type": "gaussian", "noise_multiplier": 1.1}}, "steps": 10000, "chunk_steps": 1000, "label": "resnet fine-tune"}))]
#[serde(deny_unknown_fields)]
#[schema(as = RunRequest)]
pub struct RunRequestWire {
    /// One step (an event, as in a charge).
    #[schema(value_type = Object)]
    pub event: Value,
    /// Steps of the whole run (1 to 10^8).
    #[schema(minimum = 1, maximum = 100_000_000)]
    pub steps: u64,
    /// Steps per chunk (default: `steps`, one unit); at most `steps`, and at most 10,000 chunks.
    #[schema(minimum = 1, maximum = 100_000_000)]
    pub chunk_steps: Option<u64>,
    /// Each chunk's δᵢ (default: the charge rule).
    #[schema(minimum = 0.0, maximum = 1e-3)]
    pub delta: Option<f64>,
    /// Declare the run even when not all of its chunks fit what is left for the caller now
    /// (default false: such a run is refused with 409 `run_does_not_fit`, saying how many steps
    /// fit). Each chunk is gated when it is taken either way.
    pub allow_partial: Option<bool>,
    /// The declaration warns (`warnings`, code `chunking_cost`) when the run's μ exceeds μ of all
    /// its steps as one unit by more than this fraction, and suggests a chunk size that would not
    /// (default 0.05).
    #[schema(minimum = 0.0, maximum = 10.0)]
    pub chunking_tolerance: Option<f64>,
    /// Reserve every chunk now (at most 100 chunks; not with `allow_partial`): the gate admits
    /// them in order as reserved units, so nothing charged later can take their room. Each is
    /// then started (`/charges/{id}/start`) before its steps run and committed after; the ones
    /// never started may be released (refunded), newest first. Their ids are in
    /// `reserved_chunks`. If a chunk is refused meanwhile, those reserved are released and the
    /// declaration answers 409. Default false.
    pub reserve: Option<bool>,
    /// The batch sampler that runs, by what it does: the service derives the per-record rate
    /// (B/N) and refuses a step whose `sampling_rate` (or fixed-size `sample_size` and
    /// `population_size`) disagrees with it; a rate stated as B/N within floating-point rounding is
    /// accounted at B/N rounded up. `{"type": "shuffle"}` is refused with the reason (shuffled
    /// batches cannot be certified today).
    pub sampler: Option<SamplerWire>,
    #[schema(max_length = 256)]
    pub label: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
}

/// A run's batch sampler.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SamplerWire {
    /// Each record in each batch independently with probability B/N (Opacus'
    /// `UniformWithReplacementSampler`, jax_privacy's Poisson batching).
    Poisson {
        #[schema(minimum = 1)]
        expected_batch_size: u64,
        #[schema(minimum = 1)]
        dataset_size: u64,
    },
    /// A uniformly random batch of exactly B of the N records, drawn afresh each step.
    WithoutReplacement {
        #[schema(minimum = 1)]
        batch_size: u64,
        #[schema(minimum = 1)]
        dataset_size: u64,
    },
}

/// `POST /v1/datasets/{id}/runs/{run_id}/chunks`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChunkRequestWire {
    /// Reserve the chunk instead of charging it outright (default false).
    pub reserve: Option<bool>,
    /// The chunk meant (its index); refused with 409 `chunk_mismatch` unless it is the run's next
    /// chunk, so a retry without an Idempotency-Key never admits a second chunk.
    #[schema(minimum = 0)]
    pub chunk: Option<u64>,
    /// Required when an admin takes a chunk of another principal's run: why (recorded).
    #[schema(max_length = 1024)]
    pub reason: Option<String>,
}

/// `POST /v1/datasets/{id}/charges/{charge_id}/start` and `/commit`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettleRequestWire {
    /// Required when an admin acts on another principal's unit: why (recorded).
    #[schema(max_length = 1024)]
    pub reason: Option<String>,
}

/// `POST /v1/datasets/{id}/charges/{charge_id}/release`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"outputs_released": false, "reason": "job cancelled before training"}))]
pub struct ReleaseRequestWire {
    /// `false` states that the unit's job never started reading the data and no output of it,
    /// nor anything computed from it, was seen by anyone or any process — including the code
    /// deciding to release it — so the decision does not depend on it (e.g. the job was cancelled
    /// before it ran). A refund needs `false` (recorded in the ledger); with `true` the release is
    /// refused: commit the unit. A started unit cannot be released at all.
    pub outputs_released: bool,
    /// Why; required when an admin releases another principal's unit (recorded).
    #[schema(max_length = 1024)]
    pub reason: Option<String>,
}

/// A page of ledger entries.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EntryPage {
    pub items: Vec<EntryView>,
    /// Pass as `after` for the next page; null on the last one.
    pub next_cursor: Option<i64>,
}

/// A page of runs.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunPage {
    pub items: Vec<crate::ledger::RunView>,
    /// Pass as `after` for the next page; null on the last one.
    pub next_cursor: Option<i64>,
}

/// `POST /v1/accountant/compose`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"events": [{"type": "gdp", "mu": 0.5}, {"type": "self_composed", "count": 2000, "event": {"type": "poisson_sampled", "sampling_rate": 0.32768, "event": {"type": "gaussian", "noise_multiplier": 9.4}}}], "deltas": [1e-5]}))]
#[serde(deny_unknown_fields)]
pub struct ComposeRequest {
    #[schema(value_type = Vec<Object>)]
    pub events: Vec<Value>,
    pub neighboring_relation: Option<NeighboringRelationWire>,
    /// δ values at which ε(δ) is reported, each in [0, 1] (at most 1000).
    #[schema(value_type = Option<Vec<Probability>>, max_items = 1000)]
    pub deltas: Option<Vec<f64>>,
    /// ε values at which δ(ε) is reported, each in [0, 1e6] (at most 1000).
    #[schema(value_type = Option<Vec<EpsilonValue>>, max_items = 1000)]
    pub epsilons: Option<Vec<f64>>,
    /// α values at which the trade-off curve is reported, each in [0, 1] (at most 1000).
    #[schema(value_type = Option<Vec<Probability>>, max_items = 1000)]
    pub alphas: Option<Vec<f64>>,
    /// δ allowed for mass the accountant cannot place, in [0, 1e-3].
    #[schema(minimum = 0.0, maximum = 1e-3)]
    pub delta_slack: Option<f64>,
    #[schema(minimum = 1e-6, maximum = 0.1)]
    pub grid_step: Option<f64>,
    /// Also report what the guarantee gives a group of this many records.
    #[schema(minimum = 1, maximum = 10000)]
    pub group_size: Option<u64>,
}

/// `POST /v1/accountant/certificate`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"event": {"type": "self_composed", "count": 14100, "event": {"type": "poisson_sampled", "sampling_rate": 0.0042666, "event": {"type": "gaussian", "noise_multiplier": 1.1}}}, "neighboring_relation": "add_or_remove_one", "budget": {"mu": 1.0, "delta": 1e-6}}))]
#[serde(deny_unknown_fields)]
#[schema(as = CertificateRequest)]
pub struct CertificateRequestWire {
    /// The unit: one event whose parameters are all fixed in advance.
    #[schema(value_type = Object)]
    pub event: Value,
    pub neighboring_relation: Option<NeighboringRelationWire>,
    #[schema(minimum = 1e-6, maximum = 0.1)]
    pub grid_step: Option<f64>,
    /// δᵢ values, each in [0, 1) (at most 1000); default: 0 and 1, 2, 5 × 10⁻ᵏ for k = 15 … 2.
    #[schema(value_type = Option<Vec<DeltaBelowOne>>, max_items = 1000)]
    pub deltas: Option<Vec<f64>>,
    /// A budget to choose the balanced point against.
    pub budget: Option<BudgetWire>,
}

/// A number schema with bounds (a list item's range; utoipa states ranges only on fields).
macro_rules! bounded_number {
    ($(#[$doc:meta])* $name:ident, $lo:expr, $hi:expr) => {
        $(#[$doc])*
        pub struct $name;

        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                use utoipa::openapi::schema::{ObjectBuilder, SchemaFormat, KnownFormat, Type};
                ObjectBuilder::new()
                    .schema_type(Type::Number)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Double)))
                    .minimum(Some($lo))
                    .maximum(Some($hi))
                    .into()
            }
        }

        impl ToSchema for $name {}
    };
}

bounded_number!(
    /// A number in [0, 1].
    Probability, 0.0, 1.0
);
bounded_number!(
    /// An ε in [0, 1e6].
    EpsilonValue, 0.0, 1e6
);

/// A δ in [0, 1): a unit certificate's δᵢ (δᵢ = 1 would leave no μᵢ to state).
pub struct DeltaBelowOne;

impl utoipa::PartialSchema for DeltaBelowOne {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::Number)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Double)))
            .minimum(Some(0.0))
            .exclusive_maximum(Some(1.0))
            .into()
    }
}

impl ToSchema for DeltaBelowOne {}

/// `POST /v1/datasets/{id}/calibrate`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"event": {"type": "self_composed", "count": 1000, "event": {"type": "poisson_sampled", "sampling_rate": 0.01, "event": {"type": "gaussian", "noise_multiplier": 1.0}}}, "free_parameter": "noise_multiplier"}))]
#[serde(deny_unknown_fields)]
pub struct DatasetCalibrateRequest {
    /// The event to calibrate; its value of the free parameter is the search's starting point.
    #[schema(value_type = Object)]
    pub event: Value,
    pub free_parameter: FreeParameter,
    /// On a partitioned dataset (required there): the blocks the query will read, by name (the
    /// tightest block decides) …
    #[schema(min_items = 1, max_items = 1000)]
    pub blocks: Option<Vec<String>>,
    /// … or as a time range.
    pub time_range: Option<TimeRangeWire>,
}

/// `POST /v1/accountant/calibrate`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"event": {"type": "self_composed", "count": 2000, "event": {"type": "poisson_sampled", "sampling_rate": 0.01, "event": {"type": "gaussian", "noise_multiplier": 1.0}}}, "free_parameter": "noise_multiplier", "mu": 1.0}))]
#[serde(deny_unknown_fields)]
#[schema(as = CalibrateRequest)]
pub struct CalibrateRequestWire {
    #[schema(value_type = Object)]
    pub event: Value,
    pub free_parameter: FreeParameter,
    /// The μ target, in (0, 1000].
    #[schema(example = 1.0, exclusive_minimum = 0.0, maximum = 1000.0)]
    pub mu: f64,
    pub neighboring_relation: Option<NeighboringRelationWire>,
    #[schema(minimum = 0.0, maximum = 1e-3)]
    pub delta_slack: Option<f64>,
    #[schema(minimum = 1e-6, maximum = 0.1)]
    pub grid_step: Option<f64>,
}

/// `PUT /v1/datasets/{id}/quotas/{principal}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaRequestWire {
    /// μ_q: the principal's share of the dataset's μ budget (the quotas' squares add up to at
    /// most μ_B²).
    #[schema(minimum = 0.0, maximum = 1000.0)]
    pub mu: f64,
    /// δ_q: its share of δ_B (the quotas' δ add up to at most δ_B).
    #[schema(minimum = 0.0, exclusive_maximum = 1.0)]
    pub delta: f64,
}

/// `PUT /v1/datasets/{id}/alerts`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertRuleWire {
    /// Used shares in (0, 1] whose crossing alerts (distinct, at most 10; empty: only
    /// exhaustion alerts).
    #[schema(max_items = 10)]
    pub thresholds: Vec<f64>,
}

/// `PUT /v1/datasets/{id}/grants/{principal}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantRequestWire {
    /// The role on this dataset.
    pub role: DatasetRole,
}

/// `POST /v1/tokens`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequestWire {
    /// The principal the token is for (grants and quotas refer to it).
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[A-Za-z0-9._@:+-]([A-Za-z0-9 ._@:+-]*[A-Za-z0-9._@:+-])?$"
    )]
    pub name: String,
    /// The global role (`none`: grants only).
    pub role: GlobalRole,
    #[schema(minimum = 1, maximum = 3650)]
    pub expires_in_days: Option<u64>,
}

/// A token just made. `bearer_token` is the one field to keep: it is what `Authorization: Bearer`
/// takes, shown this once and stored only as a hash. The other fields describe the token as
/// `GET /v1/tokens` will (its `id` is what `DELETE /v1/tokens/{id}` takes; it grants nothing).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(example = json!({"bearer_token": "pl_3f9c0d…", "id": "0b7e2c1a-…", "name": "analytics team", "role": "analyst", "created_at": "2026-11-28T20:00:00Z", "expires_at": null, "revoked_at": null}))]
pub struct TokenCreated {
    /// Keep this: `pl_` and 64 hex digits, shown once.
    #[schema(pattern = "^pl_[0-9a-f]{64}$")]
    pub bearer_token: String,
    #[serde(flatten)]
    pub token: crate::ledger::auth::TokenView,
}

/// A page of the audit log.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AuditPage {
    pub items: Vec<crate::ledger::audit::AuditView>,
    /// The `after` of the next page (absent on the last page).
    pub next_cursor: Option<i64>,
}

/// `PUT /v1/datasets/{id}/blocks/{block}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"description": "user ids 0-999 (one name for these records: never declare them twice)"}))]
pub struct DeclareBlockWire {
    /// Which records the partition holds.
    #[schema(max_length = 4096)]
    pub description: Option<String>,
}
