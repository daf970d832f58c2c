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

use super::lattice::Lattice;
use super::profile::AtomProfile;
use super::{Pld, PldError};
use crate::accountant::epsilon_delta::Neumaier;
use crate::accountant::gdp;
use crate::accountant::rounding::{self, U};
use std::sync::Arc;

/// Profile mass below which a continuous loss tail is cut (it goes to +∞): per mechanism, so even a
/// composition of 10⁸ copies moves at most 1e-12 this way.
pub const CTD_TAIL: f64 = 1e-20;

/// μ = √2·√(τ/λ) of an RDP point, rounded down: a quotient, a root, a product and √2's own rounding
/// are four roundings (Higham Lemma 3.1); 6U as found, a 1.5× margin.
const RDP_MU_REL: f64 = 6.0 * U;

/// The mass cut beyond the discrete Gaussian's truncation, 2·e^{ℓ}/(1 − r): exp of a rounded
/// exponent (< 2⁵² in magnitude here) divided by a rounded 1 − r; the site's analysis puts both
/// below 64U.
const DG_CUT_REL: f64 = 64.0 * U;

/// The roundings (the libm calls are counted apart) in the masses of an (ε, δ)-DP, η-TV mechanism:
/// w is rounded up by at most 16U + LIBM_REL above the exact weight and every other factor is
/// within "a few U"; 32U is the allowance as found, not a count.
const EPS_TV_MASS_REL: f64 = 32.0 * U;

/// The absolute error of the log-tails a, b of the replace-one mixture per unit of 1 + |a| + |b|
/// (the noise's log_sf, the log-sum-exp, the ε added), which exp and expm1 turn into a relative
/// error amplified by 1/(1 − e^{b−a}): 64U, an allowance over those few operations, not a count.
const TAIL_LOG_ABS_REL: f64 = 64.0 * U;

/// The relative error added to an atom profile's own ([`AtomProfile::rel_err`]) in the Poisson
/// subsampling of a composite PLD: 16U, an allowance as found (its masses and positions are already
/// rounded up where they are formed).
const POISSON_PLD_REL: f64 = 16.0 * U;

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
    /// A certified lower bound on the same δ(ε) for ε ≥ 0 (the mass in `extra` left out), when one
    /// is known: then [`Source::discretise`] also builds a lower PMF ([`super::ctd::discretise_lower`]).
    /// `None` for black boxes whose profile is itself a bound (ρ-zCDP), for profiles read off a
    /// composed PLD, and for atom lists (whose lower PMFs come from their lattice when they have
    /// one, see [`Source::lattice`], else from the shifted upper PMF).
    pub lower: Option<DeltaFn>,
    /// Mass at +∞ that belongs to the mechanism (counted by the lower bound too), rounded down
    /// where it is a computed product: what rounding might have cut off it is in `extra`.
    pub inf: f64,
    /// Further mass at +∞ that only the upper bound carries: finite losses moved there because
    /// their tail was cut (e.g. a discrete Gaussian's support beyond the kept atoms), and the
    /// rounding of `inf`. `inf + extra`, added rounding up ([`Side::inf_up`]), is an upper bound on
    /// all the mass at +∞; the lower bound leaves `extra` out.
    pub extra: f64,
    /// The largest finite loss if the loss is bounded.
    pub max_loss: Option<f64>,
    /// `delta` is this ordering's own profile for every real ε (a genuine pair on its own), not only
    /// for ε ≥ 0; otherwise ε < 0 is read from the other ordering by the hockey-stick identity.
    pub whole_line: bool,
}

impl Side {
    /// An upper bound on all the mass at +∞: `inf + extra`, rounded up.
    fn inf_up(&self) -> f64 {
        rounding::add_up(self.inf, self.extra)
    }

    /// (`inf`, `extra`) of the same side with its mass at +∞ scaled by q ∈ [0, 1] (a mixture's
    /// weight): the own part q·inf rounded down, and `extra` such that the two add to at least
    /// q·(inf + extra) — a product rounded to nearest can fall an ulp short of the truth, and ε at
    /// a δ equal to the reported mass would then be finite where it is +∞.
    fn inf_scaled(&self, q: f64) -> (f64, f64) {
        scaled_infinity(q, self.inf, self.inf_up())
    }
}

/// q times a mass at +∞ whose own part is `own` and whole `all`: (q·own rounded down, the rest of
/// q·all rounded up), so that the two add to at least q·all (see [`Side::inf_scaled`]).
fn scaled_infinity(q: f64, own: f64, all: f64) -> (f64, f64) {
    let inf = rounding::prob_down(q * own, rounding::ARITH2_REL); // one product, 2× margin
    let all = rounding::prob_up(q * all, rounding::ARITH2_REL);
    (inf, rounding::sub_up(all, inf).max(0.0))
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
    /// Where every finite loss lies on a lattice (atom lists of a single mechanism), that lattice:
    /// the lower PMFs of its copies come from it ([`super::lattice`]).
    pub lattice: Option<Arc<Lattice>>,
    /// For a black box known only by a statement (ρ-zCDP, Rényi points), whose truth is the worst
    /// case over every mechanism meeting it: one such mechanism. The upper bounds are this
    /// source's (they bound the worst case); the lower bounds are the witness's own, which are
    /// lower bounds on the worst case because the witness is one of the mechanisms it is over.
    /// `None`: the lower bounds are this source's.
    pub witness: Option<Box<Source>>,
}

/// What the upper discretisation of one ordering hands the lower one: the reading resolution
/// ([`super::ctd::lower_refines`]), what it read of δ (as the lower one's upper bound reads it),
/// and one grid step below its lowest mass.
struct FromUpper<'a> {
    refine: usize,
    readings: &'a super::ctd::GridReadings,
    lowest: f64,
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
            lattice: None,
            witness: None,
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
            if e >= 0.0 || this.whole_line {
                (this.delta)(e)
            } else {
                -e.exp_m1() + e.exp() * (other.delta)(-e)
            }
        }
    }

    /// A certified upper bound on δ for every real ε of the given ordering: [`Source::full_delta`]
    /// widened by its relative error bound (the identity for ε < 0 is formed with plain rounding).
    fn full_delta_up(&self, remove: bool) -> impl Fn(f64) -> f64 + '_ {
        let f = self.full_delta(remove);
        move |e: f64| self.delta_up_of(f(e))
    }

    /// A value of [`Source::full_delta`] widened by the sources' relative error and the library's,
    /// rounded up: what [`Source::full_delta_up`] returns.
    fn delta_up_of(&self, d: f64) -> f64 {
        rounding::prob_up(d, self.rel_err + rounding::LIBM_REL)
    }

    /// A certified lower bound on δ for every real ε of the given ordering, when both orderings have
    /// one (ε < 0 is read from the other ordering by the identity δ(ε) = 1 − e^ε + e^ε δ′(−ε), every
    /// term non-negative, rounded down).
    fn full_delta_lower(&self, remove: bool) -> Option<impl Fn(f64) -> f64 + '_> {
        let (this, other) = if remove {
            (&self.remove, self.add_side())
        } else {
            (self.add_side(), &self.remove)
        };
        let lo_this = this.lower.as_ref()?;
        let lo_other = if this.whole_line {
            None
        } else {
            Some(other.lower.as_ref()?)
        };
        Some(move |e: f64| match lo_other {
            Some(o) if e < 0.0 => {
                rounding::prob_down(-e.exp_m1() + e.exp() * o(-e), rounding::LIBM_REL)
            }
            _ => lo_this(e),
        })
    }

    /// Where the loss of an ordering effectively ends: its maximum if bounded, else the ε at which
    /// δ has fallen to within [`CTD_TAIL`] of its mass at +∞.
    fn top(side: &Side) -> f64 {
        if let Some(m) = side.max_loss {
            return m.max(0.0);
        }
        let target = side.inf_up() + CTD_TAIL;
        let mut hi = 1.0;
        while (side.delta)(hi) > target {
            hi *= 2.0;
            if hi > 1e12 {
                return hi;
            }
        }
        gdp::bisect_up(0.0, hi, |e| (side.delta)(e) <= target)
    }

    /// Runs `one(remove, eps_lo, eps_hi, side)` for each ordering on its loss range (the add
    /// ordering only when it differs, both at once), where the ranges are those of
    /// [`Source::discretise`]: the remove loss under P is ≥ −(largest add loss) (the loss of an
    /// outcome is the negative of its loss in the other ordering); one unit of margin covers the
    /// region where the other ordering's δ is already below CTD_TAIL (mass there ≤
    /// e^{−t}·CTD_TAIL/(1 − e^{−1})).
    fn per_ordering<T: Send>(
        &self,
        top_rem: f64,
        top_add: f64,
        one: impl Fn(bool, f64, f64, &Side) -> Result<T, PldError> + Sync,
    ) -> Result<(T, Option<T>), PldError> {
        let margin = |s: &Side| if s.max_loss.is_some() { 0.0 } else { 1.0 };
        let rem = || {
            one(
                true,
                -(top_add + margin(self.add_side())),
                top_rem,
                &self.remove,
            )
        };
        Ok(match &self.add {
            None => (rem()?, None),
            Some(s) => {
                let add = || one(false, -(top_rem + margin(&self.remove)), top_add, s);
                let (r, a) = super::both(rem, add);
                (r?, Some(a?))
            }
        })
    }

    /// Connect-the-dots discretisation of both orderings on grid step h.
    pub(crate) fn discretise(&self, h: f64) -> Result<Pld, PldError> {
        let top_rem = Self::top(&self.remove);
        let top_add = match &self.add {
            None => top_rem,
            Some(s) => Self::top(s),
        };
        let (rem, add) = self.per_ordering(top_rem, top_add, |remove, lo, hi, side| {
            super::ctd::discretise(
                h,
                lo,
                hi,
                self.full_delta(remove),
                self.rel_err,
                side.inf,
                side.max_loss.map(|_| side.inf_up()),
            )
        })?;
        // What the upper discretisation read of δ, as the lower one's upper bound reads it.
        let (rem, mut read_rem) = rem;
        let (add, mut read_add) = add.unzip();
        for r in std::iter::once(&mut read_rem).chain(read_add.as_mut()) {
            r.values.iter_mut().for_each(|v| *v = self.delta_up_of(*v));
        }
        let fix = |mut p: super::Pmf| {
            p.abs_err += self.abs_err;
            if self.abs_err > 0.0 {
                // δ error from an inner numerical PLD, not per-mass round-off.
                p.bin_err = None;
            }
            p.steps += self.steps;
            p.moved_up += self.moved;
            p
        };
        let (refine_rem, refine_add) = super::ctd::lower_refines(&rem, add.as_ref());
        let from_upper = |p: &super::Pmf, refine, readings| FromUpper {
            refine,
            readings,
            lowest: (p.lo() - 1) as f64 * h,
        };
        let lower = match &self.witness {
            Some(w) => Some(w.witness_lower(h)?),
            None => self.discretise_lower(
                h,
                top_rem,
                top_add,
                from_upper(&rem, refine_rem, &read_rem),
                add.as_ref()
                    .zip(read_add.as_ref())
                    .map(|(a, r)| from_upper(a, refine_add, r)),
            )?,
        };
        Ok(Pld {
            remove: fix(rem),
            add: add.map(fix),
            // Atoms on a lattice have no lower profile: one copy's lower PMF is the lattice
            // rounded down to the grid (and n copies' that of the lattice's n-fold composition,
            // see `Pld::self_compose`).
            lower: match (lower, &self.lattice) {
                (Some(l), _) => Some(Box::new(l)),
                (None, Some(l)) => l.lower_pld(1, h)?.map(Box::new),
                (None, None) => None,
            },
            lattice: self.lattice.clone(),
        })
    }

    /// The PMFs a witness's lower bounds are read from (see [`Source::witness`]): its dedicated
    /// lower PMFs, or its upper PMFs (read shifted by their steps·h, as any PLD's without lower
    /// PMFs); no privacy loss at all for the constant mechanism.
    fn witness_lower(&self, h: f64) -> Result<Pld, PldError> {
        if self.is_identity() {
            return Ok(Pld::identity(h));
        }
        let p = self.discretise(h)?;
        Ok(match p.lower {
            Some(l) => *l,
            None => Pld::from_pmfs(p.remove, p.add),
        })
    }

    /// The constant mechanism (no privacy loss), as a witness: it meets every statement, so its
    /// figures are lower bounds on any worst case — the weakest ones.
    pub(crate) fn constant() -> Self {
        Self::epsilon_delta(0.0, 0.0, None)
    }

    /// The same source with `witness` as its witness (see [`Source::witness`]).
    pub(crate) fn with_witness(mut self, witness: Source) -> Self {
        self.witness = Some(Box::new(witness));
        self
    }

    /// The lower PMFs ([`super::ctd::discretise_lower`]) on the same loss ranges as
    /// [`Source::discretise`] (from one grid step below the upper PMF's lowest mass: a lower PMF
    /// may start anywhere, its first chord runs below 1 − e^ε, and where the upper one holds no
    /// mass the chain's round-off margins would only leave a stray mass at the bottom, which
    /// widened the FFT windows of its compositions by half), when every δ involved has a certified
    /// lower bound and the source has no numerical PLD inside; `None` otherwise (the lower bounds
    /// then come from the upper PMFs shifted by steps·h).
    fn discretise_lower(
        &self,
        h: f64,
        top_rem: f64,
        top_add: f64,
        rem: FromUpper<'_>,
        add: Option<FromUpper<'_>>,
    ) -> Result<Option<Pld>, PldError> {
        if self.steps > 0 || self.abs_err > 0.0 || self.moved > 0.0 {
            return Ok(None);
        }
        let (Some(lo_rem), Some(lo_add)) =
            (self.full_delta_lower(true), self.full_delta_lower(false))
        else {
            return Ok(None);
        };
        let (rem, add) = self.per_ordering(top_rem, top_add, |remove, lo, hi, side| {
            let up = if remove {
                &rem
            } else {
                add.as_ref().unwrap_or(&rem)
            };
            super::ctd::discretise_lower(
                h,
                lo.max(up.lowest).min(hi),
                hi,
                self.full_delta_up(remove),
                if remove { &lo_rem } else { &lo_add },
                // The mechanism's own +∞ mass, rounded down (it may be a product such as q·p∞).
                rounding::prob_down(side.inf, rounding::ARITH4_REL),
                super::ctd::ReadPlan {
                    refine: up.refine,
                    known_upper: Some(up.readings),
                },
            )
        })?;
        Ok(Some(Pld::from_pmfs(rem, add)))
    }

    /// μ-GDP: the Gaussian mechanism N(0,1) vs N(μ,1) (DRS22 Cor. 1 profile, rounded up).
    pub(crate) fn gaussian(mu: f64) -> Self {
        Self::symmetric(
            Side {
                delta: Arc::new(move |e| gdp::delta_for_epsilon(mu, e)),
                lower: Some(Arc::new(move |e| gdp::delta_for_epsilon_lower(mu, e))),
                inf: 0.0,
                extra: 0.0,
                whole_line: false,
                max_loss: None,
            },
            0.0,
        )
    }

    /// A black box known only to be ρ-zCDP (ρ > 0). Upper: both orderings bounded by the
    /// binary-test bound ([`crate::accountant::renyi::BinaryBound`], the exact worst case up to its
    /// sampling), and below 1e-20 by the smaller of it and the classical conversion
    /// ([`crate::accountant::zcdp::delta_for_epsilon`], tighter only in the far tail, where the
    /// binary bound's samples are coarse); both are upper bounds on
    /// every ρ-zCDP mechanism's profile, so their minimum is one too (the discretisation takes the
    /// convex minorant). Lower: the Gaussian mechanism with μ² = 2ρ (rounded down), which is
    /// exactly ρ-zCDP (D_λ = λμ²/2), as witness.
    ///
    /// With ξ > 0 ((ξ, ρ)-zCDP, Bun & Steinke 2016, Definition 1.1): the binary-test bound of
    /// τ(λ) = ξ + λρ alone (the classical conversion above is for ξ = 0), and the same Gaussian as
    /// witness (its D_λ = λρ ≤ ξ + λρ); with ρ = 0 there is no Gaussian witness and the lower end
    /// is the trivial one.
    pub(crate) fn zcdp(rho: f64, xi: f64) -> Self {
        let bound = crate::accountant::renyi::BinaryBound::zcdp(rho, xi);
        let witness = Self::gaussian(rounding::down(
            std::f64::consts::SQRT_2 * rho.sqrt(),
            rounding::ARITH4_REL, // a root, a product and √2's rounding
        ));
        if xi > 0.0 {
            let s = Self::black_box(Arc::new(move |e| bound.delta(e.max(0.0))));
            return if rho > 0.0 {
                s.with_witness(witness)
            } else {
                s
            };
        }
        Self::black_box(Arc::new(move |e| {
            let e = e.max(0.0);
            let b = bound.delta(e);
            // The classical conversion costs a search per reading (half the time of a zcdp event
            // when read everywhere); above 1e-20 the binary bound is within 0.5 % of it or below.
            if b > 1e-20 {
                b
            } else {
                b.min(crate::accountant::zcdp::delta_for_epsilon(rho, e))
            }
        }))
        .with_witness(witness)
    }

    /// A black box known by points (λᵢ, τᵢ) of its Rényi curve (every τᵢ > 0): as
    /// [`Source::zcdp`], with [`crate::accountant::zcdp::RdpCurve`] as the classical conversion, and
    /// as witness the Gaussian with the largest μ meeting every point, μ² = minᵢ 2τᵢ/λᵢ (rounded
    /// down): its D_λ = λμ²/2 ≤ τᵢ at each λᵢ.
    pub(crate) fn rdp(orders: &[f64], rdp: &[f64]) -> Self {
        let bound = crate::accountant::renyi::BinaryBound::rdp(orders, rdp);
        let curve = crate::accountant::zcdp::RdpCurve::new(orders, rdp);
        // μ = minᵢ √2·√(τᵢ/λᵢ), each rounded down (a quotient, a root and a product: 6U), formed
        // without 2τ (which overflows for τ near f64::MAX).
        let mu = orders
            .iter()
            .zip(rdp)
            .map(|(&l, &t)| rounding::down(std::f64::consts::SQRT_2 * (t / l).sqrt(), RDP_MU_REL))
            .fold(f64::INFINITY, f64::min);
        Self::black_box(Arc::new(move |e| {
            let e = e.max(0.0);
            bound.delta(e).min(curve.delta_for_epsilon(e))
        }))
        .with_witness(Self::gaussian(mu))
    }

    /// A black box bounded in both orderings by one profile for ε ≥ 0 (upper, no lower PMF, no
    /// mass at +∞ of its own).
    fn black_box(delta: DeltaFn) -> Self {
        Self::symmetric(
            Side {
                delta,
                lower: None,
                inf: 0.0,
                extra: 0.0,
                whole_line: false,
                max_loss: None,
            },
            0.0,
        )
    }

    /// Laplace noise with scale b on a query of sensitivity s: loss in [−s/b, s/b] and
    /// δ(ε) = 1 − e^{(ε − s/b)/2} for ε < s/b, 0 beyond (Su, "A statistical viewpoint on differential privacy" Laplace trade-off, derived).
    pub(crate) fn laplace(scale_over_sensitivity: f64) -> Self {
        let eps0 = 1.0 / scale_over_sensitivity;
        Self::symmetric(
            Side {
                delta: Arc::new(move |e| {
                    if e >= eps0 {
                        0.0
                    } else {
                        rounding::prob_up(-((e - eps0) / 2.0).exp_m1(), rounding::LIBM_SHORT_REL)
                    }
                }),
                // The same closed form rounded down (e − ε₀ is exact near ε₀ by Sterbenz, a few
                // ulps elsewhere; expm1 within libm's accuracy).
                lower: Some(Arc::new(move |e| {
                    if e >= eps0 {
                        0.0
                    } else {
                        rounding::prob_down(-((e - eps0) / 2.0).exp_m1(), rounding::LIBM_SHORT_REL)
                    }
                })),
                inf: 0.0,
                extra: 0.0,
                whole_line: false,
                max_loss: Some(eps0),
            },
            0.0,
        )
    }

    /// A symmetric mechanism given by its loss atoms (loss, P-mass) under P, plus its own mass at
    /// +∞ (`inf`) and mass moved to +∞ by cutting a tail (`extra`, an upper bound on that mass);
    /// `lattice` is the same atoms as lattice points, with certified bounds for the lower PMFs.
    fn atoms(lattice: Lattice, mut atoms: Vec<(f64, f64)>, inf: f64, extra: f64) -> Self {
        atoms.retain(|a| a.1 > 0.0);
        atoms.sort_by(|a, b| a.0.total_cmp(&b.0));
        let max_loss = Some(atoms.last().map_or(0.0, |a| a.0));
        let prof = Arc::new(AtomProfile::new(atoms, rounding::add_up(inf, extra)));
        let rel = prof.rel_err();
        let mut s = Self::symmetric(
            Side {
                delta: Arc::new(move |e| rounding::prob_up(prof.delta(e), rel)),
                lower: None,
                inf,
                extra,
                max_loss,
                whole_line: false,
            },
            0.0,
        );
        s.lattice = Some(Arc::new(lattice));
        s
    }

    /// Discrete Laplace P[x] ∝ e^{−a|x|} vs the same shifted by Δ: L(x) = a(|x−Δ| − |x|) takes the value
    /// aΔ for x ≤ 0, a(Δ − 2x) for 0 < x < Δ and −aΔ for x ≥ Δ.
    ///
    /// # Errors
    /// [`PldError::TooLarge`] when Δ + 1 atoms exceed [`super::pmf::MAX_GRID_POINTS`] (checked before
    /// anything is allocated).
    pub(crate) fn discrete_laplace(a: f64, sens: u64) -> Result<Self, PldError> {
        if sens >= super::pmf::MAX_GRID_POINTS as u64 {
            return Err(PldError::TooLarge(format!(
                "a discrete Laplace of sensitivity {sens} has {} distinct privacy losses (limit {}); \
                 use a laplace event on the scaled query",
                sens as f64 + 1.0,
                super::pmf::MAX_GRID_POINTS
            )));
        }
        let c = (a / 2.0).tanh(); // normaliser of e^{−a|x|}
        let d = sens as f64;
        let tail = -(-a).exp_m1(); // 1 − e^{−a}
        let mut atoms = vec![(a * d, c / tail)]; // P(X ≤ 0) = c/(1 − e^{−a})
        for x in 1..sens {
            let xf = x as f64;
            atoms.push((a * (d - 2.0 * xf), c * (-a * xf).exp()));
        }
        atoms.push((-a * d, c * (-a * d).exp() / tail)); // P(X ≥ Δ)

        // Loss index Δ − 2x on the step a (exact: the parameter itself). Masses: tanh, expm1 and
        // exp each within LIBM_REL, exp's argument a·x rounded (a·Δ·U of the exponent at most),
        // and a product and a quotient.
        let s = sens as i64;
        let points = (0..=s).map(|x| s - 2 * x).zip(atoms.iter().map(|p| p.1));
        let mass_rel = rounding::ARITH8_REL + 3.0 * rounding::LIBM_REL + 2.0 * a * d * U;
        let lattice = Lattice::new(a, 0.0, points.collect(), mass_rel, 0.0);
        Ok(Self::atoms(lattice, atoms, 0.0, 0.0))
    }

    /// Discrete Gaussian P[x] ∝ e^{−x²/(2σ²)} vs the same shifted by Δ: L(x) = (Δ² − 2xΔ)/(2σ²).
    /// The atoms x ∈ [−k, k + Δ] with k = ⌈10σ⌉ + 1 are kept; the rest of the support (finite but
    /// unbounded losses) goes to +∞, pessimistically, with a mass bounded *analytically*:
    /// ```text
    /// P[X < −k] + P[X > k + Δ] ≤ 2 Σ_{x > k} e^{−x²/(2σ²)} / Z ≤ 2 e^{−(k+1)²/(2σ²)} / (1 − r),
    /// r = e^{−(2k+3)/(2σ²)}  (ratio of consecutive terms beyond k + 1),  Z ≥ 1
    /// ```
    /// which is > 0 however small: the loss is unbounded, so ε(δ = 0) = ∞ (never 1 − Σ kept, which
    /// rounds to 0 or to noise). The kept masses use a normaliser summed over a window only, so they
    /// are over-estimates (pessimistic: every profile value scales with them).
    pub(crate) fn discrete_gaussian(sigma: f64, sens: u64) -> Result<Self, PldError> {
        let k = (10.0 * sigma).ceil() + 1.0;
        let d = sens as f64;
        let count = 2.0 * k + d + 1.0;
        if count > super::pmf::MAX_GRID_POINTS as f64 {
            return Err(PldError::TooLarge(format!(
                "a discrete Gaussian with sigma {sigma} and sensitivity {sens} has {count:.3e} atoms \
                 (limit {}); use a gaussian event",
                super::pmf::MAX_GRID_POINTS
            )));
        }
        let (k, dk) = (k as i64, sens as i64);
        let s2 = 2.0 * sigma * sigma;
        let w = |x: i64| (-((x as f64) * (x as f64)) / s2).exp();
        let mut z = Neumaier::default();
        for x in (1..=(k + dk + 1)).rev() {
            z.add(2.0 * w(x));
        }
        z.add(1.0);
        let z = z.value();
        let loss = |x: i64| (d * d - 2.0 * x as f64 * d) / s2;
        let atoms: Vec<(f64, f64)> = ((-k)..=(k + dk)).map(|x| (loss(x), w(x) / z)).collect();
        let kf = k as f64;
        let log_first = -((kf + 1.0) * (kf + 1.0)) / s2;
        let ratio = (-(2.0 * kf + 3.0) / s2).exp();
        // exp of a rounded exponent, divided by a rounded 1 − r: 64U covers both (the exponent is
        // < 2^52 in magnitude here, so its own rounding moves the value by < 64U relative).
        let cut = rounding::prob_up(2.0 * log_first.exp() / (1.0 - ratio), DG_CUT_REL);
        // Loss index Δ − 2x on the step Δ/(2σ²) (2σ² and the quotient rounded: 4U). Masses: each
        // w(x) within 2U of its exponent x²/(2σ²) (at most m) plus LIBM_REL, the normaliser summed
        // to a few U; and the exact normaliser is at most z + cut ≤ z(1 + cut) (z ≥ 1), so an exact
        // mass is at least the computed one times 1 − cut − 2ρ.
        let m = ((kf + d) * (kf + d)) / s2;
        let rho = rounding::ARITH2_REL * m + rounding::LIBM_REL + rounding::ARITH8_REL;
        let points = ((-k)..=(k + dk))
            .map(|x| dk - 2 * x)
            .zip(atoms.iter().map(|p| p.1));
        let lattice = Lattice::new(
            d / s2,
            rounding::ARITH4_REL,
            points.collect(),
            cut + 2.0 * rho,
            0.0,
        );
        Ok(Self::atoms(lattice, atoms, 0.0, cut.max(f64::MIN_POSITIVE)))
    }

    /// k-ary randomized response keeping the true bucket with probability 1 − p + p/k (replace-one):
    /// losses ±c with c = ln(1 + k(1−p)/p), masses 1 − p + p/k and p/k, and 0 with (k − 2)p/k.
    pub(crate) fn randomized_response(p: f64, k: u64) -> Self {
        let kf = k as f64;
        let c = (kf * (1.0 - p) / p).ln_1p();
        let mut atoms = vec![(c, 1.0 - p + p / kf), (-c, p / kf)];
        let mut points = vec![(1, atoms[0].1), (-1, atoms[1].1)];
        if k > 2 {
            atoms.push((0.0, (kf - 2.0) * p / kf));
            points.push((0, atoms[2].1));
        }
        // c = ln1p(x) with x formed in three roundings (ln1p's relative condition is below 1);
        // each mass in at most three.
        let step_rel = rounding::ARITH8_REL + 2.0 * rounding::LIBM_REL;
        Self::atoms(
            Lattice::new(c, step_rel, points, rounding::ARITH8_REL, 0.0),
            atoms,
            0.0,
            0.0,
        )
    }

    /// An (ε, δ)-DP black box, optionally η-TV: the dominating pair of Ghazi & Issa ("Total variation
    /// meets differential privacy", App. D, eqs. (70)–(71)): losses +∞ (δ), +ε ((1−δ)·w·e^ε/(1+e^ε)),
    /// 0 ((1−δ)(1 − w)), −ε ((1−δ)·w/(1+e^ε)), where w = 1 − α is the weight of the non-erased part,
    /// w = (η − δ)/((1 − δ) tanh(ε/2)) clamped to [0, 1] (w = 1 without η: (ε, δ)-DP's f_{ε,δ}).
    ///
    /// # Soundness
    /// w is formed directly and rounded up (a larger w is a mixture with more weight on the
    /// (ε, δ) pair, so less private): forming α first and then 1 − α would turn η = 0 (P = Q) into
    /// rounding noise at ±ε, which the lower bound would then read as real privacy loss.
    pub(crate) fn epsilon_delta(eps: f64, delta: f64, eta: Option<f64>) -> Self {
        let (delta, w) = match eta {
            None => (delta, 1.0),
            Some(eta) => {
                let delta = delta.min(eta);
                let w = if eps == 0.0 || eta <= delta {
                    0.0
                } else {
                    rounding::up(
                        (eta - delta) / ((1.0 - delta) * (eps / 2.0).tanh()),
                        rounding::LIBM_CHAIN_REL, // tanh and four roundings
                    )
                    .min(1.0)
                };
                (delta, w)
            }
        };
        // The lattice's masses: w is rounded up, by at most 16U + LIBM_REL above the exact weight,
        // and a smaller weight moves mass from ±ε to 0, which can only raise the 0 atom; every
        // other factor is within a few U and LIBM_REL. The step is ε itself.
        let mass_rel = EPS_TV_MASS_REL + 4.0 * rounding::LIBM_REL;
        if eps == 0.0 || w == 0.0 {
            let lattice = Lattice::new(1.0, 0.0, vec![(0, 1.0 - delta)], mass_rel, delta);
            return Self::atoms(lattice, vec![(0.0, 1.0 - delta)], delta, 0.0);
        }
        // e^ε/(1+e^ε) and 1/(1+e^ε), each formed without cancellation.
        let (up, down) = (1.0 / (1.0 + (-eps).exp()), 1.0 / (1.0 + eps.exp()));
        let mut atoms = vec![
            (eps, (1.0 - delta) * w * up),
            (-eps, (1.0 - delta) * w * down),
        ];
        let mut points = vec![(1, atoms[0].1), (-1, atoms[1].1)];
        if w < 1.0 {
            atoms.push((0.0, (1.0 - w) * (1.0 - delta)));
            points.push((0, atoms[2].1));
        }
        let lattice = Lattice::new(eps, 0.0, points, mass_rel, delta);
        Self::atoms(lattice, atoms, delta, 0.0)
    }

    /// Additive noise Poisson-subsampled under replace-one: with probability q the differing record
    /// is in the sample and moves the output by +1 (D) or −1 (D′) units of its contribution bound,
    /// so the pair is (q·N(1) + (1−q)·N(0), q·N(−1) + (1−q)·N(0)) for noise N (dp_accounting's
    /// REPLACE adjacency; Balle, Barthe & Gaboardi 2018, Thm. 8 with their couplings). The other
    /// sampled records are shared, so each step post-processes this pair at every ε; the antipodal
    /// shifts dominated every other pair of contributions we checked numerically (scalar, in the
    /// plane, and L1 for Laplace) — a numerical check, not a proof. Poisson only: without
    /// replacement the replaced record's slot is refilled and the pair is different
    /// ([`Source::mixture_with_reference`]). The loss L(x) is increasing in x, so
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
        // δ(ε) at the threshold and its relative error bound. At *any* threshold x the value is
        // P′(X > x) − e^ε Q′(X > x), the hockey-stick functional of one set, so it is at most δ(ε)
        // whatever the bisection's error: rounded down it is a certified lower bound.
        let value = move |e: f64| -> (f64, f64) {
            if let Some(m) = max_loss {
                if e >= m {
                    return (0.0, 0.0);
                }
            }
            let x = match noise.threshold(q, e) {
                Some(x) => x,
                None => {
                    let mut hi = 1.0;
                    while loss(hi) <= e {
                        hi *= 2.0;
                        if hi > 1e9 {
                            return (0.0, 0.0);
                        }
                    }
                    gdp::bisect_up(0.0, hi, |x| loss(x) > e)
                }
            };
            let a = log_tail(x, 1.0);
            let b = e + log_tail(x, -1.0);
            if b >= a {
                return (0.0, 0.0);
            }
            let one_minus = -(b - a).exp_m1();
            let v = a.exp() * one_minus;
            let rel = TAIL_LOG_ABS_REL * (1.0 + a.abs() + b.abs()) * (1.0 + 1.0 / one_minus);
            (v, rel)
        };
        Self::symmetric(
            Side {
                delta: Arc::new(move |e| {
                    let (v, rel) = value(e);
                    rounding::prob_up(v, rel)
                }),
                lower: Some(Arc::new(move |e| {
                    let (v, rel) = value(e);
                    rounding::prob_down(v, rel)
                })),
                inf: 0.0,
                extra: 0.0,
                whole_line: false,
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
            // All of the inner +∞ mass is in δ; only the inner PMF's own is the mechanism's, the
            // truncated tails are `extra` (as in `poisson_of_pld`), so that a μ refused at a zero
            // slack says that discretisation, not the mechanism, put it there. The truncated part
            // is also kept out of the lower bound through `moved`.
            Side {
                delta: Arc::new(move |e| rounding::prob_up(prof.delta(e) + inf_all, rel)),
                lower: None,
                inf: pmf.inf,
                extra: pmf.inf_trunc,
                whole_line: false,
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
            lattice: None,
            witness: None,
        }
    }

    /// The pair (qP + (1−q)Q, Q) and its reverse, for an inner pair (P, Q) (remove ordering
    /// (P, Q) = (M(D ∪ {x}), M(D))):
    /// - Poisson subsampling at rate q under add/remove: x is in the sample with probability q
    ///   (Balle, Barthe & Gaboardi 2018, "Privacy amplification by subsampling", Thm. 10);
    /// - sampling without replacement (q = m/n) under replace-one, with (P, Q) the inner
    ///   replace-one pair: the replaced record's slot is otherwise filled by another record, so the
    ///   pair is (qP + (1−q)Q, Q), not a mixture on both sides (Zhu, Dong & Wang 2022, "Optimal
    ///   accounting of differential privacy via characteristic function", Prop. 30; for the
    ///   Gaussian sum, D = {+C, −C, …}, D′ = {−C, −C, …} attain it).
    ///
    /// For ε ≥ 0 (advanced joint convexity, Balle et al. Thm. 2):
    /// ```text
    /// δ_remove(ε) = q·δ_P‖Q(ln(1 + (e^ε − 1)/q))
    /// δ_add(ε)    = (1 − e^ε(1−q))·δ_Q‖P(ln(e^ε q/(1 − e^ε(1−q))))   for e^ε(1−q) < 1, else 0
    /// ```
    /// Where P has mass and Q none (the inner remove ordering's +∞ mass) the outer remove loss is
    /// +∞ with mass q·p∞; where Q has mass and P none (the inner add ordering's +∞ mass) the outer
    /// add loss is exactly −ln(1 − q), which is then the add ordering's largest loss.
    pub(crate) fn mixture_with_reference(self, q: f64) -> Self {
        let inner = self;
        let rem_in = inner.remove.delta.clone();
        let add_in = inner.add_side().delta.clone();
        let rem_lo = inner.remove.lower.clone();
        let add_lo = inner.add_side().lower.clone();
        let max_rem = inner.remove.max_loss;
        let (rem_inf, rem_extra) = inner.remove.inf_scaled(q);
        let add_side = inner.add_side();
        let log_1mq = (-q).ln_1p();
        // The add loss ln(Q/(qP + (1−q)Q)) is largest where P/Q is smallest: e^{−m} for an inner add
        // loss bounded by m, 0 where Q has mass and P none.
        // Largest losses are rounded up: the connect-the-dots top is placed there, and a top below
        // a real loss would drop that loss's mass.
        let max_add = rounding::up(
            match add_side.max_loss {
                Some(m) if add_side.inf + add_side.extra == 0.0 => -(q * (-m).exp_m1()).ln_1p(),
                _ => -log_1mq,
            },
            rounding::LIBM_CHAIN_REL,
        );
        let remove = Side {
            delta: Arc::new(move |e| {
                // The inner profile is read at an argument rounded down (δ is non-increasing, so a
                // smaller argument can only give more): expm1, the division and ln1p each add an
                // ulp or so of e1.
                let e1 = (e.exp_m1() / q).ln_1p();
                let e1 = (e1 - rounding::LIBM_CHAIN_REL * (e1.abs() + 1.0)).max(0.0);
                rounding::prob_up(q * rem_in(e1), rounding::ARITH2_REL)
            }),
            // The same with the inner lower bound read at an argument rounded up.
            lower: rem_lo.map(|f| -> DeltaFn {
                Arc::new(move |e| {
                    let e1 = (e.exp_m1() / q).ln_1p();
                    let e1 = e1 + rounding::LIBM_CHAIN_REL * (e1.abs() + 1.0);
                    rounding::prob_down(q * f(e1.max(0.0)), rounding::ARITH2_REL)
                })
            }),
            inf: rem_inf,
            extra: rem_extra,
            whole_line: false,
            max_loss: max_rem
                .map(|m| rounding::up((q * m.exp_m1()).ln_1p(), rounding::LIBM_CHAIN_REL)),
        };
        let add = Side {
            delta: Arc::new(move |e| {
                // 1 − e^ε(1−q) = −expm1(ε + ln(1−q))
                let w = -(e + log_1mq).exp_m1();
                if w <= 0.0 {
                    return 0.0;
                }
                let e2 = e + q.ln() - w.ln();
                // Rounded down, as e1 above (its terms carry an ulp each, w's log its relative error).
                let e2 = (e2
                    - rounding::LIBM_CHAIN_REL * (e.abs() + q.ln().abs() + w.ln().abs() + 1.0))
                    .max(0.0);
                rounding::prob_up(w * add_in(e2), rounding::LIBM_SHORT_REL)
            }),
            // The same with w rounded down (its argument carries an ulp of |ε| + |ln(1−q)|, which
            // moves w by at most (1 − w) times that) and the inner lower bound read at an argument
            // rounded up.
            lower: add_lo.map(|f| -> DeltaFn {
                Arc::new(move |e| {
                    let w = -(e + log_1mq).exp_m1();
                    let w = w - rounding::LIBM_CHAIN_REL
                        * ((1.0 - w).abs() * (e.abs() + log_1mq.abs() + 1.0) + w);
                    if w <= 0.0 {
                        return 0.0;
                    }
                    let e2 = e + q.ln() - w.ln();
                    let e2 = e2
                        + rounding::LIBM_CHAIN_REL * (e.abs() + q.ln().abs() + w.ln().abs() + 1.0);
                    rounding::prob_down(w * f(e2.max(0.0)), rounding::LIBM_SHORT_REL)
                })
            }),
            inf: 0.0,
            extra: 0.0,
            whole_line: false,
            max_loss: Some(max_add),
        };
        Source {
            remove,
            add: Some(add),
            // An allowance for the outer map's roundings (none counted here; each δ is widened at
            // its call).
            rel_err: inner.rel_err + rounding::ARITH8_REL,
            abs_err: inner.abs_err,
            steps: inner.steps,
            moved: inner.moved,
            lattice: None,
            witness: inner
                .witness
                .clone()
                .map(|w| Box::new(w.mixture_with_reference(q))),
        }
    }

    /// Whether the pair has no privacy loss at all: no loss above 0 in either ordering and no mass at
    /// +∞ (then P = Q, e.g. ε = δ = 0). Such an event is the identity of composition.
    pub(crate) fn is_identity(&self) -> bool {
        let none = |s: &Side| s.max_loss.is_some_and(|m| m <= 0.0) && s.inf + s.extra == 0.0;
        none(&self.remove) && none(self.add_side()) && self.abs_err == 0.0
    }

    /// One symmetric pair for both orderings: δ(ε) = max(δ_remove(ε), δ_add(ε)) for ε ≥ 0, the
    /// profile of the symmetrisation min{f, f⁻¹}** (Dong, Roth & Su, Prop. F.2), which dominates
    /// the mechanism whichever neighbour plays which role.
    pub(crate) fn symmetrised(self) -> Self {
        let Some(add) = self.add else {
            return self;
        };
        let rem = self.remove;
        let (fr, fa) = (rem.delta.clone(), add.delta.clone());
        let lower = match (rem.lower.clone(), add.lower.clone()) {
            (Some(lr), Some(la)) => Some(Arc::new(move |e| lr(e).max(la(e))) as DeltaFn),
            _ => None,
        };
        Source {
            remove: Side {
                delta: Arc::new(move |e| fr(e).max(fa(e))),
                lower,
                inf: rem.inf.max(add.inf),
                extra: rem.extra.max(add.extra),
                whole_line: false,
                max_loss: match (rem.max_loss, add.max_loss) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                },
            },
            add: None,
            rel_err: self.rel_err,
            abs_err: self.abs_err,
            steps: self.steps,
            moved: self.moved,
            lattice: None,
            witness: self.witness.map(|w| Box::new(w.symmetrised())),
        }
    }

    /// Poisson subsampling at rate q under add/remove of a *composite* inner event, from its composed
    /// PLD: each ordering's PMF is a genuine (pessimistic) pair on its own, and the subsampled pair
    /// is built from it atom by atom, so each outer ordering is again a genuine pair (reading the
    /// two inner orderings' profiles as one would stitch two different pessimistic pairs into a
    /// function that need not be the profile of any pair).
    ///
    /// Remove ordering (qP + (1−q)Q, Q), from the inner remove PMF (P-masses m at losses ℓ, Q-mass
    /// m·e^{−ℓ}, the rest of Q where P = 0, P-mass p∞ where Q = 0): an atom at ℓ moves to
    /// ln(1 + q(e^ℓ − 1)) with P′-mass m(q + (1−q)e^{−ℓ}); Q's own part lands at ln(1 − q) with
    /// P′-mass (1−q)·(its Q-mass); p∞ becomes q·p∞. Add ordering (Q, qP + (1−q)Q), from the inner add
    /// PMF (Q-masses n at λ = ln(Q/P)): an atom moves to −ln(1 + q(e^{−λ} − 1)) keeping its mass;
    /// the inner add +∞ mass (Q where P = 0) lands at −ln(1 − q); P's own part has no Q-mass.
    /// Garbling a pair garbles its subsampled pair by the same kernel, so domination carries over;
    /// both loss maps have slope ≤ 1, so the lower bound's shift (steps·h) still holds.
    pub(crate) fn poisson_of_pld(p: &Pld, q: f64) -> Self {
        let lq = (-q).ln_1p();
        // Positions rounded up (a loss placed higher is pessimistic), masses up.
        // (ln_1p of q·expm1(ℓ): relative; 4U absolute more: allowances.)
        let place = |x: f64| rounding::up(x, rounding::LIBM_CHAIN_REL) + rounding::ARITH4_REL;
        // `inf` is the mass at +∞ that is the mechanism's own; `extra` the inner tails truncated into
        // +∞ (an upper bound only, left out of the lower bound).
        let side = |atoms: Vec<(f64, f64)>, inf: f64, extra: f64| {
            let max_loss = atoms.iter().map(|a| a.0).fold(f64::NEG_INFINITY, f64::max);
            let prof = Arc::new(AtomProfile::new(atoms, rounding::add_up(inf, extra)));
            let rel = prof.rel_err() + POISSON_PLD_REL;
            Side {
                delta: Arc::new(move |e| rounding::prob_up(prof.delta(e), rel)),
                lower: None,
                inf,
                extra,
                max_loss: Some(max_loss.max(0.0)),
                whole_line: true,
            }
        };
        let rem = &p.remove;
        let mut q_rest = 1.0;
        let mut ra: Vec<(f64, f64)> = Vec::with_capacity(rem.mass.len() + 1);
        for (j, &m) in rem.mass.iter().enumerate() {
            let l = rem.loss(j);
            let qm = m * (-l).exp();
            q_rest -= qm;
            ra.push((
                place((q * l.exp_m1()).ln_1p()),
                // qm = m·e^(−ℓ) (an exp and a product), 1 − q and three more roundings.
                rounding::up(q * m + (1.0 - q) * qm, rounding::LIBM_CHAIN_REL),
            ));
        }
        // Q's mass where P has none: at least 1 − Σ m e^{−ℓ} (rounded up by the sum's error).
        let q_rest = (q_rest + rounding::ARITH4_REL * rem.mass.len() as f64).clamp(0.0, 1.0);
        ra.push((
            place(lq),
            rounding::up((1.0 - q) * q_rest, rounding::ARITH4_REL),
        ));
        ra.sort_by(|a, b| a.0.total_cmp(&b.0));
        let add = p.add_pmf();
        let mut aa: Vec<(f64, f64)> = Vec::with_capacity(add.mass.len() + 1);
        for (j, &n) in add.mass.iter().enumerate() {
            let l = add.loss(j);
            aa.push((place(-(q * (-l).exp_m1()).ln_1p()), n));
        }
        // The inner add ordering's +∞ mass (own or truncated) lands at a finite loss: all of it is
        // placed there (pessimistic); the truncated part is excluded from the lower bound via `moved`.
        aa.push((place(-lq), add.infinity_mass()));
        aa.sort_by(|a, b| a.0.total_cmp(&b.0));
        let worst = |f: fn(&super::Pmf) -> f64| f(rem).max(f(add));
        Source {
            remove: {
                let (inf, extra) = scaled_infinity(q, rem.inf, rem.infinity_mass());
                side(ra, inf, extra)
            },
            add: Some(side(aa, 0.0, 0.0)),
            rel_err: worst(|m| m.rel_err),
            abs_err: worst(|m| m.abs_err),
            steps: rem.steps.max(add.steps),
            moved: rem.moved_up.max(add.moved_up + add.inf_trunc),
            lattice: None,
            witness: None,
        }
    }

    /// Poisson subsampling at rate q under replace-one of a mechanism known only through its
    /// replace-one pair (A, B): the pair (qA + (1−q)⊥, qB + (1−q)⊥), ⊥ an outcome of neither.
    ///
    /// Both datasets share the sample T of the other records, and the replaced record is in the
    /// sample with probability q, so M(S(D)) = E_T[q·M(T ∪ {x}) + (1−q)·M(T)] and likewise with x′;
    /// joint convexity of the hockey-stick divergence gives δ′(ε) ≤ q·δ(ε) at the *same* ε, for each
    /// ordering. Nothing bounds M(T ∪ {x}) against M(T) (that is an add/remove pair, about which a
    /// replace-one guarantee says nothing), so there is no amplification of ε: with one record and
    /// M(∅) disjoint from M({x}), M({x′}) the bound is attained. Sample sizes reveal membership.
    pub(crate) fn mixture_with_disjoint(self, q: f64) -> Self {
        let scale = |s: &Side| {
            let f = s.delta.clone();
            let (inf, extra) = s.inf_scaled(q);
            Side {
                delta: Arc::new(move |e| rounding::prob_up(q * f(e), rounding::ARITH2_REL)),
                lower: s.lower.clone().map(|f| -> DeltaFn {
                    Arc::new(move |e| rounding::prob_down(q * f(e), rounding::ARITH2_REL))
                }),
                inf,
                extra,
                whole_line: false,
                max_loss: s.max_loss,
            }
        };
        Source {
            remove: scale(&self.remove),
            add: self.add.as_ref().map(scale),
            rel_err: self.rel_err + rounding::ARITH4_REL, // an allowance for the product by q
            abs_err: self.abs_err,
            steps: self.steps,
            moved: self.moved,
            lattice: None,
            witness: self
                .witness
                .clone()
                .map(|w| Box::new(w.mixture_with_disjoint(q))),
        }
    }
}
