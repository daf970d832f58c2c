//! Unit certificates and the adaptive filter, against the oracles.
//!
//! 1. Every certificate (μᵢ, δᵢ) the gate may use for a random event holds against that event's
//!    exact trade-off curve (the oracle's upper end, in 320-bit arithmetic): f(α) ≥ (1 − δᵢ)·
//!    G_{μᵢ}(α/(1 − δᵢ)) at every α tried, and the +∞ mass is at most δᵢ.
//! 2. Over random *adaptive* sequences (each next unit chosen from a simulated output bit and the
//!    remaining budget), the units the gate admits satisfy Σμᵢ² ≤ μ_B² and Σδᵢ ≤ δ_B, summed
//!    exactly, up to the gate's stated tolerance.

use crate::gdp;
use crate::hp::{self, F};
use crate::oracle::{model_of, Rel, X};
use crate::random::{event, Rng};
use privacy_ledger::accountant::certificate::{certify, Certificate, UnitDelta};
use privacy_ledger::accountant::json::JsonPath;
use privacy_ledger::accountant::params::GridStep;
use privacy_ledger::accountant::{Event, NeighboringRelation};
use privacy_ledger::ledger::budget::{Budget, GATE_TOLERANCE};
use privacy_ledger::ledger::filter::{Admission, FilterState, Limit};

const SEED: u64 = 0xce27_1f1c_a7e5_2026;
const CASES: usize = 150;

/// α where each certificate is checked: the tails, where a fit is most likely to be optimistic,
/// and the middle.
const ALPHAS: &[f64] = &[
    1e-12, 1e-9, 1e-6, 1e-4, 1e-3, 0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 0.99,
];

/// Relative error allowed to the claim's own high-precision evaluation (the oracle's Φ⁻¹ then Φ
/// round-trip is exact to far better than this; at μ = 0 it returns 1 − α a few 1e-30 high). A
/// violation of even one f64 ulp (1e-16 relative) is still caught.
const CLAIM_REL_TOL: f64 = 1e-20;

/// (1 − δ)·G_μ(α/(1 − δ)), in high precision.
fn claim(c: &Certificate, alpha: f64) -> F {
    let keep = hp::one() - hp::f(c.delta());
    let a = hp::f(alpha) / &keep;
    if a > hp::one() {
        return hp::zero();
    }
    keep * gdp::tradeoff(&hp::f(c.mu()), &a)
}

#[test]
fn every_certificate_holds_against_its_units_exact_curve() {
    // SOUNDNESS_SEED / SOUNDNESS_CASES widen the hunt, as for the random requests.
    let env = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    let seed = env("SOUNDNESS_SEED").unwrap_or(SEED);
    let cases = env("SOUNDNESS_CASES").map_or(CASES, |c| c as usize);
    let mut r = Rng::new(seed);
    let (mut checked, mut refused, mut no_oracle) = (0, 0, 0);
    let mut violations = Vec::new();
    for case in 0..cases {
        let replace = r.below(2) == 0;
        let ev = event(&mut r, replace, 2);
        let h = r.pick(&[1e-3, 1e-2, 5e-2]);
        let default_delta = r.pick(&[1e-13, 1e-10, 1e-6]);
        let (rel, orel) = if replace {
            (NeighboringRelation::ReplaceOne, Rel::Replace)
        } else {
            (NeighboringRelation::AddOrRemoveOne, Rel::AddRemove)
        };
        let Ok(parsed) = Event::from_json(&ev) else {
            refused += 1;
            continue;
        };
        let Ok(candidates) = certify(
            &parsed,
            rel,
            GridStep::new(h).unwrap(),
            UnitDelta::Auto(default_delta),
            &JsonPath::root(),
        ) else {
            refused += 1;
            continue;
        };
        let Ok(model) = model_of(&ev, orel) else {
            no_oracle += 1;
            continue;
        };
        for c in &candidates {
            let mut any = false;
            for &alpha in ALPHAS {
                let truth = model.tradeoff(alpha);
                if let X::Fin(hi) = &truth.hi {
                    any = true;
                    let want = claim(c, alpha);
                    if *hi < &want * (hp::one() - hp::f(CLAIM_REL_TOL)) {
                        violations.push(format!(
                            "case {case} (seed {seed:#x}) {ev} h={h} rel={rel:?}: certificate \
                             {c:?} claims f({alpha:e}) >= {} but the truth is <= {} (relative \
                             excess {:e})",
                            hp::show(&want),
                            hp::show(hi),
                            hp::to_f64(&((&want - hi) / hi))
                        ));
                    }
                }
            }
            if let X::Fin(lo) = &model.inf_mass().lo {
                if *lo > hp::f(c.delta()) {
                    violations.push(format!(
                        "case {case} {ev}: +inf mass >= {} above the certificate's delta {c:?}",
                        hp::show(lo)
                    ));
                }
            }
            if any {
                checked += 1;
            } else {
                no_oracle += 1;
            }
        }
    }
    eprintln!(
        "certificates: {checked} checked against an exact curve, {no_oracle} without one, \
         {refused} refused by the engine"
    );
    assert!(
        checked >= cases / 3,
        "too few certificates checked: {checked}"
    );
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn adaptive_sequences_never_overspend_the_filter() {
    let mut r = Rng::new(SEED ^ 0xada9);
    for case in 0..200 {
        let budget = Budget::new(r.log_uniform(0.1, 10.0), r.pick(&[0.0, 1e-10, 1e-6])).unwrap();
        let mut s = FilterState::empty();
        let mut admitted: Vec<Certificate> = Vec::new();
        let mut bit = r.below(2) == 1;
        for _ in 0..60 {
            // The analyst's next unit depends on the last "output" and on what remains: aim at a
            // fraction of the remaining μ, or overshoot it, or a huge or tiny unit.
            let remaining = budget.remaining_mu(&s);
            let mu = match (bit, r.below(4)) {
                (true, 0) => remaining * (1.0 + 1e-12),
                (true, _) => remaining * r.unit(),
                (false, 0) => r.pick(&[1e-300, 1e-12, 1e200]),
                (false, _) => r.log_uniform(1e-3, 3.0),
            };
            let delta = if r.below(3) == 0 {
                0.0
            } else {
                budget.delta() * r.unit() * 0.3
            };
            let c = Certificate::new(mu, delta).unwrap();
            if let Admission::Admitted(next) = budget.admits(&s, &c) {
                s = next;
                admitted.push(c);
            }
            bit = r.below(2) == 1;
        }
        let sum_sq = admitted
            .iter()
            .fold(hp::zero(), |a, c| a + hp::f(c.mu()) * hp::f(c.mu()));
        let sum_delta = admitted
            .iter()
            .fold(hp::zero(), |a, c| a + hp::f(c.delta()));
        let mu_limit = hp::f(budget.mu()) * hp::f(1.0 + GATE_TOLERANCE);
        assert!(
            sum_sq <= &mu_limit * &mu_limit,
            "case {case}: sum of mu_i^2 = {} above the budget {:?}",
            hp::show(&sum_sq),
            budget
        );
        assert!(
            sum_delta <= hp::f(budget.delta()) * hp::f(1.0 + GATE_TOLERANCE),
            "case {case}: sum of delta_i = {} above the budget {:?}",
            hp::show(&sum_delta),
            budget
        );
        // The stored state bounds the exact sums from above (never optimistic).
        assert!(hp::f(s.mu_sq()) >= sum_sq && hp::f(s.delta()) >= sum_delta);
        assert_eq!(s.units(), admitted.len() as i64);
    }
}
