//! Exact privacy profiles of single mechanisms (and of subsampled ones), the input of connect-the-dots.
//!
//! A [`Source`] gives, for each ordering of the neighbouring pair, δ(ε) = H_{e^ε}(P‖Q) for ε ≥ 0 as an
//! *upper bound* (closed forms rounded up, or a pessimistic inner PLD), its mass at +∞, and where the
//! loss ends. Negative ε follow from the other ordering by the hockey-stick identity
//! ```text
//! H_{e^ε}(P‖Q) = 1 − e^ε + e^ε H_{e^{−ε}}(Q‖P)
//! ```
//! Orderings: "remove" = (M(D ∪ {x}), M(D)), "add" = (M(D), M(D ∪ {x})); under replace-one both are
//! replace pairs.

use super::profile::AtomProfile;
use super::{Pld, PldError};
use crate::accountant::epsilon_delta::Neumaier;
use crate::accountant::gdp;
use crate::accountant::rounding::{self, U};
use std::sync::Arc;

/// Profile mass below which a continuous loss tail is cut (it goes to +∞): per mechanism, so even a
/// composition of 10⁸ copies moves at most 1e-12 this way.
pub const CTD_TAIL: f64 = 1e-20;

type DeltaFn = Arc<dyn Fn(f64) -> f64 + Send + Sync>;

/// Additive noise with unit-free scale (relative to the per-record contribution bound).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Noise {
    /// N(0, σ²).
    Gaussian(f64),
    /// Laplace with scale b.
    Laplace(f64),
}

impl Noise {
    /// ln density up to a constant common to all shifts.
    fn log_pdf(self, x: f64) -> f64 {
        match self {
            Noise::Gaussian(s) => -0.5 * (x / s) * (x / s),
            Noise::Laplace(b) => -x.abs() / b,
        }
    }

    /// ln P[N > x] up to the same constant as `log_pdf` (the constants cancel in every ratio used).
    fn log_sf(self, x: f64) -> f64 {
        match self {
            Noise::Gaussian(s) => crate::accountant::normal::log_sf(x / s),
            Noise::Laplace(b) => {
                if x >= 0.0 {
                    (0.5f64).ln() - x / b
                } else {
                    (-0.5 * (x / b).exp()).ln_1p()
                }
            }
        }
    }

    /// The threshold x* with L(x*) = ε in closed form where there is one (Gaussian). With
    /// y = e^{x/σ²}, c = e^{−1/(2σ²)}, r = 1 − q, L = ε reads q c y² − r(e^ε − 1) y − e^ε q c = 0, so
    /// y = (r(e^ε − 1) + √(r²(e^ε − 1)² + 4q²c²e^ε)) / (2qc).
    fn threshold(self, q: f64, eps: f64) -> Option<f64> {
        match self {
            Noise::Gaussian(s) if eps < 700.0 => {
                let s2 = s * s;
                let a = (1.0 - q) * eps.exp_m1();
                let ln_b = q.ln() - 0.5 / s2; // ln(qc)
                                              // ln y = ln(a + √(a² + 4b²e^ε)) − ln(2b), with b = qc, in a scaled form.
                let b = ln_b.exp();
                let root = a + (a * a + 4.0 * b * b * eps.exp()).sqrt();
                let ln_y = root.ln() - (2.0f64).ln() - ln_b;
                ln_y.is_finite().then_some(s2 * ln_y)
            }
            _ => None,
        }
    }

    /// The largest loss of the replace-one mixture pair, when bounded (Laplace).
    fn max_mixture_loss(self, q: f64) -> Option<f64> {
        match self {
            Noise::Gaussian(_) => None,
            Noise::Laplace(b) => {
                let up = (q * (1.0 / b).exp_m1()).ln_1p(); // ln(q e^{1/b} + 1 − q)
                let down = (q * (-1.0 / b).exp_m1()).ln_1p(); // ln(q e^{−1/b} + 1 − q)
                Some(up - down)
            }
        }
    }
}

/// One ordering of a pair.
#[derive(Clone)]
pub(crate) struct Side {
    /// δ(ε) for ε ≥ 0 (upper bound).
    pub delta: DeltaFn,
    /// Mass at +∞ that belongs to the mechanism.
    pub inf: f64,
    /// The largest finite loss if the loss is bounded.
    pub max_loss: Option<f64>,
}

/// The two orderings of a mechanism's dominating pair.
#[derive(Clone)]
pub(crate) struct Source {
    pub remove: Side,
    /// `None`: the pair is symmetric (add = remove).
    pub add: Option<Side>,
    /// Relative error bound of the δ functions.
    pub rel_err: f64,
    /// Absolute error bound of the δ functions (from an inner numerical PLD).
    pub abs_err: f64,
    /// Discretisation steps already inside (for the lower bound's shift).
    pub steps: u64,
    /// Truncated/moved mass already inside (excluded from the lower bound).
    pub moved: f64,
}

impl Source {
    fn symmetric(side: Side, rel_err: f64) -> Self {
        Source {
            remove: side,
            add: None,
            rel_err,
            abs_err: 0.0,
            steps: 0,
            moved: 0.0,
        }
    }

    fn add_side(&self) -> &Side {
        self.add.as_ref().unwrap_or(&self.remove)
    }

    /// δ for every real ε of the given ordering (`remove = true`), via the identity for ε < 0.
    fn full_delta(&self, remove: bool) -> impl Fn(f64) -> f64 + '_ {
        let (this, other) = if remove {
            (&self.remove, self.add_side())
        } else {
            (self.add_side(), &self.remove)
        };
        move |e: f64| {
            if e >= 0.0 {
                (this.delta)(e)
            } else {
                -e.exp_m1() + e.exp() * (other.delta)(-e)
            }
        }
    }

    /// Where the loss of an ordering effectively ends: its maximum if bounded, else the ε at which
    /// δ has fallen to within [`CTD_TAIL`] of its mass at +∞.
    fn top(side: &Side) -> f64 {
        if let Some(m) = side.max_loss {
            return m.max(0.0);
        }
        let target = side.inf + CTD_TAIL;
        let mut hi = 1.0;
        while (side.delta)(hi) > target {
            hi *= 2.0;
            if hi > 1e12 {
                return hi;
            }
        }
        gdp::bisect_up(0.0, hi, |e| (side.delta)(e) <= target)
    }

    /// Connect-the-dots discretisation of both orderings on grid step h.
    pub(crate) fn discretise(&self, h: f64) -> Result<Pld, PldError> {
        let top_rem = Self::top(&self.remove);
        let top_add = match &self.add {
            None => top_rem,
            Some(s) => Self::top(s),
        };
        // The remove loss under P is ≥ −(largest add loss) (the loss of an outcome is the negative
        // of its loss in the other ordering); one unit of margin covers the region where the other
        // ordering's δ is already below CTD_TAIL (mass there ≤ e^{−t}·CTD_TAIL/(1 − e^{−1})).
        let margin = |s: &Side| if s.max_loss.is_some() { 0.0 } else { 1.0 };
        let rem = || {
            super::ctd::discretise(
                h,
                -(top_add + margin(self.add_side())),
                top_rem,
                self.full_delta(true),
                self.rel_err,
                self.remove.inf,
                self.remove.max_loss.is_some(),
            )
        };
        let (rem, add) = match &self.add {
            None => (rem()?, None),
            Some(s) => {
                let add = || {
                    super::ctd::discretise(
                        h,
                        -(top_rem + margin(&self.remove)),
                        top_add,
                        self.full_delta(false),
                        self.rel_err,
                        s.inf,
                        s.max_loss.is_some(),
                    )
                };
                let (r, a) = super::both(rem, add);
                (r?, Some(a?))
            }
        };
        let fix = |mut p: super::Pmf| {
            p.abs_err += self.abs_err;
            p.steps += self.steps;
            p.moved_up += self.moved;
            p
        };
        Ok(Pld {
            remove: fix(rem),
            add: add.map(fix),
        })
    }

    /// μ-GDP: the Gaussian mechanism N(0,1) vs N(μ,1) (DRS22 Cor. 1 profile, rounded up).
    pub(crate) fn gaussian(mu: f64) -> Self {
        Self::symmetric(
            Side {
                delta: Arc::new(move |e| gdp::delta_for_epsilon(mu, e)),
                inf: 0.0,
                max_loss: None,
            },
            0.0,
        )
    }

    /// Laplace noise with scale b on a query of sensitivity s: loss in [−s/b, s/b] and
    /// δ(ε) = 1 − e^{(ε − s/b)/2} for ε < s/b, 0 beyond (seed 000 §4 Laplace trade-off, derived).
    pub(crate) fn laplace(scale_over_sensitivity: f64) -> Self {
        let eps0 = 1.0 / scale_over_sensitivity;
        Self::symmetric(
            Side {
                delta: Arc::new(move |e| {
                    if e >= eps0 {
                        0.0
                    } else {
                        rounding::prob_up(-((e - eps0) / 2.0).exp_m1(), 4.0 * U)
                    }
                }),
                inf: 0.0,
                max_loss: Some(eps0),
            },
            0.0,
        )
    }

    /// A symmetric mechanism given by its loss atoms (loss, P-mass) under P, plus mass at +∞.
    pub(crate) fn atoms(mut atoms: Vec<(f64, f64)>, inf: f64) -> Self {
        atoms.sort_by(|a, b| a.0.total_cmp(&b.0));
        let max_loss = atoms.last().map(|a| a.0);
        let prof = Arc::new(AtomProfile::new(atoms, inf));
        let rel = prof.rel_err();
        Self::symmetric(
            Side {
                delta: Arc::new(move |e| rounding::prob_up(prof.delta(e), rel)),
                inf,
                max_loss,
            },
            0.0,
        )
    }

    /// Discrete Laplace P[x] ∝ e^{−a|x|} vs the same shifted by Δ: L(x) = a(|x−Δ| − |x|) takes the value
    /// aΔ for x ≤ 0, a(Δ − 2x) for 0 < x < Δ and −aΔ for x ≥ Δ.
    pub(crate) fn discrete_laplace(a: f64, sens: u64) -> Self {
        let c = (a / 2.0).tanh(); // normaliser of e^{−a|x|}
        let d = sens as f64;
        let tail = -(-a).exp_m1(); // 1 − e^{−a}
        let mut atoms = vec![(a * d, c / tail)]; // P(X ≤ 0) = c/(1 − e^{−a})
        for x in 1..sens {
            let xf = x as f64;
            atoms.push((a * (d - 2.0 * xf), c * (-a * xf).exp()));
        }
        atoms.push((-a * d, c * (-a * d).exp() / tail)); // P(X ≥ Δ)
        Self::atoms(atoms, 0.0)
    }

    /// Discrete Gaussian P[x] ∝ e^{−x²/(2σ²)} vs the same shifted by Δ: L(x) = (Δ² − 2xΔ)/(2σ²).
    /// Atoms outside [−(10σ + 1), 10σ + 1 + Δ] carry less than e^{−50} of mass; it goes to +∞
    /// (pessimistic).
    pub(crate) fn discrete_gaussian(sigma: f64, sens: u64) -> Result<Self, PldError> {
        let k = (10.0 * sigma).ceil() + 1.0;
        let d = sens as f64;
        let count = 2.0 * k + d + 1.0;
        if count > super::pmf::MAX_GRID_POINTS as f64 {
            return Err(PldError::TooLarge(format!(
                "a discrete Gaussian with sigma {sigma} has {count:.3e} atoms (limit {}); use a gaussian event",
                super::pmf::MAX_GRID_POINTS
            )));
        }
        let (k, dk) = (k as i64, sens as i64);
        let w = |x: i64| (-((x * x) as f64) / (2.0 * sigma * sigma)).exp();
        let mut z = Neumaier::default();
        for x in (1..=(k + dk + 1)).rev() {
            z.add(2.0 * w(x));
        }
        z.add(1.0);
        let z = z.value();
        let loss = |x: i64| (d * d - 2.0 * x as f64 * d) / (2.0 * sigma * sigma);
        let atoms: Vec<(f64, f64)> = ((-k)..=(k + dk)).map(|x| (loss(x), w(x) / z)).collect();
        let kept: f64 = atoms.iter().map(|a| a.1).sum();
        // Everything not kept (< e^{−50}) goes to +∞: pessimistic whichever tail it came from.
        let rest = (1.0 - kept).max(0.0);
        Ok(Self::atoms(atoms, rest))
    }

    /// k-ary randomized response keeping the true bucket with probability 1 − p + p/k (replace-one):
    /// losses ±c with c = ln(1 + k(1−p)/p), masses 1 − p + p/k and p/k, and 0 with (k − 2)p/k.
    pub(crate) fn randomized_response(p: f64, k: u64) -> Self {
        let kf = k as f64;
        let c = (kf * (1.0 - p) / p).ln_1p();
        let mut atoms = vec![(c, 1.0 - p + p / kf), (-c, p / kf)];
        if k > 2 {
            atoms.push((0.0, (kf - 2.0) * p / kf));
        }
        Self::atoms(atoms, 0.0)
    }

    /// An (ε, δ)-DP black box, optionally η-TV: the dominating pair of Ghazi & Issa (seed 004 App. D,
    /// eqs. (70)–(71)): losses +∞ (δ), +ε ((1−δ)(1−α)e^ε/(1+e^ε)), 0 (α(1−δ)), −ε ((1−δ)(1−α)/(1+e^ε)),
    /// with erasure weight α = 1 − (η − δ)/((1 − δ) tanh(ε/2)) (α = 0 without η: (ε, δ)-DP's f_{ε,δ}).
    pub(crate) fn epsilon_delta(eps: f64, delta: f64, eta: Option<f64>) -> Self {
        let (delta, alpha) = match eta {
            None => (delta, 0.0),
            Some(eta) => {
                let c = crate::accountant::tv::TvComposition::new(eps, delta, eta, 1);
                (delta.min(eta), c.erasure())
            }
        };
        if eps == 0.0 {
            return Self::atoms(vec![(0.0, 1.0 - delta)], delta);
        }
        let q = 1.0 / (1.0 + (-eps).exp());
        let mut atoms = vec![
            (eps, (1.0 - delta) * (1.0 - alpha) * q),
            (-eps, (1.0 - delta) * (1.0 - alpha) * (1.0 - q)),
        ];
        if alpha > 0.0 {
            atoms.push((0.0, alpha * (1.0 - delta)));
        }
        Self::atoms(atoms, delta)
    }

    /// Additive noise subsampled under replace-one, exactly: with probability q the differing record
    /// is in the sample and moves the output by +1 (D) or −1 (D′) units of its contribution bound,
    /// so the pair is (q·N(1) + (1−q)·N(0), q·N(−1) + (1−q)·N(0)) for noise N (dp_accounting's
    /// REPLACE adjacency; Balle, Barthe & Gaboardi 2018 §5). The loss L(x) is increasing in x, so
    /// δ(ε) = P′(X > x*) − e^ε Q′(X > x*) at x* = inf{x : L(x) > ε}, found by bisection (δ is
    /// stationary in the threshold at x*, so the bisection error does not enter to first order).
    pub(crate) fn replace_mixture(noise: Noise, q: f64) -> Self {
        let (lq, l1q) = (q.ln(), (-q).ln_1p());
        let lse = |a: f64, b: f64| {
            let m = a.max(b);
            if m == f64::NEG_INFINITY {
                m
            } else {
                m + ((a - m).exp() + (b - m).exp()).ln()
            }
        };
        // ln of the mixture's density (up to the common normaliser) and of its upper tail.
        let log_pdf =
            move |x: f64, shift: f64| lse(lq + noise.log_pdf(x - shift), l1q + noise.log_pdf(x));
        let log_tail =
            move |x: f64, shift: f64| lse(lq + noise.log_sf(x - shift), l1q + noise.log_sf(x));
        let loss = move |x: f64| log_pdf(x, 1.0) - log_pdf(x, -1.0);
        let max_loss = noise.max_mixture_loss(q);
        let delta = move |e: f64| {
            if let Some(m) = max_loss {
                if e >= m {
                    return 0.0;
                }
            }
            let x = match noise.threshold(q, e) {
                Some(x) => x,
                None => {
                    let mut hi = 1.0;
                    while loss(hi) <= e {
                        hi *= 2.0;
                        if hi > 1e9 {
                            return 0.0;
                        }
                    }
                    gdp::bisect_up(0.0, hi, |x| loss(x) > e)
                }
            };
            let a = log_tail(x, 1.0);
            let b = e + log_tail(x, -1.0);
            if b >= a {
                return 0.0;
            }
            let one_minus = -(b - a).exp_m1();
            let v = a.exp() * one_minus;
            let rel = 64.0 * U * (1.0 + a.abs() + b.abs()) * (1.0 + 1.0 / one_minus);
            rounding::prob_up(v, rel)
        };
        Self::symmetric(
            Side {
                delta: Arc::new(delta),
                inf: 0.0,
                max_loss,
            },
            0.0,
        )
    }

    /// The profile of a composed inner PLD (for subsampling a composite event).
    pub(crate) fn from_pld(p: &Pld) -> Self {
        let side = |pmf: &super::Pmf| {
            let prof = Arc::new(pmf.profile(0.0));
            let inf_all = pmf.infinity_mass();
            let rel = pmf.rel_err + prof.rel_err();
            // All of the inner +∞ mass (its own and truncated) is treated as the mechanism's here;
            // the truncated part is accounted for the lower bound through `moved`.
            Side {
                delta: Arc::new(move |e| rounding::prob_up(prof.delta(e) + inf_all, rel)),
                inf: inf_all,
                max_loss: Some(pmf.max_loss()),
            }
        };
        let rem = &p.remove;
        Source {
            remove: side(rem),
            add: p.add.as_ref().map(side),
            rel_err: 0.0,
            abs_err: rem.abs_err.max(p.add.as_ref().map_or(0.0, |a| a.abs_err)),
            steps: rem.steps.max(p.add.as_ref().map_or(0, |a| a.steps)),
            moved: (rem.moved_up + rem.inf_trunc)
                .max(p.add.as_ref().map_or(0.0, |a| a.moved_up + a.inf_trunc)),
        }
    }

    /// Poisson subsampling with rate q under add/remove (x is in the sample with probability q).
    /// With (P, Q) the inner remove pair, the outer remove pair is (qP + (1−q)Q, Q) and the add pair
    /// its reverse, so for ε ≥ 0 (Balle, Barthe & Gaboardi 2018, Thm. 10 / advanced joint convexity;
    /// seed 003 §A5):
    /// ```text
    /// δ_remove(ε) = q·δ_P‖Q(ln(1 + (e^ε − 1)/q))
    /// δ_add(ε)    = (1 − e^ε(1−q))·δ_Q‖P(ln(e^ε q/(1 − e^ε(1−q))))   for e^ε(1−q) < 1, else 0
    /// ```
    pub(crate) fn poisson_add_remove(self, q: f64) -> Self {
        let inner = self;
        let rem_in = inner.remove.delta.clone();
        let add_in = inner.add_side().delta.clone();
        let max_rem = inner.remove.max_loss;
        let max_add = inner.add_side().max_loss;
        let remove = Side {
            delta: Arc::new(move |e| {
                let e1 = (e.exp_m1() / q).ln_1p();
                rounding::prob_up(q * rem_in(e1), 2.0 * U)
            }),
            inf: q * inner.remove.inf,
            max_loss: max_rem.map(|m| (q * m.exp_m1()).ln_1p()),
        };
        let log_1mq = (-q).ln_1p();
        let add = Side {
            delta: Arc::new(move |e| {
                // 1 − e^ε(1−q) = −expm1(ε + ln(1−q))
                let w = -(e + log_1mq).exp_m1();
                if w <= 0.0 {
                    return 0.0;
                }
                let e2 = (e + q.ln() - w.ln()).max(0.0);
                rounding::prob_up(w * add_in(e2), 4.0 * U)
            }),
            inf: 0.0,
            max_loss: Some(match max_add {
                Some(m) => -(q * (-m).exp_m1()).ln_1p(),
                None => -log_1mq,
            }),
        };
        Source {
            remove,
            add: Some(add),
            rel_err: inner.rel_err + 8.0 * U,
            abs_err: inner.abs_err,
            steps: inner.steps,
            moved: inner.moved,
        }
    }

    /// Subsampling with rate q under replace-one (Poisson, or q = m/n without replacement): for each
    /// ordering, δ(ε) ≤ q·δ_in(ln(1 + (e^ε − 1)/q)) for ε ≥ 0 (Balle, Barthe & Gaboardi 2018, Thm. 9;
    /// seed 004 Prop. 1 at the (ε, δ) level).
    pub(crate) fn subsample_replace(self, q: f64) -> Self {
        let amp = |s: &Side| {
            let f = s.delta.clone();
            Side {
                delta: Arc::new(move |e| {
                    let e1 = (e.exp_m1() / q).ln_1p();
                    rounding::prob_up(q * f(e1), 2.0 * U)
                }),
                inf: q * s.inf,
                max_loss: s.max_loss.map(|m| (q * m.exp_m1()).ln_1p()),
            }
        };
        Source {
            remove: amp(&self.remove),
            add: self.add.as_ref().map(amp),
            rel_err: self.rel_err + 8.0 * U,
            abs_err: self.abs_err,
            steps: self.steps,
            moved: self.moved,
        }
    }
}
