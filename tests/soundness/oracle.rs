//! The truth of an event list: built from the request JSON by this suite's own reading of the event
//! semantics (no code of the accountant is used), then queried as rigorous brackets.
//!
//! Models (see each module for formulas and error bounds):
//! - [`Model::Pairs`]: finitely many loss values ([`crate::pairs`]) — randomized response, discrete
//!   Laplace, discrete Gaussian (truncated, with the cut mass as `slop`), (ε, δ[, η]) boxes, their
//!   compositions and subsamplings;
//! - [`Model::Gdp`]: μ-GDP closed forms ([`crate::gdp`]);
//! - [`Model::PairsGdp`]: a finite pair composed with μ-GDP: δ(ε) = Σ_o P(o)·δ_μ(ε − L(o))
//!   (+ P[Q = 0]), since composing with the Gaussian pair shifts each atom's loss by a
//!   N(μ²/2, μ²) loss and δ_μ is the Gaussian pair's profile at every real ε;
//! - [`Model::GdpBottom`]: μ-GDP run with probability q, else a record-independent output ⊥:
//!   δ(ε) = q·δ_μ(ε) for ε ≥ 0;
//! - [`Model::Datasets`]: additive noise on a sum under subsampling, from explicit neighbouring
//!   datasets ([`crate::mixture`]).
//!
//! A model is `exact` when it is the true worst case (then brackets are two-sided); otherwise it is
//! one realisable neighbouring pair (or the max over a few), i.e. *dominated by* the truth: its δ, μ,
//! TV and +∞ mass are lower bounds and its trade-off curve an upper bound on the truth's, and only
//! those sides are used.

use crate::gdp;
use crate::hp::{self, F, REL_TOL};
use crate::mixture::{self, DatasetPair, Noise};
use crate::pairs::{self, Atom, Curve, Pair};
use serde_json::Value;
use std::cell::OnceCell;

/// An extended non-negative real.
#[derive(Clone, Debug)]
pub enum X {
    Fin(F),
    Inf,
}

impl X {
    pub fn show(&self) -> String {
        match self {
            X::Fin(v) => hp::show(v),
            X::Inf => "+inf".into(),
        }
    }
    /// self < v (v finite).
    pub fn lt_f64(&self, v: f64) -> bool {
        assert!(
            v.is_finite(),
            "comparison with a non-finite reported value {v}"
        );
        match self {
            X::Fin(x) => *x < hp::f(v),
            X::Inf => false,
        }
    }
    /// self > v (v finite).
    pub fn gt_f64(&self, v: f64) -> bool {
        assert!(
            v.is_finite(),
            "comparison with a non-finite reported value {v}"
        );
        match self {
            X::Fin(x) => *x > hp::f(v),
            X::Inf => true,
        }
    }
}

/// A proven bracket lo ≤ truth ≤ hi (hi = +inf when nothing is known above).
#[derive(Clone, Debug)]
pub struct Bracket {
    pub lo: X,
    pub hi: X,
}

impl Bracket {
    /// [v(1 − REL_TOL) − abs, v(1 + REL_TOL) + abs + extra], the upper side only if `two_sided`.
    fn around(v: &F, abs: f64, extra: &F, two_sided: bool) -> Bracket {
        let lo = v * hp::f(1.0 - REL_TOL) - hp::f(abs);
        let hi = (v + extra) * hp::f(1.0 + REL_TOL) + hp::f(abs);
        Bracket {
            lo: X::Fin(hp::max(&lo, &hp::zero())),
            hi: if two_sided { X::Fin(hi) } else { X::Inf },
        }
    }
    pub fn unknown() -> Bracket {
        Bracket {
            lo: X::Fin(hp::zero()),
            hi: X::Inf,
        }
    }
    pub fn show(&self) -> String {
        format!("[{}, {}]", self.lo.show(), self.hi.show())
    }
}

pub enum Model {
    Pairs {
        rem: Pair,
        add: Pair,
        exact: bool,
        /// The true loss is unbounded above though the atoms are truncated (discrete Gaussian).
        unbounded: bool,
        curve: OnceCell<Curve>,
    },
    Gdp {
        mu: F,
    },
    PairsGdp {
        rem: Pair,
        add: Pair,
        exact: bool,
        mu: F,
    },
    GdpBottom {
        mu: F,
        q: F,
    },
    Datasets {
        noise: Noise,
        pairs: Vec<DatasetPair>,
    },
}

/// Relation: add/remove or replace-one.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Rel {
    AddRemove,
    Replace,
}

impl Rel {
    fn sensitivity(self) -> f64 {
        match self {
            Rel::AddRemove => 1.0,
            Rel::Replace => 2.0,
        }
    }
}

/// Relative tolerance of the upper end of the μ bracket of μ-GDP under a slack (see
/// [`gdp::mu_with_slack`]: golden-section search of a smooth unimodal function, value error
/// < 1e-20): a μ.lower above the truth by less than this is not reported.
pub const MU_SLACK_TOL: f64 = 1e-9;

/// Most atoms a finite pair may have before the oracle gives up (time bound).
const MAX_ATOMS: usize = 20_000;

fn pairs(rem: Pair, add: Pair, exact: bool, unbounded: bool) -> Result<Model, String> {
    if rem.atoms.len() > MAX_ATOMS || add.atoms.len() > MAX_ATOMS {
        return Err(format!(
            "finite pair too large ({} atoms)",
            rem.atoms.len().max(add.atoms.len())
        ));
    }
    Ok(Model::Pairs {
        rem,
        add,
        exact,
        unbounded,
        curve: OnceCell::new(),
    })
}

fn symmetric(p: Pair, exact: bool) -> Result<Model, String> {
    let s = p.swap();
    pairs(p, s, exact, false)
}

fn identity() -> Model {
    symmetric(Pair::identity(), true).unwrap()
}

fn num(v: &Value, k: &str) -> Result<f64, String> {
    v.get(k)
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("missing number {k}"))
}

fn is_identity(m: &Model) -> bool {
    match m {
        Model::Pairs { rem, add, .. } => {
            let id = |p: &Pair| {
                p.atoms.len() == 1
                    && matches!(&p.atoms[0].l, pairs::Loss::Fin(l) if hp::is_zero(l))
                    && hp::is_zero(&p.slop)
            };
            id(rem) && id(add)
        }
        Model::Gdp { mu } => hp::is_zero(mu),
        _ => false,
    }
}

/// The model of one event under a relation (Err: no oracle for it).
pub fn model_of(ev: &Value, rel: Rel) -> Result<Model, String> {
    let ty = ev.get("type").and_then(Value::as_str).ok_or("no type")?;
    match ty {
        "gaussian" => Ok(Model::Gdp {
            mu: hp::f(rel.sensitivity()) / hp::f(num(ev, "noise_multiplier")?),
        }),
        "gdp" => {
            let mu = num(ev, "mu")?;
            if mu == 0.0 {
                return Ok(identity());
            }
            Ok(Model::Gdp { mu: hp::f(mu) })
        }
        "laplace" => {
            let b = num(ev, "noise_multiplier")?;
            Ok(Model::Datasets {
                noise: Noise::Laplace(b),
                pairs: vec![DatasetPair {
                    label: "Lap(s) vs Lap(0)".into(),
                    p: mixture::Mixture {
                        comps: vec![(hp::one(), rel.sensitivity())],
                    },
                    q: mixture::Mixture {
                        comps: vec![(hp::one(), 0.0)],
                    },
                    monotone: true,
                }],
            })
        }
        "discrete_laplace" => {
            let a = num(ev, "noise_parameter")?;
            let d = num(ev, "sensitivity")?;
            if d > 2000.0 {
                return Err("discrete_laplace sensitivity too large for the oracle".into());
            }
            symmetric(discrete_laplace(a, d as i64), true)
        }
        "discrete_gaussian" => {
            let s = num(ev, "sigma")?;
            let d = num(ev, "sensitivity")?;
            if s > 300.0 || d > 1000.0 {
                return Err("discrete_gaussian too wide for the oracle".into());
            }
            let p = discrete_gaussian(s, d as i64);
            let sw = p.swap();
            pairs(p, sw, true, true)
        }
        "randomized_response" => {
            if rel == Rel::AddRemove {
                return Err("randomized_response has no add/remove meaning".into());
            }
            let p = num(ev, "noise_parameter")?;
            let k = num(ev, "num_buckets")?;
            if p >= 1.0 {
                return Ok(identity());
            }
            symmetric(randomized_response(p, k), true)
        }
        "epsilon_delta" => {
            let e = num(ev, "epsilon")?;
            let d = num(ev, "delta")?;
            let eta = ev.get("total_variation").and_then(Value::as_f64);
            symmetric(epsilon_delta(e, d, eta), true)
        }
        "poisson_sampled" => {
            let q = num(ev, "sampling_rate")?;
            let inner_ev = ev.get("event").ok_or("no inner event")?;
            if q == 0.0 {
                return Ok(identity());
            }
            let inner = model_of(inner_ev, rel)?;
            if q == 1.0 {
                return Ok(inner);
            }
            let inner_ty = inner_ev.get("type").and_then(Value::as_str).unwrap_or("");
            poisson(inner, inner_ty, inner_ev, q, rel)
        }
        "sampled_without_replacement" => {
            if rel == Rel::AddRemove {
                return Err("sampled_without_replacement is replace-one only".into());
            }
            let m = num(ev, "sample_size")?;
            let n = num(ev, "population_size")?;
            let inner_ev = ev.get("event").ok_or("no inner event")?;
            let inner = model_of(inner_ev, rel)?;
            if m == n {
                return Ok(inner);
            }
            let q = hp::f(m) / hp::f(n);
            let inner_ty = inner_ev.get("type").and_then(Value::as_str).unwrap_or("");
            match (inner, inner_ty) {
                (_, "gaussian") | (_, "laplace") => {
                    if n > 5000.0 {
                        return Err("population too large for explicit datasets".into());
                    }
                    let noise = leaf_noise(inner_ev)?;
                    Ok(Model::Datasets {
                        noise,
                        pairs: mixture::swor_pairs(m as usize, n as usize),
                    })
                }
                (Model::Gdp { mu }, _) => {
                    // M(D) = N(μ·[x ∈ D]) is μ-GDP under replace-one; subsampled, the pair
                    // (q N(μ) + (1−q) N(0), N(0)) is realised (a lower bound on the worst case).
                    let mu = hp::to_f64(&mu);
                    let qf = m / n;
                    let p = mixture::Mixture {
                        comps: vec![(hp::f(qf), mu), (hp::one() - hp::f(qf), 0.0)],
                    };
                    Ok(Model::Datasets {
                        noise: Noise::Gauss(1.0),
                        pairs: vec![DatasetPair {
                            label: "q N(mu) + (1-q) N(0) vs N(0)".into(),
                            p,
                            q: mixture::Mixture {
                                comps: vec![(hp::one(), 0.0)],
                            },
                            monotone: false,
                        }],
                    })
                }
                (Model::Pairs { rem, unbounded, .. }, _) => {
                    // With the record's slot filled by a record that behaves like x' when x is not
                    // sampled: (q A + (1−q) B, B) is realised (lower bound).
                    let r = rem.mix_into_first(&q);
                    let s = r.swap();
                    pairs(r, s, false, unbounded)
                }
                _ => Err("no oracle for this sampled_without_replacement".into()),
            }
        }
        "self_composed" => {
            let k = num(ev, "count")? as u64;
            let inner = model_of(ev.get("event").ok_or("no inner event")?, rel)?;
            self_compose(inner, k)
        }
        "composed" => {
            let list = ev
                .get("events")
                .and_then(Value::as_array)
                .ok_or("no events")?;
            compose_all(list, rel)
        }
        other => Err(format!("unknown type {other}")),
    }
}

fn leaf_noise(ev: &Value) -> Result<Noise, String> {
    let s = num(ev, "noise_multiplier")?;
    match ev.get("type").and_then(Value::as_str) {
        Some("gaussian") => Ok(Noise::Gauss(s)),
        Some("laplace") => Ok(Noise::Laplace(s)),
        _ => Err("not additive noise".into()),
    }
}

fn poisson(
    inner: Model,
    inner_ty: &str,
    inner_ev: &Value,
    q: f64,
    rel: Rel,
) -> Result<Model, String> {
    let qh = hp::f(q);
    match rel {
        Rel::AddRemove => match inner {
            Model::Pairs {
                rem,
                add,
                exact,
                unbounded,
                ..
            } => pairs(
                rem.mix_into_first(&qh),
                add.mix_into_second(&qh),
                exact,
                unbounded,
            ),
            Model::Gdp { mu } => {
                let mu = hp::to_f64(&mu);
                Ok(Model::Datasets {
                    noise: Noise::Gauss(1.0),
                    pairs: vec![monotone_mix(q, mu)],
                })
            }
            Model::Datasets { noise, .. } if inner_ty == "laplace" => Ok(Model::Datasets {
                noise,
                pairs: vec![monotone_mix(q, 1.0)],
            }),
            _ => Err("no oracle for Poisson subsampling of this event".into()),
        },
        Rel::Replace => {
            if inner_ty == "gaussian" || inner_ty == "laplace" {
                return Ok(Model::Datasets {
                    noise: leaf_noise(inner_ev)?,
                    pairs: mixture::poisson_pairs(q, true),
                });
            }
            match inner {
                Model::Pairs {
                    rem,
                    add,
                    exact,
                    unbounded,
                    ..
                } => pairs(rem.with_bottom(&qh), add.with_bottom(&qh), exact, unbounded),
                Model::Gdp { mu } => Ok(Model::GdpBottom { mu, q: qh }),
                _ => Err("no oracle for Poisson subsampling of this event".into()),
            }
        }
    }
}

/// (q·N(s) + (1−q)·N(0), N(0)) in units of the noise scale.
fn monotone_mix(q: f64, s: f64) -> DatasetPair {
    DatasetPair {
        label: format!("q N({s}) + (1-q) N(0) vs N(0)"),
        p: mixture::Mixture {
            comps: vec![(hp::f(q), s), (hp::one() - hp::f(q), 0.0)],
        },
        q: mixture::Mixture {
            comps: vec![(hp::one(), 0.0)],
        },
        monotone: true,
    }
}

fn self_compose(m: Model, k: u64) -> Result<Model, String> {
    if k == 1 || is_identity(&m) {
        return Ok(m);
    }
    match m {
        Model::Pairs {
            rem,
            add,
            exact,
            unbounded,
            ..
        } => {
            // Bound the work: the atom count after k-fold composition is at most
            // C(k + a − 1, a − 1) for a atoms; refuse when that is huge.
            let a = rem.atoms.len().max(add.atoms.len()) as f64;
            let est = (1..a as u64).fold(1.0f64, |acc, i| acc * (k as f64 + i as f64) / i as f64);
            if est > 4.0 * MAX_ATOMS as f64 || k > 5000 {
                return Err("self-composition too large for the oracle".into());
            }
            pairs(rem.power(k), add.power(k), exact, unbounded)
        }
        Model::Gdp { mu } => Ok(Model::Gdp {
            mu: mu * hp::sqrt(&hp::f(k as f64)),
        }),
        Model::PairsGdp {
            rem,
            add,
            exact,
            mu,
        } => {
            if k > 64 {
                return Err("self-composition too large for the oracle".into());
            }
            Ok(Model::PairsGdp {
                rem: rem.power(k),
                add: add.power(k),
                exact,
                mu: mu * hp::sqrt(&hp::f(k as f64)),
            })
        }
        _ => Err("no oracle for self-composition of this event".into()),
    }
}

pub fn compose_all(list: &[Value], rel: Rel) -> Result<Model, String> {
    let mut acc = identity();
    for e in list {
        acc = compose(acc, model_of(e, rel)?)?;
    }
    Ok(acc)
}

fn compose(a: Model, b: Model) -> Result<Model, String> {
    if is_identity(&a) {
        return Ok(b);
    }
    if is_identity(&b) {
        return Ok(a);
    }
    let split = |m: Model| -> Result<(Pair, Pair, bool, bool, F), String> {
        match m {
            Model::Pairs {
                rem,
                add,
                exact,
                unbounded,
                ..
            } => Ok((rem, add, exact, unbounded, hp::zero())),
            Model::Gdp { mu } => Ok((Pair::identity(), Pair::identity(), true, false, mu)),
            Model::PairsGdp {
                rem,
                add,
                exact,
                mu,
            } => Ok((rem, add, exact, false, mu)),
            _ => Err("no oracle for composing this event".into()),
        }
    };
    let (r1, a1, e1, u1, m1) = split(a)?;
    let (r2, a2, e2, u2, m2) = split(b)?;
    if (r1.atoms.len() * r2.atoms.len()) > 10 * MAX_ATOMS {
        return Err("composition too large for the oracle".into());
    }
    let mu = hp::sqrt(&(&m1 * &m1 + &m2 * &m2));
    let rem = r1.product(&r2);
    let add = a1.product(&a2);
    if hp::is_zero(&mu) {
        return pairs(rem, add, e1 && e2, u1 || u2);
    }
    let m = Model::Pairs {
        rem: rem.clone(),
        add: add.clone(),
        exact: true,
        unbounded: false,
        curve: OnceCell::new(),
    };
    if is_identity(&m) {
        return Ok(Model::Gdp { mu });
    }
    Ok(Model::PairsGdp {
        rem,
        add,
        exact: e1 && e2,
        mu,
    })
}

/// Randomized response (replace-one): the true bucket x is released w.p. 1 − p + p/k, every other
/// bucket w.p. p/k; neighbours differ in the true bucket (x vs x'). Outcomes: x (loss +c), x'
/// (loss −c), the k − 2 others merged (loss 0), c = ln(1 + k(1−p)/p).
pub fn randomized_response(p: f64, k: f64) -> Pair {
    let (ph, kh) = (hp::f(p), hp::f(k));
    let other = &ph / &kh;
    let top = hp::one() - &ph + &other;
    let c = hp::ln1p(&(&kh * (hp::one() - &ph) / &ph));
    let mut atoms = vec![
        Atom {
            p: top.clone(),
            q: other.clone(),
            l: pairs::Loss::Fin(c.clone()),
        },
        Atom {
            p: other.clone(),
            q: top,
            l: pairs::Loss::Fin(-c),
        },
    ];
    if k > 2.0 {
        let rest = (&kh - hp::f(2.0)) * &other;
        atoms.push(Atom::with_loss(rest, hp::zero()));
    }
    Pair::new(atoms)
}

/// Discrete Laplace P[x] ∝ e^{−a|x|} vs the same shifted by Δ: L(x) = a(|x − Δ| − |x|): aΔ for
/// x ≤ 0 (P-mass 1/(1 + e^{−a})), a(Δ − 2x) for 0 < x < Δ (P-mass tanh(a/2)e^{−ax}), −aΔ for x ≥ Δ
/// (P-mass e^{−aΔ}/(1 + e^{−a})). Closed-form tails: no truncation.
pub fn discrete_laplace(a: f64, d: i64) -> Pair {
    let ah = hp::f(a);
    let dh = hp::f(d as f64);
    let em = hp::exp(&-ah.clone());
    let z = hp::one() + &em;
    let c = (hp::one() - &em) / &z;
    let mut atoms = vec![Atom::with_loss(hp::one() / &z, &ah * &dh)];
    for x in 1..d {
        let xh = hp::f(x as f64);
        atoms.push(Atom::with_loss(
            &c * hp::exp(&-(&ah * &xh)),
            &ah * (&dh - hp::f(2.0) * &xh),
        ));
    }
    atoms.push(Atom::with_loss(hp::exp(&-(&ah * &dh)) / &z, -(&ah * &dh)));
    Pair::new(atoms)
}

/// Discrete Gaussian P[x] ∝ e^{−x²/(2σ²)} vs shifted by Δ: L(x) = (Δ² − 2xΔ)/(2σ²). Atoms for
/// x ∈ [−K, K + Δ] with K = ⌈σ√(2·1200·ln 2)⌉ + 2: each tail beyond carries < 2^-1200·(1 + σ²/K)
/// of mass, so the cut mass is < 2^-1100 (σ ≤ 300), recorded as `slop`. The normaliser is summed
/// over [−K−Δ, K+Δ] (relative error < 2^-1100 as well, inside the same slop).
pub fn discrete_gaussian(sigma: f64, d: i64) -> Pair {
    let k = (sigma * (2.0 * 1200.0 * 2f64.ln()).sqrt()).ceil() as i64 + 2;
    let s2 = hp::f(2.0) * hp::f(sigma) * hp::f(sigma);
    let w = |x: i64| {
        let xh = hp::f(x as f64);
        hp::exp(&-(&xh * &xh / &s2))
    };
    let mut z = hp::zero();
    for x in -(k + d)..=(k + d) {
        z += w(x);
    }
    let dh = hp::f(d as f64);
    let atoms: Vec<Atom> = (-k..=(k + d))
        .map(|x| {
            let xh = hp::f(x as f64);
            let l = (&dh * &dh - hp::f(2.0) * &xh * &dh) / &s2;
            Atom {
                p: w(x) / &z,
                q: w(x - d) / &z,
                l: pairs::Loss::Fin(l),
            }
        })
        .collect();
    let mut p = Pair::new(atoms);
    p.slop = hp::f(2.0).powi((-1100).into());
    p
}

/// The tight pair of an (ε, δ)-DP mechanism (Kairouz et al. 2015), or of an (ε, δ)-DP and η-TV one
/// (Ghazi & Issa, App. D): outcomes +∞ (P: δ', Q: 0), +ε (P: (1−δ')(1−a)e^ε/(1+e^ε)), 0
/// (P = Q = a(1−δ')), −ε (P: (1−δ')(1−a)/(1+e^ε)), −∞ (P: 0, Q: δ'), with δ' = min(δ, η) and erasure
/// weight a = 1 − (η − δ')/((1−δ')tanh(ε/2)) clamped to [0, 1] (a = 0 without η; a = 1 when ε = 0
/// or η = δ'). η = 0 gives P = Q.
pub fn epsilon_delta(eps: f64, delta: f64, eta: Option<f64>) -> Pair {
    let eh = hp::f(eps);
    let dp = hp::f(match eta {
        Some(t) => delta.min(t),
        None => delta,
    });
    let a = match eta {
        None => hp::zero(),
        Some(t) => {
            if eps == 0.0 || hp::f(t) <= dp {
                hp::one()
            } else if dp == hp::one() {
                hp::zero()
            } else {
                let th = hp::expm1(&eh) / (hp::exp(&eh) + hp::one()); // tanh(ε/2)
                let v = hp::one() - (hp::f(t) - &dp) / ((hp::one() - &dp) * th);
                hp::max(&hp::zero(), &hp::min(&hp::one(), &v))
            }
        }
    };
    let keep = (hp::one() - &dp) * (hp::one() - &a);
    // e^ε/(1+e^ε) = 1/(1 + e^{−ε}) and 1/(1+e^ε) = e^{−ε}/(1 + e^{−ε}).
    let em = hp::exp(&-eh.clone());
    let hi = &keep / (hp::one() + &em);
    let lo = &keep * &em / (hp::one() + &em);
    let mut atoms = vec![
        Atom {
            p: dp.clone(),
            q: hp::zero(),
            l: pairs::Loss::PosInf,
        },
        Atom {
            p: hp::zero(),
            q: dp.clone(),
            l: pairs::Loss::NegInf,
        },
        Atom::with_loss(&a * (hp::one() - &dp), hp::zero()),
    ];
    if !hp::is_zero(&keep) {
        atoms.push(Atom {
            p: hi.clone(),
            q: lo.clone(),
            l: pairs::Loss::Fin(eh.clone()),
        });
        atoms.push(Atom {
            p: lo,
            q: hi,
            l: pairs::Loss::Fin(-eh),
        });
    }
    Pair::new(atoms)
}

impl Model {
    pub fn kind(&self) -> &'static str {
        match self {
            Model::Pairs { exact: true, .. } => "finite pair (exact)",
            Model::Pairs { .. } => "finite pair (realised worst-case candidate)",
            Model::Gdp { .. } => "mu-GDP closed form",
            Model::PairsGdp { .. } => "finite pair (x) mu-GDP",
            Model::GdpBottom { .. } => "mu-GDP with bottom",
            Model::Datasets { .. } => "explicit datasets",
        }
    }

    fn exact(&self) -> bool {
        match self {
            Model::Pairs { exact, .. } | Model::PairsGdp { exact, .. } => *exact,
            Model::Gdp { .. } | Model::GdpBottom { .. } => true,
            Model::Datasets { pairs, .. } => pairs.len() == 1 && pairs[0].monotone,
        }
    }

    /// The true symmetrised δ(ε) (max over both orderings), ε ≥ 0.
    pub fn delta(&self, eps: f64) -> Bracket {
        let e = hp::f(eps);
        match self {
            Model::Pairs {
                rem, add, exact, ..
            } => {
                let v = pairs::delta_sym(rem, add, &e);
                Bracket::around(&v, 0.0, &hp::max(&rem.slop, &add.slop), *exact)
            }
            Model::Gdp { mu } => Bracket::around(&gdp::delta(mu, &e), 0.0, &hp::flushed(), true),
            Model::PairsGdp {
                rem,
                add,
                exact,
                mu,
            } => {
                let one = |p: &Pair| {
                    p.atoms.iter().fold(hp::zero(), |s, a| match &a.l {
                        pairs::Loss::PosInf => s + &a.p,
                        pairs::Loss::NegInf => s,
                        pairs::Loss::Fin(l) => s + &a.p * gdp::delta(mu, &(&e - l)),
                    })
                };
                let v = hp::max(&one(rem), &one(add));
                let extra = hp::max(&rem.slop, &add.slop) + hp::flushed();
                Bracket::around(&v, 0.0, &extra, *exact)
            }
            Model::GdpBottom { mu, q } => {
                Bracket::around(&(q * gdp::delta(mu, &e)), 0.0, &hp::flushed(), true)
            }
            Model::Datasets { noise, pairs } => {
                let v = pairs
                    .iter()
                    .map(|p| p.delta_sym(*noise, eps))
                    .reduce(|a, b| hp::max(&a, &b))
                    .unwrap();
                let b = Bracket::around(&v, mixture::MIX_ABS_TOL, &hp::zero(), self.exact());
                // Widen by the mixture oracle's relative error as well.
                let w = |x: X, up: bool| match x {
                    X::Fin(v) => X::Fin(if up {
                        v * hp::f(1.0 + mixture::MIX_REL_TOL)
                    } else {
                        v * hp::f(1.0 - mixture::MIX_REL_TOL)
                    }),
                    X::Inf => X::Inf,
                };
                Bracket {
                    lo: w(b.lo, false),
                    hi: w(b.hi, true),
                }
            }
        }
    }

    /// Whether the true ε(δ) is provably +∞ (δ(ε) > δ for every ε).
    pub fn eps_is_infinite(&self, delta: f64) -> bool {
        match self {
            Model::Pairs { unbounded, .. } => {
                (*unbounded && delta == 0.0) || self.inf_mass().lo.gt_f64(delta)
            }
            Model::Gdp { mu } | Model::GdpBottom { mu, .. } => delta == 0.0 && !hp::is_zero(mu),
            Model::PairsGdp { mu, .. } => {
                (delta == 0.0 && !hp::is_zero(mu)) || self.inf_mass().lo.gt_f64(delta)
            }
            Model::Datasets { .. } => false,
        }
    }

    /// Some ε with the true δ(ε) ≤ δ provably (a finite ε(δ) witness), searched by doubling.
    pub fn finite_eps_witness(&self, delta: f64) -> Option<f64> {
        if let Model::Pairs { rem, add, .. } = self {
            let m = [rem.max_finite_loss(), add.max_finite_loss()]
                .into_iter()
                .flatten()
                .map(|l| hp::to_f64(&l))
                .fold(0.0f64, f64::max);
            let e = m.max(0.0) * (1.0 + 1e-15) + 1e-300;
            return match self.delta(e).hi {
                X::Fin(v) if v <= hp::f(delta) => Some(e),
                _ => None,
            };
        }
        let mut e = 0.5;
        while e < 1e300 {
            if let X::Fin(v) = self.delta(e).hi {
                if v <= hp::f(delta) {
                    return Some(e);
                }
            } else {
                return None;
            }
            e *= 4.0;
        }
        None
    }

    /// ε(δ) estimated by bisection on the lower end of δ (for messages only).
    pub fn eps_estimate(&self, delta: f64) -> f64 {
        if self.eps_is_infinite(delta) {
            return f64::INFINITY;
        }
        let below = |e: f64| match &self.delta(e).lo {
            X::Fin(v) => *v <= hp::f(delta),
            X::Inf => false,
        };
        if below(0.0) {
            return 0.0;
        }
        let mut hi = 1.0;
        while !below(hi) {
            hi *= 2.0;
            if hi > 1e300 {
                return f64::INFINITY;
            }
        }
        let mut lo = 0.0;
        let iters = if matches!(self, Model::Datasets { .. }) {
            14
        } else {
            60
        };
        for _ in 0..iters {
            let m = 0.5 * (lo + hi);
            if below(m) {
                hi = m;
            } else {
                lo = m;
            }
        }
        hi
    }

    /// The true symmetrised trade-off f(α).
    pub fn tradeoff(&self, alpha: f64) -> Bracket {
        let a = hp::f(alpha);
        match self {
            Model::Pairs {
                rem,
                add,
                exact,
                curve,
                ..
            } => {
                let c = curve.get_or_init(|| pairs::symmetric_curve(rem, add));
                let v = c.eval(&a);
                let slop = hp::max(&rem.slop, &add.slop);
                let lo = if *exact {
                    X::Fin(hp::max(&(&v * hp::f(1.0 - REL_TOL) - &slop), &hp::zero()))
                } else {
                    X::Fin(hp::zero())
                };
                Bracket {
                    lo,
                    hi: X::Fin(&v * hp::f(1.0 + REL_TOL)),
                }
            }
            Model::Gdp { mu } => {
                let v = gdp::tradeoff(mu, &a);
                Bracket::around(&v, 0.0, &hp::zero(), true)
            }
            _ => Bracket::unknown(),
        }
    }

    /// The true mass at +∞ loss (max over orderings).
    pub fn inf_mass(&self) -> Bracket {
        match self {
            Model::Pairs {
                rem, add, exact, ..
            }
            | Model::PairsGdp {
                rem, add, exact, ..
            } => {
                let v = hp::max(&rem.inf_mass(), &add.inf_mass());
                Bracket::around(&v, 0.0, &hp::max(&rem.slop, &add.slop), *exact)
            }
            _ => Bracket {
                lo: X::Fin(hp::zero()),
                hi: X::Fin(hp::zero()),
            },
        }
    }

    /// The true μ: the smallest μ with f ≥ G_μ ⊗ f_{0,s} (s = slack).
    pub fn mu(&self, slack: f64) -> Bracket {
        match self {
            Model::Pairs {
                rem,
                add,
                exact,
                curve,
                unbounded,
            } => {
                // f(0) = 1 − (mass at +∞): more than the slack leaves no finite μ. Decided here
                // from the atoms, as 1 − 1e-300 is not representable in the curve's vertices.
                let inf = hp::max(&rem.inf_mass(), &add.inf_mass());
                if inf > hp::f(slack) {
                    return Bracket {
                        lo: X::Inf,
                        hi: X::Inf,
                    };
                }
                // Within the 320-bit rounding of the slack (1e-6 + 1e-300 of two composed boxes
                // rounds to 1e-6) the oracle cannot tell whether the +∞ mass exceeds it: μ may be
                // +∞ then, and only its lower end is known.
                let at_the_slack = slack > 0.0 && inf >= hp::f(slack) * (hp::one() - hp::f(1e-60));
                let c = curve.get_or_init(|| pairs::symmetric_curve(rem, add));
                let slop = hp::max(&rem.slop, &add.slop);
                // A truncated infinite support (discrete Gaussian) leaves out vertices of the
                // curve at α or β below the cut: they could only raise μ, so only `lo` is known.
                let exact = &(*exact && !*unbounded);
                let lo = match pairs::mu_of_curve(&c.vertices, slack) {
                    Some(m) => X::Fin(m * hp::f(1.0 - REL_TOL)),
                    None => X::Inf,
                };
                let hi = if !*exact || at_the_slack {
                    X::Inf
                } else if hp::is_zero(&slop) {
                    match &lo {
                        X::Fin(m) => X::Fin(m * hp::f((1.0 + REL_TOL) / (1.0 - REL_TOL))),
                        X::Inf => X::Inf,
                    }
                } else {
                    let lowered: Vec<(F, F)> = c
                        .vertices
                        .iter()
                        .map(|(a, b)| (a.clone(), hp::max(&(b - &slop), &hp::zero())))
                        .collect();
                    match pairs::mu_of_curve(&lowered, slack) {
                        Some(m) => X::Fin(m * hp::f(1.0 + REL_TOL)),
                        None => X::Inf,
                    }
                };
                Bracket { lo, hi }
            }
            Model::Gdp { mu } => {
                if slack == 0.0 || hp::is_zero(mu) {
                    return Bracket::around(mu, 0.0, &hp::zero(), true);
                }
                let m = hp::to_f64(mu);
                // Above μ ≈ 70 the optimal α = Φ(−μ/2) is below 1e-300, where `mu_with_slack`
                // clamps its scan and misses the optimum (it reported μ_s = 89.4426729 for
                // μ = √8000, s = 1e-3, below the closed form 2·isf(Φ(−μ/2)/(1 − s)) = 89.4426744).
                if !(1e-100..=70.0).contains(&m) {
                    // The slack only lowers μ: truth ∈ [0, μ₀].
                    return Bracket {
                        lo: X::Fin(hp::zero()),
                        hi: X::Fin(mu * hp::f(1.0 + REL_TOL)),
                    };
                }
                // Bracket from gdp::mu_with_slack (cells refined to MU_SLACK_TOL), widened by its own
                // f64 rounding (1e-12).
                let (lo, hi) = gdp::mu_with_slack(m, slack, (MU_SLACK_TOL * m).max(1e-12));
                Bracket {
                    lo: X::Fin(hp::f(lo * (1.0 - 1e-12))),
                    hi: X::Fin(hp::min(
                        &hp::f(hi * (1.0 + 1e-12) + 1e-15),
                        &(mu * hp::f(1.0 + REL_TOL)),
                    )),
                }
            }
            _ => Bracket::unknown(),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Model::Pairs { rem, add, .. } => format!(
                "{} ({} / {} atoms)",
                self.kind(),
                rem.atoms.len(),
                add.atoms.len()
            ),
            Model::Gdp { mu } => format!("{} (mu = {})", self.kind(), hp::show(mu)),
            Model::PairsGdp { rem, mu, .. } => format!(
                "{} ({} atoms, mu = {})",
                self.kind(),
                rem.atoms.len(),
                hp::show(mu)
            ),
            Model::GdpBottom { mu, q } => {
                format!(
                    "{} (mu = {}, q = {})",
                    self.kind(),
                    hp::show(mu),
                    hp::show(q)
                )
            }
            Model::Datasets { pairs, .. } => format!(
                "{}: {}",
                self.kind(),
                pairs
                    .iter()
                    .map(|p| p.label.clone())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        }
    }
}
