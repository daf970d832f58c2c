//! μ-Gaussian differential privacy in closed form.
//!
//! μ-GDP (Dong, Roth & Su 2022, "Gaussian differential privacy", JRSS-B 84(1), arXiv:1905.02383; below
//! DRS22) means the trade-off curve between neighbouring outputs is at least
//! G_μ(α) = Φ(Φ⁻¹(1−α) − μ), the curve of testing N(0,1) against N(μ,1). Everything a ledger of
//! Gaussian mechanisms needs follows in closed form: composition adds μ² (DRS22 Cor. 2), the privacy
//! profile δ(ε) is DRS22 Cor. 1, attack risk is a function of μ (Gomez, Kulynych, Kaissis, Hayes,
//! Balle & Honkela, "(ε,δ) considered harmful", below GKKHBH).
//!
//! # Domain
//! Every function accepts every μ ∈ [0, +∞] (+∞ is what a composition whose μ exceeds f64::MAX
//! reports), every ε ≥ 0 and every probability, including the subnormal range and the ends, and
//! returns a bracket that holds there; none returns NaN. Where the exact answer is beyond the
//! doubles (ε(δ) at μ = 1e200 is ≈ 5e399) the sound end is +∞. A NaN argument (which validated
//! input never carries) gives the vacuous bracket.
//!
//! # Soundness
//! Each function returns a value on the stated side of the exact one: δ, ε, μ, TPR and advantage
//! never below, β never above (see [`super::rounding`]). Arguments of library functions (ε/μ, z − μ,
//! …) are formed with directed arithmetic so their rounding is on the safe side; the library
//! functions' own errors are covered by the bounds measured in [`super::normal`]. No step squares μ
//! or divides by it in a way that can overflow, underflow to a wrong 0, or produce ∞/∞.

use super::normal;
use super::rounding::{self, TINY, U};
use std::f64::consts::FRAC_1_SQRT_2;

/// Lower and upper neighbours of 1/√2 (the exact value lies between them).
/// [`from_pure_dp`] for ε ≤ 1e-100: the widening of √(π/2)·ε, already rounded up by a directed
/// product and above the exact μ (the omitted series term is πε²/12 < 1e-200 relative). The 4U is a
/// margin the analysis does not need.
const PURE_DP_SMALL_REL: f64 = 4.0 * U;

/// [`from_pure_dp`] for 1e-100 < ε ≤ 2: 2√2·erf⁻¹(tanh(ε/2)). tanh ≤ 2U (measured), passed through
/// erf⁻¹ with condition ≤ 1.7 (3.4U); statrs' erf⁻¹ ≤ 2.7U (measured for arguments ≥ 1e-300); √2's
/// rounding and the product's 2U: ≈ 8U to first order. 32U is a 4× margin over these measurements.
const PURE_DP_REL: f64 = 32.0 * U;

/// Lower and upper neighbours of 1/√2 (the exact value lies between them).
const INV_SQRT2: (f64, f64) = (FRAC_1_SQRT_2.next_down(), FRAC_1_SQRT_2.next_up());

/// a·c rounded down (`up = false`) or up, for c known only to lie in [c.0, c.1] (c > 0).
fn mul_by_interval(a: f64, c: (f64, f64), up: bool) -> f64 {
    match (up, a >= 0.0) {
        (true, true) => rounding::mul_up(a, c.1),
        (true, false) => rounding::mul_up(a, c.0),
        (false, true) => rounding::mul_down(a, c.0),
        (false, false) => rounding::mul_down(a, c.1),
    }
}

/// The GDP trade-off function G_μ(α) = Φ(Φ⁻¹(1−α) − μ), rounded down: the smallest type II error (β)
/// any test of type I error α can have against a μ-GDP mechanism.
///
/// # Formula
/// ```text
/// G_μ(α) = Φ(z − μ),  z = Φ⁻¹(1 − α) = isf(α)           DRS22 eq. (5)
/// ```
/// # Errors
/// None: G_0(α) = 1 − α, G_∞(α) = 0 for α > 0, G_μ(0) = 1, G_μ(1) = 0.
///
/// # Soundness
/// Rounded down: z is taken at the lower end of its bracket ([`normal::isf_bounds`]), z − μ is
/// rounded down, and Φ is taken at the lower end of its bracket; Φ is increasing, so each step only
/// lowers the result. For μ ≥ 40 (or α tiny) the value is below 1e-323 and the result is 0.
///
/// # Citations
/// DRS22 Def. 4, eq. (5) (arXiv:1905.02383).
///
/// ```
/// use privacy_ledger::accountant::gdp::tradeoff;
/// assert!((tradeoff(1.0, 0.05) - 0.740488977158556).abs() < 1e-12);
/// assert_eq!(tradeoff(1e200, 0.5), 0.0);
/// ```
pub fn tradeoff(mu: f64, alpha: f64) -> f64 {
    if mu.is_nan() || alpha.is_nan() {
        return 0.0;
    }
    if alpha <= 0.0 {
        return 1.0;
    }
    if alpha >= 1.0 || mu == f64::INFINITY {
        return 0.0;
    }
    if mu <= 0.0 {
        return rounding::sub_down(1.0, alpha);
    }
    let z = normal::isf_bounds(alpha).0;
    normal::cdf_bounds(rounding::sub_down(z, mu)).0
}

/// [`tradeoff`] rounded *up*: the upper end of the bracket around the exact G_μ(α).
///
/// # Soundness
/// The mirror of [`tradeoff`]: upper ends of the z and Φ brackets, z − μ rounded up. Where G_μ(α)
/// underflows the result is 3 subnormal ulps (≥ the exact value, which is < 1e-323 there).
///
/// ```
/// use privacy_ledger::accountant::gdp::{tradeoff, tradeoff_upper};
/// assert!(tradeoff_upper(1.0, 0.05) >= tradeoff(1.0, 0.05));
/// ```
pub fn tradeoff_upper(mu: f64, alpha: f64) -> f64 {
    if mu.is_nan() || alpha.is_nan() {
        return 1.0;
    }
    if alpha <= 0.0 {
        return 1.0;
    }
    if alpha >= 1.0 || mu == f64::INFINITY {
        return 0.0;
    }
    if mu <= 0.0 {
        return rounding::sub_up(1.0, alpha);
    }
    let z = normal::isf_bounds(alpha).1;
    normal::cdf_bounds(rounding::sub_up(z, mu)).1
}

/// The TPR bound of the worst-case membership-inference attack at false-positive rate `fpr`:
/// TPR ≤ 1 − G_μ(FPR) = Φ(μ − Φ⁻¹(1 − FPR)), rounded up.
///
/// # Formula
/// ```text
/// TPR(FPR) = Φ(μ − z),  z = isf(FPR)                      GKKHBH §2.2, Def. 2.6
/// ```
/// # Soundness
/// Rounded up: z at the lower end of its bracket, μ − z rounded up, Φ at the upper end of its
/// bracket. Formed directly (not as 1 − β), so small TPRs keep their relative accuracy.
///
/// ```
/// use privacy_ledger::accountant::gdp::tpr;
/// assert!((tpr(1.0, 0.05) - 0.259_511_022_841_444).abs() < 1e-13);
/// ```
pub fn tpr(mu: f64, fpr: f64) -> f64 {
    if mu.is_nan() || fpr.is_nan() {
        return 1.0;
    }
    if fpr <= 0.0 {
        return 0.0;
    }
    if fpr >= 1.0 || mu == f64::INFINITY {
        return 1.0;
    }
    if mu <= 0.0 {
        return fpr;
    }
    let z = normal::isf_bounds(fpr).0;
    normal::cdf_bounds(rounding::sub_up(mu, z)).1
}

/// The largest advantage (TPR − FPR) of any membership-inference test against a μ-GDP mechanism,
/// which is also the total variation η of the mechanism and δ(0); rounded up.
///
/// # Formula
/// ```text
/// adv(μ) = 2Φ(μ/2) − 1 = erf(μ/(2√2))                     DRS22 Cor. 1 at ε = 0; GKKHBH eq. (14)
/// ```
/// # Soundness
/// The upper end of [`advantage_bounds`].
///
/// ```
/// use privacy_ledger::accountant::gdp::advantage;
/// // erf(0.2263/(2√2)) = 0.0900883647813330791754…
/// assert!(advantage(0.2263) >= 0.090_088_364_781_333_08);
/// ```
pub fn advantage(mu: f64) -> f64 {
    advantage_dir(mu, true)
}

/// A bracket around adv(μ) = 2Φ(μ/2) − 1 (see [`advantage`]).
///
/// # Soundness
/// μ/2 is rounded down for the lower end and up for the upper end (it is exact unless μ is
/// subnormal), then [`normal::within_bounds`], whose series has a running rounding bound (the
/// `errorfunctions` erf it replaces is not accurate enough near μ = 0.23).
pub fn advantage_bounds(mu: f64) -> (f64, f64) {
    (advantage_dir(mu, false), advantage_dir(mu, true))
}

/// One end of [`advantage_bounds`].
fn advantage_dir(mu: f64, up: bool) -> f64 {
    if mu.is_nan() {
        return if up { 1.0 } else { 0.0 };
    }
    if mu <= 0.0 {
        return 0.0;
    }
    if mu == f64::INFINITY {
        return 1.0;
    }
    if up {
        normal::within_bound(rounding::mul_up(mu, 0.5), true)
    } else {
        normal::within_bound(rounding::mul_down(mu, 0.5), false)
    }
}

/// The fixed point of G_μ, α* = Φ(−μ/2): the type I error at which the best test has α = β, and the
/// α that attains the largest advantage. A location, not a privacy figure: nearest-rounded, with a
/// relative error ≤ 20U + 2U·μ² (see [`normal::cdf_rel_err`]); [`fixed_point_bounds`] brackets it.
///
/// ```
/// use privacy_ledger::accountant::gdp::fixed_point;
/// assert!((fixed_point(1.0) - 0.308537538725987).abs() < 1e-15);
/// ```
pub fn fixed_point(mu: f64) -> f64 {
    if mu.is_nan() {
        return 0.5;
    }
    normal::sf(mu.max(0.0) / 2.0)
}

/// A bracket around α* = Φ(−μ/2) (see [`fixed_point`]).
pub fn fixed_point_bounds(mu: f64) -> (f64, f64) {
    if mu.is_nan() {
        return (0.0, 0.5);
    }
    let mu = mu.max(0.0);
    let lo = normal::sf_bounds(rounding::mul_up(mu, 0.5)).0;
    let hi = normal::sf_bounds(rounding::mul_down(mu, 0.5)).1;
    (lo, hi)
}

/// The privacy profile of μ-GDP, rounded up: the smallest δ such that a μ-GDP mechanism is
/// (ε, δ)-DP.
///
/// # Formula
/// ```text
/// δ_μ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)             DRS22 Cor. 1 (also Balle & Wang 2018)
/// ```
/// # Soundness
/// The upper end of [`delta_bounds`].
///
/// # Citations
/// DRS22 Corollary 1 (arXiv:1905.02383); GKKHBH eq. (19).
///
/// ```
/// use privacy_ledger::accountant::gdp::delta_for_epsilon;
/// let d = delta_for_epsilon(1.0, 1.0);
/// assert!((d - 0.126936737506644).abs() < 1e-13);
/// ```
pub fn delta_for_epsilon(mu: f64, eps: f64) -> f64 {
    delta_dir(mu, eps, true)
}

/// The lower end of [`delta_bounds`] alone (half the work of both ends).
pub fn delta_for_epsilon_lower(mu: f64, eps: f64) -> f64 {
    delta_dir(mu, eps, false)
}

/// Below this x = a/√2 (a = ε/μ − μ/2 ≤ −36.8) δ_μ(ε) > 1 − 1e-290: the bracket is [1 − 2⁻⁵³, 1].
const X_DELTA_ONE: f64 = -26.0;
/// Above this x, δ_μ(ε) ≤ Φ(−a) = ½e^{−x²}erfcx(x) < ½·4.3e-324·0.021 < 2⁻¹⁰⁷⁴: the bracket is
/// [0, 2⁻¹⁰⁷⁴].
const X_DELTA_ZERO: f64 = 27.3;

/// A bracket [lower, upper] around the exact δ_μ(ε) (see [`delta_for_epsilon`], which is `upper`).
///
/// # Formula
/// With a = ε/μ − μ/2, b = a + μ, x = a/√2, h = μ/√2 and the identity ε − b²/2 = −a²/2:
/// ```text
/// δ = Φ(−a) − e^ε Φ(−b) = ½ e^{−x²} (erfcx(x) − erfcx(x + h))          (x ≥ 0)
///                       = ½ erfc(x) − ½ e^{−x²} erfcx(x + h)            (x < 0)
/// erfcx(x) − erfcx(x + h) = ∫ₓ^{x+h} g,   g = −erfcx' = 2/√π − 2s·erfcx(s)
/// ```
/// Nothing overflows (e^ε never appears: b ≥ μ/2 > 0, so erfcx(x + h) ≤ 1), whatever μ and ε. For
/// small h the difference of erfcx values cancels; there ∫g is bracketed by the two-point
/// Gauss–Legendre rule (below) and Simpson's rule (above), which is exact as a bound because
/// g⁗ = −erfcx⁽⁵⁾ > 0 (erfcx(x) = (2/√π)∫₀^∞ e^{−t²−2xt} dt, so its odd derivatives are negative).
/// Both brackets are computed when h ≤ 1/(2|x| + 4)·… and intersected.
/// For ε < 0, δ(ε) = 1 − e^ε + e^ε δ(−ε) (the profile of a symmetric curve).
///
/// # Soundness
/// δ is decreasing in x and increasing in h at fixed x, so the upper end is evaluated at x rounded
/// down and h rounded up (ε/μ, μ/2, the ×1/√2 all directed), the lower end the other way; each
/// library value is widened by its measured bound ([`normal`]), every combination is directed, and
/// the quadrature nodes' own rounding is charged at |g'/g| ≤ 4(1 + |s|) (checked against mpmath by
/// `gen_gdp_extremes.py`). Relative width ≲ 1e-12 wherever δ ≥ 1e-300, for every μ (μ = 1e-300
/// included: no 1/μ amplification).
///
/// # Citations
/// DRS22 Corollary 1 (arXiv:1905.02383).
///
/// ```
/// use privacy_ledger::accountant::gdp::delta_bounds;
/// let (lo, hi) = delta_bounds(1.0, 1.0);
/// // δ_1(1) = 0.12693673750664397…
/// assert!(lo <= 0.126_936_737_506_643_9 && 0.126_936_737_506_644 <= hi && hi - lo < 1e-14);
/// assert_eq!(delta_bounds(1.4e154, 1.0).1, 1.0);
/// ```
pub fn delta_bounds(mu: f64, eps: f64) -> (f64, f64) {
    (delta_dir(mu, eps, false), delta_dir(mu, eps, true))
}

/// One end of [`delta_bounds`]: the upper if `up` (computing one end costs half of both).
fn delta_dir(mu: f64, eps: f64, up: bool) -> f64 {
    let pick = |lo: f64, hi: f64| if up { hi } else { lo };
    if mu.is_nan() || eps.is_nan() {
        return pick(0.0, 1.0);
    }
    if mu <= 0.0 {
        return 0.0;
    }
    if eps == f64::INFINITY {
        return if mu == f64::INFINITY {
            pick(0.0, 1.0)
        } else {
            0.0
        };
    }
    if mu == f64::INFINITY {
        return 1.0;
    }
    if eps < 0.0 {
        // δ(ε) = 1 − e^ε(1 − δ(−ε)), increasing in δ(−ε) and decreasing in e^ε (as 1 − δ(−ε) ≥ 0).
        let d = delta_dir(mu, -eps, up);
        let v = if up {
            let e_lo = rounding::exp_down(eps);
            rounding::sub_up(1.0, rounding::mul_down(e_lo, rounding::sub_down(1.0, d)))
        } else {
            let e_hi = rounding::exp_up(eps).min(1.0);
            rounding::sub_down(1.0, rounding::mul_up(e_hi, rounding::sub_up(1.0, d)))
        };
        return v.clamp(0.0, 1.0);
    }
    if eps == 0.0 {
        return advantage_dir(mu, up);
    }
    // a = ε/μ − μ/2, x = a/√2, h = μ/√2: the upper end at x rounded down and h rounded up.
    let v = if up {
        let a = rounding::sub_down(rounding::div_down(eps, mu), rounding::mul_up(mu, 0.5));
        let x = mul_by_interval(a, INV_SQRT2, false);
        delta_side(x, rounding::mul_up(mu, INV_SQRT2.1), true)
    } else {
        let a = rounding::sub_up(rounding::div_up(eps, mu), rounding::mul_down(mu, 0.5));
        let x = mul_by_interval(a, INV_SQRT2, true);
        delta_side(x, rounding::mul_down(mu, INV_SQRT2.0), false)
    };
    // δ(ε) ≤ δ(0), and δ(ε) ≥ δ(0) − ε·e^ε/2 (|δ'(t)| = e^t Φ(−b_t) ≤ e^t/2 as b_t > 0): the
    // tighter bracket for tiny ε (its width ε/2 is ~ε/μ relative), where the forms above carry
    // their own few-ulp error.
    let v = if eps <= 1e-12 * mu {
        let adv = advantage_dir(mu, up);
        if up {
            v.min(adv)
        } else {
            let drop = rounding::mul_up(rounding::mul_up(eps, rounding::exp_up(eps)), 0.5);
            v.max(rounding::sub_down(adv, drop))
        }
    } else {
        v
    };
    v.clamp(0.0, 1.0)
}

/// A directed bound (upper if `up`) on F(x, h) = ½e^{−x²}(erfcx(x) − erfcx(x + h)) at exact x, h ≥ 0.
fn delta_side(x: f64, h: f64, up: bool) -> f64 {
    use rounding::{add_down, add_up, mul_down, mul_up, sub_down, sub_up};
    if x >= X_DELTA_ZERO {
        return if up { TINY } else { 0.0 };
    }
    if x <= X_DELTA_ONE {
        return if up { 1.0 } else { 1.0f64.next_down() };
    }
    if h <= 0.0 {
        return if up { TINY } else { 0.0 };
    }
    // E = e^{−x²}: decreasing in x², so the upper end uses x² rounded down.
    let e = if up {
        rounding::exp_up(-mul_down(x, x))
    } else {
        rounding::exp_down(-mul_up(x, x))
    };
    // Every form below is a valid bracket; the tightest end of each side is kept.
    let mut best = if up { f64::INFINITY } else { 0.0 };
    let mut keep = |v: f64| {
        best = if up { best.min(v) } else { best.max(v) };
    };
    let half_of = |v: f64| if up { mul_up(v, 0.5) } else { mul_down(v, 0.5) };
    let times_e = |d: f64| if up { mul_up(e, d) } else { mul_down(e, d) };
    // D = erfcx(x) − erfcx(y), increasing in y = x + h.
    let y = if up { add_up(x, h) } else { add_down(x, h) };
    let (ey_lo, ey_hi) = normal::erfcx_bounds(y);
    if x >= 0.0 {
        // δ = ½e^{−x²}(erfcx(x) − erfcx(x + h)).
        let (ex_lo, ex_hi) = normal::erfcx_bounds(x);
        let d = if up {
            sub_up(ex_hi, ey_lo)
        } else {
            sub_down(ex_lo, ey_hi).max(0.0)
        };
        keep(half_of(times_e(d)));
    } else {
        // δ = ½erfc(x) − ½e^{−x²}erfcx(x + h); ½erfc(x) ≥ ½ here.
        let (c_lo, c_hi) = normal::erfc_bounds(x);
        let v = if up {
            let t2 = mul_down(mul_down(rounding::exp_down(-mul_up(x, x)), ey_lo), 0.5);
            sub_up(mul_up(c_hi, 0.5), t2)
        } else {
            let t2 = mul_up(mul_up(rounding::exp_up(-mul_down(x, x)), ey_hi), 0.5);
            sub_down(mul_down(c_lo, 0.5), t2)
        };
        keep(v);
    }
    // Quadrature bracket of D = ∫ₓ^{x+h} g where it is tight (h small against g's scale).
    let m = x.abs() + h;
    if h * (4.0 + 4.0 * m) <= 1.0 {
        if let Some(d) = quad_bounds(x, h, m, up) {
            keep(half_of(times_e(d)));
        }
    }
    best
}

/// g(s) = −erfcx'(s) = 2/√π − 2s·erfcx(s) > 0, as a bracket at the exact s.
fn g_bounds(s: f64) -> (f64, f64) {
    use rounding::{mul_down, mul_up, sub_down, sub_up};
    const TWO_OVER_SQRT_PI: (f64, f64) = (
        std::f64::consts::FRAC_2_SQRT_PI.next_down(),
        std::f64::consts::FRAC_2_SQRT_PI.next_up(),
    );
    let (e_lo, e_hi) = normal::erfcx_bounds(s);
    // 2s·erfcx(s): its bracket depends on the sign of s.
    let (p_lo, p_hi) = if s >= 0.0 {
        (mul_down(2.0 * s, e_lo), mul_up(2.0 * s, e_hi))
    } else {
        (mul_down(2.0 * s, e_hi), mul_up(2.0 * s, e_lo))
    };
    (
        sub_down(TWO_OVER_SQRT_PI.0, p_hi).max(0.0),
        sub_up(TWO_OVER_SQRT_PI.1, p_lo),
    )
}

/// Nodes of the two-point Gauss–Legendre rule on [0, 1]: ½ ∓ 1/(2√3).
const GAUSS2: (f64, f64) = (0.211_324_865_405_187_1, 0.788_675_134_594_812_9);

/// A directed bound on D = ∫ₓ^{x+h} g (upper: Simpson; lower: two-point Gauss–Legendre), with the
/// rounding of the nodes charged at |g'| ≤ 4(1 + |s|)·g over |s| ≤ `m`. `None` if g's bracket is
/// not useful (g's own cancellation at large s).
fn quad_bounds(x: f64, h: f64, m: f64, up: bool) -> Option<f64> {
    // Node displacement ≤ ν = 4U(|x| + h) + 2·2⁻¹⁰⁷⁴ (a product and a sum, and the constant's own
    // rounding). With K = 4(1 + m) ≥ |g'/g| on the interval, a displacement ν changes g by at most
    // ν·K·max g over the nodes' reach, and max g ≤ g(node)·e^{K(h + 2ν)} (the caller ensures K·h ≤ 1).
    let nu = rounding::ARITH4_REL * m + 2.0 * TINY;
    let k = 4.0 * (1.0 + m);
    let reach = rounding::exp_up(rounding::mul_up(k, rounding::add_up(h, 2.0 * nu)));
    let node_rel = rounding::mul_up(rounding::mul_up(k, nu), reach);
    let node = |c: f64| x + c * h;
    let g_at = |s: f64| -> (f64, f64) {
        let (lo, hi) = g_bounds(s);
        (
            rounding::down(lo, node_rel).max(0.0),
            rounding::up(hi, node_rel),
        )
    };
    if up {
        let (_, g0) = g_at(x);
        let (_, g1) = g_at(node(0.5));
        let (_, g2) = g_at(x + h);
        let s = rounding::add_up(rounding::add_up(g0, rounding::mul_up(4.0, g1)), g2);
        Some(rounding::mul_up(rounding::div_up(h, 6.0), s))
    } else {
        let (g0, _) = g_at(node(GAUSS2.0));
        let (g1, _) = g_at(node(GAUSS2.1));
        let s = rounding::add_down(g0, g1);
        if s <= 0.0 {
            return None;
        }
        Some(rounding::mul_down(rounding::mul_down(h, 0.5), s))
    }
}

/// The smallest ε ≥ 0 with δ_μ(ε) ≤ δ: the (ε, δ)-DP guarantee implied by μ-GDP at this δ.
///
/// Returns +∞ when δ = 0 and μ > 0 (a Gaussian mechanism is not (ε, 0)-DP for any finite ε), when
/// μ = +∞, and when the root exceeds f64::MAX (μ ≳ 1.9e154); 0 when δ ≥ δ_μ(0).
///
/// # Formula
/// ```text
/// ε(δ) = min{ε ≥ 0 : δ_μ(ε) ≤ δ}                           DRS22 Cor. 1, inverted
/// ```
/// # Soundness
/// The upper end of [`epsilon_bounds`].
///
/// ```
/// use privacy_ledger::accountant::gdp::epsilon_for_delta;
/// let e = epsilon_for_delta(1.0, 1e-5);
/// assert!(e >= 4.37717809568 && e < 4.37717809568 * (1.0 + 1e-9));
/// assert_eq!(epsilon_for_delta(1e200, 1e-5), f64::INFINITY);
/// ```
pub fn epsilon_for_delta(mu: f64, delta: f64) -> f64 {
    epsilon_bounds(mu, delta).1
}

/// A bracket [lower, upper] around the exact root of δ_μ(ε) = δ.
///
/// # Soundness
/// `upper` is the end of a bisection on the widened δ̂⁺(ε) ≥ δ_μ(ε) where δ̂⁺ ≤ δ holds, so
/// δ_μ(upper) ≤ δ: never below the root. `lower` is the end of a bisection on δ̂⁻ ≤ δ_μ where
/// δ̂⁻ > δ, so it is never above the root. The bisection halves the set of doubles between its ends
/// (so it reaches any magnitude, 1e-300 or 1e307, in ≤ 64 steps) down to a relative width of 2⁻⁵⁰.
/// The search starts from ε = μ·isf(δ) + μ²/2, where δ_μ(ε) ≤ Φ(−isf(δ)) = δ; if that exceeds
/// f64::MAX, or δ̂⁺(f64::MAX) > δ, `upper` is +∞ (and `lower` f64::MAX or the bisection's end).
pub fn epsilon_bounds(mu: f64, delta: f64) -> (f64, f64) {
    if mu.is_nan() || delta.is_nan() {
        return (0.0, f64::INFINITY);
    }
    if mu <= 0.0 || delta >= 1.0 {
        return (0.0, 0.0);
    }
    if delta <= 0.0 || mu == f64::INFINITY {
        return (f64::INFINITY, f64::INFINITY);
    }
    let ok_hi = |e: f64| delta_dir(mu, e, true) <= delta;
    let ok_lo = |e: f64| delta_dir(mu, e, false) <= delta;
    let upper = if ok_hi(0.0) {
        0.0
    } else {
        // ε₀ = μ·z + μ²/2 with z ≥ isf(δ): δ_μ(ε₀) ≤ δ in exact arithmetic.
        let z = normal::isf_bounds(delta).1;
        let half_sq = rounding::mul_up(rounding::mul_up(mu, mu), 0.5);
        let mut hi = rounding::add_up(rounding::mul_up(mu, z), half_sq).clamp(TINY, f64::MAX);
        while !ok_hi(hi) && hi < f64::MAX {
            hi = rounding::mul_up(hi, 2.0).min(f64::MAX);
        }
        if ok_hi(hi) {
            bisect_bits(0.0, hi, ok_hi).1
        } else {
            f64::INFINITY
        }
    };
    let lower = if ok_lo(0.0) {
        0.0
    } else {
        let top = upper.min(f64::MAX);
        if ok_lo(top) {
            bisect_bits(0.0, top, ok_lo).0
        } else {
            top
        }
    };
    (lower.min(upper), upper)
}

/// Bisection over the doubles in [lo, hi] (0 ≤ lo < hi < ∞) for the boundary of a predicate false at
/// `lo` and true at `hi`: each step halves the count of doubles between the ends (the bit patterns of
/// non-negative doubles are ordered like their values), so any magnitude is reached in ≤ 64 steps;
/// stops at a relative width of 2⁻⁵⁰. Returns the final (lo, hi).
fn bisect_bits(mut lo: f64, mut hi: f64, ok: impl Fn(f64) -> bool) -> (f64, f64) {
    debug_assert!(0.0 <= lo && lo < hi && hi.is_finite());
    for _ in 0..80 {
        if hi - lo <= hi * 2f64.powi(-50) {
            break;
        }
        let (a, b) = (lo.to_bits(), hi.to_bits());
        let mid = f64::from_bits(a + (b - a) / 2);
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

/// μ of a composition of μᵢ-GDP mechanisms (each counted `countᵢ` times), rounded up.
///
/// # Formula
/// ```text
/// G_μ₁ ⊗ … ⊗ G_μₙ = G_μ,  μ = √(Σ μᵢ²)                    DRS22 Cor. 2
/// ```
/// # Errors
/// A +∞ term gives +∞ (a mechanism that reveals its input stays revealing under composition).
///
/// # Panics
/// If a term is NaN (no validated event carries one).
///
/// # Soundness
/// [`super::rounding::SumOfSquares`]: the squares are summed with a power-of-two scale and an exact
/// error bound, and the root is the smallest double ≥ the exact one (+∞ only beyond f64::MAX).
///
/// ```
/// use privacy_ledger::accountant::gdp::compose;
/// assert_eq!(compose([(0.3, 1), (0.4, 1)]), 0.5000000000000001); // 0.3² + 0.4² > 0.25 in binary
/// assert_eq!(compose([(1e200, 4)]), 2e200);
/// ```
pub fn compose(mus: impl IntoIterator<Item = (f64, u64)>) -> f64 {
    let mut acc = rounding::SumOfSquares::default();
    for (mu, count) in mus {
        assert!(!mu.is_nan(), "gdp::compose: μ is NaN");
        if mu.is_infinite() && count > 0 {
            return f64::INFINITY;
        }
        acc.add(mu, count);
    }
    acc.sqrt_up()
}

/// μ for groups of size k, rounded up: a μ-GDP mechanism is kμ-GDP for groups of k individuals.
///
/// # Formula
/// ```text
/// 1 − (1 − G_μ)^{∘k} = G_{kμ}                              DRS22 Thm. 3
/// ```
/// # Soundness
/// k is converted to a double rounded up and the product is rounded up (to +∞ beyond f64::MAX).
///
/// ```
/// use privacy_ledger::accountant::gdp::group;
/// assert_eq!(group(0.1, 3), 0.30000000000000004);
/// assert_eq!(group(1e308, 2), f64::INFINITY);
/// ```
pub fn group(mu: f64, k: u64) -> f64 {
    if mu.is_nan() {
        return f64::INFINITY;
    }
    if k == 0 || mu <= 0.0 {
        return 0.0;
    }
    let mut kf = k as f64;
    if (kf as u64) < k {
        kf = kf.next_up();
    }
    rounding::mul_up(mu, kf)
}

/// The δ part of what a G_μ ⊗ f_{0,δ} guarantee gives groups of k records, rounded up: the group's
/// trade-off is at least G_{kμ}(α) − δ_k, i.e. its privacy profile is at most δ_k + δ_{kμ}(ε)
/// (δ_{kμ} the GDP profile of [`delta_of_epsilon`]), with
///
/// # Formula
/// ```text
/// δ_1 = δ,   δ_j = δ + Φ(Φ⁻¹(δ_{j−1}) + μ)
/// ```
/// Derivation (Dong, Roth & Su, "Gaussian differential privacy", Thm 2.14: an f-DP mechanism is
/// [1 − (1 − f)^{∘k}]-DP for groups of k). Write h = 1 − f for f = G_μ ⊗ f_{0,δ}, i.e.
/// h(α) = δ + (1 − δ)·g(α/(1 − δ)) with g = 1 − G_μ, g(x) = Φ(Φ⁻¹(x) + μ). g is concave with
/// g(0) = 0, so (1 − δ)·g(x/(1 − δ)) ≤ g(x) and g is subadditive; hence h ≤ δ + g, and by induction
/// (h and g increasing) h^{∘k}(α) ≤ δ + g(δ_{k−1} + g^{∘(k−1)}(α)) ≤ δ_k + g^{∘k}(α), where
/// g^{∘k} = 1 − G_{kμ}. For two records δ_2 is h^{∘2}(0), the group's true δ at α = 0, up to a
/// relative O(δ): for μ = 1, δ = 1e-10 it is 4.14e-8, not 2e-10.
///
/// # Soundness
/// Each step is increasing in δ_{j−1}, so upper bounds propagate: Φ⁻¹ from the lower end of
/// [`normal::isf_bounds`] (Φ⁻¹(p) = −isf(p)), the sum rounded up, Φ from the upper end of
/// [`normal::cdf_bounds`], the addition of δ rounded up; capped at 1.
///
/// ```
/// use privacy_ledger::accountant::gdp::group_delta;
/// let d2 = group_delta(1.0, 1e-10, 2);
/// assert!(d2 > 4.1e-8 && d2 < 4.2e-8);
/// assert_eq!(group_delta(1.0, 1e-10, 1), 1e-10);
/// assert_eq!(group_delta(0.5, 0.0, 5), 0.0);
/// ```
pub fn group_delta(mu: f64, delta: f64, k: u64) -> f64 {
    if mu.is_nan() || delta.is_nan() || mu == f64::INFINITY {
        return 1.0;
    }
    if delta <= 0.0 {
        // h = g: the group curve is G_{kμ} exactly.
        return 0.0;
    }
    let mut dk = delta.min(1.0);
    for _ in 1..k {
        if dk >= 1.0 {
            return 1.0;
        }
        let quantile_up = -normal::isf_bounds(dk).0;
        let x = rounding::add_up(quantile_up, mu.max(0.0));
        let step = normal::cdf_bounds(x).1;
        dk = rounding::add_up(delta, step).min(1.0);
    }
    dk
}

/// √(π/2) rounded up (1.2533141373155002512…).
const SQRT_PI_OVER_2_UP: f64 = 1.253_314_137_315_500_4;

/// The μ that any ε-DP mechanism is guaranteed, rounded up: μ = 2Φ⁻¹(e^ε/(1+e^ε)).
///
/// Tight at α = 1/(1+e^ε) (randomized response attains it) but very conservative for small α.
///
/// # Formula
/// ```text
/// μ = 2Φ⁻¹(e^ε/(1+e^ε)) = 2·isf(1/(1+e^ε))                 GKKHBH Prop. 6.1
///   = 2√2·erf⁻¹(tanh(ε/2))                                   (no cancellation near ε = 0)
/// ```
/// # Errors
/// None: 0 for ε ≤ 0, +∞ for ε = +∞ (or NaN).
///
/// # Soundness
/// ε ≤ 1e-100: μ = √(π/2)·ε·(1 − O(ε²)), so √(π/2)·ε rounded up (plus the subnormal slack) is above
/// it. ε ≤ 2: tanh (≤ 2U, measured), statrs' erf⁻¹ (≤ 2.7U measured for arguments ≥ 1e-300; its
/// condition number is ≤ 1.7 here) and the products: 32U allowed. Beyond: ln p = −ε − ln(1 + e^{−ε})
/// is rounded down (p is smaller, so isf larger) and [`normal::isf_of_log_up`] certifies an upper
/// bound on isf(e^{ln p}), which is never formed when it underflows (ε > 700: μ ≈ 2√(2ε), finite).
///
/// ```
/// use privacy_ledger::accountant::gdp::from_pure_dp;
/// assert!((from_pure_dp(1.0) - 1.232035).abs() < 1e-6);
/// assert!(from_pure_dp(1e6).is_finite());
/// ```
pub fn from_pure_dp(eps: f64) -> f64 {
    if eps.is_nan() || eps == f64::INFINITY {
        return f64::INFINITY;
    }
    if eps <= 0.0 {
        return 0.0;
    }
    if eps <= 1e-100 {
        return rounding::up(rounding::mul_up(eps, SQRT_PI_OVER_2_UP), PURE_DP_SMALL_REL);
    }
    if eps <= 2.0 {
        // e^ε/(1+e^ε) = ½ + ½tanh(ε/2), so μ = 2Φ⁻¹(½ + t/2) = 2√2·erf⁻¹(t) with t = tanh(ε/2).
        let t = (eps / 2.0).tanh();
        let v = 2.0 * std::f64::consts::SQRT_2 * statrs::function::erf::erf_inv(t);
        return rounding::up(v, PURE_DP_REL);
    }
    // ln p = −ε − ln(1 + e^{−ε}), rounded down.
    let l1p = rounding::up((-eps).exp().ln_1p(), 2.0 * rounding::LIBM_REL);
    let ln_p = rounding::sub_down(-eps, l1p);
    rounding::mul_up(2.0, normal::isf_of_log_up(ln_p))
}

/// The largest μ such that μ-GDP implies (ε, δ)-DP, rounded down: the root of δ_μ(ε) = δ in μ.
///
/// This translates a legacy (ε, δ) target into a μ budget (GKKHBH Table 3, "suggested
/// replacements"). It is *not* a conversion of an (ε, δ)-DP mechanism into GDP: with δ > 0 no finite
/// μ holds for every (ε, δ)-DP mechanism (GKKHBH Prop. 6.2).
///
/// # Formula
/// ```text
/// μ = max{μ ≥ 0 : δ_μ(ε) ≤ δ}                              GKKHBH §5, Table 3
/// ```
/// # Errors
/// None: 0 for δ ≤ 0, +∞ for δ ≥ 1 or ε = +∞.
///
/// # Soundness
/// Bisection (over the doubles in [0, f64::MAX]) on the widened δ̂⁺: the returned μ satisfies
/// δ_μ(ε) ≤ δ̂⁺ ≤ δ, so μ-GDP at this μ really implies (ε, δ)-DP; never above the exact root.
///
/// ```
/// use privacy_ledger::accountant::gdp::for_epsilon_delta_target;
/// let mu = for_epsilon_delta_target(1.0, 1e-5);
/// assert!(mu <= 0.2681 && mu > 0.268);
/// ```
pub fn for_epsilon_delta_target(eps: f64, delta: f64) -> f64 {
    if eps.is_nan() || delta.is_nan() || delta <= 0.0 {
        return 0.0;
    }
    if delta >= 1.0 || eps == f64::INFINITY {
        return f64::INFINITY;
    }
    let ok = |mu: f64| delta_dir(mu, eps, true) <= delta;
    if ok(f64::MAX) {
        return f64::MAX;
    }
    bisect_bits(0.0, f64::MAX, |mu| !ok(mu)).0
}

/// Below this x (= −z or z − μ), Φ(x) is under 1e-300 and [`slack_quantile_lower`] uses the Mills
/// ratio bound instead of forming Φ(x).
const X_SLACK_TAIL: f64 = -37.0;

/// The slack s with the bounds [`slack_quantile_lower`] needs: 1 − s rounded both ways and
/// c ≥ −ln(1 − s).
#[derive(Clone, Copy)]
struct Slack {
    s: f64,
    keep_lo: f64,
    keep_hi: f64,
    c_hi: f64,
}

/// A lower bound on T(x) = isf(Φ(x)/(1 − s)) = −Φ⁻¹(Φ(x)/(1 − s)) at the exact x; −∞ when
/// Φ(x)/(1 − s) may reach 1 (no constraint). T is decreasing in x.
///
/// - |x| ≤ 1: with W = 2Φ(|x|) − 1 ([`normal::within_bounds`]), Φ(x)/(1 − s) = ½ + r where
///   2r = (sgn(x)·W + s)/(1 − s), and T = −√2·erf⁻¹(2r) ([`normal::sqrt2_erf_inv_bounds`]). No
///   cancellation: through Φ(x) ≈ ½ an absolute rounding of ~U would cost μ = 1e-8 seven digits.
/// - −37 ≤ x: Φ(x) rounded up, divided by 1 − s rounded down, isf rounded down.
/// - x < −37: T(x) = −x − Δ with Δ > 0 solving ln Φ(x + Δ) − ln Φ(x) = −ln(1 − s); by the mean
///   value theorem that difference is Δ·φ(ξ)/Φ(ξ) for some ξ ∈ (x, x + Δ), and φ(ξ)/Φ(ξ) > −ξ
///   (Gordon's inequality 1 − Φ(t) < φ(t)/t, t > 0), so Δ < c/(|x| − Δ). Δ ≤ 1 because
///   Φ(x + 1)/Φ(x) > e³⁷ > 1/(1 − s) at x < −37 (ln Φ is concave), so first Δ < c/(|x| − 1), then
///   Δ < c/(|x| − that). Tight to ~Δ/x² (< 3e-8 absolute for s ≤ 1e-3).
fn slack_quantile_lower(x: f64, sl: Slack) -> f64 {
    use rounding::{add_up, div_up, sub_down, sub_up};
    if x.abs() <= 1.0 {
        let (w_lo, w_hi) = normal::within_bounds(x.abs());
        let num = if x >= 0.0 {
            add_up(w_hi, sl.s)
        } else {
            sub_up(sl.s, w_lo)
        };
        let u = if num >= 0.0 {
            div_up(num, sl.keep_lo)
        } else {
            div_up(num, sl.keep_hi)
        };
        if u >= 1.0 {
            return f64::NEG_INFINITY;
        }
        return -normal::sqrt2_erf_inv_bounds(u).1;
    }
    if x >= X_SLACK_TAIL {
        let p = div_up(normal::cdf_bounds(x).1, sl.keep_lo);
        if p >= 1.0 {
            return f64::NEG_INFINITY;
        }
        return normal::isf_bounds(p).0;
    }
    let t = -x; // > 37
    let d1 = div_up(sl.c_hi, sub_down(t, 1.0));
    let d = div_up(sl.c_hi, sub_down(t, d1.min(1.0)));
    sub_down(t, d)
}

/// A certified lower bound on the tight μ of G_μ with a δ slack s: the smallest μ' with
/// G_μ ≥ G_μ' ⊗ f_{0,s}, i.e. (1 − s)·G_μ'(α/(1 − s)) ≤ G_μ(α) for all α.
///
/// # Formula
/// With α = Φ(−z) (any real z) the constraint at α reads μ' ≥ h(z), so
/// ```text
/// μ_s = sup_z h(z),  h(z) = isf(Φ(−z)/(1 − s)) + isf(Φ(z − μ)/(1 − s))
///                         = T(−z) + T(z − μ),   T(x) = isf(Φ(x)/(1 − s))
/// ```
/// h is symmetric about z = μ/2 and the supremum is attained there, μ_s = 2·isf(Φ(−μ/2)/(1 − s))
/// (≈ 0.0975880 for μ = 0.1, s = 1e-3), but the bound does not rely on that: it is the maximum over a
/// 65-point grid of z ∈ μ/2 ± 8 (and μ/2 itself), refined by golden-section search around the best
/// grid point. Clamped to [0, μ]: μ_s ≤ μ, and μ_s ≤ 0 means μ' = 0 already satisfies the constraint.
///
/// # Soundness
/// Every h(z), with both T's rounded down ([`slack_quantile_lower`]; z − μ rounded up, as T
/// decreases) and their sum rounded down, is a lower bound on μ_s, so the maximum over any set of z
/// is one. At s = 0 the result is μ itself (h ≡ μ). μ_s is increasing in μ, so a lower bound on the
/// mechanism's μ may be passed.
///
/// # Citations
/// G ⊗ f_{0,s}(α) = (1 − s)·G(α/(1 − s)) and μ-GDP up to a δ slack: GKKHBH ("(ε,δ) considered
/// harmful", the μ fit with δ slack); the tensor product and f_{0,δ}: DRS22 §2–3.
///
/// ```
/// use privacy_ledger::accountant::gdp::slack_mu_lower;
/// let lo = slack_mu_lower(0.1, 1e-3);
/// assert!(lo <= 0.097_587_979_903_434_12 && lo > 0.097_587_979_9);
/// ```
pub fn slack_mu_lower(mu: f64, slack: f64) -> f64 {
    if mu.is_nan() || slack.is_nan() || mu <= 0.0 || slack >= 1.0 {
        return 0.0;
    }
    if slack <= 0.0 || mu == f64::INFINITY {
        return mu;
    }
    let sl = Slack {
        s: slack,
        keep_lo: rounding::sub_down(1.0, slack),
        keep_hi: rounding::sub_up(1.0, slack),
        c_hi: -rounding::down((-slack).ln_1p(), rounding::LIBM_REL),
    };
    let h = |z: f64| -> f64 {
        let t1 = slack_quantile_lower(-z, sl);
        let t2 = slack_quantile_lower(rounding::sub_up(z, mu), sl);
        let v = rounding::add_down(t1, t2);
        if v.is_nan() {
            f64::NEG_INFINITY
        } else {
            v
        }
    };
    let centre = mu * 0.5;
    const HALF_WIDTH: f64 = 8.0;
    const GRID: i32 = 32;
    let step = HALF_WIDTH / GRID as f64;
    let z_at = |i: i32| centre + step * i as f64;
    let mut best = (h(centre), centre);
    let mut best_i = 0;
    for i in -GRID..=GRID {
        let v = h(z_at(i));
        if v > best.0 {
            best = (v, z_at(i));
            best_i = i;
        }
    }
    // Golden-section refinement on the neighbouring grid cells (every evaluated point counts).
    let refined = golden_max(
        h,
        z_at(best_i - 1),
        z_at(best_i + 1),
        80,
        1e-12 * (1.0 + centre.abs()),
    );
    if refined.0 > best.0 {
        best = refined;
    }
    best.0.clamp(0.0, mu)
}

/// Golden-section search for the maximum of `f` on [a, b]: at most `iters` steps, stopping once the
/// bracket is narrower than `tol`; returns the best (value, point) *evaluated*, so when each value
/// is a valid bound (as in the μ lower bounds) so is the result, whether or not `f` is unimodal.
pub(crate) fn golden_max(
    f: impl Fn(f64) -> f64,
    mut a: f64,
    mut b: f64,
    iters: usize,
    tol: f64,
) -> (f64, f64) {
    let r = 0.618_033_988_749_894_8;
    let mut c = b - r * (b - a);
    let mut d = a + r * (b - a);
    let (mut fc, mut fd) = (f(c), f(d));
    let mut best = if fc >= fd { (fc, c) } else { (fd, d) };
    for _ in 0..iters {
        if (b - a).abs() <= tol {
            break;
        }
        if fc >= fd {
            b = d;
            d = c;
            fd = fc;
            c = b - r * (b - a);
            fc = f(c);
            if fc > best.0 {
                best = (fc, c);
            }
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + r * (b - a);
            fd = f(d);
            if fd > best.0 {
                best = (fd, d);
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composition_adds_squares() {
        // DRS22 Cor. 2: (0.3, 0.4) → 0.5 (the doubles 0.3, 0.4 square to a hair above 0.25).
        let mu = compose([(0.3, 1), (0.4, 1)]);
        assert!(mu >= 0.5 && mu < 0.5 * (1.0 + 1e-14), "{mu}");
        // 10 000 copies of 0.01 → 1.
        let mu = compose([(0.01, 10_000)]);
        assert!((mu - 1.0).abs() < 1e-14, "{mu}");
        assert_eq!(compose([(1.4e154, 1)]), 1.4e154);
        assert_eq!(compose([(1e-200, 1)]), 1e-200);
        assert_eq!(compose([(f64::INFINITY, 1)]), f64::INFINITY);
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
        assert_eq!(group(f64::INFINITY, 0), 0.0);
        assert_eq!(group(TINY, 1), TINY);
    }

    /// An absolute allowance for the oracle's own float composition (a few dozen operations on
    /// values in [0, 1], each within a few ulps).
    const ORACLE_TOL: f64 = 1e-13;

    /// The oracle: h^{∘k}(α) for h = 1 − (G_μ ⊗ f_{0,δ}), composed directly in floats.
    fn h_power(mu: f64, delta: f64, k: u64, alpha: f64) -> f64 {
        let mut a = alpha;
        for _ in 0..k {
            a = if a >= 1.0 - delta {
                1.0
            } else {
                delta + (1.0 - delta) * normal::cdf(-normal::isf(a / (1.0 - delta)) + mu)
            };
        }
        a
    }

    #[test]
    fn group_privacy_with_a_delta_part_bounds_the_exact_group_curve() {
        for (mu, delta) in [(1.0, 1e-10), (0.5, 1e-6), (2.0, 1e-12), (0.1, 1e-3)] {
            for k in [1_u64, 2, 3, 5, 10] {
                let dk = group_delta(mu, delta, k);
                let gk = group(mu, k);
                // Thm 2.14's curve 1 − h^{∘k} lies above G_{kμ} − δ_k everywhere.
                for i in 0..=400 {
                    let alpha = if i == 0 {
                        0.0
                    } else {
                        10f64.powf(-12.0 * (1.0 - i as f64 / 400.0))
                    };
                    let truth = 1.0 - h_power(mu, delta, k, alpha);
                    let claim = (normal::cdf(normal::isf(alpha) - gk) - dk).max(0.0);
                    assert!(
                        claim <= truth + ORACLE_TOL,
                        "mu {mu} delta {delta} k {k} alpha {alpha}: claim {claim} > truth {truth}"
                    );
                }
                // At α = 0 it is the group's true δ up to a relative O(δ) (the (1 − δ) factors
                // dropped), for two records; beyond, the subadditivity step loosens it.
                let at0 = h_power(mu, delta, k, 0.0);
                assert!(dk >= at0 - ORACLE_TOL, "{mu} {delta} {k}: {dk} < {at0}");
                if k <= 2 {
                    assert!(
                        dk <= at0 * (1.0 + 100.0 * delta) + ORACLE_TOL,
                        "{mu} {delta} {k}: {dk} vs {at0}"
                    );
                }
            }
        }
        // μ = 1, δ = 1e-10, two records: 4.14e-8, not 2e-10. mpmath at 40 digits:
        // δ + Φ(Φ⁻¹(δ) + 1) = 4.140322884369624e-8 (the exact h∘h(0) is 4.140322884307786e-8).
        let d2 = group_delta(1.0, 1e-10, 2);
        let want = 4.140322884369624e-8;
        assert!(d2 >= want && d2 <= want * (1.0 + 1e-12), "{d2}");
    }

    #[test]
    fn nothing_is_nan_at_the_extremes() {
        let mus = [
            0.0,
            TINY,
            1e-300,
            1e-200,
            1e-20,
            1e-8,
            0.2263,
            1.0,
            38.0,
            40.0,
            1e3,
            1e150,
            1e154,
            1.4e154,
            1e200,
            f64::MAX,
            f64::INFINITY,
        ];
        let xs = [0.0, TINY, 1e-300, 1e-20, 1e-5, 0.5, 1.0];
        let epss = [0.0, TINY, 1e-300, 1e-8, 1.0, 700.0, 1e6];
        for &mu in &mus {
            for &e in &epss {
                let (lo, hi) = delta_bounds(mu, e);
                assert!(
                    lo <= hi && (0.0..=1.0).contains(&lo) && hi <= 1.0,
                    "δ {mu} {e}"
                );
                assert!(!from_pure_dp(e).is_nan() && !for_epsilon_delta_target(e, 1e-5).is_nan());
            }
            for &x in &xs {
                let (lo, hi) = epsilon_bounds(mu, x);
                assert!(lo <= hi && lo >= 0.0, "ε {mu} {x}: {lo} {hi}");
                assert!(tradeoff(mu, x) <= tradeoff_upper(mu, x), "β {mu} {x}");
                assert!(!tpr(mu, x).is_nan());
                assert!(!slack_mu_lower(mu, x.min(1e-3)).is_nan());
            }
            let (a, b) = advantage_bounds(mu);
            assert!(a <= b && !fixed_point(mu).is_nan() && !group(mu, 3).is_nan());
        }
    }
}
