//! Partitioned datasets and charges on several ledgers (issue 15): range charges decided by the
//! fullest block with nothing written on refusal, joins over two datasets, idempotent retries,
//! retention, block reads over a range, and the errors that name the field.

use crate::api::{spawn_app, TestApp};
use axum::http::StatusCode;
use serde_json::{json, Value};

fn gdp(mu: f64) -> Value {
    json!({"type": "gdp", "mu": mu})
}

/// A daily-partitioned dataset `id` with a per-block μ budget.
async fn daily(app: &TestApp, id: &str, mu: f64, extra: Value) {
    let mut p = json!({"type": "time", "width": "day", "time_zone": "UTC"});
    for (k, v) in extra.as_object().unwrap() {
        p[k] = v.clone();
    }
    let (s, b) = app
        .post(
            "/v1/datasets",
            json!({"id": id, "budget": {"mu": mu}, "partitioning": p}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(b["partitioning"]["width"], "day", "{b}");
}

async fn charge(app: &TestApp, body: Value, key: Option<&str>) -> (StatusCode, Value) {
    let headers: Vec<(&str, &str)> = key.map(|k| ("idempotency-key", k)).into_iter().collect();
    app.call("POST", "/v1/charges", Some(&body), &headers).await
}

/// The week of 2026-11-02 (Monday) to 2026-11-08, as a range.
fn days(from: u32, to: u32) -> Value {
    json!({"from": format!("2026-11-{from:02}T00:00:00Z"), "to": format!("2026-11-{to:02}T00:00:00Z")})
}

/// μ budget 1 per block. Block 03 has spent 0.8; a range charge of 0.7 over 02–04 fits 02 and
/// 04 (empty) but not 03 (0.8² + 0.7² = 1.13 > 1): refused, naming 03, and nothing is written —
/// 02 and 04 are not even created. A charge of 0.6 then fits all three (0.8² + 0.6² = 1).
#[tokio::test]
async fn a_range_charge_is_refused_by_its_fullest_block_and_writes_nothing() {
    let app = spawn_app().await;
    daily(&app, "ev", 1.0, json!({})).await;
    let (s, b) = charge(
        &app,
        json!({"datasets": [{"id": "ev", "blocks": ["2026-11-03"]}], "event": gdp(0.8)}),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let l = &b["charge"]["ledgers"][0];
    assert_eq!(l["ledger_id"], "ev@2026-11-03");
    assert_eq!(l["created"], true);
    let (_, before) = app.get("/v1/datasets/ev@2026-11-03").await;
    assert_eq!(before["version"], 1, "{before}");

    let (s, b) = charge(
        &app,
        json!({"datasets": [{"id": "ev", "time_range": days(2, 5)}], "event": gdp(0.7)}),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert_eq!(b["error"], "budget_exceeded");
    assert_eq!(b["dataset_id"], "ev@2026-11-03", "{b}");
    // √(1 − 0.8²) = 0.6.
    assert!(
        (b["remaining_mu"].as_f64().unwrap() - 0.6).abs() < 1e-9,
        "{b}"
    );
    let (_, after) = app.get("/v1/datasets/ev@2026-11-03").await;
    assert_eq!(after, before);
    for d in ["2026-11-02", "2026-11-04"] {
        let (s, _) = app.get(&format!("/v1/datasets/ev@{d}")).await;
        assert_eq!(
            s,
            StatusCode::NOT_FOUND,
            "{d} was created by a refused charge"
        );
    }

    let (s, b) = charge(
        &app,
        json!({"datasets": [{"id": "ev", "time_range": days(2, 5)}], "event": gdp(0.6)}),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let ledgers = b["charge"]["ledgers"].as_array().unwrap();
    let ids: Vec<&str> = ledgers
        .iter()
        .map(|l| l["ledger_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["ev@2026-11-02", "ev@2026-11-03", "ev@2026-11-04"]);
    // Filter sums rounded up: within 1e-12 of the exact values.
    let spent: Vec<f64> = ledgers
        .iter()
        .map(|l| l["mu_spent"].as_f64().unwrap())
        .collect();
    for (got, want) in spent.iter().zip([0.6, 1.0, 0.6]) {
        assert!(*got >= want && *got < want + 1e-12, "{spent:?}");
    }
    // The same charge id on every ledger; each ledger has its own entry.
    let charge_id = b["charge"]["id"].as_str().unwrap();
    for id in ids {
        let (s, e) = app.get(&format!("/v1/datasets/{id}/charges")).await;
        assert_eq!(s, StatusCode::OK);
        let last = e["items"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["charge"]["id"], charge_id, "{id}: {e}");
    }
    // The range read agrees: 03 is exhausted and decides.
    let (s, r) = app
        .get("/v1/datasets/ev/blocks?from=2026-11-01T00:00:00Z&to=2026-11-05T00:00:00Z")
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["items"].as_array().unwrap().len(), 4);
    assert_eq!(r["items"][0]["exists"], false);
    assert_eq!(r["items"][0]["remaining_mu"], 1.0);
    assert_eq!(r["tightest"], "2026-11-03");
    assert!(r["remaining_mu"].as_f64().unwrap() < 1e-6, "{r}");
    assert_eq!(r["items"][1]["start"], "2026-11-02T00:00:00+00:00");
    // Without a range: the blocks charged so far.
    let (_, page) = app.get("/v1/datasets/ev/blocks?limit=2").await;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert_eq!(page["next"], "2026-11-03");
    // Blocks are not datasets of their own in the list.
    let (_, list) = app.get("/v1/datasets").await;
    assert!(list["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|d| !d["id"].as_str().unwrap().contains('@')));
}

/// A join over two datasets, one of them exhausted: refused on both, nothing written; a join
/// over two that fit is recorded on both.
#[tokio::test]
async fn a_join_charge_is_admitted_by_both_datasets_or_by_neither() {
    let app = spawn_app().await;
    app.dataset("orders", 1.0).await;
    app.dataset("customers", 0.5).await;
    app.dataset("stores", 1.0).await;
    let (s, _) = app
        .post("/v1/datasets/customers/charges", json!({"event": gdp(0.5)}))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, b) = charge(
        &app,
        json!({"datasets": [{"id": "orders"}, {"id": "customers"}], "event": gdp(0.1)}),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert_eq!(b["dataset_id"], "customers");
    let (_, o) = app.get("/v1/datasets/orders").await;
    assert_eq!(
        (o["charges"].as_i64(), o["version"].as_i64()),
        (Some(0), Some(0))
    );
    // The refusal is audited on the dataset that refused.
    let (_, audit) = app.get("/v1/audit?dataset_id=customers").await;
    assert!(audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["action"] == "unit.rejected"));

    // The order in the request does not matter: ledgers are taken in id order.
    let (s, b) = charge(
        &app,
        json!({"datasets": [{"id": "stores"}, {"id": "orders"}], "event": gdp(0.6)}),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(b["charge"]["ledgers"][0]["ledger_id"], "orders");
    for id in ["orders", "stores"] {
        let (_, d) = app.get(&format!("/v1/datasets/{id}")).await;
        assert_eq!(d["charges"], 1, "{id}");
        assert!((d["mu_spent"].as_f64().unwrap() - 0.6).abs() < 1e-12);
        // The exact composition follows the ledger as for a single charge.
        assert!(
            (d["exact_composition_mu"].as_f64().unwrap() - 0.6).abs() < 1e-9,
            "{d}"
        );
    }
}

/// A retried multi-ledger charge (same Idempotency-Key, same body) replays the first outcome and
/// charges nothing; the key with another body is refused.
#[tokio::test]
async fn a_retried_multi_ledger_charge_charges_once() {
    let app = spawn_app().await;
    daily(&app, "ev", 1.0, json!({})).await;
    app.dataset("users", 1.0).await;
    let body = json!({"datasets": [{"id": "ev", "time_range": days(2, 4)}, {"id": "users"}],
        "event": gdp(0.3), "label": "join"});
    let (s1, b1) = charge(&app, body.clone(), Some("k-1")).await;
    assert_eq!(s1, StatusCode::CREATED, "{b1}");
    let (s2, b2) = charge(&app, body.clone(), Some("k-1")).await;
    assert_eq!(s2, StatusCode::OK, "{b2}");
    assert_eq!(b1, b2);
    for id in ["ev@2026-11-02", "ev@2026-11-03", "users"] {
        let (_, d) = app.get(&format!("/v1/datasets/{id}")).await;
        assert_eq!(d["charges"], 1, "{id}: {d}");
    }
    let mut other = body;
    other["event"] = gdp(0.2);
    let (s, b) = charge(&app, other, Some("k-1")).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
}

/// Blocks past the retention horizon are read-only; recent and future blocks are not.
#[tokio::test]
async fn blocks_past_the_retention_horizon_are_read_only() {
    let app = spawn_app().await;
    daily(&app, "logs", 1.0, json!({"retention_blocks": 30})).await;
    let (s, b) = charge(
        &app,
        json!({"datasets": [{"id": "logs", "blocks": ["2020-01-01"]}], "event": gdp(0.1)}),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert_eq!(b["error"], "read_only");
    assert!(b["message"].as_str().unwrap().contains("2020-01-01"), "{b}");
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let (s, b) = charge(
        &app,
        json!({"datasets": [{"id": "logs", "blocks": [today]}], "event": gdp(0.1)}),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (_, r) = app.get("/v1/datasets/logs/blocks?blocks=2020-01-01").await;
    assert_eq!(r["items"][0]["read_only"], true, "{r}");
}

/// Named partitions (e.g. user-id ranges), and a principal's grant on the dataset covering its
/// blocks.
#[tokio::test]
async fn named_partitions_are_charged_by_name_under_the_dataset_grant() {
    let app = spawn_app().await;
    let (s, b) = app
        .post(
            "/v1/datasets",
            json!({"id": "users", "budget": {"mu": 1.0}, "partitioning": {"type": "named"}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let bob = app.bearer("bob", "none").await;
    let (s, _) = app
        .call(
            "PUT",
            "/v1/datasets/users/grants/bob",
            Some(&json!({"role": "analyst"})),
            &[],
        )
        .await;
    assert!(s.is_success(), "{s}");
    let body = json!({"datasets": [{"id": "users", "blocks": ["ids-0-999", "ids-1000-1999"]}],
        "event": gdp(0.5)});
    // An analyst cannot declare a partition, nor charge one nobody declared.
    let (s, e) = app
        .call(
            "PUT",
            "/v1/datasets/users/blocks/ids-0-999",
            None,
            &[("authorization", &bob)],
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{e}");
    let (s, e) = app
        .call(
            "POST",
            "/v1/charges",
            Some(&body),
            &[("authorization", &bob)],
        )
        .await;
    assert_eq!(
        (s, e["details"]["path"].as_str()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("$.datasets[0].blocks")
        ),
        "{e}"
    );
    for name in ["ids-0-999", "ids-1000-1999"] {
        let (s, v) = app
            .call(
                "PUT",
                &format!("/v1/datasets/users/blocks/{name}"),
                Some(&json!({"description": format!("user ids {name}")})),
                &[],
            )
            .await;
        assert_eq!(
            (s, v["exists"].as_bool()),
            (StatusCode::CREATED, Some(true)),
            "{v}"
        );
    }
    let (s, b) = app
        .call(
            "POST",
            "/v1/charges",
            Some(&body),
            &[("authorization", &bob)],
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (s, d) = app
        .call(
            "GET",
            "/v1/datasets/users@ids-0-999",
            None,
            &[("authorization", &bob)],
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert_eq!(d["charges"], 1);
    // Without a grant, the dataset and its blocks do not exist for the caller.
    let eve = app.bearer("eve", "none").await;
    let (s, _) = app
        .call(
            "POST",
            "/v1/charges",
            Some(&body),
            &[("authorization", &eve)],
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = app
        .call(
            "GET",
            "/v1/datasets/users@ids-0-999",
            None,
            &[("authorization", &eve)],
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

/// Bad requests get a 4xx naming the field, and write nothing.
#[tokio::test]
async fn bad_partitioned_requests_name_the_field() {
    let app = spawn_app().await;
    daily(&app, "ev", 1.0, json!({})).await;
    app.dataset("plain", 1.0).await;
    let cases = [
        (
            json!({"datasets": [{"id": "ev"}], "event": gdp(0.1)}),
            "$.datasets[0]",
        ),
        (
            json!({"datasets": [{"id": "plain", "blocks": ["a"]}], "event": gdp(0.1)}),
            "$.datasets[0].blocks",
        ),
        (
            json!({"datasets": [{"id": "ev", "blocks": ["2026-11-1"]}], "event": gdp(0.1)}),
            "$.datasets[0].blocks[0]",
        ),
        (
            json!({"datasets": [{"id": "ev", "blocks": ["2026-11-01"], "time_range": days(1, 2)}],
                "event": gdp(0.1)}),
            "$.datasets[0].time_range",
        ),
        (
            json!({"datasets": [{"id": "ev", "time_range": days(5, 2)}], "event": gdp(0.1)}),
            "$.datasets[0].time_range.to",
        ),
        (
            json!({"datasets": [{"id": "ev", "time_range":
                {"from": "2020-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}}], "event": gdp(0.1)}),
            "$.datasets[0].time_range",
        ),
        (
            json!({"datasets": [{"id": "plain"}, {"id": "plain"}], "event": gdp(0.1)}),
            "$.datasets[1].id",
        ),
        (json!({"datasets": [], "event": gdp(0.1)}), "$.datasets"),
    ];
    for (body, field) in cases {
        let (s, b) = charge(&app, body.clone(), None).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {b}");
        assert!(
            b["message"].as_str().unwrap().starts_with(field),
            "{body}: want {field}, got {b}"
        );
    }
    // A single-ledger charge on a partitioned dataset or a block says where to go.
    for id in ["ev", "ev@2026-11-01"] {
        let (s, b) = app
            .post(
                &format!("/v1/datasets/{id}/charges"),
                json!({"event": gdp(0.1)}),
            )
            .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{id}: {b}");
        assert!(
            b["message"].as_str().unwrap().contains("/v1/charges"),
            "{b}"
        );
    }
    // A partitioning that cannot be honoured is refused at creation.
    for (p, field) in [
        (
            json!({"type": "time", "width": "month"}),
            "$.partitioning.width",
        ),
        (
            json!({"type": "time", "width": "day", "time_zone": "Mars/Olympus"}),
            "$.partitioning.time_zone",
        ),
        (json!({"type": "range"}), "$.partitioning.type"),
    ] {
        let (s, b) = app
            .post(
                "/v1/datasets",
                json!({"id": "bad", "budget": {"mu": 1.0}, "partitioning": p}),
            )
            .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
        assert!(b["message"].as_str().unwrap().starts_with(field), "{b}");
    }
    // Replace-one could move a record between blocks: refused for a partitioned dataset.
    let (s, b) = app
        .post(
            "/v1/datasets",
            json!({"id": "bad", "budget": {"mu": 1.0}, "neighboring_relation": "replace_one",
                "partitioning": {"type": "named"}}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .starts_with("$.neighboring_relation"),
        "{b}"
    );
    // Single-ledger paths that would spend or shape a partitioned dataset's budget are refused:
    // a preview, a run, a quota on a block (quotas are the dataset's, in every block), a grant
    // on a block (grants are the dataset's).
    for (method, uri, body) in [
        (
            "POST",
            "/v1/datasets/ev/charges/preview",
            json!({"event": gdp(0.1)}),
        ),
        (
            "POST",
            "/v1/datasets/ev/runs",
            json!({"event": gdp(0.1), "steps": 10}),
        ),
        (
            "PUT",
            "/v1/datasets/ev@2026-11-01/quotas/bob",
            json!({"mu": 0.5, "delta": 0.0}),
        ),
        (
            "PUT",
            "/v1/datasets/ev@2026-11-01/grants/bob",
            json!({"role": "analyst"}),
        ),
    ] {
        let (s, b) = app.call(method, uri, Some(&body), &[]).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{uri}: {b}");
        assert!(
            b["message"].as_str().unwrap().starts_with("path.id"),
            "{uri}: {b}"
        );
    }
    let (_, r) = app.get("/v1/datasets/ev/blocks").await;
    assert_eq!(r["items"].as_array().unwrap().len(), 0, "{r}");
}

/// Calibration over a range is decided by the tightest block: with 0.8 spent on one block of
/// three (μ budget 1), the largest Gaussian μ that fits all of them is √(1 − 0.8²) = 0.6, and a
/// charge of the calibrated event over the range is admitted.
#[tokio::test]
async fn calibration_over_a_range_is_decided_by_the_tightest_block() {
    let app = spawn_app().await;
    daily(&app, "ev", 1.0, json!({})).await;
    let (s, _) = charge(
        &app,
        json!({"datasets": [{"id": "ev", "blocks": ["2026-11-03"]}], "event": gdp(0.8)}),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, c) = app
        .post(
            "/v1/datasets/ev/calibrate",
            json!({"event": {"type": "gaussian", "noise_multiplier": 1.0},
                "free_parameter": "noise_multiplier", "time_range": days(2, 5)}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{c}");
    // A Gaussian of noise multiplier σ is (1/σ)-GDP: σ ≥ 1/0.6, within the search's precision.
    let sigma = c["value"].as_f64().unwrap();
    assert!(sigma >= 1.0 / 0.6 && sigma < 1.0 / 0.6 * 1.001, "{c}");
    assert!((c["mu_target"].as_f64().unwrap() - 0.6).abs() < 1e-9, "{c}");
    let (s, b) = charge(
        &app,
        json!({"datasets": [{"id": "ev", "time_range": days(2, 5)}], "event": c["event"]}),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    // Without a range, a partitioned dataset cannot be calibrated against.
    let (s, b) = app
        .post(
            "/v1/datasets/ev/calibrate",
            json!({"event": {"type": "gaussian", "noise_multiplier": 1.0},
                "free_parameter": "noise_multiplier"}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
}

/// An idempotency key already used on one of the ledgers (not the first) for another request is
/// refused with 422, not retried into a 503. (Keys are scoped to their principal, operation and
/// target: the same key on a one-ledger charge is another request's, and admitted.)
#[tokio::test]
async fn a_key_used_by_another_request_on_any_ledger_is_refused() {
    let app = spawn_app().await;
    app.dataset("a1", 1.0).await;
    app.dataset("b1", 1.0).await;
    app.dataset("c1", 1.0).await;
    let (s, _) = app
        .call(
            "POST",
            "/v1/datasets/b1/charges",
            Some(&json!({"event": gdp(0.1)})),
            &[("idempotency-key", "shared-key")],
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, b) = charge(
        &app,
        json!({"datasets": [{"id": "b1"}, {"id": "c1"}], "event": gdp(0.1)}),
        Some("shared-key"),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    // The same key for another multi-ledger charge whose first ledger (a1) never saw it.
    let (s, b) = charge(
        &app,
        json!({"datasets": [{"id": "a1"}, {"id": "b1"}], "event": gdp(0.2)}),
        Some("shared-key"),
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    let (_, a) = app.get("/v1/datasets/a1").await;
    assert_eq!(a["charges"], 0);
}
