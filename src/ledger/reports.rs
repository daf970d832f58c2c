//! Reports: the filter's guarantee (kept by guarantee, it is the same for every charge within
//! the budget), the exact composition beside it, and stateless composition.

use super::auth::{Action, Actor};
use super::compute::{analytic, blocking};
use super::error::LedgerError;
use super::filter::FilterState;
use super::input::Budget;
use super::rows::{budget_of, filter_of, relation_of, stated_budget, statement_of};
use super::views::{DatasetReport, ExactComposition, TradeoffView, EXACT_ONLY_IF};
use super::{admission, Ledgers};
use crate::accountant::account::AccountRequest;
use crate::accountant::cache::ByteCache;
use crate::accountant::guarantee::Guarantee;
use crate::accountant::params::{DeltaSlack, ReportOptions};
use crate::accountant::report::Report;
use crate::accountant::{account, AccountantError, NeighboringRelation};
use std::sync::{Arc, Mutex};

/// The report of the filter's guarantee (the budget's: see [`Budget::guarantee`]); δ slack: that
/// guarantee's δ.
pub(super) fn filter_report(
    f: &FilterState,
    budget: &Budget,
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

impl Ledgers {
    /// The report of a dataset: the filter's guarantee, with the exact composition beside it.
    pub async fn report(
        &self,
        actor: &Actor,
        id: &str,
        opts: ReportOptions,
    ) -> Result<DatasetReport, LedgerError> {
        self.authorize(actor, id, Action::Read).await?;
        let row = self.row(id).await?;
        let filter = filter_of(&row)?;
        let composed = self.compositions.at_least(&row).await?;
        let budget = budget_of(&row)?;
        let stated = stated_budget(&row)?;
        let statement = statement_of(&row, &filter)?;
        let relation = relation_of(&row)?;
        let state = composed.state.clone().ok();
        let cost = admission::Cost::light_if(state.as_ref().is_none_or(|s| s.is_analytic()));
        let reports = self.reports.clone();
        blocking(&self.admission, cost, move || {
            let report = reports.get(&filter, &stated, relation, &opts);
            let exact_opts = ReportOptions {
                delta_slack: budget.delta_slack(),
                ..opts
            };
            let exact = match &state {
                Some(state) => match state.guarantee() {
                    Ok(g) => Some(ExactComposition {
                        valid_only_if: EXACT_ONLY_IF,
                        version: composed.version,
                        report: Report::build(
                            g.as_ref(),
                            relation,
                            state.invocations(),
                            &exact_opts,
                        ),
                    }),
                    Err(e @ AccountantError::Stopped(_)) => return Err(e.into()),
                    Err(_) => None,
                },
                None => None,
            };
            Ok(DatasetReport {
                report,
                statement,
                mu_spent: filter.mu(),
                delta_spent: filter.delta(),
                units: filter.units(),
                exact_composition: exact,
            })
        })
        .await
    }

    /// The trade-off curve of the dataset's guarantee at `alphas`.
    pub async fn tradeoff(
        &self,
        actor: &Actor,
        id: &str,
        alphas: Vec<crate::accountant::params::Alpha>,
    ) -> Result<TradeoffView, LedgerError> {
        let opts = ReportOptions {
            alphas,
            deltas: vec![],
            epsilons: vec![],
            ..ReportOptions::default()
        };
        let r = self.report(actor, id, opts).await?.report;
        Ok(TradeoffView {
            mu: r.mu,
            alpha_star: r.tier2.alpha_star,
            points: r.tradeoff,
        })
    }

    /// The stateless report of a list of events.    /// The stateless report of a list of events.
    pub async fn compose(&self, req: AccountRequest) -> Result<Report, LedgerError> {
        let cost = admission::Cost::light_if(
            req.events
                .iter()
                .all(|e| analytic(e, req.neighboring_relation)),
        );
        blocking(&self.admission, cost, move || {
            account::account(&req).map_err(LedgerError::from)
        })
        .await
    }
}
