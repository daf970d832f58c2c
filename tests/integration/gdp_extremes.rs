//! The μ-GDP closed forms at the extremes: μ from 5e-324 to f64::MAX (and 0, +∞), ε up to 1e6, δ and α
//! down to 5e-324.
//!
//! Exact values come from `tests/fixtures/gen_gdp_extremes.py` (mpmath at 900 digits), which writes
//! `tests/fixtures/gdp_extremes_vectors.rs`: for each value its first 60 digits and the two doubles that
//! round it down and up. An upper bound u is ≥ the exact value iff u ≥ the rounded-up double (and a lower
//! bound l ≤ it iff l ≤ the rounded-down one), so directedness is checked exactly; tightness is checked
//! against the named tolerances below.

use privacy_ledger::accountant::account::{account, AccountRequest};
use privacy_ledger::accountant::analytic::GdpComposition;
use privacy_ledger::accountant::guarantee::Guarantee;
use privacy_ledger::accountant::json::JsonPath;
use privacy_ledger::accountant::pld::{query::PldGuarantee, Pld};
use privacy_ledger::accountant::rounding::{TINY, U};
use privacy_ledger::accountant::{gdp, AccountantError, Event, NeighboringRelation};
use serde_json::json;

include!("../fixtures/gdp_extremes_vectors.rs");

/// Relative width of the δ(ε) bracket where δ ≥ 1e-300. The bracket's parts: erfcx's bound (16U each
/// of two values, amplified by erfcx(x)/D where the difference cancels), e^{−x²} (≤ 2U·x² ≈ 1500U at
/// x = 27), Φ's bound (20U + 16U·x²) for x < 0, and for small μ the quadrature's g = −erfcx', which
/// loses ≈ 2x² to cancellation (x = a/√2 ≈ 26 where δ ≈ 1e-298). Widest on the 450 fixture points:
/// 1.0e-11 (μ = 5.2e-6, ε = 1.9e-4, δ ≈ 1e-298); 1e-10 leaves a 10× margin and is still 10× inside
/// the 1e-9 the rest of the accountant promises.
const DELTA_REL_WIDTH: f64 = 1e-10;
/// Relative width of the ε(δ) bracket: the bisection stops at 2⁻⁵⁰ relative, and a δ bracket of
/// relative width w moves the root by w·δ/(ε·|δ'(ε)|). Widest on the fixture: 1.3e-14; 1e-9 as for
/// the rest of the accountant (`accuracy.rs`). Not for a subnormal δ (5e-324): there δ(ε) is known only to a few
/// subnormal ulps, i.e. to several times its own size, and the ε bracket is correspondingly wide
/// (≈ 1% at μ = 1e-300); only its soundness is checked.
const EPSILON_REL_WIDTH: f64 = 1e-9;
/// Relative width of the β and TPR brackets where the value is ≥ 1e-300: isf's 16U relative error
/// moves z − μ by 16U·z, which Φ turns into (|x| + 1)·16U·z relative (≈ 37.5·38·16U ≈ 2.5e-12 at
/// α = 5e-324, x = z − μ ≈ −37), plus Φ's own 20U + 8U·x² on each side. Widest on the 435 fixture
/// points: 4.5e-12 (μ = 56, α = 4e-153); 1e-10 leaves a 20× margin.
const BETA_REL_WIDTH: f64 = 1e-10;
/// Below the normal range only the absolute size means something: brackets of subnormal (or
/// underflowed) values may be this many smallest subnormals wide (the 2-ulp slack on each side plus
/// each end's one-ulp step, twice over for a product of two bounded factors).
const SUBNORMAL_ULPS: f64 = 16.0;
/// Relative width of the advantage (2Φ(μ/2) − 1) bracket: the series' running bound is a few U.
/// Widest on the 215 fixture points: 4.9e-15 (μ = 1.3); 1e-14.
const ADVANTAGE_REL_WIDTH: f64 = 1e-14;
/// How far above the exact μ of an ε-DP mechanism (GKKHBH Prop. 6.1) the result may be: 32U allowed
/// for ε ≤ 2, ~1e-15 from the certified log-space quantile beyond; 1e-12 as in `accuracy.rs`.
const PURE_DP_REL: f64 = 1e-12;
/// How far below the exact (ε, δ) → μ root the result may be: the bisection stops at 2⁻⁵⁰ relative,
/// plus the δ bracket's effect (7e-15 at most on the fixture); 1e-9.
const TARGET_REL: f64 = 1e-9;
/// How far below the tight μ_s the certified lower bound may be: "tight to ~1e-9 relative" is the
/// requirement; the search and the isf/Φ bounds give 1.6e-14 at most on the fixture.
const SLACK_REL: f64 = 1e-9;

/// (lower, upper) is a bracket of the exact value whose directed doubles are (down, up), of relative
/// width at most `rel` (measured against `up`), or at most `SUBNORMAL_ULPS` subnormals wide where
/// the exact value is below the normal range.
fn assert_bracket(what: &str, got: (f64, f64), exact: (f64, f64), rel: f64) {
    let (lo, hi) = got;
    let (down, up) = exact;
    assert!(!lo.is_nan() && !hi.is_nan(), "{what}: NaN in [{lo}, {hi}]");
    assert!(
        lo <= down,
        "{what}: lower end {lo} is above the exact value ({down} rounded down)"
    );
    assert!(
        hi >= up,
        "{what}: upper end {hi} is below the exact value ({up} rounded up)"
    );
    if up.is_infinite() {
        return;
    }
    let width = hi - lo;
    if up < f64::MIN_POSITIVE {
        assert!(
            width <= SUBNORMAL_ULPS * TINY,
            "{what}: [{lo}, {hi}] is too wide"
        );
    } else {
        assert!(
            width <= rel * up || width <= SUBNORMAL_ULPS * TINY,
            "{what}: [{lo}, {hi}] is wider than {rel:e} relative"
        );
    }
}

#[test]
fn the_privacy_profile_brackets_the_exact_delta_for_every_mu_and_epsilon() {
    for &(mu, eps, digits, down, up) in DELTA.iter().chain(DENSE_DELTA) {
        let what = format!("δ_{mu:e}({eps:e}) = {digits}");
        assert_bracket(
            &what,
            gdp::delta_bounds(mu, eps),
            (down, up),
            DELTA_REL_WIDTH,
        );
        assert_eq!(
            gdp::delta_for_epsilon(mu, eps),
            gdp::delta_bounds(mu, eps).1
        );
    }
}

#[test]
fn epsilon_of_delta_brackets_the_exact_root_up_to_infinity() {
    for &(mu, delta, digits, down, up) in EPSILON {
        let what = format!("ε_{mu:e}({delta:e}) = {digits}");
        let (lo, hi) = gdp::epsilon_bounds(mu, delta);
        let rel = if delta < f64::MIN_POSITIVE {
            f64::INFINITY
        } else {
            EPSILON_REL_WIDTH
        };
        assert_bracket(&what, (lo, hi), (down, up), rel);
        if up.is_infinite() {
            // Beyond the doubles: +∞ is the sound upper end, f64::MAX a valid lower one.
            assert_eq!((lo, hi), (f64::MAX, f64::INFINITY), "{what}");
        }
    }
}

#[test]
fn the_tradeoff_curve_and_tpr_round_in_their_safe_directions() {
    for &(mu, alpha, b_digits, b_down, b_up, t_digits, t_down, t_up) in
        TRADEOFF.iter().chain(DENSE_TRADEOFF)
    {
        let what = format!("G_{mu:e}({alpha:e}) = {b_digits}");
        let beta = (gdp::tradeoff(mu, alpha), gdp::tradeoff_upper(mu, alpha));
        assert_bracket(&what, beta, (b_down, b_up), BETA_REL_WIDTH);
        // TPR is an upper bound only; its tightness is that of β's complement.
        let tpr = gdp::tpr(mu, alpha);
        let what = format!("TPR_{mu:e}({alpha:e}) = {t_digits}");
        assert!(tpr >= t_up, "{what}: {tpr} is below the exact value");
        let slack = BETA_REL_WIDTH * t_up + SUBNORMAL_ULPS * TINY;
        assert!(tpr - t_down <= slack, "{what}: {tpr} is too loose");
    }
}

#[test]
fn advantage_is_never_below_the_exact_total_variation() {
    for &(mu, a_digits, a_down, a_up, f_digits, f_down, f_up) in ADVANTAGE {
        let what = format!("adv({mu:e}) = {a_digits}");
        assert_bracket(
            &what,
            gdp::advantage_bounds(mu),
            (a_down, a_up),
            ADVANTAGE_REL_WIDTH,
        );
        assert_eq!(gdp::advantage(mu), gdp::advantage_bounds(mu).1);
        let what = format!("Φ(−{mu:e}/2) = {f_digits}");
        assert_bracket(
            &what,
            gdp::fixed_point_bounds(mu),
            (f_down, f_up),
            BETA_REL_WIDTH,
        );
        let fp = gdp::fixed_point(mu);
        let (lo, hi) = gdp::fixed_point_bounds(mu);
        assert!(lo <= fp && fp <= hi, "{what}: {fp} outside its own bracket");
    }
}

#[test]
fn advantage_brackets_erf_over_mu_from_1e_300_to_40() {
    // The closed form the `errorfunctions` erf got wrong (by up to ~35U near μ = 0.23): 200 seeded
    // log-uniform μ.
    for &(mu, digits, down, up) in DENSE_ADVANTAGE {
        let what = format!("adv({mu:e}) = {digits}");
        assert_bracket(
            &what,
            gdp::advantage_bounds(mu),
            (down, up),
            ADVANTAGE_REL_WIDTH,
        );
    }
}

#[test]
fn the_advantage_of_mu_0_2263_is_not_an_ulp_below_the_truth() {
    // erf(0.2263/(2√2)) = 0.0900883647813330791754764989…; errorfunctions' erf (1 − e^{−x²}erfcx(x)
    // from x = 0.08 on) gave 0.09008836478133277, and widening it by 18U still left it below.
    let &(_, digits, _, up, _, _, _) = ADVANTAGE.iter().find(|r| r.0 == 0.2263).unwrap();
    assert!(digits.starts_with("9.00883647813330791754"), "{digits}");
    assert!(gdp::advantage(0.2263) >= up);
    let r = report(json!({"events": [{"type": "gdp", "mu": 0.2263}], "epsilons": [0.0]}));
    assert!(r.advantage >= up && r.delta[0].delta >= up && r.advantage_lower <= up);
}

#[test]
fn pure_dp_converts_to_mu_soundly_up_to_epsilon_1e6() {
    for &(eps, digits, _, up) in PURE_DP {
        let got = gdp::from_pure_dp(eps);
        let what = format!("μ(ε = {eps:e}) = {digits}");
        assert!(got >= up, "{what}: {got} is below");
        assert!(
            got - up <= PURE_DP_REL * up + SUBNORMAL_ULPS * TINY,
            "{what}: {got} is too loose"
        );
    }
}

#[test]
fn epsilon_delta_targets_give_a_mu_never_above_the_exact_root() {
    for &(eps, delta, digits, down, _) in TARGET {
        let got = gdp::for_epsilon_delta_target(eps, delta);
        let what = format!("μ({eps:e}, {delta:e}) = {digits}");
        assert!(got <= down, "{what}: {got} is above");
        assert!(down - got <= TARGET_REL * down, "{what}: {got} is too low");
        assert!(gdp::delta_for_epsilon(got, eps) <= delta, "{what}");
    }
}

#[test]
fn the_mu_lower_bound_with_a_delta_slack_is_certified_and_tight() {
    for &(mu, slack, digits, down, _) in SLACK {
        let got = gdp::slack_mu_lower(mu, slack);
        let what = format!("μ_s({mu:e}, s = {slack:e}) = {digits}");
        assert!(got <= down, "{what}: {got} is above the tight μ");
        assert!(down - got <= SLACK_REL * down, "{what}: {got} is too loose");
    }
}

#[test]
fn composition_roots_are_correctly_rounded_up_over_the_whole_range() {
    for &(terms, digits, down, up) in COMPOSE {
        let what = format!("√Σ of {terms:?} = {digits}");
        let got = gdp::compose(terms.iter().copied());
        assert!(got >= up, "{what}: {got} is below");
        // Exact sums give exactly the rounded-up root; sums the double-double cannot hold exactly
        // carry a rigorous error bound that may cost an ulp.
        assert!(
            got <= up.next_up(),
            "{what}: {got} is more than an ulp above"
        );
        let mut c = GdpComposition::new(NeighboringRelation::AddOrRemoveOne);
        c.add_terms(terms);
        let (lo, hi) = c.mu_bounds();
        assert!(lo <= down && hi == got, "{what}: [{lo}, {hi}]");
    }
}

#[test]
fn mu_zero_and_infinity_have_exact_answers() {
    assert_eq!(gdp::delta_bounds(0.0, 1.0), (0.0, 0.0));
    assert_eq!(gdp::epsilon_bounds(0.0, 1e-5), (0.0, 0.0));
    assert_eq!(gdp::tradeoff(0.0, 0.25), 0.75);
    assert_eq!(gdp::advantage_bounds(0.0), (0.0, 0.0));
    assert_eq!(gdp::delta_bounds(f64::INFINITY, 1e6), (1.0, 1.0));
    assert_eq!(
        gdp::epsilon_bounds(f64::INFINITY, 1e-5),
        (f64::INFINITY, f64::INFINITY)
    );
    assert_eq!(gdp::tradeoff_upper(f64::INFINITY, 1e-300), 0.0);
    assert_eq!(gdp::tpr(f64::INFINITY, 5e-324), 1.0);
    assert_eq!(gdp::advantage_bounds(f64::INFINITY), (1.0, 1.0));
    assert_eq!(gdp::group(f64::INFINITY, 2), f64::INFINITY);
    assert_eq!(gdp::slack_mu_lower(0.1, 0.0), 0.1);
    // The ends of the ranges: ε or δ of 0 and 1, α of 0 and 1.
    assert_eq!(
        gdp::epsilon_bounds(1.0, 0.0),
        (f64::INFINITY, f64::INFINITY)
    );
    assert_eq!(gdp::epsilon_bounds(1.0, 1.0), (0.0, 0.0));
    assert_eq!(
        (gdp::tradeoff(1.0, 0.0), gdp::tradeoff_upper(1.0, 1.0)),
        (1.0, 0.0)
    );
    assert_eq!(gdp::from_pure_dp(0.0), 0.0);
    assert_eq!(gdp::for_epsilon_delta_target(1.0, 0.0), 0.0);
    assert_eq!(gdp::for_epsilon_delta_target(1.0, 1.0), f64::INFINITY);
}

/// Runs the `account` computation on a request.
fn report(v: serde_json::Value) -> privacy_ledger::accountant::report::Report {
    account(&AccountRequest::from_json(&v).unwrap()).unwrap()
}

fn row<'a>(t: &'a [(f64, f64, &'a str, f64, f64)], a: f64, b: f64) -> (f64, f64) {
    let r = t
        .iter()
        .find(|r| r.0 == a && r.1 == b)
        .expect("fixture row");
    (r.3, r.4)
}

#[test]
fn gdp_1_4e154_reports_epsilon_near_1e308_not_1() {
    // Before: μ² overflowed, ε(1e-5) came out as 1.0 and δ, β, advantage as null.
    let r = report(
        json!({"events": [{"type": "gdp", "mu": 1.4e154}], "deltas": [1e-5],
                          "epsilons": [1.0], "alphas": [0.1]}),
    );
    assert_eq!(r.mu.upper, Some(1.4e154));
    let (down, up) = row(EPSILON, 1.4e154, 1e-5); // ≈ 9.8e307
    let e = &r.epsilon[0];
    let (lo, hi) = (e.epsilon_lower.unwrap(), e.epsilon.unwrap());
    assert_bracket(
        "ε(1e-5) of gdp 1.4e154",
        (lo, hi),
        (down, up),
        EPSILON_REL_WIDTH,
    );
    assert!(hi > 9.79e307);
    assert_eq!((r.delta[0].delta, r.advantage), (1.0, 1.0));
    assert_eq!(r.tradeoff[0].beta, 0.0);
    assert_eq!(r.tradeoff[0].tpr, 1.0);
}

#[test]
fn gdp_1e200_has_an_infinite_epsilon_and_a_lower_end_at_the_largest_double() {
    let r = report(json!({"events": [{"type": "gdp", "mu": 1e200}], "deltas": [1e-5]}));
    // ε(1e-5) ≈ 5e399: +∞ (null) is the sound answer.
    assert_eq!(r.epsilon[0].epsilon, None);
    assert_eq!(r.epsilon[0].epsilon_lower, Some(f64::MAX));
    assert_eq!(r.mu.upper, Some(1e200));
}

#[test]
fn a_gaussian_with_noise_multiplier_1e_155_has_mu_1e155_not_nan() {
    let sigma = 1e-155;
    let r = report(
        json!({"events": [{"type": "gaussian", "noise_multiplier": sigma}],
                          "deltas": [1e-5], "epsilons": [1.0]}),
    );
    let (lo, hi) = (r.mu.lower.unwrap(), r.mu.upper.unwrap());
    // The exact μ is 1/σ: hi·σ ≥ 1 and lo·σ ≤ 1, exactly (fused multiply-add).
    assert!(hi.mul_add(sigma, -1.0) >= 0.0 && lo.mul_add(sigma, -1.0) <= 0.0);
    assert!(hi <= 1e155 * (1.0 + 4.0 * U));
    // ε(1e-5) ≈ μ²/2 = 5e309: beyond the doubles.
    assert_eq!(r.epsilon[0].epsilon, None);
    assert_eq!(r.delta[0].delta, 1.0);
    // Under replace-one the sensitivity doubles: μ = 2e155.
    let r = report(
        json!({"events": [{"type": "gaussian", "noise_multiplier": sigma}],
                          "neighboring_relation": "replace_one"}),
    );
    assert!(r.mu.upper.unwrap() >= 2e155);
}

#[test]
fn gdp_1e_200_keeps_its_mu_instead_of_rounding_it_to_zero() {
    // Before: μ² = 1e-400 underflowed and every figure was that of μ = 0.
    let r = report(
        json!({"events": [{"type": "gdp", "mu": 1e-200}], "delta_slack": 0.0,
                          "deltas": [1e-300], "epsilons": [1e-300]}),
    );
    assert_eq!((r.mu.lower, r.mu.upper), (Some(1e-200), Some(1e-200)));
    let (down, up) = row(EPSILON, 1e-200, 1e-300);
    let e = &r.epsilon[0];
    assert_bracket(
        "ε(1e-300) of gdp 1e-200",
        (e.epsilon_lower.unwrap(), e.epsilon.unwrap()),
        (down, up),
        EPSILON_REL_WIDTH,
    );
    let (down, up) = row(DELTA, 1e-200, 1e-300);
    let d = &r.delta[0];
    assert_bracket(
        "δ(1e-300) of gdp 1e-200",
        (d.delta_lower, d.delta),
        (down, up),
        DELTA_REL_WIDTH,
    );
    assert!(r.advantage > 0.0);
    // With the default slack (1e-10 > δ(0) ≈ 4e-201) the tight μ is 0: lower 0, upper 1e-200.
    let r = report(json!({"events": [{"type": "gdp", "mu": 1e-200}]}));
    assert_eq!((r.mu.lower, r.mu.upper), (Some(0.0), Some(1e-200)));
}

#[test]
fn the_mu_bracket_of_gdp_0_1_accounts_for_a_delta_slack_of_1e_3() {
    // Before: lower = upper = 0.1. The tight μ for slack s is 2·isf(Φ(−0.05)/(1 − s)) ≈ 0.0975880.
    let r = report(json!({"events": [{"type": "gdp", "mu": 0.1}], "delta_slack": 1e-3}));
    let (down, _) = row(SLACK, 0.1, 1e-3);
    let lower = r.mu.lower.unwrap();
    assert_eq!(r.mu.upper, Some(0.1));
    assert!(lower <= down && down - lower <= SLACK_REL * down, "{lower}");
    assert!((lower - 0.097_587_98).abs() < 1e-8);
    assert_eq!(r.mu.regret, Some(0.0));
    // At slack 0 the bracket closes on μ.
    let r = report(json!({"events": [{"type": "gdp", "mu": 0.1}], "delta_slack": 0.0}));
    assert_eq!((r.mu.lower, r.mu.upper), (Some(0.1), Some(0.1)));
}

#[test]
fn the_analytic_and_numerical_mu_brackets_overlap_for_the_same_mechanism() {
    // The numerical engine brackets the same μ_s for a PLD; for a gdp event both must agree.
    for mu in [0.5, 1.0, 3.0] {
        let ev = Event::from_json(&json!({"type": "gdp", "mu": mu})).unwrap();
        let rel = NeighboringRelation::AddOrRemoveOne;
        let mut c = GdpComposition::new(rel);
        c.push(&ev, &JsonPath::root()).unwrap();
        let pld = Pld::from_event(&ev, rel, 1e-4, &JsonPath::root()).unwrap();
        let g = PldGuarantee::new(&pld, None);
        for slack in [1e-10, 1e-3] {
            let a = Guarantee::mu(&c, slack);
            let n = g.mu(slack);
            let (al, au) = (a.lower.unwrap(), a.upper.unwrap());
            let (nl, nu) = (n.lower.unwrap(), n.upper.unwrap());
            assert!(
                al <= nu && nl <= au,
                "μ = {mu}, s = {slack}: analytic [{al}, {au}] vs numerical [{nl}, {nu}]"
            );
        }
    }
}

#[test]
fn a_gaussian_whose_mu_overflows_is_an_input_error_naming_its_field() {
    // σ = 1e-310 (subnormal): s/σ = 1e310 > f64::MAX.
    let ev = Event::from_json(&json!({"type": "gaussian", "noise_multiplier": 1e-310})).unwrap();
    let mut c = GdpComposition::new(NeighboringRelation::AddOrRemoveOne);
    let path = JsonPath::root().field("events").index(0);
    let err = c.push(&ev, &path).unwrap_err();
    let AccountantError::Input(e) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(e.path, "$.events[0].noise_multiplier");
    assert!(e.reason.starts_with("gives μ = ∞"), "{}", e.reason);
    assert_eq!(c.mu(), 0.0, "nothing was added");
    // Through `account` the event is refused too (never a silent 0/NaN/∞ state).
    let req = AccountRequest::from_json(&json!({"events": [
        {"type": "gaussian", "noise_multiplier": 1e-310}]}))
    .unwrap();
    let err = account(&req).unwrap_err();
    assert!(err.to_string().starts_with("$.events[0]"), "{err}");
}

/// The sum of squares exactly as versions without `sum_sq_exp`/`sum_sq_err` kept it (Neumaier
/// summation of fused-multiply-add products), to write an old-format state.
fn legacy_sum(terms: &[(f64, u64)]) -> (f64, f64) {
    let (mut hi, mut lo) = (0.0_f64, 0.0_f64);
    for &(x, count) in terms {
        let sq = x * x;
        let sq_err = x.mul_add(x, -sq);
        let c = count as f64;
        let term = sq * c;
        let term_err = sq.mul_add(c, -term) + sq_err * c;
        let s = hi + term;
        let e = if hi.abs() >= term.abs() {
            (hi - s) + term
        } else {
            (term - s) + hi
        };
        hi = s;
        lo += e + term_err;
    }
    (hi, lo)
}

#[test]
fn an_old_format_state_still_loads_with_the_same_mu() {
    let terms = [(0.3, 1), (0.4, 1), (0.01, 10_000), (1.7, 3)];
    let (hi, lo) = legacy_sum(&terms);
    let old = format!(
        r#"{{"relation":"add_or_remove_one","sum_sq_hi":{hi:?},"sum_sq_lo":{lo:?},
            "clt":{{"kl":0.0,"kappa2":0.0,"kl_sq":0.0,"kbar3":0.0}},"invocations":10005}}"#
    );
    let c: GdpComposition = serde_json::from_str(&old).unwrap();
    // What those versions reported: √(hi + lo) widened by 8U and one ulp.
    let v = (hi + lo).sqrt();
    let old_mu = (v + v * 8.0 * U).next_up();
    // The exact μ = √(0.09 + 0.16 + 1 + 8.67) = √9.92 (of the doubles), bracketed by a fresh sum.
    let mut fresh = GdpComposition::new(NeighboringRelation::AddOrRemoveOne);
    fresh.add_terms(&terms);
    let (lo_exact, hi_exact) = fresh.mu_bounds();
    let (lo_old, hi_old) = c.mu_bounds();
    assert!(
        lo_old <= lo_exact && hi_old >= hi_exact,
        "the legacy bound covers the exact μ"
    );
    // Same μ as those versions to within their own 8U widening (it is now at most that loose).
    assert!(
        (c.mu() - old_mu).abs() <= 8.0 * U * old_mu,
        "{} vs {old_mu}",
        c.mu()
    );
    assert!(c.mu() <= old_mu);
    assert_eq!(c.invocations(), 10005);
    // A new state round-trips exactly and keeps the unscaled fields (readable by older versions).
    let new = serde_json::to_value(fresh).unwrap();
    assert_eq!(new["sum_sq_exp"], 0);
    let back: GdpComposition = serde_json::from_value(new).unwrap();
    assert_eq!(back, fresh);
    // A state beyond the doubles (μ = 1.4e154) round-trips too: every field is finite JSON.
    let mut big = GdpComposition::new(NeighboringRelation::AddOrRemoveOne);
    big.add_terms(&[(1.4e154, 3)]);
    let text = serde_json::to_string(&big).unwrap();
    assert!(!text.contains("null"), "{text}");
    let back: GdpComposition = serde_json::from_str(&text).unwrap();
    assert_eq!(back.mu(), big.mu());
    assert!(
        back.clt_sums().is_none(),
        "the CLT is not kept beyond μ = 1e4"
    );
    // A corrupted state is refused, not read as μ = 0.
    let bad = old.replace(&format!("{hi:?}"), "-1.0");
    assert!(serde_json::from_str::<GdpComposition>(&bad).is_err());
}

#[test]
fn the_cli_reports_the_fixed_figures() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_privacy-ledger"))
        .args(["account", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"events":[{"type":"gdp","mu":1.4e154}],"deltas":[1e-5]}"#)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let (_, up) = row(EPSILON, 1.4e154, 1e-5);
    assert!(v["epsilon"][0]["epsilon"].as_f64().unwrap() >= up);
    assert_eq!(v["mu"]["upper"].as_f64(), Some(1.4e154));
}
