//! Connect-the-dots discretisation (Doroshenko, Ghazi, Kamath, Kumar & Manurangsi, "Connect the
//! Dots: Tighter Discrete Approximations of Privacy Loss Distributions", PETS 2022,
//! arXiv:2207.04380).
//!
//! Given the exact privacy profile δ(ε) = H_{e^ε}(P‖Q) of one ordering of a neighbouring pair, the
//! connect-the-dots PMF on the grid εᵢ = i·h is the one whose profile *equals* δ at every grid point
//! and is linear in e^ε between them. A profile is convex in e^ε, so the chords lie above it: the PMF
//! is pessimistic everywhere, and it is the tightest pessimistic PMF on that grid (Doroshenko et al.
//! Thm. 4.3). In terms of the masses Aᵢ at losses ≥ εᵢ:
//! ```text
//! Aᵢ = (δ(εᵢ₋₁) − e^{−h} δ(εᵢ)) / (1 − e^{−h}),   mᵢ = Aᵢ − Aᵢ₊₁,   p∞ = δ(ε_top)
//! ```
//! (each unit of mass at loss L ∈ (εᵢ₋₁, εᵢ) is split between the two grid points with weights
//! (1 − e^{εᵢ₋₁−L})/(1 − e^{−h}) and the rest).
//!
//! # Soundness
//! - δ values are made non-increasing by raising earlier ones (never lowering later ones);
//! - the Aᵢ are clamped to [p∞, 1] and made non-increasing by raising, which moves mass up. The
//!   profile's finite part at any ε is Σ_{k>j} Aₖ·cₖ plus a term in p∞, with cₖ ≥ 0 and Σ cₖ ≤ 1
//!   (summation by parts, the weights 1 − e^{ε−εₖ} increasing in k), so raising the Aₖ by rₖ raises
//!   the profile by at most max rₖ, everywhere. That maximum is added to `moved_up`, which the lower
//!   bound subtracts. It matters: the input δ is an *upper* bound, rounded up by a relative error,
//!   so it is not exactly convex in e^ε, and a flat run ending in a small drop — typically at the top
//!   of a profile that is mostly mass at +∞ — yields Aᵢ below their successor by about
//!   rel·δ/(1 − e^{−h}): mass the truth does not have, moved up to the top grid point;
//! - the mass below the grid, 1 − A_lo, is put on the lowest grid point (moved up);
//! - δ at the top grid point becomes mass at +∞ (beyond it δ can only be smaller);
//! - rounding in forming Aᵢ changes the reconstructed profile by at most 16U/(1 − e^{−h}) relative,
//!   which is recorded in `rel_err` and widens every query.

use super::pmf::{Pmf, MAX_GRID_POINTS};
use super::PldError;
use crate::accountant::rounding::{self, U};

/// The relative change of the reconstructed profile from rounding in forming the Aᵢ, times
/// 1 − e^{−h}: 16U (module notes). Each Aᵢ = (dᵢ − e^{−h}dᵢ₊₁)/(1 − e^{−h}) takes e^{−h}, a
/// product, a difference and a quotient, the denominator expm1's; 16U of the profile over 1 −
/// e^{−h} is the allowance the notes state, not a term-by-term count.
const A_FORM_REL: f64 = 16.0 * U;

/// The slack of the convexifying chord (see [`convexify`]), relative to the larger end: the
/// weight's ≲ 9U (exp and two expm1 within an ulp each, their arguments', the product's and the
/// quotient's roundings) plus ≤ 4U for 1 − t, the two products and the sum: 13U, 16U allowed.
const CHORD_SLACK_REL: f64 = 16.0 * U;

/// The margin of the chain's slopes and rises per unit of 4 + |ε_t|/h (note 2 of
/// [`discretise_lower`]): 8U. Positions are those of exact grid points and the readings at rounded
/// ones, within U·|ε| of them; the rest is an allowance for the few roundings of each slope.
const CHAIN_MARGIN_REL: f64 = 8.0 * U;

/// Readings of a profile bound at consecutive grid points: `values[i]` at the loss
/// (`first` + i)·h (formed as that one product).
pub(crate) struct GridReadings {
    pub(crate) first: i64,
    pub(crate) values: Vec<f64>,
}

impl GridReadings {
    /// The reading at grid index `i`, if held.
    fn at(&self, i: i64) -> Option<f64> {
        usize::try_from(i - self.first)
            .ok()
            .and_then(|j| self.values.get(j).copied())
    }
}

/// How [`discretise_lower`] reads the profile: at `refine` points per grid interval (1 or 2; fewer
/// when the grid is long), with the upper bound's values at grid points taken from `known_upper`
/// where it holds them.
#[derive(Clone, Copy)]
pub(crate) struct ReadPlan<'a> {
    pub(crate) refine: usize,
    pub(crate) known_upper: Option<&'a GridReadings>,
}

/// Builds the connect-the-dots PMF of a profile over the loss range [eps_lo, eps_hi].
///
/// `delta` must be an upper bound on the profile for every real ε (ε < 0 included), with relative
/// error at most `rel_in`; `inf_true` is the mechanism's own mass at +∞ (the rest of δ(eps_hi) is
/// recorded as truncated). `top_delta` is `Some(δ beyond eps_hi)` when eps_hi is the largest finite
/// loss: the mass at +∞, own and moved there by truncation, used instead of the (rounded) profile.
/// Also returned: what it read of `delta` (clamped to [0, 1], before any repair) at grid indices
/// i_lo − 1 … i_hi, which [`discretise_lower`] on the same range need not read again.
pub(crate) fn discretise(
    h: f64,
    eps_lo: f64,
    eps_hi: f64,
    delta: impl Fn(f64) -> f64 + Sync,
    rel_in: f64,
    inf_true: f64,
    top_delta: Option<f64>,
) -> Result<(Pmf, GridReadings), PldError> {
    let (i_lo, n) = grid_range(h, eps_lo, eps_hi, 0)?;
    crate::accountant::work::check()?;
    // δ at grid indices i_lo − 1 … i_hi.
    let mut d = vec![0.0; n + 1];
    evaluate(&mut d, |k| {
        delta((i_lo - 1 + k as i64) as f64 * h).clamp(0.0, 1.0)
    });
    crate::accountant::work::check()?;
    let readings = GridReadings {
        first: i_lo - 1,
        values: d.clone(),
    };
    if let Some(top) = top_delta {
        // eps_hi is the largest loss: beyond it δ is exactly the mass at +∞ (the rounding of the
        // profile function would only add noise there).
        d[n] = top.clamp(0.0, 1.0);
    }
    for k in (0..n).rev() {
        if d[k] < d[k + 1] {
            d[k] = d[k + 1];
        }
    }
    crate::accountant::work::check()?;
    convexify(&mut d, h, true);
    let top = d[n];
    let e_mh = (-h).exp();
    let denom = -(-h).exp_m1();
    // A[k] for grid point k (index i_lo + k), k = 0 … n−1; A[n] = top.
    let mut a = vec![top; n + 1];
    // Largest raise of an Aᵢ above its computed value (see the module's soundness notes).
    let mut raised = 0.0_f64;
    for k in (0..n).rev() {
        let v = (d[k] - e_mh * d[k + 1]) / denom;
        a[k] = v.clamp(top, 1.0).max(a[k + 1]);
        raised = raised.max(a[k] - v);
    }
    let mut mass: Vec<f64> = (0..n).map(|k| a[k] - a[k + 1]).collect();
    let below = (1.0 - a[0]).max(0.0);
    mass[0] += below;
    let inf = inf_true.min(top);
    let mut pmf = Pmf {
        h,
        lo: i_lo,
        mass,
        inf,
        inf_trunc: rounding::sub_up(top, inf),
        // The raise adds at most `raised` to the profile anywhere (rounded up: 2U for the
        // subtraction that formed it, U for the sum).
        moved_up: below + rounding::up(raised, rounding::ARITH4_REL),
        abs_err: 0.0,
        bin_err: Some(0.0),
        rel_err: rel_in + A_FORM_REL / denom,
        steps: 1,
    };
    pmf.trim_zeros();
    Ok((pmf, readings))
}

/// Lowers grid values of a profile bound to the lower convex hull of the points (e^{εₖ}, dₖ),
/// εₖ = ε₀ + k·h, where that is below them (chord values rounded up if `up`, else down; never
/// above dₖ).
///
/// # Soundness
/// The true profile γ ↦ H_γ(P‖Q) = sup_S P(S) − γQ(S) is convex in γ = e^ε, and it is at most dₖ
/// at every grid point. Take any two kept points i < j: the chord between them is above the true
/// profile's greatest convex minorant of the points' values there, and that minorant is above the
/// true profile (the truth is convex and below every dₖ). So a value on such a chord, rounded up,
/// is still an upper bound on the truth, *whichever* points the floating-point hull test keeps:
/// its decisions only affect tightness. A bound that is a minimum of convex pieces (an `rdp`
/// event's points) has concave kinks; without this, connect-the-dots would raise its masses there.
///
/// For a *lower* bound (`up = false`: [`discretise_lower`]'s node values) the hull is below the
/// piecewise-linear function through the points, so values on it rounded down stay below whatever
/// that function is below.
fn convexify(d: &mut [f64], h: f64, up: bool) {
    let n = d.len();
    if n < 3 {
        return;
    }
    // Weight of point j at k on the chord (i, j), i < k < j: (γₖ − γᵢ)/(γⱼ − γᵢ), in a form that
    // neither overflows nor cancels.
    let w = |i: usize, k: usize, j: usize| -> f64 {
        let (a, b) = ((k - i) as f64 * h, (j - i) as f64 * h);
        (-((j - k) as f64 * h)).exp() * (-(-a).exp_m1()) / (-(-b).exp_m1())
    };
    let chord = |i: usize, k: usize, j: usize, d: &[f64]| -> f64 {
        let t = w(i, k, j).clamp(0.0, 1.0);
        (1.0 - t) * d[i] + t * d[j]
    };
    // Andrew's monotone chain, lower hull.
    let mut hull: Vec<usize> = Vec::with_capacity(n);
    for j in 0..n {
        while hull.len() >= 2 {
            let (i, m) = (hull[hull.len() - 2], hull[hull.len() - 1]);
            if d[m] >= chord(i, m, j, d) {
                hull.pop();
            } else {
                break;
            }
        }
        hull.push(j);
    }
    for pair in hull.windows(2) {
        let (i, j) = (pair[0], pair[1]);
        for k in i + 1..j {
            // The weight carries ≲ 9U relative (exp and two expm1 within an ulp each, their
            // arguments', the product's and the quotient's roundings), which moves the value by
            // ≲ 9U·|dⱼ − dᵢ|; 1 − t, the two products and the sum add ≤ 4U of the larger end:
            // 16U of it, plus the smallest normal for subnormal values, covers all.
            let slack = CHORD_SLACK_REL * d[i].abs().max(d[j].abs()) + f64::MIN_POSITIVE;
            let c = chord(i, k, j, d);
            d[k] = d[k].min(if up { c + slack } else { c - slack });
        }
    }
}

/// The grid indices covering [eps_lo, eps_hi] on step h, starting `below` points under the lowest
/// and spanning at least `below + 1` points: (first index, count). The count is checked against
/// [`MAX_GRID_POINTS`] before anything is allocated.
fn grid_range(h: f64, eps_lo: f64, eps_hi: f64, below: u32) -> Result<(i64, usize), PldError> {
    let i_lo = (eps_lo / h).floor() - f64::from(below);
    let i_hi = (eps_hi / h).ceil().max(i_lo + f64::from(below));
    let count = i_hi - i_lo + 1.0;
    if !count.is_finite() || count > MAX_GRID_POINTS as f64 || i_lo.abs() > 1e15 {
        return Err(PldError::TooLarge(format!(
            "the privacy loss spans [{eps_lo:.4e}, {eps_hi:.4e}], which needs {count:.3e} grid points \
             at grid_step {h:e} (limit {MAX_GRID_POINTS}); use a coarser grid_step"
        )));
    }
    Ok((i_lo as i64, count as usize))
}

/// Builds a *lower* PMF of a profile over the loss range [eps_lo, eps_hi]: one whose profile is at or
/// below the true profile δ at every real ε, so that composing such PMFs gives a lower bound on the
/// composition (see the module docs of [`super::query`] and the soundness notes below).
///
/// Its profile is a chain of supporting lines: from the line 1 − y at the bottom, each piece is the
/// steepest-rising line from the previous node that stays below δ over its own grid interval and
/// [`LOOK_AHEAD`] − 1 more (in y = e^ε). Where the profile is smooth at the grid's scale this keeps
/// P's mass and Q's mass (the profile's value and slope at y → 0), like connect-the-dots' split
/// keeps them on the upper side, so its error in a composition is second order — against the rest
/// of the composition's curvature — instead of a first-order loss per copy. (Chords lowered by a
/// bound on their rise, used until 2026-11-27, lost that: Q-mass +2e-6 per copy of a subsampled
/// Gaussian with q = 1e-3, and ε's lower end 5.9 % low after 10⁵ copies; 0.06 % with the chain.)
/// Where it is not — a kink (Laplace's atoms), or a wall of the loss less than a grid step from
/// the next grid point (a sampling rate q below about h) — no line through a node can be certified
/// to follow the profile's slope on the other side from point readings, and the losses there are
/// first order; see notes 2 and 3 for how the chain recovers.
///
/// `upper` and `lower` bound the true profile from above and below at every real ε; `inf_lower` is
/// a lower bound on the mechanism's own mass at +∞; `plan` says how finely to read, and which
/// values of `upper` at grid points are already known (read by [`discretise`] on the same range).
///
/// # Soundness
/// Write g(y) = δ(ln y) for y > 0, the profile against y = e^ε: g is convex and non-increasing, g(0⁺)
/// = 1 (the whole of P's mass), and g(y) ≥ 1 − y (as g(y) = E_P(1 − y·Q/P)₊ ≥ 1 − y·E_P[Q/P] ≥ 1 − y).
/// A PMF on the grid ε_j = j·h (plus mass at +∞) has a profile that is linear in y between grid
/// points; conversely values at the nodes y = 0, y_j that are convex and non-increasing in y are the
/// profile of such a PMF, whose masses follow from [`discretise`]'s formula for Aᵢ.
///
/// 1. *Lines below g on a fine interval.* The profile is read at r points per grid interval. On a
///    fine interval [a, b], g lies above T_a, the line through (a, lower(a)) whose slope is the
///    chord's over [a⁻, a] (the previous fine point; the chord's slope is at most g′(a⁻) ≤ g′(a⁺),
///    formed from `lower` at a and `upper` at a⁻, rounded down), for y ≥ a; and above T_b, through
///    (b, lower(b)) with the chord's slope over [b, b⁺] (at least g′(b⁺) ≥ g′(b⁻), rounded up), for
///    y ≤ b. A line that is below lower(a) at a, below lower(b) at b, and below min(T_a, T_b) at one
///    point m of [a, b] is below T_a on [a, m] and below T_b on [m, b] (all linear), so below g on
///    [a, b]. m is taken near the crossing of T_a and T_b, where the condition is least restrictive;
///    any m is sound.
/// 2. *The chain.* Node 0 (y = 0) has the value 1 and node 1 the value of 1 − y, or lower(node 1)
///    if smaller: that chord is below 1 − y ≤ g. From node t the next node's value is the smallest
///    of v_t + (M − v_t)/x over the constraints (x, M) of note 1 on the fine intervals of the next
///    [`LOOK_AHEAD`] grid intervals (x > 0 the constraint's position in units of the grid
///    interval): then the chord from node t to node t + 1, evaluated at each constraint inside its
///    own interval, is at most M, so by note 1 it is below g on the whole interval. Each M − v_t is
///    formed as a difference from v_t, every operation rounded toward a lower value, and slopes and
///    rises carry a margin of 8U·(4 + |ε_t|/h), each candidate value an allowance of that factor
///    times the profile's drop over the neighbouring intervals (positions are those of exact grid
///    points, the readings at rounded ones, within U·|ε| of them). Where the chain would lose more than half the
///    profile's value at node t + 1 ([`REANCHOR_LOSS`]), node t may be lowered to the value of the
///    lowered chords of [`LoweredChords`] and node t + 1 then takes the larger of theirs and the
///    chain's from there, when that keeps more: both chords are below g (theirs by their own
///    proof, since a lower start only lowers a chord).
/// 3. *Validity.* The top node is at most 0 relative to `inf_lower` (beyond it the profile is the
///    constant `inf_lower` ≤ δ(∞)); lowering a node only lowers the two chords that meet there. The
///    chain need not be convex (its readings are not: after a kink it leaves along the steeper side
///    and catches up): the node values are lowered to their lower convex hull ([`convexify`], chords
///    rounded down; the hull is below the piecewise-linear function through the values). A
///    negative node value is raised to 0 together with lowering its neighbours to 0 (every chord
///    that touches a raised node is then 0 ≤ g − inf_lower); a running minimum then makes the values
///    non-increasing (lowering only). What convexity the rounding leaves broken is restored on the
///    Aᵢ (masses at or above each grid point) by a running minimum — lowering only: the profile is
///    a combination of the Aᵢ with non-negative weights at every ε (summation by parts, as in
///    [`discretise`]). A NaN reading (none of the sources gives one) is replaced by the weakest
///    bound before anything else: 0 for `lower`, 1 for `upper`.
/// 4. What cannot be placed is dropped: 1 − (total kept) is left out (a sub-probability PMF; dropped
///    mass only lowers δ). Rounding in forming the Aᵢ is bounded relatively by 16U/(1 − e^{−h}) as
///    in [`discretise`] (`rel_err`, subtracted by every lower query).
pub(crate) fn discretise_lower(
    h: f64,
    eps_lo: f64,
    eps_hi: f64,
    upper: impl Fn(f64) -> f64 + Sync,
    lower: impl Fn(f64) -> f64 + Sync,
    inf_lower: f64,
    plan: ReadPlan<'_>,
) -> Result<Pmf, PldError> {
    let ReadPlan {
        refine,
        known_upper,
    } = plan;
    let (i_lo, k) = grid_range(h, eps_lo, eps_hi, 1)?;
    crate::accountant::work::check()?;
    // The profile is read on a grid r times finer than the PMF's: node t of the PMF is fine point
    // t·r. Nodes t = 1 … k are the grid points i_lo … i_hi; t = 0 and t = k + 1 are neighbours
    // used only for the slopes of note 1.
    let r = refine.max(1).min((MAX_GRID_POINTS / 2 / k).max(1));
    let fine = (k + 1) * r + 1;
    let hf = h / r as f64;
    // One rounding, so that node t is read at exactly the loss the PMF puts there, (i_lo + t − 1)·h
    // (r is 1 or 2, so h/r is exact and (n·r)·(h/r) rounds like n·h).
    debug_assert!(r <= 2);
    let at = |f: usize| ((i_lo - 1) * r as i64 + f as i64) as f64 * hf;
    let mut u = vec![0.0; fine];
    let mut l = vec![0.0; fine];
    // A NaN reading (none of the sources gives one) becomes the weakest bound: 1 above, 0 below.
    let unit_or = |x: f64, if_nan: f64| {
        if x.is_nan() {
            if_nan
        } else {
            x.clamp(0.0, 1.0)
        }
    };
    // `known_upper` holds values of `upper` at grid points, read at the same losses (node t is grid
    // index i_lo − 1 + t): those are not read again.
    evaluate(&mut u, |f| {
        let known = (f % r == 0)
            .then(|| known_upper.and_then(|g| g.at(i_lo - 1 + (f / r) as i64)))
            .flatten();
        unit_or(known.unwrap_or_else(|| upper(at(f))), 1.0)
    });
    crate::accountant::work::check()?;
    evaluate(&mut l, |f| unit_or(lower(at(f)), 0.0));
    crate::accountant::work::check()?;
    let inf_lower = inf_lower.clamp(0.0, 1.0);
    let readings = Readings {
        h,
        i_lo,
        k,
        r,
        u: &u,
        l: &l,
        inf_lower,
    };
    let v = supporting_chain(&readings);
    crate::accountant::work::check()?;
    Ok(lower_pmf_of_nodes(h, i_lo, k, v, inf_lower))
}

/// What [`discretise_lower`] read: the profile's bounds `u`, `l` at the fine points ((i_lo − 1)·r +
/// f)·h/r, f = 0 … (k + 1)·r (fine point t·r is node t, the grid point i_lo + t − 1), for k nodes on
/// grid step h, and the +∞ mass `inf_lower` the node values are relative to.
#[derive(Clone, Copy)]
struct Readings<'a> {
    h: f64,
    i_lo: i64,
    k: usize,
    r: usize,
    u: &'a [f64],
    l: &'a [f64],
    inf_lower: f64,
}

/// How many grid intervals each piece of [`discretise_lower`]'s chain stays below the profile
/// over (its own, and LOOK_AHEAD − 1 more). Looking ahead makes the pieces supporting lines, so the
/// chain stays convex by itself; with the hull repair of note 3 one interval does nearly as well
/// (issue-14 benchmark: q = 1e-3, 10⁵ steps, ε 6.45e-4 wide instead of 6.24e-4; MNIST and CIFAR-10
/// unchanged) at half the work.
const LOOK_AHEAD: usize = 1;

/// The node values of [`discretise_lower`] (soundness notes 1 and 2), relative to `inf_lower`:
/// index 0 is the node y = 0, t = 1 … k the grid points; `u`, `l` the profile's bounds at the fine
/// points (fine point t·r is node t).
fn supporting_chain(readings: &Readings<'_>) -> Vec<f64> {
    let fallback = LoweredChords::new(*readings);
    let Readings {
        h,
        i_lo,
        k,
        r,
        u,
        l,
        inf_lower,
    } = *readings;
    let fine = u.len();
    let hf = h / r as f64;
    let rel = |x: f64| rounding::sub_down(x, inf_lower);
    // Position of fine point j (j ≥ −1) of a grid interval, in units of the interval:
    // x_j = (e^{j·h_f} − 1)/(e^h − 1), and the width of fine interval j, formed directly (a
    // difference of positions would cancel); each within a few U relative.
    let span = LOOK_AHEAD * r;
    let den = h.exp_m1();
    let xs: Vec<f64> = (-1..=span as i64 + 1)
        .map(|j| (j as f64 * hf).exp_m1() / den)
        .collect();
    let x = |j: i64| xs[(j + 1) as usize];
    let width = |j: i64| (j as f64 * hf).exp() * hf.exp_m1() / den;
    let widths: Vec<f64> = (-1..=span as i64).map(width).collect();
    let w = |j: i64| widths[(j + 1) as usize];
    let margin = CHAIN_MARGIN_REL;
    let mut v = vec![0.0; k + 1];
    v[0] = rel(1.0);
    // Node 1 on the line 1 − y (rounded down), or below lower(node 1).
    let line1 = rounding::down(-(i_lo as f64 * h).exp_m1(), margin);
    v[1] = rel(line1).min(rel(l[r]));
    // The chain's next node from value vt at node t (soundness note 2).
    let next_from = |t: usize, vt: f64| -> f64 {
        let f0 = t * r;
        // The positions below are those of exact grid points; the readings are at rounded ones
        // (each within U·|ε| of its point), a shift of up to about U·|ε|/h of an interval: the
        // margin of this piece's slopes and rises grows with it.
        let margin = margin * (4.0 + ((i_lo + t as i64 - 1) as f64).abs());
        // The same shift moves a reading by up to the profile's drop over an interval times it,
        // whatever the rise d: an absolute allowance, so that it holds where d is small too (after
        // a re-anchoring).
        let shift = margin * (u[f0.saturating_sub(r)] - l[f0 + r]).abs() + f64::MIN_POSITIVE;
        let mut next = f64::INFINITY;
        // The chord from node t that is `d` above v_t at position x: node t + 1 at v_t + d/x,
        // with d widened by 8U for x's own error (a few U) and every operation rounded down. `d`
        // is formed as a difference from v_t (never as a value minus v_t with an absolute margin
        // of the values, which divided by a small x would cost a steep slope).
        let mut through = |x: f64, d: f64| {
            let d = rounding::mul_down(d, if d < 0.0 { 1.0 + margin } else { 1.0 - margin });
            let c = rounding::add_down(vt, rounding::div_down(d, x)) - shift;
            next = if c.is_nan() { f64::NAN } else { next.min(c) };
        };
        // Fine intervals [f0 + j, f0 + j + 1], each needing its right neighbour for a slope.
        let last = span.min(fine - 2 - f0);
        for j in 0..last as i64 {
            let (a, b) = (f0 + j as usize, f0 + j as usize + 1);
            let (xa, xb) = (x(j), x(j + 1));
            // T_a's slope: the chord over [a − 1, a], rounded down; T_b's: over [b, b + 1], up.
            let sa = (l[a] - u[a - 1]) / w(j - 1);
            let sa = sa - margin * sa.abs();
            let sb = (u[b + 1] - l[b]) / w(j + 1);
            let sb = sb + margin * sb.abs();
            // T_a and T_b above v_t at a point m of [a, b] (near their crossing; any is sound),
            // each as (its anchor − v_t) + slope·(m − anchor), rounded down, less 4U of
            // |slope|·(m + anchor) for the positions' own errors.
            let (da, db) = (
                rounding::sub_down(rel(l[a]), vt),
                rounding::sub_down(rel(l[b]), vt),
            );
            let m = if sb > sa {
                ((db - da + sa * xa - sb * xb) / (sa - sb)).clamp(xa, xb)
            } else {
                0.5 * (xa + xb)
            };
            if m > 0.0 {
                let above = |d: f64, s: f64, anchor: f64| {
                    let lift = rounding::mul_down(s, m - anchor);
                    // m − anchor's rounding, U·(m + anchor), times |s|; 4U allowed.
                    rounding::add_down(d, lift) - rounding::ARITH4_REL * s.abs() * (m + anchor)
                };
                through(m, above(da, sa, xa).min(above(db, sb, xb)));
            }
            through(xb, db);
        }
        // Readings are never NaN (replaced above); a constraint-free window cannot occur either
        // (`last` ≥ r ≥ 1), but if it did the node would drop, never rise.
        if next.is_nan() || next == f64::INFINITY {
            f64::NEG_INFINITY
        } else {
            next
        }
    };
    for t in 1..k {
        let next = next_from(t, v[t]);
        // Re-anchoring: where the chain has painted itself into a corner (a piece forced along
        // 1 − y up to a wall of the loss less than a grid step away, the next node near 0 and
        // every later one with it, since the values only fall), node t is lowered to the lowered
        // chords' value O_t and node t + 1 takes the larger of the chain's value from there and
        // O_{t+1}, if that keeps more. The pair (O_t, O_{t+1}) is valid on its own (both lowered by
        // at least their chord's gap, which bounds the chord's rise on that interval alone), so is
        // any chord from a value at most O_t to O_{t+1}, and lowering node t only lowers the
        // chord that ends there. Tried only where the chain would lose more than REANCHOR_LOSS of
        // the profile's value at t + 1: its gaps elsewhere are second order, and re-anchoring
        // wherever O is higher would bring back O's first-order losses.
        let lt = rel(l[(t + 1) * r]);
        v[t + 1] = next;
        if lt - next > REANCHOR_LOSS * lt {
            let lowered = v[t].min(fallback.value(t));
            let alt = next_from(t, lowered).max(fallback.value(t + 1));
            if alt > next {
                (v[t], v[t + 1]) = (lowered, alt);
            }
        }
    }
    v[k] = v[k].min(0.0);
    // Where the certified constraints bent the chain the wrong way (after a kink of the profile,
    // the chain must leave along the kink's left slope and then catch up), its lower convex hull
    // replaces it: a local repair, where a running minimum of the masses-at-or-above would carry a
    // dip on to every later grid point (a Laplace profile's top atom lost a third of its mass so).
    convexify(&mut v[1..], h, false);
    v
}

/// The share of the profile's value at a node the chain must be about to lose before it
/// re-anchors on the lowered chords ([`supporting_chain`]).
const REANCHOR_LOSS: f64 = 0.5;

/// The node values of chords lowered by a certified bound on their rise (the lower discretisation
/// before the chain; [`supporting_chain`] falls back on them where it would leave the profile far
/// behind), relative to `inf_lower`, indexed like the chain's, computed only for the nodes asked
/// for (rarely any). Each node is lowered by the larger
/// bound of its two chords, so the chord between any two adjacent values is below g: on a grid
/// interval the rise of the chord over g is at most the rise measured at the interior fine points
/// (chord of upper node values minus the lower value) plus, on each fine interval, the worst case
/// allowed by convexity given the neighbouring fine chords' slopes, (width)·(s_R − s_L)/4, capped by
/// the drop g_j − g_{j+1}; the bottom chord from (0, 1) rises at most g(y₁) − (1 − y₁).
struct LoweredChords<'a> {
    readings: Readings<'a>,
    e_hf: f64,
    e_mhf: f64,
    /// Positions of the interior fine points of a grid interval, in units of the interval.
    w: Vec<f64>,
}

impl<'a> LoweredChords<'a> {
    fn new(readings: Readings<'a>) -> Self {
        let (h, r) = (readings.h, readings.r);
        let hf = h / r as f64;
        let den = h.exp_m1();
        LoweredChords {
            readings,
            e_hf: rounding::exp_up(hf),
            e_mhf: rounding::exp_down(-hf),
            w: (0..r).map(|j| (j as f64 * hf).exp_m1() / den).collect(),
        }
    }

    /// Triangle bound on the rise of the chord over g on fine interval [f, f + 1] (needs f ≥ 1).
    fn tri(&self, f: usize) -> f64 {
        let (u, l) = (self.readings.u, self.readings.l);
        let left = rounding::sub_up(u[f - 1], l[f]).max(0.0);
        let right = rounding::sub_down(l[f + 1], u[f + 2]).max(0.0);
        // ¼·(e^{hf}·left − e^{−hf}·right) may cancel, and a relative widening of a cancelled
        // difference does not bound the absolute errors U·(e^{hf}·left + e^{−hf}·right) of its
        // products (the cap below is no help: it is a bound only if t is one). So each operation
        // is rounded in the direction that raises t — the first product up, the second down (both
        // operands ≥ 0), the difference up, ×¼ up (exact but for underflow) — which makes t an
        // upper bound by itself; the 8U relative widening of before is kept on top (it can only
        // raise t, so no figure falls).
        let t = rounding::up(
            rounding::mul_up(
                0.25,
                rounding::sub_up(
                    rounding::mul_up(self.e_hf, left),
                    rounding::mul_down(self.e_mhf, right),
                ),
            ),
            rounding::ARITH8_REL,
        );
        t.min(rounding::sub_up(u[f], l[f + 1])).max(0.0)
    }

    /// Bound on the rise of the chord over g on [node t, node t + 1] (t = 0: the bottom chord).
    fn gap(&self, t: usize) -> f64 {
        let Readings {
            h, i_lo, r, u, l, ..
        } = self.readings;
        if t == 0 {
            // u[r] − (1 − e^{i_lo·h}) cancels, so its error is bounded absolutely. The exponent is
            // rounded up (the value increases with it; i_lo as f64 is exact), leaving expm1's own
            // error, ≤ 1 ulp ≤ 2U·|expm1| ≤ 2U (the chord's values are ≤ 1, so i_lo·h ≤ 0), which
            // the 4U absolute term covers (added rounding up); the sum's rounding, ≤ U of the
            // result, is inside the 8U relative. Before, the exponent was rounded to nearest: its
            // error U·|x|·e^x ≤ U/e absolute was inside the 4U as well (2.4U in all), so this only
            // removes a term; the absolute 4U was already adequate.
            let x = rounding::mul_up(i_lo as f64, h);
            let v = rounding::up(u[r] + x.exp_m1(), rounding::LIBM_CHAIN_REL).max(0.0);
            return rounding::add_up(v, rounding::ARITH4_REL);
        }
        let (f0, f1) = (t * r, (t + 1) * r);
        let mut measured = 0.0_f64;
        for (j, &wj) in self.w.iter().enumerate().skip(1) {
            let chord = (1.0 - wj) * u[f0] + wj * u[f1];
            // Absolute error of chord − l, with m = max(u[f0], u[f1]): 1 − w and its product (γ₂
            // of (1 − w)·u[f0]), the other product and the sum (≤ U·m each): 3U·m; the position
            // w = expm1(j·hf)/expm1(h) itself is off by ≤ 5U·w (two expm1 within an ulp each and
            // the quotient; j·hf is exact for r ≤ 2), which moves the chord by 5U·w·|u[f1] − u[f0]|
            // ≤ 2.5U·m (w ≤ ½); the difference U·|chord − l| ≤ U·m: 6.5U·m in all. The 4U·(u[f0] +
            // u[f1]) of before is only 4U·m when u[f1] ≪ u[f0] (4.6U·m even with the measured
            // 1.1U expm1): too small. 8U·(u[f0] + u[f1]) ≥ 8U·m.
            let rise = chord - l[f0 + j] + rounding::ARITH8_REL * (u[f0] + u[f1]);
            measured = measured.max(rise);
        }
        let worst = (f0..f1).map(|f| self.tri(f)).fold(0.0_f64, f64::max);
        (rounding::up(measured + worst, rounding::ARITH4_REL)).min(rounding::sub_up(u[f0], l[f1]))
    }

    /// The value of node t (1 ≤ t ≤ k), relative to `inf_lower`: lowered by the larger gap of its
    /// two chords, and at most 0 at the top node.
    fn value(&self, t: usize) -> f64 {
        let Readings {
            k, r, l, inf_lower, ..
        } = self.readings;
        let own = rounding::sub_down(l[t * r], inf_lower);
        if t == k {
            return rounding::sub_down(own, self.gap(k - 1)).min(0.0);
        }
        rounding::sub_down(own, self.gap(t - 1).max(self.gap(t)))
    }
}

/// The lower PMF whose profile has node values `v` (relative to `inf_lower`; soundness notes 3
/// and 4 of [`discretise_lower`]).
fn lower_pmf_of_nodes(h: f64, i_lo: i64, k: usize, mut v: Vec<f64>, inf_lower: f64) -> Pmf {
    // Negative values: raise to 0 and lower the neighbours to 0; then make the values
    // non-increasing by lowering.
    let negative: Vec<bool> = v.iter().map(|&x| x < 0.0).collect();
    for t in 0..=k {
        if negative[t] || (t > 0 && negative[t - 1]) || (t < k && negative[t + 1]) {
            v[t] = 0.0;
        }
    }
    for t in 1..=k {
        v[t] = v[t].min(v[t - 1]);
    }
    // A[t]: mass at or above node t (t = 1 … k), A[k + 1] = 0 (the mass at +∞ is kept apart).
    let denom = -(-h).exp_m1();
    let e_mh = (-h).exp();
    let mut a = vec![0.0; k + 2];
    a[1] = v[0];
    for t in 2..=k {
        a[t] = ((v[t - 1] - e_mh * v[t]) / denom).max(0.0);
    }
    for t in 2..=k {
        a[t] = a[t].min(a[t - 1]);
    }
    let mass: Vec<f64> = (1..=k).map(|t| a[t] - a[t + 1]).collect();
    let mut pmf = Pmf {
        h,
        lo: i_lo,
        mass,
        inf: inf_lower,
        inf_trunc: 0.0,
        moved_up: 0.0,
        abs_err: 0.0,
        bin_err: Some(0.0),
        rel_err: A_FORM_REL / denom,
        steps: 0,
    };
    pmf.trim_zeros();
    pmf
}

/// How many times finer than the PMF's grid [`discretise_lower`] reads the profile (reduced so that
/// the fine grid stays within [`MAX_GRID_POINTS`]): the supporting lines of note 1 are drawn over
/// fine intervals, so their distance below the profile shrinks like 1/r². See [`lower_refine`].
pub(crate) const REFINE: usize = 2;

/// A loss spread (standard deviation under P, in grid steps) from which the lower PMF reads the
/// profile at the grid points only: the supporting lines' distance below the profile is then far
/// below the composition's own error (it falls like the square of grid step over spread), and the
/// finer reading would double the profile evaluations (a Gaussian part of μ ≈ 1.8 spans 3·10⁵
/// grid points, each read with directed rounding).
const WIDE_SPREAD: f64 = 2000.0;

/// The reading resolution for the lower PMF of a mechanism whose upper PMFs are these:
/// [`REFINE`], or 1 when every ordering's loss spreads over at least [`WIDE_SPREAD`] grid steps.
pub(crate) fn lower_refine(pmfs: &[&Pmf]) -> usize {
    let spread = |p: &Pmf| {
        let (mut w, mut s1, mut s2) = (0.0, 0.0, 0.0);
        for (j, &m) in p.mass.iter().enumerate() {
            let (m, x) = (m.max(0.0), j as f64);
            w += m;
            s1 += m * x;
            s2 += m * x * x;
        }
        if w <= 0.0 {
            return 0.0;
        }
        let mean = s1 / w;
        (s2 / w - mean * mean).max(0.0).sqrt()
    };
    if pmfs.iter().all(|p| spread(p) >= WIDE_SPREAD) {
        1
    } else {
        REFINE
    }
}

/// The reading resolutions (remove, add) for the lower PMFs of a mechanism whose upper PMFs are
/// these ([`lower_refine`] over both), except that an ordering whose upper profile is nowhere above
/// the other's on ε ≥ 0 is read at the grid points only. The reported figures at ε ≥ 0 (ε(δ), δ(ε),
/// the symmetrised curve and μ) take the larger δ of the two orderings, so the dominated one's lower
/// bound is rarely the one read; it stays sound at any resolution and about as tight as the other
/// at resolution 1 (issue-14 benchmark at r = 1: ε within 2.3e-4 for MNIST). For a
/// Poisson-subsampled Gaussian the add ordering is the dominated one and the larger grid (its loss
/// reaches −max loss of the other), so this halves the lower discretisation's readings. A heuristic
/// for tightness and time only: compositions keep each ordering apart, and one whose components are
/// dominated in different orderings may read a coarser lower bound, never an unsound one.
pub(crate) fn lower_refines(rem: &Pmf, add: Option<&Pmf>) -> (usize, usize) {
    let Some(add) = add else {
        let r = lower_refine(&[rem]);
        return (r, r);
    };
    let r = lower_refine(&[rem, add]);
    if r == 1 {
        return (1, 1);
    }
    // δ of each upper PMF at up to 2049 points of [0, largest loss] (the same grid for both).
    let (p_rem, p_add) = (rem.profile(0.0), add.profile(0.0));
    let top = rem.max_loss().max(add.max_loss()).max(0.0);
    const SAMPLES: usize = 2048;
    let below =
        |a: &super::profile::AtomProfile, ia: f64, b: &super::profile::AtomProfile, ib: f64| {
            (0..=SAMPLES).all(|i| {
                let e = top * i as f64 / SAMPLES as f64;
                let (da, db) = (a.delta(e) + ia, b.delta(e) + ib);
                // A relative tolerance for the profiles' own round-off: where they agree (at ε = 0 both
                // are the total variation distance) either may read lower.
                da <= db * (1.0 + 1e-9) + 1e-300
            })
        };
    let (inf_rem, inf_add) = (rem.infinity_mass(), add.infinity_mass());
    if below(&p_add, inf_add, &p_rem, inf_rem) {
        (r, 1)
    } else if below(&p_rem, inf_rem, &p_add, inf_add) {
        (1, r)
    } else {
        (r, r)
    }
}

/// Grids at least this long have their δ values evaluated on several threads.
const PARALLEL_POINTS: usize = 1 << 15;

/// Fills `out[k] = f(k)`, on up to `available_parallelism` threads for long grids (each value is
/// independent of the others, so the result is the same as a sequential fill).
fn evaluate(out: &mut [f64], f: impl Fn(usize) -> f64 + Sync) {
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get().min(4));
    if out.len() < PARALLEL_POINTS || threads < 2 {
        out.iter_mut().enumerate().for_each(|(k, v)| *v = f(k));
        return;
    }
    let chunk = out.len().div_ceil(threads);
    std::thread::scope(|s| {
        for (c, part) in out.chunks_mut(chunk).enumerate() {
            let f = &f;
            s.spawn(crate::accountant::work::carried(move || {
                for (j, v) in part.iter_mut().enumerate() {
                    *v = f(c * chunk + j);
                }
            }));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accountant::gdp;

    /// Reading at the default resolution, nothing known in advance.
    const FRESH: ReadPlan<'static> = ReadPlan {
        refine: REFINE,
        known_upper: None,
    };

    #[test]
    fn gaussian_profile_is_reproduced_at_grid_points_and_dominated_between() {
        let mu = 1.0;
        let h = 1e-3;
        let prof = |e: f64| {
            if e >= 0.0 {
                gdp::delta_for_epsilon(mu, e)
            } else {
                -e.exp_m1() + e.exp() * gdp::delta_for_epsilon(mu, -e)
            }
        };
        let p = discretise(h, -10.0, 10.0, prof, 0.0, 0.0, None).unwrap().0;
        let total: f64 = p.mass.iter().sum::<f64>() + p.inf + p.inf_trunc;
        assert!((total - 1.0).abs() < 1e-12, "{total}");
        let atoms = p.profile(0.0);
        for &e in &[0.0, 0.5, 1.0, 2.0, 3.0] {
            let v = atoms.delta(e) + p.infinity_mass();
            assert!((v - prof(e)).abs() < 1e-12, "ε = {e}: {v} vs {}", prof(e));
        }
        for &e in &[0.0005, 0.7777, 1.2345, 2.0005] {
            let v = atoms.delta(e) + p.infinity_mass();
            assert!(v >= prof(e), "ε = {e}: CTD must dominate");
            assert!(v - prof(e) < 1e-6, "ε = {e}: {v} vs {}", prof(e));
        }
    }
    /// The lower PMF of a Gaussian profile, read at points on and between the grid, negative ε
    /// included: at or below the truth everywhere (with its own round-off allowance), and within
    /// the O(h²) chord gap of it.
    #[test]
    fn the_lower_pmf_stays_below_the_gaussian_profile_everywhere() {
        let (mu, h) = (1.0, 1e-3);
        let lo = |e: f64| gdp::delta_bounds(mu, e).0;
        let hi = |e: f64| gdp::delta_bounds(mu, e).1;
        let p = discretise_lower(h, -10.0, 10.0, hi, lo, 0.0, FRESH).unwrap();
        let total: f64 = p.mass.iter().sum();
        assert!(total <= 1.0 && total > 1.0 - 1e-9, "{total}");
        let atoms = p.profile(0.0);
        let mut worst = 0.0_f64;
        for k in -40_000..=40_000 {
            let e = k as f64 * 2.5e-4 + 1.234e-5;
            let v = atoms.delta(e) * (1.0 - p.rel_err);
            assert!(
                v <= lo(e),
                "ε = {e}: lower PMF {v:e} above the truth {:e}",
                lo(e)
            );
            worst = worst.max(lo(e) - v);
        }
        // The chord gap of G_1's profile at h = 1e-3 is ≈ 1e-7; the bound lowers by ≈ 1.25× that.
        assert!(worst < 1e-6, "{worst:e}");
    }

    /// The chain of supporting lines keeps P's and Q's total masses (the profile's value and slope
    /// at e^ε → 0), which is what keeps a long composition of lower PMFs tight, and stays below the
    /// truth: a Poisson-subsampled Gaussian (q = 1e-3, σ = 0.8) whose loss is piled against its
    /// lower end ln(1 − q), ten grid steps below 0. (Lowered chords added 2e-6 of Q-mass here.)
    #[test]
    fn the_lower_pmf_keeps_both_masses_of_a_narrow_subsampled_gaussian() {
        let (q, mu, h) = (1e-3, 1.0 / 0.8, 1e-4);
        // The remove ordering: P = (1 − q)N(0, 1) + qN(μ, 1) against Q = N(0, 1).
        let truth = |e: f64| {
            // δ(ε) = ∫ (p − e^ε q)₊: p/q = 1 − q + q·e^{μx − μ²/2} > e^ε ⇔ x > x*.
            let r = ((e.exp() - (1.0 - q)) / q).max(0.0);
            if r <= 0.0 {
                return -e.exp_m1();
            }
            let xs = (r.ln() + mu * mu / 2.0) / mu;
            let tail = |z: f64| 0.5 * statrs::function::erf::erfc(z / std::f64::consts::SQRT_2);
            (1.0 - q) * tail(xs) + q * tail(xs - mu) - e.exp() * tail(xs)
        };
        let lo = |e: f64| rounding::prob_down(truth(e), 1e-12);
        let hi = |e: f64| rounding::prob_up(truth(e), 1e-12);
        let p = discretise_lower(h, (1.0 - q).ln(), 2.0, hi, lo, 0.0, FRESH).unwrap();
        let masses: f64 = p.mass.iter().sum();
        let q_mass: f64 = (0..p.mass.len())
            .map(|j| p.mass[j] * (-((p.lo + j as i64) as f64 * h)).exp())
            .sum();
        assert!((masses - 1.0).abs() < 1e-9, "P-mass {masses}");
        assert!((q_mass - 1.0).abs() < 1e-9, "Q-mass {q_mass}");
        let atoms = p.profile(0.0);
        for k in -400..=20_000 {
            let e = k as f64 * 1e-4 / 3.0;
            let v = atoms.delta(e) * (1.0 - p.rel_err);
            assert!(v <= lo(e), "ε = {e}: {v:e} above the truth {:e}", lo(e));
        }
    }

    /// A Poisson-subsampled Gaussian's add ordering is below its remove ordering at every ε ≥ 0: its
    /// lower PMF is read at the grid points only; with the orderings swapped, the other way round.
    #[test]
    fn the_dominated_ordering_is_read_at_the_grid_only() {
        use crate::accountant::{json::JsonPath, pld::Pld, Event, NeighboringRelation};
        let ev = Event::from_json(&serde_json::json!({"type": "poisson_sampled",
            "sampling_rate": 0.01, "event": {"type": "gaussian", "noise_multiplier": 1.0}}))
        .unwrap();
        let rel = NeighboringRelation::AddOrRemoveOne;
        let p = Pld::from_event(&ev, rel, 1e-3, &JsonPath::root()).unwrap();
        let add = p.add.as_ref().unwrap();
        assert_eq!(lower_refines(&p.remove, Some(add)), (REFINE, 1));
        assert_eq!(lower_refines(add, Some(&p.remove)), (1, REFINE));
        // One ordering (a symmetric pair): the spread rule alone.
        assert_eq!(lower_refines(&p.remove, None), (REFINE, REFINE));
    }

    /// The lower discretisation reuses what the upper one read at the grid points: the same lower PMF,
    /// with the profile's upper bound read only at the points in between (and the two ends).
    #[test]
    fn the_lower_pmf_reuses_the_upper_readings_without_changing() {
        use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
        let (mu, h) = (1.5, 1e-3);
        let reads = AtomicUsize::new(0);
        let hi = |e: f64| {
            reads.fetch_add(1, Relaxed);
            gdp::delta_bounds(mu, e).1
        };
        let lo = |e: f64| gdp::delta_bounds(mu, e).0;
        let (up, readings) = discretise(h, -3.0, 3.0, hi, 0.0, 0.0, None).unwrap();
        assert!(up.mass.len() > 5000);
        for r in [1, REFINE] {
            reads.store(0, Relaxed);
            let plan = |known_upper| ReadPlan {
                refine: r,
                known_upper,
            };
            let fresh = discretise_lower(h, -3.0, 3.0, hi, lo, 0.0, plan(None)).unwrap();
            let all = reads.swap(0, Relaxed);
            let reused =
                discretise_lower(h, -3.0, 3.0, hi, lo, 0.0, plan(Some(&readings))).unwrap();
            let fewer = reads.load(Relaxed);
            assert_eq!(fresh.mass, reused.mass, "r = {r}");
            assert_eq!((fresh.lo, fresh.rel_err), (reused.lo, reused.rel_err));
            // Only the nodes beyond the upper grid's two ends are read again at r = 1; at r = 2
            // the points between grid points too.
            assert_eq!(
                fewer,
                if r == 1 {
                    2
                } else {
                    all - readings.values.len()
                },
                "r = {r}"
            );
        }
    }

    /// A NaN reading must weaken the bound, never drop a constraint: with `lower` NaN between two
    /// grid points (found by a second reader: `f64::min` ignores NaN, and the node at ε = 0.5 came
    /// out 2.6e-4 above the Gaussian profile), the lower PMF still stays below the truth.
    #[test]
    fn a_nan_reading_never_lifts_the_lower_pmf() {
        let (mu, h) = (1.0, 0.05);
        let lo = |e: f64| {
            if (e - 0.525).abs() < 1e-9 {
                f64::NAN
            } else {
                gdp::delta_bounds(mu, e).0
            }
        };
        let hi = |e: f64| gdp::delta_bounds(mu, e).1;
        let p = discretise_lower(h, -4.0, 4.0, hi, lo, 0.0, FRESH).unwrap();
        let atoms = p.profile(0.0);
        for k in -5000..=5000 {
            let e = k as f64 * 8e-4 + 1.1e-5;
            let truth = gdp::delta_bounds(mu, e).0;
            let v = atoms.delta(e) * (1.0 - p.rel_err);
            assert!(v <= truth, "ε = {e}: {v:e} above the truth {truth:e}");
        }
    }

    /// A Laplace profile has a kink at its largest loss ε₀; when ε₀ falls just below a grid point
    /// the last chord must be lowered to 0 (the top node too), or the lower PMF has mass above ε₀,
    /// where the truth has none (found by the random oracle suite: δ_lower 1.3e-4 against 0).
    #[test]
    fn the_lower_pmf_stays_below_a_kinked_profile() {
        for (eps0, h) in [(5.2217, 0.00686760025097899), (1.0, 0.003), (0.5, 1e-4)] {
            let truth = |e: f64| {
                if e >= eps0 {
                    0.0
                } else if e >= 0.0 {
                    -((e - eps0) / 2.0).exp_m1()
                } else {
                    // the symmetric pair's identity: 1 − e^ε + e^ε δ(−ε)
                    -e.exp_m1() + e.exp() * -((-e - eps0) / 2.0).exp_m1().clamp(-1.0, 0.0)
                }
            };
            let lo = |e: f64| rounding::prob_down(truth(e), 1e-14);
            let hi = |e: f64| rounding::prob_up(truth(e), 1e-14);
            let p = discretise_lower(h, -eps0, eps0, hi, lo, 0.0, FRESH).unwrap();
            let atoms = p.profile(0.0);
            for k in 0..=20_000 {
                let e = -eps0 - 0.01 + (2.0 * eps0 + 0.02) * k as f64 / 20_000.0;
                let v = atoms.delta(e) * (1.0 - p.rel_err);
                assert!(
                    v <= lo(e),
                    "ε0 = {eps0}, h = {h}, ε = {e}: {v:e} > {:e}",
                    lo(e)
                );
            }
            assert_eq!(atoms.delta(eps0), 0.0, "mass above the largest loss");
        }
    }

    /// A profile that is mostly mass at +∞, rounded up by a relative error (so not exactly convex
    /// in e^ε): the raises that make the Aᵢ non-increasing put mass the truth does not have at the
    /// top grid point, and `moved_up` must cover what they add to the profile, or lower bounds read
    /// off it are optimistic.
    #[test]
    fn raises_from_a_rounded_up_profile_are_excluded_from_the_lower_bound() {
        let (h, inf, rel) = (1e-4, 9e-5, 7e-11);
        // Truth: mass `inf` at +∞, nothing above ε = 0 otherwise; the input rounds it up.
        let up = |e: f64| if e < 0.0 { 1.0 } else { inf * (1.0 + rel) };
        let p = discretise(h, 0.0, 1.0, up, rel, inf, Some(inf)).unwrap().0;
        let atoms = p.profile(0.0);
        for k in 0..=10_000 {
            let e = k as f64 * 1e-4;
            let finite = atoms.delta(e);
            // The lower bound reads (finite + p∞)(1 − rel) − moved_up; the truth here is p∞.
            let lower = (finite + p.inf) * (1.0 - p.rel_err) - p.moved_up;
            assert!(
                lower <= inf,
                "ε = {e}: lower {lower:e} above the truth {inf:e}"
            );
        }
        // Before `convexify` the top grid point received spurious mass (δ(0.5) > p∞·rel); the
        // hull now bridges the flat run to the drop, so what is left is the chords' rounding.
        assert!(atoms.delta(0.5) < inf * rel, "{:e}", atoms.delta(0.5));
    }
}
