//! Privacy amplification by subsampling in f-DP: the operator C_p (DRS22 §4).
//!
//! If M is f-DP on datasets of size m, running it on a uniformly random m-subset of n records (or on
//! a Poisson subsample, DRS22 §4 after Lemma 2) is C_p(f)-DP with p = m/n, where
//! C_p(f) = min{f_p, f_p⁻¹}** and f_p = p f + (1 − p) Id (DRS22 Def. 6, Thm. 9).

use super::gdp;
use super::normal;
use super::rounding;
use super::tradeoff::PiecewiseLinear;

// β = Φ(−z) at the root z of [`subsampled_gdp`]'s bisection is now [`normal::sf_bounds`]`(z).0`:
// sf(z) = ½erfc(z/√2) is the very computation [`normal::cdf_rel_err`] bounds at −z, so it is
// widened down by 20U + 8U·z² (measured 8.5U near 0 and 3.7U·z² beyond 1.5, module table of
// `normal`). The 16U this replaces (`SF_AT_ROOT_REL`) is below 20U everywhere and below the
// *measured* 3.7U·z² from z ≈ 2.1 on (e.g. 92U measured at z = 5, 16U allowed): too small.

/// f_p = p f + (1 − p) Id: the (asymmetric) curve of the subsampled mechanism for one ordering of the
/// neighbouring pair (DRS22 Def. 6). Exact on polygons (vertices keep their α).
pub fn mixture(f: &PiecewiseLinear, p: f64) -> PiecewiseLinear {
    let pts: Vec<(f64, f64)> = f
        .vertices()
        .map(|(x, y)| {
            (
                x,
                // Along either term at most four roundings (1 − p, 1 − x, the product, the sum).
                rounding::prob_down(p * y + (1.0 - p) * (1.0 - x), rounding::ARITH4_REL),
            )
        })
        .collect();
    PiecewiseLinear::from_vertices(&pts)
}

/// The p-sampling operator C_p(f) = min{f_p, f_p⁻¹}** on a polygonal curve (DRS22 Def. 6, Thm. 9).
///
/// # Formula
/// ```text
/// f_p = p f + (1 − p) Id,   C_p(f) = min{f_p, f_p⁻¹}**                 DRS22 Def. 6
/// ```
/// Exact on polygons: the inverse, the minimum at the union of vertices and the lower convex hull
/// involve no approximation.
pub fn subsample(f: &PiecewiseLinear, p: f64) -> PiecewiseLinear {
    mixture(f, p).symmetrize()
}

/// C_p(G_μ)(α) in closed form (DRS22 eq. (13)): with x* = Φ(−μ/2) the fixed point of G_μ,
/// ```text
/// C_p(G_μ)(α) = f_p(α)                 for α ≤ x*
///             = x* + f_p(x*) − α        for x* ≤ α ≤ f_p(x*)
///             = f_p⁻¹(α)                for α ≥ f_p(x*)
/// ```
/// where f_p⁻¹ is found on the parametric form (Φ(−z), p Φ(z − μ) + (1 − p) Φ(z)), z ≥ μ/2.
///
/// # Soundness
/// Rounded down: f_p is a sum of lower bounds; the middle line is widened by an absolute term
/// (it cancels); f_p⁻¹ is found by bisection in z on a directed predicate (an upper bound on the
/// mixture's tail against a lower bound on 1 − α), so the z returned is at or above the exact
/// root, and Φ(−z) there is taken at the lower end of [`normal::sf_bounds`]: the result never
/// exceeds the exact curve.
pub fn subsampled_gdp(mu: f64, p: f64, alpha: f64) -> f64 {
    let a = alpha.clamp(0.0, 1.0);
    let f_p = |x: f64| p * gdp::tradeoff(mu, x) + (1.0 - p) * (1.0 - x);
    let x_star = gdp::fixed_point(mu);
    let fx = f_p(x_star);
    if a <= x_star {
        return rounding::prob_down(f_p(a), rounding::ARITH4_REL);
    }
    if a <= fx {
        // x* + f_p(x*) − α cancels as α → f_p(x*) (the value falls to x* = Φ(−μ/2), 3e-7 at
        // μ = 10, while x* + f_p(x*) ≈ 1 − p): a relative widening of the difference does not bound
        // its operands' rounding. Absolute error: f_p(x*)'s four roundings (4U·fx; G_μ is already a
        // lower bound), the sum's (U·(x* + fx)) and the difference's (U·|v|, in the relative part).
        // x̃ = sf(μ/2) is itself rounded, but x + f_p(x) is smallest at x* (slope p(1 + G'(x)),
        // G'(x*) = −1), so x̃'s error raises the value by only ½p·G''·Δx² ≤ p(20U + 2Uμ²)²·x*,
        // second order (relative ≤ 1e-28 for μ < 77; beyond, x̃ = 0). So 8U·(x* + fx) absolute,
        // ≥ 5U·(x* + fx), and 4U relative.
        let v = rounding::sub_down(x_star + fx - a, rounding::ARITH8_REL * (x_star + fx));
        return rounding::prob_down(v, rounding::ARITH4_REL);
    }
    // Solve p·sf(z − μ) + (1 − p)·sf(z) = 1 − α for z ≥ μ/2 (decreasing in z).
    let target = rounding::sub_down(1.0, a);
    if target <= 0.0 {
        return 0.0;
    }
    // The predicate must only hold where z is at or above the exact root z*: an *upper* bound on
    // h(z) compared with a *lower* bound on 1 − α. (The nearest-rounded h compared with 1 − α
    // could accept a z below z*, by |Δh|/|h'(z)|; sf's relative error there, 20U + 8U·z², is
    // amplified by φ(z)/sf(z)·h/|h'| — about 8 at μ = 6, p = 0.01, z = 3 — and no widening of
    // Φ(−z) afterwards would bound that.) sf(z − μ) is decreasing, so its argument is rounded down.
    let q = rounding::sub_up(1.0, p);
    let h_up = |z: f64| {
        rounding::add_up(
            rounding::mul_up(p, normal::sf_bounds(rounding::sub_down(z, mu)).1),
            rounding::mul_up(q, normal::sf_bounds(z).1),
        )
    };
    let mut lo = mu / 2.0;
    let mut hi = lo + 1.0;
    while h_up(hi) > target {
        lo = hi;
        hi = 2.0 * hi + 1.0;
        if hi > 1e6 {
            return 0.0;
        }
    }
    // h_up(z) ≤ target ⇒ h(z) ≤ 1 − α = h(z*) ⇒ z ≥ z* ⇒ Φ(−z) ≤ Φ(−z*), the exact β.
    let z = gdp::bisect_up(lo, hi, |z| h_up(z) <= target);
    // Φ(−z) at the double z, widened down by cdf_rel_err(−z) = 20U + 8U·z² (see above).
    normal::sf_bounds(z).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accountant::epsilon_delta;

    #[test]
    fn subsampled_gdp_matches_drs22_figure_6_left() {
        // DRS22: C_p(G_1.8), p = 0.35.
        let want = [
            (0.01, 0.888736858),
            (0.05, 0.7709235368),
            (0.1, 0.6907254501),
            (0.2, 0.5788420877),
            (0.5, 0.2788420877),
            (0.6, 0.1788744913),
            (0.8, 0.0366144522),
        ];
        for (a, b) in want {
            let v = subsampled_gdp(1.8, 0.35, a);
            assert!((v - b).abs() < 1e-9, "alpha {a}: {v} vs {b}");
        }
    }

    #[test]
    fn subsampled_f_eps_delta_has_the_eq_13_middle_line() {
        // DRS22: C_0.2(f_{3,0.1}) has the slope −1 piece 0.817073314343924 − α.
        let c = subsample(&epsilon_delta::curve(3.0, 0.1), 0.2);
        c.validate().unwrap();
        for a in [0.05, 0.1, 0.2, 0.3, 0.5] {
            let v = c.eval(a);
            assert!(
                (v - (0.817_073_314_343_924 - a)).abs() < 1e-12,
                "alpha {a}: {v}"
            );
        }
    }
}
