//! What a dataset says at a glance: the used share in the filter's terms (never above 100 % for a
//! budget spent exactly), what each 201 leaves, budgets given as (ε, δ), the headline (ε figures,
//! units like the last committed one, runs in progress, the caller's share, the forecast) and a
//! partitioned dataset's blocks.

use crate::api::{spawn_app, TestApp};
use axum::http::StatusCode;
use serde_json::{json, Value};

/// Stored sums are rounded up at each step: a few ulps above the exact value.
const SUM_TOLERANCE: f64 = 1e-12;

fn gdp(mu: f64) -> Value {
    json!({"type": "gdp", "mu": mu})
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn near(x: f64, want: f64) -> bool {
    (x - want).abs() <= SUM_TOLERANCE * want.abs().max(1.0)
}

async fn charge(app: &TestApp, id: &str, body: Value) -> Value {
    let (s, b) = app.post(&format!("/v1/datasets/{id}/charges"), body).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    b
}

/// The exact μ_B of an (ε, δ) target with δ_B = s: the root of δ_μ(ε) = δ − s(1 + τ), divided by
/// 1 + τ (τ = 1e-9, the gate's tolerance), with δ_μ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong,
/// Roth & Su, Corollary 1). Computed by mpmath at 50 digits (`findroot`), an oracle independent of
/// the service's bisection:
/// ```text
/// d = lambda m, e: ncdf(-e/m + m/2) - exp(e)*ncdf(-e/m - m/2)
/// findroot(lambda m: d(m, 1) - (1e-5 - 1e-10*(1 + 1e-9)), 0.268) / (1 + 1e-9)
/// ```
#[allow(clippy::excessive_precision)] // mpmath's digits, as printed
const ROOT_EPS1_DELTA1E5: f64 = 0.268_050_961_501_355_48;
/// The same for ε = 2, δ = 1e-6, δ_B = 1e-9.
#[allow(clippy::excessive_precision)]
const ROOT_EPS2_DELTA1E6: f64 = 0.448_314_917_869_262_95;
/// How far below the exact root μ_B may be: the service's bisection stops at a relative width of
/// 2⁻⁵⁰ and rounds down by a few ulps (≈ 1e-15); 1e-12 leaves room and is far below any
/// privacy-relevant difference.
const ROOT_REL: f64 = 1e-12;

fn just_below(mu: f64, root: f64) -> bool {
    mu <= root && mu >= root * (1.0 - ROOT_REL)
}

/// μ_B = 1 spent by units of 0.6 and 0.8 (0.36 + 0.64 = 1 exactly): every view says 100 %, not
/// 100.000…1 %, and exhausted. Each 201 carries what is left after it (0.8, then 0). Lowering the
/// budget to 0.5 reads 400 %: that overdraft of the new budget is real.
#[tokio::test]
async fn an_exactly_spent_budget_reads_one_and_each_201_says_what_is_left() {
    let app = spawn_app().await;
    app.dataset("d", 1.0).await;
    let a = charge(&app, "d", json!({"event": gdp(0.6)})).await;
    let r = &a["remaining"];
    assert!(near(f(&r["mu"]), 0.8) && f(&r["mu"]) <= 0.8, "{a}");
    assert!(
        near(f(&r["used_fraction"]), 0.36) && f(&r["used_fraction"]) >= 0.36,
        "{a}"
    );
    assert_eq!(r["exhausted"], false);
    assert!(r["share"].is_null(), "no quotas: {a}");
    let b = charge(&app, "d", json!({"event": gdp(0.8)})).await;
    let r = &b["remaining"];
    assert_eq!((f(&r["mu"]), f(&r["used_fraction"])), (0.0, 1.0), "{b}");
    assert_eq!(r["exhausted"], true);
    let (_, d) = app.get("/v1/datasets/d").await;
    assert_eq!(
        (f(&d["used_fraction"]), &d["exhausted"]),
        (1.0, &json!(true)),
        "{d}"
    );
    let (s, h) = app.get("/v1/datasets/d/headline").await;
    assert_eq!(s, StatusCode::OK, "{h}");
    assert_eq!(f(&h["used_fraction"]), 1.0, "{h}");
    // Spending within the gate's tolerance of the budget is shown as the budget.
    assert_eq!(f(&h["mu_spent"]), 1.0, "{h}");
    assert_eq!(h["exhausted"], true);
    assert_eq!(f(&h["forecast"]["days_left"]), 0.0, "{h}");
    assert!(
        h["used_meaning"].as_str().unwrap().contains("add up"),
        "{h}"
    );

    let (s, b) = app
        .call(
            "PATCH",
            "/v1/datasets/d",
            Some(&json!({"budget": {"mu": 0.5}})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let u = f(&b["used_fraction"]);
    assert!(u >= 4.0 && near(u, 4.0), "{b}");
}

/// A budget given as (ε, δ) = (1, 1e-5) becomes the largest μ_B whose statement, with the gate's
/// tolerance and the δ_B slack, is (1, 1e-5)-DP: checked against the root found by mpmath. The dataset keeps and shows both; the headline
/// gives ε at the target's δ (at most 1). A change back to μ drops the target.
#[tokio::test]
async fn a_budget_given_as_epsilon_delta_is_the_largest_mu_that_meets_it() {
    let app = spawn_app().await;
    let (s, d) = app
        .post(
            "/v1/datasets",
            json!({"id": "e", "budget": {"epsilon": 1.0, "delta": 1e-5}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{d}");
    let mu_b = f(&d["budget"]["mu"]);
    let slack = f(&d["budget"]["delta"]);
    assert_eq!(slack, 1e-10, "the default slack: {d}");
    let t = &d["budget_target"];
    assert_eq!((f(&t["epsilon"]), f(&t["delta"])), (1.0, 1e-5), "{d}");
    assert_eq!((f(&t["mu"]), f(&t["delta_slack"])), (mu_b, slack), "{d}");
    // The statement δ_B(1 + τ) + δ_{μ_B(1+τ)}(1) ≤ 1e-5, tightly: μ_B is the exact root, from
    // below (mpmath: the statement's δ at this μ_B is 1e-5 − 7.5e-19).
    assert!(just_below(mu_b, ROOT_EPS1_DELTA1E5), "{d}");
    // Gomez, Kulynych et al. ("(ε,δ) considered harmful"): μ ≈ 0.268 for (1, 1e-5).
    assert!((0.268..0.2681).contains(&mu_b), "{d}");

    let (_, h) = app.get("/v1/datasets/e/headline").await;
    assert_eq!(f(&h["epsilon"]["delta"]), 1e-5, "{h}");
    let eps = f(&h["epsilon"]["budget"]);
    assert!(eps <= 1.0 && eps > 0.9999, "{h}");
    assert_eq!(f(&h["budget_target"]["epsilon"]), 1.0, "{h}");
    // Nothing spent: the rest allows a single release of the whole budget (the statement adds
    // the gate's 1e-9 tolerance, so its ε is a hair larger).
    let rest = f(&h["epsilon"]["remaining"]);
    assert!(rest <= eps && rest > eps * (1.0 - 1e-8), "{h}");

    // Changed to another target, then back to μ.
    let patch = |b: Value| {
        let app = &app;
        async move {
            app.call("PATCH", "/v1/datasets/e", Some(&json!({"budget": b})), &[])
                .await
        }
    };
    let (s, b) = patch(json!({"epsilon": 2.0, "delta": 1e-6, "delta_slack": 1e-9})).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(f(&b["budget"]["delta"]), 1e-9, "{b}");
    let mu2 = f(&b["budget"]["mu"]);
    assert!(just_below(mu2, ROOT_EPS2_DELTA1E6), "{b}");
    assert_eq!(f(&b["budget_target"]["epsilon"]), 2.0, "{b}");
    let (s, b) = patch(json!({"mu": 0.5})).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert!(b.get("budget_target").is_none(), "{b}");
    let (_, d) = app.get("/v1/datasets/e").await;
    assert!(d.get("budget_target").is_none(), "{d}");

    // Bad targets name the field.
    for (budget, path) in [
        (json!({"epsilon": 1.0}), "$.budget.delta"),
        (
            json!({"epsilon": 1.0, "delta": 1e-5, "mu": 1.0}),
            "$.budget.mu",
        ),
        (json!({"epsilon": -1.0, "delta": 1e-5}), "$.budget.epsilon"),
        (json!({"epsilon": 1.0, "delta": 0.0}), "$.budget.delta"),
        (
            json!({"epsilon": 1.0, "delta": 1e-9, "delta_slack": 1e-9}),
            "$.budget.delta_slack",
        ),
        (json!({"epsilon": 1e9, "delta": 1e-5}), "$.budget.epsilon"),
    ] {
        let (s, b) = app
            .post("/v1/datasets", json!({"id": "x", "budget": budget}))
            .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
        assert_eq!(b["details"]["path"], path, "{b}");
    }
}

/// The headline's "more like the last one" counts units like the last *committed* charge, so a
/// reservation (of another size) does not swing it; a run in progress shows what it still needs;
/// a quota holder sees their own share; the forecast measures the week's rate.
#[tokio::test]
async fn the_headline_counts_units_like_the_last_committed_one_and_shows_runs_and_shares() {
    let app = spawn_app().await;
    app.dataset("d", 2.0).await;
    // 0.1² = 0.01 of 4: committed.
    charge(&app, "d", json!({"event": gdp(0.1), "label": "q"})).await;
    let (_, h) = app.get("/v1/datasets/d/headline").await;
    let m = &h["more_like_last"];
    assert_eq!((f(&m["mu"]), m["label"].as_str()), (0.1, Some("q")), "{h}");
    // (4 − 0.01)/0.01 = 399, less one where the roundings up of 0.1² leave it just short.
    let count = m["count"].as_u64().unwrap();
    assert!(count == 398 || count == 399, "{h}");
    // A reservation of 1.0: the reference stays the committed unit; the count shrinks by the
    // reservation's μ² only ((4 − 0.01 − 1)/0.01 = 299, or one less).
    charge(&app, "d", json!({"event": gdp(1.0), "reserve": true})).await;
    let (_, h) = app.get("/v1/datasets/d/headline").await;
    let m = &h["more_like_last"];
    assert_eq!(f(&m["mu"]), 0.1, "{h}");
    assert_eq!(m["count"].as_u64(), Some(count - 100), "{h}");
    assert_eq!(h["reserved_units"], 1, "{h}");
    // Spent today: Σμᵢ² = 1.01 over at most a day, so the rate is at least 1.01 per day and the
    // rest (2.99) lasts at most 2.99/1.01 days.
    let fc = &h["forecast"];
    assert!(f(&fc["mu_sq_per_day"]) >= 1.01, "{h}");
    assert!(f(&fc["days_left"]) <= 2.99 / 1.01 * (1.0 + 1e-9), "{h}");
    assert!(fc["exhausted_on"].is_string(), "{h}");

    // A run of 4 chunks of μ = 0.5 with one taken: three to go, 3·0.25 = 0.75 = μ_to_finish².
    let (s, run) = app
        .post(
            "/v1/datasets/d/runs",
            json!({"event": gdp(0.25), "steps": 16, "chunk_steps": 4, "label": "train"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{run}");
    let id = run["id"].as_str().unwrap();
    let (s, b) = app
        .call(
            "POST",
            &format!("/v1/datasets/d/runs/{id}/chunks"),
            None,
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (_, h) = app.get("/v1/datasets/d/headline").await;
    let runs = h["runs_in_progress"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{h}");
    assert_eq!(
        (runs[0]["chunks_left"].as_u64(), runs[0]["label"].as_str()),
        (Some(3), Some("train"))
    );
    let need = f(&runs[0]["mu_to_finish"]);
    assert!(near(need, 0.75f64.sqrt()) && need >= 0.75f64.sqrt(), "{h}");
    assert_eq!(runs[0]["fits"], true, "{h}");
    // The reference is now the run's chunk (committed).
    assert!(near(f(&h["more_like_last"]["mu"]), 0.5), "{h}");

    // A quota holder sees their own share.
    let (s, q) = app
        .call(
            "PUT",
            "/v1/datasets/d/quotas/alice",
            Some(&json!({"mu": 0.6, "delta": 0.0})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{q}");
    let alice = app.bearer("alice", "analyst").await;
    let (s, h) = app
        .call(
            "GET",
            "/v1/datasets/d/headline",
            None,
            &[("authorization", &alice)],
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{h}");
    let share = &h["share"];
    assert_eq!(
        (share["holder"].as_str(), f(&share["mu"])),
        (Some("alice"), 0.6),
        "{h}"
    );
    assert_eq!(f(&share["used_fraction"]), 0.0, "{h}");
    // The admin (no quota of their own) sees the unallocated share.
    let (_, h) = app.get("/v1/datasets/d/headline").await;
    assert_eq!(h["share"]["holder"], "*", "{h}");

    // Bad parameters name themselves.
    for (q, path) in [
        ("delta=0", "query.delta"),
        ("delta=x", "query.delta"),
        ("colour=red", "query.colour"),
        ("blocks=a", "query.from"),
    ] {
        let (s, b) = app.get(&format!("/v1/datasets/d/headline?{q}")).await;
        assert!(s.is_client_error(), "{q}: {b}");
        assert_eq!(b["details"]["path"], path, "{q}: {b}");
    }
}

/// A daily-partitioned dataset's headline is its tightest block's, with every block's used share
/// (the calendar): a block spent exactly reads 1 and exhausted, one half-spent (in μ²) 0.5.
#[tokio::test]
async fn a_partitioned_headline_is_its_tightest_block_with_every_blocks_share() {
    let app = spawn_app().await;
    let (s, b) = app
        .post(
            "/v1/datasets",
            json!({"id": "ev", "budget": {"mu": 1.0},
                   "partitioning": {"type": "time", "width": "day", "time_zone": "UTC"}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let day = |d: u32| format!("2026-11-{d:02}");
    for (d, mu) in [(20, 1.0), (21, 0.5f64.sqrt()), (22, 0.1)] {
        let (s, b) = app
            .post(
                "/v1/charges",
                json!({"datasets": [{"id": "ev", "blocks": [day(d)]}], "event": gdp(mu)}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
        let r = &b["charge"]["ledgers"][0]["remaining"];
        assert_eq!(r["exhausted"], d == 20, "{b}");
    }
    let (s, h) = app.get("/v1/datasets/ev/headline").await;
    assert_eq!(s, StatusCode::OK, "{h}");
    let blocks = &h["blocks"];
    let cells = blocks["items"].as_array().unwrap();
    assert_eq!(cells.len(), 3, "{h}");
    let used: Vec<f64> = cells.iter().map(|c| f(&c["used_fraction"])).collect();
    assert_eq!(used[0], 1.0, "{h}");
    assert!(near(used[1], 0.5) && used[1] >= 0.5, "{h}");
    assert!(near(used[2], 0.01), "{h}");
    assert_eq!(blocks["exhausted"], 1, "{h}");
    // The tightest block that may still be charged decides: the exhausted day has nothing left.
    assert_eq!(
        (blocks["tightest"].as_str(), h["block"].as_str()),
        (Some("2026-11-20"), Some("2026-11-20")),
        "{h}"
    );
    assert_eq!(
        (f(&h["used_fraction"]), &h["exhausted"]),
        (1.0, &json!(true)),
        "{h}"
    );
    // Over a range without the exhausted day: the 21st decides.
    let (_, h) = app
        .get("/v1/datasets/ev/headline?from=2026-11-21T00:00:00Z&to=2026-11-23T00:00:00Z")
        .await;
    assert_eq!(h["block"], "2026-11-21", "{h}");
    assert!(near(f(&h["remaining_mu"]), 0.5f64.sqrt()), "{h}");
}

/// The value of the gauge `name` with exactly the labels `labels` (`k="v"` joined by commas) in a
/// Prometheus text exposition.
fn gauge(text: &str, name: &str, labels: &str) -> Option<f64> {
    let head = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&head))
        .map(|v| match v.trim() {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap(),
        })
}

/// `/metrics` has the budget gauges, with HELP: per dataset (used share, remaining μ, units,
/// reservations, exhausted, days left), per quota share, and a partitioned dataset's blocks.
#[tokio::test]
async fn metrics_have_budget_gauges_per_dataset_share_and_blocks() {
    let app = spawn_app().await;
    // Gauges are process-wide: a name no other test uses.
    let id = format!("g{}", uuid::Uuid::new_v4().simple());
    app.dataset(&id, 1.0).await;
    let (s, q) = app
        .call(
            "PUT",
            &format!("/v1/datasets/{id}/quotas/alice"),
            Some(&json!({"mu": 0.6, "delta": 0.0})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{q}");
    charge(&app, &id, json!({"event": gdp(0.6)})).await;
    charge(&app, &id, json!({"event": gdp(0.1), "reserve": true})).await;
    // A partitioned dataset with one block spent exactly.
    let pid = format!("p{}", uuid::Uuid::new_v4().simple());
    let (s, b) = app
        .post(
            "/v1/datasets",
            json!({"id": pid, "budget": {"mu": 1.0},
                   "partitioning": {"type": "time", "width": "day", "time_zone": "UTC"}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (s, b) = app
        .post(
            "/v1/charges",
            json!({"datasets": [{"id": pid, "blocks": ["2026-11-20"]}], "event": gdp(1.0)}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (s, m) = app.get("/metrics").await;
    assert_eq!(s, StatusCode::OK);
    let text = m.as_str().unwrap();
    let l = format!("dataset=\"{id}\"");
    let used = gauge(text, "privacy_ledger_budget_used_ratio", &l).expect(text);
    assert!(near(used, 0.37) && used >= 0.37, "{used}");
    let rest = gauge(text, "privacy_ledger_budget_remaining_mu", &l).unwrap();
    assert!(
        near(rest, 0.63f64.sqrt()) && rest <= 0.63f64.sqrt(),
        "{rest}"
    );
    assert_eq!(gauge(text, "privacy_ledger_budget_units", &l), Some(2.0));
    assert_eq!(
        gauge(text, "privacy_ledger_budget_reserved_units", &l),
        Some(1.0)
    );
    assert_eq!(
        gauge(text, "privacy_ledger_budget_exhausted", &l),
        Some(0.0)
    );
    let days = gauge(text, "privacy_ledger_budget_days_left", &l).unwrap();
    assert!(days.is_finite() && days >= 0.0, "{days}");
    // The admin holds no quota: the unallocated share (μ² = 1 − 0.36 = 0.64) paid for both
    // units, 0.37 of 0.64; alice's quota is untouched.
    let star = gauge(
        text,
        "privacy_ledger_quota_used_ratio",
        &format!("{l},holder=\"*\""),
    )
    .expect(text);
    assert!(near(star, 0.37 / 0.64) && star >= 0.37 / 0.64, "{star}");
    let alice = gauge(
        text,
        "privacy_ledger_quota_used_ratio",
        &format!("{l},holder=\"alice\""),
    );
    assert_eq!(alice, Some(0.0), "{text}");
    let pl = format!("dataset=\"{pid}\"");
    assert_eq!(
        gauge(text, "privacy_ledger_blocks_used_ratio_max", &pl),
        Some(1.0)
    );
    assert_eq!(
        gauge(text, "privacy_ledger_blocks_exhausted", &pl),
        Some(1.0)
    );
    assert_eq!(gauge(text, "privacy_ledger_blocks", &pl), Some(1.0));
    // Every metric the deploy/ alerting rules and Grafana dashboard use is one the service
    // serves, with HELP.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let re = regex::Regex::new(r"privacy_ledger_[a-z_]+").unwrap();
    for file in [
        "prometheus/privacy-ledger-alerts.yaml",
        "grafana/privacy-ledger-budgets.json",
    ] {
        let body = std::fs::read_to_string(root.join(file)).unwrap();
        for m in re.find_iter(&body) {
            let name = m.as_str();
            assert!(
                text.contains(&format!("# HELP {name} ")),
                "{file} uses {name}, which /metrics does not serve"
            );
        }
    }
    for name in [
        "privacy_ledger_budget_used_ratio",
        "privacy_ledger_budget_remaining_mu",
        "privacy_ledger_budget_days_left",
        "privacy_ledger_quota_used_ratio",
    ] {
        assert!(text.contains(&format!("# HELP {name} ")), "{name}");
    }
}
