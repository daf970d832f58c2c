//! Runs and reservations: units admitted when the caller asks for them, and units held before their
//! outputs exist.
//!
//! * A **run** (e.g. DP-SGD) is declared with its step event, its number of steps and a chunk size;
//!   declaring it charges nothing. Each chunk (`chunk_steps` steps, the last one possibly shorter)
//!   is a unit, admitted by the gate when the caller asks for the next one, so a run that stops
//!   early is never charged for chunks it did not run. Inside a chunk the steps are composed
//!   exactly (their parameters were fixed when the chunk was admitted).
//! * Any unit (a charge or a chunk) may be **reserved**: the filter counts it at once (the gate
//!   admits it exactly as a charge). It is then **started** (its job is about to read the data),
//!   **committed** (it stays counted and joins the exact composition shown beside the filter) or,
//!   before it is started, **released**. A release refunds the unit — the filter forgets its
//!   (μᵢ, δᵢ) — and is allowed only before the start and when the caller states
//!   `outputs_released: false`. Before the job has touched the data, nothing anyone observes
//!   depends on it (its outcome, its running time, its failure): the caller's view is that of a
//!   unit with μ = 0 and δ = 0, and the filter lets each unit's parameters depend on everything
//!   before it, so the refund keeps the filter's guarantee (`docs/filter.md` §10). Once the job
//!   has read the data, even its failure or its timing is an output (Haeberlen, Pierce & Narayan
//!   2011): a started unit can only be committed. A chunk is not refunded while a later chunk of
//!   its run (which starts from its iterates) is held.
//! * **Owners.** A reserved unit is started, committed or released, and a run's next chunk taken,
//!   only by the principal that reserved it (declared the run), or by an admin of the dataset who
//!   gives a reason (recorded in the ledger and the audit log). Anyone else gets 403 `not_owner`.
//!
//! Every state change takes an Idempotency-Key, scoped to its principal, operation and target
//! ([`super::keys`]): a retry returns the stored outcome, with the unit's status as it is now
//! (a released unit's replay is 409 `unit_released`).

use super::charge::UnitRequest;
use super::compute::{blocking, exact_with};
use super::error::{internal, LedgerError, RunFit};
use super::filter::FilterState;
use super::filter::{Exceeded, Gate, Verdict};
use super::input::{ChunkRequest, RunRequest, SettleKind, SettleRequest};
use super::keys::{IdemKey, Operation};
use super::principal::{Action, Actor};
use super::rows::{budget_of, filter_of, now, relation_of, unchanged};
use super::runs::{
    chunk_len, repeated, run_view, RunPlan, RunProgress, RunSpec, RunView, RunWarning,
};
use super::verdict::unit_delta;
use super::views::ChargeOutcome;
use super::write::{Plan, PlanFuture, Written};
use super::{audit, Ledgers};
use crate::accountant::certificate::Certificate;
use crate::accountant::json::JsonPath;
use crate::accountant::AccountantError;
use crate::store::{DatasetRow, DatasetUpdate, EntryRow, Settle};
use serde_json::Value;
use std::sync::Arc;

/// A run's plan at the budget of `row` (see [`RunPlan`]), with the certificates of a full chunk
/// and of a shorter last one (what the gate chooses from when each is taken).
async fn plan(
    admission: &super::admission::Admission,
    req: &RunRequest,
    row: &crate::store::DatasetRow,
) -> Result<Planned, LedgerError> {
    let (relation, h, budget) = (
        relation_of(row)?,
        super::rows::grid_step_of(row)?,
        budget_of(row)?,
    );
    let (step, steps, chunk_steps, own, tolerance) = (
        req.event.clone(),
        req.steps,
        req.chunk_steps,
        req.delta,
        req.chunking_tolerance,
    );
    let cost = super::admission::Cost::light_if(super::compute::analytic(&step, relation));
    blocking(admission, cost, move || {
        let path = JsonPath::root().field("event");
        let candidates = |n: u64| -> Result<Arc<[Certificate]>, LedgerError> {
            let ev = repeated(&step, n)?;
            Ok(super::certificates::certificates(
                &ev,
                relation,
                h,
                unit_delta(&budget, own),
                &path,
            )?)
        };
        let chunked = |chunk_steps: u64| -> Result<ChunkCertificates, LedgerError> {
            let chunks = steps.div_ceil(chunk_steps);
            let last = chunk_len(steps, chunk_steps, chunks - 1);
            Ok(ChunkCertificates {
                full: candidates(chunk_steps)?,
                shorter_last: if last == chunk_steps {
                    None
                } else {
                    Some(candidates(last)?)
                },
                chunks,
            })
        };
        let certificates = chunked(chunk_steps)?;
        let (chunk_unit, last_chunk_unit, s) = simulate(budget, &certificates)?;
        let base = crate::accountant::composition::Composition::new(relation, h);
        let whole = repeated(&step, steps)?;
        // Too large or unsupported as one unit is not an error of the run, only a figure less;
        // a stopped computation is.
        let run_mu_as_one_unit = match exact_with(&base, &whole, budget.delta()) {
            Ok((_, mu)) => mu,
            Err(LedgerError::Accountant(AccountantError::Stopped(s))) => {
                return Err(AccountantError::Stopped(s).into())
            }
            Err(_) => None,
        };
        // The price of chunking, against the run as one unit as the gate would certify it (one
        // more certificate, of all the steps; computed only for a chunked run).
        let mut warnings = Vec::new();
        let one_unit = if certificates.chunks > 1 {
            Some(simulate(budget, &chunked(steps)?)?.2.mu()).filter(|m| *m > 0.0)
        } else {
            None
        };
        if let Some(one) = one_unit {
            let over = |mu: f64| mu / one - 1.0;
            if over(s.mu()) > tolerance {
                // Fewer chunks cost less (each chunk's certificate is looser than its share of
                // the exact composition): halve their number until the price is within the
                // tolerance, at most log₂(chunks) more plans.
                // One unit (k = 1) costs nothing over itself: the search ends there at worst.
                let mut k = certificates.chunks;
                let suggested = loop {
                    k = k.div_ceil(2);
                    let c = steps.div_ceil(k);
                    if k == 1 || over(simulate(budget, &chunked(c)?)?.2.mu()) <= tolerance {
                        break c;
                    }
                };
                warnings.push(RunWarning {
                    code: "chunking_cost".into(),
                    message: format!(
                        "{} chunks of {chunk_steps} steps cost μ {:.6}, {:.1} % more than all {steps} \
                         steps as one unit (μ {one:.6} as the gate certifies it; tolerance {:.1} %); {}",
                        certificates.chunks,
                        s.mu(),
                        100.0 * over(s.mu()),
                        100.0 * tolerance,
                        if suggested < steps {
                            format!("chunks of {suggested} steps cost at most the tolerance")
                        } else {
                            format!(
                                "only one unit of {steps} steps does (reserved, it is refundable \
                                 until its job starts)"
                            )
                        }
                    ),
                    suggested_chunk_steps: suggested,
                });
            }
        }
        Ok(Planned {
            plan: RunPlan {
                chunk_unit,
                last_chunk_unit,
                run_mu: s.mu(),
                run_delta: s.delta(),
                run_mu_as_one_unit,
            },
            certificates,
            warnings,
        })
    })
    .await
}

/// A run's chunks as the gate would charge them were they the only units on a fresh ledger of
/// `budget` (the gate chooses a unit's δ from the sums before it, `Gate::choose`; a chunk past the
/// budget is counted with the gate's first candidate): the first full chunk's certificate, the
/// shorter last one's, and the filter's sums after all of them.
fn simulate(
    budget: crate::ledger::budget::Budget,
    certificates: &ChunkCertificates,
) -> Result<(Certificate, Option<Certificate>, FilterState), LedgerError> {
    let mut gate = Gate::of(budget, FilterState::empty());
    let (mut chunk_unit, mut last_chunk_unit) = (None, None);
    for i in 0..certificates.chunks {
        let unit = gate.choose(certificates.of(i)).1;
        gate.state = gate.state.with(&unit);
        if certificates.is_shorter(i) {
            last_chunk_unit = Some(unit);
        } else if chunk_unit.is_none() {
            chunk_unit = Some(unit);
        }
    }
    // Chunk 0 is always a full chunk (the input keeps chunk_steps ≤ steps).
    let chunk_unit = chunk_unit
        .ok_or_else(|| internal("a run whose first chunk is shorter than chunk_steps"))?;
    Ok((chunk_unit, last_chunk_unit, gate.state))
}

/// [`plan`]'s answer.
#[derive(Clone)]
struct Planned {
    plan: RunPlan,
    certificates: ChunkCertificates,
    warnings: Vec<RunWarning>,
}

/// The certificates of a run's chunks: of a full chunk, and of a shorter last one.
#[derive(Clone)]
struct ChunkCertificates {
    full: Arc<[Certificate]>,
    shorter_last: Option<Arc<[Certificate]>>,
    chunks: u64,
}

impl ChunkCertificates {
    /// Whether chunk `i` is the shorter last one.
    fn is_shorter(&self, i: u64) -> bool {
        self.shorter_last.is_some() && i + 1 == self.chunks
    }

    /// The certificates the gate chooses from for chunk `i`.
    fn of(&self, i: u64) -> &[Certificate] {
        match &self.shorter_last {
            Some(l) if self.is_shorter(i) => l,
            _ => &self.full,
        }
    }
}

/// How much of the run fits `gate` now ([`RunFit`]): its chunks taken one after another
/// ([`Gate::take`]) until one is refused.
fn run_fit(mut gate: Gate, planned: &Planned, req: &RunRequest) -> RunFit {
    let chunks = req.chunks();
    let (remaining_mu, remaining_delta) = (gate.remaining_mu(), gate.remaining_delta());
    let mut fit = RunFit {
        chunks,
        steps: req.steps,
        chunks_that_fit: 0,
        steps_that_fit: 0,
        refused_by: String::new(),
        remaining_mu,
        remaining_delta,
    };
    for i in 0..chunks {
        match gate.take(planned.certificates.of(i)) {
            Ok(_) => {
                fit.chunks_that_fit += 1;
                fit.steps_that_fit += chunk_len(req.steps, req.chunk_steps, i);
            }
            Err(Verdict::Rejected(holder, why)) => {
                let part = match why {
                    Exceeded::Mu => "mu",
                    Exceeded::Delta => "delta",
                };
                fit.refused_by = match holder {
                    Some(h) => format!("{part} of {h}'s quota"),
                    None => format!("{part} of the dataset's budget"),
                };
                break;
            }
            Err(Verdict::Admitted(..)) => unreachable!("take returns Ok when it admits"),
        }
    }
    fit
}

impl Ledgers {
    /// Declares a run: records it and what it would cost; charges nothing. `false` with the first
    /// outcome when this is the replay of an earlier request with the same idempotency key.
    pub async fn declare_run(
        &self,
        actor: &Actor,
        id: &str,
        req: RunRequest,
    ) -> Result<(RunView, bool), LedgerError> {
        self.authorize(actor, id, Action::Spend).await?;
        self.single_ledger(id).await?;
        let row = self.row(id).await?;
        // A sampler cannot draw from more records than the dataset says it has.
        let population = super::views::population_of(&row)?;
        if let (Some(s), Some(size)) = (&req.sampler, population.size) {
            if s.dataset_size > size {
                return Err(LedgerError::Invalid(
                    "$.sampler.dataset_size".into(),
                    format!(
                        "is {}, but dataset {id} has {size} {}s (its size, given at creation): \
                         batches cannot be drawn from more",
                        s.dataset_size,
                        population.unit()
                    ),
                ));
            }
        }
        let key = IdemKey::of(
            &actor.principal,
            Operation::DeclareRun,
            id,
            req.idempotency_key.as_ref(),
        );
        if let Some(body) = self.replay(id, key.as_ref(), &req.request_hash).await? {
            let view: RunView = serde_json::from_value(body).map_err(internal)?;
            return Ok((self.reserve_chunks(actor, id, view).await?, false));
        }
        // The plan depends on the budget (its default δ rule and δ_B), not on what was spent:
        // computed before the lock, and again under it if the budget changed meanwhile.
        let planned = (budget_of(&row)?, plan(&self.admission, &req, &row).await?);
        let planned = &std::sync::Mutex::new(planned);
        let run_id = &uuid::Uuid::new_v4().to_string();
        let (req, key) = (&req, &key);
        let declare = move |row: DatasetRow| -> PlanFuture<'_, RunView> {
            Box::pin(async move {
                let f = filter_of(&row)?;
                let mut current = planned.lock().expect("run plan").clone();
                if budget_of(&row)? != current.0 {
                    current = (budget_of(&row)?, plan(&self.admission, req, &row).await?);
                    *planned.lock().expect("run plan") = current.clone();
                }
                // Under the dataset's lock, against its sums now: a run whose chunks cannot all
                // be taken is refused before anything is recorded, unless the caller allows it.
                if !req.allow_partial {
                    let (gate, _) = self.gate_now(&row, &actor.principal.name).await?;
                    let fit = run_fit(gate, &current.1, req);
                    if fit.chunks_that_fit < fit.chunks {
                        return Err(LedgerError::RunDoesNotFit(Box::new(fit)));
                    }
                }
                let spec = RunSpec {
                    event: req.event.to_json(),
                    steps: req.steps,
                    chunk_steps: req.chunk_steps,
                    delta: req.delta,
                    plan: current.1.plan,
                    warnings: current.1.warnings.clone(),
                    reserve: req.reserve,
                    sampler: req.sampler.clone(),
                };
                let ts = now();
                let mut entry = EntryRow {
                    seq: row.version + 1,
                    event: Some(serde_json::to_string(&spec).map_err(internal)?),
                    label: req.label.clone(),
                    metadata: req.metadata.as_ref().map(Value::to_string),
                    idempotency_key: key.as_ref().map(|k| k.stored().to_owned()),
                    request_hash: Some(req.request_hash.clone()),
                    unit_mu: Some(spec.plan.chunk_unit.mu()),
                    unit_delta: Some(spec.plan.chunk_unit.delta()),
                    run_id: Some(run_id.clone()),
                    principal: Some(actor.principal.name.clone()),
                    ..EntryRow::new("run", ts.clone())
                };
                let view = run_view(std::slice::from_ref(&entry), id)?;
                entry.response = Some(serde_json::to_string(&view).map_err(internal)?);
                let mut update = unchanged(&row, &f, ts);
                update.audit = Some(
                    audit::draft(actor, "run.declared", Some(id), Some(run_id))
                        .after(&view)
                        .done(),
                );
                Ok(Plan::Append {
                    entry: Box::new(entry),
                    update: Box::new(update),
                    answer: view,
                })
            })
        };
        let (view, created) = match self
            .write(id, key.as_ref(), &req.request_hash, declare)
            .await?
        {
            Written::Planned(view, _) => (view, true),
            Written::Replayed(body) => (serde_json::from_value(body).map_err(internal)?, false),
        };
        Ok((self.reserve_chunks(actor, id, view).await?, created))
    }

    /// A run declared with `reserve`: its chunks reserved in order, each through the gate as a
    /// chunk request (`reserve`, its index, the key `reserve-{i}` in the run's own key space, so a
    /// replayed declaration finishes an interrupted reservation without taking a chunk twice).
    /// The declaration's fit check ran under the lock, but another unit may take the room
    /// between two reservations: then the chunks reserved are released newest first — none was
    /// started, so nothing depends on them and the refund is sound (`docs/filter.md` §10) — and
    /// the refusal is returned. Any other run's view is returned as it is.
    async fn reserve_chunks(
        &self,
        actor: &Actor,
        id: &str,
        view: RunView,
    ) -> Result<RunView, LedgerError> {
        if !view.reserved {
            return Ok(view);
        }
        let mut held: Vec<String> = Vec::new();
        for i in 0..view.chunks {
            let body = serde_json::json!({"reserve": true, "chunk": i});
            let chunk = ChunkRequest::from_json(&body, &view.id, Some(format!("reserve-{i}")))
                .map_err(|e| internal(e.to_string()))?;
            match self.run_chunk(actor, id, &view.id, chunk).await {
                Ok(out) => {
                    let charge = out.body["charge"]["id"].as_str().map(str::to_owned);
                    held.push(charge.ok_or_else(|| internal("a chunk's answer without its id"))?);
                }
                // Reserved by an earlier attempt of this declaration, which took it.
                Err(LedgerError::ChunkMismatch { .. }) | Err(LedgerError::RunComplete(_)) => {}
                Err(refused) => {
                    let why = format!(
                        "the run's reservation did not complete: chunk {i} of {} was refused",
                        view.chunks
                    );
                    for charge in held.iter().rev() {
                        let body = serde_json::json!({"outputs_released": false, "reason": why});
                        let release = SettleRequest::from_json(
                            &body,
                            charge,
                            SettleKind::Release,
                            Some(format!("unreserve-{charge}")),
                        )
                        .map_err(|e| internal(e.to_string()))?;
                        self.settle(actor, id, charge, release).await?;
                    }
                    return Err(refused);
                }
            }
        }
        Ok(self.run_progress(id, &view.id).await?.view())
    }

    /// A run with its progress.
    pub async fn get_run(
        &self,
        actor: &Actor,
        id: &str,
        run_id: &str,
    ) -> Result<RunView, LedgerError> {
        self.authorize(actor, id, Action::Read).await?;
        self.row(id).await?;
        let progress = self.run_progress(id, run_id).await?;
        let mut view = progress.view();
        // Another principal's metadata is its own (as in listings): admins and auditors see it.
        let own = progress.decl.principal.as_deref() == Some(actor.principal.name.as_str());
        if !own && !self.sees_others(actor, id).await {
            view.metadata = None;
        }
        Ok(view)
    }

    /// Runs declared on dataset `id` after declaration `after` (a ledger seq), oldest first, each
    /// with its progress (kept progress moved past the run's new entries, else read whole); the
    /// next page's cursor when there may be more.
    pub async fn list_runs(
        &self,
        actor: &Actor,
        id: &str,
        after: i64,
        limit: i64,
    ) -> Result<(Vec<RunView>, Option<i64>), LedgerError> {
        self.authorize(actor, id, Action::Read).await?;
        self.row(id).await?;
        let sees_all = self.sees_others(actor, id).await;
        let decls = self
            .store
            .list_entries(id, Some("run"), after, limit + 1)
            .await?;
        let more = decls.len() as i64 > limit;
        let mut items = Vec::with_capacity(decls.len().min(limit as usize));
        for d in decls.iter().take(limit as usize) {
            let Some(run_id) = d.run_id.as_deref() else {
                return Err(LedgerError::Corrupt(
                    id.to_owned(),
                    format!("run entry {}", d.seq),
                ));
            };
            let mut view = self.run_progress(id, run_id).await?.view();
            // Another principal's metadata is its own (as in `get_run`).
            if !sees_all && d.principal.as_deref() != Some(actor.principal.name.as_str()) {
                view.metadata = None;
            }
            items.push(view);
        }
        let next = if more {
            decls.get(limit as usize - 1).map(|d| d.seq)
        } else {
            None
        };
        Ok((items, next))
    }

    /// The progress of run `run_id` on dataset `id` now: the kept one moved past the run's entries
    /// appended since (read by the index on (dataset, run, seq)), else read whole.
    async fn run_progress(&self, id: &str, run_id: &str) -> Result<Arc<RunProgress>, LedgerError> {
        let k = format!("{id}\n{run_id}");
        let keep = |p: &Arc<RunProgress>| {
            let mut runs = self.runs.lock().expect("runs");
            runs.insert(k.clone(), p.clone(), p.bytes());
        };
        let kept = self.runs.lock().expect("runs").get(&k);
        let Some(mut p) = kept else {
            let entries = self.store.list_run(id, run_id, 0).await?;
            let Some(decl) = entries.first().filter(|e| e.kind == "run") else {
                return Err(LedgerError::RunNotFound(run_id.to_owned()));
            };
            let mut p = RunProgress::new(decl.clone(), id)?;
            p.advance(&entries[1..]);
            let p = Arc::new(p);
            keep(&p);
            return Ok(p);
        };
        let new = self.store.list_run(id, run_id, p.seq).await?;
        if new.is_empty() {
            return Ok(p);
        }
        // Moved in place: the cache lets go of it first, so it is copied only if a caller still
        // holds the previous progress (the dataset's lock makes that rare).
        self.runs.lock().expect("runs").remove(&k);
        Arc::make_mut(&mut p).advance(&new);
        keep(&p);
        Ok(p)
    }

    /// Admits (or reserves) the run's next chunk as a unit: `{charge, report}` as a charge.
    #[tracing::instrument(skip(self, actor, req), fields(dataset_id = %id, run_id = %run_id))]
    pub async fn run_chunk(
        &self,
        actor: &Actor,
        id: &str,
        run_id: &str,
        req: ChunkRequest,
    ) -> Result<ChargeOutcome, LedgerError> {
        self.authorize(actor, id, Action::Spend).await?;
        self.single_ledger(id).await?;
        let started = std::time::Instant::now();
        self.row(id).await?;
        let key = IdemKey::of(
            &actor.principal,
            Operation::Chunk,
            run_id,
            req.idempotency_key.as_ref(),
        );
        let (key, req) = (&key, &req);
        let plan = move |row: DatasetRow| -> PlanFuture<'_, (i64, ChargeOutcome, Option<bool>)> {
            Box::pin(async move {
                let progress = self.run_progress(id, run_id).await?;
                let on_behalf = self
                    .act_on(
                        actor,
                        id,
                        &format!("run {run_id:?}"),
                        progress.decl.principal.as_deref(),
                        req.reason.as_deref(),
                    )
                    .await?;
                let run = progress.view();
                if let Some(asked) = req.chunk {
                    if run.next_chunk != Some(asked) {
                        return Err(LedgerError::ChunkMismatch {
                            run: run_id.to_owned(),
                            asked,
                            next: run.next_chunk,
                        });
                    }
                }
                let Some(chunk) = run.next_chunk else {
                    return Err(LedgerError::RunComplete(run_id.to_owned()));
                };
                let step = super::input::parse_event(&run.event, &JsonPath::root().field("event"))
                    .map_err(|e| LedgerError::Corrupt(id.to_owned(), format!("run: {e}")))?;
                let event = repeated(&step, chunk_len(run.steps, run.chunk_steps, chunk))?;
                let unit = UnitRequest {
                    event_json: event.to_json(),
                    event,
                    delta: run.delta,
                    label: run.label.clone(),
                    metadata: run.metadata.clone(),
                    idempotency_key: key.clone(),
                    request_hash: req.request_hash.clone(),
                    reserve: req.reserve,
                    run: Some((run_id.to_owned(), chunk as i64)),
                    on_behalf,
                };
                // The version CAS of the append also guards the chunk choice: a chunk admitted
                // meanwhile (by another replica) moved the version, and the write starts over.
                let quotas = self.store.list_quotas(id).await?;
                let p = self
                    .plan_unit(actor, id, &unit, &row, &quotas, false)
                    .await?
                    .ok_or_else(|| {
                        internal("a unit refused on the store's row was not rejected")
                    })?;
                Ok(Plan::Append {
                    entry: Box::new(p.entry),
                    update: Box::new(p.update),
                    answer: (p.seq, p.outcome, p.composed),
                })
            })
        };
        let result = match self.write(id, key.as_ref(), &req.request_hash, plan).await {
            Ok(Written::Planned((seq, outcome, composed), _)) => {
                self.unit_landed(id, seq, composed);
                Ok(outcome)
            }
            Ok(Written::Replayed(body)) => Ok(ChargeOutcome {
                created: false,
                body,
            }),
            Err(e) => Err(e),
        };
        super::charge::record_gate(id, started, &result);
        result
    }

    /// Whether `actor` may act on `what` (a reserved unit, a run), held by `owner`: its owner may;
    /// an admin of the dataset may when it gives a reason, and `Some((owner, reason))` is recorded;
    /// anyone else gets [`LedgerError::NotOwner`]. A unit with no recorded owner (written before
    /// principals) is an admin's only.
    pub(super) async fn act_on(
        &self,
        actor: &Actor,
        id: &str,
        what: &str,
        owner: Option<&str>,
        reason: Option<&str>,
    ) -> Result<Option<(String, String)>, LedgerError> {
        if owner == Some(actor.principal.name.as_str()) {
            return Ok(None);
        }
        let owner_name = owner.unwrap_or("(no recorded owner)");
        if self.authorize(actor, id, Action::Administer).await.is_err() {
            return Err(LedgerError::NotOwner(format!(
                "{what} belongs to {owner_name:?}: only its owner, or an admin of the dataset \
                 giving a reason, may act on it"
            )));
        }
        match reason {
            Some(r) => Ok(Some((owner_name.to_owned(), r.to_owned()))),
            None => Err(LedgerError::Invalid(
                "body.reason".into(),
                format!(
                    "is required: {what} belongs to {owner_name:?}, and an admin acting for \
                     another principal says why (recorded)"
                ),
            )),
        }
    }

    /// Starts, commits or releases a reserved unit (`req.kind`):
    /// * start: its job is about to read the data; from then on it can only be committed (a
    ///   started job's failure or timing may depend on the data);
    /// * commit (reserved or started): it stays counted and joins the exact composition;
    /// * release (reserved, not started, and no output released): the filter forgets it.
    pub async fn settle(
        &self,
        actor: &Actor,
        id: &str,
        charge_id: &str,
        req: SettleRequest,
    ) -> Result<Value, LedgerError> {
        let how = req.kind;
        if how == SettleKind::Release && req.outputs_released != Some(false) {
            return Err(LedgerError::OutputsReleased(charge_id.to_owned()));
        }
        self.authorize(actor, id, Action::Spend).await?;
        self.row(id).await?;
        let release = how == SettleKind::Release;
        let key = IdemKey::of(
            &actor.principal,
            how.operation(),
            charge_id,
            req.idempotency_key.as_ref(),
        );
        let (req, key) = (&req, &key);
        let settle = move |row: DatasetRow| -> PlanFuture<'_, (Value, bool)> {
            Box::pin(async move {
                let charge = self
                    .store
                    .find_charge(id, charge_id)
                    .await?
                    .ok_or_else(|| LedgerError::ChargeNotFound(charge_id.to_owned()))?;
                let status = charge.status.clone().unwrap_or_else(|| "committed".into());
                match (how, status.as_str()) {
                    (SettleKind::Start, "reserved" | "started")
                    | (SettleKind::Commit, "reserved" | "started")
                    | (SettleKind::Release, "reserved") => {}
                    (SettleKind::Release, "started") => {
                        return Err(LedgerError::UnitStarted(charge_id.to_owned()))
                    }
                    _ => {
                        return Err(LedgerError::NotReserved {
                            charge: charge_id.to_owned(),
                            status,
                        })
                    }
                }
                let on_behalf = self
                    .act_on(
                        actor,
                        id,
                        &format!("charge {charge_id:?}"),
                        charge.principal.as_deref(),
                        req.reason.as_deref(),
                    )
                    .await?;
                // Starting twice changes nothing.
                if (how, status.as_str()) == (SettleKind::Start, "started") {
                    let mut view = super::views::charge_view(&charge);
                    view.status = status;
                    let f = filter_of(&row)?;
                    return Ok(Plan::Answer((
                        serde_json::json!({
                            "charge": view, "mu_spent": f.mu(), "delta_spent": f.delta(),
                        }),
                        false,
                    )));
                }
                // A run's later chunks start from this chunk's iterates: its output was used, so it
                // cannot be refunded while one of them is held.
                if let (true, Some(run), Some(chunk)) = (release, &charge.run_id, charge.chunk) {
                    let later = self
                        .store
                        .list_run(id, run, 0)
                        .await?
                        .into_iter()
                        .filter(|e| e.kind == "charge" && e.status.as_deref() != Some("released"))
                        .filter_map(|e| e.chunk)
                        .filter(|c| *c > chunk)
                        .min();
                    if let Some(later) = later {
                        return Err(LedgerError::ReleaseRefused {
                            charge: charge_id.to_owned(),
                            reason: format!(
                                "chunk {later} of the same run is held, and it starts from this \
                             chunk's output; release it first, or commit this one"
                            ),
                        });
                    }
                }
                let unit = match (charge.unit_mu, charge.unit_delta) {
                    (Some(m), Some(d)) => Certificate::new(m, d),
                    _ => None,
                }
                .ok_or_else(|| {
                    LedgerError::Corrupt(
                        id.to_owned(),
                        format!("charge {charge_id}: no certificate"),
                    )
                })?;
                let f = filter_of(&row)?;
                let ts = now();
                let mut update = unchanged(&row, &f, ts.clone());
                let new_status = how.status();
                if how != SettleKind::Start {
                    update.reserved = (update.reserved - 1).max(0);
                }
                update.settle = Some(Settle {
                    charge_id: charge_id.to_owned(),
                    from: status.clone(),
                    to: new_status.to_owned(),
                });
                let mut joins = false;
                if how == SettleKind::Start {
                    // Still counted, and not yet part of the exact composition.
                } else if release {
                    let after = f.without(&unit);
                    update = DatasetUpdate {
                        mu_spent: after.mu(),
                        mu_sq_spent: after.mu_sq(),
                        delta_spent: after.delta(),
                        units: after.units(),
                        ..update
                    };
                    // The share that paid is refunded too: the holder's quota, or the unallocated
                    // share (which holds everything charged before the first quota).
                    let quotas = self.store.list_quotas(id).await?;
                    let payer = charge
                        .quota
                        .as_deref()
                        .unwrap_or(super::budget::UNALLOCATED);
                    if let Some(q) = quotas.iter().find(|q| q.principal == payer) {
                        let s = FilterState::from_stored(q.mu_sq_spent, q.delta_spent, q.units)
                            .map_err(|e| LedgerError::Corrupt(id.to_owned(), e))?;
                        update.quotas = vec![super::quotas::charged(q, &s.without(&unit), &ts)];
                    }
                } else {
                    // The committed unit joins the exact composition (a report, composed later).
                    joins = true;
                }
                let mut settled = super::views::charge_view(&charge);
                settled.status = new_status.to_owned();
                let body = super::views::Settled {
                    charge: settled,
                    refund: release.then(|| super::budget::CertificateView {
                        mu: unit.mu(),
                        delta: unit.delta(),
                    }),
                    mu_spent: update.mu_spent,
                    delta_spent: update.delta_spent,
                };
                let body = serde_json::to_value(&body).map_err(super::error::internal)?;
                // What the caller stated: a release's statement, and an admin's reason for acting
                // on another principal's unit.
                let statement = match (release, &on_behalf) {
                    (true, None) => Some(serde_json::json!({
                        "outputs_released": false, "reason": req.reason,
                    })),
                    (true, Some((owner, reason))) => Some(serde_json::json!({
                        "outputs_released": false, "reason": reason, "for": owner,
                    })),
                    (false, Some((owner, reason))) => {
                        Some(serde_json::json!({"for": owner, "reason": reason}))
                    }
                    (false, None) => None,
                }
                .map(|v| v.to_string());
                let entry = EntryRow {
                    seq: row.version + 1,
                    idempotency_key: key.as_ref().map(|k| k.stored().to_owned()),
                    request_hash: Some(req.request_hash.clone()),
                    ref_id: Some(charge_id.to_owned()),
                    run_id: charge.run_id.clone(),
                    chunk: charge.chunk,
                    metadata: statement,
                    unit_mu: Some(unit.mu()),
                    unit_delta: Some(unit.delta()),
                    response: Some(body.to_string()),
                    principal: Some(actor.principal.name.clone()),
                    quota: charge.quota.clone(),
                    ..EntryRow::new(how.entry_kind(), ts)
                };
                let action = how.action();
                update.audit = Some(
                    audit::draft(actor, action, Some(id), Some(charge_id))
                        .before(&serde_json::json!({"status": status, "mu_spent": f.mu(),
                        "delta_spent": f.delta()}))
                        .after(
                            &serde_json::json!({"status": new_status, "mu_spent": update.mu_spent,
                        "delta_spent": update.delta_spent, "statement": entry.metadata}),
                        )
                        .done(),
                );
                Ok(Plan::Append {
                    entry: Box::new(entry),
                    update: Box::new(update),
                    answer: (body, joins),
                })
            })
        };
        match self
            .write(id, key.as_ref(), &req.request_hash, settle)
            .await?
        {
            Written::Planned((body, joins), written) => {
                if joins && written {
                    // The committed unit joins the exact composition: caught up soon.
                    self.compositions.nudge(id);
                }
                Ok(body)
            }
            Written::Replayed(body) => Ok(body),
        }
    }
}

/// What a settle request does to a reserved unit.
impl SettleKind {
    fn operation(self) -> Operation {
        match self {
            SettleKind::Start => Operation::Start,
            SettleKind::Commit => Operation::Commit,
            SettleKind::Release => Operation::Release,
        }
    }

    /// The unit's status after it.
    fn status(self) -> &'static str {
        match self {
            SettleKind::Start => "started",
            SettleKind::Commit => "committed",
            SettleKind::Release => "released",
        }
    }

    fn entry_kind(self) -> &'static str {
        match self {
            SettleKind::Start => "start",
            SettleKind::Commit => "commit",
            SettleKind::Release => "release",
        }
    }

    fn action(self) -> &'static str {
        match self {
            SettleKind::Start => "unit.started",
            SettleKind::Commit => "unit.committed",
            SettleKind::Release => "unit.released",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: i64, kind: &str, f: impl FnOnce(&mut EntryRow)) -> EntryRow {
        let mut e = EntryRow::new(kind, "2026-01-01T00:00:00.000Z".into());
        e.seq = seq;
        e.run_id = Some("r".into());
        f(&mut e);
        e
    }

    fn charge(seq: i64, id: &str, chunk: i64, status: &str) -> EntryRow {
        entry(seq, "charge", |e| {
            (e.charge_id, e.chunk, e.status) = (Some(id.into()), Some(chunk), Some(status.into()));
            (e.unit_mu, e.unit_delta) = (Some(0.1), Some(0.0));
        })
    }

    fn settle(seq: i64, kind: &str, id: &str, chunk: i64) -> EntryRow {
        entry(seq, kind, |e| {
            (e.ref_id, e.chunk) = (Some(id.into()), Some(chunk))
        })
    }

    /// Moved forward entry by entry, or read whole after every status changed (each charge then
    /// shows its final status, and the settles that led there are applied again): the same
    /// counts and next chunk as `run_view` counts from the final statuses.
    #[test]
    fn run_progress_counts_as_the_whole_run_does() {
        let unit = Certificate::new(0.1, 0.0).unwrap();
        let spec = RunSpec {
            event: serde_json::json!({"type": "gdp", "mu": 0.1}),
            steps: 40,
            chunk_steps: 10,
            delta: None,
            plan: RunPlan {
                chunk_unit: unit,
                last_chunk_unit: None,
                run_mu: 0.2,
                run_delta: 0.0,
                run_mu_as_one_unit: None,
            },
            warnings: Vec::new(),
            reserve: false,
            sampler: None,
        };
        let decl = entry(1, "run", |e| {
            e.event = Some(serde_json::to_string(&spec).unwrap())
        });
        // As appended (each charge with the status it had when read at once).
        let live = vec![
            charge(2, "a", 0, "reserved"),
            charge(3, "b", 1, "committed"),
            settle(4, "start", "a", 0),
            settle(5, "release", "a", 0),
            charge(6, "c", 0, "reserved"),
            settle(7, "commit", "c", 0),
            charge(8, "d", 2, "reserved"),
        ];
        // The same run read after the fact: statuses as they are now.
        let now: Vec<EntryRow> = live
            .iter()
            .map(|e| {
                let mut e = e.clone();
                e.status = match e.charge_id.as_deref() {
                    Some("a") => Some("released".into()),
                    Some("c") => Some("committed".into()),
                    _ => e.status,
                };
                e
            })
            .collect();
        let whole = run_view(&[vec![decl.clone()], now.clone()].concat(), "d").unwrap();
        assert_eq!(
            (
                whole.chunks_committed,
                whole.chunks_reserved,
                whole.chunks_released
            ),
            (2, 1, 1)
        );
        assert_eq!(whole.next_chunk, Some(3));
        let mut stepwise = RunProgress::new(decl.clone(), "d").unwrap();
        for e in &live {
            stepwise.advance(std::slice::from_ref(e));
        }
        let mut at_once = RunProgress::new(decl, "d").unwrap();
        at_once.advance(&now);
        for p in [&stepwise, &at_once] {
            let v = p.view();
            assert_eq!(
                (
                    v.chunks_committed,
                    v.chunks_reserved,
                    v.chunks_released,
                    v.next_chunk
                ),
                (2, 1, 1, Some(3))
            );
            // Chunks 0, 1 and 2 held (μ 0.1 each), chunk 3 to come: √0.03 used, 0.1 to finish,
            // each rounded up by at most a few ulps.
            assert_eq!((v.steps_taken, v.delta_used), (30, 0.0));
            assert!(v.mu_to_finish >= 0.1 && v.mu_to_finish < 0.1 * (1.0 + 1e-15));
            assert!(v.mu_used >= 0.03f64.sqrt() && v.mu_used < 0.03f64.sqrt() * (1.0 + 1e-15));
            assert_eq!(p.seq, 8);
        }
    }
}
