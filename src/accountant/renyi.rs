//! The tightest privacy profile that Rényi statements certify: the binary-test conversion.
//!
//! A black box known only by Rényi bounds — ρ-zCDP (Bun & Steinke, "Concentrated Differential
//! Privacy", TCC 2016: D_λ ≤ λρ for every λ > 1) or points (λᵢ, τᵢ) of a Rényi-DP curve (Mironov,
//! "Rényi Differential Privacy", CSF 2017: D_λᵢ ≤ τᵢ), both ways between neighbours — has as its
//! *truth* the worst case over every mechanism meeting the statement. Any test φ of such a
//! mechanism turns its outputs into one bit: Bern(p) under one neighbour, Bern(q) under the other,
//! with p = P(φ = 1), q = Q(φ = 1), and by data processing the pair of bits meets the statement too:
//! ```text
//! F = {(p, q) : D_λ(Bern(p) ‖ Bern(q)) ≤ τ_λ and D_λ(Bern(q) ‖ Bern(p)) ≤ τ_λ for every stated λ}
//! δ(ε) = H_{e^ε}(P ‖ Q) = sup over tests of p − e^ε q  ≤  sup_{(p,q) ∈ F} p − e^ε q
//! ```
//! and the bound is attained (the mechanism that outputs that bit meets the statement), so it is
//! the exact worst case at every ε (Balle, Barthe, Gaboardi, Hsu & Sato, "Hypothesis Testing
//! Interpretations and Rényi Differential Privacy", AISTATS 2020; Asoodeh, Liao, Calmon, Kosut &
//! Sankar, "Three Variants of Differential Privacy: Lossless Conversion and Applications", 2021;
//! Zhu, Dong & Wang, "Optimal Accounting of Differential Privacy via Characteristic Function",
//! AISTATS 2022). The classical conversions (Canonne, Kamath & Steinke 2020, Prop. 12, in
//! [`super::zcdp`]) bound each order alone and are far from it: one order λ = 2 with τ = 10⁻⁶ gives
//! δ(0) ≤ 0.25 there, ≤ 5·10⁻⁴ here (χ²(p‖q) ≤ e^τ − 1).
//!
//! # How it is computed (all in the plane of (q, p))
//! - F is convex: e^{(λ−1)D_λ} = Σ pᵢ^λ qᵢ^{1−λ} is jointly convex for λ > 1 (a perspective), so
//!   each constraint's sublevel set is convex. Its upper boundary u(q) = max{p : (p, q) ∈ F} is
//!   concave, and nondecreasing where p + q ≤ 1 (u(1) = 1 is its maximum).
//! - For ε ≥ 0 (y = e^ε ≥ 1) only F ∩ {p + q ≤ 1} matters: F is symmetric under (p, q) ↦
//!   (1 − q, 1 − p) (relabelling the bit swaps the two directions), and that map raises p − yq by
//!   (y − 1)(p + q − 1) ≥ 0 at every point with p + q ≥ 1.
//! - u is bracketed at samples qⱼ (log-spaced): lo ≤ u(qⱼ) ≤ hi, where (hi, qⱼ) is *certified* to
//!   violate one constraint (each D_λ(Bern(p)‖Bern(q)), D_λ(Bern(q)‖Bern(p)) increases in p ≥ q)
//!   and (lo, qⱼ) to satisfy all of them, each comparison with an explicit bound on its round-off.
//!   The last sample is the first where p = 1 − q is feasible.
//! - Concavity turns the brackets into a bound for every q: the secant through (qⱼ₋₁, lo),
//!   (qⱼ, hi), extended right of qⱼ, is above u there, and the one through (qⱼ₊₁, hi), (qⱼ₊₂, lo),
//!   extended left of qⱼ₊₁, is above u there. On [qⱼ, qⱼ₊₁] u is below the smaller of the two, so
//!   sup (u − yq) there is at an end or at their crossing; with the crossing's q rounded down and
//!   its p up, each interval gives at most three points (q, p) with sup_F (p − yq) ≤ max over
//!   them. Where a secant is missing, monotonicity gives (qⱼ, hi at qⱼ₊₁); below the first sample,
//!   the left-extended secant meets q = 0.
//! - A query needs only the intervals around the slope y: if a secant slope right of qₘ is ≤ y,
//!   nothing beyond qₘ beats (qₘ, hi); if one left of qₘ′ is ≥ y, nothing before qₘ′ does. These
//!   hold whichever indices are found (slopes rounded outward), so the binary searches that find
//!   them affect speed only.
//!
//! The result is an upper bound on the worst case of F for a *finite* set of constraints. For
//! ρ-zCDP, whose statement has a constraint at every λ > 1, a finite set of orders (λ − 1 from
//! 10⁻³ to 10⁶, ratio [`ZCDP_ORDER_RATIO`]) is used with τ = λρ rounded up: fewer constraints only
//! enlarge F, so the bound stays sound. Its error against the exact worst case comes from the
//! sampling (second order in the spacing: up to about 10⁻³ relative in δ) and the omitted orders.

use super::rounding::{self, LIBM_REL, U};

/// Below this, absolute round-off slack (subnormal range).
const TINY: f64 = 1e-300;

/// Smallest λ − 1 of the orders used for ρ-zCDP.
const ZCDP_MIN_T: f64 = 1e-3;
/// Largest λ − 1 of the orders used for ρ-zCDP.
const ZCDP_MAX_T: f64 = 1e6;
/// Ratio between consecutive λ − 1 for ρ-zCDP.
pub const ZCDP_ORDER_RATIO: f64 = 1.01;

/// The spacing of the samples in ln q: fine where the profile's values matter (the interval
/// error is second order in it, ≈ (spacing)²/8 relative; finer still near q = ½, where the
/// spacing in q itself is what counts), coarse in the far tail (δ below about 10⁻⁴⁰).
fn sample_step(ln_q: f64) -> f64 {
    if ln_q < -200.0 {
        1.0
    } else if ln_q < -100.0 {
        0.25
    } else if ln_q < -3.0 {
        0.05
    } else {
        0.01
    }
}

/// One stated bound: D_λ ≤ τ between neighbours, both ways.
#[derive(Debug, Clone, Copy)]
struct Order {
    lam: f64,
    /// (λ − 1)τ, bracketed.
    rhs_ln: (f64, f64),
    /// e^{(λ−1)τ} − 1, bracketed.
    rhs_m1: (f64, f64),
}

impl Order {
    fn new(lam: f64, tau: f64) -> Self {
        // λ − 1 is exact for λ ≤ 2 (Sterbenz) and within U beyond; the product adds U.
        let t = (lam - 1.0) * tau;
        let rhs_ln = (
            rounding::down(t, rounding::ARITH4_REL),
            rounding::up(t, rounding::ARITH4_REL),
        );
        let m1 = |x: f64| x.exp_m1();
        let rhs_m1 = (
            rounding::down(m1(rhs_ln.0), 2.0 * LIBM_REL).max(0.0),
            rounding::up(m1(rhs_ln.1), 2.0 * LIBM_REL),
        );
        Order {
            lam,
            rhs_ln,
            rhs_m1,
        }
    }
}

/// A point (p, q), q ≤ p, p + q ≤ 1, with the logarithms every constraint needs and bounds on
/// their absolute round-off.
struct Point {
    p: f64,
    q: f64,
    /// ln(p/q) ≥ 0 and ln((1−p)/(1−q)) ≤ 0.
    x: (f64, f64),
    y: (f64, f64),
    ln_p: (f64, f64),
    ln_q: (f64, f64),
    ln_1p: (f64, f64),
    ln_1q: (f64, f64),
}

impl Point {
    fn new(p: f64, q: f64) -> Self {
        let d = p - q;
        // ln1p of a quotient: the quotient carries ≤ 3U, ln1p LIBM_REL, and z/((1+z)ln(1+z)) ≤ 1
        // keeps the relative error of the result within their sum.
        let x = (d / q).ln_1p();
        let ex = (rounding::ARITH4_REL + LIBM_REL) * x + TINY;
        let l1p = (-p).ln_1p();
        let l1q = (-q).ln_1p();
        // y two ways: ln1p(−d/(1−q)) (good unless d/(1−q) is near 1) or ln1p(−p) − ln1p(−q)
        // (good unless p and q are close); the one with the smaller error bound is kept.
        let z = d / (1.0 - q);
        let y1 = (-z).ln_1p();
        let e1 = rounding::ARITH4_REL * z / (1.0 - z) + LIBM_REL * y1.abs() + TINY;
        let y2 = l1p - l1q;
        let e2 = LIBM_REL * (l1p.abs() + l1q.abs()) + U * y2.abs() + TINY;
        let y = if e1 <= e2 { (y1, e1) } else { (y2, e2) };
        let lg = |v: f64| (v, LIBM_REL * v.abs() + TINY);
        Point {
            p,
            q,
            x: (x, ex),
            y,
            ln_p: lg(p.ln()),
            ln_q: lg(q.ln()),
            ln_1p: lg(l1p),
            ln_1q: lg(l1q),
        }
    }
}

/// A comparison of a constraint's left side with its bound.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Status {
    Satisfied,
    Violated,
    Unknown,
}

/// e^{(λ−1)D_λ} − 1 = w₁(e^{z₁} − 1) + w₂(e^{z₂} − 1) = ln-sum-exp form e^{a} + e^{b} with
/// a = ln w₁ + z₁, b = ln w₂ + z₂, against the order's bound: the signed excess (value − bound, in
/// whichever form was used) and a bound on its round-off.
fn excess(o: &Order, w: [(f64, (f64, f64)); 2], z: [(f64, f64); 2]) -> (f64, f64) {
    let small = z[0].0.abs() <= 1.0 && z[1].0.abs() <= 1.0 && o.rhs_ln.1 <= 1.0;
    if small {
        // Linear form: each term w·expm1(z), z within ez, so expm1(z) within e^{|z|}·ez ≤ e·ez
        // plus libm's ulp; the weight (q or 1 − q) within U; the sum one more U.
        let mut s = 0.0;
        let mut err = 0.0;
        for i in 0..2 {
            let t = w[i].0 * z[i].0.exp_m1();
            s += t;
            err += w[i].0 * 2.75 * z[i].1 + (rounding::ARITH2_REL + LIBM_REL) * t.abs();
        }
        err += U * s.abs() + TINY;
        let (lo, hi) = o.rhs_m1;
        let v = if s > hi { s - hi } else { s - lo };
        (v, err + spread(lo, hi))
    } else {
        let a = (w[0].1 .0 + z[0].0, w[0].1 .1 + z[0].1);
        let b = (w[1].1 .0 + z[1].0, w[1].1 .1 + z[1].1);
        let (m, n) = if a.0 >= b.0 { (a, b) } else { (b, a) };
        let tail = (n.0 - m.0).exp().ln_1p();
        let r = m.0 + tail;
        // ∂r/∂a = e^{a−r} ≤ 1 (and likewise b): the inputs' errors weighted, plus the sum's.
        let wm = (m.0 - r).exp().min(1.0);
        let wn = (n.0 - r).exp().min(1.0);
        // The additions forming a and b (U of each, weighted), the difference n − m (U of it,
        // weighted by e^{n−r}), exp's and ln1p's errors (LIBM_REL of the tail each), the sum.
        let err = wm * (m.1 + U * m.0.abs())
            + wn * (n.1 + U * n.0.abs() + U * (n.0 - m.0).abs())
            + rounding::ARITH2_REL * (m.0.abs() + r.abs())
            + 2.0 * LIBM_REL * tail
            + TINY;
        let (lo, hi) = o.rhs_ln;
        let v = if r > hi { r - hi } else { r - lo };
        (v, err + spread(lo, hi))
    }
}

/// The width of a bound's bracket, carried as error (0 for an infinite bound: τ = +∞ is met by
/// everything, and ∞ − ∞ would be NaN).
fn spread(lo: f64, hi: f64) -> f64 {
    if hi > lo && hi.is_finite() {
        hi - lo
    } else {
        0.0
    }
}

/// Both directions' excesses of one order at a point, each with its error bound: forward
/// D_λ(Bern(p)‖Bern(q)) and reverse D_λ(Bern(q)‖Bern(p)) (each increases in p ≥ q, so either one
/// violated puts the point outside).
fn order_excess(o: &Order, pt: &Point) -> [(f64, f64); 2] {
    let lam = o.lam;
    // λx and λy carry λ·(their error) plus a rounding of the product.
    let zx = (lam * pt.x.0, lam * pt.x.1 + U * (lam * pt.x.0).abs());
    let zy = (lam * pt.y.0, lam * pt.y.1 + U * (lam * pt.y.0).abs());
    // D_λ(Bern(p)‖Bern(q)): q·(p/q)^λ + (1−q)·((1−p)/(1−q))^λ.
    let fwd = excess(o, [(pt.q, pt.ln_q), (1.0 - pt.q, pt.ln_1q)], [zx, zy]);
    // D_λ(Bern(q)‖Bern(p)): p·(q/p)^λ + (1−p)·((1−q)/(1−p))^λ.
    let neg = |z: (f64, f64)| (-z.0, z.1);
    let rev = excess(
        o,
        [(pt.p, pt.ln_p), (1.0 - pt.p, pt.ln_1p)],
        [neg(zx), neg(zy)],
    );
    [fwd, rev]
}

/// The larger of the two directions' excesses, uncertified (for the bisection's decisions only).
fn excess_estimate(o: &Order, pt: &Point) -> f64 {
    let [f, r] = order_excess(o, pt);
    f.0.max(r.0)
}

/// Violated when either direction is certainly violated; satisfied only when both certainly
/// are; otherwise unknown.
fn status(o: &Order, pt: &Point) -> Status {
    let d = order_excess(o, pt);
    if d.iter().any(|&(v, err)| v - err > 0.0) {
        Status::Violated
    } else if d.iter().all(|&(v, err)| v + err < 0.0) {
        Status::Satisfied
    } else {
        Status::Unknown
    }
}

/// The orders sorted by λ, with a binary tree over them for checking a point against all of them
/// at once: a node over orders i … j holds the order λⱼ with the bound min τ over i … j. D_λ is
/// nondecreasing in λ (Mironov 2017, Prop. 4 — van Erven & Harremoës 2014, Thm. 3), so
/// D_λₖ ≤ D_λⱼ ≤ min τ ≤ τₖ for every k in the node: one comparison certifies them all, and only
/// nodes near the binding order need their children.
#[derive(Debug, Clone)]
struct Orders {
    leaves: Vec<Order>,
    nodes: Vec<Node>,
}

/// A node of [`Orders`]' tree.
#[derive(Debug, Clone)]
struct Node {
    /// The first leaf under it.
    first: usize,
    /// The order certifying all leaves under it.
    order: Order,
    /// Its two children (none for a leaf).
    kids: Option<(usize, usize)>,
}

impl Orders {
    fn new(mut pairs: Vec<(f64, f64)>) -> Self {
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let leaves: Vec<Order> = pairs.iter().map(|&(l, t)| Order::new(l, t)).collect();
        let mut o = Orders {
            leaves,
            nodes: Vec::new(),
        };
        o.build(&pairs, 0, pairs.len() - 1);
        o
    }

    /// Builds the node over i … j (children first), returning its index.
    fn build(&mut self, pairs: &[(f64, f64)], i: usize, j: usize) -> usize {
        let kids = (i < j).then(|| {
            let mid = (i + j) / 2;
            (self.build(pairs, i, mid), self.build(pairs, mid + 1, j))
        });
        let order = if i == j {
            self.leaves[i]
        } else {
            let tau = pairs[i..=j]
                .iter()
                .map(|p| p.1)
                .fold(f64::INFINITY, f64::min);
            Order::new(pairs[j].0, tau)
        };
        self.nodes.push(Node {
            first: i,
            order,
            kids,
        });
        self.nodes.len() - 1
    }

    /// An order not certainly satisfied at `pt` (the first found), or `None` when every order is
    /// certainly satisfied there.
    fn unsatisfied(&self, pt: &Point) -> Option<usize> {
        self.check(self.nodes.len() - 1, pt)
    }

    fn check(&self, n: usize, pt: &Point) -> Option<usize> {
        let node = &self.nodes[n];
        if status(&node.order, pt) == Status::Satisfied {
            return None;
        }
        match &node.kids {
            None => Some(node.first),
            Some((a, b)) => self.check(*a, pt).or_else(|| self.check(*b, pt)),
        }
    }
}

/// p on the geometric path from q (t = 0) to 1 − q (t = 1).
fn on_path(q: f64, ln_q: f64, ln_top: f64, t: f64) -> f64 {
    let top = rounding::sub_down(1.0, q);
    if t <= 0.0 {
        return q;
    }
    if t >= 1.0 {
        return top;
    }
    (ln_q + t * (ln_top - ln_q)).exp().clamp(q, top)
}

/// For one order at q: (t_lo, p_hi) with p_hi certified to violate it, or `None` when it is not
/// certainly violated at p = 1 − q. Bisection on the path's parameter.
fn root(o: &Order, q: f64) -> Option<(f64, f64)> {
    let (ln_q, top) = (q.ln(), (-q).ln_1p());
    let at = |t: f64| Point::new(on_path(q, ln_q, top, t), q);
    if status(o, &at(1.0)) != Status::Violated {
        return None;
    }
    let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
    for _ in 0..64 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if excess_estimate(o, &at(mid)) > 0.0 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    // Walk hi up until the violation is certain (it is at t = 1).
    let mut step = (hi - lo).max(1e-15);
    let mut p_hi = on_path(q, ln_q, top, hi);
    while status(o, &Point::new(p_hi, q)) != Status::Violated {
        hi = (hi + step).min(1.0);
        step *= 4.0;
        p_hi = on_path(q, ln_q, top, hi);
        if hi >= 1.0 {
            p_hi = 1.0 - q;
            break;
        }
    }
    Some((lo, p_hi))
}

/// A bracket of the upper boundary at one sample.
#[derive(Debug, Clone, Copy)]
struct Sample {
    q: f64,
    lo: f64,
    hi: f64,
    /// Whether `hi` bounds u itself (an order is certainly violated there); otherwise it is 1 − q
    /// rounded up, which bounds only min(u, 1 − q) — enough for the secants (that function is
    /// concave too, and the sup over p + q ≤ 1 is the sup of it), not for monotonicity.
    hi_ok: bool,
}

/// A point (q, p) with sup over a part of F of p − yq at most p − yq (for every y ≥ 1).
type Candidate = (f64, f64);

/// The binary-test bound of a set of Rényi statements, prepared for profile queries.
#[derive(Debug, Clone)]
pub struct BinaryBound {
    samples: Vec<Sample>,
    /// The first q where p = 1 − q is feasible (certified): its p bracket is [1 − q down, up].
    terminal: Sample,
    /// Per sample j ≥ 1: an upper bound on the slope of u right of qⱼ (+∞ for j = 0).
    s_left: Vec<f64>,
    /// Per sample j: a lower bound on the slope of u left of qⱼ (−∞ where unknown).
    s_right: Vec<f64>,
    /// Per interval [qⱼ, qⱼ₊₁] (the last one ends at the terminal): its candidates.
    cells: Vec<[Candidate; 3]>,
    /// Candidates for [0, q₀].
    head: [Candidate; 2],
}

impl BinaryBound {
    /// The bound for (ξ, ρ)-zCDP (ρ, ξ ≥ 0 finite, not both 0): orders 1 + t, t from
    /// [`ZCDP_MIN_T`] to [`ZCDP_MAX_T`] with ratio [`ZCDP_ORDER_RATIO`], τ = ξ + λρ rounded up
    /// (Bun & Steinke 2016, Definition 1.1; ξ = 0 is ρ-zCDP).
    pub fn zcdp(rho: f64, xi: f64) -> Self {
        let mut pairs = Vec::new();
        let mut t = ZCDP_MIN_T;
        // The order that binds at q is about √(ln(1/q)/ρ) (the quadratic part of the classical
        // conversion): past 4√(745/ρ) + 10 none binds for any q the samples reach; leaving
        // orders out only enlarges F.
        let max_t = ZCDP_MAX_T.min(4.0 * (745.0 / rho).sqrt() + 10.0);
        while t <= max_t {
            let lam = 1.0 + t;
            pairs.push((lam, rounding::add_up(xi, rounding::mul_up(lam, rho))));
            t *= ZCDP_ORDER_RATIO;
        }
        Self::new(Orders::new(pairs))
    }

    /// The bound for points (λᵢ, τᵢ) of a Rényi curve (λᵢ > 1, τᵢ > 0 finite).
    pub fn rdp(orders: &[f64], rdp: &[f64]) -> Self {
        Self::new(Orders::new(
            orders.iter().copied().zip(rdp.iter().copied()).collect(),
        ))
    }

    fn new(orders: Orders) -> Self {
        let mut samples: Vec<Sample> = Vec::new();
        let mut terminal = None;
        let mut k = orders.leaves.len() - 1;
        let mut ln_q = -700.0_f64;
        let last = 0.5f64.ln();
        loop {
            if ln_q >= last {
                // p = q = ½ is feasible exactly (D_λ = 0): the anti-diagonal is reached.
                terminal = Some(Sample {
                    q: 0.5,
                    lo: 0.5,
                    hi: 0.5,
                    hi_ok: false,
                });
                break;
            }
            let q = ln_q.exp();
            if let Some(s) = Self::bracket(&orders, q, &mut k) {
                samples.push(s);
            } else {
                terminal = Some(Sample {
                    q,
                    lo: rounding::sub_down(1.0, q),
                    hi: rounding::sub_up(1.0, q),
                    hi_ok: false,
                });
            }
            if terminal.is_some() {
                break;
            }
            ln_q += sample_step(ln_q);
        }
        let terminal = terminal.expect("the loop ends at a terminal");
        let mut b = BinaryBound {
            samples,
            terminal,
            s_left: Vec::new(),
            s_right: Vec::new(),
            cells: Vec::new(),
            head: [(0.0, 1.0), (0.0, 1.0)],
        };
        b.prepare();
        b
    }

    /// The bracket of u at q, or `None` when p = 1 − q is certainly feasible (the terminal).
    /// `k` is the order found binding at the previous sample (a warm start).
    fn bracket(orders: &Orders, q: f64, k: &mut usize) -> Option<Sample> {
        let (ln_q, ln_top) = (q.ln(), (-q).ln_1p());
        let at = |t: f64| Point::new(on_path(q, ln_q, ln_top, t), q);
        // The binding order: the one with the lowest root. Start from the warm one; an order
        // found unsatisfied below the current root replaces it if its own root is lower (then it
        // binds); if not (nearly tied neighbours), the point is lowered a little instead.
        let mut best: Option<(f64, f64)> = None; // (t_lo, p_hi) of the binding order so far
        let mut tried = std::collections::HashSet::new();
        let mut candidate = Some(*k);
        let mut backoff = 0;
        let mut lo = None;
        for _ in 0..64 {
            if let Some(c) = candidate.take() {
                if tried.insert(c) {
                    if let Some((t, p)) = root(&orders.leaves[c], q) {
                        if best.is_none_or(|b| p < b.1) {
                            best = Some((t, p));
                            *k = c;
                        }
                    }
                }
            }
            let Some((t_lo, _)) = best else {
                // No order tried is violated on the anti-diagonal: is any?
                match orders.unsatisfied(&at(1.0)) {
                    None => return None,
                    Some(j) if tried.contains(&j) => break,
                    Some(j) => {
                        candidate = Some(j);
                        continue;
                    }
                }
            };
            let t = (t_lo - 1e-12 * f64::from(1u32 << backoff.min(30))).max(0.0);
            match orders.unsatisfied(&at(t)) {
                None => {
                    lo = Some(on_path(q, ln_q, ln_top, t));
                    break;
                }
                Some(j) if !tried.contains(&j) => candidate = Some(j),
                Some(_) => backoff += 2,
            }
        }
        // No order certainly violated below the anti-diagonal (and not all certainly satisfied on
        // it): nothing is known but p ≤ 1 − q. No point certainly feasible: p = q is (D_λ = 0).
        let hi = best.map_or(rounding::sub_up(1.0, q), |b| b.1);
        let lo = lo.unwrap_or(q).min(hi);
        Some(Sample {
            q,
            lo,
            hi,
            hi_ok: best.is_some(),
        })
    }

    /// The samples and the terminal as one list (the terminal last).
    fn point(&self, j: usize) -> Sample {
        self.samples.get(j).copied().unwrap_or(self.terminal)
    }

    fn prepare(&mut self) {
        let n = self.samples.len();
        // Slopes between points a and b (qa < qb) with numerator bounds, rounded outward.
        let slope_up = |num: f64, qa: f64, qb: f64| {
            if num >= 0.0 {
                rounding::div_up(num, rounding::sub_down(qb, qa))
            } else {
                rounding::div_up(num, rounding::sub_up(qb, qa))
            }
        };
        let slope_down = |num: f64, qa: f64, qb: f64| {
            if num >= 0.0 {
                rounding::div_down(num, rounding::sub_up(qb, qa))
            } else {
                rounding::div_down(num, rounding::sub_down(qb, qa))
            }
        };
        // Indices 0 … n (n = the terminal).
        self.s_left = (0..=n)
            .map(|j| {
                if j == 0 {
                    return f64::INFINITY;
                }
                let (a, b) = (self.point(j - 1), self.point(j));
                slope_up(rounding::sub_up(b.hi, a.lo), a.q, b.q)
            })
            .collect();
        self.s_right = (0..=n)
            .map(|j| {
                if j >= n {
                    return f64::NEG_INFINITY;
                }
                let (a, b) = (self.point(j), self.point(j + 1));
                slope_down(rounding::sub_down(b.lo, a.hi), a.q, b.q)
            })
            .collect();
        if n == 0 {
            // Feasible on the anti-diagonal at the first sample: only p ≤ 1 is known below it.
            self.head = [(0.0, 1.0), (0.0, 1.0)];
            self.cells = Vec::new();
            return;
        }
        let s0 = self.samples[0];
        // On [0, q₀]: below the left-extended secant R (any slope sign: R(0) if it rises, else
        // u ≤ u(q₀) by monotonicity — when hi bounds u — or p ≤ 1).
        let r0 = if self.s_right[0] >= 0.0 {
            rounding::sub_up(s0.hi, rounding::mul_down(self.s_right[0], s0.q)).max(0.0)
        } else if s0.hi_ok {
            s0.hi
        } else {
            1.0
        };
        self.head = [(0.0, r0), (s0.q, s0.hi)];
        self.cells = (0..n).map(|j| self.cell(j)).collect();
    }

    /// The candidates of [qⱼ, qⱼ₊₁] (the module docs' crossing argument).
    fn cell(&self, j: usize) -> [Candidate; 3] {
        let n = self.samples.len();
        let (a, b) = (self.point(j), self.point(j + 1));
        let ends = [(a.q, a.hi), (b.q, b.hi)];
        let last = j + 1 == n;
        // Without the left secant: monotone below the anti-diagonal (u ≤ u(qⱼ₊₁)), and p ≤ 1 − q
        // in the last interval.
        let fallback = if last || !b.hi_ok {
            (a.q, rounding::sub_up(1.0, a.q))
        } else {
            (a.q, b.hi)
        };
        let sl = self.s_left[j];
        if j == 0 || !sl.is_finite() || sl < 0.0 {
            return [ends[0], ends[1], fallback];
        }
        // R: through (qⱼ₊₁, hi) with slope sr, or the line p = 1 − q in the last interval
        // (slope −1 through (qⱼ₊₁, 1 − qⱼ₊₁), written from qⱼ: 1 − qⱼ − t).
        let (sr, r_at_a) = if last {
            (
                -1.0,
                (rounding::sub_down(1.0, a.q), rounding::sub_up(1.0, a.q)),
            )
        } else {
            let sr = self.s_right[j + 1];
            if !sr.is_finite() {
                return [ends[0], ends[1], fallback];
            }
            // R(qⱼ) = hi_{j+1} − sr·(qⱼ₊₁ − qⱼ), bracketed.
            let (dlo, dhi) = (rounding::sub_down(b.q, a.q), rounding::sub_up(b.q, a.q));
            let (m_lo, m_hi) = if sr >= 0.0 {
                (rounding::mul_down(sr, dlo), rounding::mul_up(sr, dhi))
            } else {
                (rounding::mul_down(sr, dhi), rounding::mul_up(sr, dlo))
            };
            (
                sr,
                (rounding::sub_down(b.hi, m_hi), rounding::sub_up(b.hi, m_lo)),
            )
        };
        // Crossing at t from qⱼ: a.hi + sl·t = R(qⱼ) + sr·t  ⇒  t = (R(qⱼ) − a.hi)/(sl − sr).
        let d_lo = rounding::sub_down(sl, sr);
        let d_hi = rounding::sub_up(sl, sr);
        if d_lo <= 0.0 {
            return [ends[0], ends[1], fallback];
        }
        let n_hi = rounding::sub_up(r_at_a.1, a.hi);
        let n_lo = rounding::sub_down(r_at_a.0, a.hi);
        if n_hi <= 0.0 {
            // Crossing at or left of qⱼ: R is the smaller on the whole interval, a line, so its
            // ends (both candidates already) decide.
            return [ends[0], ends[1], ends[0]];
        }
        let width = rounding::sub_up(b.q, a.q);
        let t_hi = rounding::div_up(n_hi, d_lo).min(width);
        let t_lo = if n_lo <= 0.0 {
            0.0
        } else {
            rounding::div_down(n_lo, d_hi).min(t_hi)
        };
        // g = min(L, R) at the crossing is R there: at most R's value at the interval's right
        // end when R rises (hi there), at most 1 − qⱼ on the line p = 1 − q; else uncapped.
        let cap = if last {
            rounding::sub_up(1.0, a.q)
        } else if sr >= 0.0 {
            b.hi
        } else {
            f64::INFINITY
        };
        let pc = rounding::add_up(a.hi, rounding::mul_up(sl, t_hi)).min(cap);
        let qc = rounding::add_down(a.q, t_lo);
        [ends[0], ends[1], (qc, pc)]
    }

    /// An upper bound on sup_F p − e^ε q for ε ≥ 0, rounded up, in [0, 1].
    pub fn delta(&self, eps: f64) -> f64 {
        let eps = eps.max(0.0);
        // e^ε rounded down stays finite (past ε ≈ 709.78 it would be +∞, and 0·∞ a NaN that
        // `max` drops): f64::MAX is still a lower bound on it.
        let y_lo = rounding::exp_down(eps).min(f64::MAX);
        let y_hi = rounding::exp_up(eps);
        let value = |c: Candidate| {
            if c.0 == 0.0 {
                return c.1;
            }
            let v = rounding::sub_up(c.1, rounding::mul_down(y_lo, c.0));
            if v.is_nan() {
                f64::INFINITY
            } else {
                v
            }
        };
        let n = self.samples.len();
        // The terminal bounds everything at q ≥ its q (module docs).
        let mut best = value((self.terminal.q, self.terminal.hi));
        if n == 0 {
            best = best.max(value(self.head[0]));
            return best.clamp(0.0, 1.0);
        }
        // m: an index whose left-secant slope is ≤ y (nothing right of it beats it).
        let m = {
            let i = self.s_left.partition_point(|&s| s > y_lo);
            if i <= n && self.s_left[i] <= y_lo {
                i
            } else {
                n
            }
        };
        // m′: an index whose right-secant slope is ≥ y (nothing left of it beats it).
        let m2 = {
            let i = self.s_right[..n].partition_point(|&s| s >= y_hi);
            if i > 0 && self.s_right[i - 1] >= y_hi {
                Some(i - 1)
            } else {
                None
            }
        };
        if m < n {
            best = best.max(value((self.samples[m].q, self.samples[m].hi)));
        }
        let from = match m2 {
            Some(j) => {
                best = best.max(value((self.samples[j].q, self.samples[j].hi)));
                j
            }
            None => {
                best = best.max(value(self.head[0])).max(value(self.head[1]));
                0
            }
        };
        for cell in self.cells.iter().take(m).skip(from) {
            for &c in cell {
                best = best.max(value(c));
            }
        }
        best.clamp(0.0, 1.0)
    }

    /// The largest μ-free figure it implies at ε = +∞: its floor, the value at q = 0.
    pub fn floor(&self) -> f64 {
        self.head[0].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One order λ = 2: D₂(Bern(p)‖Bern(q)) = ln(1 + (p − q)²/(q(1 − q))), so at ε = 0 the worst
    /// case is sup (p − q) subject to (p − q)² ≤ (e^τ − 1)·min(q(1 − q), p(1 − p)), attained at
    /// p + q = 1: (2d)² ≤ (e^τ − 1)(1 − 4d²)... i.e. p − q = d with d² = c(1/4 − d²/4)·… solved
    /// exactly below; the bound must be at or above it and within the sampling error.
    #[test]
    fn chi_square_total_variation() {
        for tau in [1e-6, 1e-3, 0.1, 1.0] {
            let b = BinaryBound::rdp(&[2.0], &[tau]);
            // Symmetric point p = ½ + d/2, q = ½ − d/2: χ² = d²/(¼ − d²/4)·… = 4d²/(1 − d²).
            let c: f64 = tau.exp_m1();
            let d = (c / (4.0 + c)).sqrt();
            let got = b.delta(0.0);
            assert!(got >= d, "τ={tau}: {got} < {d}");
            assert!(got <= d * (1.0 + 1e-3), "τ={tau}: {got} vs {d}");
        }
    }

    /// Past ε ≈ 709.78 e^ε overflows; the bound must not fall to 0 there (found in review: it
    /// did). D₂ ≤ 1000 both ways admits (p, q) = (1 − e^{−700}, e^{−720}) (forward ≈ 720, reverse
    /// ≈ 700), so δ(ε) ≥ 1 − e^{−700} − e^{ε−720} ≈ 1 for ε ≤ 710; ρ = 1000 admits the Gaussian
    /// with μ = √2000, whose δ(709.8) is ≈ 1 − 4e-11.
    #[test]
    fn huge_losses_keep_their_bound() {
        let b = BinaryBound::rdp(&[2.0], &[1000.0]);
        for eps in [709.0, 709.7, 709.8, 710.0] {
            assert!(b.delta(eps) >= 0.9999, "ε={eps}: {}", b.delta(eps));
        }
        let z = BinaryBound::zcdp(1000.0, 0.0);
        for eps in [709.7, 709.8, 750.0] {
            let g = crate::accountant::gdp::delta_for_epsilon_lower(2000f64.sqrt(), eps);
            assert!(z.delta(eps) >= g, "ε={eps}: {} < {g}", z.delta(eps));
        }
    }

    /// (ξ, ρ)-zCDP: the bound is never below an explicit mechanism that meets the statement, the
    /// Gaussian with μ² = 2ρ run beside ξ-randomised response (Rényi divergences of independent
    /// releases add: λρ + at most ξ). The oracle's profile is the exact two-atom mixture of
    /// Gaussian profiles, δ(ε) = Σ_b p_b·δ_G(ε − l_b), with statrs's Φ (not ours).
    #[test]
    fn xi_zcdp_is_never_below_a_mechanism_that_meets_it() {
        use statrs::distribution::{ContinuousCDF, Normal};
        let phi = |x: f64| Normal::new(0.0, 1.0).unwrap().cdf(x);
        for (rho, xi) in [(0.01, 0.1), (0.5, 0.05), (0.125, 1.0), (2.0, 0.3)] {
            let b = BinaryBound::zcdp(rho, xi);
            let plain = BinaryBound::zcdp(rho, 0.0);
            let mu = (2.0f64 * rho).sqrt();
            let gauss = |e: f64| phi(-e / mu + mu / 2.0) - e.exp() * phi(-e / mu - mu / 2.0);
            let p_up = xi.exp() / (1.0 + xi.exp());
            for eps in [0.0, 0.1, 0.5, 1.0, 2.0, 4.0] {
                let oracle = p_up * gauss(eps - xi) + (1.0 - p_up) * gauss(eps + xi);
                let got = b.delta(eps);
                // ORACLE_TOL: statrs's Φ and the oracle's four products, ≈ 1e-15 absolute.
                assert!(
                    got >= oracle - 1e-13,
                    "ρ={rho} ξ={xi} ε={eps}: {got} < {oracle}"
                );
                assert!(
                    got >= plain.delta(eps),
                    "ρ={rho} ξ={xi} ε={eps}: below ξ = 0"
                );
            }
        }
        // ρ = 0: ξ-DP in the limit of orders; ξ-randomised response meets it.
        let b = BinaryBound::zcdp(0.0, 0.5);
        for eps in [0.0f64, 0.2, 0.4] {
            let rr = (0.5f64.exp() - eps.exp()) / (1.0 + 0.5f64.exp());
            assert!(
                b.delta(eps) >= rr - 1e-15,
                "ε={eps}: {} < {rr}",
                b.delta(eps)
            );
        }
    }

    /// The bound is never below a mechanism that meets the statement: the Gaussian with
    /// μ² = 2ρ is exactly ρ-zCDP.
    #[test]
    fn never_below_the_gaussian_that_meets_zcdp() {
        for rho in [1e-4, 0.01, 0.5, 2.0] {
            let b = BinaryBound::zcdp(rho, 0.0);
            let mu = (2.0 * rho).sqrt();
            for eps in [0.0, 0.1, 0.5, 1.0, 3.0, 8.0, 20.0] {
                let g = crate::accountant::gdp::delta_for_epsilon_lower(mu, eps);
                let got = b.delta(eps);
                assert!(got >= g, "ρ={rho} ε={eps}: {got} < {g}");
                // Finitely many orders (ratio 1.01) can cost a little against the classical
                // conversion at its own optimal order; the profile used is the smaller of both.
                // (Below 1e-20 the samples are coarse and the min is the classical one's.)
                let cks = crate::accountant::zcdp::delta_for_epsilon(rho, eps);
                if cks >= 1e-20 {
                    assert!(
                        got <= cks * 1.005 + 1e-300,
                        "ρ={rho} ε={eps}: {got} > CKS {cks}"
                    );
                }
            }
        }
    }
}
