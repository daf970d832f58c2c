//! A dataset's headline (`GET /v1/datasets/{id}/headline`): what is used and what is left, in the
//! filter's own terms and in ε, how many more units like the last committed one fit, the runs in
//! progress and what they still need, the caller's own share, and when the budget runs out at the
//! last week's rate. For a partitioned dataset, the same of the tightest block of a range, with
//! every block's used share (the dashboard's calendar).
//!
//! Every figure here is budget *use*, read from the ledger; the guarantee is the budget's
//! statement (`statement` of the dataset). Each is rounded toward an earlier warning: shares and
//! rates up, what is left and counts down.

use super::error::LedgerError;
use super::filter::{shown_spent, FilterState, Limit};
use super::multi::BlockView;
use super::partition::BlockSelector;
use super::principal::Actor;
use super::rows::{budget_of, filter_of, statement_of};
use super::views::DatasetView;
use super::Ledgers;
use crate::accountant::certificate::Certificate;
use crate::accountant::gdp;
use crate::accountant::rounding;
use crate::store::UnitRow;
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

/// Days of spending the forecast's rate is measured over.
pub const FORECAST_DAYS: i64 = 7;

/// Most of the latest ledger entries a headline reads (the last committed unit and the forecast's
/// spending); a week with more units is measured over the span these cover, and says so.
pub const HEADLINE_UNITS: i64 = 20_000;

/// Most runs a headline looks at for the runs in progress (the latest declared).
pub const HEADLINE_RUNS: i64 = 100;

/// Most blocks a partitioned dataset's headline lists.
pub const HEADLINE_BLOCKS: i64 = 400;

/// The δ at which ε figures are given when the request names none and the budget was given in μ.
pub const DEFAULT_HEADLINE_DELTA: f64 = 1e-5;

const USED_MEANING: &str = "the share of the budget used in the filter's own terms: the larger of \
    (mu spent / mu budget)^2 and delta spent / delta budget. The filter adds each unit's mu^2, so \
    this share and the remaining one add up to 100 %: mu_spent^2 + remaining_mu^2 = budget_mu^2";

/// What the budget means in ε at one δ.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct EpsilonAt {
    /// The δ of the figures: the request's, else the budget's target δ when it was given as
    /// (ε, δ), else [`DEFAULT_HEADLINE_DELTA`].
    pub delta: f64,
    /// ε of the ledger's statement at `delta` (the whole interaction's guarantee, rounded up);
    /// null when no finite ε holds at this δ (δ at most the statement's δ part).
    pub budget: Option<f64>,
    /// ε at `delta` of one further unit spending all that is left (G_{remaining_mu} ⊗
    /// f_{0,remaining_delta}, rounded up): what the rest of the budget allows a single release.
    pub remaining: Option<f64>,
}

/// How many more units like a reference unit fit.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct MoreLike {
    /// The reference: the latest committed charge (reserved, started and released units are
    /// left out, so a reservation does not change the reference).
    pub charge_id: String,
    pub label: Option<String>,
    /// Its certificate.
    pub mu: f64,
    pub delta: f64,
    /// The largest count k with Σμᵢ² + k·μ² ≤ μ_B² and Σδᵢ + k·δ ≤ δ_B (rounded down); null when
    /// the unit spends nothing.
    pub count: Option<u64>,
    /// What the count assumes, in words.
    pub assumes: String,
}

/// A run still in progress: what it has left to take.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct RunNeed {
    pub run_id: String,
    pub label: Option<String>,
    pub chunks: u64,
    pub chunks_committed: u64,
    pub chunks_reserved: u64,
    /// Chunks not yet admitted.
    pub chunks_left: u64,
    /// What the chunks not yet admitted would add (the run's `mu_to_finish`, `delta_to_finish`).
    pub mu_to_finish: f64,
    pub delta_to_finish: f64,
    /// Whether those chunks fit what is left now (μ_to_finish² ≤ remaining μ², δ alike).
    pub fits: bool,
}

/// When the budget runs out at the recent rate.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Forecast {
    /// Start of the span the rate is measured over: [`FORECAST_DAYS`] ago, or the dataset's
    /// creation if later, or the oldest entry read if the span holds more than [`HEADLINE_UNITS`].
    #[schema(format = DateTime)]
    pub since: String,
    /// Σμᵢ² and Σδᵢ added per day over the span by the units still counted (released units are
    /// refunded), rounded up.
    pub mu_sq_per_day: f64,
    pub delta_per_day: f64,
    /// Days until the budget is used at that rate (rounded down); 0 when exhausted; null when
    /// nothing was spent over the span.
    pub days_left: Option<f64>,
    /// The day it would run out (UTC), when `days_left` is finite.
    #[schema(format = Date)]
    pub exhausted_on: Option<String>,
    /// What the forecast assumes, in words.
    pub assumes: String,
}

/// The caller's own share of the dataset (their quota, or the unallocated share they spend from).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ShareHeadline {
    /// The principal, or `*` for the unallocated share.
    pub holder: String,
    pub mu: f64,
    pub delta: f64,
    pub used_fraction: f64,
    pub exhausted: bool,
    pub remaining_mu: f64,
    pub remaining_delta: f64,
}

/// One block as the calendar shows it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct BlockCell {
    pub block: String,
    #[schema(format = DateTime)]
    pub start: Option<String>,
    pub used_fraction: f64,
    pub exhausted: bool,
    pub read_only: bool,
    pub units: i64,
}

/// A partitioned dataset's blocks in the headline.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct BlocksHeadline {
    /// The blocks: of the range when one was given, else the latest charged (at most
    /// [`HEADLINE_BLOCKS`]).
    pub items: Vec<BlockCell>,
    /// Whether blocks were left out.
    pub truncated: bool,
    pub exhausted: u64,
    pub read_only: u64,
    /// The block with the least remaining μ among those that may still be charged (the one that
    /// decides a range charge); the headline's figures are its own.
    pub tightest: Option<String>,
}

/// `GET /v1/datasets/{id}/headline`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Headline {
    pub dataset: String,
    /// A partitioned dataset: the block the figures are of (the tightest of the range); null when
    /// no block has been charged.
    pub block: Option<String>,
    /// See `used_meaning`.
    pub used_fraction: f64,
    pub used_meaning: &'static str,
    pub exhausted: bool,
    pub budget: super::budget::Budget,
    /// The (ε, δ) target the budget was given as, if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_target: Option<super::budget::BudgetTarget>,
    /// μ and δ spent (rounded up; spending within the gate's tolerance of the budget is shown as
    /// the budget, as in `used_fraction`).
    pub mu_spent: f64,
    pub delta_spent: f64,
    pub remaining_mu: f64,
    pub remaining_delta: f64,
    pub units: i64,
    pub reserved_units: i64,
    pub epsilon: EpsilonAt,
    pub more_like_last: Option<MoreLike>,
    /// Runs declared among the latest and not finished, with what they still need.
    pub runs_in_progress: Vec<RunNeed>,
    pub forecast: Forecast,
    /// The caller's own share, when the dataset has quotas.
    pub share: Option<ShareHeadline>,
    pub blocks: Option<BlocksHeadline>,
}

/// ε at `delta` of G_μ ⊗ f_{0,s}: its δ(ε) = s + (1 − s)·δ_μ(ε) ≤ s + δ_μ(ε), so ε(δ) ≤ the ε at
/// which δ_μ(ε) = δ − s (rounded down, so the ε found is never below the exact one): Dong, Roth &
/// Su, "Gaussian differential privacy", Corollary 1, with the tensor product with f_{0,s} of §3.
/// None when δ ≤ s (no finite ε).
fn epsilon_of(mu: f64, s: f64, delta: f64) -> Option<f64> {
    let room = rounding::sub_down(delta, s);
    if room <= 0.0 {
        return None;
    }
    let e = gdp::epsilon_for_delta(mu, room);
    e.is_finite().then_some(e)
}

fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The forecast from the units read (in ledger order; `truncated` when older ones were left out)
/// and the state now.
pub(super) fn forecast_of(
    units: &[UnitRow],
    truncated: bool,
    created_at: &str,
    budget: &impl Limit,
    state: &FilterState,
    now: DateTime<Utc>,
) -> Forecast {
    let week_ago = now - chrono::Duration::days(FORECAST_DAYS);
    let mut since = parse_time(created_at).map_or(week_ago, |c| c.max(week_ago));
    if truncated {
        if let Some(t) = units.first().and_then(|u| parse_time(&u.created_at)) {
            since = since.max(t);
        }
    }
    let (mut mu_sq, mut delta) = (0.0f64, 0.0f64);
    for u in units {
        if u.status.as_deref() == Some("released") {
            continue;
        }
        let Some(t) = parse_time(&u.created_at) else {
            continue;
        };
        if t < since {
            continue;
        }
        if let (Some(m), Some(d)) = (u.unit_mu, u.unit_delta) {
            mu_sq = rounding::add_up(mu_sq, rounding::mul_up(m, m));
            delta = rounding::add_up(delta, d);
        }
    }
    // The span in days, at least one hour (a rate over seconds says nothing), rounded down so the
    // rate is rounded up.
    let span_days = ((now - since).num_seconds().max(3600) as f64) / 86_400.0;
    let span_days = rounding::down(span_days, rounding::ULP_REL);
    let mu_rate = rounding::div_up(mu_sq, span_days);
    let delta_rate = rounding::div_up(delta, span_days);
    let (mu_b, delta_b) = budget.figures();
    let mu_room = rounding::sub_down(rounding::mul_down(mu_b, mu_b), state.mu_sq()).max(0.0);
    let delta_room = rounding::sub_down(delta_b, state.delta()).max(0.0);
    let days = |room: f64, rate: f64| (rate > 0.0).then(|| rounding::div_down(room, rate));
    let days_left = if budget.exhausted(state) {
        Some(0.0)
    } else {
        match (days(mu_room, mu_rate), days(delta_room, delta_rate)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    };
    let exhausted_on = days_left.and_then(|d| {
        let secs = (d * 86_400.0).floor();
        (secs < 1e11).then(|| {
            (now + chrono::Duration::seconds(secs as i64))
                .date_naive()
                .to_string()
        })
    });
    Forecast {
        since: since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        mu_sq_per_day: mu_rate,
        delta_per_day: delta_rate,
        days_left,
        exhausted_on,
        assumes: format!(
            "spending goes on at the rate of the units charged since {} (released units not \
             counted){}; a forecast, not a limit: every charge is still decided by the gate",
            since.date_naive(),
            if truncated {
                format!(", measured over the latest {HEADLINE_UNITS} entries")
            } else {
                String::new()
            }
        ),
    }
}

impl Ledgers {
    /// The headline of dataset `id` (see the module docs): ε figures at `delta` (see
    /// [`EpsilonAt`]); for a partitioned dataset, over the blocks `sel` selects (else the latest
    /// charged).
    pub async fn headline(
        &self,
        actor: &Actor,
        id: &str,
        delta: Option<f64>,
        sel: Option<BlockSelector>,
    ) -> Result<Headline, LedgerError> {
        let dataset = self.get_dataset(actor, id).await?;
        if dataset.partitioning.is_none() {
            if sel.is_some() {
                return Err(LedgerError::Invalid(
                    "query.from".into(),
                    format!("dataset {id:?} is not partitioned: it has no blocks to select"),
                ));
            }
            let mut h = self.headline_of(actor, &dataset, delta).await?;
            h.share = self.own_share(actor, id).await?;
            return Ok(h);
        }
        let ranged = sel.is_some();
        let view = self
            .list_blocks(actor, id, sel, None, HEADLINE_BLOCKS)
            .await?;
        let open = |b: &&BlockView| b.exists && !b.read_only;
        let tightest = if ranged {
            view.tightest.clone()
        } else {
            view.items
                .iter()
                .filter(open)
                .min_by(|a, b| a.remaining_mu.total_cmp(&b.remaining_mu))
                .map(|b| b.block.clone())
        };
        let blocks = BlocksHeadline {
            exhausted: view.items.iter().filter(|b| b.exhausted).count() as u64,
            read_only: view.items.iter().filter(|b| b.read_only).count() as u64,
            truncated: view.next.is_some(),
            tightest: tightest.clone(),
            items: view
                .items
                .iter()
                .map(|b| BlockCell {
                    block: b.block.clone(),
                    start: b.start.clone(),
                    used_fraction: b.used_fraction,
                    exhausted: b.exhausted,
                    read_only: b.read_only,
                    units: b.units,
                })
                .collect(),
        };
        let target = tightest
            .as_deref()
            .and_then(|t| view.items.iter().find(|b| b.block == t))
            .filter(|b| b.exists);
        let mut h = match target {
            Some(b) => {
                let block = self.get_dataset(actor, &b.ledger_id).await?;
                let mut h = self.headline_of(actor, &block, delta).await?;
                h.share = self.own_share(actor, &b.ledger_id).await?;
                h.block = Some(b.block.clone());
                h
            }
            // No block charged (or only uncharged ones in the range): a fresh block's headline.
            None => {
                let mut h = self.headline_of(actor, &dataset, delta).await?;
                h.block = tightest;
                h
            }
        };
        h.dataset = id.to_owned();
        h.blocks = Some(blocks);
        Ok(h)
    }

    /// The headline of one ledger (a dataset, or a block), without share or blocks.
    async fn headline_of(
        &self,
        actor: &Actor,
        d: &DatasetView,
        delta: Option<f64>,
    ) -> Result<Headline, LedgerError> {
        let row = self.row(&d.id).await?;
        let (budget, state) = (budget_of(&row)?, filter_of(&row)?);
        let statement = statement_of(&row, &state)?;
        let delta = delta
            .or(d.budget_target.map(|t| t.delta))
            .unwrap_or(DEFAULT_HEADLINE_DELTA);
        let remaining = (budget.remaining_mu(&state), budget.remaining_delta(&state));
        let epsilon = EpsilonAt {
            delta,
            budget: epsilon_of(statement.mu, statement.delta, delta),
            remaining: epsilon_of(remaining.0, remaining.1, delta),
        };
        let from = (row.version - HEADLINE_UNITS).max(0);
        let units = self.store.list_units(&d.id, from, HEADLINE_UNITS).await?;
        let last = units.iter().rev().find(|u| {
            u.status.as_deref().unwrap_or("committed") == "committed" && u.unit_mu.is_some()
        });
        let more_like_last = last.and_then(|u| {
            let c = Certificate::new(u.unit_mu?, u.unit_delta?)?;
            Some(MoreLike {
                charge_id: u.charge_id.clone().unwrap_or_default(),
                label: u.label.clone(),
                mu: c.mu(),
                delta: c.delta(),
                count: budget.more_like(&state, &c),
                assumes: "every further unit has this unit's certificate; reserved, started and \
                    released units are not references (a reservation does not change this \
                    count until it is committed)"
                    .into(),
            })
        });
        // Runs declared among the same latest entries.
        let (runs, _) = self.list_runs(actor, &d.id, from, HEADLINE_RUNS).await?;
        let runs_in_progress = runs
            .into_iter()
            .filter(|r| r.next_chunk.is_some() || r.chunks_reserved > 0)
            .map(|r| {
                let left = r
                    .chunks
                    .saturating_sub(r.chunks_committed + r.chunks_reserved + r.chunks_released);
                let fits = rounding::mul_up(r.mu_to_finish, r.mu_to_finish)
                    <= rounding::mul_down(remaining.0, remaining.0)
                    && r.delta_to_finish <= remaining.1;
                RunNeed {
                    run_id: r.id,
                    label: r.label,
                    chunks: r.chunks,
                    chunks_committed: r.chunks_committed,
                    chunks_reserved: r.chunks_reserved,
                    chunks_left: left,
                    mu_to_finish: r.mu_to_finish,
                    delta_to_finish: r.delta_to_finish,
                    fits,
                }
            })
            .collect();
        let used = budget.used(&state);
        let forecast = forecast_of(
            &units,
            from > 0,
            &row.created_at,
            &budget,
            &state,
            Utc::now(),
        );
        Ok(Headline {
            dataset: d.id.clone(),
            block: None,
            used_fraction: used,
            used_meaning: USED_MEANING,
            exhausted: budget.exhausted(&state),
            budget,
            budget_target: d.budget_target,
            mu_spent: shown_spent(state.mu(), budget.mu(), used),
            delta_spent: shown_spent(state.delta(), budget.delta(), used),
            remaining_mu: remaining.0,
            remaining_delta: remaining.1,
            units: state.units(),
            reserved_units: row.reserved.unwrap_or(0),
            epsilon,
            more_like_last,
            runs_in_progress,
            forecast,
            share: None,
            blocks: None,
        })
    }

    /// The caller's own share of dataset `id`, when it has quotas: their quota if they hold one,
    /// else the unallocated share (`*`).
    async fn own_share(
        &self,
        actor: &Actor,
        id: &str,
    ) -> Result<Option<ShareHeadline>, LedgerError> {
        let quotas = self.list_quotas(actor, id).await?;
        if quotas
            .iter()
            .all(|q| q.principal == super::budget::UNALLOCATED)
        {
            return Ok(None);
        }
        let name = actor.principal.name.as_str();
        let mine = quotas.iter().find(|q| q.principal == name).or_else(|| {
            quotas
                .iter()
                .find(|q| q.principal == super::budget::UNALLOCATED)
        });
        Ok(mine.map(|q| ShareHeadline {
            holder: q.principal.clone(),
            mu: q.mu,
            delta: q.delta,
            used_fraction: q.used_fraction,
            exhausted: q.exhausted,
            remaining_mu: q.remaining_mu,
            remaining_delta: q.remaining_delta,
        }))
    }
}
