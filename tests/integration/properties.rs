//! Property tests: invariants that must hold for every input, checked on random ones (fixed seed
//! through proptest's default deterministic config in CI; failures are shrunk and reported).

use privacy_ledger::accountant::analytic::GdpComposition;
use privacy_ledger::accountant::json::JsonPath;
use privacy_ledger::accountant::tradeoff::PiecewiseLinear;
use privacy_ledger::accountant::{epsilon_delta, gdp, subsample, Event, NeighboringRelation};
use proptest::prelude::*;
use serde_json::json;

/// Relative tolerance for comparing two compositions that differ only in summation order: the
/// double-double sum is exact to ~2U, and both results are rounded up by 8U.
const ORDER_TOL: f64 = 1e-14;

fn mu_of(events: &[Event]) -> f64 {
    let mut c = GdpComposition::new(NeighboringRelation::AddOrRemoveOne);
    for e in events {
        c.push(e, &JsonPath::root()).unwrap();
    }
    c.mu()
}

fn gaussian(sigma: f64) -> Event {
    Event::from_json(&json!({"type": "gaussian", "noise_multiplier": sigma})).unwrap()
}

fn gdp_event(mu: f64) -> Event {
    Event::from_json(&json!({"type": "gdp", "mu": mu})).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn gdp_curve_is_a_valid_tradeoff_function(mu in 0.0f64..20.0, a in 0.0f64..1.0, b in 0.0f64..1.0) {
        let (lo, hi) = if a < b { (a, b) } else { (b, a) };
        let (flo, fhi) = (gdp::tradeoff(mu, lo), gdp::tradeoff(mu, hi));
        // Non-increasing, below the identity, convex (midpoint below the chord).
        prop_assert!(fhi <= flo + 1e-15);
        prop_assert!(flo <= 1.0 - lo + 1e-15);
        let mid = gdp::tradeoff(mu, (lo + hi) / 2.0);
        prop_assert!(mid <= (flo + fhi) / 2.0 + 1e-12);
        // Bracket ordering.
        prop_assert!(gdp::tradeoff(mu, a) <= gdp::tradeoff_upper(mu, a));
    }

    #[test]
    fn more_noise_means_a_higher_curve(mu1 in 0.0f64..10.0, mu2 in 0.0f64..10.0, a in 1e-12f64..1.0) {
        let (small, large) = if mu1 < mu2 { (mu1, mu2) } else { (mu2, mu1) };
        prop_assert!(gdp::tradeoff(large, a) <= gdp::tradeoff_upper(small, a));
    }

    #[test]
    fn privacy_profile_is_monotone(mu in 0.01f64..10.0, e1 in 0.0f64..40.0, e2 in 0.0f64..40.0) {
        let (lo, hi) = if e1 < e2 { (e1, e2) } else { (e2, e1) };
        let (d_lo, d_hi) = (gdp::delta_for_epsilon(mu, lo), gdp::delta_for_epsilon(mu, hi));
        prop_assert!(d_hi <= d_lo * (1.0 + 1e-10) + 1e-300);
        let (l, u) = gdp::delta_bounds(mu, lo);
        prop_assert!(l <= u);
    }

    #[test]
    fn epsilon_of_delta_inverts_the_profile_soundly(mu in 0.05f64..10.0, log_delta in -15.0f64..-1.0) {
        let delta = 10f64.powf(log_delta);
        let (lo, hi) = gdp::epsilon_bounds(mu, delta);
        prop_assert!(lo <= hi);
        if hi > 0.0 {
            // At the returned ε the (upper bound on the) profile is within the target.
            prop_assert!(gdp::delta_for_epsilon(mu, hi) <= delta);
            prop_assert!((hi - lo) <= 1e-9 * hi, "bracket {lo}..{hi}");
        }
    }

    #[test]
    fn composition_order_does_not_matter(sigmas in prop::collection::vec(0.05f64..50.0, 1..40), seed in any::<u64>()) {
        let events: Vec<Event> = sigmas.iter().map(|&s| gaussian(s)).collect();
        let mut shuffled = events.clone();
        // Deterministic shuffle from the seed (Fisher–Yates with a xorshift generator).
        let mut x = seed | 1;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let (a, b) = (mu_of(&events), mu_of(&shuffled));
        prop_assert!((a - b).abs() <= ORDER_TOL * a, "{a} vs {b}");
    }

    #[test]
    fn k_fold_event_equals_k_single_events(mu in 0.001f64..5.0, k in 1u64..300) {
        let once = Event::from_json(&json!({"type": "self_composed", "count": k,
                                            "event": {"type": "gdp", "mu": mu}})).unwrap();
        let singles: Vec<Event> = (0..k).map(|_| gdp_event(mu)).collect();
        let composed = Event::from_json(&json!({"type": "composed",
            "events": (0..k).map(|_| json!({"type": "gdp", "mu": mu})).collect::<Vec<_>>()})).unwrap();
        let (a, b, c) = (mu_of(&[once]), mu_of(&singles), mu_of(&[composed]));
        prop_assert!((a - b).abs() <= ORDER_TOL * a && (a - c).abs() <= ORDER_TOL * a, "{a} {b} {c}");
        // And the closed form √k·μ.
        let exact = (k as f64).sqrt() * mu;
        prop_assert!(a >= exact * (1.0 - 1e-15) && a <= exact * (1.0 + 1e-14));
    }

    #[test]
    fn events_round_trip_through_json(sigma in 0.01f64..100.0, q in 0.0f64..=1.0, k in 1u64..1000) {
        let e = Event::from_json(&json!({"type": "self_composed", "count": k, "event":
            {"type": "poisson_sampled", "sampling_rate": q, "event":
                {"type": "gaussian", "noise_multiplier": sigma}}})).unwrap();
        prop_assert_eq!(Event::from_json(&e.to_json()).unwrap(), e);
    }

    #[test]
    fn pure_dp_k_fold_equals_k_singles(eps in 0.01f64..2.0, k in 1u64..40) {
        let grouped = epsilon_delta::PureComposition::new(&[(eps, k)]).unwrap();
        let singles: Vec<(f64, u64)> = (0..k).map(|_| (eps, 1)).collect();
        let spread = epsilon_delta::PureComposition::new(&singles).unwrap();
        for e in [0.0, 0.5 * eps, eps, 2.0 * eps] {
            let (a, b) = (grouped.delta_for_epsilon(e), spread.delta_for_epsilon(e));
            prop_assert!((a - b).abs() <= 1e-12 * a.max(1e-300), "ε' = {e}: {a} vs {b}");
        }
    }

    #[test]
    fn symmetrisation_is_valid_and_below_both_orderings(
        eps in 0.0f64..4.0, delta in 0.0f64..0.2, p in 0.0f64..=1.0
    ) {
        let f = epsilon_delta::curve(eps, delta);
        let fp = subsample::mixture(&f, p);
        let c = fp.symmetrize();
        prop_assert!(c.validate().is_ok(), "{:?}", c.validate());
        let inv = fp.inverse();
        for i in 0..=50 {
            let a = i as f64 / 50.0;
            prop_assert!(c.eval(a) <= fp.eval(a).min(inv.eval(a)) + 1e-12);
        }
        // C_p(f) is symmetric: it is its own inverse.
        let ci = c.inverse();
        for i in 0..=50 {
            let a = i as f64 / 50.0;
            prop_assert!((c.eval(a) - ci.eval(a)).abs() <= 1e-12);
        }
    }
}

#[test]
fn inverse_is_an_involution_on_valid_curves() {
    let f = PiecewiseLinear::new(&[(0.0, 0.95), (0.02, 0.6), (0.2, 0.2), (0.7, 0.0), (1.0, 0.0)])
        .unwrap();
    let g = f.inverse().inverse();
    for i in 0..=100 {
        let a = i as f64 / 100.0;
        assert!((f.eval(a) - g.eval(a)).abs() < 1e-15, "alpha {a}");
    }
}
