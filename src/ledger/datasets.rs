//! Datasets: creation, reading, listing, budget changes and the ledger's entries.

use super::budget::Budget;
use super::compute::blocking;
use super::error::LedgerError;
use super::filter::FilterState;
use super::input::{BudgetPatch, NewDataset};
use super::principal::{Action, Actor};
use super::rows::{budget_of, cap_of, empty_row, filter_of, now, unchanged};
use super::rows::{grid_step_of, relation_of};
use super::verdict::unit_delta;
use super::views::{charge_view, view, DatasetView, EntryView};
use super::{admission, input};
use super::{audit, keys, partition, quotas, write, Ledgers};
use crate::accountant::certificate::certify;
use crate::accountant::composition::Composition;
use crate::store::Conversion;
use crate::store::{DatasetRow, DatasetUpdate, EntryRow, StoreError};
use serde_json::Value;

impl Ledgers {
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
        let row = DatasetRow {
            budget_target: d.target.map(|t| json_of(&t)),
            population: d.population.stored(),
            ..empty_row(
                d.id.clone(),
                d.description,
                d.neighboring_relation.as_str(),
                (d.budget, d.grid_step, d.cap),
                Some(d.request_hash.clone()),
            )
        };
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
                after.budget_target = patch.target.map(|t| json_of(&t));
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
                    budget_target: Some(after.budget_target.clone()),
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
}

impl Ledgers {
    /// A dataset row, converted to the filter if it was written by schema version 1.
    pub(super) async fn row(&self, id: &str) -> Result<DatasetRow, LedgerError> {
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
    pub(super) async fn convert(&self, row: DatasetRow) -> Result<DatasetRow, LedgerError> {
        let _guard = self.lock(&row.id, super::write::turn_deadline()).await?;
        let entries = self
            .store
            .list_entries(&row.id, Some("charge"), 0, i64::MAX)
            .await?;
        let (relation, h, budget) = (relation_of(&row)?, grid_step_of(&row)?, budget_of(&row)?);
        let id = row.id.clone();
        let conversion = blocking(&self.admission, admission::Cost::Heavy, move || {
            let mut state = super::filter::FilterState::empty();
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
                let candidates = certify(&ev, relation, h, unit_delta(&budget, None), &path)
                    .map_err(|x| {
                        LedgerError::Corrupt(id.clone(), format!("charge {}: {x}", e.seq))
                    })?;
                // The certificate the gate would have charged at this point (its choice among
                // the candidates depends on the sums before the unit); counted even if the gate
                // would have refused it, as it happened.
                let c = super::filter::Gate::of(budget, state).choose(&candidates).1;
                state = state.with(&c);
                certificates.push((e.seq, c.mu(), c.delta()));
            }
            let f = FilterState::from_stored(
                state.mu_sq(),
                state.delta().min(1.0 - f64::EPSILON),
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
}

/// A budget target as stored (`datasets.budget_target`).
fn json_of(t: &super::budget::BudgetTarget) -> String {
    serde_json::to_string(t).expect("a target of finite numbers serialises")
}
