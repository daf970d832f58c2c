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

/// A number in a closed range, validated once where it enters (parse, don't validate): the engine
/// takes these, never a bare `f64` it would have to check again.
macro_rules! bounded {
    ($(#[$doc:meta])* $name:ident, $lo:expr, $hi:expr, $range:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
        pub struct $name(f64);

        impl $name {
            /// Validates `x` (NaN and anything outside the range are refused, with the reason).
            pub fn new(x: f64) -> Result<Self, String> {
                if ($lo..=$hi).contains(&x) {
                    Ok($name(x))
                } else {
                    Err(format!("must be a number in {}, got {x}", $range))
                }
            }
            /// The value.
            pub fn get(self) -> f64 {
                self.0
            }
        }
    };
}

bounded!(
    /// A δ at which ε is reported: in [0, 1].
    Delta, 0.0, 1.0, "[0, 1]"
);
bounded!(
    /// An ε at which δ is reported: in [0, 1e6].
    Epsilon, 0.0, 1e6, "[0, 1e6]"
);
bounded!(
    /// A false-positive rate α of the trade-off curve: in [0, 1].
    Alpha, 0.0, 1.0, "[0, 1]"
);
bounded!(
    /// The grid step h of the numerical engine: in [`pld::MIN_GRID_STEP`], [`pld::MAX_GRID_STEP`].
    GridStep,
    pld::MIN_GRID_STEP,
    pld::MAX_GRID_STEP,
    format!("[{:e}, {}]", pld::MIN_GRID_STEP, pld::MAX_GRID_STEP)
);
bounded!(
    /// A δ slack (a μ fit's allowance for +∞ mass, a unit's or a budget's δ): in
    /// [0, [`MAX_DELTA_SLACK`]].
    DeltaSlack, 0.0, MAX_DELTA_SLACK, format!("[0, {MAX_DELTA_SLACK}]")
);

impl GridStep {
    /// The default grid step, [`pld::DEFAULT_GRID_STEP`].
    pub fn default_step() -> Self {
        GridStep(pld::DEFAULT_GRID_STEP)
    }
}

impl DeltaSlack {
    /// A δ the service itself derives (a budget's guarantee: δ_B with the gate's tolerance, or
    /// what a converted ledger spent), which may exceed the callers' limit: any probability in
    /// [0, 1).
    pub fn probability(x: f64) -> Result<Self, String> {
        if (0.0..1.0).contains(&x) {
            Ok(DeltaSlack(x))
        } else {
            Err(format!("must be a probability in [0, 1), got {x}"))
        }
    }

    /// [`DEFAULT_DELTA_SLACK`].
    pub fn default_slack() -> Self {
        DeltaSlack(DEFAULT_DELTA_SLACK)
    }
}

/// What to report and how (validated).
#[derive(Debug, Clone, PartialEq)]
pub struct ReportOptions {
    pub deltas: Vec<Delta>,
    pub epsilons: Vec<Epsilon>,
    pub alphas: Vec<Alpha>,
    pub delta_slack: DeltaSlack,
    /// Grid step h of the numerical engine (ignored by analytic compositions).
    pub grid_step: GridStep,
    /// Also report what the guarantee gives a group of this many records ([`group_size`]).
    pub group_size: Option<u64>,
}

/// Largest group size reported on (beyond it every figure is vacuous for any useful budget).
pub const MAX_GROUP_SIZE: u64 = 10_000;

/// A group size: a whole number in [1, [`MAX_GROUP_SIZE`]].
pub fn group_size(k: u64) -> Result<u64, String> {
    if (1..=MAX_GROUP_SIZE).contains(&k) {
        Ok(k)
    } else {
        Err(format!(
            "must be a whole number in [1, {MAX_GROUP_SIZE}], got {k}"
        ))
    }
}

/// Validated defaults (the constants are in range).
fn all<T>(xs: &[f64], new: fn(f64) -> Result<T, String>) -> Vec<T> {
    xs.iter()
        .map(|&x| new(x).expect("defaults are in range"))
        .collect()
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            deltas: all(DEFAULT_DELTAS, Delta::new),
            epsilons: all(DEFAULT_EPSILONS, Epsilon::new),
            alphas: all(DEFAULT_ALPHAS, Alpha::new),
            delta_slack: DeltaSlack::default_slack(),
            grid_step: GridStep::default_step(),
            group_size: None,
        }
    }
}
