//! Exact oracle for mechanisms with finitely many privacy-loss values: a pair (P, Q) of probability
//! distributions on finitely many outcomes, held as atoms (P(o), Q(o), ln P(o)/Q(o)) in 320-bit
//! floats.
//!
//! Formulas (all standard; e.g. Balle et al. 2018 "Privacy amplification by subsampling", Dong,
//! Roth & Su 2022 "Gaussian differential privacy" (DRS22)):
//! - hockey stick δ_{P‖Q}(ε) = Σ_o (P(o) − e^ε Q(o))₊ = Σ_{L(o) > ε} P(o)(1 − e^{ε−L(o)}) + P[Q = 0],
//!   each term formed with exp_m1 of the exact difference ε − L(o), so no cancellation;
//! - trade-off T(P, Q)(α) = inf{1 − E_Q φ : E_P φ ≤ α} by Neyman–Pearson: reject outcomes in
//!   increasing order of L; the curve is piecewise linear through the cumulative (α, β) vertices,
//!   the β's formed as suffix sums (relative precision kept where β is tiny);
//! - composition: product pairs (atoms multiply, losses add), merging atoms of equal loss (equal
//!   here means equal to 2^-280 relative: the losses built by this suite are exact sums of a few
//!   exact values, and distinct losses differ by ≫ 1e-20);
//! - Poisson subsampling under add/remove: (qP + (1−q)Q, Q) and its reverse (BBG18 Thm. 10).
//!
//! # Error bound
//! Masses and losses carry ≤ a few thousand roundings of 2^-320 relative each; δ, β and μ are
//! therefore exact to far better than [`hp::REL_TOL`]. A pair may also carry `slop`: an absolute
//! bound on mass left out (truncated infinite supports), which widens every bracket by that much.

use crate::hp::{self, F};
use std::cmp::Ordering;

/// The privacy loss ln P(o)/Q(o) of an outcome.
#[derive(Clone, Debug)]
pub enum Loss {
    Fin(F),
    /// Q(o) = 0 < P(o).
    PosInf,
    /// P(o) = 0 < Q(o).
    NegInf,
}

#[derive(Clone, Debug)]
pub struct Atom {
    pub p: F,
    pub q: F,
    pub l: Loss,
}

impl Atom {
    /// An atom whose loss is computed as ln(p/q).
    pub fn new(p: F, q: F) -> Atom {
        let l = match (hp::is_zero(&p), hp::is_zero(&q)) {
            (false, false) => Loss::Fin(hp::ln(&(&p / &q))),
            (false, true) => Loss::PosInf,
            (true, false) => Loss::NegInf,
            (true, true) => Loss::Fin(hp::zero()),
        };
        Atom { p, q, l }
    }

    /// An atom whose loss is known exactly (q is then p·e^{−l}).
    pub fn with_loss(p: F, l: F) -> Atom {
        let q = &p * hp::exp(&-l.clone());
        Atom {
            p,
            q,
            l: Loss::Fin(l),
        }
    }

    fn key(&self) -> (i8, Option<&F>) {
        match &self.l {
            Loss::NegInf => (-1, None),
            Loss::Fin(l) => (0, Some(l)),
            Loss::PosInf => (1, None),
        }
    }

    fn swap(&self) -> Atom {
        Atom {
            p: self.q.clone(),
            q: self.p.clone(),
            l: match &self.l {
                Loss::Fin(l) => Loss::Fin(-l.clone()),
                Loss::PosInf => Loss::NegInf,
                Loss::NegInf => Loss::PosInf,
            },
        }
    }
}

fn cmp_atoms(a: &Atom, b: &Atom) -> Ordering {
    let (ka, la) = a.key();
    let (kb, lb) = b.key();
    ka.cmp(&kb).then_with(|| match (la, lb) {
        (Some(x), Some(y)) => x.partial_cmp(y).expect("finite losses compare"),
        _ => Ordering::Equal,
    })
}

fn same_loss(a: &Atom, b: &Atom) -> bool {
    match (&a.l, &b.l) {
        (Loss::Fin(x), Loss::Fin(y)) => {
            let d = x - y;
            let scale = hp::max(
                &hp::one(),
                &hp::max(&(x.clone() * x.signum()), &(y.clone() * y.signum())),
            );
            d.clone() * d.signum() <= scale * hp::f(2f64.powi(-280))
        }
        (Loss::PosInf, Loss::PosInf) | (Loss::NegInf, Loss::NegInf) => true,
        _ => false,
    }
}

/// A pair (P, Q) of distributions on finitely many outcomes.
#[derive(Clone, Debug)]
pub struct Pair {
    /// Sorted by loss (−∞ first), equal losses merged.
    pub atoms: Vec<Atom>,
    /// Absolute bound on mass not represented (0 for a complete pair).
    pub slop: F,
}

impl Pair {
    pub fn new(atoms: Vec<Atom>) -> Pair {
        let mut p = Pair {
            atoms,
            slop: hp::zero(),
        };
        p.normalise();
        p
    }

    /// No privacy loss: P = Q.
    pub fn identity() -> Pair {
        Pair::new(vec![Atom::with_loss(hp::one(), hp::zero())])
    }

    fn normalise(&mut self) {
        self.atoms
            .retain(|a| !(hp::is_zero(&a.p) && hp::is_zero(&a.q)));
        self.atoms.sort_by(cmp_atoms);
        let mut out: Vec<Atom> = Vec::with_capacity(self.atoms.len());
        for a in self.atoms.drain(..) {
            match out.last_mut() {
                Some(b) if same_loss(b, &a) => {
                    b.p += &a.p;
                    b.q += &a.q;
                }
                _ => out.push(a),
            }
        }
        self.atoms = out;
    }

    /// (Q, P).
    pub fn swap(&self) -> Pair {
        let mut p = Pair {
            atoms: self.atoms.iter().map(Atom::swap).collect(),
            slop: self.slop.clone(),
        };
        p.atoms.reverse();
        p
    }

    /// The product pair (P₁×P₂, Q₁×Q₂).
    pub fn product(&self, other: &Pair) -> Pair {
        let mut atoms = Vec::with_capacity(self.atoms.len() * other.atoms.len());
        for a in &self.atoms {
            for b in &other.atoms {
                let p = &a.p * &b.p;
                let q = &a.q * &b.q;
                let l = match (&a.l, &b.l) {
                    (Loss::Fin(x), Loss::Fin(y)) => Loss::Fin(x + y),
                    (Loss::PosInf, Loss::NegInf) | (Loss::NegInf, Loss::PosInf) => continue,
                    (Loss::PosInf, _) | (_, Loss::PosInf) => Loss::PosInf,
                    (Loss::NegInf, _) | (_, Loss::NegInf) => Loss::NegInf,
                };
                atoms.push(Atom { p, q, l });
            }
        }
        let mut out = Pair {
            atoms,
            slop: &self.slop + &other.slop,
        };
        out.normalise();
        out
    }

    /// The n-fold product.
    pub fn power(&self, n: u64) -> Pair {
        let mut acc = Pair::identity();
        let mut base = self.clone();
        let mut n = n;
        while n > 0 {
            if n & 1 == 1 {
                acc = acc.product(&base);
            }
            n >>= 1;
            if n > 0 {
                base = base.product(&base);
            }
        }
        acc
    }

    /// (qP + (1−q)Q, Q): the remove pair of Poisson subsampling at rate q (BBG18 Thm. 10).
    pub fn mix_into_first(&self, q: &F) -> Pair {
        let r = hp::one() - q;
        let atoms = self
            .atoms
            .iter()
            .map(|a| {
                let p = q * &a.p + &r * &a.q;
                match &a.l {
                    // ln((q p + (1−q) Q)/Q) = ln(1 + q(e^L − 1)).
                    Loss::Fin(l) => Atom {
                        p,
                        q: a.q.clone(),
                        l: Loss::Fin(hp::ln1p(&(q * hp::expm1(l)))),
                    },
                    _ => Atom::new(p, a.q.clone()),
                }
            })
            .collect();
        let mut out = Pair {
            atoms,
            slop: self.slop.clone(),
        };
        out.normalise();
        out
    }

    /// (P, qQ + (1−q)P): the add pair of Poisson subsampling when `self` is the inner add pair.
    pub fn mix_into_second(&self, q: &F) -> Pair {
        self.swap().mix_into_first(q).swap()
    }

    /// (q·P + (1−q)·⊥, q·Q + (1−q)·⊥) with ⊥ a separate outcome: the inner mechanism runs with
    /// probability q, otherwise an output that does not depend on the record is released.
    pub fn with_bottom(&self, q: &F) -> Pair {
        let mut atoms: Vec<Atom> = self
            .atoms
            .iter()
            .map(|a| Atom {
                p: q * &a.p,
                q: q * &a.q,
                l: a.l.clone(),
            })
            .collect();
        let r = hp::one() - q;
        if !hp::is_zero(&r) {
            atoms.push(Atom::with_loss(r, hp::zero()));
        }
        let mut out = Pair {
            atoms,
            slop: q * &self.slop,
        };
        out.normalise();
        out
    }

    /// δ_{P‖Q}(ε) of the represented atoms (a lower bound; + slop for an upper bound).
    pub fn delta(&self, eps: &F) -> F {
        let mut s = hp::zero();
        for a in self.atoms.iter().rev() {
            match &a.l {
                Loss::PosInf => s += &a.p,
                Loss::Fin(l) => {
                    if l <= eps {
                        break;
                    }
                    let d = eps - l;
                    s -= &a.p * hp::expm1(&d);
                }
                Loss::NegInf => break,
            }
        }
        s
    }

    /// P[Q = 0]: the mass at +∞ loss.
    pub fn inf_mass(&self) -> F {
        self.atoms
            .iter()
            .filter(|a| matches!(a.l, Loss::PosInf))
            .fold(hp::zero(), |s, a| s + &a.p)
    }

    /// The largest finite loss (None if there is none).
    pub fn max_finite_loss(&self) -> Option<F> {
        self.atoms.iter().rev().find_map(|a| match &a.l {
            Loss::Fin(l) => Some(l.clone()),
            _ => None,
        })
    }

    /// Vertices (α, β) of T(P, Q), from (0, ·) to (·, 0), α increasing.
    pub fn np_vertices(&self) -> Vec<(F, F)> {
        let n = self.atoms.len();
        // suffix[i] = Σ_{j ≥ i} Q_j (β after rejecting atoms 0..i).
        let mut suffix = vec![hp::zero(); n + 1];
        for i in (0..n).rev() {
            suffix[i] = &suffix[i + 1] + &self.atoms[i].q;
        }
        let mut v = Vec::with_capacity(n + 1);
        let mut alpha = hp::zero();
        v.push((hp::zero(), hp::min(&hp::one(), &suffix[0])));
        for (i, a) in self.atoms.iter().enumerate() {
            alpha += &a.p;
            v.push((hp::min(&alpha, &hp::one()), suffix[i + 1].clone()));
        }
        v
    }
}

/// Lower convex hull of points sorted by x (Andrew's monotone chain).
fn lower_hull(mut pts: Vec<(F, F)>) -> Vec<(F, F)> {
    pts.sort_by(|a, b| {
        a.0.partial_cmp(&b.0)
            .unwrap()
            .then(a.1.partial_cmp(&b.1).unwrap())
    });
    pts.dedup_by(|b, a| a.0 == b.0); // keep the lowest β at each α
    let mut h: Vec<(F, F)> = Vec::with_capacity(pts.len());
    for p in pts {
        while h.len() >= 2 {
            let (a, b) = (&h[h.len() - 2], &h[h.len() - 1]);
            // Remove b if it is on or above the segment a → p.
            let cross = (&b.0 - &a.0) * (&p.1 - &a.1) - (&b.1 - &a.1) * (&p.0 - &a.0);
            if cross <= hp::zero() {
                h.pop();
            } else {
                break;
            }
        }
        h.push(p);
    }
    h
}

/// A piecewise-linear convex trade-off curve given by its vertices.
#[derive(Clone, Debug)]
pub struct Curve {
    pub vertices: Vec<(F, F)>,
}

impl Curve {
    /// The value at α by linear interpolation (α beyond the last vertex: the last β).
    pub fn eval(&self, alpha: &F) -> F {
        eval_poly(&self.vertices, alpha)
    }
}

/// Evaluates a piecewise-linear curve given by vertices (α increasing) at α.
fn eval_poly(v: &[(F, F)], alpha: &F) -> F {
    {
        let i = v.partition_point(|(a, _)| a <= alpha);
        if i == 0 {
            return v[0].1.clone();
        }
        if i == v.len() {
            return v[v.len() - 1].1.clone();
        }
        let (a0, b0) = &v[i - 1];
        let (a1, b1) = &v[i];
        b0 + (b1 - b0) * ((alpha - a0) / (a1 - a0))
    }
}

/// The symmetrised trade-off curve min{T₁, T₂, T₁⁻¹, T₂⁻¹}** of a mechanism whose remove and add
/// dominating pairs are `rem` and `add` (DRS22 Prop. F.2 / Def. F.1): the lower convex hull of the
/// pointwise minimum, whose vertices are among the vertices of the four curves (a crossing of two
/// convex curves is a concave kink of their minimum, never a hull vertex).
pub fn symmetric_curve(rem: &Pair, add: &Pair) -> Curve {
    let curves: Vec<Vec<(F, F)>> = [rem.np_vertices(), add.np_vertices()]
        .into_iter()
        .flat_map(|v| {
            let mut inv: Vec<(F, F)> = v.iter().map(|(a, b)| (b.clone(), a.clone())).collect();
            inv.reverse();
            [v, inv]
        })
        .collect();
    let mut pts = Vec::new();
    for c in &curves {
        for (a, _) in c {
            let m = curves
                .iter()
                .map(|d| eval_poly(d, a))
                .reduce(|x, y| hp::min(&x, &y))
                .unwrap();
            pts.push((a.clone(), m));
        }
    }
    pts.push((hp::one(), hp::zero()));
    Curve {
        vertices: lower_hull(pts),
    }
}

/// Fast isf for screening: A&S 26.2.23 (absolute error < 4.5e-4 for any p in (0, 1)).
pub fn isf_rough(p: &F) -> f64 {
    let pf = hp::to_f64(p);
    if pf >= 1.0 {
        return f64::NEG_INFINITY;
    }
    let (pp, sign) = if pf > 0.5 {
        (hp::one() - p, -1.0)
    } else {
        (p.clone(), 1.0)
    };
    if hp::is_zero(&pp) || hp::is_neg(&pp) {
        return sign * f64::INFINITY;
    }
    let t = hp::to_f64(&hp::sqrt(&(hp::ln(&pp) * hp::f(-2.0))));
    sign * (t
        - (2.515517 + 0.802853 * t + 0.010328 * t * t)
            / (1.0 + 1.432788 * t + 0.189269 * t * t + 0.001308 * t * t * t))
}

/// The smallest μ with f ≥ G_μ ⊗ f_{0,s}, i.e. (1−s)·G_μ(α/(1−s)) ≤ f(α) for all α < 1−s, for a
/// piecewise-linear convex f: the constraint is convex in α and f linear between vertices, so it
/// suffices at the vertices, where it reads μ ≥ isf(α/(1−s)) + isf(f(α)/(1−s)); vertices with
/// α ≥ 1−s or f(α) ≥ 1−s constrain nothing. None = no finite μ (a vertex with α < 1−s and f = 0,
/// or f(0) < 1−s: more mass at +∞ than the slack).
///
/// Screened with [`isf_rough`] (error < 4.5e-4 per term, so candidates within 2e-3 of the rough
/// best are evaluated in high precision).
pub fn mu_of_curve(vertices: &[(F, F)], slack: f64) -> Option<F> {
    let k = hp::one() - hp::f(slack);
    let mut cand = Vec::new();
    // A vertex (0, 1 − r) or (1 − r, 0) with r at the scale of the 320-bit rounding (the atoms' sum
    // is 1 − 2⁻³²⁰ or so, not 1) is the curve's end, not mass at +∞: callers decide that from the
    // atoms (`Model::mu`). Treating it as +∞ mass made μ = +∞ for every atom curve at slack 0.
    let end = &k * &(hp::one() - hp::f(1e-60));
    for (a, b) in vertices {
        if *a >= k || *b >= k {
            continue;
        }
        if (hp::is_zero(a) && *b >= end) || (hp::is_zero(b) && *a >= end) {
            continue;
        }
        if hp::is_zero(a) || hp::is_zero(b) {
            return None;
        }
        let r = isf_rough(&(a / &k)) + isf_rough(&(b / &k));
        cand.push((r, a, b));
    }
    let best = cand.iter().map(|c| c.0).fold(f64::NEG_INFINITY, f64::max);
    let mut mu = hp::zero();
    for (r, a, b) in cand {
        if r < best - 2e-3 {
            continue;
        }
        let m = hp::isf(&(a / &k)).unwrap() + hp::isf(&(b / &k)).unwrap();
        mu = hp::max(&mu, &m);
    }
    Some(mu)
}

/// The symmetrised δ(ε) = max of both orderings.
pub fn delta_sym(rem: &Pair, add: &Pair, eps: &F) -> F {
    hp::max(&rem.delta(eps), &add.delta(eps))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hp::f;

    /// Randomized response with two buckets and p = 1/2: P = (3/4, 1/4), Q = (1/4, 3/4):
    /// δ(0) = 1/2, ε(0) = ln 3, f(α) = max(1 − 3α, (1 − α)/3, ...) with vertex (1/4, 1/4).
    #[test]
    fn randomized_response_pair_has_its_textbook_figures() {
        let p = Pair::new(vec![
            Atom::new(f(0.75), f(0.25)),
            Atom::new(f(0.25), f(0.75)),
        ]);
        assert_eq!(hp::to_f64(&p.delta(&f(0.0))), 0.5);
        assert!(hp::to_f64(&p.delta(&f(3f64.ln() + 1e-12))) == 0.0);
        let c = symmetric_curve(&p, &p.swap());
        assert_eq!(hp::to_f64(&c.eval(&f(0.25))), 0.25);
        assert_eq!(hp::to_f64(&c.eval(&f(0.0))), 1.0);
        let two = p.power(2);
        // TV of the 2-fold product: (9/16 + 1/16·0 ...) = 9/16 − 1/16 + ... computed by hand: 0.5·... = 0.5
        let tv = hp::to_f64(&two.delta(&f(0.0)));
        assert!((tv - 0.5).abs() < 1e-15, "{tv}");
        // μ of RR(1/2, 2) with slack 0: 2·isf(1/4).
        let mu = hp::to_f64(&mu_of_curve(&c.vertices, 0.0).unwrap());
        assert!((mu - 2.0 * 0.674_489_750_196_081_7).abs() < 1e-14, "{mu}");
    }
}
