//! (ε, δ)-DP as a trade-off function, and its exact compositions.
//!
//! (ε, δ)-DP is exactly f_{ε,δ}-DP (Wasserman & Zhou 2010; DRS22 Prop. 3), so a black box known only
//! by (ε, δ) enters the f-DP world without loss. Compositions are exact too: the pure part is the
//! product of randomized-response pairs whose privacy loss is a sum of ±εᵢ (DRS22 §3.3, after
//! Kairouz, Oh & Viswanath 2017), and the δ parts factor out (DRS22 eqs. (10)–(12)).

use super::rounding::{self, U};
use super::tradeoff::PiecewiseLinear;

/// The absolute error of an atom's log-probability (and of the arguments of exp and expm1 in
/// [`PureComposition::delta_for_epsilon`]), per unit of the logarithms' magnitudes: 4U. ln C(n,k) =
/// ln n! − ln k! − ln (n−k)! cancels large logs (absolute error ≲ 4U·ln n!), and k·ln q +
/// (n−k)·ln(1−q) adds ≲ 4U·n·(|ln q| + |ln(1−q)|); exp turns both into a relative error of the
/// probability.
const LN_ATOM_ABS_REL: f64 = 4.0 * U;

/// The relative error of the computed A − e^ε·B in [`PureComposition::epsilon_for_delta`] beyond
/// the atoms' own: the two Neumaier sums (≲ 2U each), e^ε (≈ 1.1U), the product and the difference.
/// 16U is an allowance over these, as found; the target is shrunk by 4 times the total.
const SWEEP_REL: f64 = 16.0 * U;

/// Losses within 16U relative are one atom in [`merge_equal`]: sums of the same ±εᵢ in different
/// orders differ by a few roundings of the magnitudes. A tolerance, not an error bound: merging
/// keeps the larger loss, which can only raise δ(ε), so its size affects tightness and atom count
/// only.
const MERGE_TOL_REL: f64 = 16.0 * U;

/// Most privacy-loss atoms an exact pure-DP composition may hold (a heterogeneous composition has
/// ∏(nᵢ + 1) of them); beyond this the numerical (PLD) engine is the tool.
pub const MAX_EXACT_ATOMS: usize = 1_000_000;

/// f_{ε,δ}(α) = max{0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α)}.
///
/// # Formula
/// ```text
/// f_{ε,δ}(α) = max{0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α)}        DRS22 eq. (4)
/// ```
/// # Soundness
/// Rounded down, line by line: near α = 1/(1 + e^ε) the value 1 − δ − e^ε α is a difference of
/// nearly equal terms, so it is formed in double-double with a slope rounded up (see
/// `lines`), never as a plain difference rounded by a relative bound.
///
/// ```
/// use privacy_ledger::accountant::epsilon_delta::tradeoff;
/// assert!((tradeoff(1.0, 0.01, 0.1) - 0.718171817154095).abs() < 1e-14);
/// ```
pub fn tradeoff(eps: f64, delta: f64, alpha: f64) -> f64 {
    super::lines::Lines::new(&[(eps, delta)]).lower_at(alpha.clamp(0.0, 1.0))
}

/// f_{ε,δ} as a polygon: (0, 1−δ), the fixed point (1−δ)/(1+e^ε) on the diagonal, (1−δ, 0), (1, 0).
pub fn curve(eps: f64, delta: f64) -> PiecewiseLinear {
    let k = (1.0 - delta) / (1.0 + eps.exp());
    let mut pts = vec![(0.0, 1.0 - delta)];
    if k > 0.0 && k < 1.0 - delta {
        pts.push((k, k));
    }
    pts.push((1.0 - delta, 0.0));
    if delta > 0.0 {
        pts.push((1.0, 0.0));
    }
    PiecewiseLinear::from_vertices(&pts)
}

/// The privacy profile of f_{ε₀,δ₀}: δ(ε) = δ₀ for ε ≥ ε₀ and 1 − (1 − δ₀)(1 + e^ε)/(1 + e^{ε₀}) below.
///
/// # Formula
/// ```text
/// δ(ε) = 1 + f*_{ε₀,δ₀}(−e^ε)                                DRS22 Prop. 6 (DRS22, derived)
/// ```
pub fn profile(eps0: f64, delta0: f64, eps: f64) -> f64 {
    if eps >= eps0 {
        return delta0;
    }
    // = (e^ε·expm1(ε₀ − ε) + δ₀(1 + e^ε))/(1 + e^{ε₀}): non-negative terms only (the plain
    // 1 − (…)/(…) cancels to rounding noise just below ε₀). The value increases with ε₀ − ε, which
    // is rounded up (see PROFILE_REL).
    let d = rounding::sub_up(eps0, eps);
    let v = (eps.exp() * d.exp_m1() + delta0 * (1.0 + eps.exp())) / (1.0 + eps0.exp());
    rounding::prob_up(v, PROFILE_REL)
}

/// The widening of [`profile`]: 12U.
///
/// With ε₀ − ε rounded *up* (the profile increases with it), the rest is (Higham Lemma 3.1, every
/// libm call within one ulp, 2U, as glibc documents exp and expm1; 1.1U measured):
/// A = e^ε·expm1(d) carries 2U + 2U + U (product); B = δ₀(1 + e^ε) 2U + U + U; A + B ≥ 0 without
/// cancellation, ≤ 5U + U (sum); the denominator 1 + e^{ε₀} 2U + U; the quotient U: 10U to first
/// order (7.3U with the measured libm errors; γ₁₀ − 10U < 100U² is negligible). 12U leaves 2U.
///
/// The 8U ([`rounding::LIBM_CHAIN_REL`]) used before covered the measured count (≈ 8.3U with the
/// ulp step) only while ε₀ − ε was exact: formed to nearest, its absolute error U·(ε₀ − ε) became a
/// relative error of expm1 of up to U·(ε₀ − ε)·e^d/expm1(d) ≈ U·(1 + d) — 30U at ε₀ − ε ≈ 30,
/// unbounded in d. Directed rounding removes that term.
pub const PROFILE_REL: f64 = 12.0 * U;

/// 1 − ∏(1 − δᵢ)^{countᵢ}: the δ of f_{0,δ₁} ⊗ … ⊗ f_{0,δₙ} (DRS22 eq. (11)), formed as
/// −expm1(Σ countᵢ·ln(1 − δᵢ)) — no cancellation for tiny δ — and rounded up by (2n + 6)U (each
/// term carries a ln1p and a product, the sum n − 1 additions, expm1 one more). Exactly 0 when
/// every δᵢ is 0 (a widened 0 would read as real mass at +∞).
pub fn combine_deltas(deltas: impl IntoIterator<Item = (f64, u64)>) -> f64 {
    combine_deltas_dir(deltas, true)
}

/// [`combine_deltas`] rounded down instead (by the same bound): a mass at +∞ that a *lower* bound
/// counts as the mechanism's own.
pub fn combine_deltas_down(deltas: impl IntoIterator<Item = (f64, u64)>) -> f64 {
    combine_deltas_dir(deltas, false)
}

fn combine_deltas_dir(deltas: impl IntoIterator<Item = (f64, u64)>, up: bool) -> f64 {
    let mut s = 0.0_f64;
    let mut n = 0.0_f64;
    for (d, count) in deltas {
        if d >= 1.0 {
            return 1.0;
        }
        s += (-d).ln_1p() * count as f64;
        n += 1.0;
    }
    if s == 0.0 {
        return 0.0;
    }
    let rel = (2.0 * n + 6.0) * U;
    if up {
        rounding::prob_up(-s.exp_m1(), rel)
    } else {
        rounding::prob_down(-s.exp_m1(), rel)
    }
}

/// The composition would hold more atoms than [`MAX_EXACT_ATOMS`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("the exact composition would hold {atoms} privacy-loss atoms (limit {limit})")]
pub struct TooManyAtoms {
    pub atoms: f64,
    pub limit: usize,
}

/// The exact composition of pure εᵢ-DP mechanisms, as the distribution of its privacy loss.
///
/// Each εᵢ-DP mechanism is dominated by randomized response with loss ±εᵢ (P-probabilities
/// e^ε/(1+e^ε) and 1/(1+e^ε)), and f_{ε,0}^{⊗n} = T(B(n, 1/(1+e^ε)), B(n, e^ε/(1+e^ε))) (DRS22 §3.3);
/// the composition's loss is the sum, represented exactly by its atoms.
#[derive(Debug, Clone, PartialEq)]
pub struct PureComposition {
    /// Privacy-loss values ln(P/Q), ascending.
    losses: Vec<f64>,
    /// ln P-probability of each atom.
    log_p: Vec<f64>,
    /// Relative error bound of each atom's probability (from forming log binomial coefficients).
    atom_rel_err: f64,
}

impl PureComposition {
    /// The composition of `countᵢ` mechanisms that are each εᵢ-DP.
    ///
    /// # Errors
    /// [`TooManyAtoms`] when ∏(countᵢ + 1) exceeds [`MAX_EXACT_ATOMS`].
    pub fn new(groups: &[(f64, u64)]) -> Result<Self, TooManyAtoms> {
        let too_many = |atoms: f64| TooManyAtoms {
            atoms,
            limit: MAX_EXACT_ATOMS,
        };
        let mut acc: Vec<(f64, f64)> = vec![(0.0, 0.0)];
        let mut rel = 0.0_f64;
        for &(eps, n) in groups {
            if eps == 0.0 || n == 0 {
                continue;
            }
            let ln_q = -(-eps).exp().ln_1p(); // ln(e^ε/(1+e^ε))
            let ln_1mq = -eps + ln_q; // ln(1/(1+e^ε))
            let lnf_n = statrs::function::factorial::ln_factorial(n);
            // ln C(n,k) = ln n! − ln k! − ln (n−k)!: absolute error ≲ 4U·ln n! (cancellation of
            // large logs), which becomes a relative error of each probability.
            rel += LN_ATOM_ABS_REL * (lnf_n + 1.0)
                + LN_ATOM_ABS_REL * n as f64 * (ln_q.abs() + ln_1mq.abs());
            let binom: Vec<(f64, f64)> = (0..=n)
                .map(|j| {
                    let lc = statrs::function::factorial::ln_binomial(n, j);
                    let loss = (2.0 * j as f64 - n as f64) * eps;
                    (loss, lc + j as f64 * ln_q + (n - j) as f64 * ln_1mq)
                })
                .collect();
            // Work bound before the product; equal losses merge, so the result may be far smaller.
            let work = acc.len() as f64 * binom.len() as f64;
            if work > 4.0 * MAX_EXACT_ATOMS as f64 {
                return Err(too_many(work));
            }
            let mut next = Vec::with_capacity(acc.len() * binom.len());
            for &(l1, p1) in &acc {
                for &(l2, p2) in &binom {
                    next.push((l1 + l2, p1 + p2));
                }
            }
            next.sort_by(|a, b| a.0.total_cmp(&b.0));
            acc = merge_equal(next);
            if acc.len() > MAX_EXACT_ATOMS {
                return Err(too_many(acc.len() as f64));
            }
        }
        Ok(PureComposition {
            losses: acc.iter().map(|a| a.0).collect(),
            log_p: acc.iter().map(|a| a.1).collect(),
            // exp of each atom's log-probability and the sums forming it: an allowance, not counted
            // here.
            atom_rel_err: rel + rounding::LIBM_CHAIN_REL,
        })
    }

    /// Number of atoms.
    pub fn atoms(&self) -> usize {
        self.losses.len()
    }

    /// δ(ε) = Σ_{L > ε} P(L)(1 − e^{ε−L}) = H_{e^ε}(P‖Q) (Gomez et al., "(ε,δ) considered harmful" eq. (23)).
    ///
    /// # Soundness
    /// Summed with Neumaier compensation and rounded up by the atoms' relative error plus 8U.
    pub fn delta_for_epsilon(&self, eps: f64) -> f64 {
        let mut s = Neumaier::default();
        let mut max_arg = 0.0_f64;
        for i in (0..self.losses.len()).rev() {
            let l = self.losses[i];
            if l <= eps {
                break;
            }
            let t = self.log_p[i].exp() * (-(eps - l).exp_m1());
            max_arg = max_arg.max(self.log_p[i].abs() + (eps - l).abs());
            s.add(t);
        }
        rounding::prob_up(
            s.value(),
            self.atom_rel_err + LN_ATOM_ABS_REL * (max_arg + 2.0),
        )
    }

    /// The smallest ε ≥ 0 with δ(ε) ≤ δ, by one descending sweep over the atoms (between atoms
    /// δ(ε) = A − e^ε B with A, B the P- and Q-mass above ε, solved in closed form).
    ///
    /// # Soundness
    /// The root is computed for the target δ/(1 + r) where r bounds the relative error of the
    /// computed A − e^ε B, and rounded up, so it is never below the exact root.
    pub fn epsilon_for_delta(&self, delta: f64) -> f64 {
        let r = self.atom_rel_err + SWEEP_REL;
        let target = delta / (1.0 + 4.0 * r);
        let (mut a, mut b) = (Neumaier::default(), Neumaier::default());
        for i in (0..self.losses.len()).rev() {
            let l = self.losses[i];
            // On [l, previous loss) the mass above ε is what has been added so far.
            let at_l = a.value() - l.exp() * b.value();
            if l < 0.0 || at_l > target {
                // Root in (l, previous]: A − e^ε B = target.
                let lo = l.max(0.0);
                if a.value() - lo.exp() * b.value() <= target {
                    return lo;
                }
                let e = ((a.value() - target) / b.value()).ln();
                // A difference, a quotient and a logarithm.
                return rounding::up(e.max(lo), rounding::LIBM_CHAIN_REL);
            }
            a.add(self.log_p[i].exp());
            b.add((self.log_p[i] - l).exp());
        }
        0.0
    }

    /// The exact trade-off curve T(P, Q): vertices (P(L < ℓⱼ), Q(L ≥ ℓⱼ)) over the atoms ℓⱼ
    /// (Neyman–Pearson with randomisation between atoms).
    ///
    /// # Soundness
    /// α rounded up and β down by the atoms' relative error, so the polygon lies below the exact one.
    pub fn curve(&self) -> PiecewiseLinear {
        let m = self.losses.len();
        // exp of a difference, then a Neumaier sum (≲ 2U).
        let rel = self.atom_rel_err + rounding::LIBM_SHORT_REL;
        let mut beta = vec![0.0; m + 1];
        let mut s = Neumaier::default();
        for i in (0..m).rev() {
            s.add((self.log_p[i] - self.losses[i]).exp());
            beta[i] = s.value();
        }
        let mut pts: Vec<(f64, f64)> = Vec::with_capacity(m + 1);
        let mut a = Neumaier::default();
        for (j, b) in beta.into_iter().enumerate() {
            let alpha = if j == m {
                1.0
            } else {
                rounding::prob_up(a.value(), rel)
            };
            let beta = if j == 0 {
                1.0
            } else {
                rounding::prob_down(b, rel)
            };
            match pts.last_mut() {
                // α rounded up onto its predecessor: keep the lower β there.
                Some(last) if alpha <= last.0 => last.1 = last.1.min(beta),
                _ => pts.push((alpha, beta)),
            }
            if j < m {
                a.add(self.log_p[j].exp());
            }
        }
        PiecewiseLinear::from_vertices(&pts)
    }
}

/// The exact composition of (εᵢ, δᵢ)-DP mechanisms: f_{ε₁,0} ⊗ … ⊗ f_{εₙ,0} ⊗ f_{0, 1−∏(1−δᵢ)}
/// (DRS22 eqs. (10)–(12)).
#[derive(Debug, Clone, PartialEq)]
pub struct ApproxComposition {
    pure: PureComposition,
    delta: f64,
}

impl ApproxComposition {
    /// The composition of `countᵢ` copies of (εᵢ, δᵢ)-DP mechanisms.
    pub fn new(groups: &[(f64, f64, u64)]) -> Result<Self, TooManyAtoms> {
        let pure: Vec<(f64, u64)> = groups.iter().map(|&(e, _, n)| (e, n)).collect();
        Ok(ApproxComposition {
            pure: PureComposition::new(&pure)?,
            delta: combine_deltas(groups.iter().map(|&(_, d, n)| (d, n))),
        })
    }

    /// The δ part 1 − ∏(1 − δᵢ) (rounded up).
    pub fn delta0(&self) -> f64 {
        self.delta
    }

    /// δ(ε) = d + (1 − d)·δ_pure(ε) (DRS22 eq. (12), DRS22).
    pub fn delta_for_epsilon(&self, eps: f64) -> f64 {
        let d = self.delta;
        // 1 − d, the product and the sum: three roundings.
        rounding::prob_up(
            d + (1.0 - d) * self.pure.delta_for_epsilon(eps),
            rounding::ARITH4_REL,
        )
    }

    /// The smallest ε ≥ 0 with δ(ε) ≤ δ; +∞ when δ < 1 − ∏(1 − δᵢ).
    pub fn epsilon_for_delta(&self, delta: f64) -> f64 {
        let d = self.delta;
        if delta < d {
            return f64::INFINITY;
        }
        // d + (1−d)x ≤ δ ⟺ x ≤ (δ − d)/(1 − d); shrink the target by 4U to cover this division.
        let target = rounding::down((delta - d) / (1.0 - d), rounding::ARITH4_REL).max(0.0);
        if target == 0.0 {
            return self.pure.epsilon_for_delta(0.0);
        }
        self.pure.epsilon_for_delta(target)
    }

    /// The exact trade-off curve.
    pub fn curve(&self) -> PiecewiseLinear {
        self.pure.curve().tensor_delta(self.delta)
    }
}

/// Merges atoms whose losses agree to within rounding (input sorted by loss), adding their
/// probabilities. Sums of the same ±εᵢ in different orders can differ in the last bits; such atoms
/// are one atom mathematically. The merged atom takes the *larger* loss, which can only raise δ(ε)
/// (Σ p(1 − e^{ε−L})₊ grows with L): pessimistic.
fn merge_equal(sorted: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(sorted.len());
    for (l, lp) in sorted {
        match out.last_mut() {
            Some(last) if l - last.0 <= MERGE_TOL_REL * (l.abs().max(last.0.abs()) + 1e-300) => {
                let (m, n) = if last.1 > lp {
                    (last.1, lp)
                } else {
                    (lp, last.1)
                };
                last.0 = l;
                last.1 = m + (n - m).exp().ln_1p();
            }
            _ => out.push((l, lp)),
        }
    }
    out
}

/// Compensated (Neumaier) summation.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Neumaier {
    s: f64,
    c: f64,
}

impl Neumaier {
    pub(crate) fn add(&mut self, x: f64) {
        let t = self.s + x;
        if self.s.abs() >= x.abs() {
            self.c += (self.s - t) + x;
        } else {
            self.c += (x - t) + self.s;
        }
        self.s = t;
    }
    pub(crate) fn value(&self) -> f64 {
        self.s + self.c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenfold_composition_matches_drs22_figure_5() {
        // DRS22 Fig. 5: 10 × (1/√10, 0)-DP has ε = 2.89 at δ = 1e-3 (DRS22: 2.88967273935981).
        let c = PureComposition::new(&[(1.0 / 10f64.sqrt(), 10)]).unwrap();
        let e = c.epsilon_for_delta(1e-3);
        assert!(
            e >= 2.889_672_739_359_81 && e < 2.889_672_739_359_81 * (1.0 + 1e-9),
            "{e}"
        );
        // Binomial δ-profile at ε = 1 (DRS22): 0.1323186101.
        assert!((c.delta_for_epsilon(1.0) - 0.132_318_610_1).abs() < 1e-10);
    }

    #[test]
    fn heterogeneous_delta_composition_matches_dong_roth_su() {
        // 10 × (1/√10, 1e-4): base δ = 1 − (1 − 1e-4)^10 = 0.000999550119979; ε at δ = 0.002 is
        // 2.889217957 (DRS22).
        let c = ApproxComposition::new(&[(1.0 / 10f64.sqrt(), 1e-4, 10)]).unwrap();
        assert!((c.delta0() - 0.000_999_550_119_979).abs() < 1e-15);
        let e = c.epsilon_for_delta(0.002);
        assert!(
            (e - 2.889_217_957).abs() < 1e-8 && e >= 2.889_217_957 - 1e-9,
            "{e}"
        );
        assert_eq!(c.epsilon_for_delta(1e-4), f64::INFINITY);
    }

    #[test]
    fn single_pure_mechanism_curve_is_f_eps_0() {
        let c = PureComposition::new(&[(1.0, 1)]).unwrap().curve();
        for i in 0..=20 {
            let a = i as f64 / 20.0;
            assert!(
                (c.eval(a) - tradeoff(1.0, 0.0, a)).abs() < 1e-14,
                "alpha {a}"
            );
        }
    }

    #[test]
    fn too_many_atoms_is_an_error() {
        // Incommensurate ε's do not merge: (n₁+1)(n₂+1) ≈ 2.25e6 atoms.
        assert!(PureComposition::new(&[(0.1, 1500), (0.1 * 2f64.sqrt(), 1500)]).is_err());
        // Commensurate ones do: 3001 distinct losses.
        assert!(PureComposition::new(&[(0.1, 1000), (0.2, 1000)]).is_ok());
    }
}
