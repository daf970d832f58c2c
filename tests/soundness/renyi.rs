//! Issue 32: Rényi black boxes against the worst case over the mechanisms meeting their
//! statement, and the two ulp-level residues (lines through a vertex at ε ≳ 34; +∞ mass of a
//! subsampled box).
//!
//! Oracles, written from first principles:
//! - **one order λ = 2** (`rdp` with orders [2], τ): D₂(Bern(p)‖Bern(q)) = ln(1 + (p − q)²/(q(1 − q))),
//!   so with c = e^τ − 1 the feasible bits (p, q), p ≥ q, p + q ≤ 1, are exactly those with
//!   p ≤ u(q) = q + √(c·q(1 − q)) (the other direction, with p(1 − p) ≥ q(1 − q) there, is weaker).
//!   Every mechanism meeting the statement has δ(ε) ≤ sup_q u(q) − e^ε q and f(α) ≥ 1 − u(α), and
//!   the bit-output mechanisms attain both: the worst case in closed form (below);
//! - **Pinsker**: KL ≤ D_λ ≤ τ for every stated λ ≥ 1, so TV ≤ √(τ_min/2) bounds every δ(ε) of
//!   every such mechanism — a lower figure above it is optimistic about nothing, it is false;
//! - **the Gaussian** with μ² = 2ρ is exactly ρ-zCDP: an upper figure below its closed form is
//!   optimistic.

use crate::check::{assert_sound, report};
use privacy_ledger::accountant::gdp;
use serde_json::json;

/// The oracle's own round-off (a few ulps of f64 closed forms, far inside this).
const ORACLE_REL: f64 = 1e-9;

/// The worst δ(ε) over mechanisms meeting D₂ ≤ τ both ways. With y = e^ε: for y ≥ 1 + c/2 the
/// stationary point of u(q) − yq, where s = q(1 − q) = c/(4c + 4(y − 1)²); below it the optimum
/// is where u meets p = 1 − q, at s = 1/(c + 4), value 1 − (1 + y)q.
fn chi2_delta(tau: f64, eps: f64) -> f64 {
    let c = tau.exp_m1();
    let y = eps.exp();
    let q_of = |s: f64| 2.0 * s / (1.0 + (1.0 - 4.0 * s).sqrt());
    if y >= 1.0 + c / 2.0 {
        let s = c / (4.0 * c + 4.0 * (y - 1.0) * (y - 1.0));
        let q = q_of(s);
        (c * s).sqrt() - (y - 1.0) * q
    } else {
        let q = q_of(1.0 / (c + 4.0));
        1.0 - (1.0 + y) * q
    }
}

/// The worst f(α) for α on the near side of the curve's vertex (u(α) + α ≤ 1): 1 − u(α).
fn chi2_beta(tau: f64, alpha: f64) -> f64 {
    let c = tau.exp_m1();
    1.0 - alpha - (c * alpha * (1.0 - alpha)).sqrt()
}

/// Class Z, the issue's example and other values: every figure of a one-order Rényi box against
/// the closed-form worst case, both ways; the upper figures within 0.3 % of it (the binary-test
/// bound's sampling and the grid), where the classical conversion was 500× off (δ(0) 0.25 against
/// 5.0e-4 at τ = 1e-6).
#[test]
fn a_one_order_renyi_box_is_bracketed_by_its_exact_worst_case() {
    for tau in [1e-6, 1e-3, 0.05, 0.5] {
        let epsilons = [0.0, 0.01, 0.1, 0.5, 1.0];
        let alphas = [0.01, 0.1, 0.3];
        let req = json!({"events": [{"type": "rdp", "orders": [2.0], "rdp": [tau]}],
                         "epsilons": epsilons, "alphas": alphas});
        let r = report(&req);
        for p in &r.delta {
            let truth = chi2_delta(tau, p.epsilon);
            assert!(
                p.delta >= truth * (1.0 - ORACLE_REL),
                "τ={tau} ε={}: δ {} below the worst case {truth}",
                p.epsilon,
                p.delta
            );
            assert!(
                p.delta <= truth * 1.003 + 1e-12,
                "τ={tau} ε={}: δ {} far above the worst case {truth}",
                p.epsilon,
                p.delta
            );
            assert!(
                p.delta_lower <= truth * (1.0 + ORACLE_REL),
                "τ={tau} ε={}: δ_lower {} above the worst case {truth}",
                p.epsilon,
                p.delta_lower
            );
        }
        let tv = chi2_delta(tau, 0.0);
        assert!(r.advantage >= tv * (1.0 - ORACLE_REL), "τ={tau}");
        assert!(r.advantage_lower <= tv * (1.0 + ORACLE_REL), "τ={tau}");
        // Pinsker as a second, cruder check of the same lower ends.
        assert!(r.advantage_lower <= (tau / 2.0).sqrt(), "τ={tau}");
        for t in &r.tradeoff {
            let f = chi2_beta(tau, t.alpha);
            assert!(
                t.beta <= f * (1.0 + ORACLE_REL),
                "τ={tau} α={}: β {} > {f}",
                t.alpha,
                t.beta
            );
            assert!(
                t.beta_upper >= f * (1.0 - ORACLE_REL),
                "τ={tau} α={}: β_upper {} < {f}",
                t.alpha,
                t.beta_upper
            );
            assert!(
                t.tpr >= 1.0 - f * (1.0 + ORACLE_REL),
                "τ={tau} α={}",
                t.alpha
            );
        }
        // μ: the witness Gaussian (μ² = 2τ/λ = τ) meets the statement, so μ.lower may be at
        // most... anything the worst case needs, and at least is what the witness needs at the
        // slack; μ.upper bounds the worst case.
        let mu_w = tau.sqrt();
        assert!(r.mu.lower.unwrap() <= r.mu.upper.unwrap(), "τ={tau}");
        assert!(r.mu.upper.unwrap() >= mu_w, "τ={tau}");
    }
}

/// The issue's "done when": the `rdp` example's μ (slack 1e-10) is at most 1.16 (it was 2.77;
/// 1.1532 is certifiable for every mechanism meeting D₂ ≤ 1e-6), its advantage_lower at most the
/// Pinsker bound 7.07e-4 (it was 0.24998), β_upper(0.1) at least 0.8993 (it was 0.684).
#[test]
fn the_issue_rdp_example_has_a_mu_of_at_most_1_16() {
    let r = report(
        &json!({"events": [{"type": "rdp", "orders": [2.0], "rdp": [1e-6]}],
                           "epsilons": [0], "alphas": [0.1]}),
    );
    let mu = r.mu.upper.unwrap();
    assert!(mu <= 1.16, "μ.upper {mu}");
    assert!(r.mu.lower.unwrap() <= mu);
    assert!(r.advantage_lower <= 7.07e-4, "{}", r.advantage_lower);
    assert!(
        r.tradeoff[0].beta_upper >= 0.8993,
        "{}",
        r.tradeoff[0].beta_upper
    );
}

/// Class Z for ρ-zCDP, alone, composed and subsampled: the lower ends are those of the Gaussian
/// witness (μ² = 2ρ), never the conversion's; the issue's example δ_lower(0.5) at ρ = 0.5 must be
/// at most 0.35148 (the binary-test bound; it was 0.39986), and δ itself (an upper bound on the
/// worst case) is now below that too. Upper figures stay at or above the Gaussian witness's.
#[test]
fn zcdp_lower_ends_come_from_a_mechanism_meeting_the_statement() {
    let r = report(&json!({"events": [{"type": "zcdp", "rho": 0.5}], "epsilons": [0.5]}));
    let d = &r.delta[0];
    assert!(d.delta_lower <= 0.35148, "{}", d.delta_lower);
    assert!(d.delta <= 0.35148, "{}", d.delta);
    assert!(d.delta >= gdp::delta_for_epsilon(1.0, 0.5), "{}", d.delta);
    for rho in [1e-4, 0.02, 0.5, 2.0] {
        let mu = (2.0f64 * rho).sqrt();
        for events in [
            json!([{"type": "zcdp", "rho": rho}]),
            json!([{"type": "self_composed", "count": 4, "event": {"type": "zcdp", "rho": rho}}]),
            json!([{"type": "poisson_sampled", "sampling_rate": 0.1,
                    "event": {"type": "zcdp", "rho": rho}}]),
            json!([{"type": "poisson_sampled", "sampling_rate": 0.1,
                    "event": {"type": "composed", "events": [{"type": "zcdp", "rho": rho},
                                                             {"type": "gaussian", "noise_multiplier": 2.0}]}}]),
        ] {
            let r = report(&json!({"events": events, "epsilons": [0.0, 0.5, 2.0]}));
            // Pinsker: KL ≤ ρ per box; the count and the sampling only lower TV below the
            // composed KL bound √(Σρ/2) (4 boxes: √(2ρ); the Gaussian adds 1/(2·2²)).
            let kl = 4.0 * rho + 0.125;
            assert!(
                r.advantage_lower <= (kl / 2.0).sqrt(),
                "ρ={rho} {events}: advantage_lower {}",
                r.advantage_lower
            );
            for p in &r.delta {
                assert!(p.delta_lower <= p.delta, "ρ={rho} {events}");
            }
        }
        // Alone: the upper figures are at least the Gaussian witness's.
        let r =
            report(&json!({"events": [{"type": "zcdp", "rho": rho}], "epsilons": [0.0, 0.5, 2.0]}));
        for p in &r.delta {
            assert!(
                p.delta >= gdp::delta_for_epsilon(mu, p.epsilon),
                "ρ={rho} ε={}",
                p.epsilon
            );
            assert!(
                p.delta_lower <= gdp::delta_for_epsilon(mu, p.epsilon) * (1.0 + ORACLE_REL),
                "ρ={rho} ε={}: δ_lower above the witness's own δ",
                p.epsilon
            );
        }
        // Pinsker for the single box, at every ε.
        assert!(r.advantage_lower <= (rho / 2.0).sqrt(), "ρ={rho}");
    }
}

/// Class V: pure (ε, δ) boxes past ε = 34 at several grids, α at and around the curve's vertex
/// 1/(1 + e^ε): β (the sound lower end of f) never above the exact f, TPR never below 1 − f
/// (the oracle is the suite's 320-bit pair).
#[test]
fn vertex_scans_above_epsilon_34_at_several_grids() {
    for eps in [34.1, 34.602840658120535, 37.77, 45.5, 60.0, 120.25] {
        let v = 1.0 / (1.0 + f64::exp(eps));
        let alphas = [
            v,
            f64::from_bits(v.to_bits() + 1),
            f64::from_bits(v.to_bits() - 1),
            v * (1.0 + 1e-9),
            v * (1.0 - 1e-9),
            v * 1.5,
            v / 1.5,
        ];
        for grid in [0.1, 0.05, 0.01, 1e-3] {
            if grid < 0.01 && eps > 60.0 {
                continue; // 10⁵ points per side: slow, and the 0.01 grid covers the same lines.
            }
            for delta in [0.0, 1e-12] {
                assert_sound(&json!({
                    "events": [{"type": "epsilon_delta", "epsilon": eps, "delta": delta}],
                    "grid_step": grid, "alphas": alphas
                }));
            }
        }
    }
}

/// Class P: Poisson-subsampled (ε, δ₀) boxes where q·δ₀ rounded to nearest falls below the exact
/// product: asked at δ = that double (and its neighbours), ε must be +∞ (null) — the mass at +∞ is
/// more than δ — and the reported mass at least the exact product (the 320-bit oracle checks both).
#[test]
fn subsampled_box_mass_at_infinity_is_never_rounded_down() {
    let mut found = 0;
    let mut q = 0.9797549273107325_f64;
    let mut d0 = 1.2015254866723398e-11_f64;
    for i in 0..40 {
        let prod = q * d0;
        // The exact product is above its rounding when the fma residual is positive.
        if q.mul_add(d0, -prod) > 0.0 {
            found += 1;
            let e = 0.5 + 0.3 * (i % 7) as f64;
            assert_sound(&json!({
                "events": [{"type": "poisson_sampled", "sampling_rate": q,
                            "event": {"type": "epsilon_delta", "epsilon": e, "delta": d0}}],
                "grid_step": 0.1,
                "deltas": [prod, f64::from_bits(prod.to_bits() + 1), f64::from_bits(prod.to_bits() - 1)]
            }));
            let r = report(&json!({
                "events": [{"type": "poisson_sampled", "sampling_rate": q,
                            "event": {"type": "epsilon_delta", "epsilon": e, "delta": d0}}],
                "grid_step": 0.1, "deltas": [prod]
            }));
            assert!(
                r.epsilon[0].epsilon.is_none(),
                "q={q} δ₀={d0}: ε {:?}",
                r.epsilon[0].epsilon
            );
            assert!(r.infinity_mass > prod, "q={q} δ₀={d0}");
        }
        q = (q * 1.618_033_988_749_895).fract().max(0.05);
        d0 = (d0 * 7.389_056_098_930_65).fract() * 1e-9 + 1e-13;
    }
    assert!(
        found >= 5,
        "only {found} products rounded down among the samples"
    );
}
