//! Queries on a composed PLD: ε(δ), δ(ε), the trade-off curve, μ with regret — each a bracket.

use super::profile::AtomProfile;
use super::{Pld, Pmf};
use crate::accountant::clt::CltSums;
use crate::accountant::gdp;
use crate::accountant::guarantee::{Guarantee, Method, MuReport};
use crate::accountant::lines::{self, Cells, Lines};
use crate::accountant::rounding::{self, U};
use crate::accountant::tradeoff::PiecewiseLinear;
use std::sync::OnceLock;

/// Most grid points of ε ≥ 0 used to build the trade-off curve (beyond this they are thinned evenly;
/// any subset of profile points gives a valid lower bound on the curve).
const MAX_CURVE_POINTS: usize = 30_000;

/// Cells of the coarse upper curve used to search for the μ lower bound's α.
const COARSE_CURVE_POINTS: usize = 2_000;

/// One ordering, prepared for queries.
struct Side {
    /// Profile of the pessimistic PMF; the lower bound reads it at ε + shift.
    upper: AtomProfile,
    /// Profile of the same masses each lowered by the per-entry round-off bound (floored at 0), read
    /// at ε + shift by the lower bound. FFT round-off leaves ±noise in every bin and clamping the
    /// negative part to 0 keeps only the positive half, which does not average out: over tens of
    /// thousands of bins beyond the true support it adds up to far more than the δ-level bound.
    /// Lowering every bin by a bound on its own error removes it, whatever its sign. `None` when
    /// there is no round-off (then it is `upper`).
    lower: Option<AtomProfile>,
    /// steps·h: the lower bound's downward shift of every loss.
    shift: f64,
    /// Mass at +∞ counted by the upper bound.
    inf_upper: f64,
    /// Mass at +∞ counted by the lower bound.
    inf_lower: f64,
    /// Mass to subtract in the lower bound (moved up, round-off).
    sub_lower: f64,
    /// Relative error bound of the upper profile.
    rel: f64,
    /// Relative error bound of the profile the lower bound reads.
    rel_lower: f64,
    /// Largest finite loss of the lower PMF (for the rounding margin of ε).
    max_loss_lower: f64,
    abs: f64,
    max_loss: f64,
    /// Grid index of the first atom.
    lo: i64,
    /// Cells (ε_a, δ_L(ε_b)) of the upper bound on the curve from this ordering's lower profile
    /// (built on first use).
    curve_upper: OnceLock<Cells>,
    /// A coarser version of the same bound, for searches.
    curve_upper_coarse: OnceLock<Cells>,
}

impl Side {
    /// The queries of one ordering: `p` its upper PMF, `low` the PMF its lower bounds are read from
    /// (a dedicated lower PMF, or `p` itself, shifted down by its steps·h).
    fn new(p: &Pmf, low: &Pmf) -> Self {
        let same = std::ptr::eq(p, low);
        let shift = low.steps as f64 * low.h;
        let upper = p.profile(0.0);
        // Every mass is floored by a bound on its own error: the per-mass bound when the error is
        // FFT round-off only (then the floors alone keep the profile below the exact one, as a
        // floored mass (m̂ − b)₊ is at most the exact mass whatever the sign of the error), else the
        // δ-level bound, which is then also subtracted.
        let (floor, sub_abs) = match low.bin_err {
            Some(b) => (b, 0.0),
            None => (low.abs_err, low.abs_err),
        };
        let lower = (!same || floor > 0.0).then(|| {
            let floored: Vec<f64> = low.mass.iter().map(|&m| (m - floor).max(0.0)).collect();
            AtomProfile::uniform(low.lo, low.h, 0.0, &floored)
        });
        let rel = p.rel_err + upper.rel_err();
        let rel_lower = low.rel_err + lower.as_ref().map_or(upper.rel_err(), |l| l.rel_err());
        Side {
            upper,
            lower,
            shift,
            inf_upper: p.inf + p.inf_trunc,
            inf_lower: low.inf,
            // 1e-300 absorbs subnormal-range rounding, which the relative error bounds do not model.
            // `abs_err` bounds δ's error (from FFT round-off and from inner numerical sources); every
            // bin is lowered by it as well in `lower`, against the clamped noise. 1e-300 absorbs
            // subnormal-range rounding, which the relative error bounds do not model.
            sub_lower: low.moved_up + sub_abs + 1e-300,
            rel,
            rel_lower,
            max_loss_lower: low.max_loss(),
            abs: p.abs_err,
            max_loss: p.max_loss(),
            lo: p.lo,
            curve_upper: OnceLock::new(),
            curve_upper_coarse: OnceLock::new(),
        }
    }

    /// The profile the lower bound reads (see the `lower` field).
    fn lower(&self) -> &AtomProfile {
        self.lower.as_ref().unwrap_or(&self.upper)
    }

    /// Upper δ: the finite part widened by its relative error bound, plus every mass at +∞, plus the
    /// round-off bound. (The masses at +∞ are data or bounds already; they are not widened again.)
    fn delta_upper(&self, eps: f64) -> f64 {
        self.widen(self.upper.delta(eps))
    }

    fn widen(&self, finite: f64) -> f64 {
        if finite == 0.0 {
            // No finite mass above ε (past the last bin): δ is the mass at +∞, exactly — round-off
            // perturbs bins that exist, it creates none beyond them.
            return self.inf_upper.min(1.0);
        }
        // The finite part's own bound plus 4U (an allowance for reading it), then the two sums.
        let f = rounding::up(finite, self.rel + rounding::ARITH4_REL);
        rounding::prob_up(f + self.inf_upper + self.abs, rounding::ARITH2_REL)
    }

    /// [`Side::delta_upper`] at the grid point ε = j·h, read off the profile table in O(1).
    fn delta_upper_at_grid(&self, j: i64, eps: f64) -> f64 {
        let i = j - self.lo;
        if i < 0 || i as usize >= self.upper.losses().len() {
            return self.delta_upper(eps);
        }
        self.widen(self.upper.delta_at_atom(i as usize))
    }

    fn delta_lower(&self, eps: f64) -> f64 {
        self.lower_from(self.lower().delta(eps + self.shift))
    }

    /// [`Side::delta_lower`] at ε = (loss of atom i) − shift, read off the profile table in O(1)
    /// (the exact grid point, free of the rounding of forming ε + shift).
    fn delta_lower_at_atom(&self, i: usize) -> f64 {
        self.lower_from(self.lower().delta_at_atom(i))
    }

    /// The lower δ from the pessimistic profile's finite part at the shifted point.
    fn lower_from(&self, finite: f64) -> f64 {
        let v = (finite + self.inf_lower) * (1.0 - self.rel_lower) - self.sub_lower;
        rounding::prob_down(v, rounding::ARITH4_REL) // two sums, a difference, a product
    }

    fn epsilon_upper(&self, delta: f64) -> f64 {
        // widen(F) ≤ δ ⟸ F ≤ (δ − p∞ − abs)(1 − 2U)/(1 + rel + 4U), rounded down once more: the
        // same constants as `widen`, inverted.
        let room = delta - self.inf_upper - self.abs;
        if room < 0.0 {
            return f64::INFINITY;
        }
        let t = rounding::down(
            room * (1.0 - rounding::ARITH2_REL) / (1.0 + self.rel + rounding::ARITH4_REL),
            rounding::ARITH4_REL,
        );
        let t = t.max(0.0);
        let e = self.upper.epsilon_for_finite(t);
        if e <= 0.0 {
            return 0.0;
        }
        // ε from the profile's closed form (a logarithm and a few roundings), absolute in the
        // losses.
        rounding::up(
            e + rounding::LIBM_CHAIN_REL * (1.0 + self.max_loss.abs()),
            rounding::LIBM_CHAIN_REL,
        )
    }

    fn epsilon_lower(&self, delta: f64) -> f64 {
        let t = (delta + self.sub_lower) / (1.0 - self.rel_lower) - self.inf_lower;
        if t < 0.0 {
            return f64::INFINITY;
        }
        let e = self.lower().epsilon_for_finite(t) - self.shift;
        if e <= 0.0 {
            return 0.0;
        }
        rounding::down(
            e - rounding::LIBM_CHAIN_REL * (1.0 + self.max_loss_lower.abs()),
            rounding::LIBM_CHAIN_REL,
        )
        .max(0.0)
    }

    /// Upper bound on the mechanism's curve at α from this ordering's lower profile δ_L.
    ///
    /// The true curve is f(α) = sup_{ε≥0} max{1 − δ(ε) − e^ε α, e^{−ε}(1 − δ(ε) − α)} with δ ≥ δ_L
    /// (DRS22 Prop. 5/6). Over a cell [ε_a, ε_b] both terms are at most the same expressions with
    /// δ_L(ε_b) (δ_L decreases) and e^{±ε_a} in place of e^{±ε}; so the upper envelope of those
    /// "cell majorant" lines bounds f from above, for any partition of [0, ∞) into cells. The cells
    /// here are runs of the lower profile's grid points (thinned to at most [`MAX_CURVE_POINTS`]),
    /// then [ε_last, ∞) where δ_L is constant.
    fn curve_upper(&self, alpha: f64) -> f64 {
        self.curve_upper_cells().upper_at(alpha)
    }

    /// The cells behind [`Side::curve_upper`], built on first use.
    fn curve_upper_cells(&self) -> &Cells {
        self.curve_upper
            .get_or_init(|| self.cells_of_at_most(MAX_CURVE_POINTS))
    }

    /// Coarser cells (any partition gives a valid, if looser, upper bound): the μ lower bound
    /// searches α on these, then evaluates its best α on the fine ones.
    fn curve_upper_coarse(&self) -> &Cells {
        self.curve_upper_coarse
            .get_or_init(|| self.cells_of_at_most(COARSE_CURVE_POINTS))
    }

    /// Cells [ε_a, ε_b] over runs of the lower profile's grid points, at most about `max` of them,
    /// then [ε_last, ∞) where δ_L is constant.
    fn cells_of_at_most(&self, max: usize) -> Cells {
        let losses = self.lower().losses();
        let first = losses.partition_point(|&l| l - self.shift <= 0.0);
        let n = losses.len();
        let stride = (n - first).div_ceil(max).max(1);
        let mut cells: Vec<(f64, f64)> = Vec::with_capacity((n - first) / stride + 2);
        let mut a = 0.0_f64;
        let mut j = first;
        while j < n {
            let b = (j + stride - 1).min(n - 1);
            let eb = losses[b] - self.shift;
            cells.push((a, self.delta_lower_at_atom(b)));
            a = eb;
            j = b + 1;
        }
        cells.push((a, self.delta_lower(a)));
        Cells::new(&cells)
    }
}

/// A composed PLD prepared for the report.
pub struct PldGuarantee {
    sides: Vec<Side>,
    /// The lines of the upper profile: the sound lower curve and the μ fit.
    lines: Lines,
    /// The same curve as a polygon (for the regret figure and display).
    curve: PiecewiseLinear,
    clt: Option<CltSums>,
}

impl PldGuarantee {
    /// Prepares the queries (builds the profiles and the trade-off curve).
    pub fn new(pld: &Pld, clt: Option<CltSums>) -> Self {
        let low = pld.lower_view();
        let sides = if pld.is_symmetric() && low.is_symmetric() {
            vec![Side::new(&pld.remove, &low.remove)]
        } else {
            let (r, a) = super::both(
                || Side::new(&pld.remove, &low.remove),
                || Side::new(pld.add_pmf(), low.add_pmf()),
            );
            vec![r, a]
        };
        let h = pld.remove.h;
        // Profile points ε_j = j·h for j = 0 … J (beyond the largest loss δ is constant).
        let max_loss = sides.iter().map(|s| s.max_loss).fold(0.0_f64, f64::max);
        let j_max = (max_loss / h).ceil().max(0.0) as usize + 1;
        let stride = j_max.div_ceil(MAX_CURVE_POINTS).max(1);
        let mut profile: Vec<(f64, f64)> = (0..=j_max)
            .step_by(stride)
            .map(|j| {
                let e = j as f64 * h;
                (
                    e,
                    sides
                        .iter()
                        .map(|s| s.delta_upper_at_grid(j as i64, e))
                        .fold(0.0, f64::max),
                )
            })
            .collect();
        let e_top = (j_max + 1) as f64 * h;
        profile.push((
            e_top,
            sides
                .iter()
                .map(|s| s.delta_upper(e_top))
                .fold(0.0, f64::max),
        ));
        // Two independent readings of one profile: one per core.
        let (curve, lines) = super::both(
            || PiecewiseLinear::from_profile(&profile),
            || Lines::new(&profile),
        );
        PldGuarantee {
            sides,
            lines,
            curve,
            clt,
        }
    }

    /// The (lower-bound) trade-off curve.
    pub fn curve(&self) -> &PiecewiseLinear {
        &self.curve
    }

    fn curve_upper(&self, alpha: f64) -> f64 {
        self.sides
            .iter()
            .map(|s| s.curve_upper(alpha))
            .fold(1.0, f64::min)
    }

    /// μ upper bound: the smallest μ with (1 − s)G_μ(α/(1 − s)) ≤ f(α) for all α, certified on the
    /// lines of the upper profile (see [`Lines::mu_upper`]).
    fn mu_fit(&self, slack: f64) -> Result<(f64, f64), String> {
        let own = self.sides.iter().map(|s| s.inf_lower).fold(0.0, f64::max);
        self.lines.mu_upper(slack, own)
    }

    /// μ lower bound: isf(α/(1−s)) + isf(f_upper(α)/(1−s)) maximised over α (any α gives a valid
    /// bound; see [`lines::mu_lower`]).
    fn mu_lower(&self, slack: f64, around: f64) -> f64 {
        if let [r, a] = &self.sides[..] {
            // Build both orderings' cells at once (they are independent).
            super::both(|| r.curve_upper_coarse(), || a.curve_upper_coarse());
        }
        let coarse = |a: f64| {
            self.sides
                .iter()
                .map(|s| s.curve_upper_coarse().upper_at(a))
                .fold(1.0, f64::min)
        };
        let (v, at) = lines::mu_lower(slack, around, coarse);
        // The same α on the fine cells can only give a tighter (larger) valid bound.
        v.max(lines::mu_lower_at(slack, at, |a| self.curve_upper(a)))
    }

    /// The μ report: the fit first, then its lower bound and (`with_regret`) its regret, which both
    /// start from it, on a core each.
    fn mu_report(&self, delta_slack: f64, with_regret: bool) -> MuReport {
        match self.mu_fit(delta_slack) {
            Ok((mu, at)) => {
                let lower = || self.mu_lower(delta_slack, at).min(mu);
                let (lower, regret) = if with_regret {
                    let (l, r) = super::both(lower, || self.regret(mu));
                    (l, Some(r))
                } else {
                    (lower(), None)
                };
                MuReport {
                    upper: Some(mu),
                    lower: Some(lower),
                    delta_slack,
                    regret,
                    reason: None,
                }
            }
            Err(reason) => MuReport {
                upper: None,
                lower: None,
                delta_slack,
                regret: None,
                reason: Some(reason),
            },
        }
    }

    /// The regret Δ(f, G_μ) (Gomez et al., "(ε,δ) considered harmful" eq. (13), Alg. 2): the smallest κ with f(α + κ) − κ ≤ G_μ(α)
    /// for all α, by bisection on κ over the curve's vertices and a 10 000-point grid; the lower end
    /// of the final bracket is returned (Gomez et al., "(ε,δ) considered harmful": "we underestimate Δ").
    fn regret(&self, mu: f64) -> f64 {
        let mut alphas: Vec<f64> = self.curve.vertices().map(|v| v.0).collect();
        let stride = alphas.len().div_ceil(5_000).max(1);
        alphas = alphas.into_iter().step_by(stride).collect();
        alphas.extend((0..=10_000).map(|i| i as f64 / 10_000.0));
        alphas.sort_by(f64::total_cmp);
        alphas.dedup();
        let g: Vec<f64> = alphas.iter().map(|&a| gdp::tradeoff(mu, a)).collect();
        // The α's (indices into `alphas`, ascending) among `live` where f(α + κ) − κ > G_μ(α). As
        // f(α + κ) − κ decreases in κ, an α that holds at κ holds at every larger κ; the bisection's
        // lower end only grows, so only the α's failing there need to be checked again (the result
        // is that of checking every α each time).
        let failing = |k: f64, live: &[usize]| -> Vec<usize> {
            let shifted: Vec<f64> = live.iter().map(|&i| (alphas[i] + k).min(1.0)).collect();
            self.curve
                .eval_sorted(&shifted)
                .iter()
                .zip(live)
                .filter(|&(&f, &i)| f - k > g[i])
                .map(|(_, &i)| i)
                .collect()
        };
        let mut live = failing(0.0, &(0..alphas.len()).collect::<Vec<_>>());
        if live.is_empty() {
            return 0.0;
        }
        let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
        for _ in 0..32 {
            let mid = (lo + hi) / 2.0;
            let still = failing(mid, &live);
            if still.is_empty() {
                hi = mid;
            } else {
                lo = mid;
                live = still;
            }
        }
        lo
    }
}

impl Guarantee for PldGuarantee {
    fn method(&self) -> Method {
        Method::Pld
    }

    fn epsilon_bounds(&self, delta: f64) -> (f64, f64) {
        let hi = self
            .sides
            .iter()
            .map(|s| s.epsilon_upper(delta))
            .fold(0.0, f64::max);
        let lo = self
            .sides
            .iter()
            .map(|s| s.epsilon_lower(delta))
            .fold(0.0, f64::max);
        (lo.min(hi), hi)
    }

    fn delta_bounds(&self, eps: f64) -> (f64, f64) {
        let hi = self
            .sides
            .iter()
            .map(|s| s.delta_upper(eps))
            .fold(0.0, f64::max);
        let lo = self
            .sides
            .iter()
            .map(|s| s.delta_lower(eps))
            .fold(0.0, f64::max);
        (lo.min(hi), hi)
    }

    fn beta_bounds(&self, alpha: f64) -> (f64, f64) {
        let lo = self.lines.lower_at(alpha);
        (lo, self.curve_upper(alpha).max(lo))
    }

    /// 1 − f(FPR) from the sound (lower) curve alone, rounded up: the default's value without
    /// building the curve's upper end, which it discards.
    fn tpr(&self, fpr: f64) -> f64 {
        rounding::prob_up(1.0 - self.lines.lower_at(fpr), U)
    }

    /// The lower curve read once for both (each reading is a pass over every line).
    fn beta_and_tpr(&self, alpha: f64) -> ((f64, f64), f64) {
        let lo = self.lines.lower_at(alpha);
        let tpr = rounding::prob_up(1.0 - lo, U);
        ((lo, self.curve_upper(alpha).max(lo)), tpr)
    }

    fn mu(&self, delta_slack: f64) -> MuReport {
        self.mu_report(delta_slack, true)
    }

    fn mu_upper(&self, delta_slack: f64) -> Option<f64> {
        self.mu_fit(delta_slack).ok().map(|m| m.0)
    }

    fn mu_bracket(&self, delta_slack: f64) -> MuReport {
        self.mu_report(delta_slack, false)
    }

    fn infinity_mass(&self) -> f64 {
        self.sides.iter().map(|s| s.inf_upper).fold(0.0, f64::max)
    }

    fn clt_sums(&self) -> Option<CltSums> {
        self.clt
    }
}
