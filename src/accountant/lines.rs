//! The trade-off curve of a privacy profile, evaluated line by line with directed rounding, and the
//! μ-GDP fit of such a curve.
//!
//! A profile δ(ε) (an upper bound on the mechanism's, at points ε₀ = 0 < ε₁ < …) gives the curve
//! ```text
//! f(α) = max(0, sup_j max{1 − δⱼ − e^{εⱼ} α,  e^{−εⱼ}(1 − δⱼ − α)})     Dong, Roth & Su, "Gaussian
//!                                                                       differential privacy", Prop. 5/6
//! ```
//! Every line is below the true curve, so the maximum over *any* subset of them is a sound lower
//! bound. Building a polygon from the lines' crossings and interpolating between those vertices is
//! not: a crossing computed in floating point can sit above the curve, cancellation in 1 − δ − e^ε α
//! loses every digit near α ≈ e^{−ε}, and e^ε overflows past ε ≈ 709. So here:
//!
//! - a line's slope e^{εⱼ} is replaced by a representable ŷⱼ ≥ e^{εⱼ} (the line of ε′ = ln ŷⱼ ≥ εⱼ,
//!   whose δ(ε′) ≤ δⱼ: still below the curve), and 1 − δⱼ − ŷⱼα is formed in double-double, so its
//!   only rounding is the last one; lines with ŷ = ∞ are evaluated in log space;
//! - [`Lines::lower_at`] is the maximum over every line, each rounded down;
//! - [`upper_at`] bounds a curve from *above* from "cell majorant" lines, each rounded up;
//! - [`Lines::mu_upper`] certifies μ by walking the upper envelope of the steep lines in log α, so
//!   α as small as e^{−10⁴} is handled and no vertex coordinate needs to be exact.

use crate::accountant::normal;
use crate::accountant::rounding::{self, U};

/// Below this, an absolute rounding floor is subtracted from every lower value (and added to every
/// upper one): products and sums that underflow lose relative accuracy in the subnormal range.
const TINY: f64 = 1e-300;

/// The widening of a line's value rounded once at the end: 4U. A steep line formed by [`dd_line`]
/// is within 3U·|value| + [`TINY`]; a flat line ẑ·((c − α) + c_lo) carries three roundings; the
/// log-space steep line, 1 − δ minus a rounded-up product, at most three as well.
const LINE_REL: f64 = 4.0 * U;

/// log of the smallest α handled directly as a double (below it, α is kept as its logarithm).
const LOG_ALPHA_MIN: f64 = -690.0;

/// 1 − δ as a double-double (exact: |δ| ≤ 1).
fn one_minus(delta: f64) -> (f64, f64) {
    let hi = 1.0 - delta;
    let lo = (1.0 - hi) - delta;
    (hi, lo)
}

/// A double-double rounded down to a double (exact when its low part is 0).
fn dd_down(c: (f64, f64)) -> f64 {
    if c.1 == 0.0 {
        c.0
    } else {
        rounding::down(c.0 + c.1, U)
    }
}

/// e^x rounded up (glibc's exp is within 1 ulp; 2U covers it).
fn exp_up(x: f64) -> f64 {
    rounding::up(x.exp(), rounding::ULP_REL)
}

/// e^x rounded down.
fn exp_down(x: f64) -> f64 {
    rounding::down(x.exp(), rounding::ULP_REL).max(0.0)
}

/// c − p·a in double-double (c = (c_hi, c_lo), p·a formed exactly by fma), before the final
/// rounding; its error is at most 3U·|result| + TINY.
fn dd_line(c: (f64, f64), p: f64, a: f64) -> f64 {
    let prod = p * a;
    let err = p.mul_add(a, -prod);
    (c.0 - prod) + (c.1 - err)
}

/// Φ̄⁻¹ at q = e^{lq}, rounded up (certified in [`normal::isf_of_log_up`]; q ≥ ½ through the
/// bracket of the plain quantile).
fn isf_of_log_up(lq: f64) -> f64 {
    if lq > (0.5f64).ln() {
        return normal::isf_bounds(rounding::down(lq.exp(), rounding::ULP_REL).min(1.0)).1;
    }
    normal::isf_of_log_up(lq)
}

/// Φ̄⁻¹(q) rounded down, for q in (0, 1].
fn isf_down(q: f64) -> f64 {
    normal::isf_bounds(q.min(1.0)).0
}

/// A point α > 0, kept as a double when it is one and as its logarithm always.
#[derive(Debug, Clone, Copy)]
struct Alpha {
    ln: f64,
    /// `Some(α)` when α ≥ e^{−690}: then α itself (exactly this double) is the point.
    val: Option<f64>,
}

impl Alpha {
    fn from_ln(ln: f64) -> Self {
        if ln >= LOG_ALPHA_MIN {
            let v = ln.exp();
            Alpha {
                ln: v.ln(),
                val: Some(v),
            }
        } else {
            Alpha { ln, val: None }
        }
    }

    /// The point `v` (a positive double) itself.
    fn of_double(v: f64) -> Self {
        Alpha {
            ln: v.ln(),
            val: Some(v),
        }
    }

    /// Whether this point is certainly no larger than `o` (exact comparison of the points they
    /// stand for: doubles compare as doubles; a point kept only as its log, ln < −690, is below
    /// every double ≥ e^{−690} rounded).
    fn le(self, o: Alpha) -> bool {
        match (self.val, o.val) {
            (Some(a), Some(b)) => a <= b,
            (None, None) => self.ln <= o.ln,
            (None, Some(_)) => true,
            (Some(_), None) => false,
        }
    }

    /// Φ̄⁻¹(α/keep) rounded down (for lower bounds on a requirement; never above the true value).
    fn isf_over_keep_down(self, keep: f64) -> f64 {
        match self.val {
            // keep = 1 − s and the quotient: two roundings.
            Some(a) => isf_down(rounding::up(a / keep, rounding::ARITH2_REL).min(1.0)),
            // α < e^{−690}: Φ̄⁻¹ is above 37; a lower bound of it is a lower bound.
            None => isf_down(rounding::up(1e-299 / keep, rounding::ARITH2_REL)),
        }
    }

    /// Φ̄⁻¹(α/keep) rounded up (`ln_keep` = ln(1 − slack) ≤ 0).
    fn isf_over_keep_up(self, keep: f64, ln_keep: f64) -> f64 {
        match self.val {
            Some(a) => {
                let q = rounding::down(a / keep, rounding::ARITH2_REL);
                if q <= 0.0 {
                    return isf_of_log_up(self.ln - ln_keep - rounding::ARITH4_REL * self.ln.abs());
                }
                isf_of_log_up(q.ln() - rounding::ULP_REL * q.ln().abs())
            }
            None => isf_of_log_up(self.ln - ln_keep - rounding::ARITH4_REL * self.ln.abs()),
        }
    }
}

/// The lines of a profile, prepared for evaluation.
#[derive(Debug, Clone)]
pub(crate) struct Lines {
    eps: Vec<f64>,
    delta: Vec<f64>,
    /// 1 − δⱼ as double-doubles.
    c: Vec<(f64, f64)>,
    /// ŷⱼ ≥ e^{εⱼ} (∞ past ε ≈ 709).
    y_up: Vec<f64>,
    /// ẑⱼ ≤ e^{−εⱼ}.
    z_down: Vec<f64>,
    /// The μ fit's walk, built on first use (it does not depend on the slack).
    walk: std::sync::OnceLock<Walk>,
}

/// One piece of the upper envelope of the steep lines, as [`Lines::mu_upper`] walks it: `a` where
/// it takes over from the previous piece (unused for the first), `b` the smaller of the two lines
/// there rounded down (≤ 0 when the curve is lost to rounding), `d` where it meets the diagonal
/// rounded down (ln = −∞ when nowhere), `last` whether the walk ends after it.
#[derive(Debug, Clone, Copy)]
struct Vertex {
    a: Alpha,
    b: f64,
    d: Alpha,
    last: bool,
}

/// Vertices per block of the walk (see [`Lines::mu_upper`]).
const WALK_BLOCK: usize = 64;

/// The walk over the envelope, and per block of [`WALK_BLOCK`] vertices the smallest `a` and `b`
/// and the largest `d` in it (for skipping blocks with certified bounds).
#[derive(Debug, Clone, Default)]
struct Walk {
    v: Vec<Vertex>,
    a_min: Vec<Alpha>,
    b_min: Vec<f64>,
    d_max: Vec<Alpha>,
}

impl Lines {
    /// Lines of the profile points (ε ascending, ε ≥ 0; δ upper bounds).
    ///
    /// A point's ε may stand for a real number within an ulp of it (a grid loss j·h formed as a
    /// product): each line is drawn at ε′ = ε·(1 + 2U) rounded up, at or above that real loss,
    /// where δ is no larger — so still below the curve. Without it a line through a vertex of the
    /// curve at ε ≳ 34 could be above the curve by ulp(ε)·e^ε·α, which there is comparable to the
    /// curve itself (ε = 34.6, α = 1/(1 + e^ε): β 1.32e-15 against the exact 9.38e-16).
    pub(crate) fn new(profile: &[(f64, f64)]) -> Self {
        let eps: Vec<f64> = profile
            .iter()
            .map(|p| {
                let e = p.0.max(0.0);
                if e > 0.0 {
                    rounding::up(e, rounding::ULP_REL)
                } else {
                    e
                }
            })
            .collect();
        let delta: Vec<f64> = profile.iter().map(|p| p.1.clamp(0.0, 1.0)).collect();
        Lines {
            c: delta.iter().map(|&d| one_minus(d)).collect(),
            y_up: eps.iter().map(|&e| exp_up(e)).collect(),
            z_down: eps.iter().map(|&e| exp_down(-e)).collect(),
            eps,
            delta,
            walk: std::sync::OnceLock::new(),
        }
    }

    /// The steep line j at α, rounded down.
    fn steep_down(&self, j: usize, a: Alpha) -> f64 {
        let c = self.c[j];
        match a.val {
            Some(v) if self.y_up[j].is_finite() => {
                let l = dd_line(c, self.y_up[j], v);
                rounding::down(l, LINE_REL) - TINY
            }
            _ => {
                // ŷα = e^{ε + ln α}: the exponent carries (|ε| + |ln α|)·U of rounding.
                let t = self.eps[j] + a.ln;
                let p = rounding::up(t.exp(), (4.0 + 2.0 * (self.eps[j] + a.ln.abs())) * U);
                rounding::down((c.0 - p) + c.1, LINE_REL) - TINY
            }
        }
    }

    /// The flat line j at α (a double), rounded down.
    fn flat_down(&self, j: usize, a: f64) -> f64 {
        let c = self.c[j];
        let t = (c.0 - a) + c.1;
        if t <= 0.0 {
            return t;
        }
        rounding::down(self.z_down[j] * t, LINE_REL) - TINY
    }

    /// A lower bound on f(α): the largest of all lines at α, each rounded down.
    pub(crate) fn lower_at(&self, alpha: f64) -> f64 {
        if alpha <= 0.0 {
            // f(0) = 1 − δ(∞) ≥ 1 − δ at the last point.
            return self.c.last().map_or(1.0, |&c| dd_down(c));
        }
        if alpha >= 1.0 {
            return 0.0;
        }
        let a = Alpha::of_double(alpha);
        let mut best = 0.0_f64;
        for j in 0..self.eps.len() {
            // Screen with plain arithmetic (error ≤ 2U·(c + ŷα)); only lines that may beat the best
            // so far are evaluated carefully (double-double, which needs fma: slow in software).
            let (c, y) = (self.c[j].0, self.y_up[j]);
            if y.is_finite() {
                let p = y * alpha;
                if c - p + rounding::ARITH2_REL * (c + p) + U > best {
                    best = best.max(self.steep_down(j, a));
                }
            } else {
                best = best.max(self.steep_down(j, a));
            }
            best = best.max(self.flat_down(j, alpha));
        }
        best.clamp(0.0, 1.0)
    }

    /// ln α where steep lines i (steeper) and k cross, approximately (only tightness depends on it).
    fn cross(&self, i: usize, k: usize) -> f64 {
        let dd = self.delta[k] - self.delta[i];
        if dd <= 0.0 {
            return f64::NEG_INFINITY;
        }
        dd.ln() - self.eps[k] - (self.eps[i] - self.eps[k]).exp_m1().ln()
    }

    /// Where steep line j meets the diagonal β = α, rounded down: α = (1 − δⱼ)/(1 + ŷⱼ).
    fn diagonal_down(&self, j: usize) -> Alpha {
        let c = dd_down(self.c[j]);
        if c <= 0.0 {
            return Alpha {
                ln: f64::NEG_INFINITY,
                val: None,
            };
        }
        let y = self.y_up[j];
        let ln = if y.is_finite() && y < 1e300 {
            c.ln() - y.ln_1p()
        } else {
            c.ln() - self.eps[j] - (-self.eps[j]).exp().ln_1p()
        };
        // ln, ln1p and the subtraction: a few ulps of the magnitudes involved.
        let ln = ln - rounding::LIBM_CHAIN_REL * (ln.abs() + self.eps[j] + 1.0);
        let a = Alpha::from_ln(ln);
        match a.val {
            Some(v) => Alpha {
                ln: a.ln,
                val: Some(rounding::down(v, rounding::LIBM_SHORT_REL)), // v = e^ln
            },
            None => a,
        }
    }

    /// The walk of [`Lines::mu_upper`]: the upper envelope of the steep lines, steepest first
    /// (largest ε wins near α = 0), with each vertex's slack-independent numbers.
    fn build_walk(&self) -> Walk {
        let n = self.eps.len();
        let mut st: Vec<usize> = Vec::with_capacity(n);
        for j in (0..n).rev() {
            while let Some(&t) = st.last() {
                // A flatter line with no larger δ (no smaller intercept) beats t for every α > 0.
                if self.delta[j] <= self.delta[t] {
                    st.pop();
                    continue;
                }
                if st.len() >= 2 {
                    let prev = st[st.len() - 2];
                    if self.cross(prev, j) <= self.cross(prev, t) {
                        st.pop();
                        continue;
                    }
                }
                break;
            }
            st.push(j);
        }
        let mut w = Walk::default();
        for k in 0..st.len() {
            let (a, b) = if k >= 1 {
                let a = Alpha::from_ln(self.cross(st[k - 1], st[k]));
                (
                    a,
                    self.steep_down(st[k - 1], a).min(self.steep_down(st[k], a)),
                )
            } else {
                (Alpha::from_ln(f64::NEG_INFINITY), 1.0)
            };
            let d = self.diagonal_down(st[k]);
            // Past the diagonal the remaining pieces only add constraints.
            let last = d.ln != f64::NEG_INFINITY
                && k + 1 < st.len()
                && self.cross(st[k], st[k + 1]) >= d.ln;
            w.v.push(Vertex { a, b, d, last });
        }
        for (blk, chunk) in w.v.chunks(WALK_BLOCK).enumerate() {
            // The first vertex has no constraint: leave it out of the block's minima.
            let live = if blk == 0 { &chunk[1..] } else { chunk };
            let mut a_min = Alpha::of_double(1.0);
            let mut b_min = f64::INFINITY;
            for v in live {
                if v.a.le(a_min) {
                    a_min = v.a;
                }
                b_min = b_min.min(v.b);
            }
            let mut d_max = Alpha::from_ln(f64::NEG_INFINITY);
            for v in chunk {
                if v.d.ln != f64::NEG_INFINITY && d_max.le(v.d) {
                    d_max = v.d;
                }
            }
            w.a_min.push(a_min);
            w.b_min.push(b_min);
            w.d_max.push(d_max);
        }
        w
    }

    /// The smallest μ (rounded up) with (1 − s)·G_μ(α/(1 − s)) ≤ f(α) for all α, where f is the
    /// curve of these lines; `Err` with the reason when no finite μ holds, and the α where the
    /// binding constraint sits.
    ///
    /// # Soundness
    /// Write g(α) = (1 − s)G_μ(α/(1 − s)), convex and symmetric. Let L₀, L₁, … be the steep lines
    /// in the order they win as α grows (their upper envelope, found in log α) and α₁ < α₂ < … the
    /// points where the walk switches from one to the next. The function f̃ = L_k on [α_k, α_{k+1}]
    /// is below f whatever the α_k are (each piece is a line below f), so these need not be exact.
    /// A convex g is below a line on an interval iff it is at both ends: so g ≤ f̃ on [0, α_K] iff
    /// g(0) ≤ L₀(0), i.e. 1 − s ≤ 1 − δ(∞), and g(α_k) ≤ min(L_{k−1}, L_k)(α_k) for k ≤ K, i.e.
    /// μ ≥ Φ̄⁻¹(α_k/(1−s)) + Φ̄⁻¹(b_k/(1−s)) with b_k that minimum rounded down. The walk may stop
    /// at any piece K at a point a ≤ where L_K meets the diagonal: there L_K(a) ≥ a, and a is at most
    /// the fixed point α* of f (f ≥ L_K), so one more condition g(a) ≤ a, i.e. μ ≥ 2Φ̄⁻¹(a/(1−s)),
    /// covers [α_K, a], then [a, α*] (g(α) ≤ g(a) ≤ a ≤ α ≤ f(α)), and the rest by the symmetry of f
    /// and g (f(α) = β ≤ α* gives g(β) ≤ f(β) ≤ α, so g(α) ≤ β). Every stopping point gives a valid
    /// μ; the smallest is returned. Near the diagonal b_k can be lost to cancellation when α* ≈ 1e-18
    /// (large ε); stopping before such a point is then what keeps μ finite and close.
    /// `own_inf` is the part of the mass at +∞ that is the mechanism's own (the rest was moved there
    /// by cutting tails); it only chooses the reason given when no μ can be certified.
    pub(crate) fn mu_upper(&self, slack: f64, own_inf: f64) -> Result<(f64, f64), String> {
        let keep = 1.0 - slack;
        let ln_keep = (-slack).ln_1p();
        let n = self.eps.len();
        if n == 0 {
            return Ok((0.0, 0.5));
        }
        let top = n - 1;
        let c_top = dd_down(self.c[top]);
        if c_top < keep {
            if own_inf <= slack {
                return Err(format!(
                    "μ cannot be certified at delta_slack {slack:e}: the numerical engine moves loss \
                     tails it does not represent ({:.3e} here) to +∞, and a fit must cover them; \
                     a delta_slack of at least that much gives a finite μ",
                    self.delta[top]
                ));
            }
            return Err(format!(
                "the probability of unbounded privacy loss, {:.3e} (the mechanism's own plus \
                 tails moved to +∞ by discretisation), exceeds the delta slack {slack:e}",
                self.delta[top]
            ));
        }
        if self.delta[0] == 0.0 {
            // δ(0) = 0: the curve is 1 − α, μ = 0.
            return Ok((0.0, 0.5));
        }
        let w = self.walk.get_or_init(|| self.build_walk());
        let mut running = 0.0_f64;
        let mut running_at = 0.5;
        let mut best = f64::INFINITY;
        let mut best_at = 0.5;
        'blocks: for (blk, chunk) in w.v.chunks(WALK_BLOCK).enumerate() {
            let first = blk * WALK_BLOCK;
            // Skip the block's constraints when none can raise `running`: the true Φ̄⁻¹ is
            // decreasing, so each vertex's requirement is at most that of the block's smallest a
            // plus that of its smallest b (each rounded up). Skip its stopping points when none
            // can lower `best`: each is at least max(running, 2Φ̄⁻¹ of the largest d, rounded down).
            let b_min = w.b_min[blk];
            let no_constraint = b_min >= keep
                || (b_min > 0.0
                    && w.a_min[blk].isf_over_keep_up(keep, ln_keep)
                        + Alpha::of_double(b_min).isf_over_keep_up(keep, ln_keep)
                        <= running);
            let d = w.d_max[blk];
            let no_stop = d.ln == f64::NEG_INFINITY
                || running >= best
                || 2.0 * d.isf_over_keep_down(keep) >= best;
            let stops = chunk.iter().any(|v| v.last);
            if no_constraint && no_stop && !stops {
                continue;
            }
            for (i, v) in chunk.iter().enumerate() {
                if first + i >= 1 && !no_constraint && v.b < keep {
                    let m = if v.b <= 0.0 {
                        f64::INFINITY
                    } else {
                        v.a.isf_over_keep_up(keep, ln_keep)
                            + Alpha::of_double(v.b).isf_over_keep_up(keep, ln_keep)
                    };
                    if m > running {
                        running = m;
                        running_at = v.a.val.unwrap_or(0.0);
                    }
                }
                if running >= best {
                    break 'blocks;
                }
                if v.d.ln != f64::NEG_INFINITY {
                    let m = 2.0 * v.d.isf_over_keep_up(keep, ln_keep);
                    let cand = running.max(m);
                    if cand < best {
                        best = cand;
                        best_at = if m >= running {
                            v.d.val.unwrap_or(0.0)
                        } else {
                            running_at
                        };
                    }
                }
                if v.last {
                    break 'blocks;
                }
            }
        }
        if !best.is_finite() {
            return Err(
                "no finite μ can be certified in double precision: the trade-off curve is \
                 numerically 0 at some α > 0"
                    .into(),
            );
        }
        // best is one rounded sum of two values rounded up.
        Ok((rounding::up(best.max(0.0), rounding::ARITH4_REL), best_at))
    }
}

/// "Cell majorant" lines (ε_a, δ_b), prepared for evaluation: each cell [ε_a, ε_b] of a lower profile
/// δ_L gives lines 1 − δ_L(ε_b) − e^{ε_a}α and e^{−ε_a}(1 − δ_L(ε_b) − α) that are *above* every
/// line of the true curve with ε in the cell, so their maximum bounds the curve from above.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cells {
    eps: Vec<f64>,
    c: Vec<(f64, f64)>,
    /// ≤ e^{ε_a} (∞ past ε ≈ 709).
    y_down: Vec<f64>,
    /// ≥ e^{−ε_a}.
    z_up: Vec<f64>,
}

impl Cells {
    /// Cells (ε_a, δ_L(ε_b)). A cell's start may stand for a real number within an ulp of it
    /// (a grid loss formed as a product): its lines are drawn at ε_a·(1 − 2U) rounded down, at or
    /// below that real start, so they stay above every line of the cell (see [`Lines::new`]).
    pub(crate) fn new(cells: &[(f64, f64)]) -> Self {
        let eps: Vec<f64> = cells
            .iter()
            .map(|c| rounding::down(c.0.max(0.0), rounding::ULP_REL).max(0.0))
            .collect();
        Cells {
            c: cells
                .iter()
                .map(|c| one_minus(c.1.clamp(0.0, 1.0)))
                .collect(),
            y_down: eps.iter().map(|&e| exp_down(e)).collect(),
            z_up: eps.iter().map(|&e| exp_up(-e)).collect(),
            eps,
        }
    }

    /// An upper bound on f(α): max(0, every cell line rounded up), and at most 1 − α.
    pub(crate) fn upper_at(&self, alpha: f64) -> f64 {
        if alpha >= 1.0 {
            return 0.0;
        }
        let ln_a = alpha.ln();
        let mut best = 0.0_f64;
        for j in 0..self.eps.len() {
            let c = self.c[j];
            let y = self.y_down[j];
            let steep = if alpha <= 0.0 {
                c.0 + c.1
            } else if y.is_finite() && alpha >= 1e-290 {
                // Plain arithmetic (no fma in this hot loop): the product and the two sums add at
                // most 2U·(c + yα) of error, added here so the final rounding covers the rest.
                let p = y * alpha;
                (c.0 - p) + c.1 + rounding::ARITH2_REL * (c.0 + p)
            } else {
                // ln α is computed here (≤ 0.52 ulp in glibc ≥ 2.28, ≤ 1.04U relative; 1.1U
                // measured), the sum adds U·(ε + |ln α|) and exp 1.1U: ≤ (1.1 + 1)·|ln α|·U + ε·U +
                // 1.1U, so 2U per |ln α| fell short where |ln α| > 29/0.1 (this branch: α < 1e-290,
                // |ln α| > 667). 3U per |ln α| covers it. (In `steep_down` the same 2U is adequate:
                // there ln α is the exact point when α is kept as its log, and when it is computed,
                // ε > 709 leaves an ε·U spare over the 0.1U·|ln α| ≤ 69U.)
                let t = self.eps[j] + ln_a;
                let p = rounding::down(t.exp(), (4.0 + 2.0 * self.eps[j] + 3.0 * ln_a.abs()) * U);
                (c.0 - p) + c.1
            };
            let t = (c.0 - alpha) + c.1;
            let flat = if t > 0.0 { self.z_up[j] * t } else { 0.0 };
            best = best.max(steep).max(flat);
        }
        // One final rounding covers each line's (≤ 4U relative + TINY absolute) error.
        (rounding::up(best, LINE_REL) + TINY)
            .min(rounding::up(1.0 - alpha, U))
            .clamp(0.0, 1.0)
    }
}

/// A lower bound on sup_α Φ̄⁻¹(α/(1−s)) + Φ̄⁻¹(u(α)/(1−s)) for an upper bound u of the curve:
/// every α gives a valid lower bound on the tight μ (each term rounded down). Evaluated on a
/// logarithmic grid of α from 1e-300 to ½ plus `around`, then refined by golden-section search in
/// ln α around the best grid point.
pub(crate) fn mu_lower(slack: f64, around: f64, u: impl Fn(f64) -> f64) -> (f64, f64) {
    let at = |ln_a: f64| mu_lower_at(slack, ln_a.exp(), &u);
    const GRID: usize = 64;
    let (lo, hi) = ((1e-300f64).ln(), (0.5f64).ln());
    let mut pts: Vec<f64> = (0..GRID)
        .map(|i| lo + (hi - lo) * i as f64 / (GRID - 1) as f64)
        .collect();
    if around > 0.0 {
        pts.push(around.ln());
    }
    let mut best = (0.0_f64, hi);
    for &p in &pts {
        let v = at(p);
        if v > best.0 {
            best = (v, p);
        }
    }
    // Golden-section refinement on [best − step, best + step].
    let step = (hi - lo) / (GRID - 1) as f64;
    let refined =
        crate::accountant::gdp::golden_max(at, best.1 - step, (best.1 + step).min(hi), 36, 0.0);
    if refined.0 > best.0 {
        best = refined;
    }
    (best.0.max(0.0), best.1.exp())
}

/// Φ̄⁻¹(α/(1−s)) + Φ̄⁻¹(u(α)/(1−s)) at one α, each term rounded down: a valid lower bound on the
/// tight μ when u is an upper bound on the curve (0 when the constraint is vacuous there).
pub(crate) fn mu_lower_at(slack: f64, a: f64, u: impl Fn(f64) -> f64) -> f64 {
    let keep = 1.0 - slack;
    if !(a > 0.0 && a < keep) {
        return 0.0;
    }
    let b = u(a);
    if b >= keep {
        return 0.0;
    }
    let za = isf_down(rounding::up(a / keep, rounding::ARITH2_REL));
    if b <= 0.0 {
        // The upper curve is 0 at α: only the α term bounds μ from below.
        return za.max(0.0);
    }
    (za + isf_down(rounding::up(b / keep, rounding::ARITH2_REL))).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The walk of [`Lines::mu_upper`] without skipping any block: every vertex's constraint and
    /// stopping point evaluated in order (the reference the block skipping must reproduce).
    fn mu_upper_unskipped(l: &Lines, slack: f64) -> f64 {
        let (keep, ln_keep) = (1.0 - slack, (-slack).ln_1p());
        let w = l.build_walk();
        let (mut running, mut best) = (0.0_f64, f64::INFINITY);
        for (k, v) in w.v.iter().enumerate() {
            if k >= 1 && v.b < keep {
                let m = if v.b <= 0.0 {
                    f64::INFINITY
                } else {
                    v.a.isf_over_keep_up(keep, ln_keep)
                        + Alpha::of_double(v.b).isf_over_keep_up(keep, ln_keep)
                };
                running = running.max(m);
            }
            if v.d.ln != f64::NEG_INFINITY {
                best = best.min(running.max(2.0 * v.d.isf_over_keep_up(keep, ln_keep)));
            }
            if v.last {
                break;
            }
        }
        rounding::up(best.max(0.0), 4.0 * U)
    }

    /// Skipping blocks by their certified bounds gives the unskipped walk's μ up to rounding:
    /// Gaussian profiles of many μ and grids, with slacks from 0 to 1e-2.
    #[test]
    fn block_skipping_reproduces_the_full_walk() {
        use crate::accountant::gdp;
        for &mu in &[0.05, 0.5, 1.0, 3.0, 12.0] {
            for &h in &[1e-4, 1e-3, 1e-2] {
                let n = ((mu * mu / 2.0 + 12.0 * mu) / h) as usize;
                if n > 100_000 {
                    continue;
                }
                let profile: Vec<(f64, f64)> = (0..n)
                    .map(|i| {
                        let e = i as f64 * h;
                        (e, gdp::delta_for_epsilon(mu, e))
                    })
                    .collect();
                let l = Lines::new(&profile);
                for &s in &[0.0, 1e-12, 1e-8, 1e-5, 1e-2] {
                    let Ok((fast, _)) = l.mu_upper(s, 0.0) else {
                        continue;
                    };
                    let full = mu_upper_unskipped(&l, s);
                    // Equal up to rounding: the skip tests compare true Φ̄⁻¹ values, so a skipped
                    // vertex's rounded-up requirement may exceed the running maximum by ulps.
                    assert!(
                        fast >= full * (1.0 - 1e-14) && fast <= full * (1.0 + 1e-12),
                        "μ={mu} h={h} s={s}: {fast} vs {full}"
                    );
                    if s == 0.0 {
                        assert!(fast >= mu * (1.0 - 1e-12), "μ={mu} h={h}: {fast}");
                    }
                }
            }
        }
    }

    #[test]
    fn pure_epsilon_forty_has_the_closed_form_mu() {
        // f_{40,0}: μ = 2Φ̄⁻¹(1/(1 + e^40)) = 17.1895… (the vertex on the diagonal).
        let lines = Lines::new(&[(0.0, 1.0 - 2.0 / (1.0 + 40f64.exp())), (40.0, 0.0)]);
        let (mu, _) = lines.mu_upper(0.0, 0.0).unwrap();
        let truth = 2.0 * normal::isf(1.0 / (1.0 + 40f64.exp()));
        assert!(mu >= truth && mu < truth * (1.0 + 1e-9), "{mu} vs {truth}");
    }

    #[test]
    fn lower_curve_near_a_vertex_is_below_the_exact_value() {
        // f_{35,0} at α = 1/(1 + e^35): exact β = e^{−35}·(1 − α) = 6.305e-16.
        let lines = Lines::new(&[(0.0, 1.0 - 2.0 / (1.0 + 35f64.exp())), (35.0, 0.0)]);
        let alpha = 1.0 / (1.0 + 35f64.exp());
        let b = lines.lower_at(alpha);
        let exact = (-35f64).exp() * (1.0 - alpha);
        assert!(b <= exact && b > exact * (1.0 - 1e-12), "{b} vs {exact}");
    }
}
