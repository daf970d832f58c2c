//! Reports: the filter's guarantee (kept by guarantee, it is the same for every charge within
//! the budget), the exact composition beside it, and stateless composition.

use super::compute::{analytic, blocking};
use super::error::LedgerError;
use super::principal::{Action, Actor};
use super::rows::{budget_of, filter_of, relation_of, stated_budget, statement_of};
use super::views::{DatasetReport, ExactComposition, TradeoffView, EXACT_ONLY_IF};
use super::{admission, Ledgers};
use crate::accountant::account::AccountRequest;
use crate::accountant::params::ReportOptions;
use crate::accountant::report::Report;
use crate::accountant::{account, AccountantError};

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
        let privacy_unit = super::views::population_of(&row)?.unit().to_owned();
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
                privacy_unit,
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

    /// The stateless report of a list of events, for a caller that may account
    /// ([`Ledgers::may_account`]).
    pub async fn compose(&self, actor: &Actor, req: AccountRequest) -> Result<Report, LedgerError> {
        self.may_account(actor).await?;
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
