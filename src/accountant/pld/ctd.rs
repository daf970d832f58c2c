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

/// Builds the connect-the-dots PMF of a profile over the loss range [eps_lo, eps_hi].
///
/// `delta` must be an upper bound on the profile for every real ε (ε < 0 included), with relative
/// error at most `rel_in`; `inf_true` is the mechanism's own mass at +∞ (the rest of δ(eps_hi) is
/// recorded as truncated). `top_delta` is `Some(δ beyond eps_hi)` when eps_hi is the largest finite
/// loss: the mass at +∞, own and moved there by truncation, used instead of the (rounded) profile.
pub(crate) fn discretise(
    h: f64,
    eps_lo: f64,
    eps_hi: f64,
    delta: impl Fn(f64) -> f64 + Sync,
    rel_in: f64,
    inf_true: f64,
    top_delta: Option<f64>,
) -> Result<Pmf, PldError> {
    let i_lo = (eps_lo / h).floor();
    let i_hi = (eps_hi / h).ceil().max(i_lo);
    let count = i_hi - i_lo + 1.0;
    if !count.is_finite() || count > MAX_GRID_POINTS as f64 || i_lo.abs() > 1e15 {
        return Err(PldError::TooLarge(format!(
            "the privacy loss spans [{eps_lo:.4e}, {eps_hi:.4e}], which needs {count:.3e} grid points \
             at grid_step {h:e} (limit {MAX_GRID_POINTS}); use a coarser grid_step"
        )));
    }
    let (i_lo, n) = (i_lo as i64, count as usize);
    crate::accountant::work::check()?;
    // δ at grid indices i_lo − 1 … i_hi.
    let mut d = vec![0.0; n + 1];
    evaluate(&mut d, |k| {
        delta((i_lo - 1 + k as i64) as f64 * h).clamp(0.0, 1.0)
    });
    crate::accountant::work::check()?;
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
        inf_trunc: top - inf,
        // The raise adds at most `raised` to the profile anywhere (rounded up: 2U for the
        // subtraction that formed it, U for the sum).
        moved_up: below + rounding::up(raised, 4.0 * U),
        abs_err: 0.0,
        rel_err: rel_in + 16.0 * U / denom,
        steps: 1,
    };
    pmf.trim_zeros();
    Ok(pmf)
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
            s.spawn(move || {
                for (j, v) in part.iter_mut().enumerate() {
                    *v = f(c * chunk + j);
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accountant::gdp;

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
        let p = discretise(h, -10.0, 10.0, prof, 0.0, 0.0, None).unwrap();
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
    /// A profile that is mostly mass at +∞, rounded up by a relative error (so not exactly convex
    /// in e^ε): the raises that make the Aᵢ non-increasing put mass the truth does not have at the
    /// top grid point, and `moved_up` must cover what they add to the profile, or lower bounds read
    /// off it are optimistic.
    #[test]
    fn raises_from_a_rounded_up_profile_are_excluded_from_the_lower_bound() {
        let (h, inf, rel) = (1e-4, 9e-5, 7e-11);
        // Truth: mass `inf` at +∞, nothing above ε = 0 otherwise; the input rounds it up.
        let up = |e: f64| if e < 0.0 { 1.0 } else { inf * (1.0 + rel) };
        let p = discretise(h, 0.0, 1.0, up, rel, inf, Some(inf)).unwrap();
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
        // The defect was real: the top grid point did receive spurious mass.
        assert!(atoms.delta(0.5) > inf * rel, "{:e}", atoms.delta(0.5));
    }
}
