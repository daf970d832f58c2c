//! The HTTP API through the real router on a temporary SQLite file.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use privacy_ledger::app::{open_store, state_over};
use privacy_ledger::http::{router, Limits};
use serde_json::{json, Value};
use std::path::PathBuf;
use tower::ServiceExt;

pub struct TestApp {
    pub router: Router,
    pub dir: PathBuf,
    /// An admin token every call sends unless it names its own `authorization`.
    pub token: String,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "privacy-ledger-{tag}-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(Limits::default()).await
}

pub async fn spawn_app_with(limits: Limits) -> TestApp {
    let dir = temp_dir("api");
    let url = format!("sqlite://{}", dir.join("ledger.db").display());
    let store = open_store(&url).await.unwrap();
    TestApp::over_store(store, limits, dir).await
}

impl TestApp {
    /// An app over a store (its temporary directory is removed on drop), with an admin token.
    pub async fn over_store(
        store: std::sync::Arc<dyn privacy_ledger::store::Store>,
        limits: Limits,
        dir: PathBuf,
    ) -> Self {
        Self::over_ledgers(privacy_ledger::ledger::Ledgers::new(store), limits, dir).await
    }

    /// An app over ledgers (e.g. with OIDC), with an admin token.
    pub async fn over_ledgers(
        ledgers: privacy_ledger::ledger::Ledgers,
        limits: Limits,
        dir: PathBuf,
    ) -> Self {
        let st = state_over(
            ledgers,
            privacy_ledger::accountant::params::GridStep::new(1e-4).unwrap(),
        );
        let token = st
            .ledgers
            .create_token(
                &privacy_ledger::ledger::principal::Actor::operator(),
                "tests",
                "admin",
                None,
            )
            .await
            .unwrap()
            .secret;
        TestApp {
            router: router(st, limits),
            dir,
            token,
        }
    }

    pub async fn call(
        &self,
        method: &str,
        uri: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> (StatusCode, Value) {
        // The client's address, as `serve` gives it (the audit log records it).
        let mut req =
            Request::builder()
                .method(method)
                .uri(uri)
                .extension(axum::extract::ConnectInfo(std::net::SocketAddr::from((
                    [192, 0, 2, 7],
                    40000,
                ))));
        if !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        {
            req = req.header("authorization", format!("Bearer {}", self.token));
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = match body {
            Some(b) => req
                .header("content-type", "application/json")
                .body(Body::from(b.to_string())),
            None => req.body(Body::empty()),
        }
        .unwrap();
        let res = self.router.clone().oneshot(req).await.unwrap();
        let status = res.status();
        let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap();
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, v)
    }

    pub async fn post(&self, uri: &str, body: Value) -> (StatusCode, Value) {
        self.call("POST", uri, Some(&body), &[]).await
    }

    pub async fn get(&self, uri: &str) -> (StatusCode, Value) {
        self.call("GET", uri, None, &[]).await
    }

    /// A token for principal `name` with global role `role`, made through the API; its
    /// `Authorization` header value.
    pub async fn bearer(&self, name: &str, role: &str) -> String {
        let (s, b) = self
            .post("/v1/tokens", json!({"name": name, "role": role}))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
        format!("Bearer {}", b["bearer_token"].as_str().unwrap())
    }

    pub async fn dataset(&self, id: &str, mu: f64) {
        let (s, b) = self
            .post("/v1/datasets", json!({"id": id, "budget": {"mu": mu}}))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
    }
}

fn gdp(mu: f64) -> Value {
    json!({"event": {"type": "gdp", "mu": mu}})
}

#[tokio::test]
async fn creating_a_dataset_returns_it_and_a_second_create_conflicts() {
    let app = spawn_app().await;
    let (s, b) = app
        .post(
            "/v1/datasets",
            json!({"id": "ds-1", "budget": {"mu": 2.0, "delta": 1e-11},
                   "neighboring_relation": "replace_one", "description": "survey"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    assert_eq!(b["id"], "ds-1");
    assert_eq!(b["budget"]["mu"], 2.0);
    assert_eq!(b["budget"]["delta"], 1e-11);
    assert_eq!(b["neighboring_relation"], "replace_one");
    assert_eq!(b["charges"], 0);
    let (s, b) = app
        .post("/v1/datasets", json!({"id": "ds-1", "budget": {"mu": 1.0}}))
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(b["error"], "already_exists");
}

#[tokio::test]
async fn the_default_budget_delta_is_documented_and_at_most_1e_10() {
    let app = spawn_app().await;
    app.dataset("d", 1.0).await;
    let (_, b) = app.get("/v1/datasets/d").await;
    assert_eq!(b["budget"]["delta"], 1e-10);
}

#[tokio::test]
async fn invalid_dataset_bodies_name_the_field() {
    let app = spawn_app().await;
    for (body, path) in [
        (json!({"id": "bad id!", "budget": {"mu": 1}}), "$.id"),
        (json!({"id": "x", "budget": {"mu": -1}}), "$.budget.mu"),
        (
            json!({"id": "x", "budget": {"mu": 1, "delta": 0.5}}),
            "$.budget.delta",
        ),
        (json!({"id": "x"}), "$.budget"),
        (
            json!({"id": "x", "budget": {"mu": 1}, "neighboring_relation": "swap"}),
            "$.neighboring_relation",
        ),
        (
            json!({"id": "x", "budget": {"mu": 1}, "colour": "red"}),
            "$.colour",
        ),
    ] {
        let (s, b) = app.post("/v1/datasets", body).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
        assert_eq!(b["error"], "invalid_field");
        assert_eq!(b["details"]["path"], path, "{b}");
    }
}

#[tokio::test]
async fn malformed_json_wrong_media_type_and_oversized_bodies_get_json_errors() {
    let app = spawn_app_with(Limits {
        max_body_bytes: 2048,
        ..Limits::default()
    })
    .await;
    let req = Request::post("/v1/datasets")
        .header("authorization", format!("Bearer {}", app.token))
        .header("content-type", "application/json")
        .body(Body::from("{\"id\": "))
        .unwrap();
    let res = app.router.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let req = Request::post("/v1/datasets")
        .header("authorization", format!("Bearer {}", app.token))
        .header("content-type", "text/plain")
        .body(Body::from("{}"))
        .unwrap();
    let res = app.router.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let big = json!({"id": "x", "budget": {"mu": 1}, "description": "a".repeat(5000)});
    let (s, b) = app.post("/v1/datasets", big).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(b["error"], "payload_too_large");
    let (s, b) = app.get("/v1/nowhere").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(b["error"], "not_found");
}

#[tokio::test]
async fn unknown_datasets_are_404_everywhere() {
    let app = spawn_app().await;
    for (m, uri, body) in [
        ("GET", "/v1/datasets/nope", None),
        (
            "PATCH",
            "/v1/datasets/nope",
            Some(json!({"budget": {"mu": 1}})),
        ),
        ("POST", "/v1/datasets/nope/charges", Some(gdp(0.1))),
        ("GET", "/v1/datasets/nope/charges", None),
        ("POST", "/v1/datasets/nope/charges/preview", Some(gdp(0.1))),
        ("GET", "/v1/datasets/nope/report", None),
        ("GET", "/v1/datasets/nope/tradeoff", None),
    ] {
        let (s, b) = app.call(m, uri, body.as_ref(), &[]).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{m} {uri}: {b}");
        assert_eq!(b["error"], "not_found");
    }
}

#[tokio::test]
async fn datasets_are_listed_in_pages() {
    let app = spawn_app().await;
    for id in ["a", "b", "c"] {
        app.dataset(id, 1.0).await;
    }
    let (s, b) = app.get("/v1/datasets?limit=2").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b["items"].as_array().unwrap().len(), 2);
    assert_eq!(b["next_cursor"], "b");
    let (_, b) = app.get("/v1/datasets?limit=2&cursor=b").await;
    assert_eq!(b["items"][0]["id"], "c");
    assert!(b["next_cursor"].is_null());
    let (s, b) = app.get("/v1/datasets?limit=0").await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(b["details"]["path"], "query.limit");
}

#[tokio::test]
async fn a_charge_within_budget_is_admitted_with_its_report() {
    let app = spawn_app().await;
    app.dataset("d", 1.0).await;
    let (s, b) = app
        .post(
            "/v1/datasets/d/charges",
            json!({"event": {"type": "gaussian", "noise_multiplier": 2.0}, "label": "q1",
                   "metadata": {"team": "x"}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(b["charge"]["seq"], 1);
    assert_eq!(b["charge"]["label"], "q1");
    assert_eq!(b["charge"]["metadata"]["team"], "x");
    // The unit's certificate is exact (σ = 2: μ = 0.5, δ = 0); the report is the filter's
    // guarantee, the budget's μ = 1 (with the gate's 1e-9 tolerance).
    assert_eq!(b["charge"]["unit"], json!({"mu": 0.5, "delta": 0.0}));
    // √Σμᵢ² is rounded up (a correctly rounded square root may be below the exact one).
    let after = b["charge"]["mu_after"].as_f64().unwrap();
    assert!((0.5..0.5 + 1e-15).contains(&after), "{after}");
    let mu = b["report"]["mu"]["upper"].as_f64().unwrap();
    assert!((mu - 1.0).abs() < 2e-9, "{mu}");
    assert_eq!(b["report"]["method"], "analytic");
    let (_, d) = app.get("/v1/datasets/d").await;
    assert_eq!(d["charges"], 1);
    assert!((d["mu_spent"].as_f64().unwrap() - 0.5).abs() < 1e-12);
    // √(1 − 0.25)
    assert!((d["remaining_mu"].as_f64().unwrap() - 0.75f64.sqrt()).abs() < 1e-12);
}

#[tokio::test]
async fn a_charge_over_budget_is_rejected_and_nothing_is_written() {
    let app = spawn_app().await;
    app.dataset("d", 1.0).await;
    assert_eq!(
        app.post("/v1/datasets/d/charges", gdp(0.8)).await.0,
        StatusCode::CREATED
    );
    let (s, b) = app.post("/v1/datasets/d/charges", gdp(0.7)).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(b["error"], "budget_exceeded");
    let after = b["mu_after"].as_f64().unwrap();
    assert!((after - (0.64f64 + 0.49).sqrt()).abs() < 1e-12, "{after}");
    assert_eq!(b["mu_budget"], 1.0);
    let (_, d) = app.get("/v1/datasets/d").await;
    assert_eq!(d["charges"], 1);
    assert_eq!(d["version"], 1);
}

#[tokio::test]
async fn charges_with_no_finite_mu_within_the_slack_are_rejected_with_a_reason() {
    let app = spawn_app().await;
    app.dataset("d", 100.0).await;
    let (s, b) = app
        .post(
            "/v1/datasets/d/charges",
            json!({"event": {"type": "epsilon_delta", "epsilon": 1.0, "delta": 1e-6}}),
        )
        .await;
    // The box's certificate is (μ(1), 1e-6): its δ does not fit the budget's δ = 1e-10.
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(b["unit"]["delta"], 1e-6, "{b}");
    assert!(b["message"].as_str().unwrap().contains("delta"), "{b}");
}

#[tokio::test]
async fn invalid_events_are_422_with_the_path() {
    let app = spawn_app().await;
    app.dataset("d", 1.0).await;
    let (s, b) = app
        .post(
            "/v1/datasets/d/charges",
            json!({"event": {"type": "poisson_sampled", "sampling_rate": 2,
                             "event": {"type": "gaussian", "noise_multiplier": 1}}}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(b["details"]["path"], "$.event.sampling_rate");
    let (s, b) = app
        .post(
            "/v1/datasets/d/charges",
            json!({"event": {"type": "randomized_response", "noise_parameter": 0.5, "num_buckets": 2}}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(b["error"], "unsupported_event");
}

#[tokio::test]
async fn a_retry_with_the_same_idempotency_key_returns_the_first_outcome_and_charges_nothing() {
    let app = spawn_app().await;
    app.dataset("d", 1.0).await;
    let h = [("Idempotency-Key", "job-42")];
    let (s1, b1) = app
        .call("POST", "/v1/datasets/d/charges", Some(&gdp(0.3)), &h)
        .await;
    assert_eq!(s1, StatusCode::CREATED);
    let (s2, b2) = app
        .call("POST", "/v1/datasets/d/charges", Some(&gdp(0.3)), &h)
        .await;
    assert_eq!(s2, StatusCode::OK);
    assert_eq!(b1, b2);
    let (_, d) = app.get("/v1/datasets/d").await;
    assert_eq!(d["charges"], 1);
    let (s3, b3) = app
        .call("POST", "/v1/datasets/d/charges", Some(&gdp(0.4)), &h)
        .await;
    assert_eq!(s3, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(b3["error"], "idempotency_key_reused");
    let (s4, b4) = app
        .call(
            "POST",
            "/v1/datasets/d/charges",
            Some(&gdp(0.3)),
            &[("Idempotency-Key", "bad key")],
        )
        .await;
    assert_eq!(s4, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(b4["details"]["path"], "header.Idempotency-Key");
}

#[tokio::test]
async fn a_preview_writes_nothing() {
    let app = spawn_app().await;
    app.dataset("d", 1.0).await;
    let (s, b) = app.post("/v1/datasets/d/charges/preview", gdp(0.6)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b["admitted"], true);
    // Units like this one that fit as things stand: 2 (0.36 · 2 ≤ 1 < 0.36 · 3).
    assert_eq!(b["units_like_this"], 2, "{b}");
    let (_, b) = app.post("/v1/datasets/d/charges/preview", gdp(1.5)).await;
    assert_eq!(b["admitted"], false);
    let (_, d) = app.get("/v1/datasets/d").await;
    assert_eq!(d["charges"], 0);
    assert_eq!(d["version"], 0);
}

#[tokio::test]
async fn budget_changes_are_ledger_entries_and_take_effect() {
    let app = spawn_app().await;
    app.dataset("d", 0.5).await;
    assert_eq!(
        app.post("/v1/datasets/d/charges", gdp(0.6)).await.0,
        StatusCode::CONFLICT
    );
    let (s, b) = app
        .call(
            "PATCH",
            "/v1/datasets/d",
            Some(&json!({"budget": {"mu": 1.0}})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["budget"]["mu"], 1.0);
    assert_eq!(
        app.post("/v1/datasets/d/charges", gdp(0.6)).await.0,
        StatusCode::CREATED
    );
    let (_, l) = app.get("/v1/datasets/d/charges").await;
    let items = l["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["kind"], "budget");
    assert_eq!(items[0]["budget"]["mu"], 1.0);
    assert_eq!(items[1]["kind"], "charge");
    assert_eq!(items[1]["seq"], 2);
    let (s, b) = app
        .call(
            "PATCH",
            "/v1/datasets/d",
            Some(&json!({"budget": {"mu": 0}})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(b["details"]["path"], "$.budget.mu");
}

#[tokio::test]
async fn charges_are_listed_in_order_and_in_pages() {
    let app = spawn_app().await;
    app.dataset("d", 10.0).await;
    for _ in 0..5 {
        assert_eq!(
            app.post("/v1/datasets/d/charges", gdp(0.1)).await.0,
            StatusCode::CREATED
        );
    }
    let (_, p1) = app.get("/v1/datasets/d/charges?limit=3").await;
    assert_eq!(p1["items"].as_array().unwrap().len(), 3);
    assert_eq!(p1["next_cursor"], 3);
    let (_, p2) = app.get("/v1/datasets/d/charges?after=3").await;
    let seqs: Vec<i64> = p2["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, vec![4, 5]);
}

#[tokio::test]
async fn the_report_answers_at_the_requested_points() {
    let app = spawn_app().await;
    app.dataset("d", 5.0).await;
    app.post("/v1/datasets/d/charges", gdp(1.0)).await;
    let (s, r) = app
        .get("/v1/datasets/d/report?deltas=1e-5,1e-6&epsilons=1&alphas=0.05")
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    // The filter's guarantee is the budget's (μ = 5); the exact composition of the one charge is
    // beside it, labelled, at the requested points.
    assert!(
        (r["mu"]["upper"].as_f64().unwrap() - 5.0).abs() < 1e-8,
        "{}",
        r["mu"]
    );
    assert!((r["mu_spent"].as_f64().unwrap() - 1.0).abs() < 1e-15);
    let r = &r["exact_composition"]["report"];
    let e = r["epsilon"][0]["epsilon"].as_f64().unwrap();
    assert!((e / 4.377_178_095_68 - 1.0).abs() < 1e-9, "{e}");
    let d = r["delta"][0]["delta"].as_f64().unwrap();
    assert!((d / 0.126_936_737_506_644 - 1.0).abs() < 1e-9);
    let b = r["tradeoff"][0]["beta"].as_f64().unwrap();
    assert!((b / 0.740_488_977_158_556 - 1.0).abs() < 1e-9);
    assert_eq!(r["tier2"]["rows"].as_array().unwrap().len(), 8);
    assert_eq!(r["clt"]["approximate"], true);
    let (s, b) = app.get("/v1/datasets/d/report?deltas=0.1,x").await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(b["details"]["path"], "query.deltas[1]");
    let (s, _) = app.get("/v1/datasets/d/report?sigma=1").await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn the_tradeoff_curve_comes_with_the_gdp_curve() {
    let app = spawn_app().await;
    app.dataset("d", 5.0).await;
    app.post(
        "/v1/datasets/d/charges",
        json!({"event": {"type": "self_composed", "count": 50, "event": {"type": "poisson_sampled",
               "sampling_rate": 0.1, "event": {"type": "gaussian", "noise_multiplier": 1.0}}}}),
    )
    .await;
    let (s, t) = app.get("/v1/datasets/d/tradeoff?points=20").await;
    assert_eq!(s, StatusCode::OK, "{t}");
    let pts = t["points"].as_array().unwrap();
    assert_eq!(pts.len(), 20);
    for p in pts {
        let (b, g) = (p["beta"].as_f64().unwrap(), p["gdp_beta"].as_f64().unwrap());
        assert!(g <= b + 1e-12, "G_μ must lie below the curve: {p}");
    }
    let (_, t) = app.get("/v1/datasets/d/tradeoff?alpha=0.1,0.2").await;
    assert_eq!(t["points"].as_array().unwrap().len(), 2);
    assert_eq!(t["points"][1]["alpha"], 0.2);
    let (s, _) = app.get("/v1/datasets/d/tradeoff?points=1").await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn compose_is_stateless() {
    let app = spawn_app().await;
    let (s, r) = app
        .post(
            "/v1/accountant/compose",
            json!({"events": [{"type": "gdp", "mu": 0.3}, {"type": "gdp", "mu": 0.4}]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert!((r["mu"]["upper"].as_f64().unwrap() - 0.5).abs() < 1e-12);
    let (s, b) = app
        .post(
            "/v1/accountant/compose",
            json!({"events": [{"type": "gdp"}]}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(b["details"]["path"], "$.events[0].mu");
    let (_, l) = app.get("/v1/datasets").await;
    assert!(l["items"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn operations_endpoints_answer() {
    let app = spawn_app().await;
    assert_eq!(app.get("/healthz").await.0, StatusCode::OK);
    let (s, b) = app.get("/readyz").await;
    assert_eq!((s, b["status"].as_str()), (StatusCode::OK, Some("ready")));
    app.dataset("m", 1.0).await;
    app.post("/v1/datasets/m/charges", gdp(0.1)).await;
    let (s, m) = app.get("/metrics").await;
    assert_eq!(s, StatusCode::OK);
    let text = m.as_str().unwrap();
    assert!(text.contains("privacy_ledger_charges_total"), "{text}");
    assert!(text.contains("privacy_ledger_gate_seconds"), "{text}");
    let (s, spec) = app.get("/openapi.json").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(spec["openapi"], "3.1.0");
    let (s, page) = app.get("/docs").await;
    assert_eq!(s, StatusCode::OK);
    // Readable offline: rendered on the server, no script, every operation in a table.
    let page = page.as_str().unwrap();
    assert!(page.contains("/openapi.json") && !page.contains("<script"));
    assert!(page.contains("id=\"create_charge\"") && page.contains("id=\"schema-ChargeRequest\""));
    assert!(
        page.contains("<a href=\"#schema-BudgetExceededBody\"><code>BudgetExceededBody</code></a>")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_charges_never_overspend() {
    // Budget μ = 1; each charge is 0.25-GDP, so exactly 16 fit (16 · 0.25² = 1).
    let app = std::sync::Arc::new(spawn_app().await);
    app.dataset("c", 1.0).await;
    let mut tasks = Vec::new();
    for i in 0..64 {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("k{i}");
            app.call(
                "POST",
                "/v1/datasets/c/charges",
                Some(&gdp(0.25)),
                &[("Idempotency-Key", &key)],
            )
            .await
            .0
        }));
    }
    let mut admitted = 0;
    let mut rejected = 0;
    for t in tasks {
        match t.await.unwrap() {
            StatusCode::CREATED => admitted += 1,
            StatusCode::CONFLICT => rejected += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!((admitted, rejected), (16, 48));
    let (_, d) = app.get("/v1/datasets/c").await;
    assert_eq!(d["charges"], 16);
    assert!(d["mu_spent"].as_f64().unwrap() <= 1.0 + 1e-9);
}

/// Successive charges of one dataset are queued behind each other (the lock is released once an
/// append is queued): concurrent charges, each key sent twice at once, still fill the budget
/// exactly, number the entries without a gap, and every retry gets the first answer, report
/// included (stored once, put back).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pipelined_charges_on_one_dataset_keep_order_and_replay_exactly() {
    let app = std::sync::Arc::new(spawn_app().await);
    app.dataset("p", 1.0).await;
    let mut tasks = Vec::new();
    for i in 0..48 {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("k{}", i % 24);
            let (s, b) = app
                .call(
                    "POST",
                    "/v1/datasets/p/charges",
                    Some(&gdp(0.25)),
                    &[("Idempotency-Key", &key)],
                )
                .await;
            (key, s, b)
        }));
    }
    let mut by_key: std::collections::HashMap<String, Vec<(StatusCode, Value)>> =
        Default::default();
    for t in tasks {
        let (k, s, b) = t.await.unwrap();
        by_key.entry(k).or_default().push((s, b));
    }
    let mut admitted = 0;
    for (k, answers) in &by_key {
        let (a, b) = (&answers[0], &answers[1]);
        let ok = |s: StatusCode| s == StatusCode::CREATED || s == StatusCode::OK;
        if ok(a.0) || ok(b.0) {
            assert!(ok(a.0) && ok(b.0), "{k}: {} and {}", a.0, b.0);
            assert_eq!(a.1, b.1, "{k}: a retry's answer differs from the first");
            admitted += 1;
        } else {
            assert_eq!(
                (a.0, b.0),
                (StatusCode::CONFLICT, StatusCode::CONFLICT),
                "{k}"
            );
        }
    }
    assert_eq!(admitted, 16);
    let (_, d) = app.get("/v1/datasets/p").await;
    assert_eq!(d["charges"], 16);
    let (_, page) = app.get("/v1/datasets/p/charges?limit=100").await;
    let seqs: Vec<i64> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=16).collect::<Vec<_>>(), "{page}");
}

/// With no composed state kept, a pipelined charge reads its base state from the store, where its
/// predecessor may not be durable yet: it must start over rather than extend the older state (the
/// exact composition would then miss a charge — an optimistic figure). 40 concurrent 0.1-GDP
/// charges: the exact composition's μ is √40·0.1 (closed form), not less.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pipelined_charges_never_extend_a_stale_composed_state() {
    let dir = temp_dir("stale-state");
    let url = format!("sqlite://{}", dir.join("ledger.db").display());
    let store = open_store(&url).await.unwrap();
    let ledgers = privacy_ledger::ledger::Ledgers::new(store).with_state_cache_bytes(0);
    let app = std::sync::Arc::new(TestApp::over_ledgers(ledgers, Limits::default(), dir).await);
    app.dataset("s", 10.0).await;
    let mut tasks = Vec::new();
    for i in 0..40 {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("s{i}");
            app.call(
                "POST",
                "/v1/datasets/s/charges",
                Some(&gdp(0.1)),
                &[("Idempotency-Key", &key)],
            )
            .await
        }));
    }
    for t in tasks {
        let (st, b) = t.await.unwrap();
        assert_eq!(st, StatusCode::CREATED, "{b}");
    }
    let (_, d) = app.get("/v1/datasets/s").await;
    assert_eq!(d["charges"], 40);
    let exact = d["exact_composition_mu"].as_f64().unwrap();
    let truth = 40f64.sqrt() * 0.1;
    // The composition's μ is rounded up (a few ulps): never below the truth, barely above.
    assert!(
        exact >= truth && exact <= truth * (1.0 + 1e-12),
        "{exact} vs {truth}"
    );
}

#[tokio::test]
async fn the_committed_openapi_document_matches_the_code() {
    // Regenerate with: UPDATE_OPENAPI=1 cargo test committed_openapi
    let generated = privacy_ledger::http::openapi_json();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json");
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(path, format!("{generated}\n")).unwrap();
    }
    let committed = std::fs::read_to_string(path).unwrap();
    assert_eq!(
        committed.trim_end(),
        generated.trim_end(),
        "openapi/openapi.json is stale: run UPDATE_OPENAPI=1 cargo test committed_openapi"
    );
}

#[tokio::test]
async fn charges_accept_dp_accounting_serialised_events() {
    let app = spawn_app().await;
    app.dataset("d", 5.0).await;
    let ev = json!({"module_name": "dp_accounting.dp_event", "class_name": "SelfComposedDpEvent",
        "event": {"module_name": "dp_accounting.dp_event", "class_name": "PoissonSampledDpEvent",
                  "sampling_probability": 0.01,
                  "event": {"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent",
                            "noise_multiplier": 1.1}},
        "count": 100});
    let (s, b) = app
        .post("/v1/datasets/d/charges", json!({"event": ev}))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(b["charge"]["event"]["type"], "self_composed");
    // A subsampled run needs δ: the default δ_B/1000 = 1e-13.
    assert_eq!(b["charge"]["unit"]["delta"], 1e-13, "{b}");
    assert!(b["charge"]["unit"]["mu"].as_f64().unwrap() < 5.0);
    let bad = json!({"class_name": "PoissonSampledDpEvent", "sampling_probability": 3,
                     "event": {"class_name": "GaussianDpEvent", "noise_multiplier": 1}});
    let (s, b) = app
        .post("/v1/datasets/d/charges", json!({"event": bad}))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(b["details"]["path"], "$.event.sampling_probability");
}

#[tokio::test]
async fn calibration_finds_what_still_fits() {
    let app = spawn_app().await;
    app.dataset("d", 1.0).await;
    app.post("/v1/datasets/d/charges", gdp(0.6)).await;
    // Remaining μ = 0.8, so a Gaussian needs noise multiplier ≥ 1/0.8 = 1.25.
    let (s, c) = app
        .post(
            "/v1/datasets/d/calibrate",
            json!({"event": {"type": "gaussian", "noise_multiplier": 1.0}, "free_parameter": "noise_multiplier"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{c}");
    let sigma = c["value"].as_f64().unwrap();
    assert!(sigma >= 1.25 && sigma < 1.25 * (1.0 + 1e-5), "{sigma}");
    // And the calibrated event is admitted.
    let (s, _) = app
        .post("/v1/datasets/d/charges", json!({"event": c["event"]}))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, c) = app
        .post(
            "/v1/accountant/calibrate",
            json!({"event": {"type": "self_composed", "count": 1, "event": {"type": "gdp", "mu": 0.1}},
                   "free_parameter": "count", "mu": 1.0}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{c}");
    assert_eq!(c["value"], 100.0);
    let (s, b) = app
        .post(
            "/v1/accountant/calibrate",
            json!({"event": {"type": "gdp", "mu": 0.1}, "free_parameter": "sigma", "mu": 1}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(b["details"]["path"], "$.free_parameter");
}

/// The certificate curve of a DP-SGD unit: 43 default points, μ never rising with δ, each point's
/// μ above its lower bound and within 0.2 % of it for δ ≤ 1e-3; with a budget, the balanced
/// point; and a charge at that point's δ is certified at that μ by the gate itself.
#[tokio::test]
async fn the_certificate_curve_is_what_the_gate_charges() {
    let app = spawn_app().await;
    let unit = json!({"type": "self_composed", "count": 1000,
                      "event": {"type": "poisson_sampled", "sampling_rate": 0.01,
                                "event": {"type": "gaussian", "noise_multiplier": 1.0}}});
    let (s, c) = app
        .post(
            "/v1/accountant/certificate",
            json!({"event": unit, "neighboring_relation": "add_or_remove_one",
                   "budget": {"mu": 2.0, "delta": 1e-6}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{c}");
    let points = c["points"].as_array().unwrap();
    assert_eq!(points.len(), 43, "{c}");
    assert_eq!(points[0]["delta"], 0.0);
    // A subsampled Gaussian has no finite μ at δ = 0 (its tails are moved to +∞).
    assert!(
        points[0]["mu"].is_null() && points[0]["reason"].is_string(),
        "{c}"
    );
    let mut last = f64::INFINITY;
    for p in points {
        let (d, Some(mu)) = (p["delta"].as_f64().unwrap(), p["mu"].as_f64()) else {
            continue;
        };
        let lo = p["mu_lower"].as_f64().unwrap();
        assert!(mu <= last && lo <= mu, "{p}");
        if (1e-10..=1e-3).contains(&d) {
            assert!(mu <= lo * 1.002, "{p}");
        }
        last = mu;
    }
    let b = &c["balanced"];
    let (bd, bmu) = (b["delta"].as_f64().unwrap(), b["mu"].as_f64().unwrap());
    let want = (bmu / 2.0).powi(2) + bd / 1e-6;
    assert!(
        (b["budget_fraction"].as_f64().unwrap() - want).abs() <= 1e-12 * want,
        "{b}"
    );
    assert!(bd <= 1e-6, "{b}");
    let (s, d) = app
        .post(
            "/v1/datasets",
            json!({"id": "d", "budget": {"mu": 2.0, "delta": 1e-6},
                   "neighboring_relation": "add_or_remove_one"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{d}");
    let (s, ch) = app
        .post(
            "/v1/datasets/d/charges",
            json!({"event": unit, "delta": bd}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{ch}");
    let charged = ch["charge"]["unit"]["mu"].as_f64().unwrap();
    assert!((charged - bmu).abs() <= 1e-9 * bmu, "{charged} vs {bmu}");
    assert_eq!(ch["charge"]["unit"]["delta"], bd);
    // Bad input names the field.
    let (s, e) = app
        .post(
            "/v1/accountant/certificate",
            json!({"event": unit, "deltas": [0.1, 1.0]}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
    assert_eq!(e["details"]["path"], "$.deltas[1]");
}

/// `group_size` on a dataset's report: the filter's guarantee has a δ part, so no group μ, but
/// group (ε, δ) pairs; the exact composition of Gaussian charges (μ-GDP, no slack) has k·μ.
#[tokio::test]
async fn the_report_states_group_privacy_when_asked() {
    let app = spawn_app().await;
    app.dataset("d", 1.0).await;
    app.post("/v1/datasets/d/charges", gdp(0.5)).await;
    let (s, r) = app
        .get("/v1/datasets/d/report?deltas=1e-5&group_size=2")
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["group"]["size"], 2, "{r}");
    assert!(r["group"]["mu"].is_null(), "{r}");
    // The statement G_1 ⊗ f_{0,1e-10} (the budget, with the gate's tolerance) gives two records
    // G_2 minus δ_2 = δ + Φ(Φ⁻¹(δ) + 1) = 4.1403e-8 (mpmath), not 2δ (issue 31, row 12).
    let g = &r["group"]["gdp"];
    assert!(
        g["mu"].as_f64().unwrap() >= 2.0 && g["mu"].as_f64().unwrap() < 2.0 + 1e-8,
        "{r}"
    );
    let d2 = g["delta"].as_f64().unwrap();
    assert!(d2 >= 4.1403e-8 && d2 < 4.1404e-8, "{r}");
    let e = r["epsilon"][0]["epsilon"].as_f64().unwrap();
    let ge = r["group"]["epsilon"][0]["epsilon"].as_f64().unwrap();
    assert!(ge >= 2.0 * e, "{r}");
    let exact = &r["exact_composition"]["report"]["group"];
    assert!(exact["mu"].as_f64().unwrap() >= 1.0, "{r}");
    let (s, b) = app.get("/v1/datasets/d/report?group_size=0").await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["details"]["path"], "query.group_size");
    let (_, r) = app.get("/v1/datasets/d/report").await;
    assert!(r.get("group").is_none(), "{r}");
}
