//! A charge on one ledger: the unit is gated on the filter's sums and, if admitted, appended
//! (pipelined behind the dataset's previous append where the store queues them).

use super::compute::{analytic, blocking};
use super::error::LedgerError;
use super::filter::Limit as _;
use super::filter::Verdict;
use super::input::ChargeRequest;
use super::kept::DEFAULT_REPORT_OPTIONS;
use super::principal::{Action, Actor};
use super::rows::unchanged;
use super::rows::{engine_of, now, relation_of, stated_budget};
use super::verdict::{gate_compute, gate_cost, rejection, unit_delta};
use super::views::{ChargeOutcome, ChargeView, Preview};
use super::write::{back_off, noted, stored_response, turn_deadline, MAX_ATTEMPTS};
use super::{admission, audit, keys, partition, quotas, Ledgers};
use crate::accountant::Event;
use crate::store::{DatasetRow, DatasetUpdate, EntryRow, StoreError};
use serde_json::Value;
use std::time::Instant;

/// A unit the gate admitted on a row: what to append at `seq`, and what to answer once it lands.
pub(super) struct UnitPlan {
    pub(super) seq: i64,
    pub(super) entry: EntryRow,
    pub(super) update: DatasetUpdate,
    pub(super) outcome: ChargeOutcome,
    /// `Some(closed_form)` when the unit joins the exact composition now (it is not reserved).
    pub(super) composed: Option<bool>,
}

/// The end of one attempt to admit a unit.
pub(super) enum Attempt {
    Done(ChargeOutcome),
    /// Start over from the store's current row.
    Retry,
    /// The append is queued ([`Store::append_queued`]): the outcome once it is durable (the
    /// dataset's lock may be released before: the next charge's append queues behind this one).
    Queued(crate::store::PendingAppend, ChargeOutcome),
}

/// How an attempt to admit a unit may go.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mode {
    /// The gate's inputs are kept ones ([`GateInputs`]): a refusal on them is decided again on
    /// the store's row.
    pub(super) from_cache: bool,
    /// The append may be queued and the dataset's lock released before it is durable.
    pub(super) queue: bool,
}

/// A unit to gate: a charge, or a run's chunk.
pub(super) struct UnitRequest {
    pub(super) event: Event,
    /// The event as recorded.
    pub(super) event_json: Value,
    pub(super) delta: Option<f64>,
    pub(super) label: Option<String>,
    pub(super) metadata: Option<Value>,
    pub(super) idempotency_key: Option<keys::IdemKey>,
    pub(super) request_hash: String,
    pub(super) reserve: bool,
    /// The run and the chunk's index.
    pub(super) run: Option<(String, i64)>,
    /// An admin taking another principal's chunk: (the run's owner, the admin's reason).
    pub(super) on_behalf: Option<(String, String)>,
}

/// Records the gate's latency and outcome.
pub(super) fn record_gate(id: &str, started: Instant, result: &Result<ChargeOutcome, LedgerError>) {
    metrics::histogram!("privacy_ledger_gate_seconds").record(started.elapsed().as_secs_f64());
    metrics::counter!("privacy_ledger_charges_total", "dataset" => id.to_owned(), "outcome" => outcome_of(result))
        .increment(1);
}

/// A charge's outcome as the metrics label it.
pub(super) fn outcome_of(result: &Result<ChargeOutcome, LedgerError>) -> &'static str {
    match result {
        Ok(o) if o.created => "admitted",
        Ok(_) => "replayed",
        Err(LedgerError::BudgetExceeded(_)) => "rejected",
        Err(_) => "error",
    }
}

impl Ledgers {
    /// Refuses a single-ledger spend (a charge, a run) on a partitioned dataset or on a block:
    /// those are charged through [`Ledgers::charge_many`], which names the blocks, checks
    /// retention and creates blocks on first use. [`Ledgers::partitioning_of`] keeps the answer,
    /// so the common case reads the store once per dataset.
    pub(super) async fn single_ledger(&self, id: &str) -> Result<(), LedgerError> {
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
    pub(super) async fn admit(
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
            let deadline = turn_deadline();
            for _ in 0..MAX_ATTEMPTS {
                if !from_cache {
                    back_off(conflicts).await;
                    conflicts += 1;
                    if tokio::time::Instant::now() >= deadline {
                        break;
                    }
                }
                let mut guard = self.lock(id, deadline).await?;
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
                        let read = self.gate_inputs(id).await;
                        (noted(std::slice::from_mut(&mut guard), read)?, false)
                    }
                };
                let (row, quotas) = (inputs.row.clone(), &inputs.quotas);
                let mode = Mode {
                    from_cache: kept,
                    queue: true,
                };
                let admitted = self.admit_once(actor, id, &unit, row, quotas, mode).await;
                match noted(std::slice::from_mut(&mut guard), admitted)? {
                    Attempt::Done(o) => return Ok(o),
                    Attempt::Retry => from_cache = false,
                    // The next charge of this dataset may gate (on the kept inputs, which
                    // already include this one) and queue while this one commits.
                    Attempt::Queued(pending, outcome) => {
                        drop(guard);
                        match pending.await {
                            Ok(_) => {
                                // Durable now: its use against the alert thresholds.
                                self.alerts.nudge(id);
                                return Ok(outcome);
                            }
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

    /// The gate's plan for `unit` on `row` with `quotas` (the dataset's lock held): what to append
    /// and what to answer once it lands. A refusal is audited and is
    /// [`LedgerError::BudgetExceeded`]; `Ok(None)` when inputs taken `from_cache` refuse it (they
    /// may be stale: the caller decides again on the store's row).
    pub(super) async fn plan_unit(
        &self,
        actor: &Actor,
        id: &str,
        unit: &UnitRequest,
        row: &DatasetRow,
        quotas: &[crate::store::QuotaRow],
        from_cache: bool,
    ) -> Result<Option<UnitPlan>, LedgerError> {
        {
            let (gate, quota_row) = Self::gate_for(row, quotas, &actor.principal.name)?;
            let engine = engine_of(row)?;
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
                Verdict::Rejected(..) if from_cache => return Ok(None),
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
            let relation = relation_of(row)?;
            // The filter's report is closed-form (μ-GDP of the statement and of what was spent),
            // and the same for every charge within the budget: kept. It states the budget's
            // high-water mark, not the (possibly lowered) budget.
            let reports = self.reports.clone();
            let stated = stated_budget(row)?;
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
            let body = super::views::ChargeCreated {
                charge: charge.clone(),
                remaining: super::views::Remaining::after(&gate, &after, share_after.as_ref()),
                report,
            };
            let body = serde_json::to_value(&body).map_err(super::error::internal)?;
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
                ..unchanged(row, &after, ts.clone())
            };
            // A reserved unit joins the exact composition only when committed.
            let composed = (!unit.reserve).then(|| analytic(&unit.event, engine.0));
            Ok(Some(UnitPlan {
                seq: row.version + 1,
                entry,
                update,
                outcome: ChargeOutcome {
                    created: true,
                    body,
                },
                composed,
            }))
        }
    }

    /// One attempt to gate and append a unit on `row` with `quotas` (the dataset's lock held);
    /// [`Attempt::Retry`] when another writer appended first or took the idempotency key, or
    /// when inputs taken `from_cache` reject the unit (the caller re-reads and tries again).
    pub(super) async fn admit_once(
        &self,
        actor: &Actor,
        id: &str,
        unit: &UnitRequest,
        row: DatasetRow,
        quotas: &[crate::store::QuotaRow],
        mode: Mode,
    ) -> Result<Attempt, LedgerError> {
        let Mode { from_cache, queue } = mode;
        let Some(p) = self
            .plan_unit(actor, id, unit, &row, quotas, from_cache)
            .await?
        else {
            return Ok(Attempt::Retry);
        };
        if queue {
            let queued = self
                .store
                .append_queued(id, row.version, &p.entry, &p.update);
            if let Some(pending) = queued {
                self.keep(id, row.version, &p.update, &Ok(p.seq));
                self.unit_landed(id, p.seq, p.composed);
                return Ok(Attempt::Queued(pending, p.outcome));
            }
        }
        Ok(
            if self.append(id, row.version, &p.entry, &p.update).await? {
                self.unit_landed(id, p.seq, p.composed);
                Attempt::Done(p.outcome)
            } else {
                Attempt::Retry
            },
        )
    }

    /// After a unit's append at `seq`: a unit that joins the exact composition (`composed`: it
    /// is not reserved; whether it is closed-form) gets it caught up off the write path.
    pub(super) fn unit_landed(&self, id: &str, seq: i64, composed: Option<bool>) {
        if let Some(analytic) = composed {
            self.composed_later(id, seq, analytic);
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
            // How many units like this one fit as things stand: the dataset's room and the
            // share's, the smaller (each a display count; every charge is still gated).
            let like = budget.more_like(&filter, &g.unit);
            let units_like_this = match (&gate.share, like) {
                (Some(s), Some(n)) => Some(
                    s.budget
                        .more_like(&s.state, &g.unit)
                        .map_or(n, |m| n.min(m)),
                ),
                (Some(s), None) => s.budget.more_like(&s.state, &g.unit),
                (None, n) => n,
            };
            Ok(match g.verdict {
                Verdict::Admitted(after, _) => Preview {
                    admitted: true,
                    unit: g.unit,
                    mu_after: Some(after.mu()),
                    delta_after: after.delta(),
                    mu_budget: budget.mu(),
                    delta_budget: budget.delta(),
                    reason: None,
                    units_like_this,
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
                        units_like_this,
                        report: reports.get(&filter, &stated, relation, opts),
                    }
                }
            })
        })
        .await
    }
}
