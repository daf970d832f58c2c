//! What a composed guarantee answers: the trait every engine implements (closed forms, the
//! numerical engine, a filter's budget), and the μ-GDP summary it returns.

use super::analytic::GdpComposition;
use super::clt::CltSums;
use super::gdp;
use super::rounding::U;
use serde::Serialize;

/// How the figures were computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Closed forms (μ-GDP composition): exact up to floating-point rounding.
    Analytic,
    /// Privacy-loss distributions composed numerically.
    Pld,
}

/// A composed privacy guarantee the report can query. Every method returns a bracket
/// `(lower, upper)` around the exact value; `upper` (or `lower` for β) is the sound end.
pub trait Guarantee: Sync {
    /// The computation method.
    fn method(&self) -> Method;
    /// ε(δ) bracket (+∞ allowed).
    fn epsilon_bounds(&self, delta: f64) -> (f64, f64);
    /// δ(ε) bracket.
    fn delta_bounds(&self, eps: f64) -> (f64, f64);
    /// β = f(α) bracket of the (symmetrised) trade-off curve.
    fn beta_bounds(&self, alpha: f64) -> (f64, f64);
    /// μ fit for a δ slack.
    fn mu(&self, delta_slack: f64) -> MuReport;
    /// [`Guarantee::mu`] without the regret (`regret: None`): both ends of the μ bracket, for
    /// callers that ask at many slacks (the certificate curve).
    fn mu_bracket(&self, delta_slack: f64) -> MuReport {
        MuReport {
            regret: None,
            ..self.mu(delta_slack)
        }
    }
    /// The upper end of [`Guarantee::mu`] alone (`None` when no finite μ holds): what the gate
    /// and the exact composition's μ need, without the lower bound's search.
    fn mu_upper(&self, delta_slack: f64) -> Option<f64> {
        self.mu(delta_slack).upper
    }
    /// Probability mass at +∞ privacy loss (0 when none).
    fn infinity_mass(&self) -> f64;
    /// The CLT sums, when every component has functionals.
    fn clt_sums(&self) -> Option<CltSums>;
    /// Upper bound on the TPR of an attack at this FPR: 1 − f(FPR), rounded up (1 − β is exact
    /// for β ≥ ½ and within an ulp below).
    fn tpr(&self, fpr: f64) -> f64 {
        super::rounding::prob_up(1.0 - self.beta_bounds(fpr).0, U)
    }
    /// [`Guarantee::beta_bounds`] and [`Guarantee::tpr`] at one α (a trade-off row reads both;
    /// an implementation may share their work).
    fn beta_and_tpr(&self, alpha: f64) -> ((f64, f64), f64) {
        (self.beta_bounds(alpha), self.tpr(alpha))
    }
    /// (μ, δ) when the guarantee is exactly G_μ ⊗ f_{0,δ} (the filter's), for its group figures
    /// ([`super::gdp::group_delta`]); `None` otherwise.
    fn gdp_with_delta(&self) -> Option<(f64, f64)> {
        None
    }
    /// The α maximising 1 − α − f(α) (where the best advantage is attained).
    fn alpha_star(&self) -> f64 {
        (1.0 - self.delta_bounds(0.0).1) / 2.0
    }
}

/// μ-GDP summary: the smallest μ with f ≥ G_μ ⊗ f_{0,δ_slack}.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MuReport {
    /// Upper bound on the tight μ (sound); null when no finite μ holds within the δ slack.
    pub upper: Option<f64>,
    /// Lower bound on the tight μ.
    pub lower: Option<f64>,
    /// The δ slack the fit may spend on +∞ mass and discretisation.
    pub delta_slack: f64,
    /// Regret Δ of the fit (Gomez et al., "(ε,δ) considered harmful" eq. (13)): how far G_μ is below the curve (0 = exact).
    pub regret: Option<f64>,
    /// Why μ is null, if it is.
    pub reason: Option<String>,
}

/// The exact guarantee of a μ-GDP composition: every figure is a closed form of μ = √Σμᵢ²
/// (Dong, Roth & Su, "Gaussian differential privacy", Cor. 1–2).
///
/// # Soundness
/// The composition holds √Σμᵢ² as a bracket [μ⁻, μ⁺] ([`GdpComposition::mu_bounds`], equal ends
/// whenever the sum is exact). Every figure that grows with μ (ε, δ, TPR, advantage, μ itself) takes
/// its upper end at μ⁺ and its lower end at μ⁻; β = G_μ(α), which shrinks with μ, the other way.
impl Guarantee for GdpComposition {
    fn method(&self) -> Method {
        Method::Analytic
    }
    fn epsilon_bounds(&self, delta: f64) -> (f64, f64) {
        let (lo, hi) = self.mu_bounds();
        if lo == hi {
            return gdp::epsilon_bounds(hi, delta);
        }
        (
            gdp::epsilon_bounds(lo, delta).0,
            gdp::epsilon_bounds(hi, delta).1,
        )
    }
    fn delta_bounds(&self, eps: f64) -> (f64, f64) {
        let (lo, hi) = self.mu_bounds();
        (gdp::delta_bounds(lo, eps).0, gdp::delta_bounds(hi, eps).1)
    }
    fn beta_bounds(&self, alpha: f64) -> (f64, f64) {
        let (lo, hi) = self.mu_bounds();
        (gdp::tradeoff(hi, alpha), gdp::tradeoff_upper(lo, alpha))
    }
    /// `upper` is μ⁺ itself: G_μ ⊗ f_{0,s} ≤ G_μ, so μ is sound at any slack, and exact at s = 0.
    /// `lower` is a certified lower bound on the tight μ_s = sup_α [isf(α/(1−s)) + isf(G_μ(α)/(1−s))]
    /// ([`gdp::slack_mu_lower`] at μ⁻; μ⁻ itself at s = 0), the quantity the numerical engine brackets
    /// for a privacy-loss distribution. The regret of G_μ⁺ against the curve G_μ is 0 (the fit is
    /// the curve itself). μ⁺ = +∞ (√Σμᵢ² beyond f64::MAX) has no finite figure: null, with the reason.
    /// μ⁺ whatever the slack, as in [`Guarantee::mu`] (its lower end is what the slack lowers).
    fn mu_upper(&self, _delta_slack: f64) -> Option<f64> {
        Some(self.mu_bounds().1).filter(|m| m.is_finite())
    }
    fn mu(&self, delta_slack: f64) -> MuReport {
        let (lo, hi) = self.mu_bounds();
        if !hi.is_finite() {
            return MuReport {
                upper: None,
                lower: None,
                delta_slack,
                regret: None,
                reason: Some(
                    "mu of the composition, sqrt(sum of mu_i^2), exceeds the largest double \
                     (1.8e308): no finite mu-GDP guarantee can be stated"
                        .into(),
                ),
            };
        }
        let lower = if delta_slack > 0.0 {
            gdp::slack_mu_lower(lo, delta_slack)
        } else {
            lo
        };
        MuReport {
            upper: Some(hi),
            lower: Some(lower.min(hi)),
            delta_slack,
            regret: Some(0.0),
            reason: None,
        }
    }
    fn infinity_mass(&self) -> f64 {
        0.0
    }
    fn clt_sums(&self) -> Option<CltSums> {
        self.clt_available().then(|| *self.clt())
    }
    fn tpr(&self, fpr: f64) -> f64 {
        gdp::tpr(self.mu_bounds().1, fpr)
    }
    fn alpha_star(&self) -> f64 {
        gdp::fixed_point(self.mu_bounds().1)
    }
}
