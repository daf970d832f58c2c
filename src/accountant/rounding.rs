//! Directed rounding: every figure this crate reports may be loose, never optimistic.
//!
//! IEEE arithmetic rounds to nearest, so a computed δ can land a few ulps below the true δ. The
//! functions here widen a computed value by a stated relative error bound, toward *more* privacy
//! loss: δ, ε, μ, TPR and advantage go up; β (type II error) goes down. Each caller states the bound it
//! passes and why; the accuracy tests check the bound against 60-digit mpmath values.
//!
//! Two kinds of tools live here:
//!
//! - [`up`] / [`down`] widen a value computed by a library function (erfc, exp, …) by that function's
//!   measured relative error bound. A relative bound means nothing for a subnormal result (an
//!   operation there can be off by half a subnormal ulp whatever the value), so both also widen by
//!   [`SUBNORMAL_SLACK`] in absolute terms.
//! - [`add_up`], [`mul_down`], [`div_up`], … are the four basic operations rounded in a chosen
//!   direction, exactly: the result is a double on the requested side of the exact real result,
//!   within one ulp of it. They are used to form the *arguments* of those library functions (ε/μ,
//!   z − μ, …), where a half-ulp error in the wrong direction would otherwise be unaccounted for.
//!
//! # Soundness
//! The directed operations recover the sign of the rounding error exactly (the error of a sum by
//! two-sum; of a product or quotient by a fused multiply-add residual) wherever that residual is
//! representable; where it may not be (results near the underflow threshold) they step one ulp
//! unconditionally. Overflow rounds up to +∞ and down to ±`f64::MAX`, which is the right side.

/// Unit roundoff of f64 (2⁻⁵³).
pub const U: f64 = f64::EPSILON / 2.0;

/// The smallest positive double, 2⁻¹⁰⁷⁴.
pub const TINY: f64 = f64::from_bits(1);

/// Absolute widening applied by [`up`] and [`down`]: two subnormal ulps. A result in the subnormal
/// range carries an absolute error of up to half a subnormal ulp per operation that produced it
/// (e.g. the final ×½ of Φ = ½ erfc), which no relative bound covers; together with the one-ulp step
/// [`up`] always takes this covers up to six such operations. Above 2⁻¹⁰²⁰ it changes nothing.
pub const SUBNORMAL_SLACK: f64 = 2.0 * TINY;

/// Relative error bound of the platform's `exp`, `ln`, `ln_1p`, `exp_m1` and `tanh` at an exact
/// argument: measured ≤ 1.1U (exp, ln, ln_1p, exp_m1) and ≤ 2.0U (tanh) against mpmath on 6 000
/// log-spaced points each (glibc documents ≤ 2 ulp for all of them); 8U allows every one of them 4 ulp.
pub const LIBM_REL: f64 = 8.0 * U;

// Named widenings for chains of operations. Callers pass these to [`up`] / [`down`] /
// [`prob_up`] / [`prob_down`] (which set the direction) or add `k·U·|magnitude|` terms built from
// them to an absolute error bound; the call site's comment says which operations it covers.
//
// The arithmetic ones rest on Higham, *Accuracy and Stability of Numerical Algorithms* (2nd ed.),
// Lemma 3.1: a value formed by n correctly rounded operations (each exact result times 1 + δᵢ,
// |δᵢ| ≤ U, §2.2) differs from the exact one by a factor 1 + θₙ with |θₙ| ≤ γₙ = nU/(1 − nU). nU is
// γₙ to first order; the rest, γₙ − nU < 1.01·n²U², is far below the one-ulp step (more than U/2
// of the value) that `up` / `down` take beyond the widening.

/// Two correctly rounded operations (+ − × ÷ √): γ₂ to first order, 2U (Higham Lemma 3.1; see
/// above). Also used where one operation is given a 2× margin.
pub const ARITH2_REL: f64 = 2.0 * U;

/// Up to four correctly rounded operations: γ₄ to first order, 4U (Higham Lemma 3.1).
pub const ARITH4_REL: f64 = 4.0 * U;

/// Up to eight correctly rounded operations: γ₈ to first order, 8U (Higham Lemma 3.1).
pub const ARITH8_REL: f64 = 8.0 * U;

/// One ulp, relative: a normal x in [2ᵉ, 2ᵉ⁺¹) has ulp 2ᵉ⁻⁵² = 2U·2ᵉ ≤ 2U·|x|, so 2U. For a libm
/// result whose error is stated in ulps (glibc's exp and expm1 are within one), or for a value
/// that stands for a real number within one ulp of it (a grid loss j·h formed as one product).
pub const ULP_REL: f64 = 2.0 * U;

/// A short expression of one or two libm calls (exp, ln, ln_1p, exp_m1 or tanh, measured ≤ 1.1U,
/// tanh ≤ 2.0U: see [`LIBM_REL`]) and a few correctly rounded operations, of relative condition
/// ≤ 1: 4U. This is meant as the first-order sum of the *measured* libm errors and the roundings
/// (Higham Lemma 3.1), not the documented worst case ([`LIBM_REL`] alone is 8U); the call sites say
/// what they count (where the count exceeds 4U, they say so), and the accuracy tests check them
/// against mpmath.
pub const LIBM_SHORT_REL: f64 = 4.0 * U;

/// An expression of a few libm calls (measured ≤ 1.1U each, tanh ≤ 2.0U: see [`LIBM_REL`]) and a
/// few correctly rounded operations, of bounded condition: 8U, the first-order sum of the measured
/// errors with a margin, as each call site's comment counts them. Like [`LIBM_SHORT_REL`] an
/// allowance from measurement, checked by the accuracy tests, not a proved bound.
pub const LIBM_CHAIN_REL: f64 = 8.0 * U;

/// Returns a value ≥ `x·(1 + rel)` (and ≥ `x`) for finite `x`: the computed `x` widened upward by its
/// relative error bound `rel`, plus [`SUBNORMAL_SLACK`]. +∞ passes through; −∞ and NaN too (callers
/// never pass them). A NaN or infinite `rel` gives +∞: nothing is known.
pub fn up(x: f64, rel: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    if rel.is_nan() || rel == f64::INFINITY {
        return f64::INFINITY;
    }
    let widened = x + x.abs() * rel.max(0.0) + SUBNORMAL_SLACK;
    widened.next_up()
}

/// Returns a value ≤ `x·(1 − rel)` (and ≤ `x`) for finite `x`: the computed `x` widened downward, minus
/// [`SUBNORMAL_SLACK`]. A NaN or infinite `rel` gives −∞.
pub fn down(x: f64, rel: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    if rel.is_nan() || rel == f64::INFINITY {
        return f64::NEG_INFINITY;
    }
    let widened = x - x.abs() * rel.max(0.0) - SUBNORMAL_SLACK;
    widened.next_down()
}

/// [`up`] for a probability: the result is clamped to [0, 1].
pub fn prob_up(x: f64, rel: f64) -> f64 {
    up(x, rel).clamp(0.0, 1.0)
}

/// [`down`] for a probability: the result is clamped to [0, 1].
pub fn prob_down(x: f64, rel: f64) -> f64 {
    down(x, rel).clamp(0.0, 1.0)
}

/// Knuth's two-sum: `s = fl(a + b)` and the exact error `e = (a + b) − s` (exact also for subnormal
/// operands; meaningless when `s` overflows).
pub fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    let e = (a - (s - bb)) + (b - bb);
    (s, e)
}

/// Below this magnitude a product or quotient may have lost bits to underflow, so its fused
/// multiply-add residual is no longer exact (the residual of operands whose product is ≥ 2⁻⁹⁶⁸ is a
/// multiple of 2⁻¹⁰⁷⁴ or coarser).
const RESIDUAL_EXACT_ABOVE: f64 = f64::from_bits(((1023 - 968) as u64) << 52); // 2⁻⁹⁶⁸

/// Below this magnitude a quotient's remainder may underflow (2⁻⁵⁰⁰).
const QUOTIENT_EXACT_ABOVE: f64 = f64::from_bits(((1023 - 500) as u64) << 52);

/// Whether a finite sum overflowed; returns the directed result if so.
fn overflowed(s: f64, a: f64, b: f64, up: bool) -> Option<f64> {
    if s.is_finite() {
        return None;
    }
    if a.is_infinite() || b.is_infinite() || s.is_nan() {
        return Some(s);
    }
    Some(match (s > 0.0, up) {
        (true, true) => f64::INFINITY,
        (true, false) => f64::MAX,
        (false, true) => -f64::MAX,
        (false, false) => f64::NEG_INFINITY,
    })
}

/// `a + b` rounded toward +∞.
pub fn add_up(a: f64, b: f64) -> f64 {
    let (s, e) = two_sum(a, b);
    if let Some(r) = overflowed(s, a, b, true) {
        return r;
    }
    if e > 0.0 {
        s.next_up()
    } else {
        s
    }
}

/// `a + b` rounded toward −∞.
pub fn add_down(a: f64, b: f64) -> f64 {
    let (s, e) = two_sum(a, b);
    if let Some(r) = overflowed(s, a, b, false) {
        return r;
    }
    if e < 0.0 {
        s.next_down()
    } else {
        s
    }
}

/// `a − b` rounded toward +∞.
pub fn sub_up(a: f64, b: f64) -> f64 {
    add_up(a, -b)
}

/// `a − b` rounded toward −∞.
pub fn sub_down(a: f64, b: f64) -> f64 {
    add_down(a, -b)
}

/// x·2ⁿ rounded toward +∞ (`up`) or −∞.
fn ldexp_dir(x: f64, n: i32, up: bool) -> f64 {
    if up {
        ldexp_up(x, n)
    } else {
        ldexp_down(x, n)
    }
}

/// `a·b` rounded toward +∞ (`up`) or −∞.
#[inline]
fn mul_dir(a: f64, b: f64, up: bool) -> f64 {
    let p = a * b;
    // The common case first: a finite product at or above 2⁻⁹⁶⁸, whose fused multiply-add
    // residual is exact (the branches below change nothing there).
    if (RESIDUAL_EXACT_ABOVE..f64::INFINITY).contains(&p.abs()) {
        let e = a.mul_add(b, -p);
        return if up && e > 0.0 {
            p.next_up()
        } else if !up && e < 0.0 {
            p.next_down()
        } else {
            p
        };
    }
    mul_dir_rare(a, b, p, up)
}

/// [`mul_dir`] for a zero, non-finite or tiny product `p = fl(a·b)`.
fn mul_dir_rare(a: f64, b: f64, p: f64, up: bool) -> f64 {
    if a == 0.0 || b == 0.0 || p.is_nan() {
        return p;
    }
    if let Some(r) = overflowed(p, a, b, up) {
        return r;
    }
    if p.abs() >= f64::MIN_POSITIVE && (is_pow2(a) || is_pow2(b)) {
        return p; // a power-of-two factor and a normal result: exact (no residual needed)
    }
    if p.abs() < RESIDUAL_EXACT_ABOVE {
        // The residual may have underflowed: scale the smaller factor (< 2⁻⁴⁸⁴, so no overflow) up
        // by 2⁴⁰⁰, round that product in the asked direction, and scale back in the same direction.
        return if a.abs() <= b.abs() {
            ldexp_dir(mul_dir(ldexp(a, 400), b, up), -400, up)
        } else {
            ldexp_dir(mul_dir(a, ldexp(b, 400), up), -400, up)
        };
    }
    let e = a.mul_add(b, -p); // exact: a·b − p
    match (e > 0.0, e < 0.0, up) {
        (true, _, true) => p.next_up(),
        (_, true, false) => p.next_down(),
        _ => p,
    }
}

/// Whether |x| is a power of two (a normal double with an all-zero fraction).
fn is_pow2(x: f64) -> bool {
    x.is_normal() && x.to_bits() & ((1u64 << 52) - 1) == 0
}

/// `a·b` rounded toward +∞.
pub fn mul_up(a: f64, b: f64) -> f64 {
    mul_dir(a, b, true)
}

/// `a·b` rounded toward −∞.
pub fn mul_down(a: f64, b: f64) -> f64 {
    mul_dir(a, b, false)
}

/// `a/b` rounded toward +∞ (`up`) or −∞; `b` must be nonzero.
#[inline]
fn div_dir(a: f64, b: f64, up: bool) -> f64 {
    let q = a / b;
    // The common case first: a finite quotient ≥ 2⁻⁵⁰⁰ of a dividend ≥ 2⁻⁹⁶⁸ and a finite
    // divisor, whose remainder is exact (the branches below change nothing there).
    if (QUOTIENT_EXACT_ABOVE..f64::INFINITY).contains(&q.abs())
        && a.abs() >= RESIDUAL_EXACT_ABOVE
        && b.is_finite()
    {
        // r = a − q·b exactly; the exact quotient is above q iff r/b > 0.
        let r = -(q.mul_add(b, -a));
        let above = (r > 0.0) == (b > 0.0) && r != 0.0;
        return if up && above {
            q.next_up()
        } else if !up && r != 0.0 && !above {
            q.next_down()
        } else {
            q
        };
    }
    div_dir_rare(a, b, q, up)
}

/// [`div_dir`] outside its common case, with `q = fl(a/b)`.
fn div_dir_rare(a: f64, b: f64, q: f64, up: bool) -> f64 {
    if a == 0.0 || q.is_nan() || b.is_infinite() {
        return q; // exact (callers never divide by an infinity)
    }
    if let Some(r) = overflowed(q, a, 1.0, up) {
        return r;
    }
    if q.abs() < QUOTIENT_EXACT_ABOVE {
        // A tiny quotient (its remainder may underflow): scale the dividend up by 2⁴⁰⁰ (no overflow:
        // |a| < 2⁻⁵⁰⁰·|b| ≤ 2⁵²⁴) and the directed quotient back down.
        return ldexp_dir(div_dir(ldexp(a, 400), b, up), -400, up);
    }
    if a.abs() < RESIDUAL_EXACT_ABOVE {
        // A tiny dividend (then |b| < 2⁻⁴⁶⁸): scale both by 2⁴⁰⁰, which leaves the quotient unchanged.
        return div_dir(ldexp(a, 400), ldexp(b, 400), up);
    }
    // r = a − q·b exactly (the remainder of a correctly rounded quotient is representable); the
    // exact quotient is above q iff r/b > 0.
    let r = -(q.mul_add(b, -a));
    let above = (r > 0.0 && b > 0.0) || (r < 0.0 && b < 0.0);
    let below = (r < 0.0 && b > 0.0) || (r > 0.0 && b < 0.0);
    if up && above {
        q.next_up()
    } else if !up && below {
        q.next_down()
    } else {
        q
    }
}

/// `a/b` rounded toward +∞ (`b ≠ 0`).
pub fn div_up(a: f64, b: f64) -> f64 {
    div_dir(a, b, true)
}

/// `a/b` rounded toward −∞ (`b ≠ 0`).
pub fn div_down(a: f64, b: f64) -> f64 {
    div_dir(a, b, false)
}

/// e^x rounded up (by [`LIBM_REL`]).
pub fn exp_up(x: f64) -> f64 {
    up(x.exp(), LIBM_REL)
}

/// e^x rounded down (by [`LIBM_REL`], never below 0).
pub fn exp_down(x: f64) -> f64 {
    down(x.exp(), LIBM_REL).max(0.0)
}

/// 2ⁿ for n ∈ [−1022, 1023], exactly.
fn pow2(n: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&n));
    f64::from_bits(((n + 1023) as u64) << 52)
}

/// x·2ⁿ, rounded to nearest with a single rounding (musl's `scalbn`).
pub fn ldexp(x: f64, n: i32) -> f64 {
    let mut y = x;
    let mut n = n;
    if n > 1023 {
        y *= pow2(1023);
        n -= 1023;
        if n > 1023 {
            y *= pow2(1023);
            n -= 1023;
            n = n.min(1023);
        }
    } else if n < -1022 {
        // 2⁻¹⁰²² · 2⁵³ keeps the intermediate normal, so only the last product rounds.
        y *= pow2(-1022) * pow2(53);
        n += 1022 - 53;
        if n < -1022 {
            y *= pow2(-1022) * pow2(53);
            n += 1022 - 53;
            n = n.max(-1022);
        }
    }
    y * pow2(n)
}

/// x·2ⁿ rounded toward +∞ (x ≥ 0 or any sign).
pub fn ldexp_up(x: f64, n: i32) -> f64 {
    let y = ldexp(x, n);
    if n >= 0 || y.is_infinite() || x == 0.0 {
        return y; // exact, or an overflow whose true value exceeds f64::MAX
    }
    // Scaling back up is exact, so the comparison tells the rounding direction.
    if ldexp(y, -n) < x {
        y.next_up()
    } else {
        y
    }
}

/// x·2ⁿ rounded toward −∞.
pub fn ldexp_down(x: f64, n: i32) -> f64 {
    let y = ldexp(x, n);
    if y.is_infinite() && x.is_finite() {
        return if y > 0.0 { f64::MAX } else { y };
    }
    if n >= 0 || x == 0.0 {
        return y;
    }
    if ldexp(y, -n) > x {
        y.next_down()
    } else {
        y
    }
}

/// (m, k) with x = m·2ᵏ and |m| ∈ [½, 1), for finite nonzero x.
pub fn frexp(x: f64) -> (f64, i32) {
    debug_assert!(x.is_finite() && x != 0.0);
    let bits = x.to_bits();
    let e = ((bits >> 52) & 0x7ff) as i32;
    if e == 0 {
        let (m, k) = frexp(x * pow2(64));
        return (m, k - 64);
    }
    let m = f64::from_bits((bits & !(0x7ffu64 << 52)) | (1022u64 << 52));
    (m, e - 1022)
}

/// The exact sign of `Σ terms` (−1, 0, +1), or `None` if it could not be decided (never observed:
/// the distillation below converges in a few passes for the short, non-overflowing lists used here).
fn exact_sign(terms: &[f64]) -> Option<i32> {
    let mut v: Vec<f64> = terms.iter().copied().filter(|&t| t != 0.0).collect();
    for _ in 0..16 {
        if v.is_empty() {
            return Some(0);
        }
        // Cascade of two-sums: Σv = s + Σ errs exactly.
        let mut s = v[0];
        let mut errs = Vec::with_capacity(v.len());
        for &t in &v[1..] {
            let (s2, e) = two_sum(s, t);
            s = s2;
            if e != 0.0 {
                errs.push(e);
            }
        }
        if !s.is_finite() {
            return None;
        }
        let bound: f64 = errs.iter().map(|e| e.abs()).sum::<f64>() * (1.0 + 1e-10);
        if errs.is_empty() || s.abs() > bound {
            return Some(if s > 0.0 {
                1
            } else if s < 0.0 {
                -1
            } else {
                0
            });
        }
        errs.push(s);
        v = errs;
    }
    None
}

/// A sum of squares Σ cᵢxᵢ² kept exactly enough that √ of it is correctly rounded in either
/// direction, for every finite xᵢ (5e-324 … 1.8e308) and counts cᵢ ≤ 2⁵³. Used for GDP composition
/// μ = √Σμᵢ² (Dong, Roth & Su, "Gaussian differential privacy", Cor. 2).
///
/// The sum is `(hi + lo ± err)·2^exp`: a double-double mantissa, a power-of-two scale exponent (so
/// μ² neither overflows at μ = 1.4e154 nor underflows at μ = 1e-200), and a rigorous bound `err` on
/// everything the double-double could not hold. Each square is split exactly (x = m·2ᵏ, m² and c·m²
/// by fused multiply-add residuals), every addition's rounding error is recovered exactly by
/// two-sum and, where it cannot be kept, its magnitude is added to `err` (rounded up). Rescaling is
/// by powers of two, exact unless a component underflows, in which case the lost part (< 2⁻¹⁰⁷⁴ in
/// the scaled units, where the sum is ≥ ¼) is added to `err`. So for a single term, or any sum the
/// double-double holds exactly, `err` is 0 and [`SumOfSquares::sqrt_up`] is the exact ⌈√⌉.
///
/// # Persistence
/// [`SumOfSquares::parts`] writes `exp = 0` (plain `hi + lo`, the format older versions read)
/// whenever the sum is representable that way, and a scaled form only for sums beyond it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SumOfSquares {
    /// Mantissa, in [½, 1) unless the sum is 0.
    hi: f64,
    /// Low part, |lo| ≤ ulp(hi)/2.
    lo: f64,
    /// Bound on |exact − (hi + lo)|, in the same scaled units; ≥ 0.
    err: f64,
    /// Scale: the sum is (hi + lo)·2^exp.
    exp: i32,
}

impl SumOfSquares {
    /// Adds `count · x²`.
    ///
    /// # Panics
    /// If `x` is not finite: a term that is not a number is a bug upstream (validated events never
    /// carry one), and folding it in would make the state unreadable.
    pub fn add(&mut self, x: f64, count: u64) {
        assert!(x.is_finite(), "sum of squares: term {x} is not finite");
        if x == 0.0 || count == 0 {
            return;
        }
        if count > 1 << 53 {
            // Split so that each part converts to a double exactly (a multiple of 2¹¹ below 2⁶⁴
            // has at most 53 significant bits).
            self.add(x, count & !0x7ff);
            self.add(x, count & 0x7ff);
            return;
        }
        let (m, k) = frexp(x.abs());
        let c = count as f64; // exact: count ≤ 2⁵³
                              // m² = sq + e1; sq·c = t + e2; e1·c = p + e3 — all exact (no underflow: m ∈ [½, 1)).
        let sq = m * m;
        let e1 = m.mul_add(m, -sq);
        let t = sq * c;
        let e2 = sq.mul_add(c, -t);
        let p = e1 * c;
        let e3 = e1.mul_add(c, -p);
        self.add_scaled(&[t, e2, p, e3], 0.0, 2 * k);
    }

    /// Adds another accumulated sum.
    pub fn merge(&mut self, other: &SumOfSquares) {
        if other.hi == 0.0 && other.err == 0.0 {
            return;
        }
        self.add_scaled(&[other.hi, other.lo], other.err, other.exp);
    }

    /// Adds `(Σ comps ± comp_err)·2^e` (components ≥ 0 in sum, the first the largest).
    fn add_scaled(&mut self, comps: &[f64], comp_err: f64, e: i32) {
        let target = if self.hi == 0.0 && self.err == 0.0 {
            e
        } else {
            self.exp.max(e)
        };
        let mut err = 0.0;
        let mine = [
            scale_into(self.hi, self.exp - target, &mut err),
            scale_into(self.lo, self.exp - target, &mut err),
        ];
        err = add_up(err, ldexp_up(self.err, self.exp - target));
        err = add_up(err, ldexp_up(comp_err, e - target));
        let theirs: Vec<f64> = comps
            .iter()
            .map(|&v| scale_into(v, e - target, &mut err))
            .collect();
        let (mut hi, r) = two_sum(mine[0], theirs[0]);
        let mut lo = mine[1];
        for v in std::iter::once(r).chain(theirs[1..].iter().copied()) {
            let (s, res) = two_sum(lo, v);
            lo = s;
            if res != 0.0 {
                err = add_up(err, res.abs());
            }
        }
        (hi, lo) = two_sum(hi, lo);
        *self = Self::normalized(hi, lo, err, target);
    }

    /// Rescales so that hi ∈ [½, 1) (exactly, up to underflow of lo, which goes into err).
    fn normalized(hi: f64, lo: f64, err: f64, exp: i32) -> Self {
        let (hi, lo) = two_sum(hi, lo);
        if hi == 0.0 {
            return SumOfSquares {
                hi: 0.0,
                lo: 0.0,
                err,
                exp: if err == 0.0 { 0 } else { exp },
            };
        }
        let (m, k) = frexp(hi);
        let mut err = ldexp_up(err, -k);
        let lo = scale_into(lo, -k, &mut err);
        SumOfSquares {
            hi: m,
            lo,
            err,
            exp: exp + k,
        }
    }

    /// The sum, rounded to nearest (0 on underflow, +∞ beyond f64::MAX).
    pub fn value(&self) -> f64 {
        ldexp(self.hi + self.lo, self.exp)
    }

    /// ⌈√(sum)⌉: the smallest double ≥ the square root of the largest value the sum may have (the
    /// exact √ when `err` is 0). +∞ only when that root exceeds f64::MAX.
    pub fn sqrt_up(&self) -> f64 {
        self.sqrt_dir(true)
    }

    /// ⌊√(sum)⌋: the largest double ≤ the square root of the smallest value the sum may have.
    pub fn sqrt_down(&self) -> f64 {
        self.sqrt_dir(false)
    }

    fn sqrt_dir(&self, up: bool) -> f64 {
        if self.hi == 0.0 {
            // Only terms that were exactly 0 (err is 0 then: a lost part sits beside a nonzero
            // hi); handled generally all the same.
            if !up || self.err == 0.0 {
                return 0.0;
            }
            let (e, k) = if self.exp.rem_euclid(2) == 0 {
                (self.err, self.exp)
            } else {
                (mul_up(self.err, 2.0), self.exp - 1)
            };
            return ldexp_up(e.sqrt().next_up(), k / 2);
        }
        // Even exponent: hi ∈ [½, 2), √ ∈ [0.7, 1.5) — no underflow in s² below.
        let (mut hi, mut lo, mut err, mut exp) = (self.hi, self.lo, self.err, self.exp);
        if exp.rem_euclid(2) != 0 {
            hi *= 2.0;
            lo *= 2.0;
            err = mul_up(err, 2.0);
            exp -= 1;
        }
        let bound = if up { err } else { -err };
        // sign(s² − (hi + lo ± err)), exactly.
        let cmp = |s: f64| -> Option<i32> {
            let p = s * s;
            let pe = s.mul_add(s, -p);
            exact_sign(&[p, pe, -hi, -lo, -bound])
        };
        let mut s = (hi + lo).sqrt();
        if up {
            // Smallest s with s² ≥ target.
            while !matches!(cmp(s), Some(0 | 1)) {
                s = s.next_up();
            }
            while matches!(cmp(s.next_down()), Some(0 | 1)) {
                s = s.next_down();
            }
            ldexp_up(s, exp / 2)
        } else {
            if exact_sign(&[hi, lo, -err]) != Some(1) {
                return 0.0;
            }
            // Largest s with s² ≤ target.
            while !matches!(cmp(s), Some(-1 | 0)) {
                s = s.next_down();
            }
            while matches!(cmp(s.next_up()), Some(-1 | 0)) {
                s = s.next_up();
            }
            ldexp_down(s, exp / 2)
        }
    }

    /// The persisted components `(hi, lo, exp, err)`: the sum is `(hi + lo ± err)·2^exp`. `exp` is 0
    /// whenever `hi`, `lo` and `err` can be written unscaled exactly (the format of versions that had
    /// no `exp`), so those versions still read every state they could represent.
    pub fn parts(&self) -> (f64, f64, i32, f64) {
        let (h, l) = (ldexp(self.hi, self.exp), ldexp(self.lo, self.exp));
        let e = ldexp_up(self.err, self.exp);
        let exact = h.is_finite()
            && l.is_finite()
            && e.is_finite()
            && ldexp(h, -self.exp) == self.hi
            && ldexp(l, -self.exp) == self.lo
            && (h == 0.0 || h.abs() >= f64::MIN_POSITIVE);
        if exact {
            (h, l, 0, e)
        } else {
            (self.hi, self.lo, self.exp, self.err)
        }
    }

    /// Rebuilds from [`SumOfSquares::parts`]. `err = None` marks a state written before the error
    /// bound was kept: its double-double had a relative error ≲ 2U (Neumaier summation), so 16U of
    /// the sum is assumed, an 8× margin (μ then widens by ≈ 8U, as those versions reported).
    /// Returns `None` for components that are not finite or a negative sum.
    pub fn from_parts(hi: f64, lo: f64, exp: i32, err: Option<f64>) -> Option<Self> {
        if !(hi.is_finite() && lo.is_finite()) || hi < 0.0 {
            return None;
        }
        let err = match err {
            Some(e) if e.is_finite() && e >= 0.0 => e,
            Some(_) => return None,
            None => mul_up(add_up(hi, lo.abs()), LEGACY_SUM_REL),
        };
        Some(Self::normalized(hi, lo, err, exp))
    }
}

/// The relative error assumed for a [`SumOfSquares`] state written without its error bound: its
/// double-double came from Neumaier summation, relative error ≲ 2U (Neumaier 1974; Higham §4.3), so
/// 16U is an 8× margin (see [`SumOfSquares::from_parts`]).
const LEGACY_SUM_REL: f64 = 16.0 * U;

/// v·2ᵈ; a part lost to underflow (≤ one subnormal ulp) is added to `err`.
fn scale_into(v: f64, d: i32, err: &mut f64) -> f64 {
    let y = ldexp(v, d);
    if d < 0 && v != 0.0 && y.abs() < f64::MIN_POSITIVE && ldexp(y, -d) != v {
        *err = add_up(*err, TINY);
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_and_down_bracket_the_value() {
        for &x in &[0.0, 1e-300, 0.3, 1.0, 7e10] {
            assert!(up(x, 1e-12) >= x * (1.0 + 1e-12));
            assert!(down(x, 1e-12) <= x * (1.0 - 1e-12));
        }
        // In the subnormal range the absolute slack dominates: 0 widens to 3 subnormal ulps.
        assert_eq!(up(0.0, 1.0), 3.0 * TINY);
        assert_eq!(down(0.0, 1.0), -3.0 * TINY);
        assert_eq!(up(0.5, f64::NAN), f64::INFINITY);
    }

    #[test]
    fn directed_operations_land_on_the_right_side() {
        // 0.1 + 0.2 = 0.30000000000000001665… exactly; the nearest double, 0.30000000000000004, is
        // above it and 0.3 below.
        assert_eq!(add_up(0.1, 0.2), 0.1 + 0.2);
        assert_eq!(add_down(0.1, 0.2), 0.3);
        // 1/3: the nearest double is below 1/3.
        assert_eq!(div_down(1.0, 3.0), 1.0 / 3.0);
        assert_eq!(div_up(1.0, 3.0), (1.0f64 / 3.0).next_up());
        // Exact results are not moved.
        assert_eq!(mul_up(0.5, 3.0), 1.5);
        assert_eq!(div_up(3.0, 2.0), 1.5);
        // Overflow: up to +∞, down to MAX; underflow: up to the smallest subnormal.
        assert_eq!(mul_up(1e200, 1e200), f64::INFINITY);
        assert_eq!(mul_down(1e200, 1e200), f64::MAX);
        assert_eq!(mul_up(1e-200, 1e-200), TINY);
        assert_eq!(mul_down(1e-200, 1e-200), 0.0);
        assert_eq!(div_up(1.0, 1e-310), f64::INFINITY);
    }

    /// A finite nonzero double as (sign, m, e) with |x| = m·2ᵉ exactly (m an integer < 2⁵³).
    fn parts(x: f64) -> (bool, u128, i32) {
        let b = x.to_bits();
        let exp = ((b >> 52) & 0x7ff) as i32;
        let frac = (b & ((1u64 << 52) - 1)) as u128;
        let (m, e) = if exp == 0 {
            (frac, -1074)
        } else {
            (frac | (1u128 << 52), exp - 1075)
        };
        (x < 0.0, m, e)
    }

    /// The sign of m₁·2^e₁ − m₂·2^e₂ (non-negative integers), exactly.
    fn cmp_scaled(m1: u128, e1: i32, m2: u128, e2: i32) -> std::cmp::Ordering {
        if m1 == 0 || m2 == 0 {
            return m1.cmp(&m2);
        }
        // Align to the smaller exponent; a shift that would overflow settles the order by size.
        let bits = |m: u128| 128 - m.leading_zeros() as i32;
        let (d1, d2) = (e1 - e1.min(e2), e2 - e1.min(e2));
        if bits(m1) + d1 > 127 || bits(m2) + d2 > 127 {
            return (bits(m1) + d1).cmp(&(bits(m2) + d2));
        }
        (m1 << d1).cmp(&(m2 << d2))
    }

    /// Whether the double `r` is on the asked side of the exact product or quotient (sign handled
    /// by the caller: both operands positive here) and no further than one ulp from it.
    fn directed_ok(r: f64, exact_cmp: impl Fn(f64) -> std::cmp::Ordering, up: bool) -> bool {
        use std::cmp::Ordering::*;
        if up {
            exact_cmp(r) != Less && (r == 0.0 || exact_cmp(r.next_down()) == Less)
        } else {
            exact_cmp(r) != Greater && exact_cmp(r.next_up()) == Greater
        }
    }

    #[test]
    fn directed_products_and_quotients_match_exact_integer_arithmetic() {
        // An independent oracle: |a|·|b| and |a|/|b| compared with the result exactly, as integer
        // mantissas times powers of two. Operands span the whole exponent range, so the common path
        // and every rare one (tiny, subnormal, huge) are exercised.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let draw = |next: &mut dyn FnMut() -> u64| {
            let bits = next();
            let exp = 1 + (bits >> 11) % 2046; // normal doubles, every exponent
            let frac = next() & ((1u64 << 52) - 1);
            f64::from_bits((exp << 52) | frac)
        };
        for _ in 0..200_000 {
            let a = draw(&mut next);
            let b = draw(&mut next);
            let (_, ma, ea) = parts(a);
            let (_, mb, eb) = parts(b);
            for up in [true, false] {
                let p = mul_dir(a, b, up);
                if p.is_finite() && p != f64::MAX {
                    // r compared with ma·mb·2^(ea+eb).
                    let cmp_p = |r: f64| {
                        if r == 0.0 {
                            return std::cmp::Ordering::Less;
                        }
                        let (_, mr, er) = parts(r);
                        cmp_scaled(mr, er, ma * mb, ea + eb)
                    };
                    assert!(directed_ok(p, cmp_p, up), "{a:e}·{b:e} up={up}: {p:e}");
                }
                let q = div_dir(a, b, up);
                if q.is_finite() && q != f64::MAX {
                    // r compared with a/b: r·b against a.
                    let cmp_q = |r: f64| {
                        if r == 0.0 {
                            return std::cmp::Ordering::Less;
                        }
                        let (_, mr, er) = parts(r);
                        cmp_scaled(mr * mb, er + eb, ma, ea)
                    };
                    assert!(directed_ok(q, cmp_q, up), "{a:e}/{b:e} up={up}: {q:e}");
                }
            }
        }
    }

    #[test]
    fn scaling_by_powers_of_two_rounds_in_the_asked_direction() {
        assert_eq!(ldexp(1.0, -1074), TINY);
        assert_eq!(ldexp(1.0, 1023), 2f64.powi(1023));
        assert_eq!(ldexp(2f64.powi(1000), -2000), 2f64.powi(-1000));
        assert_eq!(ldexp(f64::MAX, -2100), 0.0);
        assert_eq!(mul_up(TINY, 1.0), TINY);
        // An inexact subnormal product: the two directions are adjacent subnormals.
        assert_eq!(mul_up(1e-300, 1e-20), mul_down(1e-300, 1e-20) + TINY);
        assert_eq!(div_up(TINY, 1.0), TINY);
        // 1/MAX = 2⁻¹⁰²⁴(1 + 2⁻⁵³ + …): the subnormal nearest it is below.
        assert_eq!(div_down(1.0, f64::MAX), 1.0 / f64::MAX);
        assert_eq!(div_up(1.0, f64::MAX), (1.0 / f64::MAX).next_up());
        assert_eq!(ldexp_up(f64::MAX, -2100), TINY);
        assert_eq!(ldexp_up(3.0, -1075), 2.0 * TINY); // 1.5 subnormal ulps
        assert_eq!(ldexp_down(3.0, -1075), TINY);
        assert_eq!(ldexp_up(1.0, 1024), f64::INFINITY);
        assert_eq!(ldexp_down(1.0, 1024), f64::MAX);
        for x in [TINY, 1e-310, 1e-300, 0.75, 1.0, 1e300, f64::MAX] {
            let (m, k) = frexp(x);
            assert!((0.5..1.0).contains(&m), "{x}: {m}");
            assert_eq!(ldexp(m, k), x);
        }
    }

    #[test]
    fn sum_of_squares_is_exact_for_many_small_terms() {
        // 10^6 copies of 0.1² = 10^4 exactly; naive summation drifts by ~1e-9 relative.
        let mut s = SumOfSquares::default();
        for _ in 0..1_000_000 {
            s.add(0.1, 1);
        }
        assert!((s.value() - 1.0e4).abs() / 1.0e4 < 4.0 * U, "{}", s.value());
        let mut t = SumOfSquares::default();
        t.add(0.1, 1_000_000);
        assert!((t.value() - 1.0e4).abs() / 1.0e4 < 4.0 * U, "{}", t.value());
        // √ brackets the exact √(10⁶·0.1²) = 100·(0.1 as a double)·10 … within an ulp or two.
        let exact = 1000.0 * 0.1;
        assert!(t.sqrt_down() <= exact && t.sqrt_up() >= exact);
        assert!(t.sqrt_up() - t.sqrt_down() <= 2.0 * exact * 2.0 * U);
    }

    #[test]
    fn one_term_roots_are_exact_over_the_whole_double_range() {
        // √(x²) = x exactly, for every magnitude: no overflow of x², no underflow.
        for x in [
            TINY,
            1e-320,
            1e-300,
            1e-200,
            1e-20,
            0.1,
            1.0,
            38.0,
            1.4e154,
            1e200,
            f64::MAX,
        ] {
            let mut s = SumOfSquares::default();
            s.add(x, 1);
            assert_eq!(s.sqrt_up(), x, "up {x}");
            assert_eq!(s.sqrt_down(), x, "down {x}");
            // 4 copies: √(4x²) = 2x, +∞ only when 2x is beyond f64::MAX.
            let mut s4 = SumOfSquares::default();
            s4.add(x, 4);
            assert_eq!(s4.sqrt_up(), 2.0 * x, "4× {x}");
        }
    }

    #[test]
    fn a_sum_just_beyond_the_largest_double_has_an_infinite_root() {
        let mut s = SumOfSquares::default();
        s.add(f64::MAX, 1);
        s.add(1e300, 1);
        assert_eq!(s.sqrt_up(), f64::INFINITY);
        assert_eq!(s.sqrt_down(), f64::MAX);
    }

    #[test]
    fn a_tiny_term_beside_a_large_one_still_moves_the_upper_root() {
        // √(1 + 1e-400): the 1e-400 is lost to the double-double but kept in err, so ⌈√⌉ > 1 (and,
        // err being symmetric, ⌊√⌋ one ulp below 1).
        let mut s = SumOfSquares::default();
        s.add(1.0, 1);
        s.add(1e-200, 1);
        assert_eq!(s.sqrt_up(), 1.0f64.next_up());
        assert_eq!(s.sqrt_down(), 1.0f64.next_down());
        let mut m = SumOfSquares::default();
        m.add(1e-200, 1);
        m.merge(&{
            let mut o = SumOfSquares::default();
            o.add(1e-200, 1);
            o
        });
        // √(2·1e-400) = √2·1e-200.
        let r = std::f64::consts::SQRT_2 * 1e-200;
        assert!(m.sqrt_down() <= r && m.sqrt_up() >= r && m.sqrt_up() <= r * (1.0 + 4.0 * U));
    }

    #[test]
    fn parts_round_trip_and_stay_unscaled_when_they_can() {
        let mut s = SumOfSquares::default();
        s.add(0.3, 1);
        s.add(0.4, 1);
        let (hi, lo, exp, err) = s.parts();
        assert_eq!(exp, 0);
        assert!((hi + lo - 0.25).abs() < 1e-16);
        assert_eq!(SumOfSquares::from_parts(hi, lo, exp, Some(err)), Some(s));
        let mut big = SumOfSquares::default();
        big.add(1e200, 3);
        let (hi, lo, exp, err) = big.parts();
        assert_ne!(exp, 0, "1e400 needs the scale");
        let back = SumOfSquares::from_parts(hi, lo, exp, Some(err)).unwrap();
        assert_eq!(back.sqrt_up(), big.sqrt_up());
        assert_eq!(SumOfSquares::from_parts(f64::NAN, 0.0, 0, None), None);
    }
}
