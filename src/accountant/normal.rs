//! The standard normal distribution, accurate in both tails.
//!
//! Every privacy figure in this crate bottoms out in Φ, its survival function and its quantile, often
//! far in a tail (trade-off curves at α = 1e-12, δ(ε) at δ = 1e-15). `1 − Φ(x)` loses every digit
//! there, so this module never forms it: upper tails use `erfc`, and the log-tails use the scaled
//! complementary error function `erfcx(x) = exp(x²) erfc(x)` so they do not underflow.
//!
//! `erfc`/`erfcx` come from the `errorfunctions` crate (a port of S. G. Johnson's Faddeeva package,
//! relative error ≈ 1e-16 over the real line); the quantile comes from `statrs::function::erf::erfc_inv`
//! (Boost's rational approximations) followed by one Newton step on the tail that matters. The
//! integration tests compare every function here with 60-digit mpmath values down to 1e-300
//! (`tests/fixtures/analytic_vectors.json`).

use errorfunctions::RealErrorFunctions;
use std::f64::consts::{FRAC_1_SQRT_2, SQRT_2};

/// ln(√(2π)).
const LN_SQRT_2PI: f64 = 0.918_938_533_204_672_8;

/// The standard normal density φ(x) = exp(−x²/2)/√(2π).
pub fn pdf(x: f64) -> f64 {
    (-0.5 * x * x - LN_SQRT_2PI).exp()
}

/// Φ(x) = P[Z ≤ x] for Z ~ N(0,1).
///
/// # Formula
/// ```text
/// Φ(x) = ½ erfc(−x/√2)
/// ```
/// Relative accuracy is kept for x → −∞ (the lower tail), where it matters; Φ(x) for x ≥ 0 is near 1
/// and is as accurate as a double near 1 can be. Use [`sf`] for the upper tail.
pub fn cdf(x: f64) -> f64 {
    0.5 * RealErrorFunctions::erfc(-x * FRAC_1_SQRT_2)
}

/// The survival function 1 − Φ(x) = Φ(−x), computed without cancellation.
pub fn sf(x: f64) -> f64 {
    0.5 * RealErrorFunctions::erfc(x * FRAC_1_SQRT_2)
}

/// ln(1 − Φ(x)), finite for every finite x (no underflow for x ≫ 38).
///
/// # Formula
/// ```text
/// ln Φ(−x) = ln(½ erfcx(x/√2)) − x²/2      (x > 0)
/// ```
pub fn log_sf(x: f64) -> f64 {
    if x > 0.0 {
        (0.5 * RealErrorFunctions::erfcx(x * FRAC_1_SQRT_2)).ln() - 0.5 * x * x
    } else {
        sf(x).ln()
    }
}

/// ln Φ(x), finite for every finite x.
pub fn log_cdf(x: f64) -> f64 {
    log_sf(-x)
}

/// The quantile Φ⁻¹(p) for p ∈ [0, 1] (−∞ at 0, +∞ at 1).
///
/// Accurate relative to |Φ⁻¹(p)| for small p, which is the tail every caller here needs; for p close
/// to 1 call [`isf`] with 1 − p computed exactly by the caller.
///
/// # Formula
/// ```text
/// Φ⁻¹(p) = −√2 erfc⁻¹(2p), refined by one Newton step z ← z − (Φ(z) − p)/φ(z)  (p ≤ ½)
/// ```
pub fn quantile(p: f64) -> f64 {
    if p.is_nan() || !(0.0..=1.0).contains(&p) {
        return f64::NAN;
    }
    if p <= 0.5 {
        -isf(p)
    } else {
        isf(1.0 - p)
    }
}

/// [`isf`] without the Newton refinement: erfc⁻¹ alone, accurate to ~1e-12 absolute over (0, ½]; for
/// screening many points before refining the few that matter.
pub fn isf_fast(q: f64) -> f64 {
    if q <= 0.0 {
        return f64::INFINITY;
    }
    if q >= 1.0 {
        return f64::NEG_INFINITY;
    }
    SQRT_2 * statrs::function::erf::erfc_inv(2.0 * q)
}

/// The inverse survival function Φ⁻¹(1 − q) = −Φ⁻¹(q), accurate for q down to the smallest double.
///
/// This is the function to use for "the z with an upper tail of mass q" (α near 0 in trade-off
/// curves), because 1 − q cannot be formed in floating point without losing q.
pub fn isf(q: f64) -> f64 {
    if q.is_nan() || !(0.0..=1.0).contains(&q) {
        return f64::NAN;
    }
    if q == 0.0 {
        return f64::INFINITY;
    }
    if q == 1.0 {
        return f64::NEG_INFINITY;
    }
    if q > 0.5 {
        return -isf(1.0 - q);
    }
    let z = SQRT_2 * statrs::function::erf::erfc_inv(2.0 * q);
    // One Newton step on g(z) = ln sf(z) − ln q, whose derivative is −φ(z)/sf(z) (the inverse Mills
    // ratio); in log form the step is well conditioned even at q = 1e-300.
    if z.is_finite() && z > 0.0 {
        let ls = log_sf(z);
        let hazard = (-0.5 * z * z - LN_SQRT_2PI - ls).exp();
        let step = (ls - q.ln()) / hazard;
        if step.is_finite() {
            return z + step;
        }
    }
    z
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_inverts_cdf_at_a_few_points() {
        for &p in &[1e-300, 1e-20, 1e-8, 0.01, 0.3, 0.5, 0.7, 0.99] {
            let z = quantile(p);
            let back = if p <= 0.5 { cdf(z) } else { 1.0 - sf(z) };
            // Φ(z) moves by a relative (|z| + 1)·Δz when z moves by Δz, and z itself can only be
            // known to an ulp or two: allow 8U(1 + z²).
            let tol = 8.0 * f64::EPSILON / 2.0 * (1.0 + z * z);
            assert!(((back - p) / p).abs() < tol, "p = {p}: {back}");
        }
    }

    #[test]
    fn log_sf_is_finite_where_sf_underflows() {
        let l = log_sf(50.0);
        // ln Φ(−50) = −1254.83136113942 (mpmath, 30 digits)
        assert!((l + 1_254.831_361_139_42).abs() < 1e-9, "{l}");
        assert_eq!(sf(50.0), 0.0, "Φ(−50) ≈ 1e-545 underflows a double");
    }
}
