//! What the gate reads of each dataset, kept between charges: the row and quotas as of this
//! process's last write ([`GateInputs`]), moved forward by each append and dropped on any doubt.

use super::budget::Budget;
use super::filter::FilterState;
use super::filter::Limit;
use crate::accountant::cache::ByteCache;
use crate::accountant::guarantee::Guarantee;
use crate::accountant::params::{DeltaSlack, ReportOptions};
use crate::accountant::report::Report;
use crate::accountant::NeighboringRelation;
use crate::store::DatasetRow;
use std::sync::Arc;
use std::sync::Mutex;

/// A dataset's row and quotas at one version: what the gate reads.
#[derive(Debug)]
pub(super) struct GateInputs {
    pub(super) row: DatasetRow,
    pub(super) quotas: Vec<crate::store::QuotaRow>,
    /// The ledger holds idempotency keys stored before keys were scoped ([`keys`]): a keyed
    /// request is then checked for a replay in the store first (the unique index, which the
    /// kept inputs rely on, does not see a scoped key's legacy twin).
    pub(super) legacy_keys: bool,
}

impl GateInputs {
    /// Approximate heap and inline size, for the cache's bound.
    pub(super) fn bytes(&self) -> usize {
        let r = &self.row;
        let strings = r.id.len()
            + r.description.len()
            + r.neighboring_relation.len()
            + r.create_hash.as_ref().map_or(0, String::len)
            + r.created_at.len()
            + r.updated_at.len();
        let quotas: usize = self
            .quotas
            .iter()
            .map(|q| {
                std::mem::size_of::<crate::store::QuotaRow>()
                    + q.dataset_id.len()
                    + q.principal.len()
                    + q.updated_at.len()
            })
            .sum();
        std::mem::size_of::<Self>() + strings + quotas
    }
}

/// The report of the filter's guarantee (the limit's: see [`Limit::guarantee`]); δ slack: that
/// guarantee's δ.
pub(super) fn filter_report(
    f: &FilterState,
    budget: &impl Limit,
    relation: NeighboringRelation,
    opts: &ReportOptions,
) -> Report {
    let opts = ReportOptions {
        delta_slack: DeltaSlack::probability(budget.guarantee(f).infinity_mass())
            .expect("a filter guarantee's delta is below 1"),
        ..opts.clone()
    };
    Report::build(
        &budget.guarantee(f),
        relation,
        f.units().max(0) as u64,
        &opts,
    )
}

/// Bytes of kept filter reports: 4 MiB (a report is ≈ 10 KB in memory).
pub const REPORT_CACHE_BYTES: usize = 4 << 20;

/// Filter reports with the default options, kept by guarantee and relation.
///
/// A filter's guarantee is the budget's (G_{μ_B} ⊗ f_{0,δ_B}) until spending passes it, so every
/// charge on a dataset reports the same figures; only the count of invocations differs. A report is
/// a pure function of (μ, δ, relation, options, invocations) ([`Report::build`]), so the kept
/// report with its count replaced is exactly the one that would be built: this is a memo, not an
/// approximation. Other options are built each time.
#[derive(Clone)]
pub(super) struct FilterReports(Arc<Mutex<ByteCache<ReportKey, Arc<Report>>>>);

/// A filter guarantee's parameters ([`crate::accountant::certificate::FilterGuarantee::key`]) and
/// the neighbouring relation.
pub(super) type ReportKey = (u64, u64, NeighboringRelation);

impl FilterReports {
    pub(super) fn new() -> Self {
        FilterReports(Arc::new(Mutex::new(ByteCache::new(REPORT_CACHE_BYTES))))
    }

    /// [`filter_report`], kept when `opts` are the defaults.
    pub(super) fn get(
        &self,
        f: &FilterState,
        budget: &Budget,
        relation: NeighboringRelation,
        opts: &ReportOptions,
    ) -> Report {
        if *opts != *DEFAULT_REPORT_OPTIONS {
            return filter_report(f, budget, relation, opts);
        }
        let (mu, delta) = budget.guarantee(f).key();
        let key = (mu, delta, relation);
        let kept = self.0.lock().expect("filter reports").get(&key);
        let mut report = match kept {
            Some(r) => (*r).clone(),
            None => {
                let r = filter_report(f, budget, relation, opts);
                let bytes = report_bytes(&r);
                self.0
                    .lock()
                    .expect("filter reports")
                    .insert(key, Arc::new(r.clone()), bytes);
                r
            }
        };
        report.invocations = f.units().max(0) as u64;
        report
    }
}

/// The default report options, built once.
pub(super) static DEFAULT_REPORT_OPTIONS: std::sync::LazyLock<ReportOptions> =
    std::sync::LazyLock::new(ReportOptions::default);

/// A report's size in memory, roughly (its lists dominate).
pub(super) fn report_bytes(r: &Report) -> usize {
    std::mem::size_of::<Report>()
        + 64 * (r.epsilon.len() + r.delta.len() + r.tradeoff.len() + r.tier2.rows.len())
}
