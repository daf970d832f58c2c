//! Directed rounding: every figure this crate reports may be loose, never optimistic.
//!
//! IEEE arithmetic rounds to nearest, so a computed δ can land a few ulps below the true δ. The
//! functions here widen a computed value by a stated relative error bound, toward *more* privacy
//! loss: δ, ε, μ, TPR and advantage go up; β (type II error) goes down. Each caller states the bound it
//! passes and why; the accuracy tests check the bound against 60-digit mpmath values.

/// Unit roundoff of f64 (2⁻⁵³).
pub const U: f64 = f64::EPSILON / 2.0;

/// Returns a value ≥ `x·(1 + rel)` (and ≥ `x`) for finite `x`: the computed `x` widened upward by its
/// relative error bound `rel`. Infinities and NaN pass through.
pub fn up(x: f64, rel: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    let widened = x + x.abs() * rel.max(0.0);
    widened.next_up()
}

/// Returns a value ≤ `x·(1 − rel)` (and ≤ `x`) for finite `x`: the computed `x` widened downward.
pub fn down(x: f64, rel: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    let widened = x - x.abs() * rel.max(0.0);
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

/// A sum of squares kept in double-double (Neumaier compensation on exact products), so that √ of it
/// is correct to a few ulps however many terms it has. Used for GDP composition μ = √Σμᵢ².
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SumOfSquares {
    hi: f64,
    lo: f64,
}

impl SumOfSquares {
    /// Adds `count · x²`.
    pub fn add(&mut self, x: f64, count: u64) {
        let sq = x * x;
        let sq_err = x.mul_add(x, -sq); // exact: x² = sq + sq_err
        let c = count as f64; // exact for count ≤ 2^53
        let term = sq * c;
        let term_err = sq.mul_add(c, -term) + sq_err * c;
        self.add_exact(term);
        self.lo += term_err;
    }

    /// Adds another accumulated sum.
    pub fn merge(&mut self, other: &SumOfSquares) {
        self.add_exact(other.hi);
        self.lo += other.lo;
    }

    fn add_exact(&mut self, t: f64) {
        // Neumaier's two-sum: the rounding error of hi + t is recovered exactly.
        let s = self.hi + t;
        let e = if self.hi.abs() >= t.abs() {
            (self.hi - s) + t
        } else {
            (t - s) + self.hi
        };
        self.hi = s;
        self.lo += e;
    }

    /// The sum, rounded to nearest (relative error ≲ 2U while the terms are ≤ 2^53 in number).
    pub fn value(&self) -> f64 {
        self.hi + self.lo
    }

    /// √(sum), widened upward to cover the summation and square-root rounding (8U relative).
    pub fn sqrt_up(&self) -> f64 {
        let v = self.value();
        if v == 0.0 {
            return 0.0; // every term was exactly zero
        }
        up(v.sqrt(), 8.0 * U)
    }

    /// The two components, for persistence.
    pub fn parts(&self) -> (f64, f64) {
        (self.hi, self.lo)
    }

    /// Rebuilds from [`SumOfSquares::parts`].
    pub fn from_parts(hi: f64, lo: f64) -> Self {
        SumOfSquares { hi, lo }
    }
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
        assert_eq!(up(0.0, 1.0), 0.0f64.next_up());
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
    }
}
