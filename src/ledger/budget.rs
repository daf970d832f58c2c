//! The ledger's amounts, each its own type: a dataset's [`Budget`], a [`QuotaShare`] of it, what
//! was [`Spent`] as figures, and a unit's certificate on the wire ([`CertificateView`]); the
//! tolerance of every comparison with a limit, written once; and the holder name of the unallocated
//! share. The filter's rule over a limit is in [`super::filter`] (its running sums, Σμᵢ² and Σδᵢ,
//! are [`super::filter::FilterState`]).

use crate::accountant::json::{self, Fields, InputError, JsonPath};
use crate::accountant::params::{DeltaSlack, DEFAULT_DELTA_SLACK};
use serde::Serialize;
use serde_json::Value;

/// Relative tolerance of the budget comparisons: admit iff √Σμᵢ² ≤ μ_B·(1 + 1e-9) and
/// Σδᵢ ≤ δ_B·(1 + 1e-9). Far below any privacy-relevant difference; the guarantee reported is the
/// stored sums themselves.
pub const GATE_TOLERANCE: f64 = 1e-9;

/// The holder of the unallocated share.
pub const UNALLOCATED: &str = "*";

/// Largest μ budget accepted (beyond ~30 a μ-GDP guarantee means nothing).
pub const MAX_BUDGET_MU: f64 = 1e3;

/// A dataset's budget for the adaptive filter: μ_B (Σμᵢ² ≤ μ_B²) and δ_B (Σδᵢ ≤ δ_B, the total
/// probability of the units' "reveal" parts). `delta` defaults to [`DEFAULT_DELTA_SLACK`] (1e-10).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = BudgetView)]
pub struct Budget {
    mu: f64,
    delta: f64,
}

impl Budget {
    /// A budget from numbers: μ_B in (0, [`MAX_BUDGET_MU`]], δ_B a [`DeltaSlack`].
    pub fn new(mu: f64, delta: f64) -> Result<Self, String> {
        if !(mu > 0.0 && mu <= MAX_BUDGET_MU) {
            return Err(format!(
                "mu must be a number in (0, {MAX_BUDGET_MU}], got {mu}"
            ));
        }
        let delta = DeltaSlack::new(delta)
            .map_err(|r| format!("delta {r}"))?
            .get();
        Ok(Budget { mu, delta })
    }
    /// μ_B.
    pub fn mu(&self) -> f64 {
        self.mu
    }
    /// δ_B.
    pub fn delta(&self) -> f64 {
        self.delta
    }
    /// δ_B as a δ slack (it was checked as one).
    pub fn delta_slack(&self) -> DeltaSlack {
        DeltaSlack::new(self.delta).expect("checked by Budget::new")
    }

    /// Parses `{mu, delta?}` at `path`.
    pub fn from_json(v: &Value, path: &JsonPath) -> Result<Self, InputError> {
        let mut f = Fields::new(v, path)?;
        let (m, p) = f.required("mu")?;
        let mu = budget_mu(m, &p)?;
        let delta = match f.optional("delta") {
            None => DEFAULT_DELTA_SLACK,
            Some((d, p)) => DeltaSlack::new(json::number(d, &p)?)
                .map_err(|r| InputError::new(&p, r))?
                .get(),
        };
        f.finish()?;
        Ok(Budget { mu, delta })
    }
}

/// Reads a μ budget or target: a number in (0, [`MAX_BUDGET_MU`]].
pub(super) fn budget_mu(v: &Value, p: &JsonPath) -> Result<f64, InputError> {
    let mu = json::number(v, p)?;
    if mu > 0.0 && mu <= MAX_BUDGET_MU {
        Ok(mu)
    } else {
        Err(InputError::new(
            p,
            format!("must be a number in (0, {MAX_BUDGET_MU}], got {mu}"),
        ))
    }
}

/// The checked form of a share's or a spending's figures: μ in [0, [`MAX_BUDGET_MU`]], δ in [0, 1).
fn share_figures(mu: f64, delta: f64) -> Result<(f64, f64), String> {
    if !(mu >= 0.0 && mu <= MAX_BUDGET_MU) {
        return Err(format!(
            "mu must be a number in [0, {MAX_BUDGET_MU}], got {mu}"
        ));
    }
    if !(delta >= 0.0 && delta < 1.0) {
        return Err(format!("delta must be a number in [0, 1), got {delta}"));
    }
    Ok((mu, delta))
}

/// A share of a dataset's budget that a unit must fit as well: a principal's quota, or what the
/// quotas leave (the unallocated share, holder [`UNALLOCATED`]). Unlike a [`Budget`] it may be
/// zero (a zero share admits nothing that spends).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuotaShare {
    mu: f64,
    delta: f64,
}

impl QuotaShare {
    /// A share from numbers: μ in [0, [`MAX_BUDGET_MU`]], δ in [0, 1).
    pub fn new(mu: f64, delta: f64) -> Result<Self, String> {
        let (mu, delta) = share_figures(mu, delta)?;
        Ok(QuotaShare { mu, delta })
    }
    /// μ of the share.
    pub fn mu(&self) -> f64 {
        self.mu
    }
    /// δ of the share.
    pub fn delta(&self) -> f64 {
        self.delta
    }
}

/// What a ledger spent, as figures: √Σμᵢ² and Σδᵢ (both rounded up). Budget use, not a guarantee
/// (see [`super::filter`]); as a limit exactly used up, its filter guarantee is
/// G_{μ_spent} ⊗ f_{0,δ_spent}, which the dashboard draws beside the budget's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spent {
    mu: f64,
    delta: f64,
}

impl Spent {
    /// Spending from numbers: μ in [0, [`MAX_BUDGET_MU`]], δ in [0, 1).
    pub fn new(mu: f64, delta: f64) -> Result<Self, String> {
        let (mu, delta) = share_figures(mu, delta)?;
        Ok(Spent { mu, delta })
    }
    /// √Σμᵢ².
    pub fn mu(&self) -> f64 {
        self.mu
    }
    /// Σδᵢ.
    pub fn delta(&self) -> f64 {
        self.delta
    }
}

/// A unit's certificate on the wire (the schema of [`Certificate`], which serialises the same way;
/// the accountant's types carry no schema).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[schema(as = Certificate)]
pub struct CertificateView {
    /// μ of the Gaussian part (an upper bound).
    pub mu: f64,
    /// δᵢ: the probability of the unit's "reveal" part; its trade-off curve is at least
    /// G_μ ⊗ f_{0,δ} in both neighbour orders.
    pub delta: f64,
}
