//! η-TV: total variation as a second privacy parameter (Ghazi & Issa, "Total Variation Meets
//! Differential Privacy"; Ghazi & Issa).
//!
//! A mechanism is η-TV if the total variation between its outputs on neighbouring datasets is at most
//! η; equivalently (0, η)-DP, and η is the largest membership-inference advantage. Knowing η on top of
//! (ε, δ) shrinks the composed privacy region: Ghazi & Issa give the exact k-fold composition of
//! (ε, δ)-DP, η-TV mechanisms (Thm. 2), which this module evaluates in log space.

use super::epsilon_delta::Neumaier;
use super::rounding::{self, U};

/// The absolute error of a term's logarithm in [`TvComposition::delta_for_epsilon`], per unit of
/// the logarithms' magnitudes (2·ln k! for the two ln-binomials, the largest |log weight| + |loss|,
/// and 4 for the rest), which exp turns into a relative error of the term: 8U. ln_binomial and the
/// sums and products of logs carry a few roundings each; 8U is an allowance over them, not a count.
const LOG_TERM_ABS_REL: f64 = 8.0 * U;

/// The widening of [`eta_max`]: 12U = [`rounding::LIBM_REL`] for tanh plus
/// [`rounding::ARITH4_REL`] for three roundings.
///
/// v = fl(δ + fl(fl(1 − δ)·tanh(ε/2))) (ε/2 exact: a power-of-two scaling). Both terms are
/// non-negative, so the sum's condition is 1 and (Higham Lemma 3.1, γ₃ for 1 − δ, the product and
/// the sum) |v − η_max| ≤ (ε_tanh + γ₃)·η_max to first order, ε_tanh tanh's relative error:
/// 2.0U measured, ≤ 2 ulp = 4U as glibc documents it ([`rounding::LIBM_REL`]). So 5U with the
/// measured tanh, 7U with the documented one: the 4U ([`rounding::LIBM_SHORT_REL`]) used before
/// was too small against either (the one-ulp step of `up` added ≥ U only). 12U covers the
/// documented bound with a 5U margin (γ₃ − 3U < 10U² is far inside it).
pub const ETA_MAX_REL: f64 = rounding::LIBM_REL + rounding::ARITH4_REL;

/// The largest meaningful η for an (ε, δ)-DP mechanism: η_max = δ + (1 − δ)(e^ε − 1)/(e^ε + 1)
/// (Ghazi & Issa Remark 1). Every (ε, δ)-DP mechanism is η_max-TV. Rounded up by [`ETA_MAX_REL`].
pub fn eta_max(eps: f64, delta: f64) -> f64 {
    rounding::prob_up(delta + (1.0 - delta) * (eps / 2.0).tanh(), ETA_MAX_REL)
}

/// Total variation of the Laplace mechanism with ε = sensitivity/scale: 1 − e^{−ε/2}
/// (Ghazi & Issa §VI-A). Rounded up.
pub fn laplace(eps: f64) -> f64 {
    rounding::prob_up(-(-eps / 2.0).exp_m1(), rounding::LIBM_SHORT_REL)
}

/// Total variation of μ-GDP (the Gaussian mechanism): 2Φ(μ/2) − 1 (Ghazi & Issa §VI-B). Rounded up.
pub fn gaussian(mu: f64) -> f64 {
    super::gdp::advantage(mu)
}

/// Total variation of k-ary randomized response that keeps the true value with probability
/// e^ε/(e^ε + k − 1): (e^ε − 1)/(e^ε + k − 1) (Gomez et al.; Ghazi & Issa, derived). Rounded up.
pub fn randomized_response(eps: f64, k: u64) -> f64 {
    let v = eps.exp_m1() / (eps.exp_m1() + k as f64);
    rounding::prob_up(v, rounding::LIBM_CHAIN_REL) // two expm1 (of one value), a sum and a quotient
}

/// Total variation of discrete Laplace noise P[x] ∝ e^{−a|x|} on an integer query of sensitivity Δ:
/// the P-mass of the Δ integers closer to 0 than to Δ, which for Δ = 1 is tanh(a/2) (Ghazi & Issa).
pub fn discrete_laplace(a: f64, sensitivity: u64) -> f64 {
    // pmf(x) = tanh(a/2)·e^{−a|x|}. TV = Σₓ (p(x) − p(x−Δ))₊ = P(−Δ/2 ≤ X < Δ/2): the Δ integers
    // x ∈ [−⌊Δ/2⌋, ⌈Δ/2⌉ − 1].
    let d = sensitivity as i64;
    let c = (a / 2.0).tanh();
    let mut s = Neumaier::default();
    for x in -(d / 2)..=((d + 1) / 2 - 1) {
        s.add(c * (-a * (x.abs() as f64)).exp());
    }
    // Adequate as it stands. Each term c·e^{−a|x|}: tanh (2.0U measured, 4U documented), exp
    // (1.1U, ≤ 2U), the product (U), and exp's argument a·|x| rounded (U·a|x| absolute, which exp
    // makes relative). The x = 0 term has no argument error and is the largest, so the arguments
    // add at most U·Σ_{x≠0} a|x|e^{−a|x|} ≤ U·(Δ − 1)/e relative to the sum; the Neumaier sum of Δ
    // positive terms adds ≲ U(1 + Δ²U). First order: ≤ 8U + 0.37U·Δ (documented libm), under the
    // (8 + Δ)U used.
    rounding::prob_up(s.value(), (8.0 + d as f64) * U)
}

/// Total variation of discrete Gaussian noise P[x] ∝ e^{−x²/(2σ²)} on an integer query of sensitivity
/// Δ: the mass of the Δ integers closer to 0 than to Δ (for Δ = 1: 1/Σₖ e^{−k²/(2σ²)}; Ghazi & Issa).
pub fn discrete_gaussian(sigma: f64, sensitivity: u64) -> f64 {
    let d = sensitivity as i64;
    let w = |x: i64| (-((x * x) as f64) / (2.0 * sigma * sigma)).exp();
    // Same Δ integers as for discrete Laplace. Normaliser: the terms beyond |k| = 40σ + 1 are below e^{−800} relative and are bounded by the
    // widening below; the sum is taken from the tails inward for accuracy.
    let kmax = (40.0 * sigma).ceil() as i64 + 1;
    let mut z = Neumaier::default();
    for k in (1..=kmax).rev() {
        z.add(2.0 * w(k));
    }
    z.add(1.0);
    let mut s = Neumaier::default();
    for x in -(d / 2)..=((d + 1) / 2 - 1) {
        s.add(w(x));
    }
    rounding::prob_up(s.value() / z.value(), (16.0 + d as f64) * U)
}

/// Poisson/uniform subsampling of an (ε, δ)-DP, η-TV mechanism at rate p: it becomes
/// (ln(1 + p(e^ε − 1)), pδ)-DP and pη-TV (Ghazi & Issa Prop. 1; tight).
pub fn subsample(eps: f64, delta: f64, eta: f64, p: f64) -> (f64, f64, f64) {
    // expm1 and the product (≈ 2.1U), through ln_1p (condition ≤ 1) and its own ≈ 1.1U.
    let e = rounding::up((p * eps.exp_m1()).ln_1p(), rounding::LIBM_SHORT_REL);
    (
        e,
        rounding::prob_up(p * delta, U),
        rounding::prob_up(p * eta, U),
    )
}

/// The exact k-fold composition of (ε, δ)-DP, η-TV mechanisms (Ghazi & Issa Thm. 2).
#[derive(Debug, Clone, PartialEq)]
pub struct TvComposition {
    eps: f64,
    delta: f64,
    /// Erasure weight α = 1 − (η − δ)(1 + e^ε)/((1 − δ)(e^ε − 1)) ∈ [0, 1].
    erasure: f64,
    k: u64,
}

impl TvComposition {
    /// k mechanisms each (ε, δ)-DP and η-TV.
    ///
    /// Parameter hygiene (Gomez et al.; Ghazi & Issa): η < δ means the mechanism is (ε', η)-DP for every ε', so δ
    /// is replaced by η; η above η_max(ε, δ) carries no information and is clamped to it; ε = 0 makes
    /// the mechanism (0, min(δ, η))-DP.
    pub fn new(eps: f64, delta: f64, eta: f64, k: u64) -> Self {
        let delta = delta.min(eta);
        let eta = eta.min(eta_max(eps, delta));
        let erasure = if eps == 0.0 {
            1.0
        } else {
            (1.0 - (eta - delta) / ((1.0 - delta) * (eps / 2.0).tanh())).clamp(0.0, 1.0)
        };
        TvComposition {
            eps,
            delta,
            erasure,
            k,
        }
    }

    /// The erasure weight α of the dominating mechanism (α = 0: no TV information; α = 1: η = δ).
    pub fn erasure(&self) -> f64 {
        self.erasure
    }

    /// δ(ε') of the composition, for any ε' ≥ 0.
    ///
    /// # Formula
    /// With a erasures, ℓ "−ε" outcomes and k − a − ℓ "+ε" outcomes, the loss is (k − a − 2ℓ)ε and
    /// ```text
    /// δ_pure(ε') = Σ_{a,ℓ} C(k,a) C(k−a,ℓ) α^a ((1−α)/(1+e^ε))^{k−a} (e^{(k−ℓ−a)ε} − e^{ε'+ℓε})₊
    /// δ(ε')      = 1 − (1 − δ)^k (1 − δ_pure(ε'))                   Ghazi & Issa Thm. 2 / eq. (5)
    /// ```
    /// At ε' = jε this is the theorem's δ_j; at ε' = 0 it is the composition's total variation.
    ///
    /// # Soundness
    /// Each term is formed as exp(log-weight)·(−expm1(ε' − loss)) with log-binomials from ln n!;
    /// the sum is compensated and the result is widened by the accumulated relative error bound.
    /// Terms that underflow are each below the smallest normal double and their count is added.
    pub fn delta_for_epsilon(&self, eps_prime: f64) -> f64 {
        let (k, eps, al) = (self.k, self.eps, self.erasure);
        let ln_side = (1.0 - al).ln() - eps.exp().ln_1p(); // ln((1−α)/(1+e^ε))
        let ln_al = al.ln();
        let mut s = Neumaier::default();
        let mut underflow = 0.0_f64;
        let mut max_log = 0.0_f64;
        for a in 0..=k {
            if a > 0 && al == 0.0 {
                break;
            }
            if a < k && al == 1.0 {
                continue;
            }
            let lca = statrs::function::factorial::ln_binomial(k, a);
            let base = lca
                + if a > 0 { a as f64 * ln_al } else { 0.0 }
                + if a < k { (k - a) as f64 * ln_side } else { 0.0 };
            for l in 0..=(k - a) {
                let loss = (k as f64 - a as f64 - 2.0 * l as f64) * eps;
                if loss <= eps_prime {
                    break;
                }
                let lw = base
                    + statrs::function::factorial::ln_binomial(k - a, l)
                    + (k - l - a) as f64 * eps;
                max_log = max_log.max(lw.abs() + loss.abs());
                let t = lw.exp() * (-(eps_prime - loss).exp_m1());
                if t < f64::MIN_POSITIVE {
                    underflow += 1.0;
                }
                s.add(t);
            }
        }
        let lnf = statrs::function::factorial::ln_factorial(k);
        let rel = LOG_TERM_ABS_REL * (2.0 * lnf + max_log + 4.0);
        let pure = rounding::prob_up(s.value() + underflow * f64::MIN_POSITIVE, rel);
        // 1 − (1−δ)^k (1 − pure), formed without cancellation.
        // = −expm1(k·ln(1−δ) + ln(1 − pure)): 1 − keep + keep·pure cancels when δ and pure are tiny.
        let v = -((-self.delta).ln_1p() * k as f64 + (-pure).ln_1p()).exp_m1();
        // Adequate as it stands (v increases with `pure`, an upper bound). S = k·A + B with
        // A = ln1p(−δ), B = ln1p(−pure), both ≤ 0: absolute error ≤ (ε_ln + U)·k|A| + ε_ln·|B| +
        // U·|S| ≤ (ε_ln + 2U)·|S| (no cancellation: same signs), ε_ln = ln1p's relative error
        // (1.1U measured, 2U documented). −expm1(S) turns an absolute error ΔS into a relative one
        // ΔS·e^S/(1 − e^S) ≤ ΔS/|S|, and adds its own (≤ 2U): ≤ 6U to first order, under the
        // (k + 8)U ≥ 9U used.
        rounding::prob_up(v, (k as f64 + 8.0) * U)
    }

    /// The total variation (largest advantage) of the composition: δ(0).
    pub fn total_variation(&self) -> f64 {
        self.delta_for_epsilon(0.0)
    }

    /// The smallest ε' ≥ 0 with δ(ε') ≤ δ; +∞ when δ < 1 − (1 − δ₀)^k.
    ///
    /// # Soundness
    /// Bisection on the widened δ(ε'), returning the upper end (never below the exact root).
    pub fn epsilon_for_delta(&self, delta: f64) -> f64 {
        let top = self.k as f64 * self.eps;
        if self.delta_for_epsilon(top) > delta {
            return f64::INFINITY;
        }
        if self.delta_for_epsilon(0.0) <= delta {
            return 0.0;
        }
        super::gdp::bisect_up(0.0, top, |e| self.delta_for_epsilon(e) <= delta)
    }
}

/// The asymptotic GDP parameter of many (εᵢ-DP, ηᵢ-TV) mechanisms: μ ≈ √(2 Σ εᵢηᵢ) (Ghazi & Issa Thm. 3,
/// a CLT: approximate, never used to admit a charge).
pub fn clt_mu(terms: impl IntoIterator<Item = (f64, f64, u64)>) -> f64 {
    let s: f64 = terms.into_iter().map(|(e, n, c)| e * n * c as f64).sum();
    (2.0 * s).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figure_4_composition_matches_the_paper() {
        // Ghazi & Issa Fig. 4: ε = 1, δ = 0, η = 0.7·tanh(1/2) (α = 0.3), k = 5; δ at ε' = jε.
        let eta = 0.7 * (0.5f64).tanh();
        let c = TvComposition::new(1.0, 0.0, eta, 5);
        assert!((c.erasure() - 0.3).abs() < 1e-14);
        let want = [0.631090, 0.432693, 0.239345, 0.095373, 0.022185, 0.0];
        for (j, w) in want.iter().enumerate() {
            let d = c.delta_for_epsilon(j as f64);
            assert!((d - w).abs() < 5e-7, "j = {j}: {d} vs {w}");
        }
    }

    #[test]
    fn closed_form_total_variations() {
        assert!((laplace(1.0) - 0.393469).abs() < 1e-6);
        assert!((randomized_response(1.0, 4) - 0.300489).abs() < 1e-6);
        assert!((discrete_laplace(1.0, 1) - 0.462117).abs() < 1e-6);
        assert!((discrete_gaussian(1.0, 1) - 0.398942).abs() < 1e-6);
        assert!((discrete_gaussian(3.0, 1) - 0.132981).abs() < 1e-6);
    }
}
