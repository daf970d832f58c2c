//! Charges on several ledgers at once — the blocks of a partitioned dataset a query reads, several
//! datasets a join reads, or both — admitted on all of them or on none, with one idempotency key.
//!
//! # How it stays atomic and deadlock-free
//! - The ledgers are put in increasing id order. This process takes their locks in that order, and
//!   the store's [`Store::append_many`] writes them in that order in one transaction (on
//!   PostgreSQL each `UPDATE … WHERE version = $expected` takes the row lock in that order), so
//!   two charges touching overlapping ledgers never wait on each other in a cycle, on one replica
//!   or across several.
//! - Every ledger is gated on the row and state read under those locks; the transaction's
//!   compare-and-swap on every version makes the decision exact: if any ledger moved (a replica
//!   charged it, or created the same new block), the whole transaction writes nothing and the
//!   charge starts over from the store. A block that does not exist yet is gated as an empty
//!   ledger with the dataset's per-block budget and is created by the same transaction.
//! - A rejection by any ledger writes nothing to any ledger (only the rejection's audit record).
//! - The idempotency key is stored on every ledger's entry; the ledger with the smallest id is
//!   where a retry finds it (all or none of the entries exist).
//!
//! [`Store::append_many`]: crate::store::Store::append_many

use super::budget::CertificateView;
use super::calibration::Certified;
use super::compute::blocking;
use super::error::LedgerError;
use super::filter::Limit;
use super::filter::{Gate, Verdict};
use super::input::{MultiChargeRequest, Target};
use super::partition::{self, BlockSelector, Partitioning, MAX_BLOCKS};
use super::principal::{Action, Actor};
use super::rows::{budget_of, engine_of, filter_of, grid_step_of, relation_of, unchanged};
use super::verdict::{gate_cost, rejection, unit_delta};
use super::views::{view, ChargeOutcome};
use super::write::{BlockPlan, Plan, PlanFuture, Written, SHARED_BODY};
use super::{admission, audit, quotas, Ledgers};
use crate::accountant::certificate::Certificate;
use crate::accountant::composition::Composition;
use crate::accountant::json::JsonPath;
use crate::accountant::params::GridStep;
use crate::accountant::NeighboringRelation;
use crate::store::{DatasetRow, EntryRow, LedgerAppend, QuotaRow, SharedBody};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use utoipa::ToSchema;

/// One ledger a charge is recorded on.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LedgerCharge {
    /// The ledger: a dataset's id, or a block's `dataset@block`.
    pub ledger_id: String,
    pub dataset_id: String,
    /// The block, on a partitioned dataset.
    pub block: Option<String>,
    /// The entry's position in this ledger.
    pub seq: i64,
    /// The unit's certificate (μᵢ, δᵢ) on this ledger (its own δ rule and filter).
    pub unit: CertificateView,
    /// This ledger's filter after the charge.
    pub mu_spent: f64,
    pub delta_spent: f64,
    pub remaining_mu: f64,
    pub remaining_delta: f64,
    /// What is left of this ledger's budget and of the share that paid, after the charge.
    pub remaining: super::views::Remaining,
    /// Whether this charge created the ledger (a block's first charge).
    pub created: bool,
    /// The event charged on this ledger, when its dataset named its own (`datasets[i].event`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub event: Option<Value>,
}

/// A charge recorded on several ledgers (`POST /v1/charges`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MultiCharge {
    /// The charge's id, the same on every ledger it is recorded on.
    pub id: String,
    #[schema(value_type = Object)]
    pub event: Value,
    pub label: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    pub idempotency_key: Option<String>,
    /// In increasing `ledger_id` order.
    pub ledgers: Vec<LedgerCharge>,
    /// RFC 3339.
    pub created_at: String,
}

/// The 201/200 body of `POST /v1/charges`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MultiChargeBody {
    pub charge: MultiCharge,
}

/// A block of a partitioned dataset and what it has spent (blocks nobody charged yet show their
/// whole budget).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BlockView {
    pub block: String,
    pub ledger_id: String,
    /// A time block's span `[start, end)` (RFC 3339); absent for named partitions.
    pub start: Option<String>,
    pub end: Option<String>,
    /// Whether the block exists (a time block: has been charged; a named partition: was declared).
    pub exists: bool,
    /// What the block holds (a named partition: as its admin declared it).
    pub description: String,
    /// Past the retention horizon: no charge may name it.
    pub read_only: bool,
    pub budget: super::budget::Budget,
    pub mu_spent: f64,
    pub delta_spent: f64,
    pub remaining_mu: f64,
    pub remaining_delta: f64,
    /// The share of the block's budget used (as a dataset's `used_fraction`).
    pub used_fraction: f64,
    pub exhausted: bool,
    pub units: i64,
}

/// `GET /v1/datasets/{id}/blocks`: blocks, and over a range what is left for all of them.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BlocksView {
    #[schema(value_type = Object)]
    pub partitioning: Value,
    pub items: Vec<BlockView>,
    /// Without a range: the cursor of the next page of existing blocks.
    pub next: Option<String>,
    /// With a range: the block with the least remaining μ (the one that decides a range
    /// charge), and the least remaining μ and δ over the range.
    pub tightest: Option<String>,
    pub remaining_mu: Option<f64>,
    pub remaining_delta: Option<f64>,
}

/// A ledger a charge names, resolved.
#[derive(Debug, Clone)]
struct Resolved {
    dataset: String,
    block: Option<String>,
    /// The dataset's own event (`datasets[i].event`), if it has one; else the request's.
    event: Option<Arc<crate::accountant::Event>>,
    /// A time block, created by its first charge if it does not exist (from the dataset's
    /// per-block budget and quotas, read on every attempt).
    creatable: bool,
}

/// A ledger as read for one attempt.
struct Part {
    id: String,
    spec: Resolved,
    row: DatasetRow,
    exists: bool,
    gate: Gate,
    quota_row: Option<QuotaRow>,
    /// A new block: its parent's id and version (its row and quotas were copied at it; see
    /// [`crate::store::LedgerAppend::hold`]) and its quota rows, nothing spent.
    new: Option<((String, i64), Vec<QuotaRow>)>,
    /// The ledger's relation and grid step.
    engine: (NeighboringRelation, GridStep),
}

/// The first row of block `name` of `parent`: the dataset's per-block budget, relation and grid.
fn block_template(parent: &DatasetRow, name: &str) -> Result<DatasetRow, LedgerError> {
    // The per-block budget as it was given (an (ε, δ) target stays the block's).
    let budget_target = parent.budget_target.clone();
    let row = super::rows::empty_row(
        partition::block_id(&parent.id, name),
        format!("block {name} of {}", parent.id),
        &parent.neighboring_relation,
        (
            budget_of(parent)?,
            grid_step_of(parent)?,
            super::rows::cap_of(parent)?,
        ),
        None,
    );
    let population = super::views::population_of(parent)?.of_block().stored();
    Ok(DatasetRow {
        budget_target,
        population,
        ..row
    })
}

fn invalid(e: crate::accountant::json::InputError) -> LedgerError {
    LedgerError::Invalid(e.path, e.reason)
}

impl Ledgers {
    /// A dataset's partitioning (`None`: not partitioned; [`LedgerError::NotFound`] when there is
    /// no such dataset). Kept once read: it is fixed at creation, and existence and partitioning
    /// are read in one query (a dataset is created with its partitioning in one transaction), so
    /// what is kept is never the answer for a dataset created afterwards.
    pub(super) async fn partitioning_of(
        &self,
        id: &str,
    ) -> Result<Option<Partitioning>, LedgerError> {
        let kept = self
            .partitionings
            .lock()
            .expect("partitionings")
            .get(&id.to_owned());
        if let Some(p) = kept {
            return Ok(p);
        }
        let p =
            match self.store.partitioning(id).await? {
                None => return Err(LedgerError::NotFound(id.to_owned())),
                Some(None) => None,
                Some(Some(s)) => Some(Partitioning::from_stored(&s).map_err(|e| {
                    LedgerError::Corrupt(id.to_owned(), format!("partitioning: {e}"))
                })?),
            };
        self.partitionings.lock().expect("partitionings").insert(
            id.to_owned(),
            p.clone(),
            id.len() + 128,
        );
        Ok(p)
    }

    /// The ledgers `targets` name, by id (authorised for spending; at most [`MAX_BLOCKS`]), and
    /// why the first read-only block among them may not be charged, if one is.
    async fn resolve(
        &self,
        actor: &Actor,
        targets: &[Target],
    ) -> Result<(BTreeMap<String, Resolved>, Option<String>), LedgerError> {
        let now = chrono::Utc::now();
        let mut out = BTreeMap::new();
        let mut read_only = None;
        for (i, t) in targets.iter().enumerate() {
            let path = JsonPath::root().field("datasets").index(i);
            // One allocation per dataset: its blocks share one certification.
            let own_event = t.event.clone().map(Arc::new);
            self.authorize(actor, &t.dataset, Action::Spend).await?;
            self.row(&t.dataset).await?;
            match (self.partitioning_of(&t.dataset).await?, &t.blocks) {
                (None, None) => {
                    out.insert(
                        t.dataset.clone(),
                        Resolved {
                            dataset: t.dataset.clone(),
                            block: None,
                            creatable: false,
                            event: own_event.clone(),
                        },
                    );
                }
                (None, Some(_)) => {
                    return Err(LedgerError::Invalid(
                        path.field("blocks").to_string(),
                        format!("dataset {:?} is not partitioned", t.dataset),
                    ))
                }
                (Some(_), None) => {
                    return Err(LedgerError::Invalid(
                        path.to_string(),
                        format!(
                            "dataset {:?} is partitioned: name the blocks the query reads in \
                             \"blocks\" or \"time_range\"",
                            t.dataset
                        ),
                    ))
                }
                (Some(p), Some(sel)) => {
                    let names = p.blocks(sel, &path).map_err(invalid)?;
                    for name in names {
                        if let Some(why) = p.beyond_horizon(&name, now) {
                            return Err(LedgerError::Invalid(path.to_string(), why));
                        }
                        if read_only.is_none() {
                            read_only = p.read_only(&name, now);
                        }
                        let id = partition::block_id(&t.dataset, &name);
                        // A named partition exists only once an admin declared it: a caller
                        // cannot mint a fresh budget for records it reads under a new name.
                        let creatable = match p {
                            Partitioning::Named => {
                                if self.store.get_dataset(&id).await?.is_none() {
                                    return Err(LedgerError::Invalid(
                                        path.field("blocks").to_string(),
                                        format!(
                                            "partition {name:?} of dataset {:?} is not declared: \
                                             an admin of the dataset declares each named \
                                             partition (PUT /v1/datasets/{}/blocks/{name}) \
                                             before a charge may name it",
                                            t.dataset, t.dataset
                                        ),
                                    ));
                                }
                                false
                            }
                            Partitioning::Time { .. } => true,
                        };
                        out.insert(
                            id,
                            Resolved {
                                dataset: t.dataset.clone(),
                                creatable,
                                block: Some(name),
                                event: own_event.clone(),
                            },
                        );
                    }
                }
            }
            if out.len() > MAX_BLOCKS {
                return Err(LedgerError::Invalid(
                    "datasets".into(),
                    format!("names more than {MAX_BLOCKS} ledgers (datasets and blocks)"),
                ));
            }
        }
        Ok((out, read_only))
    }

    /// Gates a unit on every ledger `req` names and records it on all of them, or on none.
    /// See the module docs.
    ///
    /// Metrics: `privacy_ledger_multi_charges_total{outcome}` and
    /// `privacy_ledger_multi_charge_seconds` (no label per ledger: blocks grow without bound).
    #[tracing::instrument(skip(self, actor, req), fields(targets = req.targets.len()))]
    pub async fn charge_many(
        &self,
        actor: &Actor,
        req: MultiChargeRequest,
    ) -> Result<ChargeOutcome, LedgerError> {
        let started = std::time::Instant::now();
        let result = self.charge_many_inner(actor, req).await;
        metrics::histogram!("privacy_ledger_multi_charge_seconds")
            .record(started.elapsed().as_secs_f64());
        metrics::counter!("privacy_ledger_multi_charges_total", "outcome" => super::charge::outcome_of(&result))
            .increment(1);
        result
    }

    async fn charge_many_inner(
        &self,
        actor: &Actor,
        req: MultiChargeRequest,
    ) -> Result<ChargeOutcome, LedgerError> {
        let (ledgers, read_only) = self.resolve(actor, &req.targets).await?;
        let first = ledgers.keys().next().cloned().ok_or_else(|| {
            LedgerError::Invalid("datasets".into(), "must name at least one dataset".into())
        })?;
        let key = super::keys::IdemKey::of(
            &actor.principal,
            super::keys::Operation::MultiCharge,
            "",
            req.idempotency_key.as_ref(),
        );
        let key = key.as_ref();
        // A new block copies its dataset's quotas: its creation also takes the dataset's lock,
        // so a quota change in this process waits for it instead of starting over behind every
        // block created meanwhile. In id order (see the module docs): a dataset's id sorts
        // before its blocks'.
        let mut ids: std::collections::BTreeSet<&str> =
            ledgers.keys().map(String::as_str).collect();
        for id in ledgers.keys() {
            if let Some((parent, _)) = super::partition::split_block_id(id) {
                let known = self.gates.lock().expect("gate inputs").get(id).is_some();
                if !known && self.store.get_dataset(id).await?.is_none() {
                    ids.insert(parent);
                }
            }
        }
        let locks: Vec<&str> = ids.into_iter().collect();
        let event_json = req.event.to_json();
        // New block ledgers already counted against the principal's limit by an earlier attempt.
        let taken = std::sync::atomic::AtomicUsize::new(0);
        let (req, ledgers, read_only, event_json, taken) =
            (&req, &ledgers, &read_only, &event_json, &taken);
        let plan = move || -> PlanFuture<'_, Landing> {
            Box::pin(async move {
                // After the replay (under the locks, every attempt): a retry replays even once a
                // block it charged has become read-only.
                if let Some(why) = read_only {
                    return Err(LedgerError::ReadOnly(why.clone()));
                }
                let parts = self.read_parts(actor, ledgers).await?;
                self.try_many(actor, req, key, event_json, parts, taken)
                    .await
            })
        };
        match self
            .write_many(&locks, &first, key, &req.request_hash, plan)
            .await?
        {
            Written::Planned((body, landed), _) => {
                for (id, version, analytic) in landed {
                    self.composed_later(&id, version, analytic);
                }
                Ok(ChargeOutcome {
                    created: true,
                    body,
                })
            }
            Written::Replayed(body) => Ok(ChargeOutcome {
                created: false,
                body,
            }),
        }
    }

    /// Every ledger's row (checked against its audit log) and quotas as the store has them now.
    async fn read_parts(
        &self,
        actor: &Actor,
        ledgers: &BTreeMap<String, Resolved>,
    ) -> Result<Vec<Part>, LedgerError> {
        // The parents of new blocks, with their quotas, read once per attempt.
        let mut parents: HashMap<String, (DatasetRow, Vec<QuotaRow>)> = HashMap::new();
        let mut parts = Vec::with_capacity(ledgers.len());
        for (id, spec) in ledgers {
            let existing = match self.store.get_dataset(id).await? {
                // `resolve` converted every version-1 ledger before the locks were taken (its
                // conversion takes the same lock): one still unconverted is being written.
                Some(r) if r.mu_sq_spent.is_none() => return Err(LedgerError::Busy),
                other => other,
            };
            let (row, quotas, new) = match (existing, &spec.block) {
                (Some(r), _) => {
                    self.check_state(&r).await?;
                    let quotas = self.store.list_quotas(id).await?;
                    (r, quotas, None)
                }
                (None, Some(name)) if spec.creatable => {
                    if !parents.contains_key(&spec.dataset) {
                        let parent = self.row(&spec.dataset).await?;
                        let q = self.store.list_quotas(&spec.dataset).await?;
                        parents.insert(spec.dataset.clone(), (parent, q));
                    }
                    let (parent, parent_quotas) = &parents[&spec.dataset];
                    let row = block_template(parent, name)?;
                    let quotas = quotas::for_new_block(parent_quotas, id, &row.created_at);
                    let hold = (parent.id.clone(), parent.version);
                    (row, quotas.clone(), Some((hold, quotas)))
                }
                (None, _) => return Err(LedgerError::NotFound(id.clone())),
            };
            let exists = new.is_none();
            let (gate, quota_row) = Self::gate_for(&row, &quotas, &actor.principal.name)?;
            let engine = engine_of(&row)?;
            parts.push(Part {
                id: id.clone(),
                spec: spec.clone(),
                row,
                exists,
                gate,
                quota_row,
                new,
                engine,
            });
        }
        Ok(parts)
    }

    /// One attempt's plan: gate every part, and if all admit, append on all (answering the body,
    /// and each ledger's id, new version and whether its unit composes analytically).
    async fn try_many(
        &self,
        actor: &Actor,
        req: &MultiChargeRequest,
        key: Option<&super::keys::IdemKey>,
        event_json: &Value,
        parts: Vec<Part>,
        taken: &std::sync::atomic::AtomicUsize,
    ) -> Result<Plan<Landing>, LedgerError> {
        let event_of = |p: &Part| p.spec.event.clone();
        // Certificates this process does not hold may be in the store (this build, earlier).
        let (mut unknown, mut asked) = (Vec::new(), std::collections::HashSet::new());
        for p in &parts {
            let e = p.spec.event.as_deref().unwrap_or(&req.event);
            let rule = unit_delta(&p.gate.budget, req.delta);
            if let Some(k) = self
                .recall_certificates(e, p.engine, rule, &mut asked)
                .await
            {
                unknown.push((k, e.clone(), p.engine, rule));
            }
        }
        let cost = admission::Cost::light_if(parts.iter().all(|p| {
            let e = p.spec.event.as_deref().unwrap_or(&req.event);
            gate_cost(e, p.engine, &p.gate.budget, req.delta) == admission::Cost::Light
        }));
        let inputs: Vec<GateInput> = parts
            .iter()
            .map(|p| (p.gate.clone(), p.engine, event_of(p)))
            .collect();
        let (event, own) = (req.event.clone(), req.delta);
        let gated = blocking(&self.admission, cost, move || {
            gate_all(&event, own, &inputs)
        })
        .await?;
        for (k, e, (relation, h), rule) in unknown {
            if let Some(c) = super::certificates::cached(&e, relation, h, rule) {
                self.persist_certificates(k, &c);
            }
        }
        // Each ledger's event as recorded: its own, or the request's.
        let recorded = |p: &Part| -> Value {
            p.spec
                .event
                .as_ref()
                .map_or_else(|| event_json.clone(), |e| e.to_json())
        };
        // The first refusal, in id order, is the answer; nothing is written to any ledger.
        for (p, (unit, verdict)) in parts.iter().zip(&gated) {
            if let Verdict::Rejected(by, why) = verdict {
                let mut r = rejection(&p.gate, *unit, by.clone(), *why);
                r.dataset_id = Some(p.id.clone());
                r.reason = format!("ledger {:?}: {}", p.id, r.reason);
                let audit = audit::draft(actor, "unit.rejected", Some(&p.id), None)
                    .before(&serde_json::json!({
                        "mu_spent": p.gate.state.mu(), "delta_spent": p.gate.state.delta()
                    }))
                    .after(&serde_json::json!({
                        "event": recorded(p), "unit": r.unit, "quota": r.quota,
                        "reason": r.reason, "ledgers": parts.len()
                    }))
                    .done();
                self.store.audit(&audit).await?;
                return Err(LedgerError::BudgetExceeded(Box::new(r)));
            }
        }
        // New blocks: at most so many per request, and per principal per minute.
        let new = parts.iter().filter(|p| !p.exists).count();
        if new > partition::MAX_NEW_LEDGERS_PER_REQUEST {
            return Err(LedgerError::Invalid(
                "datasets".into(),
                format!(
                    "would create {new} new block ledgers; at most {} per charge (charge \
                     blocks nobody charged yet in parts)",
                    partition::MAX_NEW_LEDGERS_PER_REQUEST
                ),
            ));
        }
        // Counted once per request: an attempt that lost a race and starts over takes only what
        // it needs beyond the earlier attempts'.
        let more = new.saturating_sub(taken.load(std::sync::atomic::Ordering::Relaxed));
        if more > 0 {
            let now = std::time::Instant::now();
            if let Err(retry) = self.created.take(&actor.principal.name, more, now) {
                return Err(LedgerError::TooManyNewLedgers(
                    retry,
                    format!(
                        "{:?} created more than {} new block ledgers in the last minute; retry \
                         in {retry} s",
                        actor.principal.name,
                        partition::MAX_NEW_LEDGERS_PER_MINUTE
                    ),
                ));
            }
            taken.fetch_add(more, std::sync::atomic::Ordering::Relaxed);
        }
        let ts = super::rows::now();
        let charge_id = uuid::Uuid::now_v7().to_string();
        let mut ledgers = Vec::with_capacity(parts.len());
        for (p, (unit, verdict)) in parts.iter().zip(&gated) {
            let Verdict::Admitted(after, share_after) = verdict else {
                unreachable!("every refusal returned above")
            };
            ledgers.push(LedgerCharge {
                ledger_id: p.id.clone(),
                dataset_id: p.spec.dataset.clone(),
                block: p.spec.block.clone(),
                seq: p.row.version + 1,
                unit: CertificateView {
                    mu: unit.mu(),
                    delta: unit.delta(),
                },
                mu_spent: after.mu(),
                delta_spent: after.delta(),
                remaining_mu: p.gate.budget.remaining_mu(after),
                remaining_delta: p.gate.budget.remaining_delta(after),
                remaining: super::views::Remaining::after(&p.gate, after, share_after.as_ref()),
                created: !p.exists,
                event: p.spec.event.as_ref().map(|e| e.to_json()),
            });
        }
        let body = serde_json::to_value(MultiChargeBody {
            charge: MultiCharge {
                id: charge_id.clone(),
                event: event_json.clone(),
                label: req.label.clone(),
                metadata: req.metadata.clone(),
                idempotency_key: key.map(|k| k.raw().to_owned()),
                ledgers,
                created_at: ts.clone(),
            },
        })
        .map_err(super::error::internal)?;
        // The response is stored once; every ledger's entry refers to it.
        let shared = SharedBody::new(body.to_string());
        let stored = serde_json::json!({ SHARED_BODY: shared.digest }).to_string();
        // New blocks of one (relation, grid step) share one serialised empty composition.
        let mut empty_bytes: HashMap<(NeighboringRelation, u64), Arc<Vec<u8>>> = HashMap::new();
        let mut items = Vec::with_capacity(parts.len());
        for (p, (unit, verdict)) in parts.iter().zip(gated) {
            let Verdict::Admitted(after, share_after) = verdict else {
                unreachable!("every refusal returned above")
            };
            let entry = EntryRow {
                seq: p.row.version + 1,
                charge_id: Some(charge_id.clone()),
                event: Some(recorded(p).to_string()),
                label: req.label.clone(),
                metadata: req.metadata.as_ref().map(Value::to_string),
                idempotency_key: key.map(|k| k.stored().to_owned()),
                request_hash: Some(req.request_hash.clone()),
                mu_after: Some(after.mu()),
                unit_mu: Some(unit.mu()),
                unit_delta: Some(unit.delta()),
                response: Some(stored.clone()),
                status: Some("committed".into()),
                principal: Some(actor.principal.name.clone()),
                quota: p.gate.share.as_ref().map(|s| s.holder.clone()),
                ..EntryRow::new("charge", ts.clone())
            };
            let audit = audit::draft(actor, "unit.admitted", Some(&p.id), Some(&charge_id))
                .before(&serde_json::json!({
                    "mu_spent": p.gate.state.mu(), "delta_spent": p.gate.state.delta()
                }))
                .after(&serde_json::json!({
                    "unit": CertificateView { mu: unit.mu(), delta: unit.delta() },
                    "mu_spent": after.mu(), "delta_spent": after.delta(),
                    "ledgers": parts.len(), "created": !p.exists
                }))
                .done();
            let update = crate::store::DatasetUpdate {
                charges: p.row.charges + 1,
                quotas: {
                    // A new block's rows, all of them; else the one the unit was charged to.
                    let mut rows = p.new.as_ref().map(|n| n.1.clone()).unwrap_or_default();
                    if let (Some(q), Some(s)) = (&p.quota_row, share_after) {
                        let c = quotas::charged(q, &s, &ts);
                        rows.retain(|r| r.principal != c.principal);
                        rows.push(c);
                    }
                    rows
                },
                audit: Some(audit),
                ..unchanged(&p.row, &after, ts.clone())
            };
            let create = (!p.exists).then(|| {
                let (relation, h) = p.engine;
                let empty = empty_bytes
                    .entry((relation, h.get().to_bits()))
                    .or_insert_with(|| Arc::new(Composition::new(relation, h).to_bytes()))
                    .clone();
                (p.row.clone(), empty)
            });
            items.push(LedgerAppend {
                id: p.id.clone(),
                expected_version: p.row.version,
                create,
                entry,
                update,
                hold: p.new.as_ref().map(|n| n.0.clone()),
                blocks: None,
            });
        }
        let landed = items
            .iter()
            .zip(&parts)
            .map(|(it, p)| {
                let e = p.spec.event.as_deref().unwrap_or(&req.event);
                let analytic = super::compute::analytic(e, p.engine.0);
                (it.id.clone(), it.expected_version + 1, analytic)
            })
            .collect();
        Ok(Plan::AppendMany {
            items,
            shared: Some(shared),
            answer: (body, landed),
        })
    }

    /// The gates a calibration on `row` judges against: the dataset's own, or on a partitioned
    /// dataset every block `blocks` names (uncharged ones empty, read-only ones refused).
    pub(super) async fn calibration_gates(
        &self,
        actor: &Actor,
        row: &DatasetRow,
        blocks: Option<&BlockSelector>,
    ) -> Result<Vec<(Option<String>, Gate)>, LedgerError> {
        let id = row.id.as_str();
        let partitioning = match partition::split_block_id(id) {
            Some(_) => None,
            None => self.partitioning_of(id).await?,
        };
        let (p, sel) = match (partitioning, blocks) {
            (None, None) => {
                let (gate, _) = self.gate_now(row, &actor.principal.name).await?;
                return Ok(vec![(None, gate)]);
            }
            (None, Some(_)) => {
                return Err(LedgerError::Invalid(
                    "$.blocks".into(),
                    format!("dataset {id:?} is not partitioned"),
                ))
            }
            (Some(_), None) => {
                return Err(LedgerError::Invalid(
                    "$".into(),
                    format!(
                        "dataset {id:?} is partitioned: name the blocks to calibrate against in \
                         \"blocks\" or \"time_range\""
                    ),
                ))
            }
            (Some(p), Some(sel)) => (p, sel),
        };
        let now = chrono::Utc::now();
        let mut gates = Vec::new();
        // The dataset's quotas, read once if some named block does not exist yet.
        let mut parent_quotas = None;
        for name in p.blocks(sel, &JsonPath::root()).map_err(invalid)? {
            if let Some(why) = p.read_only(&name, now) {
                return Err(LedgerError::ReadOnly(why));
            }
            let bid = partition::block_id(id, &name);
            let gate = match self.store.get_dataset(&bid).await? {
                Some(r) => self.gate_now(&r, &actor.principal.name).await?.0,
                None => {
                    // What its first charge would be gated on: the dataset's quotas, unspent.
                    let t = block_template(row, &name)?;
                    if parent_quotas.is_none() {
                        parent_quotas = Some(self.store.list_quotas(id).await?);
                    }
                    let q =
                        quotas::for_new_block(parent_quotas.as_deref().unwrap_or(&[]), &bid, "");
                    Self::gate_for(&t, &q, &actor.principal.name)?.0
                }
            };
            gates.push((Some(name), gate));
        }
        Ok(gates)
    }

    /// Declares named partition `name` of dataset `id` (admins of the dataset): its ledger is
    /// created empty, with the dataset's per-block budget and `description` (which records it
    /// holds). Until then no charge may name it, so nobody mints a fresh budget for records by
    /// reading them under a new name (`docs/partitions.md`). Declaring it again changes nothing
    /// (`false`).
    pub async fn declare_block(
        &self,
        actor: &Actor,
        id: &str,
        name: &str,
        description: Option<String>,
    ) -> Result<(BlockView, bool), LedgerError> {
        self.authorize(actor, id, Action::Administer).await?;
        self.row(id).await?;
        let name = partition::block_name(name, &JsonPath::root())
            .map_err(|e| LedgerError::Invalid("path.block".into(), e.reason))?;
        match self.partitioning_of(id).await? {
            Some(Partitioning::Named) => {}
            Some(Partitioning::Time { .. }) => {
                return Err(LedgerError::Invalid(
                    "path.id".into(),
                    format!(
                        "dataset {id:?} has time blocks, which exist by their time: only named \
                         partitions are declared"
                    ),
                ))
            }
            None => {
                return Err(LedgerError::Invalid(
                    "path.id".into(),
                    format!("dataset {id:?} is not partitioned"),
                ))
            }
        }
        // Its budget and quotas are the dataset's at the version they were read at: a quota set
        // meanwhile makes the store refuse the block, and it is made again from the new ones.
        let (name_ref, description) = (&name, &description);
        let plan = move |parent: DatasetRow| -> PlanFuture<'_, ()> {
            Box::pin(async move {
                let mut row = block_template(&parent, name_ref)?;
                if let Some(d) = description {
                    row.description = d.clone();
                }
                // Its declaration is on the dataset's chain; its own chain starts with its state
                // and quota rows at version 0.
                row.states_from = Some(0);
                let quotas = quotas::for_new_block(
                    &self.store.list_quotas(id).await?,
                    &row.id,
                    &row.created_at,
                );
                let state = Composition::new(relation_of(&row)?, grid_step_of(&row)?).to_bytes();
                let audit = audit::draft(actor, "block.declared", Some(id), Some(&row.id))
                    .after(&serde_json::json!({"block": name_ref, "description": row.description}))
                    .done();
                let record = audit::draft(actor, "block.created", Some(&row.id), Some(&row.id))
                    .after(&serde_json::json!({"dataset": id, "block": name_ref}))
                    .done();
                Ok(Plan::CreateBlock {
                    block: Box::new(BlockPlan {
                        row,
                        state,
                        quotas,
                        audit,
                        record,
                    }),
                    answer: (),
                })
            })
        };
        let created = match self.write(id, None, "", plan).await? {
            Written::Planned((), created) => created,
            Written::Replayed(_) => {
                return Err(LedgerError::Internal(
                    "a declaration without a key was replayed".into(),
                ))
            }
        };
        let view = self
            .list_blocks(actor, id, Some(BlockSelector::Names(vec![name])), None, 1)
            .await?
            .items
            .pop()
            .ok_or_else(|| LedgerError::Internal("a declared block is listed".into()))?;
        Ok((view, created))
    }

    /// A partitioned dataset's blocks: a page of the existing ones, or every block `sel` names
    /// (with what is left over them).
    pub async fn list_blocks(
        &self,
        actor: &Actor,
        id: &str,
        sel: Option<BlockSelector>,
        after: Option<&str>,
        limit: i64,
    ) -> Result<BlocksView, LedgerError> {
        self.authorize(actor, id, Action::Read).await?;
        let parent = self.row(id).await?;
        let p = self.partitioning_of(id).await?.ok_or_else(|| {
            LedgerError::Invalid(
                "path.id".into(),
                format!("dataset {id:?} is not partitioned"),
            )
        })?;
        let now = chrono::Utc::now();
        let block_view = |name: &str, row: &DatasetRow, exists: bool| {
            let v = view(row, &filter_of(row)?)?;
            let span = p.span(name);
            Ok::<_, LedgerError>(BlockView {
                block: name.to_owned(),
                ledger_id: row.id.clone(),
                start: span.map(|s| s.0.to_rfc3339()),
                end: span.map(|s| s.1.to_rfc3339()),
                exists,
                description: row.description.clone(),
                read_only: p.read_only(name, now).is_some(),
                budget: v.budget,
                mu_spent: v.mu_spent,
                delta_spent: v.delta_spent,
                remaining_mu: v.remaining_mu,
                remaining_delta: v.remaining_delta,
                used_fraction: v.used_fraction,
                exhausted: v.exhausted,
                units: v.units,
            })
        };
        let Some(sel) = sel else {
            let after = after.map(|b| partition::block_id(id, b));
            let rows = self
                .store
                .list_blocks(id, after.as_deref(), limit + 1)
                .await?;
            let more = rows.len() as i64 > limit;
            let items = rows
                .iter()
                .take(limit as usize)
                .map(|r| {
                    let name = partition::split_block_id(&r.id).map_or("", |s| s.1);
                    block_view(name, r, true)
                })
                .collect::<Result<Vec<_>, _>>()?;
            let next = more
                .then(|| items.last().map(|b| b.block.clone()))
                .flatten();
            return Ok(BlocksView {
                partitioning: p.to_json(),
                items,
                next,
                tightest: None,
                remaining_mu: None,
                remaining_delta: None,
            });
        };
        let names = p.blocks(&sel, &JsonPath::root()).map_err(invalid)?;
        let mut items = Vec::with_capacity(names.len());
        for name in &names {
            let bid = partition::block_id(id, name);
            let item = match self.store.get_dataset(&bid).await? {
                Some(r) => block_view(name, &r, true)?,
                None => block_view(name, &block_template(&parent, name)?, false)?,
            };
            items.push(item);
        }
        let tightest = items
            .iter()
            .min_by(|a, b| a.remaining_mu.total_cmp(&b.remaining_mu))
            .map(|b| b.block.clone());
        let min = |f: fn(&BlockView) -> f64| items.iter().map(f).reduce(f64::min);
        Ok(BlocksView {
            partitioning: p.to_json(),
            remaining_mu: min(|b| b.remaining_mu),
            remaining_delta: min(|b| b.remaining_delta),
            tightest,
            items,
            next: None,
        })
    }
}

/// A charge's answer once its append lands: its body, and each ledger's id, new version and
/// whether its unit composes analytically (see [`Ledgers::composed_later`]).
type Landing = (Value, Vec<(String, i64, bool)>);

/// What [`gate_all`] gates on one ledger: its gate, relation and grid step, and its own event if
/// it has one.
type GateInput = (
    Gate,
    (NeighboringRelation, GridStep),
    Option<Arc<crate::accountant::Event>>,
);

/// Certifies `event` once per (relation, grid step) and gates it on every ledger.
fn gate_all(
    event: &crate::accountant::Event,
    own: Option<f64>,
    inputs: &[GateInput],
) -> Result<Vec<(Certificate, Verdict)>, LedgerError> {
    // One certification cache per distinct event (the request's, and each dataset's own).
    let mut certified: HashMap<usize, Certified> = HashMap::new();
    let mut out = Vec::with_capacity(inputs.len());
    for (gate, (relation, h), own_event) in inputs {
        let (event, which, path) = match own_event {
            Some(e) => (
                &**e,
                Arc::as_ptr(e) as usize,
                JsonPath::root().field("datasets").field("event"),
            ),
            None => (event, 0, JsonPath::root().field("event")),
        };
        let rule = unit_delta(&gate.budget, own);
        let candidates = certified
            .entry(which)
            .or_default()
            .get(event, *relation, *h, rule, &path)?;
        let (verdict, unit) = gate.choose(candidates);
        out.push((unit, verdict));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_shared_body_key_differs_from_the_report_key() {
        assert_ne!(super::SHARED_BODY, super::super::write::SHARED);
    }
}
