//! Quotas: shares of a dataset's one budget, per principal.
//!
//! A quota gives a principal (μ_q, δ_q) of the dataset's budget (μ_B, δ_B). Quotas are always
//! shares of that one guarantee, never budgets of their own: independent per-analyst budgets are
//! not sound under adaptive use (Big Bird, arXiv:2506.05290), since the analysts' outputs compose
//! on the same records. The rest of the budget, μ_*² = μ_B² − Σμ_q² and δ_* = δ_B − Σδ_q, is the
//! unallocated share (holder `*`) that principals without a quota spend from. A unit is admitted
//! iff it fits the dataset's filter *and* the filter of the share it is charged to, by the same
//! rule ([`super::filter::Gate`]): the dataset's guarantee is untouched (quotas only stop earlier),
//! and since the shares' μ² and δ add up to at most the budget's, every holder can spend its whole
//! share whatever the others do.
//!
//! Invariants, checked when a quota or the budget changes (409 `quota_conflict` otherwise):
//! Σμ_q² + (what the unallocated share spent) ≤ μ_B² and the same for δ; a quota is never set
//! below what its holder spent. Spending before the first quota (by anyone) belongs to the
//! unallocated share, so it is never counted twice nor forgotten.
//!
//! On a partitioned dataset a quota is the holder's share of every block: it is written to the
//! dataset and to each existing block at once, and copied into each block created later (under the
//! dataset's version, see `docs/partitions.md`). Each block checks the invariants on its own spend.

use super::budget::{Budget, QuotaShare, UNALLOCATED};
use super::error::{internal, LedgerError};
use super::filter::Limit;
use super::filter::{sqrt_up, FilterState, Share};
use super::input::QuotaRequest;
use super::names::principal_name;
use super::principal::{Action, Actor};
use super::rows::{budget_of, filter_of, now, unchanged};
use super::write::{Plan, PlanFuture, Written};
use super::{audit, Ledgers};
use crate::accountant::rounding;
use crate::store::{DatasetRow, DatasetUpdate, EntryRow, LedgerAppend, QuotaRow};
use serde::Serialize;
use utoipa::ToSchema;

/// A share of the budget and what was charged to it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, ToSchema)]
#[schema(as = Quota)]
pub struct QuotaView {
    /// The principal, or `*` for the unallocated share.
    pub principal: String,
    /// The share: μ_q and δ_q (for `*`, what the quotas leave of the budget).
    pub mu: f64,
    pub delta: f64,
    /// Spent from it: √Σμᵢ² and Σδᵢ over its units (rounded up).
    pub mu_spent: f64,
    pub delta_spent: f64,
    /// What a further unit charged to it can have: √(μ_q² − Σμᵢ²) and δ_q − Σδᵢ (rounded down;
    /// a unit must fit the dataset's remaining budget as well).
    pub remaining_mu: f64,
    pub remaining_delta: f64,
    /// The share of the quota used, in the filter's terms (as a dataset's `used_fraction`).
    pub used_fraction: f64,
    pub exhausted: bool,
    pub units: i64,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

fn state_of(q: &QuotaRow) -> Result<FilterState, LedgerError> {
    FilterState::from_stored(q.mu_sq_spent, q.delta_spent, q.units).map_err(|e| {
        LedgerError::Corrupt(q.dataset_id.clone(), format!("quota {}: {e}", q.principal))
    })
}

/// Σμ_q² (rounded up) and Σδ_q (rounded up) over the quotas other than `*` and `except`.
fn allocated(quotas: &[QuotaRow], except: Option<&str>) -> (f64, f64) {
    quotas
        .iter()
        .filter(|q| q.principal != UNALLOCATED && Some(q.principal.as_str()) != except)
        .fold((0.0, 0.0), |(m, d), q| {
            (
                rounding::add_up(m, rounding::mul_up(q.mu, q.mu)),
                rounding::add_up(d, q.delta),
            )
        })
}

/// The unallocated share's budget: √(μ_B² − Σμ_q²) and δ_B − Σδ_q, rounded down, at least 0.
fn unallocated(budget: &Budget, quotas: &[QuotaRow]) -> Result<QuotaShare, LedgerError> {
    let (m, d) = allocated(quotas, None);
    let b2 = rounding::mul_down(budget.mu(), budget.mu());
    let mu = if m >= b2 {
        0.0
    } else {
        rounding::down(rounding::sub_down(b2, m).sqrt(), rounding::ULP_REL).max(0.0)
    };
    let delta = rounding::sub_down(budget.delta(), d).max(0.0);
    QuotaShare::new(mu, delta).map_err(internal)
}

/// The share a unit charged by `holder` is paid from: `None` when the dataset has no quotas.
pub(super) fn share_for(
    row: &DatasetRow,
    quotas: &[QuotaRow],
    holder: &str,
) -> Result<Option<(Share, QuotaRow)>, LedgerError> {
    if quotas.is_empty() {
        return Ok(None);
    }
    let own = quotas
        .iter()
        .find(|q| q.principal == holder && holder != UNALLOCATED);
    let (q, budget) = match own {
        Some(q) => (q, QuotaShare::new(q.mu, q.delta).map_err(internal)?),
        None => {
            let q = quotas
                .iter()
                .find(|q| q.principal == UNALLOCATED)
                .ok_or_else(|| {
                    LedgerError::Corrupt(
                        row.id.clone(),
                        "quotas without the unallocated share".into(),
                    )
                })?;
            (q, unallocated(&budget_of(row)?, quotas)?)
        }
    };
    Ok(Some((
        Share {
            holder: q.principal.clone(),
            budget,
            state: state_of(q)?,
        },
        q.clone(),
    )))
}

/// A new block's quota rows: its partitioned dataset's quotas (`parent`, the unallocated share's
/// included), with nothing spent. Each block is a ledger of its own, so each holder has its share
/// in every block (`docs/partitions.md`).
pub(super) fn for_new_block(parent: &[QuotaRow], block_id: &str, at: &str) -> Vec<QuotaRow> {
    parent
        .iter()
        .map(|q| QuotaRow {
            dataset_id: block_id.to_owned(),
            mu_sq_spent: 0.0,
            delta_spent: 0.0,
            units: 0,
            updated_at: at.to_owned(),
            ..q.clone()
        })
        .collect()
}

/// The quota row of `share` after a unit moved it to `state`.
pub(super) fn charged(row: &QuotaRow, state: &FilterState, at: &str) -> QuotaRow {
    QuotaRow {
        mu_sq_spent: state.mu_sq(),
        delta_spent: state.delta(),
        units: state.units(),
        updated_at: at.to_owned(),
        ..row.clone()
    }
}

/// What the unallocated share has spent: its row, or (before the first quota) everything.
fn unallocated_spent(row: &DatasetRow, quotas: &[QuotaRow]) -> Result<FilterState, LedgerError> {
    match quotas.iter().find(|q| q.principal == UNALLOCATED) {
        Some(q) => state_of(q),
        None => filter_of(row),
    }
}

/// Whether quotas with allocation (`m`, `d`) = (Σμ_q², Σδ_q) fit `budget` beside what the
/// unallocated share spent; the reason if not.
pub(super) fn fits(budget: &Budget, m: f64, d: f64, spent: &FilterState) -> Result<(), String> {
    let need_mu = rounding::add_up(m, spent.mu_sq());
    if need_mu > rounding::mul_down(budget.mu(), budget.mu()) {
        return Err(format!(
            "the quotas' mu (sqrt of the sum of mu_q^2 = {:.6}) and what the unallocated share \
             spent (mu {:.6}) need mu {:.6} > budget {}",
            sqrt_up(m),
            spent.mu(),
            sqrt_up(need_mu),
            budget.mu()
        ));
    }
    let need_delta = rounding::add_up(d, spent.delta());
    if need_delta > budget.delta() {
        return Err(format!(
            "the quotas' delta ({d:e}) and what the unallocated share spent ({:e}) need delta \
             {need_delta:e} > budget {:e}",
            spent.delta(),
            budget.delta()
        ));
    }
    Ok(())
}

/// Whether `budget` still holds the dataset's quotas (for a budget change).
pub(super) fn budget_holds_quotas(
    row: &DatasetRow,
    quotas: &[QuotaRow],
    budget: &Budget,
) -> Result<(), LedgerError> {
    if quotas.is_empty() {
        return Ok(());
    }
    let (m, d) = allocated(quotas, None);
    fits(budget, m, d, &unallocated_spent(row, quotas)?).map_err(|r| {
        LedgerError::QuotaConflict(format!("the new budget cannot hold the quotas: {r}"))
    })
}

pub(super) fn quota_view(
    budget: &Budget,
    quotas: &[QuotaRow],
    q: &QuotaRow,
) -> Result<QuotaView, LedgerError> {
    let share = if q.principal == UNALLOCATED {
        unallocated(budget, quotas)?
    } else {
        QuotaShare::new(q.mu, q.delta).map_err(internal)?
    };
    let s = state_of(q)?;
    Ok(QuotaView {
        principal: q.principal.clone(),
        mu: share.mu(),
        delta: share.delta(),
        mu_spent: s.mu(),
        delta_spent: s.delta(),
        remaining_mu: share.remaining_mu(&s),
        remaining_delta: share.remaining_delta(&s),
        used_fraction: share.used(&s),
        exhausted: share.exhausted(&s),
        units: s.units(),
        updated_at: q.updated_at.clone(),
    })
}

impl Ledgers {
    /// The dataset's quotas, with the unallocated share: all of them for its admins and auditors,
    /// one's own for any other principal who may read the dataset.
    pub async fn list_quotas(
        &self,
        actor: &Actor,
        id: &str,
    ) -> Result<Vec<QuotaView>, LedgerError> {
        self.authorize(actor, id, Action::Read).await?;
        let all = self.sees_others(actor, id).await;
        let row = self.row(id).await?;
        let budget = budget_of(&row)?;
        let quotas = self.store.list_quotas(id).await?;
        quotas
            .iter()
            .filter(|q| all || q.principal == actor.principal.name)
            .map(|q| quota_view(&budget, &quotas, q))
            .collect()
    }

    /// Sets `principal`'s quota on dataset `id` (recorded in the ledger; idempotent with a key).
    /// On a partitioned dataset the quota is the holder's share of every block: it is written to
    /// the dataset (for blocks created later) and to every existing block, all or none.
    pub async fn set_quota(
        &self,
        actor: &Actor,
        id: &str,
        principal: &str,
        req: QuotaRequest,
    ) -> Result<QuotaView, LedgerError> {
        self.authorize(actor, id, Action::Administer).await?;
        // A block's quotas are its dataset's: one set on a block alone could only come after the
        // charge that created the block.
        if let Some((parent, _)) = super::partition::split_block_id(id) {
            return Err(LedgerError::Invalid(
                "path.id".into(),
                format!(
                    "{id:?} is a block: quotas are set on the partitioned dataset {parent:?} and                      apply in every block"
                ),
            ));
        }
        principal_name(principal).map_err(|r| LedgerError::Invalid("path.principal".into(), r))?;
        let share = QuotaShare::new(req.mu, req.delta)
            .map_err(|r| LedgerError::Invalid("body".into(), r))?;
        self.row(id).await?;
        let partitioned = self.partitioning_of(id).await?.is_some();
        // Scoped to the quota's holder (the path), not only to the dataset.
        let key = super::keys::IdemKey::of(
            &actor.principal,
            super::keys::Operation::Quota,
            principal,
            req.idempotency_key.as_ref(),
        );
        let (key, share, req) = (&key, &share, &req);
        let plan = move |row: DatasetRow| -> PlanFuture<'_, QuotaView> {
            Box::pin(async move {
                let ts = now();
                let quotas = self.store.list_quotas(id).await?;
                let (view, mut entry, update) = plan(actor, &row, &quotas, principal, share, &ts)?;
                entry.idempotency_key = key.as_ref().map(|k| k.stored().to_owned());
                entry.request_hash = Some(req.request_hash.clone());
                entry.response = Some(serde_json::to_string(&view).map_err(internal)?);
                if !partitioned {
                    return Ok(Plan::Append {
                        entry: Box::new(entry),
                        update: Box::new(update),
                        answer: view,
                    });
                }
                // Every block takes the quota in the same transaction.
                let blocks = self.every_block(id).await?;
                let mut items = Vec::with_capacity(blocks.len() + 1);
                items.push(LedgerAppend {
                    id: id.to_owned(),
                    expected_version: row.version,
                    create: None,
                    entry,
                    update,
                    hold: None,
                    // Blocks created meanwhile copied the quotas before this change: start over.
                    blocks: Some(blocks.len() as i64),
                });
                for b in &blocks {
                    self.check_state(b).await?;
                    let bq = self.store.list_quotas(&b.id).await?;
                    let (_, entry, update) =
                        plan(actor, b, &bq, principal, share, &ts).map_err(|e| match e {
                            LedgerError::QuotaConflict(r) => {
                                LedgerError::QuotaConflict(format!("in block {:?}: {r}", b.id))
                            }
                            e => e,
                        })?;
                    items.push(LedgerAppend {
                        id: b.id.clone(),
                        expected_version: b.version,
                        create: None,
                        entry,
                        update,
                        hold: None,
                        blocks: None,
                    });
                }
                Ok(Plan::AppendMany {
                    items,
                    shared: None,
                    answer: view,
                })
            })
        };
        match self
            .write(id, key.as_ref(), &req.request_hash, plan)
            .await?
        {
            Written::Planned(view, _) => Ok(view),
            Written::Replayed(body) => serde_json::from_value(body).map_err(internal),
        }
    }

    /// Every block of partitioned dataset `id` (at most [`MAX_QUOTA_BLOCKS`]).
    async fn every_block(&self, id: &str) -> Result<Vec<DatasetRow>, LedgerError> {
        let mut blocks: Vec<DatasetRow> = Vec::new();
        loop {
            let after = blocks.last().map(|b| b.id.clone());
            let page = self.store.list_blocks(id, after.as_deref(), 1000).await?;
            let done = page.len() < 1000;
            blocks.extend(page);
            if blocks.len() > MAX_QUOTA_BLOCKS {
                return Err(LedgerError::Invalid(
                    "path.id".into(),
                    format!(
                        "dataset {id:?} has more than {MAX_QUOTA_BLOCKS} blocks: a quota is \
                         written to every block in one transaction, and so many are not"
                    ),
                ));
            }
            if done {
                return Ok(blocks);
            }
        }
    }
}

/// The most blocks a quota on a partitioned dataset is written to (in one transaction).
pub const MAX_QUOTA_BLOCKS: usize = 5000;

/// One ledger's part of a quota change (the dataset's, or a block's): the checks, and the view,
/// entry (without the request's key, hash and response) and update that make it.
fn plan(
    actor: &Actor,
    row: &DatasetRow,
    quotas: &[QuotaRow],
    principal: &str,
    share: &QuotaShare,
    ts: &str,
) -> Result<(QuotaView, EntryRow, DatasetUpdate), LedgerError> {
    let id = row.id.as_str();
    let budget = budget_of(row)?;
    let old = quotas.iter().find(|q| q.principal == principal);
    let spent = old
        .map(state_of)
        .transpose()?
        .unwrap_or_else(FilterState::empty);
    if share.mu_limit() < spent.mu() || share.delta_limit() < spent.delta() {
        return Err(LedgerError::QuotaConflict(format!(
            "{principal:?} has spent mu {:.6} and delta {:e} of its quota already; a quota \
             cannot be set below that",
            spent.mu(),
            spent.delta()
        )));
    }
    let (m, d) = allocated(quotas, Some(principal));
    let (m, d) = (
        rounding::add_up(m, rounding::mul_up(share.mu(), share.mu())),
        rounding::add_up(d, share.delta()),
    );
    let pool = unallocated_spent(row, quotas)?;
    fits(&budget, m, d, &pool).map_err(LedgerError::QuotaConflict)?;
    let new = QuotaRow {
        dataset_id: id.to_owned(),
        principal: principal.to_owned(),
        mu: share.mu(),
        delta: share.delta(),
        mu_sq_spent: spent.mu_sq(),
        delta_spent: spent.delta(),
        units: spent.units(),
        updated_at: ts.to_owned(),
    };
    let mut writes = vec![new.clone()];
    if !quotas.iter().any(|q| q.principal == UNALLOCATED) {
        // The first quota: everything spent so far belongs to the unallocated share.
        writes.push(QuotaRow {
            principal: UNALLOCATED.into(),
            mu: 0.0,
            delta: 0.0,
            mu_sq_spent: pool.mu_sq(),
            delta_spent: pool.delta(),
            units: pool.units(),
            ..new.clone()
        });
    }
    let mut after: Vec<QuotaRow> = quotas
        .iter()
        .filter(|q| q.principal != principal)
        .cloned()
        .collect();
    after.extend(writes.iter().cloned());
    let view = quota_view(&budget, &after, &new)?;
    let before = old.map(|q| quota_view(&budget, quotas, q)).transpose()?;
    let entry = EntryRow {
        seq: row.version + 1,
        label: Some(principal.to_owned()),
        budget_mu: Some(share.mu()),
        budget_delta: Some(share.delta()),
        principal: Some(actor.principal.name.clone()),
        quota: Some(principal.to_owned()),
        ..EntryRow::new("quota", ts.to_owned())
    };
    let f = filter_of(row)?;
    let mut update = unchanged(row, &f, ts.to_owned());
    update.quotas = writes;
    update.audit = Some(
        audit::draft(actor, "quota.set", Some(id), Some(principal))
            .before(&before)
            .after(&view)
            .done(),
    );
    Ok((view, entry, update))
}
