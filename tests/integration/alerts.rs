//! Budget alerts to a webhook: a receiver started here gets the 50, 75 and 90 % crossings once
//! each, within a second of the charge that crossed, signed; a failing receiver is retried with
//! backoff; deliveries are in the audit log; a fall back below a threshold re-arms it.

use crate::api::{temp_dir, TestApp};
use axum::http::{HeaderMap, StatusCode};
use hmac::{Hmac, Mac};
use privacy_ledger::ledger::alerts::AlertConfig;
use privacy_ledger::ledger::Ledgers;
use serde_json::{json, Value};
use sha2::Sha256;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &[u8] = b"a webhook secret of 32 bytes...!";

/// What the receiver got: (arrival, headers, body).
type Got = Arc<Mutex<Vec<(Instant, HeaderMap, Vec<u8>)>>>;

/// A webhook receiver on a free port: records every POST; answers 500 to the first `fail` ones.
async fn receiver(fail: usize) -> (String, Got) {
    let got: Got = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::new(Mutex::new(0usize));
    let g = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let (g, seen) = (g.clone(), seen.clone());
            async move {
                let n = {
                    let mut s = seen.lock().unwrap();
                    *s += 1;
                    *s
                };
                if n <= fail {
                    return StatusCode::INTERNAL_SERVER_ERROR;
                }
                g.lock()
                    .unwrap()
                    .push((Instant::now(), headers, body.to_vec()));
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/hook"), got)
}

async fn app_with_alerts(url: &str) -> TestApp {
    let dir = temp_dir("alerts");
    let db = format!("sqlite://{}", dir.join("ledger.db").display());
    let store = privacy_ledger::app::open_store(&db).await.unwrap();
    let ledgers = Ledgers::new(store).with_alerts(AlertConfig::new(url, SECRET).unwrap());
    TestApp::over_ledgers(ledgers, Default::default(), dir).await
}

/// The bodies received so far, each checked against its signature (HMAC-SHA256 over
/// `timestamp.body`, computed here with the hmac crate).
fn received(got: &Got) -> Vec<(Instant, Value)> {
    got.lock()
        .unwrap()
        .iter()
        .map(|(at, h, body)| {
            let t = h["x-privacy-ledger-timestamp"].to_str().unwrap();
            let mut mac = Hmac::<Sha256>::new_from_slice(SECRET).unwrap();
            mac.update(format!("{t}.").as_bytes());
            mac.update(body);
            let want: String = mac
                .finalize()
                .into_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(
                h["x-privacy-ledger-signature"].to_str().unwrap(),
                format!("sha256={want}")
            );
            (*at, serde_json::from_slice(body).unwrap())
        })
        .collect()
}

/// Waits (at most `limit`) until the receiver holds `n` alerts.
async fn wait_for(got: &Got, n: usize, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if got.lock().unwrap().len() >= n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    got.lock().unwrap().len() >= n
}

fn gdp(mu: f64) -> Value {
    json!({"event": {"type": "gdp", "mu": mu}})
}

/// μ_B = 1 spent in units of μ² = 0.25, 0.25, 0.25, 0.15, 0.05: the used share passes 0.5, 0.75
/// and 0.9 once each — each alert arrives within a second of its charge, once, and nothing more
/// after the last. Every delivery is an audit record. The 100 % alert comes with exhaustion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_gets_each_threshold_once_within_a_second() {
    let (url, got) = receiver(0).await;
    let app = app_with_alerts(&url).await;
    app.dataset("d", 1.0).await;
    let (_, rule) = app.get("/v1/datasets/d/alerts").await;
    assert_eq!(rule["thresholds"], json!([0.5, 0.75, 0.9]), "{rule}");
    assert_eq!(
        (&rule["default"], &rule["webhook_configured"]),
        (&json!(true), &json!(true))
    );
    let mut expected = 0;
    for (mu_sq, crosses) in [
        (0.25, None),
        (0.25, Some(0.5)),
        (0.25, Some(0.75)),
        (0.15, Some(0.9)),
        (0.05, None),
    ] {
        let (s, b) = app
            .post("/v1/datasets/d/charges", gdp(f64::sqrt(mu_sq)))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
        let charged = Instant::now();
        if let Some(t) = crosses {
            expected += 1;
            assert!(
                wait_for(&got, expected, Duration::from_secs(1)).await,
                "no alert for {t}"
            );
            let all = received(&got);
            let (at, body) = all.last().unwrap();
            assert!(at.duration_since(charged) < Duration::from_secs(1));
            assert_eq!(
                (body["threshold"].as_f64(), body["dataset"].as_str()),
                (Some(t), Some("d")),
                "{body}"
            );
            assert!(body["used_fraction"].as_f64().unwrap() >= t, "{body}");
        } else {
            // Nothing new (a second delivery of an earlier threshold would show here).
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(got.lock().unwrap().len(), expected);
        }
    }
    // Exactly once each; the rule shows them crossed.
    let thresholds: Vec<f64> = received(&got)
        .iter()
        .map(|(_, b)| b["threshold"].as_f64().unwrap())
        .collect();
    assert_eq!(thresholds, vec![0.5, 0.75, 0.9]);
    let (_, rule) = app.get("/v1/datasets/d/alerts").await;
    assert_eq!(rule["crossed"], json!([0.5, 0.75, 0.9]), "{rule}");
    // The deliveries are audited on the dataset's chain.
    let (_, page) = app.get("/v1/audit?dataset_id=d").await;
    let delivered = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "alert.delivered")
        .count();
    assert_eq!(delivered, 3, "{page}");
    // Spending the rest (0.05 of μ²) exhausts the budget: the 100 % alert.
    let (s, b) = app
        .post("/v1/datasets/d/charges", gdp(0.05f64.sqrt()))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert!(wait_for(&got, 4, Duration::from_secs(1)).await);
    let last = received(&got).pop().unwrap().1;
    assert_eq!(
        (last["threshold"].as_f64(), &last["exhausted"]),
        (Some(1.0), &json!(true)),
        "{last}"
    );
}

/// A receiver that fails twice gets the alert on the third attempt (after 0.25 and 0.5 s of
/// backoff); the audit record says 3 attempts. Thresholds of the dataset's own are used, and a
/// release that brings the use back below one re-arms it: crossing again alerts again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_deliveries_are_retried_and_a_fall_back_rearms() {
    let (url, got) = receiver(2).await;
    let app = app_with_alerts(&url).await;
    app.dataset("d", 1.0).await;
    let (s, r) = app
        .call(
            "PUT",
            "/v1/datasets/d/alerts",
            Some(&json!({"thresholds": [0.6]})),
            &[],
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(
        (&r["thresholds"], &r["default"]),
        (&json!([0.6]), &json!(false))
    );
    // A reservation of μ² = 0.64 crosses 0.6.
    let (s, b) = app
        .post(
            "/v1/datasets/d/charges",
            json!({"event": {"type": "gdp", "mu": 0.8}, "reserve": true}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let charge = b["charge"]["id"].as_str().unwrap().to_owned();
    assert!(
        wait_for(&got, 1, Duration::from_secs(3)).await,
        "not delivered after retries"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (_, page) = app.get("/v1/audit?dataset_id=d").await;
    let rec = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["action"] == "alert.delivered")
        .cloned()
        .unwrap_or_else(|| panic!("{page}"));
    let after: Value = match &rec["after"] {
        Value::String(s) => serde_json::from_str(s).unwrap(),
        v => v.clone(),
    };
    assert_eq!(after["attempts"], 3, "{rec}");
    // Released: back to 0, re-armed; reserved again: alerted again.
    let (s, b) = app
        .post(
            &format!("/v1/datasets/d/charges/{charge}/release"),
            json!({"outputs_released": false}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, rule) = app.get("/v1/datasets/d/alerts").await;
    assert_eq!(rule["crossed"], json!([]), "{rule}");
    let (s, _) = app
        .post(
            "/v1/datasets/d/charges",
            json!({"event": {"type": "gdp", "mu": 0.8}, "reserve": true}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    assert!(
        wait_for(&got, 2, Duration::from_secs(1)).await,
        "not alerted again"
    );
    // Bad rules name the field; an analyst may not change them.
    for (body, path) in [
        (json!({"thresholds": [1.5]}), "$.thresholds[0]"),
        (json!({"thresholds": [0.5, 0.5]}), "$.thresholds"),
        (json!({"levels": [0.5]}), "$.thresholds"),
    ] {
        let (s, e) = app
            .call("PUT", "/v1/datasets/d/alerts", Some(&body), &[])
            .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
        assert_eq!(e["details"]["path"], path, "{e}");
    }
    let analyst = app.bearer("bob", "analyst").await;
    let (s, _) = app
        .call(
            "PUT",
            "/v1/datasets/d/alerts",
            Some(&json!({"thresholds": [0.1]})),
            &[("authorization", &analyst)],
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
}
