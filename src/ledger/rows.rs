//! Reading a dataset's stored row: its fields checked into the ledger's types (a corrupt one
//! stops the dataset), new rows, and the conversion of version-1 ledgers to the filter.

use super::budget::Budget;
use super::error::LedgerError;
use super::filter::{FilterState, Statement};
use crate::accountant::params::GridStep;
use crate::accountant::NeighboringRelation;
use crate::store::{DatasetRow, DatasetUpdate};

/// The dataset fields of an append that changes neither the budget nor the counts: the filter
/// state `f` and the row's other figures.
pub(super) fn unchanged(row: &DatasetRow, f: &FilterState, updated_at: String) -> DatasetUpdate {
    DatasetUpdate {
        budget_mu: row.budget_mu,
        budget_delta: row.budget_delta,
        mu_max: row.mu_max,
        delta_max: row.delta_max,
        charges: row.charges,
        mu_spent: f.mu(),
        mu_sq_spent: f.mu_sq(),
        delta_spent: f.delta(),
        units: f.units(),
        reserved: row.reserved.unwrap_or(0),
        settle: None,
        quotas: Vec::new(),
        audit: None,
        budget_target: None,
        updated_at,
    }
}

/// The row of a new, empty ledger (a dataset, or a block on its first charge) with `budget`, grid
/// step `h` and an optional `cap`.
pub(super) fn empty_row(
    id: String,
    description: String,
    relation: &str,
    (budget, h, cap): (Budget, GridStep, Option<Budget>),
    create_hash: Option<String>,
) -> DatasetRow {
    let ts = now();
    DatasetRow {
        id,
        description,
        neighboring_relation: relation.to_owned(),
        budget_mu: budget.mu(),
        budget_delta: budget.delta(),
        grid_step: h.get(),
        version: 0,
        charges: 0,
        mu_spent: 0.0,
        mu_sq_spent: Some(0.0),
        delta_spent: Some(0.0),
        units: Some(0),
        exact_mu: Some(0.0),
        reserved: Some(0),
        create_hash,
        mu_max: budget.mu(),
        delta_max: budget.delta(),
        cap_mu: cap.map(|c| c.mu()),
        cap_delta: cap.map(|c| c.delta()),
        statement_unknown: None,
        // Its creation (or first charge) is audited with its state.
        states_from: Some(0),
        state_seq: 0,
        budget_target: None,
        population: None,
        created_at: ts.clone(),
        updated_at: ts,
    }
}

pub(super) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The stored relation, checked (a corrupt one stops the dataset: read as the default it would
/// account every charge under the wrong neighbours).
pub(super) fn relation_of(row: &DatasetRow) -> Result<NeighboringRelation, LedgerError> {
    NeighboringRelation::parse(&row.neighboring_relation).ok_or_else(|| {
        LedgerError::Corrupt(
            row.id.clone(),
            format!("neighbouring relation {:?}", row.neighboring_relation),
        )
    })
}

/// The stored budget, checked.
pub(super) fn budget_of(row: &DatasetRow) -> Result<Budget, LedgerError> {
    Budget::new(row.budget_mu, row.budget_delta)
        .map_err(|e| LedgerError::Corrupt(row.id.clone(), format!("budget: {e}")))
}

/// The budget's high-water mark (μ_max, δ_max): what every report states ([`Statement`]). Never
/// below the budget in force, whoever wrote it (a row whose budget passed the stored mark, e.g. by
/// an older release, states the budget).
pub(super) fn stated_budget(row: &DatasetRow) -> Result<Budget, LedgerError> {
    Budget::new(
        row.mu_max.max(row.budget_mu),
        row.delta_max.max(row.budget_delta),
    )
    .map_err(|e| LedgerError::Corrupt(row.id.clone(), format!("high-water mark: {e}")))
}

/// The cap fixed at creation, if any.
pub(super) fn cap_of(row: &DatasetRow) -> Result<Option<Budget>, LedgerError> {
    match (row.cap_mu, row.cap_delta) {
        (Some(mu), Some(delta)) => Budget::new(mu, delta)
            .map(Some)
            .map_err(|e| LedgerError::Corrupt(row.id.clone(), format!("cap: {e}"))),
        _ => Ok(None),
    }
}

/// What the ledger states after spending `f` ([`Statement`]).
pub(super) fn statement_of(row: &DatasetRow, f: &FilterState) -> Result<Statement, LedgerError> {
    Ok(Statement::of(
        &stated_budget(row)?,
        cap_of(row)?,
        f,
        row.statement_unknown.as_deref(),
    ))
}

/// The stored grid step, checked.
pub(super) fn grid_step_of(row: &DatasetRow) -> Result<GridStep, LedgerError> {
    GridStep::new(row.grid_step)
        .map_err(|e| LedgerError::Corrupt(row.id.clone(), format!("grid step {e}")))
}

/// What a unit's certificates depend on besides the unit: the relation and the grid step.
pub(super) fn engine_of(row: &DatasetRow) -> Result<(NeighboringRelation, GridStep), LedgerError> {
    Ok((relation_of(row)?, grid_step_of(row)?))
}

/// The filter state of a converted row, checked (a corrupt one stops the dataset).
pub(super) fn filter_of(row: &DatasetRow) -> Result<FilterState, LedgerError> {
    match (row.mu_sq_spent, row.delta_spent, row.units) {
        (Some(m), Some(d), Some(u)) => {
            FilterState::from_stored(m, d, u).map_err(|e| LedgerError::Corrupt(row.id.clone(), e))
        }
        _ => Err(LedgerError::Corrupt(
            row.id.clone(),
            "the filter state is missing (not converted from schema version 1)".into(),
        )),
    }
}
