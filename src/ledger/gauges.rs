//! Budget gauges for Prometheus (`/metrics`): per dataset, per quota share and per partitioned
//! dataset's blocks, what is used and what is left, refreshed on a scrape at most every
//! [`GAUGE_REFRESH`] and over at most [`MAX_GAUGE_DATASETS`] datasets, so a scrape's cost is
//! bounded whatever the store holds. Their HELP text is in `app.rs` (`describe_metrics`).

use super::error::LedgerError;
use super::filter::Limit;
use super::headline::forecast_of;
use super::rows::{budget_of, filter_of};
use super::Ledgers;
use std::time::{Duration, Instant};

/// Least time between two refreshes of the gauges.
pub const GAUGE_REFRESH: Duration = Duration::from_secs(10);

/// Most datasets with gauges (the first by id); the rest are left out and counted in
/// `privacy_ledger_budget_gauges_truncated`.
pub const MAX_GAUGE_DATASETS: i64 = 500;

/// Latest ledger entries read per dataset for the forecast's rate (a busier week is measured
/// over the span these cover).
pub const GAUGE_FORECAST_UNITS: i64 = 2000;

impl Ledgers {
    /// Sets the budget gauges from the store, unless they were set less than [`GAUGE_REFRESH`]
    /// ago.
    pub async fn refresh_budget_gauges(&self) -> Result<(), LedgerError> {
        {
            let mut last = self.gauges_at.lock().expect("gauges");
            if last.is_some_and(|t| t.elapsed() < GAUGE_REFRESH) {
                return Ok(());
            }
            *last = Some(Instant::now());
        }
        let rows = self
            .store
            .list_datasets(None, MAX_GAUGE_DATASETS + 1, None)
            .await?;
        metrics::gauge!("privacy_ledger_budget_gauges_truncated").set(
            if rows.len() as i64 > MAX_GAUGE_DATASETS {
                1.0
            } else {
                0.0
            },
        );
        let now = chrono::Utc::now();
        for row in rows.iter().take(MAX_GAUGE_DATASETS as usize) {
            // A row not yet converted to the filter (schema 1) has no sums to show yet.
            if row.mu_sq_spent.is_none() {
                continue;
            }
            let (budget, state) = (budget_of(row)?, filter_of(row)?);
            let id = row.id.clone();
            let set = |name: &'static str, v: f64| {
                metrics::gauge!(name, "dataset" => id.clone()).set(v);
            };
            set("privacy_ledger_budget_used_ratio", budget.used(&state));
            set("privacy_ledger_budget_mu", budget.mu());
            set(
                "privacy_ledger_budget_remaining_mu",
                budget.remaining_mu(&state),
            );
            set(
                "privacy_ledger_budget_remaining_delta",
                budget.remaining_delta(&state),
            );
            set("privacy_ledger_budget_units", state.units() as f64);
            set(
                "privacy_ledger_budget_reserved_units",
                row.reserved.unwrap_or(0) as f64,
            );
            set(
                "privacy_ledger_budget_exhausted",
                f64::from(u8::from(budget.exhausted(&state))),
            );
            let from = (row.version - GAUGE_FORECAST_UNITS).max(0);
            let units = self
                .store
                .list_units(&row.id, from, GAUGE_FORECAST_UNITS)
                .await?;
            let fc = forecast_of(&units, from > 0, &row.created_at, &budget, &state, now);
            // +Inf when nothing was spent over the week: it never runs out at that rate.
            set(
                "privacy_ledger_budget_days_left",
                fc.days_left.unwrap_or(f64::INFINITY),
            );
            let quotas = self.store.list_quotas(&row.id).await?;
            for q in &quotas {
                let v = super::quotas::quota_view(&budget, &quotas, q)?;
                let labels = [("dataset", id.clone()), ("holder", v.principal.clone())];
                metrics::gauge!("privacy_ledger_quota_used_ratio", &labels).set(v.used_fraction);
                metrics::gauge!("privacy_ledger_quota_remaining_mu", &labels).set(v.remaining_mu);
            }
            if self.partitioning_of(&row.id).await?.is_some() {
                // What the dataset's card shows (the first blocks by name).
                let g = self.blocks_glance(&row.id).await?;
                set(
                    "privacy_ledger_blocks_used_ratio_max",
                    g.fullest.map_or(0.0, |(_, u)| u),
                );
                set("privacy_ledger_blocks_exhausted", g.exhausted as f64);
                set("privacy_ledger_blocks", g.count as f64);
            }
        }
        Ok(())
    }
}
