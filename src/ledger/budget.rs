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

/// A budget given as an (ε, δ) target: the whole interaction on the dataset must be (ε, δ)-DP.
/// Kept beside the μ_B, δ_B it was converted to ([`BudgetTarget::convert`]); a dataset shows it
/// while its budget is still that one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct BudgetTarget {
    /// The target ε and δ.
    pub epsilon: f64,
    pub delta: f64,
    /// δ_B: the part of δ kept for the units' own δᵢ (the filter's sum Σδᵢ ≤ δ_B).
    pub delta_slack: f64,
    /// μ_B: the largest μ (rounded down) whose statement G_{μ_B} ⊗ f_{0,δ_B}, with the gate's
    /// tolerance, is (ε, δ)-DP.
    pub mu: f64,
}

/// Largest ε accepted in an (ε, δ) budget.
pub const MAX_TARGET_EPSILON: f64 = 100.0;

impl BudgetTarget {
    /// The budget whose ledger statement meets (ε, δ), with δ_B = `slack`.
    ///
    /// # Formula
    /// The statement is G_{μ'} ⊗ f_{0,s'} with μ' = μ_B(1 + τ), s' = δ_B(1 + τ) (τ the gate's
    /// tolerance, [`GATE_TOLERANCE`]); its δ(ε) = s' + (1 − s')·δ_{μ'}(ε) ≤ s' + δ_{μ'}(ε), where
    /// δ_μ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth & Su, "Gaussian differential
    /// privacy", Corollary 1; the tensor product with f_{0,s} is their §3). So μ' = max{μ :
    /// δ_μ(ε) ≤ δ − s'} (Gomez, Kulynych et al., "(ε,δ) considered harmful", the μ that replaces an
    /// (ε, δ) target), and μ_B = μ'/(1 + τ).
    ///
    /// # Soundness
    /// δ − s' is rounded down, the root is the bisection's lower end on an upper bound of δ_μ
    /// ([`gdp::for_epsilon_delta_target`]), the division by 1 + τ rounded down; then the statement
    /// is checked again at the μ' and s' the gate will use (δ_{μ'}(ε) rounded up) and μ_B lowered
    /// by a few ulps until it holds, so a budget returned always meets the target.
    pub fn convert(epsilon: f64, delta: f64, slack: f64) -> Result<(Budget, BudgetTarget), String> {
        use crate::accountant::{gdp, rounding};
        let widen = |x: f64| x * (1.0 + GATE_TOLERANCE);
        let s_limit = rounding::up(widen(slack), 2.0 * f64::EPSILON);
        let room = rounding::sub_down(delta, s_limit);
        if room <= 0.0 {
            return Err(format!(
                "delta_slack {slack:e} leaves nothing of delta {delta:e} for the Gaussian part"
            ));
        }
        let root = gdp::for_epsilon_delta_target(epsilon, room);
        let mut mu = rounding::down(
            rounding::div_down(root, 1.0 + GATE_TOLERANCE),
            2.0 * f64::EPSILON,
        );
        let meets = |mu: f64| {
            let limit = widen(mu);
            rounding::add_up(gdp::delta_for_epsilon(limit, epsilon), s_limit) <= delta
        };
        let mut tries = 0;
        while mu > 0.0 && !meets(mu) {
            if tries == 8 {
                return Err(format!(
                    "no budget found that meets epsilon {epsilon}, delta {delta:e}"
                ));
            }
            mu = rounding::down(mu, 4.0 * f64::EPSILON);
            tries += 1;
        }
        if mu.is_nan() || mu <= 0.0 {
            return Err(format!(
                "no positive mu meets epsilon {epsilon}, delta {delta:e} with delta_slack {slack:e}"
            ));
        }
        if mu > MAX_BUDGET_MU {
            return Err(format!(
                "epsilon {epsilon}, delta {delta:e} converts to mu {mu}, above the largest budget \
                 ({MAX_BUDGET_MU})"
            ));
        }
        let budget = Budget::new(mu, slack)?;
        Ok((
            budget,
            BudgetTarget {
                epsilon,
                delta,
                delta_slack: budget.delta(),
                mu: budget.mu(),
            },
        ))
    }
}

/// A budget as a request gives it: `{mu, delta?}`, or `{epsilon, delta, delta_slack?}` (an
/// (ε, δ) target, converted by [`BudgetTarget::convert`]; `delta_slack` defaults to the smaller of
/// [`DEFAULT_DELTA_SLACK`] and δ/100).
pub fn given_from_json(
    v: &Value,
    path: &JsonPath,
) -> Result<(Budget, Option<BudgetTarget>), InputError> {
    let is_target = v.as_object().is_some_and(|o| o.contains_key("epsilon"));
    if !is_target {
        return Ok((Budget::from_json(v, path)?, None));
    }
    let mut f = Fields::new(v, path)?;
    if let Some((_, p)) = f.optional("mu") {
        return Err(InputError::new(
            &p,
            "give the budget as mu (with an optional delta) or as epsilon and delta, not both",
        ));
    }
    let (e, p) = f.required("epsilon")?;
    let epsilon = json::number(e, &p)?;
    if !(0.0..=MAX_TARGET_EPSILON).contains(&epsilon) {
        return Err(InputError::new(
            &p,
            format!("must be a number in [0, {MAX_TARGET_EPSILON}], got {epsilon}"),
        ));
    }
    let (d, dp) = f.required("delta")?;
    let delta = json::number(d, &dp)?;
    if !(delta > 0.0 && delta < 1.0) {
        return Err(InputError::new(
            &dp,
            format!("must be a number in (0, 1) with epsilon, got {delta}"),
        ));
    }
    let slack = match f.optional("delta_slack") {
        None => DEFAULT_DELTA_SLACK.min(delta / 100.0),
        Some((x, p)) => {
            let s = DeltaSlack::new(json::number(x, &p)?)
                .map_err(|r| InputError::new(&p, r))?
                .get();
            if s >= delta {
                return Err(InputError::new(
                    &p,
                    format!("must be below delta ({delta:e}), got {s:e}"),
                ));
            }
            s
        }
    };
    f.finish()?;
    let (b, t) =
        BudgetTarget::convert(epsilon, delta, slack).map_err(|r| InputError::new(path, r))?;
    Ok((b, Some(t)))
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
