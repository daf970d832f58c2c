//! Parse, don't validate: request bodies become the ledger's validated types at the edge, with
//! errors naming the JSON path of the bad field.

use super::budget::{budget_mu, Budget, MAX_BUDGET_MU};
use super::names::is_name;
use crate::accountant::account::AccountRequest;
use crate::accountant::calibrate::FreeParameter;
use crate::accountant::json::{self, Fields, InputError, JsonPath};
use crate::accountant::params::{
    Alpha, Delta, DeltaSlack, Epsilon, GridStep, ReportOptions, MAX_POINTS,
};
use crate::accountant::{Event, NeighboringRelation};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// Checks a dataset id: 1–128 characters from [A-Za-z0-9._-], not starting with '.'.
pub fn dataset_id(s: &str, path: &JsonPath) -> Result<String, InputError> {
    if is_name(s, 128) {
        Ok(s.to_owned())
    } else {
        Err(InputError::new(
            path,
            "must be 1-128 characters from A-Z, a-z, 0-9, '.', '_' and '-', not starting with '.'",
        ))
    }
}

/// Checks a ledger id: a dataset id, or a block's `dataset@block`.
pub fn ledger_id(s: &str, path: &JsonPath) -> Result<String, InputError> {
    match super::partition::split_block_id(s) {
        None => dataset_id(s, path),
        Some((parent, block)) => {
            dataset_id(parent, path)?;
            super::partition::block_name(block, path)?;
            Ok(s.to_owned())
        }
    }
}

/// A quota change, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaRequest {
    pub mu: f64,
    pub delta: f64,
    pub idempotency_key: Option<String>,
    pub request_hash: String,
}

/// `POST /v1/datasets`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDataset {
    pub id: String,
    /// Blocks with a budget each (the `budget` is then every block's), or none.
    pub partitioning: Option<super::partition::Partitioning>,
    pub budget: Budget,
    /// The (ε, δ) target the budget was converted from, when given so.
    pub target: Option<super::budget::BudgetTarget>,
    /// A cap no budget may ever pass (fixed here, immutable): with it, the ledger's statement
    /// at the cap holds however the budget is changed.
    pub cap: Option<Budget>,
    pub neighboring_relation: NeighboringRelation,
    pub description: String,
    pub grid_step: GridStep,
    /// The privacy unit and the dataset's size, when given.
    pub population: super::population::Population,
    /// SHA-256 of the body, so a retried creation is recognised.
    pub request_hash: String,
}

impl NewDataset {
    /// Parses the body; `default_grid_step` applies when it names none.
    pub fn from_json(v: &Value, default_grid_step: GridStep) -> Result<Self, InputError> {
        let root = JsonPath::root();
        let mut f = Fields::new(v, &root)?;
        let (i, p) = f.required("id")?;
        let id = dataset_id(json::string(i, &p)?, &p)?;
        let (b, p) = f.required("budget")?;
        let (budget, target) = super::budget::given_from_json(b, &p)?;
        let cap = match f.optional("cap") {
            None => None,
            Some((x, p)) => {
                let cap = Budget::from_json(x, &p)?;
                if cap.mu() < budget.mu() || cap.delta() < budget.delta() {
                    return Err(InputError::new(
                        &p,
                        format!(
                            "must be at least the budget (mu {} >= {}, delta {:e} >= {:e})",
                            cap.mu(),
                            budget.mu(),
                            cap.delta(),
                            budget.delta()
                        ),
                    ));
                }
                Some(cap)
            }
        };
        let neighboring_relation = match f.optional("neighboring_relation") {
            None => NeighboringRelation::default(),
            Some((x, p)) => relation(x, &p)?,
        };
        let description = match f.optional("description") {
            None => String::new(),
            Some((x, p)) => {
                let s = json::string(x, &p)?;
                if s.chars().count() > 4096 {
                    return Err(InputError::new(&p, "must be at most 4096 characters"));
                }
                s.to_owned()
            }
        };
        let grid_step = match f.optional("grid_step") {
            None => default_grid_step,
            Some((x, p)) => {
                GridStep::new(json::number(x, &p)?).map_err(|r| InputError::new(&p, r))?
            }
        };
        let partitioning = match f.optional("partitioning") {
            None => None,
            Some((x, p)) => Some(super::partition::Partitioning::from_json(x, &p)?),
        };
        let population = super::population::Population::from_fields(&mut f)?;
        if partitioning.is_some() && neighboring_relation == NeighboringRelation::ReplaceOne {
            // Under replace-one a neighbour may move a record from one block to another: an
            // add/remove in each of two blocks, which replace-one certificates do not bound.
            return Err(InputError::new(
                &root.field("neighboring_relation"),
                "a partitioned dataset's relation must be add_or_remove_one: replacing a record \
                 may move it between blocks (a removal from one and an addition to another), which \
                 replace-one accounting does not cover",
            ));
        }
        f.finish()?;
        Ok(NewDataset {
            id,
            partitioning,
            budget,
            target,
            cap,
            neighboring_relation,
            description,
            grid_step,
            population,
            request_hash: request_hash("create", v),
        })
    }
}

/// Parses a neighbouring relation name.
pub fn relation(v: &Value, p: &JsonPath) -> Result<NeighboringRelation, InputError> {
    let s = json::string(v, p)?;
    NeighboringRelation::parse(s).ok_or_else(|| {
        InputError::new(
            p,
            format!("must be \"add_or_remove_one\" or \"replace_one\", got {s:?}"),
        )
    })
}

/// `PATCH /v1/datasets/{id}`: a new budget.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetPatch {
    pub budget: Budget,
    /// The (ε, δ) target the budget was converted from, when given so.
    pub target: Option<super::budget::BudgetTarget>,
    pub idempotency_key: Option<String>,
    pub request_hash: String,
}

/// Parses `{budget}`.
pub fn budget_patch(v: &Value, idempotency_key: Option<String>) -> Result<BudgetPatch, InputError> {
    let root = JsonPath::root();
    let mut f = Fields::new(v, &root)?;
    let (b, p) = f.required("budget")?;
    let (budget, target) = super::budget::given_from_json(b, &p)?;
    f.finish()?;
    Ok(BudgetPatch {
        budget,
        target,
        idempotency_key,
        request_hash: request_hash("budget", v),
    })
}

/// SHA-256 of an operation's name and its canonical body (serde_json's map is ordered by key, so
/// the serialisation is canonical): a retry with the same Idempotency-Key must send the same body
/// to the same operation.
pub fn request_hash(operation: &str, v: &Value) -> String {
    let mut h = Sha256::new();
    h.update(operation.as_bytes());
    h.update([0]);
    h.update(v.to_string().as_bytes());
    format!("{:x}", h.finalize())
}

/// An optional `label`: at most 256 characters.
fn label_field(f: &mut Fields<'_>) -> Result<Option<String>, InputError> {
    match f.optional("label") {
        None => Ok(None),
        Some((x, p)) => {
            let s = json::string(x, &p)?;
            if s.chars().count() > 256 {
                return Err(InputError::new(&p, "must be at most 256 characters"));
            }
            Ok(Some(s.to_owned()))
        }
    }
}

/// An optional `metadata` object of at most 16 KiB.
fn metadata_field(f: &mut Fields<'_>) -> Result<Option<Value>, InputError> {
    match f.optional("metadata") {
        None => Ok(None),
        Some((x, p)) => {
            if !x.is_object() {
                return Err(InputError::new(&p, "must be an object"));
            }
            if x.to_string().len() > 16 * 1024 {
                return Err(InputError::new(&p, "must serialise to at most 16 KiB"));
            }
            Ok(Some(x.clone()))
        }
    }
}

/// An optional unit `delta` in [0, 1e-3].
fn delta_field(f: &mut Fields<'_>) -> Result<Option<f64>, InputError> {
    match f.optional("delta") {
        None => Ok(None),
        Some((x, p)) => Ok(Some(
            DeltaSlack::new(json::number(x, &p)?)
                .map_err(|r| InputError::new(&p, r))?
                .get(),
        )),
    }
}

/// An optional boolean field (default false).
fn flag_field(f: &mut Fields<'_>, name: &'static str) -> Result<bool, InputError> {
    match f.optional(name) {
        None => Ok(false),
        Some((x, p)) => x.as_bool().ok_or_else(|| {
            InputError::new(&p, format!("must be true or false, got {}", json::kind(x)))
        }),
    }
}

/// Most steps a run may declare.
pub const MAX_RUN_STEPS: u64 = 100_000_000;
/// Most chunks a run may have (each is a unit: a ledger entry and a certificate).
pub const MAX_RUN_CHUNKS: u64 = 10_000;
/// Most chunks a run reserved at declaration may have (each is reserved by its own write).
pub const MAX_RESERVED_RUN_CHUNKS: u64 = 100;

/// `POST /v1/datasets/{id}/runs`: a declared run (e.g. DP-SGD): `steps` repetitions of one step
/// `event`, charged in chunks of `chunk_steps` steps, each chunk a unit admitted when asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRequest {
    /// One step (e.g. a Poisson-sampled Gaussian).
    pub event: Event,
    pub steps: u64,
    pub chunk_steps: u64,
    /// Each chunk's δᵢ, if the caller sets it.
    pub delta: Option<f64>,
    /// Declare the run even if not all of its chunks fit what is left now (they are still each
    /// gated when taken); without it such a run is refused at declaration.
    pub allow_partial: bool,
    /// The declaration warns (`chunking_cost`) when the run's μ exceeds that of all its steps as
    /// one unit by more than this fraction, and says which chunk size would not.
    pub chunking_tolerance: f64,
    /// Reserve every chunk at declaration (each gated in order, as a reserved unit).
    pub reserve: bool,
    /// The batch sampler declared, checked against `event` (whose rates it may have raised to
    /// the sampler's, rounded up).
    pub sampler: Option<super::runs::SamplerView>,
    pub label: Option<String>,
    pub metadata: Option<Value>,
    pub idempotency_key: Option<String>,
    pub request_hash: String,
}

/// The price of chunking a run may have before its declaration warns: 5 % more μ than one unit.
pub const DEFAULT_CHUNKING_TOLERANCE: f64 = 0.05;
/// The largest `chunking_tolerance` accepted (a run costing 11× one unit is always worth a word).
pub const MAX_CHUNKING_TOLERANCE: f64 = 10.0;

impl RunRequest {
    /// Parses `{event, steps, chunk_steps?, delta?, allow_partial?, chunking_tolerance?, reserve?, label?,
    /// metadata?}`; `chunk_steps` defaults to
    /// `steps` (one unit: the tightest certificate, but nothing to refund if the run stops early
    /// unless the unit is reserved).
    pub fn from_json(v: &Value, idempotency_key: Option<String>) -> Result<Self, InputError> {
        let root = JsonPath::root();
        let mut f = Fields::new(v, &root)?;
        let (e, p) = f.required("event")?;
        let mut event = parse_event(e, &p)?;
        // The sampler, when declared, is checked against the step (and sets its rate).
        let sampler = match f.optional("sampler") {
            None => None,
            Some((x, sp)) => {
                let s = crate::accountant::sampler::Sampler::from_json(x, &sp)?;
                let (checked, check) = s.apply(event, &p)?;
                event = checked;
                Some(super::runs::SamplerView::of(s, &check))
            }
        };
        let (n, p) = f.required("steps")?;
        let steps = json::integer(n, &p, 1)?;
        if steps > MAX_RUN_STEPS {
            return Err(InputError::new(
                &p,
                format!("must be at most {MAX_RUN_STEPS}, got {steps}"),
            ));
        }
        let chunk_steps = match f.optional("chunk_steps") {
            None => steps,
            Some((x, p)) => {
                let c = json::integer(x, &p, 1)?;
                if c > steps {
                    return Err(InputError::new(
                        &p,
                        format!("must be at most steps ({steps}), got {c}"),
                    ));
                }
                if steps.div_ceil(c) > MAX_RUN_CHUNKS {
                    return Err(InputError::new(
                        &p,
                        format!(
                            "gives {} chunks; at most {MAX_RUN_CHUNKS} are allowed (use larger chunks)",
                            steps.div_ceil(c)
                        ),
                    ));
                }
                c
            }
        };
        let delta = delta_field(&mut f)?;
        let allow_partial = flag_field(&mut f, "allow_partial")?;
        let chunking_tolerance = match f.optional("chunking_tolerance") {
            None => DEFAULT_CHUNKING_TOLERANCE,
            Some((x, p)) => {
                let t = json::number(x, &p)?;
                if !(0.0..=MAX_CHUNKING_TOLERANCE).contains(&t) {
                    return Err(InputError::new(
                        &p,
                        format!("must be a number in [0, {MAX_CHUNKING_TOLERANCE}], got {t}"),
                    ));
                }
                t
            }
        };
        let reserve = match f.optional("reserve") {
            None => false,
            Some((x, p)) => {
                let r = x.as_bool().ok_or_else(|| {
                    InputError::new(&p, format!("must be true or false, got {}", json::kind(x)))
                })?;
                let chunks = steps.div_ceil(chunk_steps);
                if r && allow_partial {
                    return Err(InputError::new(
                        &p,
                        "cannot be true with allow_partial: a reserved run holds all of its chunks",
                    ));
                }
                if r && chunks > MAX_RESERVED_RUN_CHUNKS {
                    return Err(InputError::new(
                        &p,
                        format!(
                            "a reserved run has at most {MAX_RESERVED_RUN_CHUNKS} chunks; this one \
                             has {chunks} (use larger chunks)"
                        ),
                    ));
                }
                r
            }
        };
        let label = label_field(&mut f)?;
        let metadata = metadata_field(&mut f)?;
        f.finish()?;
        Ok(RunRequest {
            event,
            steps,
            chunk_steps,
            delta,
            allow_partial,
            chunking_tolerance,
            reserve,
            sampler,
            label,
            metadata,
            idempotency_key,
            request_hash: request_hash("run", v),
        })
    }

    /// Number of chunks, ⌈steps / chunk_steps⌉.
    pub fn chunks(&self) -> u64 {
        self.steps.div_ceil(self.chunk_steps)
    }
}

/// `POST /v1/datasets/{id}/runs/{run_id}/chunks`: admit the run's next chunk.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkRequest {
    /// Reserve the chunk (commit or release it later) instead of charging it outright.
    pub reserve: bool,
    /// The chunk the caller means (refused unless it is the next one): a retried request without
    /// an Idempotency-Key can then never admit a second chunk.
    pub chunk: Option<u64>,
    /// An admin taking another principal's chunk says why (recorded).
    pub reason: Option<String>,
    pub idempotency_key: Option<String>,
    pub request_hash: String,
}

impl ChunkRequest {
    /// Parses `{reserve?, chunk?, reason?}` (an empty or absent body is `{}`).
    pub fn from_json(
        v: &Value,
        run_id: &str,
        idempotency_key: Option<String>,
    ) -> Result<Self, InputError> {
        let root = JsonPath::root();
        let mut f = Fields::new(v, &root)?;
        let reserve = flag_field(&mut f, "reserve")?;
        let chunk = match f.optional("chunk") {
            None => None,
            Some((x, p)) => Some(json::integer(x, &p, 0)?),
        };
        let reason = reason_field(&mut f)?;
        f.finish()?;
        Ok(ChunkRequest {
            reserve,
            chunk,
            reason,
            idempotency_key,
            request_hash: request_hash(&format!("chunk {run_id}"), v),
        })
    }
}

/// An optional `reason`: at most 1024 bytes.
fn reason_field(f: &mut Fields<'_>) -> Result<Option<String>, InputError> {
    match f.optional("reason") {
        None => Ok(None),
        Some((x, p)) => {
            let s = json::string(x, &p)?;
            if s.len() > 1024 {
                return Err(InputError::new(&p, "must be at most 1024 bytes"));
            }
            Ok(Some(s.to_owned()))
        }
    }
}

/// What `POST /v1/datasets/{id}/charges/{charge_id}/…` does to a reserved unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleKind {
    Start,
    Commit,
    Release,
}

/// `POST /v1/datasets/{id}/charges/{charge_id}/start`, `/commit` and `/release`.
#[derive(Debug, Clone, PartialEq)]
pub struct SettleRequest {
    /// What the request does to the unit.
    pub kind: SettleKind,
    /// Release only: the caller's statement. `false` means the unit's job never started reading
    /// the data, and no output of it, nor anything computed from it, was seen by anyone or any
    /// process — including the code deciding to release — so the decision does not depend on it
    /// (a refund is refused otherwise); recorded in the ledger.
    pub outputs_released: Option<bool>,
    /// Why: a release's reason, or an admin's reason for acting on another principal's unit.
    pub reason: Option<String>,
    pub idempotency_key: Option<String>,
    pub request_hash: String,
}

impl SettleRequest {
    /// Parses a start or commit body `{reason?}` or a release body `{outputs_released,
    /// reason?}` (`outputs_released` is required there).
    pub fn from_json(
        v: &Value,
        charge_id: &str,
        kind: SettleKind,
        idempotency_key: Option<String>,
    ) -> Result<Self, InputError> {
        let root = JsonPath::root();
        let mut f = Fields::new(v, &root)?;
        let outputs_released = if kind == SettleKind::Release {
            let (x, p) = f.required("outputs_released")?;
            Some(x.as_bool().ok_or_else(|| {
                InputError::new(&p, format!("must be true or false, got {}", json::kind(x)))
            })?)
        } else {
            None
        };
        let reason = reason_field(&mut f)?;
        f.finish()?;
        let op = match kind {
            SettleKind::Start => "start",
            SettleKind::Commit => "commit",
            SettleKind::Release => "release",
        };
        Ok(SettleRequest {
            kind,
            outputs_released,
            reason,
            idempotency_key,
            request_hash: request_hash(&format!("{op} {charge_id}"), v),
        })
    }
}

/// `POST /v1/datasets/{id}/charges` (and `/preview`).
#[derive(Debug, Clone, PartialEq)]
pub struct ChargeRequest {
    pub event: Event,
    pub label: Option<String>,
    pub metadata: Option<Value>,
    pub idempotency_key: Option<String>,
    /// The unit's δᵢ, if the caller sets it (in [0, 1e-3]); otherwise the gate's default rule.
    pub delta: Option<f64>,
    /// Reserve the unit (commit or release it later) instead of charging it outright.
    pub reserve: bool,
    /// SHA-256 of the canonical request body: a retry must send the same body.
    pub request_hash: String,
}

/// Checks an `Idempotency-Key` header value: 1–255 visible ASCII characters.
pub fn idempotency_key(s: &str) -> Result<String, String> {
    if !s.is_empty() && s.len() <= 255 && s.chars().all(|c| c.is_ascii_graphic()) {
        Ok(s.to_owned())
    } else {
        Err("must be 1-255 visible ASCII characters".into())
    }
}

impl ChargeRequest {
    /// Parses `{event, label?, metadata?, delta?}`; the event may be in our form or dp_accounting's
    /// serialised DpEvent form.
    pub fn from_json(v: &Value, idempotency_key: Option<String>) -> Result<Self, InputError> {
        let root = JsonPath::root();
        let mut f = Fields::new(v, &root)?;
        let (e, p) = f.required("event")?;
        let event = parse_event(e, &p)?;
        let label = label_field(&mut f)?;
        let delta = delta_field(&mut f)?;
        let metadata = metadata_field(&mut f)?;
        let reserve = flag_field(&mut f, "reserve")?;
        f.finish()?;
        // serde_json's map is ordered by key, so this serialisation is canonical.
        let request_hash = format!("{:x}", Sha256::digest(v.to_string().as_bytes()));
        Ok(ChargeRequest {
            event,
            label,
            metadata,
            idempotency_key,
            delta,
            reserve,
            request_hash,
        })
    }
}

/// A ledger a multi-ledger charge names: a dataset, and on a partitioned one the blocks it reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub dataset: String,
    pub blocks: Option<super::partition::BlockSelector>,
    /// This dataset's own event, when the query's noise covers one of its records differently
    /// (its own sensitivity) from the request's `event`.
    pub event: Option<Event>,
}

/// `POST /v1/charges`: one unit charged on several ledgers, all or nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiChargeRequest {
    pub targets: Vec<Target>,
    pub event: Event,
    pub label: Option<String>,
    pub metadata: Option<Value>,
    pub idempotency_key: Option<String>,
    /// The unit's δᵢ on every ledger, if the caller sets it; otherwise each ledger's default rule.
    pub delta: Option<f64>,
    pub request_hash: String,
}

impl MultiChargeRequest {
    /// Parses `{datasets: [{id, blocks? | time_range?, event?}], event, label?, metadata?,
    /// delta?}`.
    pub fn from_json(v: &Value, idempotency_key: Option<String>) -> Result<Self, InputError> {
        let root = JsonPath::root();
        let mut f = Fields::new(v, &root)?;
        let (d, p) = f.required("datasets")?;
        let items = json::array(d, &p)?;
        if items.is_empty() || items.len() > 64 {
            return Err(InputError::new(
                &p,
                format!("must name 1 to 64 datasets, got {}", items.len()),
            ));
        }
        let mut targets = Vec::with_capacity(items.len());
        for (i, x) in items.iter().enumerate() {
            let pi = p.index(i);
            let mut t = Fields::new(x, &pi)?;
            let (id, pid) = t.required("id")?;
            let dataset = dataset_id(json::string(id, &pid)?, &pid)?;
            let blocks = super::partition::BlockSelector::from_fields(&mut t)?;
            let event = match t.optional("event") {
                None => None,
                Some((e, pe)) => Some(parse_event(e, &pe)?),
            };
            t.finish()?;
            if targets.iter().any(|o: &Target| o.dataset == dataset) {
                return Err(InputError::new(
                    &pid,
                    format!("dataset {dataset:?} is named twice; name each dataset once"),
                ));
            }
            targets.push(Target {
                dataset,
                blocks,
                event,
            });
        }
        let (e, pe) = f.required("event")?;
        let event = parse_event(e, &pe)?;
        let label = label_field(&mut f)?;
        let delta = delta_field(&mut f)?;
        let metadata = metadata_field(&mut f)?;
        f.finish()?;
        Ok(MultiChargeRequest {
            targets,
            event,
            label,
            metadata,
            idempotency_key,
            delta,
            request_hash: request_hash("charges", v),
        })
    }
}

/// Parses one event in either supported form (ours, or dp_accounting's serialised DpEvent).
pub fn parse_event(v: &Value, p: &JsonPath) -> Result<Event, InputError> {
    crate::accountant::dp_event::parse_any_event(v, p)
}

/// `POST /v1/datasets/{id}/calibrate` and `/v1/accountant/calibrate`.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrateRequest {
    pub event: Event,
    pub free_parameter: FreeParameter,
    /// Dataset form, on a partitioned dataset: the blocks to calibrate against (the tightest
    /// decides).
    pub blocks: Option<super::partition::BlockSelector>,
    /// Stateless form only: the μ target, relation, δ slack and grid step.
    pub mu: Option<f64>,
    pub neighboring_relation: NeighboringRelation,
    pub delta_slack: DeltaSlack,
    pub grid_step: GridStep,
}

impl CalibrateRequest {
    /// Parses `{event, free_parameter}` (dataset form, `stateless = false`) or additionally
    /// `{mu, neighboring_relation?, delta_slack?, grid_step?}` (stateless form).
    pub fn from_json(v: &Value, stateless: bool) -> Result<Self, InputError> {
        let root = JsonPath::root();
        let mut f = Fields::new(v, &root)?;
        let (e, p) = f.required("event")?;
        let event = parse_event(e, &p)?;
        let (fp, p) = f.required("free_parameter")?;
        let name = json::string(fp, &p)?;
        let free_parameter = FreeParameter::parse(name).ok_or_else(|| {
            InputError::new(
                &p,
                format!("must be \"noise_multiplier\" or \"count\", got {name:?}"),
            )
        })?;
        let mut req = CalibrateRequest {
            event,
            free_parameter,
            blocks: None,
            mu: None,
            neighboring_relation: NeighboringRelation::default(),
            delta_slack: DeltaSlack::default_slack(),
            grid_step: GridStep::default_step(),
        };
        if stateless {
            let (m, p) = f.required("mu")?;
            req.mu = Some(budget_mu(m, &p)?);
            if let Some(r) = relation_field(&mut f)? {
                req.neighboring_relation = r;
            }
            if let Some((x, p)) = f.optional("delta_slack") {
                req.delta_slack =
                    DeltaSlack::new(json::number(x, &p)?).map_err(|r| InputError::new(&p, r))?;
            }
            if let Some(h) = grid_step_field(&mut f)? {
                req.grid_step = h;
            }
        } else {
            req.blocks = super::partition::BlockSelector::from_fields(&mut f)?;
        }
        f.finish()?;
        Ok(req)
    }
}

/// An optional `neighboring_relation` field.
fn relation_field(f: &mut Fields<'_>) -> Result<Option<NeighboringRelation>, InputError> {
    f.optional("neighboring_relation")
        .map(|(x, p)| relation(x, &p))
        .transpose()
}

/// An optional `grid_step` field.
fn grid_step_field(f: &mut Fields<'_>) -> Result<Option<GridStep>, InputError> {
    f.optional("grid_step")
        .map(|(x, p)| GridStep::new(json::number(x, &p)?).map_err(|r| InputError::new(&p, r)))
        .transpose()
}

/// `POST /v1/accountant/certificate`: a unit's certificate curve μᵢ(δᵢ).
#[derive(Debug, Clone, PartialEq)]
pub struct CertificateRequest {
    pub event: Event,
    pub neighboring_relation: NeighboringRelation,
    pub grid_step: GridStep,
    /// The δ values, each in [0, 1) (at most [`MAX_POINTS`]); `None`: the default list.
    pub deltas: Option<Vec<f64>>,
    /// A budget to choose the balanced point against (the filter's μ_B, δ_B).
    pub budget: Option<Budget>,
}

impl CertificateRequest {
    /// Parses `{event, neighboring_relation?, grid_step?, deltas?, budget?}`.
    pub fn from_json(v: &Value) -> Result<Self, InputError> {
        let root = JsonPath::root();
        let mut f = Fields::new(v, &root)?;
        let (e, p) = f.required("event")?;
        let event = parse_event(e, &p)?;
        let mut req = CertificateRequest {
            event,
            neighboring_relation: NeighboringRelation::default(),
            grid_step: GridStep::default_step(),
            deltas: None,
            budget: None,
        };
        if let Some(r) = relation_field(&mut f)? {
            req.neighboring_relation = r;
        }
        if let Some(h) = grid_step_field(&mut f)? {
            req.grid_step = h;
        }
        if let Some((x, p)) = f.optional("deltas") {
            req.deltas = Some(json::number_list(x, &p, MAX_POINTS, |d| {
                if (0.0..1.0).contains(&d) {
                    Ok(d)
                } else {
                    Err(format!("must be a number in [0, 1), got {d}"))
                }
            })?);
        }
        if let Some((x, p)) = f.optional("budget") {
            req.budget = Some(Budget::from_json(x, &p)?);
        }
        f.finish()?;
        Ok(req)
    }
}

/// `POST /v1/accountant/compose`: the stateless request.
pub fn compose_request(v: &Value) -> Result<AccountRequest, InputError> {
    AccountRequest::from_json(v)
}

/// A rejected query parameter (`query.deltas[1]`).
fn query_error(location: String, reason: impl Into<String>) -> InputError {
    InputError {
        path: location,
        reason: reason.into(),
    }
}

/// How a number in [0, 1] is written in a query list (δ, α): a plain decimal (`0.05`, `.5`,
/// `1`, `1.0`) or one digit with a negative power of ten (`1e-5`, `2.5E-3`). Every string it
/// matches parses to a value in [0, 1] (one digit times 10⁻ᵏ, k ≥ 1, is below 1), so the OpenAPI
/// pattern built from it ([`list_pattern`]) states exactly what the parser accepts.
pub const UNIT_NUMBER: &str =
    r"(?:0+(?:\.[0-9]*)?|0*\.[0-9]+|0*1(?:\.0*)?|[0-9](?:\.[0-9]*)?[eE]-0*[1-9][0-9]*)";

/// How a number in [0, 10⁶] is written in a query list (ε): up to six integer digits with an
/// optional fraction, optionally times a power of ten that is not positive (`2`, `0.5`,
/// `123456.7`, `5e-3`); never above 999999.99… (which may round to 10⁶, still in range).
pub const EPSILON_NUMBER: &str = r"(?:(?:[0-9]{1,6}(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]-0*[0-9]+)?)";

/// The pattern of a comma-separated list of `number`s (no spaces, no empty elements).
pub fn list_pattern(number: &str) -> String {
    format!("^{number}(?:,{number})*$")
}

/// A comma-separated list of numbers in query parameter `name`, each written as `grammar` says
/// ([`UNIT_NUMBER`], [`EPSILON_NUMBER`]) and checked.
fn number_list<T>(
    q: &HashMap<String, String>,
    name: &str,
    grammar: &Grammar,
    check: fn(f64) -> Result<T, String>,
) -> Result<Option<Vec<T>>, InputError> {
    let Some(s) = q.get(name) else {
        return Ok(None);
    };
    let parts: Vec<&str> = s.split(',').collect();
    if parts.len() > MAX_POINTS {
        return Err(query_error(
            format!("query.{name}"),
            format!("at most {MAX_POINTS} values"),
        ));
    }
    parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let loc = format!("query.{name}[{i}]");
            let x: f64 = Some(p)
                .filter(|p| grammar.0.is_match(p))
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| {
                    query_error(
                        loc.clone(),
                        format!("{p:?} is not {} (comma-separated, no spaces)", grammar.1),
                    )
                })?;
            check(x).map_err(|r| query_error(loc, r))
        })
        .collect::<Result<Vec<T>, InputError>>()
        .map(Some)
}

/// A number grammar anchored and compiled, with what it accepts in words.
struct Grammar(regex::Regex, &'static str);

/// [`UNIT_NUMBER`] and [`EPSILON_NUMBER`], compiled once.
static UNIT: std::sync::LazyLock<Grammar> = std::sync::LazyLock::new(|| {
    grammar(
        UNIT_NUMBER,
        "a number in [0, 1] written like 0.05, 1 or 1e-5",
    )
});
static EPSILON: std::sync::LazyLock<Grammar> = std::sync::LazyLock::new(|| {
    grammar(
        EPSILON_NUMBER,
        "a number in [0, 1e6] written like 2, 0.5 or 5e-3",
    )
});

fn grammar(number: &str, says: &'static str) -> Grammar {
    let re = regex::Regex::new(&format!("^{number}$")).expect("the number grammars compile");
    Grammar(re, says)
}

/// `GET /v1/datasets/{id}/report?deltas=&epsilons=&alphas=`.
pub fn report_query(q: &HashMap<String, String>) -> Result<ReportOptions, InputError> {
    let mut o = ReportOptions::default();
    if let Some(v) = number_list(q, "deltas", &UNIT, Delta::new)? {
        o.deltas = v;
    }
    if let Some(v) = number_list(q, "epsilons", &EPSILON, Epsilon::new)? {
        o.epsilons = v;
    }
    if let Some(v) = number_list(q, "alphas", &UNIT, Alpha::new)? {
        o.alphas = v;
    }
    if let Some(k) = q.get("group_size") {
        let max = crate::accountant::params::MAX_GROUP_SIZE;
        let k = k.parse::<u64>().map_err(|_| {
            query_error(
                "query.group_size".into(),
                format!("must be a whole number in [1, {max}], got {k:?}"),
            )
        })?;
        o.group_size = Some(
            crate::accountant::params::group_size(k)
                .map_err(|r| query_error("query.group_size".into(), r))?,
        );
    }
    Ok(o)
}

/// `GET /v1/datasets/{id}/headline?delta=`: the δ of its ε figures, in (0, 1).
pub fn headline_delta(q: &HashMap<String, String>) -> Result<Option<f64>, InputError> {
    let Some(v) = q.get("delta") else {
        return Ok(None);
    };
    match v.parse::<f64>() {
        Ok(d) if d > 0.0 && d < 1.0 => Ok(Some(d)),
        _ => Err(query_error(
            "query.delta".into(),
            format!("must be a number in (0, 1) (written like 1e-5), got {v:?}"),
        )),
    }
}

/// `points` α values: half log-spaced over [1e-10, 1e-2), half evenly over [1e-2, 1].
fn curve_alphas(points: usize) -> Vec<Alpha> {
    let low = points / 2;
    let high = points - low;
    let mut a: Vec<f64> = (0..low)
        .map(|i| 10f64.powf(-10.0 + 8.0 * i as f64 / low.max(1) as f64))
        .collect();
    a.extend((0..high).map(|i| 0.01 + 0.99 * i as f64 / (high.max(2) - 1) as f64));
    a.into_iter()
        .map(|x| Alpha::new(x.min(1.0)).expect("in [0, 1]"))
        .collect()
}

/// `GET /v1/datasets/{id}/tradeoff?points=` or `?alpha=`: the α values of the curve.
pub fn tradeoff_query(q: &HashMap<String, String>) -> Result<Vec<Alpha>, InputError> {
    let points = match q.get("points") {
        None => None,
        Some(p) => Some(
            p.parse::<usize>()
                .ok()
                .filter(|n| (2..=10_000).contains(n))
                .ok_or_else(|| {
                    query_error(
                        "query.points".into(),
                        "must be a whole number in [2, 10000]",
                    )
                })?,
        ),
    };
    let given = number_list(q, "alpha", &UNIT, Alpha::new)?;
    Ok(match (given, points) {
        (None, None) => curve_alphas(100),
        (None, Some(n)) => curve_alphas(n),
        (Some(a), None) => a,
        // Both: the curve's points and the values asked for, in order, each once.
        (Some(mut a), Some(n)) => {
            a.extend(curve_alphas(n));
            a.sort_by(|x, y| x.get().total_cmp(&y.get()));
            a.dedup();
            a
        }
    })
}

/// `PUT /v1/datasets/{id}/quotas/{principal}`: `{mu, delta}`, a share of the dataset's budget.
pub fn quota_request(
    v: &Value,
    idempotency_key: Option<String>,
) -> Result<super::input::QuotaRequest, InputError> {
    let root = JsonPath::root();
    let mut f = Fields::new(v, &root)?;
    let (m, p) = f.required("mu")?;
    let mu = json::number(m, &p)?;
    if !(mu >= 0.0 && mu <= MAX_BUDGET_MU) {
        return Err(InputError::new(
            &p,
            format!("must be a number in [0, {MAX_BUDGET_MU}]"),
        ));
    }
    let (d, p) = f.required("delta")?;
    let delta = json::number(d, &p)?;
    if !(delta >= 0.0 && delta < 1.0) {
        return Err(InputError::new(&p, "must be a number in [0, 1)"));
    }
    f.finish()?;
    Ok(super::input::QuotaRequest {
        mu,
        delta,
        idempotency_key,
        request_hash: request_hash("quota", v),
    })
}

/// `PUT /v1/datasets/{id}/grants/{principal}`: `{role}`.
pub fn grant_request(v: &Value) -> Result<String, InputError> {
    let root = JsonPath::root();
    let mut f = Fields::new(v, &root)?;
    let (r, p) = f.required("role")?;
    let role = json::string(r, &p)?;
    if !super::principal::ROLES.contains(&role) {
        return Err(InputError::new(
            &p,
            format!("must be one of {}", super::principal::ROLES.join(", ")),
        ));
    }
    f.finish()?;
    Ok(role.to_owned())
}

/// Longest token lifetime accepted (days).
pub const MAX_TOKEN_DAYS: u64 = 3650;

/// `POST /v1/tokens`: `{name, role, expires_in_days?}`.
pub fn token_request(v: &Value) -> Result<(String, String, Option<u64>), InputError> {
    let root = JsonPath::root();
    let mut f = Fields::new(v, &root)?;
    let (n, p) = f.required("name")?;
    let name =
        super::names::principal_name(json::string(n, &p)?).map_err(|r| InputError::new(&p, r))?;
    let (r, p) = f.required("role")?;
    let role = json::string(r, &p)?;
    if !super::principal::GLOBAL_ROLES.contains(&role) {
        return Err(InputError::new(
            &p,
            format!(
                "must be one of {}",
                super::principal::GLOBAL_ROLES.join(", ")
            ),
        ));
    }
    let days = match f.optional("expires_in_days") {
        None => None,
        Some((d, p)) => {
            let d = json::integer(d, &p, 1)?;
            if d > MAX_TOKEN_DAYS {
                return Err(InputError::new(
                    &p,
                    format!("must be at most {MAX_TOKEN_DAYS}"),
                ));
            }
            Some(d)
        }
    };
    f.finish()?;
    Ok((name, role.to_owned(), days))
}

/// `PUT /v1/datasets/{id}/blocks/{block}`: `{description?}` (at most 4096 characters).
pub fn block_declaration(v: &Value) -> Result<Option<String>, InputError> {
    let root = JsonPath::root();
    let mut f = Fields::new(v, &root)?;
    let description = match f.optional("description") {
        None => None,
        Some((x, p)) => {
            let s = json::string(x, &p)?;
            if s.chars().count() > 4096 {
                return Err(InputError::new(&p, "must be at most 4096 characters"));
            }
            Some(s.to_owned())
        }
    };
    f.finish()?;
    Ok(description)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn list(name: &str, value: &str) -> HashMap<String, String> {
        HashMap::from([(name.to_owned(), value.to_owned())])
    }

    proptest! {
        /// Whatever the OpenAPI pattern allows, the parser accepts (and the value is in range).
        #[test]
        fn every_number_the_spec_allows_is_accepted(a in UNIT_NUMBER, b in UNIT_NUMBER, e in EPSILON_NUMBER) {
            let q = list("deltas", &format!("{a},{b}"));
            prop_assert_eq!(number_list(&q, "deltas", &UNIT, Delta::new).map(|v| v.map(|v| v.len())), Ok(Some(2)));
            let q = list("epsilons", &e);
            prop_assert!(number_list(&q, "epsilons", &EPSILON, Epsilon::new).is_ok());
        }
    }

    #[test]
    fn what_the_spec_refuses_the_parser_refuses() {
        let spec = regex::Regex::new(&list_pattern(UNIT_NUMBER)).unwrap();
        for good in [
            "0",
            "0.05",
            ".5",
            "1",
            "1.0",
            "1e-5",
            "2.5E-3",
            "1e-5,1e-9",
            "0.",
            "00.5",
        ] {
            assert!(spec.is_match(good), "{good}");
            assert!(
                number_list(&list("d", good), "d", &UNIT, Delta::new).is_ok(),
                "{good}"
            );
        }
        for bad in [
            "", ".", "2", "10e-2", " 0.1", "0.1,", ",0.1", "0.1, 0.2", "1e5", "-0", "NaN", "inf",
            "1.5",
        ] {
            assert!(!spec.is_match(bad), "{bad:?}");
            assert!(
                number_list(&list("d", bad), "d", &UNIT, Delta::new).is_err(),
                "{bad:?}"
            );
        }
        let spec = regex::Regex::new(&list_pattern(EPSILON_NUMBER)).unwrap();
        for good in ["2", "0.5", "123456.7", "5e-3", "999999.99999999999999"] {
            assert!(spec.is_match(good), "{good}");
            assert!(
                number_list(&list("e", good), "e", &EPSILON, Epsilon::new).is_ok(),
                "{good}"
            );
        }
        for bad in ["1000000", "1e6", "5e3", "-1", ""] {
            assert!(!spec.is_match(bad), "{bad:?}");
            assert!(
                number_list(&list("e", bad), "e", &EPSILON, Epsilon::new).is_err(),
                "{bad:?}"
            );
        }
    }
}
