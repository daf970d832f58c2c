//! Trade-off functions as piecewise-linear curves: evaluation, inverse, symmetrisation, validity,
//! and the conversions between a curve and its privacy profile.
//!
//! A trade-off function f = T(P, Q) maps a test's type I error α to the smallest type II error β
//! (Dong, Roth & Su 2022, arXiv:1905.02383, Def. 2; below DRS22). Every curve this crate builds from
//! discrete objects (pure-DP compositions, privacy-loss distributions, (ε, δ) envelopes) is exactly
//! piecewise linear, so [`PiecewiseLinear`] is the common currency; closed-form curves (G_μ) live in
//! [`super::gdp`].
//!
//! # Soundness
//! Evaluations are rounded down (β is a lower bound), profile and advantage figures up. Operations
//! that approximate (none here do: inverse, max, min-hull, tensoring with f_{0,δ} and group privacy
//! are exact on piecewise-linear input up to rounding) would have to produce a curve *below* the
//! exact one.

use super::rounding::{self, U};

/// Tolerance of [`PiecewiseLinear::validate`]: a curve may violate convexity, monotonicity or
/// f(α) ≤ 1 − α by this much (absolute, in β) and still be accepted, to absorb rounding in curves
/// computed elsewhere. 1e-12 is well above double rounding of values in [0, 1] and far below any
/// privacy-relevant difference.
pub const VALIDATION_TOL: f64 = 1e-12;

/// The relative widening of one interpolation by [`interp`]: 8U.
///
/// [`interp`] forms y_lo + |Δy|·s, s = (distance of α from the lower end)/(x₁ − x₀), where y_lo is the
/// segment's lower end value: the two differences, the quotient, Δy = y_hi − y_lo, the product and
/// the sum are six correctly rounded operations on non-negative quantities (y ≥ 0 on a trade-off
/// curve; x₀ < α ≤ x₁), so the value is within γ₆ = 6U/(1 − 6U) relative (Higham Lemma 3.1), and
/// 8U covers it with a 2U margin.
///
/// The 4U used before counted "a multiply, a divide, two adds", but y₀ + (y₁ − y₀)·(α − x₀)/(x₁ − x₀)
/// takes six roundings, and on a falling segment its last add is a difference: its absolute error
/// γ₅·|y₁ − y₀|·s (from the product) is not small against the value as α → x₁ with y₁ ≪ y₀ (on
/// (0.5, 0.5)–(0.6, 0) at α = 0.6 − 1e-12 the value is 5e-12 and the quotient's and product's
/// roundings alone can move it by 1e-16, 2e-5 relative).
pub const INTERP_REL: f64 = rounding::ARITH8_REL;

/// Linear interpolation at x₀ < a ≤ x₁ between (x₀, y₀) and (x₁, y₁) (y ≥ 0), from the lower of the
/// two ends: every term is non-negative, so the result is within γ₆ relative (see [`INTERP_REL`]).
fn interp(x0: f64, y0: f64, x1: f64, y1: f64, a: f64) -> f64 {
    if y1 <= y0 {
        y1 + (y0 - y1) * ((x1 - a) / (x1 - x0))
    } else {
        y0 + (y1 - y0) * ((a - x0) / (x1 - x0))
    }
}

/// Why a set of points is not a trade-off function.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TradeOffError {
    #[error("a trade-off curve needs at least two points")]
    TooFewPoints,
    #[error("point {index}: alpha and beta must be finite numbers in [0, 1]")]
    OutOfRange { index: usize },
    #[error("point {index}: alpha values must be strictly increasing from 0 to 1")]
    NotIncreasingAlpha { index: usize },
    #[error(
        "the curve must be defined on all of [0, 1]: first alpha must be 0 and last must be 1"
    )]
    NotOnUnitInterval,
    #[error("point {index}: beta increases (a trade-off function is non-increasing)")]
    NotNonIncreasing { index: usize },
    #[error("point {index}: the curve is not convex there")]
    NotConvex { index: usize },
    #[error(
        "point {index}: beta > 1 - alpha (a trade-off function lies below the identity curve)"
    )]
    AboveIdentity { index: usize },
}

/// A trade-off function given by its vertices (αᵢ, βᵢ), α strictly increasing from 0 to 1, linear
/// between them.
#[derive(Debug, Clone, PartialEq)]
pub struct PiecewiseLinear {
    xs: Vec<f64>,
    ys: Vec<f64>,
}

impl PiecewiseLinear {
    /// Builds a curve from vertices and checks it is a trade-off function (DRS22 Prop. 1: convex,
    /// continuous, non-increasing, f(α) ≤ 1 − α), within [`VALIDATION_TOL`].
    pub fn new(points: &[(f64, f64)]) -> Result<Self, TradeOffError> {
        let c = Self::from_vertices(points);
        c.validate()?;
        Ok(c)
    }

    /// Builds a curve from vertices already sorted by α over [0, 1], without checking it.
    pub(crate) fn from_vertices(points: &[(f64, f64)]) -> Self {
        PiecewiseLinear {
            xs: points.iter().map(|p| p.0).collect(),
            ys: points.iter().map(|p| p.1).collect(),
        }
    }

    /// The identity curve Id(α) = 1 − α (perfect privacy).
    pub fn identity() -> Self {
        Self::from_vertices(&[(0.0, 1.0), (1.0, 0.0)])
    }

    /// The vertices (α, β).
    pub fn vertices(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.xs.iter().copied().zip(self.ys.iter().copied())
    }

    /// Number of vertices.
    pub fn len(&self) -> usize {
        self.xs.len()
    }

    /// Always false for a built curve (kept for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.xs.is_empty()
    }

    /// Checks the DRS22 Prop. 1 characterisation: convex, continuous (automatic for a polygonal
    /// curve on [0, 1]), non-increasing, and f(α) ≤ 1 − α; each within [`VALIDATION_TOL`].
    pub fn validate(&self) -> Result<(), TradeOffError> {
        let n = self.xs.len();
        if n < 2 {
            return Err(TradeOffError::TooFewPoints);
        }
        for i in 0..n {
            let (x, y) = (self.xs[i], self.ys[i]);
            if !(x.is_finite()
                && y.is_finite()
                && (0.0..=1.0).contains(&x)
                && (0.0..=1.0).contains(&y))
            {
                return Err(TradeOffError::OutOfRange { index: i });
            }
            if i > 0 && x <= self.xs[i - 1] {
                return Err(TradeOffError::NotIncreasingAlpha { index: i });
            }
            if y > 1.0 - x + VALIDATION_TOL {
                return Err(TradeOffError::AboveIdentity { index: i });
            }
            if i > 0 && y > self.ys[i - 1] + VALIDATION_TOL {
                return Err(TradeOffError::NotNonIncreasing { index: i });
            }
        }
        if self.xs[0] != 0.0 || self.xs[n - 1] != 1.0 {
            return Err(TradeOffError::NotOnUnitInterval);
        }
        for i in 1..n - 1 {
            // Convex at vertex i: it lies on or below the chord of its neighbours.
            let (x0, y0, x1, y1, x2, y2) = (
                self.xs[i - 1],
                self.ys[i - 1],
                self.xs[i],
                self.ys[i],
                self.xs[i + 1],
                self.ys[i + 1],
            );
            let chord = y0 + (y2 - y0) * (x1 - x0) / (x2 - x0);
            if y1 > chord + VALIDATION_TOL {
                return Err(TradeOffError::NotConvex { index: i });
            }
        }
        Ok(())
    }

    /// f(α) by linear interpolation between vertices.
    ///
    /// # Soundness
    /// Rounded down by [`INTERP_REL`] (one interpolation by [`interp`], formed from the segment's
    /// lower end so that it cannot cancel).
    pub fn eval(&self, alpha: f64) -> f64 {
        rounding::prob_down(self.eval_raw(alpha), INTERP_REL)
    }

    /// f at ascending α's in one pass (rounded down like [`PiecewiseLinear::eval`]).
    pub fn eval_sorted(&self, alphas: &[f64]) -> Vec<f64> {
        let mut j = 0usize;
        let n = self.xs.len();
        alphas
            .iter()
            .map(|&alpha| {
                let a = alpha.clamp(0.0, 1.0);
                while j < n && self.xs[j] < a {
                    j += 1;
                }
                let v = if j == 0 {
                    self.ys[0]
                } else if j >= n {
                    self.ys[n - 1]
                } else if a == self.xs[j] {
                    self.ys[j]
                } else {
                    let (x0, y0, x1, y1) = (self.xs[j - 1], self.ys[j - 1], self.xs[j], self.ys[j]);
                    interp(x0, y0, x1, y1, a)
                };
                rounding::prob_down(v, INTERP_REL)
            })
            .collect()
    }

    /// f(α) rounded *up* by [`INTERP_REL`]: for curves that are upper bounds.
    pub fn eval_upper(&self, alpha: f64) -> f64 {
        rounding::prob_up(self.eval_raw(alpha), INTERP_REL)
    }

    fn eval_raw(&self, alpha: f64) -> f64 {
        let a = alpha.clamp(0.0, 1.0);
        let j = self.xs.partition_point(|&x| x < a);
        if j == 0 {
            return self.ys[0];
        }
        if j >= self.xs.len() {
            return *self.ys.last().expect("non-empty");
        }
        let (x0, y0, x1, y1) = (self.xs[j - 1], self.ys[j - 1], self.xs[j], self.ys[j]);
        if a == x1 {
            return y1;
        }
        interp(x0, y0, x1, y1, a)
    }

    /// The inverse f⁻¹(β) = inf{t ∈ [0, 1] : f(t) ≤ β} (DRS22 eq. (3)); T(P,Q)⁻¹ = T(Q,P).
    ///
    /// Exact: the graph is reflected in β = α; flat pieces become vertical and the infimum convention
    /// keeps their lower end; if f(0) < 1 the inverse is 0 on [f(0), 1].
    pub fn inverse(&self) -> Self {
        let mut pts: Vec<(f64, f64)> = Vec::with_capacity(self.len() + 1);
        for i in (0..self.len()).rev() {
            let p = (self.ys[i], self.xs[i]);
            match pts.last_mut() {
                Some(last) if last.0 == p.0 => last.1 = last.1.min(p.1),
                _ => pts.push(p),
            }
        }
        if pts[0].0 > 0.0 {
            // f(1) > 0: not a trade-off function; keep the shape defined on [0, 1] regardless.
            pts.insert(0, (0.0, 1.0));
        }
        if pts.last().expect("non-empty").0 < 1.0 {
            pts.push((1.0, 0.0));
        }
        Self::from_vertices(&pts)
    }

    /// Sorted union of the vertex abscissae of two curves.
    fn union_xs(&self, other: &Self) -> Vec<f64> {
        let mut xs: Vec<f64> = self.xs.iter().chain(other.xs.iter()).copied().collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        xs
    }

    /// max{f, g}: a trade-off function when f and g are (DRS22 Prop. 1). Exact: crossing points of
    /// the two curves are added as vertices.
    pub fn max(&self, other: &Self) -> Self {
        let xs = self.union_xs(other);
        let mut pts: Vec<(f64, f64)> = Vec::with_capacity(xs.len() * 2);
        for (k, &x) in xs.iter().enumerate() {
            if k > 0 {
                // Both curves are linear on [xs[k-1], x]; add their crossing if it is interior.
                let x0 = xs[k - 1];
                let d0 = self.eval_raw(x0) - other.eval_raw(x0);
                let d1 = self.eval_raw(x) - other.eval_raw(x);
                if (d0 > 0.0 && d1 < 0.0) || (d0 < 0.0 && d1 > 0.0) {
                    let t = d0 / (d0 - d1);
                    let xc = x0 + t * (x - x0);
                    if xc > x0 && xc < x {
                        pts.push((xc, self.eval_raw(xc).max(other.eval_raw(xc))));
                    }
                }
            }
            pts.push((x, self.eval_raw(x).max(other.eval_raw(x))));
        }
        Self::from_vertices(&pts)
    }

    /// (min{f, g})**: the greatest convex function below both (the biconjugate of the minimum).
    ///
    /// Exact: crossing points of two convex curves are concave kinks of the minimum and never
    /// vertices of its convex hull, so the hull of the minimum at the union of vertices suffices.
    pub fn min_hull(&self, other: &Self) -> Self {
        let pts: Vec<(f64, f64)> = self
            .union_xs(other)
            .into_iter()
            .map(|x| (x, self.eval_raw(x).min(other.eval_raw(x))))
            .collect();
        Self::from_vertices(&lower_hull(&pts))
    }

    /// The symmetrisation min{f, f⁻¹}** used for add/remove neighbouring (DRS22 Def. F.1; §4 C_p):
    /// if f bounds one ordering of the pair and f⁻¹ the other, the mechanism is min{f, f⁻¹}**-DP.
    pub fn symmetrize(&self) -> Self {
        self.min_hull(&self.inverse())
    }

    /// The upgrade max{f, f⁻¹} (DRS22 Prop. 2): valid when f already holds for *both* orderings of
    /// every neighbouring pair (a symmetric relation and an f that does not depend on the order).
    pub fn upgrade_symmetric(&self) -> Self {
        self.max(&self.inverse())
    }

    /// The privacy profile δ(ε) = 1 + f*(−e^ε) = max over vertices of (1 − βᵢ − e^ε αᵢ), clamped at 0
    /// (DRS22 Prop. 6). For an asymmetric f this is the profile of one ordering; symmetrise first.
    ///
    /// # Soundness
    /// Rounded up by 4U relative and 2U absolute (one fused evaluation per vertex).
    pub fn delta_for_epsilon(&self, eps: f64) -> f64 {
        let s = eps.exp();
        let m = self
            .vertices()
            .map(|(x, y)| if x == 0.0 { 1.0 - y } else { 1.0 - y - s * x })
            .fold(0.0_f64, f64::max);
        // e^ε (one libm call) and three roundings; terms ≤ 1, so the absolute 2U is two roundings
        // of 1.
        rounding::prob_up(m + rounding::ARITH2_REL, rounding::LIBM_SHORT_REL)
    }

    /// The smallest ε ≥ 0 with δ(ε) ≤ δ, in closed form: max over vertices with 1 − βᵢ > δ of
    /// ln((1 − βᵢ − δ)/αᵢ); +∞ if a vertex at α = 0 has 1 − β > δ.
    ///
    /// # Soundness
    /// Rounded up by 8U relative and 4U absolute (a subtraction, a division, a logarithm).
    pub fn epsilon_for_delta(&self, delta: f64) -> f64 {
        let mut eps = 0.0_f64;
        for (x, y) in self.vertices() {
            let excess = 1.0 - y - delta;
            if excess <= 0.0 {
                continue;
            }
            if x == 0.0 {
                return f64::INFINITY;
            }
            eps = eps.max((excess / x).ln());
        }
        if eps == 0.0 {
            return 0.0;
        }
        // The quotient's ≤ 3 roundings become an absolute error of its logarithm (4U); ln's own
        // error and the rounding of the sum, relative (8U).
        rounding::up(eps + rounding::ARITH4_REL, rounding::LIBM_CHAIN_REL)
    }

    /// The largest advantage max_α (1 − α − f(α)) = δ(0), the η-TV of the pair.
    pub fn advantage(&self) -> f64 {
        self.delta_for_epsilon(0.0)
    }

    /// The convex conjugate f*(y) = sup_{α∈[0,1]} (yα − f(α)) (DRS22 eq. (7)), attained at a vertex.
    pub fn conjugate(&self, y: f64) -> f64 {
        self.vertices()
            .map(|(a, b)| y * a - b)
            .fold(f64::NEG_INFINITY, f64::max)
    }

    /// f ⊗ f_{0,δ}: tensoring with a (0, δ) mechanism shrinks the graph toward the origin by 1 − δ.
    ///
    /// # Formula
    /// ```text
    /// (f ⊗ f_{0,δ})(α) = (1 − δ) f(α/(1 − δ)) for α ≤ 1 − δ, 0 beyond     DRS22 eq. (12)
    /// ```
    pub fn tensor_delta(&self, delta: f64) -> Self {
        if delta <= 0.0 {
            return self.clone();
        }
        let s = 1.0 - delta;
        let mut pts: Vec<(f64, f64)> = self
            .vertices()
            .map(|(x, y)| (x * s, rounding::prob_down(y * s, U)))
            .collect();
        if s < 1.0 {
            pts.push((1.0, 0.0));
        }
        Self::from_vertices(&pts)
    }

    /// Group privacy: a mechanism that is f-DP is [1 − (1 − f)^{∘k}]-DP for groups of size k
    /// (DRS22 Thm. 3). Exact on piecewise-linear f: the k-fold composition of 1 − f is evaluated at
    /// every vertex it can have.
    pub fn group(&self, k: u32) -> Self {
        let g = self.complement();
        let mut acc = g.clone();
        for _ in 1..k {
            acc = g.compose_after(&acc);
        }
        acc.complement()
    }

    /// 1 − f, as a (concave, non-decreasing) polygonal function on [0, 1].
    fn complement(&self) -> Self {
        PiecewiseLinear {
            xs: self.xs.clone(),
            ys: self.ys.iter().map(|y| 1.0 - y).collect(),
        }
    }

    /// self ∘ inner for non-decreasing polygonal functions on [0, 1] with values in [0, 1].
    fn compose_after(&self, inner: &Self) -> Self {
        let mut xs = inner.xs.clone();
        // Pre-images under `inner` of our vertices: where the composite can kink.
        for &b in &self.xs {
            for j in 1..inner.len() {
                let (x0, y0, x1, y1) = (inner.xs[j - 1], inner.ys[j - 1], inner.xs[j], inner.ys[j]);
                if y0 < b && b < y1 {
                    xs.push(x0 + (b - y0) * (x1 - x0) / (y1 - y0));
                }
            }
        }
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        let pts: Vec<(f64, f64)> = xs
            .into_iter()
            .map(|x| (x, self.eval_raw(inner.eval_raw(x))))
            .collect();
        Self::from_vertices(&pts)
    }

    /// The curve implied by a privacy profile sampled at finitely many ε (DRS22 Prop. 5):
    /// f = sup_j f_{εⱼ, δⱼ}, the upper envelope of the lines 1 − δ − e^ε α and e^{−ε}(1 − δ − α).
    ///
    /// # Soundness
    /// With finitely many (ε, δ) pairs the envelope is *below* the mechanism's true curve (every line
    /// is a valid lower bound), so the result is a valid, possibly loose, trade-off function — up to
    /// the rounding of its vertices, which is not directed. Figures that must be sound (β, μ) are
    /// computed line by line instead (`pld::lines`); this polygon serves display and the regret.
    pub fn from_profile(profile: &[(f64, f64)]) -> Self {
        // (slope, intercept) for β = intercept + slope·α. With ε ascending, the lines −e^ε are made in
        // descending slope order and e^{−ε} ones in ascending order, all of the first ≤ −1 ≤ all of the
        // second: reversing the first family yields a sorted list (the sort below is then linear).
        let mut steep: Vec<(f64, f64)> = Vec::with_capacity(profile.len());
        let mut flat: Vec<(f64, f64)> = Vec::with_capacity(profile.len() + 1);
        for &(eps, delta) in profile {
            let d = delta.clamp(0.0, 1.0);
            let e = eps.max(0.0);
            if e > 700.0 {
                // e^ε would overflow (slope −∞, crossings NaN). Leaving a line out only lowers the
                // envelope, which stays a valid (lower) trade-off curve.
                continue;
            }
            steep.push((-e.exp(), 1.0 - d));
            flat.push((-(-e).exp(), (-e).exp() * (1.0 - d)));
        }
        flat.push((0.0, 0.0));
        steep.reverse();
        steep.extend(flat);
        upper_envelope(steep)
    }
}

/// The lower convex hull of points sorted by x (Andrew's monotone chain), endpoints included.
pub(crate) fn lower_hull(pts: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut hull: Vec<(f64, f64)> = Vec::with_capacity(pts.len());
    for &p in pts {
        while hull.len() >= 2 {
            let (o, a) = (hull[hull.len() - 2], hull[hull.len() - 1]);
            // Pop `a` unless o → a → p turns left (strictly convex).
            let cross = (a.0 - o.0) * (p.1 - o.1) - (a.1 - o.1) * (p.0 - o.0);
            if cross <= 0.0 {
                hull.pop();
            } else {
                break;
            }
        }
        hull.push(p);
    }
    hull
}

/// The upper envelope over α ∈ [0, 1] of lines β = c + mα (given as (m, c)), as a polygonal curve.
fn upper_envelope(mut ls: Vec<(f64, f64)>) -> PiecewiseLinear {
    // Sort by slope ascending; for equal slopes keep the highest intercept.
    ls.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
    ls.dedup_by(|b, a| a.0 == b.0);
    // Convex hull trick: on [0, 1] the winning line's slope increases with α.
    let x_of = |l1: (f64, f64), l2: (f64, f64)| (l1.1 - l2.1) / (l2.0 - l1.0);
    // Sized for the worst case up front: grown by doubling, these buffers (tens of thousands of
    // lines) cost more in fresh pages than the envelope itself.
    let mut st: Vec<(f64, f64)> = Vec::with_capacity(ls.len());
    for &l in &ls {
        while let Some(&top) = st.last() {
            // `top` never wins if `l` overtakes `prev` no later than `top` does.
            if st.len() >= 2 {
                let prev = st[st.len() - 2];
                if x_of(prev, l) <= x_of(prev, top) {
                    st.pop();
                    continue;
                }
            }
            if l.1 >= top.1 && st.len() == 1 {
                // l has a larger slope and no smaller intercept: it dominates top on [0, ∞).
                st.pop();
                continue;
            }
            break;
        }
        st.push(l);
    }
    // Walk the envelope over [0, 1].
    let mut pts: Vec<(f64, f64)> = Vec::with_capacity(st.len() + 2);
    let f = |l: (f64, f64), x: f64| l.1 + l.0 * x;
    let mut x = 0.0;
    let mut i = 0;
    // First line that wins at α = 0.
    while i + 1 < st.len() && x_of(st[i], st[i + 1]) <= 0.0 {
        i += 1;
    }
    pts.push((0.0, f(st[i], 0.0).clamp(0.0, 1.0)));
    while i + 1 < st.len() {
        let xc = x_of(st[i], st[i + 1]);
        if xc >= 1.0 {
            break;
        }
        if xc > x {
            pts.push((xc, f(st[i], xc).clamp(0.0, 1.0)));
            x = xc;
        }
        i += 1;
    }
    pts.push((1.0, f(st[i], 1.0).clamp(0.0, 1.0)));
    PiecewiseLinear::from_vertices(&pts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f_eps_delta(eps: f64, delta: f64) -> PiecewiseLinear {
        let k = (1.0 - delta) / (1.0 + eps.exp());
        PiecewiseLinear::new(&[(0.0, 1.0 - delta), (k, k), (1.0 - delta, 0.0), (1.0, 0.0)]).unwrap()
    }

    #[test]
    fn invalid_curves_are_rejected() {
        assert_eq!(
            PiecewiseLinear::new(&[(0.0, 1.0), (0.5, 0.6), (1.0, 0.0)]).unwrap_err(),
            TradeOffError::AboveIdentity { index: 1 }
        );
        assert_eq!(
            PiecewiseLinear::new(&[(0.0, 1.0), (0.5, 0.1), (0.7, 0.3), (1.0, 0.0)]).unwrap_err(),
            TradeOffError::NotNonIncreasing { index: 2 }
        );
        assert_eq!(
            PiecewiseLinear::new(&[(0.0, 1.0), (0.2, 0.1), (0.6, 0.09), (0.8, 0.0), (1.0, 0.0)])
                .unwrap_err(),
            TradeOffError::NotConvex { index: 2 }
        );
        assert_eq!(
            PiecewiseLinear::new(&[(0.1, 0.9), (1.0, 0.0)]).unwrap_err(),
            TradeOffError::NotOnUnitInterval
        );
    }

    #[test]
    fn f_eps_delta_is_its_own_inverse() {
        let f = f_eps_delta(1.0, 0.01);
        let g = f.inverse();
        for i in 0..=100 {
            let a = i as f64 / 100.0;
            assert!((f.eval(a) - g.eval(a)).abs() < 1e-15, "alpha {a}");
        }
    }

    #[test]
    fn inverse_of_asymmetric_curve_reflects_it() {
        let f = PiecewiseLinear::new(&[(0.0, 0.9), (0.1, 0.3), (0.5, 0.0), (1.0, 0.0)]).unwrap();
        let g = f.inverse();
        // f⁻¹(0) = 0.5 (inf convention), f⁻¹ is 0 on [0.9, 1].
        assert!((g.eval(0.0) - 0.5).abs() < 1e-15 && g.eval(0.0) <= 0.5);
        assert_eq!(g.eval(0.95), 0.0);
        assert!((g.eval(0.3) - 0.1).abs() < 1e-15);
        assert!(g.validate().is_ok());
    }

    #[test]
    fn profile_matches_closed_form_for_f_eps_delta() {
        // δ-profile of f_{1,0.01}: δ(0) = 0.4674959857, δ(0.5) = 0.2947726453, δ(≥1) = 0.01 (DRS22).
        let f = f_eps_delta(1.0, 0.01);
        assert!((f.delta_for_epsilon(0.0) - 0.4674959857).abs() < 1e-10);
        assert!((f.delta_for_epsilon(0.5) - 0.2947726453).abs() < 1e-10);
        assert!((f.delta_for_epsilon(1.0) - 0.01).abs() < 1e-14);
        // At δ = 0.01 exactly the answer hinges on how 1 − 0.01 rounded when the curve was built
        // (it may honestly be +∞); just above it, ε = 1.
        let e = f.epsilon_for_delta(0.010_000_000_1);
        assert!(e >= 1.0 - 1e-8 && e <= 1.0, "{e}");
        assert_eq!(f.epsilon_for_delta(0.005), f64::INFINITY);
    }

    #[test]
    fn curve_from_profile_recovers_f_eps_delta() {
        let f = PiecewiseLinear::from_profile(&[(1.0, 0.01)]);
        let g = f_eps_delta(1.0, 0.01);
        for i in 0..=50 {
            let a = i as f64 / 50.0;
            assert!(
                (f.eval(a) - g.eval(a)).abs() < 1e-14,
                "alpha {a}: {} vs {}",
                f.eval(a),
                g.eval(a)
            );
        }
    }

    #[test]
    fn tensoring_with_f_0_delta_adds_deltas() {
        // f_{0,d1} ⊗ f_{0,d2} = f_{0, 1−(1−d1)(1−d2)} (DRS22 eq. (11)).
        let f = f_eps_delta(0.0, 0.1).tensor_delta(0.2);
        let g = f_eps_delta(0.0, 1.0 - 0.9 * 0.8);
        for i in 0..=20 {
            let a = i as f64 / 20.0;
            assert!((f.eval(a) - g.eval(a)).abs() < 1e-14);
        }
    }

    #[test]
    fn max_adds_crossings_and_min_hull_is_convex() {
        let f = PiecewiseLinear::new(&[(0.0, 0.9), (0.1, 0.3), (0.5, 0.0), (1.0, 0.0)]).unwrap();
        let g = f.inverse();
        let m = f.max(&g);
        m.validate().unwrap();
        let h = f.min_hull(&g);
        h.validate().unwrap();
        for i in 0..=200 {
            let a = i as f64 / 200.0;
            assert!(m.eval(a) >= f.eval(a).max(g.eval(a)) - 1e-15);
            assert!(h.eval(a) <= f.eval(a).min(g.eval(a)) + 1e-15);
        }
    }
}
