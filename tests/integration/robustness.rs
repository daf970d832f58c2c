//! Bad traffic gets a clear 4xx in the one error shape, on both stores: NUL and control
//! characters in bodies, paths and queries; duplicate JSON keys; too-long targets; timeouts; and
//! requests for datasets that do not exist leave no per-dataset state behind.

use crate::api::{spawn_app, spawn_app_with, temp_dir, TestApp};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use privacy_ledger::app::open_store;
use privacy_ledger::http::Limits;
use serde_json::{json, Value};
use std::time::Duration;
use tower::ServiceExt;

/// A numerical composition that takes about a second (10,000 Poisson-subsampled Gaussian steps
/// at grid 1e-5).
fn slow_composition() -> Value {
    json!({"events": [{"type": "self_composed", "count": 10000, "event": {
        "type": "poisson_sampled", "sampling_rate": 0.01,
        "event": {"type": "gaussian", "noise_multiplier": 0.8}}}], "grid_step": 1e-5})
}

/// Sends a raw body (so it can hold what `json!` cannot: duplicate keys).
async fn raw(app: &TestApp, method: &str, uri: &str, body: &str) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {}", app.token))
        .header("content-type", "application/json")
        .header("x-request-id", "req-robust-1")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let res = app.router.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Each (method, uri, body) must be a 422 naming `path`, with the request id in the body.
async fn refused_naming(app: &TestApp, cases: &[(&str, &str, &str, &str)]) {
    for (method, uri, body, path) in cases {
        let (s, b) = raw(app, method, uri, body).await;
        assert_eq!(
            s,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{method} {uri} {body}: {b}"
        );
        assert_eq!(b["error"], "invalid_field", "{b}");
        assert_eq!(b["details"]["path"], *path, "{method} {uri} {body}: {b}");
        assert_eq!(b["request_id"], "req-robust-1", "{b}");
    }
}

async fn bad_text_is_refused_by_name(app: &TestApp) {
    app.dataset("d", 1.0).await;
    refused_naming(
        app,
        &[
            (
                "POST",
                "/v1/datasets/d/charges",
                r#"{"event": {"type": "gdp", "mu": 0.1}, "label": "a\u0000b"}"#,
                "$.label",
            ),
            (
                "POST",
                "/v1/datasets/d/charges",
                r#"{"event": {"type": "gdp", "mu": 0.1}, "metadata": {"k": ["x", "\u0000"]}}"#,
                "$.metadata.k[1]",
            ),
            (
                "POST",
                "/v1/datasets",
                r#"{"id": "e", "budget": {"mu": 1}, "description": "\u0000"}"#,
                "$.description",
            ),
            (
                "POST",
                "/v1/datasets/d/charges",
                r#"{"event": {"type": "gdp", "mu": 0.1, "mu": 5}}"#,
                "$.event.mu",
            ),
            (
                "POST",
                "/v1/datasets",
                r#"{"id": "e", "id": "f", "budget": {"mu": 1}}"#,
                "$.id",
            ),
            ("GET", "/v1/datasets/d%00x", "", "path.id"),
            ("GET", "/v1/datasets/d%00x/charges", "", "path.id"),
            (
                "POST",
                "/v1/datasets/d%0Ax/charges",
                r#"{"event": {"type": "gdp", "mu": 0.1}}"#,
                "path.id",
            ),
            ("GET", "/v1/datasets/d/runs/r%00", "", "path.run_id"),
            (
                "POST",
                "/v1/datasets/d/charges/c%00/commit",
                "{}",
                "path.charge_id",
            ),
            (
                "PUT",
                "/v1/datasets/d/grants/eve%00",
                r#"{"role": "analyst"}"#,
                "path.principal",
            ),
            ("DELETE", "/v1/tokens/t%00", "", "path.token_id"),
            ("GET", "/v1/audit?principal=a%00b", "", "query.principal"),
            ("GET", "/v1/audit?dataset_id=d%00", "", "query.dataset_id"),
            ("GET", "/v1/datasets?cursor=%00", "", "query.cursor"),
        ],
    )
    .await;
    // A dataset id that cannot exist is refused as such, not looked up.
    let long = format!("/v1/datasets/{}", "a".repeat(300));
    let (s, b) = raw(app, "GET", &long, "").await;
    assert_eq!(
        (s, b["details"]["path"].clone()),
        (StatusCode::UNPROCESSABLE_ENTITY, json!("path.id"))
    );
    // Nothing was written, and the ledger still works.
    let (s, b) = app.get("/v1/datasets/d").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b["charges"], 0, "{b}");
    let (s, _) = app
        .post(
            "/v1/datasets/d/charges",
            json!({"event": {"type": "gdp", "mu": 0.1}, "label": "fine"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
}

#[tokio::test]
async fn nul_control_characters_and_duplicate_keys_are_422_naming_the_field_on_sqlite() {
    bad_text_is_refused_by_name(&spawn_app().await).await;
}

#[tokio::test]
async fn nul_control_characters_and_duplicate_keys_are_422_naming_the_field_on_postgres() {
    let Some(url) = crate::store::postgres_url() else {
        eprintln!("skipped: set TEST_DATABASE_URL to run the PostgreSQL bad-text test");
        return;
    };
    // A schema of its own, so the dataset ids of this test do not meet other tests' rows.
    let schema = format!("robust_{}", uuid::Uuid::new_v4().simple());
    let admin = open_store(&url).await.unwrap();
    drop(admin);
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&pool)
        .await
        .unwrap();
    let sep = if url.contains('?') { '&' } else { '?' };
    let scoped = format!("{url}{sep}options=-csearch_path%3D{schema}");
    let app = TestApp::over_store(
        open_store(&scoped).await.unwrap(),
        Limits::default(),
        temp_dir("robust-pg"),
    )
    .await;
    bad_text_is_refused_by_name(&app).await;
    drop(app);
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&pool)
        .await
        .unwrap();
}

/// Statuses made by layers, not handlers — a timeout, a too-long target, an unknown route — have
/// the same `{error, message, details, request_id}` body as every other error.
#[tokio::test]
async fn every_error_status_has_the_error_body_with_the_request_id() {
    let app = spawn_app_with(Limits {
        request_timeout: Duration::from_millis(100),
        ..Limits::default()
    })
    .await;
    let slow = slow_composition();
    let (s, b) = raw(&app, "POST", "/v1/accountant/compose", &slow.to_string()).await;
    assert_eq!(s, StatusCode::REQUEST_TIMEOUT, "{b}");
    assert_eq!(
        (b["error"].clone(), b["request_id"].clone()),
        (json!("timeout"), json!("req-robust-1"))
    );
    assert!(b["details"].is_object() && b["message"].is_string(), "{b}");

    let app = spawn_app().await;
    let long = format!("/v1/datasets?cursor={}", "a".repeat(9000));
    let (s, b) = raw(&app, "GET", &long, "").await;
    assert_eq!(s, StatusCode::URI_TOO_LONG, "{b}");
    assert_eq!(
        (b["error"].clone(), b["request_id"].clone()),
        (json!("uri_too_long"), json!("req-robust-1"))
    );
    let (s, b) = raw(&app, "GET", "/v1/nowhere", "").await;
    assert_eq!(
        (s, b["error"].clone()),
        (StatusCode::NOT_FOUND, json!("not_found"))
    );
    assert_eq!(b["request_id"], "req-robust-1");
    let (s, b) = raw(&app, "POST", "/v1/datasets", "{\"id\": ").await;
    assert_eq!(
        (s, b["error"].clone()),
        (StatusCode::BAD_REQUEST, json!("malformed_json"))
    );
    assert_eq!(b["request_id"], "req-robust-1");
    // Without a client id, the generated one is in the body and the header alike.
    let req = Request::get("/v1/datasets/none")
        .header("authorization", format!("Bearer {}", app.token))
        .body(Body::empty())
        .unwrap();
    let res = app.router.clone().oneshot(req).await.unwrap();
    let header = res.headers()["x-request-id"].to_str().unwrap().to_owned();
    let b: Value = serde_json::from_slice(
        &axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(b["request_id"], header);
}

/// Charges, previews and reads for 300 dataset ids that do not exist leave no metric series and
/// no per-dataset state: /metrics does not name them.
#[tokio::test]
async fn requests_for_missing_datasets_leave_no_per_dataset_state() {
    let app = spawn_app_with(Limits {
        rate_per_second: 1e5,
        rate_burst: 1e5,
        ..Limits::default()
    })
    .await;
    app.dataset("real", 1.0).await;
    let charge = json!({"event": {"type": "gdp", "mu": 0.1}});
    assert_eq!(
        app.post("/v1/datasets/real/charges", charge.clone())
            .await
            .0,
        StatusCode::CREATED
    );
    for i in 0..100 {
        let id = format!("ghost-{i}");
        assert_eq!(
            app.post(&format!("/v1/datasets/{id}/charges"), charge.clone())
                .await
                .0,
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            app.post(
                &format!("/v1/datasets/{id}/charges/preview"),
                charge.clone()
            )
            .await
            .0,
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            app.get(&format!("/v1/datasets/{id}/report")).await.0,
            StatusCode::NOT_FOUND
        );
    }
    let (s, m) = app.get("/metrics").await;
    assert_eq!(s, StatusCode::OK);
    let m = m.as_str().unwrap().to_owned();
    assert!(
        m.contains("dataset=\"real\""),
        "the real dataset is counted"
    );
    assert!(
        !m.contains("ghost-"),
        "a missing dataset got a metric series"
    );
}

/// Numerical work beyond the limit is refused at once with 503 `overloaded` and Retry-After (before
/// it allocates), while closed-form work goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_work_beyond_the_limit_is_shed_with_retry_after_and_cheap_work_goes_on() {
    use privacy_ledger::ledger::admission::AdmissionConfig;
    let dir = temp_dir("admission");
    let url = format!("sqlite://{}", dir.join("ledger.db").display());
    let ledgers = privacy_ledger::ledger::Ledgers::new(open_store(&url).await.unwrap())
        .with_admission(AdmissionConfig {
            concurrent: 1,
            queue: 0,
            max_wait: Duration::from_secs(1),
        });
    let app = std::sync::Arc::new(TestApp::over_ledgers(ledgers, Limits::default(), dir).await);
    let heavy = slow_composition();
    let running = {
        let (app, heavy) = (app.clone(), heavy.clone());
        tokio::spawn(async move { app.post("/v1/accountant/compose", heavy).await.0 })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    let t = std::time::Instant::now();
    let req = Request::post("/v1/accountant/compose")
        .header("authorization", format!("Bearer {}", app.token))
        .header("content-type", "application/json")
        .body(Body::from(heavy.to_string()))
        .unwrap();
    let res = app.router.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(res.headers()["retry-after"], "2");
    let b: Value = serde_json::from_slice(
        &axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(b["error"], "overloaded", "{b}");
    assert!(
        t.elapsed() < Duration::from_millis(100),
        "refused at once, not after a wait"
    );
    // Closed-form work does not wait for the heavy computation.
    let gdp = json!({"events": [{"type": "gdp", "mu": 0.5}]});
    let t = std::time::Instant::now();
    let (s, b) = app.post("/v1/accountant/compose", gdp).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert!(
        t.elapsed() < Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(running.await.unwrap(), StatusCode::OK);
}

/// /metrics: histograms with buckets (not summaries) and HELP text, HTTP requests by route
/// template and status (ids never become labels), and process metrics.
#[tokio::test]
async fn metrics_are_histograms_with_help_by_route_and_process() {
    let app = spawn_app().await;
    app.dataset("m1", 1.0).await;
    let (s, _) = app
        .post(
            "/v1/datasets/m1/charges",
            json!({"event": {"type": "gdp", "mu": 0.1}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, _) = app
        .post(
            "/v1/charges",
            json!({"datasets": [{"id": "m1"}], "event": {"type": "gdp", "mu": 0.1}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    assert_eq!(app.get("/v1/datasets/m1").await.0, StatusCode::OK);
    assert_eq!(app.get("/v1/nowhere-at-all").await.0, StatusCode::NOT_FOUND);
    let (s, m) = app.get("/metrics").await;
    assert_eq!(s, StatusCode::OK);
    let m = m.as_str().unwrap().to_owned();
    for needle in [
        "# HELP privacy_ledger_gate_seconds",
        "# TYPE privacy_ledger_gate_seconds histogram",
        "privacy_ledger_gate_seconds_bucket{le=\"0.005\"}",
        "# HELP privacy_ledger_http_requests_total",
        "# TYPE privacy_ledger_http_request_duration_seconds histogram",
        "privacy_ledger_http_requests_total{method=\"POST\",route=\"/v1/datasets/{id}/charges\",status=\"201\"}",
        "privacy_ledger_http_requests_total{method=\"GET\",route=\"/v1/datasets/{id}\",status=\"200\"}",
        "route=\"unmatched\",status=\"404\"",
        "# TYPE privacy_ledger_group_commit_size histogram",
        "# TYPE privacy_ledger_multi_charge_seconds histogram",
        "privacy_ledger_multi_charges_total{outcome=\"admitted\"}",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
    ] {
        assert!(m.contains(needle), "/metrics lacks {needle}");
    }
    assert!(!m.contains("summary"), "no summaries");
    assert!(
        !m.contains("route=\"/v1/datasets/m1"),
        "an id became a label"
    );
}

/// The spec states every path and paging parameter's limits, so generated clients and fuzzers
/// know them: dataset ids' pattern and length, ids' lengths, `limit`'s range.
#[test]
fn the_spec_states_the_limits_of_path_and_paging_parameters() {
    let spec: Value = serde_json::from_str(&privacy_ledger::http::openapi_json()).unwrap();
    let mut checked = 0;
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (_, op) in item.as_object().unwrap() {
            for p in op["parameters"].as_array().into_iter().flatten() {
                let (name, schema) = (p["name"].as_str().unwrap(), &p["schema"]);
                match (p["in"].as_str().unwrap(), name) {
                    ("path", "id") => {
                        // A dataset id (128) or a block's, `dataset@block` (128 + 1 + 64).
                        assert_eq!(schema["maxLength"], 193, "{path}");
                        assert!(schema["pattern"].is_string(), "{path}");
                    }
                    ("path", _) => assert!(schema["maxLength"].is_number(), "{path} {name}"),
                    ("query", "limit") => {
                        assert_eq!(schema["minimum"], 1, "{path}");
                        assert!(schema["maximum"].is_number(), "{path}");
                    }
                    _ => continue,
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 25, "{checked}");
}

/// What schemathesis found where the spec and the server disagreed, each now agreeing: every
/// operation states its 4xx and 503 bodies; a chunk's 409 may be either error shape; request
/// bodies refuse unknown fields and state their ranges and enums; a `null` chunk body is no
/// options; `points` and `alpha` together give both sets of α; a principal path parameter never
/// matches `*` (which the server refuses there).
#[tokio::test]
async fn the_spec_and_the_server_agree_where_schemathesis_found_them_apart() {
    let spec: Value = serde_json::from_str(&privacy_ledger::http::openapi_json()).unwrap();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let r = &op["responses"];
            assert!(r.get("4XX").is_some(), "{method} {path}: no 4XX");
            assert!(r.get("503").is_some(), "{method} {path}: no 503");
            for p in op["parameters"].as_array().into_iter().flatten() {
                if p["name"] == "principal" && p["in"] == "path" {
                    let re = p["schema"]["pattern"].as_str().unwrap();
                    assert!(!re.contains(r"\*"), "{method} {path}: {re}");
                }
            }
        }
    }
    let s = &spec["components"]["schemas"];
    let chunk_409 = &spec["paths"]["/v1/datasets/{id}/runs/{run_id}/chunks"]["post"]["responses"]
        ["409"]["content"]["application/json"]["schema"]["$ref"];
    assert_eq!(chunk_409, "#/components/schemas/ChunkConflict");
    assert_eq!(s["ChunkConflict"]["anyOf"].as_array().unwrap().len(), 2);
    for body in [
        "CreateDatasetRequest",
        "UpdateDatasetRequest",
        "ChargeRequest",
        "RunRequest",
        "ChunkRequestWire",
        "ComposeRequest",
        "CalibrateRequest",
        "DatasetCalibrateRequest",
        "ReleaseRequestWire",
        "Budget",
    ] {
        assert_eq!(s[body]["additionalProperties"], false, "{body}");
    }
    // The ranges are the parser's constants.
    use privacy_ledger::accountant::{params, pld};
    assert_eq!(
        s["Budget"]["properties"]["mu"]["maximum"],
        privacy_ledger::ledger::budget::MAX_BUDGET_MU
    );
    assert_eq!(
        s["Budget"]["properties"]["delta"]["maximum"],
        params::MAX_DELTA_SLACK
    );
    let grid = &s["CreateDatasetRequest"]["properties"]["grid_step"];
    assert_eq!(grid["minimum"], pld::MIN_GRID_STEP);
    assert_eq!(grid["maximum"], pld::MAX_GRID_STEP);
    assert_eq!(
        s["RunRequest"]["properties"]["steps"]["maximum"],
        privacy_ledger::ledger::input::MAX_RUN_STEPS
    );
    // A certificate's δᵢ: [0, 1), as the parser takes them (δᵢ = 1 is refused, naming the item).
    let deltas = &s["CertificateRequest"]["properties"]["deltas"]["items"]["$ref"];
    assert_eq!(deltas, "#/components/schemas/DeltaBelowOne");
    assert_eq!(s["DeltaBelowOne"]["minimum"], 0);
    assert_eq!(s["DeltaBelowOne"]["exclusiveMaximum"], 1);
    assert_eq!(
        s["NeighboringRelation"]["enum"],
        json!(["add_or_remove_one", "replace_one"])
    );
    assert_eq!(
        s["FreeParameter"]["enum"],
        json!(["noise_multiplier", "count"])
    );

    let app = spawn_app().await;
    app.dataset("agree", 1.0).await;
    // Unknown body fields are refused, as the spec says.
    let (st, b) = app
        .post(
            "/v1/datasets/agree/charges",
            json!({"event": {"type": "gdp", "mu": 0.1}, "x": 1}),
        )
        .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    // A run's chunk with a null body: no options.
    let (st, b) = app
        .post(
            "/v1/datasets/agree/runs",
            json!({"event": {"type": "gdp", "mu": 0.01}, "steps": 4, "chunk_steps": 2}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
    let run = b["run_id"]
        .as_str()
        .or(b["id"].as_str())
        .unwrap()
        .to_owned();
    let (st, b) = raw(
        &app,
        "POST",
        &format!("/v1/datasets/agree/runs/{run}/chunks"),
        "null",
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
    // points and alpha: both sets.
    let (st, b) = app
        .get("/v1/datasets/agree/tradeoff?points=4&alpha=0.123")
        .await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let alphas: Vec<f64> = b["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["alpha"].as_f64().unwrap())
        .collect();
    assert_eq!(alphas.len(), 5, "{alphas:?}");
    assert!(alphas.contains(&0.123) && alphas.windows(2).all(|w| w[0] < w[1]));
    // Labels count characters, as maxLength does: 256 four-byte characters fit.
    let label = "𝔼".repeat(256);
    let (st, b) = app
        .post(
            "/v1/datasets/agree/charges",
            json!({"event": {"type": "gdp", "mu": 0.01}, "label": label}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
}

/// The second schemathesis round's disagreements: every text query parameter states the length
/// and characters `check_params` accepts; the number lists' patterns accept exactly what the
/// server accepts (checked with the spec's own pattern on each sample); the audit log's limit,
/// `dataset_id` and JSON-lines answer are as documented.
#[tokio::test]
async fn the_spec_and_the_server_agree_on_query_parameters() {
    let spec: Value = serde_json::from_str(&privacy_ledger::http::openapi_json()).unwrap();
    let mut patterns = std::collections::HashMap::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for p in op["parameters"].as_array().into_iter().flatten() {
                let schema = &p["schema"];
                if p["in"] != "query" || schema["type"] != "string" {
                    continue;
                }
                let name = p["name"].as_str().unwrap();
                assert!(
                    schema["maxLength"].as_u64().is_some_and(|m| m <= 256),
                    "{method} {path} {name}: {schema}"
                );
                assert!(
                    schema.get("pattern").is_some() || schema.get("format").is_some(),
                    "{method} {path} {name}: {schema}"
                );
                if let Some(re) = schema["pattern"].as_str() {
                    patterns.insert(name.to_owned(), re.to_owned());
                }
            }
        }
    }
    // A dp_accounting event's module_name may be null (read as absent), as the server does.
    let module = &spec["components"]["schemas"]["DpAccountingEvent"]["properties"]["module_name"];
    assert!(
        module["enum"].as_array().unwrap().contains(&Value::Null),
        "{module}"
    );
    let ndjson = &spec["paths"]["/v1/audit"]["get"]["responses"]["200"]["content"];
    assert!(ndjson.get("application/x-ndjson").is_some(), "{ndjson}");

    let app = spawn_app().await;
    app.dataset("agree2", 1.0).await;
    let samples = [
        "0", "0.05", ".5", "1", "1.0", "1e-5", "2.5E-3", "0.", "00.5", "1e-5,0.5", "", ".", "2",
        "10e-2", "1.5", "0.1,", ",0.1", "0.1,,0.2", "-0", "1e5", "5e-3", "123456.7", "1000000",
        "999999.5", "1e-400",
    ];
    for (name, route) in [
        ("deltas", "report"),
        ("epsilons", "report"),
        ("alphas", "report"),
        ("alpha", "tradeoff"),
    ] {
        let spec_re = regex::Regex::new(&patterns[name]).unwrap();
        for sample in samples {
            let (st, b) = app
                .get(&format!("/v1/datasets/agree2/{route}?{name}={sample}"))
                .await;
            let allowed = spec_re.is_match(sample);
            assert_eq!(
                st == StatusCode::OK,
                allowed,
                "{name}={sample:?}: spec allows {allowed}, server {st} {b}"
            );
            if !allowed {
                assert_eq!(
                    st,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "{name}={sample:?} {b}"
                );
            }
        }
    }
    let controls = regex::Regex::new(&patterns["cursor"]).unwrap();
    for c in ['\u{0}', '\u{1f}', '\u{7f}', '\u{85}', '\u{9f}'] {
        assert!(!controls.is_match(&format!("a{c}")), "{c:?}");
    }
    assert!(controls.is_match("ä\u{a0}z"));

    let (st, b) = app
        .post(
            "/v1/accountant/compose",
            json!({"events": [{"class_name": "NoOpDpEvent", "module_name": null}]}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{b}");
    // The audit log: an empty dataset id is refused; a JSON page caps a large limit at 1000.
    let (st, b) = app.get("/v1/audit?dataset_id=").await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["details"]["path"], "query.dataset_id");
    let (st, b) = app.get("/v1/audit?limit=5000").await;
    assert_eq!(st, StatusCode::OK, "{b}");
    assert!(b["items"].as_array().unwrap().len() <= 1000);
    let (st, _) = app.get("/v1/audit?limit=10001").await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
}
