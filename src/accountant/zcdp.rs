//! ρ-zCDP guarantees and points of a Rényi-DP curve as privacy profiles.
//!
//! A mechanism is ρ-zCDP (Bun & Steinke, "Concentrated Differential Privacy: Simplifications,
//! Extensions, and Lower Bounds", TCC 2016, Def. 1.1) when the Rényi divergence of order α between
//! its outputs on neighbouring datasets is at most ρ·α for every α > 1. Each order then bounds the
//! privacy profile: for ε ≥ 0,
//! ```text
//! δ(ε) = H_{e^ε}(P‖Q) ≤ exp((α−1)(αρ − ε)) · (1 − 1/α)^{α−1} / α          (every α > 1)
//! ```
//! (Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020,
//! Prop. 12 with Rényi divergence ρα — written there as (1 − 1/α)^α/(α − 1), the same number; Balle
//! et al., "Hypothesis Testing Interpretations and Rényi Differential Privacy", AISTATS 2020,
//! Thm. 21, solved for δ). [`delta_for_epsilon`] takes the infimum over α numerically. Because every
//! α gives a valid bound, the search's precision only affects tightness, never soundness: the value
//! returned is the bound *at the α found*, evaluated with an explicit round-off margin and rounded
//! up. It is not the optimal conversion of a whole Rényi curve (the infimum of single-order bounds
//! is not jointly tight), but it is sound for a black box whose only known property is ρ-zCDP.

use super::rounding::{self, U};

/// The absolute round-off of ln of a single-order bound, per unit of the magnitudes of its terms:
/// 16U. Each term is formed with a few roundings (products, a difference) and at most one libm call
/// (ln_1p or ln, measured ≤ 1.1U: see [`rounding::LIBM_REL`]); 16U of the magnitudes is an
/// allowance over that count, not a term-by-term bound.
const LN_BOUND_ABS_REL: f64 = 16.0 * U;

/// ln of the bound at order α = 1 + t (t > 0), and an upper bound on its absolute round-off:
/// ln δ = t((1 + t)ρ − ε) + t·ln(t/(1 + t)) − ln(1 + t).
fn ln_bound(rho: f64, eps: f64, t: f64) -> (f64, f64) {
    let a = t * ((1.0 + t) * rho - eps);
    let b = t * (-1.0 / (1.0 + t)).ln_1p();
    let c = -t.ln_1p();
    // Each term is formed with a few roundings (products, a difference, ln_1p within libm's
    // accuracy); 16U of the magnitudes involved bounds their sum's error.
    let err =
        LN_BOUND_ABS_REL * (t * ((1.0 + t) * rho + eps) + b.abs() + c.abs()) + f64::MIN_POSITIVE;
    (a + b + c, err)
}

/// An upper bound on the privacy profile δ(ε) of a ρ-zCDP mechanism at ε ≥ 0 (either ordering of
/// its neighbouring pair): the bound of the module docs at the order α that a golden-section search
/// finds (ln δ is convex in α − 1, so unimodal in ln(α − 1)), rounded up, at most 1.
pub fn delta_for_epsilon(rho: f64, eps: f64) -> f64 {
    debug_assert!(rho > 0.0 && eps >= 0.0);
    if !(rho.is_finite() && eps.is_finite()) {
        return 1.0;
    }
    // The quadratic part alone is least at α − 1 = (ε − ρ)/(2ρ); search ln(α − 1) around it.
    let guess = ((eps - rho) / (2.0 * rho)).max(1e-6);
    let (mut lo, mut hi) = ((guess * 1e-8).max(1e-300).ln(), (guess * 1e4 + 10.0).ln());
    let f = |s: f64| ln_bound(rho, eps, s.exp()).0;
    let g = 0.5 * (5f64.sqrt() - 1.0);
    let (mut x1, mut x2) = (hi - g * (hi - lo), lo + g * (hi - lo));
    let (mut f1, mut f2) = (f(x1), f(x2));
    for _ in 0..100 {
        if f1 <= f2 {
            hi = x2;
            (x2, f2) = (x1, f1);
            x1 = hi - g * (hi - lo);
            f1 = f(x1);
        } else {
            lo = x1;
            (x1, f1) = (x2, f2);
            x2 = lo + g * (hi - lo);
            f2 = f(x2);
        }
    }
    let t = (if f1 <= f2 { x1 } else { x2 }).exp();
    let (ln_d, err) = ln_bound(rho, eps, t);
    if !ln_d.is_finite() {
        return 1.0;
    }
    rounding::exp_up(ln_d + err).min(1.0)
}

/// Points (αᵢ, τᵢ) of a Rényi-DP curve: Dα(M(D)‖M(D′)) ≤ τᵢ at order αᵢ for neighbours both ways
/// (Mironov, "Rényi Differential Privacy", CSF 2017, Def. 4). Each point bounds the profile by the
/// bound of the module docs with ρα replaced by τ:
/// ```text
/// ln δ(ε) ≤ (α − 1)(τ − ε) + (α − 1)·ln(1 − 1/α) − ln α
/// ```
/// (Canonne, Kamath & Steinke 2020, Prop. 12; the same conversion dp_accounting's
/// `RdpAccountant` inverts for ε). Each is a line in ε, prepared once.
#[derive(Debug, Clone)]
pub struct RdpCurve {
    /// Per point: (α − 1, its intercept c = (α − 1)τ + (α − 1)ln(1 − 1/α) − ln α, an upper bound on
    /// the intercept's round-off, τ).
    lines: Vec<(f64, f64, f64, f64)>,
}

impl RdpCurve {
    /// The curve of the points (αᵢ, τᵢ) (orders > 1, τ ≥ 0 finite; checked by the event parser).
    pub fn new(orders: &[f64], rdp: &[f64]) -> Self {
        let lines = orders
            .iter()
            .zip(rdp)
            .map(|(&a, &tau)| {
                let t = a - 1.0;
                let l1 = (-1.0 / a).ln_1p();
                let la = a.ln();
                let c = t * tau + t * l1 - la;
                // t = α − 1 is exact for α ≤ 2 (Sterbenz) and within U beyond; products, ln and
                // ln_1p add a few U of the magnitudes: 16U of their sum covers it.
                let err = LN_BOUND_ABS_REL * (t * tau + (t * l1).abs() + la + c.abs())
                    + f64::MIN_POSITIVE;
                (t, c, err, tau)
            })
            .collect();
        RdpCurve { lines }
    }

    /// An upper bound on the privacy profile δ(ε) at ε ≥ 0: the smallest of the points' bounds,
    /// each with its round-off added (and t·ε's, 4U of the magnitudes), rounded up, at most 1.
    pub fn delta_for_epsilon(&self, eps: f64) -> f64 {
        if !eps.is_finite() {
            return 1.0;
        }
        let mut best = f64::INFINITY;
        for &(t, c, err, tau) in &self.lines {
            // t = α − 1 carries relative error U for α > 2: t·(τ − ε) may be off by U·t·(τ + ε).
            let te = t * eps;
            let ln_d = c - te + err + rounding::ARITH4_REL * (c.abs() + te + t * tau);
            best = best.min(ln_d);
        }
        if best.is_nan() {
            return 1.0;
        }
        rounding::exp_up(best).min(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The classical, looser conversion: ρ-zCDP ⇒ (ρ + 2√(ρ ln(1/δ)), δ)-DP (Bun & Steinke 2016,
    /// Prop. 1.3). Ours is the infimum over α of bounds that include it (at α = 1 + (ε − ρ)/(2ρ)
    /// the bound is below exp(−(ε − ρ)²/(4ρ))), so it is never larger.
    #[test]
    fn tighter_than_the_classical_conversion() {
        for rho in [0.01, 0.1, 0.5, 1.0, 3.65, 20.0] {
            for delta in [1e-3f64, 1e-6, 1e-10] {
                let eps = rho + 2.0 * (rho * (1.0 / delta).ln()).sqrt();
                let d = delta_for_epsilon(rho, eps);
                assert!(d <= delta, "ρ={rho} ε={eps}: {d} > {delta}");
            }
        }
    }

    /// Never below the Gaussian mechanism's own profile: N(0, σ²) vs N(1, σ²) is exactly
    /// 1/(2σ²)-zCDP, and its profile is δ_G(ε) of μ = 1/σ.
    #[test]
    fn never_below_the_gaussian_that_attains_it() {
        for sigma in [0.3, 1.0, 2.5, 10.0] {
            let (rho, mu) = (0.5 / (sigma * sigma), 1.0 / sigma);
            for eps in [0.0, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0] {
                let ours = delta_for_epsilon(rho, eps);
                let gauss = crate::accountant::gdp::delta_for_epsilon(mu, eps);
                assert!(ours >= gauss, "σ={sigma} ε={eps}: {ours} < {gauss}");
            }
        }
    }

    /// The search finds the infimum: a coarse scan of α, refined around its best point, gives
    /// nothing smaller (the refined minimum is within round-off of the infimum, and ours is the
    /// bound at one α, so never below it).
    #[test]
    fn the_search_finds_the_infimum() {
        let at = |rho: f64, eps: f64, s: f64| ln_bound(rho, eps, 10f64.powf(s)).0.exp();
        for rho in [0.05, 1.0, 3.65] {
            for eps in [0.5, 3.0, 12.0] {
                let ours = delta_for_epsilon(rho, eps);
                let step = 10.0 / 20_000.0;
                let best = (0..20_000)
                    .map(|i| -6.0 + step * i as f64)
                    .min_by(|a, b| at(rho, eps, *a).total_cmp(&at(rho, eps, *b)))
                    .unwrap();
                let fine = (0..=20_000)
                    .map(|i| at(rho, eps, best - step + 2.0 * step * i as f64 / 20_000.0))
                    .fold(1.0, f64::min);
                assert!(
                    ours >= fine * (1.0 - 1e-9),
                    "ρ={rho} ε={eps}: {ours} vs {fine}"
                );
                assert!(
                    ours <= fine * (1.0 + 1e-9),
                    "ρ={rho} ε={eps}: {ours} vs {fine}"
                );
            }
        }
    }

    /// A finite list of orders can only be looser than the whole zCDP curve (the infimum over all
    /// α), and at each order it is exactly the zCDP bound at that α: check both against
    /// [`delta_for_epsilon`] and a direct evaluation.
    #[test]
    fn rdp_points_of_a_zcdp_curve_bound_like_zcdp() {
        let rho = 0.5;
        let orders = [1.5, 2.0, 3.0, 4.0, 8.0, 16.0, 32.0, 64.0];
        let rdp: Vec<f64> = orders.iter().map(|a| a * rho).collect();
        let c = RdpCurve::new(&orders, &rdp);
        for eps in [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 20.0] {
            let d = c.delta_for_epsilon(eps);
            assert!(d >= delta_for_epsilon(rho, eps) * (1.0 - 1e-12), "ε={eps}");
            let direct = orders
                .iter()
                .map(|&a| ln_bound(rho, eps, a - 1.0).0.exp())
                .fold(1.0, f64::min);
            assert!(
                d >= direct && d <= direct * (1.0 + 1e-12),
                "ε={eps}: {d} vs {direct}"
            );
        }
    }
}
