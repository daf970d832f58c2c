//! μ-Gaussian differential privacy in closed form.
//!
//! μ-GDP (Dong, Roth & Su 2022, "Gaussian differential privacy", JRSS-B 84(1), arXiv:1905.02383; below
//! DRS22) means the trade-off curve between neighbouring outputs is at least
//! G_μ(α) = Φ(Φ⁻¹(1−α) − μ), the curve of testing N(0,1) against N(μ,1). Everything a ledger of
//! Gaussian mechanisms needs follows in closed form: composition adds μ² (DRS22 Cor. 2), the privacy
//! profile δ(ε) is DRS22 Cor. 1, attack risk is a function of μ.
//!
//! # Soundness
//! Each function returns a value widened by a bound on its own floating-point error, toward more
//! privacy loss (see [`super::rounding`]): δ, ε, μ and TPR are never below the exact value, β never
//! above. The bounds are first-order error propagations stated next to each formula; the accuracy
//! tests check them against 60-digit mpmath values.

use super::normal;
use super::rounding::{self, U};

/// Relative error bound of one evaluation of `normal::isf` at an exact argument: statrs' erfc⁻¹ plus
/// one Newton step measures ≤ 4.4U against 420-digit mpmath over [1e-300, ½]; we allow 16U.
const PHI_REL_ERR: f64 = 16.0 * U;

/// Relative error bound of `normal::cdf(x)` / `normal::sf(−x)` in the lower tail, at an exact argument:
/// the Faddeeva erfc loses about U·x² to the exponent (measured ≤ 2.2e-13 at x ≈ −35 against mpmath,
/// over x ∈ [−37.5, 0]); we allow 8U(1 + x²), a 5× margin. Below x ≈ −37.5 the value is subnormal
/// (< 2.2e-308) and only its absolute size is meaningful.
fn phi_rel_err(x: f64) -> f64 {
    8.0 * U * (1.0 + x * x)
}

/// Φ(x) with a relative error bound, given an absolute error bound `ex` on the argument.
/// d ln Φ(x)/dx = φ(x)/Φ(x), which is ≤ 2φ(x) for x ≥ 0 and ≤ |x| + 1 for x < 0 (the inverse Mills
/// ratio bound), so an argument error `ex` becomes a relative error of at most that times `ex`.
fn cdf_with_err(x: f64, ex: f64) -> (f64, f64) {
    let h = if x >= 0.0 {
        2.0 * normal::pdf(x)
    } else {
        x.abs() + 1.0
    };
    let own = if x >= 0.0 { 8.0 * U } else { phi_rel_err(x) };
    (normal::cdf(x), own + h * ex)
}

/// The GDP trade-off function G_μ(α) = Φ(Φ⁻¹(1−α) − μ): the smallest type II error (β) any test
/// of type I error α can have against a μ-GDP mechanism.
///
/// # Formula
/// ```text
/// G_μ(α) = Φ(z − μ),  z = Φ⁻¹(1 − α) = isf(α)           DRS22 eq. (5)
/// ```
/// # Soundness
/// Rounded down: z carries ≤ 16U relative error, so z − μ has absolute error ≤ 16U(|z| + μ) + U|z−μ|.
///
/// # Citations
/// DRS22 Def. 4, eq. (5).
///
/// ```
/// use privacy_ledger::accountant::gdp::tradeoff;
/// assert!((tradeoff(1.0, 0.05) - 0.740488977158556).abs() < 1e-12);
/// ```
pub fn tradeoff(mu: f64, alpha: f64) -> f64 {
    let (v, rel) = tradeoff_with_err(mu, alpha);
    rounding::prob_down(v, rel)
}

/// [`tradeoff`] rounded *up*: the upper end of the bracket around the exact G_μ(α).
pub fn tradeoff_upper(mu: f64, alpha: f64) -> f64 {
    let (v, rel) = tradeoff_with_err(mu, alpha);
    rounding::prob_up(v, rel)
}

fn tradeoff_with_err(mu: f64, alpha: f64) -> (f64, f64) {
    if alpha <= 0.0 {
        return (1.0, 0.0);
    }
    if alpha >= 1.0 {
        return (0.0, 0.0);
    }
    if mu == 0.0 {
        return (1.0 - alpha, U);
    }
    let z = normal::isf(alpha);
    let x = z - mu;
    cdf_with_err(x, PHI_REL_ERR * (z.abs() + mu) + U * x.abs())
}

/// The TPR bound of the worst-case membership-inference attack at false-positive rate `fpr`:
/// TPR ≤ 1 − G_μ(FPR) = Φ(Φ⁻¹(FPR) + μ).
///
/// # Formula
/// ```text
/// TPR(FPR) = Φ(μ − z),  z = isf(FPR)                      seed 003 §2.2, Def. 2.6
/// ```
/// # Soundness
/// Rounded up, with the same argument-error propagation as [`tradeoff`].
pub fn tpr(mu: f64, fpr: f64) -> f64 {
    if fpr <= 0.0 {
        return 0.0;
    }
    if fpr >= 1.0 {
        return 1.0;
    }
    let z = normal::isf(fpr);
    let x = mu - z;
    let (v, rel) = cdf_with_err(x, PHI_REL_ERR * (z.abs() + mu) + U * x.abs());
    rounding::prob_up(v, rel)
}

/// The largest advantage (TPR − FPR) of any membership-inference test against a μ-GDP mechanism,
/// which is also the total variation η of the mechanism and δ(0).
///
/// # Formula
/// ```text
/// adv(μ) = 2Φ(μ/2) − 1 = 1 − 2Φ(−μ/2)                    DRS22 Cor. 1 at ε = 0; seed 004 §VI-B
/// ```
/// # Soundness
/// Rounded up (1 − 2Φ(−μ/2) is formed without cancellation for small μ via erf).
pub fn advantage(mu: f64) -> f64 {
    delta_bounds(mu, 0.0).1
}

/// The fixed point of G_μ, α* = Φ(−μ/2): the type I error at which the best test has α = β, and the
/// α that attains the largest advantage.
pub fn fixed_point(mu: f64) -> f64 {
    normal::sf(mu / 2.0)
}

/// δ(ε) of the μ-GDP curve, returned with a bound on its relative floating-point error.
///
/// Computed in log space so neither term underflows: with a = ε/μ − μ/2 and b = ε/μ + μ/2,
/// ln A = ln Φ(−a), ln B = ε + ln Φ(−b), δ = A·(1 − e^{ln B − ln A}).
fn delta_with_err(mu: f64, eps: f64) -> (f64, f64) {
    let r = eps / mu;
    let a = r - mu / 2.0;
    let b = r + mu / 2.0;
    let ln_a = normal::log_sf(a);
    let ln_b = eps + normal::log_sf(b);
    let d = ln_b - ln_a; // ≤ 0 in exact arithmetic (δ ≥ 0)
    if d >= 0.0 {
        // Only reachable through rounding when δ is a vanishing fraction of A; report A's scale as
        // the error so the caller widens to a positive bound.
        return (0.0, f64::INFINITY);
    }
    let one_minus = -d.exp_m1();
    let delta = ln_a.exp() * one_minus;
    // Absolute error of d: the log-tails are accurate to ~PHI_REL_ERR in the tail variable and to
    // U·x² from forming x²/2; the arguments a, b carry U·(r + μ/2)·(1 + |x|) from forming them.
    let arg = U * (r + mu / 2.0 + 1.0);
    // log_sf(x) = ln(½ erfcx(x/√2)) − x²/2: erfcx is relatively accurate (Faddeeva), so each log-tail
    // carries ≈ U·x² from forming x²/2 plus a few ulps of its logarithm; doubled for margin.
    let e_d = 2.0
        * (2.0 * U * (a * a + b * b)
            + PHI_REL_ERR * (2.0 + (ln_a + 0.5 * a * a).abs() + (ln_b + 0.5 * b * b).abs())
            + U * eps
            + arg * (a.abs() + b.abs() + 2.0));
    // Relative error of 1 − e^d given absolute error e_d in d: e_d·e^d/(1 − e^d).
    let cancel = e_d * d.exp() / one_minus;
    let rel = cancel + e_d + U * ln_a.abs() + 8.0 * U;
    (delta, rel)
}

/// The privacy profile of μ-GDP: the smallest δ such that a μ-GDP mechanism is (ε, δ)-DP.
///
/// # Formula
/// ```text
/// δ_μ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)             DRS22 Cor. 1 (also Balle & Wang 2018)
/// ```
/// # Soundness
/// Rounded up by a first-order bound on its own error (cancellation between the two terms included);
/// the tests check it stays within 1e-11 relative of 60-digit values wherever δ ≥ 1e-300.
///
/// # Citations
/// DRS22 Corollary 1 (arXiv:1905.02383); seed 003 eq. (19).
///
/// ```
/// use privacy_ledger::accountant::gdp::delta_for_epsilon;
/// let d = delta_for_epsilon(1.0, 1.0);
/// assert!((d - 0.126936737506644).abs() < 1e-13);
/// ```
pub fn delta_for_epsilon(mu: f64, eps: f64) -> f64 {
    delta_bounds(mu, eps).1
}

/// A bracket [lower, upper] around the exact δ_μ(ε) (see [`delta_for_epsilon`], which is `upper`).
pub fn delta_bounds(mu: f64, eps: f64) -> (f64, f64) {
    if mu == 0.0 {
        return (0.0, 0.0);
    }
    if mu.is_infinite() {
        return (1.0, 1.0);
    }
    let eps = eps.max(0.0);
    if eps == 0.0 {
        // erf from the Faddeeva package (statrs' erf is off by ~1e-10 relative here).
        let v = errorfunctions::RealErrorFunctions::erf(mu / (2.0 * std::f64::consts::SQRT_2));
        return (
            rounding::prob_down(v, PHI_REL_ERR + 2.0 * U),
            rounding::prob_up(v, PHI_REL_ERR + 2.0 * U),
        );
    }
    let (d, rel) = delta_with_err(mu, eps);
    if !rel.is_finite() {
        // Rounding swamped the value; fall back to the (looser) bracket 0 ≤ δ ≤ Φ(−ε/μ + μ/2).
        return (
            0.0,
            rounding::prob_up(normal::sf(eps / mu - mu / 2.0), 1e-6),
        );
    }
    (
        rounding::prob_down(d, 2.0 * rel),
        rounding::prob_up(d, 2.0 * rel),
    )
}

/// The smallest ε ≥ 0 with δ_μ(ε) ≤ δ: the (ε, δ)-DP guarantee implied by μ-GDP at this δ.
///
/// Returns +∞ when δ = 0 and μ > 0 (a Gaussian mechanism is not (ε, 0)-DP for any finite ε), and 0
/// when δ ≥ δ_μ(0).
///
/// # Formula
/// ```text
/// ε(δ) = min{ε ≥ 0 : δ_μ(ε) ≤ δ}                           DRS22 Cor. 1, inverted
/// ```
/// # Soundness
/// Bisection on the *widened* δ̂⁺(ε) ≥ δ_μ(ε): the returned ε satisfies δ_μ(ε) ≤ δ̂⁺(ε) ≤ δ, so it is
/// never below the exact root, whatever the rounding inside the search. The bracket is narrowed to a
/// relative width of 2⁻⁵⁰, so it is also above the root by at most that much plus the effect of the
/// widening (≈1e-12 relative in the tested range).
///
/// ```
/// use privacy_ledger::accountant::gdp::epsilon_for_delta;
/// let e = epsilon_for_delta(1.0, 1e-5);
/// assert!(e >= 4.37717809568 && e < 4.37717809568 * (1.0 + 1e-9));
/// ```
pub fn epsilon_for_delta(mu: f64, delta: f64) -> f64 {
    epsilon_bounds(mu, delta).1
}

/// A bracket [lower, upper] around the exact root of δ_μ(ε) = δ: `upper` is [`epsilon_for_delta`];
/// `lower` is the same search run on the lower end of the δ bracket, returning the end where the
/// predicate fails, so it is never above the exact root.
pub fn epsilon_bounds(mu: f64, delta: f64) -> (f64, f64) {
    if mu == 0.0 || delta >= 1.0 {
        return (0.0, 0.0);
    }
    if delta <= 0.0 || mu.is_infinite() {
        return (f64::INFINITY, f64::INFINITY);
    }
    let upper = search_epsilon(mu, delta, |e| delta_bounds(mu, e).1).1;
    let lower = search_epsilon(mu, delta, |e| delta_bounds(mu, e).0).0;
    (lower.min(upper), upper)
}

/// Bisection for the root of the (decreasing) `delta_of(ε) = δ`; returns the final bracket
/// (lo, hi) with `delta_of(lo) > δ ≥ delta_of(hi)`, or (0, 0) if `delta_of(0) ≤ δ`.
fn search_epsilon(mu: f64, delta: f64, delta_of: impl Fn(f64) -> f64) -> (f64, f64) {
    if delta_of(0.0) <= delta {
        return (0.0, 0.0);
    }
    let (mut lo, mut hi) = (0.0_f64, (mu * mu).max(1.0));
    while delta_of(hi) > delta {
        lo = hi;
        hi *= 2.0;
        if hi > 1e300 {
            return (f64::INFINITY, f64::INFINITY);
        }
    }
    bisect(lo, hi, |e| delta_of(e) <= delta)
}

/// Bisection for the boundary of a predicate that is false at `lo` and true at `hi`, narrowed to a
/// relative width of 2⁻⁵⁰; returns the final (lo, hi).
pub(crate) fn bisect(mut lo: f64, mut hi: f64, ok: impl Fn(f64) -> bool) -> (f64, f64) {
    for _ in 0..2000 {
        if hi - lo <= hi.abs() * 2f64.powi(-50) {
            break;
        }
        let mid = lo + (hi - lo) / 2.0;
        if mid <= lo || mid >= hi {
            break;
        }
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    (lo, hi)
}

/// [`bisect`] returning `hi`, where the predicate (false at `lo`, true at `hi`) holds.
pub(crate) fn bisect_up(lo: f64, hi: f64, ok: impl Fn(f64) -> bool) -> f64 {
    bisect(lo, hi, ok).1
}

/// [`bisect`] for a predicate true at `lo` and false at `hi`; returns `lo`, where it holds.
pub(crate) fn bisect_down(lo: f64, hi: f64, ok: impl Fn(f64) -> bool) -> f64 {
    bisect(lo, hi, |x| !ok(x)).0
}

/// μ of a composition of μᵢ-GDP mechanisms (each counted `countᵢ` times).
///
/// # Formula
/// ```text
/// G_μ₁ ⊗ … ⊗ G_μₙ = G_μ,  μ = √(Σ μᵢ²)                    DRS22 Cor. 2
/// ```
/// # Soundness
/// Summed in double-double and rounded up (8U relative), so exact to a few ulps for any number of terms.
pub fn compose(mus: impl IntoIterator<Item = (f64, u64)>) -> f64 {
    let mut acc = rounding::SumOfSquares::default();
    for (mu, count) in mus {
        acc.add(mu, count);
    }
    acc.sqrt_up()
}

/// μ for groups of size k: a μ-GDP mechanism is kμ-GDP for groups of k individuals.
///
/// # Formula
/// ```text
/// 1 − (1 − G_μ)^{∘k} = G_{kμ}                              DRS22 Thm. 3
/// ```
/// # Soundness
/// Rounded up by one ulp.
pub fn group(mu: f64, k: u64) -> f64 {
    (mu * k as f64).next_up()
}

/// The μ that any ε-DP mechanism is guaranteed: μ = 2Φ⁻¹(e^ε/(1+e^ε)).
///
/// Tight at α = 1/(1+e^ε) (randomized response attains it) but very conservative for small α.
///
/// # Formula
/// ```text
/// μ = 2Φ⁻¹(e^ε/(1+e^ε)) = 2·isf(1/(1+e^ε))                 seed 003 Prop. 6.1
/// ```
/// # Soundness
/// Rounded up. For ε ≤ 2 through 2√2·erf⁻¹(tanh(ε/2)) (tanh and statrs' erf⁻¹ are accurate to a few
/// ulps; 64U is allowed). Beyond, 1/(1+e^ε) is formed as exp(−ε − ln(1+e^{−ε})) with ≤ (4 + ε)U
/// relative error, which moves z = isf(p) by at most that divided by the inverse Mills ratio (≥ z);
/// 32U + (4 + ε)U is allowed. Both are checked against 60-digit values in the tests.
pub fn from_pure_dp(eps: f64) -> f64 {
    if eps <= 0.0 {
        return 0.0;
    }
    if eps.is_infinite() {
        return f64::INFINITY;
    }
    if eps <= 2.0 {
        // e^ε/(1+e^ε) = ½ + ½tanh(ε/2), so μ = 2Φ⁻¹(½ + t/2) = 2√2·erf⁻¹(t) with t = tanh(ε/2): no
        // cancellation near ε = 0 (where 1/(1+e^ε) ≈ ½ would lose every digit of μ).
        let t = (eps / 2.0).tanh();
        let v = 2.0 * std::f64::consts::SQRT_2 * statrs::function::erf::erf_inv(t);
        return rounding::up(v, 64.0 * U);
    }
    let p = (-eps - (-eps).exp().ln_1p()).exp();
    if p == 0.0 {
        return f64::INFINITY;
    }
    rounding::up(2.0 * normal::isf(p), 2.0 * PHI_REL_ERR + (4.0 + eps) * U)
}

/// The largest μ such that μ-GDP implies (ε, δ)-DP: the root of δ_μ(ε) = δ in μ.
///
/// This translates a legacy (ε, δ) target into a μ budget (seed 003 Table 3, "suggested
/// replacements"). It is *not* a conversion of an (ε, δ)-DP mechanism into GDP: with δ > 0 no finite
/// μ holds for every (ε, δ)-DP mechanism (seed 003 Prop. 6.2).
///
/// # Formula
/// ```text
/// μ = max{μ ≥ 0 : δ_μ(ε) ≤ δ}                              seed 003 §5, Table 3
/// ```
/// # Soundness
/// Bisection on the widened δ̂⁺: the returned μ satisfies δ_μ(ε) ≤ δ̂⁺ ≤ δ, so μ-GDP at this μ really
/// implies (ε, δ)-DP; the answer is never above the exact root.
pub fn for_epsilon_delta_target(eps: f64, delta: f64) -> f64 {
    if delta >= 1.0 {
        return f64::INFINITY;
    }
    if delta <= 0.0 {
        return 0.0;
    }
    let ok = |mu: f64| delta_for_epsilon(mu, eps) <= delta;
    let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
    while ok(hi) {
        lo = hi;
        hi *= 2.0;
        if hi > 1e150 {
            return lo;
        }
    }
    bisect_down(lo, hi, ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composition_adds_squares() {
        // DRS22 Cor. 2: (0.3, 0.4) → 0.5 (seed 001 D4).
        let mu = compose([(0.3, 1), (0.4, 1)]);
        assert!(mu >= 0.5 && mu < 0.5 * (1.0 + 1e-14), "{mu}");
        // 10 000 copies of 0.01 → 1.
        let mu = compose([(0.01, 10_000)]);
        assert!((mu - 1.0).abs() < 1e-14, "{mu}");
    }

    #[test]
    fn epsilon_is_zero_when_delta_exceeds_total_variation() {
        assert_eq!(epsilon_for_delta(1.0, 0.5), 0.0);
        assert_eq!(epsilon_for_delta(1.0, 0.0), f64::INFINITY);
        assert_eq!(epsilon_for_delta(0.0, 1e-5), 0.0);
    }

    #[test]
    fn group_privacy_scales_mu() {
        assert!(group(1.0, 3) >= 3.0 && group(1.0, 3) < 3.0 + 1e-14);
    }
}
