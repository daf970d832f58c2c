//! Mechanisms whose privacy losses lie on a lattice, and the lower PMF of n copies of one.
//!
//! Randomized response (losses −c, 0, c), the discrete Laplace (a·(Δ − 2x)), the discrete Gaussian
//! (Δ·(Δ − 2x)/(2σ²)) and an (ε, δ) or TV box (−ε, 0, ε) have every finite loss at an integer
//! multiple of one step s. Any grid lower PMF of one copy loses a first-order amount per copy (an
//! atom between two grid points cannot be split between them from below: the split that keeps P's
//! and Q's masses is connect-the-dots, an upper PMF), so composing n of them lowers the bracket's
//! lower end by ≈ n·h/2 — 1.0 in ε for 10⁴ copies on grid 10⁻⁴. Sums of lattice losses stay on the
//! lattice: the n copies are composed *on the lattice* (a PMF of step s, by the engine's own
//! convolution or FFT power with its round-off bounds) and rounded down to the grid once, so the
//! lower end loses at most one grid step in all, whatever n.

use super::pmf::Pmf;
use super::{Pld, PldError, MAX_GRID_POINTS};
use crate::accountant::rounding::{self, LIBM_REL, U};

/// The finite losses of a symmetric mechanism on a lattice: atom i has loss index[i]·s for an
/// exact step s within `step`·(1 ± `step_rel`), and P-mass at least masses[i]·(1 − `mass_rel`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Lattice {
    step: f64,
    step_rel: f64,
    points: Vec<(i64, f64)>,
    mass_rel: f64,
    /// The mechanism's own mass at +∞, or a lower bound on it.
    inf: f64,
}

impl Lattice {
    /// A lattice of (index, computed P-mass) points; `step` > 0 within a relative `step_rel` of
    /// the exact step, every exact mass at least its computed value times (1 − `mass_rel`), and
    /// `inf` at most the exact mass at +∞.
    pub(crate) fn new(
        step: f64,
        step_rel: f64,
        points: Vec<(i64, f64)>,
        mass_rel: f64,
        inf: f64,
    ) -> Self {
        debug_assert!(step > 0.0 && step.is_finite());
        Lattice {
            step,
            step_rel,
            points,
            mass_rel,
            inf,
        }
    }

    /// Bytes held (for caches bounded by bytes).
    pub(crate) fn heap_bytes(&self) -> usize {
        64 + 16 * self.points.len()
    }

    /// A lower PLD of n copies on grid step h (symmetric, like the mechanism), or `None` when the
    /// lattice or the grid would hold more than [`MAX_GRID_POINTS`] points (the caller then keeps
    /// its composed lower PMFs).
    ///
    /// # Soundness
    /// 1. *Masses.* Each computed mass is lowered by its relative bound and rounded down, so every
    ///    lattice mass is at most the exact one (a sub-probability PMF: left-out mass only lowers
    ///    δ). Its n-fold composition is formed by [`Pmf::self_compose_at`], whose round-off bounds
    ///    (`abs_err`, `bin_err`, `rel_err`) and truncation records (`moved_up` for the lower tail
    ///    moved up, `inf_trunc` for the upper tail moved to +∞, neither counted by a lower
    ///    reading) are carried over unchanged, for the reason in note 3.
    /// 2. *Positions.* Lattice point J has the exact loss J·s ≥ ⌊J·step·(1 ∓ step_rel)⌋ (rounded
    ///    down), and goes to the largest grid index g with g·h at or below that bound (found
    ///    exactly with a fused multiply-add): every loss moves down, and δ(ε) = Σ m·(1 − e^{ε−ℓ})₊
    ///    only falls when a loss falls. Point 0 stays at 0.
    /// 3. *Merging.* The map J ↦ g is non-decreasing, so a δ read off the grid PMF weighs the
    ///    lattice masses with weights in [0, 1] that still increase with J: the δ-level bound on
    ///    the lattice's round-off holds as it is; a grid mass sums at most c lattice masses, so
    ///    its own error is at most c times the per-mass bound, and the sum's rounding adds c·U
    ///    relative.
    /// 4. *+∞.* The n copies' mass at +∞ is 1 − (1 − p∞)ⁿ, formed as −expm1(n·ln1p(−p∞)) and
    ///    rounded down by the relative error of its argument.
    pub(crate) fn lower_pld(&self, n: u64, h: f64) -> Result<Option<Pld>, PldError> {
        let Some(one) = self.one_copy() else {
            return Ok(None);
        };
        let many = match one.self_compose_at(n, None) {
            Ok(p) => p,
            Err(PldError::TooLarge(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(mut grid) = self.onto_grid(&many, h) else {
            return Ok(None);
        };
        grid.inf = power_of_infinity(self.inf, n);
        Ok(Some(Pld::from_pmfs(grid, None)))
    }

    /// One copy as a PMF of step `step` (its positions are only nominal: they are never read as
    /// losses, only composed), masses lowered (note 1); `None` when the index range is too wide.
    fn one_copy(&self) -> Option<Pmf> {
        let lo = self.points.iter().map(|p| p.0).min()?;
        let hi = self.points.iter().map(|p| p.0).max()?;
        let len = usize::try_from(hi.checked_sub(lo)?).ok()?.checked_add(1)?;
        if len > MAX_GRID_POINTS {
            return None;
        }
        let mut mass = vec![0.0; len];
        for &(i, m) in &self.points {
            let m = rounding::down(m, self.mass_rel + rounding::ARITH2_REL).max(0.0);
            let slot = &mut mass[(i - lo) as usize];
            // Repeated indices (none of the constructors makes one) sum rounded down.
            *slot = if *slot == 0.0 {
                m
            } else {
                rounding::down(*slot + m, rounding::ARITH2_REL).max(0.0)
            };
        }
        let mut p = Pmf::exact(self.step, lo, mass);
        p.trim_zeros();
        Some(p)
    }

    /// The largest grid index g with g·h at or below the exact loss of lattice point `j` (note 2).
    fn grid_index(&self, j: i64, h: f64) -> i64 {
        if j == 0 {
            return 0;
        }
        // The product j·h: one rounding, 2U allowed.
        let x = rounding::down(j as f64 * self.step, self.step_rel + rounding::ARITH2_REL);
        // A first guess, then the exact test g·h ≤ x: fma rounds g·h − x once, which keeps its sign.
        let mut g = (x / h).floor();
        while g.mul_add(h, -x) > 0.0 {
            g -= 1.0;
        }
        while (g + 1.0).mul_add(h, -x) <= 0.0 {
            g += 1.0;
        }
        g as i64
    }

    /// The lattice PMF `many` rounded down onto grid step h (notes 2 and 3); `None` when the grid
    /// range exceeds [`MAX_GRID_POINTS`].
    fn onto_grid(&self, many: &Pmf, h: f64) -> Option<Pmf> {
        let first = self.grid_index(many.lo, h);
        let last = self.grid_index(many.lo + many.mass.len() as i64 - 1, h);
        let width = last.checked_sub(first)?.checked_add(1)?;
        if width <= 0 || width as u64 > MAX_GRID_POINTS as u64 {
            return None;
        }
        let mut mass = vec![0.0; width as usize];
        // The most lattice masses summed into one grid mass: g is non-decreasing in k, so the
        // masses of a grid point are a run.
        let (mut merged, mut run, mut last_g) = (1usize, 0usize, usize::MAX);
        for (k, &m) in many.mass.iter().enumerate() {
            if m <= 0.0 {
                continue;
            }
            let g = (self.grid_index(many.lo + k as i64, h) - first) as usize;
            mass[g] += m;
            run = if g == last_g { run + 1 } else { 1 };
            (merged, last_g) = (merged.max(run), g);
        }
        let merged = merged as f64;
        let mut p = Pmf {
            h,
            lo: first,
            mass,
            inf: 0.0,
            inf_trunc: many.inf_trunc,
            moved_up: many.moved_up,
            abs_err: many.abs_err,
            bin_err: many
                .bin_err
                .map(|b| rounding::up(b * merged, rounding::ARITH2_REL)),
            rel_err: rounding::up(many.rel_err + merged * U, rounding::ARITH2_REL),
            steps: 0,
        };
        p.trim_zeros();
        Some(p)
    }
}

/// 1 − (1 − p)ⁿ, rounded down (note 4 of [`Lattice::lower_pld`]).
fn power_of_infinity(p: f64, n: u64) -> f64 {
    if p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    let v = -((n as f64) * (-p).ln_1p()).exp_m1();
    // ln_1p and expm1 (LIBM_REL each) and the product n·ln_1p(−p), whose rounding is an absolute
    // error of expm1's argument: 8U allowed for it.
    rounding::prob_down(v, rounding::ARITH8_REL + 2.0 * LIBM_REL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accountant::guarantee::Guarantee;
    use crate::accountant::pld::query::PldGuarantee;

    /// Randomized response with p = 0.5, k = 2: losses ±ln 3, P-masses 3/4 and 1/4.
    fn rr() -> Lattice {
        Lattice::new(
            3f64.ln(),
            4.0 * U,
            vec![(1, 0.75), (-1, 0.25)],
            4.0 * U,
            0.0,
        )
    }

    /// δ(ε) of the exact n-fold composition of `rr()`: Σₖ C(n,k)(3/4)ᵏ(1/4)ⁿ⁻ᵏ (1 − e^{ε−(2k−n)c})₊,
    /// summed in log space from the binomial's own terms (an oracle that shares nothing with the
    /// lattice code but the formula).
    fn exact_delta(n: u64, eps: f64) -> f64 {
        let c = 3f64.ln();
        let mut ln_binom = 0.0_f64; // ln C(n, k), built up k by k
        let mut total = 0.0;
        for k in 0..=n {
            if k > 0 {
                ln_binom += ((n - k + 1) as f64).ln() - (k as f64).ln();
            }
            let loss = (2.0 * k as f64 - n as f64) * c;
            if loss > eps {
                let ln_p = ln_binom + k as f64 * 0.75f64.ln() + (n - k) as f64 * 0.25f64.ln();
                total += ln_p.exp() * -(eps - loss).exp_m1();
            }
        }
        total
    }

    #[test]
    fn the_lower_pmf_of_many_copies_stays_below_the_exact_profile_within_one_grid_step() {
        // The oracle's own summation error is ≈ 1e-13 relative; a lower bound may not exceed the
        // truth by more than that, and must come within the loss of one grid step (δ at ε + h).
        const ORACLE_REL: f64 = 1e-11;
        let h = 1e-3;
        for n in [1u64, 7, 100, 3000] {
            let low = rr().lower_pld(n, h).unwrap().expect("fits the grid");
            // Read as every lower figure is: as the lower PMFs of a PLD (the upper PMFs here are
            // the same ones, but only the lower end is checked).
            let pld = Pld {
                lower: Some(Box::new(low.clone())),
                ..low
            };
            let g = PldGuarantee::new(&pld, None);
            let sd = (n as f64).sqrt() * 3f64.ln();
            for t in [-2.0, -0.5, 0.0, 0.5, 1.0, 2.0] {
                let eps = (0.5 * n as f64 * 3f64.ln() + t * sd).max(0.0);
                let (got, exact) = (g.delta_bounds(eps).0, exact_delta(n, eps));
                assert!(
                    got <= exact * (1.0 + ORACLE_REL) + 1e-300,
                    "n {n} ε {eps}: lower {got:e} above the exact {exact:e}"
                );
                let next = exact_delta(n, eps + 1.01 * h);
                assert!(
                    got >= next * (1.0 - ORACLE_REL),
                    "n {n} ε {eps}: lower {got:e} below δ(ε + h) = {next:e}"
                );
            }
        }
    }

    #[test]
    fn lattice_points_go_to_the_grid_point_at_or_below_them() {
        // Losses j·0.25 (exact doubles) on grid h = 1e-4 (a double slightly above 10⁻⁴): the grid
        // point found is at or below the loss, and at most one step below the largest such (the
        // loss is first lowered by its rounding margin, which may cross a grid point).
        let l = Lattice::new(0.25, 0.0, vec![(1, 1.0)], 0.0, 0.0);
        let h = 1e-4;
        for j in [-1_000_003i64, -7, -1, 1, 4, 40_000, 1_000_003] {
            let g = l.grid_index(j, h);
            let x = j as f64 * 0.25;
            assert!((g as f64).mul_add(h, -x) <= 0.0, "j {j}: g {g} above");
            assert!(
                ((g + 2) as f64).mul_add(h, -x) > 0.0,
                "j {j}: g {g} too low"
            );
        }
        assert_eq!(l.grid_index(0, h), 0);
        // With a relative uncertainty on the step, the point moves below its lowest value.
        let l = Lattice::new(0.25, 1e-6, vec![(1, 1.0)], 0.0, 0.0);
        let g = l.grid_index(4000, h);
        assert!(
            (g as f64) * 1e-4 <= 1000.0 * (1.0 - 1e-6) && g >= 9_999_980,
            "{g}"
        );
    }

    #[test]
    fn the_mass_at_infinity_of_n_copies_is_rounded_down() {
        // Cases whose exact value is a double.
        for (p, n, exact) in [(0.5, 3u64, 0.875), (0.25, 2, 0.4375), (0.75, 2, 0.9375)] {
            let got = power_of_infinity(p, n);
            assert!(got <= exact, "{p} {n}: {got} above {exact}");
            assert!(got >= exact * (1.0 - 1e-14), "{p} {n}: {got} vs {exact}");
        }
        // n·p for a tiny p (the next term is below the resolution), from below.
        let got = power_of_infinity(1e-300, 7);
        assert!(got <= 7e-300 && got >= 7e-300 * (1.0 - 1e-14), "{got:e}");
        assert_eq!(power_of_infinity(0.0, 9), 0.0);
    }
}
