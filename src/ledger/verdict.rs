//! The gate's decision on one unit: its certificates (memoised) against the filter's sums and
//! the caller's share, and the reasons of a refusal.

use super::budget::Budget;
use super::certificates::{forget, known, recall, stored_key};
use super::compute::analytic;
use super::compute::blocking;
use super::error::LedgerError;
use super::error::Rejection;
use super::filter::Limit;
use super::filter::{Exceeded, FilterState, Gate, Verdict};
use super::rows::{budget_of, filter_of};
use super::{admission, certificates, filter, quotas, Ledgers, DEFAULT_UNITS_PER_DELTA};
use crate::accountant::certificate::certify;
use crate::accountant::certificate::{Certificate, UnitDelta};
use crate::accountant::params::GridStep;
use crate::accountant::{Event, NeighboringRelation};
use crate::store::DatasetRow;
use std::sync::Arc;
use std::time::Instant;

/// The δ rule of a unit: the charge's own, else the budget's default (see
/// [`DEFAULT_UNITS_PER_DELTA`]).
pub(super) fn unit_delta(budget: &Budget, own: Option<f64>) -> UnitDelta {
    match own {
        Some(d) => UnitDelta::Fixed(d),
        None => UnitDelta::Auto(budget.delta() / DEFAULT_UNITS_PER_DELTA),
    }
}

/// What the gate decided about a unit, with what the answer needs.
pub(super) struct Gated {
    pub(super) unit: Certificate,
    pub(super) verdict: Verdict,
    /// Every certificate of the unit.
    pub(super) candidates: Arc<[Certificate]>,
}

/// The gate's decision on `event`: its certificates (memoised, [`certificates::certificates`])
/// against the filter's sums. Nothing else: no composition, whatever the ledger holds.
pub(super) fn gate_compute(
    (relation, h): (NeighboringRelation, GridStep),
    event: Event,
    gate: &Gate,
    own_delta: Option<f64>,
) -> Result<Gated, LedgerError> {
    let t = Instant::now();
    let path = crate::accountant::json::JsonPath::root().field("event");
    let rule = unit_delta(&gate.budget, own_delta);
    let candidates = certificates::certificates(&event, relation, h, rule, &path)?;
    let (verdict, unit) = gate.choose(&candidates);
    metrics::histogram!("privacy_ledger_accountant_seconds").record(t.elapsed().as_secs_f64());
    Ok(Gated {
        unit,
        verdict,
        candidates,
    })
}

/// The cost class of gating `event`: light when its certificates are closed-form or memoised.
pub(super) fn gate_cost(
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

/// Why the gate refused `unit`: the dataset's budget (`quota = None`) or the caller's share. The
/// figures are the dataset's either way; the reason names the share's.
pub(super) fn rejection(
    gate: &Gate,
    unit: Certificate,
    quota: Option<String>,
    why: Exceeded,
) -> Rejection {
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

pub(super) fn dataset_reason(
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
    /// The gate of a unit charged by `holder` on `row`: the dataset's filter and, when the
    /// dataset has quotas, the holder's share (with its stored row).
    pub(super) fn gate_for(
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
    pub(super) async fn gate_now(
        &self,
        row: &DatasetRow,
        holder: &str,
    ) -> Result<(Gate, Option<crate::store::QuotaRow>), LedgerError> {
        Self::gate_for(row, &self.store.list_quotas(&row.id).await?, holder)
    }
}

impl Ledgers {
    /// Certificates of a unit this process does not hold, read from the store into the memo
    /// (this build certified it before: another replica of it, or this process before a
    /// restart), so the gate does not certify it again. `Some(key)` when the store has none
    /// either: where to keep them once certified ([`Ledgers::persist_certificates`]). The table is
    /// as trusted as the rest of the database; `audit verify` certifies every unit afresh.
    pub(super) async fn recall_certificates(
        &self,
        event: &Event,
        (relation, h): (NeighboringRelation, GridStep),
        rule: UnitDelta,
        asked: &mut std::collections::HashSet<String>,
    ) -> Option<String> {
        if analytic(event, relation) || known(event, relation, h, rule) {
            return None;
        }
        let key = stored_key(event, relation, h, rule)?;
        // Once per unit in a request (a charge on 365 blocks asks once).
        if !asked.insert(key.clone()) {
            return None;
        }
        match self.store.get_certificates(&key).await {
            Ok(Some(v)) if recall(event, relation, h, rule, &v) => {
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
    pub(super) fn verify_recalled(
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
                    forget(&event, relation, h, rule);
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
            recall(&event, relation, h, rule, &value);
            let _ = store.put_certificates(&key, &value).await;
        });
    }

    /// Keeps a unit's certificates in the store, in the background (a failure only costs a
    /// certification after the next restart).
    pub(super) fn persist_certificates(&self, key: String, candidates: &[Certificate]) {
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
}
