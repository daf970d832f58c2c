//! The exact composition off the write path: built on read (and in the background) from the
//! stored snapshot plus the entries since, counting each committed unit once, and the same after
//! a restart. The oracle is the stateless composition of the same committed events.

use super::api::{temp_dir, TestApp};
use axum::http::StatusCode;
use privacy_ledger::app::open_store;
use privacy_ledger::http::Limits;
use serde_json::{json, Value};

/// Relative difference allowed between the ledger's exact composition and the stateless
/// composition of the same events. Both are pessimistic connect-the-dots compositions at the
/// same grid step; the ledger composes repeated events by squaring (k-fold self-composition)
/// where the stateless call convolves them one by one, so FFT round-off and the truncated tails
/// differ at the 1e-9 level (measured: below 1e-10 on this ledger).
const SAME_EVENTS: f64 = 1e-6;

fn laplace(nm: f64) -> Value {
    json!({"type": "laplace", "noise_multiplier": nm})
}

fn chunk() -> Value {
    json!({"type": "self_composed", "count": 10, "event": {"type": "poisson_sampled",
           "sampling_rate": 0.01, "event": {"type": "gaussian", "noise_multiplier": 1.0}}})
}

async fn report(app: &TestApp) -> Value {
    let (s, r) = app.get("/v1/datasets/m/report?deltas=1e-6").await;
    assert_eq!(s, StatusCode::OK, "{r}");
    r["exact_composition"].clone()
}

fn close(a: f64, b: f64) -> bool {
    (a / b - 1.0).abs() < SAME_EVENTS
}

#[tokio::test]
async fn the_exact_composition_counts_committed_units_and_survives_a_restart() {
    let dir = temp_dir("compositions");
    let url = format!("sqlite://{}", dir.join("ledger.db").display());
    let app = TestApp::over_store(open_store(&url).await.unwrap(), Limits::default(), dir).await;
    let (s, b) = app
        .post("/v1/datasets", json!({"id": "m", "budget": {"mu": 50.0}}))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let mut committed = Vec::new();
    for i in 0..30 {
        let e = match i % 3 {
            0 => laplace(10.0),
            1 => chunk(),
            _ => json!({"type": "gaussian", "noise_multiplier": 5.0}),
        };
        let (s, b) = app
            .post("/v1/datasets/m/charges", json!({"event": e}))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
        committed.push(e);
    }
    // Two reservations: one committed (it joins), one released (it never does).
    let mut ids = Vec::new();
    for nm in [8.0, 9.0] {
        let (s, b) = app
            .post(
                "/v1/datasets/m/charges",
                json!({"event": laplace(nm), "reserve": true}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
        ids.push(b["charge"]["id"].as_str().unwrap().to_owned());
    }
    let before = report(&app).await;
    let (s, _) = app
        .call(
            "POST",
            &format!("/v1/datasets/m/charges/{}/commit", ids[0]),
            None,
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    committed.push(laplace(8.0));
    let (s, r) = app
        .post(
            &format!("/v1/datasets/m/charges/{}/release", ids[1]),
            json!({"outputs_released": false}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");

    let (_, d) = app.get("/v1/datasets/m").await;
    let version = d["version"].as_i64().unwrap();
    assert_eq!(version, 34);
    let exact = report(&app).await;
    assert_eq!(exact["version"], version);
    // Before the commit the composition held the 30 units only (the reservations did not count).
    assert_eq!(before["version"], 32);
    let (s, oracle) = app
        .post(
            "/v1/accountant/compose",
            json!({"events": committed, "deltas": [1e-6]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{oracle}");
    let eps = |r: &Value| r["epsilon"][0]["epsilon"].as_f64().unwrap();
    let mu = |r: &Value| r["mu"]["upper"].as_f64().unwrap();
    assert!(
        close(eps(&exact["report"]), eps(&oracle)),
        "{} vs {}",
        eps(&exact["report"]),
        eps(&oracle)
    );
    assert!(
        close(mu(&exact["report"]), mu(&oracle)),
        "{} vs {}",
        mu(&exact["report"]),
        mu(&oracle)
    );
    assert!(eps(&before["report"]) < eps(&exact["report"]));
    assert_eq!(exact["report"]["invocations"], oracle["invocations"]);
    // The dataset's own figure is the same composition's μ at the budget's δ, at its version.
    assert_eq!(d["exact_composition_version"], version);
    assert!(d["exact_composition_mu"].as_f64().unwrap() > 0.0);

    // A snapshot is written in the background (never by a charge); a second process over the
    // same file starts from it and composes the same figures.
    let mut stored = 0;
    for _ in 0..100 {
        let (_, l) = app.get("/v1/datasets").await;
        stored = l["items"][0]["exact_composition_version"].as_i64().unwrap();
        if stored > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(stored > 0, "no snapshot was written");
    let other = TestApp::over_store(
        open_store(&url).await.unwrap(),
        Limits::default(),
        temp_dir("compositions-other"),
    )
    .await;
    let again = report(&other).await;
    assert_eq!(again["version"], version);
    assert!(close(eps(&again["report"]), eps(&oracle)));
    assert!(close(mu(&again["report"]), mu(&oracle)));
}

/// The value of a counter in the service's metrics (0 when absent).
async fn counter(app: &TestApp, name: &str) -> f64 {
    let (_, m) = app.get("/metrics").await;
    m.as_str()
        .unwrap()
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn certificates_are_kept_across_restarts() {
    let dir = temp_dir("certificates");
    let url = format!("sqlite://{}", dir.join("ledger.db").display());
    let app = TestApp::over_store(open_store(&url).await.unwrap(), Limits::default(), dir).await;
    app.dataset("a", 10.0).await;
    app.dataset("b", 10.0).await;
    // A unit no other test charges (its certificates are certified here first).
    let event = json!({"type": "self_composed", "count": 7, "event": {"type": "poisson_sampled",
        "sampling_rate": 0.0123457, "event": {"type": "gaussian", "noise_multiplier": 1.31}}});
    let (s, first) = app
        .post("/v1/datasets/a/charges", json!({"event": event}))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{first}");
    // Kept in the background: wait for the row.
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let mut rows = 0i64;
    for _ in 0..50 {
        rows = sqlx::query_scalar("SELECT count(*) FROM certificates")
            .fetch_one(&pool)
            .await
            .unwrap();
        if rows > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(rows, 1);
    // What a restart forgets; the next charge of the unit reads it back instead of certifying.
    privacy_ledger::ledger::forget_certificates();
    let recalled = counter(&app, "privacy_ledger_certificates_recalled_total").await;
    let (s, second) = app
        .post("/v1/datasets/b/charges", json!({"event": event}))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{second}");
    assert_eq!(second["charge"]["unit"], first["charge"]["unit"]);
    assert!(counter(&app, "privacy_ledger_certificates_recalled_total").await >= recalled + 1.0);

    // A row edited outside the service is found out: the recalled unit is certified again in
    // the background, the memo and the row get this build's figures, the mismatch is counted.
    let kept: String = sqlx::query_scalar("SELECT value FROM certificates")
        .fetch_one(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE certificates SET value = ?")
        .bind(r#"[{"mu":1e-6,"delta":0.0}]"#)
        .execute(&pool)
        .await
        .unwrap();
    privacy_ledger::ledger::forget_certificates();
    let mismatches = counter(&app, "privacy_ledger_certificates_mismatch_total").await;
    app.dataset("c", 10.0).await;
    let (s, _) = app
        .post("/v1/datasets/c/charges", json!({"event": event}))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let mut restored = String::new();
    for _ in 0..100 {
        restored = sqlx::query_scalar("SELECT value FROM certificates")
            .fetch_one(&pool)
            .await
            .unwrap();
        if restored == kept {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(restored, kept);
    assert!(counter(&app, "privacy_ledger_certificates_mismatch_total").await >= mismatches + 1.0);
    let (s, third) = app
        .post("/v1/datasets/c/charges", json!({"event": event}))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{third}");
    assert_eq!(third["charge"]["unit"], first["charge"]["unit"]);
}
