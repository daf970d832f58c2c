//! The adaptive filter gate through the API: the counterexample of issue 10, extreme inputs, the
//! δ parts, and the migration of a ledger written by the release before the filter.

use crate::api::{spawn_app, temp_dir};
use axum::http::StatusCode;
use privacy_ledger::app::open_store;
use privacy_ledger::http::Limits;
use serde_json::{json, Value};

/// μ of an ε-DP mechanism, −2Φ⁻¹(1/(1 + e^ε)) (Gomez et al., "(ε,δ) considered harmful",
/// Prop. 6.1), to 7 digits (computed with mpmath; see docs/filter.md).
const MU_OF_EPS_1: f64 = 1.232_035_2;

/// Binary randomized response with ε: noise_parameter 2/(1 + e^ε).
fn rr(eps: f64) -> Value {
    json!({"type": "randomized_response", "noise_parameter": 2.0 / (1.0 + eps.exp()), "num_buckets": 2})
}

/// Budget μ = 2. Charge 1: binary RR with ε = 1. Charge 2, chosen from its output: a Gaussian with
/// μ = 1.7291 (bit 1) or RR with ε = 1.6482 (bit 0). Each realised path composes *exactly* to
/// μ ≈ 2.000, which the old gate admitted; the adaptive transcript is only 2.135-GDP. Under the
/// filter μ(1)² + 1.7291² = 4.5077 > 4 and μ(1)² + μ(1.6482)² = 5.4297 > 4: both are rejected.
#[tokio::test]
async fn the_adaptive_counterexample_is_rejected_on_both_paths() {
    for second in [json!({"type": "gdp", "mu": 1.7291}), rr(1.6482)] {
        let app = spawn_app().await;
        let (s, _) = app
            .post(
                "/v1/datasets",
                json!({"id": "d", "budget": {"mu": 2.0}, "neighboring_relation": "replace_one"}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED);
        let (s, b) = app
            .post("/v1/datasets/d/charges", json!({"event": rr(1.0)}))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
        let unit = &b["charge"]["unit"];
        assert_eq!(unit["delta"], 0.0, "{b}");
        let mu1 = unit["mu"].as_f64().unwrap();
        assert!(
            mu1 >= MU_OF_EPS_1 - 1e-7 && mu1 < MU_OF_EPS_1 * 1.0001,
            "{mu1}"
        );
        let (s, b) = app
            .post("/v1/datasets/d/charges", json!({"event": second}))
            .await;
        assert_eq!(s, StatusCode::CONFLICT, "{second}: {b}");
        assert_eq!(b["error"], "budget_exceeded");
        let remaining = b["remaining_mu"].as_f64().unwrap();
        // √(4 − μ(1)²) = 1.575465.
        assert!((remaining - 1.575_465).abs() < 1e-4, "{remaining}");
        assert!(b["unit"]["mu"].as_f64().unwrap() > remaining);
        let (_, d) = app.get("/v1/datasets/d").await;
        assert_eq!(d["units"], 1);
    }
}

/// The inputs that broke the old gate get a 4xx quickly and leave the dataset readable.
#[tokio::test]
async fn extreme_units_are_rejected_and_the_ledger_stays_readable() {
    let app = spawn_app().await;
    app.post("/v1/datasets", json!({"id": "x", "budget": {"mu": 2.0}}))
        .await;
    let (s, _) = app
        .post(
            "/v1/datasets/x/charges",
            json!({"event": {"type": "laplace", "noise_multiplier": 10.0}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    for ev in [
        json!({"type": "gdp", "mu": 1e200}),
        json!({"type": "gaussian", "noise_multiplier": 1e-160}),
        json!({"type": "composed", "events": [{"type": "gdp", "mu": 0.1},
            {"type": "self_composed", "count": 3, "event": {"type": "gdp", "mu": 1e200}}]}),
    ] {
        let t = std::time::Instant::now();
        let (s, b) = app
            .post("/v1/datasets/x/charges", json!({"event": ev}))
            .await;
        assert!(s.is_client_error(), "{ev}: {s} {b}");
        assert!(t.elapsed().as_secs_f64() < 1.0, "{ev}: {:?}", t.elapsed());
    }
    let (s, d) = app.get("/v1/datasets/x").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(d["units"], 1);
    // A Gaussian charge is not free afterwards: it spends its μ in quadrature.
    let before = d["mu_spent"].as_f64().unwrap();
    let (s, b) = app
        .post(
            "/v1/datasets/x/charges",
            json!({"event": {"type": "gdp", "mu": 0.5}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let after = b["charge"]["mu_after"].as_f64().unwrap();
    assert!(
        (after * after - before * before - 0.25).abs() < 1e-9,
        "{before} {after}"
    );
    let (s, _) = app.get("/v1/datasets/x/report").await;
    assert_eq!(s, StatusCode::OK);
}

/// Units that need δ spend one of the δ values offered around the default δ_B/1000 (the one
/// leaving the most room), and the δ budget caps them.
#[tokio::test]
async fn delta_parts_are_charged_and_capped() {
    let app = spawn_app().await;
    app.post(
        "/v1/datasets",
        json!({"id": "s", "budget": {"mu": 5.0, "delta": 1e-9}}),
    )
    .await;
    let step = json!({"type": "poisson_sampled", "sampling_rate": 0.01,
                      "event": {"type": "gaussian", "noise_multiplier": 2.0}});
    let (s, b) = app
        .post("/v1/datasets/s/charges", json!({"event": step}))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    // μ_B = 5 leaves so much μ that the smallest δ offered, δ_B/10⁴, takes the smallest share.
    assert_eq!(b["charge"]["unit"]["delta"], 1e-13);
    // A unit asking for more δ than remains is rejected for δ.
    let (s, b) = app
        .post(
            "/v1/datasets/s/charges",
            json!({"event": step, "delta": 1e-9}),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert!(b["message"].as_str().unwrap().contains("delta"), "{b}");
    // The report's figures are the budget's guarantee; the exact composition is labelled.
    let (s, r) = app.get("/v1/datasets/s/report").await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert!(
        (r["mu"]["upper"].as_f64().unwrap() - 5.0).abs() < 1e-8,
        "{}",
        r["mu"]
    );
    assert!(r["exact_composition"]["valid_only_if"]
        .as_str()
        .unwrap()
        .contains("fixed"));
    assert!((r["delta_spent"].as_f64().unwrap() - 1e-13).abs() < 1e-21);
}

/// A dataset `id` with budget (μ_B, δ_B), and the 201 body of charging `event` on it first.
async fn first_charge(
    app: &crate::api::TestApp,
    id: &str,
    (mu, delta): (f64, f64),
    event: &serde_json::Value,
) -> serde_json::Value {
    let (s, d) = app
        .post(
            "/v1/datasets",
            json!({"id": id, "budget": {"mu": mu, "delta": delta}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{d}");
    let (s, b) = app
        .post(
            &format!("/v1/datasets/{id}/charges"),
            json!({"event": event}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    b
}

/// The gate charges, of a unit's certificates, the one that takes the smallest share of what is
/// left (docs/filter.md §9): a larger δ where μ is scarce, a smaller one where δ is, δ = 0 once δ
/// is spent — each choice visible in the charge, and the sums are those of the charged ones.
#[tokio::test]
async fn the_gate_spends_delta_where_mu_is_scarce_and_saves_it_where_delta_is() {
    let app = spawn_app().await;
    // A DP-SGD step (q = 0.01, σ = 1): its μ falls by ~25 % per decade of δ (docs/filter.md §9).
    let step = json!({"type": "poisson_sampled", "sampling_rate": 0.01,
                      "event": {"type": "gaussian", "noise_multiplier": 1.0}});
    let (s, curve) = app
        .post(
            "/v1/accountant/certificate",
            json!({"event": step, "deltas": [1e-11, 1e-10, 1e-9]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{curve}");
    let mu_at = |i: usize| curve["points"][i]["mu"].as_f64().unwrap();
    let (mu_small, mu_default, mu_large) = (mu_at(0), mu_at(1), mu_at(2));
    assert!(mu_large < mu_default && mu_default < mu_small, "{curve}");
    // μ scarce (μ_B = 0.3, δ_B = 1e-7): δ_B/100 costs 1 % of δ against a μ share of
    // mu_large²/0.09 ≈ 40 %; a smaller δ would take more of μ.
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b;
    let b = first_charge(&app, "tight_mu", (0.3, 1e-7), &step).await;
    assert_eq!(b["charge"]["unit"]["delta"], 1e-9, "{b}");
    assert!(
        close(b["charge"]["unit"]["mu"].as_f64().unwrap(), mu_large),
        "{b} {curve}"
    );
    // δ scarce (μ_B = 100, δ_B = 1e-7): every μ share is below 1e-5, δ_B/10⁴ is 1e-4 of δ.
    let b = first_charge(&app, "tight_delta", (100.0, 1e-7), &step).await;
    assert_eq!(b["charge"]["unit"]["delta"], 1e-11, "{b}");
    assert!(
        close(b["charge"]["unit"]["mu"].as_f64().unwrap(), mu_small),
        "{b} {curve}"
    );
    // Spend the δ down with explicit charges: then the gate has no δ > 0 left to choose and,
    // with no finite fit at δ = 0, refuses for δ.
    let (s, b) = app
        .post(
            "/v1/datasets/tight_delta/charges",
            json!({"event": step, "delta": 1e-7 - 1e-11}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (s, b) = app
        .post("/v1/datasets/tight_delta/charges", json!({"event": step}))
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert!(b["message"].as_str().unwrap().contains("delta"), "{b}");
    // A Laplace unit (bounded loss) needs no δ and is still admitted, at δ = 0.
    let (s, b) = app
        .post(
            "/v1/datasets/tight_delta/charges",
            json!({"event": {"type": "laplace", "noise_multiplier": 10.0}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(b["charge"]["unit"]["delta"], 0.0, "{b}");
    let (_, d) = app.get("/v1/datasets/tight_delta").await;
    assert!(
        (d["delta_spent"].as_f64().unwrap() - 1e-7).abs() < 1e-20,
        "{d}"
    );
}

/// The app over a copy of a ledger fixture written by an earlier release.
async fn app_over_fixture(name: &str) -> crate::api::TestApp {
    let dir = temp_dir("migrate");
    let db = dir.join("ledger.db");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    std::fs::copy(fixture.join(name), &db).unwrap();
    let store = open_store(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    crate::api::TestApp::over_store(store, Limits::default(), dir).await
}

/// A ledger written by the release before the filter (tests/fixtures/ledger-v1.sqlite, made by
/// tests/fixtures/make_ledger_v1.sh) opens, is converted, and gates under the filter.
#[tokio::test]
async fn a_version_1_ledger_is_migrated() {
    let app = app_over_fixture("ledger-v1.sqlite").await;
    // Gaussian-only: σ = 2 (μ 0.5) and gdp 1.2 → √(0.25 + 1.44) = 1.3, as before.
    let (s, g) = app.get("/v1/datasets/gauss").await;
    assert_eq!(s, StatusCode::OK, "{g}");
    assert_eq!(g["units"], 2);
    assert!((g["mu_spent"].as_f64().unwrap() - 1.3).abs() < 1e-12, "{g}");
    assert_eq!(g["delta_spent"], 0.0);
    let (_, e) = app.get("/v1/datasets/gauss/charges").await;
    assert_eq!(e["items"][0]["charge"]["unit"]["mu"], 0.5, "{e}");
    // Mixed: Laplace and RR spend no δ; the subsampled Gaussian spends what the gate would have
    // chosen for it at that point (docs/filter.md §9): δ_B/1000 = 1e-9 here.
    let (s, m) = app.get("/v1/datasets/mixed").await;
    assert_eq!(s, StatusCode::OK, "{m}");
    assert_eq!(m["units"], 3);
    assert!(
        (m["delta_spent"].as_f64().unwrap() - 1e-9).abs() < 1e-18,
        "{m}"
    );
    let (s, _) = app.get("/v1/datasets/empty").await;
    assert_eq!(s, StatusCode::OK);
    // Its past was gated by the old rule, which is not a filter: no statement is made for it
    // (issue 31, row 5); a ledger that had no charges then has a statement like any other.
    for (id, validity) in [
        ("gauss", "unknown"),
        ("mixed", "unknown"),
        ("empty", "unless_raised"),
    ] {
        let (_, d) = app.get(&format!("/v1/datasets/{id}")).await;
        assert_eq!(d["statement"]["validity"], validity, "{id}: {d}");
        let (_, r) = app.get(&format!("/v1/datasets/{id}/report")).await;
        assert_eq!(r["statement"]["validity"], validity, "{id}: {r}");
    }
    // The idempotent replay of an old charge still answers with its first response.
    let (s, _) = app
        .call(
            "POST",
            "/v1/datasets/gauss/charges",
            Some(&json!({"event": {"type": "gaussian", "noise_multiplier": 2.0}, "label": "q1"})),
            &[("idempotency-key", "g1")],
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    // New charges gate under the filter: what remains of μ = 2 is √(4 − 1.69).
    let (s, b) = app
        .post(
            "/v1/datasets/gauss/charges",
            json!({"event": {"type": "gdp", "mu": 1.519}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (s, _) = app
        .post(
            "/v1/datasets/gauss/charges",
            json!({"event": {"type": "gdp", "mu": 0.1}}),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
}

/// The issue's slow input: Poisson sampling at 1e-300 around a tiny σ (and its relatives) gets an
/// answer within a second, on a dataset that stays usable. (It spent minutes in the CLT quadrature,
/// whose interval grew with μ = 1/σ.)
#[tokio::test]
async fn tiny_sampling_rates_around_tiny_sigmas_answer_within_a_second() {
    let app = spawn_app().await;
    app.post("/v1/datasets", json!({"id": "t", "budget": {"mu": 2.0}}))
        .await;
    for (q, sigma) in [
        (1e-300, 1e-3),
        (1e-300, 1e-160),
        (1e-200, 1e-6),
        (1e-30, 0.01),
        (0.5, 1e-160),
        (1e-300, 1e-300),
    ] {
        let ev = json!({"type": "poisson_sampled", "sampling_rate": q,
                        "event": {"type": "gaussian", "noise_multiplier": sigma}});
        for kind in ["charges/preview", "charges"] {
            let t = std::time::Instant::now();
            let (s, b) = app
                .post(&format!("/v1/datasets/t/{kind}"), json!({"event": ev}))
                .await;
            assert!(
                t.elapsed() < std::time::Duration::from_secs(1),
                "q={q:e} σ={sigma:e} {kind}: {:?}",
                t.elapsed()
            );
            assert!(s.is_success() || s.is_client_error(), "{s}: {b}");
        }
    }
    let (s, d) = app.get("/v1/datasets/t").await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert!(d["mu_spent"].as_f64().unwrap() <= 2.0 * (1.0 + 1e-9));
}

/// A request abandoned while its accounting runs (here: the request timeout fires) stops the
/// computation at its next check instead of leaving it on a core.
#[tokio::test]
async fn an_abandoned_computation_stops() {
    let app = crate::api::spawn_app_with(Limits {
        request_timeout: std::time::Duration::from_millis(300),
        ..Limits::default()
    })
    .await;
    // Thousands of distinct numerical events on a fine grid: seconds of convolutions.
    let events: Vec<Value> = (0..4000)
        .map(|i| json!({"type": "laplace", "noise_multiplier": 5.0 + i as f64 * 1e-3}))
        .collect();
    let (s, b) = app
        .post(
            "/v1/accountant/compose",
            json!({"events": events, "grid_step": 1e-5}),
        )
        .await;
    assert_eq!(s, StatusCode::REQUEST_TIMEOUT, "{b}");
    let stopped = || async {
        let (_, m) = app.get("/metrics").await;
        let m = m.as_str().unwrap_or_default().to_owned();
        m.lines().any(|l| {
            l.starts_with("privacy_ledger_computations_stopped_total") && l.contains("abandoned")
        })
    };
    let t = std::time::Instant::now();
    while !stopped().await {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(20),
            "the abandoned computation did not stop"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Calibration asks the gate itself: the calibrated unit is admitted, one step beyond is not — for a
/// count and a noise multiplier, on a unit with a δ part (a DP-SGD chunk) and on a spent budget.
#[tokio::test]
async fn calibration_agrees_with_the_gate_exactly() {
    let step = |sigma: f64| {
        json!({"type": "poisson_sampled", "sampling_rate": 0.02,
               "event": {"type": "gaussian", "noise_multiplier": sigma}})
    };
    let chunk = |count: f64, sigma: f64| json!({"type": "self_composed", "count": count, "event": step(sigma)});
    let fresh = |n: u32| async move {
        let app = spawn_app().await;
        app.post(
            "/v1/datasets",
            json!({"id": "c", "budget": {"mu": 1.0, "delta": 1e-8}}),
        )
        .await;
        // Something spent first: the filter's remaining μ is what the calibration must fill.
        for _ in 0..n {
            app.post(
                "/v1/datasets/c/charges",
                json!({"event": {"type": "gdp", "mu": 0.5}}),
            )
            .await;
        }
        app
    };
    // Largest count of steps at σ = 1.2.
    let app = fresh(1).await;
    let (s, c) = app
        .post(
            "/v1/datasets/c/calibrate",
            json!({"event": chunk(1.0, 1.2), "free_parameter": "count"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{c}");
    let n = c["value"].as_f64().unwrap();
    assert!(n >= 2.0, "{c}");
    assert!(c["delta"].as_f64().unwrap() <= 1e-8, "{c}");
    let (s, b) = app
        .post(
            "/v1/datasets/c/charges/preview",
            json!({"event": chunk(n + 1.0, 1.2)}),
        )
        .await;
    assert_eq!(
        (s, b["admitted"].as_bool()),
        (StatusCode::OK, Some(false)),
        "{b}"
    );
    let (s, b) = app
        .post("/v1/datasets/c/charges", json!({"event": c["event"]}))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(b["charge"]["unit"]["mu"], c["mu"], "{b}");
    // Smallest σ for 50 steps.
    let app = fresh(1).await;
    let (s, c) = app
        .post(
            "/v1/datasets/c/calibrate",
            json!({"event": chunk(50.0, 1.0), "free_parameter": "noise_multiplier"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{c}");
    let sigma = c["value"].as_f64().unwrap();
    let (_, b) = app
        .post(
            "/v1/datasets/c/charges/preview",
            json!({"event": chunk(50.0, sigma * (1.0 - 2e-6))}),
        )
        .await;
    assert_eq!(b["admitted"], false, "σ just below the calibrated one: {b}");
    let (s, b) = app
        .post("/v1/datasets/c/charges", json!({"event": c["event"]}))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    // A spent budget: nothing fits, and the calibration says so.
    let app = fresh(4).await;
    let (s, c) = app
        .post(
            "/v1/datasets/c/calibrate",
            json!({"event": chunk(1.0, 1.2), "free_parameter": "count"}),
        )
        .await;
    assert_eq!((s, c["value"].as_f64()), (StatusCode::OK, Some(0.0)), "{c}");
}

/// Gaussian-only workloads admit exactly what the old gate admitted: for Gaussian units the
/// filter's Σμᵢ² ≤ μ_B² is the exact composition's √Σμᵢ² ≤ μ_B (Dong, Roth & Su, Cor. 2), so every
/// decision of a long mixed sequence of gdp, gaussian and self-composed Gaussian charges matches the
/// closed form, including a charge of exactly the remaining μ.
#[tokio::test]
async fn gaussian_only_workloads_admit_exactly_what_they_did_before() {
    let app = spawn_app().await;
    app.post("/v1/datasets", json!({"id": "g", "budget": {"mu": 3.0}}))
        .await;
    // (event, its μ under add/remove: 1/σ per Gaussian, √n/σ for n of them)
    let units: Vec<(Value, f64)> = vec![
        (json!({"type": "gdp", "mu": 1.0}), 1.0),
        (json!({"type": "gaussian", "noise_multiplier": 0.5}), 2.0),
        (json!({"type": "gaussian", "noise_multiplier": 2.0}), 0.5),
        (json!({"type": "gdp", "mu": 2.5}), 2.5),
        (
            json!({"type": "self_composed", "count": 4, "event": {"type": "gaussian", "noise_multiplier": 4.0}}),
            0.5,
        ),
        (json!({"type": "gdp", "mu": 1.2}), 1.2),
        (json!({"type": "gdp", "mu": 0.9}), 0.9),
        (json!({"type": "gdp", "mu": 0.3}), 0.3),
    ];
    let mut sum_sq = 0.0f64;
    for (ev, mu) in units {
        let fits = sum_sq + mu * mu <= 9.0 * (1.0 + 1e-9);
        let (s, b) = app
            .post("/v1/datasets/g/charges", json!({"event": ev}))
            .await;
        let want = if fits {
            StatusCode::CREATED
        } else {
            StatusCode::CONFLICT
        };
        assert_eq!(s, want, "{ev} with sum {sum_sq}: {b}");
        if fits {
            sum_sq += mu * mu;
            assert_eq!(b["charge"]["unit"]["delta"], 0.0);
        }
    }
    // 1 + 4 + 0.25 + 0.25 + 1.44 + 0.81 + 0.09 = 7.84 spent (2.5 was rejected); exactly the
    // remaining μ = √1.16 fits.
    assert!((sum_sq - 7.84).abs() < 1e-12);
    let (_, d) = app.get("/v1/datasets/g").await;
    let rest = d["remaining_mu"].as_f64().unwrap();
    assert!((rest - 1.16f64.sqrt()).abs() < 1e-12, "{d}");
    let (s, b) = app
        .post(
            "/v1/datasets/g/charges",
            json!({"event": {"type": "gdp", "mu": rest}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    // Full, up to the gate's tolerance (relative 1e-9 on μ: μ² may exceed 9 by 1.8e-8, so μ = 1e-4
    // would still pass): μ = 1e-3 (μ² = 1e-6) no longer fits.
    let (s, _) = app
        .post(
            "/v1/datasets/g/charges",
            json!({"event": {"type": "gdp", "mu": 1e-3}}),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
}

/// A ledger written by the previous release (schema version 2: the filter, no runs or
/// reservations; tests/fixtures/ledger-v2.sqlite, made by tests/fixtures/make_ledger_v2.sh) opens,
/// keeps its filter state, and takes runs, reservations and releases.
#[tokio::test]
async fn a_version_2_ledger_is_migrated() {
    let app = app_over_fixture("ledger-v2.sqlite").await;
    // What the previous release stored: 3 units (σ = 2, a 100-step DP-SGD run with δᵢ = 1e-9, a
    // Laplace at δᵢ = 0) after a budget raise to (2.5, 1e-6).
    let (s, d) = app.get("/v1/datasets/train").await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert_eq!(
        (d["units"].as_i64(), d["reserved_units"].as_i64()),
        (Some(3), Some(0))
    );
    let mu = d["mu_spent"].as_f64().unwrap();
    assert!(
        mu >= 0.433_666_078_387_123_07f64.sqrt() && mu < 0.6586,
        "{d}"
    );
    assert!(
        (d["delta_spent"].as_f64().unwrap() - 1e-9).abs() < 1e-18,
        "{d}"
    );
    assert_eq!(d["budget"], json!({"mu": 2.5, "delta": 1e-6}));
    let (_, e) = app.get("/v1/datasets/train/charges").await;
    let kinds: Vec<&str> = e["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["charge", "charge", "budget", "charge"]);
    assert_eq!(e["items"][0]["charge"]["status"], "committed");
    // An old charge replays under its key, and cannot be released (it was never reserved).
    let old = json!({"event": {"type": "gaussian", "noise_multiplier": 2.0}, "label": "q1"});
    let (s, _) = app
        .call(
            "POST",
            "/v1/datasets/train/charges",
            Some(&old),
            &[("idempotency-key", "t1")],
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let cid = e["items"][0]["charge"]["id"].as_str().unwrap();
    let (s, b) = app
        .post(
            &format!("/v1/datasets/train/charges/{cid}/release"),
            json!({"outputs_released": false}),
        )
        .await;
    assert_eq!(
        (s, b["error"].as_str()),
        (StatusCode::CONFLICT, Some("not_reserved")),
        "{b}"
    );
    // The new features work on it: a run's chunk reserved, then released.
    let (s, run) = app
        .post(
            "/v1/datasets/train/runs",
            json!({"event": {"type": "gdp", "mu": 0.1}, "steps": 4, "chunk_steps": 2}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{run}");
    let uri = format!(
        "/v1/datasets/train/runs/{}/chunks",
        run["id"].as_str().unwrap()
    );
    let (s, c) = app.post(&uri, json!({"reserve": true})).await;
    assert_eq!(s, StatusCode::CREATED, "{c}");
    let rel = format!(
        "/v1/datasets/train/charges/{}/release",
        c["charge"]["id"].as_str().unwrap()
    );
    let (s, _) = app.post(&rel, json!({"outputs_released": false})).await;
    assert_eq!(s, StatusCode::OK);
    let (_, d2) = app.get("/v1/datasets/train").await;
    assert_eq!(d2["units"], 3);
    assert_eq!(
        d2["mu_spent"], d["mu_spent"],
        "a refund restores the sums exactly here"
    );
}

/// A version-1 charge is recognised by its stored response's missing certificate, parsed: a
/// caller's metadata holding `"unit"` does not pass it off as a certified one (issue 31, row 5).
/// And a database written by a newer release is refused, so an older replica cannot write rows
/// without what this one relies on.
#[tokio::test]
async fn version_1_charges_are_recognised_whatever_their_metadata_and_newer_schemas_are_refused() {
    let dir = temp_dir("migrate-meta");
    let db = dir.join("ledger.db");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    std::fs::copy(fixture.join("ledger-v1.sqlite"), &db).unwrap();
    let url = format!("sqlite://{}", db.display());
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query(
        r#"UPDATE entries SET response = replace(response, '"metadata":null', '"metadata":{"unit":"rows"}')"#,
    )
    .execute(&raw)
    .await
    .unwrap();
    let with_unit: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM entries WHERE dataset_id = 'gauss' AND response LIKE '%"unit":"rows"%'"#,
    )
    .fetch_one(&raw)
    .await
    .unwrap();
    assert_eq!(with_unit, 2);
    raw.close().await;
    let app =
        crate::api::TestApp::over_store(open_store(&url).await.unwrap(), Limits::default(), dir)
            .await;
    let (_, d) = app.get("/v1/datasets/gauss").await;
    assert_eq!(d["statement"]["validity"], "unknown", "{d}");
    // A schema newer than this release's: refused with the reason.
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query("INSERT INTO schema_version (version) VALUES (99)")
        .execute(&raw)
        .await
        .unwrap();
    raw.close().await;
    let err = open_store(&url)
        .await
        .err()
        .expect("a newer schema is refused");
    assert!(err.to_string().contains("newer than this release"), "{err}");
}
