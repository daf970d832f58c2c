//! The report's parameters: defaults, limits and the checks of the query points, shared by the
//! HTTP edge, the CLI and the ledger (each value is checked once, where it enters).

use super::pld;

/// The δ slack used when the caller gives none: the δ that +∞ privacy-loss mass (probability of a
/// total privacy failure) may use before μ is declared unavailable. Budgets use the same default.
/// It is at most 1e-10 and far above the numerical engine's own tail truncation.
pub const DEFAULT_DELTA_SLACK: f64 = 1e-10;

/// Largest δ slack a caller may choose (beyond this a "μ-GDP" statement would hide a real failure
/// probability).
pub const MAX_DELTA_SLACK: f64 = 1e-3;

/// Default δ values at which ε is reported.
pub const DEFAULT_DELTAS: &[f64] = &[1e-3, 1e-5, 1e-6, 1e-9];

/// Default ε values at which δ is reported.
pub const DEFAULT_EPSILONS: &[f64] = &[0.0, 0.5, 1.0, 2.0, 4.0, 8.0];

/// Default α values at which the trade-off curve is reported.
pub const DEFAULT_ALPHAS: &[f64] = &[
    1e-10, 1e-8, 1e-6, 1e-4, 1e-3, 0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9,
];

/// The α values of the Tier-II table of Gomez et al. ("(ε,δ) considered harmful") (α* is appended per report).
pub const TIER2_ALPHAS: &[f64] = &[1e-10, 1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 1e-1];

/// Most points a caller may ask for in each of `deltas`, `epsilons` and `alphas`.
pub const MAX_POINTS: usize = 1000;

/// What to report and how (validated).
#[derive(Debug, Clone, PartialEq)]
pub struct ReportOptions {
    pub deltas: Vec<f64>,
    pub epsilons: Vec<f64>,
    pub alphas: Vec<f64>,
    pub delta_slack: f64,
    /// Grid step h of the numerical engine (ignored by analytic compositions).
    pub grid_step: f64,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            deltas: DEFAULT_DELTAS.to_vec(),
            epsilons: DEFAULT_EPSILONS.to_vec(),
            alphas: DEFAULT_ALPHAS.to_vec(),
            delta_slack: DEFAULT_DELTA_SLACK,
            grid_step: pld::DEFAULT_GRID_STEP,
        }
    }
}

/// Checks a δ query point.
pub fn check_delta(x: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(format!("must be a number in [0, 1], got {x}"))
    }
}

/// Checks an ε query point.
pub fn check_epsilon(x: f64) -> Result<f64, String> {
    if (0.0..=1e6).contains(&x) {
        Ok(x)
    } else {
        Err(format!("must be a number in [0, 1e6], got {x}"))
    }
}

/// Checks an α query point.
pub fn check_alpha(x: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(format!("must be a number in [0, 1], got {x}"))
    }
}

/// Checks a grid step.
pub fn check_grid_step(x: f64) -> Result<f64, String> {
    if (pld::MIN_GRID_STEP..=pld::MAX_GRID_STEP).contains(&x) {
        Ok(x)
    } else {
        Err(format!(
            "must be a number in [{:e}, {}], got {x}",
            pld::MIN_GRID_STEP,
            pld::MAX_GRID_STEP
        ))
    }
}

/// Checks a δ slack.
pub fn check_delta_slack(x: f64) -> Result<f64, String> {
    if (0.0..=MAX_DELTA_SLACK).contains(&x) {
        Ok(x)
    } else {
        Err(format!(
            "must be a number in [0, {MAX_DELTA_SLACK}], got {x}"
        ))
    }
}
