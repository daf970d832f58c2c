//! What the dashboard (`/ui`) shows: read-only views assembled from the same functions the API
//! serves, so every figure on a page is the API's figure (the pages only format it).
//!
//! The one figure the API does not serve as such is the *spending curve*: the trade-off curve of
//! G_{μ_spent} ⊗ f_{0,δ_spent}. It is drawn as progress toward the budget, never as a guarantee: under
//! fully adaptive composition what was spent depends on the outputs, so the valid guarantee is the
//! budget's ([`super::filter::Limit::guarantee`]) — the pages say so beside the curve.

use super::error::LedgerError;
use super::filter::FilterState;
use super::filter::Limit;
use super::kept::filter_report;
use super::principal::Actor;
use super::quotas::QuotaView;
use super::rows::{budget_of, filter_of, relation_of};
use super::views::{DatasetReport, DatasetView};
use super::Ledgers;
use crate::accountant::certificate::Certificate;
use crate::accountant::params::{Alpha, ReportOptions};
use crate::accountant::report::TradeoffPoint;
use crate::store::UnitRow;

/// Most ledger entries a dataset page reads (its chart and table); a longer ledger shows its
/// latest [`MAX_PAGE_ENTRIES`] and says so. The target is 10⁴ units in under 200 ms.
pub const MAX_PAGE_ENTRIES: i64 = 20_000;

/// Entries looked at, from the newest, for a dataset card's "last unit".
const LAST_UNIT_WINDOW: i64 = 64;

/// The α grid of the dashboard's curves: 24 points log-spaced over [10⁻⁶, 0.05) (where attacks at
/// a low false-positive rate live), then 40 evenly spaced over [0.05, 0.995].
pub fn curve_alphas() -> Vec<Alpha> {
    let log = (0..24).map(|i| 10f64.powf(-6.0 + (i as f64) * (6.0 + 0.05f64.log10()) / 24.0));
    let lin = (0..40).map(|i| 0.05 + (i as f64) * (0.995 - 0.05) / 39.0);
    log.chain(lin)
        .map(|a| Alpha::new(a).expect("the grid is inside (0, 1)"))
        .collect()
}

/// A dataset as its card shows it.
#[derive(Debug, Clone)]
pub struct DatasetCard {
    pub dataset: DatasetView,
    /// The certificate of the latest unit, if one is among the last entries.
    pub last_unit: Option<Certificate>,
    /// About how many more units like the last committed one the budget has room for
    /// ([`super::filter::Budget::more_like`]).
    pub more_like_last: Option<u64>,
    /// A partitioned dataset: its blocks at a glance (its own ledger holds nothing).
    pub blocks: Option<BlocksGlance>,
}

/// A partitioned dataset's blocks as its card shows them (the first [`CARD_BLOCKS`] by name).
#[derive(Debug, Clone)]
pub struct BlocksGlance {
    pub count: usize,
    pub exhausted: usize,
    /// The fullest block and its used share.
    pub fullest: Option<(String, f64)>,
    /// Whether there are more blocks than were looked at.
    pub truncated: bool,
}

/// Blocks a card looks at.
pub const CARD_BLOCKS: i64 = 400;

/// Everything a dataset's page shows.
#[derive(Debug, Clone)]
pub struct DatasetPage {
    pub card: DatasetCard,
    /// The API's report (`GET /v1/datasets/{id}/report`) at [`curve_alphas`].
    pub report: DatasetReport,
    /// The spending curve (see the module docs), at [`curve_alphas`]; `None` before any spending.
    pub spending: Option<Vec<TradeoffPoint>>,
    /// The ledger's charges in order (those among its latest [`MAX_PAGE_ENTRIES`] entries).
    pub units: Vec<UnitLine>,
    /// Whether older entries were left out.
    pub truncated: bool,
    pub quotas: Vec<QuotaView>,
    /// A partitioned dataset's blocks charged so far (the first [`MAX_PAGE_BLOCKS`]).
    pub blocks: Option<super::multi::BlocksView>,
    /// The API's headline (`GET /v1/datasets/{id}/headline`).
    pub headline: super::headline::Headline,
    /// The budget μ over time: the first is the budget before the earliest change read (its
    /// `since` is `None`), then each change with its time (RFC 3339), oldest first.
    pub budgets: Vec<(Option<String>, f64)>,
}

/// Budget changes a dataset page reads (the newest; a ledger with more draws the budget before
/// the oldest of them as that change's "before").
pub const MAX_PAGE_BUDGET_CHANGES: i64 = 500;

/// Blocks a partitioned dataset's page lists.
pub const MAX_PAGE_BLOCKS: i64 = 100;

/// A charge as the units table and the spending chart show it (what `GET …/charges` lists,
/// without the event, metadata and idempotency key).
#[derive(Debug, Clone)]
pub struct UnitLine {
    pub seq: i64,
    pub id: String,
    pub label: Option<String>,
    pub principal: Option<String>,
    /// `committed`, `reserved` or `released`.
    pub status: String,
    pub run_id: Option<String>,
    pub chunk: Option<i64>,
    pub unit: Option<Certificate>,
    pub mu_after: Option<f64>,
    pub created_at: String,
}

impl From<UnitRow> for UnitLine {
    fn from(r: UnitRow) -> Self {
        UnitLine {
            seq: r.seq,
            id: r.charge_id.unwrap_or_default(),
            label: r.label,
            principal: r.principal,
            status: r.status.unwrap_or_else(|| "committed".into()),
            run_id: r.run_id,
            chunk: r.chunk,
            unit: match (r.unit_mu, r.unit_delta) {
                (Some(m), Some(d)) => Certificate::new(m, d),
                _ => None,
            },
            mu_after: r.mu_after,
            created_at: r.created_at,
        }
    }
}

impl Ledgers {
    /// A page of dataset cards (the datasets `actor` may see, by id after `after`).
    pub async fn dashboard_cards(
        &self,
        actor: &Actor,
        after: Option<&str>,
        limit: i64,
    ) -> Result<(Vec<DatasetCard>, Option<String>), LedgerError> {
        let (datasets, next) = self.list_datasets(actor, after, limit).await?;
        let mut cards = Vec::with_capacity(datasets.len());
        for d in datasets {
            let from = (d.version - LAST_UNIT_WINDOW).max(0);
            let recent = self
                .store
                .list_units(&d.id, from, LAST_UNIT_WINDOW + 1)
                .await?;
            // The reference is the last committed unit, as the headline's: a reservation does
            // not swing the count.
            let last = recent
                .into_iter()
                .rev()
                .map(UnitLine::from)
                .find(|u| u.status == "committed")
                .and_then(|u| u.unit);
            cards.push(self.card(d, last).await?);
        }
        Ok((cards, next))
    }

    /// One dataset's page.
    pub async fn dashboard_dataset(
        &self,
        actor: &Actor,
        id: &str,
    ) -> Result<DatasetPage, LedgerError> {
        let dataset = self.get_dataset(actor, id).await?;
        let opts = ReportOptions {
            alphas: curve_alphas(),
            ..ReportOptions::default()
        };
        let report = self.report(actor, id, opts.clone()).await?;
        let from = (dataset.version - MAX_PAGE_ENTRIES).max(0);
        // Authorised above (get_dataset): the summaries of the same entries the API lists.
        let units: Vec<UnitLine> = self
            .store
            .list_units(id, from, MAX_PAGE_ENTRIES)
            .await?
            .into_iter()
            .map(UnitLine::from)
            .collect();
        let last = units
            .iter()
            .rev()
            .find(|u| u.status == "committed")
            .and_then(|u| u.unit);
        let quotas = self.list_quotas(actor, id).await?;
        let spending = match Certificate::new(report.mu_spent, report.delta_spent) {
            Some(c) if report.units > 0 => {
                let row = self.row(id).await?;
                let relation = relation_of(&row)?;
                // The spending alone as a budget that is exactly used up: its filter guarantee
                // is G_{μ_spent} ⊗ f_{0,δ_spent}, built by the same code as every report.
                let spent =
                    super::budget::Spent::new(c.mu(), c.delta()).map_err(LedgerError::Internal)?;
                let f = FilterState::empty();
                Some(filter_report(&f, &spent, relation, &opts).tradeoff)
            }
            _ => None,
        };
        let blocks = match dataset.partitioning {
            Some(_) => Some(
                self.list_blocks(actor, id, None, None, MAX_PAGE_BLOCKS)
                    .await?,
            ),
            None => None,
        };
        let headline = self.headline(actor, id, None, None).await?;
        let budgets = self.budget_history(id, dataset.budget.mu()).await?;
        Ok(DatasetPage {
            budgets,
            headline,
            blocks,
            truncated: from > 0,
            card: self.card(dataset, last).await?,
            report,
            spending,
            units,
            quotas,
        })
    }

    /// Dataset `id`'s budget μ over time, from its `budget.changed` audit records (written in the
    /// change's own transaction, with the budget before and after); `current` when it never
    /// changed. Authorised by the caller (anyone who reads the dataset sees its budget entries).
    async fn budget_history(
        &self,
        id: &str,
        current: f64,
    ) -> Result<Vec<(Option<String>, f64)>, LedgerError> {
        let q = crate::store::AuditQuery {
            dataset_id: Some(id.to_owned()),
            action_prefix: Some("budget.changed".into()),
            limit: MAX_PAGE_BUDGET_CHANGES,
            ..Default::default()
        };
        let mut changes = self.store.list_audit_newest(&q, i64::MAX).await?;
        changes.reverse();
        let mu_of = |v: &Option<String>| -> Option<f64> {
            let v: serde_json::Value = serde_json::from_str(v.as_deref()?).ok()?;
            v.get("mu")?.as_f64()
        };
        let first = changes
            .first()
            .and_then(|c| mu_of(&c.draft.before))
            .unwrap_or(current);
        let mut out = vec![(None, first)];
        for c in &changes {
            if let Some(mu) = mu_of(&c.draft.after) {
                out.push((Some(c.draft.at.clone()), mu));
            }
        }
        Ok(out)
    }

    /// Partitioned dataset `id`'s blocks at a glance (the first [`CARD_BLOCKS`] by name): what its
    /// card and its gauges show.
    pub(super) async fn blocks_glance(&self, id: &str) -> Result<BlocksGlance, LedgerError> {
        let rows = self.store.list_blocks(id, None, CARD_BLOCKS + 1).await?;
        let truncated = rows.len() as i64 > CARD_BLOCKS;
        let (mut exhausted, mut fullest) = (0, None::<(String, f64)>);
        for b in rows.iter().take(CARD_BLOCKS as usize) {
            let (bb, bs) = (budget_of(b)?, filter_of(b)?);
            let u = bb.used(&bs);
            exhausted += usize::from(bb.exhausted(&bs));
            if fullest.as_ref().is_none_or(|(_, f)| u > *f) {
                let name = super::partition::split_block_id(&b.id)
                    .map_or(b.id.clone(), |(_, n)| n.to_owned());
                fullest = Some((name, u));
            }
        }
        Ok(BlocksGlance {
            count: rows.len().min(CARD_BLOCKS as usize),
            exhausted,
            fullest,
            truncated,
        })
    }

    async fn card(
        &self,
        dataset: DatasetView,
        last_unit: Option<Certificate>,
    ) -> Result<DatasetCard, LedgerError> {
        let row = self.row(&dataset.id).await?;
        let (budget, filter) = (budget_of(&row)?, filter_of(&row)?);
        // (A listed dataset's view carries no partitioning: read it, kept per process.)
        let blocks = match self.partitioning_of(&dataset.id).await? {
            None => None,
            Some(_) => Some(self.blocks_glance(&dataset.id).await?),
        };
        Ok(DatasetCard {
            blocks,
            more_like_last: last_unit.and_then(|c| budget.more_like(&filter, &c)),
            dataset,
            last_unit,
        })
    }
}
